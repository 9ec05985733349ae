"""Names that become file names, and paths that must stay inside a folder.

Experiment names, leaderboard spec names and trial ids come from files a user (or someone else)
wrote; each becomes one path component under a folder tokxfer owns (``RUNS_DIR/<experiment>/``,
``--out/<spec>.md``, ``records/<trial_id>.json``). :func:`name_problem` says why a text cannot be
such a component, and :func:`require_inside` checks, after resolving every link, that a path
tokxfer is about to write or delete lies inside the folder it belongs to.

Example:
    >>> name_problem("quickstart"), name_problem("../../x")
    (None, "it is '.' or '..' or contains a path separator")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.errors import TokxferError

__all__ = ["name_problem", "check_name", "inside", "require_inside", "UnsafePathError"]

MAX_NAME = 200


class UnsafePathError(TokxferError, ValueError):
    """A name or path would leave the folder it belongs to; the message names both."""


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a single file or folder name tokxfer writes, or ``None`` when it can.

    Refused: non-text, empty or blank names, ``.``/``..``, path separators, a leading ``.`` or
    ``-`` (hidden files, names read as options), control characters, surrounding spaces, more
    than 200 characters.

    Example:
        >>> name_problem(".hidden"), name_problem("a/b"), name_problem("ok-1.2")
        ("it starts with '.'", "it is '.' or '..' or contains a path separator", None)
    """
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not text"
    if not name.strip():
        return "it is empty"
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return "it is '.' or '..' or contains a path separator"
    if name[0] in ".-":
        return f"it starts with {name[0]!r}"
    if name != name.strip():
        return "it has leading or trailing spaces"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it contains control characters"
    if len(name) > MAX_NAME:
        return f"it is longer than {MAX_NAME} characters"
    return None


def check_name(name: Any, what: str) -> str:
    """``name`` if :func:`name_problem` finds nothing, else :class:`UnsafePathError` naming ``what``.

    Example:
        >>> check_name("qs", "spec name")
        'qs'
    """
    why = name_problem(name)
    if why is not None:
        raise UnsafePathError(f"{what} {name!r} cannot be a file name ({why}); use letters, digits and - _ . +")
    return name


def inside(path: str | os.PathLike, folder: str | os.PathLike, *, resolve_folder: bool = True) -> bool:
    """Whether ``path`` lies in ``folder`` (or is it) once resolved (links, ``..``).

    Args:
        path: the path to check (resolved).
        folder: the folder it must lie in; resolved too unless ``resolve_folder`` is false (then it
            must already be the real path: a folder that is itself a link then does not count as itself).

    Example:
        >>> inside("/tmp/a/../b", "/tmp/a")
        False
    """
    real = Path(os.path.realpath(path))
    base = Path(os.path.realpath(folder)) if resolve_folder else Path(folder)
    return real == base or base in real.parents


def require_inside(path: str | os.PathLike, folder: str | os.PathLike, what: str, *,
                   resolve_folder: bool = True) -> Path:
    """``Path(path)`` if it lies in ``folder`` after resolving (see :func:`inside`), else
    :class:`UnsafePathError` naming both.

    Example:
        >>> require_inside("/tmp/x/y.md", "/tmp/x", "--out")
        PosixPath('/tmp/x/y.md')
    """
    if not inside(path, folder, resolve_folder=resolve_folder):
        raise UnsafePathError(
            f"{what}: {path} resolves to {os.path.realpath(path)}, outside {folder} (a symbolic link on the way?); "
            f"refusing to write or delete there"
        )
    return Path(path)
