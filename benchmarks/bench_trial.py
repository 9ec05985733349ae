"""Time one task trial end to end on the world, from a fixed initialization, through the real command line.

A trial is ``tokxfer run`` of an experiment cut down to one method, one task and one seed (the
source model held with ``source.pretrain.seed=0``, so every run reuses the cached source). Before
the timed runs, a *prepare* run of the same trial with a tiny task budget fills the init and LAPT
caches (their keys do not depend on the task), so the timed run is what a user waits for once those
caches are warm: process start-up, loading, the task's tokenization, fine-tuning and evaluation.

``--baseline-tree DIR`` times the same trial with the code of another checkout (e.g. ``git archive
main | tar -x -C /tmp/base``) right after each run of this one, alternating, so the two sides see
the same machine state and the reported ratio (baseline / this) is meaningful on a shared machine.
``--baseline-overrides`` gives the baseline its own overrides when this checkout's options are
unknown to it.

Every run records its wall time (process start-up included), CPU seconds (with one thread, close to
the wall time the run would take on an idle core, and far less disturbed by other load), peak RSS, the record's
timings (``task_s``, ``stages_s``, ``total_s``), its metrics, torch's thread count, and the machine's load
while it ran (:class:`benchmarks._load.LoadMonitor`, the check every benchmark uses: the CPU other
processes took, the trial's own excluded; the 1-minute load average where that is unknown). A speed
result needs an idle machine: a run on a busy one is marked ``loaded`` and the printed ratio says so.

``--profile`` runs each timed trial under ``cProfile`` and adds, per run, the cumulative seconds of the
phases a trial spends its time in (:data:`PHASES`: fine-tuning, its backward passes, optimizer steps and
gradient clipping, evaluation forwards, tokenization, model loading), measured under the profiler.

Run (one core, the committed budget of ``tasks-encoder.yaml``)::

    python benchmarks/bench_trial.py --task qa --method overlap --threads 1
    python benchmarks/bench_trial.py --task xnli --method overlap --threads 1 --repeat 2
    python benchmarks/bench_trial.py --task qa --threads 1 --baseline-tree /tmp/base --json benchmarks/results/trial_qa_vs_base.json

The JSON goes to ``benchmarks/results/trial_<task>_<method>.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._load import LoadMonitor  # noqa: E402
from benchmarks.bench_quickstart import THREAD_VARS, _git, load_average, machine_facts  # noqa: E402

DEFAULT_CONFIG = "harness/configs/tasks-encoder.yaml"
PREPARE_BUDGET = ("max_train_examples=16", "max_eval_examples=8", "train.epochs=1")
"""Task settings of the prepare run: enough to run the trial's init and stages (and fill their caches)."""
TIMING_KEYS = ("resources_s", "init_load_s", "init_method_s", "init_install_s", "stages_s", "task_s", "total_s")


PHASES = {
    "trial": ("harness/run/runner.py", "run_trial"),
    "finetune": ("tasks/loop.py", "finetune"),
    "backward": ("torch/autograd/__init__.py", "backward"),
    "optimizer_step": ("torch/optim/adam.py", "step"),
    "clip_grad_norm": ("torch/nn/utils/clip_grad.py", "clip_grad_norm_"),
    "evaluate_forward": ("tasks/loop.py", "predict"),
    "qa_best_spans": ("tasks/qa.py", "best_spans"),
    "tokenize": ("tasks/data.py", "encoded_once"),
    "model_load": ("transformers/modeling_utils.py", "from_pretrained"),
}
"""Phase name -> (file suffix, function) whose cumulative time under ``cProfile`` is the phase's seconds.
``finetune`` includes the evaluations it runs (``evaluate_forward``, ``qa_best_spans``)."""


