"""The machine's load while a benchmark ran, and whether a speed ratio taken then may be reported.

A ratio of two timings means something only when the machine was not shared: FOCUS's reference core took
32 s idle and 408 s beside a test run (FACTS.md, "Learned the hard way"). Every benchmark therefore wraps
its timed work in a :class:`LoadMonitor`, which records two things:

* the **CPU other processes took** while the block ran (:func:`foreign_cpu`): the machine's busy time from
  ``/proc/stat`` minus this process's own CPU and that of the children it waited for (``os.times``), so the
  benchmark's own threads and workers never count against it. Above :data:`FOREIGN_LIMIT_CORES` of a core on
  average the machine counts as **busy**. This is the verdict wherever ``/proc/stat`` exists.
* the **1-minute load average** when the work starts, every few seconds while it runs (a background thread)
  and when it ends, with the number of cores this process may use. It is kept for the record, and decides
  only where the foreign CPU is unknown: busy when a reading exceeds the cores (or the ``max_load`` a
  benchmark is given). The benchmark's own threads count in the load average (two busy threads read about
  2.0), and so does the slowly decaying average of work stopped just before, which is why it is not the rule.

A busy run keeps its timings, but no ratio is reported as a result: :func:`ratio` puts ``None`` where the
ratio would be and the value under ``on_busy_machine``, and :meth:`LoadMonitor.banner` prints a warning that
the output cannot be missed.

Example:
    >>> with LoadMonitor(interval=60) as mon:
    ...     pass
    >>> rec = mon.record()
    >>> sorted(rec) == sorted(["cores", "max_load", "before", "after", "max_1min", "samples", "foreign_cpu", "rule", "busy", "verdict"])
    True
    >>> ratio(10.0, 2.0, {"busy": False})
    {'value': 5.0, 'on_busy_machine': None}
    >>> ratio(10.0, 2.0, {"busy": True})
    {'value': None, 'on_busy_machine': 5.0}
    >>> shown(ratio(10.0, 2.0, {"busy": True}))
    '5.0x ON A BUSY MACHINE (not a result)'
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType

__all__ = ["cores", "load_average", "system_busy_seconds", "process_tree_cpu_s", "foreign_cpu", "FOREIGN_LIMIT_CORES", "LoadMonitor", "banner", "ratio", "combine", "speedups", "shown", "target_speed", "speed_line"]


def cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (``None`` where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def system_busy_seconds() -> float | None:
    """CPU seconds all cores of the machine have spent busy since boot (``/proc/stat``'s first line: user,
    nice, system, irq, softirq and steal time; idle and I/O wait left out); ``None`` without ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / ticks


FOREIGN_LIMIT_CORES = 0.25
"""The most CPU, in cores averaged over a timed phase, that processes other than the benchmark's own may take
for the phase to count as run on an idle machine (:func:`foreign_cpu`). Kernel threads and daemons of an idle
machine take a few hundredths; one other busy process takes half a core or more."""


def foreign_cpu(busy_before: float | None, busy_after: float | None, own_cpu_s: float, wall_s: float,
                limit: float = FOREIGN_LIMIT_CORES) -> dict:
    """The CPU the rest of the machine used while a phase ran: the machine's busy seconds
    (:func:`system_busy_seconds` before and after) minus the CPU of the benchmark's own processes
    (``own_cpu_s``: its children's ``wait4`` usage plus its own), per second of ``wall_s``.

    Unlike the load average, this does not count the benchmark's own workers, so a phase that keeps every
    core busy itself (two workers on two cores read a load of about 2) is still judged by what else ran.
    ``busy`` is ``None`` where the machine's busy time is unknown.

    Example:
        >>> foreign_cpu(100.0, 160.0, 58.5, 30.0)
        {'cpu_s': 1.5, 'cores': 0.05, 'limit': 0.25, 'busy': False}
        >>> foreign_cpu(100.0, 160.0, 40.0, 30.0)["busy"]
        True
    """
    if busy_before is None or busy_after is None or wall_s <= 0:
        return {"cpu_s": None, "cores": None, "limit": limit, "busy": None}
    cpu = max(busy_after - busy_before - own_cpu_s, 0.0)
    cores_used = cpu / wall_s
    return {"cpu_s": round(cpu, 2), "cores": round(cores_used, 3), "limit": limit, "busy": cores_used > limit}


