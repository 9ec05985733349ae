"""Deterministic synthetic inputs for FOCUS benchmarks, at XLM-R scale by default.

Shapes follow the paper's German setting: a 250,002-token source vocabulary with d=768
(XLM-R base), a 50,000-token target vocabulary, ~17k overlapping tokens, 300-d auxiliary vectors
of which ~85% exist (minCount). Auxiliary vectors have cluster structure (tokens of one "topic"
share a center), so that sparsemax supports are small, as with real fastText similarities, rather
than the near-uniform similarities of isotropic noise.

Example:
    >>> x = make_inputs(scale=0.01, seed=0)
    >>> x.source_embeddings.shape, x.aux.shape
    ((2500, 768), (500, 300))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

XLMR_SOURCE_VOCAB = 250_002
XLMR_DIM = 768
TARGET_VOCAB = 50_000
OVERLAP = 17_000
AUX_DIM = 300
AUX_COVERAGE = 0.85
N_SPECIALS = 5
TOKENS_PER_CLUSTER = 25
CLUSTER_NOISE = 1.0


@dataclass
class SyntheticFocusInputs:
    """Arrays for :func:`methods.focus.focus_mapping` plus the source matrix.

    Attributes:
        n_source / n_target: vocabulary sizes.
        source_embeddings: float32 ``n_source x 768``.
        specials: ``(5, 2)`` ``[target, source]`` pairs (ids 0..4 on both sides).
        overlap: ``(n, 2)`` ``[target, source]`` pairs (distinct targets and sources).
        aux: float32 ``n_target x 300`` auxiliary vectors (zero rows where ``has_aux`` is False).
        has_aux: boolean ``n_target`` mask.
    """

    n_source: int
    n_target: int
    source_embeddings: np.ndarray
    specials: np.ndarray
    overlap: np.ndarray
    aux: np.ndarray
    has_aux: np.ndarray

    def describe(self) -> dict:
        """Sizes, for printing and for the bench record."""
        anchors = int(self.has_aux[self.overlap[:, 0]].sum())
        additional = self.n_target - len(self.specials) - len(self.overlap)
        return {
            "n_source": self.n_source, "n_target": self.n_target, "dim": int(self.source_embeddings.shape[1]),
            "aux_dim": int(self.aux.shape[1]), "overlap": int(len(self.overlap)), "anchors": anchors,
            "additional": int(additional), "with_aux": int(self.has_aux.sum()),
        }


def make_inputs(scale: float = 1.0, seed: int = 0) -> SyntheticFocusInputs:
    """Build the synthetic inputs (deterministic in ``scale`` and ``seed``).

    Args:
        scale: multiplies the vocabulary and overlap sizes (dimensions stay 768 and 300).
        seed: generator seed.

    Returns:
        :class:`SyntheticFocusInputs`. The source matrix is generated directly in float32
        (no float64 temporary), so peak memory is the arrays themselves.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    rng = np.random.default_rng(seed)
    n_source = max(int(round(XLMR_SOURCE_VOCAB * scale)), 64)
    n_target = max(int(round(TARGET_VOCAB * scale)), 32)
    n_overlap = min(max(int(round(OVERLAP * scale)), 4), n_target - N_SPECIALS - 1)

    source = rng.standard_normal((n_source, XLMR_DIM), dtype=np.float32)
    source *= np.float32(0.05)

    specials = np.stack([np.arange(N_SPECIALS), np.arange(N_SPECIALS)], axis=1).astype(np.int64)
    tgt_ids = N_SPECIALS + rng.permutation(n_target - N_SPECIALS)[:n_overlap]
    src_ids = N_SPECIALS + rng.permutation(n_source - N_SPECIALS)[:n_overlap]
    overlap = np.stack([np.sort(tgt_ids), src_ids], axis=1).astype(np.int64)

    n_clusters = max(n_target // TOKENS_PER_CLUSTER, 1)
    centers = rng.standard_normal((n_clusters, AUX_DIM), dtype=np.float32)
    cluster = rng.integers(0, n_clusters, size=n_target)
    aux = rng.standard_normal((n_target, AUX_DIM), dtype=np.float32)
    aux *= np.float32(CLUSTER_NOISE)
    aux += centers[cluster]
    has_aux = rng.random(n_target) < AUX_COVERAGE
    has_aux[:N_SPECIALS] = False
    aux[~has_aux] = 0.0
    return SyntheticFocusInputs(n_source, n_target, source, specials, overlap, aux, has_aux)
