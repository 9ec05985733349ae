"""WECHSEL's step 3: each target row a softmax mixture of its k nearest source rows.

See :mod:`methods.wechsel` (step 3). :func:`wechsel_weights` finds the ``k`` source tokens of
highest cosine for every target subword vector (exact, through
:func:`methods._exact_topk.topk_cosine`) and weighs them by ``softmax(s / tau)``;
:func:`wechsel_mapping` turns that into a :class:`~harness.protocols.TokenMapping` (specials
copied by role, target tokens without a vector FALLBACK) and counts the *near ties* (k-th and
(k+1)-th cosines within :data:`NEAR_TIE`) that a parity check must set apart. Pure: arrays in,
mapping out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from harness.protocols import COMBINED, FALLBACK, SPECIAL, TokenMapping
from methods._exact_topk import EXACT_CHUNK_ROWS, topk_cosine

__all__ = ["NEAR_TIE", "WechselNeighbours", "wechsel_weights", "WechselCore", "wechsel_mapping"]

DEFAULT_CHUNK_ROWS = EXACT_CHUNK_ROWS
"""Target rows scored at once: 512 x 250k source tokens is 256 MB in bfloat16 (512 MB in float32)."""

_MAX_LISTED = 50_000
"""At most this many near-tie target ids are listed in the method's info (the count is always exact)."""


@dataclass
class WechselNeighbours:
    """The k nearest source tokens of every target token and their softmax weights.

    Attributes:
        indices: ``n_target x k`` int64 source ids, most similar first (``-1`` where no vector).
        similarities: ``n_target x k`` float32 cosines.
        weights: ``n_target x k`` float32 ``softmax(similarities / tau)`` (rows sum to 1; 0 where no vector).
        has_vector: ``n_target`` bool: the target tokens with a nonzero subword vector.
        stats: the similarity search's facts (see :class:`TopK`).
        kth_gap: ``n_target`` float64 gap between the k-th and (k+1)-th exact cosines (see :class:`TopK`).
    """

    indices: np.ndarray
    similarities: np.ndarray
    weights: np.ndarray
    has_vector: np.ndarray
    stats: dict
    kth_gap: np.ndarray | None = None


NEAR_TIE = 1e-6
"""A row is a *near tie* when its k-th and (k+1)-th neighbours' exact cosines differ by less than this:
cosines computed by another implementation (another precision, summation order, or rotation side)
differ by about this much, so its k-th neighbour may legitimately differ there."""


def wechsel_weights(
    u_target: np.ndarray | torch.Tensor,
    u_source: np.ndarray | torch.Tensor,
    k: int = 10,
    tau: float = 0.1,
    *,
    source_mask: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    screen: str = "auto",
) -> WechselNeighbours:
    """WECHSEL's step 3 on subword embeddings given as arrays (pure; no tokenizers, no files).

    For each target row ``x`` with ``u_x != 0``: the ``k`` source rows with the highest cosine
    ``s_xy`` (exact; ties to the lower id) and weights ``softmax(s_xy / tau)`` over exactly those
    ``k``. Source rows with a zero vector or ``False`` in ``source_mask`` are never chosen.

    Args:
        u_target: ``n_target x d`` target subword embeddings, already aligned to the source space.
        u_source: ``n_source x d`` source subword embeddings.
        k: neighbours per target token (paper: 10).
        tau: softmax temperature (paper: 0.1).
        source_mask: boolean ``n_source`` mask of allowed source tokens (e.g. no specials).
        chunk_rows: target rows scored at once.
        screen: screening precision (``auto``/``bf16``/``fp32``/``fp64``); does not change the result.

    Returns:
        :class:`WechselNeighbours`.

    Example:
        >>> nb = wechsel_weights(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]), k=2, tau=0.1)
        >>> nb.indices.tolist(), [round(float(w), 4) for w in nb.weights[0]]
        ([[0, 1]], [0.8808, 0.1192])
    """
    if not (tau > 0):
        raise ValueError(f"tau must be > 0, got {tau}")
    top = topk_cosine(u_target, u_source, k, key_mask=source_mask, chunk_rows=chunk_rows, screen=screen)
    logits = top.similarities.astype(np.float64) / float(tau)
    logits -= logits.max(axis=1, keepdims=True)
    w = np.exp(logits)
    w /= w.sum(axis=1, keepdims=True)
    w = w.astype(np.float32)
    w[~top.has_vector] = 0.0
    return WechselNeighbours(top.indices, top.similarities, w, top.has_vector, top.stats, top.kth_gap)


@dataclass
class WechselCore:
    """Result of :func:`wechsel_mapping`.

    Attributes:
        mapping: the target -> source map.
        neighbours: the neighbours/weights of the rows that were scored (``rows``).
        rows: target ids of ``neighbours``' rows.
        stats: JSON-serializable counts.
    """

    mapping: TokenMapping
    neighbours: WechselNeighbours
    rows: np.ndarray
    stats: dict


