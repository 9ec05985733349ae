"""Baseline methods (random, random-mapping, overlap, mean-of-pieces, original, from-scratch,
transinner) and vocabulary extension (``harness/extension.py``)."""

from __future__ import annotations

import importlib
import json
import random as pyrandom
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import registry
from harness.extension import extend_tokenizer, extension_candidates, keep_original_rows
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, TransferInputs
from harness.registry import get
from harness.vocab import canonical_vocab, compute_overlap, encode_canon, special_roles, vocab_size
from tests._tokfixtures import TARGET_TEXT, bytelevel, from_vocab, unigram, wordpiece

BASELINE_MODULES = [
    "random_normal",
    "random_mapping",
    "overlap",
    "mean_of_pieces",
    "original",
    "from_scratch",
    "transinner",
]
for _m in BASELINE_MODULES:  # until methods/__init__.py imports them; importing twice is harmless
    importlib.import_module(f"methods.{_m}")

BASELINES = ["random", "random-mapping", "overlap", "mean-of-pieces", "original", "from-scratch", "transinner"]
BUILDERS = {"sentencepiece": unigram, "bytelevel": bytelevel, "wordpiece": wordpiece}
PAIRS = [
    ("sentencepiece", "wordpiece"),
    ("bytelevel", "sentencepiece"),
    ("wordpiece", "bytelevel"),
    ("sentencepiece", "sentencepiece"),
]
D = 16


def _inputs(src_family: str, tgt_family: str, extra_rows: int = 0) -> TransferInputs:
    src, tgt = BUILDERS[src_family](), BUILDERS[tgt_family](TARGET_TEXT)
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(vocab_size(src) + extra_rows, D, generator=g)
    return TransferInputs(source_tokenizer=src, target_tokenizer=tgt, source_embeddings=emb)


def _run(name: str, inputs: TransferInputs, seed: int = 0, **config) -> InitResult:
    return get("method", name).make(config or None).initialize(inputs, np.random.default_rng(seed))


def _dense(result: InitResult, emb: torch.Tensor) -> np.ndarray:
    """Mapped rows ``W @ E`` (FALLBACK rows are zero here)."""
    m = result.mapping
    e = emb.numpy().astype(np.float64)
    out = np.zeros((m.n_target, e.shape[1]))
    for t in range(m.n_target):
        ids, w = m.row(t)
        out[t] = w.astype(np.float64) @ e[ids]
    return out


def _pairs(result: InitResult, code: int) -> set[tuple[int, int]]:
    m = result.mapping
    out = set()
    for t in np.flatnonzero(m.provenance == code):
        ids, w = m.row(t)
        assert len(ids) == 1 and w[0] == pytest.approx(1.0)
        out.add((int(t), int(ids[0])))
    return out


# ---------------------------------------------------------------------------- contract for every baseline


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("src_family, tgt_family", PAIRS)
def test_baseline_contract(name, src_family, tgt_family):
    inputs = _inputs(src_family, tgt_family, extra_rows=3)  # padded source matrix (GPT-2 style)
    res = _run(name, inputs)
    m = res.mapping
    n_source = inputs.source_embeddings.shape[0]
    assert m.n_source == n_source
    if name == "original":
        assert res.tokenizer is inputs.source_tokenizer and m.n_target == n_source
    else:
        assert res.tokenizer is inputs.target_tokenizer and m.n_target == vocab_size(inputs.target_tokenizer)
    counts = m.counts()
    assert sum(counts.values()) == m.n_target
    # weights of mapped rows are a convex combination
    for t in np.flatnonzero(m.provenance != FALLBACK):
        ids, w = m.row(t)
        assert np.all(w > 0) and w.sum() == pytest.approx(1.0, abs=1e-6)
    json.dumps(res.info)
    json.dumps(res.directives)
    if name != "original":
        assert set(res.info["overlap"]) >= {"exact", "fuzzy", "specials"}
    # specials: matched by role, SPECIAL, copied from the right source id (from-scratch: nothing pretrained)
    tok = res.tokenizer
    specials = {i for i in tok.all_special_ids}
    if name == "from-scratch":
        assert counts == {"special": 0, "copied": 0, "combined": 0, "fallback": m.n_target}
        assert res.directives == {"reinitialize_body": True}
        return
    assert set(np.flatnonzero(m.provenance == SPECIAL).tolist()) == specials
    if name != "original":
        s_roles, t_roles = special_roles(inputs.source_tokenizer), special_roles(tok)
        got = _pairs(res, SPECIAL)
        for role in ("unk", "pad", "mask", "cls", "sep"):
            assert (t_roles[role], s_roles[role]) in got


