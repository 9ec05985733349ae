"""WECHSEL's step 2: subword vectors ``u_x`` of every token, and the source tokens that may be neighbours.

See :mod:`methods.wechsel` (step 2 and the ``english-only`` variant). ``subword``: fastText's
out-of-vocabulary vector of each token's string (marker removed; :func:`subword_embeddings`).
``tfr`` (paper App. D): the frequency-weighted mean of the vectors of the vocabulary words whose
tokenization contains the token (:func:`tfr_embeddings`). ``english-only``: the source tokens of an
English tokenizer's vocabulary (:func:`english_vocabulary_tokens`) or of the tokenized source
corpus (:func:`source_language_tokens`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness import vocab as _canon
from methods import _wordvectors as wv_mod

__all__ = ["token_strings", "subword_embeddings", "tfr_embeddings", "source_language_tokens", "english_vocabulary_tokens",
           "ZERO_VECTOR_CAUSES", "zero_vector_causes", "describe_zero_vectors"]


def token_strings(tokenizer: Any, n_rows: int) -> list[str]:
    """The string of every token id below ``n_rows``: marker removed, bytes decoded.

    Specials, ids without a token, and tokens whose bytes are not valid UTF-8 on their own
    (e.g. a lone byte-fallback piece) give ``""``.

    Example:
        >>> # token_strings(xlmr_tokenizer, 5) -> ['', '', '', '', ',']  (4 specials, then '▁,' without its marker)
    """
    canon = _canon.canonical_vocab(tokenizer)
    out = [_canon.decode_canon(c) if c is not None else "" for c in canon[:n_rows]]
    return out + [""] * (n_rows - len(out))


def subword_embeddings(tokenizer: Any, vectors: wv_mod.WordVectors, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """WECHSEL's ``u_x``: fastText's n-gram (out-of-vocabulary) vector of each token's string.

    Args:
        tokenizer: the tokenizer whose tokens are embedded.
        vectors: word vectors of the tokenizer's language (with n-grams).
        n_rows: number of rows (the embedding matrix's rows for the source; the vocabulary size
            for the target).

    Returns:
        ``(u, has_vector)``: float32 ``n_rows x dim`` and a boolean mask.
    """
    return vectors.string_vectors(token_strings(tokenizer, n_rows))


ZERO_VECTOR_CAUSES = {
    "empty": "empty once the word-start marker and surrounding whitespace are removed",
    "not_utf8": "not valid UTF-8 on their own (byte pieces of a multi-byte character)",
    "short": "shorter than minn-2={short_below} characters, so without any character n-gram (minn={minn})",
    "untrained": "with n-grams the {side} word vectors never trained (all their rows are zero)",
}
"""Why a token's subword vector ``u_x`` is zero, as :func:`zero_vector_causes` tells them apart.

