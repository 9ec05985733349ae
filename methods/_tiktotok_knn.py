"""Tik-to-Tok's step 5, ``fallback="fasttext-knn"``: k nearest source tokens in a bilingual fastText space.

See :mod:`methods.tiktotok` (step 5). Token-level fastText models are trained on both sides of the
parallel corpus (:func:`train_fallback_space`), each token gets its in-vocabulary vector or the mean
of its trained character n-gram rows (:func:`fasttext_token_space`), an orthogonal Procrustes map
fitted on the tokens mapped by identity or alignment takes target vectors onto source vectors, and
each still unmapped target token averages its ``k`` nearest source tokens (:func:`procrustes_knn`,
through :func:`methods._similarity.chunked_topk_cosine`).

Cache: what the fallback reads of a fastText model is each side's token space, ``(vectors, kinds)``
(:func:`fasttext_token_space`), so that is what is cached: ``<cache>/fasttext/tokspace-<key>.npz``
(float32 ``n_rows x dim`` and int8 ``n_rows``, megabytes where the model's ``.bin`` takes
``(words + bucket) x dim`` floats), keyed by :func:`token_space_key`. The model itself is trained
without being stored (``train_fasttext(store=False)``); a ``.bin`` an older version left in the
cache is read instead of training, once, and then removed. A cached token space is exactly the
arrays computed from the trained model, so the mapping is the same bit for bit; an entry that
cannot be read or does not check out is logged and built again.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness import progress as _progress
from harness import vocab as _canon
from harness.cache import build_once, content_hash
from harness.protocols import TransferInputs
from methods import _fasttext
from methods._similarity import DEFAULT_CHUNK_ROWS, chunked_topk_cosine
from methods._tiktotok_counts import FROM_ALIGNMENT, FROM_FUZZY, FROM_IDENTITY, FROM_NUMBER
from methods._wordvectors import procrustes


class FallbackSettings(Protocol):
    """The settings of the fallback this module reads (:class:`methods.tiktotok.TikToTokConfig` has them;
    a protocol, so this helper does not import the method that uses it)."""

    fasttext_model: str
    fasttext_dim: int
    fasttext_epochs: int
    fasttext_min_count: int
    fasttext_minn: int
    fasttext_maxn: int
    fasttext_bucket: int
    fasttext_threads: int
    fasttext_ngram_vectors: bool

logger = logging.getLogger(__name__)

__all__ = [
    "NO_VECTOR", "IN_VOCABULARY", "NGRAMS", "FallbackSpace", "procrustes_knn", "knn_fallback",
    "fasttext_token_space", "train_fallback_space", "fasttext_params", "token_space_key", "TOKEN_SPACE_VERSION",
    "TOKEN_SPACE_PREFIX",
]

FIT_ORIGINS = (FROM_IDENTITY, FROM_FUZZY, FROM_NUMBER, FROM_ALIGNMENT)
"""Origins whose tokens (with their most probable source token) fit the kNN fallback's Procrustes map:
identity, fuzzy identity, number, aligned — not specials, not smoothed tokens."""

NO_VECTOR, IN_VOCABULARY, NGRAMS = 0, 1, 2
"""Kinds of fastText token vectors (:class:`FallbackSpace`)."""

TOKEN_SPACE_VERSION = 1
"""Version of a cached token space's layout and of how it is computed (:func:`fasttext_token_space`,
the ``"string"`` fastText words); part of :func:`token_space_key`, bump it when either changes."""

TOKEN_SPACE_PREFIX = "tokspace-"
"""File name prefix of a cached token space (``<cache>/fasttext/tokspace-<key>.npz``)."""

_KEPT_REPORT = ("params", "threads", "deterministic", "n_words", "zero_init_words", "error")
"""Facts of the fastText training stored with a token space and reported again on a cache hit."""


@dataclass(frozen=True)
class FallbackSpace:
    """Token vectors of both languages for ``fallback="fasttext-knn"`` (index = token id).

    Attributes:
        target: float ``n_target x d`` target-token vectors (rows of kind ``NO_VECTOR`` are ignored).
        target_kind: int8 ``n_target``: ``NO_VECTOR`` (0), ``IN_VOCABULARY`` (1: the token's own
            fastText vector) or ``NGRAMS`` (2: the mean of its trained character n-gram rows).
        source: float ``n_source x d`` source-token vectors.
        source_kind: int8 ``n_source``, same codes; only ``IN_VOCABULARY`` source tokens are used
            (as Procrustes pairs and as neighbours).
        info: JSON-serializable facts about how the vectors were made (copied into the info).
    """

    target: np.ndarray
    target_kind: np.ndarray
    source: np.ndarray
    source_kind: np.ndarray
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        t, s = np.asarray(self.target), np.asarray(self.source)
        if t.ndim != 2 or s.ndim != 2 or t.shape[1] != s.shape[1]:
            raise ValueError(f"FallbackSpace: target and source must be n x d with one d, got {t.shape} and {s.shape}")
        if len(self.target_kind) != len(t) or len(self.source_kind) != len(s):
            raise ValueError(
                f"FallbackSpace: one kind per row expected, got {len(self.target_kind)} kinds for {len(t)} target rows "
                f"and {len(self.source_kind)} for {len(s)} source rows"
            )


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def _centered(vectors: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Unit rows, minus the mean of the in-vocabulary unit rows, unit again (rows without a vector stay 0)."""
    u = _unit_rows(vectors)
    has, own = kinds != NO_VECTOR, kinds == IN_VOCABULARY
    if own.any():
        u[has] -= u[own].mean(axis=0)
    return _unit_rows(u)


