"""Leaderboards: spec parsing, aggregation math and flags, renderers, regression, comparison, plots.

All records are synthetic, written by the tests; nothing is trained.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from leaderboards.aggregate import aggregate, best_methods, load_records, summarize
from leaderboards.compare import compare, compare_table, render_comparison_markdown
from leaderboards.regression import check_regression, load_golden, update_golden
from leaderboards.render import render_csv, render_html, render_latex, render_markdown, write_all
from leaderboards.spec import PACKAGED_SPECS, SpecError, load_spec, parse_spec

TASK = "mlm-at-init"

# Per (method, language) the loss per seed 1, 2, 3; accuracy is derived from it.
LOSSES = {
    ("random", "near"): [8.21, 8.25, 8.19],
    ("random", "script"): [8.40, 8.31, 8.35],
    ("focus", "near"): [6.10, 6.30, 6.15],
    ("focus", "script"): [6.90, 7.05, 6.95],
    ("overlap", "near"): [6.00, 6.05, 5.98],
    ("overlap", "script"): [7.80, 7.70, 7.75],
}
GOLD = {"random": 0.01, "focus": 0.45, "overlap": 0.30, "wechsel": 0.40}


def make_record(method, lang, seed, loss, *, status="ok", version="0.1.0", schema=1, task=TASK, encoding="none"):
    """A synthetic trial record in the schema of docs/CONTRACTS.md."""
    trial_id = f"{method}-{lang}-{task}-{encoding}-{seed}"
    ok = status == "ok"
    return {
        "schema_version": schema,
        "tokxfer_version": version,
        "git": {"sha": "0123abc", "dirty": False},
        "experiment": "quickstart",
        "trial_id": trial_id,
        "status": status,
        "error": None if ok else "Traceback: boom",
        "config": {
            "source": {"model": "world-tiny"},
            "target": {"language": lang, "tokenizer": {"algorithm": "unigram", "vocab_size": 1000}},
            "method": {"id": method, "name": method, "config": {}},
            "encoding": {"name": encoding, "config": {}},
            "stages": [],
            "task": {"name": task, "config": {}},
            "seed": seed,
        },
        "seed": seed,
        "metrics": {lang: {"loss": loss, "accuracy": round(1.0 / loss, 6)}} if ok else {},
        "init": {
            "counts": {"special": 5, "copied": 100, "combined": 800, "fallback": 3},
            "diagnostics": {"gold_top1": GOLD[method] + 0.01 * seed, "gold_top5": GOLD[method] + 0.2},
        }
        if ok
        else {},
        "counts": {lang: {"test": 64}},
        "curves": {"lapt_loss": [[s, 9.0 - 0.1 * s - (0.5 if method == "focus" else 0.0)] for s in range(0, 50, 10)]},
        "timings": {"init_s": 1.0, "task_s": 2.0, "total_s": 3.0},
        "revisions": {},
        "environment": {"python": "3.11.7", "torch": "2.13.0", "device": "cpu"},
        "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": "2025-01-01T00:00:03+00:00",
    }


def all_records():
    return [
        make_record(m, lang, seed, loss)
        for (m, lang), losses in LOSSES.items()
        for seed, loss in zip((1, 2, 3), losses)
    ]


def write_records(root: Path, records) -> Path:
    d = root / "quickstart" / "records"
    d.mkdir(parents=True, exist_ok=True)
    for r in records:
        (d / f"{r['trial_id']}.json").write_text(json.dumps(r))
    return d.parent


SPEC = {
    "name": "qs",
    "version": 1,
    "experiments": ["quickstart"],
    "required_seeds": [1, 2, 3],
    "format": {"decimals": 2},
    "metrics": {
        "loss": {"direction": "lower"},
        "accuracy": {"direction": "higher", "decimals": 1, "scale": 100},
        "gold_top1": {"direction": "higher", "source": "init.diagnostics", "decimals": 1, "scale": 100},
    },
    "columns": [
        {"task": TASK, "languages": ["near", "script"], "metrics": ["loss", "accuracy"], "average": True},
        {"task": TASK, "languages": ["near", "script"], "metrics": ["gold_top1"]},
    ],
    "display_names": {"focus": "FOCUS"},
}


@pytest.fixture
def spec():
    return parse_spec(SPEC)


# ---------------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------------


def test_packaged_quickstart_spec_validates():
    s = load_spec(PACKAGED_SPECS / "quickstart.yaml")
    assert s.name == "quickstart" and s.experiments == ("quickstart",)
    assert s.required_seeds == (1, 2, 3)
    keys = {c.key for c in s.columns}
    for lang in ("near", "script"):
        for metric in ("loss", "accuracy", "gold_top1"):
            assert f"mlm-at-init/{lang}/{metric}" in keys
    by_name = {c.metric.name: c.metric for c in s.columns}
    assert by_name["loss"].direction == "lower" and by_name["accuracy"].direction == "higher"
    assert by_name["gold_top1"].source == "init.diagnostics"
    assert s.rows is None  # all methods found


def test_every_packaged_spec_validates():
    for path in sorted(PACKAGED_SPECS.glob("*.yaml")):
        load_spec(path)


def test_unknown_key_is_an_error_naming_key_and_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nversion: 1\nexperiments: [e]\ncolums: []\n")
    with pytest.raises(SpecError, match=r"bad\.yaml.*'colums'.*did you mean 'columns'"):
        load_spec(p)
    p.write_text(
        "name: x\nversion: 1\nexperiments: [e]\ncolumns:\n  - {task: t, languages: [a], metrics: [m], averge: true}\n"
    )
    with pytest.raises(SpecError, match=r"bad\.yaml.*'averge'.*columns\[0\]"):
        load_spec(p)
    p.write_text("name: x\nversion: 1\nexperiments: [e]\nmetrics: {m: {direction: up}}\ncolumns: [{task: t, language: a, metric: m}]\n")
    with pytest.raises(SpecError, match="direction"):
        load_spec(p)


def test_paper_numbers_are_separate_rows(tmp_path, spec):
    pdir = tmp_path / "paper_numbers"
    pdir.mkdir()
    (pdir / "focus.yaml").write_text(
        "paper: 'Dobler & de Melo (2023)'\ntable: Table 2\nscale: 100\n"
        "rows:\n  - method: focus\n    display: FOCUS\n    values: {'mlm-at-init/near/accuracy': 20.0}\n"
    )
    sdir = tmp_path / "specs"
    sdir.mkdir()
    data = dict(SPEC, paper_numbers=["../paper_numbers/focus.yaml"])
    import yaml

    (sdir / "s.yaml").write_text(yaml.safe_dump(data))
    s = load_spec(sdir / "s.yaml")
    table = aggregate(all_records(), s)
    assert len(table.paper_rows) == 1
    prow = table.paper_rows[0]
    assert prow.kind == "paper" and prow.cells["mlm-at-init/near/accuracy"].mean == pytest.approx(0.20)
    # Measured FOCUS cells are untouched by the paper value.
    measured = next(r for r in table.rows if r.method == "focus").cells["mlm-at-init/near/accuracy"]
    assert measured.n == 3 and not measured.reference
    md = render_markdown(table)
    assert "*FOCUS (paper)*" in md and "Table 2" in md
    assert "20.0" in md
    tex = render_latex(table)
    assert r"\textit{FOCUS (paper)}" in tex
    # A paper value for a column the spec lacks is an error naming the file.
    (pdir / "bad.yaml").write_text("paper: p\ntable: t\nrows:\n  - method: focus\n    values: {'x/y/z': 1}\n")
    (sdir / "s2.yaml").write_text(yaml.safe_dump(dict(SPEC, paper_numbers=["../paper_numbers/bad.yaml"])))
    with pytest.raises(SpecError, match=r"bad\.yaml.*x/y/z"):
        load_spec(sdir / "s2.yaml")


# ---------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------


def test_mean_std_n_match_numpy(spec):
    table = aggregate(all_records(), spec)
    rows = {r.method: r for r in table.rows}
    assert set(rows) == {"random", "focus", "overlap"}
    assert rows["focus"].label == "FOCUS"
    for (method, lang), losses in LOSSES.items():
        cell = rows[method].cells[f"{TASK}/{lang}/loss"]
        assert cell.n == 3 and cell.flags == frozenset()
        assert cell.mean == pytest.approx(np.mean(losses))
        assert cell.std == pytest.approx(np.std(losses, ddof=1))
        acc = rows[method].cells[f"{TASK}/{lang}/accuracy"]
        assert acc.mean == pytest.approx(np.mean([round(1 / x, 6) for x in losses]))
        gold = rows[method].cells[f"{TASK}/{lang}/gold_top1"]
        assert gold.mean == pytest.approx(np.mean([GOLD[method] + 0.01 * s for s in (1, 2, 3)]))
    # Average column: per-seed mean over languages, then mean/std over seeds.
    per_seed = [np.mean([LOSSES[("focus", "near")][i], LOSSES[("focus", "script")][i]]) for i in range(3)]
    avg = rows["focus"].cells[f"{TASK}/avg/loss"]
    assert avg.mean == pytest.approx(np.mean(per_seed)) and avg.std == pytest.approx(np.std(per_seed, ddof=1))
    assert avg.n == 3


def test_summarize_single_value_has_no_std():
    assert summarize([3.0]) == (3.0, None, 1)
    assert summarize([]) == (None, None, 0)


def test_missing_seeds_flagged_not_dropped(spec):
    recs = [r for r in all_records() if not (r["config"]["method"]["id"] == "focus" and r["seed"] == 3 and r["config"]["target"]["language"] == "near")]
    table = aggregate(recs, spec)
    focus = next(r for r in table.rows if r.method == "focus")
    cell = focus.cells[f"{TASK}/near/loss"]
    assert "missing_seeds" in cell.flags and cell.n == 2
    assert cell.mean == pytest.approx(np.mean(LOSSES[("focus", "near")][:2]))
    assert "missing_seeds" in focus.cells[f"{TASK}/avg/loss"].flags
    assert focus.cells[f"{TASK}/avg/loss"].n == 2
    assert "missing_seeds" not in focus.cells[f"{TASK}/script/loss"].flags
    md = render_markdown(table)
    assert "† fewer seeds than required" in md
    assert re.search(r"\(n=2\)†", md)


def test_single_seed_shown_as_n1(spec):
    recs = [make_record("focus", "near", 1, 6.1)]
    table = aggregate(recs, spec)
    cell = table.rows[0].cells[f"{TASK}/near/loss"]
    assert cell.n == 1 and cell.std is None and cell.ci is not None and not cell.ci.defined
    md = render_markdown(table)
    row = next(line for line in md.splitlines() if line.startswith("| FOCUS"))
    assert "6.10 (n=1)†" in row and "[" not in row  # one value: no interval


def test_mixed_versions_flagged(spec):
    recs = all_records()
    for r in recs:
        if r["config"]["method"]["id"] == "overlap" and r["seed"] == 2:
            r["tokxfer_version"] = "0.2.0"
    table = aggregate(recs, spec)
    cell = next(r for r in table.rows if r.method == "overlap").cells[f"{TASK}/near/loss"]
    assert "mixed_versions" in cell.flags and cell.n == 3
    assert cell.mean == pytest.approx(np.mean(LOSSES[("overlap", "near")]))  # still shown
    assert any("several versions" in n for n in table.notes)
    assert "‡" in render_markdown(table)


def test_failed_trials_counted_separately(spec):
    recs = all_records()
    recs = [r for r in recs if not (r["config"]["method"]["id"] == "random" and r["seed"] == 3 and r["config"]["target"]["language"] == "script")]
    recs.append(make_record("random", "script", 3, None, status="failed"))
    table = aggregate(recs, spec)
    row = next(r for r in table.rows if r.method == "random")
    cell = row.cells[f"{TASK}/script/loss"]
    assert cell.failed == 1 and cell.n == 2 and {"failed", "missing_seeds"} <= cell.flags
    assert row.failed == 1
    md = render_markdown(table)
    assert "| failed |" in md.replace("failed |", "failed |")
    assert "¶" in md


def test_duplicate_seeds_flagged(spec):
    recs = all_records() + [make_record("focus", "near", 1, 9.9, encoding="additive")]
    cell = next(r for r in aggregate(recs, spec).rows if r.method == "focus").cells[f"{TASK}/near/loss"]
    assert "duplicate_seeds" in cell.flags and cell.n == 4
    # A `where` filter separates the configurations again.
    filtered = parse_spec(dict(SPEC, where={"encoding.name": "none"}))
    cell = next(r for r in aggregate(recs, filtered).rows if r.method == "focus").cells[f"{TASK}/near/loss"]
    assert cell.flags == frozenset() and cell.n == 3


def test_rows_default_to_methods_of_the_spec_tasks(spec):
    recs = all_records() + [make_record("wechsel", "near", 1, 5.0, task="xnli")]
    recs.append(make_record("wechsel", "near", 2, None, task="xnli", status="failed"))
    table = aggregate(recs, spec)
    assert {r.method for r in table.rows} == {"random", "focus", "overlap"}
    assert all(r.failed == 0 for r in table.rows)
    explicit = parse_spec(dict(SPEC, rows=[{"method": "focus", "display": "F"}, "missing"]))
    table = aggregate(recs, explicit)
    assert [r.label for r in table.rows] == ["F", "missing"]
    assert all(c.mean is None for c in table.rows[1].cells.values())
    assert any("not in the spec's rows" in n for n in table.notes)
    assert "| missing | – |" in render_markdown(table)


def test_load_records_reads_dir(tmp_path):
    exp = write_records(tmp_path, all_records())
    assert len(load_records(exp)) == 18
    assert len(load_records(exp / "records")) == 18
    (exp / "records" / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json"):
        load_records(exp)


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _md_table_lines(md: str) -> list[str]:
    """The lines of the first Markdown table (the leaderboard; comparisons and ranks follow it)."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_markdown_is_valid_and_bolds_rows_not_worse_than_the_best(spec):
    table = aggregate(all_records(), spec)
    md = render_markdown(table)
    lines = _md_table_lines(md)
    ncols = len(table.columns) + 1
    assert all(line.endswith("|") for line in lines)
    assert all(len(re.split(r"(?<!\\)\|", line)) - 2 == ncols for line in lines)
    assert re.fullmatch(r"\|:---(\|---:)+\|", lines[1])
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    rows = {cells[0].strip(): [c.strip() for c in cells] for line in lines[2:] for cells in [line.strip("|").split("|")]}
    col = header.index("loss ↓ near")
    # Lower loss is better: overlap (6.01) has the best near mean; FOCUS (6.18) is behind it by a paired
    # difference whose t-test is not significant after Holm over the two comparisons with the best, so it
    # is bold too; random (8.22) is significantly worse.
    p_focus = stats.ttest_rel(LOSSES[("focus", "near")], LOSSES[("overlap", "near")]).pvalue
    p_random = stats.ttest_rel(LOSSES[("random", "near")], LOSSES[("overlap", "near")]).pvalue
    assert p_random < p_focus and max(2 * p_random, p_focus) >= 0.05 > 2 * p_random  # Holm, by hand
    assert rows["overlap"][col].startswith("**6.01**")
    assert rows["FOCUS"][col].startswith("**6.18**")
    assert not rows["random"][col].startswith("**")
    col = header.index("loss ↓ script")
    assert rows["FOCUS"][col].startswith("**6.97**")
    assert not rows["overlap"][col].startswith("**") and not rows["random"][col].startswith("**")
    col = header.index("gold_top1 ↑ near")
    assert rows["FOCUS"][col].startswith("**47.0**")  # scaled ×100, 1 decimal
    # the 95 % CI of the mean, in display units: the t-interval over the three seeds
    ci = stats.ttest_1samp(np.array([0.46, 0.47, 0.48]) * 100, 0).confidence_interval(0.95)
    assert f"[{ci.low:.1f}, {ci.high:.1f}]" in rows["FOCUS"][col]
    assert "#### Ranks (95 % rank intervals)" in md and "No comparisons are declared" in md


