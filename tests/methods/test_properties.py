"""Properties of the methods, on small random inputs and on the tiny world.

What each method promises about its rows, checked independently of its implementation:

- FOCUS: a combined row is a convex combination of anchor rows (overlap tokens with an auxiliary
  vector) whose weights are ``sparsemax`` of the cosines to the anchors — non-negative, summing to
  1, and sparse.
- WECHSEL: a combined row mixes at most ``k`` source rows — exactly the ``k`` most similar — with
  weights ``softmax(s / tau)`` of their similarities.
- VIPI: a split row is the mean over the kept partitions of the mean of their pieces (checked
  against plain enumeration).
- Every registered method (the registry is iterated, so a new method is covered the moment it
  registers): copied and special rows are bit-exact source rows, combined rows' weights are
  non-negative and sum to 1 (unless the method's class says ``convex = False``: OMP's least-squares
  coefficients, CLP's normalized cosines) and the installed row is that mixture, and the result is identical
  for one seed however the global RNGs were disturbed in between (with fresh caches, so nothing
  is read back from the first run).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from harness import registry, seeding
from harness import vocab as _canon
from harness.model import surgery
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TransferInputs
from methods.focus import focus_mapping
from methods.vipi import VipiConfig, vipi_mapping
from methods.wechsel import wechsel_mapping
from tests.methods.test_contract import FAST
from tests.methods.test_vipi import average, brute_force, random_vocab

METHODS = registry.names("method")


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _sparsemax(z: np.ndarray) -> np.ndarray:
    """Sparsemax (Martins & Astudillo 2016) by its closed form, in float64."""
    s = np.sort(z)[::-1]
    cs = np.cumsum(s)
    k = np.arange(1, len(z) + 1)
    support = k[1 + k * s > cs].max()
    tau = (cs[support - 1] - 1) / support
    return np.maximum(z - tau, 0.0)


def _dense(ids, ws, n):
    out = np.zeros(n)
    np.add.at(out, np.asarray(ids, dtype=np.int64), np.asarray(ws, dtype=np.float64))
    return out


# ---------------------------------------------------------------------------- FOCUS core


@pytest.mark.parametrize("seed", range(6))
def test_focus_rows_are_sparsemax_convex_combinations_of_anchors(seed):
    rng = np.random.default_rng(seed)
    n_target, n_source, d = 80, 50, 6
    overlap_t = np.arange(1, 21)
    overlap = np.stack([overlap_t, rng.choice(np.arange(1, n_source), size=len(overlap_t), replace=False)], 1)
    aux = rng.normal(size=(n_target, d)).astype(np.float32)
    has_aux = rng.random(n_target) < 0.8
    core = focus_mapping(n_target, n_source, specials=np.array([[0, 0]]), overlap=overlap, aux=aux, has_aux=has_aux,
                         k=2, chunk_rows=7)  # fmt: skip  (a small k exercises the exact sparsemax's widening)
    m = core.mapping
    anchors = overlap[has_aux[overlap[:, 0]]]
    assert len(anchors) > 3
    supports = []
    for t in range(n_target):
        ids, ws = m.row(t)
        if t == 0:
            assert m.provenance[t] == SPECIAL and ids.tolist() == [0] and ws.tolist() == [1.0]
        elif t in overlap_t:
            assert m.provenance[t] == COPIED and ids.tolist() == [overlap[t - 1, 1]] and ws.tolist() == [1.0]
        elif not has_aux[t]:
            assert m.provenance[t] == FALLBACK
        else:
            assert m.provenance[t] == COMBINED
            assert np.all(ws > 0) and abs(float(ws.sum()) - 1.0) < 1e-5  # convex
            assert set(ids.tolist()) <= set(anchors[:, 1].tolist())  # of anchor rows only
            want = _sparsemax(_unit(aux[anchors[:, 0]]) @ _unit(aux[t]))
            got = _dense(ids, ws, n_source)[anchors[:, 1]]
            np.testing.assert_allclose(got, want, atol=2e-6)
            supports.append(len(ids))
    assert supports and min(supports) < len(anchors)  # sparse: sparsemax zeroes some anchors


# ---------------------------------------------------------------------------- WECHSEL core


@pytest.mark.parametrize("k, tau", [(1, 1.0), (3, 0.1), (10, 0.1), (10, 1.0), (60, 0.5)])
def test_wechsel_rows_are_softmax_mixtures_of_their_top_k(k, tau):
    rng = np.random.default_rng(k * 100 + int(tau * 10))
    n_target, n_source, d = 40, 30, 5
    u_t = rng.normal(size=(n_target, d)).astype(np.float32)
    u_s = rng.normal(size=(n_source, d)).astype(np.float32)
    u_t[[3, 7]] = 0.0  # no subword vector: fallback
    u_s[[4, 9]] = 0.0  # never a neighbour
    core = wechsel_mapping(u_t, u_s, k=k, tau=tau, specials=np.array([[0, 0]]), chunk_rows=8)
    m = core.mapping
    usable = np.array([s for s in range(n_source) if s not in (0, 4, 9)])
    kk = min(k, len(usable))
    for t in range(n_target):
        ids, ws = m.row(t)
        if t == 0:
            assert m.provenance[t] == SPECIAL and ids.tolist() == [0]
            continue
        if t in (3, 7):
            assert m.provenance[t] == FALLBACK
            continue
        assert m.provenance[t] == COMBINED and len(ids) == kk <= k
        cos = _unit(u_s[usable]) @ _unit(u_t[t])
        order = usable[np.argsort(-cos, kind="stable")][:kk]
        assert ids.tolist() == order.tolist()  # exactly the k most similar, most similar first
        s = (_unit(u_s[ids]) @ _unit(u_t[t])) / tau
        want = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        np.testing.assert_allclose(ws, want, rtol=1e-4, atol=1e-6)
        assert abs(float(ws.sum()) - 1.0) < 1e-5


# ---------------------------------------------------------------------------- VIPI core


def test_vipi_rows_are_means_over_partitions():
    r = random.Random(99)
    checked = 0
    for case in range(200):
        alphabet = ("ab", "abc", "aé")[case % 3]
        source = random_vocab(r, alphabet)
        words = {"".join(r.choice(alphabet) for _ in range(r.randint(1, 7))) for _ in range(6)}
        target = [None] + [_canon.Canon(w.encode(), r.random() < 0.5) for w in sorted(words)]
        m, _ = vipi_mapping(target, source, n_source=len(source), exact=np.zeros((0, 2)),
                            specials=np.array([[0, 0]]), config=VipiConfig(), rng=np.random.default_rng(0))  # fmt: skip
        for t in range(1, len(target)):
            want = brute_force(target[t].text, target[t].word_start, source)
            ids, ws = m.row(t)
            if not want:
                assert m.provenance[t] == FALLBACK
                continue
            checked += 1
            exp = average(want)
            np.testing.assert_allclose(_dense(ids, ws, len(source)), _dense(list(exp), list(exp.values()), len(source)),
                                       atol=1e-6)  # fmt: skip
            assert m.provenance[t] == (COPIED if len(exp) == 1 else COMBINED)
    assert checked > 300


# ---------------------------------------------------------------------------- every registered method


@pytest.fixture(scope="module")
def world(tiny_world, tiny_source, tiny_helper, tmp_path_factory):
    from transformers import AutoModelForMaskedLM

    from harness.tokenizers import load_tokenizer, train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    model = AutoModelForMaskedLM.from_pretrained(tiny_source)
    return {
        "world": w,
        "src_tok": load_tokenizer(str(tiny_source)),
        "tgt_tok": train_tokenizer([w.text("near", "train")], "unigram", 300, cache_dir=tmp_path_factory.mktemp("tok")),
        "emb": model.get_input_embeddings().weight.detach().float().clone(),
        "tmp": tmp_path_factory, "helper": tiny_helper,
    }


def _run(name: str, t: dict, seed: int, cache_dir=None):
    w = t["world"]
    inputs = TransferInputs(
        source_tokenizer=t["src_tok"], target_tokenizer=t["tgt_tok"], source_embeddings=t["emb"],
        source_language="src", target_language="near", target_corpus=w.text("near", "train"),
        source_corpus=w.text("src", "train"), parallel_corpus=w.parallel("near"), dictionary=w.dictionary("near"),
        helper_model=t["helper"], cache_dir=cache_dir or t["tmp"].mktemp(f"cache-{name}"),
    )  # fmt: skip
    method = registry.get("method", name).make(FAST.get(name, {}))
    return method.initialize(inputs, seeding.numpy_rng(seed, "init", name))


@pytest.fixture(scope="module")
def results(world):
    """One result per registered method (seed 5), shared by the row-level properties."""
    return {name: _run(name, world, 5) for name in METHODS}


@pytest.mark.parametrize("name", METHODS)
def test_rows_are_copies_or_convex_mixtures_and_install_as_such(name, world, results):
    res = results[name]
    m = res.mapping
    lengths = np.diff(m.indptr)
    prov_per_entry = np.repeat(m.provenance, lengths)
    one = np.isin(m.provenance, (SPECIAL, COPIED))
    assert np.all(lengths[one] == 1) and np.all(m.weights[np.isin(prov_per_entry, (SPECIAL, COPIED))] == 1.0)
    comb = np.flatnonzero(m.provenance == COMBINED)
    assert np.all(lengths[comb] >= 1) and np.all(lengths[m.provenance == FALLBACK] == 0)
    if getattr(registry.get("method", name).cls, "convex", True):  # omp/clp declare signed weights (own tests)
        assert np.all(m.weights[prov_per_entry == COMBINED] >= 0)
        row_of_entry = np.repeat(np.arange(m.n_target), lengths)
        sums = np.bincount(row_of_entry, weights=m.weights.astype(np.float64), minlength=m.n_target)
        np.testing.assert_allclose(sums[comb], 1.0, atol=1e-5)  # combined rows' mapping weights sum to 1
    E = world["emb"]
    W = surgery.materialize(m, E, seeding.torch_generator(5, "test"))
    for t in np.flatnonzero(one):
        ids, _ = m.row(int(t))
        assert torch.equal(W[t], E[ids[0]])  # bit-exact copy
    for t in comb[:: max(1, len(comb) // 50)]:
        ids, ws = m.row(int(t))
        want = (torch.as_tensor(ws, dtype=torch.float64)[:, None] * E[torch.as_tensor(ids)].double()).sum(0)
        torch.testing.assert_close(W[t].double(), want, atol=1e-5, rtol=1e-5)


def test_focus_on_the_world_combines_only_anchors(results):
    m = results["focus"].mapping
    anchors = {int(m.row(int(t))[0][0]) for t in np.flatnonzero(m.provenance == COPIED)}
    comb = np.flatnonzero(m.provenance == COMBINED)
    assert len(comb) > 0
    for t in comb:
        ids, ws = m.row(int(t))
        assert set(ids.tolist()) <= anchors and np.all(ws > 0)


def test_wechsel_on_the_world_keeps_k_neighbours_in_softmax_order(results):
    res = results["wechsel"]
    m = res.mapping
    k = registry.get("method", "wechsel").make(FAST["wechsel"]).config.k
    comb = np.flatnonzero(m.provenance == COMBINED)
    assert len(comb) > 0
    for t in comb:
        ids, ws = m.row(int(t))
        assert len(ids) == k and len(set(ids.tolist())) == k
        assert np.all(np.diff(ws) <= 1e-7)  # softmax of similarities sorted high to low


def test_vipi_on_the_world_matches_enumeration(world, results):
    m = results["vipi"].mapping
    source = _canon.canonical_vocab(world["src_tok"])
    target = _canon.canonical_vocab(world["tgt_tok"])
    checked = 0
    for t in np.flatnonzero(m.provenance == COMBINED):
        c = target[t]
        if len(c.text) > 10:
            continue
        want = brute_force(c.text, c.word_start, source)
        exp = average(want)
        ids, ws = m.row(int(t))
        np.testing.assert_allclose(_dense(ids, ws, len(source)), _dense(list(exp), list(exp.values()), len(source)),
                                   atol=1e-6)  # fmt: skip
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", METHODS)
def test_deterministic_under_disturbed_global_rng_with_fresh_caches(name, world, tmp_path):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    a = _run(name, world, 11, cache_dir=tmp_path / "a")
    random.seed(12345)
    np.random.seed(54321)
    torch.manual_seed(999)
    _ = [random.random(), np.random.rand(7), torch.rand(3)]
    b = _run(name, world, 11, cache_dir=tmp_path / "b")
    for field in ("indptr", "indices", "weights", "provenance"):
        assert np.array_equal(getattr(a.mapping, field), getattr(b.mapping, field)), field
    assert a.directives == b.directives
    Wa = surgery.materialize(a.mapping, world["emb"], seeding.torch_generator(11, "init", "materialize"))
    torch.manual_seed(4)
    Wb = surgery.materialize(b.mapping, world["emb"], seeding.torch_generator(11, "init", "materialize"))
    assert torch.equal(Wa, Wb)
