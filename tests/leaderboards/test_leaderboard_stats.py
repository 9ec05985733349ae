"""The statistics in the leaderboards: declared comparisons in specs, verdicts, provenance marks, the
random-sources footnote, per-example results, ``tokxfer compare`` and ``check-regression --mode statistical``.

All records are synthetic (tests/leaderboards/test_leaderboards.py's); nothing is trained.
"""

from __future__ import annotations

import csv
import dataclasses
import io

import numpy as np
import pytest
from scipy import stats as sps

from harness.cli import main
from harness.examples import ExampleScores, ExamplesError
from harness.run.records import TrialRecord
from leaderboards.aggregate import aggregate, random_sources
from leaderboards.regression import check_regression, update_golden
from leaderboards.render import findings_lines, render_comparisons_csv, render_html, render_latex, render_markdown
from leaderboards.spec import SpecError, load_spec, parse_spec
from leaderboards.stats import minimum_detectable_effect
from tests.leaderboards.test_leaderboards import LOSSES, SPEC, TASK, all_records, make_record, write_records

NEAR_LOSS = f"{TASK}/near/loss"


def _spec(**extra):
    return parse_spec({**SPEC, **extra})


# ---------------------------------------------------------------------------------------------
# Declared comparisons in specs
# ---------------------------------------------------------------------------------------------


def test_declared_comparisons_parse():
    s = _spec(comparisons=[{"a": "focus", "b": "overlap"}], against="random", alpha=0.01)
    assert s.comparisons == (("focus", "overlap"),) and s.against == "random" and s.alpha == 0.01 and s.test == "t"
    assert s.declared_pairs(["focus", "overlap", "random"]) == [("focus", "overlap"), ("focus", "random"),
                                                                 ("overlap", "random")]


@pytest.mark.parametrize("extra, match", [
    ({"against": "random", "required_seeds": [1, 2]}, r"at least 3 required seeds.*got 2"),
    ({"against": "random", "required_seeds": []}, r"at least 3 required seeds.*none"),
    ({"against": "random", "test": "permutation", "required_seeds": [1, 2, 3, 4, 5]},
     r"permutation over 5 seeds cannot reach p <= alpha = 0.05 \(its smallest two-sided p is 0.0625\)"),
    ({"comparisons": [{"a": "focus", "b": "focus"}]}, "compares 'focus' with itself"),
    ({"comparisons": [{"a": "focus", "b": "random"}, {"a": "random", "b": "focus"}]}, "declared twice"),
    ({"comparisons": [{"a": "focus"}]}, "missing required key 'b'"),
    ({"comparisons": [{"a": "focus", "b": "random", "c": "x"}]}, "unknown key 'c'"),
    ({"against": "random", "alpha": 0.7}, r"alpha must be a number in \(0, 0.5\)"),
    ({"against": "random", "test": "wilcoxon"}, "test must be one of t, permutation"),
    ({"separation": {"baseline": "random"}}, "'separation'.*was removed.*against: random"),
    ({"rows": ["focus", "random"], "against": "overlap"}, r"row\(s\) 'overlap' that are not in rows \(focus, random\)"),
    ({"rows": ["focus", "random"], "comparisons": [{"a": "focus", "b": "wechsel"}]}, "'wechsel'"),
])
def test_bad_declared_comparisons_are_errors_at_spec_load(extra, match):
    with pytest.raises(SpecError, match=match):
        _spec(**extra)


def test_permutation_test_with_enough_seeds_is_accepted():
    assert _spec(against="random", test="permutation", required_seeds=[1, 2, 3, 4, 5, 6]).test == "permutation"


