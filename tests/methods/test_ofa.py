"""``ofa`` (Liu et al. 2024) against a brute-force re-derivation, in replacement and extension mode.

With ``vectors: given`` (two word-vector files in one space, written here) every step is re-derived
one token at a time in float64: a token's vector is the mean of the vectors of the words whose
tokenizations (``w``, ``" " + w``, ``" " + W``) contain it; its row the softmax(cos / τ) mixture of
its k nearest source tokens. ``vectors: parallel`` (the world's default) is checked for what it is
for: translations from the world's gold dictionary lie nearer each other in the trained space than
random word pairs, and the trial's generator fixes the result.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness import registry, seeding
from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL
from methods.ofa import OfaConfig, pseudo_bilingual_lines
from tests.methods.test_baselines import extension_source  # noqa: F401  (a fixture)

FAST = {"dim": 16, "epochs": 2, "min_count": 1}


def _run(inputs, seed: int = 1, **cfg):
    return registry.get("method", "ofa").make(cfg).initialize(inputs, seeding.numpy_rng(seed, "init", "ofa"))


def _words(text_path, n: int) -> list[str]:
    from methods._align import word_spans

    seen: dict[str, None] = {}
    for line in open(text_path, encoding="utf-8"):
        for a, b in word_spans(line):
            seen.setdefault(line[a:b])
    return list(seen)[:n]


def _write_vec(path, words, vectors) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {vectors.shape[1]}\n")
        for w, v in zip(words, vectors):
            f.write(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n")


@pytest.fixture(scope="module")
def transfer(near_transfer, tiny_world, tmp_path_factory):
    """The tiny ``near`` transfer with given multilingual vectors: random 8-d vectors for 300 source and 300
    target words (read back from the .vec files, so the re-derivation sees the method's exact floats)."""
    from harness.world import World

    w = World(tiny_world)
    inputs = near_transfer["inputs"]
    d = tmp_path_factory.mktemp("ofa-vectors")
    g = np.random.default_rng(0)
    sides = {}
    for side, text in (("source", w.text("src", "train")), ("target", w.text("near", "train"))):
        words = _words(text, 300)
        _write_vec(d / f"{side}.vec", words, g.normal(size=(len(words), 8)))
        from methods._wordvectors import load_word_vectors

        wv = load_word_vectors(d / f"{side}.vec")
        sides[side] = (wv.words, wv.word_vectors(wv.words).astype(np.float64))
    inputs = dataclasses.replace(inputs, source_word_vectors=d / "source.vec", target_word_vectors=d / "target.vec",
                                 source_corpus=w.text("src", "train"), parallel_corpus=w.parallel("near"))
    return {"inputs": inputs, "vectors": sides, "world": w}


def _brute_subword_vectors(tok, words, vecs, n_rows, per_variant=False):
    """One token at a time: the mean of the vectors of the words whose tokenizations contain it."""
    members: list[list[int]] = [[] for _ in range(n_rows)]
    for j, w in enumerate(words):
        variants = [tok.encode(v, add_special_tokens=False) for v in (w, " " + w, " " + w[:1].upper() + w[1:])]
        ids = [t for ids in variants for t in set(ids)] if per_variant else set().union(*map(set, variants))
        for t in ids:
            members[t].append(j)
    out = np.zeros((n_rows, vecs.shape[1]))
    for t, js in enumerate(members):
        if js:
            out[t] = vecs[js].mean(0)
    return out, np.array([bool(js) for js in members])


def _brute_rows(inputs, vectors, *, k, tau, per_variant=False):
    src_tok, tgt_tok = inputs.source_tokenizer, inputs.target_tokenizer
    n_s, n_t = int(inputs.source_embeddings.shape[0]), _canon.vocab_size(tgt_tok)
    us, hs = _brute_subword_vectors(src_tok, *vectors["source"], n_s, per_variant)
    ut, ht = _brute_subword_vectors(tgt_tok, *vectors["target"], n_t, per_variant)
    specials_s = _canon.special_ids(src_tok)
    cand = [s for s in range(n_s) if hs[s] and s not in specials_s]
    C = us[cand] / np.linalg.norm(us[cand], axis=1, keepdims=True)
    rows = {}
    for t in range(n_t):
        if not ht[t]:
            continue
        c = C @ (ut[t] / np.linalg.norm(ut[t]))
        top = np.argsort(-c, kind="stable")[:k]
        e = np.exp((c[top] - c[top].max()) / tau)
        rows[t] = ({cand[j]: w for j, w in zip(top.tolist(), (e / e.sum()).tolist())}, np.sort(c)[::-1][k - 1 : k + 1])
    return rows, ht


def _check_against_brute_force(m, brute, ht, targets, specials):
    combined = 0
    for t in targets:
        if t in specials:
            continue
        if not ht[t]:
            assert m.provenance[t] == FALLBACK
            continue
        want, kth = brute[t]
        if len(kth) == 2 and abs(kth[0] - kth[1]) < 1e-6:  # a tie at the k-th place: either neighbour is right
            continue
        assert m.provenance[t] == COMBINED, t
        got = dict(zip(*(x.tolist() for x in m.row(t))))
        assert got.keys() == want.keys(), t
        np.testing.assert_allclose([got[s] for s in want], list(want.values()), rtol=1e-4, atol=1e-6)
        combined += 1
    return combined


@pytest.mark.parametrize("k,tau", [(10, 0.1), (3, 1.0)])
def test_rows_are_the_brute_force_softmax_over_the_nearest_source_tokens(transfer, k, tau):
    inputs = transfer["inputs"]
    res = _run(inputs, vectors="given", k=k, temperature=tau)
    m = res.mapping
    brute, ht = _brute_rows(inputs, transfer["vectors"], k=k, tau=tau)
    ov = _canon.compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, fuzzy=False)
    copied = set(ov.exact[:, 0].tolist())
    for t, s in ov.exact:
        assert m.provenance[t] == COPIED and m.row(int(t))[0].tolist() == [int(s)]
    specials = _canon.special_ids(inputs.target_tokenizer)
    assert all(m.provenance[t] == SPECIAL for t in specials)
    new = [t for t in range(m.n_target) if t not in copied]
    combined = _check_against_brute_force(m, brute, ht, new, specials)
    assert combined > 50
    assert res.info["ofa"]["combined"] >= combined
    fb = set(m.fallback_ids().tolist()) - specials
    assert fb and {t for ids in res.random_reasons.values() for t in ids} == fb


