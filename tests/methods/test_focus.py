"""FOCUS and its helpers: exact top-k sparsemax, chunked cosine, fastText helpers, the method end to end.

Everything is small and local: tokenizers are trained in the test from a few hundred generated
lines and fastText runs with dim 16, one epoch, min_count 1 and one thread.
"""

from __future__ import annotations

import json
import logging
import random

import entmax
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TransferInputs
from methods import _fasttext
from methods._similarity import chunked_sparsemax_cosine, chunked_topk_cosine, normalize_rows, sparsemax_topk
from methods.focus import Focus, FocusConfig, focus_mapping

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
TINY_AUX = {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_threads": 1, "aux_bucket": 600_000}


# ----------------------------------------------------------------------------------------------
# fixtures: generated corpora and tokenizers
# ----------------------------------------------------------------------------------------------


def _lines(words: list[str], n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ws = list(rng.choice(words, int(rng.integers(4, 12))))
        if rng.random() < 0.5:
            ws.append(str(int(rng.integers(0, 2000))))
        out.append(" ".join(ws) + str(rng.choice([".", "!", "?", ",", " (ok)"])))
    return out


SHARED = ["Berlin", "Anna", "Paris", "OK", "Messi", "Oscar", "radio", "taxi"]
SOURCE_LINES = _lines([f"w{c}{d}" for c in "abcdefgh" for d in "aeiou"] + SHARED, 300, seed=1)
TARGET_LINES = _lines([f"v{c}{d}" for c in "abcdefgh" for d in "aeiou"] + SHARED, 300, seed=2)


def _unigram(lines: list[str], vocab_size: int = 150) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.Unigram())
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Metaspace()
    bk.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, unk_token="<unk>", show_progress=False))
    return PreTrainedTokenizerFast(
        tokenizer_object=bk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>"
    )


def _from_pieces(pieces: list[str]) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=pieces.index("<unk>")))
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=bk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>"
    )


@pytest.fixture(scope="module")
def toks():
    return _unigram(SOURCE_LINES), _unigram(TARGET_LINES)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("focus") / "target.txt"
    p.write_text("\n".join(TARGET_LINES) + "\n", encoding="utf-8")
    return p


def _inputs(src, tgt, corpus, cache=None, d: int = 8) -> TransferInputs:
    E = torch.randn(len(src), d, generator=torch.Generator().manual_seed(0))
    return TransferInputs(src, tgt, E, target_corpus=corpus, cache_dir=cache)


def _dense(w: torch.Tensor, i: torch.Tensor, m: int) -> torch.Tensor:
    out = torch.zeros(w.shape[0], m)
    out.scatter_add_(1, i.clamp(min=0), w * (i >= 0))
    return out


# ----------------------------------------------------------------------------------------------
# _similarity
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e-3, 1e-2, 0.1, 1.0, 10.0])
def test_sparsemax_topk_equals_entmax(scale):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 700, generator=g) * scale + 0.5
    ref = entmax.sparsemax(x, dim=-1)
    w, i = sparsemax_topk(x, 4)
    assert torch.equal(_dense(w, i, x.shape[1]), ref)
    assert torch.allclose(w.sum(1), torch.ones(len(x)), atol=1e-5)
    if scale <= 0.1:  # these supports are far wider than the initial slice
        assert int((ref > 0).sum(1).max()) > 4


def test_sparsemax_topk_edge_cases():
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0], [0.3, 0.3, -2.0, 0.29]])
    w, i = sparsemax_topk(x, 1)
    assert torch.allclose(_dense(w, i, 4), entmax.sparsemax(x, dim=-1))
    w, i = sparsemax_topk(torch.tensor([[2.0]]), 5)  # k larger than the row
    assert w.tolist() == [[1.0]] and i.tolist() == [[0]]


def test_chunked_topk_cosine_matches_bruteforce():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(37, 12)), rng.normal(size=(50, 12))
    v, i = chunked_topk_cosine(q, k, 5, chunk_rows=8)
    sims = (normalize_rows(q) @ normalize_rows(k).T).numpy()
    np.testing.assert_array_equal(i, np.argsort(-sims, axis=1)[:, :5])
    np.testing.assert_allclose(v, np.take_along_axis(sims, i, 1), atol=1e-6)


