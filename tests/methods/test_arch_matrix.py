"""Architecture matrix: every model family the harness claims × every registered method × both modes.

Each family (``_tokfixtures.FAMILIES``: BERT, RoBERTa, XLM-R tied/untied, GPT-2, Llama with a
byte-fallback SentencePiece BPE tokenizer (untied), Gemma 1 and 3, XGLM, BART, mBART, T5 untied) is a
tiny random model saved with a tokenizer of its family. Through :func:`harness.model.initialize.initialize`
— the path every trial takes: ``resources.load_source_model`` → method → ``surgery.install`` — we
check:

* ``original`` (the identity mapping) leaves logits bit-identical, also after ``save_pretrained`` →
  ``from_pretrained``;
* every registered method runs in replacement and extension mode and gives a model whose logits
  are finite and cover the new vocabulary;
* every input row, untied output row and output-bias entry is exactly what METHODS.md says: the
  mapping applied to the source's rows (copied rows bit-exactly, combined rows as the weighted sum,
  fallback bias entries the source mean); in extension mode every original row is the source's,
  bit-exactly; ``from-scratch`` keeps nothing (asserted, with its reason).

The fastText/aligner settings are the tiny ones of ``_tokfixtures.FAST_METHOD_CONFIG``; auxiliary
models are cached per session, so a corpus is trained on once.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from transformers.utils import logging as hf_logging

from harness import registry
from harness.model.initialize import InitRequest, initialize
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL
from harness.registry import build_config
from harness.vocab import vocab_size
from tests._tokfixtures import FAMILIES, FAST_METHOD_CONFIG, SOURCE_TEXT, TARGET_TEXT, helper_model, transfer_files

hf_logging.set_verbosity_error()

METHODS = registry.names("method")
EXTEND_TOP_N = 10
PROBE = [3, 5, 9, 17, 40, 41, 12]
COMBINING = ("focus", "wechsel", "vipi", "tiktotok", "mean-of-pieces", "omp", "clp", "ofa")
"""Methods whose non-overlap rows are combinations of source rows (the rest copy or draw rows)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return transfer_files(tmp_path_factory.mktemp("arch-files"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch-models")

    @functools.cache
    def get(name: str) -> dict:
        fam = FAMILIES[name]
        tok = fam.tokenizer(SOURCE_TEXT)
        model = fam.build(tok)
        d = root / name
        model.save_pretrained(d)
        tok.save_pretrained(d)
        with torch.no_grad():
            logits = model(**fam.inputs(PROBE)).logits
        target = fam.tokenizer(TARGET_TEXT)
        return {"fam": fam, "dir": str(d), "tok": tok, "model": model, "logits": logits,
                "target": target, "helper": helper_model(target, root / f"{name}-helper")}

    return get


def _init(src: dict, files, method: str, mode: str):
    entry = registry.get("method", method)
    cfg = build_config(entry.config_cls, FAST_METHOD_CONFIG.get(method, {}))
    return initialize(InitRequest(
        source_model=src["dir"], target_tokenizer=src["target"], method=method, method_config=cfg, seed=1,
        model_kind=src["fam"].kind, resources=dataclasses.replace(files, helper_model=src["helper"]), mode=mode,
        extend_top_n=EXTEND_TOP_N,
    ))


def _vocab_tensors(model) -> dict[str, torch.Tensor]:
    """Input rows, output rows (when untied) and every per-token bias of a model, by role."""
    out = {"input": model.get_input_embeddings().weight.detach()}
    head = model.get_output_embeddings()
    if head.weight is not model.get_input_embeddings().weight:
        out["output"] = head.weight.detach()
    n = out["input"].shape[0]
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        if name.endswith("bias") and t.dim() and t.shape[-1] == n and t.reshape(-1).shape[0] == n:
            out[f"bias:{name}"] = t.detach().reshape(-1)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_identity_leaves_logits_bit_identical_through_save_and_reload(family, sources, files, tmp_path):
    src = sources(family)
    init = _init(src, files, "original", "replace")
    model = init.model.eval()
    assert type(model.get_input_embeddings()) is type(src["model"].get_input_embeddings())
    with torch.no_grad():
        assert torch.equal(model(**src["fam"].inputs(PROBE)).logits, src["logits"])
    model.save_pretrained(tmp_path)
    init.tokenizer.save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**src["fam"].inputs(PROBE)).logits, src["logits"])
    assert (reloaded.get_output_embeddings().weight is reloaded.get_input_embeddings().weight) == src["fam"].tied