def test_csv_roundtrips_raw_values(spec):
    table = aggregate(all_records(), spec)
    rows = list(csv.DictReader(io.StringIO(render_csv(table))))
    assert len(rows) == len(table.rows) * len(table.columns)
    r = next(r for r in rows if r["method"] == "focus" and r["language"] == "near" and r["metric"] == "loss")
    assert float(r["mean"]) == pytest.approx(np.mean(LOSSES[("focus", "near")]))
    assert float(r["std"]) == pytest.approx(np.std(LOSSES[("focus", "near")], ddof=1))
    assert r["n"] == "3" and r["seeds"] == "1 2 3" and r["best"] == "0" and r["bold"] == "1"
    ci = stats.ttest_1samp(LOSSES[("focus", "near")], 0).confidence_interval(0.95)
    assert float(r["ci_low"]) == pytest.approx(ci.low) and float(r["ci_high"]) == pytest.approx(ci.high)
    assert r["ci_method"] == "t over seeds" and (r["rank"], r["rank_low"]) == ("2", "1")
    best = [r for r in rows if r["language"] == "near" and r["metric"] == "loss" and r["best"] == "1"]
    assert [b["method"] for b in best] == ["overlap"]


def test_latex_is_balanced_booktabs_with_best_bold(spec):
    table = aggregate(all_records(), spec)
    tex = render_latex(table)
    assert tex.count("{") == tex.count("}")
    for cmd in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{tabular}"):
        assert cmd in tex
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    ncols = len(table.columns) + 1
    spec_line = next(line for line in tex.splitlines() if line.startswith(r"\begin{tabular}"))
    assert spec_line == r"\begin{tabular}{l" + "r" * (ncols - 1) + "}"
    for line in body:
        assert line.endswith(r"\\") and line.count("&") == ncols - 1
    overlap = next(line for line in body if line.startswith("overlap"))
    assert r"\textbf{6.01}{\small~[" in overlap
    assert r"\_" in render_latex(aggregate(all_records(), parse_spec(dict(SPEC, display_names={"focus": "FO_CUS"}))))