def test_reference_word_counts_weigh_a_word_once_per_variant(transfer):
    inputs = transfer["inputs"]
    res = _run(inputs, vectors="given", word_counts="per-variant")
    brute, ht = _brute_rows(inputs, transfer["vectors"], k=10, tau=0.1, per_variant=True)
    specials = _canon.special_ids(inputs.target_tokenizer)
    copied = set(_canon.compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer).exact[:, 0].tolist())
    new = [t for t in range(res.mapping.n_target) if t not in copied]
    assert _check_against_brute_force(res.mapping, brute, ht, new, specials) > 50
    assert not np.array_equal(res.mapping.weights, _run(inputs, vectors="given").mapping.weights)


def test_reference_candidates_include_source_rows_without_a_vector(transfer):
    """``candidates: all``: every source row competes, those without a vector at cosine 0 (the reference's
    sklearn cosine of a zero row); with k past the rows that have a vector, some must be neighbours."""
    inputs = transfer["inputs"]
    n_s = int(inputs.source_embeddings.shape[0])
    _, hs = _brute_subword_vectors(inputs.source_tokenizer, *transfer["vectors"]["source"], n_s)
    assert 0 < hs.sum() < n_s
    res = _run(inputs, vectors="given", candidates="all", k=int(hs.sum()) + 5)
    m = res.mapping
    t = int(np.flatnonzero(m.provenance == COMBINED)[0])
    ids, w = m.row(t)
    zero = ~hs[ids]
    assert zero.sum() >= 5 and np.allclose(w[zero], w[zero][0])  # equal weights: all at cosine 0
    assert res.info["ofa"]["candidate_tokens"] == n_s
    assert not _run(inputs, vectors="given", k=int(hs.sum()) + 5).mapping.row(t)[0].tolist() == ids.tolist()


