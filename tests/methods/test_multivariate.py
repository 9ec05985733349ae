"""``multivariate``: full-covariance random rows (Hewitt 2021) and transformers' ``mean_resizing``.

Checked against a brute-force re-derivation (numpy mean/covariance, Cholesky / eigendecomposition,
the same standard-normal draws), against the sample moments of many draws, and — the
``transformers`` variant — against transformers' own ``resize_token_embeddings(mean_resizing=True)``
on a tiny model (same mean, same covariance scale, same mean-only fallback).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness import registry, seeding
from harness.model import surgery
from harness.model.initialize import cached_init
from harness.protocols import COPIED, FALLBACK, SPECIAL, InitResult, RandomRows, TransferInputs
from harness.random_rows import covariance_factor, draw, moments
from harness.vocab import assemble_mapping, compute_overlap
from methods.multivariate import MultivariateConfig


def _source(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """Correlated rows with a non-zero mean (so mean and covariance both matter)."""
    g = np.random.default_rng(seed)
    mix = g.normal(size=(d, d)) / np.sqrt(d)
    return torch.from_numpy(g.normal(size=(n, d)) @ mix + g.normal(size=d)).float()


def test_moments_match_numpy_and_are_chunk_independent():
    E = _source(1000, 7)
    X = E.double().numpy()
    for chunk in (7, 700, 1 << 24):  # one row per chunk, 100 rows, everything at once
        mean, cov = moments(E, chunk_elements=chunk)
        np.testing.assert_allclose(mean.numpy(), X.mean(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(cov.numpy(), np.cov(X, rowvar=False, bias=True), rtol=1e-10, atol=1e-12)


def test_full_rows_are_mean_plus_cholesky_times_the_generators_normals():
    """Brute force: mu + z @ L.T with L = cholesky(s * Sigma) (numpy) and z the generator's first normals."""
    E = _source(300, 6)
    X = E.double().numpy()
    for scale in (1.0, 0.25):
        got = draw(E, 40, torch.Generator().manual_seed(7), RandomRows("full", scale))
        L = np.linalg.cholesky(scale * np.cov(X, rowvar=False, bias=True))
        z = torch.randn(40, 6, generator=torch.Generator().manual_seed(7), dtype=torch.float64).numpy()
        np.testing.assert_allclose(got.numpy(), (X.mean(0) + z @ L.T).astype(np.float32), rtol=1e-6, atol=1e-6)
        assert got.dtype == torch.float32


def test_full_rows_have_the_source_mean_and_covariance():
    E = _source(400, 5, seed=3)
    X = E.double().numpy()
    rows = draw(E, 40_000, torch.Generator().manual_seed(1), RandomRows("full")).double().numpy()
    cov = np.cov(X, rowvar=False, bias=True)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(rows.mean(0) - X.mean(0)) < 5 * sd / np.sqrt(len(rows)))
    rel = np.linalg.norm(np.cov(rows, rowvar=False) - cov) / np.linalg.norm(cov)
    assert rel < 0.03, rel
    # the diagonal baseline has the right variances but not the correlations
    diag = draw(E, 40_000, torch.Generator().manual_seed(1), RandomRows()).double().numpy()
    off = ~np.eye(5, dtype=bool)
    assert np.abs(np.corrcoef(diag, rowvar=False)[off]).max() < 0.03 < np.abs(np.corrcoef(X, rowvar=False)[off]).max()


def test_singular_covariance_is_sampled_in_its_range():
    """Fewer rows than dimensions: Cholesky fails, the eigendecomposition samples the same distribution."""
    E = _source(4, 10)  # rank(Sigma) <= 3
    f = covariance_factor(E, RandomRows("full"))
    assert f.how == "eigh"
    rows = draw(E, 20_000, torch.Generator().manual_seed(2), RandomRows("full")).double().numpy()
    X = E.double().numpy()
    centered = X - X.mean(0)
    _, s, vt = np.linalg.svd(centered)
    null = vt[(s > 1e-8 * s[0]).sum():]
    assert null.shape[0] >= 7
    assert np.abs((rows - X.mean(0)) @ null.T).max() < 1e-4  # no variance outside the span of the rows
    cov = np.cov(X, rowvar=False, bias=True)
    assert np.linalg.norm(np.cov(rows, rowvar=False) - cov) / np.linalg.norm(cov) < 0.05


def test_transformers_fallback_is_the_mean_when_not_positive_definite():
    E = _source(4, 10)
    f = covariance_factor(E, RandomRows("transformers", 1e-9))
    assert f.how == "mean" and f.root is None
    rows = draw(E, 3, torch.Generator().manual_seed(0), RandomRows("transformers", 1e-9))
    assert torch.allclose(rows, E.mean(0).expand(3, -1), rtol=0, atol=1e-7)


# ------------------------------------------------------------------------- against transformers itself


