"""Chunked float32 cosine blocks, their top-k, and exact sparsemax over them.

Pure functions of their arguments (no global state, no randomness):

* :func:`iter_cosine_chunks` / :func:`chunked_topk_cosine` — float32 cosine blocks and their
  top-k (Tik-to-Tok's fastText k-NN fallback);
* :func:`sparsemax_topk` / :func:`chunked_sparsemax_cosine` — exact sparsemax over cosine rows
  (FOCUS's anchor weights), float32.

The *exact* top-k (float64 cosines, ties to the lower key index) behind an adaptive screen —
WECHSEL's neighbour search — is :func:`methods._exact_topk.topk_cosine`.

Memory is bounded by ``chunk_rows x n_keys`` floats for the score block of one chunk (plus the
normalized copies of the inputs): a 33k x 17k similarity matrix is never materialized at once;
with ``chunk_rows=2048`` and 17k keys one block is ~140 MB.

Why sparsemax over a top-k slice is exact: for scores ``z`` sorted in decreasing order, the
sparsemax support is the prefix ``{1..K}`` with ``K = max{j : 1 + j * z_(j) > sum_{i<=j} z_(i)}``
and the threshold is ``tau = (sum_{i<=K} z_(i) - 1) / K`` (Martins & Astudillo 2016, the
condition holds exactly for ``j <= K``). Evaluating the condition on the ``k`` largest scores
therefore yields ``min(K, k)``. If that is ``< k`` the support is complete and ``tau`` is exact;
if it equals ``k`` the support may extend beyond the slice (it does iff ``z_(k+1) > tau_k``), so
those rows are recomputed with ``2k`` (then ``4k`` …, up to a full sort). This is the same
schedule as ``entmax.sparsemax(X, k=...)``; the result equals ``entmax.sparsemax`` on the full
rows (tests check this, including rows whose support exceeds the initial ``k``).

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, keys = rng.normal(size=(5, 8)), rng.normal(size=(100, 8))
    >>> vals, idx = chunked_topk_cosine(q, keys, k=3, chunk_rows=2)
    >>> vals.shape, idx.shape
    ((5, 3), (5, 3))
    >>> rows = chunked_sparsemax_cosine(q, keys, k=4, chunk_rows=2)
    >>> bool(np.allclose(np.add.reduceat(rows.weights, rows.indptr[:-1]), 1.0, atol=1e-5))
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from harness import progress as _progress

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "SparseRows",
    "normalize_rows",
    "iter_cosine_chunks",
    "chunked_topk_cosine",
    "sparsemax_topk",
    "chunked_sparsemax_cosine",
]

DEFAULT_CHUNK_ROWS = 2048
"""Rows of queries scored at once: 2048 x 17k anchors x 4 bytes ~ 140 MB per block."""

SPARSEMAX_BLOCK_BYTES = 8 * 2**20
"""The largest cosine block :func:`chunked_sparsemax_cosine` scores and slices at once (above 512 rows).
A block that stays in the last-level cache runs its product and top-k faster: on the FOCUS end-to-end
benchmark's 64k/32k files (25,298 rows x 6,662 anchors) blocks of 512 rows were faster than 2,048-row ones on
an idle 2-core machine, and below 512 rows the top-k slowed down, hence the floor; on the 32k/16k files
(3,078 anchors) the block size made no difference that repeated runs could tell apart. The whole method's
time is what ``benchmarks/bench_scaling.py --references`` measures."""


@dataclass
class SparseRows:
    """Row-sparse weights in CSR layout (one row per query).

    Attributes:
        indptr: int64, length ``n_rows + 1``.
        indices: int64 column (key) indices, length ``nnz``; within a row sorted by decreasing score.
        weights: float32 weights, length ``nnz``.
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return len(self.indptr) - 1

    def support_sizes(self) -> np.ndarray:
        """Number of stored entries per row (int64)."""
        return np.diff(self.indptr)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Column indices and weights of row ``i``."""
        a, b = self.indptr[i], self.indptr[i + 1]
        return self.indices[a:b], self.weights[a:b]


def _as_tensor(x: np.ndarray | torch.Tensor, name: str = "input") -> torch.Tensor:
    """``x`` as a float32 ``n x d`` tensor (no copy when it already is one)."""
    t = torch.as_tensor(x)
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(t.shape)}")
    return t


def normalize_rows(x: np.ndarray | torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """L2-normalize the rows of a matrix (float32 tensor); all-zero rows stay zero.

    Args:
        x: ``n x d`` array or tensor (any float dtype; converted to float32).
        eps: rows with norm below ``eps`` are left as they are (zero rows have cosine 0 to
            everything, rather than NaN).

    Returns:
        A new float32 ``n x d`` tensor.

    Example:
        >>> normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    t = _as_tensor(x)
    norms = torch.linalg.vector_norm(t, dim=1, keepdim=True)
    return t / torch.clamp(norms, min=eps)


