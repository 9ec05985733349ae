"""Model surgery (``harness/model/surgery.py``): installing a mapping keeps what the architecture computes.

Tiny random models of the families in ``_tokfixtures.FAMILIES``. The identity mapping must leave
every logit bit-identical — including architectures whose embedding module scales its output
(``*ScaledWordEmbedding``: Gemma, XGLM, BART/mBART) — and a permutation must permute the output
rows, the MLM-head bias and BART's ``final_logits_bias`` exactly. ``from-scratch`` must not depend
on the source weights at all.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.utils import logging as hf_logging

from harness import seeding
from harness.model import surgery
from harness.protocols import COPIED, SPECIAL, InitResult, TokenMapping
from harness.vocab import special_ids, vocab_size
from tests._tokfixtures import FAMILIES, SOURCE_TEXT

hf_logging.set_verbosity_error()

IDS = [5, 9, 17, 3, 40, 41, 12]


def _model(fam, seed: int = 0):
    tok = fam.tokenizer(SOURCE_TEXT)
    return fam.build(tok, seed=seed), tok


def _identity(tok, n: int) -> InitResult:
    prov = np.full(n, COPIED, dtype=np.int8)
    prov[[i for i in special_ids(tok) if i < n]] = SPECIAL
    return InitResult(TokenMapping(n, n, np.arange(n + 1), np.arange(n), np.ones(n, np.float32), prov), tok)


def _logits(model, fam, ids=IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(**fam.inputs(ids)).logits


@pytest.mark.parametrize("name", list(FAMILIES))
def test_identity_mapping_leaves_logits_bit_identical(name, tmp_path):
    fam = FAMILIES[name]
    model, tok = _model(fam)
    inp_type = type(model.get_input_embeddings())
    before = _logits(model, fam)
    surgery.install(model, _identity(tok, vocab_size(tok)), seeding.torch_generator(0, "t"))
    assert type(model.get_input_embeddings()) is inp_type  # the scaled embedding module survives
    assert torch.equal(_logits(model, fam), before)
    out = model.get_output_embeddings()
    assert (out.weight is model.get_input_embeddings().weight) == fam.tied
    model.save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path).eval()
    assert torch.equal(_logits(reloaded, fam), before)


@pytest.mark.parametrize("name", ["gemma", "xglm", "bart", "mbart", "gemma3"])
def test_scaled_embedding_keeps_its_scale(name):
    fam = FAMILIES[name]
    model, tok = _model(fam)
    emb = model.get_input_embeddings()
    scale = float(emb.embed_scale)
    assert scale == pytest.approx(4.0)  # sqrt(hidden size 16): the case the old nn.Embedding dropped
    n = vocab_size(tok)
    perm = np.r_[np.arange(n)[::-1]]
    res = InitResult(TokenMapping.from_coo(n, n, np.arange(n), perm, np.ones(n), np.full(n, COPIED)), tok)
    surgery.install(model, res, seeding.torch_generator(0, "t"))
    new = model.get_input_embeddings()
    assert float(new.embed_scale) == scale and new.num_embeddings == n
    x = torch.tensor([[0, 1, 2]])
    assert torch.equal(new(x), new.weight[x] * new.embed_scale)


def _permutation(tok, n_target: int | None = None):
    """A mapping that reverses the source ids (minus one row when ``n_target`` is smaller)."""
    n = vocab_size(tok)
    n_target = n if n_target is None else n_target
    rows = np.arange(n_target)
    cols = (n - 1 - rows) % n
    return cols, InitResult(TokenMapping.from_coo(n_target, n, rows, cols, np.ones(n_target),
                                                  np.full(n_target, COPIED)), tok)


@pytest.mark.parametrize("name", ["xlm-r", "xlm-r-untied", "bert", "bart", "mbart", "llama-untied", "t5-untied"])
def test_permutation_permutes_output_rows_and_vocabulary_biases(name):
    fam = FAMILIES[name]
    model, tok = _model(fam)
    out_w = model.get_output_embeddings().weight.detach().clone()
    biases = {n: b.detach().clone() for n, b in (*model.named_parameters(), *model.named_buffers())
              if b.dim() and b.shape[-1] == out_w.shape[0] and (n.endswith("bias"))}
    assert bool(biases) == (fam.kind == "mlm" or name.startswith(("bart", "mbart")))
    tokens = _token_embeddings(model)
    cols, res = _permutation(tok, vocab_size(tok) - 1)
    surgery.install(model, res, seeding.torch_generator(0, "t"))
    assert torch.equal(model.get_output_embeddings().weight, out_w[cols])
    for n, w in _token_embeddings(model).items():  # encoder and decoder token embeddings too (T5)
        assert torch.equal(w, tokens[n][cols]), n
    for n, b in biases.items():
        now = dict((*model.named_parameters(), *model.named_buffers()))[n]
        assert torch.equal(now, b[..., cols]), n
    assert model.config.vocab_size == len(cols)
    logits = _logits(model, fam, [0, 1, 2])
    assert logits.shape[-1] == len(cols) and torch.isfinite(logits).all()


def _token_embeddings(model) -> dict[str, torch.Tensor]:
    n = model.get_input_embeddings().num_embeddings
    return {name: mod.weight.detach().clone() for name, mod in model.named_modules()
            if isinstance(mod, torch.nn.Embedding) and mod.num_embeddings == n and "position" not in name}


def test_separate_encoder_and_decoder_embeddings_are_each_mapped():
    fam = FAMILIES["t5-untied"]
    model, tok = _model(fam)
    # a checkpoint whose encoder/decoder token embeddings differ from ``shared`` loads with them apart
    enc = model.get_encoder().get_input_embeddings()
    dec = model.get_decoder().get_input_embeddings()
    enc.weight = torch.nn.Parameter(enc.weight.detach() * 2)
    dec.weight = torch.nn.Parameter(dec.weight.detach().clone())
    before = _token_embeddings(model)
    cols, res = _permutation(tok, vocab_size(tok) - 1)
    surgery.install(model, res, seeding.torch_generator(0, "t"))
    after = _token_embeddings(model)
    for n in ("shared", "encoder.embed_tokens", "decoder.embed_tokens"):
        assert torch.equal(after[n], before[n][cols]), n
    assert not torch.equal(after["shared"], after["encoder.embed_tokens"])
    assert model.get_decoder().get_input_embeddings().weight is not model.get_input_embeddings().weight


def test_bias_options_zero_and_keep_apply_to_final_logits_bias():
    fam = FAMILIES["bart"]
    model, tok = _model(fam)
    old = model.final_logits_bias.detach().clone()
    _, res = _permutation(tok, vocab_size(tok) - 1)
    surgery.install(model, res, seeding.torch_generator(0, "t"), bias="keep")
    assert torch.equal(model.final_logits_bias, old[..., :-1])
    model, tok = _model(fam)
    surgery.install(model, res, seeding.torch_generator(0, "t"), bias="zero")
    assert not model.final_logits_bias.any() and model.final_logits_bias.shape == (1, vocab_size(tok) - 1)


def test_decoder_start_and_special_ids_follow_the_new_vocabulary():
    from tests._tokfixtures import bytelevel

    fam = FAMILIES["bart"]
    model, tok = _model(fam)
    new_tok = bytelevel(("völlig andere wörter hier",) * 3, 300)
    # the new tokenizer has the same roles, so the same ids: shift them by building a mapping where
    # target special ids come from the source's by role
    n_t = vocab_size(new_tok)
    src_ids = {r: getattr(tok, f"{r}_token_id") for r in ("bos", "eos", "pad")}
    tgt_ids = {r: getattr(new_tok, f"{r}_token_id") for r in ("bos", "eos", "pad")}
    rows = list(tgt_ids.values())
    cols = [src_ids[r] for r in tgt_ids]
    prov = np.full(n_t, 3, dtype=np.int8)
    prov[rows] = SPECIAL
    res = InitResult(TokenMapping.from_coo(n_t, vocab_size(tok), rows, cols, np.ones(3), prov), new_tok)
    surgery.install(model, res, seeding.torch_generator(0, "t"))
    assert model.config.decoder_start_token_id == new_tok.eos_token_id
    assert model.config.forced_eos_token_id == new_tok.eos_token_id
    assert model.config.pad_token_id == new_tok.pad_token_id
    assert model.generation_config.decoder_start_token_id == new_tok.eos_token_id


def test_untranslatable_decoder_start_token_is_refused():
    fam = FAMILIES["t5-untied"]
    model, tok = _model(fam)
    model.config.decoder_start_token_id = 7  # a regular piece: no role, no special row maps it
    n = vocab_size(tok)
    res = InitResult(TokenMapping.from_coo(n, n, [], [], [], np.full(n, 3)), tok)
    with pytest.raises(surgery.SurgeryError, match="decoder_start_token_id=7"):
        surgery.install(model, res, seeding.torch_generator(0, "t"))


# ------------------------------------------------------------------------------------ from-scratch


def _from_scratch(model, tok, seed: int = 3):
    n = vocab_size(tok)
    res = InitResult(TokenMapping.from_coo(n, n, [], [], [], np.full(n, 3)), tok, {}, {"reinitialize_body": True})
    surgery.install(model, res, seeding.torch_generator(seed, "init", "materialize"))
    surgery.reinitialize_all(model, seeding.seeded_globals(seed, "init", "from-scratch"))
    return model


@pytest.mark.parametrize("name", ["xlm-r", "llama-untied", "gemma", "bart"])
def test_from_scratch_does_not_depend_on_the_source_weights(name):
    fam = FAMILIES[name]
    a, tok = _model(fam, seed=0)
    b, _ = _model(fam, seed=1)
    with torch.no_grad():  # a source with embeddings 10x larger: statistics that used to leak
        b.get_input_embeddings().weight.mul_(10)
        if not fam.tied:
            b.get_output_embeddings().weight.mul_(10)
    emb_scale = getattr(a.get_input_embeddings(), "embed_scale", None)
    sa, sb = _from_scratch(a, tok).state_dict(), _from_scratch(b, tok).state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    # the embeddings follow the architecture's own init (std = initializer_range), not the source's
    std = float(a.get_input_embeddings().weight.detach().std())
    assert std == pytest.approx(a.config.initializer_range if hasattr(a.config, "initializer_range")
                                else a.config.init_std, rel=0.2)
    if emb_scale is not None:
        assert float(a.get_input_embeddings().embed_scale) == float(emb_scale)
    assert (a.get_output_embeddings().weight is a.get_input_embeddings().weight) == fam.tied
    assert torch.isfinite(_logits(a, fam)).all()
    # and on the seed: another seed, another model
    c, _ = _model(fam, seed=0)
    sc = _from_scratch(c, tok, seed=4).state_dict()
    assert not torch.equal(sc[next(k for k in sc if "embed" in k or "shared" in k or "word" in k)],
                           sa[next(k for k in sa if "embed" in k or "shared" in k or "word" in k)])


def test_fallback_statistics_are_computed_once_per_source_content(monkeypatch):
    """A grid materializes fallback rows from the same source rows in every trial: the column mean and
    std are kept by content, and the rows drawn are the ones computed without the memo."""
    from harness.cache import ProcessMemo
    from harness.model import surgery
    from harness.protocols import FALLBACK, TokenMapping

    monkeypatch.setattr(surgery, "_STATS_MEMO", ProcessMemo(2))
    E = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    m = TokenMapping.from_coo(3, 50, [0], [7], [1.0], provenance=[1, FALLBACK, FALLBACK])
    first = surgery.materialize(m, E, torch.Generator().manual_seed(1))
    assert len(surgery._STATS_MEMO) == 1
    again = surgery.materialize(m, E.clone(), torch.Generator().manual_seed(1))  # another tensor, same content
    assert len(surgery._STATS_MEMO) == 1 and torch.equal(first, again)
    expected = E.mean(0) + E.std(0) * torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first[1:], expected)
    surgery.materialize(m, E + 1, torch.Generator().manual_seed(1))
    assert len(surgery._STATS_MEMO) == 2
