"""The build lock says when a process waits for another's build, but not for a moment's wait."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time

import harness.cache as cache


def _hold(path, seconds: float) -> threading.Event:
    """Hold ``path``'s flock from another open file (as another worker would) for ``seconds``."""
    taken = threading.Event()

    def run():
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        taken.set()
        time.sleep(seconds)
        os.close(fd)

    threading.Thread(target=run, daemon=True).start()
    assert taken.wait(5)
    return taken


def test_a_short_wait_is_quiet_and_a_long_one_is_said(tmp_path, monkeypatch, caplog):
    lock = tmp_path / "x.lock"
    monkeypatch.setattr(cache, "QUIET_WAIT_S", 1.0)
    with caplog.at_level(logging.WARNING, logger=cache.log.name):
        _hold(lock, 0.2)
        start = time.monotonic()
        with cache._build_lock(lock, "test entry"):
            waited = time.monotonic() - start
    assert 0.1 < waited < 1.0  # it did wait for the holder
    assert not [r for r in caplog.records if "waiting for another process" in r.getMessage()]

    monkeypatch.setattr(cache, "QUIET_WAIT_S", 0.1)
    with caplog.at_level(logging.WARNING, logger=cache.log.name):
        _hold(lock, 0.6)
        with cache._build_lock(lock, "test entry"):
            pass
    said = [r.getMessage() for r in caplog.records if "waiting for another process" in r.getMessage()]
    assert said == [f"waiting for another process building the test entry (lock {lock})"]
