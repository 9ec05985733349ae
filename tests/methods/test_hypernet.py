"""``hypernet``: a ZeTT-style hypernetwork over source pieces, trained on the source (methods/hypernet.py).

Checked on the tiny world: the decomposition never uses the token itself and spells its string; the
training loss falls; before any step the rows are mean-of-pieces'; a seed gives bit-identical rows
whatever the global RNGs hold (and from the cache); the provenance counts add up; bad settings are
one error naming the field.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from harness import registry, seeding
from harness import vocab as _canon
from harness.model import surgery
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TransferInputs
from methods._hypernet_model import best_split, pad_pieces, predict_weights, train
from methods.hypernet import HypernetConfig, build_network, training_data
from tests.methods import test_properties as _properties

world = _properties.world
"""The tiny world's source tokenizer and rows and the unigram-300 ``near`` target (a fixture, shared)."""

FAST = {"steps": 60, "batch_size": 64, "hidden": 32, "heads": 2}


def _run(name: str, t: dict, seed: int, options: dict | None = None, cache_dir=None):
    inputs = TransferInputs(source_tokenizer=t["src_tok"], target_tokenizer=t["tgt_tok"], source_embeddings=t["emb"],
                            source_language="src", target_language="near", cache_dir=cache_dir)
    method = registry.get("method", name).make(options or {})
    return method.initialize(inputs, seeding.numpy_rng(seed, "init", name))


def _rows(res, E, seed=1):
    return surgery.materialize(res.mapping, E, seeding.torch_generator(seed, "test"))


def test_training_pieces_spell_the_token_without_it(world):
    tok, n = world["src_tok"], world["emb"].shape[0]
    canon, spec, drop = _canon.canonical_vocab(tok), _canon.family_spec(tok), _canon.special_ids(tok)
    checked = 0
    for t in range(n):
        c = canon[t]
        if c is None or t in drop or len(c.text) < 2:
            continue
        pieces = best_split(tok, c, spec=spec, token_id=t, drop=drop, n_source=n)
        if pieces is None:
            continue
        assert t not in pieces and len(pieces) >= 2
        assert b"".join(canon[p].text for p in pieces) == c.text  # the pieces spell the token
        assert canon[pieces[0]].word_start == c.word_start and not any(canon[p].word_start for p in pieces[1:])
        checked += 1
    assert checked > 50


def test_training_loss_falls_and_the_best_held_out_network_is_kept(world):
    cfg = HypernetConfig(**{**FAST, "steps": 150, "select": "last"})
    data, counts = training_data(world["src_tok"], world["emb"].shape[0], cfg, np.random.default_rng(0))
    assert counts["train"] + counts["holdout"] == counts["decomposed"] > 100 and counts["holdout"] > 0
    net = build_network(world["emb"], cfg, 3)
    report = train(net, world["emb"], data, cfg.train_settings(), torch.Generator().manual_seed(0))
    assert report.curve[0][0] == 1 and report.curve[-1][0] == 150 and report.selected_step is None
    assert report.train_loss_last < 0.8 * report.train_loss_first, report.curve
    assert report.holdout["after"]["cosine_mean"] > report.holdout["before"]["cosine_mean"], report.holdout
    # best-holdout: the same run, ending with the logged network (step 0 included) of lowest held-out loss
    best_cfg = dataclasses.replace(cfg, select="best-holdout")
    net = build_network(world["emb"], best_cfg, 3)
    best = train(net, world["emb"], data, best_cfg.train_settings(), torch.Generator().manual_seed(0))
    assert best.curve == report.curve and len(best.holdout_curve) == len(best.curve)
    losses = dict([(0, best.holdout["before"]["loss"]), *best.holdout_curve])
    assert best.selected_step == min(losses, key=lambda k: (losses[k], k))
    assert best.holdout["after"]["loss"] == pytest.approx(losses[best.selected_step], abs=1e-6)


@pytest.mark.parametrize("weights", ["free", "softmax"])
def test_before_training_rows_are_mean_of_pieces(world, weights):
    hn = _run("hypernet", world, 2, {**FAST, "steps": 0, "weights": weights})
    mp = _run("mean-of-pieces", world, 2, {"fuzzy": False})
    a, b = hn.mapping, mp.mapping
    same = np.where(b.provenance == COPIED, np.isin(a.provenance, (COPIED, COMBINED)), a.provenance == b.provenance)
    assert same.all()  # a single piece is COPIED by mean-of-pieces, COMBINED (weight 1 here) by hypernet
    torch.testing.assert_close(_rows(hn, world["emb"]), _rows(mp, world["emb"]), rtol=0, atol=1e-6)
    assert hn.info["rows"]["predicted"] > 50