@pytest.mark.parametrize("name", BASELINES)
def test_determinism_with_disturbed_global_rng(name):
    inputs = _inputs("wordpiece", "bytelevel")  # more target tokens than source rows: reuse path too

    def once(disturb: int) -> InitResult:
        pyrandom.seed(disturb)
        np.random.seed(disturb)
        torch.manual_seed(disturb)
        np.random.rand(disturb + 1)
        return _run(name, inputs, seed=7)

    a, b = once(1), once(2)
    for field in ("indptr", "indices", "weights", "provenance"):
        np.testing.assert_array_equal(getattr(a.mapping, field), getattr(b.mapping, field))
    assert a.info == b.info and a.directives == b.directives


# ---------------------------------------------------------------------------- per method


def test_random_marks_everything_but_specials_fallback():
    inputs = _inputs("sentencepiece", "wordpiece")
    res = _run("random", inputs)
    n_special = len(inputs.target_tokenizer.all_special_ids)
    assert res.mapping.counts() == {
        "special": n_special,
        "copied": 0,
        "combined": 0,
        "fallback": res.mapping.n_target - n_special,
    }
    res = _run("random", inputs, copy_specials=False)
    assert res.mapping.counts()["fallback"] == res.mapping.n_target


def test_random_mapping_uses_distinct_rows():
    inputs = _inputs("bytelevel", "sentencepiece")  # 379 targets, 395 non-special source rows
    res = _run("random-mapping", inputs)
    copied = _pairs(res, COPIED)
    rows = [s for _, s in copied]
    assert len(copied) == res.mapping.n_target - len(inputs.target_tokenizer.all_special_ids)
    assert len(set(rows)) == len(rows)
    assert not set(rows) & set(inputs.source_tokenizer.all_special_ids)
    other = _run("random-mapping", inputs, seed=1)
    assert _pairs(other, COPIED) != copied


def test_random_mapping_reuses_rows_only_after_all_are_used():
    inputs = _inputs("wordpiece", "bytelevel")  # 395 targets, 195 non-special source rows
    res = _run("random-mapping", inputs)
    pool = res.info["pool_size"]
    assert res.info["reused_rows"] and pool == 195
    by_target = sorted(_pairs(res, COPIED))
    rows = [s for _, s in by_target]
    assert len(set(rows[:pool])) == pool  # the first permutation uses every row once
    uses = Counter(rows)
    assert max(uses.values()) - min(uses.values()) <= 1


@pytest.mark.parametrize("src_family, tgt_family", PAIRS)
def test_overlap_copies_rows_of_the_right_source_ids(src_family, tgt_family):
    inputs = _inputs(src_family, tgt_family)
    ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer)
    res = _run("overlap", inputs)
    assert _pairs(res, COPIED) == {(int(t), int(s)) for t, s in ov.pairs()}
    assert res.info["overlap"] == ov.report()
    s_cv, t_cv = canonical_vocab(inputs.source_tokenizer), canonical_vocab(inputs.target_tokenizer)
    dense = _dense(res, inputs.source_embeddings)
    for t, s in ov.exact:
        assert t_cv[t] == s_cv[s]
        np.testing.assert_allclose(dense[t], inputs.source_embeddings[s].numpy(), rtol=1e-6)
    exact_only = _run("overlap", inputs, fuzzy=False)
    assert _pairs(exact_only, COPIED) == {(int(t), int(s)) for t, s in ov.exact}
    assert exact_only.mapping.counts()["fallback"] == res.mapping.counts()["fallback"] + len(ov.fuzzy)


def test_mean_of_pieces_by_hand():
    src = from_vocab("sentencepiece", ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "▁foo", "bar", "▁bar", "foo"])
    tgt = from_vocab(
        "wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "foo", "foobar", "##barbar", "∑", "##bar"]
    )
    emb = torch.randn(9, D, generator=torch.Generator().manual_seed(3))
    res = _run("mean-of-pieces", TransferInputs(src, tgt, emb))
    m = res.mapping
    assert m.provenance.tolist()[5:] == [COPIED, COMBINED, COPIED, FALLBACK, COPIED]
    ids, w = m.row(6)  # foobar -> ▁foo + bar
    assert ids.tolist() == [5, 6] and w.tolist() == [0.5, 0.5]
    ids, w = m.row(7)  # ##barbar -> bar + bar: one piece with multiplicity 2
    assert ids.tolist() == [6] and w.tolist() == [1.0]
    dense = _dense(res, emb)
    np.testing.assert_allclose(dense[6], (emb[5] + emb[6]).numpy() / 2, rtol=1e-6)
    assert res.info["pieces"]["fallback_only_unk"] == 1  # "∑": no byte fallback piece, only <unk>
    assert res.info["fallbacks"][0]["reason"] == "only_unk"


