"""The exact top-k cosine search with an adaptive screen (WECHSEL's neighbours): :func:`topk_cosine`.

Every query row's ``k`` nearest keys by float64 cosine, exact ties to the lower key index, found
without ever materializing the ``n x m`` similarity matrix: each chunk of query rows is *screened*
by a matrix product in bfloat16, float32 or float64 (:class:`_Screens`), every key the screen's
proven error bound cannot rule out is rescored exactly (:func:`_select_chunk`,
:func:`methods._exact_topk_keys._exact_cosines`), and ``screen="auto"`` moves to a finer screen when a chunk keeps more
candidates than the finer product would cost (:func:`_escalation_budget`). Keys with identical
vectors are searched once (:mod:`methods._exact_topk_keys`). The result does not depend on the screen, the
chunk size or the thread count (``tests/test_similarity.py``).

The float32 cosine blocks and sparsemax of FOCUS and Tik-to-Tok are :mod:`methods._similarity`.

Example:
    >>> t = topk_cosine(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 0.1]]), 1)
    >>> t.indices.tolist()
    [[1]]
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from harness import progress as _progress
from methods._exact_topk_keys import (
    _duplicate_representatives,
    _exact_pairs,
    _expand_groups,
    _group_keys,
    _KeyGroups,
    _top_by_value_then_position,
)
from methods._similarity import _as_tensor

logger = logging.getLogger(__name__)

__all__ = ["EXACT_CHUNK_ROWS", "SCREENS", "TopK", "resolve_screen", "topk_cosine"]

EXACT_CHUNK_ROWS = 512
"""Query rows screened at once by :func:`topk_cosine`: 512 x 250k keys is 256 MB in bfloat16 (512 MB in float32)."""

SCREENS = ("bf16", "fp32", "fp64")
"""Screen precisions of :func:`topk_cosine`, cheapest first; ``auto`` climbs this list when candidates explode."""

_BLOCK_BYTES = 512 * 2**20
"""Upper bound on one score block; the chunk is lowered to respect it for huge key sets."""

_U_BF16 = 2.0**-8
"""Unit roundoff of bfloat16 (8 significant bits, round to nearest)."""

_SCREEN_COST = {"bf16": 0.5, "fp32": 1.0, "fp64": 2.0}
"""Cost of one screen score relative to a float32 one (a ``d``-term product in a matrix multiply):
bfloat16 runs at about twice the float32 rate on CPUs with native bf16 (measured 2.2x on AVX512-BF16),
float64 at half of it (half the SIMD lanes)."""

_RESCORE_COST = 1024.0
"""Cost of rescoring one candidate exactly (gather the blocks of screen scores it lies in, gather its ``d``
floats, ``d`` float64 products and a sequential sum, selection), in the units of :data:`_SCREEN_COST`.
Measured on WECHSEL's 50k x 213k search (d = 100, 2 cores): ~4 us of CPU per rescored candidate of a
bf16 chunk against ~4-7 ns per key of a float32 screen row; with 256 (the cost of the products alone)
``auto`` kept bf16 screens whose candidates (mean 159 per row, a tail of ~1600) cost 3x an fp32 screen's
(~10 per row). Checked again once candidates were rescored as a flat list (only those ``>= v_k - 2 eps``) on the
32k x 16k end-to-end bench (d = 100, one thread): a forced bf16 screen (96 candidates per row, spread over a
third of the blocks) took 5.5 s of CPU against 2.8 s for fp32 (11 per row), so the budget still sends ``auto``
to fp32 there. It only steers ``screen="auto"``, never the result."""


def resolve_screen(screen: str) -> str:
    """The first screen of :func:`topk_cosine` for a ``screen`` setting (``auto`` asks the CPU).

    ``auto`` starts with bf16 on CPUs with native bfloat16 matrix instructions (AVX512-BF16/AMX),
    else fp32; explicit ``bf16``/``fp32``/``fp64`` are returned as given.

    Example:
        >>> resolve_screen("fp64")
        'fp64'
    """
    if screen not in ("auto", *SCREENS):
        raise ValueError(f"screen must be 'auto', 'bf16', 'fp32' or 'fp64', got {screen!r}")
    if screen != "auto":
        return screen
    try:
        native = bool(torch.cpu._is_avx512_bf16_supported()) or bool(torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch
        native = False
    return "bf16" if native else "fp32"


def _gamma(d: int, unit: float = 2.0**-24) -> float:
    """Higham's ``gamma_d``: bound on the relative error of a d-term sum (float32 unit roundoff by default)."""
    t = d * unit
    return t / (1.0 - t)


