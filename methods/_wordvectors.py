"""Static word vectors for WECHSEL: loading, training, bilingual dictionaries, Procrustes alignment.

WECHSEL (papers/wechsel.txt, Sec. 3 and 4) needs monolingual fastText word vectors for the source
and the target language, aligned into one space with orthogonal Procrustes over a bilingual
dictionary. This module provides those pieces as plain functions around one small value type,
:class:`WordVectors`:

* :func:`load_word_vectors` reads a fastText ``.bin`` (words, frequencies *and* character n-gram
  vectors, so out-of-vocabulary strings get vectors; through :class:`methods._fasttext_bin.BinVectors`:
  the dictionary parsed, the input matrix memory-mapped, fastText's vectors of many strings computed at
  once, bit for bit) or a text ``.vec`` / ``.vec.gz`` file (words and vectors only: no n-grams, no
  frequencies).
* :func:`train_word_vectors` trains word-level fastText (subword n-grams on) on a raw corpus via
  :func:`methods._fasttext.train_fasttext` (content-hashed cache, ``threads=1`` deterministic); with
  ``compact=True`` only the vocabulary's vectors and those of given strings are kept and cached
  (:class:`methods._fasttext.CompactVectors`), not the model's input matrix.
  The corpus is split into words by :func:`word_tokenize` (case kept: the dictionary expansion
  below relies on it).
* :func:`read_dictionary` reads a TSV ``target_word<TAB>source_word`` (the tokxfer convention; the
  WECHSEL reference code's files are ``english<TAB>target``, the other way round).
* :func:`match_dictionary` expands every pair with lower-/title-case variants of both words and
  keeps the variant pairs whose words are both in the vocabularies. Two expansions:
  ``"unique"`` (default) keeps every distinct ``(target, source)`` word pair once — the paper
  aligns *pairs of words*; ``"all-combinations"`` is what the reference code (``wechsel`` 0.0.4)
  does: it loops over the 3 x 3 tuples ``(w, w.lower(), w.title())`` of both words *with*
  repetitions and appends every combination found, so a pair of lower-case words counts 4 times,
  a lower-case word against a capitalized one twice, and a pair listed twice in the file twice
  again (on a 3,000-pair dictionary: ~11.8k correspondences for ~3k distinct pairs). The
  duplicates weigh pairs in Procrustes, so the two expansions give different rotations.
* :func:`procrustes` / :func:`align_word_vectors` compute the orthogonal map ``W`` that takes
  the *target* space into the *source* space: ``W = argmin ||X_t W - X_s||_F`` over orthogonal
  ``W``, solved by the SVD of ``X_t^T X_s`` (Schönemann 1966). The paper does not say which side
  is rotated (the reference code rotates the source side); because ``W`` is orthogonal, cosine
  similarities — all WECHSEL uses — are the same either way.

Errors are explicit: :class:`DictionaryError` when no dictionary pair is usable (with how many
pairs were read and how many had both words in the vocabularies), :class:`DimensionMismatchError`
naming both files and both dimensions (the reference code silently "reduces" the wrong model in
that case; :func:`reduce_dimension` is the correct PCA reduction, applied to the larger model).

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(50, 4))
    >>> q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    >>> bool(np.allclose(procrustes(x, x @ q), q))
    True
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import TokxferError
from harness.files import open_atomic
from harness.vocab import WORD_PATTERN, read_dictionary, word_tokenize
from methods import _fasttext
from methods._fasttext_bin import BinVectors

logger = logging.getLogger(__name__)

__all__ = [
    "WordVectors",
    "DictionaryError",
    "DimensionMismatchError",
    "DictionaryMatch",
    "CASE_EXPANSIONS",
    "PROCRUSTES_PRECISIONS",
    "Alignment",
    "WORD_PATTERN",
    "word_tokenize",
    "word_counts",
    "load_word_vectors",
    "train_word_vectors",
    "reduce_dimension",
    "check_dimensions",
    "read_dictionary",
    "match_dictionary",
    "no_pairs_error",
    "procrustes",
    "align_word_vectors",
]


_PRETOK_VERSION = 1
"""Bumped when :func:`word_tokenize` changes (part of the pre-tokenized corpus cache key)."""

_FASTTEXT_EOS = "</s>"
"""fastText's line-end word: in every trained vocabulary, never a real word."""


