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

__all__ = ["HEARTBEAT_S", "TerminalBar", "counter", "elapsed", "heartbeat", "iterate", "line", "line_bars", "reporting",
           "step", "terminal_bar", "terminal_iterate", "tool_output", "Watchdog", "tool_output_enabled"]

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


class TerminalBar:
    """The project's terminal bar for its own loops (a grid's trials, pretraining steps, a task's batches).

    ``advance(n, **fields)`` moves it on and sets the named fields (e.g. the running loss);
    ``describe(text)`` changes the text beside the count (the trial running now). Does nothing when
    the bar was made disabled.
    """

    def __init__(self, prog: Any, task: Any) -> None:
        self._prog, self._task = prog, task

    def advance(self, n: float = 1, **fields: str) -> None:
        if self._prog is not None:
            self._prog.update(self._task, advance=n, **fields)

    def describe(self, text: str) -> None:
        if self._prog is not None:
            self._prog.update(self._task, description=text)


@contextlib.contextmanager
def terminal_bar(title: str, total: float | None, *, enabled: bool = True, fields: tuple[str, ...] = (),
                 transient: bool = False, console: Any = None) -> Iterator[TerminalBar]:
    """A rich bar ``title  ━━━━  M/N  <text>  <field> <value> …  elapsed  remaining`` on stderr while inside.

    The one place the columns of tokxfer's own terminal bars are chosen (methods report through
    :func:`iterate` / :func:`counter` instead, which the caller may show as bars or log lines).
    ``fields`` names values shown after the count (``"-"`` until set by :meth:`TerminalBar.advance`);
    ``transient`` removes the bar when done. Nothing is drawn when ``enabled`` is false or
    ``total`` is 0.

    Example:
        >>> with terminal_bar("silent", 3, enabled=False) as bar:
        ...     bar.advance(1, loss="1.0")
    """
    if not enabled or total == 0:
        yield TerminalBar(None, None)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn(f"[bold]{title}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}")]
    columns += [TextColumn(f"{f} {{task.fields[{f}]}}") for f in fields]
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, transient=transient, console=console) as prog:
        yield TerminalBar(prog, prog.add_task("", total=total, **{f: "-" for f in fields}))


def terminal_iterate(items: Iterable[T], title: str, *, total: int | None = None, enabled: bool = True,
                     transient: bool = True) -> Iterator[T]:
    """Yield ``items`` under a :func:`terminal_bar` (transient by default).

    Example:
        >>> list(terminal_iterate(range(3), "silent", enabled=False))
        [0, 1, 2]
    """
    if not enabled:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with terminal_bar(title, total, transient=transient) as bar:
        for x in items:
            yield x
            bar.advance(1)


class Watchdog:
    """A line whenever ``every`` seconds pass without one: the guard of a command's log against silence.

    A command that writes its progress as lines (``tokxfer init`` in a log) calls :meth:`touch` with
    each line it writes; when nothing was written for ``every`` seconds (library imports, a check
    that reads a large file, a step without a bar) the watchdog writes ``"still <what> (<t> since the
    last line)"``, naming the last thing the command said it was doing. Output only; what is
    computed never depends on it.

    Example:
        >>> out = []
        >>> with Watchdog(out.append, every=0.05) as dog:
        ...     dog.touch("loading libraries")
        ...     time.sleep(0.2)
        >>> out[0].startswith("still loading libraries (")
        True
    """

    def __init__(self, write: Callable[[str], None], every: float | None = None, *, what: str = "working",
                 first: float | None = None) -> None:
        self.write, self.every = write, float(HEARTBEAT_S if every is None else every)
        self.what, self.last = what, time.monotonic()
        self.t0 = time.perf_counter()  # when the command's clock started (its lines' timestamps count from it)
        # the silence allowed before the first line: shorter when the process ran before the watchdog started
        self._limit = self.every if first is None else float(first)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def touch(self, what: str | None = None) -> None:
        """A line was just written (``what``: what the command is doing now, if it says)."""
        with self._lock:
            self.last, self._limit = time.monotonic(), self.every
            if what:
                self.what = what

    def _run(self) -> None:
        while not self._stop.wait(min(0.5, self.every / 8, self._limit / 8)):
            with self._lock:
                quiet = time.monotonic() - self.last
                if quiet < self._limit:
                    continue
                what, self.last, self._limit = self.what, time.monotonic(), self.every
            self.write(f"still {what} ({elapsed(quiet)} since the last line)")

    def __enter__(self) -> Watchdog:
        self._thread = threading.Thread(target=self._run, name="tokxfer-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
