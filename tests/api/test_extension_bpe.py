"""Vocabulary extension into BPE source tokenizers (``harness/extension.py``).

Byte-level BPE (GPT-2 style), SentencePiece-style BPE (Metaspace + byte fallback) and Llama-style
SentencePiece BPE (``▁`` from a Prepend/Replace normalizer, no pre-tokenizer), each trained in
memory on a few hundred generated sentences.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from harness import extension as _extension
from harness.extension import build_extension, extend_tokenizer, extension_candidates
from harness.vocab import canonical_vocab, vocab_size
from tests._tokfixtures import _wrap_roberta

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]

SOURCE_WORDS = (
    "the cat sat on mat dog ate food and watched a house in old town sells cakes for hello world was good day "
    "she said that room cold he agreed numbers like appear text quick brown fox jumps over lazy running runner "
    "walking walker talks water bottle garden window table chair yellow little"
).split()
TARGET_WORDS = (
    "der die das hund katze frisst essen und schaut zu ein café altstadt verkauft kuchen für euro hallo welt "
    "war guter tag sie sagte leise dass raum kalt er stimmte zahlen wie kommen im text vor schnelle braune "
    "fuchs springt über den faulen laufen läufer läuft gehen geher geht straße größe wasser flasche garten "
    "fenster tisch stuhl gelb klein katzen hunde tage welten"
).split() + [w + suffix for w in SOURCE_WORDS[:40] for suffix in ("en", "er", "ung")]  # a related language


def _sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
        out.append(s + rng.choice([".", "!", "?", ",", ""]))
    return out


SOURCE_TEXT = _sentences(SOURCE_WORDS, 300, 0)
TARGET_TEXT = _sentences(TARGET_WORDS, 300, 1)


@functools.cache
def bytelevel_bpe(which: str = "source", vocab: int = 600) -> PreTrainedTokenizerFast:
    """GPT-2-style byte-level BPE."""
    bk = Tokenizer(models.BPE())
    bk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bk.train_from_iterator(SOURCE_TEXT if which == "source" else TARGET_TEXT, trainer)
    return _wrap_roberta(bk)


@functools.cache
def sentencepiece_bpe(which: str = "source", llama: bool = False, vocab: int = 300) -> PreTrainedTokenizerFast:
    """SentencePiece-style BPE with byte fallback: Metaspace, or Llama's Prepend/Replace normalizer."""
    bk = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    bk.pre_tokenizer = pre_tokenizers.Metaspace()  # also for llama: training must not merge across words
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS)
    bk.train_from_iterator(SOURCE_TEXT if which == "source" else TARGET_TEXT, trainer)
    cfg = json.loads(bk.to_str())
    cfg["model"]["byte_fallback"] = True
    v = cfg["model"]["vocab"]
    n = len(v)
    for b in range(256):
        v[f"<0x{b:02X}>"] = n + b
    bk = Tokenizer.from_str(json.dumps(cfg))
    if llama:
        bk.pre_tokenizer = None
        bk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        bk.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    else:
        bk.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return _wrap_roberta(bk)


SOURCES = {
    "bytelevel": lambda: bytelevel_bpe("source"),
    "sentencepiece": lambda: sentencepiece_bpe("source"),
    "llama": lambda: sentencepiece_bpe("source", llama=True),
}
TARGETS = {
    "bytelevel": lambda: bytelevel_bpe("target", vocab=800),
    "sentencepiece": lambda: sentencepiece_bpe("target", vocab=500),
}
CASES = [("bytelevel", "bytelevel"), ("bytelevel", "sentencepiece"), ("sentencepiece", "bytelevel"),
         ("sentencepiece", "sentencepiece"), ("llama", "sentencepiece")]  # fmt: skip


@pytest.fixture()
def corpus(tmp_path) -> Path:
    path = tmp_path / "target.txt"
    path.write_text("\n".join(TARGET_TEXT) + "\n", encoding="utf-8")
    return path


