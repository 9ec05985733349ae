"""The quickstart as a user meets it: first row, cold, warm, and one worker against two, through the real command line.

Each command runs ``python -m harness.cli`` (what the ``tokxfer`` script runs) in a subprocess:

* ``cold`` — a fresh, empty ``TOKXFER_CACHE`` (a temporary folder, or ``--cache``) and a fresh runs
  folder: ``tokxfer quickstart --size SIZE``, which builds the world, pretrains the source model,
  trains the target tokenizers, runs every trial (as many workers as cores unless ``--workers``)
  and prints each method's row as its trials finish, then the table. Timed: the whole command, the
  setup (world and source model: until the command says "2/3"), and the **first row** (until the
  first method's row is printed);
* ``warm`` — the cache the cold phase left, a fresh runs folder: the same command again;
* ``grid-1`` and ``grid-2`` — the grid alone, with one and with two workers: ``tokxfer run CONFIG
  --workers N``, each on a copy of what every trial shares and the command builds before its
  workers start (the cold cache's world, source models and tokenizers; none of the trials' own
  outputs: no inits, fastText models or alignments), so the two differ only in the worker count.
  Their ratio is the speedup; their records' numbers must be identical (``bit_identical``).

A phase's wall time is the sum of its commands' wall times, process start-up included. The
breakdown is read from what the run leaves behind: source pretraining from ``pretrain_info.json``
(when built in that phase), per-trial resources / init (load, method, install) / task seconds from
the records, fastText training and word alignment from the methods' ``init.info`` (trials whose
mapping came from the init cache replay the info of the run that computed it, so they are left out
of the fastText and alignment sums and counted as cache hits). Also recorded: CPU seconds and peak
RSS of every command (``wait4``), the cache size after each phase (per top-level folder), torch's
thread count (from the records), whether the table the quickstart printed is the same cold and
warm, and whether the leaderboard rendered from the phase's records (``tokxfer leaderboard SPEC``)
equals the committed ``leaderboards/tables/<name>.md`` byte for byte.

**Load.** Each phase records the CPU the rest of the machine used while it ran: the machine's busy
time (``/proc/stat``) minus the CPU of the phase's own command and workers (``wait4``) and of this
process (:func:`benchmarks._load.foreign_cpu`). A phase is valid when that stays within
:data:`benchmarks._load.FOREIGN_LIMIT_CORES` of a core on average; the 1-minute load average, sampled
every few seconds, is recorded too and decides only where ``/proc/stat`` is missing (valid while it
stays at or under the cores; it counts the quickstart's own workers, so two workers on two cores sit at
about 2.0). A timing target read from an invalid phase is ``invalid (load)``; the result as a whole is
``valid: false`` when any phase is.

Targets (``--size small``, the full quickstart, 2 cores, idle machine; issue 27): first row <= 2 min,
cold <= 5 min, warm <= 45 s, two workers >= 1.7x one and bit-identical, the same table run to run,
cache <= 1 GB, the committed leaderboard reproduced. With ``--size tiny`` or overrides they are
reported but not applicable.

Run::

    python benchmarks/bench_quickstart.py                      # small world, all phases (an idle 2-core machine)
    python benchmarks/bench_quickstart.py --size tiny          # smoke: quickstart-tiny
    python benchmarks/bench_quickstart.py --phases warm --cache ~/.cache/tokxfer   # warm on an existing cache

The JSON goes to ``benchmarks/results/quickstart_<size>.json`` (``--json`` to change it).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._e2e import environment  # noqa: E402
from benchmarks._load import foreign_cpu, load_average, load_rule, process_tree_cpu_s, system_busy_seconds  # noqa: E402

SIZES = {
    "small": {"config": "harness/configs/quickstart.yaml", "spec": "leaderboards/specs/quickstart.yaml"},
    "tiny": {"config": "harness/configs/quickstart-tiny.yaml", "spec": "leaderboards/specs/quickstart-tiny.yaml"},
}
PHASES = ("cold", "warm", "grid-1", "grid-2")
TARGETS = {"first_row_s": 120.0, "cold_wall_s": 300.0, "warm_wall_s": 45.0, "speedup": 1.7, "cache_bytes": 1e9}
"""The quickstart's targets on an idle 2-core machine (issue 27: first row <= 2 min, cold <= 5 min, warm <= 45 s,
two workers >= 1.7x one; cache <= 1 GB)."""
SHARED_CACHE = ("world", "sources", "tokenizers", ".tokxfer-cache")
"""What the grid phases start from: what every trial shares and the command builds before its workers start."""
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
TIMING_KEYS = ("resources_s", "init_load_s", "init_method_s", "init_install_s", "stages_s", "task_s", "total_s")


# ---------------------------------------------------------------------------------- machine


def machine_facts() -> dict:
    """Cores, CPU model, memory and the thread settings children inherit (no timing in here)."""
    from harness.about import _cpu_facts  # the model and bf16 instructions, as every trial record has them

    facts = environment()
    facts["cores_usable"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = _cpu_facts()
    facts["cpu_model"] = cpu.pop("cpu")
    facts.update(cpu)
    try:
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        facts["memory_gb"] = round(int(mem[1]) * 1024 / 1e9, 1)
    except OSError:  # not Linux
        facts["memory_gb"] = None
    facts["thread_env"] = {v: os.environ.get(v) for v in THREAD_VARS}
    return facts


class LoadMonitor:
    """The 1-minute load average sampled every ``every_s`` seconds in a background thread.

    Example:
        >>> with LoadMonitor(every_s=0.01) as m:
        ...     time.sleep(0.05)
        >>> len(m.samples) >= 1
        True
    """

    def __init__(self, every_s: float = 5.0):
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (seconds since start, 1-minute load)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-monitor", daemon=True)
        self._t0 = time.monotonic()

    def _sample(self) -> None:
        load = load_average()
        if load is not None:
            self.samples.append((round(time.monotonic() - self._t0, 1), load[0]))

    def _run(self) -> None:
        self._sample()
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> LoadMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def between(self, start: float, end: float) -> list[float]:
        """The loads sampled between two moments (seconds since start)."""
        return [x for t, x in self.samples if start <= t <= end]

    def now(self) -> float:
        return time.monotonic() - self._t0


def load_verdict(loads: list[float], cores: int, foreign: dict | None = None) -> dict:
    """``{"max_1min", "mean_1min", "cores", "valid", "rule"}`` of one phase.

    With ``foreign`` (:func:`benchmarks._load.foreign_cpu` of the phase) known, the phase is valid unless
    other processes took more than its limit of the machine's CPU (``rule: "foreign CPU"``); the load
    average counts the quickstart's own workers too (two busy workers on two cores read about 2.0 and
    may tip over it), so it only decides where the foreign CPU is unknown (``rule: "load average"``):
    valid unless the load exceeded the cores. Without either (``rule: "none"``), ``valid`` is None.
    The decision is :func:`benchmarks._load.load_rule`'s, shared with every benchmark's monitor.
    """
    out = {"max_1min": max(loads) if loads else None, "mean_1min": round(sum(loads) / len(loads), 2) if loads else None,
           "cores": cores}
    rule, busy = load_rule(foreign, out["max_1min"], cores)
    return {**out, **({"foreign_cpu": foreign} if rule == "foreign CPU" else {}), "valid": None if busy is None else not busy,
            "rule": rule}


# ---------------------------------------------------------------------------------- commands


def child_env(cache: Path, threads: int | None) -> dict:
    """The environment of every command: this checkout first on the path, offline, the phase's cache."""
    env = dict(os.environ)
    env.update(TOKXFER_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")  # fmt: skip
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if threads is not None:
        for var in THREAD_VARS:
            env[var] = str(threads)
    return env


FIRST_ROW = "first_row_s"
MARKS = {"setup_s": lambda line: line.startswith("2/3 "),
         FIRST_ROW: lambda line, seen: seen.get("setup_s") is not None and line.startswith("| ")
         and not line.startswith(("| Method", "|:---")),
         "table_s": lambda line: line.startswith("3/3 ")}
"""Moments in the quickstart's output: setup done (world and source model), the first method's row, the table."""


def _mark(seen: dict, line: str, elapsed: float) -> None:
    for key, test in MARKS.items():
        if seen.get(key) is None and (test(line, seen) if key == FIRST_ROW else test(line)):
            seen[key] = round(elapsed, 3)


def run_command(name: str, args: list[str], env: dict, log_dir: Path) -> dict:
    """Run ``python -m harness.cli ARGS``; wall and CPU seconds and peak RSS of the process (``wait4``),
    and when the quickstart's output reached its marks (:data:`MARKS`; ``None`` for marks never printed).

    Raises:
        RuntimeError: naming the command and quoting the end of its log when it exits non-zero.
    """
    cmd = [sys.executable, "-m", "harness.cli", *args]
    log, err_log = log_dir / f"{name}.log", log_dir / f"{name}.stderr.log"
    seen: dict[str, float | None] = dict.fromkeys(MARKS)
    # stderr apart: the workers' warnings would otherwise land inside the printed table's lines
    with open(log, "wb") as out, open(err_log, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=err)
        for raw in proc.stdout:  # read as it comes: the marks are timed when printed
            _mark(seen, raw.decode("utf-8", "replace"), time.perf_counter() - t0)
            out.write(raw)
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:] + err_log.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"{name}: `{' '.join(cmd[1:])}` exited with {proc.returncode}; end of {log} and "
                           f"{err_log.name}:\n{tail}")
    return {
        "name": name, "command": ["tokxfer", *args], "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_bytes": int(usage.ru_maxrss) * (1 if sys.platform == "darwin" else 1024),
        "marks": seen, "log": str(log),
    }  # fmt: skip