def _screen_err(screen: str, d: int, magnitude: torch.Tensor) -> torch.Tensor:
    """Bound on ``|screen score - exact cosine|`` for screen scores of absolute value ``<= magnitude``.

    Exact: ``sum_i qn_i k_i * inv_norm`` in float64 from the float32 unit query ``qn`` and the
    float32 key. bf16 screen: both unit vectors rounded to bfloat16 (relative error
    ``u = 2^-8`` per component, so ``|â·b̂ - a·b| <= (2u + u²) ||a|| ||b||``), products exact in
    float32 and summed in float32 (``gamma_d`` relative to ``sum |â_i b̂_i| <= (1 + u)²``), the
    result rounded to bfloat16 (``u |s| / (1 - u)`` in terms of the rounded score ``s``). fp32
    screen: a float32 GEMM of the unit vectors (``gamma_d``) against float64 (few ulps). Both
    carry slack (``1e-4`` / ``5e-5``) for the float32 normalization and DAZ/FTZ. fp64 screen:
    the float32 key times its float32 inverse norm is exact in float64, so screen and exact
    value are two float64 sums of the same exact products in different orders (each within
    ``gamma_d`` of the true sum, norms within ``1 + 2 gamma_d(float32)`` of 1); ``4 gamma_d`` plus
    ``1e-12`` of slack.
    """
    if screen == "fp64":
        return torch.full_like(magnitude, 4.0 * _gamma(d, 2.0**-53) + 1e-12)
    g = _gamma(d)
    if screen == "fp32":
        return torch.full_like(magnitude, 4.0 * g + 5e-5)
    u = _U_BF16
    return (2 * u + u * u) * (1 + 1e-6) + 2 * g * (1 + u) ** 2 + u * magnitude / (1 - u) + 1e-4


def _screen_eps(screen: str, d: int, v_top: torch.Tensor, v_k: torch.Tensor) -> torch.Tensor:
    """Per-row bound ``eps`` on ``|screen score - exact cosine|`` for every score in ``[v_k - 2 eps, v_top]``.

    ``v_top`` is the row's best screen score and ``v_k`` its ``k``-th best. Every score in that
    interval has ``|s| <= M = max(|v_top|, |v_k| + 0.05)`` because ``2 eps < 0.05``, so
    ``eps0 = _screen_err(M)`` (see :func:`_screen_err`) holds there; and on ``[v_k - 2 eps1, v_top]`` with
    ``eps1 = _screen_err(max(|v_top|, |v_k| + 2 eps0)) <= eps0`` (a subset), which is returned: the bf16
    screen, whose error grows with the magnitude, gets the margin of the scores actually near ``v_k``.
    """
    eps0 = _screen_err(screen, d, torch.maximum(v_top.abs(), v_k.abs() + 0.05))
    return _screen_err(screen, d, torch.maximum(v_top.abs(), v_k.abs() + 2 * eps0))


@dataclass
class TopK:
    """Result of :func:`topk_cosine`.

    Attributes:
        indices: ``n x k`` int64 key indices, by decreasing cosine (identical keys: lower index first);
            ``-1`` in rows that have no vector.
        similarities: ``n x k`` float32 cosines (0 in rows without a vector).
        has_vector: ``n`` bool, the query rows with a nonzero vector.
        stats: JSON-serializable facts (screens used, candidates rescored, timings).
        kth_gap: ``n`` float64: exact cosine of the k-th neighbour minus that of the (k+1)-th
            (``>= 0``; 0 for an exact tie straddling the cut; ``inf`` where there is no (k+1)-th
            key or no vector). A row with a small gap is a *near tie*: another implementation
            whose cosines differ in the last float bits may choose a different k-th neighbour.
    """

    indices: np.ndarray
    similarities: np.ndarray
    has_vector: np.ndarray
    stats: dict
    kth_gap: np.ndarray | None = None



def _base_width(kk: int) -> int:
    """The candidates a row is assumed to need in a screen that separates its neighbours (the escalation
    budget's baseline, :func:`_escalation_budget`)."""
    return max(32, 2 * kk + 12)


def _escalation_budget(mode: str, rows: int, m: int, kk: int) -> float:
    """Candidates a chunk screened in ``mode`` may rescore before ``auto`` moves to the next screen.

    The next screen costs ``(cost(next) - cost(mode)) x m`` more per row (:data:`_SCREEN_COST`)
    and, by its smaller error margin, is assumed to leave about the base width of candidates; the
    current screen is kept while its extra candidates cost less (:data:`_RESCORE_COST` each). The
    rescoring is thereby bounded by about the cost of a dense float64 product, twice a float32 one.
    """
    nxt = SCREENS[SCREENS.index(mode) + 1]
    return rows * (_base_width(kk) + (_SCREEN_COST[nxt] - _SCREEN_COST[mode]) * m / _RESCORE_COST)


_PROBE_ROWS = 64
"""``screen="auto"``: query rows of the first bf16 chunk, which decides whether bf16 pays (a chunk that escalates is
screened again in the finer screen, so a small first chunk wastes little when it does)."""

_DEFER_SHARE = 0.25
"""``screen="auto"``: a chunk escalates to the next screen as a whole (for good) when more than this share
of its rows need more candidates than :func:`_row_cap`; fewer such rows are screened again on their own."""