def _new_merges(tok, n_new: int) -> set[tuple[str, str]]:
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    tail = merges[len(merges) - n_new :] if n_new else []
    return {tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in tail}


def _words(tok, text: str) -> list[str]:
    """The model-level "words" of ``text``: pre-tokens after normalization."""
    bk = tok.backend_tokenizer
    s = bk.normalizer.normalize_str(text) if bk.normalizer is not None else text
    return [w for w, _ in bk.pre_tokenizer.pre_tokenize_str(s)] if bk.pre_tokenizer is not None else [s]


@pytest.mark.parametrize("src_name, tgt_name", CASES)
def test_added_bpe_tokens_are_emitted_on_target_text(src_name, tgt_name, corpus):
    src, tgt = SOURCES[src_name](), TARGETS[tgt_name]()
    res = build_extension(src, tgt, corpus, top_n=40)
    ext, new_ids = res.tokenizer, res.new_ids
    n_old = vocab_size(src)
    assert len(new_ids) == 40 and new_ids == list(range(n_old, n_old + 40)) and vocab_size(ext) == n_old + 40
    assert extend_tokenizer(src, tgt, corpus, top_n=40)[1] == new_ids
    # every added piece is one token of the model
    for i, c in zip(new_ids, res.added):
        assert [t.id for t in ext.backend_tokenizer.model.tokenize(c.piece)] == [i]
    # on target text: shorter encodings and the new ids in use
    old_enc = src(TARGET_TEXT, add_special_tokens=False)["input_ids"]
    new_enc = ext(TARGET_TEXT, add_special_tokens=False)["input_ids"]
    assert sum(map(len, new_enc)) < sum(map(len, old_enc))
    assert any(len(b) < len(a) and set(b) & set(new_ids) for a, b in zip(old_enc, new_enc))
    emitted = {i for ids in new_enc for i in ids}
    assert len(emitted & set(new_ids)) >= 30
    # decoding still gives the text back
    for text, ids in zip(TARGET_TEXT[:20], new_enc):
        assert ext.decode(ids).strip() == src.decode(src(text, add_special_tokens=False)["input_ids"]).strip()


@pytest.mark.parametrize("src_name, tgt_name", CASES)
def test_old_ids_keep_their_pieces_and_specials(src_name, tgt_name, corpus):
    src, tgt = SOURCES[src_name](), TARGETS[tgt_name]()
    ext, _ = extend_tokenizer(src, tgt, corpus, top_n=30)
    now = ext.get_vocab()
    assert all(now[p] == i for p, i in src.get_vocab().items())
    assert ext.all_special_ids == src.all_special_ids and ext.unk_token_id == src.unk_token_id
    old_merges = json.loads(src.backend_tokenizer.to_str())["model"]["merges"]
    assert json.loads(ext.backend_tokenizer.to_str())["model"]["merges"][: len(old_merges)] == old_merges


@pytest.mark.parametrize("src_name, tgt_name", CASES)
def test_segmentation_changes_only_where_a_new_merge_fires(src_name, tgt_name, corpus):
    src, tgt = SOURCES[src_name](), TARGETS[tgt_name]()
    ext, new_ids = extend_tokenizer(src, tgt, corpus, top_n=40)
    new_merges = _new_merges(ext, len(new_ids))
    assert len(new_merges) == len(new_ids)
    old_model, new_model = src.backend_tokenizer.model, ext.backend_tokenizer.model
    untouched: list[str] = []
    n_changed = 0
    for text in SOURCE_TEXT + TARGET_TEXT:
        for w in _words(src, text):
            before = [t.value for t in old_model.tokenize(w)]
            after = [t.value for t in new_model.tokenize(w)]
            if not set(zip(before, before[1:])) & new_merges:
                assert after == before, w  # no new merge applies: same segmentation
                untouched.append(w)
            else:
                n_changed += 1
                # otherwise a coarsening: the old pieces, some adjacent ones joined into new tokens
                k = 0
                for piece in after:
                    j = k
                    while "".join(before[k:j]) != piece:
                        j += 1
                        assert j <= len(before), (w, before, after)
                    assert j - k == 1 or ext.convert_tokens_to_ids(piece) in new_ids
                    k = j
                assert k == len(before)
    assert n_changed > 0 and untouched
    # a sentence made only of source words in which no new merge fires is segmented identically
    if src.backend_tokenizer.pre_tokenizer is not None:
        words = [w for w in dict.fromkeys(" ".join(SOURCE_TEXT).split()) if w.isalpha()]
        safe = [w for w in words if all(u in untouched for u in _words(src, " " + w))][:15]
        assert len(safe) >= 5
        text = " ".join(safe)
        assert ext(text)["input_ids"] == src(text)["input_ids"]


