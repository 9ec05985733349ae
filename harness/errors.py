"""The project's error types: what the command line reports as the user's problem, and what is a bug.

Part of the public API methods, tasks and plugins use (``from harness.errors import UserInputError``).

Every error about what a user asked for or gave — a config field, a file, a flag, a name, a resource
— is a :class:`TokxferError`; the command line prints its message on one line and exits 2. Anything
else that escapes a command (a bare ``KeyError``, ``ValueError``, ``TypeError`` … raised inside the
harness or a method) is a bug: ``tokxfer`` prints "internal error" with a hint to ``--debug`` and
exits 1, so a bug never reads as the user's fault. Operating-system errors about a path (a missing
or unreadable file, a full disk) are the environment's, also exit 2.

Each error class of a room subclasses :class:`TokxferError` and, for callers that catch the built-in
type, the built-in type it always was (``ConfigError(TokxferError, ValueError)``).

Example:
    >>> issubclass(UserInputError, ValueError) and issubclass(UserInputError, TokxferError)
    True
"""

from __future__ import annotations

__all__ = ["TokxferError", "UserInputError", "is_user_error"]


class TokxferError(Exception):
    """An error about the user's input or environment; its message names the culprit (file, flag, field)."""


class UserInputError(TokxferError, ValueError):
    """A value a user gave is not usable (for methods, tasks and plugins that have no error type of their own)."""


def is_user_error(e: BaseException) -> bool:
    """Whether the command line reports ``e`` as the user's (one line, exit 2) rather than as a bug.

    Example:
        >>> is_user_error(UserInputError("x")), is_user_error(KeyError("x")), is_user_error(FileNotFoundError(2, "no", "a.txt"))
        (True, False, True)
    """
    if isinstance(e, TokxferError):
        return True
    if isinstance(e, (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)):
        return True  # always about a path
    # the environment's: a path that is unreadable, a disk that is full … (an OSError with no errno is not)
    return isinstance(e, OSError) and (e.filename is not None or e.errno is not None)