def _row_cap(mode: str, m: int, kk: int) -> float | None:
    """``auto``: the candidates a row may need in ``mode`` before it is screened again in the next finer
    screen on its own (the per-row form of :func:`_escalation_budget`); ``None`` for the finest screen."""
    if mode == SCREENS[-1]:
        return None
    return _escalation_budget(mode, 1, m, kk)


@dataclass
class _Selected:
    """Exact top of one chunk (see :func:`_select_chunk`)."""

    pos: torch.Tensor
    """``c x kk`` positions into the screened keys, by (decreasing exact cosine, position)."""
    values: torch.Tensor
    """``c x kk`` float64 exact cosines."""
    candidates: int
    """Candidates rescored exactly."""
    widest: int
    """Widest candidate set of a row."""
    deferred: torch.Tensor | None = None
    """Rows left for a finer screen (``row_cap``; their ``pos``/``values`` rows are unset), or ``None``."""


class _Escalate(Exception):
    """Raised by :func:`_select_chunk` when the candidates exceed the budget (before any rescoring)."""

    def __init__(self, per_row: float) -> None:
        super().__init__(per_row)
        self.per_row = per_row


_SELECT_BLOCK = 64
"""Columns per block of a screened row: one pass takes every block's maximum, and only the blocks whose maximum
can reach the row's threshold are looked at again (:func:`_gather_rows`)."""