def _expected_rows(mapping, source: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """``W @ source`` for the given non-fallback rows, in float64."""
    src = source.detach().double()
    out = torch.zeros(len(rows), *src.shape[1:], dtype=torch.float64)
    for k, t in enumerate(rows):
        ids, w = mapping.row(int(t))
        out[k] = torch.from_numpy(w.astype(np.float64)) @ src[torch.from_numpy(ids)]
    return out


@pytest.mark.parametrize("mode", ["replace", "extend"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_method_in_both_modes(family, method, mode, sources, files):
    src = sources(family)
    init = _init(src, files, method, mode)
    model, m = init.model.eval(), init.result.mapping
    n_old = vocab_size(src["tok"])
    if method == "original":
        assert init.tokenizer is init.source_tokenizer and m.n_target == n_old
        if mode == "extend":  # the source tokenizer is kept: the extension is not used, and says so
            assert "keeps the source tokenizer" in init.result.info["extension"]["reason"]
    elif mode == "extend":
        assert 0 < m.n_target - n_old <= EXTEND_TOP_N
        assert init.tokenizer.convert_ids_to_tokens(list(range(n_old))) == src["tok"].convert_ids_to_tokens(
            list(range(n_old)))
    else:
        assert m.n_target == vocab_size(src["target"])
    with torch.no_grad():
        logits = model(**src["fam"].inputs([i for i in PROBE if i < m.n_target])).logits
    assert logits.shape[-1] == m.n_target and torch.isfinite(logits).all()
    assert model.config.vocab_size == m.n_target
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == src["fam"].tied

    new, old = _vocab_tensors(model), _vocab_tensors(src["model"])
    assert new.keys() == old.keys()
    has_bias = src["fam"].kind == "mlm" or src["fam"].model_class.startswith(("Bart", "MBart"))
    assert any(k.startswith("bias:") for k in new) == has_bias  # MLM-head bias / final_logits_bias
    if method in COMBINING:  # not a silent all-fallback mapping: the method really combined rows
        added = m.provenance[n_old:] if mode == "extend" else m.provenance
        assert np.sum(added == COMBINED) > 0, m.counts()
    if method == "from-scratch":  # nothing pretrained by design: no row may equal the source's
        if mode == "extend":
            assert init.result.info["extension"]["reason"] == "from-scratch re-initializes every parameter"
        assert not torch.equal(new["input"][:n_old], old["input"][:n_old])
        return
    if mode == "extend":  # every original row, bit-exactly
        assert init.result.info["extension"]["original_rows_kept"] is True
        for role in new:
            assert torch.equal(new[role][:n_old], old[role][:n_old]), role
    # every row is the mapping applied to the source (METHODS.md "Output side"; bias default "map")
    prov = m.provenance
    exact = np.flatnonzero((prov == COPIED) | (prov == SPECIAL))
    mixed = np.flatnonzero((prov != COPIED) & (prov != SPECIAL) & (prov != FALLBACK))
    fallback = np.flatnonzero(prov == FALLBACK)
    for role in new:
        src_rows = torch.tensor([int(m.row(int(t))[0][0]) for t in exact], dtype=torch.long)
        assert torch.equal(new[role][exact], old[role][src_rows]), role
        if len(mixed):
            torch.testing.assert_close(new[role][mixed].double(), _expected_rows(m, old[role], mixed),
                                       rtol=1e-5, atol=1e-6)
        if role.startswith("bias:") and len(fallback):  # fallback bias entries: the source mean
            torch.testing.assert_close(new[role][fallback], old[role].mean().expand(len(fallback)))
