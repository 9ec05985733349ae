"""Executors on CPU: the per-GPU pool with fake device ids (plugins loaded in workers, a worker
killed mid-trial), and Slurm through submitit's local cluster (from the CLI too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from harness.run import records
from harness.run.config import load_experiment, parse_experiment
from harness.run.executors import ExecutorError, GpuPoolExecutor, SlurmExecutor
from harness.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "tests" / "fixtures" / "plugins" / "counted_task.py"


def _cfg(seeds=(1, 2, 3, 4)):
    return parse_experiment({
        "name": "exp", "world": {"size": "tiny"}, "targets": [{"language": "near"}], "methods": ["random"],
        "tasks": ["mlm-at-init"], "seeds": list(seeds),
    })


@pytest.fixture()
def importable_helpers(monkeypatch):
    """Worker processes and local Slurm jobs import tests/_executor_helpers.py (as tests._executor_helpers)."""
    # pickled by reference (tests._executor_helpers): the workers import it from the checkout. Not tests/ itself
    # on the path: its room folders (tests/methods, tests/tasks …) would shadow the project's packages
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    from tests._executor_helpers import fake_execute

    return fake_execute


def test_gpu_pool_without_devices_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TOKXFER_GPUS", raising=False)
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ExecutorError, match="no CUDA device"):
        GpuPoolExecutor()
    monkeypatch.setenv("TOKXFER_GPUS", "3,5")
    assert GpuPoolExecutor().gpus == ["3", "5"]


def test_gpu_pool_worker_killed_mid_trial_is_recorded_and_the_grid_goes_on(tmp_path, importable_helpers):
    cfg = _cfg()
    ex = GpuPoolExecutor(gpus=["0", "1"], progress=False)
    summary = run_experiment(cfg, tmp_path, executor=ex, progress=False, trial_fn=importable_helpers)
    recs = {r["seed"]: r for r in records.iter_records(tmp_path / "exp")}
    assert sorted(recs) == [1, 2, 3, 4]
    assert recs[2]["status"] == "failed" and "died" in recs[2]["error"]["message"]
    assert recs[2]["error"]["type"] == "WorkerLost"
    assert all(recs[s]["status"] == "ok" for s in (1, 3, 4))
    assert {recs[s]["environment"]["cuda_visible_devices"] for s in (1, 3, 4)} <= {"0", "1"}
    assert summary.ran == 4 and summary.failed == 1
    assert not list((tmp_path / "exp" / "claims").glob("*.claim"))


@pytest.mark.slow
def test_gpu_pool_workers_load_plugins_and_run_real_trials(tmp_path, tiny_source, tiny_pretrain_overrides):
    from harness import registry

    registry.load_plugin(PLUGIN)
    cfg = parse_experiment({
        "name": "exp", "world": {"size": "tiny"}, "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
        "targets": [{"language": "near", "tokenizer": {"vocab_size": 300}}], "methods": ["random"],
        "tasks": [{"name": "counted-mlm", "config": {"max_eval_examples": 8, "batch_size": 8}}], "seeds": [1, 2],
    })
    ex = GpuPoolExecutor(gpus=["0", "1"], progress=False, plugins=[str(PLUGIN)])
    summary = run_experiment(cfg, tmp_path, executor=ex, progress=False)
    recs = list(records.iter_records(tmp_path / "exp"))
    assert summary.failed == 0, [r.get("error") for r in recs]
    assert len(recs) == 2 and all(r["status"] == "ok" and r["metrics"]["near"]["loss"] > 0 for r in recs)


def test_gpu_pool_worker_that_cannot_load_a_plugin_is_a_clear_error(tmp_path, importable_helpers):
    bad = tmp_path / "bad_plugin.py"
    bad.write_text("import no_such_module_anywhere\n")
    ex = GpuPoolExecutor(gpus=["0"], progress=False, plugins=[str(bad)])
    with pytest.raises(ExecutorError, match="bad_plugin.py.*no_such_module_anywhere"):
        run_experiment(_cfg(seeds=(1,)), tmp_path, executor=ex, progress=False, trial_fn=importable_helpers)
    assert not list((tmp_path / "exp" / "records").glob("*.json"))


def test_slurm_through_submitit_local_records_a_killed_job(tmp_path, importable_helpers):
    cfg = _cfg(seeds=(1, 2, 3))
    ex = SlurmExecutor(tmp_path / "slurm", {"timeout_min": 5}, progress=False, cluster="local")
    summary = run_experiment(cfg, tmp_path / "runs", executor=ex, progress=False, trial_fn=importable_helpers)
    recs = {r["seed"]: r for r in records.iter_records(tmp_path / "runs" / "exp")}
    assert sorted(recs) == [1, 2, 3]
    assert recs[2]["status"] == "failed" and "Slurm job" in recs[2]["error"]["message"]
    assert recs[1]["status"] == recs[3]["status"] == "ok"
    assert summary.ran == 3 and summary.failed == 1


@pytest.mark.slow
def test_cli_slurm_executor_runs_a_real_trial(tmp_path, tiny_source, tiny_pretrain_overrides, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "exp", "world": {"size": "tiny"}, "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
        "targets": [{"language": "near", "tokenizer": {"vocab_size": 300}}], "methods": ["overlap"],
        "tasks": [{"name": "mlm-at-init", "config": {"max_eval_examples": 8}}], "seeds": [1],
    }))
    load_experiment(exp)
    runs = tmp_path / "runs"
    assert main(["run", str(exp), "--runs-dir", str(runs), "--executor", "slurm", "--slurm-cluster", "local",
                 "--slurm-param", "timeout_min=5", "--no-tracking", "--quiet"]) == 0, capsys.readouterr().err
    assert "ran 1" in capsys.readouterr().out
    assert (runs / "exp" / "slurm").is_dir()
    (rec,) = records.iter_records(runs / "exp")
    assert rec["status"] == "ok"
