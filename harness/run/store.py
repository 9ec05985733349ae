"""The embedded sqlite MLflow store, and the tracking room's errors.

The store is created once, under an exclusive file lock (``mlflow.db.lock``), in a temporary file that
is moved into place only when MLflow's schema migrations have all run: a kill, a second process or a
full disk during the first use leaves no half-migrated database. A writer killed inside a commit
leaves a hot journal, which SQLite rolls back on the next read-write open: that happens before any
health check (:func:`recover_sqlite_store`), so such a store is healed, never called broken. A store
that is broken anyway is detected before use (:func:`check_sqlite_store`) and rebuilt from the
records on demand (:func:`rebuild_sqlite_store`, ``tokxfer sync … --rebuild``).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from harness.errors import TokxferError
from harness.run.claims import file_lock

__all__ = ["TrackingError", "StoreBrokenError", "SQLITE_LOCK_TIMEOUT_S", "lock_path", "sqlite_path", "recover_sqlite_store",
           "check_sqlite_store", "ensure_sqlite_store", "rebuild_sqlite_store"]


class TrackingError(TokxferError, RuntimeError):
    """Mirroring to the tracker failed; the record itself is safe on disk.

    Attributes:
        sync_command: the exact shell command that re-mirrors the experiment's records.
    """

    def __init__(self, message: str, sync_command: str) -> None:
        super().__init__(message)
        self.sync_command = sync_command


class StoreBrokenError(TrackingError):
    """The sqlite MLflow store exists but cannot be used (half-migrated, corrupt, foreign file)."""


# --------------------------------------------------------------------------------------------
# The embedded sqlite store: created once under a lock, checked before use, rebuilt on demand
# --------------------------------------------------------------------------------------------

SQLITE_LOCK_TIMEOUT_S = 600.0
"""How long a process waits for the store lock (first creation takes seconds, a mirror well under one)."""
_READY_STORES: set[Path] = set()
"""sqlite files this process created or checked (checked once per process, not per trial)."""


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///…`` URI (``None`` for other URIs and in-memory databases).

    Example:
        >>> sqlite_path("sqlite:////tmp/runs/mlflow.db")
        PosixPath('/tmp/runs/mlflow.db')
        >>> sqlite_path("http://127.0.0.1:5000") is None
        True
    """
    if not tracking_uri.lower().startswith("sqlite:///"):
        return None
    path = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def _expected_schema() -> tuple[str | None, set[str]]:
    """MLflow's head schema revision and its tables (``(None, set())`` if MLflow hides them)."""
    try:
        from mlflow.store.db.base_sql_model import Base
        from mlflow.store.db.utils import _get_latest_schema_revision

        return _get_latest_schema_revision(), set(Base.metadata.tables)
    except Exception:  # private API moved: fall back to the checks that need no MLflow internals
        return None, set()


def recover_sqlite_store(db: str | os.PathLike) -> str | None:
    """Let SQLite finish what a killed writer left: roll back a hot journal (or replay a WAL).

    A process killed inside a commit leaves ``<db>-journal`` beside the database; SQLite rolls it
    back on the next read-write open, and only then is the database what its last commit left. A
    read-only open cannot roll it back and fails, so every health verdict comes after this.
    Harmless when nothing is pending (SQLite reads and writes nothing then).

    Returns:
        ``None`` when the database is readable afterwards, else why SQLite itself cannot open it.
    """
    import sqlite3

    db = Path(db)
    if not any(db.with_name(db.name + suffix).exists() for suffix in ("-journal", "-wal")):
        return None
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, timeout=60)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.Error as e:
        return f"SQLite cannot open it to roll back an interrupted transaction ({e})"
    return None