def printed_table(log: str | Path) -> str:
    """What the quickstart printed from its rows on (step 2/3) to its table's end, less the wall-time line: what
    must be the same run to run."""
    text = Path(log).read_text(errors="replace")
    start = text.find("2/3 ")
    if start < 0:
        return ""
    body = text[start:]
    body = body[body.find("\n") + 1:]
    lines = [ln for ln in body.splitlines()
             if ln.strip() and not ln.startswith(("ran ", "WARNING ", "Open the MLflow", "  mlflow "))]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- reading the run


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def cache_usage(cache: Path) -> dict:
    """Total bytes of the cache and bytes per top-level folder (world, fasttext, inits …)."""
    if not cache.is_dir():
        return {"bytes": 0, "by_folder": {}}
    by = {p.name: tree_bytes(p) if p.is_dir() else p.stat().st_size for p in sorted(cache.iterdir())}
    return {"bytes": sum(by.values()), "by_folder": by}


def load_records(records_dir: Path) -> list[dict]:
    """Every record of the run (the JSON files the runner writes, one per trial)."""
    if not records_dir.is_dir():
        raise FileNotFoundError(f"{records_dir}: no records folder; did the run write any trial?")
    return [json.loads(p.read_text()) for p in sorted(records_dir.glob("*.json"))]