def test_html_page_is_self_contained(spec, tmp_path):
    table = aggregate(all_records(), spec)
    page = render_html([table, table], title="x & y")
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == 2
    assert "<strong>6.01</strong>" in page and "x &amp; y" in page
    assert "<script" not in page and "http" not in page
    paths = write_all(table, tmp_path / "out")
    assert sorted(paths) == ["comparisons.csv", "csv", "html", "md", "tex"] and all(p.exists() for p in paths.values())


def test_best_ties_at_display_precision(spec):
    recs = [make_record("focus", "near", s, 6.001) for s in (1, 2, 3)] + [
        make_record("overlap", "near", s, 6.004) for s in (1, 2, 3)
    ]
    table = aggregate(recs, spec)
    col = next(c for c in table.columns if c.key == f"{TASK}/near/loss")
    assert best_methods(table, col) == {"focus", "overlap"}


# ---------------------------------------------------------------------------------------------
# Regression
# ---------------------------------------------------------------------------------------------


def test_regression_passes_on_identical_and_fails_on_degraded(spec, tmp_path):
    path = tmp_path / "golden" / "qs.json"
    golden = update_golden(all_records(), spec, path, command="tokxfer run quickstart.yaml")
    loaded = load_golden(path)
    assert loaded == json.loads(json.dumps(golden))
    prov = loaded["provenance"]
    assert prov["command"] == "tokxfer run quickstart.yaml" and prov["git"]["sha"] == "0123abc"
    assert prov["device"] == "cpu" and prov["libraries"]["torch"] == "2.13.0" and prov["date"]
    assert len(loaded["cells"]) == 3 * len(spec.columns)

    report = check_regression(all_records(), path)
    assert report.ok and report.exit_code == 0, report.format()

    # FOCUS near loss gets worse by 0.5 in one seed: far beyond 2·std and 1 %.
    degraded = all_records()
    for r in degraded:
        if r["config"]["method"]["id"] == "focus" and r["config"]["target"]["language"] == "near":
            r["metrics"]["near"]["loss"] += 0.5
    report = check_regression(degraded, loaded)
    assert not report.ok and report.exit_code == 1
    failing = {(c.method, c.column) for c in report.failures}
    assert ("focus", f"{TASK}/near/loss") in failing
    assert ("focus", f"{TASK}/avg/loss") in failing  # the average moves with it
    assert ("focus", f"{TASK}/script/loss") not in failing
    text = report.format()
    assert "REGRESSION CHECK FAILED" in text and "focus" in text and "mlm-at-init/near/loss" in text

    # Moving the right way beyond tolerance is reported but passes.
    improved = all_records()
    for r in improved:
        if r["config"]["method"]["id"] == "random":
            for lang in r["metrics"]:
                r["metrics"][lang]["loss"] -= 1.0
    report = check_regression(improved, loaded)
    assert report.ok and any(c.status == "improved" for c in report.checks)


