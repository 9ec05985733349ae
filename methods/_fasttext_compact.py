"""The vectors a method reads from a fastText model, kept without the model's input matrix (:class:`CompactVectors`).

FOCUS and WECHSEL never read fastText's input matrix itself, only vectors that
``get_word_vector`` computes from it — of vocabulary words (FOCUS's token-level vectors, WECHSEL's
dictionary and TFR words) and of a known list of other strings (the token strings whose
out-of-vocabulary n-gram vectors they embed). With ``compact=True`` :func:`methods._fasttext.train_fasttext` caches
exactly those, float32 as fastText computed them (:class:`CompactVectors`, ``<key>.vectors.npz``:
tens of megabytes where the ``.bin`` takes gigabytes), and returns an object that answers the same
calls bit for bit. A string that is neither in the vocabulary nor in the entry's list makes the next
request retrain (one thread: the same model, identical vectors) and store the union. A full
``<key>.bin`` left by an older version is used once and replaced by its compact entry.
Tik-to-Tok's fastText-kNN fallback reads input rows of character n-grams, which no list of
strings covers; it trains with ``store=False`` and caches the token vectors it derives instead
(:mod:`methods._tiktotok_knn`).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CACHE_READ_ERRORS", "COMPACT_SUFFIX", "COMPACT_VERSION", "CompactVectors", "subword_lengths"]

CACHE_READ_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
"""What reading a damaged ``.npz`` cache entry raises (a truncated archive: ``BadZipFile``; an empty
file: ``EOFError``; other bytes: ``ValueError``): the entry is rebuilt, never trusted."""

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
    """``(minn, maxn)`` of a ``fasttext`` model, :class:`CompactVectors` or a ``.bin`` read by
    :class:`~methods._fasttext_bin.BinVectors` (``maxn == 0``: no n-grams)."""
    from methods._fasttext_bin import BinVectors

    if isinstance(model, (CompactVectors, BinVectors)):
        return model.minn, model.maxn
    args = model.f.getArgs()
    return int(args.minn), int(args.maxn)