@pytest.mark.parametrize("src_family, tgt_family", PAIRS)
def test_mean_of_pieces_rows_equal_the_mean_of_the_pieces(src_family, tgt_family):
    inputs = _inputs(src_family, tgt_family)
    src, tgt = inputs.source_tokenizer, inputs.target_tokenizer
    res = _run("mean-of-pieces", inputs)
    m = res.mapping
    ov = compute_overlap(src, tgt)
    assert _pairs(res, COPIED) >= {(int(t), int(s)) for t, s in ov.pairs()}
    t_cv = canonical_vocab(tgt)
    dense = _dense(res, inputs.source_embeddings)
    combined = np.flatnonzero(m.provenance == COMBINED)
    assert len(combined) > 10
    drop = set(src.all_special_ids)
    for t in combined:
        pieces = [p for p in encode_canon(src, t_cv[t]) if p not in drop]
        expected = inputs.source_embeddings[pieces].numpy().mean(0)
        np.testing.assert_allclose(dense[t], expected, rtol=1e-5, atol=1e-6)
    stats = res.info["pieces"]
    n_fb = m.counts()["fallback"]
    assert n_fb == stats["fallback_no_pieces"] + stats["fallback_only_unk"] + len(ov.unmatched_specials)


def test_mean_of_pieces_encode_segmentation_runs():
    inputs = _inputs("bytelevel", "wordpiece")
    res = _run("mean-of-pieces", inputs, segmentation="encode")
    assert res.mapping.counts()["combined"] > 0
    assert res.info["segmentation"] == "encode"


def test_original_is_the_identity_over_the_source():
    inputs = _inputs("sentencepiece", "wordpiece", extra_rows=2)
    res = _run("original", inputs)
    n = inputs.source_embeddings.shape[0]
    assert res.mapping.indices.tolist() == list(range(n))
    assert res.mapping.counts()["special"] == len(inputs.source_tokenizer.all_special_ids)
    assert res.mapping.counts()["copied"] == n - len(inputs.source_tokenizer.all_special_ids)


@pytest.mark.parametrize(
    "config, directives",
    [
        ({}, {"embeddings_only_fraction": 0.1, "embeddings_only_schedule": "fraction"}),
        (
            {"schedule": "extra", "embeddings_only_fraction": 0.2},
            {"embeddings_only_fraction": 0.2, "embeddings_only_schedule": "extra"},
        ),
    ],
)
def test_transinner_is_random_plus_directives(config, directives):
    inputs = _inputs("sentencepiece", "wordpiece")
    res = _run("transinner", inputs, **config)
    assert res.directives == directives
    np.testing.assert_array_equal(res.mapping.provenance, _run("random", inputs).mapping.provenance)


@pytest.mark.parametrize(
    "name, config, field",
    [
        ("transinner", {"embeddings_only_fraction": 0.0}, "embeddings_only_fraction"),
        ("transinner", {"embeddings_only_fraction": 1.5}, "embeddings_only_fraction"),
        ("transinner", {"schedule": "later"}, "schedule"),
        ("overlap", {"fuzzy": "yes"}, "fuzzy"),
        ("random", {"copy_specials": 1}, "copy_specials"),
        ("mean-of-pieces", {"segmentation": "bpe"}, "segmentation"),
        ("mean-of-pieces", {"fuzzy": None}, "fuzzy"),
    ],
)
def test_config_validation_names_the_field(name, config, field):
    with pytest.raises(ValueError, match=field):
        get("method", name).make(config)


def test_configs_are_frozen_dataclasses_with_defaults():
    for name in BASELINES:
        entry = get("method", name)
        assert entry.config_cls.__dataclass_params__.frozen, name
        entry.config_cls()  # every field has a default
        assert entry.description


# ---------------------------------------------------------------------------- vocabulary extension


