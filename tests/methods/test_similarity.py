"""The exact top-k cosine engine (``methods/_exact_topk.py``: :func:`topk_cosine`) on hard inputs.

Concentrated cosines (every key within a few 1e-4 of the best, as with word fastText vectors
trained on a few MB) and duplicate token strings (``▁x`` and ``x`` share a subword vector): the
result must equal the dense exact top-k bit for bit, the adaptive screen must keep the number of
rescored candidates bounded, and the thread count must not change a bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import methods._exact_topk as sim
import methods._exact_topk_keys as keys_mod
from methods._exact_topk import topk_cosine


def _concentrated(n: int, m: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries and keys around one direction (cosines ~0.9999), a third of the keys duplicated, some masked."""
    rng = np.random.default_rng(seed)
    center = rng.normal(size=d)
    keys = (center + 0.01 * rng.normal(size=(m, d))).astype(np.float32)
    q = (center + 0.01 * rng.normal(size=(n, d))).astype(np.float32)
    keys[rng.integers(0, m, m // 3)] = keys[rng.integers(0, m, m // 3)]  # "▁x" and "x": identical vectors
    q[:4] = keys[:4]  # queries equal to keys that have duplicates or not
    q[5] = 0.0  # no vector: no neighbours
    keys[7] = 0.0  # no vector: never a neighbour
    mask = np.ones(m, dtype=bool)
    mask[20:30] = False
    return q, keys, mask


def _dense_exact(q: np.ndarray, keys: np.ndarray, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every cosine, computed as the engine defines it, then the top ``k`` by (cosine desc, key id asc).

    ``(sum_i qn_i k_i) * inv`` in float64, summed left to right (``np.cumsum`` is sequential), with
    ``qn = q * float32(1 / ||q||)`` and ``inv = float32(1 / ||k||)`` as the engine normalizes.
    """
    qt, kt = torch.from_numpy(q), torch.from_numpy(keys)
    qn = (qt * (1.0 / torch.linalg.vector_norm(qt, dim=1)).to(torch.float32)[:, None]).numpy().astype(np.float64)
    k_norm = torch.linalg.vector_norm(kt, dim=1)
    inv = (1.0 / k_norm).to(torch.float32).numpy().astype(np.float64)
    with np.errstate(invalid="ignore"):  # the zero query and the zero key: NaN, excluded below
        s = np.cumsum(qn[:, None, :] * keys.astype(np.float64)[None, :, :], axis=2)[:, :, -1] * inv[None, :]
    s[:, (k_norm.numpy() == 0) | ~mask] = -np.inf
    order = np.lexsort((np.broadcast_to(np.arange(len(keys)), s.shape), -s), axis=1)[:, : k + 1]
    top = np.take_along_axis(s, order, 1)
    with np.errstate(invalid="ignore"):
        return order[:, :k], top[:, :k].astype(np.float32), top[:, k - 1] - top[:, k]


@pytest.mark.parametrize("k", [1, 10, 50])
def test_concentrated_cosines_and_duplicates_equal_the_dense_exact_topk(k, monkeypatch):
    q, keys, mask = _concentrated(60, 3000, 32, seed=k)
    idx, sims, gap = _dense_exact(q, keys, k, mask)
    has = np.any(q != 0, axis=1)
    monkeypatch.setattr(sim, "resolve_screen", lambda s: "bf16" if s == "auto" else s)  # as on a CPU with native bf16
    runs = {s: topk_cosine(q, keys, k, key_mask=mask, screen=s, chunk_rows=16) for s in ("auto", "bf16", "fp32", "fp64")}
    for name, r in runs.items():
        assert np.array_equal(r.indices[has], idx[has]), name
        assert np.array_equal(r.similarities[has], sims[has]), name
        assert np.array_equal(r.kth_gap[has], gap[has]), name
        assert not r.has_vector[5] and (r.indices[5] == -1).all()
        assert r.stats["duplicate_keys"] > 500
    assert (gap[has] == 0).any()  # duplicates tie exactly at the k-th place somewhere: ties went to the lower id
    assert not np.isin(runs["auto"].indices, [7, *range(20, 30)]).any()
    # the bf16 and fp32 margins swallow the rows (every usable key a candidate); auto does not rescore them
    usable = int(mask.sum()) - 1
    assert runs["bf16"].stats["candidates_per_row"] >= 0.5 * usable
    assert runs["fp32"].stats["candidates_per_row"] >= 0.5 * usable
    auto = runs["auto"].stats
    assert auto["screen"] == "fp64" and auto["screen_switched"].startswith("bf16 screen kept")
    assert auto["candidates_per_row"] <= 2 * sim._base_width(k + 1)
    assert auto["widest_candidate_set"] <= 4 * sim._base_width(k + 1)


def test_a_few_hard_rows_are_rescreened_alone_and_the_chunk_stays_cheap(monkeypatch):
    """Rows whose best keys are a tight cluster (only float64 tells its keys apart) go to the finer
    screens on their own; the other rows of their chunk stay on bf16; the result is the exact top-k."""
    rng = np.random.default_rng(8)
    center = rng.normal(size=32)
    cluster = (center + 1e-4 * rng.normal(size=(600, 32))).astype(np.float32)
    keys = np.concatenate([rng.normal(size=(3000, 32)).astype(np.float32), cluster])
    q = rng.normal(size=(80, 32)).astype(np.float32)
    hard = np.arange(0, 80, 8)  # one row in eight: 2 of every chunk of 16
    q[hard] = (center + 1e-4 * rng.normal(size=(len(hard), 32))).astype(np.float32)
    mask = np.ones(len(keys), dtype=bool)
    monkeypatch.setattr(sim, "resolve_screen", lambda s: "bf16" if s == "auto" else s)
    got = topk_cosine(q, keys, 10, key_mask=mask, chunk_rows=16)
    idx, sims, gap = _dense_exact(q, keys, 10, mask)
    assert np.array_equal(got.indices, idx) and np.array_equal(got.similarities, sims) and np.array_equal(got.kth_gap, gap)
    st = got.stats
    assert st["screen_switched"] is None and st["screen_chunks"] == {"bf16": 5, "fp32": 0, "fp64": 0}
    assert st["rows_rescreened"] == {"fp32": len(hard), "fp64": len(hard)}  # fp32 cannot separate the cluster either
    assert st["candidates_per_row"] < 100  # nobody rescored the 600-key cluster


def test_well_separated_keys_stay_on_the_cheap_screen(monkeypatch):
    rng = np.random.default_rng(3)
    q, keys = rng.normal(size=(80, 16)).astype(np.float32), rng.normal(size=(4000, 16)).astype(np.float32)
    monkeypatch.setattr(sim, "resolve_screen", lambda s: "bf16" if s == "auto" else s)
    r = topk_cosine(q, keys, 10, chunk_rows=16)
    assert r.stats["screen"] == "bf16" and r.stats["screen_switched"] is None and r.stats["screen_chunks"]["bf16"] == 5
    idx, sims, _ = _dense_exact(q, keys, 10, np.ones(len(keys), dtype=bool))
    assert np.array_equal(r.indices, idx) and np.array_equal(r.similarities, sims)


def test_results_do_not_depend_on_the_thread_count():
    q, keys, mask = _concentrated(40, 3000, 48, seed=4)
    rng = np.random.default_rng(5)
    q2, keys2 = rng.normal(size=(40, 48)).astype(np.float32), rng.normal(size=(3000, 48)).astype(np.float32)
    before = torch.get_num_threads()
    try:
        out = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out[threads] = [topk_cosine(a, b, 10, key_mask=mk, screen=s, chunk_rows=32)
                            for a, b, mk in ((q, keys, mask), (q2, keys2, None)) for s in ("auto", "bf16", "fp64")]
    finally:
        torch.set_num_threads(before)
    for one, two in zip(out[1], out[2]):
        assert one.stats["threads"] == 1 and two.stats["threads"] == 2
        assert np.array_equal(one.indices, two.indices)
        assert np.array_equal(one.similarities, two.similarities)
        assert np.array_equal(one.kth_gap, two.kth_gap)


def test_an_exact_cosine_does_not_depend_on_the_batch_or_its_position():
    rng = np.random.default_rng(7)
    keys = torch.from_numpy(rng.normal(size=(500, 100)).astype(np.float32))
    q = torch.from_numpy(rng.normal(size=(30, 100)).astype(np.float32))
    qn = q * (1.0 / torch.linalg.vector_norm(q, dim=1))[:, None]
    cand = torch.arange(500)
    inv = (1.0 / torch.linalg.vector_norm(keys, dim=1)).to(torch.float32)
    pos = torch.from_numpy(rng.integers(0, 500, size=(30, 40)))
    full = keys_mod._exact_cosines(qn, keys, cand, inv, pos)
    one_row = torch.cat([keys_mod._exact_cosines(qn[i : i + 1], keys, cand, inv, pos[i : i + 1]) for i in range(30)])
    narrow = keys_mod._exact_cosines(qn, keys, cand, inv, pos[:, 3:5])
    shuffled = keys_mod._exact_cosines(qn, keys, cand, inv, pos.flip(1)).flip(1)
    assert torch.equal(full, one_row) and torch.equal(full[:, 3:5], narrow) and torch.equal(full, shuffled)


def test_bad_screen_and_inputs_are_named():
    with pytest.raises(ValueError, match="screen must be"):
        topk_cosine(np.ones((2, 3)), np.ones((4, 3)), 1, screen="fp16")
    with pytest.raises(ValueError, match="no usable key"):
        topk_cosine(np.ones((2, 3)), np.zeros((4, 3)), 1)
    with pytest.raises(ValueError, match="key_mask must have 4 entries"):
        topk_cosine(np.ones((2, 3)), np.ones((4, 3)), 1, key_mask=np.ones(3, dtype=bool))


def test_a_finer_screen_with_a_smaller_block_cuts_the_chunk_again(monkeypatch):
    q, keys, mask = _concentrated(50, 2000, 16, seed=9)
    expected = topk_cosine(q, keys, 10, key_mask=mask, screen="fp64")
    monkeypatch.setattr(sim, "resolve_screen", lambda s: "bf16" if s == "auto" else s)
    unique = expected.stats["keys_usable"] - expected.stats["duplicate_keys"]  # the keys a screen multiplies with
    monkeypatch.setattr(sim, "_BLOCK_BYTES", unique * 4 * 12)  # bf16/fp32 chunks of 12 rows, fp64 chunks of 6
    got = topk_cosine(q, keys, 10, key_mask=mask, chunk_rows=40)
    assert got.stats["screen"] == "fp64" and got.stats["chunk_rows"] == 6
    assert got.stats["screen_chunks"] == {"bf16": 0, "fp32": 0, "fp64": 9}  # 49 rows with a vector, 6 at a time
    assert np.array_equal(got.indices, expected.indices) and np.array_equal(got.similarities, expected.similarities)
    assert np.array_equal(got.kth_gap, expected.kth_gap)


def test_block_maxima_gather_equals_the_dense_exact_topk(monkeypatch):
    """Rows wide enough for the block search (m = 6001 keys: 93 blocks of 64 and a short last block):
    random keys, a tight cluster and duplicates; queries random, near the cluster and equal to keys.
    Every screen gives the dense exact top-k bit for bit, gathering only some blocks of most rows."""
    rng = np.random.default_rng(11)
    center = rng.normal(size=16)
    keys = np.concatenate([rng.normal(size=(4001, 16)), center + 0.003 * rng.normal(size=(2000, 16))]).astype(np.float32)
    keys[rng.integers(0, 6001, 1500)] = keys[rng.integers(0, 6001, 1500)]
    q = np.concatenate([rng.normal(size=(40, 16)), center + 0.003 * rng.normal(size=(20, 16))]).astype(np.float32)
    q[:3] = keys[[5, 4500, 6000]]  # the last key lies in the short last block
    mask = np.ones(len(keys), dtype=bool)
    mask[100:140] = False
    widths = []
    real = sim._gather_rows

    def spy(*args, **kwargs):
        parts = real(*args, **kwargs)
        widths.extend((p.values.shape[1], p.pos is None) for p in parts)
        return parts

    monkeypatch.setattr(sim, "_gather_rows", spy)
    for k in (1, 10):
        idx, sims, gap = _dense_exact(q, keys, k, mask)
        for screen in ("bf16", "fp32", "fp64", "auto"):
            r = topk_cosine(q, keys, k, key_mask=mask, screen=screen, chunk_rows=16)
            assert np.array_equal(r.indices, idx) and np.array_equal(r.similarities, sims), (k, screen)
            assert np.array_equal(r.kth_gap, gap), (k, screen)
    assert any(not whole and w < 6001 // 4 for w, whole in widths)  # some rows looked at a few blocks only
    assert all(w <= 6001 for w, _ in widths)


@pytest.mark.parametrize("mode", ["bf16", "fp32", "fp64"])
def test_gathered_rows_hold_every_candidate_and_count_them_as_the_whole_row(mode):
    """_gather_rows on a screen block: per row, every score >= v_k - 2 eps is among the gathered entries (at
    its own position), and eps and the candidate count equal those computed on the whole row."""
    rng = np.random.default_rng(12)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}[mode]
    spread = {"bf16": 0.01, "fp32": 1e-4, "fp64": 1e-12}[mode]  # windows of a few blocks in each screen
    a = 0.3 + 0.05 * rng.normal(size=(24, 5000))  # the background, and 20 high scores per row in a few blocks
    np.put_along_axis(a, rng.integers(0, 5000, size=(24, 20)), 0.7 + spread * rng.normal(size=(24, 20)), axis=1)
    a = torch.from_numpy(a).to(dtype)
    a[3] = 0.5
    a[3, 4990] = 0.9  # the best score of a row in the short last block
    kk, d = 10, 100
    parts = sim._gather_rows(a, kk, mode, d)
    assert sorted(torch.cat([p.rows for p in parts]).tolist()) == list(range(24))
    sdt = torch.float64 if mode == "fp64" else torch.float32
    for p in parts:
        for j, row in enumerate(p.rows.tolist()):
            vals = torch.topk(a[row], kk).values.to(sdt)
            eps = sim._screen_eps(mode, d, vals[:1], vals[kk - 1 : kk])
            thr = vals[kk - 1] - 2 * eps
            want = set(torch.nonzero(a[row] >= thr).squeeze(1).tolist())
            pos = torch.arange(5000) if p.pos is None else p.pos[j]
            got = set(pos[p.values[j] >= thr].tolist())
            assert got == want and int(p.need[j]) == len(want) and torch.equal(p.eps[j : j + 1], eps), (mode, row)
            assert torch.equal(a[row, pos], p.values[j])
    assert any(p.pos is not None for p in parts)


def test_duplicate_queries_are_searched_once_and_get_the_same_neighbours():
    """Target tokens sharing a string ("▁x" and "x") have identical vectors: searched once, copied, and every
    row equals the dense exact top-k (a near-duplicate, one bit apart, is searched on its own)."""
    q, keys, mask = _concentrated(40, 2000, 24, seed=13)
    q[20:30] = q[10:20]  # ten exact duplicates
    q[30] = np.nextafter(q[10], np.float32(np.inf))  # one bit apart: not a duplicate
    idx, sims, gap = _dense_exact(q, keys, 10, mask)
    has = np.any(q != 0, axis=1)
    for screen in ("auto", "fp32", "fp64"):
        r = topk_cosine(q, keys, 10, key_mask=mask, screen=screen, chunk_rows=8)
        assert r.stats["duplicate_queries"] == 10, screen
        assert np.array_equal(r.indices[has], idx[has]) and np.array_equal(r.similarities[has], sims[has]), screen
        assert np.array_equal(r.kth_gap[has], gap[has]) and np.array_equal(r.indices[20:30], r.indices[10:20]), screen