@pytest.mark.parametrize("src_name, tgt_name", CASES)
def test_new_ids_pair_with_their_target_tokens(src_name, tgt_name, corpus):
    src, tgt = SOURCES[src_name](), TARGETS[tgt_name]()
    res = build_extension(src, tgt, corpus, top_n=40)
    ext = res.tokenizer
    e_canon, t_canon = canonical_vocab(ext), canonical_vocab(tgt)
    assert len(res.added) == len(res.new_ids)
    for i, c in zip(res.new_ids, res.added):
        assert ext.convert_ids_to_tokens(i) == c.piece
        assert e_canon[i] == t_canon[c.target_id] == c.canon
        assert ext.decode([i]).strip() == tgt.decode([c.target_id]).strip()
    # the added candidates are a subset of extension_candidates, taken in (unlocked) frequency order
    pool = extension_candidates(src, tgt, corpus, top_n=vocab_size(tgt))
    rank = {c.target_id: k for k, c in enumerate(pool)}
    assert all(c.target_id in rank for c in res.added)
    assert len({c.target_id for c in res.added}) == len(res.added)


@pytest.mark.parametrize("as_str", [True, False])
def test_merges_format_round_trips(as_str):
    src = bytelevel_bpe("source")
    cfg = json.loads(src.backend_tokenizer.to_str())
    model = cfg["model"]
    if as_str:
        model["merges"] = [" ".join(m) for m in model["merges"]]
    n_old, piece = len(model["vocab"]), "ĠzzzzQ"
    assert [t.value for t in src.backend_tokenizer.model.tokenize(piece)] != [piece]
    # a chain of one-merge extensions reaching the piece
    pairs = [("Ġ", "z"), ("Ġz", "z"), ("Ġzz", "z"), ("Ġzzz", "z"), ("Ġzzzz", "Q")]
    for k, (a, b) in enumerate(pairs):
        model["vocab"][a + b] = n_old + k
    before = list(model["merges"])
    _extension._append_merges(model, pairs)
    assert model["merges"][: len(before)] == before
    tail = model["merges"][len(before) :]
    assert tail == ([f"{a} {b}" for a, b in pairs] if as_str else [[a, b] for a, b in pairs])
    bk = Tokenizer.from_str(json.dumps(cfg))
    assert [t.id for t in bk.model.tokenize(piece)] == [n_old + 4]
    # an empty merge list gets lists; a part with a space forces lists
    m: dict = {"merges": []}
    _extension._append_merges(m, [("a", "b")])
    assert m["merges"] == [["a", "b"]]
    m = {"merges": ["a b"]}
    _extension._append_merges(m, [("c d", "e")])
    assert m["merges"] == [["a", "b"], ["c d", "e"]]


