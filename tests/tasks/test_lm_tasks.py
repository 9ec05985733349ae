"""Tests of the language-model tasks and stage: ``perplexity``, ``lapt`` (with TransInner) and ``iwslt-bleu``.

Everything is built here in seconds: a byte-level BPE tokenizer trained on a few sentences, tiny
random RoBERTa / GPT-2 models (hidden size 16) and 16-pair translation files. No network, no GPU.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import tasks.iwslt  # noqa: F401  (registered by tasks/__init__.py too; explicit so this file stands alone)
import tasks.lapt  # noqa: F401
import tasks.perplexity  # noqa: F401
from harness.protocols import TaskContext
from harness.registry import get
from tests.api.test_examples import assert_examples_match

SENTENCES = [
    "the cat sat on the mat near the door .",
    "a dog ran across the green park in the morning .",
    "the river flows from the mountains to the sea .",
    "birds fly over the hills and far away .",
    "the children played football after school .",
    "rain fell on the city for three days .",
    "lena bought bread at the market on monday .",
    "paul visited paris with his friend maria .",
    "the old man walked slowly to the station .",
    "a small boat crossed the lake at night .",
    "the teacher read a long story to the class .",
    "snow covered the roofs of the village .",
]


def make_tokenizer(texts: list[str] = SENTENCES, vocab_size: int = 300):
    """Byte-level BPE with RoBERTa specials (``<s> X </s>``), trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(list(texts) * 3, trainer)
    tk.post_processor = processors.RobertaProcessing(("</s>", tk.token_to_id("</s>")), ("<s>", tk.token_to_id("<s>")))
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
    )  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def make_gpt2(tok, seed: int = 0, n_positions: int = 64):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                     pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    return GPT2LMHeadModel(cfg).eval()


def make_roberta(tok, seed: int = 0):
    from transformers import RobertaConfig, RobertaForMaskedLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(seed)
    cfg = RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=80, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id, type_vocab_size=1)  # fmt: skip
    return RobertaForMaskedLM(cfg).eval()


def ctx_for(model, tok, **kw) -> TaskContext:
    return TaskContext(model=model, tokenizer=tok, languages=["near"], seed=kw.pop("seed", 1), progress=False, **kw)


# ---------------------------------------------------------------------------------- perplexity


def manual_nll(model, tok, docs: list[str]) -> tuple[float, int]:
    """Sum of token NLLs by a direct forward pass: each document's tokens given BOS + the prefix."""
    total, n = 0.0, 0
    with torch.no_grad():
        for doc in docs:
            ids = tok(doc, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([[tok.bos_token_id] + ids[:-1]])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            total -= float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum())
            n += len(ids)
    return total, n


def test_perplexity_matches_manual_computation(tok, tmp_path):
    from tasks.perplexity import PerplexityConfig

    docs = SENTENCES[:5]
    (tmp_path / "near.txt").write_text("\n".join(docs) + "\n\n", encoding="utf-8")
    model = make_gpt2(tok)
    task = get("task", "perplexity").make({"eval_file": str(tmp_path / "{lang}.txt"), "batch_size": 2})
    assert isinstance(task.config, PerplexityConfig) and task.model_kind == "clm"
    state = torch.random.get_rng_state()
    res = task.run(ctx_for(model, tok, work_dir=tmp_path / "work"))
    assert torch.equal(torch.random.get_rng_state(), state)  # lm-eval's global seeding is undone

    nll, n_tokens = manual_nll(model, tok, docs)
    n_bytes = sum(len(d.encode()) for d in docs)
    m, c = res.metrics["near"], res.counts["near"]
    assert c["tokens"] == n_tokens and c["documents"] == 5 and c["bytes"] == n_bytes
    assert m["token_perplexity"] == pytest.approx(math.exp(nll / n_tokens), rel=1e-4)
    assert m["bits_per_byte"] == pytest.approx(nll / (n_bytes * math.log(2)), rel=1e-4)
    assert m["byte_perplexity"] == pytest.approx(2 ** m["bits_per_byte"], rel=1e-6)
    words = sum(len(d.split()) for d in docs)
    assert m["word_perplexity"] == pytest.approx(math.exp(nll / words), rel=1e-4)
    assert res.info["lm_eval_version"]
    assert_examples_match(res, rel=1e-6)  # byte and word perplexity are lm-eval's own aggregates
    assert not list((tmp_path / "work").iterdir())  # the temporary task directory is removed


def test_perplexity_rolling_windows_keep_the_token_count(tok):
    from tasks.perplexity import lm_eval_perplexity

    model = make_gpt2(tok, n_positions=64)
    full, _ = lm_eval_perplexity(model, tok, SENTENCES[:3], batch_size=4)
    short, info = lm_eval_perplexity(model, tok, SENTENCES[:3], batch_size=4, max_length=4)
    assert info["window"] == 4
    assert short["tokens"] == full["tokens"]  # every token is still predicted exactly once
    assert math.isfinite(short["nll"]) and short["nll"] != pytest.approx(full["nll"], rel=1e-6)


