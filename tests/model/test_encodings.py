"""Language encodings (none, additive, attached, xlp; langsamp also in test_langsamp.py): equivalence,
gradients, alignment, saving, initialization of new languages, and world runs through the runner.

Models are tiny random RoBERTa / GPT-2 / Marian (hidden size 16) built here; no network, no GPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness import registry
from harness.language_encoding import EncodingError, load_encoded, read_pretrained
from tests.tasks.test_lm_tasks import iwslt_task, make_gpt2, make_roberta, mt_files  # noqa: F401  (fixture)
from tests.tasks.test_tasks import (
    FAST,
    _ctx,
    _ner_rows,
    _qa_rows,
    make_mlm,
    make_tokenizer,
    task_files,  # noqa: F401  (fixture)
)

ENCODINGS = ("none", "additive", "attached", "xlp", "xlp-shared", "langsamp")


def enc(name: str, **config):
    return registry.get("encoding", name).make(config or None)


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _batch(tok, texts=("Anna lives in Berlin .", "The cat sat on the mat near the door .")):
    b = tok(list(texts), padding=True, return_tensors="pt")
    return {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}


def _marian(src_vocab: int, tgt_vocab: int = 60, seed: int = 0):
    from transformers import MarianConfig, MarianMTModel

    cfg = MarianConfig(vocab_size=src_vocab, decoder_vocab_size=tgt_vocab, share_encoder_decoder_embeddings=False,
                       d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                       decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                       pad_token_id=1, eos_token_id=2, decoder_start_token_id=0, forced_eos_token_id=None,
                       bos_token_id=None, scale_embedding=True)  # fmt: skip
    torch.manual_seed(seed)
    return MarianMTModel(cfg).eval()


def test_ls_lists_the_encodings_with_descriptions(capsys):
    from harness.cli import main

    assert registry.names("encoding") == sorted(ENCODINGS)
    assert all(e.description for e in registry.entries("encoding"))
    assert main(["ls", "encodings"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ENCODINGS)


# ------------------------------------------------------------------------------ equivalence


def _llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                        pad_token_id=tok.pad_token_id)).eval()  # fmt: skip


def _bert(tok):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, pad_token_id=tok.pad_token_id)).eval()  # fmt: skip


@pytest.mark.parametrize("name", ["additive", "xlp"])
def test_neutral_init_equals_plain_encoder_and_causal_lm(tok, name):
    batch = _batch(tok)
    for model in (make_mlm(tok, dropout=0.0).eval(), _bert(tok), make_gpt2(tok).eval(), _llama(tok)):
        ref = model(**batch).logits
        e = enc(name)
        wrapped = e.wrap(model, ["near", "src"], seed=1)
        out = wrapped(**e.prepare(batch, ["near", "src"])).logits
        assert torch.equal(out, ref), f"{name} on {type(model).__name__}"
        info = wrapped.encoding_info()
        d = model.get_input_embeddings().weight.shape[1]
        assert info["parameters_added"] == 2 * (d * d if name == "xlp" else d)


@pytest.mark.parametrize("name", ["additive", "xlp"])
def test_neutral_init_equals_plain_encoder_decoder(tok, name):
    mlm = make_mlm(tok, dropout=0.0)
    marian = _marian(len(tok))
    batch = _batch(tok)
    labels = torch.tensor([[5, 6, 7, 2], [8, 9, 2, -100]])
    ref = marian(**batch, labels=labels).logits
    ref_gen = marian.generate(**batch, num_beams=2, max_new_tokens=5)
    e = enc(name)
    wrapped = e.wrap(mlm, ["near"], seed=1).to_seq2seq(marian, ["src"], decoder_start_token_id=0)
    prepared = wrapped.prepare_batch(batch, ["near"] * 2, ["src"] * 2)
    assert torch.equal(wrapped(**prepared, labels=labels).logits, ref)
    assert torch.equal(wrapped.generate(**prepared, num_beams=2, max_new_tokens=5), ref_gen)  # beams expand the ids
    assert set(wrapped.encoding_info()["sides"]) == {"encoder", "decoder"}


def test_attached_inserts_one_token_after_cls_and_decoder_start_replaced(tok):
    batch = _batch(tok)
    e = enc("attached")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["near", "src"], seed=3)
    assert wrapped.insert_at == 1 and wrapped.added_tokens == 1
    p = e.prepare(dict(batch, labels=batch["input_ids"].clone()), ["near", "src"])
    assert p["input_ids"].shape[1] == batch["input_ids"].shape[1] + 1
    assert torch.equal(p["input_ids"][:, 0], batch["input_ids"][:, 0])  # [CLS]/<s> stays first
    assert torch.equal(p["attention_mask"][:, 1], torch.ones(2, dtype=torch.long))
    assert (p["labels"][:, 1] == -100).all() and p["added_positions"][:, 1].all()
    out = wrapped(**{k: v for k, v in p.items() if k != "labels"}).logits
    assert out.shape[1] == p["input_ids"].shape[1]
    # the language token changes the outputs, differently per language
    p2 = e.prepare(batch, ["src", "near"])
    assert not torch.allclose(wrapped(**p2).logits[0], out[0])
    # encoder–decoder: target-side labels are never shifted, even as long as the source
    s2s_batch = dict(batch, labels=batch["input_ids"].clone())
    s2s = enc("attached", init="zero").wrap(make_mlm(tok), ["near"]).to_seq2seq(_marian(len(tok)), ["src"],
                                                                               decoder_start_token_id=0)  # fmt: skip
    ps = s2s.prepare_batch(s2s_batch, ["near", "near"], ["src", "src"])
    assert torch.equal(ps["labels"], s2s_batch["labels"]) and ps["input_ids"].shape[1] == batch["input_ids"].shape[1] + 1
    # causal LMs: the token goes first
    g = enc("attached").wrap(make_gpt2(tok), ["near"], seed=3)
    assert g.insert_at == 0
    # decoder side: the target language's vector replaces the decoder-start embedding
    marian = _marian(len(tok))
    s2s = wrapped.to_seq2seq(marian, ["src"], decoder_start_token_id=0, generator=torch.Generator().manual_seed(0))
    dec = s2s.tables["decoder"]
    emb = marian.get_decoder().embed_tokens
    dec._ids = torch.tensor([0])
    try:
        out_emb = emb(torch.tensor([[0, 5, 0]]))
    finally:
        dec._ids = None
    assert torch.equal(out_emb[0, 0], dec.weight[0]) and torch.equal(out_emb[0, 2], dec.weight[0])
    assert torch.equal(out_emb[0, 1], emb.weight[5])


def test_missing_language_ids_and_unknown_language_are_errors(tok):
    wrapped = enc("xlp").wrap(make_mlm(tok), ["near"], seed=1)
    batch = _batch(tok)
    with pytest.raises(EncodingError, match="without language ids"):
        wrapped(**batch)
    with pytest.raises(EncodingError, match=r"no language-encoding parameters for \['far'\]"):
        wrapped.prepare_batch(batch, ["far", "near"])
    with pytest.raises(EncodingError, match="language token"):
        with enc("attached").wrap(make_mlm(tok), ["near"], seed=1).fixed_language("near"):
            pass


# -------------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("name", ["additive", "attached", "xlp", "langsamp"])
def test_gradients_reach_language_parameters(tok, name):
    e = enc(name)
    wrapped = e.wrap(make_mlm(tok), ["near", "src"], seed=1)
    batch = _batch(tok)
    p = e.prepare(dict(batch, labels=batch["input_ids"].clone()), ["near", "near"])
    wrapped(**p).loss.backward()
    g = wrapped.tables["input"].weight.grad
    assert g is not None and g[0].abs().sum() > 0
    assert g[1].abs().sum() == 0  # "src" was not in the batch


def test_xlp_frozen_in_finetuning_unless_asked(tok):
    from transformers import AutoModelForSequenceClassification

    from tasks.loop import build_task_model

    batch = dict(_batch(tok), labels=torch.tensor([0, 2]))
    for train, name in ((False, "xlp"), (True, "xlp"), (True, "additive")):
        e = enc(name, **({"train_in_finetuning": train} if name == "xlp" else {}))
        src = e.wrap(make_mlm(tok), ["near"], seed=1)
        model, info = build_task_model(src, AutoModelForSequenceClassification, seed=1, num_labels=3)
        assert info["encoding"]["sides"]["input"]["trainable"] is train
        model(**e.prepare(batch, ["near", "near"])).loss.backward()
        g = model.tables["input"].weight.grad
        assert (g is None) is (not train), (name, train)
        assert model.model.get_input_embeddings().weight.grad is not None
        assert src.tables["input"].weight.grad is None  # the task model holds a copy


# ------------------------------------------------------------------------ attached alignment


class _Oracle(torch.nn.Module):
    """Predicts the gold answer positions / tags it finds in the (prepared) batch."""

    def __init__(self, n_labels: int) -> None:
        super().__init__()
        self.n_labels = n_labels
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, labels=None, start_positions=None, end_positions=None, **kw):
        from types import SimpleNamespace

        n, length = input_ids.shape
        if start_positions is not None:
            s = torch.nn.functional.one_hot(start_positions, length).float()
            e = torch.nn.functional.one_hot(end_positions, length).float()
            return SimpleNamespace(start_logits=s, end_logits=e)
        return SimpleNamespace(logits=torch.nn.functional.one_hot(labels.clamp(min=0), self.n_labels).float())


def test_attached_keeps_ner_first_subword_labels_aligned(tok):
    import datasets

    from tasks.data import WIKIANN_LABELS, language_collate
    from tasks.loop import pad_collate
    from tasks.ner import NerConfig, encode_words, entity_scores

    ds = datasets.Dataset.from_list(_ner_rows())
    wrapped = enc("attached").wrap(make_mlm(tok), ["near"], seed=1)
    feats, wids = encode_words(tok, ds, 64)
    collate = language_collate(pad_collate(tok.pad_token_id), wrapped, "near")
    batch = collate(feats[:2])
    plain = pad_collate(tok.pad_token_id)(feats[:2])
    keep = ~batch["added_positions"]
    assert torch.equal(batch["labels"][keep].view(2, -1), plain["labels"])
    assert (batch["labels"][batch["added_positions"]] == -100).all()
    names = list(WIKIANN_LABELS)
    scores, truncated = entity_scores(_Oracle(len(names)), feats, wids, list(ds["ner_tags"]), names, NerConfig(),
                                      collate, "cpu", False, "t")  # fmt: skip
    assert scores["f1"] == 1.0 and truncated == 0


def test_attached_keeps_qa_answer_offsets_aligned(tok):
    import datasets

    from tasks.data import language_collate
    from tasks.loop import pad_collate
    from tasks.qa import Qa, QaConfig, encode_eval, encode_train

    ds = datasets.Dataset.from_list(_qa_rows())
    cfg = QaConfig(max_length=64, doc_stride=16)
    wrapped = enc("attached").wrap(make_mlm(tok), ["near"], seed=1)
    train = encode_train(tok, ds, cfg)
    collate = language_collate(pad_collate(tok.pad_token_id), wrapped, "near")
    batch = collate(train)
    plain = pad_collate(tok.pad_token_id)(train)
    rows = torch.arange(len(train))
    # the shifted positions point at the same tokens
    assert torch.equal(batch["input_ids"][rows, batch["start_positions"]], plain["input_ids"][rows, plain["start_positions"]])
    assert torch.equal(batch["input_ids"][rows, batch["end_positions"]], plain["input_ids"][rows, plain["end_positions"]])
    assert (batch["start_positions"] == plain["start_positions"] + 1).all()
    # evaluation: logits at the prepared gold positions give back the answer text through the offsets
    feats, example_index, offsets = encode_eval(tok, ds, cfg)
    with_gold = [dict(f, start_positions=t["start_positions"], end_positions=t["end_positions"])
                 for f, t in zip(feats, train)]  # fmt: skip
    scores = Qa(cfg)._scores(_Oracle(0), ds, (with_gold, example_index, offsets), collate, "cpu", False, "t")
    assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0


# --------------------------------------------------------------------- saving and folding


@pytest.mark.parametrize("name", ["additive", "attached", "xlp"])
def test_save_load_round_trip_keeps_the_encoding(tok, tmp_path, name):
    e = enc(name, init="random")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["near", "src"], seed=4)
    p = e.prepare(_batch(tok), ["near", "src"])
    ref = wrapped(**p).logits
    wrapped.save_pretrained(tmp_path)
    assert (tmp_path / "language_encoding.json").is_file()
    loaded = load_encoded(tmp_path).eval()
    assert loaded.encoding == name and loaded.languages == ["near", "src"] and loaded.insert_at == wrapped.insert_at
    assert torch.equal(loaded(**p).logits, ref)
    # a later trial on this source keeps the languages it has and initializes a new one
    again = enc(name, init="copy:src").wrap(make_mlm(tok), ["far"], seed=9, pretrained=read_pretrained(tmp_path))
    assert again.languages == ["near", "src", "far"]
    w = again.tables["input"].weight
    assert torch.equal(w[2], w[1]) and torch.equal(w[0], wrapped.tables["input"].weight[0])
    with pytest.raises(EncodingError, match="pretrained with the"):
        enc("xlp" if name != "xlp" else "additive").wrap(make_mlm(tok), ["far"], pretrained=read_pretrained(tmp_path))
    with pytest.raises(ValueError, match="pretrained with"):
        enc("none").wrap(make_mlm(tok), ["far"], pretrained=read_pretrained(tmp_path))


def test_deepcopy_rebinds_the_hooks_to_the_copied_parameters(tok):
    import copy

    e = enc("xlp")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["near"], seed=1)
    p = e.prepare(_batch(tok), ["near", "near"])
    ref = wrapped(**p).logits
    clone = copy.deepcopy(wrapped)
    with torch.no_grad():
        clone.tables["input"].weight.mul_(2.0)
    assert torch.equal(wrapped(**p).logits, ref) and not torch.allclose(clone(**p).logits, ref)


@pytest.mark.parametrize("name", ["additive", "xlp"])
def test_fold_gives_a_plain_model_with_the_same_outputs(tok, tmp_path, name):
    from transformers import GPT2LMHeadModel, RobertaForMaskedLM

    for model, cls in ((make_mlm(tok, dropout=0.0).eval(), RobertaForMaskedLM), (make_gpt2(tok).eval(), GPT2LMHeadModel)):
        e = enc(name, init="random")
        wrapped = e.wrap(model, ["near", "src"], seed=2)
        batch = _batch(tok)
        ref = wrapped(**e.prepare(batch, ["src", "src"])).logits
        folded = wrapped.fold("src")
        assert isinstance(folded, cls)
        torch.testing.assert_close(folded(**batch).logits, ref, rtol=1e-5, atol=1e-5)
        out_dir = tmp_path / f"{name}-{cls.__name__}"
        folded.save_pretrained(out_dir)
        reloaded = cls.from_pretrained(out_dir).eval()
        torch.testing.assert_close(reloaded(**batch).logits, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(EncodingError, match="folded"):
        enc("attached").wrap(make_mlm(tok), ["near"], seed=1).fold("near")


# --------------------------------------------------------------- initialization of languages


def test_new_language_initialization_options(tok):
    from harness.language_encoding import init_table

    existing = {"src": torch.full((4,), 2.0), "near": torch.full((4,), 4.0)}
    t, info = init_table("additive", ["src", "near", "far"], 4, "mean", existing=existing)
    assert torch.equal(t[2], torch.full((4,), 3.0)) and info == {"kept": ["src", "near"], "initialized": {"far": "mean"}}
    t, _ = init_table("additive", ["far"], 4, "copy:near", existing=existing)
    assert torch.equal(t[0], existing["near"])
    t, _ = init_table("xlp", ["far"], 3, "identity")
    assert torch.equal(t[0], torch.eye(3))
    t, _ = init_table("attached", ["far"], 3, "zero")
    assert torch.equal(t[0], torch.zeros(3))
    with pytest.raises(EncodingError, match="has languages"):
        init_table("additive", ["far"], 4, "copy:xx", existing=existing)
    with pytest.raises(EncodingError, match="plain model"):
        init_table("additive", ["far"], 4, "mean")
    with pytest.raises(EncodingError, match="trial seed"):
        init_table("xlp", ["far"], 4, "random")
    with pytest.raises(ValueError, match="init must be"):
        enc("xlp", init="copy")
    # random init: a function of the trial seed only
    torch.manual_seed(0)
    a = enc("xlp", init="random").wrap(make_mlm(tok), ["near"], seed=5).tables["input"].weight
    torch.manual_seed(99)
    b = enc("xlp", init="random").wrap(make_mlm(tok), ["near"], seed=5).tables["input"].weight
    c = enc("xlp", init="random").wrap(make_mlm(tok), ["near"], seed=6).tables["input"].weight
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert abs(float(a.detach().std()) - 16**-0.5) < 0.05


# -------------------------------------------------------------------- tasks with encodings


@pytest.mark.parametrize("name", ["additive", "attached", "xlp", "langsamp"])
def test_xnli_qa_ner_mlm_run_with_each_encoding(tok, task_files, name):  # noqa: F811
    from harness.registry import build_config
    from tasks.mlm_at_init import MlmAtInit, MlmAtInitConfig
    from tasks.ner import Ner, NerConfig
    from tasks.qa import Qa, QaConfig
    from tasks.xnli import Xnli, XnliConfig

    e = enc(name)
    model = e.wrap(make_mlm(tok), ["near", "far"], seed=1)
    ctx = _ctx(model, tok, ("near", "far"), encoding=e, source_language="near")
    files = lambda t: str(task_files / "{lang}" / t / "{split}.jsonl")  # noqa: E731
    r = Xnli(build_config(XnliConfig, {**FAST, "setting": "cross-lingual", "files": files("xnli")})).run(ctx)
    assert set(r.metrics) == {"near", "far"}
    ctx = _ctx(model, tok, ("near",), encoding=e)
    r = Qa(build_config(QaConfig, {**FAST, "doc_stride": 16, "files": files("qa")})).run(ctx)
    assert 0 <= r.metrics["near"]["f1"] <= 100 and r.info["finetune"]["near"]["head"]["encoding"]["name"] == name
    r = Ner(build_config(NerConfig, {**FAST, "files": files("ner")})).run(ctx)
    assert 0 <= r.metrics["near"]["f1"] <= 1
    text = task_files / "near.txt"
    text.write_text("Anna lives in Berlin .\nThe cat sat on the mat .\n", encoding="utf-8")
    r = MlmAtInit(MlmAtInitConfig(eval_file=str(text))).run(ctx)
    assert r.metrics["near"]["loss"] > 0


@pytest.mark.parametrize("name", ["additive", "attached", "xlp"])
def test_lapt_and_perplexity_with_each_encoding(tok, tmp_path, name):
    from harness.registry import get
    from tasks.perplexity import Perplexity, PerplexityConfig, lm_eval_perplexity

    text = tmp_path / "near.txt"
    text.write_text("\n".join(["Anna lives in Berlin and works for Siemens .", "The cat sat on the mat near the door ."] * 6),
                    encoding="utf-8")  # fmt: skip
    e = enc(name)
    model = e.wrap(make_gpt2(tok), ["near"], seed=1)
    before = model.tables["input"].weight.detach().clone()
    lapt = get("stage", "lapt").make({"schedule": "custom", "learning_rate": 1e-2, "lr_schedule": "constant",
                                      "batch_size": 2, "max_length": 8, "max_steps": 3, "train_file": str(text)})  # fmt: skip
    ctx = _ctx(model, tok, ("near",), encoding=e)
    model, res = lapt.apply(ctx, {}, cache_key={"test": name}, cache_root=tmp_path / "cache")
    assert not torch.equal(model.tables["input"].weight.detach(), before)  # trained in LAPT (XLP included)
    again, res2 = lapt.apply(_ctx(e.wrap(make_gpt2(tok), ["near"], seed=1), tok, ("near",), encoding=e), {},
                             cache_key={"test": name}, cache_root=tmp_path / "cache")  # fmt: skip
    assert res2.info["cache"]["hit"] and getattr(again, "encoding", None) == name
    assert torch.equal(again.tables["input"].weight, model.tables["input"].weight)
    ctx = _ctx(model, tok, ("near",), encoding=e)
    r = Perplexity(PerplexityConfig(eval_file=str(text), max_length=16)).run(ctx)
    m = r.metrics["near"]
    assert m["token_perplexity"] > 1 and m["bits_per_byte"] > 0
    assert r.info["lm_eval"]["near"]["method"] == ("own-loop" if name == "attached" else "lm-eval")
    if name != "attached":  # lm-eval on the wrapped model == lm-eval on the folded plain model
        folded, _ = lm_eval_perplexity(model.fold("near"), tok, text.read_text().splitlines(), max_length=16)
        assert folded["nll"] == pytest.approx(r.info["lm_eval"]["near"]["nll"], rel=1e-5)


def test_own_rolling_loop_reproduces_lm_eval_on_a_plain_model(tok):
    from tasks.perplexity import lm_eval_perplexity, own_rolling_perplexity

    docs = ["Anna lives in Berlin and works for Siemens and the river flows to the sea .", "The cat sat ."]
    model = make_gpt2(tok).eval()
    theirs, _ = lm_eval_perplexity(model, tok, docs, max_length=8, batch_size=3)
    ours, info = own_rolling_perplexity(model, tok, docs, max_length=8, batch_size=3)
    assert info["windows"] > len(docs)  # the long document is cut into several windows
    for k in ("tokens", "bytes", "words"):
        assert ours[k] == theirs[k]
    for k in ("nll", "token_perplexity", "bits_per_byte", "word_perplexity", "byte_perplexity"):
        assert ours[k] == pytest.approx(theirs[k], rel=1e-5), k


@pytest.mark.parametrize("name", ["additive", "attached", "xlp"])
def test_iwslt_runs_with_each_encoding(mt_files, tmp_path, name):  # noqa: F811
    from tests.tasks.test_lm_tasks import SENTENCES, _cipher, ctx_for
    from tests.tasks.test_lm_tasks import make_tokenizer as lm_tokenizer

    src_tok = lm_tokenizer([_cipher(s) for s in SENTENCES])
    e = enc(name)
    mlm = e.wrap(make_roberta(src_tok), ["near", "src"], seed=1)
    res = iwslt_task(mt_files, epochs=1).run(ctx_for(mlm, src_tok, work_dir=tmp_path, source_language="src", encoding=e))
    assert 0.0 <= res.metrics["near"]["bleu"] <= 100.0
    info = res.info["model"]["near"]["encoding"]
    assert info["name"] == name and info["sides"]["decoder"]["languages"] == ["src"]
    assert info["sides"]["encoder"]["languages"] == ["near", "src"]


# ------------------------------------------------------------------------------ world runs


_WORLD_EXPERIMENT = """
name: enc-world
world: {{size: tiny, seed: 0}}
source: {{model: "world:mlm", pretrain: {pretrain}}}
targets:
  - {{language: near, tokenizer: {{algorithm: unigram, vocab_size: 300}}}}