@pytest.fixture()
def target_corpus(tmp_path) -> Path:
    path = tmp_path / "target.txt"
    path.write_text("\n".join(TARGET_TEXT) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "src_family, tgt_family",
    [
        ("sentencepiece", "sentencepiece"),
        ("sentencepiece", "wordpiece"),
        ("wordpiece", "bytelevel"),
        ("wordpiece", "wordpiece"),
    ],
)
def test_extension_adds_tokens_that_the_tokenizer_then_emits(src_family, tgt_family, target_corpus):
    src, tgt = BUILDERS[src_family](), BUILDERS[tgt_family](TARGET_TEXT)
    ext, new_ids = extend_tokenizer(src, tgt, target_corpus, top_n=25)
    n_old = vocab_size(src)
    assert new_ids == list(range(n_old, n_old + 25)) and vocab_size(ext) == n_old + 25
    old, now = src.get_vocab(), ext.get_vocab()
    assert all(now[p] == i for p, i in old.items())  # old ids keep their positions
    assert special_roles(ext) == special_roles(src)
    cands = extension_candidates(src, tgt, target_corpus, top_n=25)
    assert [c.piece for c in cands] == ext.convert_ids_to_tokens(new_ids)
    known = set(canonical_vocab(src))
    assert all(c.canon not in known for c in cands)
    assert [c.count for c in cands] == sorted((c.count for c in cands), reverse=True)
    emitted = {i for ids in ext(TARGET_TEXT, add_special_tokens=False)["input_ids"] for i in ids}
    assert len(emitted & set(new_ids)) >= 5
    # text without new tokens keeps its old segmentation where no new piece applies
    assert ext("zzz")["input_ids"] == src("zzz")["input_ids"]


def test_extension_keeps_added_tokens_above_the_model_vocab(target_corpus):
    src = from_vocab(
        "sentencepiece",
        ["<s>", "<pad>", "</s>", "<unk>"]
        + ["▁" + w for w in "der die das und".split()]
        + list("abcdefghijklmnopqrstuvwxyz"),
    )
    src.add_special_tokens({"mask_token": "<mask>"})  # XLM-R style: <mask> after the model vocab
    mask_id = src.mask_token_id
    tgt = unigram(TARGET_TEXT)
    ext, new_ids = extend_tokenizer(src, tgt, target_corpus, top_n=10)
    assert ext.mask_token_id == mask_id and new_ids[0] == mask_id + 1
    assert ext.convert_ids_to_tokens(mask_id) == "<mask>"
    assert ext("der <mask> katze")["input_ids"].count(mask_id) == 1


def test_extension_of_a_bytelevel_source_emits_the_new_tokens(target_corpus):
    src = bytelevel()
    ext, new_ids = extend_tokenizer(src, unigram(TARGET_TEXT), target_corpus, top_n=5)
    assert new_ids and new_ids[0] == len(src)
    emitted = {i for line in TARGET_TEXT for i in ext(line)["input_ids"]}
    assert emitted & set(new_ids), "no added token is ever emitted on the target text"


@pytest.mark.parametrize("name", ["overlap", "mean-of-pieces", "random-mapping", "random", "transinner"])
def test_methods_work_with_the_extended_source_tokenizer(name, target_corpus):
    src = unigram()
    ext, new_ids = extend_tokenizer(src, unigram(TARGET_TEXT), target_corpus, top_n=20)
    emb = torch.randn(vocab_size(src), D, generator=torch.Generator().manual_seed(0))
    res = _run(name, TransferInputs(src, ext, emb))
    ov = compute_overlap(src, ext)
    n_special = len(src.all_special_ids)
    assert len(ov.exact) == vocab_size(src) - n_special  # every old token overlaps
    byte_dupes = {t for t, s in ov.exact if t != s}
    assert len(byte_dupes) >= 20  # <0x..> pieces canonically equal to a regular piece
    # what the runner does in extension mode: old ids keep their rows, whatever the method computed
    kept, info = keep_original_rows(res.mapping, vocab_size(src), set(src.all_special_ids))
    assert info["n_original"] == vocab_size(src) and info["n_added"] == 20
    if name in ("random", "transinner", "random-mapping"):  # these never copy the overlap themselves
        assert info["method_rows_overridden"] >= 0.95 * (vocab_size(src) - n_special)
    elif name == "overlap":  # only the byte-fallback twins were wrong
        assert info["method_rows_overridden"] == len(byte_dupes)
    dense = _dense(InitResult(kept, ext), emb)
    np.testing.assert_array_equal(dense[: vocab_size(src)], emb.numpy())  # bit-exact, byte pieces included
    assert _pairs(InitResult(kept, ext), COPIED) >= {(t, t) for t in range(vocab_size(src)) if t not in src.all_special_ids}
    for code in (COPIED, COMBINED, FALLBACK, SPECIAL):  # new rows are the method's own
        assert np.array_equal(kept.provenance[new_ids] == code, res.mapping.provenance[new_ids] == code)
    new_prov = res.mapping.provenance[new_ids]
    if name == "overlap":
        assert np.all((new_prov == FALLBACK) | (new_prov == COPIED))  # COPIED only for fuzzy symbolic pairs
    elif name == "mean-of-pieces":
        assert np.sum(new_prov == COMBINED) >= 10