def check_sqlite_store(db: str | os.PathLike) -> str | None:
    """Why an existing sqlite store cannot be used, or ``None`` when it looks healthy.

    First lets SQLite roll back an interrupted transaction (:func:`recover_sqlite_store`: a kill
    inside a commit is healed, never called broken); then checks, read-only: it is an SQLite
    database; it has MLflow's ``alembic_version`` table with exactly the schema revision this
    MLflow expects; every MLflow table exists.
    """
    import sqlite3

    db = Path(db)
    healed = recover_sqlite_store(db)
    if healed is not None:
        return healed
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
    except sqlite3.Error as e:
        return f"cannot open it ({e})"
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return "it holds no tables (its creation was interrupted)"
        if "alembic_version" not in tables:
            return "it has no alembic_version table (its creation was interrupted, or it is not an MLflow store)"
        revs = [r[0] for r in con.execute("SELECT version_num FROM alembic_version")]
    except sqlite3.Error as e:
        return f"it is not a readable SQLite database ({e})"
    finally:
        con.close()
    head, expected = _expected_schema()
    if head is not None and revs != [head]:
        return (
            f"its schema revision is {', '.join(revs) or 'none'}, not {head} (a schema migration was interrupted, "
            f"or another MLflow version made it: then `mlflow db upgrade sqlite:///{db}` may be the fix)"
        )
    missing = sorted(expected - tables)
    if missing:
        return f"tables {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} are missing (its creation was interrupted)"
    return None


def _dispose_engine(uri: str) -> None:
    """Forget MLflow's cached engine for ``uri`` (so a replaced file is opened afresh)."""
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        with SqlAlchemyStore._engine_map_lock:
            engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()
    except Exception:
        pass


def _create_sqlite_store(db: Path, artifact_root: Path) -> None:
    """Create a fully migrated store in a temporary file and move it to ``db`` (caller holds the lock)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for stale in db.parent.glob(f"{db.name}.init-*"):  # left by a process killed while creating it
        with contextlib.suppress(OSError):
            stale.unlink()
    tmp = db.with_name(f"{db.name}.init-{os.getpid()}")
    uri = f"sqlite:///{tmp}"
    try:
        SqlAlchemyStore(uri, artifact_root.resolve().as_uri())
        _dispose_engine(uri)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, db)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    _dispose_engine(f"sqlite:///{db}")


def ensure_sqlite_store(db: str | os.PathLike, artifact_root: str | os.PathLike | None = None) -> None:
    """Make sure ``db`` is a complete MLflow store: create it atomically, or check the existing one.

    Args:
        db: the database file.
        artifact_root: default artifact root of a new store (default: ``mlartifacts`` beside ``db``).

    Raises:
        StoreBrokenError: the file exists but cannot be used; the message says how to rebuild it.
        OSError, TimeoutError: the lock or the file cannot be created.
    """
    db = Path(db).absolute()
    if db in _READY_STORES and db.is_file():
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path(db), timeout_s=SQLITE_LOCK_TIMEOUT_S):
        if not db.exists() or db.stat().st_size == 0:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            for suffix in ("-journal", "-wal", "-shm"):  # never rolled back into the new store
                side = db.with_name(db.name + suffix)
                if side.exists():
                    os.replace(side, side.with_name(f"{side.name}.orphan-{stamp}"))
            _create_sqlite_store(db, Path(artifact_root) if artifact_root else db.parent / "mlartifacts")
        else:
            reason = check_sqlite_store(db)
            if reason is not None:
                raise StoreBrokenError(f"the MLflow store {db} is broken: {reason}", sync_command="")
    _READY_STORES.add(db)


def rebuild_sqlite_store(db: str | os.PathLike) -> Path | None:
    """Move a (broken) store and its artifacts aside and create a fresh, empty one in its place.

    Returns:
        Where the old database was moved (``<db>.broken-<timestamp>``), or ``None`` if there was none.
    """
    db = Path(db).absolute()
    db.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = None
    with file_lock(lock_path(db), timeout_s=SQLITE_LOCK_TIMEOUT_S):
        _dispose_engine(f"sqlite:///{db}")
        if db.exists():
            moved = db.with_name(f"{db.name}.broken-{stamp}")
            os.replace(db, moved)
        for suffix in ("-journal", "-wal", "-shm"):
            side = db.with_name(db.name + suffix)
            if side.exists():
                os.replace(side, side.with_name(f"{side.name}.broken-{stamp}"))
        arts = db.parent / "mlartifacts"
        if moved is not None and arts.is_dir():  # artifacts of runs the new store will not know
            os.replace(arts, arts.with_name(f"mlartifacts.broken-{stamp}"))
        _READY_STORES.discard(db)
        _create_sqlite_store(db, arts)
    _READY_STORES.add(db)
    return moved
