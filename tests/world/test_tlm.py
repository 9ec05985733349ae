"""Issue 28: translation language modelling (TLM) for the multilingual world sources: parallel pairs
packed into sequences, masked on both sides, each token with its side's language; the step schedule
and a TLM pretraining run on the tiny world.

Tiny random models (hidden 16) and the tiny world; no network, no GPU.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from harness.cache import content_hash
from harness.language_encoding import read_pretrained
from harness.world import pretrain as pt
from harness.world import pretrain_model as pmodel
from harness.world import tlm
from harness.world.pretrain import PretrainConfig, pretrained_source
from tests.model.test_encodings import enc
from tests.tasks.test_tasks import make_mlm, make_tokenizer


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _mask_kwargs(tok, probability=0.15):
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    regular = torch.tensor(sorted(set(range(len(tok))) - set(tok.all_special_ids)))
    return {"special_ids": special, "regular_ids": regular, "mask_id": tok.mask_token_id, "probability": probability}


PAIRS = {
    "near": [("Anna lives in Berlin .", "Ana livs in Berlina ."), ("The cat sat on the mat .", "Te kat sat on te mat .")],
    "far": [("The dog ran .", "Xu qo yanq ."), ("Anna sat near the door .", "Ana khi dor nyq sat .")],
}


# ------------------------------------------------------------------------------ TLM data


def test_pack_pairs_budget_sides_and_determinism(tok):
    g = torch.Generator().manual_seed(0)
    seqs = tlm.pack_pairs(tok, PAIRS, "src", 48, g)
    assert seqs.languages == ("src", "near", "far") and seqs.pairs == {"near": 2, "far": 2}
    assert seqs.dropped == 0 and sum(len(s) for s in seqs.sides) == 8  # every pair packed, two sides each
    for ids, sides in zip(seqs.ids, seqs.sides, strict=True):
        assert len(ids) + len(sides) <= 48  # room for attached's token per side
        starts = [s for s, _ in sides]
        assert all(ids[s] == tok.bos_token_id for s in starts)  # each side is a line: <s> ... </s>
        langs = [lang for _, lang in sides]
        for a, b in zip(langs[::2], langs[1::2], strict=True):  # a pair: the source and one target language
            assert 0 in (a, b) and {a, b} != {0}
    again = tlm.pack_pairs(tok, PAIRS, "src", 48, torch.Generator().manual_seed(0))
    assert again == seqs
    tiny = tlm.pack_pairs(tok, PAIRS, "src", 26, torch.Generator().manual_seed(0))  # pairs need 23-29
    assert tiny.dropped == 4 - sum(len(s) for s in tiny.sides) // 2 and tiny.dropped > 0
    with pytest.raises(ValueError, match="no parallel pair fits"):
        tlm.pack_pairs(tok, PAIRS, "src", 8, torch.Generator().manual_seed(0))


def test_tlm_batches_mask_both_sides_and_attached_gets_a_token_per_side(tok):
    seqs = tlm.pack_pairs(tok, PAIRS, "src", 64, torch.Generator().manual_seed(1))
    batches = tlm.TlmBatches(seqs, 2, seed=5, pad_id=tok.pad_token_id, mask_kwargs=_mask_kwargs(tok, 0.5))
    batch = batches.next()
    ids, labels, attn, langs = batch["input_ids"], batch["labels"], batch["attention_mask"], batch["languages"]
    assert ids.shape == labels.shape == attn.shape == langs.shape
    assert not labels[attn == 0].ne(-100).any()  # pads are never predicted
    masked_langs = set(langs[labels != -100].tolist())
    assert len(masked_langs) >= 2  # masks on both sides of the pairs
    for name in ("none", "additive", "attached", "xlp", "xlp-shared"):
        model = make_mlm(tok, dropout=0.0)
        wrapped = None if name == "none" else enc(name).wrap(pmodel.MaskedLMLoss(model), list(seqs.languages), seed=1)
        loss = tlm.tlm_loss(model, wrapped, batch, seqs.languages)
        loss.backward()
        assert torch.isfinite(loss) and model.roberta.embeddings.word_embeddings.weight.grad.abs().sum() > 0
        if wrapped is not None:
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in wrapped.tables.parameters()), name
        if name != "attached":
            continue
        table_ids = wrapped.language_index(list(seqs.languages))[langs]
        out = tlm._insert_language_tokens(batch, table_ids)
        for r, sides in enumerate(batch["sides"]):
            cols = out["added_positions"][r].nonzero().flatten().tolist()
            assert len(cols) == len(sides)
            for k, (start, _) in enumerate(sides):
                col = start + 1 + k  # after the side's <s>, shifted by the tokens inserted before it
                assert col == cols[k] and out["language_ids"][r, col] == table_ids[r, start]
                assert out["input_ids"][r, col - 1] == tok.bos_token_id and out["labels"][r, col] == -100
        kept = ~out["added_positions"]
        assert out["labels"][kept].ne(-100).sum() == labels.ne(-100).sum()  # the same masked tokens
        assert int(out["attention_mask"].sum()) == int(attn.sum()) + sum(len(s) for s in batch["sides"])
        assert out["input_ids"][out["attention_mask"] == 0].eq(tok.pad_token_id).all()  # positions stop at pads


def test_tlm_step_schedule_and_config_validation():
    assert sum(tlm.is_tlm_step(s, 0.25) for s in range(1, 101)) == 25
    with pytest.raises(ValueError, match=r"tlm_fraction must be in \[0, 1\)"):
        PretrainConfig(tlm_fraction=1.0)
    with pytest.raises(ValueError, match="needs kind='mlm'"):
        PretrainConfig(kind="clm", extra_languages=("near",), tlm_fraction=0.5)
    with pytest.raises(ValueError, match="needs extra_languages"):
        PretrainConfig(tlm_fraction=0.5)
    # 0 keeps every earlier cache key (the constant of test_xlp_settings); above 0 is a new source
    assert content_hash(pt._cache_key(PretrainConfig(tlm_fraction=0.0), [], [])) == (
        "8fdeeb9a86eb7d500ba1095098c34092307a1af5445cf917190579fddfd34e33")
    with_tlm = PretrainConfig(extra_languages=("near",), encoding="xlp", tlm_fraction=0.5)
    assert content_hash(pt._cache_key(with_tlm, [], [])) != content_hash(
        pt._cache_key(PretrainConfig(extra_languages=("near",), encoding="xlp"), [], []))


def test_bf16_pretraining_is_another_source_deterministic_and_keeps_fp32_keys(tiny_world, tmp_path, monkeypatch):
    """``bf16``: off keeps every earlier cache key (the constant above); on is another source whose weights
    differ from the float32 one's, the same when pretrained again from scratch, with a float32 dev loss
    close to the float32 source's."""
    from transformers import AutoModelForMaskedLM

    assert content_hash(pt._cache_key(PretrainConfig(bf16=False), [], [])) == (
        "8fdeeb9a86eb7d500ba1095098c34092307a1af5445cf917190579fddfd34e33")
    with pytest.raises(ValueError, match="bf16 must be true or false"):
        PretrainConfig(bf16=1)
    cfg = PretrainConfig.tiny(extra_languages=("near",), encoding="xlp", tlm_fraction=0.5, steps=6)
    word = "roberta.embeddings.word_embeddings.weight"
    runs = []
    for name, c, cache in (("fp32", cfg, "a"), ("bf16", dataclasses.replace(cfg, bf16=True), "a"),
                           ("bf16", dataclasses.replace(cfg, bf16=True), "b")):  # fmt: skip
        monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / cache))
        path = Path(pretrained_source(tiny_world, config=c, progress=False))
        weights = AutoModelForMaskedLM.from_pretrained(path).state_dict()[word]
        runs.append((name, weights, json.loads((path / pt.INFO_FILE).read_text())))
    (_, fp32, fp32_info), (_, bf16, bf16_info), (_, bf16_again, _) = runs
    assert not torch.equal(fp32, bf16) and torch.equal(bf16, bf16_again)
    assert bf16_info["config"]["bf16"] is True and abs(bf16_info["dev_loss"] - fp32_info["dev_loss"]) < 0.5