def test_regression_missing_cells_fail(spec, tmp_path):
    path = tmp_path / "g.json"
    update_golden(all_records(), spec, path, command="x")
    without = [r for r in all_records() if r["config"]["method"]["id"] != "overlap"]
    report = check_regression(without, path)
    assert not report.ok
    assert {c.status for c in report.failures} == {"missing"}
    partial = [r for r in all_records() if not (r["config"]["method"]["id"] == "focus" and r["seed"] == 1)]
    report = check_regression(partial, path)
    assert {c.status for c in report.failures} == {"incomplete"}


def test_update_golden_refuses_incomplete_cells(spec, tmp_path):
    recs = [r for r in all_records() if r["seed"] != 3]
    with pytest.raises(ValueError, match="incomplete"):
        update_golden(recs, spec, tmp_path / "g.json", command="x")


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def test_compare_matches_scipy_and_adjusts_over_all_comparisons(spec):
    table, cmp = compare(all_records(), spec, "focus", ["random", "overlap"])
    by = {(v.b, v.column): v for v in cmp.verdicts}
    v = by[("random", f"{TASK}/near/loss")]
    a, b = LOSSES[("focus", "near")], LOSSES[("random", "near")]
    paired = stats.ttest_rel(a, b)
    ci = paired.confidence_interval(0.95)
    d = v.difference
    assert d.diff == pytest.approx(np.mean(a) - np.mean(b)) and d.n == 3 and d.test == "paired t"
    assert d.p == pytest.approx(paired.pvalue) and (d.low, d.high) == pytest.approx((ci.low, ci.high))
    # Holm over every comparison of the call (2 baselines × the columns with values on both sides)
    testable = [x for x in cmp.verdicts if x.difference.p is not None]
    assert v.family == len(testable) == 2 * len(spec.columns)
    from statsmodels.stats.multitest import multipletests

    ref = multipletests([x.difference.p for x in testable], method="holm")[1]
    assert [x.p_holm for x in testable] == pytest.approx(list(ref))
    assert v.verdict == "better"  # lower loss, significant after Holm
    assert d.improvement.estimate == 1.0  # every FOCUS seed beats every random seed
    md = render_comparison_markdown(table, cmp)
    assert "FOCUS vs random" in md and "p (Holm)" in md and "P(A > B)" in md and "FOCUS better" in md