@dataclass
class _Gathered:
    """Rows of a screened chunk with every entry that can be a candidate (see :func:`_gather_rows`)."""

    rows: torch.Tensor
    """Chunk rows of this group."""
    values: torch.Tensor
    """``r x g`` screen scores: a superset of every row's candidates (scores ``>= thr``), no padding."""
    blocks: torch.Tensor | None
    """``r x b`` the blocks gathered per row (``values`` holds their scores, then the short last block's);
    ``None``: ``values`` are the whole rows."""
    eps: torch.Tensor
    """Per row, the screen's error bound (:func:`_screen_eps`)."""
    need: torch.Tensor
    """Per row, its candidates: screen scores ``>= v_k - 2 eps``."""
    thr: torch.Tensor
    """Per row, that threshold ``v_k - 2 eps``."""
    found: tuple[torch.Tensor, torch.Tensor] | None = None
    """The candidates as ``(row in this group, column of values)`` pairs, row by row, when already found."""
    block: int = _SELECT_BLOCK
    """Columns per block."""
    main: int = 0
    """First column of the short last block (the columns after the whole blocks)."""

    @property
    def pos(self) -> torch.Tensor | None:
        """``r x g`` the positions (into the screened keys) of ``values``; ``None`` for whole rows."""
        if self.blocks is None:
            return None
        r, g = self.values.shape
        return self.positions(torch.arange(r).repeat_interleave(g), torch.arange(g).repeat(r)).view(r, g)

    def positions(self, r_idx: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        """The positions of the entries ``values[r_idx, col]`` (only those: most rows need a few)."""
        if self.blocks is None:
            return col
        width = self.blocks.shape[1] * self.block
        in_block = col < width
        blk = self.blocks[r_idx, torch.clamp(torch.div(col, self.block, rounding_mode="floor"), max=self.blocks.shape[1] - 1)]
        return torch.where(in_block, blk * self.block + col % self.block, self.main + col - width)

    def candidates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every candidate as a ``(row in this group, column of values)`` pair, grouped by row."""
        if self.found is None:
            self.found = torch.nonzero(self.values >= self.thr[:, None], as_tuple=True)
        return self.found


def _padded_by_row(r_idx: torch.Tensor, counts: torch.Tensor, values: torch.Tensor, fill: float | int) -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` of a flat list grouped by row (row ``r_idx``, ``counts`` per row) laid out as rows padded with ``fill``;
    also the slot of every entry in its row."""
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(len(r_idx)) - starts[r_idx]
    out = torch.full((len(counts), max(int(counts.max()), 1) if len(counts) else 1), fill, dtype=values.dtype)
    out[r_idx, slot] = values
    return out, slot


def _gather_rows(a: torch.Tensor, kk: int, mode: str, d: int, block: int = _SELECT_BLOCK) -> list[_Gathered]:
    """The entries of every row of the screen block ``a`` that can be candidates, with each row's bound and count.

    One pass over ``a`` takes the maximum of every block of ``block`` columns. The ``kk``-th largest
    block maximum ``L`` is at most the row's ``kk``-th best score ``v_k`` (``kk`` blocks hold a score
    of at least ``L``), and ``eps_up`` (the bound for magnitudes up to ``max(|L|, |v_top|)``) is at least
    the row's ``eps``, so every candidate (score ``>= v_k - 2 eps``) is at least ``lo = L - 2 eps_up``
    (less a margin for rounding the threshold) and lies in a block whose maximum is ``>= lo``: only
    those blocks (and the short last block) are gathered, rows grouped by how many blocks they need
    (powers of two; a row short of its group's width also gets blocks below ``lo``, whose scores can be
    no candidate). ``v_top``, ``v_k``, ``eps`` and the candidate count are then computed on the gathered
    scores ``>= lo`` exactly as on the whole row (the ``kk`` best scores are among them). Narrow rows, and
    rows that need half of their blocks, are taken whole.
    """
    c, m = a.shape
    sdt = torch.float64 if mode == "fp64" else torch.float32
    nb, main = m // block, (m // block) * block
    out = []
    if nb < 4 * kk + 16:
        parts = [(torch.arange(c), a, None)]
    else:
        a = a if a.stride(1) == 1 else a.contiguous()
        blocked = a.as_strided((c, nb, block), (a.stride(0), block, 1))  # a view: no copy
        bmax = blocked.amax(2).to(sdt)
        part = torch.from_numpy(np.partition(bmax.numpy(), nb - kk, axis=1)[:, nb - kk :])  # the kk largest, unordered
        v_top, low = part.amax(1), part[:, 0]
        if main < m:
            v_top = torch.maximum(v_top, a[:, main:].amax(1).to(sdt))
        eps_up = _screen_eps(mode, d, v_top, torch.maximum(low.abs(), v_top.abs())).to(sdt)
        lo = low - 2 * eps_up - 1e-6  # the margin covers rounding the threshold v_k - 2 eps in float32
        sel = bmax >= lo[:, None]
        nsel = sel.sum(1)
        size = torch.clamp(2 ** torch.ceil(torch.log2(nsel.to(torch.float64))), max=nb).to(torch.int64)
        parts = []
        for sz in torch.unique(size).tolist():
            rows = torch.nonzero(size == sz).squeeze(1)
            if sz * block >= m // 2:
                parts.append((rows, a[rows], None))
                continue
            # each row's blocks >= lo first, then as many others as its group's width asks (no sort)
            every = len(rows) == c  # the usual case: one width for the whole chunk, no row gathered
            s_r, n_r, lo_r = (sel, nsel, lo) if every else (sel[rows], nsel[rows], lo[rows])
            before = torch.cumsum(s_r, 1)  # blocks >= lo up to and including each block
            rank = torch.where(s_r, before - 1, n_r[:, None] + torch.arange(nb) - before)
            r_i, b_i = torch.nonzero(rank < sz, as_tuple=True)
            blocks = torch.empty((len(rows), sz), dtype=torch.int64)
            blocks[r_i, rank[r_i, b_i]] = b_i
            values = blocked[rows[:, None], blocks].reshape(len(rows), sz * block)
            if main < m:
                values = torch.cat([values, a[:, main:] if every else a[rows, main:]], 1)
            # v_top, v_k, eps and the candidates from the gathered scores >= lo (a few per row)
            r_lo, col = torch.nonzero(values >= lo_r[:, None], as_tuple=True)
            v_lo = values[r_lo, col].to(sdt)
            pad, _ = _padded_by_row(r_lo, torch.bincount(r_lo, minlength=len(rows)), v_lo, -torch.inf)
            vals = torch.topk(pad, kk, dim=1, sorted=True).values
            eps = _screen_eps(mode, d, vals[:, 0], vals[:, kk - 1])
            thr = vals[:, kk - 1] - 2 * eps
            is_cand = v_lo >= thr[r_lo]
            need = torch.bincount(r_lo[is_cand], minlength=len(rows))
            out.append(_Gathered(rows, values, blocks, eps, need, thr, (r_lo[is_cand], col[is_cand]), block, main))
    for rows, values, pos in parts:
        vals = torch.topk(values, kk, dim=1, sorted=True).values.to(sdt)
        eps = _screen_eps(mode, d, vals[:, 0], vals[:, kk - 1])
        thr = vals[:, kk - 1] - 2 * eps
        out.append(_Gathered(rows, values, pos, eps, (values >= thr[:, None]).sum(1), thr))
    return out


def _select_chunk(
    qn: torch.Tensor, a: torch.Tensor, mode: str, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor, kk: int,
    budget: float | None = None, row_cap: float | None = None,
) -> _Selected | None:
    """Exact top-``kk`` of every row of a screened chunk, or ``None`` if the screen's bound failed.

    The candidates of a row are its screen scores at or above the threshold ``v_k - 2 eps``
    (``v_k``: the ``kk``-th best screen score, ``eps``: :func:`_screen_eps`): they hold every key
    whose exact cosine can reach the exact ``kk``-th best (a key scoring below the threshold has
    an exact cosine below ``v_k - eps``, and at least ``kk`` keys have exact cosines of at least
    ``v_k - eps``), so the exact top-``kk`` among them is the exact top-``kk`` overall. Exactly
    those candidates are rescored, as one flat list of pairs (:func:`_exact_pairs`). With a
    ``budget`` (``screen="auto"``), a chunk whose candidates exceed it raises :class:`_Escalate`
    before anything is rescored. With a ``row_cap`` (``auto``), rows needing more candidates than
    that are not rescored but returned as ``deferred`` for a finer screen — unless they are more
    than :data:`_DEFER_SHARE` of the chunk, which then escalates as a whole (the budget counts the
    other rows' candidates). The bound is verified on every rescored candidate, and the top-``kk``
    is taken by decreasing float64 cosine, ties to the lower position.
    """
    c, m = a.shape
    d = qn.shape[1]
    groups = _gather_rows(a, kk, mode, d)
    need = torch.empty(c, dtype=torch.int64)
    for g in groups:
        need[g.rows] = g.need
    hard = need > row_cap if row_cap is not None else torch.zeros(c, dtype=torch.bool)
    n_hard = int(hard.sum())
    work = int(need[~hard].sum())
    if budget is not None and (work > budget or n_hard > _DEFER_SHARE * c):
        raise _Escalate(int(need.sum()) / c)
    out_pos = torch.empty((c, kk), dtype=torch.int64)
    out_val = torch.empty((c, kk), dtype=torch.float64)
    for g in groups:
        easy = ~hard[g.rows]
        if not bool(easy.any()):
            continue
        r_idx, col = g.candidates()
        keep = easy[r_idx]
        r_idx, col = r_idx[keep], col[keep]
        v = g.values[r_idx, col].to(g.eps.dtype)
        p = g.positions(r_idx, col)
        exact = _exact_pairs(qn, keys, cand, inv, g.rows[r_idx], p)
        tol = torch.maximum(g.eps[r_idx], _screen_err(mode, d, v.abs()))  # candidates below the top may be larger
        if bool(((v.to(torch.float64) - exact).abs() > tol.to(torch.float64)).any()):
            return None
        # the candidates of every easy row, padded: -inf cosines at a position no key has
        counts = g.need.masked_fill(~easy, 0)
        ex_pad, slot = _padded_by_row(r_idx, counts, exact, -torch.inf)
        pos_pad = torch.full_like(ex_pad, m, dtype=torch.int64)
        pos_pad[r_idx, slot] = p
        sel = torch.nonzero(easy).squeeze(1)
        out_pos[g.rows[sel]], out_val[g.rows[sel]] = _top_by_value_then_position(ex_pad[sel], pos_pad[sel], kk)
    widest = int(need[~hard].max()) if n_hard < c else 0
    return _Selected(out_pos, out_val, work, widest, torch.nonzero(hard).squeeze(1) if n_hard else None)


class _Screens:
    """The copies of the unit keys the screens multiply with (``d x m`` operands, :meth:`_make`), made when first needed.

    bf16/fp32: the float32 key times its float32 inverse norm, rounded to the screen's type;
    fp64: the same product, exact in float64. Moving to a finer screen frees the coarser copy. The
    copies of finer screens that only a few rows use (:meth:`blocked`) are kept too once made (at
    most one per screen: ``m x d`` floats, e.g. 250k keys x 300 dims = 600 MB in float64). The score
    blocks of :meth:`scores` are written into one reused buffer: a fresh 500 MB block per chunk costs
    the kernel's page zeroing on every chunk (about half of a float32 product's time, measured).
    """

    def __init__(self, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor) -> None:
        self.keys, self.cand, self.inv = keys, cand, inv
        self.mode: str | None = None
        self.matrix: torch.Tensor | None = None
        self.side: dict[str, torch.Tensor] = {}
        self.buffer: torch.Tensor | None = None

    def _make(self, mode: str) -> torch.Tensor:
        """The ``d x m`` right-hand operand of ``mode``'s product: bf16's stored so (faster with AMX tiles than a
        transposed view, ``benchmarks/bench_screen_product.py``), the others a view of their ``m x d`` copy."""
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}[mode]
        m, d = int(self.cand.numel()), self.keys.shape[1]
        kt = torch.empty((d, m) if mode == "bf16" else (m, d), dtype=dtype)
        by_key = kt.T if mode == "bf16" else kt
        for a in range(0, m, 65536):
            b = min(a + 65536, m)
            rows = self.keys[self.cand[a:b]]
            by_key[a:b] = (rows.to(dtype) * self.inv[a:b, None].to(dtype) if mode == "fp64"
                           else (rows * self.inv[a:b, None]).to(dtype))  # fmt: skip
        return by_key.T

    def scores(self, qn: torch.Tensor, mode: str) -> torch.Tensor:
        """Screen scores ``c x m`` of the unit queries ``qn`` in ``mode`` (valid until the next call)."""
        if mode != self.mode:
            self.matrix = self.buffer = None
            self.matrix = self.side.pop(mode, None)
            if self.matrix is None:
                self.matrix = self._make(mode)
            self.mode = mode
            for coarser in SCREENS[: SCREENS.index(mode)]:
                self.side.pop(coarser, None)
        c, m = qn.shape[0], self.matrix.shape[1]
        if self.buffer is None or self.buffer.shape[0] < c:
            self.buffer = None
            self.buffer = torch.empty((c, m), dtype=self.matrix.dtype)
        out = self.buffer[:c]
        torch.matmul(qn.to(self.matrix.dtype), self.matrix, out=out)
        return out

    def blocked(self, qn: torch.Tensor, mode: str) -> torch.Tensor:
        """Scores in ``mode`` for a few rows (the bf16 fallback, and rows screened again on their own in a
        finer screen), from the copy of the keys in ``mode``, made as :meth:`scores` makes it and kept."""
        if mode == self.mode:
            kt = self.matrix
        else:
            kt = self.side.get(mode)
            if kt is None:
                kt = self.side[mode] = self._make(mode)
        return qn.to(kt.dtype) @ kt

    def fp32_blocked(self, qn: torch.Tensor) -> torch.Tensor:
        """float32 scores (the rare fallback of a bf16 chunk)."""
        return self.blocked(qn, "fp32")