def test_sparsemax_blocks_are_capped_in_bytes_and_change_nothing(monkeypatch):
    """Above 512 rows a block holds at most SPARSEMAX_BLOCK_BYTES of scores (faster in cache); the rows
    it returns are bit for bit those of one block, and of blocks smaller than the cap."""
    import methods._similarity as sim

    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(1500, 8)).astype(np.float32), rng.normal(size=(300, 8)).astype(np.float32)
    whole = chunked_sparsemax_cosine(q, k, k=8, chunk_rows=4096)  # the cap allows > 1500 rows of 300 keys: one block
    used = []
    real = sim.iter_cosine_chunks

    def observed(*a, chunk_rows, **kw):
        used.append(chunk_rows)
        return real(*a, chunk_rows=chunk_rows, **kw)

    monkeypatch.setattr(sim, "iter_cosine_chunks", observed)
    monkeypatch.setattr(sim, "SPARSEMAX_BLOCK_BYTES", 300 * 4 * 700)
    capped = chunked_sparsemax_cosine(q, k, k=8, chunk_rows=4096)
    monkeypatch.setattr(sim, "SPARSEMAX_BLOCK_BYTES", 300 * 4 * 100)
    floor = chunked_sparsemax_cosine(q, k, k=8, chunk_rows=4096)
    small = chunked_sparsemax_cosine(q, k, k=8, chunk_rows=97)
    assert used == [700, 512, 97]  # the cap, its 512-row floor, and chunk_rows below both
    for r in (capped, floor, small):
        for x in ("indptr", "indices", "weights"):
            np.testing.assert_array_equal(getattr(r, x), getattr(whole, x))


def test_chunked_sparsemax_is_exact_and_chunk_independent():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(40, 6)), rng.normal(size=(90, 6))
    a = chunked_sparsemax_cosine(q, k, k=2, chunk_rows=7)
    b = chunked_sparsemax_cosine(q, k, k=64, chunk_rows=1000)
    for x in ("indptr", "indices", "weights"):
        np.testing.assert_array_equal(getattr(a, x), getattr(b, x))
    ref = entmax.sparsemax(normalize_rows(q) @ normalize_rows(k).T, dim=-1).numpy()
    for r in range(len(q)):
        idx, w = a.row(r)
        assert np.all(w > 0)
        np.testing.assert_allclose(ref[r, idx], w, atol=1e-6)
        assert set(idx) == set(np.flatnonzero(ref[r] > 0))


# ----------------------------------------------------------------------------------------------
# focus_mapping (pure core)
# ----------------------------------------------------------------------------------------------


def test_focus_mapping_weights_are_sparse_distributions_over_anchors():
    rng = np.random.default_rng(0)
    n_t, n_s = 60, 40
    aux = rng.normal(size=(n_t, 5)).astype(np.float32)
    has = rng.random(n_t) < 0.8
    specials = np.array([[0, 0], [1, 1]])
    overlap = np.stack([np.arange(2, 22), rng.permutation(np.arange(2, n_s))[:20]], axis=1)
    core = focus_mapping(n_t, n_s, specials=specials, overlap=overlap, aux=aux, has_aux=has, k=2, chunk_rows=4)
    m = core.mapping
    anchor_src = set(overlap[has[overlap[:, 0]], 1].tolist())
    for t in range(n_t):
        ids, w = m.row(t)
        if t < 2:
            assert m.provenance[t] == SPECIAL and ids.tolist() == [t]
        elif t < 22:
            assert m.provenance[t] == COPIED and ids.tolist() == [overlap[t - 2, 1]] and w.tolist() == [1.0]
        elif has[t]:
            assert m.provenance[t] == COMBINED
            assert np.all(w > 0) and abs(w.sum() - 1) < 1e-5 and set(ids.tolist()) <= anchor_src
        else:
            assert m.provenance[t] == FALLBACK and len(ids) == 0
    # combined rows are convex combinations of the anchors' source rows
    E = rng.normal(size=(n_s, 3)).astype(np.float32)
    t = int(np.flatnonzero(m.provenance == COMBINED)[0])
    ids, w = m.row(t)
    row = w @ E[ids]
    assert np.all(row <= E[ids].max(0) + 1e-6) and np.all(row >= E[ids].min(0) - 1e-6)
    assert core.stats["anchors"] == len(anchor_src) and core.stats["combined"] == int((m.provenance == COMBINED).sum())


def test_focus_mapping_without_anchors_falls_back():
    aux = np.ones((6, 3), np.float32)
    core = focus_mapping(6, 6, specials=np.zeros((0, 2), int), overlap=np.zeros((0, 2), int), aux=aux, has_aux=np.ones(6, bool))
    assert core.mapping.counts() == {"special": 0, "copied": 0, "combined": 0, "fallback": 6}
    assert core.stats["fallback_no_anchor"] == 6


