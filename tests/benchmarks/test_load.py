"""``benchmarks/_load.py``: a benchmark's load readings, and no ratio reported from a busy machine."""

from __future__ import annotations

import itertools
import os

import pytest

from benchmarks import _load

REAL_BUSY_SECONDS = _load.system_busy_seconds


@pytest.fixture(autouse=True)
def _no_proc_stat(monkeypatch):
    """The load-average rule unless a test says otherwise: the machine's real busy time (other tests, other
    jobs) must not decide these tests' verdicts."""
    monkeypatch.setattr(_load, "system_busy_seconds", lambda: None)


def _fake_load(monkeypatch, values: list[float]) -> None:
    """``os.getloadavg`` returns ``values`` in turn (then the last one forever)."""
    it = itertools.chain(values, itertools.repeat(values[-1]))
    monkeypatch.setattr(os, "getloadavg", lambda: (next(it), 0.5, 0.5))


def test_an_idle_run_reports_its_ratio(monkeypatch):
    _fake_load(monkeypatch, [0.3, 0.4])
    with _load.LoadMonitor(max_load=2, interval=60) as mon:
        pass
    rec = mon.record()
    assert rec["before"] == [0.3, 0.5, 0.5] and rec["after"] == [0.4, 0.5, 0.5]
    assert rec["max_1min"] == 0.4 and not rec["busy"] and rec["samples"] == 2
    assert _load.ratio(9.0, 3.0, rec) == {"value": 3.0, "on_busy_machine": None}
    assert "!" not in mon.banner() and "idle enough" in mon.banner()


def test_a_busy_reading_while_it_ran_withholds_every_ratio(monkeypatch):
    _fake_load(monkeypatch, [0.3, 5.0, 0.4])  # busy only in the middle: a sample taken while the block ran
    with _load.LoadMonitor(max_load=2, interval=0.01) as mon:
        while len(mon.samples) < 2:
            pass
    rec = mon.record()
    assert rec["busy"] and rec["max_1min"] == 5.0
    sp = _load.speedups({"seconds": 10.0, "cpu_seconds": 8.0}, {"seconds": 2.0, "cpu_seconds": 4.0}, rec)
    assert sp == {"speedup": {"value": None, "on_busy_machine": 5.0}, "speedup_cpu": {"value": None, "on_busy_machine": 2.0}}
    assert _load.shown(sp["speedup"]) == "5.0x ON A BUSY MACHINE (not a result)"
    fig = _load.target_speed(30.0, 1.0, 40.0, 10.0, 20.0, rec)
    assert fig["target_met"] is None and fig["method"]["value"] is None and fig["process"]["on_busy_machine"] == 4.0
    assert "not judged" in _load.speed_line("ref", 30.0, 1.0, fig)
    text = mon.banner()
    assert text.startswith("!!!") and "BUSY" in text and "5.00 > 2" in text


def test_the_limit_defaults_to_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    _fake_load(monkeypatch, [3.5])
    with _load.LoadMonitor(interval=60) as mon:
        pass
    assert mon.cores == 3 and mon.max_load == 3.0 and mon.record()["busy"]


def test_combine_is_busy_when_any_phase_was(monkeypatch):
    _fake_load(monkeypatch, [0.5])
    with _load.LoadMonitor(max_load=2, interval=60) as idle:
        pass
    _fake_load(monkeypatch, [2.5])
    with _load.LoadMonitor(max_load=2, interval=60) as busy:
        pass
    both = _load.combine([idle.record(), busy.record()])
    assert both["busy"] and both["max_1min"] == 2.5 and both["phases"] == 2 and both["before"] == [0.5, 0.5, 0.5]
    assert not _load.combine([idle.record()])["busy"]
    assert _load.combine([])["phases"] == 0


@pytest.mark.parametrize("target,met", [(5.0, True), (50.0, False)])
def test_an_idle_figure_is_judged_against_its_target(target, met):
    fig = _load.target_speed(30.0, 3.0, 40.0, 20.0, target, {"busy": False})
    assert fig["method"]["value"] == 10.0 and fig["process"]["value"] == 2.0 and fig["target_met"] is met


@pytest.mark.skipif(REAL_BUSY_SECONDS() is None, reason="needs /proc/stat")
def test_foreign_cpu_counts_a_process_the_benchmark_did_not_start_or_wait_for():
    """A busy loop in another process shows up as foreign CPU; this process's own spinning, subtracted as
    the benchmark's own, does not."""
    import subprocess
    import sys
    import time

    def own_cpu() -> float:
        t = os.times()
        return t.user + t.system

    burner = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: pass"])
    try:
        time.sleep(0.3)  # the burner is running
        busy0, own0, t0 = REAL_BUSY_SECONDS(), own_cpu(), time.perf_counter()
        while time.perf_counter() - t0 < 1.5:
            pass  # this process spins too: its CPU is the benchmark's own
        wall = time.perf_counter() - t0
        rec = _load.foreign_cpu(busy0, REAL_BUSY_SECONDS(), own_cpu() - own0, wall)
    finally:
        burner.kill()
        burner.wait()
    assert rec["busy"] is True and rec["cores"] >= 0.4  # the burner's share of a core at least


def test_foreign_cpu_without_proc_stat_judges_nothing():
    assert _load.foreign_cpu(None, 5.0, 1.0, 1.0) == {"cpu_s": None, "cores": None, "limit": 0.25, "busy": None}
    assert _load.foreign_cpu(1.0, 5.0, 1.0, 0.0)["busy"] is None


def test_the_monitor_judges_by_foreign_cpu_where_it_is_known(monkeypatch):
    """With /proc/stat the CPU of other processes decides, whatever the load average says (here 3.0 on any
    machine: this benchmark's own workers, or a neighbour's decaying average); without it the load does."""
    _fake_load(monkeypatch, [3.0])
    clock = iter([100.0, 100.0])  # the machine's busy seconds at start and stop: nobody else ran
    monkeypatch.setattr(_load, "system_busy_seconds", lambda: next(clock))
    with _load.LoadMonitor(max_load=2, interval=60) as mon:
        pass
    rec = mon.record()
    assert rec["rule"] == "foreign CPU" and rec["max_1min"] == 3.0 and rec["busy"] is False
    assert rec["foreign_cpu"]["cpu_s"] == 0.0 and rec["verdict"].startswith("idle enough: other processes took")
    assert _load.ratio(9.0, 3.0, rec) == {"value": 3.0, "on_busy_machine": None}
    clock = iter([100.0, 160.0])  # 60 busy seconds in a block of a few milliseconds: someone else ran
    with _load.LoadMonitor(max_load=2, interval=60) as busy:
        pass
    rec = busy.record()
    assert rec["busy"] is True and rec["foreign_cpu"]["busy"] is True and "!" in busy.banner()
    assert _load.ratio(9.0, 3.0, rec) == {"value": None, "on_busy_machine": 3.0}
    monkeypatch.setattr(_load, "system_busy_seconds", lambda: None)
    with _load.LoadMonitor(max_load=2, interval=60) as fallback:
        pass
    assert fallback.record()["rule"] == "load average" and fallback.record()["busy"] is True  # 3.0 > max_load 2


def test_children_the_block_waited_for_are_its_own_cpu():
    """A child's CPU, once waited for, is the benchmark's own (it is not foreign)."""
    import subprocess
    import sys

    before = _load.process_tree_cpu_s()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"], check=True)
    assert _load.process_tree_cpu_s() - before >= 0.45