def procrustes_knn(
    queries: np.ndarray,
    fit_target: np.ndarray,
    fit_source: np.ndarray,
    keys: np.ndarray,
    k: int,
    *,
    fit_keys: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Map target vectors into the source space (orthogonal Procrustes) and find their nearest keys.

    All rows are L2-normalized first. ``W = procrustes(fit_target, fit_source)`` (the rows are
    translation pairs); each query ``q`` is mapped to ``q @ W`` and its ``k`` keys of highest cosine
    are found in chunks (``methods._similarity.chunked_topk_cosine``: matrix products and top-k,
    memory ``chunk_rows x len(keys)`` floats).

    Args:
        queries: ``n x d`` target vectors to place.
        fit_target: ``p x d`` target vectors of the translation pairs (``p >= 1``).
        fit_source: ``p x d`` source vectors of the same pairs.
        keys: ``m x d`` candidate source vectors (``m >= 1``).
        k: neighbours per query (clipped to ``m``).
        fit_keys: optional ``p`` indices into ``keys`` of the pairs' source tokens (``-1``: not a
            key); gives the retrieval precision of the fit pairs in the info.
        chunk_rows: query rows scored at once.

    Returns:
        ``(indices, cosines, info)``: int64 and float32 ``n x min(k, m)``, in decreasing cosine; the
        info has ``pairs``, ``dim``, ``underdetermined`` (fewer pairs than dimensions), ``residual``
        (``||X W - Y||_F / ||Y||_F`` on unit rows), ``residual_unaligned`` (the same with ``W = I``),
        ``mean_pair_cosine_before``/``_after`` and, with ``fit_keys``, ``precision_at_1`` and
        ``precision_at_k`` (pairs whose source token is the nearest key / among the ``k`` nearest).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> src = rng.normal(size=(6, 4))
        >>> rot, _ = np.linalg.qr(rng.normal(size=(4, 4)))
        >>> tgt = src @ rot.T  # the target space is a rotation of the source space
        >>> idx, cos, info = procrustes_knn(tgt[:2], tgt[2:], src[2:], src, k=1, fit_keys=np.arange(2, 6))
        >>> idx.ravel().tolist(), info["precision_at_1"], info["residual"] < 1e-6
        ([0, 1], 1.0, True)
    """
    x, y = _unit_rows(fit_target), _unit_rows(fit_source)
    if len(x) == 0 or len(keys) == 0:
        raise ValueError(f"procrustes_knn needs at least one pair and one key, got {len(x)} pairs and {len(keys)} keys")
    w = procrustes(x, y)
    keys_u = _unit_rows(keys).astype(np.float32)
    y_norm = float(np.linalg.norm(y)) or 1.0
    fitted = x @ w
    info: dict[str, Any] = {
        "pairs": int(len(x)),
        "dim": int(x.shape[1]),
        "underdetermined": bool(len(x) < x.shape[1]),
        "residual": round(float(np.linalg.norm(fitted - y)) / y_norm, 6),
        "residual_unaligned": round(float(np.linalg.norm(x - y)) / y_norm, 6),
        "mean_pair_cosine_before": round(float(np.mean(np.sum(x * y, axis=1))), 6),
        "mean_pair_cosine_after": round(float(np.mean(np.sum(fitted * y, axis=1))), 6),
    }
    if fit_keys is not None:
        _, near = chunked_topk_cosine(fitted.astype(np.float32), keys_u, k, chunk_rows=chunk_rows, normalized=True)
        fit_keys = np.asarray(fit_keys, dtype=np.int64).reshape(-1, 1)
        info["precision_at_1"] = round(float(np.mean(near[:, :1] == fit_keys)), 6)
        info["precision_at_k"] = round(float(np.mean(np.any(near == fit_keys, axis=1))), 6)
    q = (_unit_rows(queries) @ w).astype(np.float32)
    cos, idx = chunked_topk_cosine(q, keys_u, k, chunk_rows=chunk_rows, normalized=True)
    return idx, cos, info


def knn_fallback(
    target: Sequence[_canon.Canon | None],
    origin: np.ndarray,
    weights: Mapping[int, Mapping[int, float]],
    valid_source: np.ndarray,
    space: FallbackSpace,
    k: int,
    center: bool = True,
) -> tuple[dict[int, dict[int, float]], dict, np.ndarray]:
    """Rows for the unmapped target tokens that have a fastText vector (see the module docstring).

    Returns the rows, the info (``unmapped``: target tokens with a non-empty form left after
    smoothing; ``with_vector``: those with a fastText vector, by kind; ``candidates``: source
    tokens that can be neighbours; ``skipped``: why no row was made, or ``None``; ``procrustes``:
    the fit) and the target vector kinds (padded to ``len(target)``).
    """
    n_target, n_source = len(target), len(valid_source)
    t_kind = np.zeros(n_target, dtype=np.int8)
    t_kind[: min(n_target, len(space.target_kind))] = np.asarray(space.target_kind, dtype=np.int8)[:n_target]
    s_ok = np.zeros(n_source, dtype=bool)
    m = min(n_source, len(space.source_kind))
    s_ok[:m] = (np.asarray(space.source_kind)[:m] == IN_VOCABULARY) & valid_source[:m]
    unmapped = np.array(
        [t for t in range(n_target) if origin[t] < 0 and target[t] is not None and target[t].text], dtype=np.int64
    )
    queries = unmapped[t_kind[unmapped] != NO_VECTOR]
    fit_t, fit_s = _fit_pairs(origin, weights, t_kind, s_ok)
    candidates = np.flatnonzero(s_ok)
    info: dict[str, Any] = {
        "mode": "fasttext-knn",
        "k": int(k),
        "unmapped": int(len(unmapped)),
        "with_vector": int(len(queries)),
        "with_vector_in_vocabulary": int(np.sum(t_kind[queries] == IN_VOCABULARY)) if len(queries) else 0,
        "with_vector_ngrams": int(np.sum(t_kind[queries] == NGRAMS)) if len(queries) else 0,
        "candidates": int(len(candidates)),
        "skipped": None,
    }
    if not len(unmapped):
        info["skipped"] = "no target token left unmapped"
    elif not len(queries):
        info["skipped"] = "no unmapped target token has a fastText vector"
    elif not len(candidates):
        info["skipped"] = "no source token has an in-vocabulary fastText vector"
    elif not fit_t:
        info["skipped"] = "no mapped target token and its source token both have an in-vocabulary fastText vector"
    if info["skipped"]:
        if len(unmapped):
            logger.warning("Tik-to-Tok fasttext-knn fallback: %s; unmapped tokens get random rows", info["skipped"])
        info["procrustes"] = None
        return {}, info, t_kind
    rows = _neighbour_rows(space, t_kind, s_ok, queries, candidates, fit_t, fit_s, k, center, info)
    return rows, info, t_kind


def _fit_pairs(
    origin: np.ndarray, weights: Mapping[int, Mapping[int, float]], t_kind: np.ndarray, s_ok: np.ndarray
) -> tuple[list[int], list[int]]:
    """The Procrustes pairs: tokens mapped by identity or alignment with their most probable source token,
    both with an in-vocabulary vector."""
    fit_t: list[int] = []
    fit_s: list[int] = []
    n_source = len(s_ok)
    for t in np.flatnonzero(np.isin(origin, FIT_ORIGINS) & (t_kind == IN_VOCABULARY)).tolist():
        s = max(weights[t].items(), key=lambda kv: (kv[1], -kv[0]))[0]  # most probable; ties: lowest id
        if 0 <= s < n_source and s_ok[s]:
            fit_t.append(t)
            fit_s.append(s)
    return fit_t, fit_s


def _neighbour_rows(
    space: FallbackSpace, t_kind: np.ndarray, s_ok: np.ndarray, queries: np.ndarray, candidates: np.ndarray,
    fit_t: list[int], fit_s: list[int], k: int, center: bool, info: dict,
) -> dict[int, dict[int, float]]:
    """Fit the map, find each query's ``k`` nearest candidates, average them; the fit goes into ``info``."""
    n_target, n_source = len(t_kind), len(s_ok)
    position = np.full(n_source, -1, dtype=np.int64)
    position[candidates] = np.arange(len(candidates))
    tv, sv = np.asarray(space.target)[:n_target], np.asarray(space.source)[:n_source]
    if center:
        tv = _centered(tv, t_kind[: len(tv)])
        sv = _centered(sv, np.where(s_ok[: len(sv)], IN_VOCABULARY, NO_VECTOR).astype(np.int8))
    idx, cos, fit = procrustes_knn(tv[queries], tv[fit_t], sv[fit_s], sv[candidates], k, fit_keys=position[fit_s])
    fit["centered"] = bool(center)
    if fit["underdetermined"]:
        logger.info(
            "Tik-to-Tok fasttext-knn: Procrustes with %d pairs in %d dimensions is underdetermined",
            fit["pairs"],
            fit["dim"],
        )
    fit["distinct_source_tokens"] = len(set(fit_s))
    info["procrustes"] = fit
    info["neighbours"] = int(idx.shape[1])
    info["mean_neighbour_cosine"] = round(float(cos.mean()), 6)
    src_ids = candidates[idx]
    share = 1.0 / idx.shape[1]
    rows = {int(t): {int(s): share for s in sorted(ss.tolist())} for t, ss in zip(queries.tolist(), src_ids)}
    return rows