fastText wraps a string in ``<``/``>`` and averages the vectors of its ``minn..maxn``-character
n-grams: a string of fewer than ``minn - 2`` characters has none (punctuation and digits with the
Common Crawl vectors' ``minn=5``), and n-grams met in no training word keep their rows at zero
(outside the randomly initialized first part of the matrix, see :mod:`methods._fasttext`)."""


def zero_vector_causes(tokenizer: Any, ids: Any, minn: int) -> dict[str, int]:
    """Count the tokens ``ids`` (whose subword vectors are zero) by cause (:data:`ZERO_VECTOR_CAUSES`).

    Args:
        tokenizer: the tokenizer the ids belong to.
        ids: token ids with a zero subword vector.
        minn: the word vectors' shortest character n-gram.

    Returns:
        ``{"empty": …, "not_utf8": …, "short": …, "untrained": …}``.

    Example:
        >>> # zero_vector_causes(tok, [5, 9], minn=5) -> {'empty': 0, 'not_utf8': 0, 'short': 2, 'untrained': 0}
    """
    canon = _canon.canonical_vocab(tokenizer)
    out = dict.fromkeys(ZERO_VECTOR_CAUSES, 0)
    for i in np.asarray(ids, dtype=np.int64).tolist():
        c = canon[i] if i < len(canon) else None
        if c is None or not c.text:
            out["empty"] += 1
            continue
        try:
            s = c.text.decode("utf-8").strip()
        except UnicodeDecodeError:
            out["not_utf8"] += 1
            continue
        out["empty" if not s else "short" if len(s) + 2 < minn else "untrained"] += 1
    return out


def describe_zero_vectors(causes: dict[str, int], *, minn: int, side: str = "target") -> str:
    """One line naming each cause of zero subword vectors with its count, largest first.

    Example:
        >>> describe_zero_vectors({"empty": 1, "not_utf8": 0, "short": 40, "untrained": 2}, minn=5)
        'zero subword vector: 40 tokens shorter than minn-2=3 characters, so without any character n-gram (minn=5); 2 tokens with n-grams the target word vectors never trained (all their rows are zero); 1 token empty once the word-start marker and surrounding whitespace are removed'
    """
    fmt = {"short_below": max(minn - 2, 0), "minn": minn, "side": side}
    parts = [f"{n} token{'s' if n != 1 else ''} {ZERO_VECTOR_CAUSES[k].format(**fmt)}"
             for k, n in sorted(causes.items(), key=lambda kv: -kv[1]) if k in ZERO_VECTOR_CAUSES and n]
    return "zero subword vector: " + "; ".join(parts)


def _encode_words(tokenizer: Any, words: list[str]) -> list[list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [e.ids for e in backend.encode_batch(words, add_special_tokens=False)]
    return tokenizer(words, add_special_tokens=False)["input_ids"]


def tfr_embeddings(
    tokenizer: Any,
    vectors: wv_mod.WordVectors,
    n_rows: int,
    *,
    counts: dict[str, int] | None = None,
    max_words: int | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """WECHSEL_TFR's ``u_x``: frequency-weighted mean of the vectors of the words containing ``x``.

    ``u_x = sum_{v in V(x)} f_v w_v / sum_{v in V(x)} f_v`` (paper App. D), where ``V(x)`` is the
    set of vocabulary words whose tokenization (as ``word`` or as ``" " + word``, like the
    reference code) contains token ``x``; each word counts once per token.

    Args:
        tokenizer: the tokenizer whose tokens are embedded.
        vectors: word vectors (fastText ``.bin`` frequencies are its corpus counts).
        n_rows: number of rows.
        counts: word frequencies to use instead of ``vectors.counts`` (needed for ``.vec`` files).
        max_words: use only the first (most frequent) N words.

    Returns:
        ``(u, has_vector, info)``.

    Raises:
        ValueError: no frequencies are known.
    """
    import scipy.sparse as sp

    words = [w for w in vectors.words if w != "</s>"]
    if counts is not None:
        freqs = np.array([counts.get(w, 0) for w in words], dtype=np.float64)
    elif vectors.counts is not None:
        keep = np.array([w != "</s>" for w in vectors.words], dtype=bool)
        freqs = vectors.counts[keep].astype(np.float64)
    else:
        raise ValueError(
            f"WECHSEL_TFR needs word frequencies, which {vectors.origin} does not have (a .vec file); "
            "give the corpus it was trained on, or a fastText .bin"
        )
    if max_words is not None:
        words, freqs = words[:max_words], freqs[:max_words]
    keep = freqs > 0
    words = [w for w, ok in zip(words, keep) if ok]
    freqs = freqs[keep]
    n_words = len(words)
    dim = vectors.dim
    if n_words == 0:
        return np.zeros((n_rows, dim), np.float32), np.zeros(n_rows, bool), {"words": 0, "tokens_with_words": 0}
    ids_a = _encode_words(tokenizer, words)
    ids_b = _encode_words(tokenizer, [" " + w for w in words])
    tok_ids = np.fromiter((t for ids in ids_a + ids_b for t in ids), dtype=np.int64)
    lengths = np.fromiter((len(ids) for ids in ids_a + ids_b), dtype=np.int64)
    word_idx = np.repeat(np.concatenate([np.arange(n_words), np.arange(n_words)]), lengths)
    ok = tok_ids < n_rows
    key = np.unique(tok_ids[ok] * n_words + word_idx[ok])
    rows, cols = key // n_words, key % n_words
    m = sp.csr_matrix((freqs[cols], (rows, cols)), shape=(n_rows, n_words))
    w = vectors.word_vectors(words)  # float32: n_words x dim (2.4 GB for 2M words at dim 300; see tfr_max_words)
    num = np.asarray(m @ w)  # float64 (the frequencies are float64)
    den = np.asarray(m.sum(axis=1)).ravel()
    has = den > 0
    u = np.zeros((n_rows, dim), dtype=np.float32)
    u[has] = (num[has] / den[has, None]).astype(np.float32)
    has &= np.any(u != 0, axis=1)
    info = {"words": n_words, "tokens_with_words": int(has.sum()), "word_token_pairs": int(len(key))}
    return u, has, info


def source_language_tokens(tokenizer: Any, corpus: str | Path, n_rows: int, *, max_lines: int | None = None) -> tuple[np.ndarray, dict]:
    """Token ids that occur when ``corpus`` is tokenized with ``tokenizer`` (the "English" tokens).

    Args:
        tokenizer: the source tokenizer.
        corpus: source-language text, one sentence/document per line.
        n_rows: size of the returned mask.
        max_lines: read at most this many lines.

    Returns:
        ``(mask, info)``: boolean ``n_rows`` mask and ``{"lines": …, "tokens": …}``.
    """
    seen = np.zeros(n_rows, dtype=bool)
    lines_read = 0
    batch: list[str] = []

    def flush() -> None:
        for ids in _encode_words(tokenizer, batch):
            a = np.asarray(ids, dtype=np.int64)
            seen[a[a < n_rows]] = True
        batch.clear()

    with open(corpus, encoding="utf-8", newline="\n") as f:
        for line in f:
            if max_lines is not None and lines_read >= max_lines:
                break
            lines_read += 1
            if line.strip():
                batch.append(line.rstrip("\n"))
            if len(batch) >= 4096:
                flush()
    flush()
    return seen, {"lines": lines_read, "tokens": int(seen.sum())}


def english_vocabulary_tokens(tokenizer: Any, english_tokenizer: Any, n_rows: int) -> tuple[np.ndarray, dict]:
    """Source token ids that are also in an English tokenizer's vocabulary (the FOCUS paper's "English tokens").

    Tokens are compared in canonical form (:func:`harness.vocab.compute_overlap`, exact matches
    only), so word-start pieces match across families (``▁the`` = ``Ġthe`` = WordPiece ``the``);
    special tokens are never English tokens.

    Args:
        tokenizer: the source tokenizer.
        english_tokenizer: a tokenizer of the source's main language (English for XLM-R).
        n_rows: size of the returned mask.

    Returns:
        ``(mask, info)``: boolean ``n_rows`` mask and ``{"english_vocab": …, "tokens": …}``.
    """
    ov = _canon.compute_overlap(english_tokenizer, tokenizer, fuzzy=False)
    seen = np.zeros(n_rows, dtype=bool)
    ids = ov.exact[:, 0] if len(ov.exact) else np.zeros(0, dtype=np.int64)
    seen[ids[ids < n_rows]] = True
    return seen, {"english_vocab": int(_canon.vocab_size(english_tokenizer)), "tokens": int(seen.sum()),
                  "english_family": ov.source_family}
