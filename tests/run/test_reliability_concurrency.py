"""Several ``tokxfer run`` processes on one experiment and runs dir split the grid: every trial
runs exactly once, and a process killed mid-grid leaves claims the others take over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.run import records
from harness.run.claims import TrialClaims

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "tests" / "fixtures" / "plugins" / "counted_task.py"


def _experiment(tmp_path: Path, overrides: dict, seeds: int) -> Path:
    raw = {
        "name": "grid",
        "world": {"size": "tiny", "seed": 0},
        "source": {"model": "world:mlm", "pretrain": overrides},
        "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
        "methods": ["random", "overlap"],
        "tasks": [{"name": "counted-mlm", "config": {"max_eval_examples": 8, "batch_size": 8}}],
        "seeds": list(range(1, seeds + 1)),
    }
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def _start(exp: Path, runs: Path, count_file: Path, sleep: float, extra=()) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKXFER_COUNT_FILE": str(count_file),
           "TOKXFER_COUNT_SLEEP": str(sleep)}
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(exp), "--runs-dir", str(runs), "--plugin", str(PLUGIN),
         "--quiet", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _check_grid(runs: Path, count_file: Path, n_trials: int) -> Counter:
    recs = list(records.iter_records(runs / "grid"))
    assert len(recs) == n_trials and len({r["trial_id"] for r in recs}) == n_trials
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs if r["status"] != "ok"]
    runs_per_trial = Counter(tuple(line.split()[:2]) for line in count_file.read_text().splitlines())
    return runs_per_trial


@pytest.mark.slow
@pytest.mark.parametrize("n_procs", [2, 3])
def test_concurrent_runs_split_the_grid_and_run_each_trial_once(tmp_path, tiny_source, tiny_pretrain_overrides, n_procs):
    runs, count = tmp_path / "runs", tmp_path / "count.txt"
    exp = _experiment(tmp_path, tiny_pretrain_overrides, seeds=3)  # 2 methods x 3 seeds = 6 trials
    procs = [_start(exp, runs, count, sleep=1.5, extra=["--no-tracking"]) for _ in range(n_procs)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ran = [int(out.split("ran ")[1].split(",")[0]) for out, _ in outs]
    assert sum(ran) == 6, outs
    # the count file has one line per task run: seeds 1..3 x 2 methods, each seed line twice (two methods)
    per_seed = _check_grid(runs, count, 6)
    assert sum(per_seed.values()) == 6 and all(v == 2 for v in per_seed.values())
    assert sum(1 for r in ran if r > 0) >= 2, f"the work was not split: {ran}"
    assert not list((runs / "grid" / "claims").glob("*.claim")), "claims are released"


@pytest.mark.slow
def test_claims_of_a_killed_run_are_taken_over(tmp_path, tiny_source, tiny_pretrain_overrides):
    runs, count = tmp_path / "runs", tmp_path / "count.txt"
    exp = _experiment(tmp_path, tiny_pretrain_overrides, seeds=2)  # 4 trials
    first = _start(exp, runs, count, sleep=30)  # its first trial hangs long enough to be killed in it
    claims = runs / "grid" / "claims"
    deadline = time.monotonic() + 300
    while not list(claims.glob("*.claim")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(claims.glob("*.claim")), first.communicate()[1]
    first.send_signal(signal.SIGKILL)
    first.wait()
    stale = [json.loads(p.read_text()) for p in claims.glob("*.claim")]
    assert stale and stale[0]["pid"] == first.pid
    second = _start(exp, runs, count, sleep=0)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert "ran 4" in out
    _check_grid(runs, count, 4)


def test_claim_takeover_rules(tmp_path):
    a, b = TrialClaims(tmp_path, stale_after_s=60), TrialClaims(tmp_path, stale_after_s=60)
    assert a.acquire("t") and not b.acquire("t")
    # a dead owner on this host: taken over at once
    info = json.loads(a.path("t").read_text())
    a.path("t").write_text(json.dumps({**info, "pid": 2**22 + 12345}))  # no such pid
    assert b.acquire("t") and json.loads(b.path("t").read_text())["pid"] == os.getpid()
    # a live owner on another host: taken over only when its heartbeat is old
    b.path("t").write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "x"}))
    assert not a.acquire("t")
    old = time.time() - 120
    os.utime(b.path("t"), (old, old))
    assert a.acquire("t")
    # releasing a claim someone else took over does not remove theirs
    b.release("t")
    assert a.path("t").exists()
    a.close()
    assert not a.path("t").exists()


def test_heartbeat_keeps_a_held_claim_fresh(tmp_path):
    c = TrialClaims(tmp_path, heartbeat_s=0.05)
    assert c.acquire("t")
    old = time.time() - 1000
    os.utime(c.path("t"), (old, old))
    time.sleep(0.3)
    assert time.time() - c.path("t").stat().st_mtime < 5
    c.close()