def fasttext_token_space(
    model: Any, tokenizer: Any, n_rows: int, *, skip: np.ndarray, ngrams: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of a tokenizer's tokens from a token-level fastText model, and their kinds.

    A token whose fastText word (:func:`methods._fasttext.fasttext_words`, the format
    :func:`methods._fasttext.pretokenize` writes) is in the model's vocabulary gets its fastText
    vector (kind ``IN_VOCABULARY``). With ``ngrams``, any other token gets the mean of the input rows
    of its character n-grams that are *trained* — that occur in some in-vocabulary word (kind
    ``NGRAMS``); a token with no trained n-gram gets none (``NO_VECTOR``). fastText's own
    out-of-vocabulary vector would also average untrained buckets, random or zero noise.

    Args:
        model: a fastText model trained on text pre-tokenized with ``tokenizer`` (``token_format="string"``).
        tokenizer: the tokenizer whose tokens are embedded.
        n_rows: rows of the result (ids beyond ``len(tokenizer)`` get no vector).
        skip: boolean mask (``>= n_rows`` entries read) of ids to leave without a vector (specials).
        ngrams: also build n-gram vectors for out-of-vocabulary tokens.

    Returns:
        ``(vectors, kinds)``: float32 ``n_rows x dim`` (zeros without a vector) and int8 ``n_rows``.

    Example:
        >>> # vecs, kinds = fasttext_token_space(ft, tok, len(tok), skip=np.zeros(len(tok), bool), ngrams=True)
    """
    words = _fasttext.fasttext_words(tokenizer, "string")
    vecs = np.zeros((n_rows, model.get_dimension()), dtype=np.float32)
    kinds = np.zeros(n_rows, dtype=np.int8)
    oov: list[int] = []
    for i, w in enumerate(_progress.iterate(words[:n_rows], "fastText token vectors (vocabulary lookups)")):
        if skip[i]:
            continue
        if model.get_word_id(w) >= 0:
            vecs[i] = model.get_word_vector(w)
            kinds[i] = IN_VOCABULARY
        elif ngrams:
            oov.append(i)
    if not oov:
        return vecs, kinds
    vocab = model.get_words()
    trained = _trained_ngram_rows(model, vocab)
    # every out-of-vocabulary token's n-gram rows, flat, with the position of its token in ``oov``
    per_token = [np.asarray(model.get_subwords(words[i])[1], dtype=np.int64)
                 for i in _progress.iterate(oov, "fastText token vectors (n-grams of rare tokens)")]  # fmt: skip
    lengths = np.fromiter((len(ids) for ids in per_token), dtype=np.int64, count=len(per_token))
    flat = np.concatenate([np.zeros(0, np.int64), *per_token])
    owner = np.repeat(np.arange(len(oov), dtype=np.int64), lengths)
    # membership by one boolean mask over the model's rows (a per-token ``np.isin`` re-sorts ``trained`` each time)
    is_trained = np.zeros(int(max(flat.max(initial=-1), trained.max(initial=-1))) + 1, dtype=bool)
    is_trained[trained] = True
    keep = is_trained[flat]
    flat, owner = flat[keep], owner[keep]
    if not len(flat):
        return vecs, kinds
    rows_needed = np.unique(flat)
    table = np.zeros((len(rows_needed), vecs.shape[1]), dtype=np.float32)
    for j, r in enumerate(_progress.iterate(rows_needed.tolist(), "fastText token vectors (n-gram rows)")):
        table[j] = model.get_input_vector(r)
    _ngram_means(np.asarray(oov, dtype=np.int64), owner, np.searchsorted(rows_needed, flat), table, vecs, kinds)
    return vecs, kinds


def _trained_ngram_rows(model: Any, vocab: Sequence[str]) -> np.ndarray:
    """Sorted distinct input rows of character n-grams that occur in some in-vocabulary word (word rows come first)."""
    n_words = len(vocab)
    parts = [np.asarray(model.get_subwords(w)[1], dtype=np.int64)
             for w in _progress.iterate(vocab, "fastText token vectors (trained n-grams)")]  # fmt: skip
    trained = np.unique(np.concatenate([np.zeros(0, np.int64), *parts]))
    return trained[trained >= n_words]


def _ngram_means(
    oov: np.ndarray, owner: np.ndarray, row_of: np.ndarray, table: np.ndarray, vecs: np.ndarray, kinds: np.ndarray
) -> None:
    """Each token ``oov[k]``'s vector: the mean of ``table[row_of[owner == k]]``, kept when nonzero.

    ``owner`` is nondecreasing. Bit for bit what ``table[ids].mean(axis=0)`` per token gives (the
    algorithm this replaced): ``ndarray.mean`` over axis 0 adds the rows one after the other in
    float32 from 0 (pairwise only when the rows are single numbers) and divides by the count; here the
    k-th rows of all tokens are added in one vectorized step, for k = 1, 2, ... up to the longest
    token's count (memory: one ``tokens x dim`` float32 array).
    """
    if not len(owner):
        return
    bounds = np.flatnonzero(np.diff(owner, prepend=-1, append=owner[-1] + 1))  # start of each owner's run, and the end
    starts, lengths = bounds[:-1], np.diff(bounds)
    tokens = oov[owner[starts]]
    if table.shape[1] == 1:  # one-number rows: numpy sums them pairwise, so take its own mean per token
        sums = np.stack([table[row_of[a : a + n]].mean(axis=0) for a, n in zip(starts.tolist(), lengths.tolist())])
    else:
        sums = table[row_of[starts]] + np.float32(0.0)  # numpy's sum starts from 0 (so -0.0 + 0.0 = +0.0)
        bar = _progress.counter("fastText token vectors (n-gram means, by position)", int(lengths.max()))
        bar.update(1)
        for k in range(1, int(lengths.max())):
            more = np.flatnonzero(lengths > k)
            sums[more] += table[row_of[starts[more] + k]]
            bar.update(1)
        bar.close()
        np.true_divide(sums, lengths.astype(np.intp)[:, None], out=sums, casting="unsafe")  # as ndarray.mean divides
    nonzero = np.any(sums != 0, axis=1)
    vecs[tokens[nonzero]] = sums[nonzero]
    kinds[tokens[nonzero]] = NGRAMS


def token_space_key(fasttext_key: str, tokenizer: Any, n_rows: int, skip: np.ndarray, ngrams: bool) -> str:
    """The cache key of one side's token space: everything :func:`fasttext_token_space` depends on.

    Args:
        fasttext_key: :func:`methods._fasttext.fasttext_cache_key` of the model's training text and params.
        tokenizer: the side's tokenizer (its :func:`methods._fasttext.tokenizer_fingerprint`).
        n_rows: rows of the token space.
        skip: boolean mask of the ids left without a vector (its first ``n_rows`` entries count).
        ngrams: whether out-of-vocabulary tokens get n-gram vectors.

    Returns:
        64 hex characters (also covers :data:`TOKEN_SPACE_VERSION`).
    """
    mask = np.asarray(skip, dtype=bool)[: int(n_rows)]
    if len(mask) != int(n_rows):
        raise ValueError(f"token_space_key: skip has {len(mask)} entries, expected at least n_rows={n_rows}")
    return content_hash({
        "fasttext_key": fasttext_key,
        "tokenizer": _fasttext.tokenizer_fingerprint(tokenizer),
        "token_format": "string",
        "n_rows": int(n_rows),
        "skip": np.packbits(mask).tobytes(),
        "ngrams": bool(ngrams),
        "version": TOKEN_SPACE_VERSION,
    })  # fmt: skip


def _save_token_space(path: Path, key: str, vecs: np.ndarray, kinds: np.ndarray, report: dict) -> None:
    """Write an uncompressed ``.npz`` (the arrays, and the key and training facts as UTF-8 JSON), atomically."""
    meta = {"version": TOKEN_SPACE_VERSION, "key": key, "report": {k: report[k] for k in _KEPT_REPORT if k in report}}
    blob = np.frombuffer(json.dumps(meta, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: numpy must not append ".npz" to the temporary name
            np.savez(f, meta=blob, vectors=vecs, kinds=kinds)

    _fasttext.atomic_write(path, write)


def _load_token_space(
    path: Path, key: str, n_rows: int, dim: int, skip: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Read and check a cached token space (one of ``_fasttext.CACHE_READ_ERRORS`` when it does not hold)."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(z["meta"].tobytes().decode("utf-8"))
        vecs, kinds = z["vectors"], z["kinds"]
    version = meta.get("version") if isinstance(meta, dict) else None
    if version != TOKEN_SPACE_VERSION:
        raise ValueError(f"layout version {version}, expected {TOKEN_SPACE_VERSION}")
    if meta.get("key") != key or not isinstance(meta.get("report"), dict):
        raise ValueError("its key is not the one it is stored under")
    if vecs.dtype != np.float32 or vecs.shape != (n_rows, dim) or kinds.dtype != np.int8 or kinds.shape != (n_rows,):
        raise ValueError(
            f"vectors {vecs.dtype} {vecs.shape} and kinds {kinds.dtype} {kinds.shape}, "
            f"expected float32 {(n_rows, dim)} and int8 {(n_rows,)}"
        )
    if not np.all(np.isin(kinds, (NO_VECTOR, IN_VOCABULARY, NGRAMS))) or np.any(kinds[np.asarray(skip[:n_rows])]):
        raise ValueError("kinds outside 0/1/2, or a vector for a token that has none")
    if not np.all(np.isfinite(vecs)) or np.any(vecs[kinds == NO_VECTOR]):
        raise ValueError("non-finite vectors, or a nonzero row for a token without a vector")
    if not np.all(np.any(vecs[kinds == NGRAMS], axis=1)):
        raise ValueError("a zero n-gram vector (fasttext_token_space gives n-gram vectors only when nonzero)")
    return vecs, kinds, meta["report"]


def _side_space(
    text: Path, tok: Any, n_rows: int, skip: np.ndarray, ngrams: bool, params: dict, cache: Path | None,
    side: str, report: dict,
) -> tuple[np.ndarray, np.ndarray]:
    """One side's token space: from the cache, or from fastText trained on ``text`` (then cached)."""
    who, consequence = f"Tik-to-Tok fasttext-knn: {side} side", "no vectors on that side"

    def computed(model: Any) -> tuple[np.ndarray, np.ndarray]:
        if model is None:
            return np.zeros((n_rows, int(params["dim"])), np.float32), np.zeros(n_rows, np.int8)
        return fasttext_token_space(model, tok, n_rows, skip=skip, ngrams=ngrams)

    if cache is None:
        return computed(_fasttext.train_fasttext_or_none(
            text, cache_dir=None, report=report, who=who, consequence=consequence, **params
        ))  # fmt: skip
    t0 = time.perf_counter()
    key = token_space_key(
        _fasttext.fasttext_cache_key(text, _fasttext.training_params(**params)), tok, n_rows, skip, ngrams
    )
    path = cache / "fasttext" / f"{TOKEN_SPACE_PREFIX}{key[:32]}.npz"
    # two workers wanting one uncached token space (a held fastText seed) build it once: the second
    # waits on the entry's build lock (<cache>/.locks/tokspace-<key>.lock), then reads the first's file
    return build_once(cache, "tokspace", key,
                      lambda: _cached_space(path, key, n_rows, int(params["dim"]), skip, report, t0, who, consequence),
                      lambda: _build_space(text, path, key, params, cache, report, computed, who, consequence))


def _cached_space(path: Path, key: str, n_rows: int, dim: int, skip: np.ndarray, report: dict, t0: float, who: str,
                  consequence: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The token space stored at ``path`` (its report kept in ``report``), ``None`` when absent or unreadable."""
    if not path.is_file():
        return None
    try:
        vecs, kinds, kept = _load_token_space(path, key, n_rows, dim, skip)
    except _fasttext.CACHE_READ_ERRORS as e:  # damaged outside tokxfer (writes are atomic): build it again
        logger.warning("Tik-to-Tok token-space cache: cannot read %s (%s); building it again", path, e)
        return None
    report.update(kept)
    report.update(cache="hit", path=str(path), stored="token-space", bytes=path.stat().st_size,
                  seconds=round(time.perf_counter() - t0, 3))  # fmt: skip
    if "error" in kept:
        logger.warning("%s: %s; %s", who, kept["error"], consequence)
    return vecs, kinds


def _build_space(text: Path, path: Path, key: str, params: dict, cache: Path, report: dict,
                 computed: Any, who: str, consequence: str) -> tuple[np.ndarray, np.ndarray]:
    """Train fastText on ``text``, derive the token space, store it at ``path`` (the cache miss of :func:`_side_space`)."""
    model = _fasttext.train_fasttext_or_none(
        text, cache_dir=cache, store=False, report=report, who=who, consequence=consequence, **params
    )
    vecs, kinds = computed(model)
    legacy = report.get("path") if report.get("cache") == "hit" else None  # a full model an older version cached
    _save_token_space(path, key, vecs, kinds, report)
    report.update(cache="hit" if legacy else "miss", path=str(path), stored="token-space", bytes=path.stat().st_size)
    if legacy:
        report["migrated_from"] = legacy
        size = Path(legacy).stat().st_size if Path(legacy).is_file() else 0
        Path(legacy).unlink(missing_ok=True)
        logger.info(
            "Tik-to-Tok token-space cache: replaced the full model %s (%.1f MB) by its token space %s (%.1f MB)",
            Path(legacy).name, size / 2**20, path.name, path.stat().st_size / 2**20,
        )  # fmt: skip
    return vecs, kinds


def fasttext_params(cfg: FallbackSettings, seed: int) -> dict:
    """The :func:`methods._fasttext.train_fasttext` arguments of the fallback's fastText models."""
    return {
        "dim": cfg.fasttext_dim, "epoch": cfg.fasttext_epochs, "min_count": cfg.fasttext_min_count,
        "model": cfg.fasttext_model, "minn": cfg.fasttext_minn, "maxn": cfg.fasttext_maxn,
        "bucket": cfg.fasttext_bucket, "seed": seed, "threads": cfg.fasttext_threads,
    }  # fmt: skip


def _side_text(lines: Sequence[str], tok: Any, cache: Path | None, tmp: Path, side: str) -> Path:
    """One side of the parallel corpus pre-tokenized for fastText (cached by content + tokenizer)."""
    raw = tmp / f"{side}.txt"
    # fastText reads one sentence per line
    raw.write_text("\n".join(" ".join(line.splitlines()) for line in lines) + "\n", encoding="utf-8")
    return _fasttext.pretokenize_cached(raw, tok, cache, tmp / side)


def train_fallback_space(
    cfg: FallbackSettings,
    inputs: TransferInputs,
    pairs: Sequence[tuple[str, str]],
    seed: int,
    source: Sequence[_canon.Canon | None],
    target: Sequence[_canon.Canon | None],
    n_source: int,
) -> FallbackSpace:
    """Train token-level fastText on both sides of the parallel corpus; vectors for every token id.

    With a cache, each side's token space is read from ``<cache>/fasttext/tokspace-<key>.npz`` when
    there (no training) and stored there otherwise; no fastText model is kept (see the module
    docstring). Each side's report says ``cache`` (``"hit"``: nothing trained; ``"miss"``: trained
    and stored; ``"off"``: no cache), ``stored="token-space"``, ``path`` and ``bytes`` of the entry,
    ``migrated_from`` when it was derived from an older version's ``.bin``, and the training's
    ``params``, ``threads``, ``deterministic``, ``n_words`` and ``zero_init_words`` (kept with the entry).
    """
    cache = Path(inputs.cache_dir) if inputs.cache_dir is not None else None
    params = fasttext_params(cfg, seed)
    info: dict[str, Any] = {
        "trained_on": "both sides of inputs.parallel_corpus",
        "sentences": len(pairs),
        "seed": seed,
    }
    sides = (
        ("target", inputs.target_tokenizer, [t for _, t in pairs], target, len(target), cfg.fasttext_ngram_vectors),
        ("source", inputs.source_tokenizer, [s for s, _ in pairs], source, n_source, False),
    )
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with tempfile.TemporaryDirectory(prefix="tokxfer-tiktotok-") as tmp:
        for side, tok, lines, canon, n_rows, ngrams in sides:
            skip = np.ones(n_rows, dtype=bool)
            skip[: min(n_rows, len(canon))] = [c is None or not c.text for c in canon[:n_rows]]
            report: dict[str, Any] = {}
            t0 = time.perf_counter()
            text = _side_text(lines, tok, cache, Path(tmp), side)
            report["pretokenize_s"] = round(time.perf_counter() - t0, 3)
            vecs, kinds = _side_space(text, tok, n_rows, skip, ngrams, params, cache, side, report)
            report.update(
                in_vocabulary=int(np.sum(kinds == IN_VOCABULARY)),
                ngrams=int(np.sum(kinds == NGRAMS)),
                no_vector=int(np.sum((kinds == NO_VECTOR) & ~skip)),
            )
            info[side] = report
            out[side] = (vecs, kinds)
    return FallbackSpace(out["target"][0], out["target"][1], out["source"][0], out["source"][1], info)
