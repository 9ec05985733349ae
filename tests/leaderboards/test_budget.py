"""Budget curves (leaderboards/budget.py): steps to reach the baseline's final score, steps saved, its CI."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from leaderboards.budget import (
    Curve,
    budget_curves,
    main,
    render_budget_csv,
    render_budget_markdown,
    steps_saved,
    steps_to_reach,
)
from leaderboards.spec import parse_spec

STEPS = (0, 30, 100, 300, 1000)


def test_steps_to_reach_interpolates_on_the_log_axis():
    # 4.5 is halfway between 5.0 (30 steps) and 4.0 (100 steps) in ln(1 + steps): sqrt(31 * 101) - 1
    assert steps_to_reach(STEPS, [6, 5, 4, 3.8, 3.6], 4.5, higher=False) == pytest.approx(math.sqrt(31 * 101) - 1)
    assert steps_to_reach(STEPS, [6, 5, 4, 3.8, 3.6], 6.5, higher=False) == 0  # already there at init
    assert steps_to_reach(STEPS, [0.1, 0.2, 0.3, 0.4, 0.5], 0.5, higher=True) == 1000
    assert steps_to_reach(STEPS, [0.1, 0.2, 0.3, 0.4, 0.45], 0.5, higher=True) is None


def test_steps_saved_and_its_bootstrap_interval():
    base = Curve("random", STEPS, {1: (6.0, 5.5, 5.0, 4.5, 4.0), 2: (6.2, 5.7, 5.2, 4.7, 4.2), 3: (6.1, 5.6, 5.1, 4.6, 4.1)})
    good = Curve("focus", STEPS, {s: tuple(v - 1.0 for v in vals) for s, vals in base.by_seed.items()})
    out = steps_saved(base, good, higher=False)
    # target 4.1 (random at 1000); focus (random - 1) reaches 4.1 between 30 (4.6) and 100 (4.1): at 100 exactly
    assert out.target == pytest.approx(4.1) and out.reach == pytest.approx(100) and out.baseline_reach == 1000
    assert out.saved == pytest.approx(900) and out.n == 3 and out.reached_share == 1.0
    assert out.low <= out.saved <= out.high
    assert steps_saved(base, good, higher=False) == out  # fixed bootstrap seed: the same interval
    worse = Curve("bad", STEPS, {s: tuple(v + 1.0 for v in vals) for s, vals in base.by_seed.items()})
    miss = steps_saved(base, worse, higher=False)
    assert miss.reach is None and miss.saved is None and miss.low is None and miss.reached_share == 0.0


def _records():
    recs = []
    for method, shift in (("random", 0.0), ("focus", -1.0)):
        for seed in (1, 2, 3):
            for steps in STEPS:
                loss = 6.0 - 0.5 * STEPS.index(steps) + shift + 0.1 * seed
                stages = {"lapt": {"metrics": {"near": {"source_forgetting": 0.1}}, "info": {"steps": steps}}} if steps else {}
                recs.append({"trial_id": f"{method}{seed}-{steps}", "status": "ok", "seed": seed, "stages": stages,
                             "config": {"method": {"id": method}, "task": {"name": "mlm-at-init"}, "stage_set": f"lapt-{steps}"},
                             "metrics": {"near": {"loss": loss}}})  # fmt: skip
    return recs


SPEC = {"name": "wb", "version": 1, "experiments": ["wb"], "required_seeds": [1, 2, 3], "against": "random",
        "metrics": {"loss": {"direction": "lower", "display": "MLM loss"},
                    "src": {"key": "source_forgetting", "source": "stages", "direction": "lower", "compare": False}},
        "columns": [{"task": "mlm-at-init", "stage_set": f"lapt-{s}", "languages": ["near"], "metrics": ["loss"]} for s in STEPS]
        + [{"task": "mlm-at-init", "stage_set": "lapt-1000", "languages": ["near"], "metrics": ["src"]}]}  # fmt: skip


def test_curves_come_from_the_records_and_the_spec():
    spec = parse_spec(SPEC)
    curves = budget_curves(_records(), spec)
    assert set(curves) == {"loss"}  # the compare: false column draws no curve
    assert curves["loss"]["focus"].steps == STEPS and sorted(curves["loss"]["focus"].by_seed) == [1, 2, 3]
    md = render_budget_markdown(curves, spec)
    assert "| focus |" in md and "100 | 900 [" in md
    rows = render_budget_csv(curves, spec).splitlines()
    assert rows[1].startswith("wb,1,loss,lower,focus,random,") and len(rows) == 2


def test_mixed_step_counts_in_one_stage_set_are_refused():
    recs = _records()
    recs[1]["stages"]["lapt"]["info"]["steps"] = 31
    with pytest.raises(ValueError, match="different step counts"):
        budget_curves(recs, parse_spec(SPEC))


def test_cli_writes_table_and_plot_and_refuses_missing_records(tmp_path, capsys):
    import json

    import yaml

    spec = tmp_path / "wb.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    d = tmp_path / "runs" / "wb" / "records"
    d.mkdir(parents=True)
    for r in _records():
        (d / f"{r['trial_id']}.json").write_text(json.dumps({**r, "experiment": "wb", "schema_version": 3}))
    assert main([str(spec), "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "plots" / "wb" / "budget-curves.png").stat().st_size > 1000
    assert "900" in (tmp_path / "out" / "wb.budget.md").read_text()
    assert main([str(spec), "--runs-dir", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
    assert "no records" in capsys.readouterr().err


def test_committed_budget_table_matches_committed_records(tmp_path):
    root = Path(__file__).resolve().parents[2]
    spec = root / "leaderboards" / "specs" / "warmup-budget.yaml"
    assert main([str(spec), "--runs-dir", str(root / "leaderboards" / "records"), "--out", str(tmp_path)]) == 0
    for ext in ("budget.md", "budget.csv"):
        fresh = (tmp_path / f"warmup-budget.{ext}").read_text()
        assert fresh == (root / "leaderboards" / "tables" / f"warmup-budget.{ext}").read_text(), (
            f"leaderboards/tables/warmup-budget.{ext} differs from its records; run python -m leaderboards.budget")


def test_tokxfer_leaderboard_writes_the_budget_table_of_a_stage_set_spec(tmp_path):
    from harness.cli import main as tokxfer

    root = Path(__file__).resolve().parents[2]
    spec = root / "leaderboards" / "specs" / "warmup-budget.yaml"
    out = tmp_path / "out"
    assert tokxfer(["leaderboard", str(spec), "--runs-dir", str(root / "leaderboards" / "records"), "--out", str(out)]) == 0
    assert (out / "warmup-budget.budget.md").read_text() == (root / "leaderboards" / "tables" / "warmup-budget.budget.md").read_text()
    assert "plots/warmup-budget/budget-curves.png" in (out / "index.html").read_text()