def _tiny_lm(vocab: int, d: int, tied: bool, seed: int):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                     max_position_embeddings=16, tie_word_embeddings=tied)
    model = BertForMaskedLM(cfg).eval()
    with torch.no_grad():  # a non-trivial mean and covariance, different for the untied head
        model.get_input_embeddings().weight.copy_(_source(vocab, d, seed=seed))
        if not tied:
            model.get_output_embeddings().weight.copy_(_source(vocab, d, seed=seed + 1) * 3)
            model.get_output_embeddings().bias.copy_(torch.linspace(-1, 1, vocab))
    return model


def _resize_both(vocab: int, d: int, added: int, seed: int):
    """transformers' resize and ours (a mapping keeping the old rows, FALLBACK for the added ones)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    ref = _tiny_lm(vocab, d, tied=False, seed=seed)
    ours = _tiny_lm(vocab, d, tied=False, seed=seed)
    old_in = ref.get_input_embeddings().weight.detach().clone()
    old_out = ref.get_output_embeddings().weight.detach().clone()
    old_bias = ref.get_output_embeddings().bias.detach().clone()
    torch.manual_seed(seed + 100)  # transformers samples from the global generator
    ref.resize_token_embeddings(vocab + added, mean_resizing=True)
    keep = np.stack([np.arange(vocab), np.arange(vocab)], axis=1)
    mapping = assemble_mapping(vocab + added, vocab, copied=keep)
    spec = MultivariateConfig.reference().random_rows()
    result = InitResult(mapping, tokenizer=None, random_rows=spec)
    surgery.install(ours, result, torch.Generator().manual_seed(seed))
    return ref, ours, (old_in, old_out, old_bias)


def test_transformers_variant_matches_resize_token_embeddings_mean_and_scale():
    vocab, d, added = 300, 8, 6000
    ref, ours, (old_in, old_out, old_bias) = _resize_both(vocab, d, added, seed=0)
    for getter, old in (("get_input_embeddings", old_in), ("get_output_embeddings", old_out)):
        mu, cov = moments(old, dtype=torch.float64)
        scales = {}
        for name, model in (("transformers", ref), ("tokxfer", ours)):
            W = getattr(model, getter)().weight.detach()
            assert torch.equal(W[:vocab], old)  # old rows untouched by both
            new = W[vocab:].double()
            # same mean: within float32 resolution plus 5 standard errors of sqrt(1e-9 * var)
            tol = 5 * torch.sqrt(1e-9 * torch.diag(cov) / added) + 1e-6 * mu.abs().max()
            assert torch.all((new.mean(0) - mu).abs() <= tol), (name, getter)
            c = torch.cov(new.T)
            scales[name] = float(torch.trace(c) / torch.trace(cov))
            # the full covariance, not only its trace: correlations follow Sigma
            rel = torch.linalg.norm(c / scales[name] - cov) / torch.linalg.norm(cov)
            assert rel < 0.15, (name, getter, rel)
        assert 0.8e-9 < scales["transformers"] < 1.2e-9 and 0.8e-9 < scales["tokxfer"] < 1.2e-9, scales
    # MLM-head bias: transformers draws N(mean, 1e-9 std); ours is the mean (equal to float32 precision here)
    rb = ref.get_output_embeddings().bias.detach()[vocab:]
    ob = ours.get_output_embeddings().bias.detach()[vocab:]
    torch.testing.assert_close(ob, old_bias.mean().expand(added))
    torch.testing.assert_close(rb, ob, rtol=0, atol=1e-6)


def test_transformers_variant_falls_back_to_the_mean_like_transformers():
    vocab, d, added = 5, 8, 3  # 5 rows in 8 dimensions: the covariance is singular
    ref, ours, (old_in, _, _) = _resize_both(vocab, d, added, seed=4)
    a = ref.get_input_embeddings().weight.detach()[vocab:]
    b = ours.get_input_embeddings().weight.detach()[vocab:]
    assert torch.equal(a, a[:1].expand(added, -1))  # transformers: every new row the mean
    torch.testing.assert_close(b, a, rtol=0, atol=1e-7)
    torch.testing.assert_close(b[0], old_in.mean(0), rtol=0, atol=1e-7)


# ------------------------------------------------------------------------- the method on the tiny world


@pytest.fixture(scope="module")
def transfer(tiny_world, tiny_source, tmp_path_factory):
    from transformers import AutoModelForMaskedLM

    from harness.tokenizers import load_tokenizer, train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    model = AutoModelForMaskedLM.from_pretrained(tiny_source)
    src_tok = load_tokenizer(str(tiny_source))
    tgt_tok = train_tokenizer([w.text("near", "train")], "unigram", 300, cache_dir=tmp_path_factory.mktemp("tok"))
    inputs = TransferInputs(source_tokenizer=src_tok, target_tokenizer=tgt_tok,
                            source_embeddings=model.get_input_embeddings().weight.detach().float().clone())
    return {"inputs": inputs, "model_dir": tiny_source}


@pytest.mark.parametrize("copy_overlap", [True, False])
def test_mapping_copies_the_overlap_and_draws_the_rest_with_reasons(transfer, copy_overlap):
    inputs = transfer["inputs"]
    res = registry.get("method", "multivariate").make({"copy_overlap": copy_overlap}).initialize(
        inputs, seeding.numpy_rng(1, "init", "multivariate"))
    m = res.mapping
    ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer)
    copied = {int(t): int(s) for t, s in ov.pairs(fuzzy=True)}
    for t in range(m.n_target):
        if m.provenance[t] == SPECIAL:
            continue
        if copy_overlap and t in copied:
            assert m.provenance[t] == COPIED and m.row(t)[0].tolist() == [copied[t]]
        else:
            assert m.provenance[t] == FALLBACK
    assert res.random_rows == RandomRows("full", 1.0)
    reasons = {t for ids in res.random_reasons.values() for t in ids}
    assert reasons == set(m.fallback_ids().tolist()) and len(reasons) > 50
    assert res.info["random_rows"]["factor"] == "cholesky"  # 16-dim source with hundreds of rows


def test_installed_new_rows_follow_each_matrixs_own_statistics(transfer):
    """Input rows from the input matrix's N(mu, Sigma); an untied head's rows from the head's (brute force)."""
    from transformers import AutoModelForMaskedLM

    inputs = transfer["inputs"]
    res = registry.get("method", "multivariate").make({}).initialize(inputs, seeding.numpy_rng(1, "init", "mv"))
    model = AutoModelForMaskedLM.from_pretrained(transfer["model_dir"], tie_word_embeddings=False)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(5).add_(1)  # a head with its own mean and scale
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_out = model.get_output_embeddings().weight.detach().clone()
    surgery.install(model, res, seeding.torch_generator(1, "init", "materialize"))
    fb = torch.from_numpy(res.mapping.fallback_ids())
    g = seeding.torch_generator(1, "init", "materialize")
    for old, new in ((old_in, model.get_input_embeddings().weight), (old_out, model.get_output_embeddings().weight)):
        X = old.double().numpy()
        L = np.linalg.cholesky(np.cov(X, rowvar=False, bias=True))
        z = torch.randn(len(fb), X.shape[1], generator=g, dtype=torch.float64).numpy()  # the harness's stream
        np.testing.assert_allclose(new.detach()[fb].numpy(), X.mean(0) + z @ L.T, rtol=1e-5, atol=1e-5)


