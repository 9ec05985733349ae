"""Contract tests, parametrized over every registered method and task: they apply automatically
the moment something registers."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from harness import registry, seeding
from harness.model import surgery
from harness.protocols import COPIED, FALLBACK, SPECIAL, TransferInputs

# Small, fast settings for methods that train auxiliary vectors; everything else uses defaults.
FAST = {
    "focus": {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_bucket": 540_672},
    "wechsel": {"dim": 16, "epochs": 1, "min_count": 1, "bucket": 540_672},
    "tiktotok": {"min_count": 1, "aligner": "ibm1"},
    "omp": {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_bucket": 540_672},
    "ofa": {"dim": 16, "epochs": 5, "min_count": 1},
    "hypernet": {"steps": 30, "hidden": 32, "heads": 2},
}
METHODS = registry.names("method")


@pytest.fixture(scope="module")
def transfer(tiny_world, tiny_source, tiny_helper, tmp_path_factory):
    from transformers import AutoModelForMaskedLM

    from harness.tokenizers import load_tokenizer, train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    src_tok = load_tokenizer(str(tiny_source))
    tgt_tok = train_tokenizer([w.text("near", "train")], "unigram", 300, cache_dir=tmp_path_factory.mktemp("tok"))
    model = AutoModelForMaskedLM.from_pretrained(tiny_source)
    return {
        "world": w, "src_tok": src_tok, "tgt_tok": tgt_tok, "model_dir": tiny_source,
        "emb": model.get_input_embeddings().weight.detach().float().clone(),
        "cache": tmp_path_factory.mktemp("cache"), "helper": tiny_helper,
    }


def _inputs(t) -> TransferInputs:
    w = t["world"]
    return TransferInputs(
        source_tokenizer=t["src_tok"], target_tokenizer=t["tgt_tok"], source_embeddings=t["emb"],
        source_language="src", target_language="near", target_corpus=w.text("near", "train"),
        source_corpus=w.text("src", "train"), parallel_corpus=w.parallel("near"), dictionary=w.dictionary("near"),
        helper_model=t["helper"], cache_dir=t["cache"],
    )


def _run(name: str, t, seed: int = 1):
    method = registry.get("method", name).make(FAST.get(name, {}))
    return method.initialize(_inputs(t), seeding.numpy_rng(seed, "init", name))


@pytest.mark.parametrize("name", METHODS)
def test_method_contract(name, transfer):
    from harness.vocab import compute_overlap

    before = transfer["emb"].clone()
    res = _run(name, transfer)
    # the loader hands methods the model's own embedding storage (no 2 GB copy at XLM-R size): a method
    # that wrote into source_embeddings would change the rows install() reads
    assert torch.equal(transfer["emb"], before), f"{name} modified inputs.source_embeddings in place"
    m = res.mapping
    n_t = len(res.tokenizer)
    assert m.n_target == n_t and m.n_source == transfer["emb"].shape[0]
    counts = m.counts()
    assert sum(counts.values()) == n_t
    assert np.all(m.weights[np.repeat(m.provenance, np.diff(m.indptr)) == COPIED] == 1.0)
    # install into the real source model (tied) and into an untied copy: finite, right shapes
    from transformers import AutoModelForMaskedLM

    for untied in (False, True):
        model = AutoModelForMaskedLM.from_pretrained(transfer["model_dir"], tie_word_embeddings=not untied)
        surgery.install(model, res, seeding.torch_generator(1, "test"))
        W = model.get_input_embeddings().weight.detach()
        assert W.shape == (n_t, transfer["emb"].shape[1]) and W.dtype == transfer["emb"].dtype
        assert torch.isfinite(W).all()
        out = model.get_output_embeddings()
        assert out.weight.shape[0] == n_t and (out.weight is model.get_input_embeddings().weight) == (not untied)
        logits = model(input_ids=torch.tensor([[0, 5, 6, 2]])).logits
        assert logits.shape[-1] == n_t and torch.isfinite(logits).all()
    if res.tokenizer is transfer["src_tok"]:
        return  # ``original``: identity over the source vocabulary
    # overlap rows that a method copies are copied bit-exactly from the right source row
    ov = compute_overlap(transfer["src_tok"], res.tokenizer)
    model = AutoModelForMaskedLM.from_pretrained(transfer["model_dir"])
    surgery.install(model, res, seeding.torch_generator(1, "test"))
    W = model.get_input_embeddings().weight.detach()
    for t, _s in ov.exact:
        if m.provenance[t] == COPIED:
            src_ids, _ = m.row(int(t))
            assert torch.equal(W[t], transfer["emb"][src_ids[0]])
    # special tokens copied by role (from-scratch deliberately uses no pretrained row at all)
    if not res.directives.get("reinitialize_body"):
        for t, s in ov.specials:
            assert m.provenance[t] == SPECIAL
            assert torch.equal(W[t], transfer["emb"][s])


@pytest.mark.parametrize("name", METHODS)
def test_method_deterministic_under_disturbed_global_rng(name, transfer):
    a = _run(name, transfer, seed=3)
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    b = _run(name, transfer, seed=3)
    for field in ("indptr", "indices", "weights", "provenance"):
        assert np.array_equal(getattr(a.mapping, field), getattr(b.mapping, field)), field
    if np.any(a.mapping.provenance == FALLBACK):
        ga, gb = seeding.torch_generator(3, "x"), seeding.torch_generator(3, "x")
        assert torch.equal(surgery.materialize(a.mapping, transfer["emb"], ga), surgery.materialize(b.mapping, transfer["emb"], gb))


@pytest.mark.parametrize("name", registry.names("task"))
def test_task_registered_with_config_and_kind(name):
    entry = registry.get("task", name)
    assert getattr(entry.cls, "model_kind", None) in ("mlm", "clm", "seq2seq", "encoder")
    cfg = entry.config_cls()
    assert entry.make(cfg) is not None
    if "max_eval_examples" in {f for f in cfg.__dataclass_fields__}:
        registry.build_config(entry.config_cls, {"max_eval_examples": 4})
