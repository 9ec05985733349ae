"""WECHSEL against its reference code, and the options that reproduce it.

* English tokens by an English tokenizer's vocabulary (the FOCUS paper) or by the source corpus;
* the reference's Procrustes correspondences (every case-variant combination, duplicates kept);
* source specials as neighbour candidates;
* exact ties at the k-th place broken by the lower source id; near ties counted per run;
* the adaptive screen;
* ``wechsel.WECHSEL(...).apply(...)`` run whole against :meth:`WechselConfig.reference` on
  SentencePiece tokenizers and fastText ``.bin`` files: equal rows everywhere but near ties.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import methods._exact_topk as similarity_mod
from harness.model.surgery import materialize
from harness.protocols import COMBINED, FALLBACK, SPECIAL, TransferInputs
from methods import _fasttext
from methods._wordvectors import WordVectors, align_word_vectors, match_dictionary, train_word_vectors
from methods.wechsel import (
    NEAR_TIE,
    Wechsel,
    WechselConfig,
    english_vocabulary_tokens,
    preset_name,
    source_language_tokens,
    topk_cosine,
    wechsel_mapping,
)
from tests._tokfixtures import SOURCE_TEXT, TARGET_TEXT, from_vocab, unigram
from tests.conftest import reference_module

FT = {"dim": 16, "epochs": 1, "min_count": 1, "threads": 1, "bucket": _fasttext.min_bucket(16)}

# target<TAB>source; lower-case words (each counts 4 times in the reference), a capitalized one, a repeated line
DICTIONARY = [("hund", "dog"), ("katze", "cat"), ("essen", "food"), ("tag", "day"), ("welt", "world"), ("raum", "room"),
              ("kalt", "cold"), ("Fuchs", "Fox"), ("hund", "dog"), ("der", "the"), ("ein", "a"), ("und", "and"),
              ("zahlen", "numbers"), ("text", "text"), ("schnelle", "quick"), ("café", "café")]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """Corpora, tokenizers, fastText .bin models and the dictionary in both column orders."""
    d = tmp_path_factory.mktemp("wechsel-ref")
    src_txt, tgt_txt = d / "src.txt", d / "tgt.txt"
    src_txt.write_text("\n".join(SOURCE_TEXT) + "\n", encoding="utf-8")
    tgt_txt.write_text("\n".join(TARGET_TEXT) + "\n", encoding="utf-8")
    bins = {}
    for side, txt in (("source", src_txt), ("target", tgt_txt)):
        wv = train_word_vectors(txt, dim=16, epoch=2, min_count=1, bucket=_fasttext.min_bucket(16), seed=3, cache_dir=None)
        bins[side] = d / f"{side}.bin"
        wv.model.save_model(str(bins[side]))
    ours, theirs = d / "dict.tsv", d / "dict-reference.tsv"
    ours.write_text("".join(f"{t}\t{s}\n" for t, s in DICTIONARY), encoding="utf-8")
    theirs.write_text("".join(f"{s}\t{t}\n" for t, s in DICTIONARY), encoding="utf-8")  # english<TAB>target
    return {"source_text": src_txt, "target_text": tgt_txt, "dictionary": ours, "reference_dictionary": theirs, **bins}


def _inputs(files: dict, src_tok, tgt_tok, emb: torch.Tensor) -> TransferInputs:
    return TransferInputs(src_tok, tgt_tok, emb, source_corpus=files["source_text"], target_corpus=files["target_text"],
                          dictionary=files["dictionary"], source_word_vectors=files["source"],
                          target_word_vectors=files["target"])


def _candidate_ids(mapping) -> np.ndarray:
    per_entry = np.repeat(mapping.provenance, np.diff(mapping.indptr))
    return mapping.indices[per_entry == COMBINED]


# ------------------------------------------------------------------------------------------------
# English tokens
# ------------------------------------------------------------------------------------------------


def test_english_tokens_by_an_english_tokenizers_vocabulary(tmp_path, files):
    src = unigram()  # SentencePiece pieces with ▁
    # a hand-made English byte-level vocabulary (Ġ marks a word start)
    english = from_vocab("bytelevel", ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "Ġfoo", "Ġth", "he", "an", "s",
                                       "Ġwa", "Ġzzz", ".", ",", "walk"])
    english.save_pretrained(tmp_path / "en-tok")
    mask, info = english_vocabulary_tokens(src, english, len(src))
    # canonical comparison: ▁foo (source) is Ġfoo (English), and nothing else counts
    from harness.vocab import canonical_vocab

    en_forms = {c for c in canonical_vocab(english) if c is not None}
    expected = np.array([c is not None and c in en_forms for c in canonical_vocab(src)])
    assert np.array_equal(mask, expected) and info["tokens"] == int(expected.sum()) > 0
    ids = src.convert_tokens_to_ids(["▁foo", "he", "▁walk"])
    assert mask[ids].tolist() == [True, True, False]  # "walk" is not a word start: not ▁walk
    corpus_mask, _ = source_language_tokens(src, files["source_text"], len(src))
    assert corpus_mask.sum() > mask.sum()  # the corpus definition is the wider set

    emb = torch.randn(len(src), 8, generator=torch.Generator().manual_seed(0))
    inputs = _inputs(files, src, unigram(tuple(TARGET_TEXT), 150), emb)
    cfg = WechselConfig(source_tokens="english-only", english_tokenizer=str(tmp_path / "en-tok"))
    res = Wechsel(cfg).initialize(inputs, np.random.default_rng(0))
    assert mask[_candidate_ids(res.mapping)].all()
    assert res.info["source_tokens"] == "english-only (tokenizer-overlap)"
    cand = res.info["source_candidates"]
    assert cand["english_tokens"] == "tokenizer-overlap" and cand["english_tokenizer"]["tokens"] == int(mask.sum())
    corpus = Wechsel(WechselConfig(source_tokens="english-only", english_tokens="source-corpus")).initialize(
        inputs, np.random.default_rng(0))
    assert corpus.info["source_candidates"]["used"] > cand["used"]
    with pytest.raises(ValueError, match="english_tokenizer"):
        WechselConfig(source_tokens="english-only")


# ------------------------------------------------------------------------------------------------
# Procrustes correspondences
# ------------------------------------------------------------------------------------------------


def test_all_combinations_keeps_the_references_duplicates():
    tgt = {"haus", "Haus", "hund"}.__contains__
    src = {"house", "House", "dog"}.__contains__
    pairs = [("haus", "house"), ("hund", "dog"), ("hund", "dog")]
    uniq = match_dictionary(pairs, tgt, src)
    every = match_dictionary(pairs, tgt, src, case_expansion="all-combinations")
    assert sorted(uniq.pairs) == [("Haus", "House"), ("Haus", "house"), ("haus", "House"), ("haus", "house"), ("hund", "dog")]
    # the reference's loops over (w, w.lower(), w.title()): source outer, target inner
    assert every.pairs[:9] == [("haus", "house"), ("haus", "house"), ("Haus", "house"),
                               ("haus", "house"), ("haus", "house"), ("Haus", "house"),
                               ("haus", "House"), ("haus", "House"), ("Haus", "House")]
    assert every.pairs[9:] == [("hund", "dog")] * 8  # 2 x 2 per line, the line twice
    assert every.n_distinct == uniq.n_distinct == 5 and every.report()["pairs_after_case_expansion"] == 17


def test_all_combinations_gives_the_references_rotation(files):
    wechsel = reference_module("benchmarks.bench_wechsel").import_reference()
    import fasttext

    src_ft, tgt_ft = fasttext.load_model(str(files["source"])), fasttext.load_model(str(files["target"]))
    ref = wechsel.WECHSEL(src_ft, tgt_ft, bilingual_dictionary=str(files["reference_dictionary"]))
    probe = np.random.default_rng(0).normal(size=(5, 16))
    ref_mapped = ref.source_transform(probe)  # the reference rotates source vectors into the target space
    src_wv, tgt_wv = WordVectors.from_fasttext(src_ft, origin="s"), WordVectors.from_fasttext(tgt_ft, origin="t")
    ours = align_word_vectors(tgt_wv, src_wv, files["dictionary"], case_expansion="all-combinations", precision="float32")
    # ours maps target -> source with W; the reference maps source -> target with W^T (computed in float32)
    assert np.allclose(probe @ ours.matrix.T, ref_mapped, rtol=0, atol=1e-12)
    ours64 = align_word_vectors(tgt_wv, src_wv, files["dictionary"], case_expansion="all-combinations")
    assert np.allclose(probe @ ours64.matrix.T, ref_mapped, atol=2e-5)  # the same fit up to float32 rounding
    assert ours.info["precision"] == "float32" and ours64.info["precision"] == "float64"
    uniq = align_word_vectors(tgt_wv, src_wv, files["dictionary"])
    assert ours.info["pairs_used"] > uniq.info["pairs_used"] == uniq.info["distinct_pairs"] == ours.info["distinct_pairs"]
    assert not np.allclose(probe @ uniq.matrix.T, ref_mapped, atol=1e-3)


# ------------------------------------------------------------------------------------------------
# Specials, ties, near ties, screen
# ------------------------------------------------------------------------------------------------


def test_special_candidates_option():
    rng = np.random.default_rng(4)
    u_s = rng.normal(size=(60, 6)).astype(np.float32)
    u_t = rng.normal(size=(20, 6)).astype(np.float32)
    u_s[1] = u_t[7]  # the source special 1 is target 7's nearest neighbour
    specials = np.array([[0, 0], [1, 1]])
    off = wechsel_mapping(u_t, u_s, k=3, specials=specials)
    on = wechsel_mapping(u_t, u_s, k=3, specials=specials, special_candidates=True)
    assert not np.isin(_candidate_ids(off.mapping), [0, 1]).any()
    assert on.mapping.row(7)[0][0] == 1 and on.mapping.provenance[1] == SPECIAL  # still copied by role
    assert preset_name(WechselConfig()) == "paper" and preset_name(WechselConfig.reference()) == "reference"
    assert preset_name(WechselConfig(special_candidates=True)) == "custom"


def test_exact_tie_at_the_kth_place_goes_to_the_lower_source_id_and_is_a_near_tie():
    rng = np.random.default_rng(5)
    keys = rng.normal(size=(50, 8)).astype(np.float32)
    q = rng.normal(size=(6, 8)).astype(np.float32)
    # query 0: its 3rd neighbour has two identical copies (ids 40 and 12): the 3rd place is a tie
    qn = q[0] / np.linalg.norm(q[0])
    for i, c in ((30, 0.99), (31, 0.98), (40, 0.97)):
        ortho = rng.normal(size=8)
        ortho -= ortho @ qn * qn
        keys[i] = (c * qn + np.sqrt(1 - c * c) * ortho / np.linalg.norm(ortho)).astype(np.float32)
    keys[12] = keys[40]
    for screen in ("fp32", "bf16"):
        for chunk in (1, 4):
            top = topk_cosine(q, keys, 3, screen=screen, chunk_rows=chunk)
            assert top.indices[0].tolist() == [30, 31, 12]  # 12 < 40: the lower id wins
            assert top.kth_gap[0] == 0.0 and (top.kth_gap[1:] > 0).all()
    core = wechsel_mapping(q, keys, k=3)
    nt = core.stats["near_ties"]
    assert nt["threshold"] == NEAR_TIE and nt["exact"] >= 1 and 0 in nt["ids"] and nt["rows"] == len(nt["ids"])
    # the count matches the gaps: rows whose 3rd and 4th exact cosines differ by < 1e-6
    assert nt["rows"] == int(np.sum(core.neighbours.kth_gap < NEAR_TIE))


def test_near_ties_reach_the_method_info(files):
    src, tgt = unigram(), unigram(tuple(TARGET_TEXT), 150)
    emb = torch.randn(len(src), 8, generator=torch.Generator().manual_seed(0))
    res = Wechsel(WechselConfig()).initialize(_inputs(files, src, tgt, emb), np.random.default_rng(0))
    nt = res.info["near_ties"]
    assert set(nt) == {"threshold", "rows", "exact", "ids_truncated"} and nt["threshold"] == NEAR_TIE
    # SentencePiece has ▁x and x with one string, hence identical vectors: exact ties are common
    assert res.info["wechsel"]["similarity"]["duplicate_keys"] > 0
    assert nt["rows"] == len(res.info["wechsel"]["near_ties"]["ids"]) and nt["rows"] >= nt["exact"]
    assert res.info["preset"] == "paper" and res.info["case_expansion"] == "unique"


def test_auto_screen_leaves_bf16_when_candidates_explode(monkeypatch):
    rng = np.random.default_rng(6)
    center = rng.normal(size=32)
    keys = (center + 0.01 * rng.normal(size=(3000, 32))).astype(np.float32)  # concentrated cosines (~0.9999)
    q = (center + 0.01 * rng.normal(size=(40, 32))).astype(np.float32)
    expected = topk_cosine(q, keys, 10, screen="fp32", chunk_rows=8)
    monkeypatch.setattr(similarity_mod, "resolve_screen", lambda s: "bf16")  # as on a CPU with native bf16
    got = topk_cosine(q, keys, 10, screen="auto", chunk_rows=8)
    # even the fp32 margin keeps every key here: auto climbs to the fp64 screen, before rescoring anything
    assert got.stats["screen"] == "fp64" and got.stats["screen_switched"].startswith("bf16 screen kept")
    assert "fp64 screen from then on" in got.stats["screen_switched"] and got.stats["screen_chunks"]["fp64"] == 5
    assert got.stats["candidates_per_row"] < 64 < expected.stats["candidates_per_row"]
    assert np.array_equal(got.indices, expected.indices) and np.array_equal(got.similarities, expected.similarities)
    assert np.array_equal(got.kth_gap, expected.kth_gap)
    forced = topk_cosine(q, keys, 10, screen="bf16", chunk_rows=8)  # an explicit choice is kept
    assert forced.stats["screen"] == "bf16" and forced.stats["screen_switched"] is None
    assert np.array_equal(forced.indices, expected.indices)


# ------------------------------------------------------------------------------------------------
# The reference code, run whole
# ------------------------------------------------------------------------------------------------


def _reference_rows(files: dict, src_tok, tgt_tok, emb: np.ndarray):
    """Rows, fallback mask and per-row neighbour ids (``-1`` rows: fallback) of ``wechsel.WECHSEL.apply``."""
    wechsel = reference_module("benchmarks.bench_wechsel").import_reference()
    import fasttext

    model = wechsel.WECHSEL(fasttext.load_model(str(files["source"])), fasttext.load_model(str(files["target"])),
                            bilingual_dictionary=str(files["reference_dictionary"]))
    rows, info = model.apply(src_tok, tgt_tok, emb.copy())
    fallback = np.zeros(len(tgt_tok), dtype=bool)
    fallback[tgt_tok.convert_tokens_to_ids(list(info.not_found))] = True
    neighbours = np.full((len(tgt_tok), 10), -1, dtype=np.int64)
    for token, (tokens, _weights, _sims) in info.sources.items():
        neighbours[tgt_tok.convert_tokens_to_ids(token)] = src_tok.convert_tokens_to_ids(list(tokens))
    return rows, fallback, neighbours


@pytest.mark.parametrize("vocab", [150, 260])
def test_reference_preset_equals_the_reference_code_on_every_row_without_a_near_tie(files, vocab):
    src, tgt = unigram(vocab_size=vocab), unigram(tuple(TARGET_TEXT), vocab - 60)
    emb = torch.randn(len(src), 12, generator=torch.Generator().manual_seed(1)) * 0.05
    ref_rows, ref_fallback, ref_nb = _reference_rows(files, src, tgt, emb.numpy())
    results = {}
    for name, cfg in (("reference", WechselConfig.reference()), ("paper", WechselConfig())):
        res = Wechsel(cfg).initialize(_inputs(files, src, tgt, emb), np.random.default_rng(0))
        rows = materialize(res.mapping, emb, torch.Generator().manual_seed(0)).numpy()
        fb = res.mapping.provenance == FALLBACK
        near = np.zeros(len(tgt), dtype=bool)
        near[res.info["wechsel"]["near_ties"]["ids"]] = True
        compared = ~fb & ~ref_fallback & ~near & (res.mapping.provenance != SPECIAL)
        same_set = np.array([set(res.mapping.row(t)[0].tolist()) == set(ref_nb[t].tolist()) for t in range(len(tgt))])
        diff = np.abs(rows.astype(np.float64) - ref_rows).max(axis=1)
        results[name] = (fb, compared, same_set, diff, res)
    fb, compared, same_set, diff, res = results["reference"]
    assert np.array_equal(fb, ref_fallback)  # the same random-fallback rows
    assert compared.sum() >= 40
    assert same_set[compared].all(), np.flatnonzero(compared & ~same_set)  # the same 10 neighbours
    # the same rows up to float rounding (the reference's float32 Procrustes moves cosines by ~1e-7)
    assert diff[compared].max() < 1e-5, np.flatnonzero(compared & (diff >= 1e-5))
    assert res.info["preset"] == "reference" and res.info["alignment"]["pairs_used"] > res.info["alignment"]["distinct_pairs"]
    # the paper's defaults are not the reference's: some neighbour sets change
    _, compared_p, same_p, _, _ = results["paper"]
    assert not same_p[compared_p].all()