@pytest.mark.parametrize("encoding", ["none", "attached", "xlp-shared"])
def test_tlm_pretraining_on_the_tiny_world(tiny_world, encoding):
    cfg = PretrainConfig.tiny(extra_languages=("near", "far"), encoding=encoding, tlm_fraction=0.5, steps=8)
    path = Path(pretrained_source(tiny_world, config=cfg, progress=False))
    info = json.loads((path / pt.INFO_FILE).read_text())
    assert info["tlm"]["steps"] == 4 and info["tlm"]["pairs"] == {"near": 90, "far": 90}
    assert info["tlm"]["sequences"] > 0 and info["tlm"]["final_loss"] > 0
    assert [s for s, _ in info["loss_curve"]] and all(s % 2 == 1 or s == 8 for s, _ in info["loss_curve"][:-1])
    if encoding == "xlp-shared":
        saved = read_pretrained(path)
        rows = list(saved["state"]["input"].values())
        assert saved["meta"]["encoding_config"]["shared"] is True
        assert all(torch.equal(r, rows[0]) for r in rows) and not torch.equal(rows[0], torch.eye(16))
        assert info["encoding"]["parameters_added"] == 16 * 16



def _originals(batch):
    """The unmasked ids of a TLM batch: the label where a token was masked, the input elsewhere."""
    return torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])