def test_compare_unpaired_seeds_are_untestable_not_silently_unpaired():
    from leaderboards.stats import Sample, paired_difference

    a = Sample((4, 5, 6), (0.40, 0.42, 0.41))
    b = Sample((1, 2, 3), (0.50, 0.52, 0.51))
    d = paired_difference(a, b)
    assert d.p is None and d.n == 0 and "nothing to pair" in d.note
    assert d.diff == pytest.approx(np.mean(a.values) - np.mean(b.values))
    assert d.improvement.estimate == 0.0  # still descriptive: no seed of A beats one of B
    single = Sample((1,), (0.4,))
    assert paired_difference(single, b).p is None


def test_compare_unknown_method_is_an_error(spec):
    table = aggregate(all_records(), spec)
    with pytest.raises(SpecError, match="'nope' are not rows"):
        compare_table(table, "nope", ["random"])


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def test_plots_write_images(spec, tmp_path):
    from leaderboards.plots import plot_curves, plot_gold_alignment, plot_language_bars

    table = aggregate(all_records(), spec)
    for p in (
        plot_language_bars(table, "loss", tmp_path / "bars.png"),
        plot_curves(all_records(), tmp_path / "curves.png"),
        plot_gold_alignment(all_records(), tmp_path / "gold.png"),
    ):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no column"):
        plot_language_bars(table, "bleu", tmp_path / "x.png")


