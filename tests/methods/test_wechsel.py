"""WECHSEL (``methods/wechsel.py``) and its word-vector helpers (``methods/_wordvectors.py``)."""

from __future__ import annotations

import json
import random as pyrandom
from pathlib import Path

import numpy as np
import pytest
import torch

import methods._exact_topk as similarity_mod
from harness.protocols import COMBINED, FALLBACK, SPECIAL, TransferInputs
from harness.registry import get
from methods import _fasttext
from methods._wordvectors import (
    DictionaryError,
    DimensionMismatchError,
    WordVectors,
    align_word_vectors,
    check_dimensions,
    load_word_vectors,
    match_dictionary,
    procrustes,
    read_dictionary,
)
from methods.wechsel import (
    TABLE7_GRID,
    Wechsel,
    WechselConfig,
    source_language_tokens,
    topk_cosine,
    wechsel_mapping,
    wechsel_weights,
)
from tests._tokfixtures import SOURCE_TEXT, TARGET_TEXT, bytelevel, from_vocab, unigram, wordpiece

FT = {"dim": 16, "epochs": 1, "min_count": 1, "threads": 1, "bucket": _fasttext.min_bucket(16)}
"""Tiny fastText settings: trains in well under a second on the fixture corpora."""

DICTIONARY = "hund\tdog\nkatze\tcat\nessen\tfood\ntag\tday\nwelt\tworld\nraum\troom\nkalt\tcold\nFuchs\tfox\nzahlen\tnumbers\n"


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def _write_vec(path: Path, words: list[str], vecs: np.ndarray, header: bool = True) -> Path:
    lines = [f"{len(words)} {vecs.shape[1]}"] if header else []
    lines += [w + " " + " ".join(f"{x:.7f}" for x in v) for w, v in zip(words, vecs)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row_sums(m) -> np.ndarray:
    """Sum of the weights of every target row (0 for rows without entries)."""
    return np.bincount(np.repeat(np.arange(m.n_target), np.diff(m.indptr)), weights=m.weights, minlength=m.n_target)


def _brute_topk(q: np.ndarray, k: np.ndarray, kk: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact float64 top-k by (cosine desc, index asc), for rows of q with a vector."""
    qd, kd = q.astype(np.float64), k.astype(np.float64)
    qn = qd / np.linalg.norm(qd, axis=1, keepdims=True)
    kn = np.linalg.norm(kd, axis=1)
    s = (qn @ kd.T) / np.where(kn > 0, kn, 1.0)
    s[:, kn == 0] = -np.inf
    if mask is not None:
        s[:, ~mask] = -np.inf
    order = np.argsort(-s, axis=1, kind="stable")[:, :kk]
    return order, np.take_along_axis(s, order, 1)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("wechsel-corpora")
    src = d / "src.txt"
    tgt = d / "tgt.txt"
    src.write_text("\n".join(SOURCE_TEXT) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(TARGET_TEXT) + "\n", encoding="utf-8")
    dic = d / "dict.tsv"
    dic.write_text(DICTIONARY, encoding="utf-8")
    return {"source": src, "target": tgt, "dictionary": dic, "cache": d / "cache"}


def _inputs(corpora: dict, src_tok=None, tgt_tok=None, *, cache: bool = True, **overrides) -> TransferInputs:
    src_tok = src_tok or unigram()
    tgt_tok = tgt_tok or bytelevel(TARGET_TEXT)
    emb = torch.randn(len(src_tok), 8, generator=torch.Generator().manual_seed(0))
    values = dict(
        source_corpus=corpora["source"], target_corpus=corpora["target"], dictionary=corpora["dictionary"],
        cache_dir=corpora["cache"] if cache else None,
    )
    values.update(overrides)
    return TransferInputs(src_tok, tgt_tok, emb, **values)


def _run(inputs: TransferInputs, seed: int = 0, **config):
    return Wechsel(WechselConfig(**{**FT, **config})).initialize(inputs, np.random.default_rng(seed))


# ------------------------------------------------------------------------------------------------
# word vectors, dictionary, Procrustes
# ------------------------------------------------------------------------------------------------


def test_procrustes_recovers_a_known_rotation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8))
    q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    w = procrustes(x, x @ q)
    assert np.allclose(w, q, atol=1e-10)
    assert np.allclose(w @ w.T, np.eye(8), atol=1e-10)
    # through WordVectors and a dictionary: target = source rotated, aligned back onto the source
    words_s = [f"s{i}" for i in range(200)]
    words_t = [f"t{i}" for i in range(200)]
    src = WordVectors.from_matrix(words_s, x.astype(np.float32))
    tgt = WordVectors.from_matrix(words_t, (x @ q.T).astype(np.float32))
    al = align_word_vectors(tgt, src, list(zip(words_t, words_s)))
    assert np.allclose(al.matrix, q, atol=1e-4)
    assert al.info["pairs_used"] == 200 and al.info["residual"] < 1e-5 < al.info["residual_unaligned"]
    assert al.info["mean_pair_cosine_after"] > 0.9999


def test_case_variants_are_expanded_when_present_in_both_vocabularies():
    tgt = {"Haus", "haus", "Hund", "katze"}.__contains__
    src = {"house", "House", "dog", "cat"}.__contains__
    pairs = [("Haus", "house"), ("HUND", "DOG"), ("Katze", "cat"), ("Haus", "house"), ("maus", "mouse")]
    m = match_dictionary(pairs, tgt, src)
    assert m.pairs == [
        ("Haus", "house"), ("Haus", "House"), ("haus", "house"), ("haus", "House"),  # 2 x 2 variants, no duplicates
        ("Hund", "dog"),  # HUND -> Hund (title), DOG -> dog (lower)
        ("katze", "cat"),  # Katze -> katze (lower)
    ]
    assert (m.n_read, m.n_in_vocab, m.n_usable) == (5, 2, 4)  # the repeated Haus/house counts twice as read
    assert m.report()["pairs_after_case_expansion"] == 6


def test_read_dictionary_formats(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("Haus\thouse\n\nHund dog\nnur-ein-wort\nzwei worte drei\ta\tb\tc\nx\t\n", encoding="utf-8")
    pairs, malformed = read_dictionary(p)
    assert pairs == [("Haus", "house"), ("Hund", "dog"), ("zwei worte drei", "a")]
    assert malformed == 2


def test_load_vec_with_and_without_header_and_bad_lines(tmp_path):
    v = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = load_word_vectors(_write_vec(tmp_path / "a.vec", ["x", "y"], v))
    b = load_word_vectors(_write_vec(tmp_path / "b.vec", ["x", "y"], v, header=False))
    for wv in (a, b):
        assert wv.words == ["x", "y"] and wv.dim == 3 and not wv.has_subwords and wv.counts is None
        assert np.array_equal(wv.word_vectors(["y"]), v[1:])
    bad = tmp_path / "bad.vec"
    bad.write_text("2 3\nx 1 2 3\ny 1 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.vec:3: expected a word and 3 values"):
        load_word_vectors(bad)
    with pytest.raises(ValueError, match="no character n-gram vectors"):
        a.string_vectors(["x"])


def test_no_usable_dictionary_pairs_says_how_many_were_read(tmp_path):
    src = WordVectors.from_matrix(["dog", "cat"], np.eye(2, dtype=np.float32), origin="src.vec")
    tgt = WordVectors.from_matrix(["hund", "katze"], np.eye(2, dtype=np.float32), origin="tgt.vec")
    p = tmp_path / "d.tsv"
    p.write_text("dog\thund\ncat\tkatze\nhund\tmaus\nkaputt\n", encoding="utf-8")  # columns swapped, one half-match
    with pytest.raises(DictionaryError) as e:
        align_word_vectors(tgt, src, p)
    msg = str(e.value)
    assert "Read 3 pairs (1 malformed lines skipped)" in msg
    assert "0 had both words in the vocabularies" in msg
    assert "1 target words in the target vocabulary of tgt.vec" in msg
    assert "target_word<TAB>source_word" in msg


def test_dimension_mismatch_names_both_files_and_reduces_the_larger(tmp_path):
    rng = np.random.default_rng(0)
    s = load_word_vectors(_write_vec(tmp_path / "en.vec", [f"w{i}" for i in range(20)], rng.normal(size=(20, 6))))
    t = load_word_vectors(_write_vec(tmp_path / "de.vec", [f"v{i}" for i in range(20)], rng.normal(size=(20, 4))))
    with pytest.raises(DimensionMismatchError) as e:
        check_dimensions(s, t)
    msg = str(e.value)
    assert "en.vec has dim 6" in msg and "de.vec has dim 4" in msg and "source vectors to 4" in msg
    s2, t2, info = check_dimensions(s, t, mode="reduce")
    assert (s2.dim, t2.dim) == (4, 4) and info["reduced"] == {"side": "source", "from": 6, "to": 4}
    t3, s3, info = check_dimensions(t, s, mode="reduce")  # now the *target* (second) is the larger one
    assert (t3.dim, s3.dim) == (4, 4) and info["reduced"]["side"] == "target"


# ------------------------------------------------------------------------------------------------
# the numeric core
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,m,d,k", [(120, 3000, 16, 10), (40, 40_000, 6, 10), (30, 500, 4, 50), (20, 30, 3, 10)])
def test_topk_is_exact_and_independent_of_screen_and_chunking(n, m, d, k):
    rng = np.random.default_rng(n + m)
    q = rng.normal(size=(n, d)).astype(np.float32)
    keys = rng.normal(size=(m, d)).astype(np.float32)
    q[3] = 0.0
    keys[5] = 0.0
    keys[8] = keys[7]  # an exact tie: the lower id must come first
    q[4] = keys[7]
    mask = np.ones(m, dtype=bool)
    mask[10:15] = False
    results = [topk_cosine(q, keys, k, key_mask=mask, chunk_rows=c, screen=s) for s in ("bf16", "fp32", "fp64", "auto")
               for c in (7, 512)]
    for r in results[1:]:
        assert np.array_equal(r.indices, results[0].indices)
        assert np.array_equal(r.similarities, results[0].similarities)
    r = results[0]
    kk = min(k, int(mask.sum()) - 1)
    has = r.has_vector
    assert not has[3] and has.sum() == n - 1 and (r.indices[3] == -1).all()
    idx, sims = _brute_topk(q[has], keys, kk, mask)
    assert np.array_equal(r.indices[has], idx)
    assert np.allclose(r.similarities[has], sims, atol=1e-6)
    assert r.indices[4, :2].tolist() == [7, 8]


def test_a_violated_screen_bound_falls_back_to_float32(monkeypatch):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(50, 8)).astype(np.float32)
    keys = rng.normal(size=(2000, 8)).astype(np.float32)
    expected = topk_cosine(q, keys, 5, screen="fp32")
    real = similarity_mod._screen_err

    def tiny_for_bf16(screen, d, magnitude):  # pretend bf16 were far more precise than it is
        return real(screen, d, magnitude) if screen == "fp32" else torch.full_like(magnitude, 1e-9)

    monkeypatch.setattr(similarity_mod, "_screen_err", tiny_for_bf16)
    got = topk_cosine(q, keys, 5, screen="bf16", chunk_rows=16)
    assert got.stats["fallback_chunks"] > 0
    assert np.array_equal(got.indices, expected.indices) and np.array_equal(got.similarities, expected.similarities)


def test_identity_alignment_recovers_known_neighbours():
    rng = np.random.default_rng(2)
    u_s = rng.normal(size=(300, 12)).astype(np.float32)
    truth = rng.permutation(300)[:60]
    u_t = u_s[truth] + 0.01 * rng.normal(size=(60, 12)).astype(np.float32)
    nb = wechsel_weights(u_t, u_s, k=10, tau=0.1)
    assert np.array_equal(nb.indices[:, 0], truth)
    assert (nb.weights[:, 0] > nb.weights[:, 1]).all()


@pytest.mark.parametrize("k,tau", TABLE7_GRID)
def test_softmax_weights_sum_to_one_over_exactly_k_sources(k, tau):
    rng = np.random.default_rng(3)
    u_s = rng.normal(size=(400, 10)).astype(np.float32)
    u_t = rng.normal(size=(50, 10)).astype(np.float32)
    core = wechsel_mapping(u_t, u_s, k=k, tau=tau)
    m = core.mapping
    assert (m.provenance == COMBINED).all()
    assert (np.diff(m.indptr) == k).all()
    assert np.allclose(_row_sums(m), 1.0, atol=1e-6)
    idx, sims = _brute_topk(u_t, u_s, k)
    expected = np.exp(sims / tau) / np.exp(sims / tau).sum(axis=1, keepdims=True)
    for t in range(50):
        ids, w = m.row(t)
        assert ids.tolist() == idx[t].tolist()
        assert np.allclose(w, expected[t], atol=1e-5)


def test_zero_vectors_become_fallback_and_specials_are_copied():
    rng = np.random.default_rng(4)
    u_s = rng.normal(size=(100, 6)).astype(np.float32)
    u_t = rng.normal(size=(30, 6)).astype(np.float32)
    u_t[[5, 9]] = 0.0
    u_s[[0, 1]] = 7.0  # specials with vectors: still never candidates
    specials = np.array([[0, 1], [1, 0]])
    core = wechsel_mapping(u_t, u_s, k=3, specials=specials, target_mask=np.arange(30) != 20)
    m = core.mapping
    assert m.provenance[5] == m.provenance[9] == m.provenance[20] == FALLBACK
    assert np.diff(m.indptr)[[5, 9, 20]].tolist() == [0, 0, 0]
    assert m.provenance[0] == m.provenance[1] == SPECIAL
    assert m.row(0)[0].tolist() == [1] and m.row(1)[0].tolist() == [0]
    assert not np.isin(m.indices[m.indptr[2]:], [0, 1]).any()
    assert core.stats["fallback_zero_vector"] == 2 and core.stats["fallback_excluded"] == 1


# ------------------------------------------------------------------------------------------------
# the method, end to end
# ------------------------------------------------------------------------------------------------


def test_registered_with_config():
    entry = get("method", "wechsel")
    assert entry.cls is Wechsel and entry.config_cls is WechselConfig
    cfg = WechselConfig()
    assert (cfg.k, cfg.temperature, cfg.variant, cfg.source_tokens) == (10, 0.1, "subword", "all")
    assert (10, 0.1) in TABLE7_GRID


@pytest.mark.parametrize("field,value", [("k", 0), ("temperature", 0.0), ("variant", "words"), ("source_tokens", "en"),
                                         ("screen", "fp16"), ("bucket", 10), ("minn", 7)])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        WechselConfig(**{**FT, field: value})


def test_end_to_end_on_trained_tokenizers_and_fasttext(corpora):
    src, tgt = unigram(), wordpiece(TARGET_TEXT)  # RoBERTa-style specials -> BERT-style specials
    res = _run(_inputs(corpora, src, tgt), k=10, temperature=0.1)
    m = res.mapping
    counts = m.counts()
    assert m.n_target == len(tgt) and m.n_source == len(src)
    assert counts["special"] == 5 and counts["copied"] == 0 and counts["combined"] > 0
    combined = np.flatnonzero(m.provenance == COMBINED)
    assert (np.diff(m.indptr)[combined] == 10).all()
    assert np.allclose(_row_sums(m)[combined], 1.0, atol=1e-6)
    # specials by role: [CLS] <- <s>, [SEP] <- </s>, [MASK] <- <mask> ...
    for t_name, s_name in (("[CLS]", "<s>"), ("[SEP]", "</s>"), ("[PAD]", "<pad>"), ("[UNK]", "<unk>"), ("[MASK]", "<mask>")):
        t_id, s_id = tgt.convert_tokens_to_ids(t_name), src.convert_tokens_to_ids(s_name)
        assert m.provenance[t_id] == SPECIAL and m.row(t_id)[0].tolist() == [s_id]
    special_src = [src.convert_tokens_to_ids(s) for s in ("<s>", "</s>", "<pad>", "<unk>", "<mask>")]
    assert not np.isin(m.indices[np.repeat(m.provenance, np.diff(m.indptr)) == COMBINED], special_src).any()
    info = res.info
    json.dumps(info)  # JSON-serializable, for the trial record
    assert info["alignment"]["pairs_used"] >= 8 and info["alignment"]["dictionary"]["read"] == 9
    assert 0 <= info["alignment"]["residual"] < info["alignment"]["residual_unaligned"] + 1e-9
    assert info["subword_embeddings"]["target_zero_vectors"] == counts["fallback"]
    assert info["word_vectors"]["source"]["trained"]["deterministic"] is True
    assert set(info["timings"]) >= {"word_vectors_s", "alignment_s", "subword_embeddings_s", "similarity_s", "total_s"}
    assert info["wechsel"]["similarity"]["queries_with_vector"] == counts["combined"]


def test_deterministic_with_a_disturbed_global_rng(corpora):
    inputs = _inputs(corpora, cache=False)  # train fastText twice: training itself must be reproducible
    pyrandom.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    a = _run(inputs, seed=7)
    pyrandom.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    np.random.random(17)
    torch.rand(5)
    b = _run(inputs, seed=7)
    assert a.info["word_vectors"]["target"]["trained"]["cache"] == "off"
    for field in ("indptr", "indices", "weights", "provenance"):
        assert np.array_equal(getattr(a.mapping, field), getattr(b.mapping, field)), field
    c = _run(inputs, seed=8)  # a different trial seed trains different vectors
    assert c.info["word_vectors"]["target"]["trained"]["params"]["seed"] != a.info["word_vectors"]["target"]["trained"]["params"]["seed"]


def test_tfr_variant_runs_and_differs(corpora):
    inputs = _inputs(corpora)
    sub = _run(inputs)
    tfr = _run(inputs, variant="tfr")
    assert tfr.info["subword_embeddings"]["variant"] == "tfr"
    assert tfr.info["subword_embeddings"]["target_tfr"]["words"] > 0
    assert tfr.mapping.counts()["combined"] > 0
    assert not (np.array_equal(sub.mapping.indices, tfr.mapping.indices) and np.array_equal(sub.mapping.provenance, tfr.mapping.provenance))


def test_english_only_restricts_sources_to_tokens_of_the_source_corpus(corpora):
    src = unigram()
    # a source vocabulary with tokens that never occur in the source corpus (they get vectors all the same)
    inputs = _inputs(corpora, src_tok=src)
    res = _run(inputs, source_tokens="english-only", english_tokens="source-corpus")
    seen, _ = source_language_tokens(src, corpora["source"], len(src))
    used = res.mapping.indices[np.repeat(res.mapping.provenance, np.diff(res.mapping.indptr)) == COMBINED]
    assert seen[used].all()
    cand = res.info["source_candidates"]
    assert cand["used"] <= cand["with_vector"] and "not_english" in cand and cand["english_tokens"] == "source-corpus"
    assert res.info["source_tokens"] == "english-only (source-corpus)"
    with pytest.raises(ValueError, match="source_corpus"):
        _run(_inputs(corpora, source_corpus=None, source_word_vectors=None), source_tokens="english-only",
             english_tokens="source-corpus")


@pytest.mark.parametrize("rotated", [True, False])
def test_known_translations_with_vec_files_tfr_and_procrustes(tmp_path, rotated):
    """Whole-word tokens, target vectors = (rotated) source vectors: every target word maps to its translation."""
    rng = np.random.default_rng(5)
    en = ["house", "dog", "cat", "tree", "water", "sun", "moon", "bread", "fire", "stone", "bird", "fish"]
    de = ["haus", "hund", "katze", "baum", "wasser", "sonne", "mond", "brot", "feuer", "stein", "vogel", "fisch"]
    v_en = rng.normal(size=(len(en), 8))
    q = np.linalg.qr(rng.normal(size=(8, 8)))[0] if rotated else np.eye(8)
    v_de = v_en @ q.T + 0.001 * rng.normal(size=v_en.shape)
    src_vec = _write_vec(tmp_path / "en.vec", en, v_en)
    tgt_vec = _write_vec(tmp_path / "de.vec", de, v_de)
    (tmp_path / "en.txt").write_text(" ".join(en) + "\n", encoding="utf-8")
    (tmp_path / "de.txt").write_text(" ".join(de) + "\n", encoding="utf-8")
    (tmp_path / "d.tsv").write_text("".join(f"{t}\t{s}\n" for t, s in zip(de[:9], en[:9])), encoding="utf-8")  # 3 held out
    src_tok = from_vocab("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *en])
    tgt_tok = from_vocab("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *de])
    emb = torch.randn(len(src_tok), 4, generator=torch.Generator().manual_seed(0))
    inputs = TransferInputs(
        src_tok, tgt_tok, emb, source_corpus=tmp_path / "en.txt", target_corpus=tmp_path / "de.txt",
        dictionary=tmp_path / "d.tsv", source_word_vectors=src_vec, target_word_vectors=tgt_vec,
    )
    res = Wechsel(WechselConfig(variant="tfr", k=1)).initialize(inputs, np.random.default_rng(0))
    for t_word, s_word in zip(de, en):
        ids, w = res.mapping.row(tgt_tok.convert_tokens_to_ids(t_word))
        assert ids.tolist() == [src_tok.convert_tokens_to_ids(s_word)] and w.tolist() == [1.0]
    assert res.info["alignment"]["pairs_used"] == 9 and res.info["alignment"]["residual"] < 1e-2
    # without alignment: right for identical spaces (the identity alignment), wrong for rotated ones
    no_al = Wechsel(WechselConfig(variant="tfr", k=1, alignment="none")).initialize(inputs, np.random.default_rng(0))
    assert np.array_equal(no_al.mapping.indices, res.mapping.indices) != rotated
    assert no_al.info["alignment"] == {"method": "none"}
    # the subword variant needs n-gram vectors, which .vec files do not have
    with pytest.raises(ValueError, match="no character n-gram vectors"):
        Wechsel(WechselConfig()).initialize(inputs, np.random.default_rng(0))


def test_missing_inputs_are_clear_errors(corpora):
    with pytest.raises(ValueError, match="inputs.dictionary"):
        _run(_inputs(corpora, dictionary=None))
    with pytest.raises(ValueError, match="inputs.target_word_vectors .* or inputs.target_corpus"):
        _run(_inputs(corpora, target_corpus=None))


def test_a_dictionary_no_target_vector_could_align_fails_before_target_vectors_are_trained(corpora, tmp_path, monkeypatch):
    import methods._wordvectors as wv_mod

    trained: list[Path] = []
    real = wv_mod.train_word_vectors

    def spy(corpus, **kw):
        trained.append(Path(corpus))
        return real(corpus, **kw)

    monkeypatch.setattr(wv_mod, "train_word_vectors", spy)
    bad = tmp_path / "ta.tsv"
    bad.write_text("nichtimkorpus\tdog\nauchnicht\tcat\n", encoding="utf-8")  # target words absent from the corpus
    with pytest.raises(DictionaryError, match=r"ta\.tsv: no usable word pairs.*0 target words in the words of \S*tgt\.txt "
                                              r"occurring at least 1 times \(counted before training"):
        _run(_inputs(corpora, dictionary=bad, cache=False))
    assert trained == [corpora["source"]]  # the source vectors were made; the target's never were
    trained.clear()
    res = _run(_inputs(corpora, cache=False))  # a usable dictionary: both trained, as before
    assert trained == [corpora["source"], corpora["target"]] and res.info["alignment"]["pairs_used"] >= 8


@pytest.mark.parametrize("min_count", [1, 2, 3])
def test_the_early_dictionary_check_fails_exactly_where_the_trained_vocabulary_has_no_pair(corpora, tmp_path, min_count):
    """One-pair dictionaries, one per target-corpus word (upper-cased, so only its case variants can match): the early
    check passes where the word is in fastText's trained vocabulary and fails where it is not."""
    from harness.words import word_tokenize
    from methods._wechsel_checks import check_dictionary_reachable
    from methods._wordvectors import _case_variants, train_word_vectors

    text = corpora["target"].read_text(encoding="utf-8")
    words = sorted({w for line in text.splitlines() for w in word_tokenize(line) if w.isalpha()})
    ft = {k: v for k, v in FT.items() if k != "epochs"}
    wv = train_word_vectors(corpora["target"], **{**ft, "epoch": 1, "min_count": min_count})
    src = WordVectors.from_matrix(["dog"], np.ones((1, 2), dtype=np.float32), origin="src.vec")
    verdicts = {True: 0, False: 0}
    for w in words[:40]:
        dic = tmp_path / "one.tsv"
        dic.write_text(f"{w.upper()}\tdog\n", encoding="utf-8")
        in_vocab = any(v in wv for v in _case_variants(w.upper()))
        try:
            check_dictionary_reachable(dic, src, corpora["target"], min_count=min_count, case_expansion="unique")
            passed = True
        except DictionaryError:
            passed = False
        assert passed == in_vocab, (w, min_count)
        verdicts[passed] += 1
    assert verdicts[True] > 0 and (min_count == 1 or verdicts[False] > 0)


def test_non_finite_inputs_are_rejected():
    q = np.ones((2, 3), dtype=np.float32)
    keys = np.ones((4, 3), dtype=np.float32)
    keys[2, 1] = np.nan
    with pytest.raises(ValueError, match="keys contain non-finite"):
        topk_cosine(q, keys, 2)
    q[0, 0] = np.inf
    with pytest.raises(ValueError, match="queries contain non-finite"):
        topk_cosine(q, np.ones((4, 3), dtype=np.float32), 2)
