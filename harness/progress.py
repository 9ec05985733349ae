"""Optional progress of long method steps: silent unless the caller asks for it.

Part of the public API methods and plugins use (``from harness import progress``).

A method wraps the loop of a long step in :func:`iterate` (or :func:`counter`), and a step whose
loop it cannot see (an external trainer: fastText, a tokenizer trainer) in :func:`heartbeat`;
nothing is shown unless the caller runs the method inside :func:`reporting`. ``tokxfer init``
passes a tqdm bar factory on a terminal and :func:`line_bars` (plain lines) in a log, plus a line
writer for the heartbeats. What is computed never depends on it.

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
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["HEARTBEAT_S", "counter", "elapsed", "heartbeat", "iterate", "line", "line_bars", "reporting", "step",
           "tool_output", "tool_output_enabled"]

T = TypeVar("T")

HEARTBEAT_S = 8.0
"""Default seconds between two heartbeat lines (and between two lines of a :func:`line_bars` bar): under
the 10 s a user (or a log watcher) should ever wait without a word (the scale benchmark checks it)."""


@dataclass(frozen=True)
class _Reporting:
    factory: Callable[[str, int | None], Any] | None
    lines: Callable[[str], None] | None
    every: float


_STATE: contextvars.ContextVar[_Reporting | None] = contextvars.ContextVar("tokxfer_progress", default=None)


def iterate(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items``, advancing a progress bar named ``desc`` after each one (if one is being reported)."""
    state = _STATE.get()
    if state is None or state.factory is None:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    bar = state.factory(desc, total)
    try:
        for x in items:
            yield x
            bar.update(1)
    finally:
        bar.close()


class _Silent:
    def update(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass


def counter(desc: str, total: float | None) -> Any:
    """A progress bar named ``desc`` for a loop :func:`iterate` does not fit: ``.update(n)``, then ``.close()``.

    Silent (does nothing) unless a caller is reporting.

    Example:
        >>> bar = counter("silent", 10); bar.update(4); bar.close()
    """
    state = _STATE.get()
    return _Silent() if state is None or state.factory is None else state.factory(desc, total)


def line(msg: str) -> None:
    """Show one progress line (a phase starting, a heartbeat) if a caller is reporting lines; else nothing.

    Example:
        >>> out = []
        >>> with reporting(None, lines=out.append):
        ...     line("reading")
        >>> line("nobody listens"); out
        ['reading']
    """
    state = _STATE.get()
    if state is not None and state.lines is not None:
        state.lines(msg)


def elapsed(seconds: float) -> str:
    """``seconds`` as ``"42s"``, ``"3m05s"`` or ``"1h02m"``.

    Example:
        >>> elapsed(42.4), elapsed(185), elapsed(3725)
        ('42s', '3m05s', '1h02m')
    """
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextlib.contextmanager
def heartbeat(desc: str, status: Callable[[], str] | None = None, *, every: float | None = None) -> Iterator[None]:
    """While inside, a line ``"<desc>: <elapsed> elapsed[, <status()>]"`` every ``every`` seconds.

    For a step that reports nothing itself while it runs (fastText training with one thread, a
    tokenizer trainer). The lines come from a background thread, so the step must release the GIL
    (C/C++/Rust trainers do). Nothing runs unless a caller is :func:`reporting` lines; ``every``
    defaults to the reporting's interval (:data:`HEARTBEAT_S`). ``status`` (optional) says how far
    the step is, e.g. ``"≈40% (epoch 2 of 3)"``.

    Example:
        >>> out = []
        >>> with reporting(None, lines=out.append, every=0.01):
        ...     with heartbeat("waiting", lambda: "half way"):
        ...         time.sleep(0.2)
        >>> out[0]
        'waiting: 0s elapsed, half way'
    """
    state = _STATE.get()
    if state is None or state.lines is None:
        yield
        return
    write, interval = state.lines, float(every if every is not None else state.every)
    stop = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not stop.wait(interval):
            extra = status() if status is not None else ""
            write(f"{desc}: {elapsed(time.monotonic() - t0)} elapsed" + (f", {extra}" if extra else ""))

    thread = threading.Thread(target=beat, name="tokxfer-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def step(desc: str) -> Iterator[None]:
    """A one-step bar around a long operation that has no loop to count (a model load, a matrix product),
    with heartbeat lines while it runs when a caller reports lines (a log).

    When a caller is reporting, the bar shows ``desc`` when the step starts and completes when it ends
    (also when it raises); silent otherwise.

    Example:
        >>> with step("silent"):
        ...     pass
    """
    bar = counter(desc, 1)
    try:
        with heartbeat(desc):
            yield
        bar.update(1)
    finally:
        bar.close()


@contextlib.contextmanager
def reporting(factory: Callable[[str, int | None], Any] | None, *, lines: Callable[[str], None] | None = None,
              every: float | None = None) -> Iterator[None]:
    """While inside, show progress: bars made by ``factory(desc, total)`` (``.update(n)``, ``.close()``) for
    :func:`iterate`/:func:`counter`, and ``lines(text)`` for :func:`line` and :func:`heartbeat` (every ``every``
    seconds, default :data:`HEARTBEAT_S`). Either may be ``None`` (not shown)."""
    token = _STATE.set(_Reporting(factory, lines, float(HEARTBEAT_S if every is None else every)))
    try:
        yield
    finally:
        _STATE.reset(token)


class _LineBar:
    """A bar for logs: a line when it starts, a plain line about every ``every`` seconds while it advances, and
    one at the end.

    A bar only sees its updates, so a line is written at the update *before* the one that would come
    ``every`` seconds after the last line (the time between two updates is taken to be the last one's):
    steps of a few seconds each never leave the log silent for much more than ``every``.
    """

    def __init__(self, desc: str, total: float | None, write: Callable[[str], None], every: float) -> None:
        self.desc, self.total, self.write, self.every = desc, total, write, every
        self.n: float = 0
        self.t0 = self.last = self.prev = time.monotonic()
        self.write(self._text())

    def _text(self) -> str:
        done = f"{_num(self.n)}/{_num(self.total)} ({self.n / self.total:.0%})" if self.total else _num(self.n)
        return f"{self.desc}: {done}, {elapsed(time.monotonic() - self.t0)} elapsed"

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        step, self.prev = now - self.prev, now
        if now - self.last + step >= self.every:
            self.last = now
            self.write(self._text())

    def close(self) -> None:
        self.write(self._text() + ", done")


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:,}" if float(x).is_integer() else f"{x:,.1f}"


def line_bars(write: Callable[[str], None], every: float | None = None) -> Callable[[str, float | None], Any]:
    """A bar factory for :func:`reporting` that writes plain lines (for logs, where a bar's ``\\r`` redraws are noise).

    Example:
        >>> out = []
        >>> with reporting(line_bars(out.append, every=3600)):
        ...     _ = list(iterate(range(3), "step"))
        >>> out
        ['step: 0/3 (0%), 0s elapsed', 'step: 3/3 (100%), 0s elapsed, done']
    """
    return lambda desc, total: _LineBar(desc, total, write, HEARTBEAT_S if every is None else every)


_TOOL_OUTPUT: contextvars.ContextVar[bool] = contextvars.ContextVar("tokxfer_tool_output", default=False)


@contextlib.contextmanager
def tool_output(enabled: bool = True) -> Iterator[None]:
    """While inside, external tools a method drives print their own messages (fastText's summary lines).

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
    """Whether the caller asked for external tools' own output (see :func:`tool_output`)."""
    return _TOOL_OUTPUT.get()