# ---------------------------------------------------------------------------------------- lapt


@pytest.fixture(scope="module")
def lapt_text(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lapt")
    (d / "near.txt").write_text("\n".join(SENTENCES * 3) + "\n", encoding="utf-8")
    return d / "{lang}.txt"


def lapt_stage(lapt_text, **overrides):
    values = dict(schedule="custom", learning_rate=5e-3, lr_schedule="constant", warmup_ratio=0.1, batch_size=4,
                  max_length=16, max_steps=24, log_every=4, train_file=str(lapt_text))  # fmt: skip
    values.update(overrides)
    return get("stage", "lapt").make(values)


def test_lapt_reduces_mlm_loss_and_is_deterministic(tok, lapt_text):
    stage = lapt_stage(lapt_text)
    base = make_roberta(tok)
    m1, r1 = stage.apply(ctx_for(copy.deepcopy(base), tok), {})
    curve = r1.curves["loss"]
    assert [s for s, _ in curve] == [4, 8, 12, 16, 20, 24]
    assert np.mean([v for _, v in curve[-2:]]) < curve[0][1]
    assert r1.info["objective"] == "mlm" and r1.info["steps"] == 24 and not m1.training

    # Disturb every global RNG: the result must not move.
    torch.manual_seed(12345)
    torch.rand(7)
    random.seed(99)
    np.random.seed(3)
    m2, r2 = stage.apply(ctx_for(copy.deepcopy(base), tok), {})
    assert r2.curves["loss"] == curve
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
    _, r3 = stage.apply(ctx_for(copy.deepcopy(base), tok, seed=2), {})
    assert r3.curves["loss"] != curve  # another trial seed: other data order and masks


def test_lapt_presets_resolve_paper_values():
    from tasks.lapt import LaptConfig

    focus = LaptConfig(schedule="focus", max_steps=None).resolved("mlm")
    assert (focus["lr_schedule"], focus["batch_size"], focus["max_length"], focus["max_steps"]) == (
        "constant",
        128,
        256,
        390_625,
    )
    wechsel = LaptConfig(schedule="wechsel").resolved("clm")
    assert (wechsel["learning_rate"], wechsel["lr_schedule"], wechsel["weight_decay"], wechsel["adam_beta2"]) == (
        5e-4,
        "linear",
        0.01,
        0.98,
    )
    assert LaptConfig(schedule="wechsel").resolved("mlm")["learning_rate"] == 1e-4
    with pytest.raises(ValueError, match="custom"):
        LaptConfig(schedule="custom")


def _split_params(model):
    from tasks.lapt import lexical_parameters

    lexical = {id(p) for p in lexical_parameters(model).values()}
    body = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) not in lexical}
    emb = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) in lexical}
    return body, emb


@pytest.mark.parametrize(
    ("kind", "schedule", "phases"),
    [("mlm", "fraction", [2, 6]), ("mlm", "extra", [2, 8]), ("clm", "fraction", [2, 6]), ("clm", "extra", [2, 8])],
)
def test_transinner_freezes_the_body_in_phase_one(tok, lapt_text, monkeypatch, kind, schedule, phases):
    from tasks.lapt import Lapt

    model = make_roberta(tok) if kind == "mlm" else make_gpt2(tok)
    body0, emb0 = _split_params(model)
    after_phase1: dict = {}
    original = Lapt._embeddings_phase

    def spy(self, model, *args, **kwargs):
        out = original(self, model, *args, **kwargs)
        after_phase1["body"], after_phase1["emb"] = _split_params(model)
        after_phase1["requires_grad"] = all(p.requires_grad for p in model.parameters())
        return out

    monkeypatch.setattr(Lapt, "_embeddings_phase", spy)
    # 'full': warm up over the whole embeddings-only phase (the wechsel preset's choice); 'ratio': 10% of it.
    warmup = "full" if schedule == "fraction" else "ratio"
    stage = lapt_stage(lapt_text, max_steps=8, log_every=1, embeddings_phase_warmup=warmup)
    model, res = stage.apply(
        ctx_for(model, tok), {"embeddings_only_fraction": 0.25, "embeddings_only_schedule": schedule}
    )

    assert [p["steps"] for p in res.info["phases"]] == phases
    assert res.info["steps"] == sum(phases) and res.info["freeze_verified"] is True
    assert [s for s, _ in res.curves["loss"]] == list(range(1, sum(phases) + 1))
    assert after_phase1["requires_grad"]  # flags restored for phase 2
    for name, value in body0.items():  # phase 1 moved no body parameter …
        assert torch.equal(after_phase1["body"][name], value), name
    assert any(not torch.equal(after_phase1["emb"][n], v) for n, v in emb0.items())  # … but the embeddings
    body2, _ = _split_params(model)
    assert any(not torch.equal(body2[n], v) for n, v in body0.items())  # phase 2 trains everything
    p1 = res.info["phases"][0]
    assert (p1["lr_schedule"], p1["warmup_steps"]) == (("constant", 2) if warmup == "full" else ("constant", 1))
    assert p1["trainable_parameters"] < res.info["phases"][1]["trainable_parameters"]