def _walk(node: Any, path: tuple[str, ...] = ()):
    """``(path, dict)`` for every dict inside ``node``, depth first."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, str(i)))


def _corpus_name(trained_on: str | None) -> str | None:
    """``near/text/train.txt`` for a world file (the language is the folder above ``text``)."""
    if not trained_on:
        return None
    parts = Path(trained_on).parts
    return "/".join(parts[-3:]) if len(parts) >= 3 else trained_on


def fasttext_runs(record: dict) -> list[dict]:
    """The fastText trainings a trial's method reports (``{"cache", "seconds", "params"}`` dicts in its info)."""
    info = (record.get("init") or {}).get("info") or {}
    out = []
    for path, d in _walk(info):
        if "seconds" in d and "cache" in d and isinstance(d.get("params"), dict):
            out.append({"where": ".".join(path), "cache": d["cache"], "seconds": float(d["seconds"] or 0.0),
                        "corpus": _corpus_name(d.get("trained_on")) or f"{'.'.join(path)} (corpus not named)",
                        "threads": d.get("threads")})  # fmt: skip
    return out


def alignment_runs(record: dict) -> list[dict]:
    """Word alignments (Tik-to-Tok: ``align_s`` + ``symmetrize_s`` when computed) and WECHSEL's Procrustes step."""
    info = (record.get("init") or {}).get("info") or {}
    out = []
    for path, d in _walk(info):
        if "align_s" in d:
            out.append({"where": ".".join(path), "what": f"word alignment ({d.get('aligner', '?')})",
                        "computed": d.get("links_from", "computed") == "computed",
                        "seconds": float(d.get("align_s") or 0.0) + float(d.get("symmetrize_s") or 0.0)})  # fmt: skip
        if "alignment_s" in d:
            out.append({"where": ".".join((*path, "alignment_s")), "what": "vector alignment (Procrustes)",
                        "computed": True, "seconds": float(d["alignment_s"] or 0.0)})  # fmt: skip
    return out