def test_extension_mode_new_rows_are_the_brute_force_rows(transfer):
    from harness.extension import extend_tokenizer, keep_original_rows

    inputs = transfer["inputs"]
    src_tok = inputs.source_tokenizer
    ext, added = extend_tokenizer(src_tok, inputs.target_tokenizer, inputs.target_corpus, 40)
    ext_inputs = dataclasses.replace(inputs, target_tokenizer=ext, extension_tokenizer=inputs.target_tokenizer)
    res = _run(ext_inputs, vectors="given")
    m, info = keep_original_rows(res.mapping, _canon.vocab_size(src_tok), _canon.special_ids(src_tok))
    assert info["n_added"] == 40 and info["method_rows_overridden"] == 0  # the overlap is every old token already
    brute, ht = _brute_rows(ext_inputs, transfer["vectors"], k=10, tau=0.1)
    assert _check_against_brute_force(m, brute, ht, added, set()) >= 20


def test_parallel_vectors_put_translations_together_and_follow_the_trial_seed(transfer):
    from methods.ofa import Ofa

    inputs, w = transfer["inputs"], transfer["world"]
    method = Ofa(OfaConfig(dim=32, epochs=50, min_count=1))
    (sw, sv), (tw, tv), vinfo = method._word_vectors(inputs, seeding.numpy_rng(1, "init", "ofa"))
    assert vinfo["sentence_pairs"] > 100 and len(sw) > 50 and len(tw) > 50
    assert vinfo["fasttext"]["zero_init_words"] == 0
    si, ti = {x: i for i, x in enumerate(sw)}, {x: i for i, x in enumerate(tw)}
    gold = []
    for line in open(w.dictionary("near"), encoding="utf-8"):
        t, s = line.rstrip("\n").split("\t")[:2]
        if t in ti and s in si:
            gold.append((ti[t], si[s]))
    assert len(gold) >= 20
    assert vinfo["centered"] is True and np.allclose(np.concatenate([sv, tv]).mean(0), 0, atol=1e-6)
    sv = sv / np.linalg.norm(sv, axis=1, keepdims=True)
    tv = tv / np.linalg.norm(tv, axis=1, keepdims=True)
    hits = np.mean([np.argmax(sv @ tv[a]) == b for a, b in gold])  # chance: 1 / len(sw)
    assert hits > 0.5, hits
    g = np.random.default_rng(0)
    random_cos = np.mean(np.sum(tv[g.integers(0, len(tv), 2000)] * sv[g.integers(0, len(sv), 2000)], axis=1))
    assert np.mean([tv[a] @ sv[b] for a, b in gold]) > random_cos + 0.3  # centred: cosines tell pairs apart

    a, b = _run(inputs, 3, **FAST), _run(inputs, 3, **FAST)
    assert np.array_equal(a.mapping.indices, b.mapping.indices) and np.array_equal(a.mapping.weights, b.mapping.weights)
    assert a.info["vectors"]["fasttext_seed"] != _run(inputs, 4, **FAST).info["vectors"]["fasttext_seed"]
    assert a.mapping.counts()["combined"] > 50


def test_pseudo_bilingual_lines_tag_and_shuffle_every_word():
    lines = pseudo_bilingual_lines([("a b c", "x y"), ("", "z")], np.random.default_rng(0))
    assert sorted(lines[0].split()) == ["src:a", "src:b", "src:c", "tgt:x", "tgt:y"] and lines[1] == "tgt:z"