def test_a_comparison_naming_an_unknown_row_with_rows_all_fails_when_the_table_is_built(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nversion: 1\nexperiments: [quickstart]\nrequired_seeds: [1, 2, 3]\n"
                 "columns: [{task: mlm-at-init, languages: [near], metrics: [loss]}]\nagainst: rnd\n")
    spec = load_spec(p)
    with pytest.raises(SpecError, match=r"s\.yaml: declared comparisons name row\(s\) 'rnd' that the table does not have"):
        aggregate(all_records(), spec)
    # the CLI turns it into one line and exit 2
    runs = write_records(tmp_path / "runs", all_records())
    assert main(["leaderboard", str(p), "--runs-dir", str(runs), "--out", str(tmp_path / "o")]) == 2


# ---------------------------------------------------------------------------------------------
# Verdicts in tables
# ---------------------------------------------------------------------------------------------


def test_verdicts_follow_holm_over_the_whole_table():
    table = aggregate(all_records(), _spec(against="random", comparisons=[{"a": "focus", "b": "overlap"}]))
    st = table.stats
    # 3 pairs (focus-overlap, focus-random, overlap-random) × 8 columns, all testable
    assert len(st.verdicts) == 3 * len(table.columns) and {v.family for v in st.verdicts} == {24}
    v = next(v for v in st.verdicts if (v.a, v.b, v.column) == ("focus", "random", NEAR_LOSS))
    p = sps.ttest_rel(LOSSES[("focus", "near")], LOSSES[("random", "near")]).pvalue
    assert v.difference.p == pytest.approx(p) and v.p_holm >= v.difference.p
    assert v.verdict == "better"  # a lower loss
    # FOCUS vs overlap in near: overlap is better, but not by more than the seeds' noise after Holm
    fo = next(v for v in st.verdicts if (v.a, v.b, v.column) == ("focus", "overlap", NEAR_LOSS))
    assert fo.difference.diff > 0 and fo.verdict == "no detectable difference" and fo.p_holm > 0.05
    assert fo.mde == pytest.approx(minimum_detectable_effect(fo.difference.sd, 3, 0.05 / 24))
    assert fo.mde > abs(fo.difference.diff)


def test_comparisons_are_rendered_in_every_format():
    table = aggregate(all_records(), _spec(against="random"))
    md = render_markdown(table)
    assert "#### Declared comparisons" in md and "| FOCUS vs random | loss ↓ near |" in md
    assert "Holm-adjusted over the table's 16 testable comparisons" in md and "MDE" in md
    rows = list(csv.DictReader(io.StringIO(render_comparisons_csv(table))))
    assert len(rows) == 16 and {r["b"] for r in rows} == {"random"}
    r = next(r for r in rows if r["a"] == "focus" and r["language"] == "near" and r["metric"] == "loss")
    assert float(r["p"]) == pytest.approx(sps.ttest_rel(LOSSES[("focus", "near")], LOSSES[("random", "near")]).pvalue)
    assert r["verdict"] == "better" and r["family"] == "16" and r["test"] == "paired t"
    tex = render_latex(table)
    assert tex.count(r"\begin{table}") == 2 and tex.count("{") == tex.count("}") and "tab:qs-comparisons" in tex
    page = render_html(table)
    assert 'class="comparisons"' in page and 'class="ranks"' in page and "Declared comparisons" in page


def test_findings_lines_state_each_declared_comparison():
    table = aggregate(all_records(), _spec(comparisons=[{"a": "focus", "b": "random"}]))
    lines = findings_lines(table)
    assert len(lines) == 8
    assert findings_lines(table, with_spec=False) == [line.removeprefix("qs: ") for line in lines]
    near = next(line for line in lines if "loss ↓ near" in line)
    assert near.startswith("qs: FOCUS vs random, loss ↓ near: Δ -2.03 [") and near.endswith("→ FOCUS better")
    overlap = findings_lines(aggregate(all_records(), _spec(comparisons=[{"a": "focus", "b": "overlap"}])))
    assert any("no detectable difference (MDE" in line for line in overlap)


def test_a_table_without_declarations_says_so_and_gives_no_verdict():
    table = aggregate(all_records(), _spec())
    assert table.stats.verdicts == () and findings_lines(table) == []
    assert "No comparisons are declared" in render_markdown(table)


