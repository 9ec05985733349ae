"""``kill -9`` at random moments of a tracked grid — including the first use of the sqlite MLflow
store — then resume and sync: no record lost, duplicated or corrupt, and the store is usable and
holds exactly one run per record."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.run import records
from harness.run.store import check_sqlite_store
from harness.run.tracking import make_tracker

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "tests" / "fixtures" / "plugins" / "counted_task.py"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args]


@pytest.mark.slow
def test_random_kills_then_resume_and_sync(tmp_path, tiny_source, tiny_pretrain_overrides):
    exp = tmp_path / "grid.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "grid", "world": {"size": "tiny", "seed": 0},
        "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
        "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
        "methods": ["random", "overlap"],
        "tasks": [{"name": "counted-mlm", "config": {"max_eval_examples": 8, "batch_size": 8}}],
        "seeds": [1, 2, 3],
    }))
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKXFER_COUNT_FILE": str(tmp_path / "count.txt"),
           "TOKXFER_COUNT_SLEEP": "0.5"}
    run = _cli("run", str(exp), "--runs-dir", str(runs), "--plugin", str(PLUGIN), "--quiet")
    rng = random.Random(1)
    kills = 0
    # the first kill lands early: importing and creating the MLflow store take the first seconds
    for delay in (rng.uniform(2.0, 6.0), rng.uniform(4.0, 12.0), rng.uniform(4.0, 12.0)):
        proc = subprocess.Popen(run, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        db = runs / "mlflow.db"
        assert not db.exists() or check_sqlite_store(db) is None, f"store broken after a kill at {delay:.1f}s"
        for p in (runs / "grid" / "records").glob("*.json") if (runs / "grid" / "records").is_dir() else []:
            records.load_record(p)  # never a corrupt record
    assert kills >= 1
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "tracking:" not in done.stderr, done.stderr
    sync = subprocess.run(_cli("sync", str(runs / "grid")), env=env, capture_output=True, text=True, timeout=600)
    assert sync.returncode == 0, sync.stderr
    recs = list(records.iter_records(runs / "grid"))
    assert len(recs) == 6 and len({r["trial_id"] for r in recs}) == 6
    assert all(r["status"] == "ok" for r in recs)
    assert json.loads(sync.stdout.split(": ", 1)[1].replace("'", '"'))["unchanged"] == 6, sync.stdout
    mirrored = make_tracker(None, runs).mirrored("grid")
    assert {tid: len(v) for tid, v in mirrored.items()} == {r["trial_id"]: 1 for r in recs}
    assert not list((runs / "grid" / "claims").glob("*.claim"))
