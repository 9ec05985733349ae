"""``tokxfer sync``: mirror a records folder to a tracker, trusting nothing a record says about where it lives.

Every path comes from the folder (``RUNS_DIR/<experiment>/records``), never from a record's fields; every
record is checked before the first is mirrored (its trial id is its file name, its experiment the
folder's: :func:`harness.run.records.check_identity`); artifacts are taken only from the trial's own
folder; a tracker run is replaced only when it is this experiment's mirror of this trial and the
record's digest changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.run.records import TrialRecord
from harness.run.store import TrackingError
from harness.run.tracking import MLflowTracker, record_digest

__all__ = ["sync", "SyncReport", "iter_record_files", "trial_artifacts", "default_artifacts"]


# --------------------------------------------------------------------------------------------
# Sync
# --------------------------------------------------------------------------------------------


def iter_record_files(records_dir: str | os.PathLike) -> Iterator[tuple[Path, dict]]:
    """Yield ``(path, record)`` for every record of an experiment (validated by :mod:`harness.run.records`)."""
    from harness.run.records import iter_record_files as _iter

    yield from _iter(records_dir)


def trial_artifacts(exp_dir: Path, trial_id: str, names: list[str] | None = None) -> list[Path]:
    """The files of ``<exp_dir>/artifacts/<trial_id>/`` to attach to a trial's run (``names``: only those).

    ``trial_id`` comes from a record's file name, checked (:func:`harness.run.records.check_identity`),
    never from what the record says. A file, or the folder itself, that resolves outside
    ``<exp_dir>/artifacts/<trial_id>/`` (a symbolic link to somewhere else) is refused.

    Raises:
        harness.inputs.UnsafePathError: naming the artifact and where it leads.
    """
    from harness.inputs import check_name, require_inside

    art_dir = Path(exp_dir) / "artifacts" / check_name(trial_id, "trial id")
    if not art_dir.is_dir():
        return []
    files = sorted(p for p in art_dir.iterdir() if (names is None or p.name in names) and p.is_file())
    for f in files:
        require_inside(f, Path(os.path.realpath(exp_dir)) / "artifacts" / trial_id, f"artifact of trial {trial_id}",
                       resolve_folder=False)  # the trial's folder where it should be, not where a link leads
    return files


def default_artifacts(records_dir: Path, record_path: Path) -> list[Path]:
    """Files attached to a trial on sync: everything in ``<experiment dir>/artifacts/<trial_id>/``,
    the trial id being the record's file name (see :func:`trial_artifacts`).

    The runner writes ``init_info.json`` there.
    """
    exp_dir = records_dir.parent if records_dir.name == "records" else records_dir
    return trial_artifacts(exp_dir, Path(record_path).stem)


class SyncReport(dict):
    """Counts of a sync: ``{"created": n, "replaced": n, "unchanged": n, "logged": n}``."""


def sync(
    records_dir: str | os.PathLike,
    tracker: Any,
    artifacts_for: Callable[[Path, Path], list[Path]] | None = None,
) -> SyncReport:
    """Re-mirror every record of an experiment to ``tracker`` (idempotent for MLflow).

    Records are untrusted input: the experiment is the folder's (``runs/<experiment>``), the trial
    id each record's file name, and a record that says otherwise is refused
    (:func:`harness.run.records.check_identity`) before anything is mirrored; artifacts come from the
    trial's own folder only (:func:`trial_artifacts`).

    Args:
        records_dir: ``runs/<experiment>`` or ``runs/<experiment>/records``.
        tracker: any :class:`harness.protocols.Tracker`; an :class:`MLflowTracker` reports
            created/replaced/unchanged, others count ``logged``.
        artifacts_for: ``(records_dir, record file) -> files`` to attach; default
            :func:`default_artifacts`.

    Returns:
        The counts per outcome.

    Raises:
        TrackingError: after trying every record, if any failed (message lists them).

    Example:
        >>> sync("runs/quickstart", make_tracker(None, "runs"))  # doctest: +SKIP
        {'created': 12, 'replaced': 0, 'unchanged': 0, 'logged': 0}
    """
    root = Path(records_dir)
    root = root / "records" if (root / "records").is_dir() else root
    artifacts_for = artifacts_for or default_artifacts
    report = SyncReport(created=0, replaced=0, unchanged=0, logged=0)
    failures: list[str] = []
    last_error: TrackingError | None = None
    known: dict[str, dict] = {}  # experiment -> what the store already mirrors
    experiment = root.parent.name if root.name == "records" else root.name
    from harness.inputs import check_name
    from harness.run.records import check_identity

    check_name(experiment, "experiment folder")
    checked = list(iter_record_files(root))  # every record is checked before the first is mirrored
    for path, data in checked:
        check_identity(data, path, experiment)
    for path, data in checked:
        record = TrialRecord.from_json(data, where=str(path))
        files = artifacts_for(root, path)
        try:
            if isinstance(tracker, MLflowTracker):
                if experiment not in known:
                    try:
                        known[experiment] = tracker.mirrored(experiment)
                    except Exception:
                        known[experiment] = {}  # mirror() below reports the failure per record
                runs = known[experiment].get(str(record.trial_id), [])
                if len(runs) == 1 and runs[0][1] == record_digest(record):
                    report["unchanged"] += 1
                    continue
                report[tracker.mirror(experiment, record, files)] += 1
            else:
                tracker.log_trial(experiment, record, files)
                report["logged"] += 1
        except TrackingError as e:
            failures.append(f"{path.name}: {e}")
            last_error = e
    if failures:
        assert last_error is not None
        shown = "\n  ".join(failures[:5]) + (f"\n  … and {len(failures) - 5} more" if len(failures) > 5 else "")
        raise TrackingError(
            f"sync of {root}: {len(failures)} record(s) not mirrored ({dict(report)} done):\n  {shown}",
            sync_command=last_error.sync_command,
        )
    return report