# ---------------------------------------------------------------------------------------------
# Provenance and random sources
# ---------------------------------------------------------------------------------------------


def _with(records, method, seed, **changes):
    for r in records:
        if r["config"]["method"]["id"] == method and r["seed"] == seed:
            for key, value in changes.items():
                r[key] = value
    return records


def test_dirty_tree_and_other_world_builds_are_marked_and_counted():
    recs = all_records()
    for r in recs:
        r["revisions"] = {"world": {"seed": 0, "size": "small", "fingerprint": "aaa"}}
    _with(recs, "focus", 2, git={"sha": "x", "dirty": True})
    _with(recs, "random", 3, revisions={"world": {"seed": 0, "size": "small", "fingerprint": "bbb"}})
    table = aggregate(recs, _spec())
    cells = {r.method: r.cells[NEAR_LOSS] for r in table.rows}
    assert "dirty" in cells["focus"].flags and cells["focus"].dirty == 1 and "world" not in cells["focus"].flags
    assert "world" in cells["random"].flags and cells["random"].other_world == 1
    assert not {"dirty", "world"} & cells["overlap"].flags
    assert table.provenance.world == "aaa" and table.provenance.other_world == 2  # random seed 3, near and script
    md = render_markdown(table)
    assert "◊" in md and "≠" in md
    assert "2 of 18 records were written from a git tree with uncommitted changes (◊)" in md
    assert "2 of 18 records lack the table's world build aaa" in md


def test_world_records_without_a_fingerprint_are_all_marked():
    recs = all_records()
    for r in recs:
        r["revisions"] = {"world": {"seed": 0, "size": "small"}}  # records from before world fingerprints
    table = aggregate(recs, _spec())
    assert table.provenance.world is None and table.provenance.other_world == 18
    assert all("world" in c.flags for row in table.rows for c in row.cells.values() if c.n)
    assert "no record carries a world fingerprint" in render_markdown(table)


def test_records_without_world_revisions_get_no_world_marks_and_clean_ones_are_said_clean():
    table = aggregate(all_records(), _spec())
    assert table.provenance.other_world == 0 and "world" not in table.flags_used()
    assert "all 18 records were written from clean git trees" in render_markdown(table)


def test_random_sources_footnote_reads_the_records():
    recs = all_records()
    for r in recs:
        r["schema_version"] = 3  # seeds as written (older schemas are migrated to name every source)
        r["seeds"] = {"init": 100 + r["seed"]}
        r["revisions"] = {"source_model": "sources/abc"}
    text = random_sources(recs)
    assert "initialization" in text and "the source model was pretrained once" in text
    # a source per seed (another checkpoint per seed) is covered
    for r in recs:
        r["revisions"] = {"source_model": f"sources/{r['seed']}"}
    assert "source model (its checkpoint differs across seeds)" in random_sources(recs)
    # per-component seeds: source held fixed for attribution, init and fine-tuning varying
    for r in recs:
        r["seeds"] = {"source": 0, "init": 100 + r["seed"], "finetune": 200 + r["seed"]}
    text = random_sources(recs)
    assert "initialization, fine-tuning" in text and "held fixed across seeds: source pretraining" in text
    assert "pretrained once" not in text
    for r in recs:
        r["seeds"]["source"] = r["seed"]
    assert "source pretraining, initialization, fine-tuning" in random_sources(recs)
    # rows of two protocols in one table (a source per seed in some rows only): the footnote names those rows
    for r in recs:
        r["seeds"]["source"] = r["seed"] if r["config"]["method"]["id"] == "focus" else 0
    text = random_sources(recs)
    assert "source pretraining (only in 1 of 3 rows: focus; held fixed in the others), initialization" in text, text
    assert "held fixed across seeds" not in text
    # a row of two protocols (one column re-run with a source per seed, beside older held-source cells): the
    # footnote names the cells, not the row, so it never claims source pretraining for the held cells
    for r in recs:
        on = r["config"]["method"]["id"] == "focus" and r["config"]["target"]["language"] == "near"
        r["seeds"]["source"] = r["seed"] if on else 0
    text = random_sources(recs)
    assert "source pretraining (only in 1 of 6 cells: focus [mlm-at-init near]; held fixed in the others)" in text, text
    # a model tokxfer did not pretrain has no source seed: not a random source of the table
    for r in recs:
        r["seeds"] = {"source": None, "init": r["seed"], "stages": r["seed"], "task": r["seed"]}
        r["revisions"] = {"source_model": "xlm-roberta-base"}
    text = random_sources(recs)
    assert "initialization" in text and "held fixed" not in text and "pretrained once" in text
    # one trial seed per cell (the first replication of a grid): nothing is claimed to vary or to be held
    first = [r for r in recs if r["seed"] == recs[0]["seed"]]
    for r in first:
        r["seeds"] = {"source": r["seed"], "init": r["seed"], "task": r["seed"]}
    text = random_sources(first)
    assert text.startswith("Every cell has one trial seed so far") and "held fixed" not in text