# ----------------------------------------------------------------------------------------------
# _fasttext
# ----------------------------------------------------------------------------------------------


def test_escape_token_is_injective_and_whitespace_free():
    toks = ["a b", "a\\sb", "a\\b", "", "\\e", "</s>", "\\_</s>", "__label__x", "tab\there", " ", "\\s", "▁x"]
    words = [_fasttext.escape_token(t) for t in toks]
    assert len(set(words)) == len(words)
    assert all(w and not any(c in w for c in " \t\n\v\f\r\0") and w != "</s>" and not w.startswith("__label__") for w in words)


def test_pretokenize_train_cache_and_token_vectors(toks, corpus, tmp_path):
    _, tgt = toks
    pre = _fasttext.pretokenize(corpus, tgt, tmp_path / "pre.txt")
    lines = pre.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(TARGET_LINES)
    words = _fasttext.fasttext_words(tgt)
    ids = tgt(TARGET_LINES[0], add_special_tokens=False)["input_ids"]
    assert lines[0].split(" ") == [words[i] for i in ids]

    report: dict = {}
    ft = _fasttext.train_fasttext(pre, dim=16, epoch=1, min_count=2, seed=3, bucket=600_000, cache_dir=tmp_path / "c", report=report)
    assert report["cache"] == "miss" and report["deterministic"] and report["threads"] == 1
    cached = list((tmp_path / "c" / "fasttext").glob("*.bin"))
    assert [p.name for p in cached] == [f"{_fasttext.fasttext_cache_key(pre, report['params'])}.bin"]
    again: dict = {}
    ft2 = _fasttext.train_fasttext(pre, dim=16, epoch=1, min_count=2, seed=3, bucket=600_000, cache_dir=tmp_path / "c", report=again)
    assert again["cache"] == "hit"

    vecs, has = _fasttext.token_vectors(ft2, tgt)
    vocab = set(ft.get_words())
    assert has.tolist() == [w in vocab for w in words]
    assert vecs.dtype == np.float32 and np.all(vecs[~has] == 0) and np.all(np.any(vecs[has] != 0, axis=1))
    # the same file opened for its vectors only (what aux_model_path loads): the reader's batched path, same bits
    from methods._fasttext_bin import BinVectors

    mapped = _fasttext.load_fasttext_vectors(cached[0])
    assert isinstance(mapped, BinVectors)
    vecs_m, has_m = _fasttext.token_vectors(mapped, tgt)
    assert np.array_equal(has_m, has) and np.array_equal(vecs_m, vecs) and vecs_m.dtype == np.float32
    with pytest.raises(FileNotFoundError, match="fastText model not found"):
        _fasttext.load_fasttext_vectors(tmp_path / "absent.bin")


def test_pretokenize_keeps_tokens_with_spaces_whole(corpus, tmp_path):
    tok = _unigram(TARGET_LINES)
    tok.add_tokens(["vae vbe"])  # an added token containing a space
    tid = tok.convert_tokens_to_ids("vae vbe")
    src = tmp_path / "in.txt"
    src.write_text("vae vbe 12!\n\n" * 3, encoding="utf-8")
    pre = _fasttext.pretokenize(src, tok, tmp_path / "out.txt")
    lines = pre.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and _fasttext.escape_token("vae vbe") in lines[0].split(" ")
    ft = _fasttext.train_fasttext(pre, dim=16, epoch=1, min_count=1, bucket=600_000)
    _, has = _fasttext.token_vectors(ft, tok)
    assert has[tid]


