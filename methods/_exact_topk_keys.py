"""Key-side helpers of the exact top-k search (:mod:`methods._exact_topk`): keys with bitwise-identical
vectors grouped and searched once, and the exact float64 rescoring of candidate pairs with its
ordering (value, then lower key position).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_GATHER_ELEMS = 2**20
"""Products rescored at once (8 MB of float64 products and 8 MB of running sums: reused heap memory)."""


def _duplicate_representatives(keys: torch.Tensor, cand: torch.Tensor) -> torch.Tensor | None:
    """For each usable key (position in ``cand``), the first position with a bitwise-identical vector (also used
    for the query rows).

    Tokens that share a string (``▁the`` / ``the``, ``Ġthe`` / ``the`` …) have identical subword
    vectors, hence identical cosines. Rows are grouped by a 64-bit hash of their bits and
    verified, so a hash collision never merges different vectors.

    Returns:
        int64 tensor ``rep`` (``rep[p] <= p``), or ``None`` when all usable keys are distinct.
    """
    k = keys.contiguous().numpy()
    c = cand.numpy()
    bits = k.view(np.uint32)
    w = (np.arange(1, k.shape[1] + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    h = np.empty(len(c), dtype=np.uint64)
    for a in range(0, len(c), 16384):
        h[a : a + 16384] = (bits[c[a : a + 16384]].astype(np.uint64) * w).sum(axis=1)  # wraps mod 2^64
    order = np.argsort(h, kind="stable")
    hs = h[order]
    start = np.ones(len(c), dtype=bool)
    start[1:] = hs[1:] != hs[:-1]
    if start.all():
        return None
    rep = np.empty(len(c), dtype=np.int64)
    rep[order] = order[np.maximum.accumulate(np.where(start, np.arange(len(c)), 0))]
    dup = np.flatnonzero(rep != np.arange(len(c)))
    differs = ~np.all(k[c[dup]] == k[c[rep[dup]]], axis=1)
    rep[dup[differs]] = dup[differs]  # hash collisions stay apart
    return torch.from_numpy(rep) if bool((rep != np.arange(len(c))).any()) else None


@dataclass
class _KeyGroups:
    """Usable keys grouped by identical vectors: the search runs on one key per group.

    Attributes:
        unique: positions (into the usable keys) of the first key of every group, ascending.
        members: ``n_unique x g`` positions of the first ``g`` keys of every group, ascending,
            ``-1``-padded (``g`` = the largest group, capped at the neighbours kept: a later member
            can never be chosen); ``None`` when no two keys are identical.
        duplicates: keys that are not the first of their group.
    """

    unique: torch.Tensor
    members: torch.Tensor | None
    duplicates: int


def _group_keys(keys: torch.Tensor, cand: torch.Tensor, cap: int) -> _KeyGroups:
    """Group the usable keys ``keys[cand]`` by bitwise-identical vectors (see :class:`_KeyGroups`)."""
    m = int(cand.numel())
    rep = _duplicate_representatives(keys, cand)
    if rep is None:
        return _KeyGroups(torch.arange(m), None, 0)
    unique = torch.nonzero(rep == torch.arange(m)).squeeze(1)
    group = torch.searchsorted(unique, rep)  # group id of every position
    order = torch.sort(group, stable=True).indices  # by group, then position
    sizes = torch.bincount(group, minlength=len(unique))
    starts = torch.cumsum(sizes, 0) - sizes
    within = torch.arange(m) - starts[group[order]]
    g = min(int(sizes.max()), cap)
    members = torch.full((len(unique), g), -1, dtype=torch.int64)
    keep = within < g
    members[group[order][keep], within[keep]] = order[keep]
    return _KeyGroups(unique, members, m - len(unique))


def _expand_groups(pos: torch.Tensor, values: torch.Tensor, groups: _KeyGroups, ks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace the groups chosen per row by their keys; the first ``ks`` by (decreasing value, position).

    Exact: the top ``ks`` keys lie in the top ``ks`` groups ranked by (value, first position), and
    every key of a group has the group's value (identical vectors).
    """
    if groups.members is None:
        return pos, values
    r, w = pos.shape
    g = groups.members.shape[1]
    mem = torch.index_select(groups.members, 0, pos.reshape(-1)).view(r, w * g)
    # the groups come by decreasing value (ties by position): a group's rank is the first group of its value,
    # so ordering the keys by (rank, position) is ordering them by (decreasing value, position), in one sort
    fresh = torch.ones((r, w), dtype=torch.bool)
    fresh[:, 1:] = values[:, 1:] != values[:, :-1]
    rank = torch.cummax(torch.where(fresh, torch.arange(w), 0), dim=1).values
    key = (rank.repeat_interleave(g, dim=1) << 40) + mem  # positions < 2**40
    key.masked_fill_(mem < 0, torch.iinfo(torch.int64).max)
    order = torch.sort(key, dim=1).indices[:, :ks]
    return torch.gather(mem, 1, order), torch.gather(values, 1, torch.div(order, g, rounding_mode="floor"))