class DictionaryError(TokxferError, ValueError):
    """A bilingual dictionary yields no usable word pair for the given vocabularies."""


class DimensionMismatchError(TokxferError, ValueError):
    """Source and target word vectors have different dimensions."""


# ------------------------------------------------------------------------------------------------
# Word vectors
# ------------------------------------------------------------------------------------------------


@dataclass
class WordVectors:
    """A static word-vector model: vocabulary, frequencies, vectors, and n-gram vectors if known.

    Build it with :func:`load_word_vectors`, :func:`train_word_vectors` or :meth:`from_matrix`.

    Attributes:
        words: the vocabulary, in the model's order (fastText: by decreasing frequency).
        counts: int64 corpus frequency per word, or ``None`` when unknown (``.vec`` files).
        origin: where the vectors came from (a path, or ``"trained on <corpus>"``), for messages.
        model: the ``fasttext`` model (or its :class:`~methods._fasttext.CompactVectors`) when the
            vectors have character n-grams, else ``None``.
        matrix: ``len(words) x dim`` float32 vectors when there is no fastText model.

    Example:
        >>> wv = WordVectors.from_matrix(["a", "b"], np.eye(2, dtype=np.float32), origin="toy")
        >>> wv.dim, "a" in wv, wv.word_id("c"), wv.has_subwords
        (2, True, -1, False)
    """

    words: list[str]
    counts: np.ndarray | None
    origin: str
    model: Any = None
    matrix: np.ndarray | None = None
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if (self.model is None) == (self.matrix is None):
            raise ValueError("WordVectors needs exactly one of a fastText model or a vector matrix")
        if self.matrix is not None and self.matrix.shape[0] != len(self.words):
            raise ValueError(f"WordVectors: {len(self.words)} words but {self.matrix.shape[0]} vectors")
        if self.counts is not None and len(self.counts) != len(self.words):
            raise ValueError(f"WordVectors: {len(self.words)} words but {len(self.counts)} counts")
        if not self._index:
            index: dict[str, int] = {}
            for i, w in enumerate(self.words):
                index.setdefault(w, i)  # duplicates in a .vec file: the first (most frequent) wins
            self._index = index

    @classmethod
    def from_matrix(cls, words: Sequence[str], matrix: np.ndarray, *, counts: Sequence[int] | None = None,
                    origin: str = "in-memory") -> WordVectors:
        """Word vectors without subword information from a word list and a matrix."""
        return cls(list(words), None if counts is None else np.asarray(counts, dtype=np.int64), origin,
                   matrix=np.ascontiguousarray(matrix, dtype=np.float32))

    @classmethod
    def from_fasttext(cls, model: Any, *, origin: str) -> WordVectors:
        """Wrap a ``fasttext`` model or :class:`~methods._fasttext.CompactVectors` (words and frequencies are read once)."""
        words, freqs = model.get_words(include_freq=True, on_unicode_error="replace")
        index = model.word_index() if isinstance(model, BinVectors) else None  # the reader's map: not built twice
        return cls(list(words), np.asarray(freqs, dtype=np.int64), origin, model=model, _index=index or {})

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return int(self.model.get_dimension()) if self.model is not None else int(self.matrix.shape[1])

    @property
    def has_subwords(self) -> bool:
        """Whether out-of-vocabulary strings get vectors from character n-grams (fastText ``maxn > 0``)."""
        return self.model is not None and _fasttext.subword_lengths(self.model)[1] > 0

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def word_id(self, word: str) -> int:
        """Index of ``word`` in :attr:`words`, ``-1`` when it is not in the vocabulary."""
        return self._index.get(word, -1)

    def word_vectors(self, words: Iterable[str]) -> np.ndarray:
        """float32 vectors of in-vocabulary words (``KeyError`` naming the first missing word).

        For fastText these are fastText's word vectors (the word's own row averaged with its
        n-gram rows, i.e. ``get_word_vector``), as the reference code uses for alignment.
        """
        words = list(words)
        if isinstance(self.model, BinVectors):  # every vector in one call
            for w in words:
                if w not in self._index:
                    raise KeyError(f"{w!r} is not in the vocabulary of {self.origin}")
            return self.model.vectors(words)
        out = np.empty((len(words), self.dim), dtype=np.float32)
        read = _fasttext.vector_reader(self.model)[1] if self.model is not None else None
        for i, w in enumerate(words):
            j = self._index.get(w)
            if j is None:
                raise KeyError(f"{w!r} is not in the vocabulary of {self.origin}")
            if read is not None:
                read(w, out[i])
            else:
                out[i] = self.matrix[j]
        return out

    def string_vectors(self, strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of arbitrary strings: fastText's out-of-vocabulary vectors from character n-grams.

        This is WECHSEL's ``u_x = sum_{g in n-grams(x)} w_g`` (fastText returns the mean, which
        has the same direction; only cosines are used). A string with no n-gram (or ``""``) gets
        a zero vector and ``has_vector=False``.

        Args:
            strings: one string per row (token strings with the word-start marker removed).

        Returns:
            ``(vectors, has_vector)``: float32 ``len(strings) x dim`` and a boolean mask.

        Raises:
            ValueError: the vectors have no n-gram information (a ``.vec`` file, or ``maxn=0``).
        """
        if not self.has_subwords:
            raise ValueError(
                f"word vectors {self.origin} have no character n-gram vectors (a .vec file or a model trained with "
                "maxn=0), so token strings cannot be embedded from n-grams; use a fastText .bin or WECHSEL variant 'tfr'"
            )
        # Surrounding whitespace stripped, as the reference code does (``tokenizer.decode(i).strip()``).
        return _fasttext.string_vectors(self.model, [s.strip() for s in strings])


def load_word_vectors(path: str | Path) -> WordVectors:
    """Load fastText word vectors: ``.bin`` (with n-grams and frequencies) or text ``.vec``/``.vec.gz``.

    A text file has an optional ``n_words dim`` header line, then ``word v_1 … v_dim`` per line.

    Args:
        path: the file.

    Returns:
        :class:`WordVectors`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a text line with the wrong number of values (file and line named).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "toy.vec"
        >>> _ = p.write_text("2 3\\nhaus 1 0 0\\nhund 0 1 0\\n")
        >>> wv = load_word_vectors(p)
        >>> wv.words, wv.dim, wv.counts is None
        (['haus', 'hund'], 3, True)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word vectors not found: {path}")
    name = path.name.lower()
    if name.endswith(".bin"):
        # the dictionary and the rows step 2 reads, not the whole model (fastText's own loader for other formats)
        model = _fasttext.load_fasttext_vectors(path)
        return WordVectors.from_fasttext(model, origin=str(path))
    return _load_text_vectors(path)


