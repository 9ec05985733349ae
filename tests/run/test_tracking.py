"""Tracking: the MLflow mirror on an embedded sqlite store and on a real ``mlflow server``.

Records are synthetic. One sqlite store is shared by the module (creating an MLflow database
takes several seconds); each test uses its own experiment names.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.protocols import Tracker
from harness.run.records import TrialRecord
from harness.run.sync import sync
from harness.run.tracking import (
    DIGEST_TAG,
    HTTP_LIMITS,
    PARENT_RUN_TAG,
    MLflowTracker,
    NullTracker,
    TrackingError,
    default_tracking_uri,
    make_tracker,
    record_params,
    ui_command,
)

as_record = TrialRecord.from_json  # trackers take the typed record


def make_record(experiment: str, trial_id: str, seed: int = 1, method: str = "focus", status: str = "ok", **extra) -> dict:
    """A synthetic trial record in the schema of docs/CONTRACTS.md."""
    ok = status == "ok"
    record = {
        "schema_version": 1,
        "tokxfer_version": "0.1.0",
        "git": {"sha": "0123abc", "dirty": False},
        "experiment": experiment,
        "trial_id": trial_id,
        "status": status,
        "error": None if ok else "Traceback (most recent call last):\n  RuntimeError: boom",
        "config": {
            "source": {"model": "world-tiny", "revision": None},
            "target": {"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 1000}},
            "method": {"id": method, "name": method, "config": {"k": 10, "temperature": 0.1, "notes": "x" * 7000}},
            "encoding": {"name": "none", "config": {}},
            "stages": [{"name": "lapt", "steps": 40}],
            "task": {"name": "mlm-at-init", "config": {"max_eval_examples": 64}},
            "seed": seed,
        },
        "seed": seed,
        "metrics": {"near": {"loss": 6.0 + 0.1 * seed, "accuracy": 0.2}} if ok else {},
        "init": {
            "counts": {"special": 5, "copied": 100, "combined": 900, "fallback": 3},
            "info": {"overlap": {"exact": 100}},
            "diagnostics": {"gold_top1": 0.4, "gold_top5": 0.6, "gold_cosine": 0.5, "gold_pairs": 812},
        },
        "counts": {"near": {"test": 64}},
        "curves": {"lapt_loss": [[step, 9.0 - step / 1000] for step in range(0, 1500)]},
        "timings": {"init_s": 1.2, "task_s": 3.4, "total_s": 5.0},
        "revisions": {},
        "environment": {"python": "3.11.7", "torch": "2.13.0", "device": "cpu"},
        "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": "2025-01-01T00:00:05+00:00",
    }
    record.update(extra)
    return record


def write_records(runs_dir: Path, experiment: str, records: list[dict]) -> Path:
    d = runs_dir / experiment / "records"
    d.mkdir(parents=True, exist_ok=True)
    for r in records:
        (d / f"{r['trial_id']}.json").write_text(json.dumps(r))
    return runs_dir / experiment


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, MLflowTracker]:
    runs = tmp_path_factory.mktemp("runs")
    tracker = make_tracker(None, runs)
    assert isinstance(tracker, MLflowTracker)
    return runs, tracker


def _children(tracker: MLflowTracker, experiment: str) -> list:
    eid = tracker.client.get_experiment_by_name(experiment).experiment_id
    return tracker.client.search_runs([eid], filter_string="tags.`tokxfer.role` = 'trial'", max_results=1000)


def _parents(tracker: MLflowTracker, experiment: str) -> list:
    eid = tracker.client.get_experiment_by_name(experiment).experiment_id
    return tracker.client.search_runs([eid], filter_string="tags.`tokxfer.role` = 'experiment'", max_results=1000)


def test_trackers_satisfy_protocol(tmp_path):
    assert isinstance(NullTracker(), Tracker)
    assert isinstance(MLflowTracker(default_tracking_uri(tmp_path), runs_dir=tmp_path), Tracker)
    NullTracker().log_trial("x", as_record(make_record("x", "t")))


def test_make_tracker_and_ui_command(tmp_path):
    t = make_tracker(None, tmp_path)
    assert isinstance(t, MLflowTracker) and t.tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert isinstance(make_tracker("none", tmp_path), NullTracker)
    assert make_tracker("http://127.0.0.1:5000", tmp_path).tracking_uri == "http://127.0.0.1:5000"
    with pytest.raises(ValueError, match="sqlite"):
        make_tracker(str(tmp_path / "mlruns"), tmp_path)
    with pytest.raises(ValueError, match="sqlite"):
        make_tracker("file:///tmp/mlruns", tmp_path)
    assert ui_command(tmp_path) == f"mlflow ui --backend-store-uri sqlite:///{tmp_path.resolve()}/mlflow.db"


def test_params_metrics_curves_and_artifacts_land(store, tmp_path, monkeypatch):
    runs, tracker = store
    monkeypatch.chdir(tmp_path)  # MLflow must not write ./mlruns or ./mlartifacts into the cwd
    info = tmp_path / "init_info.json"
    info.write_text(json.dumps({"overlap": 100}))
    record = make_record("landing", "trial-a")
    tracker.log_trial("landing", as_record(record), artifacts=[info, tmp_path / "does-not-exist.json"])

    run_id = tracker.run_id_for("landing", "trial-a")
    run = tracker.client.get_run(run_id)
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["method.id"] == "focus" and params["method.config.k"] == "10"
    assert params["target.tokenizer.vocab_size"] == "1000" and params["seed"] == "1"
    assert json.loads(params["stages"]) == [{"name": "lapt", "steps": 40}]
    assert params["source.revision"] == "null"
    assert len(params["method.config.notes"]) == 6000 and params["method.config.notes"].endswith("[truncated]")
    assert params == record_params(as_record(record))
    assert metrics["metrics.near.loss"] == pytest.approx(6.1)
    assert metrics["metrics.near.accuracy"] == pytest.approx(0.2)
    assert metrics["init.counts.copied"] == 100 and metrics["init.counts.fallback"] == 3
    assert metrics["init.diagnostics.gold_top1"] == pytest.approx(0.4)
    assert metrics["timings.total_s"] == pytest.approx(5.0) and metrics["counts.near.test"] == 64
    history = tracker.client.get_metric_history(run_id, "curves.lapt_loss")
    assert len(history) == 1500  # > 1000: more than one log_batch chunk
    assert sorted(m.step for m in history) == list(range(1500))
    assert tags["tokxfer.trial_id"] == "trial-a" and tags["tokxfer.status"] == "ok"
    assert tags["mlflow.source.git.commit"] == "0123abc" and tags[DIGEST_TAG]
    assert run.info.status == "FINISHED"
    assert run.info.start_time == 1735689600000 and run.info.end_time == 1735689605000
    artifacts = {a.path for a in tracker.client.list_artifacts(run_id)}
    assert artifacts == {"record.json", "init_info.json"}
    assert run.info.artifact_uri.startswith((runs / "mlartifacts").resolve().as_uri())
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "mlartifacts").exists()
    parent = tracker.client.get_run(tags[PARENT_RUN_TAG])
    assert parent.data.tags["tokxfer.role"] == "experiment"


def test_sync_twice_does_not_duplicate_and_nests(store):
    runs, tracker = store
    exp = "syncing"
    records = [make_record(exp, f"t{i}", seed=i) for i in range(1, 5)]
    records.append(make_record(exp, "t-failed", status="failed"))
    exp_dir = write_records(runs, exp, records)

    assert sync(exp_dir, tracker) == {"created": 5, "replaced": 0, "unchanged": 0, "logged": 0}
    # A second tracker (a later `tokxfer sync` process) finds the same parent and children.
    again = MLflowTracker(tracker.tracking_uri, runs_dir=runs)
    assert sync(exp_dir / "records", again) == {"created": 0, "replaced": 0, "unchanged": 5, "logged": 0}

    children, parents = _children(tracker, exp), _parents(tracker, exp)
    assert len(children) == 5 and len(parents) == 1
    assert {c.data.tags[PARENT_RUN_TAG] for c in children} == {parents[0].info.run_id}
    assert sorted(c.data.tags["tokxfer.trial_id"] for c in children) == ["t-failed", "t1", "t2", "t3", "t4"]
    failed = next(c for c in children if c.data.tags["tokxfer.trial_id"] == "t-failed")
    assert failed.info.status == "FAILED" and "boom" in failed.data.tags["tokxfer.error"]

    # The failed trial is re-run: its record changes, the mirror is replaced, not duplicated.
    fixed = make_record(exp, "t-failed", seed=9)
    write_records(runs, exp, [fixed])
    assert sync(exp_dir, again) == {"created": 0, "replaced": 1, "unchanged": 4, "logged": 0}
    children = _children(tracker, exp)
    assert len(children) == 5
    fixed_run = next(c for c in children if c.data.tags["tokxfer.trial_id"] == "t-failed")
    assert fixed_run.info.status == "FINISHED" and fixed_run.data.metrics["metrics.near.loss"] == pytest.approx(6.9)

    # Re-running the grid (runner calls log_trial again) does not duplicate either.
    tracker.log_trial(exp, as_record(records[0]))
    assert len(_children(tracker, exp)) == 5

    # A mirror that stopped half-way (no digest tag: it is written last) is replaced on sync.
    tracker.client.delete_tag(again.run_id_for(exp, "t1"), DIGEST_TAG)
    assert sync(exp_dir, again) == {"created": 0, "replaced": 1, "unchanged": 4, "logged": 0}
    assert len(_children(tracker, exp)) == 5 and len(_parents(tracker, exp)) == 1


def test_sync_with_null_tracker_counts(tmp_path):
    exp_dir = write_records(tmp_path, "e", [make_record("e", "a"), make_record("e", "b")])
    assert sync(exp_dir, NullTracker())["logged"] == 2


def test_unwritable_sqlite_store_raises_tracking_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    tracker = MLflowTracker(f"sqlite:///{blocker}/mlflow.db", runs_dir=tmp_path)
    with pytest.raises(TrackingError, match="record is safe on disk") as info:
        tracker.log_trial("e", as_record(make_record("e", "t1")))
    assert f"tokxfer sync {tmp_path}/e --tracking-uri sqlite:///{blocker}/mlflow.db" in str(info.value)


SERVER_START_TIMEOUT_S = int(os.environ.get("TOKXFER_TEST_SERVER_TIMEOUT", "120"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "192.0.2.1:5000"], ids=["refused", "blackhole"])
def test_unreachable_server_fails_fast_with_sync_command(tmp_path, host):
    uri = "http://" + host.format(port=_free_port())
    tracker = make_tracker(uri, tmp_path)
    record = make_record("quick", "t1")
    env_before = {k: os.environ.get(k) for k in HTTP_LIMITS}
    t0 = time.monotonic()
    with pytest.raises(TrackingError) as info:
        tracker.log_trial("quick", as_record(record))
    elapsed = time.monotonic() - t0
    assert elapsed < 15, f"took {elapsed:.1f}s"
    msg = str(info.value)
    assert "record is safe on disk" in msg
    assert f"tokxfer sync {tmp_path}/quick --tracking-uri {uri}" in msg
    assert info.value.sync_command == f"tokxfer sync {tmp_path}/quick --tracking-uri {uri}"
    # The next trial does not wait again.
    t0 = time.monotonic()
    with pytest.raises(TrackingError):
        tracker.log_trial("quick", as_record(make_record("quick", "t2")))
    assert time.monotonic() - t0 < 1.0
    # Our bounded retry settings did not leak into the environment.
    assert {k: os.environ.get(k) for k in HTTP_LIMITS} == env_before


def test_server_error_gives_tracking_error(tmp_path):
    """A server that is up (/health 200) but fails every API call (HTTP 500)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            ok = self.path.startswith("/health")
            body = b"OK" if ok else b'{"error_code": "INTERNAL_ERROR", "message": "db on fire"}'
            self.send_response(200 if ok else 500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_PUT = _answer

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        tracker = make_tracker(uri, tmp_path)
        t0 = time.monotonic()
        with pytest.raises(TrackingError, match="record is safe on disk") as info:
            tracker.log_trial("e", as_record(make_record("e", "t1")))
        assert time.monotonic() - t0 < 15
        assert info.value.sync_command == f"tokxfer sync {tmp_path}/e --tracking-uri {uri}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.server
def test_real_mlflow_server(tmp_path):
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("wb")
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
        "--artifacts-destination", str(tmp_path / "server-artifacts"),
        "--workers", "1",
    ]  # fmt: skip
    # No background job runner (an extra process importing mlflow): it only slows the start-up.
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, start_new_session=True)
    try:
        import requests

        # ~9 s on an idle machine, but 47-65 s measured on 2 cores shared by 8 busy users
        # (load average ~9.5): the server imports mlflow twice (CLI, then the uvicorn worker).
        deadline = t0 + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            try:
                if requests.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy after {SERVER_START_TIMEOUT_S} s:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        startup = time.monotonic() - t0
        print(f"mlflow server healthy after {startup:.1f} s")

        runs = tmp_path / "runs"
        tracker = make_tracker(uri, runs)
        exp = "server-exp"
        info = tmp_path / "init_info.json"
        info.write_text("{}")
        tracker.log_trial(exp, as_record(make_record(exp, "s1", seed=1)), artifacts=[info])
        exp_dir = write_records(runs, exp, [make_record(exp, "s1", seed=1), make_record(exp, "s2", seed=2)])
        assert sync(exp_dir, tracker) == {"created": 1, "replaced": 0, "unchanged": 1, "logged": 0}
        assert sync(exp_dir, make_tracker(uri, runs)) == {"created": 0, "replaced": 0, "unchanged": 2, "logged": 0}

        children, parents = _children(tracker, exp), _parents(tracker, exp)
        assert len(children) == 2 and len(parents) == 1
        assert {c.data.tags[PARENT_RUN_TAG] for c in children} == {parents[0].info.run_id}
        run_id = tracker.run_id_for(exp, "s1")
        run = tracker.client.get_run(run_id)
        assert run.data.metrics["metrics.near.loss"] == pytest.approx(6.1)
        assert len(tracker.client.get_metric_history(run_id, "curves.lapt_loss")) == 1500
        assert {a.path for a in tracker.client.list_artifacts(run_id)} == {"record.json", "init_info.json"}
        assert (tmp_path / "server-artifacts").exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group (its workers)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()
