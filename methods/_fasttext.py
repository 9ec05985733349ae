"""fastText helpers shared by FOCUS and WECHSEL: training with a content-hashed cache, loading, and token vectors.

Uses ``fasttext-numpy2`` (``import fasttext``); the ``fasttext``/``fasttext-wheel`` builds crash
under numpy 2 (FACTS.md).

Determinism: fastText's Hogwild SGD is deterministic only with ``threads=1`` and a fixed
``seed``; with more threads the result depends on thread scheduling and differs run to run.
:func:`train_fasttext` therefore defaults to one thread, includes ``threads`` in the cache key
and reports ``deterministic`` in its report dict, so records say which kind of model they used.

The pieces, one module each (their public names are importable from here):

* :mod:`methods._fasttext_words` — corpus pre-tokenization (:func:`pretokenize`, cached by content) and the
  fastText word of every token (:func:`escape_token`, :func:`fasttext_words`);
* :mod:`methods._fasttext_trainer` — fastText's trainer called with a seed, on zeroed memory (the
  initialization trap of fastText issue #1061; :func:`min_bucket`), with a heartbeat;
* :mod:`methods._fasttext_compact` — :class:`CompactVectors`, the vectors a method reads without the
  model's input matrix (what ``compact=True`` caches);
* this module — :func:`train_fasttext` (content-hashed cache of full or compact models),
  :func:`load_fasttext`, :func:`token_vectors` and :func:`string_vectors`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness.cache import build_lock
from methods._fasttext_bin import BinVectors, open_bin
from methods._fasttext_compact import (
    CACHE_READ_ERRORS,
    COMPACT_SUFFIX,
    COMPACT_VERSION,
    CompactVectors,
    subword_lengths,
)
from methods._fasttext_trainer import (
    MIN_INPUT_MATRIX_BYTES,
    EmptyVocabularyError,
    TrainingProgress,
    min_bucket,
    training_progress,
    zeroed_allocations,
)
from methods._fasttext_trainer import train_unsupervised as _train_unsupervised
from methods._fasttext_words import (
    CACHE_VERSION,
    TokenFormat,
    escape_token,
    fasttext_words,
    file_sha256,
    pretokenize,
    pretokenize_cached,
    tokenizer_fingerprint,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EmptyVocabularyError",
    "MIN_INPUT_MATRIX_BYTES",
    "min_bucket",
    "escape_token",
    "fasttext_words",
    "tokenizer_fingerprint",
    "file_sha256",
    "pretokenize",
    "pretokenize_cached",
    "fasttext_cache_key",
    "training_params",
    "train_fasttext",
    "atomic_write",
    "CACHE_READ_ERRORS",
    "CACHE_VERSION",
    "CompactVectors",
    "COMPACT_SUFFIX",
    "COMPACT_VERSION",
    "subword_lengths",
    "load_fasttext",
    "load_fasttext_vectors",
    "token_vectors",
    "string_vectors",
    "vector_reader",
    "training_progress",
    "TrainingProgress",
    "TokenFormat",
    "zeroed_allocations",
]


def _zero_init_words(n_words: int, bucket: int, dim: int, threads: int) -> int:
    """How many word rows fastText's blockwise uniform init misses (rows are words first, then buckets)."""
    total = (n_words + bucket) * dim
    initialized = min(threads * (total // 10), total)
    return max(n_words - initialized // dim, 0)


def train_fasttext_or_none(
    text: Path, *, cache_dir: Path | None, report: dict, who: str, consequence: str, compact: bool = False,
    strings: Iterable[str] = (), store: bool = True, **params: Any
) -> Any:
    """:func:`train_fasttext`, or ``None`` when no word reaches ``min_count``.

    The reason is logged as ``"<who>: <reason>; <consequence>"`` and written into ``report`` with
    the parameters, so a method can fall back explicitly instead of failing the trial.
    """
    try:
        return train_fasttext(
            text, cache_dir=cache_dir, report=report, compact=compact, strings=strings, store=store, **params
        )
    except EmptyVocabularyError as e:
        logger.warning("%s: %s; %s", who, e, consequence)
        report.update(error=str(e), params=params)
        return None


def fasttext_cache_key(text: Path, params: dict) -> str:
    """The cache key of a fastText model: sha256 over the text's bytes and the training params."""
    import fasttext

    key = {
        "text_sha256": file_sha256(Path(text)),
        "params": params,
        "cache_version": CACHE_VERSION,
        "fasttext": getattr(fasttext, "__version__", "unknown"),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def training_params(
    *,
    dim: int = 100,
    epoch: int = 5,
    min_count: int = 5,
    model: Literal["skipgram", "cbow"] = "skipgram",
    minn: int = 3,
    maxn: int = 6,
    neg: int = 5,
    ws: int = 5,
    lr: float = 0.05,
    bucket: int = 2_000_000,
    seed: int = 0,
    threads: int = 1,
) -> dict:
    """The parameters :func:`train_fasttext` hands to fastText (fastText's names), as its cache key hashes them.

    Same arguments and defaults as :func:`train_fasttext`; with :func:`fasttext_cache_key` a caller can
    name a model's cache entry before (or instead of) training it.

    Example:
        >>> training_params(dim=16, min_count=2)["minCount"], training_params()["thread"]
        (2, 1)
    """
    return {
        "dim": int(dim), "epoch": int(epoch), "minCount": int(min_count), "model": model, "minn": int(minn),
        "maxn": int(maxn), "neg": int(neg), "ws": int(ws), "lr": float(lr), "bucket": int(bucket),
        "seed": int(seed), "thread": int(threads),
    }  # fmt: skip


def train_fasttext(
    text: Path,
    *,
    dim: int = 100,
    epoch: int = 5,
    min_count: int = 5,
    model: Literal["skipgram", "cbow"] = "skipgram",
    minn: int = 3,
    maxn: int = 6,
    neg: int = 5,
    ws: int = 5,
    lr: float = 0.05,
    bucket: int = 2_000_000,
    seed: int = 0,
    threads: int = 1,
    cache_dir: Path | None = None,
    report: dict | None = None,
    compact: bool = False,
    strings: Iterable[str] = (),
    store: bool = True,
) -> Any:
    """Train (or load from the cache) an unsupervised fastText model on a text file.

    Defaults are fastText's own ``train_unsupervised`` defaults, except ``threads=1``
    (deterministic). The cache entry is ``<cache_dir>/fasttext/<key>.bin`` (``compact=False``) or
    ``<key>.vectors.npz`` (``compact=True``, see :class:`CompactVectors`) with ``key`` from
    :func:`fasttext_cache_key` (content of ``text`` + every parameter, including ``threads``
    and ``seed``); it is written to a temporary file and renamed, so concurrent trainers and
    crashes never leave a partial entry.

    Args:
        text: training text (already pre-tokenized for token-level models).
        dim: vector size.
        epoch: passes over the data.
        min_count: words seen fewer times get no vector of their own (not in the vocabulary).
        model: ``"skipgram"`` or ``"cbow"``.
        minn / maxn: character n-gram lengths (``maxn=0`` disables subwords).
        neg: negatives sampled per positive.
        ws: context window size.
        lr: learning rate.
        bucket: hash buckets for n-grams (memory: ``bucket x dim`` floats); at least
            :func:`min_bucket` ``(dim)`` (fastText's partial initialization, see the module docstring).
        seed: fastText's random seed.
        threads: training threads; ``> 1`` is faster but not reproducible.
        cache_dir: cache root; ``None`` trains without caching.
        report: if a dict is given, it is filled with ``cache`` (``"hit"``, ``"miss"``, ``"off"``),
            ``path``, ``seconds``, ``threads``, ``deterministic``, ``params``, ``n_words`` and
            ``zero_init_words`` (word rows outside fastText's randomly initialized block); with
            ``compact`` also ``stored="compact"``, ``strings`` (out-of-vocabulary strings kept),
            ``bytes`` (size of the entry), and ``missing_strings`` / ``migrated_from`` when the
            entry had to be extended or was converted from an old ``.bin``.
        compact: keep and return only the vectors a method reads (:class:`CompactVectors`): every
            vocabulary word's vector, and the vectors of ``strings``.
        strings: with ``compact``, the strings outside the vocabulary whose ``get_word_vector``
            (n-gram vector) the caller will ask for.
        store: with ``False`` (full models only), a ``<key>.bin`` already in the cache is still
            loaded (``cache="hit"``), but a newly trained model is not written (``cache="miss"``,
            ``path=None``): for callers that cache what they derive from the model instead.

    Returns:
        A ``fasttext`` model (``fasttext.FastText._FastText``), or :class:`CompactVectors` with ``compact``.

    Raises:
        EmptyVocabularyError: no word reaches ``min_count``.
        FileNotFoundError / ValueError: missing or empty ``text``.

    Example:
        >>> # m = train_fasttext(Path("tok.txt"), dim=16, epoch=1, min_count=1, cache_dir=Path("cache"))
    """
    # Stays whole (long only by its docstring, which documents each of fastText's parameters where callers read them; the body
    # is ~30 lines whose steps are helpers (checks, the full or compact cache entry, the zero-row warning, the report)).
    _check_training_args(text, model=model, threads=threads, compact=compact, store=store, bucket=bucket, dim=dim)
    text = Path(text)
    params = training_params(
        dim=dim, epoch=epoch, min_count=min_count, model=model, minn=minn, maxn=maxn, neg=neg, ws=ws, lr=lr,
        bucket=bucket, seed=seed, threads=threads,
    )
    t0 = time.perf_counter()
    rep: dict = {}
    cache = Path(cache_dir) if cache_dir is not None else None
    key = fasttext_cache_key(text, params) if cache is not None else None
    # two workers wanting one uncached model (a held seed) train it once: the second waits, then hits
    # (store=False writes nothing, so it takes no lock)
    with build_lock(cache, "fasttext", key) if key is not None and (compact or store) else contextlib.nullcontext():
        if compact:
            ft = _compact_vectors(text, params, cache, strings, rep, key=key)
        else:
            ft = _full_model(text, params, cache, rep, store, key=key)
    status = rep["cache"]
    n_words = len(ft.get_words())
    zero_init = _zero_init_words(n_words, int(bucket), int(dim), int(threads))
    if zero_init and status != "hit":
        logger.warning(
            "fastText: %d of %d word rows lie outside the randomly initialized first %d/10 of the input matrix and "
            "start at zero; raise bucket to >= %d to avoid it", zero_init, n_words, min(threads, 10),
            n_words * max(10 // max(threads, 1) - 1, 0),
        )
    if report is not None:
        report.update(
            cache=status, path=rep.get("path"), seconds=round(time.perf_counter() - t0, 3),
            threads=int(threads), deterministic=threads == 1, params=params, n_words=n_words, zero_init_words=zero_init,
            **{k: v for k, v in rep.items() if k not in ("cache", "path")},
        )
    if threads > 1:
        logger.info("fastText trained with %d threads: the vectors are not bit-reproducible", threads)
    return ft


def _check_training_args(text: Path, *, model: str, threads: int, compact: bool, store: bool, bucket: int, dim: int) -> None:
    """The errors :func:`train_fasttext` raises before training (each names the argument and what it must be)."""
    if model not in ("skipgram", "cbow"):
        raise ValueError(f"model must be 'skipgram' or 'cbow', got {model!r}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if compact and not store:
        raise ValueError("store=False is for full models: a compact entry is always stored")
    if bucket < min_bucket(dim):
        raise ValueError(
            f"bucket={bucket} is too small for dim={dim}: use bucket >= {min_bucket(dim)} so fastText's input matrix "
            f"(bucket x dim floats) is >= {MIN_INPUT_MATRIX_BYTES >> 20} MiB; fastText-numpy2 leaves part of a smaller "
            "matrix uninitialized (nondeterministic vectors, 'Encountered NaN'; fastText issue #1061)"
        )
    if not Path(text).is_file():
        raise FileNotFoundError(f"fastText training text not found: {text}")


def _train_checked(text: Path, params: dict) -> Any:
    if text.stat().st_size == 0:
        raise ValueError(f"fastText training text is empty: {text}")
    return _train_unsupervised(text, params)


def atomic_write(path: Path, write: Any) -> None:
    """``write(tmp_path)`` then rename onto ``path`` (no partial file on a crash, last writer wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load_bin_or_none(path: Path) -> Any:
    """A cached ``.bin``, or ``None`` when it is gone or unreadable (removed by a concurrent conversion)."""
    import fasttext

    if not path.is_file():
        return None
    try:
        return fasttext.load_model(str(path))
    except (ValueError, OSError) as e:
        logger.warning("fastText cache: cannot load %s (%s); training again", path, e)
        return None


def _full_model(text: Path, params: dict, cache: Path | None, rep: dict, store: bool = True, key: str | None = None) -> Any:
    """The whole fastText model, cached as ``<key>.bin`` (with ``store=False`` only read from the cache)."""
    path = cache / "fasttext" / f"{key or fasttext_cache_key(text, params)}.bin" if cache is not None else None
    ft = _load_bin_or_none(path) if path is not None else None
    if ft is not None:
        rep.update(cache="hit", path=str(path))
        return ft
    ft = _train_checked(text, params)
    if path is not None and store:
        atomic_write(path, ft.save_model)
    rep.update(cache="miss" if path is not None else "off", path=str(path) if path is not None and store else None)
    return ft


def _compact_vectors(text: Path, params: dict, cache: Path | None, strings: Iterable[str], rep: dict,
                     key: str | None = None) -> CompactVectors:
    """:class:`CompactVectors` covering ``strings``: from ``<key>.vectors.npz``, an old ``<key>.bin``, or training."""
    wanted = list(dict.fromkeys(s for s in strings if s))
    if cache is None:
        rep.update(cache="off", path=None, stored="compact")
        return CompactVectors.from_model(_train_checked(text, params), wanted, params=params, origin=f"fastText trained on {text}")
    key = key or fasttext_cache_key(text, params)
    path = cache / "fasttext" / f"{key}{COMPACT_SUFFIX}"
    legacy = cache / "fasttext" / f"{key}.bin"
    old: CompactVectors | None = None
    if path.is_file():
        try:
            old = CompactVectors.load(path)
        except CACHE_READ_ERRORS as e:  # damaged outside tokxfer (writes are atomic): rebuild it
            logger.warning("fastText cache: cannot read %s (%s); building it again", path, e)
        if old is not None:
            missing = old.missing(wanted)
            if not missing:
                rep.update(cache="hit", path=str(path), stored="compact", strings=len(old.strings), bytes=path.stat().st_size)
                return old
            rep["missing_strings"] = len(missing)
            logger.info(
                "fastText cache: %d strings are not in %s; training the model again to add them (%s)", len(missing), path.name,
                "one thread: identical vectors" if params["thread"] == 1 else f"{params['thread']} threads: other vectors",
            )
            wanted = list(dict.fromkeys([*old.strings, *wanted]))
    ft = _load_bin_or_none(legacy)
    if ft is not None:
        rep.update(cache="hit", migrated_from=str(legacy))
    else:
        ft = _train_checked(text, params)
        rep["cache"] = "miss"
    cv = CompactVectors.from_model(ft, wanted, params=params, origin=f"fastText trained on {text}")
    atomic_write(path, cv.save)
    if "migrated_from" in rep:
        size = legacy.stat().st_size if legacy.is_file() else 0
        legacy.unlink(missing_ok=True)
        logger.info("fastText cache: replaced the full model %s (%.1f MB) by its compact vectors %s (%.1f MB)",
                    legacy.name, size / 2**20, path.name, path.stat().st_size / 2**20)
    rep.update(path=str(path), stored="compact", strings=len(cv.strings), bytes=path.stat().st_size)
    return cv


def load_fasttext(path: Path) -> Any:
    """Load a fastText ``.bin`` model (a clear error if the file is missing)."""
    import fasttext

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fastText model not found: {path}")
    return fasttext.load_model(str(path))


def load_fasttext_vectors(path: Path) -> Any:
    """A fastText ``.bin`` opened for its vectors: a :class:`BinVectors` (dictionary read, input matrix mapped, the
    same vectors bit for bit as fastText's), or ``fasttext.load_model``'s model for a file that reader does not
    cover (quantized, pruned, another format version). What every caller that only asks for vectors opens."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fastText model not found: {path}")
    return open_bin(path) or load_fasttext(path)


def token_vectors(model: Any, tokenizer: Any, *, token_format: TokenFormat = "string") -> tuple[np.ndarray, np.ndarray]:
    """In-vocabulary fastText vectors of a tokenizer's tokens (token-level fastText).

    A token has a vector iff its fastText word (see :func:`fasttext_words`; must match how the
    training text was written by :func:`pretokenize`) is in the model's vocabulary, i.e. it
    occurred at least ``min_count`` times. Out-of-vocabulary n-gram vectors are *not* used.

    Args:
        model: a fastText model trained on text pre-tokenized with ``tokenizer``.
        tokenizer: the tokenizer whose vocabulary is embedded.
        token_format: the format used for pre-tokenization.

    Returns:
        ``(vectors, has_vector)``: float32 ``len(tokenizer) x dim`` (zeros where there is no
        vector) and a boolean mask.
    """
    words = fasttext_words(tokenizer, token_format)
    vecs = np.zeros((len(words), model.get_dimension()), dtype=np.float32)
    if isinstance(model, BinVectors):  # the vocabulary's words in one call
        has = np.fromiter(map(model.get_word_id, words), dtype=np.int64, count=len(words)) >= 0
        vecs[has] = model.vectors([w for w, known in zip(words, has) if known])
        return vecs, has
    has = np.zeros(len(words), dtype=bool)
    word_id, read = vector_reader(model)
    for i, w in enumerate(words):
        if word_id(w) >= 0:
            read(w, vecs[i])
            has[i] = True
    return vecs, has


def vector_reader(model: Any) -> tuple[Any, Any]:
    """``(get_word_id, read)`` of a model, ``read(word, row)`` writing ``get_word_vector(word)`` into ``row``.

    For a fastText model both go straight to its C++ object: its Python ``get_word_vector`` asks for the
    arguments and allocates a vector and an array on every call (half the time of a 60k-token loop). The
    C++ call zeroes the reused vector before summing the n-gram rows, so the values are the same bits.
    Other models (:class:`CompactVectors`) are read through their ``get_word_id`` / ``get_word_vector``.
    """
    f = getattr(model, "f", None)
    if f is None or not hasattr(f, "getWordVector"):
        def read_any(word: str, row: np.ndarray) -> None:
            row[:] = model.get_word_vector(word)
        return model.get_word_id, read_any
    import fasttext_pybind

    buf = fasttext_pybind.Vector(model.get_dimension())
    view = np.asarray(buf)  # a view of the C++ vector's floats

    def read(word: str, row: np.ndarray) -> None:
        f.getWordVector(buf, word)
        row[:] = view
    return f.getWordId, read


def string_vectors(model: Any, strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """fastText vectors of arbitrary strings, out-of-vocabulary ones from their character n-grams.

    This is WECHSEL's subword embedding ``u_x = sum of n-gram vectors`` (fastText's
    ``get_word_vector``): pass token strings with the word-start marker removed
    (``harness.vocab.token_string``). A string with no known n-gram (or empty, or containing
    whitespace, which fastText would split) gets a zero vector and ``has_vector=False``.

    Args:
        model: a word-level fastText model (with subwords, ``maxn > 0``).
        strings: one string per row.

    Returns:
        ``(vectors, has_vector)``: float32 ``len(strings) x dim`` and a boolean mask (nonzero vector).
    """
    vecs = np.zeros((len(strings), model.get_dimension()), dtype=np.float32)
    if isinstance(model, BinVectors):  # every string in one call
        nonempty = [i for i, s in enumerate(strings) if s]
        vecs[nonempty] = model.vectors([strings[i] for i in nonempty])
    else:
        _, read = vector_reader(model)
        for i, s in enumerate(strings):
            if s:
                read(s, vecs[i])
    has = np.any(vecs != 0, axis=1)
    return vecs, has