def _load_text_vectors(path: Path) -> WordVectors:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    words: list[str] = []
    rows: list[np.ndarray] = []
    dim: int | None = None
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip(" ")
            if not line:
                continue
            if lineno == 1:
                head = line.split()
                if len(head) == 2 and all(h.isdigit() for h in head):
                    dim = int(head[1])
                    continue
            if dim is None:  # no header: the first data line fixes the dimension
                dim = len(line.split(" ")) - 1
            parts = line.rsplit(" ", dim)
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{lineno}: expected a word and {dim} values, got {len(parts) - 1} values")
            try:
                rows.append(np.asarray(parts[1:], dtype=np.float32))
            except ValueError:
                raise ValueError(f"{path}:{lineno}: non-numeric vector value") from None
            words.append(parts[0])
    if not words:
        raise ValueError(f"word vectors {path}: no vectors in the file")
    return WordVectors.from_matrix(words, np.stack(rows), origin=str(path))


def word_counts(corpus: str | Path, *, max_lines: int | None = None) -> Counter:
    """Frequencies of :func:`word_tokenize` words in a corpus (one sentence/document per line)."""
    counts: Counter = Counter()
    with open(corpus, encoding="utf-8", newline="\n") as f:
        for i, line in enumerate(f):
            if max_lines is not None and i >= max_lines:
                break
            counts.update(word_tokenize(line))
    return counts


