"""Sanity guards (harness/run/sanity.py): flags in the record, the log and the leaderboard cells."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch

from harness import registry
from harness.run import records, sanity
from harness.run.sanity import SanityError, check_ids, check_record

N_TARGET = 5000
UNIFORM = math.log(N_TARGET)  # 8.517


class _Combines:
    combines = True


class _Uninformed:
    uninformed = True


def _record(loss=6.0, *, counts=None, stages=(), info=None, directives=None, metric="loss", n_target=N_TARGET):
    return {
        "trial_id": "t",
        "config": {"stages": list(stages)},
        "metrics": {"near": {metric: loss}},
        "init": {
            "n_target": n_target,
            "counts": counts or {"special": 5, "copied": 100, "combined": 4800, "fallback": 95},
            "info": info or {},
            "directives": directives or {},
        },
    }


def _codes(flags):
    return [f["code"] for f in flags]


# ---------------------------------------------------------------- (a) loss at a uniform guess


@pytest.mark.parametrize(
    "loss, flagged",
    [(UNIFORM, True), (UNIFORM * 1.019, True), (UNIFORM * 0.981, True), (UNIFORM * 1.021, False),
     (UNIFORM * 0.979, False), (6.0, False)],
)  # fmt: skip
def test_loss_at_init_within_two_percent_of_ln_v_is_flagged(loss, flagged):
    flags = check_record(_record(loss))
    assert ("loss_at_uniform" in _codes(flags)) is flagged
    if flagged:
        assert f"ln {N_TARGET}" in flags[0]["message"] and "near" in flags[0]["message"]


def test_causal_lm_perplexity_is_read_through_its_log():
    assert _codes(check_record(_record(float(N_TARGET), metric="token_perplexity"))) == ["loss_at_uniform"]
    assert check_record(_record(300.0, metric="token_perplexity")) == []


def test_uniform_loss_is_expected_without_transfer_or_after_a_stage():
    # a stage ran: the loss is no longer "at initialization"
    assert check_record(_record(UNIFORM, stages=[{"name": "lapt"}])) == []
    # random rows everywhere (random, TransInner), a re-initialized body (from-scratch), a random control
    all_random = {"special": 5, "copied": 0, "combined": 0, "fallback": 4995}
    assert check_record(_record(UNIFORM, counts=all_random)) == []
    assert check_record(_record(UNIFORM, directives={"reinitialize_body": True})) == []
    assert check_record(_record(UNIFORM), _Uninformed) == []


# ---------------------------------------------------------------- (b) loss near zero


@pytest.mark.parametrize("loss, metric", [(0.004, "loss"), (1.005, "token_perplexity"), (0.0, "loss")])
def test_evaluation_loss_near_zero_is_flagged_after_stages_too(loss, metric):
    for stages in ((), ({"name": "lapt"},)):
        flags = check_record(_record(loss, metric=metric, stages=stages))
        assert _codes(flags) == ["loss_near_zero"]
        assert "future tokens" in flags[0]["message"]
    assert check_record(_record(0.02)) == []


# ---------------------------------------------------------------- (c) combining methods that combined nothing


def test_all_fallback_is_flagged_only_for_combining_methods():
    counts = {"special": 5, "copied": 0, "combined": 0, "fallback": 4995}
    flags = check_record(_record(6.0, counts=counts), _Combines)
    assert _codes(flags) == ["all_fallback"] and "4995" in flags[0]["message"]
    assert check_record(_record(6.0, counts=counts)) == []  # random: all fallback by design
    some_copied = {"special": 5, "copied": 300, "combined": 0, "fallback": 4695}
    assert _codes(check_record(_record(6.0, counts=some_copied), _Combines)) == ["no_combined_rows"]
    nothing_to_do = {"special": 5, "copied": 4995, "combined": 0, "fallback": 0}
    assert check_record(_record(6.0, counts=nothing_to_do), _Combines) == []


def test_combining_methods_declare_it():
    for name in ("vipi", "mean-of-pieces"):
        assert getattr(registry.get("method", name).cls, "combines", False) is True, name
    for name in ("random", "overlap", "original", "from-scratch"):
        assert getattr(registry.get("method", name).cls, "combines", False) is False, name


# ---------------------------------------------------------------- (e) nondeterministic components


def test_nondeterministic_components_are_flagged_by_name():
    flags = check_record(_record(6.0, info={"nondeterministic": ["eflomal", "cuda-scatter", "eflomal"]}))
    assert _codes(flags) == ["nondeterministic:cuda-scatter", "nondeterministic:eflomal"]
    assert "'eflomal'" in flags[1]["message"]


# ---------------------------------------------------------------- (f) rows of extreme norm


@pytest.mark.parametrize("over, nonfinite, reinit, flagged", [
    (0, 0, False, False), (3, 0, False, True), (0, 1, False, True), (3, 0, True, False)])  # fmt: skip
def test_rows_far_beyond_the_source_norms_are_flagged(over, nonfinite, reinit, flagged):
    rec = _record(74.1, directives={"reinitialize_body": True} if reinit else None)
    rec["init"]["diagnostics"] = {"row_norm_source_max": 1.5, "row_norm_max": 900.0, "rows_over_norm_bound": over,
                                  "rows_nonfinite": nonfinite}  # fmt: skip
    flags = check_record(rec)
    assert _codes(flags) == (["row_norm"] if flagged else [])
    if flagged:
        assert f"{over} initialized rows" in flags[0]["message"] and "900 vs 1.5" in flags[0]["message"]


def test_row_norm_diagnostics_count_rows_beyond_ten_times_the_source_maximum():
    from harness.model.diagnostics import row_norm_diagnostics

    src = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    longest = src[src.norm(dim=1).argmax()][None]
    top = float(longest.norm())
    new = torch.cat([src[:10] * 0.5, longest * 9.5, longest * 10.5, longest * float("inf")])
    d = row_norm_diagnostics(src, new)
    assert d["row_norm_source_max"] == pytest.approx(top) and d["rows_nonfinite"] == 1
    assert d["rows_over_norm_bound"] == 1 and d["row_norm_max"] == pytest.approx(top * 10.5)


def test_flags_come_in_a_fixed_order_and_a_clean_record_has_none():
    rec = _record(UNIFORM, counts={"special": 5, "copied": 1, "combined": 0, "fallback": 4994},
                  info={"nondeterministic": ["eflomal"]})  # fmt: skip
    assert _codes(check_record(rec, _Combines)) == ["loss_at_uniform", "no_combined_rows", "nondeterministic:eflomal"]
    assert check_record(_record(6.0), _Combines) == []


def test_log_flags_warns_once_per_flag(caplog):
    rec = _record(0.001)
    rec["flags"] = check_record(rec)
    with caplog.at_level(logging.WARNING, logger="tokxfer"):
        sanity.log_flags(rec)
    msgs = [r.getMessage() for r in caplog.records if "sanity flag" in r.getMessage()]
    assert len(msgs) == 1 and "loss_near_zero" in msgs[0] and "trial t" in msgs[0]


# ---------------------------------------------------------------- (d) ids beyond the embedding matrix


class _Tok:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def get_vocab(self):
        return {f"t{i}": i for i in range(self.n)}


class _Model(torch.nn.Module):
    def __init__(self, n_in, n_out=None):
        super().__init__()
        self.inp = torch.nn.Embedding(n_in, 4)
        self.out = torch.nn.Linear(4, n_out, bias=False) if n_out else None

    def get_input_embeddings(self):
        return self.inp

    def get_output_embeddings(self):
        return self.out


def test_ids_beyond_the_embedding_matrix_are_refused():
    check_ids(_Tok(10), _Model(10))
    check_ids(_Tok(10), _Model(12, 12))  # padded rows are fine
    with pytest.raises(SanityError, match="ids up to 10 but the input embedding matrix has only 10 rows"):
        check_ids(_Tok(11), _Model(10))
    with pytest.raises(SanityError, match="output embedding matrix has only 9 rows"):
        check_ids(_Tok(10), _Model(10, 9))
    tok = _Tok(5)
    tok.get_vocab = lambda: {"a": 0, "b": 7}  # an id beyond len(tokenizer)
    with pytest.raises(SanityError, match="ids up to 7"):
        check_ids(tok, _Model(5))


# ---------------------------------------------------------------- records: an optional field


def test_records_with_and_without_flags_load():
    fixtures = Path(__file__).parents[1] / "fixtures" / "records"
    old = records.load_record(fixtures / "schema1-ok.json")  # written before the guards: unknown
    assert "flags" not in old
    new = records.load_record(fixtures / "schema1-flagged.json")
    assert _codes(new["flags"]) == ["loss_at_uniform", "no_combined_rows", "nondeterministic:eflomal"]
    # the fixture's flags are what the guards compute from it
    assert check_record(new, _Combines) == new["flags"]


# ---------------------------------------------------------------- leaderboard cells


def _lb_record(method, seed, loss, flags=None):
    rec = {
        "schema_version": 1, "tokxfer_version": "0.1.0", "trial_id": f"{method}-{seed}", "status": "ok",
        "seed": seed,
        "config": {"method": {"id": method, "name": method}, "task": {"name": "mlm-at-init"},
                   "target": {"language": "near"}, "seed": seed},
        "metrics": {"near": {"loss": loss}},
    }  # fmt: skip
    if flags is not None:  # None: a record written before the guards existed has no "flags"
        rec["flags"] = flags
    return rec


def _table(recs):
    from leaderboards.aggregate import aggregate
    from leaderboards.spec import parse_spec

    spec = parse_spec({"name": "t", "version": 1, "experiments": ["x"], "required_seeds": [1, 2],
                       "columns": [{"task": "mlm-at-init", "languages": ["near", "far"], "metrics": ["loss"],
                                    "average": True}]})  # fmt: skip
    return aggregate(recs, spec)


def test_flagged_records_mark_their_cells_in_every_format():
    from leaderboards.render import render_csv, render_html, render_latex, render_markdown

    uniform = [{"code": "loss_at_uniform", "message": "m"}]
    nondet = [{"code": "nondeterministic:eflomal", "message": "m"}]
    recs = [
        _lb_record("focus", 1, 8.5, uniform), _lb_record("focus", 2, 8.4, []),
        _lb_record("tiktotok", 1, 6.0, nondet), _lb_record("tiktotok", 2, 6.1, nondet),
        _lb_record("vipi", 1, 6.5, []), _lb_record("vipi", 2, 6.6, None),  # an old record without flags
    ]  # fmt: skip
    table = _table(recs)
    rows = {r.method: r for r in table.rows}
    cell = rows["focus"].cells["mlm-at-init/near/loss"]
    assert "sanity" in cell.flags and cell.guards == ("loss_at_uniform",) and cell.n == 2  # value kept
    assert rows["tiktotok"].cells["mlm-at-init/near/loss"].flags == {"nondeterministic"}
    assert rows["vipi"].cells["mlm-at-init/near/loss"].flags == frozenset()
    assert table.flags_used() == ["missing_seeds", "sanity", "nondeterministic"]  # "far" has no records
    md = render_markdown(table)
    focus_line = next(line for line in md.splitlines() if line.startswith("| focus"))
    vipi_line = next(line for line in md.splitlines() if line.startswith("| vipi"))
    assert "!" in focus_line and "?" not in focus_line and "!" not in vipi_line
    assert "?" in next(line for line in md.splitlines() if line.startswith("| tiktotok"))
    assert "- ! a sanity guard flagged a trial of this cell" in md and "(loss_at_uniform)" in md
    assert "- ? a trial of this cell used a component that is not reproducible" in md
    assert "(nondeterministic:eflomal)" in md
    tex = render_latex(table)
    assert r"\textsuperscript{!}" in tex and r"\textsuperscript{?}" in tex and r"loss\_at\_uniform" in tex
    html = render_html(table)
    assert "<sup>!</sup>" in html and "<sup>?</sup>" in html and "loss_at_uniform" in html
    csv = render_csv(table)
    assert ",sanity," in csv and ",nondeterministic," in csv


def test_unflagged_records_render_as_before():
    from leaderboards.render import render_markdown

    clean = [_lb_record("focus", s, 6.0 + s / 10, []) for s in (1, 2)]
    old = [_lb_record("focus", s, 6.0 + s / 10, None) for s in (1, 2)]
    for recs in (clean, old):
        md = render_markdown(_table(recs))
        assert "sanity guard" not in md and "!" not in md.split("\n- ")[0]


# ---------------------------------------------------------------- the runner


def test_runner_puts_flags_in_the_record_and_logs_them(tmp_path, tiny_source, tiny_pretrain_overrides, runs_dir,
                                                       monkeypatch, caplog):  # fmt: skip
    import yaml

    from harness.run.config import load_experiment
    from harness.run.runner import execute

    cls = registry.get("method", "random").cls
    original = cls.initialize

    def initialize(self, inputs, rng):
        res = original(self, inputs, rng)
        res.info["nondeterministic"] = ["test-component"]
        return res

    # pretend "random" should combine: its all-fallback mapping is then suspicious
    monkeypatch.setattr(cls, "combines", True, raising=False)
    monkeypatch.setattr(cls, "initialize", initialize)
    raw = {
        "name": "guards", "world": {"size": "tiny", "seed": 0},
        "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
        "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
        "methods": ["random"], "seeds": [97],  # a seed no other test caches an init for
        "tasks": [{"name": "mlm-at-init", "config": {"max_eval_examples": 8, "batch_size": 8}}],
    }  # fmt: skip
    p = tmp_path / "guards.yaml"
    p.write_text(yaml.safe_dump(raw))
    spec = load_experiment(p).trials()[0]
    with caplog.at_level(logging.WARNING, logger="tokxfer"):
        record = execute(spec, str(runs_dir))
    assert record.ok, record.error
    rec = record.to_json()
    codes = _codes(rec["flags"])
    assert "all_fallback" in codes and "nondeterministic:test-component" in codes
    on_disk = json.loads((runs_dir / "guards" / "records" / f"{spec.trial_id}.json").read_text())
    assert on_disk["flags"] == rec["flags"] and on_disk["schema_version"] == records.SCHEMA_VERSION
    warned = [r.getMessage() for r in caplog.records if "sanity flag" in r.getMessage()]
    assert len(warned) == len(codes) and all(spec.trial_id in w for w in warned)