def test_errors_name_the_missing_input_and_the_field(transfer):
    inputs = transfer["inputs"]
    with pytest.raises(ValueError, match="inputs.parallel_corpus"):
        _run(dataclasses.replace(inputs, parallel_corpus=None), **FAST)
    with pytest.raises(ValueError, match="inputs.target_word_vectors"):
        _run(dataclasses.replace(inputs, target_word_vectors=None), vectors="given")
    d = int(inputs.source_embeddings.shape[1])
    with pytest.raises(ValueError, match="exceeds the embedding width"):
        _run(inputs, vectors="given", rank=d + 1)
    full = _run(inputs, vectors="given", rank=d)  # rank = width: no factorization
    assert full.low_rank is None and full.info["ofa"]["factorized"] is False
    for bad in ({"k": 0}, {"temperature": 0}, {"vectors": "colexnet"}, {"rank": -1}, {"candidates": "some"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            OfaConfig(**bad)


# ------------------------------------------------------------------------- the factorization (rank < d)


@pytest.fixture(scope="module")
def untied_source(extension_source):  # noqa: F811
    """The tiny untied XLM-R-style MLM (hidden 16) of the extension tests, with a target tokenizer."""
    from tests._tokfixtures import TARGET_TEXT, unigram

    return {"dir": str(extension_source["dir"]), "tok": extension_source["tok"], "model": extension_source["model"],
            "target": unigram(TARGET_TEXT), "files": extension_source["paths"]}


@pytest.mark.parametrize("mode", ["replace", "extend"])
def test_factorized_rows_are_the_mapping_through_each_matrixs_rank_r_svd(untied_source, mode):
    """``rank: 4`` of 16: every installed row is the mapping applied to the coordinates ``U_r`` times
    ``P = S_r V_rᵀ`` — re-derived with numpy's SVD of each matrix (input and untied output apart) — random
    rows lie in the rank-4 row space, the MLM bias is mapped as usual, and in extension mode the
    original rows stay the source's bit for bit."""
    import torch

    from harness.model.initialize import InitRequest, initialize
    from harness.registry import build_config

    src, rank = untied_source, 4
    init = initialize(InitRequest(
        source_model=src["dir"], target_tokenizer=src["target"], method="ofa",
        method_config=build_config(OfaConfig, {**FAST, "rank": rank}), seed=1, model_kind="mlm",
        resources=src["files"], mode=mode, extend_top_n=20,
    ))
    m = init.result.mapping
    n_old = _canon.vocab_size(src["tok"])
    first = n_old if mode == "extend" else 0
    assert init.result.low_rank is not None and init.result.low_rank.first_row == first
    assert init.result.info["ofa"]["factorized"] is True
    W = np.zeros((m.n_target, m.n_source))
    for t in range(m.n_target):
        ids, w = m.row(t)
        W[t, ids] = w
    fb = m.provenance == FALLBACK
    mapped = ~fb & (np.arange(m.n_target) >= first)
    assert mapped.sum() >= 20 and np.sum(m.provenance[first:] == COMBINED) > 0
    with torch.no_grad():
        for new, old in ((init.model.get_input_embeddings().weight, src["model"].get_input_embeddings().weight),
                         (init.model.get_output_embeddings().weight, src["model"].get_output_embeddings().weight)):
            E, got = old.double().numpy(), new.double().numpy()
            V = np.linalg.svd(E, full_matrices=False)[2][:rank].T
            np.testing.assert_allclose(got[mapped], (W[mapped] @ E) @ V @ V.T, atol=2e-5)
            assert not np.allclose(got[mapped], (W[mapped] @ E), atol=1e-3)  # the factorization changed them
            rnd = fb & (np.arange(m.n_target) >= first)
            if rnd.any():
                np.testing.assert_allclose(got[rnd] - got[rnd] @ V @ V.T, 0, atol=2e-5)
            if mode == "extend":
                assert np.array_equal(got[:n_old], E)
        bias_new, bias_old = init.model.lm_head.bias.double().numpy(), src["model"].lm_head.bias.double().numpy()
        np.testing.assert_allclose(bias_new[~fb], W[~fb] @ bias_old, atol=1e-6)


def test_the_init_cache_keeps_the_factorization(transfer):
    from harness.model.initialize import cached_init
    from harness.protocols import LowRank

    inputs = transfer["inputs"]
    method = registry.get("method", "ofa").make({"vectors": "given", "rank": 3})
    compute = lambda: method.initialize(inputs, seeding.numpy_rng(1, "init", "ofa"))  # noqa: E731
    first = cached_init({"test": "ofa-low-rank"}, compute, inputs.target_tokenizer)
    again = cached_init({"test": "ofa-low-rank"}, compute, inputs.target_tokenizer)
    assert again.info.get("cache_hit") is True and again.low_rank == first.low_rank == LowRank(3)
    with pytest.raises(ValueError, match="LowRank.rank"):
        LowRank(0)
