"""``stage_sets``: the stage chain as a grid axis (LAPT budgets, harness/configs/warmup-budget.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run.config import ConfigError, load_experiment, parse_experiment
from leaderboards.aggregate import aggregate
from leaderboards.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "e", "world": {"size": "tiny", "seed": 0}, "source": {"model": "world:mlm"},
        "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
        "methods": ["random", "overlap"], "tasks": ["mlm-at-init"], "seeds": [1, 2]}  # fmt: skip
LAPT = {"name": "lapt", "config": {"max_steps": 5, "batch_size": 2, "max_length": 16}}


def test_each_trial_runs_one_stage_set_and_its_config_names_it():
    cfg = parse_experiment({**BASE, "stage_sets": {"lapt-0": [], "lapt-5": [LAPT]}})
    trials = cfg.trials()
    assert len(trials) == 2 * 2 * 2
    by_set = {t.stage_set: t for t in trials if t.method.id == "random" and t.seed == 1}
    assert set(by_set) == {"lapt-0", "lapt-5"}
    assert by_set["lapt-0"].stages == () and [s.name for s in by_set["lapt-5"].stages] == ["lapt"]
    assert by_set["lapt-5"].resolved()["stage_set"] == "lapt-5" and "@lapt-5" in by_set["lapt-5"].describe()
    assert by_set["lapt-5"].resolved()["stages"][0]["config"]["max_steps"] == 5
    assert len({t.trial_id for t in trials}) == len(trials)
    # without stage sets nothing changes: no stage_set key, the id of the plain stage list
    plain = parse_experiment({**BASE, "stages": [LAPT]}).trials()[0]
    assert "stage_set" not in plain.resolved() and plain.stage_set is None
    assert plain.trial_id != by_set["lapt-5"].trial_id  # the set id is part of the identity


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"stages": [LAPT], "stage_sets": {"a": []}}, "not both"),
        ({"stage_sets": [LAPT]}, "expected a mapping"),
        ({"stage_sets": {"a": LAPT}}, "stage_sets.a: expected a list"),
        ({"stage_sets": {"../x": []}}, "set id '../x'"),
        ({"stage_sets": {"a": [{"name": "lapt", "config": {"max_step": 3}}]}}, "max_step"),
    ],
)
def test_bad_stage_sets_name_the_key(extra, message):
    with pytest.raises(ConfigError, match=message):
        parse_experiment({**BASE, **extra})


def test_the_packaged_budget_experiment_is_a_budget_axis():
    cfg = load_experiment(ROOT / "harness" / "configs" / "warmup-budget.yaml")
    steps = {sid: [s.config["max_steps"] for s in stages] for sid, stages in cfg.stage_sets}
    assert steps == {"lapt-0": [], "lapt-30": [30], "lapt-100": [100], "lapt-300": [300], "lapt-1000": [1000]}
    assert {m.name for m in cfg.methods} >= {"random", "overlap", "focus", "wechsel", "mean-of-pieces"}


def test_a_spec_column_selects_one_stage_set():
    spec = parse_spec({"name": "t", "version": 1, "experiments": ["e"], "metrics": {"loss": {"direction": "lower"}},
                       "columns": [{"task": "mlm-at-init", "stage_set": s, "languages": ["near"], "metrics": ["loss"]}
                                   for s in ("lapt-0", "lapt-5")]})  # fmt: skip
    recs = [{"trial_id": f"{s}{seed}", "status": "ok", "seed": seed, "metrics": {"near": {"loss": v + seed}},
             "config": {"method": {"id": "random"}, "task": {"name": "mlm-at-init"}, "stage_set": s}}
            for s, v in (("lapt-0", 6.0), ("lapt-5", 4.0)) for seed in (1, 2)]  # fmt: skip
    cells = aggregate(recs, spec).rows[0].cells
    assert cells["mlm-at-init@lapt-0/near/loss"].mean == 7.5 and cells["mlm-at-init@lapt-5/near/loss"].mean == 5.5
