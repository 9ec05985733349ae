"""Plumbing shared by the benchmarks (``bench_focus.py``, ``bench_wechsel.py``), mostly for ``--end-to-end``.

Each implementation runs in its own Python process, offline, with a fixed thread count and its own
tokxfer cache under the benchmark's work folder, so timings and memory are per implementation.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(threads: int, work: Path) -> dict:
    """Environment of a benchmark worker: ``threads`` for every BLAS/OpenMP/numba pool, offline, quiet."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    env.update(TQDM_DISABLE="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TOKXFER_CACHE=str(work / "tokxfer-cache"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_worker(cmd: list[str], env: dict, what: str) -> float:
    """Run one worker; its wall seconds, or a RuntimeError with the end of its output when it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{(proc.stderr or proc.stdout)[-3000:]}")
    return round(time.perf_counter() - t0, 2)


def environment() -> dict:
    """The machine facts every benchmark result records."""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