def test_row_by_method_and_encoding_makes_the_cross_table():
    recs = [
        make_record(m, "near", seed, loss + (0.5 if enc == "xlp" else 0.0), encoding=enc)
        for (m, lang), losses in LOSSES.items() if lang == "near"
        for enc in ("none", "xlp")
        for seed, loss in zip((1, 2, 3), losses)
    ]
    cross = parse_spec({**SPEC, "row_by": "method+encoding", "display_names": {"focus": "FOCUS", "xlp": "XLP"}})
    table = aggregate(recs, cross)
    rows = {r.method: r for r in table.rows}
    assert set(rows) == {f"{m} + {e}" for m in ("random", "focus", "overlap") for e in ("none", "xlp")}
    assert rows["focus + xlp"].label == "FOCUS + XLP" and rows["random + none"].label == "random + none"
    want = np.mean([v + 0.5 for v in LOSSES[("focus", "near")]])
    assert rows["focus + xlp"].cells[f"{TASK}/near/loss"].mean == pytest.approx(want)
    assert rows["focus + none"].cells[f"{TASK}/near/loss"].mean == pytest.approx(np.mean(LOSSES[("focus", "near")]))
    # one row per encoding, pooling every method's records
    by_enc = aggregate(recs, parse_spec({**SPEC, "row_by": "encoding"}))
    assert [r.method for r in by_enc.rows] == ["none", "xlp"]
    assert by_enc.rows[1].cells[f"{TASK}/near/loss"].n == 9
    # the plain table keeps one row per method (encodings pooled, as before)
    assert [r.method for r in aggregate(recs, parse_spec(SPEC)).rows] == ["focus", "overlap", "random"]


def test_row_by_must_be_known():
    with pytest.raises(SpecError, match="row_by"):
        parse_spec({**SPEC, "row_by": "language"})