@pytest.mark.parametrize("src_name, tgt_name", [("bytelevel", "sentencepiece"), ("sentencepiece", "bytelevel")])
def test_top_n_is_respected_and_skipped_candidates_reported(src_name, tgt_name, corpus, caplog):
    src, tgt = SOURCES[src_name](), TARGETS[tgt_name]()
    for top_n in (0, 1, 7):
        res = build_extension(src, tgt, corpus, top_n=top_n)
        assert len(res.new_ids) == len(res.added) == top_n and vocab_size(res.tokenizer) == vocab_size(src) + top_n
    # asking for more than can be reached: every candidate is either added or skipped
    pool = extension_candidates(src, tgt, corpus, top_n=vocab_size(tgt))
    with caplog.at_level(logging.INFO, logger="harness.extension"):
        res = build_extension(src, tgt, corpus, top_n=100_000)
    assert 0 < len(res.added) < len(pool) and res.skipped
    assert len(res.added) + len(res.skipped) == len(pool)
    assert {c.target_id for c in res.added}.isdisjoint(c.target_id for c in res.skipped)
    assert f"skipped {len(res.skipped)} candidates" in caplog.text
    model = res.tokenizer.backend_tokenizer.model
    for c in res.skipped:  # really not emitted as one token
        assert len(model.tokenize(c.piece)) != 1 or c.piece not in res.tokenizer.get_vocab()
    # a small top_n adds the most frequent reachable candidates; skipped ones outrank the last added
    res5 = build_extension(src, tgt, corpus, top_n=5)
    rank = {c.target_id: k for k, c in enumerate(pool)}
    assert all(rank[c.target_id] < max(rank[a.target_id] for a in res5.added) for c in res5.skipped)


def test_byte_fallback_characters_unknown_to_the_source_are_skipped(corpus):
    src, tgt = sentencepiece_bpe("source"), TARGETS["bytelevel"]()
    assert "ü" not in src.get_vocab() and "ß" not in src.get_vocab()
    res = build_extension(src, tgt, corpus, top_n=100_000)
    assert not any(set(c.piece) & {"ü", "ö", "ß"} for c in res.added)
    assert any(set(c.piece) & {"ü", "ö", "ß"} for c in res.skipped)
    assert all(not c.piece.startswith("<0x") for c in res.added)


def test_pre_tokenizer_splits_are_skipped(corpus, tmp_path):
    """A target token with a word and punctuation is never one GPT-2 pre-token, so never added."""
    src = bytelevel_bpe("source")
    tgt = TARGETS["sentencepiece"]()
    res = build_extension(src, tgt, corpus, top_n=100_000)
    pre = src.backend_tokenizer.pre_tokenizer
    for c in res.added:
        text = (" " if c.canon.word_start else "") + c.canon.text.decode()
        assert len(pre.pre_tokenize_str(text)) == 1


def test_new_ids_follow_added_tokens_above_the_model_vocab(corpus):
    src = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(bytelevel_bpe("source").backend_tokenizer.to_str()),
                                  **bytelevel_bpe("source").special_tokens_map)  # fmt: skip
    src.add_special_tokens({"additional_special_tokens": ["<extra>"]})
    extra = src.convert_tokens_to_ids("<extra>")
    assert extra == vocab_size(src) - 1
    ext, new_ids = extend_tokenizer(src, TARGETS["bytelevel"](), corpus, top_n=10)
    assert new_ids == list(range(extra + 1, extra + 11))
    assert ext.convert_tokens_to_ids("<extra>") == extra
    assert ext.convert_ids_to_tokens(extra) == "<extra>"
    ids = ext("der <extra> katze", add_special_tokens=False)["input_ids"]
    assert ids.count(extra) == 1


def test_verification_catches_a_missing_merge(corpus, monkeypatch):
    monkeypatch.setattr(_extension, "_append_merges", lambda model, pairs: None)
    with pytest.raises(RuntimeError, match="BPE extension bug: added piece"):
        extend_tokenizer(bytelevel_bpe("source"), TARGETS["bytelevel"](), corpus, top_n=5)


