"""Tests of the forgetting measurement every LAPT stage records (:mod:`tasks.forgetting`).

Tiny RoBERTa / GPT-2 models and a byte-level BPE tokenizer from ``test_lm_tasks``; seconds on a CPU.
"""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch

from harness.protocols import TaskContext
from tests.tasks.test_lm_tasks import SENTENCES, lapt_stage, make_gpt2, make_roberta, make_tokenizer

SOURCE = [
    "the market opens early on saturday .",
    "a tall tree stood behind the school .",
    "my brother reads the paper every morning .",
    "the train left the city before noon .",
    "she painted the door of the house blue .",
    "the farmer sold apples near the bridge .",
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("forgetting")
    (d / "near.txt").write_text("\n".join(SENTENCES * 3) + "\n", encoding="utf-8")
    (d / "src.txt").write_text("\n".join(SOURCE) + "\n", encoding="utf-8")
    return d


def ctx(model, tok, **kw) -> TaskContext:
    return TaskContext(model=model, tokenizer=tok, languages=["near"], seed=kw.pop("seed", 1), progress=False, **kw)


def stage(files, **kw):
    return lapt_stage(files / "{lang}.txt", **{"max_steps": 8, "forgetting_file": str(files / "src.txt"), **kw})


def test_mlm_forgetting_is_after_minus_before_on_the_same_masks(tok, files, tmp_path):
    from tasks.forgetting import probe_for

    source = make_roberta(tok, seed=3)
    source.save_pretrained(tmp_path / "source")
    base = make_roberta(tok)
    untouched = copy.deepcopy(base)
    c = ctx(copy.deepcopy(base), tok, source_model=str(tmp_path / "source"), source_tokenizer=tok)
    model, res = stage(files).apply(c, {})
    m = res.metrics["near"]
    assert m["source_forgetting"] == pytest.approx(m["source_loss_after"] - m["source_loss_before"])
    assert m["source_loss_after"] != m["source_loss_before"]  # LAPT moved the model
    # (b) is the received model, (c) the returned one, (a) the source model: each re-derived by a fresh probe
    probe, _ = probe_for(ctx(untouched, tok), "mlm", None, str(files / "src.txt"))
    assert probe.score(untouched, tok)["loss"] == pytest.approx(m["source_loss_before"], abs=1e-9)
    assert probe.score(model, tok)["loss"] == pytest.approx(m["source_loss_after"], abs=1e-9)
    assert probe.score(source, tok)["loss"] == pytest.approx(m["source_loss_original"], abs=1e-9)
    info = res.info["forgetting"]
    assert info["sentences"] == len(SOURCE) and info["objective"] == "mlm" and info["before"]["tokens"] > 0
    assert info["before"]["tokens"] == info["after"]["tokens"]  # the same masked positions

    # the global RNGs do not move it; another stages seed masks other positions
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    _, again = stage(files).apply(ctx(copy.deepcopy(base), tok, source_model=str(tmp_path / "source"),
                                      source_tokenizer=tok), {})  # fmt: skip
    assert again.metrics["near"] == m
    _, other = stage(files).apply(ctx(copy.deepcopy(base), tok, seed=2), {})
    assert other.metrics["near"]["source_loss_before"] != m["source_loss_before"]
    assert other.metrics["near"]["source_loss_original"] is None  # no source model outside a trial


def test_forgetting_survives_a_cache_hit(tok, files, tmp_path):
    key = {"source": "tiny", "method": "random", "seed": 1}
    st = stage(files)
    _, miss = st.apply(ctx(make_roberta(tok), tok), {}, cache_key=key, cache_root=tmp_path)
    _, hit = st.apply(ctx(make_roberta(tok), tok), {}, cache_key=key, cache_root=tmp_path)
    assert miss.info["cache"]["hit"] is False and hit.info["cache"]["hit"] is True
    assert hit.metrics == miss.metrics and "source_forgetting" in hit.metrics["near"]
    # the measurement options are not part of the cache key: a smaller probe reuses the same weights
    _, fewer = stage(files, forgetting_examples=3).apply(ctx(make_roberta(tok), tok), {}, cache_key=key,
                                                          cache_root=tmp_path)  # fmt: skip
    assert fewer.info["cache"]["hit"] is True and fewer.info["forgetting"]["sentences"] == 3


def test_clm_forgetting_matches_a_direct_token_nll(tok, files):
    from tasks.forgetting import causal_scores

    model = make_gpt2(tok)
    scores = causal_scores(model, tok, SOURCE, 128)
    nll, n = 0.0, 0
    with torch.no_grad():
        for line in SOURCE:
            ids = tok(line)["input_ids"]
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].double(), -1)
            nll -= float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())
            n += len(ids) - 1
    assert scores["tokens"] == n and scores["loss"] == pytest.approx(nll / n, rel=1e-5)
    assert scores["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-5)
    _, res = stage(files).apply(ctx(make_gpt2(tok), tok), {})
    m = res.metrics["near"]
    assert res.info["forgetting"]["objective"] == "clm"
    assert m["source_forgetting"] == pytest.approx(m["source_loss_after"] - m["source_loss_before"])


def test_forgetting_off_or_without_source_text_says_why(tok, files):
    _, off = stage(files, forgetting_examples=0).apply(ctx(make_roberta(tok), tok), {})
    assert "source_forgetting" not in off.metrics["near"] and off.info["forgetting"] == {
        "skipped": "off (forgetting_examples=0)"
    }
    _, none = lapt_stage(files / "{lang}.txt", max_steps=2).apply(ctx(make_roberta(tok), tok), {})
    assert "no world" in none.info["forgetting"]["skipped"]
    with pytest.raises(FileNotFoundError, match="forgetting_file"):
        stage(files, forgetting_file=str(files / "missing.txt")).apply(ctx(make_roberta(tok), tok), {})
    with pytest.raises(ValueError, match="forgetting_examples"):
        stage(files, forgetting_examples=-1)


def test_forgetting_options_keep_trial_ids_and_cache_keys():
    from harness.run.config import resolved_fields
    from tasks.lapt import LaptConfig, lapt_cache_key

    plain = LaptConfig(max_steps=100, batch_size=16, max_length=128)
    assert "forgetting_examples" not in resolved_fields(plain) and "forgetting_file" not in resolved_fields(plain)
    assert resolved_fields(LaptConfig(forgetting_examples=8))["forgetting_examples"] == 8
    # pinned: the key this config had before the forgetting options existed (tasks-encoder's LAPT)
    assert lapt_cache_key({"a": 1}, plain) == "c52c09d23cc1818b119a2407a018451eadd3253c64d0d60fef89c7b99104c4da"


def test_embeddings_only_steps_then_full_steps_as_a_stage_option(tok, files):
    """"N embeddings-only then M full" for any method: the stage option replaces the method's directives."""
    from tasks.lapt import LaptConfig, lapt_cache_key

    _, res = stage(files, max_steps=6, embeddings_only_steps=3, log_every=1).apply(
        ctx(make_roberta(tok), tok), {"embeddings_only_fraction": 0.5, "embeddings_only_schedule": "fraction"}
    )
    assert [(p["phase"], p["steps"]) for p in res.info["phases"]] == [("embeddings", 3), ("full", 6)]
    assert res.info["freeze_verified"] is True and res.info["steps"] == 9
    assert res.info["embeddings_only"]["schedule"] == "steps"
    assert res.info["embeddings_only"]["replaced_directives"] == {"embeddings_only_fraction": 0.5,
                                                                  "embeddings_only_schedule": "fraction"}  # fmt: skip
    assert lapt_cache_key({}, LaptConfig(embeddings_only_steps=3)) != lapt_cache_key({}, LaptConfig())
    with pytest.raises(ValueError, match="embeddings_only_steps"):
        LaptConfig(embeddings_only_steps=0)


def test_cpu_bf16_and_fused_adamw_as_lapt_options(tok, files):
    """The task loop's CPU speed options reach LAPT: other numbers than float32, the same run to run, and
    configs that leave them unset keep their trial ids and cache keys (the pinned key above)."""
    from harness.run.config import resolved_fields
    from tasks.lapt import LaptConfig, lapt_cache_key

    def loss_curve(**kw):
        _, res = stage(files, max_steps=4, log_every=1, forgetting_examples=0, **kw).apply(ctx(make_roberta(tok), tok), {})
        return [v for _, v in res.curves["loss"]]

    fp32, bf16 = loss_curve(), loss_curve(cpu_bf16=True, adamw_impl="fused")
    assert bf16 == loss_curve(cpu_bf16=True, adamw_impl="fused")
    assert bf16 != fp32 and bf16 == pytest.approx(fp32, rel=0.05)
    assert "cpu_bf16" not in resolved_fields(LaptConfig()) and "adamw_impl" not in resolved_fields(LaptConfig())
    assert resolved_fields(LaptConfig(cpu_bf16=True))["cpu_bf16"] is True
    assert lapt_cache_key({}, LaptConfig(cpu_bf16=True)) != lapt_cache_key({}, LaptConfig())
    assert lapt_cache_key({}, LaptConfig(adamw_impl="fused")) != lapt_cache_key({}, LaptConfig())
    with pytest.raises(ValueError, match="adamw_impl"):
        LaptConfig(adamw_impl="sgd")
