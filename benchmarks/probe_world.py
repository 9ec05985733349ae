"""Probe the world's task budgets: the NLI bag-of-words baselines, then a few task trials.

Runs (1) the bag-of-words leak baselines and the edit-lookup reference of :mod:`harness.world.baselines` on the world's NLI
files and (2) ``python -m harness.cli run <config> methods=[...] seeds=[1]`` for each task
experiment, then prints every record's metrics with the trial's wall time. Timings on a shared
machine are upper bounds only.

Usage::

    TOKXFER_CACHE=/tmp/cache python benchmarks/probe_world.py --size small \\
        --configs harness/configs/tasks-encoder.yaml harness/configs/tasks-iwslt.yaml \\
        --methods random overlap --runs-dir /tmp/probe-runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from harness.inputs import load_yaml, read_text_file
from harness.world import World, build_world
from harness.world.baselines import bow_baselines, edit_lookup


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def nli_baselines(world: World, langs: list[str], max_train: int | None) -> dict:
    """Bag-of-words accuracies and the edit-lookup reference per language (train capped at ``max_train`` examples)."""
    out = {}
    for lang in langs:
        train, dev, test = (_jsonl(world.task_file(lang, "xnli", s)) for s in ("train", "dev", "test"))
        train = train[:max_train] if max_train else train
        out[lang] = bow_baselines(train, dev, test)
        out[lang]["edit-lookup"] = edit_lookup(train, test)
    return out


def _records(runs_dir: Path) -> list[dict]:
    out = []
    for p in sorted(runs_dir.rglob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except ValueError:
            continue
        if isinstance(rec, dict) and "metrics" in rec and "trial_id" in rec:
            out.append(rec)
    return out


def _method_name(entry: str | dict) -> str:
    return entry if isinstance(entry, str) else entry.get("id", entry["name"])


def subset_config(config: Path, methods: list[str], tasks: list[str] | None, out: Path) -> Path:
    """A copy of ``config`` with only ``methods`` (by name or id, keeping their settings) and ``tasks``."""
    cfg = load_yaml(read_text_file(config, "experiment file"))
    cfg["methods"] = [m for m in cfg["methods"] if _method_name(m) in methods]
    missing = set(methods) - {_method_name(m) for m in cfg["methods"]}
    if missing:
        raise SystemExit(f"{config}: no method(s) {sorted(missing)} in its methods list")
    if tasks:
        cfg["tasks"] = [t for t in cfg["tasks"] if (t if isinstance(t, str) else t["name"]) in tasks]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--configs", nargs="*", default=[])
    ap.add_argument("--methods", nargs="+", default=["random", "overlap"])
    ap.add_argument("--seeds", default="[1]")
    ap.add_argument("--runs-dir", default="/tmp/probe-runs")
    ap.add_argument("--bow-langs", nargs="*", default=["src", "near"])
    ap.add_argument("--bow-max-train", type=int, default=None)
    ap.add_argument("--tasks", nargs="*", default=None, help="only these tasks of each config")
    ap.add_argument("--overrides", nargs="*", default=[])
    ap.add_argument("--json", default=None, help="also write every record's metrics and a mean ± std table (per "
                    "config, task, method) to this file")
    args = ap.parse_args(argv)
    probe: dict = {"args": vars(args), "load_start": _load(), "configs": {}}

    world = World(build_world(args.size, 0))
    if args.bow_langs:
        t = time.perf_counter()
        res = nli_baselines(world, args.bow_langs, args.bow_max_train)
        print(json.dumps({"nli_bag_of_words": res, "seconds": round(time.perf_counter() - t, 1)}, indent=1), flush=True)
        probe["nli_bag_of_words"] = res
    for config in args.configs:
        runs = Path(args.runs_dir) / Path(config).stem
        sub = subset_config(Path(config), args.methods, args.tasks, runs / "probe-config.yaml")
        cmd = [sys.executable, "-m", "harness.cli", "run", str(sub),
               f"seeds={args.seeds}", f"world.size={args.size}", *args.overrides,
               "--runs-dir", str(runs), "--no-tracking", "--quiet"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        print(f"== {config}: rc={proc.returncode} wall={wall:.0f}s (upper bound; shared machine)", flush=True)
        if proc.returncode:
            print(proc.stdout[-3000:], proc.stderr[-3000:])
        rows = []
        for rec in _records(runs):
            cfg = rec.get("config", {})
            row = {"method": _name(cfg.get("method", rec.get("init", {}).get("method"))), "task": _name(cfg.get("task")),
                   "seed": rec["seed"], "status": rec.get("status"), "metrics": rec["metrics"],
                   "total_s": round(rec.get("timings", {}).get("total_s", 0), 1),
                   "task_s": round(rec.get("timings", {}).get("task_s", 0), 1),
                   "torch_threads": rec.get("environment", {}).get("torch_threads")}  # fmt: skip
            rows.append(row)
            print(json.dumps(row, default=str)[:700], flush=True)
        probe["configs"][config] = {"rc": proc.returncode, "wall_s": round(wall, 1), "records": rows,
                                    "table": seed_table(rows)}  # fmt: skip
    probe["load_end"] = _load()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(probe, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


def _name(entry: Any) -> Any:
    """A method or task entry of a resolved config as its id or name."""
    return entry.get("id") or entry.get("name") if isinstance(entry, dict) else entry


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def seed_table(rows: list[dict]) -> dict:
    """``{task: {method: {language/metric: [mean, sample std, n]}}}`` over the ok records' seeds."""
    import statistics

    cells: dict = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        method = r["method"]
        for lang, metrics in r["metrics"].items():
            for metric, value in metrics.items():
                if isinstance(value, (int, float)):
                    cells.setdefault(r["task"], {}).setdefault(method, {}).setdefault(f"{lang}/{metric}", []).append(value)
    return {task: {m: {k: [statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else None, len(v)] for k, v in per.items()}
                   for m, per in methods.items()} for task, methods in cells.items()}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