def breakdown(records: list[dict]) -> dict:
    """Sums over the trials of one phase: timings, fastText, alignment, per method."""
    sums = {k: 0.0 for k in TIMING_KEYS}
    per_method: dict[str, dict] = defaultdict(lambda: {"trials": 0, "init_cache_hits": 0, **{k: 0.0 for k in TIMING_KEYS},
                                                       "fasttext_s": 0.0, "alignment_s": 0.0, "method_timings": {}})  # fmt: skip
    ft_runs, al_runs = [], []
    failed = 0
    for r in records:
        if r.get("status") != "ok":
            failed += 1
            continue
        method = r["config"]["method"].get("id") or r["config"]["method"]["name"]
        m = per_method[method]
        m["trials"] += 1
        timings = r.get("timings") or {}
        for k in TIMING_KEYS:
            v = float(timings.get(k) or 0.0)
            sums[k] += v
            m[k] += v
        info = (r.get("init") or {}).get("info") or {}
        if info.get("cache_hit"):  # the mapping came from the init cache: its info is the computing run's
            m["init_cache_hits"] += 1
            continue
        tag = {"method": method, "language": r["config"]["target"]["language"], "seed": r.get("seed")}
        for run in fasttext_runs(r):
            ft_runs.append({**tag, **run})
            if run["cache"] == "miss":
                m["fasttext_s"] += run["seconds"]
        for run in alignment_runs(r):
            al_runs.append({**tag, **run})
            if run["computed"]:
                m["alignment_s"] += run["seconds"]
        for k, v in (info.get("timings") or {}).items():
            if isinstance(v, (int, float)):
                m["method_timings"][k] = m["method_timings"].get(k, 0.0) + float(v)
    trained = [x for x in ft_runs if x["cache"] == "miss"]
    by_corpus: dict[str, dict] = {}
    for x in trained:
        c = by_corpus.setdefault(x["corpus"] or "?", {"trainings": 0, "seconds": 0.0})
        c["trainings"] += 1
        c["seconds"] += x["seconds"]
    computed = [x for x in al_runs if x["computed"]]
    threads = sorted({(r.get("environment") or {}).get("torch_threads") for r in records} - {None})
    return {
        "trials": len(records), "failed": failed, "timings_s": _rounded(sums),
        "torch_threads": threads,
        "fasttext": {"trained": len(trained), "seconds": round(sum(x["seconds"] for x in trained), 3),
                     "from_cache": len(ft_runs) - len(trained), "by_corpus": _rounded(by_corpus), "runs": ft_runs},
        "alignment": {"computed": len(computed), "seconds": round(sum(x["seconds"] for x in computed), 3), "runs": al_runs},
        "per_method": {k: _rounded(v) for k, v in sorted(per_method.items())},
    }  # fmt: skip


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 3)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    return x


def source_pretraining(cache: Path, since: float) -> dict | None:
    """The source model's ``pretrain_info.json`` timings, if it was written after ``since`` (built in this phase)."""
    infos = sorted(cache.glob("**/pretrain_info.json"))
    if not infos:
        return None
    built = [p for p in infos if p.stat().st_mtime >= since]
    if not built:
        return {"built": False, "reused": [str(p.parent.name) for p in infos]}
    out: dict[str, Any] = {"built": True, "models": []}
    for p in built:
        info = json.loads(p.read_text())
        out["models"].append({"folder": p.parent.name, "kind": info.get("config", {}).get("kind"),
                              "torch_threads": info.get("torch_threads"), **(info.get("timings") or {})})  # fmt: skip
    out["total_s"] = round(sum(m.get("total_s") or 0.0 for m in out["models"]), 3)
    return out


