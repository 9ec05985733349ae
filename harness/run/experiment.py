"""A grid of trials: resume, claims between processes, executors, the tracker mirror.

:func:`run_experiment` expands an experiment into its trials, skips trials whose record exists
and is complete (resume), claims each trial before it runs so that several ``tokxfer run``
processes split one grid (:mod:`harness.run.claims`), hands the rest to an executor
(:mod:`harness.run.executors`) together with the trial function :func:`harness.run.runner.execute`
(which writes every record atomically the moment its trial ends), and mirrors each record to
the tracker. A failed trial is recorded with its traceback and the grid goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from pathlib import Path

from harness import about, registry
from harness.files import write_atomic
from harness.run import records
from harness.run.claims import TrialClaims
from harness.run.config import ExperimentConfig, TrialSpec, config_hash
from harness.run.executors import LocalExecutor
from harness.run.records import TrialRecord
from harness.run.runner import execute, failed_record, plan_sources, prepare_shared, prepare_source

log = logging.getLogger("tokxfer")

__all__ = ["ExperimentSummary", "WorkerLost", "run_experiment", "declared_metrics", "resume_state"]


def declared_metrics(task_name: str) -> tuple[str, ...]:
    """Metric names a task declares with a ``metrics`` class attribute (``()`` if it declares none).

    A task class may declare ``metrics: ClassVar[tuple[str, ...]] = ("loss", "accuracy")``: a
    record that lacks one of them is incomplete and re-run on resume, and leaderboard specs are
    checked against them.
    """
    try:
        cls = registry.get("task", task_name).cls
    except registry.RegistryError:
        return ()
    names = getattr(cls, "metrics", None)
    if isinstance(names, (tuple, list, frozenset, set)) and all(isinstance(n, str) for n in names):
        return tuple(names)
    return ()


def resume_state(spec: TrialSpec, rec_dir: Path) -> tuple[str, str]:
    """``(state, why)`` of a trial's record for resume (see :func:`harness.run.records.trial_state`).

    Raises:
        RecordError: the record exists but cannot be read or is from a newer schema; the message
            names the file and says that resuming would overwrite it.
    """
    path = Path(rec_dir) / f"{spec.trial_id}.json"
    try:
        state = records.trial_state(path, languages=[spec.target.language],
                                    required_metrics=declared_metrics(spec.task.name))
        if state[0] == "complete":
            _check_skipped_record(spec, path)
        return state
    except records.RecordError as e:
        raise records.RecordError(
            f"{e}. Resuming would overwrite this record of trial {spec.describe()}; move it away (or upgrade "
            f"tokxfer for a newer schema) and run again"
        ) from None


def _check_skipped_record(spec: TrialSpec, path: Path) -> None:
    """A record that resume would skip must be this trial's: its id, experiment and config (by hash).

    A record copied under another trial's file name, or edited by hand, would otherwise make
    resume skip a trial that never ran.

    Raises:
        RecordError: naming the file and what does not match.
    """
    rec = records.load_record(path)
    records.check_identity(rec, path, spec.experiment)
    as_stored = json.loads(json.dumps(spec.resolved(), default=records._json_default, allow_nan=True))
    want, got = config_hash(as_stored), config_hash(rec.get("config") or {})
    if got != want:
        raise records.RecordError(
            f"{path}: its config (hash {got}) is not the config of trial {spec.trial_id} (hash {want}): the record "
            f"was copied from another trial or edited"
        )


def _resume_todo(specs: list[TrialSpec], rec_dir: Path) -> list[TrialSpec]:
    """The trials a resumed run must (re-)run: missing, failed and incomplete records.

    Unreadable or newer-schema records stop the run (:func:`resume_state`). For a task that
    declares no metrics, a record lacking a metric that another complete record of the same task
    entry and language has is incomplete too (a metric removed by hand or by a bug).
    """
    states = {s.trial_id: resume_state(s, rec_dir) for s in specs}
    keys: dict[str, set[str]] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for s in specs:
        if states[s.trial_id][0] == "complete" and not declared_metrics(s.task.name):
            rec = records.load_record(rec_dir / f"{s.trial_id}.json")
            keys[s.trial_id] = set((rec.get("metrics") or {}).get(s.target.language) or {})
            groups.setdefault((s.task.id, s.target.language), []).append(s.trial_id)
    for members in groups.values():
        union = set().union(*(keys[t] for t in members))
        for t in members:
            if keys[t] != union:
                states[t] = ("incomplete", f"metric(s) {', '.join(sorted(union - keys[t]))} missing")
    todo = []
    for s in specs:
        state, why = states[s.trial_id]
        if state in ("incomplete",):
            log.warning("record of trial %s (%s) is incomplete (%s); running it again", s.trial_id, s.describe(), why)
        if state != "complete":
            todo.append(s)
    return todo


@dataclasses.dataclass
class ExperimentSummary:
    """What :func:`run_experiment` did.

    Attributes:
        ran: trials this process ran (ok or failed).
        skipped: trials whose complete record existed when the run started.
        failed: trials this process ran that failed.
        records_dir: where the records are.
        tracking_errors: one message per record that could not be mirrored (records are safe).
        by_others: trials of this run's work that other ``tokxfer run`` processes ran meanwhile.
    """

    ran: int
    skipped: int
    failed: int
    records_dir: Path
    tracking_errors: list[str]
    by_others: int = 0


class WorkerLost(RuntimeError):
    """The process running a trial died before it wrote the trial's record."""


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _write_json_atomic(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2))