def profile_phases(path: Path) -> dict[str, float | None]:
    """Cumulative seconds of each :data:`PHASES` entry in the ``cProfile`` output ``path`` (None: never called),
    and ``train_forward_and_rest``: ``finetune`` less its backward, optimizer, clipping and evaluation."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    out: dict[str, float | None] = {}
    for phase, (suffix, func) in PHASES.items():
        hits = [v[3] for (file, _, name), v in stats.items() if name == func and file.replace("\\", "/").endswith(suffix)]
        out[phase] = round(max(hits), 2) if hits else None
    parts = [out.get(k) or 0.0 for k in ("backward", "optimizer_step", "clip_grad_norm", "evaluate_forward", "qa_best_spans")]
    out["train_forward_and_rest"] = round(out["finetune"] - sum(parts), 2) if out["finetune"] is not None else None
    return out


class TrialConfigError(ValueError):
    """The experiment file has no method, task or encoding of the name asked for (the message names them)."""


def trial_config(config: Path, method: str, task: str, out: Path, encoding: str | None = None) -> Path:
    """``config`` cut down to ``method`` (by name or id, its settings kept) and ``task`` (and, given one,
    to the ``encoding`` of that name or id, e.g. one row of the XLP grids), written to ``out``."""
    from harness.inputs import load_yaml, read_text_file

    raw = load_yaml(read_text_file(config, "experiment file"))

    def name(entry: Any) -> str:
        return entry if isinstance(entry, str) else entry.get("id", entry["name"])

    methods = [m for m in raw["methods"] if name(m) == method]
    tasks = [t for t in raw["tasks"] if name(t) == task]
    if not methods:
        raise TrialConfigError(f"{config}: no method {method!r} (has {[name(m) for m in raw['methods']]})")
    if not tasks:
        raise TrialConfigError(f"{config}: no task {task!r} (has {[name(t) for t in raw['tasks']]})")
    raw["methods"], raw["tasks"] = methods, [t if isinstance(t, dict) else {"name": t} for t in tasks]
    if encoding is not None:
        encodings = [e for e in raw.get("encodings") or [] if name(e) == encoding]
        if not encodings:
            raise TrialConfigError(f"{config}: no encoding {encoding!r} (has {[name(e) for e in raw.get('encodings') or []]})")
        raw["encodings"] = encodings
    raw["tasks"][0].setdefault("config", {})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def child_env(tree: Path, threads: int) -> dict:
    """Offline, ``threads`` for every thread pool, ``tree``'s code first on the path."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONHASHSEED="0")  # fmt: skip
    for var in THREAD_VARS:
        env[var] = str(threads)
    env["PYTHONPATH"] = str(tree)
    return env


def run_trial(tree: Path, config: Path, overrides: list[str], threads: int, runs: Path, log: Path,
              profile: Path | None = None) -> dict:
    """One ``tokxfer run`` of the trial with ``tree``'s code: wall/CPU seconds, peak RSS, the record's facts;
    with ``profile`` (a file to write), run under ``cProfile`` and add the :func:`profile_phases`.

    Raises:
        RuntimeError: the command failed (the end of its log quoted) or wrote no ok record.
    """
    prof = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    cmd = [sys.executable, *prof, "-m", "harness.cli", "run", str(config), *overrides, "--runs-dir", str(runs),
           "--no-tracking", "--quiet", "--force"]  # fmt: skip
    with open(log, "wb") as out, LoadMonitor() as mon:  # the trial is a child waited for: its CPU is ours
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=child_env(tree, threads), cwd=tree, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    load = mon.record()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"`{' '.join(cmd[1:])}` (code {tree}) exited with {code}; end of {log}:\n"
                           f"{log.read_text(errors='replace')[-3000:]}")  # fmt: skip
    recs = [json.loads(p.read_text()) for p in sorted(runs.glob("*/records/*.json"))]
    if len(recs) != 1 or recs[0].get("status") != "ok":
        raise RuntimeError(f"{runs}: expected one ok record, found {[r.get('status') for r in recs]}")
    rec = recs[0]
    return {
        "code": str(tree), "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_bytes": int(usage.ru_maxrss) * 1024,
        "timings": {k: round(rec["timings"][k], 2) for k in TIMING_KEYS if rec.get("timings", {}).get(k) is not None},
        "metrics": rec["metrics"], "torch_threads": rec.get("environment", {}).get("torch_threads"),
        "trial_id": rec["trial_id"], "finetune": (rec.get("task_info") or {}).get("finetune"),
        "load_before": load["before"], "load_after": load["after"], "load": load, "loaded": bool(load["busy"]),
        "profile_s": profile_phases(profile) if profile is not None else None,
    }  # fmt: skip