def compare_leaderboard(spec: Path, runs_dir: Path, out_dir: Path, env: dict, log_dir: Path, name: str) -> dict:
    """Render ``spec`` from the phase's records and compare its Markdown table with the committed one byte for byte."""
    step = run_command(f"{name}-leaderboard", ["leaderboard", str(spec), "--runs-dir", str(runs_dir), "--out", str(out_dir)],
                       env, log_dir)  # fmt: skip
    table = spec.stem + ".md"
    committed = ROOT / "leaderboards" / "tables" / table
    fresh = out_dir / table
    if not fresh.is_file():
        raise FileNotFoundError(f"{fresh}: `tokxfer leaderboard {spec}` wrote no {table}")
    same = fresh.read_bytes() == committed.read_bytes()
    diff = [] if same else list(difflib.unified_diff(committed.read_text().splitlines(), fresh.read_text().splitlines(),
                                                     str(committed.relative_to(ROOT)), "fresh", lineterm="", n=0))[:40]  # fmt: skip
    return {"committed": str(committed.relative_to(ROOT)), "identical": same, "diff_head": diff, "render_s": step["wall_s"]}


# ---------------------------------------------------------------------------------- phases


def run_phase(phase: str, *, size: str, overrides: list[str], cache: Path, work: Path, threads: int | None,
              tracking: bool, workers: int | None, base: Path | None = None) -> dict:  # fmt: skip
    """One phase (:data:`PHASES`): its command, breakdown, cache size and leaderboard check.

    ``base``: for the grid phases, the cache whose shared part (:data:`SHARED_CACHE`) they start from.
    """
    spec = SIZES[size]
    runs = work / f"runs-{phase}"
    if runs.exists():
        shutil.rmtree(runs)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    from harness.run.config import load_experiment  # the grid's name and world, as the command line resolves them

    cfg = load_experiment(ROOT / spec["config"], overrides)
    if phase.startswith("grid-"):
        n = int(phase.split("-")[1])
        cache = work / f"cache-{phase}"
        if cache.exists():
            shutil.rmtree(cache)
        cache.mkdir(parents=True)
        for name in SHARED_CACHE:
            src = Path(base) / name
            if src.is_dir():
                shutil.copytree(src, cache / name, symlinks=True)
            elif src.is_file():
                shutil.copy2(src, cache / name)
        args = ["run", spec["config"], *overrides, "--workers", str(n)]
    else:
        args = ["quickstart", "--size", size, *overrides] + (["--workers", str(workers)] if workers else [])
    args += ["--runs-dir", str(runs), "--quiet"] + ([] if tracking else ["--no-tracking"])
    env = child_env(cache, threads)
    load_start, t_start = load_average(), time.time()
    busy_start, own_start = system_busy_seconds(), process_tree_cpu_s()
    step = run_command(phase, args, env, logs)
    # this process and the command it waited for (wait4: the command and its workers)
    foreign = foreign_cpu(busy_start, system_busy_seconds(), process_tree_cpu_s() - own_start, step["wall_s"])
    load_end = load_average()
    records = load_records(runs / cfg.name / "records")
    bd = breakdown(records)
    bd["source_pretraining"] = source_pretraining(cache, t_start)
    # the command's time outside its trials' own timings: start-up and imports, world and source model (quickstart),
    # record writing, the table; with several workers the trials overlap, so this can be negative
    bd["outside_trials_s"] = round(step["wall_s"] - bd["timings_s"]["total_s"], 3)
    out = {
        "phase": phase, "wall_s": step["wall_s"], "cpu_s": step["cpu_s"], "peak_rss_bytes": step["peak_rss_bytes"],
        "steps": [step], "marks": step["marks"], "load_avg_start": load_start, "load_avg_end": load_end, "foreign_cpu": foreign,
        "cache": cache_usage(cache), "breakdown": bd, "numbers": numbers(records),
        "leaderboard": compare_leaderboard(ROOT / spec["spec"], runs, work / f"leaderboard-{phase}", env, logs, phase),
        "experiment": cfg.name, "n_trials": len(cfg.trials()),
    }  # fmt: skip
    if not phase.startswith("grid-"):
        out["printed_table"] = printed_table(step["log"])
    return out


def numbers(records: list[dict]) -> dict:
    """Trial id -> what a trial measured (metrics, init diagnostics and counts): what must be bit-identical."""
    return {r["trial_id"]: {"status": r.get("status"), "metrics": r.get("metrics"),
                            "diagnostics": (r.get("init") or {}).get("diagnostics"),
                            "counts": (r.get("init") or {}).get("counts")} for r in records}  # fmt: skip


