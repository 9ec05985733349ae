"""A fastText ``.bin`` read for its vectors only (:class:`BinVectors`): what WECHSEL asks of a word-vector file.

``fasttext.load_model`` reads the whole file (input *and* output matrix), builds a 30M-slot word hash
table and the n-gram list of every vocabulary word before the first vector can be asked for; WECHSEL
then asks for ~50k token strings one ``get_word_vector`` call at a time. :class:`BinVectors` reads the
header and the dictionary, maps the input matrix without reading it (``numpy.memmap``: only the rows
used are paged in) and computes ``get_word_vector`` for a whole list of strings at once
(:meth:`BinVectors.vectors`): fastText's character n-grams (``<`` + word + ``>``, ``minn..maxn``
UTF-8 characters, FNV-1a hashes of their bytes with fastText's sign-extended bytes, modulo
``bucket``), the word's own row first when the string is a vocabulary word, rows added in fastText's
order in float32 and scaled by ``float32(1 / count)`` as ``Vector::mul`` does: the same bits as
``get_word_vector`` (``tests/methods/test_fasttext_bin.py`` compares every vector).

Files it does not read (quantized ``.ftz`` models, another format version, pruned dictionaries) give
``None`` from :func:`open_bin`; the caller then uses ``fasttext.load_model``.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BinVectors", "open_bin", "FASTTEXT_MAGIC", "FASTTEXT_VERSION"]

FASTTEXT_MAGIC = 793712314
"""First int32 of every fastText model file."""

FASTTEXT_VERSION = 12
"""The format version read here (fastText 0.9.x)."""

_EOS = "</s>"
"""fastText's end-of-line word: in the vocabulary without n-grams."""

_HEADER_BYTES = 92
"""magic, version, 12 int32 arguments, the double ``t``, then the dictionary's size, nwords, nlabels (int32),
ntokens and pruneidx_size (int64)."""

_BATCH = 65536
"""Strings whose n-grams :meth:`BinVectors.vectors` lists at once."""

_FNV_OFFSET, _FNV_PRIME = np.uint32(2166136261), np.uint32(16777619)


