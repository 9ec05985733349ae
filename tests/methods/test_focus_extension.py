"""FOCUS in vocabulary-extension mode and with the reference's special-token anchors.

Extension (paper; ``deepfocus``'s ``extend_tokenizer``): the auxiliary fastText is trained on text
tokenized with the *language-specific* tokenizer, the original rows are kept, and only original
tokens that are in the language-specific vocabulary are anchors. ``special_anchors`` reproduces the
reference's ``</s>`` anchor (fastText always has ``</s>``, its line end).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from harness import vocab as _canon
from harness.extension import extend_tokenizer
from harness.protocols import COMBINED, COPIED, SPECIAL, TransferInputs
from methods import _fasttext
from methods.focus import Focus, FocusConfig, focus_mapping
from tests.methods.test_focus import SOURCE_LINES, TARGET_LINES, TINY_AUX, _unigram

FT_PARAMS = {"dim": 16, "epoch": 1, "min_count": 1, "model": "cbow", "bucket": 600_000, "seed": 7, "threads": 1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("focus-ext")
    corpus = d / "target.txt"
    corpus.write_text("\n".join(TARGET_LINES) + "\n", encoding="utf-8")
    src, lang = _unigram(SOURCE_LINES), _unigram(TARGET_LINES)
    ext, new_ids = extend_tokenizer(src, lang, corpus, 40)
    return {"dir": d, "corpus": corpus, "src": src, "lang": lang, "ext": ext, "new_ids": new_ids}


def _inputs(s, *, extension: bool = True, cache=None) -> TransferInputs:
    E = torch.randn(len(s["src"]), 8, generator=torch.Generator().manual_seed(0))
    return TransferInputs(
        s["src"], s["ext"], E, target_corpus=s["corpus"], cache_dir=cache,
        extension_tokenizer=s["lang"] if extension else None,
    )


def _aux_model(s, tok, name: str):
    """A token-level fastText trained on the corpus tokenized with ``tok`` (a user-given aux model)."""
    text = _fasttext.pretokenize(s["corpus"], tok, s["dir"] / f"{name}.tok.txt")
    path = s["dir"] / f"{name}.bin"
    if not path.is_file():
        _fasttext.train_fasttext(text, **FT_PARAMS).save_model(str(path))
    return path, _fasttext.load_fasttext(path)


def _cfg(path, **kw) -> FocusConfig:
    return FocusConfig(**{**TINY_AUX, "aux_dim": 16, "aux_model_path": str(path), **kw})


def _originals(s) -> list[int]:
    specials = _canon.special_ids(s["src"])
    return [i for i in sorted(s["src"].get_vocab().values()) if i not in specials]


def test_extension_anchors_are_original_tokens_of_the_language_vocabulary(setup):
    s = setup
    path, model = _aux_model(s, s["lang"], "lang")
    res = Focus(_cfg(path)).initialize(_inputs(s), np.random.default_rng(0))
    m = res.mapping
    json.dumps(res.info)
    # expected anchors, independently: original tokens whose canonical form is a language-specific token
    # that has a vector in the model trained on language-tokenized text
    _, lang_has = _fasttext.token_vectors(model, s["lang"])
    lang_index = {c: i for i, c in enumerate(_canon.canonical_vocab(s["lang"])) if c is not None}
    ext_canon = _canon.canonical_vocab(s["ext"])
    expected = {t for t in _originals(s) if ext_canon[t] in lang_index and lang_has[lang_index[ext_canon[t]]]}
    with_vector_not_in_language = {t for t in _originals(s) if ext_canon[t] not in lang_index and model.get_word_id(
        _fasttext.escape_token(s["ext"].convert_ids_to_tokens(t))) >= 0}
    assert expected and res.info["focus"]["anchors"] == len(expected)
    used = set()
    for t in s["new_ids"]:
        assert m.provenance[t] == COMBINED
        ids, w = m.row(t)
        used |= set(ids.tolist())
        assert abs(float(w.sum()) - 1) < 1e-5
    assert used <= expected
    assert res.info["aux"]["tokenizer"].startswith("extension_tokenizer")
    assert res.info["extension"] == {"aux": "language", "original_rows": len(_originals(s)), "new_rows": len(s["new_ids"])}
    # the old behaviour, kept as an option, anchors on every original token with a vector in its own model
    path_ext, model_ext = _aux_model(s, s["ext"], "ext")
    old = Focus(_cfg(path_ext, extension_aux="extended")).initialize(_inputs(s), np.random.default_rng(0))
    _, ext_has = _fasttext.token_vectors(model_ext, s["ext"])
    assert old.info["focus"]["anchors"] == int(ext_has[_originals(s)].sum()) > len(expected)
    assert with_vector_not_in_language or old.info["focus"]["anchors"] != len(expected)


def test_extension_keeps_every_original_row(setup):
    s = setup
    path, _ = _aux_model(s, s["lang"], "lang")
    for overlap in ("full", "symbolic"):
        m = Focus(_cfg(path, overlap=overlap)).initialize(_inputs(s), np.random.default_rng(0)).mapping
        for t in _originals(s):
            assert m.provenance[t] == COPIED and m.row(t)[0].tolist() == [t] and m.row(t)[1].tolist() == [1.0]
        for t in _canon.special_ids(s["src"]):
            assert m.provenance[t] == SPECIAL and m.row(t)[0].tolist() == [t]
        assert set(np.flatnonzero(m.provenance == COMBINED).tolist()) <= set(s["new_ids"])
    canon = _canon.canonical_vocab(s["ext"])
    for t in np.flatnonzero(m.provenance == COMBINED):  # symbolic: anchors only among symbolic originals
        assert all(_canon.is_symbolic(canon[i]) for i in m.row(t)[0])


def test_extension_trains_aux_on_the_language_tokenizer(setup, tmp_path):
    s = setup
    res = Focus(FocusConfig(**TINY_AUX)).initialize(_inputs(s, cache=tmp_path), np.random.default_rng(0))
    pretok = _fasttext.pretokenize_cached(s["corpus"], s["lang"], tmp_path, tmp_path / "scratch")
    assert pretok.parent == tmp_path / "fasttext"  # already there: FOCUS wrote it for the language tokenizer
    assert len(list((tmp_path / "fasttext").glob("pretok-*.txt"))) == 1
    assert res.info["aux"]["matched_language_tokens"] > 0 and res.mapping.counts()["combined"] == len(s["new_ids"])


def test_two_workers_pretokenizing_one_corpus_do_it_once(setup, tmp_path, monkeypatch):
    """The pre-tokenized corpus cache builds under <cache>/.locks/pretok-*: the second worker waits, then reads."""
    from methods import _fasttext_words
    from tests.methods.test_align import race_two

    s = setup
    results, built = race_two(
        monkeypatch, lambda: _fasttext.pretokenize_cached(s["corpus"], s["lang"], tmp_path, tmp_path / "scratch"),
        _fasttext_words, "pretokenize",
    )
    assert built == 1 and results[0] == results[1] and results[0].is_file()
    assert len(list((tmp_path / "fasttext").glob("pretok-*.txt"))) == 1
    assert list((tmp_path / ".locks").glob("pretok-*.lock"))


def test_extension_refuses_a_target_that_moves_source_ids(setup):
    s = setup
    inputs = dataclasses.replace(_inputs(s), target_tokenizer=s["lang"])
    with pytest.raises(ValueError, match="keeping every source token at its id"):
        Focus(FocusConfig(**TINY_AUX)).initialize(inputs, np.random.default_rng(0))


def test_runner_hands_the_language_tokenizer_to_the_method(setup, tmp_path):
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    from harness.model.initialize import InitRequest, initialize
    from harness.protocols import TransferResources

    s = setup
    cfg = XLMRobertaConfig(vocab_size=len(s["src"]), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, pad_token_id=s["src"].pad_token_id)
    model_dir = tmp_path / "src"
    XLMRobertaForMaskedLM(cfg).save_pretrained(model_dir)
    s["src"].save_pretrained(model_dir)
    init = initialize(InitRequest(
        source_model=str(model_dir), target_tokenizer=s["lang"], method="focus", method_config=FocusConfig(**TINY_AUX),
        seed=1, model_kind="mlm", resources=TransferResources(target_corpus=s["corpus"]), mode="extend",
        extend_top_n=40,
    ))
    info = init.result.info
    assert info["extension"]["aux"] == "language" and info["aux"]["tokenizer"].startswith("extension_tokenizer")
    assert info["extension"]["new_rows"] == len(init.tokenizer) - len(s["src"])


# ----------------------------------------------------------------------------------------------
# special tokens as anchors (the reference's </s>)
# ----------------------------------------------------------------------------------------------


def test_focus_mapping_special_anchors():
    aux = np.array([[1, 0], [0, 1], [1, 0.05], [0.1, 1]], dtype=np.float32)
    has = np.ones(4, bool)
    kw = {"specials": np.array([[0, 3]]), "overlap": np.array([[1, 0]]), "aux": aux, "has_aux": has}
    paper = focus_mapping(4, 4, **kw)
    ref = focus_mapping(4, 4, **kw, special_anchors=True)
    assert paper.mapping.row(2)[0].tolist() == [0]  # the only anchor
    ids, w = ref.mapping.row(2)
    assert ids.tolist()[0] == 3 and abs(float(w.sum()) - 1) < 1e-6  # the special's source row carries the weight
    assert ref.mapping.provenance[0] == SPECIAL and ref.stats["special_anchors"] == 1 and ref.stats["anchors"] == 2
    assert paper.stats["special_anchors"] == 0 and paper.stats["anchors"] == 1


def test_special_anchor_is_fasttexts_line_end(setup, tmp_path):
    s = setup
    path, model = _aux_model(s, s["lang"], "lang")
    E = torch.randn(len(s["src"]), 8, generator=torch.Generator().manual_seed(0))
    inputs = TransferInputs(s["src"], s["lang"], E, target_corpus=s["corpus"])
    paper = Focus(_cfg(path, fuzzy=False)).initialize(inputs, np.random.default_rng(0))
    ref = Focus(FocusConfig.reference(**{**TINY_AUX, "aux_dim": 16, "aux_model_path": str(path)})).initialize(
        inputs, np.random.default_rng(0))
    eos_t, eos_s = s["lang"].eos_token_id, s["src"].eos_token_id
    assert model.get_word_id("</s>") >= 0  # fastText's line-end word
    assert ref.info["focus"]["special_anchors"] == 1 and ref.info["special_anchors"] is True
    assert ref.info["focus"]["anchors"] == paper.info["focus"]["anchors"] + 1
    assert ref.mapping.provenance[eos_t] == SPECIAL and ref.mapping.row(eos_t)[0].tolist() == [eos_s]
    # </s>'s vector is fastText's line-end vector: where it gets weight, rows differ from the paper's
    uses = [t for t in np.flatnonzero(ref.mapping.provenance == COMBINED) if eos_s in ref.mapping.row(t)[0]]
    assert all(eos_s not in paper.mapping.row(t)[0] for t in np.flatnonzero(paper.mapping.provenance == COMBINED))
    q = model.get_word_vector("</s>")
    aux, has = _fasttext.token_vectors(model, s["lang"])
    cos = (aux @ q) / (np.linalg.norm(aux, axis=1) * np.linalg.norm(q) + 1e-12)
    best = [t for t in np.flatnonzero(ref.mapping.provenance == COMBINED) if cos[t] == cos[ref.mapping.provenance == COMBINED].max()]
    assert uses and best[0] in uses  # the row most similar to </s> uses it


def test_raw_token_format_writes_vocabulary_strings_as_the_reference_does(tmp_path):
    from tests.methods.test_focus import SPECIALS, _from_pieces

    tok = _from_pieces(SPECIALS + ["▁a", "▁", "\\", "b"])
    raw, esc = _fasttext.fasttext_words(tok, "raw"), _fasttext.fasttext_words(tok, "string")
    assert raw[len(SPECIALS):] == ["▁a", "▁", "\\", "b"] and esc[len(SPECIALS) + 2] == "\\\\"
    assert raw[2] == "</s>" and esc[2] == "\\_</s>"  # raw: the special is fastText's line-end word
    corpus = tmp_path / "c.txt"
    corpus.write_text("a \\ b\n" * 3, encoding="utf-8")
    out = _fasttext.pretokenize(corpus, tok, tmp_path / "c.tok.txt", token_format="raw")
    assert out.read_text(encoding="utf-8").splitlines()[0] == " ".join(tok.tokenize("a \\ b"))
    with pytest.raises(ValueError, match="raw"):
        _fasttext.fasttext_words(tok, "bytes")
