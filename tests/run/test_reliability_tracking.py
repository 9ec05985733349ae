"""The embedded sqlite MLflow store survives kills during its first use, concurrent starts and
half-migrated files, is rebuilt from the records with ``tokxfer sync --rebuild``, and a resumed
run mirrors every record the store does not hold yet."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.run.records import TrialRecord
from harness.run.store import StoreBrokenError, check_sqlite_store, ensure_sqlite_store
from harness.run.tracking import MLflowTracker, default_tracking_uri, make_tracker

REPO = Path(__file__).resolve().parents[2]
as_record = TrialRecord.from_json  # trackers take the typed record


def _record(experiment: str, trial_id: str, seed: int = 1) -> dict:
    return {
        "schema_version": 1, "trial_id": trial_id, "experiment": experiment, "status": "ok", "error": None,
        "seed": seed, "config": {"method": {"id": "random", "name": "random", "config": {}}, "seed": seed},
        "metrics": {"near": {"loss": 6.0 + seed, "accuracy": 0.1, "perplexity": 403.4}},
        "started_at": "2025-01-01T00:00:00+00:00", "finished_at": "2025-01-01T00:00:01+00:00",
    }


def _write(runs: Path, experiment: str, recs: list[dict]) -> Path:
    d = runs / experiment / "records"
    d.mkdir(parents=True, exist_ok=True)
    for r in recs:
        (d / f"{r['trial_id']}.json").write_text(json.dumps(r))
    return runs / experiment


def _active_children(tracker: MLflowTracker, experiment: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for tid, runs in tracker.mirrored(experiment).items():
        counts[tid] = len(runs)
    return counts


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_LOGGING_LEVEL": "WARNING"}


def test_half_migrated_store_is_detected_and_rebuilt_from_records(tmp_path, capsys):
    runs = tmp_path / "runs"
    exp = _write(runs, "exp", [_record("exp", f"t{i}", seed=i) for i in range(3)])
    _write(runs, "other", [_record("other", "o1")])
    db = runs / "mlflow.db"
    # what a kill in the middle of MLflow's own first-use migration leaves behind
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    con.execute("INSERT INTO alembic_version VALUES ('451aebb31d03')")
    con.commit()
    con.close()
    assert "schema revision" in check_sqlite_store(db)
    tracker = make_tracker(None, runs)
    with pytest.raises(StoreBrokenError) as err:
        tracker.log_trial("exp", as_record(_record("exp", "t0")))
    msg = str(err.value)
    assert str(db) in msg and "--rebuild" in msg and "records are safe" in msg.lower()
    assert err.value.sync_command.startswith("tokxfer sync ") and "--rebuild" in err.value.sync_command
    # plain sync fails with the same clear message instead of MLflow's "table … already exists"
    assert main(["sync", str(exp)]) == 2
    assert "--rebuild" in capsys.readouterr().err
    assert main(["sync", str(exp), "--rebuild"]) == 0
    out = capsys.readouterr().out
    assert "moved the old store aside" in out
    assert check_sqlite_store(db) is None
    assert list(runs.glob("mlflow.db.broken-*")), "the broken store is kept for inspection"
    fresh = make_tracker(None, runs)
    assert _active_children(fresh, "exp") == {"t0": 1, "t1": 1, "t2": 1}
    assert _active_children(fresh, "other") == {"o1": 1}  # every experiment of the runs dir comes back
    # syncing again changes nothing
    assert main(["sync", str(exp)]) == 0
    assert "'unchanged': 3" in capsys.readouterr().out


def test_rebuild_refuses_non_sqlite_store_and_missing_records(tmp_path, capsys):
    exp = _write(tmp_path / "runs", "exp", [_record("exp", "t0")])
    assert main(["sync", str(exp), "--rebuild", "--tracking-uri", "http://127.0.0.1:9"]) == 2
    assert "--rebuild" in capsys.readouterr().err
    assert main(["sync", str(tmp_path / "runs" / "nope")]) == 2
    assert "no records found" in capsys.readouterr().err


def test_leftover_temp_store_of_a_killed_creator_is_cleaned(tmp_path):
    db = tmp_path / "mlflow.db"
    (tmp_path / "mlflow.db.init-999999").write_bytes(b"half a database")
    ensure_sqlite_store(db)
    assert check_sqlite_store(db) is None
    assert not list(tmp_path.glob("mlflow.db.init-*"))


_FIRST_USE = """
import sys
from harness.run.records import TrialRecord
from harness.run.tracking import make_tracker
as_record = TrialRecord.from_json
runs, exp, tid = sys.argv[1:4]
t = make_tracker(None, runs)
t.log_trial(exp, as_record({"schema_version": 1, "trial_id": tid, "status": "ok", "seed": 1, "config": {},
                  "metrics": {"near": {"loss": 1.0}}}))
print("mirrored", tid)
"""


def test_kills_during_first_use_and_concurrent_starts_never_break_the_store(tmp_path):
    """Kill the first user of a new store at random moments; then start three at once."""
    runs = tmp_path / "runs"
    runs.mkdir()
    rng = random.Random(0)
    for cycle in range(2):
        proc = subprocess.Popen([sys.executable, "-c", _FIRST_USE, str(runs), "exp", f"k{cycle}"], env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 4.0))  # importing MLflow takes ~1-2 s; creating the store several more
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        db = runs / "mlflow.db"
        assert not db.exists() or check_sqlite_store(db) is None, f"cycle {cycle}: store broken after a kill"
    procs = [subprocess.Popen([sys.executable, "-c", _FIRST_USE, str(runs), "exp", f"c{i}"], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "mirrored" in out
    assert check_sqlite_store(runs / "mlflow.db") is None
    children = _active_children(make_tracker(None, runs), "exp")
    assert {k: v for k, v in children.items() if k.startswith("c")} == {"c0": 1, "c1": 1, "c2": 1}
    assert all(v == 1 for v in children.values())


def test_resume_mirrors_records_the_store_does_not_hold(tmp_path):
    """A record written just before a kill (never mirrored) reaches the store on resume."""
    from harness.run.config import parse_experiment
    from harness.run.experiment import run_experiment

    cfg = parse_experiment({
        "name": "exp", "world": {"size": "tiny"}, "targets": [{"language": "near"}], "methods": ["random"],
        "tasks": ["mlm-at-init"], "seeds": [1, 2, 3],
    })
    runs = tmp_path / "runs"
    trials = cfg.trials()
    tracker = make_tracker(default_tracking_uri(runs), runs)
    # the records the runner writes: each with its trial's resolved config (resume checks it)
    recs = [dict(_record("exp", s.trial_id, seed=s.seed), config=json.loads(json.dumps(s.resolved()))) for s in trials]
    _write(runs, "exp", recs[:1])
    tracker.log_trial("exp", as_record(json.loads((runs / "exp" / "records" / f"{trials[0].trial_id}.json").read_text())))
    _write(runs, "exp", recs[1:])  # written, then killed before the mirror
    summary = run_experiment(cfg, runs, tracker=tracker, progress=False)
    assert summary.ran == 0 and summary.skipped == 3 and not summary.tracking_errors
    assert _active_children(make_tracker(None, runs), "exp") == {s.trial_id: 1 for s in trials}
