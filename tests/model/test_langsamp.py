"""The ``langsamp`` encoding: language + script vectors on the LM body's output, unused by task models.

Tiny random RoBERTa / BERT / GPT-2 / Llama (hidden size 16) built in the tests; no network, no GPU.
"""

from __future__ import annotations

import pytest
import torch

from harness import registry
from harness.language_encoding import EncodingError, load_encoded, read_pretrained
from tests.model.test_encodings import _batch, _bert, _llama, _marian, enc
from tests.tasks.test_lm_tasks import make_gpt2
from tests.tasks.test_tasks import make_mlm, make_tokenizer

LANGS = ["near", "far", "script"]  # Latn, Latn, Cyrl in the world


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _randomize(wrapped, seed=0, languages=True, scripts=True):
    g = torch.Generator().manual_seed(seed)
    t = wrapped.tables["input"]
    with torch.no_grad():
        if languages:
            t.weight.copy_(torch.randn(t.weight.shape, generator=g))
        if scripts:
            t.script_weight.copy_(torch.randn(t.script_weight.shape, generator=g))
    return wrapped


def _models(tok):
    return (make_mlm(tok, dropout=0.0).eval(), _bert(tok), make_gpt2(tok).eval(), _llama(tok))


# --------------------------------------------------------------------------------- registry, config


def test_registered_and_config_validated():
    assert "langsamp" in registry.names("encoding")
    assert enc("langsamp").config.init == "zero"
    with pytest.raises(ValueError, match=r"langsamp\.scripts\['de'\] must be an ISO 15924 code"):
        enc("langsamp", scripts={"de": "latin"})
    with pytest.raises(ValueError, match=r"scripts: expected a mapping"):
        enc("langsamp", scripts=["Latn"])
    with pytest.raises(ValueError, match=r"langsamp\.init"):
        enc("langsamp", init="ones")
    with pytest.raises(ValueError, match=r"langsamp\.random_std"):
        enc("langsamp", random_std=0.0)


def test_world_scripts_match_the_language_table():
    from harness.world.config import language_scripts
    from tasks.languages import LANGUAGES, WORLD_LANGUAGES

    scripts = language_scripts()
    assert scripts["script"] == "Cyrl" and {scripts[x] for x in ("src", "near", "far", "agglu")} == {"Latn"}
    assert {code: LANGUAGES[code].script for code in WORLD_LANGUAGES} == {x: scripts[x] for x in WORLD_LANGUAGES}


# ------------------------------------------------------------------------------------ equivalence


def test_zero_init_equals_the_none_encoding_bit_for_bit(tok):
    batch = _batch(tok)
    for model in _models(tok):
        ref = enc("none").wrap(model, ["near", "script"])(**batch).logits
        e = enc("langsamp")
        wrapped = e.wrap(model, ["near", "script"], seed=1)
        out = wrapped(**e.prepare(batch, ["near", "script"])).logits
        assert torch.equal(out, ref), type(model).__name__
        _randomize(wrapped)
        assert not torch.equal(wrapped(**e.prepare(batch, ["near", "script"])).logits, ref), type(model).__name__


def test_parameters_added_are_languages_plus_scripts_times_d(tok):
    for model in (make_mlm(tok), make_gpt2(tok)):
        d = model.get_input_embeddings().weight.shape[1]
        wrapped = enc("langsamp").wrap(model, LANGS, seed=1)
        info = wrapped.encoding_info()
        assert info["parameters_added"] == (3 + 2) * d  # near, far, script; Latn, Cyrl
        assert info["sides"]["input"]["scripts"] == {"near": "Latn", "far": "Latn", "script": "Cyrl"}
        assert info["sides"]["input"]["active"] is True
        plain = sum(p.numel() for p in model.parameters())
        assert sum(p.numel() for p in wrapped.parameters()) - plain == (3 + 2) * d


