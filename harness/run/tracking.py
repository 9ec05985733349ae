"""Mirror of trial records to an experiment tracker (MLflow), and the null tracker.

Records on disk are the source of truth (``runs/<experiment>/records/<trial_id>.json``); the
tracker is a view for browsing. Layout in MLflow:

* one MLflow experiment per tokxfer experiment, of the same name;
* one *parent* run per experiment, found by the tag ``tokxfer.role = experiment`` (created on
  first use), so that runs of a resumed grid and of ``tokxfer sync`` nest under the same parent;
* one nested *child* run per trial, found by the tag ``tokxfer.trial_id``. A child whose
  ``tokxfer.record_digest`` tag equals the record's digest is left alone, so syncing twice does
  not duplicate anything; a child for a changed record (a failed trial that was re-run) or a
  half-written child (the digest tag is written last) is replaced.

Everything is logged in batches (``MlflowClient.log_batch``, chunked to MLflow's limits):
params = the flattened resolved config; metrics = ``metrics.<lang>.<name>``, ``init.counts.*``,
``init.diagnostics.*``, ``counts.*``, ``timings.*``; curves = step metrics ``curves.<name>``.
Artifacts: the record as ``record.json`` plus the files the caller passes (``init_info.json``).

The embedded sqlite store is created once, under an exclusive file lock (``mlflow.db.lock``), in
a temporary file that is moved into place only when MLflow's schema migrations have all run: a
kill, a second process or a full disk during the first use leaves no half-migrated database.
A writer killed inside a commit leaves a hot journal, which SQLite rolls back on the next
read-write open: that happens before any health check, so such a store is healed, never called
broken. A store that is broken anyway (an older tokxfer's half-migrated database, a corrupt file) is
detected before use and the error names the command that rebuilds it from the records:
``tokxfer sync RUNS_DIR/EXPERIMENT --rebuild``. Writes to a sqlite store are serialized between
processes with the same lock, so concurrent workers of one grid do not fail with
``database is locked``.

A tracker failure never loses a record: :meth:`MLflowTracker.log_trial` raises
:class:`TrackingError` saying that the record is safe on disk and which ``tokxfer sync``
command re-mirrors it. An ``http(s)`` tracking URI is checked with a short ``/health`` request
before the first call, and MLflow's HTTP retries are bounded while we call it, so an unreachable
server costs seconds, not MLflow's default of several minutes of retries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.cache import content_hash
from harness.errors import UserInputError
from harness.run.claims import file_lock
from harness.run.records import TrialRecord
from harness.run.store import (
    SQLITE_LOCK_TIMEOUT_S,
    StoreBrokenError,
    TrackingError,
    check_sqlite_store,
    ensure_sqlite_store,
    lock_path,
    recover_sqlite_store,
    sqlite_path,
)

__all__ = [
    "TrackingError",
    "StoreBrokenError",
    "NullTracker",
    "MLflowTracker",
    "make_tracker",
    "default_tracking_uri",
    "sync_command",
    "ui_command",
    "ensure_sqlite_store",
    "check_sqlite_store",
    "recover_sqlite_store",
    "sqlite_path",
]

# MLflow limits (mlflow/utils/validation.py, mlflow 3.17). Kept here so that we chunk and
# truncate ourselves instead of relying on the client to do it silently.
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000
MAX_KEY_LENGTH = 250

TRIAL_ID_TAG = "tokxfer.trial_id"
ROLE_TAG = "tokxfer.role"
EXPERIMENT_TAG = "tokxfer.experiment"
DIGEST_TAG = "tokxfer.record_digest"
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's own nesting tag (mlflow.utils.mlflow_tags)

NULL_URIS = frozenset({"none", "null", "off"})
"""Tracking URIs that select :class:`NullTracker` (e.g. ``--tracking-uri none``)."""

# Bounded HTTP behaviour while we talk to an MLflow server. MLflow's defaults (7 retries with
# exponential backoff, 120 s timeout) are meant to ride out rate limiting and would stall a
# trial grid for minutes when the server is down. Values the user has set in the environment
# win; we only fill in what is unset, and only for the duration of our calls.
# MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT: MLflow otherwise prints a "View run … at" line (and
# makes one more request) for every run it terminates on a server: 2 lines per trial of a grid.
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
HEALTH_TIMEOUT_S = (3.0, 5.0)
"""(connect, read) timeout of the ``/health`` pre-flight request."""
RETRY_DOWN_AFTER_S = 60.0
"""After a failed pre-flight, further trials fail at once for this long instead of each waiting."""


class NullTracker:
    """A tracker that mirrors nothing (tests, ``--tracking-uri none``).

    Example:
        >>> from harness.run.records import TrialRecord
        >>> NullTracker().log_trial("quickstart", TrialRecord("ab12", "ok"))
    """

    tracking_uri: str | None = None

    def log_trial(self, experiment: str, record: TrialRecord, artifacts: list[Path] | None = None) -> None:
        """Do nothing."""
        return None


# --------------------------------------------------------------------------------------------
# Commands and URIs
# --------------------------------------------------------------------------------------------


def default_tracking_uri(runs_dir: str | os.PathLike) -> str:
    """The embedded default store: ``sqlite:///<runs_dir>/mlflow.db`` (absolute path).

    Example:
        >>> default_tracking_uri("/tmp/runs")
        'sqlite:////tmp/runs/mlflow.db'
    """
    return "sqlite:///" + str(Path(runs_dir).resolve() / "mlflow.db")


def sync_command(runs_dir: str | os.PathLike | None, experiment: str, tracking_uri: str) -> str:
    """The command that re-mirrors one experiment's records.

    Example:
        >>> sync_command("runs", "quickstart", "http://127.0.0.1:5000")
        'tokxfer sync runs/quickstart --tracking-uri http://127.0.0.1:5000'
    """
    exp_dir = f"{runs_dir}/{experiment}" if runs_dir is not None else f"RUNS_DIR/{experiment}"
    return f"tokxfer sync {shlex.quote(exp_dir)} --tracking-uri {shlex.quote(tracking_uri)}"


def ui_command(runs_dir: str | os.PathLike) -> str:
    """The one command that opens the MLflow UI on the embedded sqlite store of ``runs_dir``.

    Example:
        >>> ui_command("/tmp/runs")
        'mlflow ui --backend-store-uri sqlite:////tmp/runs/mlflow.db'
    """
    return f"mlflow ui --backend-store-uri {shlex.quote(default_tracking_uri(runs_dir))}"


def rebuild_command(runs_dir: str | os.PathLike | None, experiment: str, tracking_uri: str) -> str:
    """The command that rebuilds a broken sqlite store from the records.

    Example:
        >>> rebuild_command("runs", "quickstart", "sqlite:////abs/runs/mlflow.db")
        'tokxfer sync runs/quickstart --rebuild --tracking-uri sqlite:////abs/runs/mlflow.db'
    """
    return sync_command(runs_dir, experiment, tracking_uri).replace(" --tracking-uri ", " --rebuild --tracking-uri ", 1)


def make_tracker(tracking_uri: str | None, runs_dir: str | os.PathLike) -> NullTracker | MLflowTracker:
    """Build the tracker for a run.

    Args:
        tracking_uri: ``None`` for the embedded default (``sqlite:///<runs_dir>/mlflow.db``),
            ``"none"`` (or ``"null"``, ``"off"``) for no tracking, otherwise an MLflow tracking
            URI (``http://host:5000``, ``sqlite:///path.db``, ``postgresql://…``).
        runs_dir: the runs directory (records live in ``<runs_dir>/<experiment>/records``).

    Returns:
        A tracker implementing :class:`harness.protocols.Tracker`.

    Raises:
        ValueError: for a plain-folder (``file:``) store, which MLflow 3 refuses.

    Example:
        >>> make_tracker("none", "runs")  # doctest: +ELLIPSIS
        <harness.run.tracking.NullTracker object at ...>
    """
    if tracking_uri is not None and tracking_uri.strip().lower() in NULL_URIS:
        return NullTracker()
    if tracking_uri is None:
        return MLflowTracker(default_tracking_uri(runs_dir), runs_dir=runs_dir)
    return MLflowTracker(tracking_uri, runs_dir=runs_dir)


# --------------------------------------------------------------------------------------------
# Flattening a record into params / metrics / tags
# --------------------------------------------------------------------------------------------

_BAD_KEY_CHARS = re.compile(r"[^\w.\- :]")


def _key(name: str) -> str:
    """An MLflow-valid param/metric/tag key: allowed characters only, at most 250 characters."""
    key = _BAD_KEY_CHARS.sub("_", name)
    if len(key) > MAX_KEY_LENGTH:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        key = f"{key[: MAX_KEY_LENGTH - 9]}~{digest}"
    return key


def _truncate(value: str, limit: int) -> str:
    if len(value) <= limit:
        return value
    marker = "…[truncated]"
    return value[: limit - len(marker)] + marker


def _param_value(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return _truncate(text, MAX_PARAM_VAL_LENGTH)


def flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(dotted.key, leaf)`` pairs of nested dicts; lists and scalars are leaves.

    Example:
        >>> list(flatten({"method": {"id": "focus", "config": {"k": 10}}, "stages": []}))
        [('method.id', 'focus'), ('method.config.k', 10), ('stages', [])]
    """
    if isinstance(obj, Mapping) and (obj or not prefix):
        for k, v in obj.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, obj


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def record_params(record: TrialRecord) -> dict[str, str]:
    """Params of a record: its flattened resolved config (values as strings, truncated)."""
    params: dict[str, str] = {}
    for key, value in flatten(record.config or {}):
        params[_key(key)] = _param_value(value)
    return params


def record_metrics(rec: TrialRecord) -> dict[str, float]:
    """Scalar metrics of a record: task metrics, init counts/diagnostics, example counts, timings."""
    out: dict[str, float] = {}
    sections = [
        ("metrics", rec.metrics or {}),
        ("init.counts", rec.init_counts),
        ("init.diagnostics", rec.init_diagnostics),
        ("counts", rec.counts or {}),
        ("timings", rec.timings or {}),
    ]
    for prefix, section in sections:
        for key, value in flatten(section, prefix):
            if _is_number(value):
                out[_key(key)] = float(value)
    return out


def record_curves(record: TrialRecord) -> dict[str, list[tuple[int, float]]]:
    """Curves of a record as ``{metric key: [(step, value), ...]}`` (non-numeric points dropped)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name, points in (record.curves or {}).items():
        series = [
            (int(p[0]), float(p[1]))
            for p in points or []
            if isinstance(p, (list, tuple)) and len(p) >= 2 and _is_number(p[0]) and _is_number(p[1])
        ]
        if series:
            out[_key(f"curves.{name}")] = series
    return out


def record_digest(record: TrialRecord) -> str:
    """SHA-256 of the record's canonical JSON (:func:`harness.cache.content_hash` of
    :meth:`TrialRecord.to_json`; what decides whether a mirror is up to date). Records may hold NaN
    metrics, so non-finite numbers are allowed."""
    return content_hash(record.to_json(), allow_nan=True)


def _millis(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def record_tags(rec: TrialRecord, experiment: str) -> dict[str, str]:
    """Tags of a trial run (identity, status, versions, selection keys for the UI)."""
    git = rec.git or {}
    tags = {
        TRIAL_ID_TAG: str(rec.trial_id),
        ROLE_TAG: "trial",
        EXPERIMENT_TAG: experiment,
        "tokxfer.status": str(rec.status),
        "tokxfer.schema_version": str(rec.schema_version),
        "tokxfer.version": str(rec.tokxfer_version),
        "tokxfer.method": str(rec.method_id),
        "tokxfer.task": str(rec.task_name),
        "tokxfer.language": str(rec.target_language),
        "tokxfer.seed": str(rec.seed),
    }
    if git.get("sha"):
        tags["mlflow.source.git.commit"] = str(git["sha"])
        tags["tokxfer.git_dirty"] = str(git.get("dirty"))
    if rec.error:
        tags["tokxfer.error"] = _truncate(str(rec.error), MAX_TAG_VAL_LENGTH)
    return {_key(k): _truncate(v, MAX_TAG_VAL_LENGTH) for k, v in tags.items()}


def _run_name(rec: TrialRecord) -> str:
    parts = [rec.method_id, rec.target_language, rec.task_name, f"s{rec.seed}"]
    return "-".join(str(p) for p in parts if p is not None)


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# --------------------------------------------------------------------------------------------
# MLflow tracker
# --------------------------------------------------------------------------------------------


def _ours(run: Any, experiment: str, trial_id: str) -> bool:
    """Whether an MLflow run is tokxfer's mirror of ``trial_id`` of ``experiment`` (its tags say so)."""
    tags = run.data.tags
    return (tags.get(ROLE_TAG) == "trial" and tags.get(EXPERIMENT_TAG) == experiment
            and tags.get(TRIAL_ID_TAG) == trial_id)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


class MLflowTracker:
    """Mirror trial records to MLflow (embedded sqlite store or a tracking server).

    Args:
        tracking_uri: an MLflow tracking URI, e.g. ``sqlite:///runs/mlflow.db`` or
            ``http://127.0.0.1:5000``. Plain-folder stores (``file:``) are refused.
        runs_dir: the runs directory; used for the sqlite artifact root and in the
            ``tokxfer sync`` command that error messages print.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     t = MLflowTracker(default_tracking_uri(d), runs_dir=d)
        ...     t.log_trial("demo", TrialRecord.from_json({"trial_id": "t1", "status": "ok", "seed": 1,
        ...                          "config": {"seed": 1}, "metrics": {"near": {"loss": 6.1}}}))
    """

    def __init__(
        self,
        tracking_uri: str,
        runs_dir: str | os.PathLike | None = None,
    ) -> None:
        scheme = tracking_uri.split(":", 1)[0].lower() if ":" in tracking_uri else ""
        if scheme in ("", "file") or re.fullmatch(r"[a-zA-Z]", scheme):  # bare path / Windows drive
            raise UserInputError(
                f"tracking URI {tracking_uri!r} is a plain-folder store, which MLflow 3 refuses; "
                f"use sqlite:///PATH/mlflow.db or http://HOST:PORT"
            )
        if scheme == "sqlite" and (sqlite_path(tracking_uri) is None or "mode=memory" in tracking_uri.lower()):
            raise UserInputError(
                f"tracking URI {tracking_uri!r} is an in-memory database: it is gone when the process ends, so "
                f"records would mirror to nothing; use sqlite:///PATH/mlflow.db, http://HOST:PORT or --no-tracking"
            )
        self.tracking_uri = tracking_uri
        self.runs_dir = Path(runs_dir) if runs_dir is not None else None
        self._is_http = scheme in ("http", "https")
        self._client: Any = None
        self._experiment_ids: dict[str, str] = {}
        self._parent_ids: dict[str, str] = {}
        self._healthy = False
        self._down_until = 0.0
        self._down_reason = ""

    # -- public API -------------------------------------------------------------------------

    def log_trial(self, experiment: str, record: TrialRecord, artifacts: list[Path] | None = None) -> None:
        """Mirror one trial record (find-or-create its experiment, parent run and child run).

        Args:
            experiment: the tokxfer experiment name.
            record: the trial record (:func:`harness.run.records.read_record` of the file written).
            artifacts: extra files to attach (e.g. ``init_info.json``); missing files are skipped.

        Raises:
            TrackingError: on any tracker failure; the message names the ``tokxfer sync``
                command that re-mirrors the experiment later.
        """
        self.mirror(experiment, record, artifacts)

    def mirror(self, experiment: str, record: TrialRecord, artifacts: list[Path] | None = None) -> str:
        """Like :meth:`log_trial`, returning what happened.

        Returns:
            ``"created"`` (new child run), ``"replaced"`` (the record changed or the previous
            mirror was incomplete) or ``"unchanged"`` (already mirrored; nothing written).
        """
        try:
            self._preflight()
            with self._http_limits(), self._store_lock():
                return self._mirror(experiment, record, artifacts or [])
        except StoreBrokenError as e:
            cmd = rebuild_command(self.runs_dir, experiment, self.tracking_uri)
            raise StoreBrokenError(
                f"{e}. Records are safe on disk; rebuild the store from them with: {cmd}", sync_command=cmd
            ) from None
        except TrackingError:
            raise
        except Exception as e:  # any tracker failure: the record must survive it
            # Check the server's health again before the next trial, so that a server that died
            # mid-grid costs one short /health timeout per minute, not MLflow's retries per trial.
            self._healthy = False
            self._experiment_ids.clear()  # a restarted server may have a new database
            self._parent_ids.clear()
            raise self._error(experiment, record, f"{type(e).__name__}: {_first_line(str(e))}") from e

    def mirrored(self, experiment: str) -> dict[str, list[tuple[str, str | None]]]:
        """Active child runs of an experiment: ``{trial_id: [(run_id, record digest tag), …]}``.

        One paged query for the whole experiment (what :func:`sync` uses to skip records that are
        already mirrored without one query per record).
        """
        with self._http_limits(), self._store_lock():
            eid = self._experiment_id(experiment, create=False)
            out: dict[str, list[tuple[str, str | None]]] = {}
            if eid is None:
                return out
            token = None
            while True:
                page = self.client.search_runs(
                    [eid], filter_string=f"tags.`{ROLE_TAG}` = 'trial'", max_results=1000, page_token=token
                )
                for run in page:
                    tid = run.data.tags.get(TRIAL_ID_TAG)
                    if tid is not None and _ours(run, experiment, tid):
                        out.setdefault(tid, []).append((run.info.run_id, run.data.tags.get(DIGEST_TAG)))
                token = getattr(page, "token", None)
                if not token:
                    return out

    def run_id_for(self, experiment: str, trial_id: str) -> str | None:
        """The id of the active child run mirroring ``trial_id``, or ``None``."""
        with self._http_limits(), self._store_lock():
            eid = self._experiment_id(experiment, create=False)
            if eid is None:
                return None
            run = self._find_child(eid, trial_id)
            return run.info.run_id if run is not None else None

    # -- internals --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _store_lock(self) -> Iterator[None]:
        """For a sqlite store: make sure it exists and is sound, and hold its lock while writing."""
        db = sqlite_path(self.tracking_uri)
        if db is None:
            yield
            return
        arts = (self.runs_dir.resolve() / "mlartifacts") if self.runs_dir is not None else None
        ensure_sqlite_store(db, arts)
        with file_lock(lock_path(db.absolute()), timeout_s=SQLITE_LOCK_TIMEOUT_S):
            yield

    @property
    def client(self) -> Any:
        """The underlying :class:`mlflow.tracking.MlflowClient` (created lazily)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _error(self, experiment: str, record: TrialRecord, reason: str) -> TrackingError:
        cmd = sync_command(self.runs_dir, experiment, self.tracking_uri)
        trial = record.trial_id or "?"
        where = (
            f" ({self.runs_dir / experiment / 'records' / f'{trial}.json'})" if self.runs_dir is not None else ""
        )
        return TrackingError(
            f"MLflow mirror of trial {trial} to {self.tracking_uri} failed: {reason}. "
            f"The record is safe on disk{where}; re-sync later with: {cmd}",
            sync_command=cmd,
        )

    def _preflight(self) -> None:
        """Fail fast when an http(s) tracking server does not answer ``/health``."""
        if not self._is_http or self._healthy:
            return
        if time.monotonic() < self._down_until:
            raise RuntimeError(f"tracking server unreachable ({self._down_reason}); not retried for a minute")
        import requests

        url = self.tracking_uri.rstrip("/") + "/health"
        try:
            resp = requests.get(url, timeout=HEALTH_TIMEOUT_S)
        except requests.RequestException as e:
            self._down_until = time.monotonic() + RETRY_DOWN_AFTER_S
            self._down_reason = f"{type(e).__name__} on GET {url}"
            raise RuntimeError(f"tracking server unreachable ({self._down_reason})") from e
        if resp.status_code >= 500:
            self._down_until = time.monotonic() + RETRY_DOWN_AFTER_S
            self._down_reason = f"GET {url} answered HTTP {resp.status_code}"
            raise RuntimeError(f"tracking server unhealthy ({self._down_reason})")
        # Any other answer (200, or 404 from a proxy without /health) means someone is listening.
        self._healthy = True

    @contextlib.contextmanager
    def _http_limits(self) -> Iterator[None]:
        """Temporarily bound MLflow's HTTP retries/timeouts (unset variables only)."""
        if not self._is_http:
            yield
            return
        added = [k for k in HTTP_LIMITS if k not in os.environ]
        for k in added:
            os.environ[k] = HTTP_LIMITS[k]
        try:
            yield
        finally:
            for k in added:
                os.environ.pop(k, None)

    def _experiment_id(self, experiment: str, create: bool = True) -> str | None:
        if experiment in self._experiment_ids:
            return self._experiment_ids[experiment]
        name = experiment
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            if not create:
                return None
            artifact_location = None
            if self.tracking_uri.startswith("sqlite:") and self.runs_dir is not None:
                # MLflow's default artifact root for a sqlite store is ./mlruns under the current
                # working directory; keep artifacts next to the database instead.
                artifact_location = (self.runs_dir.resolve() / "mlartifacts").as_uri()
            try:
                eid = self.client.create_experiment(
                    name, artifact_location=artifact_location, tags={EXPERIMENT_TAG: experiment}
                )
            except Exception:
                # Another worker may have created it between our lookup and create.
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                eid = exp.experiment_id
        else:
            if exp.lifecycle_stage != "active":
                raise RuntimeError(
                    f"MLflow experiment {name!r} is deleted; restore it or delete it permanently "
                    f"(mlflow gc) before mirroring"
                )
            eid = exp.experiment_id
        self._experiment_ids[experiment] = eid
        return eid

    def _parent_id(self, experiment: str, eid: str) -> str:
        if experiment in self._parent_ids:
            return self._parent_ids[experiment]
        runs = self.client.search_runs(
            [eid],
            filter_string=f"tags.`{ROLE_TAG}` = 'experiment'",
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
        if runs:
            run_id = runs[0].info.run_id
        else:
            run = self.client.create_run(
                eid,
                run_name=experiment,
                tags={ROLE_TAG: "experiment", EXPERIMENT_TAG: experiment},
            )
            run_id = run.info.run_id
            self.client.set_terminated(run_id, "FINISHED")
            # Two workers racing may both create a parent; everyone then uses the oldest one.
            runs = self.client.search_runs(
                [eid],
                filter_string=f"tags.`{ROLE_TAG}` = 'experiment'",
                order_by=["attributes.start_time ASC"],
                max_results=1,
            )
            if runs:
                run_id = runs[0].info.run_id
        self._parent_ids[experiment] = run_id
        return run_id

    def _find_children(self, eid: str, trial_id: str, experiment: str | None = None) -> list:
        """Active trial runs of ``trial_id`` in the MLflow experiment ``eid``, newest first; with
        ``experiment``, only those tagged as that tokxfer experiment's (:func:`_ours`)."""
        runs = self.client.search_runs(
            [eid],
            filter_string=f"tags.`{TRIAL_ID_TAG}` = '{_escape(trial_id)}'",
            order_by=["attributes.start_time DESC"],
            max_results=100,
        )
        return [r for r in runs if experiment is None or _ours(r, experiment, trial_id)]

    def _find_child(self, eid: str, trial_id: str) -> Any:
        runs = self._find_children(eid, trial_id)
        return runs[0] if runs else None

    def _mirror(self, experiment: str, record: TrialRecord, artifacts: list[Path]) -> str:
        from mlflow.entities import Metric, Param, RunTag

        trial_id = record.trial_id
        if not trial_id:
            raise ValueError("record has no trial_id")
        trial_id = str(trial_id)
        digest = record_digest(record)
        eid = self._experiment_id(experiment)
        assert eid is not None
        parent = self._parent_id(experiment, eid)

        outcome = "created"
        # Only runs that are this experiment's mirror of this trial are ever replaced; a run in the
        # same MLflow experiment tagged otherwise (another tool, another experiment's name) is left alone.
        existing = self._find_children(eid, trial_id, experiment)
        current = [r for r in existing if r.data.tags.get(DIGEST_TAG) == digest]
        if current:
            for run in existing:  # duplicates of two mirrors that raced on a server: keep the newest
                if run is not current[0]:
                    self.client.delete_run(run.info.run_id)
            return "unchanged"
        for run in existing:
            # The record changed (re-run) or the last mirror stopped half-way: replace it.
            self.client.delete_run(run.info.run_id)
            outcome = "replaced"

        tags = record_tags(record, experiment)
        tags[PARENT_RUN_TAG] = parent
        run = self.client.create_run(
            eid, start_time=_millis(record.started_at), tags=tags, run_name=_run_name(record)
        )
        run_id = run.info.run_id

        ts = _millis(record.finished_at) or int(time.time() * 1000)
        params = [Param(k, v) for k, v in record_params(record).items()]
        metrics = [Metric(k, v, ts, 0) for k, v in record_metrics(record).items()]
        for key, series in record_curves(record).items():
            metrics.extend(Metric(key, value, ts, step) for step, value in series)
        for chunk in _chunks(params, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=chunk)

        with tempfile.TemporaryDirectory(prefix="tokxfer-mlflow-") as tmp:
            path = Path(tmp) / "record.json"
            path.write_text(json.dumps(record.to_json(), indent=2, ensure_ascii=False, default=str), encoding="utf-8")
            self.client.log_artifact(run_id, str(path))
        for art in artifacts:
            art = Path(art)
            if art.is_file():
                self.client.log_artifact(run_id, str(art))

        # The digest tag is written last: a child without it is an incomplete mirror.
        self.client.log_batch(run_id, tags=[RunTag(DIGEST_TAG, digest)])
        status = "FINISHED" if record.ok else "FAILED"
        end = _millis(record.finished_at)
        self.client.set_terminated(run_id, status, end_time=end)
        return outcome


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return _truncate(line, limit)