def test_trained_rows_differ_from_the_mean_and_softmax_is_convex(world):
    E = world["emb"]
    free = _run("hypernet", world, 2, FAST)
    mean = _run("hypernet", world, 2, {**FAST, "steps": 0})
    comb = free.mapping.provenance == COMBINED
    assert not torch.allclose(_rows(free, E)[comb], _rows(mean, E)[comb], atol=1e-4)
    soft = _run("hypernet", world, 2, {**FAST, "weights": "softmax"}).mapping
    lengths = np.diff(soft.indptr)
    rows = np.repeat(np.arange(soft.n_target), lengths)
    entry_comb = soft.provenance[rows] == COMBINED
    assert np.all(soft.weights[entry_comb] >= 0)
    sums = np.bincount(rows[entry_comb], weights=soft.weights[entry_comb].astype(np.float64), minlength=soft.n_target)
    np.testing.assert_allclose(sums[soft.provenance == COMBINED], 1.0, atol=1e-5)


def test_same_seed_same_rows_whatever_the_global_rng_and_the_cache(world, tmp_path):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    a = _run("hypernet", world, 7, FAST, cache_dir=tmp_path / "a")
    random.seed(99)
    np.random.seed(98)
    torch.manual_seed(97)
    _ = [random.random(), np.random.rand(3), torch.rand(3)]
    b = _run("hypernet", world, 7, FAST, cache_dir=None)
    c = _run("hypernet", world, 7, FAST, cache_dir=tmp_path / "a")  # from the cache
    assert c.info["hypernet"]["cache_dir"] == a.info["hypernet"]["cache_dir"] is not None
    assert a.info["hypernet"]["trained_in_this_call"] and not c.info["hypernet"]["trained_in_this_call"]
    assert b.info["hypernet"]["cache_dir"] is None and b.info["hypernet"]["trained_in_this_call"]
    for other in (b, c):
        for field in ("indptr", "indices", "weights", "provenance"):
            assert np.array_equal(getattr(a.mapping, field), getattr(other.mapping, field)), field
    assert torch.equal(_rows(a, world["emb"]), _rows(b, world["emb"]))
    d = _run("hypernet", world, 8, FAST)  # another trial seed: another network
    assert not np.array_equal(a.mapping.weights, d.mapping.weights)
    e = _run("hypernet", world, 8, {**FAST, "seed": a.info["hypernet"]["seed"]})  # a pinned seed wins
    assert np.array_equal(a.mapping.weights, e.mapping.weights)


@pytest.mark.parametrize("copy_overlap", [True, False])
def test_provenance_counts_add_up(world, copy_overlap):
    res = _run("hypernet", world, 4, {**FAST, "copy_overlap": copy_overlap})
    m, rows = res.mapping, res.info["rows"]
    counts = m.counts()
    assert sum(counts.values()) == m.n_target == len(world["tgt_tok"])
    assert counts["special"] == rows["special"] and counts["copied"] == rows["copied_overlap"]
    assert counts["combined"] == rows["predicted"]
    assert counts["fallback"] == rows["fallback_no_pieces"] + rows["fallback_only_unk"] + rows["no_canonical_form"]
    assert sum(len(ids) for ids in res.random_reasons.values()) == rows["fallback_no_pieces"] + rows["fallback_only_unk"]
    assert (rows["copied_overlap"] > 0) == copy_overlap
    lengths = np.diff(m.indptr)
    assert np.all(lengths[np.isin(m.provenance, (SPECIAL, COPIED))] == 1) and np.all(lengths[m.provenance == FALLBACK] == 0)
    train = res.info["hypernet"]
    assert train["data"]["train"] > 0 and train["train_loss_last"] < train["train_loss_first"]


@pytest.mark.parametrize("field, value", [
    ("steps", -1), ("hidden", 0), ("heads", 3), ("lr", 0.0), ("holdout", 1.0), ("objective", "lm"),
    ("weights", "sparsemax"), ("select", "best"), ("copy_overlap", "yes"), ("max_pieces", 1), ("seed", -2), ("mse_weight", float("nan")),
])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"(HypernetConfig|method 'hypernet')\.{field}\b"):
        registry.get("method", "hypernet").make({field: value})


@pytest.fixture()
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_rows_do_not_depend_on_the_thread_count(restore_threads):
    """Big enough for torch's kernels to split work across threads (without one_thread(), 1 and 2 threads
    gave weights ~1e-5 apart here)."""
    g = np.random.default_rng(0)
    E = torch.randn(3000, 256, generator=torch.Generator().manual_seed(0))
    cfg = HypernetConfig(steps=5, batch_size=512, holdout=0.0)
    seqs = [g.integers(0, 3000, size=g.integers(2, 9)).tolist() for _ in range(1000)]
    ids, mask = pad_pieces(seqs)
    targets = torch.as_tensor(g.integers(0, 3000, size=len(seqs)))
    data = {"ids": ids, "mask": mask, "targets": targets, "hold_ids": ids[:0], "hold_mask": mask[:0],
            "hold_targets": targets[:0]}
    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        net = build_network(E, cfg, 0)
        train(net, E, data, cfg.train_settings(), torch.Generator().manual_seed(0))
        out[threads] = np.concatenate(predict_weights(net, E, seqs, 1024))
        assert torch.get_num_threads() == threads  # restored
    assert np.array_equal(out[1], out[2])