def test_language_and_script_vectors_change_the_lm_logits_per_language(tok):
    batch = _batch(tok, ("Anna lives in Berlin .", "Anna lives in Berlin ."))
    e = enc("langsamp")
    wrapped = _randomize(e.wrap(make_mlm(tok, dropout=0.0).eval(), LANGS, seed=1), languages=False)
    with torch.no_grad():
        out = {lang: wrapped(**e.prepare(batch, [lang, lang]), output_hidden_states=True) for lang in LANGS}
    # only scripts are non-zero: near and far share Latn, script is Cyrl
    assert torch.equal(out["near"].logits, out["far"].logits)
    assert not torch.allclose(out["near"].logits, out["script"].logits)
    _randomize(wrapped, seed=1, scripts=False)
    with torch.no_grad():
        near, far = (wrapped(**e.prepare(batch, [x, x])).logits for x in ("near", "far"))
    assert not torch.allclose(near, far)
    # the body's representations stay language-neutral: every hidden state equals the plain model's
    plain = make_mlm(tok, dropout=0.0).eval()
    with torch.no_grad():
        ref = plain(**batch, output_hidden_states=True).hidden_states
    for lang in LANGS:
        assert all(torch.equal(a, b) for a, b in zip(out[lang].hidden_states, ref))


def test_the_added_vector_is_h_plus_language_plus_script(tok):
    e = enc("langsamp")
    wrapped = _randomize(e.wrap(make_mlm(tok, dropout=0.0).eval(), LANGS, seed=1))
    t = wrapped.tables["input"]
    p = e.prepare(_batch(tok), ["far", "script"])
    with torch.no_grad(), wrapped._active(p.pop("language_ids"), None, None):
        out = wrapped.model.roberta(**p, output_hidden_states=True)
    expected = out.hidden_states[-1].clone()  # the body's own last layer: language-neutral
    expected[0] += t.weight[1] + t.script_weight[0]  # far: Latn
    expected[1] += t.weight[2] + t.script_weight[1]  # script: Cyrl
    assert torch.equal(out.last_hidden_state, expected)