def test_the_init_cache_keeps_the_distribution(tmp_path, monkeypatch, transfer):
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path))
    inputs = transfer["inputs"]
    method = registry.get("method", "multivariate").make(MultivariateConfig.reference())
    compute = lambda: method.initialize(inputs, seeding.numpy_rng(1, "init", "multivariate"))  # noqa: E731
    key = {"test": "multivariate-cache"}
    first = cached_init(key, compute, inputs.target_tokenizer)
    again = cached_init(key, compute, inputs.target_tokenizer)
    assert again.info.get("cache_hit") is True and "cache_hit" not in first.info
    assert again.random_rows == first.random_rows == RandomRows("transformers", 1e-9)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="variant"):
        MultivariateConfig(variant="gaussian")
    with pytest.raises(ValueError, match="covariance_scale"):
        MultivariateConfig(covariance_scale=0)
    with pytest.raises(ValueError, match="RandomRows.distribution"):
        RandomRows("spherical")
    assert MultivariateConfig().scale == 1.0 and MultivariateConfig(covariance_scale=0.5).scale == 0.5


@pytest.mark.parametrize("spec", [RandomRows("full"), RandomRows("transformers", 1e-9), RandomRows("full", 0.5)])
def test_draws_depend_on_the_generator_only(spec):
    import random

    E = _source(200, 6)
    a = draw(E, 50, torch.Generator().manual_seed(9), spec)
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    _ = torch.randn(10), np.random.rand(4)
    assert torch.equal(a, draw(E, 50, torch.Generator().manual_seed(9), spec))
    assert not torch.equal(a, draw(E, 50, torch.Generator().manual_seed(10), spec))


def test_the_covariance_factor_is_computed_once_per_content(monkeypatch):
    """The method reports the factor and the harness draws from it in every trial of a grid: it is kept
    per process by the rows' bytes, and a matrix whose content differs gets its own."""
    from harness import random_rows

    monkeypatch.setattr(random_rows, "_FACTOR_MEMO", random_rows.ProcessMemo(2))
    calls = []
    real = random_rows.moments
    monkeypatch.setattr(random_rows, "moments", lambda m, **k: calls.append(1) or real(m, **k))
    g = torch.Generator().manual_seed(0)
    e = torch.randn(50, 4, generator=g)
    spec = RandomRows("full", 1.0)
    a = random_rows.covariance_factor(e, spec)
    b = random_rows.covariance_factor(e.clone(), spec)  # another tensor, same bytes
    assert len(calls) == 1 and torch.equal(a.root, b.root)
    e2 = e.clone()
    e2[3, 1] += 1e-3
    c = random_rows.covariance_factor(e2, spec)
    random_rows.covariance_factor(e, RandomRows("full", 0.5))
    assert len(calls) == 3 and not torch.equal(a.root, c.root)
    expect = torch.linalg.cholesky(torch.cov(e2.double().T, correction=0))
    assert torch.allclose(c.root, expect, atol=1e-10)