def iter_cosine_chunks(
    queries: np.ndarray | torch.Tensor,
    keys: np.ndarray | torch.Tensor,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    normalized: bool = False,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start_row, cosine_block)`` for consecutive row blocks of ``queries``.

    Args:
        queries: ``n x d`` query vectors.
        keys: ``m x d`` key vectors.
        chunk_rows: rows per block; a block is a ``chunk_rows x m`` float32 tensor.
        normalized: set when both inputs already have unit rows (skips the normalization copies).

    Yields:
        ``(start, block)`` where ``block[i, j] = cos(queries[start + i], keys[j])``.

    Example:
        >>> [s for s, _ in iter_cosine_chunks(np.ones((5, 2)), np.ones((3, 2)), chunk_rows=2)]
        [0, 2, 4]
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    q = _as_tensor(queries, "queries") if normalized else normalize_rows(queries)
    k = _as_tensor(keys, "keys") if normalized else normalize_rows(keys)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"queries and keys differ in dimension: {q.shape[1]} vs {k.shape[1]}")
    kt = k.T.contiguous()
    with torch.no_grad():
        for start in range(0, q.shape[0], chunk_rows):
            yield start, q[start : start + chunk_rows] @ kt


def chunked_topk_cosine(
    queries: np.ndarray | torch.Tensor,
    keys: np.ndarray | torch.Tensor,
    k: int,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    normalized: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most cosine-similar keys of every query, computed in row chunks.

    Args:
        queries: ``n x d`` query vectors.
        keys: ``m x d`` key vectors.
        k: neighbours per query (clipped to ``m``).
        chunk_rows: query rows scored at once (memory ~ ``chunk_rows * m * 4`` bytes).
        normalized: both inputs already have unit rows.

    Returns:
        ``(values, indices)``: float32 ``n x k`` cosines sorted in decreasing order and the int64
        key indices they belong to.

    Example:
        >>> v, i = chunked_topk_cosine(np.eye(3), np.eye(3), k=1)
        >>> i.ravel().tolist(), v.ravel().tolist()
        ([0, 1, 2], [1.0, 1.0, 1.0])
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n, m = int(torch.as_tensor(queries).shape[0]), int(torch.as_tensor(keys).shape[0])
    kk = min(k, m)
    values = np.empty((n, kk), dtype=np.float32)
    indices = np.empty((n, kk), dtype=np.int64)
    if m == 0:
        return values, indices
    bar = _progress.counter("similarity search (query rows)", n)
    for start, block in iter_cosine_chunks(queries, keys, chunk_rows=chunk_rows, normalized=normalized):
        v, i = torch.topk(block, kk, dim=1, sorted=True)
        values[start : start + len(block)] = v.numpy()
        indices[start : start + len(block)] = i.numpy()
        bar.update(len(block))
    bar.close()
    return values, indices


def _threshold_on_sorted(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparsemax threshold and support size from scores sorted in decreasing order (per row)."""
    cumsum = z.cumsum(dim=1) - 1
    rho = torch.arange(1, z.shape[1] + 1, dtype=z.dtype, device=z.device)
    support = (rho * z > cumsum).sum(dim=1, keepdim=True)  # >= 1 always (the max satisfies it)
    tau = cumsum.gather(1, support - 1) / support.to(z.dtype)
    return tau, support.squeeze(1)


def sparsemax_topk(scores: torch.Tensor | np.ndarray, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact row-wise sparsemax, computed on the ``k`` largest scores of each row.

    The threshold is computed on a top-``k`` slice; rows whose support fills the whole slice
    (so it may extend beyond it) are recomputed with ``2k``, ``4k`` … until the support fits or
    the slice is the full row. The result equals ``entmax.sparsemax(scores, dim=-1)`` restricted
    to its nonzeros (scores are shifted by their row maximum, as entmax does).

    Args:
        scores: ``n x m`` float scores (float32 tensor or array).
        k: initial slice width; a little above the expected support size is fastest.

    Returns:
        ``(weights, indices)``, both ``n x w`` with ``w`` the widest slice any row needed (``>= min(k, m)``):
        per row, the slice's columns in decreasing score order with their sparsemax weights.
        Entries outside the support have weight 0; padding (rows that needed a narrower slice
        than ``w``) has weight 0 and index -1. Each row's weights sum to 1.

    Example:
        >>> w, i = sparsemax_topk(torch.tensor([[0.9, 0.1, 0.85, -1.0]]), k=3)
        >>> i.tolist(), [round(x, 3) for x in w[0].tolist()]
        ([[0, 2, 1]], [0.525, 0.475, 0.0])
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    x = _as_tensor(scores, "scores")
    n, m = x.shape
    if m == 0:
        raise ValueError("sparsemax over an empty row (no keys)")
    with torch.no_grad():
        kk = min(k, m)
        vals, idx = torch.topk(x, kk, dim=1, sorted=True)
        # Shift by the row maximum, as entmax does, but only on the slice: x_i - max is the same
        # float operation either way, and it saves two passes over the full score block.
        vals = vals - vals[:, :1]
        tau, supp = _threshold_on_sorted(vals)
        weights = torch.clamp(vals - tau, min=0)
        unsolved = (supp == kk) if kk < m else torch.zeros(n, dtype=torch.bool)
        if not bool(unsolved.any()):
            return weights, idx
        rows = torch.nonzero(unsolved).squeeze(1)
        w2, i2 = sparsemax_topk(x[rows], min(2 * kk, m))
        width = w2.shape[1]
        out_w = torch.zeros((n, width), dtype=weights.dtype)
        out_i = torch.full((n, width), -1, dtype=torch.int64)
        out_w[:, :kk] = weights
        out_i[:, :kk] = idx
        out_w[rows] = w2
        out_i[rows] = i2
        return out_w, out_i


def chunked_sparsemax_cosine(
    queries: np.ndarray | torch.Tensor,
    keys: np.ndarray | torch.Tensor,
    *,
    k: int = 32,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    normalized: bool = False,
) -> SparseRows:
    """Row-wise ``sparsemax(cos(query, keys))``, in chunks, returned as sparse rows.

    Threads: every step is a torch op (normalization, the cosine block's matrix product, top-k,
    cumulative sums, thresholds), so the search runs on all of torch's intra-op threads
    (``torch.set_num_threads``; by default one per core). Each row's result is computed in the same
    order whatever the thread count: the product's output is split across threads, not a row's
    ``d``-term sums, and the other steps work row by row. Tests compare FOCUS mappings computed
    with 1 and 2 threads bit for bit.

    Args:
        queries: ``n x d`` query vectors.
        keys: ``m x d`` key vectors (``m >= 1``).
        k: initial top-k slice for :func:`sparsemax_topk` (exactness does not depend on it).
        chunk_rows: the most query rows scored at once (a memory bound); blocks are smaller when
            ``chunk_rows`` rows of scores would exceed :data:`SPARSEMAX_BLOCK_BYTES` (never below 512
            rows). The result does not depend on the block size.
        normalized: both inputs already have unit rows.

    Returns:
        :class:`SparseRows` with the support of each row (weights > 0, summing to 1), entries
        in decreasing score order.

    Example:
        >>> r = chunked_sparsemax_cosine(np.eye(2), np.eye(2))
        >>> r.indices.tolist(), r.weights.tolist()
        ([0, 1], [1.0, 1.0])
    """
    n = int(torch.as_tensor(queries).shape[0])
    m = int(torch.as_tensor(keys).shape[0])
    chunk_rows = min(chunk_rows, max(512, SPARSEMAX_BLOCK_BYTES // max(4 * m, 1))) if chunk_rows >= 1 else chunk_rows
    counts = np.zeros(n, dtype=np.int64)
    idx_parts: list[np.ndarray] = []
    w_parts: list[np.ndarray] = []
    bar = _progress.counter("sparsemax over cosine similarities (query rows)", n)
    for start, block in iter_cosine_chunks(queries, keys, chunk_rows=chunk_rows, normalized=normalized):
        w, i = sparsemax_topk(block, k)
        mask = w > 0
        counts[start : start + len(block)] = mask.sum(dim=1).numpy()
        idx_parts.append(i[mask].numpy())  # boolean indexing is row-major: rows stay in order
        w_parts.append(w[mask].numpy())
        bar.update(len(block))
    bar.close()
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate(idx_parts) if idx_parts else np.zeros(0, dtype=np.int64)
    weights = np.concatenate(w_parts).astype(np.float32) if w_parts else np.zeros(0, dtype=np.float32)
    return SparseRows(indptr, indices.astype(np.int64), weights)