def process_tree_cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for (``os.times``)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class LoadMonitor:
    """Reads the load average before, during (every ``interval`` seconds) and after a ``with`` block, and the
    CPU other processes took meanwhile (:func:`foreign_cpu`; children must be waited for by the block's end).

    Args:
        max_load: the largest 1-minute load average of an idle-enough machine; default :func:`cores`.
        interval: seconds between readings while the block runs.
    """

    def __init__(self, max_load: float | None = None, interval: float = 5.0) -> None:
        self.cores = cores()
        self.max_load = float(max_load) if max_load is not None else float(self.cores)
        self.interval = float(interval)
        self.before: list[float] | None = None
        self.after: list[float] | None = None
        self.samples: list[float] = []
        self.foreign: dict | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu0: tuple[float | None, float, float] | None = None

    def start(self) -> LoadMonitor:
        """Take the first reading and start sampling (what ``with`` does on entry)."""
        self._cpu0 = (system_busy_seconds(), process_tree_cpu_s(), time.perf_counter())
        self.before = load_average()
        if self.before is not None:
            self.samples.append(self.before[0])
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and take the last reading (what ``with`` does on exit)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self.after = load_average()
        if self.after is not None:
            self.samples.append(self.after[0])
        if self._cpu0 is not None:
            busy0, own0, t0 = self._cpu0
            self.foreign = foreign_cpu(busy0, system_busy_seconds(), process_tree_cpu_s() - own0, time.perf_counter() - t0)

    def __enter__(self) -> LoadMonitor:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            now = load_average()
            if now is not None:
                self.samples.append(now[0])

    def record(self) -> dict:
        """``cores``, ``max_load``, ``before``/``after`` (1/5/15-minute averages), ``max_1min`` over every reading,
        ``samples``, ``busy`` and a one-line ``verdict``."""
        peak = max(self.samples) if self.samples else None
        foreign = self.foreign or foreign_cpu(None, None, 0.0, 0.0)
        rule, busy = load_rule(foreign, peak, self.max_load)
        if rule == "foreign CPU":
            if busy:
                verdict = (f"BUSY: other processes took {foreign['cores']:.2f} of a core on average (limit {foreign['limit']:g}; "
                           f"1-minute load up to {peak}): timings are not results and no ratio is reported")
            else:
                verdict = (f"idle enough: other processes took {foreign['cores']:.3f} of a core on average (limit "
                           f"{foreign['limit']:g}; 1-minute load up to {peak}, this benchmark's own work included)")
        elif rule == "none":
            busy = False
            verdict = "load unknown on this OS: timings are not checked against the machine's load"
        else:
            verdict = (f"BUSY: the 1-minute load average reached {peak:.2f} > {self.max_load:g} ({self.cores} cores): "
                       "timings are not results and no ratio is reported") if busy else (
                       f"idle enough: the 1-minute load average stayed <= {peak:.2f} (limit {self.max_load:g}, {self.cores} cores)")
        return {"cores": self.cores, "max_load": self.max_load, "before": self.before, "after": self.after,
                "max_1min": peak, "samples": len(self.samples), "foreign_cpu": foreign, "rule": rule, "busy": busy,
                "verdict": verdict}

    def banner(self) -> str:
        """What a benchmark prints about the load: one line when idle, a framed warning when busy."""
        return banner(self.record())