def test_lapt_cache_reuses_the_adapted_model(tok, lapt_text, tmp_path):
    from tasks.lapt import lapt_cache_key

    stage = lapt_stage(lapt_text, max_steps=4)
    key = {"source": "tiny", "method": "random", "seed": 1}
    m1, r1 = stage.apply(ctx_for(make_roberta(tok), tok), {}, cache_key=key, cache_root=tmp_path)
    m2, r2 = stage.apply(ctx_for(make_roberta(tok), tok), {}, cache_key=key, cache_root=tmp_path)
    assert r1.info["cache"]["hit"] is False and r2.info["cache"]["hit"] is True
    assert r1.info["cache"]["key"] == r2.info["cache"]["key"]
    assert r2.curves["loss"] == r1.curves["loss"]
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
    assert lapt_cache_key(key, stage.config) != lapt_cache_key(
        key, stage.config, directives={"embeddings_only_fraction": 0.1}
    )


# ------------------------------------------------------------------------------------- iwslt


def _cipher(sentence: str) -> str:
    """A deterministic 'foreign language': reversed words with a suffix."""
    return " ".join(w + "o" for w in reversed(sentence.split()))


@pytest.fixture(scope="module")
def mt_files(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("mt")
    english = SENTENCES + [s.replace("the", "a") for s in SENTENCES]
    splits = {"train": english[:16], "dev": english[16:20], "test": english[20:24]}
    for split, rows in splits.items():
        with (d / f"near.{split}.jsonl").open("w", encoding="utf-8") as f:
            for en in rows:
                f.write(json.dumps({"translation": {"near": _cipher(en), "src": en}}) + "\n")
    return str(d / "{lang}.{split}.jsonl")


def iwslt_task(mt_files: str, **overrides):
    values = dict(files=mt_files, size="tiny", encoder_layers=1, decoder_layers=1, attention_heads=2, ffn_dim=32, epochs=2,
                  batch_size=8, warmup_steps=2, learning_rate=1e-3, num_beams=2, max_source_length=32, max_target_length=24,
                  target_tokenizer_algorithm="wordpiece", target_vocab_size=120, eval_batch_size=4)  # fmt: skip
    values.update(overrides)
    return get("task", "iwslt-bleu").make(values)


def test_iwslt_bleu_end_to_end(mt_files, tmp_path):
    src_tok = make_tokenizer([_cipher(s) for s in SENTENCES])
    mlm = make_roberta(src_tok)
    task = iwslt_task(mt_files)
    assert task.model_kind == "mlm"
    res = task.run(ctx_for(mlm, src_tok, work_dir=tmp_path, source_language="src"))
    bleu = res.metrics["near"]["bleu"]
    assert 0.0 <= bleu <= 100.0
    assert res.info["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert res.counts["near"] == {"train": 16, "dev": 4, "test": 4}
    assert_examples_match(res)
    info = res.info["model"]["near"]
    assert info["source_embeddings_copied"] and info["d_model"] == 16 and not info["embedding_projection"]
    assert res.info["finetune"]["near"]["steps"] == 4 and len(res.info["finetune"]["near"]["dev_history"]) == 2
    assert res.curves["near/train_loss"]


def test_iwslt_encoder_embeddings_come_from_the_initialized_model(mt_files):
    from tasks.iwslt import IwsltConfig, build_translation_model

    src_tok = make_tokenizer([_cipher(s) for s in SENTENCES])
    tgt_tok = make_tokenizer(SENTENCES)
    mlm = make_roberta(src_tok)
    cfg = iwslt_task(mt_files).config
    model, info = build_translation_model(src_tok, tgt_tok, cfg, seed=1, source_model=mlm)
    assert torch.equal(model.get_encoder().embed_tokens.weight, mlm.get_input_embeddings().weight)
    assert model.get_encoder().embed_tokens.padding_idx == src_tok.pad_token_id
    with pytest.raises(ValueError, match="embedding_projection"):
        build_translation_model(src_tok, tgt_tok, IwsltConfig(size="tiny", d_model=32), seed=1, source_model=mlm)
    model, info = build_translation_model(src_tok, tgt_tok, IwsltConfig(size="tiny", d_model=32, embedding_projection=True),
                                          seed=1, source_model=mlm)  # fmt: skip
    assert info["embedding_projection"] and info["d_model"] == 32
    batch = src_tok(["a b"], return_tensors="pt")
    out = model(**batch, labels=torch.tensor([[tgt_tok.eos_token_id]]))
    assert torch.isfinite(out.loss)