def test_train_fasttext_refuses_partially_initialized_matrix(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("a b c\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bucket=10000 is too small"):
        _fasttext.train_fasttext(p, dim=16, bucket=10_000)
    with pytest.raises(ValueError, match="aux_bucket"):
        FocusConfig(aux_dim=16, aux_bucket=10_000)
    assert _fasttext._zero_init_words(n_words=100, bucket=800, dim=4, threads=1) == 10
    assert _fasttext._zero_init_words(n_words=100, bucket=900, dim=4, threads=1) == 0


def test_train_fasttext_is_deterministic_with_one_thread(toks, corpus, tmp_path):
    _, tgt = toks
    pre = _fasttext.pretokenize(corpus, tgt, tmp_path / "pre.txt")
    kw = dict(dim=16, epoch=1, min_count=1, seed=7, bucket=600_000, threads=1)
    report: dict = {}
    a = _fasttext.token_vectors(_fasttext.train_fasttext(pre, report=report, **kw), tgt)[0]
    junk = [np.random.default_rng(i).random(300_000) for i in range(8)]  # churn the heap between runs
    del junk
    b = _fasttext.token_vectors(_fasttext.train_fasttext(pre, **kw), tgt)[0]
    assert report["zero_init_words"] == 0 and report["n_words"] > 0
    c = _fasttext.token_vectors(_fasttext.train_fasttext(pre, **{**kw, "seed": 8}), tgt)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


# ----------------------------------------------------------------------------------------------
# the method
# ----------------------------------------------------------------------------------------------


def test_focus_end_to_end(toks, corpus, tmp_path):
    src, tgt = toks
    inputs = _inputs(src, tgt, corpus, cache=tmp_path)
    res = Focus(FocusConfig(**TINY_AUX)).initialize(inputs, np.random.default_rng(0))
    m, info = res.mapping, res.info
    json.dumps(info)  # JSON-serializable
    assert res.tokenizer is tgt and m.n_target == len(tgt) and m.n_source == len(src)
    ov = _canon.compute_overlap(src, tgt, fuzzy=True)
    for t, s in ov.pairs():
        assert m.provenance[t] == COPIED and m.row(t)[0].tolist() == [s]
    for t, s in ov.specials:
        assert m.provenance[t] == SPECIAL and m.row(t)[0].tolist() == [s]
    assert info["overlap"]["exact"] == len(ov.exact) and info["overlap"]["fuzzy"] == len(ov.fuzzy)
    counts = m.counts()
    assert counts["combined"] > 0 and counts["combined"] == info["focus"]["combined"]
    anchor_src = {int(s) for t, s in ov.pairs()}
    for t in np.flatnonzero(m.provenance == COMBINED):
        ids, w = m.row(t)
        assert set(ids.tolist()) <= anchor_src and abs(float(w.sum()) - 1) < 1e-5
    assert info["focus"]["anchors"] > 0 and info["focus"]["support_mean"] >= 1
    assert info["aux"]["source"]["deterministic"] and "aux_s" in info["timings"]
    # token vectors of the model FOCUS trained decide which additional tokens fell back
    assert counts["fallback"] == info["focus"]["fallback_no_aux"] + info["focus"]["fallback_no_anchor"]


def test_focus_is_deterministic_under_disturbed_global_rng(toks, corpus):
    src, tgt = toks
    method = Focus(FocusConfig(**TINY_AUX))
    runs = []
    for disturb in (1, 2):
        random.seed(disturb)
        np.random.seed(disturb)
        torch.manual_seed(disturb)
        runs.append(method.initialize(_inputs(src, tgt, corpus, cache=None), np.random.default_rng(5)).mapping)
        torch.randn(10)
        np.random.rand(10)
    a, b = runs
    for x in ("indptr", "indices", "weights", "provenance"):
        np.testing.assert_array_equal(getattr(a, x), getattr(b, x))


def test_symbolic_overlap_restricts_anchors(toks, corpus):
    src, tgt = toks
    res = Focus(FocusConfig(**TINY_AUX, overlap="symbolic")).initialize(_inputs(src, tgt, corpus), np.random.default_rng(0))
    m = res.mapping
    canon = _canon.canonical_vocab(tgt)
    copied = np.flatnonzero(m.provenance == COPIED)
    assert len(copied) > 0 and all(_canon.is_symbolic(canon[t]) for t in copied)
    ov = _canon.compute_overlap(src, tgt)
    symbolic_src = {int(s) for t, s in ov.pairs() if _canon.is_symbolic(canon[t])}
    non_symbolic = [int(t) for t, s in ov.pairs() if not _canon.is_symbolic(canon[t])]
    assert non_symbolic and all(m.provenance[t] in (COMBINED, FALLBACK) for t in non_symbolic)
    for t in np.flatnonzero(m.provenance == COMBINED):
        assert set(m.row(t)[0].tolist()) <= symbolic_src
    assert res.info["overlap"]["mode"] == "symbolic" and res.info["overlap"]["symbolic_dropped"] == len(non_symbolic)


def test_empty_overlap_records_fallback(corpus, caplog):
    src = _from_pieces(SPECIALS + ["▁xq", "zz", "▁qqq"])
    tgt = _unigram(TARGET_LINES, 80)
    inputs = _inputs(src, tgt, corpus)
    with caplog.at_level(logging.INFO, logger="methods.focus"):
        res = Focus(FocusConfig(**TINY_AUX)).initialize(inputs, np.random.default_rng(0))
    counts = res.mapping.counts()
    assert counts["copied"] == 0 and counts["combined"] == 0 and counts["special"] == len(SPECIALS)
    assert counts["fallback"] == len(tgt) - len(SPECIALS)
    reasons = [f["reason"] for f in res.info["fallbacks"]]
    assert "empty overlap" in reasons
    # the method's own groups are disjoint and are its random_reasons, row for row
    assert sum(f["count"] for f in res.info["fallbacks"]) == counts["fallback"]
    assert {k: len(v) for k, v in res.random_reasons.items()} == {f["reason"]: f["count"] for f in res.info["fallbacks"]}
    assert sorted(t for v in res.random_reasons.values() for t in v) == res.mapping.fallback_ids().tolist()
    # reported once, by tokxfer init from the mapping: nothing above INFO here
    assert any("empty overlap" in r.message for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_low_aux_coverage_is_recorded(toks, corpus, caplog):
    src, tgt = toks
    with caplog.at_level(logging.WARNING, logger="methods.focus"):
        res = Focus(FocusConfig(**{**TINY_AUX, "aux_min_count": 100_000})).initialize(_inputs(src, tgt, corpus), np.random.default_rng(0))
    assert res.mapping.counts()["combined"] == 0
    (entry,) = [f for f in res.info["fallbacks"] if f.get("low_coverage")]  # one group: the same rows are not listed twice
    assert entry["reason"].startswith("no auxiliary vector") and "auxiliary vector" in entry["message"]
    assert entry["with_vector"] == 0 and entry["additional"] == res.info["focus"]["additional"]
    assert sum(f["count"] for f in res.info["fallbacks"]) == res.mapping.counts()["fallback"]
    assert "error" in res.info["aux"]["source"]  # fastText's empty vocabulary is reported, not raised


def test_word_fasttext_ablation(toks, corpus):
    src, tgt = toks
    res = Focus(FocusConfig(**TINY_AUX, aux="word-fasttext")).initialize(_inputs(src, tgt, corpus), np.random.default_rng(0))
    assert res.info["aux"]["kind"] == "word-fasttext" and res.info["aux"]["source"]["word_level"]
    assert res.mapping.counts()["combined"] > 0


def test_config_validation_and_presets():
    with pytest.raises(ValueError, match="overlap"):
        FocusConfig(overlap="partial")
    with pytest.raises(ValueError, match="aux_dim"):
        FocusConfig(aux_dim=0)
    ref = FocusConfig.reference()
    assert (ref.aux_model, ref.aux_dim, ref.aux_neg, ref.fuzzy, ref.special_anchors) == ("cbow", 100, 10, False, True)
    assert FocusConfig().special_anchors is False and FocusConfig().extension_aux == "language"
    with pytest.raises(ValueError, match="extension_aux"):
        FocusConfig(extension_aux="new")
    paper = FocusConfig()
    assert (paper.aux_model, paper.aux_dim, paper.aux_epochs, paper.aux_min_count) == ("skipgram", 300, 3, 10)


def test_registered():
    from harness.registry import get

    entry = get("method", "focus")
    assert entry.cls is Focus and entry.config_cls is FocusConfig


def test_extension_mode_copies_originals_and_combines_new_tokens(toks, corpus):
    import copy

    src, _ = toks
    ext = copy.deepcopy(src)
    n0 = len(ext)
    ext.add_tokens(["vae", "vbe", "vci", "vdo", "vfu"])
    res = Focus(FocusConfig(**TINY_AUX)).initialize(_inputs(src, ext, corpus), np.random.default_rng(0))
    m = res.mapping
    assert all(m.row(i)[0].tolist() == [i] for i in range(n0))  # every original row is its own source row
    assert m.provenance[n0:].tolist() == [COMBINED] * 5


def test_symbolic_rule_is_an_option_named_in_its_error():
    from methods.focus import Focus, FocusConfig

    assert FocusConfig().symbolic_rule == "reference"
    assert FocusConfig(symbolic_rule="wide").symbolic_rule == "wide"
    with pytest.raises(ValueError, match="symbolic_rule"):
        FocusConfig(symbolic_rule="unicode")
    assert Focus.combines is True  # an all-fallback FOCUS result is flagged by the sanity guards