class BinVectors:
    """The vocabulary and the vectors of a fastText ``.bin`` model, the input matrix mapped, not read.

    It answers the calls WECHSEL's word vectors make on a fastText model (``get_dimension``,
    ``get_word_id``, ``get_word_vector``, ``get_words``) with the same values bit for bit, and
    :meth:`vectors` for many strings at once. Build it with :func:`open_bin`.

    Attributes:
        path: the file.
        minn / maxn / bucket: the model's character n-gram lengths and hash buckets.
    """

    def __init__(self, path: Path, words: list[str], counts: np.ndarray, valid: np.ndarray, matrix: np.ndarray, *,
                 minn: int, maxn: int, bucket: int) -> None:
        self.path = Path(path)
        self.words, self.counts = words, counts
        self.matrix = matrix
        self.minn, self.maxn, self.bucket = int(minn), int(maxn), int(bucket)
        self.all_valid = bool(valid.all())
        # the words whose bytes are UTF-8 (fastText finds them by their string); unique in a fastText vocabulary
        self._vocab = dict(zip(words, range(len(words)))) if self.all_valid else {
            w: i for i, w in enumerate(words) if valid[i]}

    # -- the fastText model calls -----------------------------------------------------------------

    def get_dimension(self) -> int:
        """Vector size."""
        return int(self.matrix.shape[1])

    def get_word_id(self, word: str) -> int:
        """The model's id of ``word``, ``-1`` when it is not in the vocabulary."""
        return self._vocab.get(word, -1)

    def get_word_vector(self, word: str) -> np.ndarray:
        """fastText's ``get_word_vector(word)`` (a new float32 array)."""
        return self.vectors([word])[0]

    def get_words(self, include_freq: bool = False, on_unicode_error: str = "replace") -> Any:
        """The vocabulary (and frequencies) as ``fasttext``'s ``get_words(on_unicode_error="replace")`` lists it."""
        return (list(self.words), self.counts.copy()) if include_freq else list(self.words)

    def word_index(self) -> dict[str, int] | None:
        """The word -> id map (every word is UTF-8, so it equals a first-wins map of :meth:`get_words`), or ``None``."""
        return self._vocab if self.all_valid else None

    def get_input_matrix(self) -> np.ndarray:
        """Not kept in memory: raises ``ValueError`` (a PCA reduction loads the model with ``fasttext``)."""
        raise ValueError(f"{self.path} is read for its vectors only; this operation needs fasttext.load_model")

    # -- many strings at once ---------------------------------------------------------------------

    def vectors(self, strings: Sequence[str]) -> np.ndarray:
        """``get_word_vector`` of every string, float32 ``len(strings) x dim``, the same bits as fastText's
        (in batches of :data:`_BATCH` strings: the n-gram lists of a 250k vocabulary stay ~100 MB). A string asked
        for more than once (``▁x`` and ``x`` share one; a dictionary's case-expanded pairs repeat words) is computed once."""
        index = dict.fromkeys(strings)
        if len(index) < len(strings):
            unique = list(index)
            index = dict(zip(unique, range(len(unique))))
            return self.vectors(unique)[np.fromiter(map(index.__getitem__, strings), dtype=np.int64, count=len(strings))]
        out = np.empty((len(strings), self.get_dimension()), dtype=np.float32)
        for a in range(0, len(strings), _BATCH):
            out[a : a + _BATCH] = self._vectors(strings[a : a + _BATCH])
        return out

    def _vectors(self, strings: Sequence[str]) -> np.ndarray:
        n, dim = len(strings), self.get_dimension()
        out = np.zeros((n, dim), dtype=np.float32)
        if n == 0:
            return out
        owner, rows = self._rows(strings)
        counts = np.bincount(owner, minlength=n)
        # add the rows in fastText's order, one slot at a time over the strings that have that many rows (no
        # padding: adding a zero row would turn a -0.0 into +0.0); strings sorted by count make each slot a prefix
        order = np.argsort(-counts, kind="stable")
        starts = np.cumsum(counts) - counts
        acc = np.zeros((n, dim), dtype=np.float32)
        sorted_counts = counts[order]
        for t in range(int(sorted_counts[0])):
            live = int(np.searchsorted(-sorted_counts, -t, side="left"))  # strings with more than t rows
            acc[:live] += self.matrix[rows[starts[order[:live]] + t]]
        has = sorted_counts > 0
        acc[has] *= (1.0 / sorted_counts[has]).astype(np.float32)[:, None]  # Vector::mul(real(1.0 / n))
        out[order] = acc
        return out

    def _rows(self, strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The input-matrix rows of every string in fastText's order (``getSubwords``), as ``(owner, row)`` pairs."""
        nwords = len(self.words)
        wid = np.fromiter(map(self._vocab.get, strings, repeat(-1)), dtype=np.int64, count=len(strings))
        ngram_owner = np.zeros(0, dtype=np.int64)
        ngram_key = np.zeros(0, dtype=np.int64)
        ngram_row = np.zeros(0, dtype=np.int64)
        if self.maxn > 0:
            ngram_owner, ngram_key, ngram_row = self._ngrams(strings)
            ngram_row += nwords
        word_owner = np.flatnonzero(wid >= 0)
        owner = np.concatenate([word_owner, ngram_owner])
        # the word's own row first, then its n-grams by (start character, length): one stable sort
        key = np.concatenate([np.full(len(word_owner), -1, dtype=np.int64), ngram_key])
        row = np.concatenate([wid[word_owner], ngram_row])
        order = np.lexsort((key, owner))
        return owner[order], row[order]

    def _ngrams(self, strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Owner, order key and bucket of every character n-gram of ``"<" + s + ">"`` (fastText's BOW/EOW;
        ``computeSubwords``) for every string but EOS. All strings are encoded at once: a string's characters
        are its code points, so the characters of the wrapped strings follow from ``len`` alone."""
        n_str = len(strings)
        if n_str == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        buf = np.frombuffer(("<" + "><".join(strings) + ">").encode("utf-8"), dtype=np.uint8)
        starts = np.flatnonzero((buf & 0xC0) != 0x80)  # the first byte of every character
        nchars = np.fromiter(map(len, strings), dtype=np.int64, count=n_str) + 2
        owner = np.repeat(np.arange(n_str), nchars)
        char_end = np.r_[starts[1:], len(buf)]  # the byte after each character
        string_end = char_end[np.cumsum(nchars) - 1][owner]  # the byte end of each character's string
        first = np.r_[True, owner[1:] != owner[:-1]]  # the string's first character ("<")
        signed = buf.astype(np.int8).astype(np.int32).astype(np.uint32)  # fastText hashes uint32(int8(byte))
        eos = np.fromiter(map(_EOS.__eq__, strings), dtype=bool, count=n_str)
        usable = ~eos[owner]
        nchar, k = len(starts), np.arange(len(starts))
        owners, keys, buckets = [], [], []
        for n in range(max(self.minn, 1), self.maxn + 1):
            last = k + n - 1  # the n-gram's last character
            ok = usable & (last < nchar)
            ok[ok] = owner[last[ok]] == owner[k[ok]]
            end = char_end[np.minimum(last, nchar - 1)]
            if n == 1:  # fastText skips the single characters at either end ("<" and ">")
                ok &= ~first & (end != string_end)
            sel = np.flatnonzero(ok)
            owners.append(owner[sel])
            keys.append(sel * (self.maxn + 1) + n)  # by start character, then length
            buckets.append(_fnv_buckets(signed, starts[sel], end[sel] - starts[sel], self.bucket))
        if not owners:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(owners), np.concatenate(keys), np.concatenate(buckets)


def _fnv_buckets(signed: np.ndarray, b0: np.ndarray, width: np.ndarray, bucket: int) -> np.ndarray:
    """fastText's bucket (FNV-1a of the bytes ``signed[b0 : b0 + width]``, modulo ``bucket``) of every n-gram. The
    n-grams are hashed widest first, so the ones still hashing at byte ``t`` are a prefix (slices, no masks)."""
    order = np.argsort(-width, kind="stable")
    w_sorted, b_sorted = width[order], b0[order]
    h = np.full(len(order), _FNV_OFFSET, dtype=np.uint32)
    for t in range(int(w_sorted[0]) if len(order) else 0):
        live = int(np.searchsorted(-w_sorted, -t, side="left"))  # n-grams wider than t bytes
        h[:live] ^= signed[b_sorted[:live] + t]
        h[:live] *= _FNV_PRIME
    out = np.empty(len(order), dtype=np.int64)
    out[order] = h % np.uint32(bucket)
    return out


def open_bin(path: str | Path) -> BinVectors | None:
    """Read a fastText ``.bin``'s header and dictionary and map its input matrix; ``None`` for a file this reader
    does not cover (another magic number or version, a pruned dictionary, a quantized matrix)."""
    path = Path(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if len(mm) < _HEADER_BYTES:
            return None
        magic, version = struct.unpack_from("<ii", mm, 0)
        if magic != FASTTEXT_MAGIC or version != FASTTEXT_VERSION:
            return None
        dim, _ws, _epoch, _min_count, _neg, _word_ngrams, _loss, _model, bucket, minn, maxn, _lr_update = struct.unpack_from(
            "<12i", mm, 8)
        size, nwords, nlabels, _ntokens, prune = struct.unpack_from("<iiiqq", mm, 64)
        if prune >= 0 or nlabels != 0:
            return None
        # each entry: the word's bytes, NUL, int64 count, int8 type (words hold no NUL: the next NUL ends the word)
        found: list[int] = []
        p, find, add = _HEADER_BYTES, mm.find, found.append
        for _ in range(size):
            p = find(b"\0", p)
            add(p)
            p += 10
        ends = np.array(found, dtype=np.int64)
        words_b = [mm[s:e] for s, e in zip([_HEADER_BYTES, *(e + 10 for e in found[:-1])], found)]
        mpos = int(ends[-1]) + 10 if size else _HEADER_BYTES
        tail = mm[mpos : mpos + 17]
        raw = np.frombuffer(mm, dtype=np.uint8)
        counts = raw[(ends[:, None] + 1 + np.arange(8)).ravel()].view("<i8").astype(np.int64)  # a copy
        del raw  # the mmap closes only once no array views it
    words = b"\n".join(words_b).decode("utf-8", "replace").split("\n") if size else []  # words hold no newline
    # a word whose bytes are not UTF-8 decodes with U+FFFD; only those few are checked
    valid = np.array([("\ufffd" not in w) or _is_utf8(b) for w, b in zip(words, words_b)], dtype=bool)
    if len(tail) < 17 or tail[0] != 0:  # a quantized input matrix
        return None
    rows, cols = struct.unpack_from("<qq", tail, 1)
    if cols != dim or rows != nwords + bucket:
        return None
    matrix = np.memmap(path, dtype="<f4", mode="r", offset=mpos + 17, shape=(rows, cols))
    return BinVectors(path, words[:nwords], counts[:nwords], valid[:nwords], matrix, minn=minn, maxn=maxn, bucket=bucket)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