methods: [overlap]
encodings: [none, additive, attached, xlp]
stages:
  - {{name: lapt, config: {{schedule: custom, learning_rate: 1.0e-3, lr_schedule: constant, max_steps: 2, batch_size: 4, max_length: 32}}}}
tasks:
  - {{name: xnli, config: {{setting: cross-lingual, epochs: 1, batch_size: 4, max_length: 64, max_train_examples: 8, max_eval_examples: 8}}}}
  - {{name: iwslt-bleu, config: {{size: tiny, encoder_layers: 1, decoder_layers: 1, ffn_dim: 32, epochs: 1, batch_size: 4,
       warmup_steps: 1, num_beams: 2, max_target_length: 16, target_vocab_size: 80, max_train_examples: 8, max_eval_examples: 4}}}}
seeds: [1]
"""


@pytest.mark.slow
def test_world_run_of_each_encoding_on_xnli_and_iwslt(tmp_path, tiny_source, tiny_pretrain_overrides):
    from harness.run import records
    from harness.run.config import load_experiment
    from harness.run.experiment import run_experiment

    path = tmp_path / "enc.yaml"
    path.write_text(_WORLD_EXPERIMENT.format(pretrain=json.dumps(tiny_pretrain_overrides)), encoding="utf-8")
    summary = run_experiment(load_experiment(path), tmp_path / "runs", progress=False)
    recs = list(records.iter_records(tmp_path / "runs" / "enc-world"))
    assert summary.failed == 0, [r["error"]["message"] for r in recs if r["status"] != "ok"]
    assert len(recs) == 8
    for r in recs:
        name = r["config"]["encoding"]["name"]
        if name == "none":
            assert r["encoding"] is None
            continue
        assert r["encoding"]["name"] == name and r["encoding"]["sides"]["input"]["languages"] == ["near", "src"]
        d = 16
        assert r["encoding"]["parameters_added"] == 2 * (d * d if name == "xlp" else d)
        assert r["stages"]["lapt"]["metrics"]
        if r["config"]["task"]["name"] == "xnli":
            assert set(r["metrics"]) == {"near"} and 0 <= r["metrics"]["near"]["accuracy"] <= 1
        else:
            assert 0 <= r["metrics"]["near"]["bleu"] <= 100
            assert r["task_info"]["model"]["near"]["encoding"]["sides"]["decoder"]["languages"] == ["src"]

