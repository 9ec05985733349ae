"""The silence the scale benchmark measures, on a slow fake step run through ``tokxfer init``'s own reporting.

``bench_scale.run_child`` captures a child process's stdout and stderr as the benchmark does; the child
reports as ``tokxfer init`` does in a log (:class:`harness.cli.init_checks.Notes` lines, the CLI's bar
factory, which gives plain line bars when stderr is not a terminal), with the heartbeat interval scaled
down from 8 s to 0.2 s. A step that prints nothing itself (a sleep in place of fastText's C++ trainer,
which releases the GIL as a sleep does) must still show heartbeat lines, and a loop of slow updates (the
similarity search's chunks) must print before the interval runs out, not one update after it.
"""

from __future__ import annotations

import re
import sys

from benchmarks import bench_scale as bs

CHILD = r"""
import time
from harness import progress
progress.HEARTBEAT_S = 0.2
from harness.cli.init_checks import Notes
from harness.cli.init_cmd import _bar_factory
notes = Notes()
with progress.reporting(_bar_factory(notes), lines=notes.note):
    notes.note("starting")
    with progress.heartbeat("fake trainer"):
        time.sleep(1.5)
    bar = progress.counter("fake search (query rows)", 8)
    for _ in range(8):
        time.sleep(0.15)
        bar.update(1)
    bar.close()
    notes.note("finished")
"""


def test_captured_output_has_heartbeats_and_bar_lines_within_the_interval(tmp_path):
    res = bs.run_child([sys.executable, "-c", CHILD], bs.child_env(2, tmp_path / "cache"), tmp_path / "log", timeout=120)
    log = (tmp_path / "log").read_text()
    assert res["exit"] == 0, log
    beats = re.findall(r"^\[ *[\d.]+s\] fake trainer: \d+s elapsed$", log, re.M)
    assert len(beats) >= 5, log  # 1.5 s of silence from the trainer, a line every 0.2 s
    bar = re.findall(r"^\[ *[\d.]+s\] fake search \(query rows\): (\d)/8 ", log, re.M)
    assert bar[0] == "0" and bar[-1] == "8" and len(bar) >= 5, log  # a line when it starts, then about every 0.2 s
    after_start = [g for g in res["silences"] if g["after"] != "(start)"]  # (the child's imports come first)
    assert after_start and after_start[0]["seconds"] < 0.6, res["silences"]  # a few intervals at most, even loaded
    assert "\r" not in log


def test_a_line_bar_writes_before_the_interval_runs_out(monkeypatch):
    """Updates every 3 s with an 8 s interval: a line at the start, then at 6 s (the update at 9 s would be
    late), 12 s, 18 s …: never more than 8 s without a line (the bar used to write at 9 s, 18 s: 9 s gaps)."""
    from harness import progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out: list[tuple[float, str]] = []
    with progress.reporting(progress.line_bars(lambda s: out.append((now[0] - 100, s)), every=8)):
        bar = progress.counter("search", 10)
        for _ in range(10):
            now[0] += 3
            bar.update(1)
        bar.close()
    times = [t for t, _ in out]
    assert times == [0, 6, 12, 18, 24, 30, 30] and out[0][1] == "search: 0/10 (0%), 0s elapsed"
    assert out[-1][1] == "search: 10/10 (100%), 30s elapsed, done"
