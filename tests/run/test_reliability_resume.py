"""Resume never overwrites a record it cannot read, and re-runs records that lack a metric."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import registry
from harness.run import records
from harness.run.config import parse_experiment
from harness.run.experiment import run_experiment


class RecordingExecutor:
    """Runs nothing: remembers which trials it was given and returns ok records for them."""

    def __init__(self):
        self.ran: list[str] = []

    def run(self, specs, runs_dir, on_record, **_):
        self.ran.extend(s.trial_id for s in specs)
        return [{"trial_id": s.trial_id, "status": "ok"} for s in specs]


def _cfg(task="mlm-at-init", seeds=(1, 2, 3)):
    return parse_experiment({
        "name": "exp", "world": {"size": "tiny"}, "targets": [{"language": "near"}], "methods": ["random"],
        "tasks": [task], "seeds": list(seeds),
    })


def _ok(spec, metrics=None) -> dict:
    """An ok record as the runner writes it (with its trial's resolved config, which resume checks)."""
    return {"schema_version": records.SCHEMA_VERSION, "trial_id": spec.trial_id, "status": "ok", "seed": spec.seed,
            "experiment": "exp", "config": json.loads(json.dumps(spec.resolved())), "metrics": {"near": {"loss": 6.0, "accuracy": 0.2, "perplexity": 403.4}} if metrics is None else metrics}


def _write(runs: Path, rec: dict) -> Path:
    d = runs / "exp" / "records"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{rec['trial_id']}.json"
    p.write_text(json.dumps(rec))
    return p


@pytest.mark.parametrize("content, needle", [
    (lambda spec: json.dumps({**_ok(spec), "schema_version": records.SCHEMA_VERSION + 1}), "newer than this tokxfer"),
    (lambda spec: '{"trial_id": "x", "status": "ok", "metr', "truncated or corrupt"),
    (lambda spec: json.dumps({"status": "ok"}), "missing required field"),
    (lambda spec: json.dumps([1, 2]), "expected a JSON object"),
])
def test_unreadable_or_newer_record_stops_resume_and_is_kept(tmp_path, content, needle):
    cfg = _cfg()
    spec = cfg.trials()[1]
    p = _write(tmp_path, _ok(cfg.trials()[0]))
    bad = p.with_name(f"{spec.trial_id}.json")
    bad.write_text(content(spec))
    before = bad.read_bytes()
    ex = RecordingExecutor()
    with pytest.raises(records.RecordError) as err:
        run_experiment(cfg, tmp_path, executor=ex, progress=False)
    assert str(bad) in str(err.value) and needle in str(err.value) and "would overwrite" in str(err.value)
    assert bad.read_bytes() == before and ex.ran == []


def test_record_path_that_is_not_a_file_stops_resume(tmp_path):
    cfg = _cfg()
    (tmp_path / "exp" / "records" / f"{cfg.trials()[0].trial_id}.json").mkdir(parents=True)
    with pytest.raises(records.RecordError, match="cannot read record"):
        run_experiment(cfg, tmp_path, executor=RecordingExecutor(), progress=False)


def test_record_missing_a_metric_or_a_language_is_rerun(tmp_path):
    cfg = _cfg()
    a, b, c = cfg.trials()
    _write(tmp_path, _ok(a))
    _write(tmp_path, _ok(b, {"near": {"loss": 6.0, "perplexity": 403.4}}))  # its accuracy was removed
    _write(tmp_path, _ok(c, {"far": {"loss": 6.0, "accuracy": 0.2, "perplexity": 403.4}}))  # not its language
    ex = RecordingExecutor()
    summary = run_experiment(cfg, tmp_path, executor=ex, progress=False)
    assert sorted(ex.ran) == sorted([b.trial_id, c.trial_id]) and summary.skipped == 1


def test_failed_record_is_rerun_and_complete_one_skipped(tmp_path):
    cfg = _cfg(seeds=(1, 2))
    a, b = cfg.trials()
    _write(tmp_path, _ok(a))
    _write(tmp_path, {**_ok(b), "status": "failed", "metrics": {}})
    ex = RecordingExecutor()
    run_experiment(cfg, tmp_path, executor=ex, progress=False)
    assert ex.ran == [b.trial_id]


def test_metrics_declared_by_the_task_are_required(tmp_path):
    @dataclass(frozen=True)
    class Cfg:
        n: int = 1

    name = "declares-loss-and-accuracy"
    if name not in registry.names("task"):
        @registry.register_task(name, config=Cfg)
        class Declaring:
            model_kind = "mlm"
            metrics = ("loss", "accuracy")

            def __init__(self, config):
                self.config = config

    cfg = _cfg(task=name, seeds=(1, 2))
    a, b = cfg.trials()
    # both records lack accuracy: no sibling has it, only the declaration tells
    _write(tmp_path, _ok(a, {"near": {"loss": 6.0}}))
    _write(tmp_path, _ok(b, {"near": {"loss": 6.0, "accuracy": 0.1}}))
    ex = RecordingExecutor()
    run_experiment(cfg, tmp_path, executor=ex, progress=False)
    assert ex.ran == [a.trial_id]
    assert records.trial_state(tmp_path / "exp" / "records" / f"{a.trial_id}.json", languages=["near"],
                               required_metrics=("loss", "accuracy"))[0] == "incomplete"


def test_every_builtin_task_declares_its_metrics():
    from harness import registry
    from harness.run.experiment import declared_metrics

    for name in registry.names("task"):
        assert declared_metrics(name), f"task {name!r} declares no metrics, so resume cannot tell a record is complete"