def test_keep_original_rows_rejects_more_original_rows_than_the_mapping_has():
    from harness.protocols import TokenMapping

    m = TokenMapping.from_coo(3, 2, [0], [1], [1.0], [COPIED, FALLBACK, FALLBACK])
    with pytest.raises(ValueError, match="n_original=3"):
        keep_original_rows(m, 3)


# ---------------------------------------------------------------------------- extension keeps original rows


@pytest.fixture(scope="module")
def extension_source(tmp_path_factory):
    """A tiny untied XLM-R-style MLM whose SentencePiece tokenizer has byte-fallback pieces."""
    import dataclasses

    from tests._tokfixtures import FAMILIES, SOURCE_TEXT, helper_model, transfer_files

    d = tmp_path_factory.mktemp("ext-source")
    fam = FAMILIES["xlm-r-untied"]
    tok = fam.tokenizer(SOURCE_TEXT)
    model = fam.build(tok)
    model.save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    paths = dataclasses.replace(transfer_files(d / "files"), helper_model=helper_model(unigram(TARGET_TEXT), d / "helper"))
    return {"dir": d / "model", "tok": tok, "model": model, "paths": paths}


@pytest.mark.parametrize("name", sorted(registry.names("method")))
def test_extension_keeps_every_original_row_bit_exactly(name, extension_source):
    """Every method, in extension mode: old ids keep their input row, output row and MLM bias exactly.

    Before, the runner handed the extended tokenizer to the method as a new vocabulary: ``random``
    and ``transinner`` redrew almost every old row, ``random-mapping`` scrambled them all, and the
    overlap gave byte-fallback pieces (``<0x41>``) the rows of their regular twins (``A``).
    """
    from harness.model.initialize import InitRequest, initialize
    from harness.registry import build_config
    from tests._tokfixtures import FAST_METHOD_CONFIG

    src = extension_source
    entry = get("method", name)
    cfg = build_config(entry.config_cls, FAST_METHOD_CONFIG.get(name, {}))
    init = initialize(InitRequest(
        source_model=str(src["dir"]), target_tokenizer=unigram(TARGET_TEXT), method=name, method_config=cfg,
        seed=1, model_kind="mlm", resources=src["paths"], mode="extend", extend_top_n=20,
    ))
    n_old = vocab_size(src["tok"])
    model, source = init.model, src["model"]
    if name == "from-scratch":  # by design nothing pretrained survives, old rows included
        assert init.result.info["extension"] == {
            "original_rows_kept": False, "reason": "from-scratch re-initializes every parameter"}
        assert not torch.equal(model.get_input_embeddings().weight[:n_old], source.get_input_embeddings().weight)
        return
    with torch.no_grad():
        assert torch.equal(model.get_input_embeddings().weight[:n_old], source.get_input_embeddings().weight)
        assert torch.equal(model.get_output_embeddings().weight[:n_old], source.get_output_embeddings().weight)
        assert torch.equal(model.lm_head.bias[:n_old], source.lm_head.bias)
    ext = init.result.info["extension"]
    assert ext["original_rows_kept"] is True
    n_new = init.result.mapping.n_target
    if name == "original":  # keeps the source tokenizer: nothing was added
        assert n_new == n_old and init.tokenizer is init.source_tokenizer
    else:
        assert n_new == n_old + 20 and ext["n_original"] == n_old and ext["n_added"] == 20
        byte_ids = [i for p, i in src["tok"].get_vocab().items() if p.startswith("<0x")]
        assert len(byte_ids) == 256  # the byte-fallback rows that canonical matching pairs with regular pieces
    m = init.result.mapping
    assert np.array_equal(m.indices[m.indptr[:n_old]], np.arange(n_old))
    assert set(np.flatnonzero(m.provenance[:n_old] == SPECIAL)) == set(src["tok"].all_special_ids)
    assert np.all(m.provenance[:n_old] != FALLBACK) and np.all(m.provenance[:n_old] != COMBINED)
