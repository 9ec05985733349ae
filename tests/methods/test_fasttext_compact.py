"""Compact fastText storage: FOCUS and WECHSEL give bit-identical mappings from the full model and from
the compact cache entry; old full ``.bin`` entries are converted; multi-threaded training is flagged.

Everything is small: the generated corpora and tokenizers of ``test_focus`` / ``test_wechsel``,
fastText with dim 16, one or two epochs and the smallest bucket count that is zero-initialized.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import vocab as _canon
from harness.cache import ensure_root, list_entries
from harness.protocols import FALLBACK, TransferInputs
from harness.run.sanity import check_record
from methods import _fasttext
from methods._wechsel_subwords import describe_zero_vectors, zero_vector_causes
from methods._wordvectors import reduce_dimension, train_word_vectors
from methods.focus import Focus, FocusConfig
from methods.wechsel import Wechsel, WechselConfig
from tests._tokfixtures import SOURCE_TEXT, TARGET_TEXT, bytelevel, from_vocab, unigram
from tests.methods.test_focus import TARGET_LINES, _unigram

B16 = _fasttext.min_bucket(16)
FOCUS_AUX = {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_bucket": B16, "aux_seed": 11}
WECHSEL_FT = {"dim": 16, "epochs": 2, "min_count": 1, "bucket": B16, "fasttext_seed": 3}
DICTIONARY = "hund\tdog\nkatze\tcat\nessen\tfood\ntag\tday\nwelt\tworld\nraum\troom\nkalt\tcold\nder\tthe\nund\tand\n"
MAPPING_FIELDS = ("indptr", "indices", "weights", "provenance")


def _same_mapping(a, b) -> None:
    for f in MAPPING_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def _entries(cache, pattern: str) -> list:
    return sorted((cache / "fasttext").glob(pattern))


@pytest.fixture(scope="module")
def focus_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("compact-focus")
    corpus = d / "target.txt"
    corpus.write_text("\n".join(TARGET_LINES) + "\n", encoding="utf-8")
    from tests.methods.test_focus import SOURCE_LINES

    return {"dir": d, "corpus": corpus, "src": _unigram(SOURCE_LINES), "tgt": _unigram(TARGET_LINES)}


@pytest.fixture(scope="module")
def wechsel_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("compact-wechsel")
    src, tgt, dic = d / "src.txt", d / "tgt.txt", d / "dict.tsv"
    src.write_text("\n".join(SOURCE_TEXT) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(TARGET_TEXT) + "\n", encoding="utf-8")
    dic.write_text(DICTIONARY, encoding="utf-8")
    return {"dir": d, "source": src, "target": tgt, "dictionary": dic, "src_tok": unigram(), "tgt_tok": bytelevel(TARGET_TEXT)}


def _focus_inputs(data, cache, **kw) -> TransferInputs:
    emb = torch.randn(len(data["src"]), 8, generator=torch.Generator().manual_seed(0))
    return TransferInputs(data["src"], data["tgt"], emb, target_corpus=data["corpus"], cache_dir=cache, **kw)


def _wechsel_inputs(data, cache, **kw) -> TransferInputs:
    emb = torch.randn(len(data["src_tok"]), 8, generator=torch.Generator().manual_seed(0))
    values = {"source_corpus": data["source"], "target_corpus": data["target"], "dictionary": data["dictionary"], **kw}
    return TransferInputs(data["src_tok"], data["tgt_tok"], emb, cache_dir=cache, **values)


# ------------------------------------------------------------------------------------------------
# CompactVectors against the model it was read from
# ------------------------------------------------------------------------------------------------


def test_compact_vectors_answer_like_the_model_and_refuse_what_they_do_not_hold(wechsel_data, tmp_path):
    words_file = tmp_path / "words.txt"
    words_file.write_text(wechsel_data["target"].read_text(encoding="utf-8"), encoding="utf-8")
    ft = _fasttext.train_fasttext(words_file, dim=16, epoch=1, min_count=1, bucket=B16, seed=2)
    strings = ["zzq", "hundekuchen", "ab", ".", "der"]  # unseen, unseen, short, shorter than minn, a vocabulary word
    cv = _fasttext.CompactVectors.from_model(ft, strings, params={"dim": 16})
    assert cv.get_dimension() == ft.get_dimension() and cv.get_words() == ft.get_words(on_unicode_error="replace")
    words, counts = cv.get_words(include_freq=True)
    np.testing.assert_array_equal(counts, ft.get_words(include_freq=True)[1])
    for w in [*ft.get_words(), *strings]:
        assert cv.get_word_id(w) == ft.get_word_id(w)
        np.testing.assert_array_equal(cv.get_word_vector(w), ft.get_word_vector(w))
    assert "der" not in cv.strings and set(cv.strings) == {"zzq", "hundekuchen", "ab", "."}  # vocabulary words kept once
    assert cv.missing(["der", "zzq", "", "neu"]) == ["neu"]
    with pytest.raises(KeyError, match="'neu' is neither a vocabulary word nor one of the 4 strings"):
        cv.get_word_vector("neu")
    with pytest.raises(ValueError, match="needs the full fastText model"):
        cv.get_input_matrix()
    cv.save(tmp_path / "v.npz")
    back = _fasttext.CompactVectors.load(tmp_path / "v.npz")
    assert back.words == cv.words and back.strings == cv.strings and (back.minn, back.maxn) == (3, 6)
    np.testing.assert_array_equal(back.word_matrix, cv.word_matrix)
    np.testing.assert_array_equal(back.string_matrix, cv.string_matrix)


def test_vector_reader_gives_the_bits_of_get_word_vector(wechsel_data, tmp_path):
    ft = _fasttext.train_fasttext(wechsel_data["target"], dim=16, epoch=1, min_count=1, bucket=B16, seed=3)
    strings = [*ft.get_words()[:40], "zzq", "hundekuchen", "ab", ".", "ünï"]
    cv = _fasttext.CompactVectors.from_model(ft, strings, params={"dim": 16})
    for model in (ft, cv):
        word_id, read = _fasttext.vector_reader(model)
        rows = np.full((len(strings), 16), np.nan, dtype=np.float32)
        for i, w in enumerate(strings):  # one reused buffer: each row must be only its own word's vector
            read(w, rows[i])
            assert word_id(w) == ft.get_word_id(w)
        want = np.stack([ft.get_word_vector(w) for w in strings])
        assert np.array_equal(rows.view(np.uint32), want.view(np.uint32))
    vecs, has = _fasttext.string_vectors(ft, ["", *strings])
    assert not has[0] and np.array_equal(vecs[1:], want)


def test_compact_cache_hit_extension_and_old_bin_conversion(wechsel_data, tmp_path, caplog):
    text = wechsel_data["target"]
    kw = dict(dim=16, epoch=1, min_count=1, bucket=B16, seed=4, cache_dir=ensure_root(tmp_path), compact=True)
    first: dict = {}
    a = _fasttext.train_fasttext(text, report=first, strings=["zzq"], **kw)
    assert first["cache"] == "miss" and first["stored"] == "compact" and first["path"].endswith(".vectors.npz")
    assert _entries(tmp_path, "*.bin") == [] and len(_entries(tmp_path, "*.vectors.npz")) == 1
    assert first["bytes"] < 100_000  # the .bin of this model takes over 34 MB
    assert [e.what for e in list_entries(tmp_path) if e.kind == "fasttext"] == ["fastText vectors (compact)"]
    hit: dict = {}
    b = _fasttext.train_fasttext(text, report=hit, strings=["zzq"], **kw)
    assert hit["cache"] == "hit"
    np.testing.assert_array_equal(a.get_word_vector("zzq"), b.get_word_vector("zzq"))
    # a string the entry does not hold: trained again (one thread: the same model) and stored with the others
    more: dict = {}
    c = _fasttext.train_fasttext(text, report=more, strings=["neu"], **kw)
    assert more["cache"] == "miss" and more["missing_strings"] == 1 and set(c.strings) == {"zzq", "neu"}
    np.testing.assert_array_equal(c.get_word_vector("zzq"), a.get_word_vector("zzq"))
    full = _fasttext.train_fasttext(text, dim=16, epoch=1, min_count=1, bucket=B16, seed=4)
    np.testing.assert_array_equal(c.get_word_vector("neu"), full.get_word_vector("neu"))
    # an old cache entry (the full .bin under the same key) is used once and replaced by compact vectors
    old = tmp_path / "old"
    legacy: dict = {}
    _fasttext.train_fasttext(text, dim=16, epoch=1, min_count=1, bucket=B16, seed=4, cache_dir=old, report=legacy)
    assert legacy["path"].endswith(".bin") and len(_entries(old, "*.bin")) == 1
    conv: dict = {}
    with caplog.at_level(logging.INFO, logger="methods._fasttext"):
        d = _fasttext.train_fasttext(text, report=conv, strings=["zzq"], **{**kw, "cache_dir": old})
    assert conv["cache"] == "hit" and conv["migrated_from"] == legacy["path"]
    assert _entries(old, "*.bin") == [] and [p.name for p in _entries(old, "*.vectors.npz")] == [p.name for p in _entries(tmp_path, "*.vectors.npz")]
    assert "replaced the full model" in caplog.text
    np.testing.assert_array_equal(d.word_matrix, a.word_matrix)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_compact_entry_is_rebuilt(wechsel_data, tmp_path, caplog, damage):
    kw = dict(dim=16, epoch=1, min_count=1, bucket=B16, seed=4, cache_dir=tmp_path, compact=True, strings=["zzq"])
    a = _fasttext.train_fasttext(wechsel_data["target"], **kw)
    (entry,) = _entries(tmp_path, "*.vectors.npz")
    good = entry.read_bytes()
    entry.write_bytes({"garbage": b"not a zip file", "truncated": good[: len(good) // 2], "empty": b""}[damage])
    rep: dict = {}
    with caplog.at_level(logging.WARNING, logger="methods._fasttext"):
        b = _fasttext.train_fasttext(wechsel_data["target"], report=rep, **kw)
    assert rep["cache"] == "miss" and "cannot read" in caplog.text
    np.testing.assert_array_equal(a.get_word_vector("zzq"), b.get_word_vector("zzq"))


def test_training_params_are_the_ones_train_fasttext_keys_its_cache_by():
    import inspect

    train, params = inspect.signature(_fasttext.train_fasttext).parameters, inspect.signature(_fasttext.training_params).parameters
    assert {k: v.default for k, v in params.items()} == {k: train[k].default for k in params}  # same defaults
    p = _fasttext.training_params(dim=16, min_count=2, threads=3, seed=5)
    assert (p["dim"], p["minCount"], p["thread"], p["seed"], p["bucket"]) == (16, 2, 3, 5, 2_000_000)
    with pytest.raises(ValueError, match="store=False is for full models"):
        _fasttext.train_fasttext(__file__, dim=16, bucket=B16, compact=True, store=False)


def test_store_false_reads_a_cached_bin_but_writes_none(wechsel_data, tmp_path):
    kw = dict(dim=16, epoch=1, min_count=1, bucket=B16, seed=4, cache_dir=tmp_path)
    rep: dict = {}
    a = _fasttext.train_fasttext(wechsel_data["target"], report=rep, store=False, **kw)
    assert rep["cache"] == "miss" and rep["path"] is None and list(tmp_path.rglob("*")) == []
    _fasttext.train_fasttext(wechsel_data["target"], **kw)  # stored: what an older version left
    key = _fasttext.fasttext_cache_key(wechsel_data["target"], _fasttext.training_params(**{k: v for k, v in kw.items() if k != "cache_dir"}))
    assert _entries(tmp_path, "*.bin") == [tmp_path / "fasttext" / f"{key}.bin"]
    hit: dict = {}
    b = _fasttext.train_fasttext(wechsel_data["target"], report=hit, store=False, **kw)
    assert hit["cache"] == "hit" and hit["path"].endswith(f"{key}.bin")
    np.testing.assert_array_equal(a.get_input_matrix(), b.get_input_matrix())


# ------------------------------------------------------------------------------------------------
# FOCUS: compact cache vs the full model given as aux_model_path
# ------------------------------------------------------------------------------------------------


def _focus_full_model(data, cfg: FocusConfig, path):
    """The full fastText model FOCUS trains for ``cfg`` (same text, parameters and seed), saved as a .bin file."""
    focus = Focus(cfg)
    if cfg.aux == "token-fasttext":
        text = _fasttext.pretokenize(data["corpus"], data["tgt"], data["dir"] / "pretok.txt", token_format=cfg.aux_token_format)
    else:
        text = data["corpus"]
    _fasttext.train_fasttext(text, **focus._fasttext_kwargs(cfg.aux_seed)).save_model(str(path))
    return path


@pytest.mark.parametrize("aux", ["token-fasttext", "word-fasttext"])
def test_focus_rows_are_identical_from_the_full_model_and_the_compact_cache(focus_data, tmp_path, aux):
    cfg = FocusConfig(**FOCUS_AUX, aux=aux, special_anchors=aux == "token-fasttext")
    cache = tmp_path / "cache"
    miss = Focus(cfg).initialize(_focus_inputs(focus_data, cache), np.random.default_rng(0))
    hit = Focus(cfg).initialize(_focus_inputs(focus_data, cache), np.random.default_rng(0))
    assert miss.info["aux"]["source"]["cache"] == "miss" and hit.info["aux"]["source"]["cache"] == "hit"
    assert hit.info["aux"]["source"]["stored"] == "compact" and _entries(cache, "*.bin") == []
    full_path = _focus_full_model(focus_data, cfg, tmp_path / f"{aux}.bin")
    given = Focus(FocusConfig(**{**FOCUS_AUX, "aux_model_path": str(full_path)}, aux=aux, special_anchors=cfg.special_anchors))
    full = given.initialize(_focus_inputs(focus_data, None), np.random.default_rng(0))
    assert full.info["aux"]["source"] == {"path": str(full_path)}
    assert full.mapping.counts()["combined"] > 0
    _same_mapping(miss.mapping, full.mapping)
    _same_mapping(hit.mapping, full.mapping)
    assert full_path.is_file()  # the user's own model is read, never rewritten or removed


def test_focus_with_an_old_full_bin_in_the_cache_gives_the_same_rows(focus_data, tmp_path):
    cfg = FocusConfig(**FOCUS_AUX)
    fresh = Focus(cfg).initialize(_focus_inputs(focus_data, tmp_path / "a"), np.random.default_rng(0))
    key = _entries(tmp_path / "a", "*.vectors.npz")[0].name.removesuffix(_fasttext.COMPACT_SUFFIX)
    old = tmp_path / "b" / "fasttext"
    old.mkdir(parents=True)
    _focus_full_model(focus_data, cfg, old / f"{key}.bin")  # what an older version left in the cache
    res = Focus(cfg).initialize(_focus_inputs(focus_data, tmp_path / "b"), np.random.default_rng(0))
    assert res.info["aux"]["source"]["migrated_from"] == str(old / f"{key}.bin")
    assert not (old / f"{key}.bin").exists() and (old / f"{key}{_fasttext.COMPACT_SUFFIX}").is_file()
    _same_mapping(res.mapping, fresh.mapping)


def test_focus_threads_are_flagged_as_nondeterministic_and_keyed(focus_data, tmp_path):
    one = Focus(FocusConfig(**FOCUS_AUX)).initialize(_focus_inputs(focus_data, tmp_path), np.random.default_rng(0))
    two = Focus(FocusConfig(**FOCUS_AUX, aux_threads=2)).initialize(_focus_inputs(focus_data, tmp_path), np.random.default_rng(0))
    assert "nondeterministic" not in one.info and "nondeterministic" not in one.info["aux"]
    assert two.info["nondeterministic"] == ["fasttext"] and two.info["aux"]["source"]["deterministic"] is False
    assert two.info["aux"]["source"]["params"]["thread"] == 2
    assert len(_entries(tmp_path, "*.vectors.npz")) == 2  # the thread count is part of the cache key
    record = {"config": {"stages": []}, "metrics": {}, "init": {"n_target": 10, "counts": {}, "info": two.info, "directives": {}}}
    assert [f["code"] for f in check_record(record)] == ["nondeterministic:fasttext"]


# ------------------------------------------------------------------------------------------------
# WECHSEL: compact cache vs the full models given as word-vector files
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["subword", "tfr"])
def test_wechsel_rows_are_identical_from_full_models_and_the_compact_cache(wechsel_data, tmp_path, variant):
    cfg = WechselConfig(**WECHSEL_FT, variant=variant, special_candidates=variant == "subword")
    cache = tmp_path / "cache"
    miss = Wechsel(cfg).initialize(_wechsel_inputs(wechsel_data, cache), np.random.default_rng(0))
    hit = Wechsel(cfg).initialize(_wechsel_inputs(wechsel_data, cache), np.random.default_rng(0))
    for side in ("source", "target"):
        assert miss.info["word_vectors"][side]["trained"]["cache"] == "miss"
        assert hit.info["word_vectors"][side]["trained"]["cache"] == "hit"
        assert hit.info["word_vectors"][side]["trained"]["stored"] == "compact"
    assert _entries(cache, "*.bin") == [] and len(_entries(cache, "*.vectors.npz")) == 2
    bins = {}
    for side in ("source", "target"):  # the same training as WECHSEL's, kept whole and given as the user's files
        wv = train_word_vectors(wechsel_data[side], dim=16, epoch=2, min_count=1, model=cfg.fasttext_model, minn=cfg.minn,
                                maxn=cfg.maxn, neg=cfg.neg, bucket=B16, seed=3, cache_dir=None)
        bins[side] = tmp_path / f"{side}.bin"
        wv.model.save_model(str(bins[side]))
    full = Wechsel(cfg).initialize(
        _wechsel_inputs(wechsel_data, None, source_word_vectors=bins["source"], target_word_vectors=bins["target"]),
        np.random.default_rng(0))
    assert full.info["word_vectors"]["source"]["path"] == str(bins["source"])
    assert full.mapping.counts()["combined"] > 0
    _same_mapping(miss.mapping, full.mapping)
    _same_mapping(hit.mapping, full.mapping)


def test_wechsel_reduce_against_a_given_file_keeps_the_full_model(wechsel_data, tmp_path):
    small = train_word_vectors(wechsel_data["source"], dim=8, epoch=1, min_count=1, bucket=_fasttext.min_bucket(8), seed=1)
    small.model.save_model(str(tmp_path / "src8.bin"))
    cfg = WechselConfig(**WECHSEL_FT, dim_mismatch="reduce")
    res = Wechsel(cfg).initialize(_wechsel_inputs(wechsel_data, tmp_path / "c", source_word_vectors=tmp_path / "src8.bin"),
                                  np.random.default_rng(0))
    assert res.info["word_vectors"]["dimensions"]["reduced"] == {"side": "target", "from": 16, "to": 8}
    assert "stored" not in res.info["word_vectors"]["target"]["trained"]  # PCA reads the full input matrix
    compact = train_word_vectors(wechsel_data["target"], dim=16, epoch=1, min_count=1, bucket=B16, compact=True)
    with pytest.raises(ValueError, match="compact fastText vectors keep no input matrix"):
        reduce_dimension(compact, 8)


def test_wechsel_threads_are_flagged_as_nondeterministic(wechsel_data, tmp_path):
    res = Wechsel(WechselConfig(**WECHSEL_FT, threads=2)).initialize(_wechsel_inputs(wechsel_data, tmp_path),
                                                                   np.random.default_rng(0))
    assert res.info["nondeterministic"] == ["fasttext"]
    assert res.info["word_vectors"]["target"]["trained"]["params"]["thread"] == 2
    one = Wechsel(WechselConfig(**WECHSEL_FT)).initialize(_wechsel_inputs(wechsel_data, tmp_path), np.random.default_rng(0))
    assert "nondeterministic" not in one.info


# ------------------------------------------------------------------------------------------------
# WECHSEL's fallback message: the cause per token class
# ------------------------------------------------------------------------------------------------


def test_wechsel_fallback_message_names_each_cause_with_counts(wechsel_data, tmp_path):
    cfg = WechselConfig(**{**WECHSEL_FT, "min_count": 1}, minn=5, maxn=6)  # minn=5 (Common Crawl's): '.' and '12' have no n-gram
    res = Wechsel(cfg).initialize(_wechsel_inputs(wechsel_data, tmp_path), np.random.default_rng(0))
    (entry,) = [f for f in res.info["fallbacks"] if f["reason"].startswith("zero subword vector")]
    causes = entry["causes"]
    assert causes["minn"] == 5 and causes["short"] > 0
    assert entry["count"] == causes["empty"] + causes["not_utf8"] + causes["short"] + causes["untrained"]
    assert f"{causes['short']} tokens shorter than minn-2=3 characters" in entry["reason"]
    assert "non-UTF-8" not in entry["reason"]
    tgt = wechsel_data["tgt_tok"]
    specials = _canon.special_ids(tgt)
    strings = [_canon.token_string(tgt, int(i)).strip() for i in np.flatnonzero(res.mapping.provenance == FALLBACK)
               if int(i) not in specials]
    assert sum(0 < len(s) < 3 for s in strings) == causes["short"]  # ',', '12', 'ß' …: under minn - 2 characters
    assert sum(s == "" for s in strings) == causes["empty"] + causes["not_utf8"]  # byte pieces decode to ''
    assert sum(len(s) >= 3 for s in strings) == causes["untrained"]


def test_zero_vector_causes_tell_empty_byte_pieces_short_and_untrained_apart():
    tok = from_vocab("bytelevel", ["<s>", "</s>", "<unk>", "<pad>", "Ġ", "Ã", ",", "abcdef"])
    ids = [4, 5, 6, 7]  # marker only, half of 'é', punctuation, a long word
    assert zero_vector_causes(tok, ids, minn=5) == {"empty": 1, "not_utf8": 1, "short": 1, "untrained": 1}
    assert zero_vector_causes(tok, ids, minn=3) == {"empty": 1, "not_utf8": 1, "short": 0, "untrained": 2}
    msg = describe_zero_vectors({"empty": 0, "not_utf8": 2, "short": 0, "untrained": 1}, minn=3)
    assert msg == ("zero subword vector: 2 tokens not valid UTF-8 on their own (byte pieces of a multi-byte character); "
                   "1 token with n-grams the target word vectors never trained (all their rows are zero)")


def _train_in_child(text: str, cache: str, out) -> None:
    rep: dict = {}
    _fasttext.train_fasttext(Path(text), dim=16, epoch=40, min_count=1, bucket=_fasttext.min_bucket(16), seed=0,
                             cache_dir=Path(cache), report=rep)
    out.put(rep["cache"])


def test_two_processes_asking_for_one_uncached_model_train_it_once(tmp_path):
    """A held fastText seed makes two workers of a grid ask for the same model at once: one trains,
    the other waits on the entry's build lock (<cache>/.locks) and reads it (a hit, not a second training)."""
    import multiprocessing as mp

    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(f"w{(i * 7 + j) % 50}" for j in range(12)) for i in range(3000)) + "\n")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_train_in_child, args=(str(text), str(tmp_path / "cache"), out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(out.get(timeout=5) for _ in procs) == ["hit", "miss"]
    assert len(list((tmp_path / "cache" / "fasttext").glob("*.bin"))) == 1
    assert list((tmp_path / "cache" / ".locks").glob("fasttext-*.lock"))
