"""Executors: where trials run. In-process (CPU / one GPU), one worker per GPU, or Slurm via submitit.

An executor is given the trial function ``execute`` (:func:`harness.run.runner.execute`, passed in by
:func:`harness.run.experiment.run_experiment`, so this module imports neither): it runs a trial and
writes its record atomically before the executor hears of it, so nothing finished is lost when a
grid is interrupted. Optional hooks from the grid:

* ``claim(spec) -> bool`` is asked right before a trial starts; ``False`` means another
  ``tokxfer run`` process works on it (see :mod:`harness.run.claims`) and the trial is left out;
* ``lost(spec, reason, since) -> record`` is called in this process when a worker died during a
  trial (killed, out of memory, a Slurm job cancelled …): it writes the trial's failed record,
  unless the worker wrote a record after ``since`` (then it returns that one).

Worker processes (``gpus``) and Slurm jobs load the ``--plugin`` files before running a trial.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import progress
from harness.errors import TokxferError
from harness.run import records

__all__ = ["ExecutorError", "LocalExecutor", "GpuPoolExecutor", "WorkerPoolExecutor", "SlurmExecutor", "make_executor",
           "parse_gpu_ids", "run_with_plugins", "default_workers", "init_group", "next_spec", "trial_threads"]

GPUS_ENV = "TOKXFER_GPUS"
"""Comma-separated device ids for the ``gpus`` executor (default: every visible CUDA device).
Also what tests use to run the pool on CPU with fake devices."""


class ExecutorError(TokxferError, RuntimeError):
    """An executor cannot run (no GPUs, submitit missing, workers that cannot start)."""


_GPU_ID = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*")
"""A device as ``CUDA_VISIBLE_DEVICES`` names one: an index, or a ``GPU-…`` / ``MIG-…`` UUID."""


def parse_gpu_ids(text: str, source: str) -> list[str]:
    """Device ids from a comma-separated list (``--gpus``, ``$TOKXFER_GPUS``): non-negative indices
    (or GPU/MIG UUIDs), strictly — whatever else would end up in ``CUDA_VISIBLE_DEVICES``, where CUDA
    silently shows no device and the "GPU" workers run on the CPU.

    Raises:
        ExecutorError: naming ``source`` (the flag or variable) and the first bad entry.

    Example:
        >>> parse_gpu_ids("0, 1", "--gpus")
        ['0', '1']
        >>> parse_gpu_ids("a;b", "TOKXFER_GPUS")
        Traceback (most recent call last):
        ...
        harness.run.executors.ExecutorError: TOKXFER_GPUS='a;b': expected comma-separated device indices like 0,1 (non-negative integers), got 'a;b'
    """
    ids = [g.strip() for g in text.split(",")]
    for g in ids:
        if not _GPU_ID.fullmatch(g):
            raise ExecutorError(
                f"{source}={text!r}: expected comma-separated device indices like 0,1 (non-negative integers), got {g!r}"
            )
    return ids


def _always(spec: Any) -> bool:
    return True


def _load_plugins(plugins: Sequence[str]) -> None:
    from harness import registry

    for p in plugins:
        registry.load_plugin(p)


def run_with_plugins(plugins: Sequence[str], execute: Callable, spec: Any, runs_dir: str, progress: bool = False) -> dict:
    """Load ``--plugin`` files, then run ``execute(spec, runs_dir, progress)`` (entry point of Slurm jobs)."""
    _load_plugins(plugins)
    return execute(spec, runs_dir, progress=progress)


@contextlib.contextmanager
def trial_threads(threads: int | None):
    """Run the body with ``threads`` torch threads (``None``: leave them), then restore the process's count.

    A float32 matrix product's last bits can follow the thread count (on this project's 2026-11-28 CI
    machine, an AMD EPYC, MLM loss at init moved by 1.5e-8 between 2 threads and 1), so every local
    executor runs its trials at the same count, one by default (``--threads``), and a record's numbers do
    not depend on ``--workers``; each record carries the count in ``environment.torch_threads``.
    """
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_threads(threads: int | None, allow_none: bool = True) -> None:
    if threads is None and allow_none:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ExecutorError(f"--threads: expected a positive number of torch threads per trial, got {threads!r}")


class LocalExecutor:
    """Run trials one after another in this process (on its default device), at ``threads`` torch threads
    each (default 1, as every worker of :class:`WorkerPoolExecutor`; ``None`` keeps the process's count)."""

    def __init__(self, progress: bool = True, threads: int | None = 1):
        _check_threads(threads)
        self.progress = progress
        self.threads = threads

    def run(
        self, specs: list, runs_dir: str, on_record: Callable[[dict], None], *, execute: Callable,
        claim: Callable[[Any], bool] | None = None, lost: Callable | None = None,
    ) -> list[dict]:
        """Run each spec ``claim`` grants, in order; return their records."""
        claim = claim or _always
        out = []
        with progress.terminal_bar("trials", len(specs), enabled=self.progress) as bar:
            for spec in specs:
                if claim(spec):
                    bar.describe(spec.describe())
                    with trial_threads(self.threads):
                        rec = execute(spec, runs_dir, progress=self.progress)
                    on_record(rec)
                    out.append(rec)
                bar.advance(1)
        return out


# --------------------------------------------------------------------------------------------
# worker processes: one per GPU (``gpus``), or one per core (``--workers N``)

WORKER_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Thread-count variables a CPU worker starts with, so that the BLAS libraries of N workers on N cores
do not each start one thread per core."""


def _slot_env(slot: tuple[str, ...]) -> dict[str, str]:
    """The environment a worker process of ``slot`` starts with: a CPU slot's thread count for the BLAS libraries."""
    return {v: slot[1] for v in WORKER_THREAD_VARS} if slot[0] == "cpu" else {}


def _start_slot(slot: tuple[str, ...], init: Callable[[], None] | None) -> None:
    """First thing in a worker process: pin the slot (a device, or a torch thread count), then run ``init`` (the
    command's logging and library settings)."""
    kind, value = slot[0], slot[1]
    if kind == "gpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = value
    else:
        import torch

        torch.set_num_threads(int(value))
        with contextlib.suppress(RuntimeError):  # only settable before any inter-op work; none has run here
            torch.set_num_interop_threads(int(value))
    if init is not None:
        init()


def _pool_worker(slot: tuple[str, ...], conn, runs_dir: str, execute: Callable, plugins: Sequence[str],
                 init: Callable[[], None] | None = None) -> None:
    """Worker loop: pin the slot and run ``init`` (:func:`_start_slot`), load plugins, then run the specs the
    parent sends until ``None``."""
    _start_slot(slot, init)
    try:
        _load_plugins(plugins)
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready",))
    try:
        while True:
            try:
                spec = conn.recv()
            except EOFError:  # the parent is gone
                return
            if spec is None:
                return
            execute(spec, runs_dir, progress=False)  # writes the record; the parent reads it from the file
            conn.send(("done", spec.trial_id))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent reports it, once
        return


def _prepare_worker(slot: tuple[str, ...], plugins: Sequence[str], init: Callable[[], None] | None) -> None:
    """Start of a :meth:`WorkerPoolExecutor.prepare` process: as a trial worker's (:func:`_start_slot`), then plugins."""
    _start_slot(slot, init)
    _load_plugins(plugins)


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """``os.environ`` updated with ``values`` for the ``with`` block (what a process started inside inherits)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Worker:
    def __init__(self, ctx, slot: tuple[str, ...], runs_dir: str, execute: Callable, plugins: Sequence[str],
                 init: Callable[[], None] | None):
        self.slot = slot
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_pool_worker, args=(slot, child, runs_dir, execute, tuple(plugins), init))
        with _environment(_slot_env(slot)):
            self.proc.start()
        child.close()
        self.ready = False
        self.spec: Any = None
        self.since = 0.0


def init_group(spec: Any) -> str | None:
    """What a trial shares with its siblings: the hash of its resolved config without the task and the
    stages (``None`` for a spec without ``resolved()``, a test's stand-in). Trials of one group read
    one cached initialization (and, at init, the student's cached sentence embeddings).

    Example:
        >>> from types import SimpleNamespace as NS
        >>> a = NS(resolved=lambda: {"method": "focus", "seed": 1, "task": "P", "stages": []})
        >>> b = NS(resolved=lambda: {"method": "focus", "seed": 1, "task": "Q", "stages": []})
        >>> init_group(a) == init_group(b), init_group(NS())
        (True, None)
    """
    resolved = getattr(spec, "resolved", None)
    if resolved is None:
        return None
    from harness.cache import content_hash

    return content_hash({k: v for k, v in resolved().items() if k not in ("task", "stages", "stage_set")})


SOURCE_GROUP = "source:"
"""Prefix of the group of a trial whose source model another trial is building (:meth:`_PoolExecutor._groups`)."""


def next_spec(queue: deque, busy: set, groups: Callable[[Any], set] | None = None) -> Any:
    """Take the first spec of ``queue`` none of whose groups is in ``busy`` (the groups other workers are
    running; a spec's groups: ``groups(spec)``, by default its :func:`init_group`), else the first one that
    waits only on an initialization, else none (``None``: every spec reads a source model being built, a wait of
    minutes that the worker spends idle rather than inside a trial).

    Why: a grid lists the tasks of one initialization next to each other. Handed out in that order,
    the second worker would start the second task while the first still builds the initialization
    the two share, and wait on its build lock with its core idle (the real-small lane lost ~10 % of
    its two cores that way). Passing over it costs nothing: it runs later, from the cache. The
    numbers do not move (each trial is seeded on its own); only when rows complete.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> spec = lambda m, t: NS(id=m + t, resolved=lambda: {"method": m, "task": t})
        >>> q = deque([spec("a", "Q"), spec("b", "P"), spec("b", "Q")])
        >>> next_spec(q, {init_group(spec("a", "P"))}).id, [s.id for s in q]
        ('bP', ['aQ', 'bQ'])
        >>> next_spec(q, {init_group(spec("a", "P")), init_group(spec("b", "P"))}).id  # nothing else to do
        'aQ'
        >>> reads_x = lambda s: {init_group(s), SOURCE_GROUP + "/cache/x"}  # a source another worker builds
        >>> next_spec(deque([spec("c", "P")]), {SOURCE_GROUP + "/cache/x"}, reads_x) is None
        True
    """
    busy = busy - {None}
    groups = groups or (lambda spec: {init_group(spec)})
    if busy:
        for i, spec in enumerate(queue):
            if not (groups(spec) & busy):
                del queue[i]
                return spec
        for i, spec in enumerate(queue):  # each waits on something: a sibling's initialization (seconds) at most
            if not any(str(g).startswith(SOURCE_GROUP) for g in groups(spec) & busy):
                del queue[i]
                return spec
        return None
    return queue.popleft()


class _PoolExecutor:
    """Worker processes, each fed one trial at a time by this process; failures stay in their trial.

    The parent claims each trial right before handing it to an idle worker (the grid's ``claim``), so
    the claims protect the grid against other ``tokxfer run`` processes exactly as in-process runs do,
    and mirrors each record as it lands (``on_record``). A worker that dies during a trial (killed, out
    of memory) costs that trial only: it is recorded as failed (through the runner's ``lost`` hook; the
    same command re-runs it) and a new worker takes its slot. Subclasses name the slots.
    """

    flag = ""
    """The option that asked for the pool, for messages."""
    progress = True
    plugins: tuple[str, ...] = ()
    worker_init: Callable[[], None] | None = None
    """Run first in every worker (picklable): the command line passes its logging and library settings."""
    poll_s = 1.0
    building: Mapping[str, str] = {}
    """Trial id → the cache directory of a source model its trial builds (:func:`harness.run.runner.plan_sources`,
    set by :func:`harness.run.experiment.run_experiment`): while that directory is missing, no two such trials
    run at once (the second would wait on the first's build lock with its core idle)."""

    def _groups(self, spec: Any) -> set:
        """What ``spec`` must not share with a running trial: its initialization and a source still being built."""
        out = {init_group(spec)}
        where = self.building.get(getattr(spec, "trial_id", None))
        if where is not None and not Path(where).is_dir():
            out.add(f"{SOURCE_GROUP}{where}")
        return out - {None}

    def _slots(self, n_specs: int) -> list[tuple[str, ...]]:
        raise NotImplementedError

    def _describe(self, slot: tuple[str, ...]) -> str:
        raise NotImplementedError

    def run(
        self, specs: list, runs_dir: str, on_record: Callable[[dict], None], *, execute: Callable,
        claim: Callable[[Any], bool] | None = None, lost: Callable | None = None,
    ) -> list[dict]:
        """Run the specs on the pool; return their records (failed ones for trials whose worker died)."""
        # Stays whole: the dispatch loop (hand out, wait, collect, replace a lost worker) shares the queue, the
        # workers and the progress bar; split, that state would travel through every piece.
        import multiprocessing as mp
        from multiprocessing.connection import wait

        claim = claim or _always
        slots = self._slots(len(specs))
        if not specs:
            return []
        ctx = mp.get_context("spawn")
        queue = deque(specs)
        workers = {s: _Worker(ctx, s, runs_dir, execute, self.plugins, self.worker_init) for s in slots}
        out: list[dict] = []
        rec_root = Path(runs_dir)
        try:
            with progress.terminal_bar("trials", len(specs), enabled=self.progress) as bar:
                bar.describe(f"{len(slots)} workers")
                while True:
                    for w in workers.values():  # hand out work to idle workers
                        while w.ready and w.spec is None and queue:
                            running = [self._groups(o.spec) for o in workers.values() if o.spec is not None]
                            spec = next_spec(queue, set().union(*running), self._groups)
                            if spec is None:  # every trial left reads a source being built: wait for it
                                break
                            if not claim(spec):
                                bar.advance(1)
                                continue
                            w.spec, w.since = spec, time.time()
                            w.conn.send(spec)
                            bar.describe(f"{len(workers)} workers · {spec.describe()}")
                    if not queue and all(w.spec is None for w in workers.values()):
                        break
                    wait([w.conn for w in workers.values()] + [w.proc.sentinel for w in workers.values()],
                         timeout=self.poll_s)
                    for s, w in list(workers.items()):
                        msg = None
                        try:
                            if w.conn.poll():
                                msg = w.conn.recv()
                        except (EOFError, OSError):
                            msg = None
                        if msg is not None:
                            if msg[0] == "error":
                                raise ExecutorError(f"{self.flag}: {self._describe(s)} could not start: {msg[1]}")
                            if msg[0] == "ready":
                                w.ready = True
                            elif msg[0] == "done":
                                spec, w.spec = w.spec, None
                                rec = records.read_record(rec_root / spec.experiment / "records" / f"{msg[1]}.json")
                                on_record(rec)
                                out.append(rec)
                                bar.advance(1)
                            continue
                        if w.proc.is_alive():
                            continue
                        # the worker died
                        w.proc.join()
                        if not w.ready:
                            raise ExecutorError(
                                f"{self.flag}: {self._describe(s)} exited with code {w.proc.exitcode} while starting"
                            )
                        if w.spec is not None:
                            reason = (f"the {self._describe(s)} (process {w.proc.pid}) died (exit code "
                                      f"{w.proc.exitcode}) during the trial")
                            if lost is None:
                                raise ExecutorError(reason)
                            rec = lost(w.spec, reason, w.since)
                            on_record(rec)
                            out.append(rec)
                            bar.advance(1)
                        w.conn.close()
                        if queue:
                            workers[s] = _Worker(ctx, s, runs_dir, execute, self.plugins, self.worker_init)
                        else:
                            del workers[s]
        finally:
            for w in workers.values():
                try:
                    w.conn.send(None)
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + 10
            for w in workers.values():
                w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
                if w.proc.is_alive():
                    w.proc.terminate()
                    w.proc.join(timeout=5)
        return out


class GpuPoolExecutor(_PoolExecutor):
    """One worker process per GPU, pinned with ``CUDA_VISIBLE_DEVICES``; failures stay in their trial.

    The parent hands out one trial at a time to an idle worker. A worker that dies during a
    trial (killed, out of memory) costs that trial only: it is recorded as failed (through the
    runner's ``lost`` hook) and a new worker takes the device.

    Args:
        gpus: device ids to use (default: ``$TOKXFER_GPUS``, else every visible CUDA device).
            The ids are only written into ``CUDA_VISIBLE_DEVICES``, so tests can pass fake ones on CPU.
        plugins: ``--plugin`` files every worker loads.
        progress: show a progress bar.
        worker_init: run first in every worker (picklable).
    """

    flag = "--executor gpus"

    def __init__(self, gpus: Sequence[int | str] | None = None, progress: bool = True, plugins: Sequence[str] = (),
                 worker_init: Callable[[], None] | None = None):
        if gpus is None and os.environ.get(GPUS_ENV):
            gpus = parse_gpu_ids(os.environ[GPUS_ENV], GPUS_ENV)
        if gpus is None:
            import torch

            gpus = list(range(torch.cuda.device_count()))
        self.gpus = [str(g) for g in gpus]
        if not self.gpus:
            raise ExecutorError(
                f"--executor gpus: no CUDA device visible (set {GPUS_ENV}=0,1,… to name devices, or use --executor local)"
            )
        self.progress = progress
        self.plugins = tuple(str(p) for p in plugins)
        self.worker_init = worker_init
        self.poll_s = 1.0

    def _slots(self, n_specs: int) -> list[tuple[str, ...]]:
        return [("gpu", g) for g in self.gpus]

    def _describe(self, slot: tuple[str, ...]) -> str:
        return f"worker for device {slot[1]}"


def default_workers() -> int:
    """``--workers``' default: the cores this process may run on (``sched_getaffinity``, else ``os.cpu_count()``);
    1 where a CUDA device is visible, since the trials run on it (``--executor gpus``: one worker per GPU)."""
    import torch

    if torch.cuda.is_available():
        return 1
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class WorkerPoolExecutor(_PoolExecutor):
    """``workers`` processes on this machine's CPU, ``threads`` torch (and BLAS) threads each (``--workers N``).

    Every trial writes the same numbers as in a one-worker run at the same thread count (one by
    default, for both: :func:`trial_threads`; the grid equality test in ``tests/run/test_workers.py``
    holds this). The thread count is not part of a trial's identity; it is recorded in each record's
    ``environment.torch_threads``. What several trials share and whose result depends on the thread
    count (the built-in source model's pretraining) is built before the trials, at the trials' thread count,
    several at once over the workers (:meth:`prepare`). No more workers start than there are trials.

    Args:
        workers: worker processes (>= 2 makes sense; 1 runs one worker process).
        threads: torch threads per worker.
        plugins: ``--plugin`` files every worker loads.
        progress: show a progress bar.
        worker_init: run first in every worker (picklable).
    """

    flag = "--workers"
    prepare_in_parent = True
    """Ask :func:`harness.run.experiment.run_experiment` to build shared inputs before :meth:`run` (:meth:`prepare`)."""

    def __init__(self, workers: int, threads: int = 1, progress: bool = True, plugins: Sequence[str] = (),
                 worker_init: Callable[[], None] | None = None):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ExecutorError(f"--workers: expected a positive number of worker processes, got {workers!r}")
        _check_threads(threads, allow_none=False)
        self.workers, self.threads = workers, threads
        self.progress = progress
        self.plugins = tuple(str(p) for p in plugins)
        self.worker_init = worker_init
        self.poll_s = 1.0

    def prepare(self, specs: Sequence[Any], build: Callable[[Any], None]) -> None:
        """``build(spec)`` for every spec, before the trials, at the trials' thread count (``threads``).

        For what several trials share and whose bits follow the thread count (a built-in source model's
        pretraining, :func:`harness.run.runner.prepare_source`): one spec is built in this process, several at
        once in up to ``workers`` processes (an XLP grid pretrains one source per encoding; one process after
        another left all but one core idle for hours). Either way each build runs at ``threads`` threads, as a
        one-process run builds it inside its trial, so the result does not depend on ``--workers``. ``build``
        must be picklable and handle its own errors (a failed build is left to the trials that need it).
        """
        specs = list(specs)
        n = min(self.workers, len(specs))
        if n <= 1:
            with trial_threads(self.threads):
                for spec in specs:
                    build(spec)
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        slot = ("cpu", str(self.threads), "prepare")
        with _environment(_slot_env(slot)), ProcessPoolExecutor(
                n, mp_context=mp.get_context("spawn"), initializer=_prepare_worker,
                initargs=(slot, self.plugins, self.worker_init)) as pool:
            for spec, done in [(spec, pool.submit(build, spec)) for spec in specs]:
                try:
                    done.result()
                except Exception as e:  # the builder died (killed, out of memory): the trials build it themselves
                    logging.getLogger("tokxfer").warning(
                        "could not prepare %s before the trials (%s: %s); its trials will build it",
                        getattr(spec, "trial_id", spec), type(e).__name__, e)

    def run(
        self, specs: list, runs_dir: str, on_record: Callable[[dict], None], *, execute: Callable,
        claim: Callable[[Any], bool] | None = None, lost: Callable | None = None,
    ) -> list[dict]:
        """The trials on the pool; a single trial runs in this process (:class:`LocalExecutor`, after the ``plugins``:
        the same record, without a worker process that imports everything again while this one waits, and
        visible to a profiler of this process)."""
        if len(specs) <= 1:
            _load_plugins(self.plugins)
            return LocalExecutor(progress=self.progress, threads=self.threads).run(
                specs, runs_dir, on_record, execute=execute, claim=claim, lost=lost)
        return super().run(specs, runs_dir, on_record, execute=execute, claim=claim, lost=lost)

    def _slots(self, n_specs: int) -> list[tuple[str, ...]]:
        # the index tells the slots apart; the thread count is what the worker is pinned to
        return [("cpu", str(self.threads), str(i)) for i in range(min(self.workers, max(n_specs, 1)))]

    def _describe(self, slot: tuple[str, ...]) -> str:
        return f"worker {int(slot[2]) + 1}"


# --------------------------------------------------------------------------------------------
# Slurm


class SlurmExecutor:
    """Submit each trial as a Slurm job through submitit (``pip install tokxfer[cluster]``).

    Records and caches must live on a shared filesystem. A job that dies (cancelled, out of
    time, node failure, killed) is recorded as a failed trial; the others go on.

    Args:
        folder: where submitit keeps job scripts and logs (the CLI default is
            ``<runs dir>/<experiment>/slurm``). It holds the pickled trial functions every job
            unpickles, so it is made private to the user (mode 0700, :func:`private_folder`).
        slurm: submitit parameters, e.g. ``{"slurm_partition": "gpu", "gpus_per_node": 1, "timeout_min": 120}``.
        cluster: submitit's cluster (``None``: auto-detect; ``"local"`` runs jobs as local processes,
            ``"debug"`` in this process: for tests and dry runs).
        plugins: ``--plugin`` files every job loads.
    """

    def __init__(self, folder: str | os.PathLike, slurm: dict[str, Any] | None = None, progress: bool = True,
                 cluster: str | None = None, plugins: Sequence[str] = ()):
        try:
            import submitit
        except ImportError as e:
            raise ExecutorError("--executor slurm needs submitit: pip install 'tokxfer[cluster]'") from e
        self.folder = Path(folder)
        private_folder(self.folder, "--slurm-folder")
        self.executor = submitit.AutoExecutor(folder=str(self.folder), cluster=cluster)
        try:
            self.executor.update_parameters(**(slurm or {}))
        except (TypeError, ValueError) as e:
            raise ExecutorError(f"--slurm parameters: {e}") from None
        self.progress = progress
        self.plugins = tuple(str(p) for p in plugins)

    def run(
        self, specs: list, runs_dir: str, on_record: Callable[[dict], None], *, execute: Callable,
        claim: Callable[[Any], bool] | None = None, lost: Callable | None = None,
    ) -> list[dict]:
        """Submit every claimed spec as one job of an array; collect records as jobs end."""
        claim = claim or _always
        mine = [s for s in specs if claim(s)]
        if not mine:
            return []
        since = time.time()
        n = len(mine)
        jobs = self.executor.map_array(
            run_with_plugins, [self.plugins] * n, [execute] * n, mine, [runs_dir] * n, [False] * n
        )
        out = []
        for spec, job in zip(mine, jobs):
            try:
                rec = job.result()
            except Exception as e:  # the job died: cancelled, timed out, killed, node failure
                reason = f"Slurm job {job.job_id} ended without a result ({type(e).__name__}: {_first_line(e)})"
                if lost is None:
                    raise ExecutorError(reason) from e
                rec = lost(spec, reason, since)
            on_record(rec)
            out.append(rec)
        return out


def private_folder(folder: str | os.PathLike, what: str) -> Path:
    """Create ``folder`` (mode 0700) or make an existing one of ours private; refuse someone else's.

    Submitit's job folder holds pickles that every job loads: whoever can write there runs code
    as the user. A ``%j``-style placeholder (submitit fills in the job id) starts the part of the
    path submitit creates itself; the folder above it is the one made private.

    Raises:
        ExecutorError: the folder belongs to another user, or is not a folder.
    """
    folder = Path(folder)
    parts = folder.parts
    cut = next((i for i, part in enumerate(parts) if "%" in part), len(parts))
    base = Path(*parts[:cut]) if cut else Path(".")
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = base.stat()
    if not base.is_dir():
        raise ExecutorError(f"{what} {base}: not a folder")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise ExecutorError(f"{what} {base}: belongs to another user (uid {st.st_uid}); submitit's pickles there would "
                            f"be run as you: use a folder of your own")
    if st.st_mode & 0o077:
        os.chmod(base, 0o700)
    return base


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def make_executor(name: str, progress: bool = True, workers: int = 1, **kw) -> Any:
    """``local`` | ``gpus`` | ``slurm`` (keyword arguments go to the executor's constructor).

    ``local`` with ``workers`` > 1 is a :class:`WorkerPoolExecutor`; with one worker the trials run in
    this process. Either way each trial runs at ``threads`` torch threads (default 1), so the worker
    count never moves a number.
    """
    if name == "local":
        threads = kw.pop("threads", 1)
        if workers != 1:
            return WorkerPoolExecutor(workers, progress=progress, threads=threads if threads is not None else 1, **kw)
        return LocalExecutor(progress=progress, threads=threads)  # plugins load in this process; no worker to start
    if name == "gpus":
        return GpuPoolExecutor(progress=progress, **kw)
    if name == "slurm":
        return SlurmExecutor(progress=progress, **kw)
    raise ExecutorError(f"--executor: expected local|gpus|slurm, got {name!r}")
