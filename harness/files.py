"""Writing files so that a crash never leaves half of one: the project's one atomic-write helper.

Every file tokxfer writes for a user to keep — records, per-example results, tables, plots, the
cache marker, word vectors — goes through :func:`open_atomic` (or :func:`write_atomic` for a
whole blob): the content is written to a fresh temporary file in the destination folder (created
with ``O_EXCL`` under an unpredictable name, so never through a link planted in its place), made
durable when asked, given the permissions the umask allows, and renamed over the destination. A
reader sees the old file or the new one, never a torn one; a failure removes the temporary file and
leaves the destination as it was.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(d / "a.txt", "hello\\n")
    >>> (d / "a.txt").read_text()
    'hello\\n'
    >>> with open_atomic(d / "b.bin", "wb") as f:
    ...     _ = f.write(b"\\x00\\x01")
    >>> (d / "b.bin").read_bytes(), sorted(p.name for p in d.iterdir())
    (b'\\x00\\x01', ['a.txt', 'b.bin'])
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["open_atomic", "write_atomic", "umask"]


def umask() -> int:
    """The process umask, read without changing it where ``/proc`` allows (thread-safe there)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it, then put it back
    os.umask(mask)
    return mask


@contextmanager
def open_atomic(path: str | os.PathLike, mode: str = "w", *, fsync: bool = False,
                encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; rename it to ``path`` when the block ends.

    Args:
        path: the destination (its folder must exist). A link at ``path`` is replaced, not followed.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        fsync: flush the content to disk before the rename (records: a power cut keeps them whole).
        encoding: the text encoding (ignored for ``"wb"``).

    The file gets mode ``0o666`` less the umask (``mkstemp``'s private 0600 would hide records from
    a team sharing a runs folder). If the block raises, the temporary file is removed and the
    destination is untouched.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic: mode must be 'w' or 'wb', not {mode!r}")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, mode, encoding=None if mode == "wb" else encoding) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes, *, fsync: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically (see :func:`open_atomic`)."""
    with open_atomic(path, "wb" if isinstance(data, bytes) else "w", fsync=fsync) as f:
        f.write(data)