def benchmark(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-trial-"))
    try:
        config = trial_config(ROOT / args.config, args.method, args.task, work / "trial.yaml", args.encoding)
    except TrialConfigError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    held = [f"seeds=[{args.seed}]", *held_source(args.source_seed)]
    mine = [*held, *_qualified(args.overrides)]
    theirs = [*held, *_qualified(args.baseline_overrides if args.baseline_overrides is not None else args.overrides)]
    sides = [("this", ROOT, mine)] + ([("baseline", Path(args.baseline_tree).resolve(), theirs)] if args.baseline_tree else [])
    result: dict[str, Any] = {
        "benchmark": "bench_trial", "task": args.task, "method": args.method, "encoding": args.encoding, "seed": args.seed,
        "source_seed": args.source_seed, "threads": args.threads,
        "config": args.config, "overrides": {name: over for name, _, over in sides},
        "git": _git(), "machine": machine_facts(), "load_start": load_average(), "prepare": None, "runs": [],
    }  # fmt: skip
    try:
        if not args.no_prepare:
            prep = [*mine, *_qualified(PREPARE_BUDGET)]
            t0 = time.perf_counter()
            run_trial(ROOT, config, prep, args.threads, _fresh(work / "prep-runs"), work / "prepare.log")
            result["prepare"] = {"wall_s": round(time.perf_counter() - t0, 2), "overrides": prep}
            print(f"prepare (init + stages cached): {result['prepare']['wall_s']:.0f}s", flush=True)
        for i in range(args.repeat):
            for name, tree, over in sides:
                prof = work / f"{name}-{i}.prof" if args.profile else None
                r = run_trial(tree, config, over, args.threads, _fresh(work / f"runs-{name}-{i}"), work / f"{name}-{i}.log", prof)
                result["runs"].append({"side": name, "repeat": i, **r})
                print(f"{name} #{i}: wall {r['wall_s']:.1f}s task {r['timings'].get('task_s', float('nan')):.1f}s "
                      f"cpu {r['cpu_s']:.0f}s threads {r['torch_threads']} load {r['load_before']} -> {r['load_after']}"
                      f"{' (LOADED)' if r['loaded'] else ''}  metrics {json.dumps(r['metrics'])[:200]}", flush=True)  # fmt: skip
                if r["profile_s"] is not None:
                    print(f"  profile (s, under cProfile): {json.dumps(r['profile_s'])}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["load_end"] = load_average()
    result["summary"] = summarize(result["runs"])
    return result


EXPERIMENT_KEYS = ("seeds", "source", "stages", "world", "methods")


def held_source(source_seed: str) -> list[str]:
    """The override that holds the source model's pretraining seed: ``source.pretrain.seed=N``, or none for
    ``trial`` (the source follows the trial seed, as in grids that pretrain one source per seed, so a run
    reuses the grid's cached source of that seed).

    Example:
        >>> held_source("0"), held_source("trial")
        (['source.pretrain.seed=0'], [])
    """
    return [] if source_seed == "trial" else [f"source.pretrain.seed={int(source_seed)}"]


def source_seed_arg(text: str) -> str:
    """``--source-seed``'s type: a non-negative integer or ``trial`` (anything else: argparse's one-line error, exit 2)."""
    if text != "trial" and not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer or 'trial', got {text!r}")
    return text


def _qualified(overrides: Any) -> list[str]:
    """Task overrides (``train.epochs=3``) as experiment overrides of the trial's one task; keys that start
    with an experiment key (``source.pretrain.seed=0``) pass unchanged."""
    return [o if o.split("=")[0].split(".")[0] in EXPERIMENT_KEYS else f"tasks.0.config.{o}" for o in overrides]


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def summarize(runs: list[dict]) -> dict:
    """Median wall and task seconds per side, and baseline / this ratios (marked when any run was loaded)."""
    out: dict[str, Any] = {}
    for side in sorted({r["side"] for r in runs}):
        mine = [r for r in runs if r["side"] == side]
        out[side] = {"wall_s_median": statistics.median(r["wall_s"] for r in mine),
                     "task_s_median": statistics.median(r["timings"]["task_s"] for r in mine),
                     "cpu_s_median": statistics.median(r["cpu_s"] for r in mine),
                     "n": len(mine), "metrics_identical": all(r["metrics"] == mine[0]["metrics"] for r in mine)}  # fmt: skip
    if "baseline" in out:
        out["ratio_wall"] = round(out["baseline"]["wall_s_median"] / out["this"]["wall_s_median"], 3)
        out["ratio_task"] = round(out["baseline"]["task_s_median"] / out["this"]["task_s_median"], 3)
        out["ratio_cpu"] = round(out["baseline"]["cpu_s_median"] / out["this"]["cpu_s_median"], 3)
    out["loaded"] = any(r["loaded"] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="experiment file (relative to the checkout)")
    ap.add_argument("--task", required=True)
    ap.add_argument("--method", default="overlap", help="method name or id in the config")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--encoding", default=None, help="language encoding name or id in the config (default: the config's, all of them)")
    ap.add_argument("--source-seed", default="0", type=source_seed_arg,
                    help="pretraining seed of a world source, held (default 0), or 'trial' to follow --seed (the XLP grids' per-seed sources)")
    ap.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads of the trial (default 1)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per side")
    ap.add_argument("--overrides", nargs="*", default=[],
                    help="task config overrides (key=value, relative to the task's config, e.g. train.epochs=3); "
                         "keys starting with seeds/source/stages/world are experiment overrides")
    ap.add_argument("--baseline-tree", default=None, help="another checkout, timed alternately with this one")
    ap.add_argument("--baseline-overrides", nargs="*", default=None, help="the baseline's task overrides (default: --overrides)")
    ap.add_argument("--no-prepare", action="store_true", help="skip the run that fills the init and LAPT caches")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, records)")
    ap.add_argument("--profile", action="store_true", help="run the timed trials under cProfile; the JSON gets their phases")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        ap.error("--repeat and --threads must be >= 1")
    try:
        result = benchmark(args)
    except TrialConfigError as e:
        print(f"bench_trial: {e}", file=sys.stderr)
        return 2
    s = result["summary"]
    if "ratio_wall" in s:
        mark = "  (LOADED machine: not a speed result)" if s["loaded"] else ""
        print(f"baseline / this: wall {s['ratio_wall']:.2f}x, task {s['ratio_task']:.2f}x, CPU {s['ratio_cpu']:.2f}x{mark}")
    stem = f"trial_{args.task}_{args.method}" + (f"_{args.encoding}" if args.encoding else "")
    path = Path(args.json) if args.json else ROOT / "benchmarks" / "results" / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
