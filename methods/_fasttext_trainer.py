"""fastText's own trainer, called safely: the seed argument, zeroed allocations, a heartbeat while it trains.

Initialization trap (fastText issue #1061): ``DenseMatrix::uniform`` splits the input matrix
into blocks of ``rows*dim/10`` and fills only ``threads`` of them, so with fewer than 10 threads
only the first ``threads/10`` of the ``(n_words + bucket) x dim`` input matrix gets its random
init. Upstream the rest is zero (a zero-filled ``std::vector``); in ``fasttext-numpy2`` 0.10.4 it
is *uninitialized heap memory*: small models then train on garbage, differ from run to run even
with ``threads=1`` and a fixed seed, and sometimes abort with "Encountered NaN". Allocations above
glibc's largest dynamic mmap threshold (32 MiB) come from fresh zero pages, which restores the
upstream behaviour (deterministic zero rows). :func:`methods._fasttext.train_fasttext` therefore refuses a
``bucket`` whose input matrix is under :data:`MIN_INPUT_MATRIX_BYTES` (see :func:`min_bucket`),
and reports how many *word* rows fell outside the randomly initialized part (they start at zero;
keep ``bucket >= (10/threads - 1) * n_words`` to avoid that; the default 2M covers 222k words
with one thread).

Memory: fastText allocates ``(n_words + bucket) x dim`` float32 input rows; with the defaults
(``bucket=2_000_000``, ``dim=300``) that is ~2.4 GB of address space, mostly untouched zero pages
on small corpora.

Progress: :class:`TrainingProgress` reads how far a training is from the bytes the process has read
(fastText reads its input once for the vocabulary and once per epoch).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import progress as _progress
from harness.errors import TokxferError

__all__ = ["MIN_INPUT_MATRIX_BYTES", "min_bucket", "EmptyVocabularyError", "zeroed_allocations", "training_progress",
           "TrainingProgress", "train_unsupervised"]

MIN_INPUT_MATRIX_BYTES = 33 * 2**20
"""Smallest fastText input matrix accepted: above glibc's 32 MiB maximum dynamic mmap threshold,
so the rows fastText leaves uninitialized are zero pages (see the module docstring)."""


def min_bucket(dim: int) -> int:
    """The smallest ``bucket`` whose input matrix is at least :data:`MIN_INPUT_MATRIX_BYTES` (ignoring word rows).

    Example:
        >>> min_bucket(300), min_bucket(16)
        (28836, 540672)
    """
    return -(-MIN_INPUT_MATRIX_BYTES // (4 * int(dim)))


class EmptyVocabularyError(TokxferError, ValueError):
    """fastText found no word occurring at least ``min_count`` times (corpus too small)."""


_M_PERTURB = -6
"""glibc ``mallopt`` parameter: fill every block ``malloc`` hands out with ``byte ^ 0xff``."""


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


@contextlib.contextmanager
def zeroed_allocations() -> Iterator[bool]:
    """While inside, glibc's ``malloc`` returns zero-filled memory (``mallopt(M_PERTURB, 0xff)``).

    fastText-numpy2 leaves part of its input matrix uninitialized (see the module docstring). A
    matrix above the mmap threshold comes from fresh zero pages only when no freed heap block is
    large enough; after a process has freed big heap blocks (a test session, a long grid), the
    matrix can be carved from them and training starts on stale bytes — other numbers, or
    "Encountered NaN". With the perturb byte 0xff every block from the heap is zeroed, exactly what
    fresh pages give, so the result is the same as in a fresh process. Freed blocks are filled with
    0xff meanwhile (harmless). Yields whether the setting took effect (``False`` off glibc, where
    the ``min_bucket`` guard remains the protection).
    """
    libc = _libc()
    ok = bool(libc is not None and libc.mallopt(_M_PERTURB, 0xFF) == 1)
    try:
        yield ok
    finally:
        if ok:
            libc.mallopt(_M_PERTURB, 0)


def training_progress(enabled: bool = True) -> contextlib.AbstractContextManager[None]:
    """While inside, fastText training prints its own summary lines to stderr (words read, vocabulary size, and
    at the end words/sec and loss).

    Only what is printed changes (fastText's ``verbose=1``); the trained vectors and the cache key do
    not. The same switch as :func:`harness.progress.tool_output`, which ``tokxfer init`` sets. Progress
    *while* training is :class:`TrainingProgress`'s heartbeat, whatever the thread count (fastText's own
    progress line, ``verbose=2``, stays silent with one thread: its one thread trains in the reporting loop's place).
    """
    return _progress.tool_output(enabled)


def _bytes_read() -> int | None:
    """Bytes this process has read with ``read()``-like calls so far (Linux ``/proc/self/io``), or ``None``."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for row in f:
                if row.startswith("rchar:"):
                    return int(row.split()[1])
    except OSError:
        return None
    return None


class TrainingProgress:
    """How far a fastText training is, for :func:`harness.progress.heartbeat`: ``status()`` -> ``"≈40% (epoch 2 of 3)"``.

    fastText's trainer exposes no progress to Python, but it reads its input file once to build the
    vocabulary and then once per epoch (each thread its share), so the bytes the process has read
    since training started (``/proc/self/io``) divided by the file's size say where it is. Where that
    is unavailable (not Linux), the status names the epoch count only.

    Example:
        >>> p = TrainingProgress(Path(__file__), epochs=3)
        >>> p.status() in ("reading the text (vocabulary)", "3 epochs")
        True
    """

    def __init__(self, text: Path, epochs: int) -> None:
        self.size = max(Path(text).stat().st_size, 1)
        self.epochs = max(int(epochs), 1)
        self.start = _bytes_read()
        self.t0 = time.monotonic()

    def status(self) -> str:
        now = _bytes_read()
        if self.start is None or now is None:
            return f"{self.epochs} epochs"
        passes = (now - self.start) / self.size
        if passes < 1:
            return "reading the text (vocabulary)"
        done = min((passes - 1) / self.epochs, 1.0)
        epoch = min(int(done * self.epochs) + 1, self.epochs)
        overall = min(passes / (1 + self.epochs), 1.0)  # the vocabulary pass counts as one more (faster) pass
        eta = (time.monotonic() - self.t0) * (1 - overall) / overall
        return f"≈{done:.0%} (epoch {epoch} of {self.epochs})" + (f", ETA ≈{_progress.elapsed(eta)}" if done < 1 else "")


def train_unsupervised(text: Path, params: dict) -> Any:
    """``fasttext.train_unsupervised`` with the ``seed`` argument, which its Python wrapper does not accept.

    The C++ trainer has a ``-seed`` option (default 0); ``train_unsupervised`` rejects the keyword,
    so the arguments are built with the module's own helpers (as ``train_unsupervised`` does).
    """
    from fasttext import FastText as ftmod

    manual = {k for k in params if k != "seed"} | {"input", "verbose"}
    args = {**ftmod.unsupervised_default, **params, "input": str(text), "verbose": 1 if _progress.tool_output_enabled() else 0}
    built = ftmod._build_args(args, manual)
    model = ftmod._FastText(args=built)
    where = TrainingProgress(text, params.get("epoch", 5))
    desc = f"fastText {params.get('model', 'skipgram')} training on {Path(text).name} ({params.get('thread', 1)} thread(s))"
    try:
        with zeroed_allocations(), _progress.heartbeat(desc, where.status):
            ftmod.fasttext.train(model.f, built)
    except ValueError as e:
        if "Empty vocabulary" in str(e):
            raise EmptyVocabularyError(
                f"fastText: no word of {text} occurs at least min_count={params.get('minCount')} times (empty vocabulary)"
            ) from None
        raise
    model.set_args(model.f.getArgs())
    return model
