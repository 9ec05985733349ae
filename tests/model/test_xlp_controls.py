"""Issue 28: per-token language ids, and XLP's controls (``xlp-shared``: one projection for all
languages; ``xlp`` with ``decoder: false``: the decoder side a frozen identity).

Tiny random models (hidden 16); no network, no GPU.
"""

from __future__ import annotations

import pytest
import torch

from harness.language_encoding import EncodingError, load_encoded, read_pretrained
from tests.model.test_encodings import _batch, _marian, enc
from tests.tasks.test_tasks import make_mlm, make_tokenizer


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


# ------------------------------------------------------------------------------ per-token language ids


@pytest.mark.parametrize("name", ["additive", "xlp", "attached"])
def test_per_token_language_ids_apply_each_tokens_language(tok, name):
    e = enc(name, init="random")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["src", "near"], seed=3)
    table = wrapped.tables["input"]
    emb = wrapped.model.get_input_embeddings()
    ids = _batch(tok)["input_ids"]
    out = emb.weight[ids]  # what the word-embedding module returns
    per_token = torch.zeros_like(ids)
    per_token[:, 3:] = 1  # src for the first three positions, near after
    added = torch.zeros_like(ids, dtype=torch.bool)
    added[:, [1, 4]] = True  # attached: two language-token positions, one per side
    table._ids, table._added = per_token, added
    mixed = table.hook(emb, (ids,), out)
    for lang in (0, 1):
        table._ids = torch.full((ids.shape[0],), lang)
        whole = table.hook(emb, (ids,), out)
        cols = slice(0, 3) if lang == 0 else slice(3, None)
        assert torch.equal(mixed[:, cols], whole[:, cols]), (name, lang)
    table._ids = per_token[:, :-1]
    with pytest.raises(EncodingError, match="per-token language ids"):
        table.hook(emb, (ids,), out)
    table._ids = table._added = None


# ------------------------------------------------------------------------------ xlp-shared


def test_xlp_shared_is_one_matrix_for_every_language(tok, tmp_path):
    e = enc("xlp-shared", init="random")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["src", "near", "far"], seed=2)
    table = wrapped.tables["input"]
    assert [n for n, _ in table.named_parameters()] == ["parametrizations.weight.original"]
    assert wrapped.encoding_info()["parameters_added"] == 16 * 16
    batch = _batch(tok)
    outs = [wrapped(**e.prepare(batch, [lang, lang])).logits for lang in ("src", "far")]
    assert torch.equal(outs[0], outs[1])  # no language-specific projection
    outs[0].sum().backward()
    with torch.no_grad():  # one gradient step through any language moves all of them together
        table.parametrizations.weight.original.sub_(0.1 * table.parametrizations.weight.original.grad)
    assert all(torch.equal(table.weight[i], table.weight[0]) for i in range(3))
    wrapped.save_pretrained(tmp_path)
    saved = read_pretrained(tmp_path)
    assert saved["meta"]["encoding"] == "xlp" and saved["meta"]["encoding_config"]["shared"] is True
    # a later trial keeps the shared matrix, also for a language the source never saw
    again = enc("xlp-shared").wrap(make_mlm(tok), ["agglu"], seed=1, pretrained=saved)
    assert again.languages == ["src", "near", "far", "agglu"]
    assert torch.equal(again.tables["input"].weight[3], table.weight[0].detach())
    with pytest.raises(ValueError, match="use the encoding 'xlp-shared'"):
        enc("xlp").wrap(make_mlm(tok), ["near"], pretrained=saved)
    per_language = enc("xlp").wrap(make_mlm(tok), ["near"], seed=1)
    per_language.save_pretrained(tmp_path / "per")
    with pytest.raises(ValueError, match="a projection per language"):
        enc("xlp-shared").wrap(make_mlm(tok), ["near"], pretrained=read_pretrained(tmp_path / "per"))
    with pytest.raises(ValueError, match="a projection per language"):
        enc("xlp-shared").wrap(per_language, ["near", "far"])
    assert load_encoded(tmp_path).encoding == "xlp"


def test_xlp_shared_in_a_translation_model_and_frozen_in_finetuning(tok):
    import copy

    e = enc("xlp-shared")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0), ["near", "far"], seed=1)
    seq2seq = wrapped.to_seq2seq(_marian(len(tok)), ["src"], decoder_start_token_id=0)
    info = seq2seq.encoding_info()
    assert info["sides"]["encoder"]["parameters"] == 16 * 16 and info["sides"]["decoder"]["parameters"] == 16 * 16
    assert info["sides"]["encoder"]["trainable"] and info["sides"]["decoder"]["trainable"]
    clone = copy.deepcopy(seq2seq)  # the parametrization survives a copy (rewrap, ensure_languages)
    assert torch.equal(clone.tables["encoder"].weight, seq2seq.tables["encoder"].weight)
    frozen = wrapped.rewrap(make_mlm(tok), finetuning=True)
    assert not any(p.requires_grad for p in frozen.tables.parameters())


# ------------------------------------------------------------------------------ xlp decoder: false


@pytest.mark.parametrize("decoder", [True, False])
def test_xlp_decoder_option(tok, decoder):
    e = enc("xlp", init="random", decoder=decoder)
    mlm = e.wrap(make_mlm(tok, dropout=0.0), ["near"], seed=1)
    marian = _marian(len(tok))
    seq2seq = mlm.to_seq2seq(marian, ["src"], decoder_start_token_id=0, generator=torch.Generator().manual_seed(0))
    dec = seq2seq.tables["decoder"]
    assert dec.weight.requires_grad is decoder and seq2seq.tables["encoder"].weight.requires_grad
    if decoder:
        assert not torch.equal(dec.weight[0], torch.eye(16))  # random like the encoder's init
        return
    assert torch.equal(dec.weight[0], torch.eye(16))
    # the frozen identity is no layer: the same model with the decoder's hook removed computes the same
    import copy

    from harness.language_encoding import _drop_encoding_hooks, side_modules

    no_layer = copy.deepcopy(seq2seq)
    _drop_encoding_hooks(side_modules(no_layer.model)["decoder"])
    prepared = seq2seq.prepare_batch(_batch(tok), ["near"] * 2, ["src"] * 2)
    labels = torch.tensor([[5, 6, 7, 2], [8, 9, 2, -100]])
    with torch.no_grad():
        assert torch.equal(seq2seq(**prepared, labels=labels).logits, no_layer(**prepared, labels=labels).logits)
    with pytest.raises(ValueError, match="decoder: expected true or false"):
        enc("xlp", decoder="no")


@pytest.mark.parametrize("languages", [["near"], ["src", "near", "far", "script"]])
def test_xlp_shared_adds_one_matrix_whatever_the_number_of_languages(tok, languages):
    """The capacity control: XLP adds n_langs x d^2 parameters, xlp-shared d^2 for any number of languages."""
    d = 16
    shared = enc("xlp-shared").wrap(make_mlm(tok), languages, seed=0)
    per_language = enc("xlp").wrap(make_mlm(tok), languages, seed=0)
    assert sum(p.numel() for p in shared.tables.parameters()) == d * d == shared.encoding_info()["parameters_added"]
    assert sum(p.numel() for p in per_language.tables.parameters()) == len(languages) * d * d
    assert per_language.encoding_info()["parameters_added"] == len(languages) * d * d
    # same placement and init as XLP: identity, so both start as the plain model
    assert all(torch.equal(shared.tables["input"].weight[i], torch.eye(d)) for i in range(len(languages)))
