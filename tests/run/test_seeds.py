"""Every random source of a trial follows its seed unless held (findings issue): the built-in source's
pretraining, the initialization, the stages and the task; what is held is in the trial id and the record."""

from __future__ import annotations

import pytest
import yaml

from harness.run.config import ConfigError, SourceSpec, config_hash, load_experiment, parse_experiment
from harness.run.runner import execute

BASE = {
    "name": "seeds", "world": {"size": "tiny"}, "source": {"model": "world:mlm"},
    "targets": ["near"], "methods": ["random"], "tasks": ["mlm-at-init"], "seeds": [0, 1, 2],
}


def test_the_source_follows_the_trial_seed_unless_held():
    trials = parse_experiment(dict(BASE)).trials()
    assert [t.source.pretrain for t in trials] == [{}, {"seed": 1}, {"seed": 2}]
    assert [t.component_seed("source") for t in trials] == [0, 1, 2]
    held = parse_experiment({**BASE, "source": {"model": "world:mlm", "pretrain": {"seed": 0, "steps": 5}}}).trials()
    assert [t.source.pretrain for t in held] == [{"steps": 5}] * 3
    assert {t.component_seed("source") for t in held} == {0}
    # a source held at 0 keeps the trial ids records had before seeds varied the source
    resolved = held[1].resolved()
    assert "hold_seeds" not in resolved and held[1].trial_id == config_hash(resolved)
    assert SourceSpec(model="xlm-roberta-base").for_trial(3).pretrain == {}


def test_hold_seeds_holds_a_component_and_names_it_in_the_trial_id():
    free = parse_experiment(dict(BASE)).trials()
    held = parse_experiment({**BASE, "hold_seeds": {"init": 0}}).trials()
    assert [t.component_seeds() for t in held][2] == {"source": 2, "init": 0, "stages": 2, "task": 2}
    assert held[2].resolved()["hold_seeds"] == {"init": 0}
    assert {t.trial_id for t in held}.isdisjoint(t.trial_id for t in free)


@pytest.mark.parametrize("hold, message", [
    ({"source": 0}, "hold the source model with source.pretrain.seed"),
    ({"inti": 0}, "did you mean 'init'"),
    ({"task": -1}, "hold_seeds.task"),
    ([0], "expected a mapping"),
])
def test_bad_hold_seeds_are_refused(hold, message):
    with pytest.raises(ConfigError, match=message):
        parse_experiment({**BASE, "hold_seeds": hold})


def _grid(tmp_path, tiny_pretrain_overrides, **extra):
    raw = {**BASE, "seeds": [1, 2], "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
           "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
           "tasks": [{"name": "mlm-at-init", "config": {"max_eval_examples": 16, "batch_size": 8}}], **extra}
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_experiment(p).trials()


def test_a_held_init_gives_the_same_initialization_for_every_trial_seed(tmp_path, tiny_source, tiny_pretrain_overrides):
    """``random`` draws every row from the init generator: held, two trial seeds score the same at
    init; free, they differ. The record names the seeds."""
    free = [execute(t, str(tmp_path / "free")).to_json() for t in _grid(tmp_path, tiny_pretrain_overrides)]
    held = [execute(t, str(tmp_path / "held")).to_json()
            for t in _grid(tmp_path, tiny_pretrain_overrides, hold_seeds={"init": 7})]
    assert all(r["status"] == "ok" for r in free + held), [r.get("error") for r in free + held]
    assert free[0]["metrics"] != free[1]["metrics"]
    assert held[0]["metrics"] == held[1]["metrics"]
    assert [r["seeds"] for r in held] == [{"source": 0, "init": 7, "stages": s, "task": s} for s in (1, 2)]
    assert held[0]["config"]["hold_seeds"] == {"init": 7}