def test_tlm_batches_give_each_token_its_sides_language_and_mask_both_sides(tok):
    seqs = tlm.pack_pairs(tok, PAIRS, "src", 64, torch.Generator().manual_seed(2))
    batches = tlm.TlmBatches(seqs, 2, seed=7, pad_id=tok.pad_token_id, mask_kwargs=_mask_kwargs(tok, 0.5))
    texts = {0: {s for rows in PAIRS.values() for s, _ in rows}}  # language index -> the sentences of that side
    for li, lang in enumerate(seqs.languages[1:], 1):
        texts[li] = {t for _, t in PAIRS[lang]}
    sides_seen = 0
    for _ in range(4):
        batch = batches.next()
        originals, langs, labels = _originals(batch), batch["languages"], batch["labels"]
        for r, sides in enumerate(batch["sides"]):
            length = int(batch["attention_mask"][r].sum())
            ends = [s for s, _ in sides[1:]] + [length]
            for (start, lang), end in zip(sides, ends, strict=True):
                assert langs[r, start:end].eq(lang).all()  # every token of the side, specials included
                side_text = tok.decode(originals[r, start:end], skip_special_tokens=True).strip()
                assert side_text in texts[lang], (side_text, lang)  # the language id is the language of the text
                sides_seen += 1
            for a, b in zip(range(0, len(sides), 2), range(1, len(sides), 2), strict=True):  # each pair of sides
                masked = [bool(labels[r, sides[k][0]:ends[k]].ne(-100).any()) for k in (a, b)]
                assert all(masked), (r, sides[a], sides[b])  # masks on both sides of the pair
    assert sides_seen >= 8


def test_tlm_batches_are_a_function_of_the_seed(tok):
    seqs = tlm.pack_pairs(tok, PAIRS, "src", 40, torch.Generator().manual_seed(0))
    assert len(seqs.ids) >= 3  # several sequences, so the order is drawn too

    def draw(seed: int) -> list[dict]:
        batches = tlm.TlmBatches(seqs, 2, seed=seed, pad_id=tok.pad_token_id, mask_kwargs=_mask_kwargs(tok, 0.3))
        return [batches.next() for _ in range(5)]

    first = draw(11)
    torch.manual_seed(12345)  # the global generators are never read
    torch.rand(7)
    again = draw(11)
    for a, b in zip(first, again, strict=True):
        assert a["sides"] == b["sides"]
        for key in ("input_ids", "labels", "attention_mask", "languages"):
            assert torch.equal(a[key], b[key]), key
    other = draw(12)
    assert any(a["sides"] != b["sides"] or not torch.equal(a["labels"], b["labels"]) for a, b in zip(first, other, strict=True))