def compare_phases(phases: dict) -> dict:
    """Speedup of two workers over one (grid phases), whether their numbers (and cold's) are identical, and
    whether the quickstart printed the same table cold and warm."""
    out: dict[str, Any] = {}
    g1, g2 = phases.get("grid-1"), phases.get("grid-2")
    if g1 and g2:
        out["speedup_2_over_1"] = round(g1["wall_s"] / max(g2["wall_s"], 1e-9), 3)
        same = g1["numbers"] == g2["numbers"] and (("cold" not in phases) or phases["cold"]["numbers"] == g1["numbers"])
        out["bit_identical"] = same
        out["differing_trials"] = sorted(t for t in set(g1["numbers"]) | set(g2["numbers"])
                                         if g1["numbers"].get(t) != g2["numbers"].get(t))[:20]  # fmt: skip
    cold, warm = phases.get("cold"), phases.get("warm")
    if cold and warm:
        out["tables_identical"] = bool(cold["printed_table"]) and cold["printed_table"] == warm["printed_table"]
    return out


def evaluate_targets(result: dict) -> list[dict]:
    """The quickstart's targets, each met / missed (n/a outside the full, un-overridden quickstart).

    A timing target is ``invalid (load)`` when a phase it is read from was not run on an idle machine
    (:func:`load_verdict`): the first row and the cold time from ``cold``, the warm time from ``warm``, the
    speedup from ``grid-1`` and ``grid-2``. The other targets (numbers, tables, cache size, leaderboard) do not
    depend on the load and are judged in any case.
    """
    applicable = result["size"] == "small" and not result["overrides"]
    phases, comp = result["phases"], result["comparison"]
    rows = []

    def add(name: str, target: str, value: Any, ok: bool | None, timed: tuple[str, ...] = ()) -> None:
        if not applicable or ok is None:
            status = "n/a"
        elif any(((phases.get(p) or {}).get("load") or {}).get("valid") is False for p in timed):
            status = "invalid (load)"
        else:
            status = "met" if ok else "missed"
        rows.append({"target": name, "goal": target, "value": value, "status": status})

    cold, warm = phases.get("cold"), phases.get("warm")
    first = cold and cold["marks"][FIRST_ROW]
    add("first row (cold)", "<= 2 min", first, None if first is None else first <= TARGETS["first_row_s"], ("cold",))
    add("cold quickstart", "<= 5 min", cold and cold["wall_s"], cold and cold["wall_s"] <= TARGETS["cold_wall_s"], ("cold",))
    add("warm quickstart", "<= 45 s", warm and warm["wall_s"], warm and warm["wall_s"] <= TARGETS["warm_wall_s"], ("warm",))
    speedup = comp.get("speedup_2_over_1")
    add("2 workers vs 1", ">= 1.7x", speedup, None if speedup is None else speedup >= TARGETS["speedup"], ("grid-1", "grid-2"))
    add("2 workers' numbers", "bit-identical to 1 worker", comp.get("bit_identical"), comp.get("bit_identical"))
    add("printed table", "the same cold and warm", comp.get("tables_identical"), comp.get("tables_identical"))
    cache = max((p["cache"]["bytes"] for p in phases.values()), default=None)
    add("cache after the run", "<= 1 GB", cache, None if cache is None else cache <= TARGETS["cache_bytes"])
    same = [p["leaderboard"]["identical"] for p in phases.values()]
    add("leaderboard", "committed table, byte for byte", all(same) if same else None, all(same) if same else None)
    return rows