def test_bpe_with_a_continuing_subword_prefix_is_not_implemented(corpus):
    bk = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##"))
    bk.pre_tokenizer = pre_tokenizers.Whitespace()
    bk.train_from_iterator(SOURCE_TEXT, trainers.BpeTrainer(vocab_size=150, special_tokens=SPECIALS,
                                                           continuing_subword_prefix="##"))  # fmt: skip
    with pytest.raises(NotImplementedError, match="continuing_subword_prefix"):
        extend_tokenizer(_wrap_roberta(bk), TARGETS["bytelevel"](), corpus, top_n=5)


def test_wordpiece_new_ids_follow_added_tokens_above_the_model_vocab(tmp_path):
    """The same id bookkeeping for a dict-vocabulary WordPiece source (it used to collide)."""
    from tests._tokfixtures import TARGET_TEXT as WP_TARGET
    from tests._tokfixtures import wordpiece

    path = tmp_path / "target.txt"
    path.write_text("\n".join(WP_TARGET) + "\n", encoding="utf-8")
    base = wordpiece()
    src = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(base.backend_tokenizer.to_str()),
                                  **base.special_tokens_map)  # fmt: skip
    src.add_special_tokens({"additional_special_tokens": ["<extra>"]})
    extra = src.convert_tokens_to_ids("<extra>")
    ext, new_ids = extend_tokenizer(src, wordpiece(WP_TARGET), path, top_n=5)
    assert new_ids == list(range(extra + 1, extra + 6))
    assert ext.convert_tokens_to_ids("<extra>") == extra
    cands = extension_candidates(src, wordpiece(WP_TARGET), path, top_n=5)
    assert ext.convert_ids_to_tokens(new_ids) == [c.piece for c in cands]


def test_candidates_considered_late_see_the_merges_added_before():
    """Widening the considered candidates must start them from the current split, not the old one.

    Source: letters only, no merges. ``ab`` is added first; ``xyzw``/``qrst`` are never reachable,
    so ``bc`` and ``abc`` are considered late. ``abc`` must then be ``(ab, c)`` — with its old split
    ``a b c`` it would wrongly get the merge ``(a, bc)`` once ``bc`` is added.
    """
    from harness.vocab import Canon, family_spec

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    bk = Tokenizer(models.BPE({p: i for i, p in enumerate(SPECIALS + letters)}, []))
    bk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bk.decoder = decoders.ByteLevel()
    src = _wrap_roberta(bk)
    n_old = vocab_size(src)
    pool = [
        _extension.ExtensionCandidate(k, Canon(p.encode(), False), p, 100 - k)
        for k, p in enumerate(["ab", "xyzw", "qrst", "bc", "abc"])
    ]
    cfg = json.loads(src.backend_tokenizer.to_str())
    added, skipped = _extension._extend_bpe(family_spec(src), src.backend_tokenizer, cfg, pool, 3, n_old)
    assert [c.piece for c in added] == ["ab", "bc", "abc"]
    assert [c.piece for c in skipped] == ["xyzw", "qrst"]
    assert cfg["model"]["merges"] == [["a", "b"], ["b", "c"], ["ab", "c"]]
    rebuilt = Tokenizer.from_str(json.dumps(cfg))
    _extension._verify_bpe(cfg, rebuilt, added, n_old)
    assert [t.value for t in rebuilt.model.tokenize("abcbc")] == ["abc", "bc"]


@pytest.mark.parametrize("src_name, tgt_name", [("bytelevel", "bytelevel"), ("sentencepiece", "sentencepiece")])
def test_every_top_n_builds_a_consistent_model(src_name, tgt_name, corpus):
    """Small caps widen the considered candidates many times; the built-in verification checks each."""
    src, tgt = SOURCES[src_name](), TARGETS[tgt_name]()
    sizes = []
    for top_n in (2, 3, 5, 8, 13, 21, 34, 55, 89):
        res = build_extension(src, tgt, corpus, top_n=top_n)
        sizes.append(len(res.added))
        assert len(res.added) <= top_n
    assert sizes == sorted(sizes) and sizes[-1] > 40