def test_per_token_language_ids_add_each_tokens_language_and_script(tok):
    e = enc("langsamp")
    wrapped = _randomize(e.wrap(make_mlm(tok, dropout=0.0).eval(), LANGS, seed=1))
    batch = _batch(tok)
    n, length = batch["input_ids"].shape
    per_token = torch.zeros(n, length, dtype=torch.long)
    per_token[:, length // 2:] = 2  # second half in "script"
    with torch.no_grad():
        mixed = wrapped(**batch, language_ids=per_token).logits
        near = wrapped(**batch, language_ids=torch.zeros(n, dtype=torch.long)).logits
        script = wrapped(**batch, language_ids=torch.full((n,), 2)).logits
    assert torch.allclose(mixed[:, : length // 2], near[:, : length // 2], atol=1e-6)
    assert torch.allclose(mixed[:, length // 2:], script[:, length // 2:], atol=1e-6)


# ------------------------------------------------------------------------------------- fine-tuning


@pytest.mark.parametrize("head", ["AutoModelForSequenceClassification", "AutoModelForTokenClassification",
                                  "AutoModelForQuestionAnswering"])  # fmt: skip
def test_task_models_do_not_use_the_language_or_script_vectors(tok, head):
    import transformers

    from tasks.loop import build_task_model

    auto = getattr(transformers, head)
    e = enc("langsamp")
    src = _randomize(e.wrap(make_mlm(tok, dropout=0.0).eval(), LANGS, seed=1))
    labels = 2 if "Question" in head else 3
    model, info = build_task_model(src, auto, seed=3, num_labels=labels)
    plain, _ = build_task_model(make_mlm(tok, dropout=0.0).eval(), auto, seed=3, num_labels=labels)
    model.eval(), plain.eval()
    assert info["encoding"]["sides"]["input"]["active"] is False
    assert info["encoding"]["sides"]["input"]["trainable"] is False
    batch = _batch(tok)
    with torch.no_grad():
        outs = [model(**e.prepare(batch, [x, x])) for x in LANGS] + [model(**batch), plain(**batch)]
    key = "start_logits" if "Question" in head else "logits"
    for other in outs[1:]:
        assert torch.equal(getattr(outs[0], key), getattr(other, key))


def test_encoder_decoders_are_refused_with_a_clear_error(tok):
    wrapped = enc("langsamp").wrap(make_mlm(tok), ["near"], seed=1)
    with pytest.raises(EncodingError, match="langsamp: encoder–decoder"):
        wrapped.to_seq2seq(_marian(len(tok)), ["src"], decoder_start_token_id=0)
    with pytest.raises(EncodingError, match="only xlp/additive"):
        wrapped.fold("near")


# ------------------------------------------------------------------------------------ pretraining


def test_a_pretraining_step_updates_language_and_script_vectors(tok):
    from harness.world.pretrain_model import MaskedLMLoss, encoded_loss, param_groups

    torch.manual_seed(0)
    mlm = make_mlm(tok, dropout=0.0)
    wrapped = enc("langsamp").wrap(MaskedLMLoss(mlm), LANGS + ["src"], seed=1)
    t = wrapped.tables["input"]
    before_l, before_s = t.weight.detach().clone(), t.script_weight.detach().clone()
    inputs = _batch(tok)["input_ids"]
    labels = torch.full_like(inputs, -100)
    labels[:, 1:4] = inputs[:, 1:4]
    inputs = inputs.clone()
    inputs[:, 1:4] = tok.mask_token_id
    opt = torch.optim.AdamW(param_groups(wrapped, 0.01), lr=1e-2)
    encoded_loss(wrapped, "mlm", inputs, labels, ["near", "script"]).backward()
    opt.step()
    changed = (t.weight.detach() != before_l).any(1).tolist()
    assert changed == [True, False, True, False]  # near, far, script, src: only those in the batch
    assert (t.script_weight.detach() != before_s).any(1).tolist() == [True, True]  # Latn, Cyrl
    # saving moves the tables onto the masked LM itself (harness.world.pretrain._save_source)
    with torch.no_grad():
        direct = encoded_loss(wrapped, "mlm", inputs, labels, ["near", "script"])
    saved = wrapped.rewrap(mlm, finetuning=False)
    assert saved.output_hooked and saved.tables["input"].script_weight.requires_grad
    p = saved.prepare_batch({"input_ids": inputs, "labels": labels}, ["near", "script"])
    with torch.no_grad():
        assert torch.allclose(saved(**p).loss, direct, atol=1e-6)


def test_lapt_trains_the_vectors_and_mlm_at_init_uses_them(tok, tmp_path):
    from harness.registry import get
    from tasks.mlm_at_init import MlmAtInit, MlmAtInitConfig
    from tests.tasks.test_tasks import _ctx

    text = tmp_path / "near.txt"
    text.write_text("\n".join(["Anna lives in Berlin and works for Siemens .", "The cat sat on the mat ."] * 6),
                    encoding="utf-8")  # fmt: skip
    e = enc("langsamp")
    model = e.wrap(make_mlm(tok), ["near"], seed=1)
    before = {k: v.detach().clone() for k, v in model.tables["input"].named_parameters()}
    lapt = get("stage", "lapt").make({"schedule": "custom", "learning_rate": 1e-2, "lr_schedule": "constant",
                                      "batch_size": 2, "max_length": 8, "max_steps": 2, "train_file": str(text)})  # fmt: skip
    model, _ = lapt.apply(_ctx(model, tok, ("near",), encoding=e), {}, cache_key={"t": "langsamp"},
                          cache_root=tmp_path / "cache")  # fmt: skip
    after = dict(model.tables["input"].named_parameters())
    assert set(before) == {"weight", "script_weight"}
    assert all(not torch.equal(after[k].detach(), before[k]) for k in before)
    loss = MlmAtInit(MlmAtInitConfig(eval_file=str(text))).run(_ctx(model, tok, ("near",), encoding=e)).metrics["near"]["loss"]
    with torch.no_grad():
        model.tables["input"].weight.zero_()
        model.tables["input"].script_weight.zero_()
    zeroed = MlmAtInit(MlmAtInitConfig(eval_file=str(text))).run(_ctx(model, tok, ("near",), encoding=e)).metrics["near"]["loss"]
    assert loss != zeroed


# ------------------------------------------------------------------------------- saving, languages


def test_save_load_round_trip_keeps_languages_scripts_and_vectors(tok, tmp_path):
    e = enc("langsamp", init="random")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["near", "script"], seed=4)
    p = e.prepare(_batch(tok), ["near", "script"])
    ref = wrapped(**p).logits
    wrapped.save_pretrained(tmp_path)
    loaded = load_encoded(tmp_path).eval()
    assert loaded.encoding == "langsamp" and loaded.tables["input"].scripts == ["Latn", "Cyrl"]
    assert torch.equal(loaded(**p).logits, ref)
    # a later trial keeps the source's languages and scripts; a new Latin language shares Latn's vector
    again = enc("langsamp", init="copy:script").wrap(make_mlm(tok), ["far"], seed=9, pretrained=read_pretrained(tmp_path))
    t, src = again.tables["input"], wrapped.tables["input"]
    assert again.languages == ["near", "script", "far"] and t.scripts == ["Latn", "Cyrl", "Latn"]
    assert torch.equal(t.script_weight, src.script_weight) and torch.equal(t.weight[2], src.weight[1])
    with pytest.raises(ValueError, match=r"langsamp\.scripts\['near'\] = 'Grek'"):
        enc("langsamp", scripts={"near": "Grek"}).wrap(make_mlm(tok), ["far"], pretrained=read_pretrained(tmp_path))
    with pytest.raises(EncodingError, match="pretrained with the 'langsamp' encoding"):
        enc("additive").wrap(make_mlm(tok), ["far"], pretrained=read_pretrained(tmp_path))


def test_new_script_init_and_real_languages_need_a_script(tok):
    e = enc("langsamp", init="random", random_std=0.02, scripts={"de": "Latn", "ru": "Cyrl"})
    wrapped = e.wrap(make_mlm(tok), ["de", "ru"], seed=2)
    sw = wrapped.tables["input"].script_weight
    assert wrapped.tables["input"].scripts == ["Latn", "Cyrl"] and 0.005 < float(sw.detach().std()) < 0.05
    again = e.wrap(make_mlm(tok), ["de", "ru"], seed=2)
    assert torch.equal(again.tables["input"].script_weight, sw)  # seeded
    with pytest.raises(ValueError, match=r"no script known for language 'xx'.*scripts: \{xx: Latn\}"):
        enc("langsamp").wrap(make_mlm(tok), ["near", "xx"], seed=1)


def test_unknown_language_and_missing_ids_are_errors_naming_them(tok):
    e = enc("langsamp")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["near"], seed=1)
    batch = _batch(tok)
    with pytest.raises(EncodingError, match=r"no language-encoding parameters for \['far'\]"):
        e.prepare(batch, ["far", "near"])
    with pytest.raises(EncodingError, match="langsamp: the model was called without language ids"):
        wrapped(**batch)
    with wrapped.fixed_language("near"):  # lm-eval's path: a fixed language for the plain model's calls
        fixed = wrapped.model(**batch).logits
    assert torch.equal(fixed, wrapped(**e.prepare(batch, ["near", "near"])).logits)


def test_rewrapping_an_encoded_model_and_deepcopy_keep_the_right_tables(tok):
    import copy

    e = enc("langsamp", init="random")
    wrapped = e.wrap(make_mlm(tok, dropout=0.0).eval(), ["near"], seed=1)
    batch = e.prepare(_batch(tok), ["near", "near"])
    ref = wrapped(**batch).logits
    twin = copy.deepcopy(wrapped)  # the copied body's hook reads the copied table
    with torch.no_grad():
        twin.tables["input"].script_weight.add_(1.0)
    assert not torch.equal(twin(**batch).logits, ref) and torch.equal(wrapped(**batch).logits, ref)
    # a task's evaluation languages added to an encoded model (tasks.data.ensure_languages): kept + new
    more = e.wrap(copy.deepcopy(wrapped), ["near", "script"], seed=2)
    t = more.tables["input"]
    assert more.languages == ["near", "script"] and t.scripts == ["Latn", "Cyrl"]
    assert torch.equal(t.weight[0], wrapped.tables["input"].weight[0])
    assert torch.equal(t.script_weight[0], wrapped.tables["input"].script_weight[0])
    assert torch.equal(more(**batch).logits, ref)


def test_causal_lm_perplexity_uses_the_vectors_and_equals_plain_at_zero(tok, tmp_path):
    from tasks.perplexity import Perplexity, PerplexityConfig
    from tests.tasks.test_tasks import _ctx

    text = tmp_path / "near.txt"
    text.write_text("\n".join(["Anna lives in Berlin and works for Siemens .", "The cat sat on the mat ."] * 3),
                    encoding="utf-8")  # fmt: skip
    task = Perplexity(PerplexityConfig(eval_file=str(text), max_length=16))
    plain = task.run(_ctx(make_gpt2(tok).eval(), tok, ("near",))).metrics["near"]["token_perplexity"]
    e = enc("langsamp")
    model = e.wrap(make_gpt2(tok).eval(), ["near"], seed=1)
    assert task.run(_ctx(model, tok, ("near",), encoding=e)).metrics["near"]["token_perplexity"] == plain
    _randomize(model)
    assert task.run(_ctx(model, tok, ("near",), encoding=e)).metrics["near"]["token_perplexity"] != plain
