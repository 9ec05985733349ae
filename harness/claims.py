"""File locks and trial claims: several ``tokxfer run`` processes split one grid between them.

Two or more processes running the same experiment into the same runs directory — on one machine
or on several machines sharing a file system — each claim a trial before running it. A claim is
a file ``<experiment dir>/claims/<trial_id>.claim`` created atomically (``O_CREAT | O_EXCL``)
holding its owner (host, pid, a random token) and kept fresh by a heartbeat thread that touches
its modification time. A claim is *stale*, and may be taken over, when its owner is a process of
this host that no longer exists, or when its heartbeat is older than ``stale_after_s`` (an owner
on another host that died, or a hung one). Takeover happens under an exclusive ``fcntl`` lock on
``claims/.lock`` and re-checks that the file is still the stale one, so two workers never both
take over one claim and a fresh claim is never removed.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> a, b = TrialClaims(d), TrialClaims(d)
    >>> a.acquire("t1"), b.acquire("t1")
    (True, False)
    >>> a.release("t1"); b.acquire("t1")
    True
    >>> b.close()
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["file_lock", "TrialClaims", "ClaimInfo", "pid_alive", "HEARTBEAT_S", "STALE_AFTER_S"]

HEARTBEAT_S = 10.0
"""How often a claim's modification time is refreshed while its trial runs."""
STALE_AFTER_S = 300.0
"""A claim whose heartbeat is older than this is taken over, whatever host owns it. Generous, so
that clocks of machines sharing a file system may disagree by a minute or two; a dead owner on the
same host is detected at once by its pid."""


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``path`` (created if missing) for the ``with`` block.

    Args:
        path: the lock file; its content is never read.
        timeout_s: give up with :class:`TimeoutError` after this long (``None``: wait forever).

    Raises:
        TimeoutError: the lock was not obtained within ``timeout_s``.
        OSError: the lock file cannot be created (read-only directory …).
    """
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"could not lock {path} within {timeout_s:.0f}s") from None
                    time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class ClaimInfo(dict):
    """The content of a claim file: ``host``, ``pid``, ``token``, ``claimed_at`` (+ ``age_s`` when read)."""


class TrialClaims:
    """Claims on the trials of one experiment directory, held by this process.

    Args:
        exp_dir: ``<runs dir>/<experiment>``; claims live in its ``claims/`` folder.
        heartbeat_s: period of the heartbeat that keeps held claims fresh.
        stale_after_s: age of a heartbeat after which any claim is taken over.
        owner_pid: the pid written into claims (default: this process).
    """

    def __init__(
        self, exp_dir: str | os.PathLike, *, heartbeat_s: float = HEARTBEAT_S, stale_after_s: float = STALE_AFTER_S,
        owner_pid: int | None = None,
    ) -> None:
        self.dir = Path(exp_dir) / "claims"
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.host = socket.gethostname()
        self.pid = owner_pid if owner_pid is not None else os.getpid()
        self._held: dict[str, str] = {}  # trial id -> token
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- paths ------------------------------------------------------------------------------

    def path(self, trial_id: str) -> Path:
        """The claim file of a trial."""
        return self.dir / f"{trial_id}.claim"

    # -- public API -------------------------------------------------------------------------

    def acquire(self, trial_id: str) -> bool:
        """Claim a trial; take over a stale claim. ``False`` when another live owner holds it.

        Raises:
            OSError: the claims folder cannot be written (read-only or full runs dir …).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._create(trial_id):
            return True
        info = self.read(trial_id)
        if info is None:  # released between our attempt and the read: try once more
            return self._create(trial_id)
        if not self.is_stale(info):
            return False
        with file_lock(self.dir / ".lock", timeout_s=60):
            again = self.read(trial_id)
            if again is None:
                return self._create(trial_id)
            if again.get("token") != info.get("token") or not self.is_stale(again):
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(trial_id))
            return self._create(trial_id)

    def release(self, trial_id: str) -> None:
        """Give a held claim back (removes its file if it is still ours)."""
        with self._mutex:
            token = self._held.pop(trial_id, None)
        if token is None:
            return
        info = self.read(trial_id)
        if info is not None and info.get("token") == token:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(trial_id))

    def release_all(self) -> None:
        """Give back every claim this object holds."""
        for tid in list(self._held):
            with contextlib.suppress(OSError):
                self.release(tid)

    def close(self) -> None:
        """Release everything and stop the heartbeat."""
        self.release_all()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def held(self) -> list[str]:
        """Trial ids currently claimed by this object."""
        with self._mutex:
            return list(self._held)

    def read(self, trial_id: str) -> ClaimInfo | None:
        """The claim's content and age, or ``None`` when there is no claim file."""
        p = self.path(trial_id)
        try:
            st = p.stat()
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError
        except ValueError:
            data = {}  # half-written by an owner killed between create and write: judged by age
        info = ClaimInfo(data)
        info["age_s"] = time.time() - st.st_mtime
        return info

    def is_stale(self, info: ClaimInfo) -> bool:
        """Whether a claim's owner is gone: dead pid on this host, or a heartbeat too old."""
        if info.get("age_s", 0.0) > self.stale_after_s:
            return True
        if info.get("host") == self.host and isinstance(info.get("pid"), int):
            return not pid_alive(info["pid"])
        if "token" not in info:  # unreadable content: only its age can tell
            return info.get("age_s", 0.0) > min(self.stale_after_s, 30.0)
        return False

    def owner(self, trial_id: str) -> str:
        """``host:pid`` of a claim's owner (for messages)."""
        info = self.read(trial_id) or {}
        return f"{info.get('host', '?')}:{info.get('pid', '?')}"

    # -- internals --------------------------------------------------------------------------

    def _create(self, trial_id: str) -> bool:
        token = secrets.token_hex(8)
        blob = json.dumps({"host": self.host, "pid": self.pid, "token": token, "claimed_at": time.time()})
        try:
            fd = os.open(self.path(trial_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False
        try:
            os.write(fd, blob.encode())
        except OSError as e:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path(trial_id))
            if e.errno == errno.ENOSPC:
                raise OSError(e.errno, f"no space left for claim file {self.path(trial_id)}") from None
            raise
        os.close(fd)
        with self._mutex:
            self._held[trial_id] = token
        self._start_heartbeat()
        return True

    def _start_heartbeat(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="tokxfer-claims-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            for tid in self.held():
                with contextlib.suppress(OSError):
                    os.utime(self.path(tid))
