"""Canonical token forms, special-token roles and overlap (``harness/vocab.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from harness.vocab import (
    Canon,
    canonical_vocab,
    compute_overlap,
    encode_canon,
    is_symbolic,
    special_roles,
    surface_form,
    token_string,
    token_strings,
    tokenizer_family,
    vocab_size,
)
from tests._tokfixtures import TARGET_TEXT, bytelevel, from_vocab, unigram, wordpiece

RB = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
FAMILY_BUILDERS = {"sentencepiece": unigram, "bytelevel": bytelevel, "wordpiece": wordpiece}


def _pairs(arr: np.ndarray) -> set[tuple[int, int]]:
    return {(int(t), int(s)) for t, s in arr}


# ---------------------------------------------------------------------------- family detection


@pytest.mark.parametrize("family", sorted(FAMILY_BUILDERS))
def test_family_of_trained_tokenizers(family):
    assert tokenizer_family(FAMILY_BUILDERS[family]()) == family


def test_llama_style_sentencepiece_is_detected():
    vocab = {
        "<unk>": 0,
        "▁foo": 1,
        "bar": 2,
        "▁": 3,
        "f": 4,
        "o": 5,
        "▁f": 6,
        "▁fo": 7,
        "b": 8,
        "a": 9,
        "r": 10,
        "ba": 11,
    }
    merges = [("▁", "f"), ("▁f", "o"), ("▁fo", "o"), ("b", "a"), ("ba", "r")]
    bk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    bk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    bk.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bk, unk_token="<unk>")
    assert tokenizer_family(tok) == "sentencepiece"
    assert canonical_vocab(tok)[1:3] == [Canon(b"foo", True), Canon(b"bar", False)]
    assert tok.tokenize("foo") == ["▁foo"]
    assert encode_canon(tok, Canon(b"foo", True)) == [1]
    assert encode_canon(tok, Canon(b"bar", False)) == [2]


def test_bpe_with_continuing_prefix_is_wordpiece_family():
    bk = Tokenizer(
        models.BPE({"<unk>": 0, "foo": 1, "##bar": 2}, [], unk_token="<unk>", continuing_subword_prefix="##")
    )
    bk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=bk, unk_token="<unk>")
    assert tokenizer_family(tok) == "wordpiece"
    assert canonical_vocab(tok)[1:] == [Canon(b"foo", True), Canon(b"bar", False)]


class _SlowTokenizer:
    """Stands in for a slow (python/sentencepiece) tokenizer: no ``backend_tokenizer``."""

    def get_vocab(self):
        return {"a": 0}


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: _SlowTokenizer(), "_SlowTokenizer"),
        (
            lambda: PreTrainedTokenizerFast(
                tokenizer_object=_with_pre(
                    Tokenizer(models.BPE({"<unk>": 0, "a</w>": 1}, [], unk_token="<unk>", end_of_word_suffix="</w>"))
                )
            ),
            "model BPE",
        ),
        (
            lambda: PreTrainedTokenizerFast(
                tokenizer_object=_with_pre(Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")))
            ),
            "model WordLevel",
        ),
    ],
)
def test_unsupported_tokenizers_raise_naming_the_type(make, needle):
    with pytest.raises(ValueError, match="supported") as err:
        canonical_vocab(make())
    assert needle in str(err.value)
    with pytest.raises(ValueError):
        tokenizer_family(make())


def _with_pre(bk: Tokenizer) -> Tokenizer:
    bk.pre_tokenizer = pre_tokenizers.Whitespace()
    return bk


# ---------------------------------------------------------------------------- canonical forms


@pytest.mark.parametrize(
    "family, piece, canon",
    [
        ("sentencepiece", "▁foo", Canon(b"foo", True)),
        ("sentencepiece", "foo", Canon(b"foo", False)),
        ("sentencepiece", "<0x41>", Canon(b"A", False)),
        ("sentencepiece", "▁", Canon(b"", True)),
        ("bytelevel", "Ġfoo", Canon(b"foo", True)),
        ("bytelevel", "foo", Canon(b"foo", False)),
        ("bytelevel", "Ã©", Canon("é".encode(), False)),
        ("bytelevel", "ĠcafÃ©", Canon("café".encode(), True)),
        ("bytelevel", "Ã", Canon(b"\xc3", False)),
        ("bytelevel", "Ċ", Canon(b"\n", False)),
        ("wordpiece", "foo", Canon(b"foo", True)),
        ("wordpiece", "##foo", Canon(b"foo", False)),
    ],
)
def test_canonical_forms(family, piece, canon):
    specials = BERT if family == "wordpiece" else RB
    tok = from_vocab(family, specials + [piece])
    cv = canonical_vocab(tok)
    assert cv[:5] == [None] * 5  # specials
    assert cv[5] == canon
    assert surface_form(tok, canon) == piece or family == "sentencepiece" and piece.startswith("<0x")


def test_trained_bytelevel_maps_non_ascii_back_to_utf8():
    tok = bytelevel()
    cv = canonical_vocab(tok)
    by_text = {c: i for i, c in enumerate(cv) if c is not None}
    # "é" is frequent in the corpus: the merged two-byte token must canonicalize to its UTF-8 bytes.
    assert Canon("é".encode(), False) in by_text
    assert token_string(tok, by_text[Canon("é".encode(), False)]) == "é"
    # Every token's canonical bytes, re-encoded with the byte map, give the token back.
    for i, c in enumerate(cv):
        if c is not None:
            assert surface_form(tok, c) == tok.convert_ids_to_tokens(i)


def test_trained_unigram_has_byte_fallback_pieces():
    tok = unigram()
    i = tok.convert_tokens_to_ids("<0x41>")
    assert canonical_vocab(tok)[i] == Canon(b"A", False)
    assert token_string(tok, i) == "A"
    assert token_string(tok, tok.convert_tokens_to_ids("<0xC3>")) == ""  # a lone lead byte


def test_token_string_removes_markers_and_returns_specials_verbatim():
    tok = from_vocab("wordpiece", BERT + ["foo", "##bar"])
    assert [token_string(tok, i) for i in (2, 5, 6)] == ["[CLS]", "foo", "bar"]


@pytest.mark.parametrize("family", sorted(FAMILY_BUILDERS))
def test_token_strings_equal_token_string_of_every_id(family):
    """The one-pass list is ``token_string`` id by id, specials (by content) and added tokens included."""
    import copy

    tok = copy.deepcopy(FAMILY_BUILDERS[family]())  # the fixture builders share their tokenizers
    tok.add_tokens(["zz qq", "▁lit"])
    tok.add_special_tokens({"additional_special_tokens": ["<extra>"]})
    want = [token_string(tok, i) for i in range(len(tok))]
    assert token_strings(tok) == want
    assert "<extra>" in want and "zz qq" in want and "lit" in want


def test_canonical_vocab_covers_every_id_and_nones_specials():
    for build in FAMILY_BUILDERS.values():
        tok = build()
        cv = canonical_vocab(tok)
        assert len(cv) == vocab_size(tok) == len(tok)
        assert {i for i, c in enumerate(cv) if c is None} == set(tok.all_special_ids)


def test_canonical_vocab_is_computed_once_per_tokenizer_and_again_after_added_tokens(monkeypatch):
    import copy

    import harness.families
    import harness.vocab as hv
    from harness.cache import ProcessMemo

    tok = copy.deepcopy(FAMILY_BUILDERS["sentencepiece"]())  # the fixture builders share their tokenizers
    monkeypatch.setattr(harness.families, "_CONTENT_MEMO", ProcessMemo(8))  # other tests canonicalized the same content
    calls = []
    real = hv._canonical_detail_uncached
    monkeypatch.setattr(hv, "_canonical_detail_uncached", lambda t: calls.append(1) or real(t))
    first = canonical_vocab(tok)
    first[1] = "mutated by a caller"
    again = canonical_vocab(tok)
    assert len(calls) == 1 and again[1] != "mutated by a caller" and again == real(tok)[0]
    tok.add_tokens(["zzqqxx"])
    grown = canonical_vocab(tok)
    assert len(calls) == 2 and len(grown) == len(again) + 1 and grown[-1].text == b"zzqqxx"


def test_canonical_vocab_is_shared_by_tokenizers_with_the_same_content(monkeypatch):
    """A trial loads its source tokenizer afresh: a new object with the same content (whatever its
    truncation state) reuses the canonical forms; other content is canonicalized on its own."""
    import copy

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    import harness.families
    import harness.vocab as hv
    from harness.cache import ProcessMemo

    monkeypatch.setattr(harness.families, "_CONTENT_MEMO", ProcessMemo(8))
    calls = []
    real = hv._canonical_detail_uncached
    monkeypatch.setattr(hv, "_canonical_detail_uncached", lambda t: calls.append(1) or real(t))
    base = FAMILY_BUILDERS["sentencepiece"]()

    def fresh():
        return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(base.backend_tokenizer.to_str()),
                                       **{k: getattr(base, k) for k in ("unk_token", "pad_token", "bos_token", "eos_token")})

    a, b = fresh(), fresh()
    b.backend_tokenizer.enable_truncation(5)
    assert hv.tokenizer_key(a) == hv.tokenizer_key(b)
    assert canonical_vocab(a) == canonical_vocab(b) == real(a)[0] and len(calls) == 1
    c = fresh()
    c.add_tokens(["zzqqxx"])
    assert hv.tokenizer_key(c) != hv.tokenizer_key(a)
    assert canonical_vocab(c)[-1].text == b"zzqqxx" and len(calls) == 2
    canonical_vocab(copy.deepcopy(FAMILY_BUILDERS["wordpiece"]()))  # the builders share their tokenizers
    assert len(calls) == 3


@pytest.mark.parametrize(
    "text, reference, wide",
    [
        ("1,5", False, True),  # mixed digits and punctuation: only the wide rule
        ("...", True, True),
        ("$", True, True),  # ASCII symbols are in string.punctuation
        ("", True, True),  # the bare word-start marker (a space)
        ("٣", True, True),  # digits of any script
        ("½", True, False),  # numeric but not a digit
        ("€", False, True),  # currency symbol
        ("😀", False, True),  # emoji (category So)
        ("…", False, True),  # non-ASCII punctuation
        ("«»", False, True),
        ("12😀", False, True),
        ("a1", False, False),
        ("A", False, False),
        (" ", True, True),
    ],
)
def test_is_symbolic_reference_rule_is_the_default(text, reference, wide):
    for ws in (True, False):
        canon = Canon(text.encode(), ws)
        assert is_symbolic(canon) is reference
        assert is_symbolic(canon, "reference") is reference
        assert is_symbolic(canon, "wide") is wide


def test_is_symbolic_reference_rule_is_the_reference_codes_character_test():
    """The reference rule's punctuation test (all characters ASCII punctuation, as deepfocus checks them
    one by one) on strings that end, start or are made of punctuation, and the empty text."""
    import string

    texts = ["", " ", "..", "!?", "a.", ".a", "-a-", "1,5", "…", "«»", "$", "a", "(x)", "((", ".1.", "\t", "é!",
             *[c for c in string.printable], *[a + b for a in string.punctuation[:12] for b in "a .!1é"]]
    for t in texts:
        want = t.isnumeric() or all(c in set(string.punctuation) for c in t) or t.isspace()
        assert is_symbolic(Canon(t.encode(), False)) is want, t


def test_is_symbolic_rejects_invalid_utf8_and_unknown_rules():
    assert is_symbolic(Canon(b"\xc3", False)) is False and is_symbolic(Canon(b"\xc3", False), "wide") is False
    with pytest.raises(ValueError, match="rule must be one of"):
        is_symbolic(Canon(b"1", True), "digits")


def test_fuzzy_overlap_follows_the_symbolic_rule():
    src = from_vocab("sentencepiece", RB + ["▁1,5", "▁€", "▁..."])
    tgt = from_vocab("sentencepiece", RB + ["1,5", "€", "..."])
    t_cv = canonical_vocab(tgt)
    ref = compute_overlap(src, tgt)
    wide = compute_overlap(src, tgt, symbolic_rule="wide")
    assert ref.exact.size == 0 and wide.exact.size == 0
    assert sorted(t_cv[t].text for t, _ in ref.fuzzy) == [b"..."]
    assert sorted(t_cv[t].text for t, _ in wide.fuzzy) == sorted([b"...", b"1,5", "€".encode()])
    with pytest.raises(ValueError, match="symbolic_rule"):
        compute_overlap(src, tgt, symbolic_rule="x")


# ---------------------------------------------------------------------------- special roles


def test_special_roles_alias_roberta_and_bert_names():
    rb = from_vocab("sentencepiece", RB + ["▁a"])
    bert = from_vocab("wordpiece", BERT + ["a"])
    assert special_roles(rb) == {"bos": 0, "eos": 2, "unk": 3, "pad": 1, "mask": 4, "cls": 0, "sep": 2}
    assert special_roles(bert) == {"bos": 2, "eos": 3, "unk": 1, "pad": 0, "mask": 4, "cls": 2, "sep": 3}


@pytest.mark.parametrize(
    "src_family, tgt_family",
    [("sentencepiece", "wordpiece"), ("wordpiece", "bytelevel"), ("bytelevel", "sentencepiece")],
)
def test_specials_match_by_role_across_naming(src_family, tgt_family):
    src, tgt = FAMILY_BUILDERS[src_family](), FAMILY_BUILDERS[tgt_family](TARGET_TEXT)
    ov = compute_overlap(src, tgt)
    s_roles, t_roles = special_roles(src), special_roles(tgt)
    expected = {(t_roles[r], s_roles[r]) for r in ("unk", "pad", "mask", "cls", "sep")}
    assert _pairs(ov.specials) == expected
    assert ov.report()["specials"] == 5 and ov.unmatched_specials == []
    names = {tgt.convert_ids_to_tokens(int(t)): src.convert_ids_to_tokens(int(s)) for t, s in ov.specials}
    if tgt_family == "wordpiece":
        assert names["[CLS]"] == "<s>" and names["[SEP]"] == "</s>" and names["[MASK]"] == "<mask>"


def test_roleless_specials_match_by_content_or_are_reported():
    src = from_vocab("sentencepiece", RB + ["▁a"])
    src.add_special_tokens({"additional_special_tokens": ["<2de>"]})
    tgt = from_vocab("sentencepiece", RB + ["▁a"])
    tgt.add_special_tokens({"additional_special_tokens": ["<2de>", "<2fr>"]})
    ov = compute_overlap(src, tgt)
    assert (tgt.convert_tokens_to_ids("<2de>"), src.convert_tokens_to_ids("<2de>")) in _pairs(ov.specials)
    assert ov.unmatched_specials == ["<2fr>"]


# ---------------------------------------------------------------------------- overlap


def test_overlap_across_families_by_hand():
    src = from_vocab("sentencepiece", RB + ["▁foo", "bar", "<0x41>", "A", "▁1", ",", "▁Baz", "é"])
    tgt = from_vocab("wordpiece", BERT + ["foo", "##bar", "##A", "##1", ",", "baz", "##é", "qux"])
    ov = compute_overlap(src, tgt)
    # foo/▁foo, ##bar/bar, ##A/A (the regular piece wins over <0x41>), ##é/é
    assert _pairs(ov.exact) == {(5, 5), (6, 6), (7, 8), (11, 12)}
    # symbolic only: ##1 ~ ▁1 (word start ignored), "," (WordPiece word start) ~ "," (continuation);
    # "baz" ~ "▁Baz" differs only by case but is not symbolic, so it is not matched.
    assert _pairs(ov.fuzzy) == {(8, 9), (9, 10)}
    assert not set(ov.exact[:, 0]) & set(ov.fuzzy[:, 0])
    report = ov.report()
    assert (report["exact"], report["fuzzy"], report["specials"]) == (4, 2, 5)
    assert report["source_family"] == "sentencepiece" and report["target_family"] == "wordpiece"
    no_fuzzy = compute_overlap(src, tgt, fuzzy=False)
    assert len(no_fuzzy.fuzzy) == 0 and _pairs(no_fuzzy.exact) == _pairs(ov.exact)


def test_overlap_bytelevel_vs_sentencepiece_non_ascii():
    src = from_vocab("bytelevel", RB + ["ĠcafÃ©", "Ã©", "Ã"])
    tgt = from_vocab("sentencepiece", RB + ["▁café", "é", "<0xC3>"])
    assert _pairs(compute_overlap(src, tgt).exact) == {(5, 5), (6, 6), (7, 7)}


@pytest.mark.parametrize("src_family", sorted(FAMILY_BUILDERS))
@pytest.mark.parametrize("tgt_family", sorted(FAMILY_BUILDERS))
def test_overlap_pairs_are_canonically_equal(src_family, tgt_family):
    src, tgt = FAMILY_BUILDERS[src_family](), FAMILY_BUILDERS[tgt_family](TARGET_TEXT)
    ov = compute_overlap(src, tgt)
    s_cv, t_cv = canonical_vocab(src), canonical_vocab(tgt)
    assert len(ov.exact) > 20
    for t, s in ov.exact:
        assert t_cv[t] == s_cv[s] is not None
    for t, s in ov.fuzzy:
        assert is_symbolic(t_cv[t]) and is_symbolic(s_cv[s]) and t_cv[t] != s_cv[s]
        assert t_cv[t].text.lower() == s_cv[s].text.lower()
    assert len(set(ov.exact[:, 0])) == len(ov.exact)
    assert not set(ov.exact[:, 0]) & set(ov.fuzzy[:, 0])
    json.dumps(ov.report())


def test_overlap_with_itself_is_everything():
    tok = unigram()
    ov = compute_overlap(tok, tok)
    n_regular = len(tok) - len(tok.all_special_ids)
    assert len(ov.exact) == n_regular and len(ov.fuzzy) == 0
    assert all(t == s for t, s in ov.specials)
    # Identity, except byte-fallback pieces whose byte is also a regular piece ("<0x2E>" and "."):
    # both ids of the duplicate map to the regular piece.
    moved = {tok.convert_ids_to_tokens(int(t)) for t, s in ov.exact if t != s}
    assert moved and all(p.startswith("<0x") for p in moved)


def test_overlap_respects_n_source():
    src = from_vocab("wordpiece", BERT + ["foo", "bar"])
    tgt = from_vocab("wordpiece", BERT + ["foo", "bar"])
    assert _pairs(compute_overlap(src, tgt, n_source=6).exact) == {(5, 5)}


def _sp_no_fallback(pieces: list[str]) -> PreTrainedTokenizerFast:
    """SentencePiece-Unigram without byte fallback (as ``harness.tokenizers`` trains them), from its pieces."""
    bk = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=pieces.index("<unk>"), byte_fallback=False))
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=bk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>")


def _by_canon(monkeypatch, src, tgt, **kw):
    """:func:`compute_overlap` with its string shortcut switched off (every piece canonicalized)."""
    from harness import vocab

    with monkeypatch.context() as m:
        m.setattr(vocab, "_overlap_by_string", lambda *a: None)
        return compute_overlap(src, tgt, **kw)


@pytest.mark.parametrize("case", ["sentencepiece", "wordpiece", "bytelevel", "n_source"])
def test_overlap_by_piece_string_equals_the_canonical_one(case, monkeypatch):
    from harness import vocab

    if case == "wordpiece":
        src = from_vocab("wordpiece", BERT + ["foo", "##foo", "##", "bar", "####", "é"])
        tgt = from_vocab("wordpiece", ["[UNK]", "##foo", "bar", "[CLS]", "##", "foo", "[SEP]", "qux", "####", "é"])
    elif case == "bytelevel":
        src = from_vocab("bytelevel", RB + ["ĠcafÃ©", "Ã©", "Ã", "Ġfoo"])
        tgt = from_vocab("bytelevel", RB + ["Ã", "Ġfoo", "x", "ĠcafÃ©"])
    else:
        src = _sp_no_fallback(RB + ["▁foo", "foo", "▁", "bar", "▁a▁b", "é"])
        tgt = _sp_no_fallback(RB + ["bar", "▁foo", "▁a▁b", "baz", "é", "▁"])
    kw = {"n_source": 8} if case == "n_source" else {}
    fast = vocab._overlap_by_string(src, tgt, kw.get("n_source"))
    assert fast is not None  # the shortcut applies to these pairs
    slow = _by_canon(monkeypatch, src, tgt, fuzzy=False, **kw)
    assert len(slow.exact) >= (2 if case == "n_source" else 3)
    assert fast.exact.tolist() == slow.exact.tolist() and fast.specials.tolist() == slow.specials.tolist()
    assert fast.report() == slow.report()
    assert compute_overlap(src, tgt, fuzzy=False, **kw).exact.tolist() == slow.exact.tolist()


def test_overlap_by_piece_string_declines_where_strings_and_canonical_forms_differ(monkeypatch):
    from harness import vocab

    # byte fallback: "<0x41>" and "A" are one canonical form
    fb = from_vocab("sentencepiece", RB + ["<0x41>", "A"]), from_vocab("sentencepiece", RB + ["<0x41>"])
    # a piece holding a space: "▁a b" and "▁a▁b" are one canonical form
    space = _sp_no_fallback(RB + ["▁a b"]), _sp_no_fallback(RB + ["▁a▁b"])
    # a byte-level piece outside the byte alphabet is read as UTF-8: "€" is "âĤ¬"
    utf8 = from_vocab("bytelevel", RB + ["€"]), from_vocab("bytelevel", RB + ["âĤ¬"])
    # two families, or a non-special added token
    mixed = _sp_no_fallback(RB + ["▁foo"]), from_vocab("wordpiece", BERT + ["foo"])
    added = _sp_no_fallback(RB + ["▁foo"]), _sp_no_fallback(RB + ["▁foo"])
    added[1].add_tokens(["foo"])
    for src, tgt in (fb, space, utf8, mixed, added):
        assert vocab._overlap_by_string(src, tgt, None) is None
        assert compute_overlap(src, tgt, fuzzy=False).exact.tolist() == _by_canon(monkeypatch, src, tgt, fuzzy=False).exact.tolist()
    assert compute_overlap(*fb, fuzzy=False).exact.tolist() == [[5, 6]]  # the regular piece wins
    assert compute_overlap(*space, fuzzy=False).exact.tolist() == [[5, 5]]
    assert compute_overlap(*utf8, fuzzy=False).exact.tolist() == [[5, 5]]


@pytest.mark.parametrize("family", sorted(FAMILY_BUILDERS))
def test_canonical_forms_of_some_ids_equal_the_canonical_vocabulary(family):
    import copy

    from harness import vocab

    tok = copy.deepcopy(FAMILY_BUILDERS[family]())  # the builders share their tokenizers: never grow theirs
    tok.add_tokens(["zzqx", "▁yyqx"])
    ids = [len(tok) + 5, *range(len(tok) - 1, -1, -7), 0, -1]  # under a quarter of the vocabulary
    vocab._DETAIL_MEMO.clear()
    piecewise = vocab.canonical_forms(tok, ids)  # nothing canonicalized yet: only these ids
    assert tok not in vocab._DETAIL_MEMO
    full = canonical_vocab(tok)
    assert piecewise == [full[i] if 0 <= i < len(full) else None for i in ids] == vocab.canonical_forms(tok, ids)
    assert piecewise[1] == Canon(b"yyqx", True) and None in piecewise
    dense = [len(tok) + 5, *range(len(tok) - 1, -1, -3), 0, -1]
    vocab._DETAIL_MEMO.clear()
    assert vocab.canonical_forms(tok, dense) == [full[i] if 0 <= i < len(full) else None for i in dense]
    assert tok in vocab._DETAIL_MEMO  # a third of the vocabulary: canonicalized whole, once (and by content)


# ---------------------------------------------------------------------------- encode_canon


def test_encode_canon_respects_word_start_in_every_family():
    wp = from_vocab("wordpiece", BERT + ["foo", "##foo", "##bar", "bar"])
    assert encode_canon(wp, Canon(b"foobar", True)) == [5, 7]
    assert encode_canon(wp, Canon(b"foobar", False)) == [6, 7]
    sp = from_vocab("sentencepiece", RB + ["▁foo", "foo", "bar", "▁"])
    assert encode_canon(sp, Canon(b"foobar", True)) == [5, 7]
    assert encode_canon(sp, Canon(b"foobar", False)) == [6, 7]
    assert encode_canon(sp, Canon(b"", True)) == []
    bl = bytelevel()
    for canon in (Canon("café".encode(), True), Canon(b"walking", False)):
        ids = encode_canon(bl, canon)
        pieces = [canonical_vocab(bl)[i] for i in ids]
        assert pieces[0].word_start is canon.word_start
        assert b"".join(p.text for p in pieces) == canon.text


def test_encode_canon_wordpiece_continuation_punctuation_is_its_own_word():
    wp = from_vocab("wordpiece", BERT + ["foo", ".", "##o"])
    assert encode_canon(wp, Canon(b".", False)) == [6]
    assert encode_canon(wp, Canon(b"o.", False)) == [7, 6]


def test_encode_canon_falls_back_to_bytes_and_unk():
    sp = unigram()
    ids = encode_canon(sp, Canon("∑".encode(), True))
    assert sp.convert_ids_to_tokens(ids) == ["▁", "<0xE2>", "<0x88>", "<0x91>"]
    wp = wordpiece()
    assert encode_canon(wp, Canon("∑".encode(), True)) == [wp.unk_token_id]


def test_bytelevel_pieces_read_through_the_byte_table_as_byte_by_byte():
    """A byte-level piece's bytes come from one ``str.translate``; a piece with any character that is not a
    stand-in (a literal space, a control character, a CJK character) is taken as UTF-8, as looking each
    character up in the byte map did."""
    from harness import vocab
    from harness.families import FamilySpec, bytes_to_unicode, unicode_to_bytes

    spec = vocab.family_spec(FAMILY_BUILDERS["bytelevel"]())
    assert isinstance(spec, FamilySpec) and spec.family == "bytelevel"
    u2b = unicode_to_bytes()

    def byte_by_byte(piece: str) -> Canon:
        try:
            raw = bytes(u2b[c] for c in piece)
        except KeyError:
            raw = piece.encode("utf-8")
        return Canon(raw[1:], True) if raw.startswith(b" ") else Canon(raw, False)

    stand_ins = "".join(bytes_to_unicode()[b] for b in range(256))
    pieces = ["", "Ġ", "Ġhello", "Ã©", "hello world", "a\x7fb", "中文", "Ġ中", "\xad", "é", stand_ins, stand_ins[::-1],
              *(stand_ins[i:i + 3] for i in range(0, 256, 3)), *(chr(c) for c in range(0, 600, 7))]
    for piece in pieces:
        assert vocab._canon_one(piece, spec, vocab._byte_table()) == (byte_by_byte(piece), False), repr(piece)