def benchmark(args: argparse.Namespace) -> dict:
    """Run the requested phases and return the result record."""
    phases = [p for p in PHASES if p in args.phases]

    def filled(folder: Path) -> bool:
        return folder.is_dir() and any(folder.iterdir())

    if args.cache and "cold" in phases and filled(Path(args.cache)):
        raise SystemExit(f"--cache {args.cache}: not empty; a cold run needs an empty or missing cache folder")
    if "cold" not in phases and not (args.cache and filled(Path(args.cache))):
        raise SystemExit(f"--phases {' '.join(phases)} without cold needs --cache pointing at a filled cache "
                         f"(got {args.cache}, empty or missing)")
    own_work = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tokxfer-bench-quickstart-")) if own_work else Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache) if args.cache else work / "cache"
    if "cold" in phases and filled(cache):
        raise SystemExit(f"{cache}: not empty; a cold run needs an empty cache (use a fresh --work-dir)")
    machine = machine_facts()
    result: dict[str, Any] = {
        "bench": "quickstart", "size": args.size, "config": SIZES[args.size]["config"], "overrides": args.override,
        "threads": args.threads, "workers": args.workers, "tracking": args.tracking,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "git": _git(), "machine": machine, "load_avg_start": load_average(), "phases": {},
        "work_dir": str(work) if args.keep or not own_work else None,
    }  # fmt: skip
    monitor = LoadMonitor(every_s=args.load_every)
    try:
        with monitor:
            for phase in phases:
                print(f"{phase}: running {result['config']} {' '.join(args.override)} ...", flush=True)
                t0 = monitor.now()
                result["phases"][phase] = run_phase(phase, size=args.size, overrides=args.override, cache=cache,
                                                    work=work, threads=args.threads, tracking=args.tracking,
                                                    workers=args.workers, base=cache)  # fmt: skip
                loads = monitor.between(t0, monitor.now())
                result["phases"][phase]["load"] = load_verdict(loads, machine["cores_usable"], result["phases"][phase]["foreign_cpu"])
    finally:
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["load_avg_end"] = load_average()
    verdicts = [p["load"]["valid"] for p in result["phases"].values()]
    result["load"] = {**load_verdict([x for _, x in monitor.samples], machine["cores_usable"]),
                      "samples": monitor.samples, "every_s": args.load_every,
                      "phases_valid": {name: p["load"]["valid"] for name, p in result["phases"].items()}}
    result["load"]["valid"] = False if False in verdicts else (None if None in verdicts or not verdicts else True)
    result["load"]["rule"] = "every phase valid"
    result["valid"] = result["load"]["valid"]
    result["comparison"] = compare_phases(result["phases"])
    for p in result["phases"].values():  # compared above; the records hold them
        p.pop("numbers")
    result["targets"] = evaluate_targets(result)
    return result


def _git() -> dict:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip())
        return {"sha": sha, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"sha": None, "dirty": None}


# ---------------------------------------------------------------------------------- table


