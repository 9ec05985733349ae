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
import contextvars
import ctypes
import ctypes.util
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

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
    "train_fasttext",
    "load_fasttext",
    "token_vectors",
    "string_vectors",
    "training_progress",
]

TokenFormat = Literal["string", "id", "raw"]

CACHE_VERSION = 1
"""Bumped when the training call or pre-tokenization format changes, invalidating cached models."""

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


class EmptyVocabularyError(ValueError):
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
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for batch in _batches(Path(corpus), batch_lines):
                for ids in _encode_batch(tokenizer, batch):
                    if ids:
                        f.write(" ".join(words[np.asarray(ids, dtype=np.int64)].tolist()))
                        f.write("\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
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
    text: Path, *, cache_dir: Path | None, report: dict, who: str, consequence: str, **params: Any
) -> Any:
    """:func:`train_fasttext`, or ``None`` when no word reaches ``min_count``.

    The reason is logged as ``"<who>: <reason>; <consequence>"`` and written into ``report`` with
    the parameters, so a method can fall back explicitly instead of failing the trial.
    """
    try:
        return train_fasttext(text, cache_dir=cache_dir, report=report, **params)
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
) -> Any:
    """Train (or load from the cache) an unsupervised fastText model on a text file.

    Defaults are fastText's own ``train_unsupervised`` defaults, except ``threads=1``
    (deterministic). The cache entry is ``<cache_dir>/fasttext/<key>.bin`` with ``key`` from
    :func:`fasttext_cache_key` (content of ``text`` + every parameter, including ``threads``
    and ``seed``); it is written to a temporary file and renamed, so concurrent trainers and
    crashes never leave a partial ``.bin``.

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
            ``zero_init_words`` (word rows outside fastText's randomly initialized block).

    Returns:
        A ``fasttext`` model (``fasttext.FastText._FastText``).

    Raises:
        EmptyVocabularyError: no word reaches ``min_count``.
        FileNotFoundError / ValueError: missing or empty ``text``.

    Example:
        >>> # m = train_fasttext(Path("tok.txt"), dim=16, epoch=1, min_count=1, cache_dir=Path("cache"))
    """
    import fasttext

    if model not in ("skipgram", "cbow"):
        raise ValueError(f"model must be 'skipgram' or 'cbow', got {model!r}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if bucket < min_bucket(dim):
        raise ValueError(
            f"bucket={bucket} is too small for dim={dim}: use bucket >= {min_bucket(dim)} so fastText's input matrix "
            f"(bucket x dim floats) is >= {MIN_INPUT_MATRIX_BYTES >> 20} MiB; fastText-numpy2 leaves part of a smaller "
            "matrix uninitialized (nondeterministic vectors, 'Encountered NaN'; fastText issue #1061)"
        )
    text = Path(text)
    if not text.is_file():
        raise FileNotFoundError(f"fastText training text not found: {text}")
    params = {
        "dim": int(dim), "epoch": int(epoch), "minCount": int(min_count), "model": model, "minn": int(minn),
        "maxn": int(maxn), "neg": int(neg), "ws": int(ws), "lr": float(lr), "bucket": int(bucket),
        "seed": int(seed), "thread": int(threads),
    }
    t0 = time.perf_counter()
    path: Path | None = None
    status = "off"
    if cache_dir is not None:
        path = Path(cache_dir) / "fasttext" / f"{fasttext_cache_key(text, params)}.bin"
        if path.is_file():
            ft = fasttext.load_model(str(path))
            status = "hit"
    if status != "hit":
        if text.stat().st_size == 0:
            raise ValueError(f"fastText training text is empty: {text}")
        ft = _train_unsupervised(text, params)
        if path is not None:
            status = "miss"
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".bin", dir=path.parent)
            os.close(fd)
            try:
                ft.save_model(tmp)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
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
            cache=status, path=str(path) if path else None, seconds=round(time.perf_counter() - t0, 3),
            threads=int(threads), deterministic=threads == 1, params=params, n_words=n_words, zero_init_words=zero_init,
        )
    if threads > 1:
        logger.info("fastText trained with %d threads: the vectors are not bit-reproducible", threads)
    return ft


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


_PROGRESS: contextvars.ContextVar[bool] = contextvars.ContextVar("tokxfer_fasttext_progress", default=False)


@contextlib.contextmanager
def training_progress(enabled: bool = True) -> Iterator[None]:
    """While inside, fastText training prints its own progress line to stderr (percent, words/sec, loss, ETA).

    Only what is printed changes (fastText's ``verbose=2``); the trained vectors and the cache key do not.
    """
    token = _PROGRESS.set(bool(enabled))
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _train_unsupervised(text: Path, params: dict) -> Any:
    """``fasttext.train_unsupervised`` with the ``seed`` argument, which its Python wrapper does not accept.

    The C++ trainer has a ``-seed`` option (default 0); ``train_unsupervised`` rejects the keyword,
    so the arguments are built with the module's own helpers (as ``train_unsupervised`` does).
    """
    from fasttext import FastText as ftmod

    manual = {k for k in params if k != "seed"} | {"input", "verbose"}
    args = {**ftmod.unsupervised_default, **params, "input": str(text), "verbose": 2 if _PROGRESS.get() else 0}
    built = ftmod._build_args(args, manual)
    model = ftmod._FastText(args=built)
    try:
        with zeroed_allocations():
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
    (``methods._canon.token_string``). A string with no known n-gram (or empty, or containing
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
