"""What wrote an artifact: the package version, the git checkout, the time and the machine.

Records, caches' markers and ``init_info.json`` name what produced them with these.

Example:
    >>> set(git_info()) == {"sha", "dirty"} and now_iso().endswith("+00:00")
    True
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["now_iso", "package_version", "git_info", "environment"]


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_version() -> str:
    """tokxfer's installed version (``0+unknown`` when it is not installed)."""
    try:
        from importlib.metadata import version

        return version("tokxfer")
    except Exception:
        return "0+unknown"


def git_info(path: Path | None = None) -> dict:
    """``{"sha": ..., "dirty": bool}`` of the checkout tokxfer runs from (nulls outside git).

    Asked once per process and folder (two ``git`` commands, ~15 ms, were run for every trial record):
    the code a process runs was loaded when it started, so later edits of the checkout do not change it.
    """
    root = Path(path or Path(__file__).resolve().parent.parent)
    if root not in _GIT_MEMO:
        _GIT_MEMO[root] = _git_info(root)
    return dict(_GIT_MEMO[root])


_GIT_MEMO: dict[Path, dict] = {}


def _git_info(root: Path) -> dict:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return {"sha": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True, timeout=5)
        return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def environment() -> dict:
    """Library versions, device and host of this process.

    The versions and the host are read once per process (the package metadata lookups cost ~20 ms per
    trial record); the device, thread count and ``CUDA_VISIBLE_DEVICES`` are read on every call.
    """
    import torch

    if not _STATIC_ENV:
        _STATIC_ENV.update(_static_environment())
    static = dict(_STATIC_ENV)
    libs = {k: static.pop(k) for k in _LIBRARIES}
    return {
        **static,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "n_gpus": torch.cuda.device_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **libs,
    }


_LIBRARIES = ("transformers", "tokenizers", "datasets", "fasttext", "entmax", "sacrebleu", "seqeval", "mlflow")
_STATIC_ENV: dict[str, Any] = {}


def _static_environment() -> dict:
    import numpy
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        **_cpu_facts(),
    }
    for lib in _LIBRARIES:
        try:
            from importlib.metadata import version

            name = {"fasttext": "fasttext-numpy2"}.get(lib, lib)
            env[lib] = version(name)
        except Exception:
            env[lib] = None
    return env


def _cpu_facts() -> dict:
    """The CPU's model and the instructions that decide a bf16 product's rounding: a trial with bf16 autocast
    (``train.cpu_bf16``, ``pretrain.bf16``) gives different last bits with AMX tiles than with AVX512-BF16
    (one QA trial id: F1 52.4 on an AMX Xeon, 53.3 on an AVX512-BF16 EPYC;
    ``benchmarks/results/trial_qa_overlap_{3f3f786,4aaa3f6}.json``), so a record says which it ran on."""
    import torch

    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    facts: dict[str, Any] = {"cpu": model or platform.processor() or None}
    try:
        facts["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        facts["cpu_avx512_bf16"] = bool(torch.cpu._is_avx512_bf16_supported())
        facts["cpu_amx"] = bool(torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch
        pass
    return facts
