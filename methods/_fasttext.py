"""fastText helpers shared by FOCUS and WECHSEL: training with a content-hashed cache, corpus
pre-tokenization, and token vectors for a tokenizer's vocabulary.

Uses ``fasttext-numpy2`` (``import fasttext``); the ``fasttext``/``fasttext-wheel`` builds crash
under numpy 2 (FACTS.md).

Determinism: fastText's Hogwild SGD is deterministic only with ``threads=1`` and a fixed
``seed``; with more threads the result depends on thread scheduling and differs run to run.
:func:`train_fasttext` therefore defaults to one thread, includes ``threads`` in the cache key
and reports ``deterministic`` in its report dict, so records say which kind of model they used.

Initialization trap (fastText issue #1061): ``DenseMatrix::uniform`` splits the input matrix
into blocks of ``rows*dim/10`` and fills only ``threads`` of them, so with fewer than 10 threads
only the first ``threads/10`` of the ``(n_words + bucket) x dim`` input matrix gets its random
init. Upstream the rest is zero (a zero-filled ``std::vector``); in ``fasttext-numpy2`` 0.10.4 it
is *uninitialized heap memory*: small models then train on garbage, differ from run to run even
with ``threads=1`` and a fixed seed, and sometimes abort with "Encountered NaN". Allocations above
glibc's largest dynamic mmap threshold (32 MiB) come from fresh zero pages, which restores the
upstream behaviour (deterministic zero rows). :func:`train_fasttext` therefore refuses a
``bucket`` whose input matrix is under :data:`MIN_INPUT_MATRIX_BYTES` (see :func:`min_bucket`),
and reports how many *word* rows fell outside the randomly initialized part (they start at zero;
keep ``bucket >= (10/threads - 1) * n_words`` to avoid that; the default 2M covers 222k words
with one thread).

Compact storage: FOCUS and WECHSEL never read fastText's input matrix itself, only vectors that
``get_word_vector`` computes from it — of vocabulary words (FOCUS's token-level vectors, WECHSEL's
dictionary and TFR words) and of a known list of other strings (the token strings whose
out-of-vocabulary n-gram vectors they embed). With ``compact=True`` :func:`train_fasttext` caches
exactly those, float32 as fastText computed them (:class:`CompactVectors`, ``<key>.vectors.npz``:
tens of megabytes where the ``.bin`` takes gigabytes), and returns an object that answers the same
calls bit for bit. A string that is neither in the vocabulary nor in the entry's list makes the next
request retrain (one thread: the same model, identical vectors) and store the union. A full
``<key>.bin`` left by an older version is used once and replaced by its compact entry.
Tik-to-Tok's fastText-kNN fallback reads input rows of character n-grams, which no list of
strings covers; it trains with ``store=False`` and caches the token vectors it derives instead
(:mod:`methods._tiktotok_knn`).

Memory: fastText allocates ``(n_words + bucket) x dim`` float32 input rows; with the defaults
(``bucket=2_000_000``, ``dim=300``) that is ~2.4 GB of address space, mostly untouched zero pages
on small corpora.

Pre-tokenized corpora: :func:`pretokenize` writes each line as whitespace-joined fastText
"words", one per token. By default a token's word is its vocabulary string, escaped by
:func:`escape_token` so that tokens containing whitespace, the empty string and fastText's own
``</s>`` stay distinct single words (``token_format="string"``, like the FOCUS reference code,
which keeps fastText's character n-grams meaningful); ``token_format="id"`` writes token ids
instead (no n-gram sharing between unrelated tokens, at the cost of any subword signal);
``token_format="raw"`` writes the vocabulary strings unescaped, exactly as the reference code
(``deepfocus``: ``" ".join(tokenizer.tokenize(line))``) does, so that a model trained by it can be
used as given: a token containing whitespace then splits into several fastText words, a literal
``</s>`` is fastText's line end, and tokens containing a backslash are looked up as they are.

Example:
    >>> escape_token("▁a b"), escape_token(""), escape_token("</s>")
    ('▁a\\\\sb', '\\\\e', '\\\\_</s>')
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import logging
import os
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness import progress as _progress
from harness.errors import TokxferError

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
    "fasttext_cache_key",
    "training_params",
    "train_fasttext",
    "atomic_write",
    "CACHE_READ_ERRORS",
    "CompactVectors",
    "COMPACT_SUFFIX",
    "subword_lengths",
    "load_fasttext",
    "token_vectors",
    "string_vectors",
    "training_progress",
    "TrainingProgress",
]

TokenFormat = Literal["string", "id", "raw"]

CACHE_VERSION = 1
"""Bumped when the training call or pre-tokenization format changes, invalidating cached models."""

CACHE_READ_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
"""What reading a damaged ``.npz`` cache entry raises (a truncated archive: ``BadZipFile``; an empty
file: ``EOFError``; other bytes: ``ValueError``): the entry is rebuilt, never trusted."""

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


_FASTTEXT_SPACE = {" ": "\\s", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r", "\0": "\\0"}
_CHUNK = 1 << 20


def escape_token(token: str) -> str:
    """Injective map from a token string to a single fastText word.

    fastText splits on ``' ' \\t \\n \\v \\f \\r \\0``, reserves ``</s>`` for line ends and treats
    words starting with ``__label__`` as labels. Backslashes are doubled, those whitespace
    characters become two-character escapes, the empty string becomes ``\\e``, and ``</s>`` /
    ``__label__…`` get a ``\\_`` prefix (which no other escaped string starts with).

    Args:
        token: the token as it appears in the tokenizer's vocabulary.

    Returns:
        A non-empty string without fastText whitespace.

    Example:
        >>> escape_token("a\\\\b")
        'a\\\\\\\\b'
    """
    s = token.replace("\\", "\\\\")
    for ch, esc in _FASTTEXT_SPACE.items():
        if ch in s:
            s = s.replace(ch, esc)
    if not s:
        return "\\e"
    if s == "</s>" or s.startswith("__label__"):
        return "\\_" + s
    return s


def fasttext_words(tokenizer: Any, token_format: TokenFormat = "string") -> list[str]:
    """The fastText word for every token id of ``tokenizer`` (index = token id).

    Args:
        tokenizer: a Hugging Face tokenizer (``len(tokenizer)`` ids, ``convert_ids_to_tokens``).
        token_format: ``"string"`` (escaped vocabulary strings), ``"id"`` (decimal ids) or ``"raw"``
            (vocabulary strings as they are, like the FOCUS reference code).

    Returns:
        A list of ``len(tokenizer)`` words, distinct except with ``"raw"``.
    """
    n = len(tokenizer)
    if token_format == "id":
        return [str(i) for i in range(n)]
    if token_format not in ("string", "raw"):
        raise ValueError(f"token_format must be 'string', 'id' or 'raw', got {token_format!r}")
    toks = tokenizer.convert_ids_to_tokens(list(range(n)))
    if token_format == "raw":
        return [t if t is not None else "" for t in toks]
    words = [escape_token(t if t is not None else "") for t in toks]
    if len(set(words)) != n:  # two ids with one string (rare: duplicated added tokens); keep them apart
        seen: set[str] = set()
        for i, w in enumerate(words):
            if w in seen:
                words[i] = f"\\#{i}"
            seen.add(words[i])
    return words


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A sha256 identifying a tokenizer's behaviour (its serialized backend, or its vocabulary).

    Args:
        tokenizer: a Hugging Face tokenizer.

    Returns:
        64 hex characters.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        payload = backend.to_str()
    else:
        payload = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    extra = json.dumps({"cls": type(tokenizer).__name__, "n": len(tokenizer)}, sort_keys=True)
    return hashlib.sha256((payload + "\0" + extra).encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _batches(path: Path, n: int) -> Iterator[list[str]]:
    batch: list[str] = []
    with open(path, encoding="utf-8", newline="\n") as f:  # split on '\n' only, like fastText
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                batch.append(line)
                if len(batch) >= n:
                    yield batch
                    batch = []
    if batch:
        yield batch


def _encode_batch(tokenizer: Any, lines: list[str]) -> list[list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # Rust batch encoding (parallel); no BatchEncoding overhead
        return [e.ids for e in backend.encode_batch(lines, add_special_tokens=False)]
    return tokenizer(lines, add_special_tokens=False)["input_ids"]


def pretokenize(
    corpus: Path,
    tokenizer: Any,
    out: Path,
    *,
    token_format: TokenFormat = "string",
    batch_lines: int = 4096,
) -> Path:
    """Write ``corpus`` tokenized with ``tokenizer`` as whitespace-joined fastText words.

    One output line per non-blank input line (lines are split on ``\\n`` only); special tokens
    are not added. Written to a temporary file next to ``out`` and renamed (atomic).

    Args:
        corpus: UTF-8 text, one sentence/document per line.
        tokenizer: the (target) tokenizer.
        out: output path.
        token_format: see :func:`fasttext_words`.
        batch_lines: lines encoded per batch.

    Returns:
        ``out``.

    Example:
        >>> # pretokenize(Path("de.txt"), target_tok, Path("de.tok.txt"))
    """
    words = np.array(fasttext_words(tokenizer, token_format), dtype=object)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    bar = _progress.counter(f"pre-tokenizing {Path(corpus).name} (MB)", round(Path(corpus).stat().st_size / 1e6, 1))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for batch in _batches(Path(corpus), batch_lines):
                for ids in _encode_batch(tokenizer, batch):
                    if ids:
                        f.write(" ".join(words[np.asarray(ids, dtype=np.int64)].tolist()))
                        f.write("\n")
                bar.update(sum(len(x.encode("utf-8")) + 1 for x in batch) / 1e6)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        bar.close()
    return out


def pretokenize_cached(
    corpus: Path, tokenizer: Any, cache: Path | None, tmp: Path, *, token_format: TokenFormat = "string"
) -> Path:
    """:func:`pretokenize` ``corpus`` once per (corpus content, tokenizer, format) under ``cache``.

    The result is ``<cache>/fasttext/pretok-<key>.txt`` and is reused by every method and trial
    that pre-tokenizes the same text with the same tokenizer; with ``cache=None`` it is written
    into the scratch folder ``tmp`` instead.
    """
    if cache is None:
        return pretokenize(corpus, tokenizer, Path(tmp) / "pretokenized.txt", token_format=token_format)
    key = hashlib.sha256(
        "\0".join([file_sha256(corpus), tokenizer_fingerprint(tokenizer), token_format, str(CACHE_VERSION)]).encode()
    ).hexdigest()
    out = Path(cache) / "fasttext" / f"pretok-{key[:24]}.txt"
    if not out.is_file():
        pretokenize(corpus, tokenizer, out, token_format=token_format)
    return out


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
    text = Path(text)
    if not text.is_file():
        raise FileNotFoundError(f"fastText training text not found: {text}")
    params = training_params(
        dim=dim, epoch=epoch, min_count=min_count, model=model, minn=minn, maxn=maxn, neg=neg, ws=ws, lr=lr,
        bucket=bucket, seed=seed, threads=threads,
    )
    t0 = time.perf_counter()
    rep: dict = {}
    if compact:
        ft = _compact_vectors(text, params, Path(cache_dir) if cache_dir is not None else None, strings, rep)
    else:
        ft = _full_model(text, params, Path(cache_dir) if cache_dir is not None else None, rep, store)
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


def _full_model(text: Path, params: dict, cache: Path | None, rep: dict, store: bool = True) -> Any:
    """The whole fastText model, cached as ``<key>.bin`` (with ``store=False`` only read from the cache)."""
    path = cache / "fasttext" / f"{fasttext_cache_key(text, params)}.bin" if cache is not None else None
    ft = _load_bin_or_none(path) if path is not None else None
    if ft is not None:
        rep.update(cache="hit", path=str(path))
        return ft
    ft = _train_checked(text, params)
    if path is not None and store:
        atomic_write(path, ft.save_model)
    rep.update(cache="miss" if path is not None else "off", path=str(path) if path is not None and store else None)
    return ft


def _compact_vectors(text: Path, params: dict, cache: Path | None, strings: Iterable[str], rep: dict) -> CompactVectors:
    """:class:`CompactVectors` covering ``strings``: from ``<key>.vectors.npz``, an old ``<key>.bin``, or training."""
    wanted = list(dict.fromkeys(s for s in strings if s))
    if cache is None:
        rep.update(cache="off", path=None, stored="compact")
        return CompactVectors.from_model(_train_checked(text, params), wanted, params=params, origin=f"fastText trained on {text}")
    key = fasttext_cache_key(text, params)
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


COMPACT_SUFFIX = ".vectors.npz"
"""File suffix of a :class:`CompactVectors` cache entry (``<fasttext cache key><suffix>``)."""

COMPACT_VERSION = 1
"""Layout version of :class:`CompactVectors` files; a file of another version is rebuilt."""


class CompactVectors:
    """The vectors a method reads from a fastText model, without the model's input matrix.

    Holds the vocabulary (words, frequencies, fastText ids), ``get_word_vector`` of every vocabulary
    word, and ``get_word_vector`` of a list of out-of-vocabulary strings (their n-gram vectors), all
    float32 exactly as fastText computed them. It answers the calls FOCUS and WECHSEL make on a
    model (``get_dimension``, ``get_word_id``, ``get_word_vector``, ``get_words``) with the same
    values bit for bit; a string it does not hold raises ``KeyError`` naming the entry (never a
    silent zero). Built by :func:`train_fasttext` with ``compact=True``.

    Attributes:
        words: the vocabulary as ``get_words(on_unicode_error="replace")`` lists it.
        counts: int64 corpus frequency per word.
        word_ids: the model's id of each listed word (``-1`` only for a word whose bytes are not UTF-8).
        word_matrix: float32 ``len(words) x dim``: ``get_word_vector`` of each word.
        strings: the out-of-vocabulary strings held.
        string_matrix: float32 ``len(strings) x dim``.
        minn / maxn: the model's character n-gram lengths.
        params: the training parameters (``None`` for a model of unknown origin).
        origin: where the vectors came from, for messages.

    Example:
        >>> cv = CompactVectors(["a", "</s>"], np.array([3, 2]), np.array([0, 1]), np.eye(2, dtype=np.float32),
        ...                     ["ab"], np.ones((1, 2), np.float32), minn=3, maxn=6)
        >>> cv.get_word_id("a"), cv.get_word_id("ab"), cv.get_word_vector("ab").tolist(), cv.missing(["a", "ab", "b"])
        (0, -1, [1.0, 1.0], ['b'])
    """

    def __init__(self, words: list[str], counts: np.ndarray, word_ids: np.ndarray, word_matrix: np.ndarray,
                 strings: list[str], string_matrix: np.ndarray, *, minn: int, maxn: int, params: dict | None = None,
                 origin: str = "compact fastText vectors") -> None:
        self.words = list(words)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.word_ids = np.asarray(word_ids, dtype=np.int64)
        self.word_matrix = np.ascontiguousarray(word_matrix, dtype=np.float32)
        self.strings = list(strings)
        self.string_matrix = np.ascontiguousarray(string_matrix, dtype=np.float32).reshape(
            len(self.strings), self.word_matrix.shape[1])
        self.minn, self.maxn = int(minn), int(maxn)
        self.params = params
        self.origin = origin
        n = len(self.words)
        if not (len(self.counts) == len(self.word_ids) == self.word_matrix.shape[0] == n):
            raise ValueError(f"{origin}: {n} words but {len(self.counts)} counts, {len(self.word_ids)} ids, "
                             f"{self.word_matrix.shape[0]} vectors")
        self._vocab: dict[str, int] = {}
        for i, (w, wid) in enumerate(zip(self.words, self.word_ids.tolist())):
            if wid >= 0:
                self._vocab.setdefault(w, i)
        self._strings = {s: i for i, s in enumerate(self.strings)}

    @classmethod
    def from_model(cls, model: Any, strings: Iterable[str], *, params: dict | None = None,
                   origin: str = "compact fastText vectors") -> CompactVectors:
        """Read a ``fasttext`` model's vocabulary vectors and the vectors of ``strings`` (those outside the vocabulary)."""
        words, counts = model.get_words(include_freq=True, on_unicode_error="replace")
        words = list(words)
        ids = np.array([model.get_word_id(w) for w in words], dtype=np.int64)
        dim = int(model.get_dimension())
        wm = np.zeros((len(words), dim), dtype=np.float32)
        for i, w in enumerate(words):
            wm[i] = model.get_word_vector(w)
        extra = [w for w, j in zip(words, ids.tolist()) if j < 0]  # undecodable word: its replaced form is out of vocabulary
        keep = [s for s in dict.fromkeys([*extra, *strings]) if model.get_word_id(s) < 0]
        sm = np.zeros((len(keep), dim), dtype=np.float32)
        for i, s in enumerate(keep):
            sm[i] = model.get_word_vector(s)
        args = model.f.getArgs()
        return cls(words, np.asarray(counts, dtype=np.int64), ids, wm, keep, sm, minn=int(args.minn), maxn=int(args.maxn),
                   params=params, origin=origin)

    # -- the fastText model calls the methods make ------------------------------------------------

    def get_dimension(self) -> int:
        """Vector size."""
        return int(self.word_matrix.shape[1])

    def get_word_id(self, word: str) -> int:
        """The model's id of ``word``, ``-1`` when it is not in the vocabulary."""
        i = self._vocab.get(word)
        return -1 if i is None else int(self.word_ids[i])

    def get_word_vector(self, word: str) -> np.ndarray:
        """fastText's vector of ``word`` (a vocabulary word, or one of :attr:`strings`), as a new float32 array."""
        i = self._vocab.get(word)
        if i is not None:
            return self.word_matrix[i].copy()
        j = self._strings.get(word)
        if j is None:
            raise KeyError(
                f"{word!r} is neither a vocabulary word nor one of the {len(self.strings)} strings kept in {self.origin}; "
                "pass it in train_fasttext(strings=...) so its n-gram vector is computed and stored"
            )
        return self.string_matrix[j].copy()

    def get_words(self, include_freq: bool = False, on_unicode_error: str = "replace") -> Any:
        """The vocabulary (and frequencies), as ``fasttext``'s ``get_words(on_unicode_error="replace")`` returns it."""
        return (list(self.words), self.counts.copy()) if include_freq else list(self.words)

    def get_input_matrix(self) -> np.ndarray:
        """Not kept: raises ``ValueError`` (a PCA of the input matrix needs the full model)."""
        raise ValueError(f"{self.origin} are compact fastText vectors without the model's input matrix; "
                         "this operation needs the full fastText model")

    # -- coverage and storage ---------------------------------------------------------------------

    def missing(self, strings: Iterable[str]) -> list[str]:
        """The non-empty ``strings`` this object cannot answer (neither vocabulary words nor held strings)."""
        return [s for s in dict.fromkeys(strings) if s and s not in self._vocab and s not in self._strings]

    def save(self, path: str | Path) -> None:
        """Write an uncompressed ``.npz`` (vectors float32; words and strings as UTF-8 JSON)."""
        meta = {"version": COMPACT_VERSION, "minn": self.minn, "maxn": self.maxn, "params": self.params}

        def blob(obj: Any) -> np.ndarray:
            return np.frombuffer(json.dumps(obj, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)

        with open(path, "wb") as f:  # a file object: numpy must not append ".npz" to a temporary name
            np.savez(f, meta=blob(meta), words=blob(self.words), strings=blob(self.strings), counts=self.counts,
                     word_ids=self.word_ids, word_matrix=self.word_matrix, string_matrix=self.string_matrix)

    @classmethod
    def load(cls, path: str | Path) -> CompactVectors:
        """Read a file written by :meth:`save` (``ValueError`` for another layout version)."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode("utf-8"))
            if meta.get("version") != COMPACT_VERSION:
                raise ValueError(f"layout version {meta.get('version')}, expected {COMPACT_VERSION}")
            words = json.loads(z["words"].tobytes().decode("utf-8"))
            strings = json.loads(z["strings"].tobytes().decode("utf-8"))
            return cls(words, z["counts"], z["word_ids"], z["word_matrix"], strings, z["string_matrix"],
                       minn=meta["minn"], maxn=meta["maxn"], params=meta.get("params"), origin=f"compact fastText vectors {path}")


def subword_lengths(model: Any) -> tuple[int, int]:
    """``(minn, maxn)`` of a ``fasttext`` model or of :class:`CompactVectors` (``maxn == 0``: no n-grams)."""
    if isinstance(model, CompactVectors):
        return model.minn, model.maxn
    args = model.f.getArgs()
    return int(args.minn), int(args.maxn)


def _zero_init_words(n_words: int, bucket: int, dim: int, threads: int) -> int:
    """How many word rows fastText's blockwise uniform init misses (rows are words first, then buckets)."""
    total = (n_words + bucket) * dim
    initialized = min(threads * (total // 10), total)
    return max(n_words - initialized // dim, 0)


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


def _train_unsupervised(text: Path, params: dict) -> Any:
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


def load_fasttext(path: Path) -> Any:
    """Load a fastText ``.bin`` model (a clear error if the file is missing)."""
    import fasttext

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fastText model not found: {path}")
    return fasttext.load_model(str(path))


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
    has = np.zeros(len(words), dtype=bool)
    for i, w in enumerate(words):
        if model.get_word_id(w) >= 0:
            vecs[i] = model.get_word_vector(w)
            has[i] = True
    return vecs, has


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
    for i, s in enumerate(strings):
        if s:
            vecs[i] = model.get_word_vector(s)
    has = np.any(vecs != 0, axis=1)
    return vecs, has
