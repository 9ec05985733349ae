"""FOCUS's similarity search uses torch's intra-op threads; its mapping must not depend on how many.

The inputs are large enough for every kernel to split its work across threads (a 3,000 x 3,000
cosine block per chunk, two chunks, top-k over rows of 3,000 anchors), with concentrated cosines so
that sparsemax supports outgrow the initial top-k slice and the widening path runs too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods._similarity import chunked_sparsemax_cosine
from methods.focus import focus_mapping


@pytest.fixture()
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _inputs(n_target: int = 6000, d: int = 64):
    rng = np.random.default_rng(0)
    aux = rng.normal(size=(n_target, d)).astype(np.float32)
    aux[:, :8] += 3.0  # concentrated cosines: supports of tens of anchors
    has_aux = rng.random(n_target) > 0.05
    overlap = np.stack([np.arange(0, n_target, 2), np.arange(n_target // 2)], axis=1)  # 3,000 anchors
    return aux, has_aux, overlap


def _mapping(threads: int, k: int):
    torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads
    aux, has_aux, overlap = _inputs()
    core = focus_mapping(len(aux), len(overlap) + 10, specials=np.zeros((0, 2), np.int64), overlap=overlap, aux=aux,
                         has_aux=has_aux, k=k)  # fmt: skip
    return core


@pytest.mark.parametrize("k", [8, 64])
def test_focus_mapping_is_bit_identical_with_one_and_two_threads(restore_threads, k):
    one, two = _mapping(1, k), _mapping(2, k)
    m1, m2 = one.mapping, two.mapping
    assert one.stats["combined"] > 2500 and one.stats["support_max"] > 8  # k=8: rows needed a wider slice
    for name in ("indptr", "indices", "weights", "provenance"):
        assert np.array_equal(getattr(m1, name), getattr(m2, name)), name
    assert m1.weights.tobytes() == m2.weights.tobytes()  # bit for bit, not just equal as floats
    assert one.stats == two.stats


def test_sparsemax_rows_are_bit_identical_with_one_and_two_threads(restore_threads):
    aux, _, _ = _inputs(4000)
    out = {}
    for t in (1, 2):
        torch.set_num_threads(t)
        out[t] = chunked_sparsemax_cosine(aux[:2500], aux[2500:], k=16, chunk_rows=1024)
    assert out[1].indptr.tobytes() == out[2].indptr.tobytes()
    assert out[1].indices.tobytes() == out[2].indices.tobytes()
    assert out[1].weights.tobytes() == out[2].weights.tobytes()