def _pretokenize_words(corpus: Path, out: Path) -> Path:
    """Write ``corpus`` as space-joined :func:`word_tokenize` words (atomic temp file + rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open_atomic(out, "w") as w, open(corpus, encoding="utf-8", newline="\n") as r:
        for line in r:
            toks = word_tokenize(line)
            if toks:
                w.write(" ".join(toks))
                w.write("\n")
    return out


def train_word_vectors(
    corpus: str | Path,
    *,
    dim: int = 100,
    epoch: int = 5,
    min_count: int = 5,
    model: str = "cbow",
    minn: int = 3,
    maxn: int = 6,
    neg: int = 10,
    bucket: int = 2_000_000,
    seed: int = 0,
    threads: int = 1,
    cache_dir: Path | None = None,
    report: dict | None = None,
    compact: bool = False,
    strings: Iterable[str] = (),
) -> WordVectors:
    """Train word-level fastText (character n-grams on) on a raw corpus; cached by content.

    The corpus is split into words by :func:`word_tokenize` and handed to
    :func:`methods._fasttext.train_fasttext`, whose cache key covers the words' bytes and every
    parameter (so the same corpus, parameters and seed load the same model).

    Args:
        corpus: UTF-8 text, one sentence/document per line.
        dim / epoch / min_count / model / minn / maxn / neg / bucket / seed / threads: fastText
            parameters (``threads=1`` is reproducible; more threads are not).
        cache_dir: cache root for the word-split corpus and the model; ``None``: no caching.
        report: filled with the training report (cache hit/miss, seconds, parameters …).
        compact: keep (and cache) only the vocabulary's vectors and those of ``strings``
            (:class:`methods._fasttext.CompactVectors`): :meth:`WordVectors.string_vectors` then
            answers exactly those strings, and :func:`reduce_dimension` is not possible.
        strings: with ``compact``, the strings :meth:`WordVectors.string_vectors` will be asked for
            (surrounding whitespace stripped, as that method strips it).

    Returns:
        :class:`WordVectors` with n-gram vectors and corpus frequencies.

    Raises:
        FileNotFoundError: the corpus does not exist.
        methods._fasttext.EmptyVocabularyError: no word occurs ``min_count`` times.

    Example:
        >>> # wv = train_word_vectors("de.txt", dim=16, epoch=1, min_count=1, cache_dir=Path("cache"))
    """
    corpus = Path(corpus)
    if not corpus.is_file():
        raise FileNotFoundError(f"corpus for word vectors not found: {corpus}")
    kwargs = {"dim": dim, "epoch": epoch, "min_count": min_count, "model": model, "minn": minn, "maxn": maxn,
              "neg": neg, "bucket": bucket, "seed": seed, "threads": threads, "compact": compact,
              "strings": [s.strip() for s in strings] if compact else ()}
    rep: dict = {} if report is None else report
    t0 = time.perf_counter()
    if cache_dir is not None:
        key = hashlib.sha256(f"{_fasttext.file_sha256(corpus)}\0words-v{_PRETOK_VERSION}".encode()).hexdigest()
        words_file = Path(cache_dir) / "wechsel" / f"words-{key[:24]}.txt"
        if not words_file.is_file():
            _pretokenize_words(corpus, words_file)
        rep["pretokenize_s"] = round(time.perf_counter() - t0, 3)
        ft = _fasttext.train_fasttext(words_file, cache_dir=Path(cache_dir), report=rep, **kwargs)
    else:
        with tempfile.TemporaryDirectory(prefix="tokxfer-words-") as tmp:
            words_file = _pretokenize_words(corpus, Path(tmp) / "words.txt")
            rep["pretokenize_s"] = round(time.perf_counter() - t0, 3)
            ft = _fasttext.train_fasttext(words_file, cache_dir=None, report=rep, **kwargs)
    rep["trained_on"] = str(corpus)
    return WordVectors.from_fasttext(ft, origin=f"fastText trained on {corpus}")


# ------------------------------------------------------------------------------------------------
# Dimensions
# ------------------------------------------------------------------------------------------------


def _pca_projection(x: np.ndarray, dim: int, max_rows: int = 100_000) -> np.ndarray:
    """``d x dim`` projection onto the top-``dim`` principal axes of the first ``max_rows`` rows."""
    sample = np.asarray(x[:max_rows], dtype=np.float64)
    sample = sample - sample.mean(axis=0)
    cov = sample.T @ sample / max(len(sample) - 1, 1)
    vals, vecs = np.linalg.eigh(cov)  # ascending eigenvalues
    return vecs[:, np.argsort(vals)[::-1][:dim]].astype(np.float32)


def reduce_dimension(wv: WordVectors, dim: int) -> WordVectors:
    """PCA-reduce word vectors to ``dim`` dimensions (what ``fasttext.util.reduce_model`` intends).

    For fastText models the input matrix (words and n-gram buckets) is projected onto its top
    principal axes and the output matrix with the same projection, as ``fasttext.util`` does —
    but with the eigenvectors sorted by eigenvalue (``fasttext.util`` uses unsorted ``np.linalg.eig``
    output). The model is modified in place.

    Args:
        wv: the vectors to reduce (the *larger* model of a pair).
        dim: the target dimension (``<= wv.dim``).

    Returns:
        The reduced :class:`WordVectors` (same object for fastText models).
    """
    if dim > wv.dim:
        raise ValueError(f"cannot reduce {wv.origin} from {wv.dim} to a larger dimension {dim}")
    if dim == wv.dim:
        return wv
    if isinstance(wv.model, _fasttext.CompactVectors):
        raise ValueError(
            f"cannot PCA-reduce {wv.origin}: compact fastText vectors keep no input matrix; train the vectors with "
            "compact=False (the full model) to reduce them"
        )
    if isinstance(wv.model, BinVectors):  # read for its vectors only: the PCA needs the whole model
        wv.model = _fasttext.load_fasttext(wv.model.path)
    if wv.model is not None:
        inp = wv.model.get_input_matrix()
        proj = _pca_projection(inp, dim)
        wv.model.set_matrices(np.ascontiguousarray(inp @ proj), np.ascontiguousarray(wv.model.get_output_matrix() @ proj))
        return wv
    proj = _pca_projection(wv.matrix, dim)
    return WordVectors(wv.words, wv.counts, f"{wv.origin} (PCA to {dim})", matrix=np.ascontiguousarray(wv.matrix @ proj),
                       _index=wv._index)


def check_dimensions(source: WordVectors, target: WordVectors, *, mode: str = "error") -> tuple[WordVectors, WordVectors, dict]:
    """Make source and target vectors the same dimension, or raise.

    Args:
        source: source-language word vectors.
        target: target-language word vectors.
        mode: ``"error"`` (raise :class:`DimensionMismatchError`) or ``"reduce"`` (PCA-reduce the
            larger of the two to the smaller dimension — the model that is larger, unlike the
            reference code, which reduces the source model twice when the target is larger).

    Returns:
        ``(source, target, info)`` with ``info`` saying what was done.

    Raises:
        DimensionMismatchError: dimensions differ and ``mode == "error"``.
    """
    if mode not in ("error", "reduce"):
        raise ValueError(f"dim_mismatch mode must be 'error' or 'reduce', got {mode!r}")
    ds, dt = source.dim, target.dim
    info: dict = {"source_dim": ds, "target_dim": dt, "reduced": None}
    if ds == dt:
        return source, target, info
    if mode == "error":
        larger = "source" if ds > dt else "target"
        raise DimensionMismatchError(
            f"word vectors differ in dimension: source {source.origin} has dim {ds}, target {target.origin} has dim {dt}; "
            f"use vectors of one dimension, or set dim_mismatch='reduce' to PCA-reduce the {larger} vectors to {min(ds, dt)}"
        )
    if ds > dt:
        source = reduce_dimension(source, dt)
        info["reduced"] = {"side": "source", "from": ds, "to": dt}
    else:
        target = reduce_dimension(target, ds)
        info["reduced"] = {"side": "target", "from": dt, "to": ds}
    return source, target, info


# ------------------------------------------------------------------------------------------------
# Bilingual dictionary
# ------------------------------------------------------------------------------------------------


CASE_EXPANSIONS = ("unique", "all-combinations")
"""Dictionary case expansions of :func:`match_dictionary`."""


def _case_variants(word: str) -> list[str]:
    out = [word]
    for v in (word.lower(), word.title()):
        if v not in out:
            out.append(v)
    return out


@dataclass
class DictionaryMatch:
    """Dictionary pairs usable for alignment, and how they were obtained.

    Attributes:
        pairs: ``(target_word, source_word)`` pairs, both words in the vocabularies, after
            case-variant expansion: unique, in first-seen order (``"unique"``), or every
            combination in the reference code's order, duplicates included (``"all-combinations"``).
        n_read: pairs read from the file.
        n_malformed: lines that could not be parsed.
        n_in_vocab: read pairs whose two words, as written, are both in the vocabularies.
        n_usable: read pairs that gave at least one pair (possibly only through case variants).
        n_target_in_vocab / n_source_in_vocab: read pairs whose target / source word (some case
            variant) is in the respective vocabulary.
    """

    pairs: list[tuple[str, str]]
    n_read: int
    n_malformed: int
    n_in_vocab: int
    n_usable: int
    n_target_in_vocab: int
    n_source_in_vocab: int
    case_expansion: str = "unique"

    @property
    def n_distinct(self) -> int:
        """Distinct ``(target, source)`` pairs among :attr:`pairs`."""
        return len(set(self.pairs))

    def report(self) -> dict:
        """JSON-serializable counts."""
        return {
            "read": self.n_read, "malformed_lines": self.n_malformed, "both_in_vocab_as_written": self.n_in_vocab,
            "usable": self.n_usable, "target_word_in_vocab": self.n_target_in_vocab,
            "source_word_in_vocab": self.n_source_in_vocab, "case_expansion": self.case_expansion,
            "pairs_after_case_expansion": len(self.pairs), "distinct_pairs": self.n_distinct,
        }


def match_dictionary(
    pairs: Sequence[tuple[str, str]],
    in_target: Callable[[str], bool],
    in_source: Callable[[str], bool],
    *,
    n_malformed: int = 0,
    case_expansion: str = "unique",
) -> DictionaryMatch:
    """Expand dictionary pairs with lower-/title-case variants that exist in both vocabularies.

    For a pair ``(t, s)`` every combination of ``{t, t.lower(), t.title()}`` and
    ``{s, s.lower(), s.title()}`` whose two words are in the vocabularies is kept (German
    ``Haus`` / English ``house`` also yields ``haus``/``house`` and ``Haus``/``House`` when those
    words exist). ``"unique"``: duplicates are dropped. ``"all-combinations"`` (the reference
    code): for ``s_v`` in the tuple ``(s, s.lower(), s.title())`` and ``t_v`` in
    ``(t, t.lower(), t.title())`` — tuples, so a word equal to its lower-case form appears twice —
    every combination in both vocabularies is appended, for every line of the file.

    Args:
        pairs: ``(target_word, source_word)`` pairs.
        in_target: whether a word is in the target vocabulary.
        in_source: whether a word is in the source vocabulary.
        n_malformed: passed through to the report.
        case_expansion: ``"unique"`` or ``"all-combinations"`` (see :data:`CASE_EXPANSIONS`).

    Returns:
        :class:`DictionaryMatch`.

    Example:
        >>> m = match_dictionary([("Haus", "house")], {"Haus", "haus"}.__contains__, {"house", "House"}.__contains__)
        >>> m.pairs
        [('Haus', 'house'), ('Haus', 'House'), ('haus', 'house'), ('haus', 'House')]
        >>> len(match_dictionary([("haus", "house")], {"haus"}.__contains__, {"house"}.__contains__,
        ...                      case_expansion="all-combinations").pairs)  # (w, w.lower(), w.title()) twice each
        4
    """
    if case_expansion not in CASE_EXPANSIONS:
        raise ValueError(f"case_expansion must be one of {CASE_EXPANSIONS}, got {case_expansion!r}")
    seen: dict[tuple[str, str], None] = {}
    every: list[tuple[str, str]] = []
    n_in_vocab = n_usable = n_t = n_s = 0
    for t, s in pairs:
        tv = [w for w in _case_variants(t) if in_target(w)]
        sv = [w for w in _case_variants(s) if in_source(w)]
        n_t += bool(tv)
        n_s += bool(sv)
        n_in_vocab += bool(in_target(t) and in_source(s))
        if tv and sv:
            n_usable += 1
            if case_expansion == "unique":
                for a in tv:
                    for b in sv:
                        seen.setdefault((a, b), None)
            else:  # the reference's loops: source variant outer, target variant inner, repetitions kept
                for b in (s, s.lower(), s.title()):
                    for a in (t, t.lower(), t.title()):
                        if in_source(b) and in_target(a):
                            every.append((a, b))
    out = list(seen) if case_expansion == "unique" else every
    return DictionaryMatch(out, len(pairs), n_malformed, n_in_vocab, n_usable, n_t, n_s, case_expansion)


# ------------------------------------------------------------------------------------------------
# Procrustes
# ------------------------------------------------------------------------------------------------


PROCRUSTES_PRECISIONS = ("float64", "float32")
"""Precisions of :func:`procrustes`."""


def procrustes(x: np.ndarray, y: np.ndarray, *, precision: str = "float64") -> np.ndarray:
    """Orthogonal ``W`` minimizing ``||x @ W - y||_F`` (Schönemann 1966).

    With ``U S V^T = svd(x^T y)``, ``W = U V^T``. ``precision="float64"`` computes it in float64;
    ``"float32"`` computes it as the reference code does, which hands the float32 fastText vectors
    to ``scipy.linalg.orthogonal_procrustes`` (float32 product and SVD, mapping the source onto the
    target; ``W`` is the transpose of that map). The two differ by ~1e-5, which moves cosines of
    concentrated subword vectors by as much and changes some k-th neighbours.

    Args:
        x: ``n x d`` vectors to map (target-language words of the dictionary pairs).
        y: ``n x d`` vectors to map onto (their source-language translations).
        precision: ``"float64"`` or ``"float32"``.

    Returns:
        float64 ``d x d`` orthogonal matrix.

    Example:
        >>> procrustes(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.0, 1.0], [-1.0, 0.0]])).round(6).tolist()
        [[0.0, 1.0], [-1.0, 0.0]]
    """
    if precision not in PROCRUSTES_PRECISIONS:
        raise ValueError(f"precision must be one of {PROCRUSTES_PRECISIONS}, got {precision!r}")
    x = np.asarray(x, dtype=np.float64 if precision == "float64" else np.float32)
    y = np.asarray(y, dtype=x.dtype)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"procrustes needs two n x d matrices of one shape, got {x.shape} and {y.shape}")
    if precision == "float32":
        from scipy.linalg import orthogonal_procrustes

        r, _ = orthogonal_procrustes(y, x)  # source -> target, in float32
        return np.asarray(r, dtype=np.float64).T
    u, _, vt = np.linalg.svd(x.T @ y)
    return u @ vt


def no_pairs_error(where: str, match: DictionaryMatch, target_vocabulary: str, source: WordVectors) -> DictionaryError:
    """The :class:`DictionaryError` for a dictionary ``match`` without a usable pair (``target_vocabulary``
    says which target words were looked in), with the counts that tell a wrong file from wrong languages."""
    return DictionaryError(
        f"bilingual dictionary {where}: no usable word pairs. Read {match.n_read} pairs "
        f"({match.n_malformed} malformed lines skipped); {match.n_in_vocab} had both words in the vocabularies "
        f"as written and {match.n_usable} with lower/title-case variants ({match.n_target_in_vocab} target words in "
        f"{target_vocabulary}, {match.n_source_in_vocab} source words in "
        f"the source vocabulary of {source.origin} ({len(source)} words)). The file must be "
        "target_word<TAB>source_word; check the column order and the languages."
    )


@dataclass
class Alignment:
    """An orthogonal map from the target word-vector space into the source space.

    Attributes:
        matrix: float64 ``d x d`` orthogonal ``W``; a target vector ``v`` maps to ``v @ W``.
        info: dictionary counts, pairs used, residuals and mean pair cosines before/after.
    """

    matrix: np.ndarray
    info: dict


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    if not ok.any():
        return 0.0
    return float(np.mean(np.sum(a[ok] * b[ok], axis=1) / (na[ok] * nb[ok])))


def align_word_vectors(
    target: WordVectors,
    source: WordVectors,
    dictionary: str | Path | Sequence[tuple[str, str]],
    *,
    case_expansion: str = "unique",
    precision: str = "float64",
) -> Alignment:
    """Align target word vectors to the source space with orthogonal Procrustes over a dictionary.

    Args:
        target: target-language word vectors.
        source: source-language word vectors (same dimension; see :func:`check_dimensions`).
        dictionary: a TSV path (``target_word<TAB>source_word``) or ``(target, source)`` pairs.
        case_expansion: ``"unique"`` (each distinct word pair once) or ``"all-combinations"``
            (the reference code's correspondences, duplicates included); see :func:`match_dictionary`.
        precision: ``"float64"``, or ``"float32"`` as the reference computes it (see :func:`procrustes`).

    Returns:
        :class:`Alignment` with ``info``: ``dictionary`` (see :meth:`DictionaryMatch.report`),
        ``pairs_used``, ``residual`` (``||X_t W - X_s||_F / ||X_s||_F``), ``residual_unaligned``
        (the same for ``W = I``) and mean pair cosines before/after.

    Raises:
        DictionaryError: no pair has both words (in some case variant) in the vocabularies.
        DimensionMismatchError: the two models differ in dimension.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> src = WordVectors.from_matrix(["a", "b", "c"], rng.normal(size=(3, 3)))
        >>> q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        >>> tgt = WordVectors.from_matrix(["x", "y", "z"], src.matrix @ q.T)
        >>> al = align_word_vectors(tgt, src, [("x", "a"), ("y", "b"), ("z", "c")])
        >>> al.info["pairs_used"], al.info["residual"] < 1e-5
        (3, True)
    """
    if source.dim != target.dim:
        raise DimensionMismatchError(
            f"word vectors differ in dimension: source {source.origin} has dim {source.dim}, "
            f"target {target.origin} has dim {target.dim}"
        )
    where = "given pairs"
    if isinstance(dictionary, (str, Path)):
        where = str(dictionary)
        pairs, malformed = read_dictionary(dictionary)
    else:
        pairs, malformed = [tuple(p) for p in dictionary], 0
    match = match_dictionary(pairs, target.__contains__, source.__contains__, n_malformed=malformed,
                             case_expansion=case_expansion)
    if not match.pairs:
        raise no_pairs_error(where, match, f"the target vocabulary of {target.origin} ({len(target)} words)", source)
    x32 = target.word_vectors(t for t, _ in match.pairs)
    y32 = source.word_vectors(s for _, s in match.pairs)
    w = procrustes(x32, y32, precision=precision)
    x, y = x32.astype(np.float64), y32.astype(np.float64)
    y_norm = float(np.linalg.norm(y)) or 1.0
    info = {
        "dictionary": {"path": where if where != "given pairs" else None, **match.report()},
        "pairs_used": len(match.pairs),
        "distinct_pairs": match.n_distinct,
        "case_expansion": case_expansion,
        "precision": precision,
        "residual": round(float(np.linalg.norm(x @ w - y)) / y_norm, 6),
        "residual_unaligned": round(float(np.linalg.norm(x - y)) / y_norm, 6),
        "mean_pair_cosine_before": round(_mean_cosine(x, y), 6),
        "mean_pair_cosine_after": round(_mean_cosine(x @ w, y), 6),
        "direction": "target -> source",
    }
    if len(match.pairs) < target.dim:
        logger.info("Procrustes with %d pairs in %d dimensions: the map is underdetermined", len(match.pairs), target.dim)
    return Alignment(w, info)