def load_rule(foreign: dict | None, peak: float | None, limit: float) -> tuple[str, bool | None]:
    """``(rule, busy)``: what judges a monitored phase, and its answer. Other processes' CPU where it is
    known (:func:`foreign_cpu` with a ``busy``: ``"foreign CPU"``); else the highest 1-minute load average
    against ``limit`` (``"load average"``); else nothing to judge by (``"none"``, busy ``None``).

    Example:
        >>> load_rule({"busy": False}, 3.0, 2), load_rule(None, 2.5, 2), load_rule(None, None, 2)
        (('foreign CPU', False), ('load average', True), ('none', None))
    """
    if foreign is not None and foreign.get("busy") is not None:
        return "foreign CPU", bool(foreign["busy"])
    if peak is None:
        return "none", None
    return "load average", peak > limit


def banner(rec: dict) -> str:
    """One line about a load record (:meth:`LoadMonitor.record`, :func:`combine`); framed in ``!`` when busy."""
    line = f"load average before {rec['before']}, after {rec['after']}, highest 1-minute {rec['max_1min']}; {rec['verdict']}"
    if not rec["busy"]:
        return line
    bar = "!" * min(len(line), 100)
    return f"{bar}\n{line}\n{bar}"


def combine(records: list[dict]) -> dict:
    """One load record for several monitored phases (a benchmark's workers): busy if any phase was."""
    records = [r for r in records if r]
    if not records:
        return {"busy": False, "verdict": "no phase was monitored", "phases": 0, "before": None, "after": None, "max_1min": None}
    peaks = [r["max_1min"] for r in records if r.get("max_1min") is not None]
    busy = any(r["busy"] for r in records)
    first, last = records[0], records[-1]
    out = {"cores": first["cores"], "max_load": first["max_load"], "before": first["before"], "after": last["after"],
           "max_1min": max(peaks) if peaks else None, "samples": sum(r["samples"] for r in records), "busy": busy,
           "phases": len(records)}
    out["verdict"] = next((r["verdict"] for r in records if r["busy"]), records[-1]["verdict"])
    return out


def ratio(slow: float, fast: float, load: dict, digits: int = 2) -> dict:
    """``slow / fast`` as a result (``value``) on a machine that was not busy, else only as ``on_busy_machine``."""
    r = round(float(slow) / max(float(fast), 1e-9), digits)
    return {"value": None, "on_busy_machine": r} if load.get("busy") else {"value": r, "on_busy_machine": None}


def speedups(slow: dict, fast: dict, load: dict) -> dict:
    """Wall and CPU ratios (``speedup``, ``speedup_cpu``, each a :func:`ratio`) of two workers' ``seconds`` /
    ``cpu_seconds``: how many times faster ``fast`` ran than ``slow``."""
    return {"speedup": ratio(slow["seconds"], fast["seconds"], load),
            "speedup_cpu": ratio(slow["cpu_seconds"], fast["cpu_seconds"], load)}


def shown(r: dict) -> str:
    """A :func:`ratio` as printed: ``5.0x``, or the figure flagged when the machine was busy."""
    if r["value"] is not None:
        return f"{r['value']}x"
    return f"{r['on_busy_machine']}x ON A BUSY MACHINE (not a result)"


def target_speed(slow_s: float, fast_s: float, slow_process_s: float, fast_process_s: float, target: float, load: dict) -> dict:
    """An end-to-end speed figure: the reference's method call over ours (``method``, judged against ``target``)
    and whole processes (``process``); ``target_met`` is ``None`` (not judged) on a busy machine."""
    method = ratio(slow_s, fast_s, load)
    return {"method": method, "process": ratio(slow_process_s, fast_process_s, load), "target": target,
            "target_met": None if method["value"] is None else method["value"] >= target}


def speed_line(reference: str, reference_s: float, ours_s: float, speed: dict) -> str:
    """One printed line for :func:`target_speed`'s figure."""
    judged = {True: "met", False: "MISSED", None: "not judged"}[speed["target_met"]]
    return (f"{reference} {reference_s} s, tokxfer's method {ours_s} s: {shown(speed['method'])} "
            f"(target {speed['target']:g}x: {judged}); whole processes {shown(speed['process'])}")
