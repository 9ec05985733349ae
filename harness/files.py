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

from harness.errors import UserInputError

__all__ = ["open_atomic", "write_atomic", "umask", "text_lines"]


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


def text_lines(path: str | os.PathLike, *, strip: bool = False, limit: int | None = None,
               what: str = "text file") -> Iterator[str]:
    """The non-blank lines of the UTF-8 text file ``path``, without their line breaks: the project's one line reader.

    A line is "blank" when it holds only white space. ``strip=True`` also removes the white space around
    each line (evaluation and training texts); otherwise only the ``\\n`` / ``\\r\\n`` break goes (corpora
    whose leading spaces may matter to a tokenizer). ``limit`` stops after that many lines. A file that
    is missing or not UTF-8 raises :class:`~harness.errors.UserInputError` naming it (``what`` says which file
    it is to the user).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.txt"
        >>> _ = p.write_bytes(b" a \\r\\n\\n  \\nb\\n c")
        >>> list(text_lines(p)), list(text_lines(p, strip=True)), list(text_lines(p, limit=1))
        ([' a ', 'b', ' c'], ['a', 'b', 'c'], [' a '])
    """
    if limit is not None and limit <= 0:
        return
    n = 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip() if strip else line.rstrip("\r\n")
                if not line or (not strip and not line.strip()):
                    continue
                yield line
                n += 1
                if limit is not None and n >= limit:
                    return
    except FileNotFoundError:
        raise UserInputError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise UserInputError(f"{what} {path} is a directory; expected a UTF-8 text file") from None
    except UnicodeDecodeError as e:
        raise UserInputError(f"{what} {path} is not valid UTF-8 text ({e})") from None