def _chunk_step(chunk_rows: int, m: int, mode: str) -> int:
    """Query rows per chunk: ``chunk_rows``, lowered so that one score block stays within :data:`_BLOCK_BYTES`."""
    return max(1, min(int(chunk_rows), _BLOCK_BYTES // max(1, m * (8 if mode == "fp64" else 4))))


def _check_inputs(q: torch.Tensor, keys: torch.Tensor, k: int, chunk_rows: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    if keys.shape[1] != q.shape[1]:
        raise ValueError(f"queries and keys differ in dimension: {q.shape[1]} vs {keys.shape[1]}")
    # a float64 sum is finite iff every float32 entry is (one pass, no n x d boolean temporary)
    if not bool(torch.isfinite(q.sum(dtype=torch.float64))):
        raise ValueError("queries contain non-finite values")
    if not bool(torch.isfinite(keys.sum(dtype=torch.float64))):
        raise ValueError("keys contain non-finite values")


def _usable_keys(keys: torch.Tensor, key_mask: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Positions of the keys that may be neighbours (nonzero, allowed by ``key_mask``), their float32 inverse norms."""
    k_norm = torch.linalg.vector_norm(keys, dim=1)
    usable = k_norm > 0
    if key_mask is not None:
        km = torch.as_tensor(np.asarray(key_mask, dtype=bool))
        if km.shape != usable.shape:
            raise ValueError(f"key_mask must have {len(usable)} entries, got {tuple(km.shape)}")
        usable &= km
    cand = torch.nonzero(usable).squeeze(1)
    if cand.numel() == 0:
        raise ValueError(f"no usable key: all {len(usable)} keys have a zero vector or are masked out")
    return cand, (1.0 / k_norm[cand]).to(torch.float32), len(usable)


def topk_cosine(
    queries: np.ndarray | torch.Tensor,
    keys: np.ndarray | torch.Tensor,
    k: int,
    *,
    key_mask: np.ndarray | None = None,
    chunk_rows: int = EXACT_CHUNK_ROWS,
    screen: str = "auto",
) -> TopK:
    """Exact top-``k`` cosine neighbours among ``keys`` for every query row, in row chunks.

    Query rows with a zero vector get no neighbours (``has_vector=False``); keys with a zero
    vector, or ``False`` in ``key_mask``, are never neighbours. Keys with bitwise-identical
    vectors (tokens that share a string) are searched once and share their cosine exactly.

    The result does not depend on ``screen``, ``chunk_rows`` or the number of torch threads:
    each chunk is first *screened* (a matrix product in bf16, fp32 or fp64), every key a screen
    cannot rule out (see :func:`_screen_eps`, :func:`_select_chunk`) is rescored exactly (float64
    from the float32 inputs, one dot product per pair, reported as float32), neighbours are
    ordered by float64 cosine, and exact ties go to the lower key index, also at the k-th place.
    ``screen="auto"`` adapts the screen's precision to the cosines (see :func:`_search`); explicit
    ``"bf16"``, ``"fp32"`` and ``"fp64"`` screen every chunk as given (for measurements). One
    neighbour more than ``k`` is found exactly, to report :attr:`TopK.kth_gap`.

    Args:
        queries: ``n x d`` query vectors (e.g. target subword embeddings).
        keys: ``m x d`` key vectors (e.g. source subword embeddings).
        k: neighbours per query (clipped to the number of usable keys).
        key_mask: optional boolean ``m`` mask of keys allowed as neighbours.
        chunk_rows: query rows scored at once (lowered so one score block stays <= 512 MB).
        screen: ``"auto"``, ``"bf16"``, ``"fp32"`` or ``"fp64"`` (see :func:`resolve_screen`).

    Returns:
        :class:`TopK`; its ``stats`` count the candidates rescored per row and the chunks per screen.

    Raises:
        ValueError: shapes disagree, non-finite values, or no usable key.

    Example:
        >>> t = topk_cosine(np.array([[1.0, 0.1], [0.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]), 2)
        >>> t.indices.tolist(), t.has_vector.tolist()
        ([[1, 2], [-1, -1]], [True, False])
    """
    # Stays whole: long by its docstring; the body (~40 lines) is the search's steps, each a helper.
    t0 = time.perf_counter()
    mode = resolve_screen(screen)
    q, keys_f = _as_tensor(queries, "queries"), _as_tensor(keys, "keys")
    n, d = q.shape
    with torch.no_grad():
        _check_inputs(q, keys_f, k, chunk_rows)
        q_norm = torch.linalg.vector_norm(q, dim=1)
        cand, inv, n_keys = _usable_keys(keys_f, key_mask)
        m = int(cand.numel())
        kk = min(int(k), m)
        ks = min(kk + 1, m)  # one neighbour more than kept: the gap after the k-th (near ties)
        groups = _group_keys(keys_f, cand, ks)
        ucand, uinv = cand[groups.unique], inv[groups.unique]
        rows = torch.nonzero(q_norm > 0).squeeze(1)
        # queries with bitwise-identical vectors ("▁x" and "x" of a target vocabulary) are searched once
        qrep = _duplicate_representatives(q, rows) if len(rows) > 1 else None
        first = rows if qrep is None else rows[qrep == torch.arange(len(rows))]
        run = _ChunkRun(q, q_norm, keys_f, ucand, uinv, min(ks, len(ucand)), mode, adaptive=screen == "auto" and mode != SCREENS[-1])
        t_prep = time.perf_counter() - t0
        out_idx, out_sim, out_gap = _search(run, first, n, cand, groups, kk, ks, chunk_rows)
        if qrep is not None:
            dup = torch.nonzero(qrep != torch.arange(len(rows))).squeeze(1)
            src, dst = rows[qrep[dup]].numpy(), rows[dup].numpy()
            out_idx[dst], out_sim[dst], out_gap[dst] = out_idx[src], out_sim[src], out_gap[src]
    has = np.zeros(n, dtype=bool)
    has[rows.numpy()] = True
    stats = {
        "screen": run.mode, "screen_requested": screen, "screen_switched": "; ".join(run.switches) or None,
        "screen_chunks": run.chunks, "rows_rescreened": run.rescreened, "queries": int(n), "queries_with_vector": int(len(rows)),
        "duplicate_queries": int(len(rows) - len(first)), "keys": n_keys,
        "keys_usable": m, "duplicate_keys": groups.duplicates, "k": kk, "dim": int(d),
        "chunk_rows": _chunk_step(chunk_rows, len(ucand), run.mode),
        "candidates_per_row": round(run.n_cand / max(len(first), 1), 2), "widest_candidate_set": run.widest,
        "fallback_chunks": run.n_fallback, "threads": torch.get_num_threads(),
        "prepare_s": round(t_prep, 3), "score_s": round(run.t_score, 3), "rescore_s": round(run.t_select, 3),
        "total_s": round(time.perf_counter() - t0, 3),
    }
    return TopK(out_idx, out_sim, has, stats, out_gap)


def _search(run: _ChunkRun, rows: torch.Tensor, n: int, cand: torch.Tensor, groups: _KeyGroups, kk: int, ks: int,
            chunk_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunk loop of :func:`topk_cosine`: neighbours (key ids), float32 cosines and k-th gaps of the query ``rows``.

    ``screen="auto"`` starts with bf16 where the CPU multiplies bfloat16 natively (else fp32) and is
    adaptive: a chunk whose candidates would cost more to rescore than the next finer screen
    (:func:`_escalation_budget`) is screened again in that precision, before any rescoring, and so are
    the chunks after it (``stats["screen_switched"]`` says why). A few hard rows do not move a chunk:
    rows needing more candidates than :func:`_row_cap` (a query whose best keys are a cluster of keys
    pointing the same way, which only a float64 screen tells apart) are screened again on their own in
    the finer screen (``stats["rows_rescreened"]``), as long as they are at most :data:`_DEFER_SHARE` of
    the chunk. With concentrated cosines (word fastText vectors trained on a few MB: the 10th best
    neighbour within a few thousandths of the best) a bf16 or even fp32 error margin keeps most of a
    row; the fp64 screen's margin (~1e-13) keeps about ``k``, so the rescoring stays bounded and the
    whole search costs at most about a dense float64 product. If a screen's error bound is ever
    violated (checked on every rescored pair) a bf16 chunk is rescreened in float32.
    """
    out_idx = np.full((n, kk), -1, dtype=np.int64)
    out_sim = np.zeros((n, kk), dtype=np.float32)
    out_gap = np.full(n, np.inf, dtype=np.float64)
    s = 0
    bar = _progress.counter("similarity search (query rows)", len(rows))
    while s < len(rows):
        step = _chunk_step(chunk_rows, len(run.cand), run.mode)
        if run.adaptive and run.mode == SCREENS[0] and not any(run.chunks.values()):
            step = min(step, _PROBE_ROWS)  # auto's first bf16 chunk is small: on concentrated cosines it is redone
        rr = rows[s : s + step]
        top = run.select(rr)
        if top is None:  # moved to a finer screen: cut the chunk again for its block size
            continue
        pos, val = _expand_groups(*top, groups, ks)
        out_idx[rr.numpy()] = cand[pos[:, :kk]].numpy()
        out_sim[rr.numpy()] = val[:, :kk].to(torch.float32).numpy()
        if ks > kk:
            out_gap[rr.numpy()] = (val[:, kk - 1] - val[:, kk]).numpy()
        s += len(rr)
        bar.update(len(rr))
    bar.close()
    return out_idx, out_sim, out_gap


class _ChunkRun:
    """The state of one :func:`topk_cosine` search across its chunks: screen and counters."""

    def __init__(self, q, q_norm, keys, cand, inv, kr: int, mode: str, adaptive: bool) -> None:
        self.q, self.q_norm, self.keys, self.cand, self.inv, self.kr = q, q_norm, keys, cand, inv, kr
        self.mode, self.adaptive = mode, adaptive
        self.screens = _Screens(keys, cand, inv)
        self.switches: list[str] = []
        self.chunks = {s: 0 for s in SCREENS}
        self.rescreened = {s: 0 for s in SCREENS[1:]}
        self.n_cand = self.widest = self.n_fallback = 0
        self.t_score = self.t_select = 0.0

    def select(self, rr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Exact top-``kr`` (positions into the screened keys, float64 cosines) of the query rows ``rr``.

        Returns ``None`` when ``auto`` found too many candidates for the current screen: the run
        has moved to the next finer one (for good) and the caller screens the chunk again. A
        chunk whose bf16 bound fails is rescreened in float32 here.
        """
        qn = self.q[rr] * (1.0 / self.q_norm[rr]).to(torch.float32)[:, None]
        m = int(self.cand.numel())
        ts = time.perf_counter()
        a = self.screens.scores(qn, self.mode)
        t1 = time.perf_counter()
        self.t_score += t1 - ts
        budget = _escalation_budget(self.mode, len(rr), m, self.kr) if self.adaptive else None
        row_cap = _row_cap(self.mode, m, self.kr) if self.adaptive else None
        try:
            res = _select_chunk(qn, a, self.mode, self.keys, self.cand, self.inv, self.kr, budget, row_cap)
        except _Escalate as e:
            nxt = SCREENS[SCREENS.index(self.mode) + 1]
            self.switches.append(f"{self.mode} screen kept {e.per_row:.0f} candidates per row of {m} keys "
                                 f"(budget {budget / len(rr):.0f}); {nxt} screen from then on")
            logger.info("topk_cosine: %s", self.switches[-1])
            self.mode, self.adaptive = nxt, nxt != SCREENS[-1]
            return None
        finally:
            self.t_select += time.perf_counter() - t1
        if res is None:  # the screen's error bound failed: redo this chunk with a float32 screen
            if self.mode != "bf16":
                raise RuntimeError(f"topk_cosine: {self.mode} scores exceed their error bound (is TF32 or a non-IEEE BLAS in use?)")
            self.n_fallback += 1
            logger.warning("topk_cosine: bf16 screen exceeded its error bound in one chunk; rescreening it in float32")
            res = _select_chunk(qn, self.screens.fp32_blocked(qn), "fp32", self.keys, self.cand, self.inv, self.kr)
            if res is None:
                raise RuntimeError("topk_cosine: float32 scores exceed their error bound (is TF32 or a non-IEEE BLAS in use?)")
        self.chunks[self.mode] += 1
        self.n_cand += res.candidates
        self.widest = max(self.widest, res.widest)
        if res.deferred is not None:
            self._finish_deferred(qn, res, self.mode)
        return res.pos, res.values

    def _finish_deferred(self, qn: torch.Tensor, res: _Selected, mode: str) -> None:
        """Fill the rows ``res`` deferred: screened again on their own in the next finer screen (and, if
        some of them need it, the one after), selected exactly as every other row."""
        rows = res.deferred
        nxt = SCREENS[SCREENS.index(mode) + 1]
        m = int(self.cand.numel())
        ts = time.perf_counter()
        a = self.screens.blocked(qn[rows], nxt)
        t1 = time.perf_counter()
        self.t_score += t1 - ts
        sub = _select_chunk(qn[rows], a, nxt, self.keys, self.cand, self.inv, self.kr, None, _row_cap(nxt, m, self.kr))
        self.t_select += time.perf_counter() - t1
        if sub is None:
            raise RuntimeError(f"topk_cosine: {nxt} scores exceed their error bound (is TF32 or a non-IEEE BLAS in use?)")
        self.rescreened[nxt] += len(rows)
        self.n_cand += sub.candidates
        self.widest = max(self.widest, sub.widest)
        if sub.deferred is not None:
            self._finish_deferred(qn[rows], sub, nxt)
        res.pos[rows], res.values[rows] = sub.pos, sub.values