def _gb(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def print_table(result: dict) -> None:
    """The result as a table: phases side by side, then the cold phase per method, then the targets."""
    phases = result["phases"]
    names = list(phases)
    m = result["machine"]
    print(f"\nquickstart ({result['size']}: {result['config']} {' '.join(result['overrides'])}) — "
          f"{m.get('cores_usable')} cores ({m.get('cpu_model')}), torch threads "
          f"{sorted({t for p in phases.values() for t in p['breakdown']['torch_threads']})}, "
          f"thread env {m.get('thread_env')}")  # fmt: skip

    def row(label: str, fn) -> None:
        print(f"  {label:<38}" + "".join(f"{fn(phases[n]):>16}" for n in names))

    print(f"  {'':<38}" + "".join(f"{n:>16}" for n in names))
    row("wall s", lambda p: _s(p["wall_s"]))
    row("CPU s (CPU / wall)", lambda p: f"{p['cpu_s']:.1f} ({p['cpu_s'] / max(p['wall_s'], 1e-9):.2f})")
    row("peak RSS", lambda p: _gb(p["peak_rss_bytes"]))
    row("cache after", lambda p: _gb(p["cache"]["bytes"]))
    row("load avg start -> end (1 min)", lambda p: f"{(p['load_avg_start'] or ['?'])[0]} -> {(p['load_avg_end'] or ['?'])[0]}")
    row("load avg max while running", lambda p: f"{p['load']['max_1min']}")
    row("setup s (world, source model)", lambda p: _s(p["marks"]["setup_s"]))
    row("first row s", lambda p: _s(p["marks"][FIRST_ROW]))
    row("source pretraining s",
        lambda p: _s((p["breakdown"]["source_pretraining"] or {}).get("total_s")) if (p["breakdown"]["source_pretraining"] or {}).get("built") else "cached")  # fmt: skip
    row("outside trials s", lambda p: _s(p["breakdown"]["outside_trials_s"]))
    row("trials (failed)", lambda p: f"{p['breakdown']['trials']} ({p['breakdown']['failed']})")
    for key, label in (("total_s", "trials total s"), ("resources_s", "  resources (source, tokenizers) s"),
                       ("init_load_s", "  init: load source s"), ("init_method_s", "  init: method s"),
                       ("init_install_s", "  init: install s"), ("task_s", "  task (mlm-at-init) s")):  # fmt: skip
        row(label, lambda p, k=key: _s(p["breakdown"]["timings_s"][k]))
    row("  fastText trained: n / s", lambda p: f"{p['breakdown']['fasttext']['trained']} / {p['breakdown']['fasttext']['seconds']:.1f}")
    row("  alignments computed: n / s", lambda p: f"{p['breakdown']['alignment']['computed']} / {p['breakdown']['alignment']['seconds']:.1f}")
    row("leaderboard = committed", lambda p: "identical" if p["leaderboard"]["identical"] else "DIFFERS")
    first = phases[names[0]]
    print(f"\n  {names[0]} phase per method: {'trials':>7}{'method s':>10}{'fastText s':>12}{'align s':>9}{'task s':>9}{'cache hits':>11}")
    for meth, v in first["breakdown"]["per_method"].items():
        print(f"  {meth:<27}{v['trials']:>7}{v['init_method_s']:>10.1f}{v['fasttext_s']:>12.1f}{v['alignment_s']:>9.1f}"
              f"{v['task_s']:>9.1f}{v['init_cache_hits']:>11}")  # fmt: skip
    for corpus, v in first["breakdown"]["fasttext"]["by_corpus"].items():
        print(f"  fastText on {corpus}: {v['trainings']} trainings, {v['seconds']:.1f} s")
    comp = result["comparison"]
    if "speedup_2_over_1" in comp:
        print(f"\n  2 workers vs 1 (grid only): {comp['speedup_2_over_1']:.2f}x; numbers "
              f"{'bit-identical' if comp['bit_identical'] else 'DIFFER: ' + ', '.join(comp['differing_trials'])}")
    if "tables_identical" in comp:
        print(f"  printed table cold vs warm: {'identical' if comp['tables_identical'] else 'DIFFERS'}")
    load = result["load"]
    print(f"\n  load average (1 min) while it ran: mean {load['mean_1min']}, max {load['max_1min']} on {load['cores']} cores")
    for name, p in phases.items():
        f, v = p["load"].get("foreign_cpu") or {}, p["load"]
        other = f"other processes {f['cpu_s']} CPU s = {f['cores']} cores (limit {f['limit']})" if f.get("cores") is not None else "other processes unknown"
        print(f"  {name}: {other}; by {v['rule']}: {'valid' if v['valid'] else 'INVALID: the machine was busy with other work' if v['valid'] is False else 'unknown'}")
    print("\n  targets (2 cores, idle machine):")
    for t in result["targets"]:
        value = t["value"]
        shown = ("-" if value is None else _gb(value) if t["target"].startswith("cache") else f"{value:.2f}x" if t["target"].startswith("2 workers vs")
                 else f"{value:.1f} s" if isinstance(value, float) else value)
        print(f"    {t['target']:<22} {t['goal']:<32} {shown!s:>12}  {t['status']}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small",
                   help="small: harness/configs/quickstart.yaml (the targets); tiny: quickstart-tiny.yaml (smoke)")  # fmt: skip
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help="which phases to run (default: all)")
    p.add_argument("--workers", type=int, default=None,
                   help="the quickstart's --workers in the cold and warm phases (default: its own, one per core)")
    p.add_argument("--load-every", type=float, default=5.0, help="seconds between load-average samples (default 5)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a key=value override of the experiment (repeatable); targets are then n/a")  # fmt: skip
    p.add_argument("--cache", default=None, help="the TOKXFER_CACHE to use (cold: must be empty; default: a fresh temporary folder)")
    p.add_argument("--threads", type=int, default=None,
                   help="set OMP/MKL/OpenBLAS threads of the commands (default: inherit this environment's)")  # fmt: skip
    p.add_argument("--tracking", action="store_true", help="mirror records to MLflow as `tokxfer run` does by default")
    p.add_argument("--work-dir", default=None, help="where runs, logs and the default cache go (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work folder (runs, logs, cache)")
    p.add_argument("--json", type=Path, default=None, help="result file (default: benchmarks/results/quickstart_<size>.json)")
    args = p.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    for item in args.override:
        if "=" not in item:
            p.error(f"--override {item!r}: expected key=value")
    result = benchmark(args)
    print_table(result)
    out = args.json or ROOT / "benchmarks" / "results" / f"quickstart_{args.size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nresult: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