def test_xlm_style_one_pair_per_sequence_with_positions_restarting_at_each_side(tok):
    """``tlm_style: xlm``: XLM's layout. One pair per sequence in the packed order, positions restarting at
    the second side (RoBERTa's numbering from pad + 1), a batch of as many pairs as fill batch x max_len,
    and every encoding's loss takes the positions (``attached`` keeps them around its inserted token)."""
    packed = tlm.pack_pairs(tok, PAIRS, "src", 64, torch.Generator().manual_seed(1))
    xlm = tlm.pack_pairs(tok, PAIRS, "src", 64, torch.Generator().manual_seed(1), style="xlm")
    assert len(xlm.ids) == 4 and all(len(s) == 2 for s in xlm.sides) and xlm.info()["style"] == "xlm"
    assert [i for ids in xlm.ids for i in ids] == [i for ids in packed.ids for i in ids]  # same order and flips
    assert "style" not in packed.info() and packed.rows_per_batch(2, 64) == 2
    assert xlm.rows_per_batch(2, 64) == round(2 * 64 / (sum(len(i) + 2 for i in xlm.ids) / 4)) > 2
    with pytest.raises(ValueError, match="TLM style must be one of"):
        tlm.pack_pairs(tok, PAIRS, "src", 64, torch.Generator().manual_seed(1), style="stacked")
    pad = tok.pad_token_id
    batch = tlm.TlmBatches(xlm, 2, seed=5, pad_id=pad, mask_kwargs=_mask_kwargs(tok, 0.5), max_len=64).next()
    assert batch["input_ids"].shape[0] == xlm.rows_per_batch(2, 64)
    for r, sides in enumerate(batch["sides"]):
        (a, _), (b, _) = sides
        n = int(batch["attention_mask"][r].sum())
        assert batch["position_ids"][r, :n].tolist() == [*range(pad + 1, pad + 1 + b), *range(pad + 1, pad + 1 + n - b)]
        assert batch["position_ids"][r, n:].eq(pad).all() and a == 0
    for name in ("none", "attached", "xlp"):
        torch.manual_seed(0)
        model = make_mlm(tok, dropout=0.0)
        wrapped = None if name == "none" else enc(name).wrap(pmodel.MaskedLMLoss(model), list(xlm.languages), seed=1)
        loss = tlm.tlm_loss(model, wrapped, batch, xlm.languages)
        running_on = tlm.tlm_loss(model, wrapped, {k: v for k, v in batch.items() if k != "position_ids"}, xlm.languages)
        assert torch.isfinite(loss) and not torch.isclose(loss, running_on), name  # the positions reach the model
    table_ids = torch.zeros_like(batch["languages"])
    out = tlm._insert_language_tokens(batch, table_ids)
    for r in range(len(batch["sides"])):
        slots = out["added_positions"][r].nonzero().flatten().tolist()
        assert [int(out["position_ids"][r, c]) for c in slots] == [pad + 1, pad + 1]  # each slot at its <s>'s position
    assert out["position_ids"][~out["added_positions"] & out["attention_mask"].bool()].tolist() == (
        batch["position_ids"][batch["attention_mask"].bool()].tolist())


def test_xlm_style_pretraining_is_another_source_and_packed_keeps_its_keys(tiny_world):
    assert content_hash(pt._cache_key(PretrainConfig(tlm_style="packed"), [], [])) == (
        "8fdeeb9a86eb7d500ba1095098c34092307a1af5445cf917190579fddfd34e33")
    with pytest.raises(ValueError, match="tlm_style must be one of"):
        PretrainConfig(tlm_style="XLM")
    cfg = PretrainConfig.tiny(extra_languages=("near", "far"), encoding="none", tlm_fraction=0.5, steps=8, tlm_style="xlm")
    assert content_hash(pt._cache_key(cfg, [], [])) != content_hash(
        pt._cache_key(dataclasses.replace(cfg, tlm_style="packed"), [], []))
    info = json.loads((Path(pretrained_source(tiny_world, config=cfg, progress=False)) / pt.INFO_FILE).read_text())
    assert info["tlm"]["style"] == "xlm" and info["tlm"]["final_loss"] > 0
    assert info["tlm"]["sequences"] + info["tlm"]["dropped_pairs"] == 180  # one pair per sequence
