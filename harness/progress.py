"""Optional progress of long method steps: silent unless the caller asks for it.

Part of the public API methods and plugins use (``from harness import progress``).

A method wraps the loop of a long step in :func:`iterate`; nothing is shown unless the caller runs
the method inside :func:`reporting` with a bar factory (``tokxfer init`` passes a tqdm bar on
stderr). What is computed never depends on it.

Example:
    >>> [x for x in iterate(range(3), "silent")]
    [0, 1, 2]
    >>> seen = []
    >>> class Bar:
    ...     def __init__(self, desc, total): seen.append((desc, total))
    ...     def update(self, n=1): seen.append(n)
    ...     def close(self): seen.append("closed")
    >>> with reporting(Bar):
    ...     _ = list(iterate(range(2), "step"))
    >>> seen
    [('step', 2), 1, 1, 'closed']
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["counter", "iterate", "reporting", "step", "tool_output", "tool_output_enabled"]

T = TypeVar("T")

_FACTORY: contextvars.ContextVar[Callable[[str, int | None], Any] | None] = contextvars.ContextVar(
    "tokxfer_progress", default=None
)


def iterate(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items``, advancing a progress bar named ``desc`` after each one (if one is being reported)."""
    factory = _FACTORY.get()
    if factory is None:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    bar = factory(desc, total)
    try:
        for x in items:
            yield x
            bar.update(1)
    finally:
        bar.close()


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def counter(desc: str, total: int | None) -> Any:
    """A progress bar named ``desc`` for a loop :func:`iterate` does not fit: ``.update(n)``, then ``.close()``.

    Silent (does nothing) unless a caller is reporting.

    Example:
        >>> bar = counter("silent", 10); bar.update(4); bar.close()
    """
    factory = _FACTORY.get()
    return _Silent() if factory is None else factory(desc, total)


@contextlib.contextmanager
def step(desc: str) -> Iterator[None]:
    """A one-step bar around a long operation that has no loop to count (a model load, a matrix product).

    When a caller is reporting, the bar shows ``desc`` when the step starts and completes when it ends
    (also when it raises); silent otherwise.

    Example:
        >>> with step("silent"):
        ...     pass
    """
    bar = counter(desc, 1)
    try:
        yield
        bar.update(1)
    finally:
        bar.close()


@contextlib.contextmanager
def reporting(factory: Callable[[str, int | None], Any]) -> Iterator[None]:
    """While inside, :func:`iterate` shows bars made by ``factory(desc, total)`` (``.update(n)``, ``.close()``)."""
    token = _FACTORY.set(factory)
    try:
        yield
    finally:
        _FACTORY.reset(token)


_TOOL_OUTPUT: contextvars.ContextVar[bool] = contextvars.ContextVar("tokxfer_tool_output", default=False)


@contextlib.contextmanager
def tool_output(enabled: bool = True) -> Iterator[None]:
    """While inside, external tools a method drives print their own progress (fastText's ``verbose=2``).

    Only what is printed changes, never what is computed or a cache key.

    Example:
        >>> with tool_output():
        ...     tool_output_enabled()
        True
        >>> tool_output_enabled()
        False
    """
    token = _TOOL_OUTPUT.set(bool(enabled))
    try:
        yield
    finally:
        _TOOL_OUTPUT.reset(token)


def tool_output_enabled() -> bool:
    """Whether the caller asked for external tools' own progress output (see :func:`tool_output`)."""
    return _TOOL_OUTPUT.get()
