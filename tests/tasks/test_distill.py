"""The ``distill`` stage on tiny fixtures: the teacher is the real lane's converted fixture (a random 1-layer
``BertModel`` without an MLM head and its SentencePiece tokenizer), the student the same model with a new
byte-level BPE tokenizer and randomly initialized embeddings. No real-lane data."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.protocols import TaskContext
from tasks.distill import Distill, DistillConfig, distill_cache_key
from tests.real.test_real_lane import XX, _experiment, bert_dir, q4_file  # noqa: F401  (fixtures)
from tests.tasks.test_lm_tasks import make_tokenizer

WORDS = sorted({w for line in XX for w in line.split()})


def _lines(n: int, seed: int) -> list[str]:
    """``n`` distinct lines of 4-7 words from :data:`XX`'s vocabulary (the held-out lines are new sentences)."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < n:
        line = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 8))))
        if line not in out:
            out.append(line)
    return out


@pytest.fixture(scope="module")
def student_tok():
    return make_tokenizer(XX + _lines(40, 9), vocab_size=300)


@pytest.fixture()
def train_file(tmp_path) -> Path:
    p = tmp_path / "xx.txt"
    p.write_text("\n".join(_lines(72, 0)) + "\n", encoding="utf-8")
    return p


def make_student(bert_dir: Path, tok, seed: int = 0):  # noqa: F811
    """The teacher's body with a new vocabulary: embeddings drawn from an explicit generator."""
    from transformers import BertModel

    model = BertModel.from_pretrained(bert_dir)
    model.resize_token_embeddings(len(tok))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(torch.randn(model.get_input_embeddings().weight.shape, generator=g) * 0.5)
    return model


def make_ctx(bert_dir: Path, tok, *, seed: int = 1, model=None) -> TaskContext:  # noqa: F811
    from transformers import AutoTokenizer

    return TaskContext(model=model if model is not None else make_student(bert_dir, tok), tokenizer=tok, languages=["xx"],
                       seed=seed, progress=False, source_model=str(bert_dir),
                       source_tokenizer=AutoTokenizer.from_pretrained(bert_dir))


def config(train_file: Path, **kw) -> DistillConfig:
    base = {"train_file": str(train_file), "held_out_lines": 8, "max_steps": 12, "batch_size": 8,
            "learning_rate": 5e-2, "max_length": 32, "log_every": 4}
    return DistillConfig(**{**base, **kw})


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _emb_name(model) -> str:
    emb = model.get_input_embeddings().weight
    return next(n for n, p in model.named_parameters() if p is emb)


# ------------------------------------------------------------------------------------------ training


def test_distillation_lowers_the_held_out_loss(bert_dir, student_tok, train_file):  # noqa: F811
    model, res = Distill(config(train_file, max_steps=30)).apply(make_ctx(bert_dir, student_tok), {})
    m = res.metrics["xx"]
    assert m["distill_loss_after"] < 0.8 * m["distill_loss_before"], m
    assert res.counts["xx"] == {"train_lines": 64, "held_out_lines": 8, "steps": 30}
    assert [s for s, _ in res.curves["loss"]] == [4, 8, 12, 16, 20, 24, 28, 30]
    assert res.curves["loss"][-1][1] < res.curves["loss"][0][1]
    assert res.info["hyperparameters"]["max_steps"] == 30 and res.info["cache"] is None
    assert "never trained on" in res.info["held_out"] and not model.training
    assert res.info["timings"]["train_cpu_s"] > 0 and res.info["ignored_directives"] is None


def test_embeddings_only_leaves_every_other_parameter_bit_identical(bert_dir, student_tok, train_file):  # noqa: F811
    ctx = make_ctx(bert_dir, student_tok)
    before, emb = _state(ctx.model), _emb_name(ctx.model)
    model, res = Distill(config(train_file)).apply(ctx, {})
    after = _state(model)
    assert not torch.equal(before[emb], after[emb])
    assert [k for k in before if k != emb and not torch.equal(before[k], after[k])] == []
    assert res.info["freeze_verified"] is True and res.info["trainable_parameters"] == after[emb].numel()
    assert all(p.requires_grad for p in model.parameters())  # the caller's flags are restored

    ctx = make_ctx(bert_dir, student_tok)
    before = _state(ctx.model)
    model, res = Distill(config(train_file, train="all")).apply(ctx, {})
    changed = [k for k, v in _state(model).items() if k != emb and not torch.equal(before[k], v)]
    assert any("encoder.layer" in k for k in changed) and res.info["freeze_verified"] is None


def test_mse_loss_trains_too(bert_dir, student_tok, train_file):  # noqa: F811
    _, res = Distill(config(train_file, loss="mse", learning_rate=2e-1, max_steps=20)).apply(make_ctx(bert_dir, student_tok), {})
    m = res.metrics["xx"]
    assert 0 < m["distill_loss_after"] < m["distill_loss_before"]


def test_seeded_data_order_ignores_the_global_rng(bert_dir, student_tok, train_file):  # noqa: F811
    cfg = config(train_file, max_steps=6)
    a, _ = Distill(cfg).apply(make_ctx(bert_dir, student_tok, seed=1), {})
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    ctx = make_ctx(bert_dir, student_tok, seed=1)  # loading the fixture draws from the global RNG; the stage must not
    state = torch.random.get_rng_state()
    b, _ = Distill(cfg).apply(ctx, {})
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is left untouched
    c, _ = Distill(cfg).apply(make_ctx(bert_dir, student_tok, seed=2), {})
    sa, sb, sc = _state(a), _state(b), _state(c)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    emb = _emb_name(a)
    assert not torch.equal(sa[emb], sc[emb])


