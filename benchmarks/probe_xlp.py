"""Probe the XLP settings' multilingual sources: pretrain with given settings, fine-tune, collect per-language results.

Runs ``python -m harness.cli run <config> <overrides> --runs-dir RUNS --no-tracking --quiet`` for one
experiment (``xlp-table1.yaml``, ``xlp-table1-translate-train.yaml`` or ``xlp-table2.yaml`` by
default with the overrides given), then writes one JSON with, per record: the encoding, task,
seed, per-language metrics (accuracy or BLEU), the trial's wall and task seconds, and the
pretraining facts of its source (dev loss, MLM/TLM final loss, train seconds, CPU seconds, steps).
Wall times on a shared machine are upper bounds; CPU seconds of the pretraining are the
load-independent figure.

Usage::

    TOKXFER_CACHE=/tmp/cache OMP_NUM_THREADS=1 python benchmarks/probe_xlp.py \\
        --config harness/configs/xlp-table1.yaml --runs-dir /tmp/xlp-probe --out benchmarks/results/xlp_probe.json \\
        encodings=[none] seeds=[1] source.pretrain.steps=1000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness.run.records import iter_records


def _source_facts(record: dict) -> dict:
    """The pretraining facts of the record's source model (its ``pretrain_info.json``), when it is local."""
    path = (record.get("revisions") or {}).get("source_model")
    info_file = Path(str(path)) / "pretrain_info.json" if path else None
    if info_file is None or not info_file.is_file():
        return {}
    info = json.loads(info_file.read_text())
    tlm = info.get("tlm") or {}
    return {
        "source_dir": info_file.parent.name,
        "steps": info["config"]["steps"],
        "dev_loss": info.get("dev_loss"),
        "final_mlm_loss": info.get("final_loss"),
        "final_tlm_loss": tlm.get("final_loss"),
        "train_s": info["timings"]["train_s"],
        "cpu_s": info["timings"]["cpu_s"],
        "parameters": info.get("parameters"),
    }


def summarize(runs: Path) -> list[dict]:
    """One row per record of ``runs`` (every experiment folder under it)."""
    rows = []
    for exp in sorted(p for p in runs.iterdir() if p.is_dir()):
        for rec in iter_records(exp):
            cfg = rec.get("config", {})
            metrics = {lang: {k: round(v, 4) for k, v in m.items() if isinstance(v, (int, float))}
                       for lang, m in (rec.get("metrics") or {}).items()}  # fmt: skip
            rows.append({
                "experiment": exp.name,
                "encoding": (cfg.get("encoding") or {}).get("id") or (cfg.get("encoding") or {}).get("name"),
                "task": (cfg.get("task") or {}).get("id") or (cfg.get("task") or {}).get("name"),
                "seed": rec.get("seed"),
                "status": rec.get("status"),
                "metrics": metrics,
                "timings": {k: round(v, 1) for k, v in (rec.get("timings") or {}).items() if isinstance(v, (int, float))},
                "torch_threads": (rec.get("environment") or {}).get("torch_threads"),
                "source": _source_facts(rec),
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="experiment YAML")
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--note", default="", help="free text stored with the results")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the experiment")
    args = ap.parse_args(argv)
    runs = Path(args.runs_dir)
    cmd = [sys.executable, "-m", "harness.cli", "run", args.config, *args.overrides, "--runs-dir", str(runs),
           "--no-tracking", "--quiet"]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
    out = {"command": " ".join(cmd[1:]), "note": args.note, "returncode": proc.returncode,
           "wall_s": round(wall, 1), "machine": "shared 2-core machine (loaded): wall times are upper bounds",
           "records": summarize(runs) if runs.is_dir() else []}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for row in out["records"]:
        print(json.dumps({k: row[k] for k in ("encoding", "task", "seed", "status", "metrics")})[:900])
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