def run_experiment(
    cfg: ExperimentConfig, runs_dir: str | Path = "runs", *, executor=None, tracker=None, force: bool = False,
    progress: bool = True, claims=None, poll_s: float = 1.0, trial_fn=None, order=None, on_trial=None,
) -> ExperimentSummary:
    """Run every trial of an experiment whose record is missing, failed or incomplete; mirror to the tracker.

    Several processes may run the same experiment into the same runs dir at once (on one machine
    or on several sharing the file system): each trial is claimed before it runs
    (:mod:`harness.run.claims`), so they split the grid and every trial runs once. A process that
    runs out of unclaimed trials waits for the others' trials and takes over the claims of dead
    owners; it returns when the whole grid has records.

    Args:
        cfg: the experiment.
        runs_dir: records go to ``<runs_dir>/<cfg.name>/records``.
        executor: where trials run (default: this process).
        tracker: MLflow mirror (``None``: none). On resume, records the store lacks are mirrored first.
        force: re-run trials that have complete records.
        progress: progress bars and info logs.
        claims: a :class:`harness.run.claims.TrialClaims` (default: one on the experiment dir).
        poll_s: how often to look at other processes' trials while waiting for them.
        trial_fn: the picklable function executors run per trial (default :func:`execute`; tests
            pass stand-ins).
        order: a sort key for the trials to run (the sort is stable; default: the grid's order), e.g.
            by method, so that the rows of a table complete one after another.
        on_trial: called in this process with each record this run writes, as it lands (after
            the tracker's mirror), e.g. to show results while the grid runs.

    Raises:
        RecordError: a record that resuming would overwrite cannot be read (names the file).
        OSError: the runs dir cannot be written (read-only, full).
    """
    # Stays whole: the nested callbacks share this run's claims and record mtimes (the protocol of harness.run.claims that
    # survived the kill -9 tests); kept in one function so the protocol reads in one place.
    runs_dir = Path(runs_dir)
    exp_dir = runs_dir / cfg.name
    rec_dir = exp_dir / "records"
    try:
        rec_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, f"cannot create the records folder {rec_dir} ({e.strerror}); is the runs dir "
                               f"{runs_dir} writable?") from None
    _write_json_atomic(exp_dir / "experiment.json", {"name": cfg.name, "path": cfg.path, "description": cfg.description})
    specs = cfg.trials()
    # what the records looked like before deciding what to run: a record that changes later was
    # written by another process running the same experiment
    seen = {s.trial_id: _mtime_ns(rec_dir / f"{s.trial_id}.json") for s in specs}
    todo = specs if force else _resume_todo(specs, rec_dir)
    if order is not None:
        todo = sorted(todo, key=order)
    skipped = len(specs) - len(todo)
    if progress and skipped:
        log.info("%d of %d trials already have records; running %d", skipped, len(specs), len(todo))
    executor = executor or LocalExecutor(progress=progress)
    tracking_errors: list[str] = []

    def tracking_failed(e: Exception) -> None:
        # one warning for the first failure; the rest are counted and summarized at the end
        if not tracking_errors:
            log.warning("tracking failed (records are safe on disk; further failures are counted, not shown): %s", e)
        tracking_errors.append(str(e))

    if tracker is not None and hasattr(tracker, "mirrored") and any(rec_dir.glob("*.json")):
        # resume: records written before an interruption may not have reached the store
        from harness.run.sync import sync

        try:
            sync(rec_dir, tracker)
        except Exception as e:
            tracking_failed(e)

    claims = claims if claims is not None else TrialClaims(exp_dir)
    elsewhere: dict[str, TrialSpec] = {}
    by_others: set[str] = set()

    def written_by_other(tid: str) -> bool:
        """A record appeared or changed since this run looked: another process ran the trial."""
        return _mtime_ns(rec_dir / f"{tid}.json") != seen[tid]

    def claim(spec: TrialSpec) -> bool:
        if not claims.acquire(spec.trial_id):
            elsewhere[spec.trial_id] = spec
            return False
        if written_by_other(spec.trial_id):  # finished by another process after we listed the work
            claims.release(spec.trial_id)
            by_others.add(spec.trial_id)
            return False
        return True

    def lost(spec: TrialSpec, reason: str, since: float) -> TrialRecord:
        path = rec_dir / f"{spec.trial_id}.json"
        if written_by_other(spec.trial_id) and path.stat().st_mtime >= since:
            with contextlib.suppress(records.RecordError):
                return records.read_record(path)  # the worker died after writing it
        log.error("trial %s (%s) failed: %s", spec.trial_id, spec.describe(), reason)
        rec = failed_record(spec, WorkerLost(reason), about.now_iso(), with_traceback=False)
        records.write_record(rec_dir, rec)
        return rec

    def on_record(rec: TrialRecord | dict) -> None:
        typed = records.as_trial_records([rec])[0]  # a test's trial_fn may hand back the mapping
        tid = str(typed.trial_id)
        claims.release(tid)
        seen[tid] = _mtime_ns(rec_dir / f"{tid}.json")
        mirror(tid)
        if on_trial is not None:
            on_trial(typed)

    def mirror(tid: str) -> None:
        if tracker is None:
            return
        try:
            from harness.run.sync import trial_artifacts

            path = rec_dir / f"{tid}.json"
            arts = [path, *trial_artifacts(exp_dir, tid, ["init_info.json"])]
            # mirror the record as stored (and as `tokxfer sync` reads it), so that digests agree
            tracker.log_trial(cfg.name, records.read_record(path), arts)
        except Exception as e:  # the record is already on disk
            tracking_failed(e)

    if todo and getattr(executor, "prepare_in_parent", False):
        # the source models at the trials' thread count, several at once (whole rounds of the pool; the last
        # few are built by their first trials, handed out first, beside trials whose source exists); then the
        # rest here
        plan = plan_sources(todo, getattr(executor, "workers", 1))
        executor.prepare(plan.before, functools.partial(prepare_source, progress=progress))
        prepare_shared(todo, progress=progress, sources=False)
        todo, executor.building = plan.order, plan.building
    results: list[TrialRecord] = []
    pending = list(todo)
    try:
        while pending:
            elsewhere.clear()
            results += records.as_trial_records(executor.run(
                pending, str(runs_dir.resolve()), on_record, execute=trial_fn or execute,
                claim=claim, lost=lost))
            pending = _wait_for_others(elsewhere, claims, written_by_other, by_others, poll_s, progress)
    finally:
        claims.close()
    failed = sum(1 for r in results if not r.ok)
    return ExperimentSummary(len(results), skipped, failed, rec_dir, tracking_errors, by_others=len(by_others))