# ------------------------------------------------------------------------------------------ cache


def test_a_cache_hit_returns_the_same_weights(bert_dir, student_tok, train_file, tmp_path):  # noqa: F811
    cfg = config(train_file, max_steps=4)
    key = {"init": "overlap", "seed": 1}
    a, ra = Distill(cfg).apply(make_ctx(bert_dir, student_tok), {}, cache_key=key, cache_root=tmp_path / "cache")
    b, rb = Distill(cfg).apply(make_ctx(bert_dir, student_tok), {}, cache_key=key, cache_root=tmp_path / "cache")
    assert ra.info["cache"]["hit"] is False and rb.info["cache"]["hit"] is True
    assert ra.info["cache"]["key"] == rb.info["cache"]["key"]
    sa, sb = _state(a), _state(b)
    assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert rb.metrics == ra.metrics and rb.curves["loss"] == [tuple(p) for p in ra.curves["loss"]]
    # the key follows the training text's content (same path), the seed and the teacher
    ctx = make_ctx(bert_dir, student_tok, model=a)
    from tasks.distill import teacher_identity

    teacher = teacher_identity(ctx)
    k1 = distill_cache_key(key, cfg, teacher=teacher, data_files=[train_file], seed=1, languages=["xx"])
    assert k1 == ra.info["cache"]["key"]
    train_file.write_text(train_file.read_text() + "one more line\n")
    assert distill_cache_key(key, cfg, teacher=teacher, data_files=[train_file], seed=1, languages=["xx"]) != k1
    assert distill_cache_key(key, cfg, teacher={**teacher, "weights": "x"}, data_files=[train_file], seed=1,
                             languages=["xx"]) != distill_cache_key(key, cfg, teacher=teacher, data_files=[train_file],
                                                                    seed=1, languages=["xx"])


# ------------------------------------------------------------------------------------------ errors


def test_errors_name_the_field(bert_dir, student_tok, train_file, tmp_path):  # noqa: F811
    ctx = make_ctx(bert_dir, student_tok)
    no_teacher = TaskContext(model=ctx.model, tokenizer=student_tok, languages=["xx"], seed=1, progress=False)
    with pytest.raises(ValueError, match=r"^distill: .*source_model"):
        Distill(config(train_file)).apply(no_teacher, {})
    with pytest.raises(FileNotFoundError, match=r"^distill: config 'train_file' .*missing-xx\.txt"):
        Distill(config(tmp_path / "missing-{lang}.txt")).apply(ctx, {})
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(ValueError, match=r"^distill: config 'train_file': .*empty\.txt has 0 non-empty"):
        Distill(config(tmp_path / "empty.txt")).apply(ctx, {})
    no_world = TaskContext(model=ctx.model, tokenizer=student_tok, languages=["xx"], seed=1, progress=False,
                           source_model=ctx.source_model, source_tokenizer=ctx.source_tokenizer)
    with pytest.raises(ValueError, match="distill: set config 'train_file'"):
        Distill(DistillConfig()).apply(no_world, {})
    for field, value in [("loss", "l1"), ("train", "head"), ("pooling", "max"), ("max_steps", 0), ("learning_rate", 0.0),
                         ("warmup_ratio", 1.0), ("max_length", 2), ("held_out_lines", 0), ("lr_schedule", "cosine")]:
        with pytest.raises(ValueError, match=rf"^distill: config '{field}' must be"):
            DistillConfig(**{field: value})


def test_a_language_encoded_model_is_refused(bert_dir, student_tok, train_file):  # noqa: F811
    ctx = make_ctx(bert_dir, student_tok)
    ctx.encoding = type("Enc", (), {"registry_name": "xlp"})()
    with pytest.raises(ValueError, match="distill: language-encoded models are not supported"):
        Distill(config(train_file)).apply(ctx, {})


# ------------------------------------------------------------------------------------ registry, trial


def test_registered_and_the_packaged_config_validates():
    from harness import registry
    from harness.cli import CONFIG_DIR
    from harness.run.config import load_experiment

    entry = registry.get("stage", "distill")
    assert entry.cls is Distill and not Distill.needs_lm_head
    trials = load_experiment(CONFIG_DIR / "real-small-distill.yaml").trials()
    assert len(trials) == 5 * 4 * 2 * 5
    assert {t.stages[0].name for t in trials} == {"distill"}
    assert {t.method.name for t in trials} == {"random", "overlap", "focus", "wechsel", "tiktotok"}


def test_a_trial_distills_a_model_without_an_mlm_head(tmp_path, bert_dir):  # noqa: F811
    from harness.run.runner import model_requirements, run_trial

    (tmp_path / "test.txt").write_text("\n".join(XX) + "\n")
    task = {"name": "teacher-agreement", "config": {"eval_file": str(tmp_path / "test.txt")}}
    stage = {"name": "distill", "config": {"train_file": str(tmp_path / "train.txt"), "held_out_lines": 8, "max_steps": 3,
                                           "batch_size": 4}}
    (spec,) = _experiment(tmp_path, str(bert_dir), task, stages=[stage])
    assert model_requirements(spec) == ("encoder", None)
    rec = run_trial(spec, progress=False)
    (info,) = rec.to_json()["stages"].values()
    assert info["counts"]["xx"]["steps"] == 3 and info["info"]["cache"]["hit"] is False
    assert np.isfinite(info["metrics"]["xx"]["distill_loss_after"]) and 0 <= rec.metrics["xx"]["cosine"] <= 1
