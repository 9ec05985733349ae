"""Plumbing shared by the benchmarks (``bench_focus.py``, ``bench_wechsel.py``): workers and their processes.

Each implementation runs in its own Python process, offline, with a fixed thread count and its own
tokxfer cache under the benchmark's work folder, so timings and memory are per implementation.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
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


def peak_rss_bytes() -> int:
    """This process's peak resident memory in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_bytes() -> int:
    """This process's resident memory now, in bytes."""
    import psutil

    return psutil.Process().memory_info().rss


def spawn_core_worker(script: Path, method: str, argv: list[str], threads: int, out: Path) -> dict:
    """Run ``script --worker method ARGV --out out`` (a core benchmark's worker) with ``threads`` for every pool.

    Returns the worker's JSON (written next to ``out``) with its process wall seconds and ``npz`` (its rows),
    or ``{"method", "error", "wall_s"}`` with the last line of its output when it fails.
    """
    cmd = [sys.executable, str(script), "--worker", method, *argv, "--threads", str(threads), "--out", str(out)]
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    env["TQDM_DISABLE"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"method": method, "error": lines[-1] if lines else "failed", "wall_s": round(time.perf_counter() - t0, 1)}
    res = json.loads(Path(out).with_suffix(".json").read_text())
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["npz"] = str(out)
    return res


def run_worker(cmd: list[str], env: dict, what: str) -> float:
    """Run one worker; its wall seconds, or a RuntimeError with the end of its output when it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{(proc.stderr or proc.stdout)[-3000:]}")
    return round(time.perf_counter() - t0, 2)


def save_source_model(src_tok, dim: int, seed: int, out: Path) -> None:
    """A one-layer XLM-R masked LM over ``src_tok`` with ``N(0, 0.05²)`` ``dim``-d input embeddings (drawn from
    ``seed``), saved with its tokenizer under ``out`` (the end-to-end benchmarks' source model)."""
    import numpy as np
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    config = XLMRobertaConfig(
        vocab_size=len(src_tok), hidden_size=dim, num_hidden_layers=1, num_attention_heads=12, intermediate_size=256,
        max_position_embeddings=514, type_vocab_size=1, pad_token_id=src_tok.pad_token_id,
        bos_token_id=src_tok.bos_token_id, eos_token_id=src_tok.eos_token_id,
    )
    torch.manual_seed(seed)
    model = XLMRobertaForMaskedLM(config)
    E = np.random.default_rng(seed).standard_normal((len(src_tok), dim), dtype=np.float32) * np.float32(0.05)
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(torch.from_numpy(E))
    model.save_pretrained(out)
    src_tok.save_pretrained(out)


def environment() -> dict:
    """The machine facts every benchmark result records."""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
