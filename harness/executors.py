"""Executors: where trials run. In-process (CPU / one GPU), one worker per GPU, or Slurm via submitit.

Every executor calls :func:`harness.runner.execute`, which writes the trial's record atomically
before the executor hears of it, so nothing finished is lost when a grid is interrupted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import records


def _progress(total: int, enabled: bool):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), TimeRemainingColumn(), disable=not enabled or total == 0, transient=False,
    )


class LocalExecutor:
    """Run trials one after another in this process (on its default device)."""

    def __init__(self, progress: bool = True):
        self.progress = progress

    def run(self, specs: list, runs_dir: str, on_record: Callable[[dict], None]) -> list[dict]:
        from harness.runner import execute

        out = []
        with _progress(len(specs), self.progress) as prog:
            task = prog.add_task("", total=len(specs))
            for spec in specs:
                prog.update(task, description=spec.describe())
                rec = execute(spec, runs_dir, progress=self.progress)
                on_record(rec)
                out.append(rec)
                prog.advance(task)
        return out


def _gpu_worker(gpu: str, queue, results, runs_dir: str) -> None:  # pragma: no cover - needs GPUs
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    from harness.runner import execute

    while True:
        spec = queue.get()
        if spec is None:
            return
        rec = execute(spec, runs_dir, progress=False)
        results.put(rec["trial_id"])


class GpuPoolExecutor:
    """One worker process per GPU, pinned with ``CUDA_VISIBLE_DEVICES``; failures stay in their trial.

    Args:
        gpus: GPU indices to use (default: all visible).
    """

    def __init__(self, gpus: list[int] | None = None, progress: bool = True):
        import torch

        self.gpus = [str(g) for g in (gpus if gpus is not None else range(torch.cuda.device_count()))]
        if not self.gpus:
            raise RuntimeError("GpuPoolExecutor: no GPUs visible; use the local executor")
        self.progress = progress

    def run(self, specs: list, runs_dir: str, on_record: Callable[[dict], None]) -> list[dict]:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        queue, results = ctx.Queue(), ctx.Queue()
        for s in specs:
            queue.put(s)
        for _ in self.gpus:
            queue.put(None)
        procs = [ctx.Process(target=_gpu_worker, args=(g, queue, results, runs_dir)) for g in self.gpus]
        for p in procs:
            p.start()
        out = []
        rec_dir = Path(runs_dir)
        with _progress(len(specs), self.progress) as prog:
            task = prog.add_task(f"{len(self.gpus)} GPU workers", total=len(specs))
            by_id = {s.trial_id: s for s in specs}
            for _ in specs:
                tid = results.get()
                rec = records.load_record(rec_dir / by_id[tid].experiment / "records" / f"{tid}.json")
                on_record(rec)
                out.append(rec)
                prog.advance(task)
        for p in procs:
            p.join()
        return out


class SlurmExecutor:
    """Submit each trial as a Slurm job through submitit (``pip install tokxfer[cluster]``).

    Records and caches must live on a shared filesystem. ``slurm`` holds submitit parameters,
    e.g. ``{"slurm_partition": "gpu", "gpus_per_node": 1, "timeout_min": 120}``.
    """

    def __init__(self, folder: str, slurm: dict[str, Any] | None = None, progress: bool = True):
        try:
            import submitit
        except ImportError as e:
            raise RuntimeError("the Slurm executor needs submitit: pip install 'tokxfer[cluster]'") from e
        self.executor = submitit.AutoExecutor(folder=folder)
        self.executor.update_parameters(**(slurm or {}))
        self.progress = progress

    def run(self, specs: list, runs_dir: str, on_record: Callable[[dict], None]) -> list[dict]:
        from harness.runner import execute

        jobs = self.executor.map_array(execute, specs, [runs_dir] * len(specs), [False] * len(specs))
        out = []
        for job in jobs:
            rec = job.result()
            on_record(rec)
            out.append(rec)
        return out


def make_executor(name: str, progress: bool = True, **kw) -> Any:
    """``local`` | ``gpus`` | ``slurm``."""
    if name == "local":
        return LocalExecutor(progress=progress)
    if name == "gpus":
        return GpuPoolExecutor(progress=progress, **kw)
    if name == "slurm":
        return SlurmExecutor(progress=progress, **kw)
    raise ValueError(f"executor: expected local|gpus|slurm, got {name!r}")