def _exact_pairs(q: torch.Tensor, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor, qrow: torch.Tensor,
                 pos: torch.Tensor) -> torch.Tensor:
    """Exact cosines of the pairs ``(q[qrow[j]], keys[cand[pos[j]]])``, a flat float64 vector (see :func:`_exact_cosines`).

    The products of the float32 inputs are exact in float64; ``torch.cumsum`` adds them one after another
    in the order ``i = 0 .. d-1`` with a float64 accumulator, one pair per row, so a pair's value is one
    fixed sequence of IEEE operations, whatever the batch, the thread count or the pair's neighbours.
    Pairs are processed in batches of at most :data:`_GATHER_ELEMS` products.
    """
    n, d = int(pos.numel()), keys.shape[1]
    out = torch.empty(n, dtype=torch.float64)
    step = max(1, _GATHER_ELEMS // max(1, d))
    for a in range(0, n, step):
        b = min(a + step, n)
        p = pos[a:b]
        prod = torch.index_select(keys, 0, torch.index_select(cand, 0, p)).to(torch.float64)
        prod.mul_(torch.index_select(q, 0, qrow[a:b]).to(torch.float64))
        torch.mul(torch.cumsum(prod, dim=1)[:, -1], torch.index_select(inv, 0, p).to(torch.float64), out=out[a:b])
    return out


def _exact_cosines(qn: torch.Tensor, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Exact cosines ``r x w`` of unit queries ``qn`` (``r x d``) with the keys at ``cand[pos]``.

    ``(sum_i qn_i k_i) * inv`` in float64 from the float32 inputs, summed in the fixed order
    ``i = 0 .. d-1`` (one running float64 sum per pair; every product of two float32 numbers is
    exact in float64, so a fused multiply-add rounds as the separate add does): a pair's value is
    one fixed sequence of IEEE operations, the same whatever the batch, the pair's position, the
    candidate set, the thread count or the CPU, and the same as a sequential ``cumsum`` of the
    products (:func:`_exact_pairs`). A BLAS product promises none of that (``torch.bmm``'s float64
    sums change with the batch size and the width).
    """
    r, w = pos.shape
    qrow = torch.arange(r).repeat_interleave(w)
    return _exact_pairs(qn, keys, cand, inv, qrow, pos.reshape(-1)).view(r, w)


def _top_by_value_then_position(exact: torch.Tensor, pos: torch.Tensor, kk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``kk`` best entries of every row by decreasing ``exact``, equal values by lower ``pos``.

    ``torch.topk`` picks the set; rows where an exact tie straddles the cut (more than ``kk``
    entries reach the ``kk``-th value, so topk's choice among them is arbitrary) are redone with
    a full stable sort. Returns ``(positions, values)``, ``r x kk`` each.
    """
    v, j = torch.topk(exact, kk, dim=1, sorted=True)
    p = torch.gather(pos, 1, j)
    p, perm = torch.sort(p, dim=1)
    v = torch.gather(v, 1, perm)
    order = torch.sort(-v, dim=1, stable=True).indices
    p, v = torch.gather(p, 1, order), torch.gather(v, 1, order)
    straddle = torch.nonzero((exact >= v[:, -1:]).sum(1) > kk).squeeze(1)
    if len(straddle):
        ps, perm = torch.sort(pos[straddle], dim=1)
        ex = torch.gather(exact[straddle], 1, perm)
        order = torch.sort(-ex, dim=1, stable=True).indices[:, :kk]
        p[straddle] = torch.gather(ps, 1, order)
        v[straddle] = torch.gather(ex, 1, order)
    return p, v