WAIT_REPORT_S = 120.0
"""While waiting for other processes' trials, say every this many seconds which claims it waits on."""


def _wait_for_others(elsewhere: dict, claims, written_by_other, by_others: set, poll_s: float, progress: bool) -> list:
    """Wait until trials claimed by other processes have records; return those whose owner died.

    Returns as soon as one claim is stale or gone without a record (then every trial still
    unfinished is tried again: the ones still owned are simply skipped again). The wait is bounded
    by the claims' own rule: a claim whose heartbeat stops changing is stale after
    ``claims.stale_after_s`` (:meth:`harness.run.claims.TrialClaims.stale_reason`), whatever the
    clocks say; meanwhile a warning every :data:`WAIT_REPORT_S` names the claims waited on.
    """
    waiting = dict(elsewhere)
    if waiting and progress:
        log.info("%d trial(s) are being run by other processes; waiting for them", len(waiting))
    next_report = time.monotonic() + WAIT_REPORT_S
    while waiting:
        orphaned = False
        infos = {}
        for tid in list(waiting):
            if written_by_other(tid):
                by_others.add(tid)
                del waiting[tid]
                continue
            info = infos[tid] = claims.read(tid)
            if info is None or claims.is_stale(info):
                orphaned = True
        if orphaned:
            return list(waiting.values())
        if waiting and time.monotonic() >= next_report:
            next_report = time.monotonic() + WAIT_REPORT_S
            shown = [f"{claims.path(t)} ({claims.describe(infos[t])})" for t in list(waiting)[:3] if infos.get(t)]
            log.warning("still waiting for %d trial(s) run by other processes: %s%s; a claim whose heartbeat stops is "
                        "taken over after %.0fs", len(waiting), "; ".join(shown), " …" if len(waiting) > 3 else "",
                        claims.stale_after_s)
        if waiting:
            time.sleep(poll_s)
    return []