def wechsel_mapping(
    u_target: np.ndarray,
    u_source: np.ndarray,
    *,
    k: int = 10,
    tau: float = 0.1,
    specials: np.ndarray | None = None,
    target_mask: np.ndarray | None = None,
    source_mask: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    screen: str = "auto",
    special_candidates: bool = False,
    near_tie: float = NEAR_TIE,
) -> WechselCore:
    """The WECHSEL mapping from subword embeddings: specials copied, the rest combined or FALLBACK.

    Args:
        u_target: ``n_target x d`` aligned target subword embeddings (one row per target id).
        u_source: ``n_source x d`` source subword embeddings (one row per source embedding row).
        k: neighbours per target token.
        tau: softmax temperature.
        specials: ``(m, 2)`` ``[target, source]`` special-token pairs (SPECIAL; candidates only
            with ``special_candidates``).
        target_mask: target ids that may be combined (others, e.g. unmatched specials, are FALLBACK).
        source_mask: source ids allowed as neighbours (the specials' sources are removed from it
            here unless ``special_candidates``).
        chunk_rows: target rows scored at once.
        screen: first-pass precision; does not change the result.
        special_candidates: let the source rows of ``specials`` be neighbours (reference code).
        near_tie: threshold of :data:`NEAR_TIE`; ``stats["near_ties"]`` counts the combined rows
            whose k-th and (k+1)-th cosines differ by less (``exact``: by nothing) and lists them.

    Returns:
        :class:`WechselCore`: COMBINED rows have exactly ``min(k, usable sources)`` entries whose
        weights sum to 1; target rows with a zero vector are FALLBACK.

    Example:
        >>> u_s = np.array([[0, 0], [1, 0], [0, 1]], dtype=np.float32)
        >>> u_t = np.array([[0, 0], [1, .1], [0, 0]], dtype=np.float32)
        >>> core = wechsel_mapping(u_t, u_s, k=1, specials=np.array([[0, 0]]))
        >>> core.mapping.counts(), core.mapping.row(1)[0].tolist()
        ({'special': 1, 'copied': 0, 'combined': 1, 'fallback': 1}, [1])
    """
    n_target, n_source = int(len(u_target)), int(len(u_source))
    specials, tmask, smask = _checked_masks(n_target, n_source, specials, target_mask, source_mask, special_candidates)
    rows = np.flatnonzero(tmask)
    nb = wechsel_weights(
        np.asarray(u_target)[rows] if len(rows) < n_target else u_target, u_source, k, tau,
        source_mask=smask, chunk_rows=chunk_rows, screen=screen,
    )
    kk = nb.indices.shape[1]
    combined = rows[nb.has_vector]

    mapping = _csr_mapping(n_target, n_source, specials, combined, nb)
    top1 = nb.similarities[nb.has_vector, 0] if len(combined) else np.zeros(0, np.float32)
    gaps = nb.kth_gap[nb.has_vector] if nb.kth_gap is not None else np.full(len(combined), np.inf)
    near = combined[gaps < near_tie]
    stats = {
        "k": int(kk),
        "temperature": float(tau),
        "combined": int(len(combined)),
        "fallback_zero_vector": int(len(rows) - len(combined)),
        "fallback_excluded": int(n_target - len(rows) - len(specials)),
        "specials": int(len(specials)),
        "top1_cosine_mean": round(float(top1.mean()), 4) if len(top1) else None,
        "top1_weight_mean": round(float(nb.weights[nb.has_vector, 0].mean()), 4) if len(combined) else None,
        "near_ties": {
            "threshold": float(near_tie), "rows": int(len(near)), "exact": int(np.sum(gaps == 0)),
            "ids": near[:_MAX_LISTED].tolist(), "ids_truncated": bool(len(near) > _MAX_LISTED),
        },
        "similarity": nb.stats,
    }
    return WechselCore(mapping, nb, rows, stats)


def _checked_masks(n_target: int, n_source: int, specials: np.ndarray | None, target_mask: np.ndarray | None,
                   source_mask: np.ndarray | None, special_candidates: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(specials, target mask, source mask)`` of :func:`wechsel_mapping`, checked: specials are never combined
    and, unless ``special_candidates``, their sources are never neighbours."""
    specials = np.zeros((0, 2), dtype=np.int64) if specials is None else np.asarray(specials, dtype=np.int64).reshape(-1, 2)
    tmask = np.ones(n_target, dtype=bool) if target_mask is None else np.asarray(target_mask, dtype=bool).copy()
    smask = np.ones(n_source, dtype=bool) if source_mask is None else np.asarray(source_mask, dtype=bool).copy()
    if tmask.shape != (n_target,) or smask.shape != (n_source,):
        raise ValueError(f"target_mask/source_mask must have {n_target}/{n_source} entries, got {tmask.shape}/{smask.shape}")
    if len(specials) and (specials[:, 0].max() >= n_target or specials[:, 1].max() >= n_source or specials.min() < 0):
        raise ValueError("specials contain ids outside the target/source vocabularies")
    tmask[specials[:, 0]] = False
    if not special_candidates:
        smask[specials[:, 1]] = False
    return specials, tmask, smask


def _csr_mapping(n_target: int, n_source: int, specials: np.ndarray, combined: np.ndarray, nb: WechselNeighbours) -> TokenMapping:
    """The mapping's CSR rows: specials copied (one entry, weight 1), ``combined`` rows from their ``k`` neighbours."""
    kk = nb.indices.shape[1]
    prov = np.full(n_target, FALLBACK, dtype=np.int8)
    prov[combined] = COMBINED
    prov[specials[:, 0]] = SPECIAL
    counts = np.zeros(n_target, dtype=np.int64)
    counts[combined] = kk
    counts[specials[:, 0]] = 1
    indptr = np.zeros(n_target + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    weights = np.empty(int(indptr[-1]), dtype=np.float32)
    pos = (indptr[combined][:, None] + np.arange(kk)[None, :]).ravel()
    indices[pos] = nb.indices[nb.has_vector].ravel()
    weights[pos] = nb.weights[nb.has_vector].ravel()
    indices[indptr[specials[:, 0]]] = specials[:, 1]
    weights[indptr[specials[:, 0]]] = 1.0
    return TokenMapping(n_target, n_source, indptr, indices, weights, prov)