# ---------------------------------------------------------------------------------------------
# Per-example results
# ---------------------------------------------------------------------------------------------


def _with_examples(records, n_examples=40, seed=0):
    """Give every record per-example losses whose ratio reducer reproduces its metric (one fixed example
    order, per-example token counts), carried in memory as the runner hands them to write_record."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 0.5, n_examples)
    tokens = rng.integers(5, 30, n_examples).astype(float)
    out = []
    for r in records:
        scores = {}
        for lang, ms in r["metrics"].items():
            per_token = difficulty + rng.normal(0, 0.3, n_examples)
            per_token += ms["loss"] - (per_token * tokens).sum() / tokens.sum()  # the token-weighted mean is the metric
            scores[lang] = {"loss": ExampleScores("ratio", np.column_stack([per_token * tokens, tokens]))}
        out.append(dataclasses.replace(TrialRecord.from_json(r), example_scores=scores))
    return out


def test_cells_with_per_example_results_use_the_multi_bootstrap():
    table = aggregate(_with_examples(all_records()), _spec(against="random"))
    cell = next(r for r in table.rows if r.method == "focus").cells[NEAR_LOSS]
    assert cell.examples is not None and len(cell.examples[0]) == 3 and cell.examples[0][0].n == 40
    assert "Multi-Bootstrap" in cell.ci.method
    avg = next(r for r in table.rows if r.method == "focus").cells[f"{TASK}/avg/loss"]
    assert avg.examples is not None and len(avg.examples) == 2  # one block per language
    v = next(v for v in table.stats.verdicts if v.a == "focus" and v.column == NEAR_LOSS)
    assert v.difference.test == "Multi-Bootstrap t"
    # accuracy has no per-example results: seeds only
    acc = next(r for r in table.rows if r.method == "focus").cells[f"{TASK}/near/accuracy"]
    assert acc.examples is None and acc.ci.method == "t over seeds"


def test_per_example_results_that_do_not_reproduce_the_metric_are_not_used_and_said_so():
    recs = _with_examples(all_records())
    lang = next(iter(recs[0].metrics))
    ex = recs[0].example_scores[lang]["loss"]
    rows = ex.rows.copy()
    rows[0, 0] += 50.0
    recs[0].example_scores[lang]["loss"] = ExampleScores("ratio", rows)
    table = aggregate(recs, _spec())
    assert any("do not reproduce the metric" in n for n in table.notes)


def test_per_example_results_are_read_from_beside_the_records(tmp_path):
    """What the runner writes (write_record with example_scores) is what a table reads back, by hash."""
    from harness.run.records import write_record
    from leaderboards.aggregate import load_records

    d = tmp_path / "quickstart" / "records"
    for r in _with_examples(all_records()):
        write_record(d, r)
    assert len(list(d.glob("*.examples.npz"))) == len(all_records())
    table = aggregate(load_records(d), _spec(against="random"))
    cell = next(r for r in table.rows if r.method == "focus").cells[NEAR_LOSS]
    assert "Multi-Bootstrap" in cell.ci.method
    npz = sorted(d.glob("*.examples.npz"))[0]
    npz.write_bytes(npz.read_bytes()[:-3])  # a changed file is refused, naming it
    with pytest.raises(ExamplesError, match=npz.name):
        aggregate(load_records(d), _spec(against="random"))


# ---------------------------------------------------------------------------------------------
# tokxfer compare and check-regression --mode statistical
# ---------------------------------------------------------------------------------------------


def test_compare_cli_prints_ci_holm_p_and_probability_of_improvement(tmp_path, capsys):
    runs = write_records(tmp_path, all_records())
    assert main(["compare", str(runs), "--method", "focus", "--against", "random", "overlap"]) == 0
    out = capsys.readouterr().out
    assert "| focus vs random |" in out and "p (Holm)" in out and "P(A > B)" in out and "focus better" in out
    assert main(["compare", str(runs), "--method", "focus", "--against", "nope"]) == 2
    assert "--against: method(s) 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # refused while parsing the flags
        main(["compare", str(runs), "--method", "focus", "--against", "random", "--alpha", "2"])
    assert e.value.code == 2 and "--alpha" in capsys.readouterr().err


def _shift(records, method, lang, by):
    for r in records:
        if r["config"]["method"]["id"] == method and r["config"]["target"]["language"] == lang:
            r["metrics"][lang]["loss"] += by
    return records


def test_statistical_regression_mode_flags_only_drops_beyond_seed_noise(tmp_path):
    spec = _spec()
    golden = update_golden(all_records(), spec, tmp_path / "g.json", command="x", abs_tol=0.0, rel_tol=0.0)
    # every seed moves a little, differently: beyond a zero tolerance, within the seeds' noise
    jitter = all_records()
    for i, r in enumerate(jitter):
        r["metrics"][r["config"]["target"]["language"]]["loss"] += 0.01 * ((i % 3) - 1) + 0.004
    assert not check_regression(jitter, golden).ok  # exact mode: bit-identity expected
    report = check_regression(jitter, golden, mode="statistical")
    assert report.ok, report.format()
    assert all(c.p is not None and c.mde is not None for c in report.checks if c.column == NEAR_LOSS)
    # FOCUS near loss 1.0 worse on every seed: far beyond its seed std (~0.1)
    worse = _shift(all_records(), "focus", "near", 1.0)
    report = check_regression(worse, golden, mode="statistical")
    failing = {(c.method, c.column) for c in report.failures}
    assert ("focus", NEAR_LOSS) in failing and ("focus", f"{TASK}/script/loss") not in failing
    assert "beyond the golden's seed noise" in report.format() and "mode statistical" in report.format()
    # cells whose test is undefined (no spread) fall back to the tolerance rule and say so
    flat = [make_record("focus", "near", s, 6.0) for s in (1, 2, 3)]
    g2 = update_golden(flat, _spec(columns=[{"task": TASK, "languages": ["near"], "metrics": ["loss"]}]),
                       tmp_path / "g2.json", command="x")
    rep = check_regression(flat, g2, mode="statistical")
    assert rep.ok and all("tolerance rule" in c.detail for c in rep.checks)
    with pytest.raises(ValueError, match="mode must be one of exact, statistical"):
        check_regression(flat, g2, mode="fuzzy")


def test_check_regression_cli_statistical_mode(tmp_path, capsys):
    spec_path = tmp_path / "s.yaml"
    import yaml

    spec_path.write_text(yaml.safe_dump(SPEC))
    runs = write_records(tmp_path / "runs", all_records())
    golden = tmp_path / "g.json"
    assert main(["golden", "update", "--records", str(runs), "--spec", str(spec_path),
                 "--golden", str(golden)]) == 0
    capsys.readouterr()
    assert main(["check-regression", "--records", str(runs), "--golden", str(golden),
                 "--mode", "statistical"]) == 0
    assert "regression check passed" in capsys.readouterr().out
    assert main(["check-regression", "--records", str(runs), "--golden", str(golden),
                 "--mode", "statistical", "--alpha", "0"]) == 2


def _multi_bootstrap_se_as_drawn_per_call(blocks, n_resamples, rng):
    """:func:`leaderboards.intervals.multi_bootstrap_se` as it was before its draws were kept: every call
    draws its resamples (the reference the memo must reproduce bit for bit)."""
    from leaderboards.intervals import _CHUNK, _block, _counts

    blocks = [_block(b) for b in blocks]
    n_s = len(blocks[0])
    stat = np.empty(n_resamples)
    for start in range(0, n_resamples, _CHUNK):
        size = min(_CHUNK, n_resamples - start)
        weights = _counts(rng.integers(0, n_s, size=(size, n_s)), n_s) / n_s
        total = np.zeros(size)
        for block in blocks:
            n_e = block[0].n
            draws = _counts(rng.integers(0, n_e, size=(size, n_e)), n_e)
            total += (weights * np.stack([ex.resampled(draws) for ex in block], axis=1)).sum(axis=1)
        stat[start:start + size] = total / len(blocks)
    return float(stat.std(ddof=1))


def test_multi_bootstrap_draws_are_kept_per_generator_state_and_give_the_same_bits(monkeypatch):
    """A table's comparisons each start a generator with the same seed: their resamples are drawn once,
    every SE equals the one drawn afresh bit for bit, and the generator ends where the draws leave it."""
    from leaderboards import intervals
    from leaderboards.intervals import _Difference, multi_bootstrap_se

    g = np.random.default_rng(3)
    ratio = [ExampleScores("ratio", np.c_[g.random(40) * 3, g.integers(1, 4, 40)]) for _ in range(3)]
    other = [ExampleScores("ratio", np.c_[g.random(40) * 3, g.integers(1, 4, 40)]) for _ in range(3)]
    acc = [ExampleScores("mean", g.integers(0, 2, 25).astype(float)) for _ in range(3)]
    cases = [[tuple(_Difference(a, b) for a, b in zip(ratio, other)), tuple(acc)], [g.random((3, 30))]]
    monkeypatch.setattr(intervals, "_DRAWS_MEMO", intervals.ProcessMemo(4))
    drawn = []
    real = intervals._counts
    monkeypatch.setattr(intervals, "_counts", lambda idx, n: drawn.append(n) or real(idx, n))
    for blocks in cases:
        want = _multi_bootstrap_se_as_drawn_per_call(blocks, 600, np.random.default_rng(0))
        assert multi_bootstrap_se(blocks, 600) == want  # default generator, drawn: a miss
        n_draws = len(drawn)
        scored: list = []
        real_resampled = ExampleScores.resampled
        monkeypatch.setattr(ExampleScores, "resampled",
                            lambda self, *a, seen=scored, real=real_resampled: seen.append(1) or real(self, *a))
        assert multi_bootstrap_se(blocks, 600) == want and len(drawn) == n_draws  # kept: nothing drawn again
        monkeypatch.setattr(ExampleScores, "resampled", real_resampled)
        assert not scored or isinstance(blocks[0], np.ndarray)  # a seed's scores on kept draws are kept too
        ref, rng, again = (np.random.default_rng(7) for _ in range(3))
        for r in (ref, rng, again):
            r.random(5)  # a generator used before (P(A > B) draws first in a comparison)
        want = _multi_bootstrap_se_as_drawn_per_call(blocks, 600, ref)
        assert multi_bootstrap_se(blocks, 600, rng) == want  # drawn
        n_draws = len(drawn)
        assert multi_bootstrap_se(blocks, 600, again) == want and len(drawn) == n_draws  # kept
        assert again.bit_generator.state == rng.bit_generator.state == ref.bit_generator.state  # left where drawing leaves it
        assert again.random() == ref.random()
