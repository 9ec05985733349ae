"""File locks and trial claims: several ``tokxfer run`` processes split one grid between them.

Two or more processes running the same experiment into the same runs directory — on one machine
or on several machines sharing a file system — each claim a trial before running it. A claim is
a file ``<experiment dir>/claims/<trial_id>.claim`` created atomically (``O_CREAT | O_EXCL``)
holding its owner (host, pid, a random token, and what makes the pid meaningful: the boot id and
the PID namespace, see :func:`owner_identity`) and kept fresh by a heartbeat thread that touches
its modification time. A claim is *stale*, and may be taken over, when:

* its owner is a process of this host, this boot and this PID namespace that no longer exists
  (a pid is only looked up where it means the same process: containers on one host name each
  have their own PID namespace, and there the heartbeat decides);
* its heartbeat is older than ``stale_after_s`` (an owner on another host that died, or a hung
  one), or its modification time lies more than ``stale_after_s`` in the future (a clock that
  is wrong by more than the bound can never be told from a dead owner);
* its modification time has not changed for ``stale_after_s`` by this process's own monotonic
  clock, whatever the clocks say: so no wait for another owner's claim lasts longer than the
  bound after its heartbeat stops, even under clock skew.

Takeover happens under an exclusive ``fcntl`` lock on ``claims/.lock`` and re-checks that the file
is still the stale one, so two workers never both take over one claim and a fresh claim is never
removed; it is logged as a warning naming the claim file, its owner and why it was stale.

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
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["file_lock", "TrialClaims", "ClaimInfo", "pid_alive", "owner_identity", "HEARTBEAT_S", "STALE_AFTER_S"]

log = logging.getLogger("tokxfer")

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


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def owner_identity() -> dict[str, str | None]:
    """What makes a pid of this process meaningful to another process: ``{"boot_id", "pidns"}``.

    ``boot_id`` is the kernel's id of this boot (``/proc/sys/kernel/random/boot_id``; a pid of a
    previous boot means nothing); ``pidns`` the PID namespace (``/proc/self/ns/pid``, e.g.
    ``pid:[4026531836]``; two containers on one host name each number their processes from 1).
    Both are ``None`` where ``/proc`` does not tell (then the host name alone decides, as before).

    Example:
        >>> sorted(owner_identity())
        ['boot_id', 'pidns']
    """
    try:
        pidns: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    return {"boot_id": _read_text("/proc/sys/kernel/random/boot_id"), "pidns": pidns}


class ClaimInfo(dict):
    """The content of a claim file: ``host``, ``pid``, ``boot_id``, ``pidns``, ``token``, ``claimed_at``;
    when read also ``age_s`` (now minus its modification time, negative when it lies in the future)
    and ``unchanged_s`` (how long this process has seen the same modification time and token)."""


class TrialClaims:
    """Claims on the trials of one experiment directory, held by this process.

    Args:
        exp_dir: ``<runs dir>/<experiment>``; claims live in its ``claims/`` folder.
        heartbeat_s: period of the heartbeat that keeps held claims fresh.
        stale_after_s: age of a heartbeat after which any claim is taken over.
        owner_pid: the pid written into claims (default: this process).
        identity: ``{"boot_id", "pidns"}`` written into claims and compared with theirs (default:
            :func:`owner_identity`; tests pass others to play workers in different containers).
    """

    def __init__(
        self, exp_dir: str | os.PathLike, *, heartbeat_s: float = HEARTBEAT_S, stale_after_s: float = STALE_AFTER_S,
        owner_pid: int | None = None, identity: dict[str, str | None] | None = None,
    ) -> None:
        self.dir = Path(exp_dir) / "claims"
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.host = socket.gethostname()
        self.pid = owner_pid if owner_pid is not None else os.getpid()
        self.identity = dict(identity) if identity is not None else owner_identity()
        self._held: dict[str, str] = {}  # trial id -> token
        self._seen: dict[str, tuple[tuple, float]] = {}  # trial id -> ((mtime_ns, token), first seen, monotonic)
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
            why = self.stale_reason(again)
            if again.get("token") != info.get("token") or why is None:
                return False
            log.warning("taking over the claim %s of %s: %s", self.path(trial_id), self.describe(again), why)
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
        # the heartbeat as this process sees it change, on its own monotonic clock (immune to skew)
        seen_as = (st.st_mtime_ns, data.get("token"))
        now = time.monotonic()
        last = self._seen.get(trial_id)
        if last is None or last[0] != seen_as:
            self._seen[trial_id] = (seen_as, now)
            info["unchanged_s"] = 0.0
        else:
            info["unchanged_s"] = now - last[1]
        return info

    def same_pid_space(self, info: ClaimInfo) -> bool:
        """Whether a claim's pid names a process this process can look up: same host, boot and PID namespace."""
        return (info.get("host") == self.host and info.get("boot_id") == self.identity.get("boot_id")
                and info.get("pidns") == self.identity.get("pidns"))

    def stale_reason(self, info: ClaimInfo) -> str | None:
        """Why a claim's owner is taken to be gone (see the module docstring), or ``None`` while it is alive."""
        bound = self.stale_after_s
        age, unchanged = info.get("age_s", 0.0), info.get("unchanged_s", 0.0)
        if "token" not in info:  # unreadable content: only its heartbeat can tell
            bound = min(bound, 30.0)
        if age > bound:
            return f"its heartbeat is {age:.0f}s old (more than {bound:.0f}s)"
        if age < -bound:
            return (f"its modification time lies {-age:.0f}s in the future (more than {bound:.0f}s: a clock is wrong "
                    f"by more than the bound, or the file was touched by hand)")
        if unchanged > bound:
            return f"its heartbeat has not changed for {unchanged:.0f}s (more than {bound:.0f}s)"
        if "token" in info and self.same_pid_space(info) and isinstance(info.get("pid"), int) and not pid_alive(info["pid"]):
            return f"its owner, process {info['pid']} of this host, no longer exists"
        return None

    def is_stale(self, info: ClaimInfo) -> bool:
        """Whether a claim's owner is gone (:meth:`stale_reason`)."""
        return self.stale_reason(info) is not None

    def describe(self, info: ClaimInfo) -> str:
        """A claim's owner and heartbeat, for messages: ``host:pid (pid namespace …), heartbeat 3s ago``."""
        ns = "" if self.same_pid_space(info) else f" (another boot or PID namespace: {info.get('pidns') or '?'})"
        age = info.get("age_s", 0.0)
        beat = f"heartbeat {age:.0f}s ago" if age >= 0 else f"heartbeat {-age:.0f}s in the future"
        return f"owner {info.get('host', '?')}:{info.get('pid', '?')}{ns}, {beat}"

    def owner(self, trial_id: str) -> str:
        """``host:pid`` of a claim's owner (for messages)."""
        info = self.read(trial_id) or {}
        return f"{info.get('host', '?')}:{info.get('pid', '?')}"

    # -- internals --------------------------------------------------------------------------

    def _create(self, trial_id: str) -> bool:
        token = secrets.token_hex(8)
        blob = json.dumps({"host": self.host, "pid": self.pid, **self.identity, "token": token, "claimed_at": time.time()})
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
