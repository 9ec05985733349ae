"""Registry, config, seeding, records and surgery: the machinery every trial goes through."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import registry, seeding
from harness.model import surgery
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, TokenMapping
from harness.run import config as hconfig
from harness.run import records

# ---------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class _Cfg:
    alpha: float = 1.0
    steps: int = 3


def test_registry_rejects_duplicates_and_suggests_names():
    @registry.register_method("test-dup-method", config=_Cfg, description="x")
    class A:
        def __init__(self, config):
            self.config = config

    with pytest.raises(registry.RegistryError, match="already registered"):

        @registry.register_method("test-dup-method", config=_Cfg)
        class B:  # noqa: F811
            pass

    with pytest.raises(registry.RegistryError, match="did you mean 'test-dup-method'"):
        registry.get("method", "test-dup-methd")


def test_builtins_registered_without_importing_them():
    names = registry.names("method")
    for n in ("random", "random-mapping", "overlap", "mean-of-pieces"):
        assert n in names
    assert "mlm-at-init" in registry.names("task")
    assert "none" in registry.names("encoding")


def test_build_config_unknown_key_and_coercion():
    cfg = registry.build_config(_Cfg, {"alpha": 2, "steps": 5})
    assert cfg.alpha == 2.0 and isinstance(cfg.alpha, float)
    with pytest.raises(ValueError, match=r"unknown key 'stesp'.*did you mean 'steps'"):
        registry.build_config(_Cfg, {"stesp": 1}, where="file.yaml: methods.0.config")


def test_plugin_file_registers(tmp_path):
    plugin = tmp_path / "my_method.py"
    plugin.write_text(
        "from dataclasses import dataclass\n"
        "from harness.registry import register_method\n"
        "@dataclass(frozen=True)\nclass C:\n    pass\n"
        "@register_method('plugin-test-method', config=C, description='from a plugin file')\n"
        "class M:\n    def __init__(self, config): pass\n    def initialize(self, inputs, rng): pass\n"
    )
    registry.load_plugin(plugin)
    assert registry.get("method", "plugin-test-method").description == "from a plugin file"


# ---------------------------------------------------------------- seeding


def test_derived_seeds_independent_of_global_rng():
    a = seeding.numpy_rng(3, "init", "x").normal(size=4)
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    b = seeding.numpy_rng(3, "init", "x").normal(size=4)
    assert np.array_equal(a, b)
    assert seeding.derive(3, "init", "x") != seeding.derive(3, "init", "y")
    assert seeding.derive(3, "init") != seeding.derive(4, "init")


def test_seeded_globals_restores_state():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with seeding.seeded_globals(1, "model"):
        inside = torch.rand(2)
    after = torch.rand(3)
    assert torch.equal(after, expected)
    with seeding.seeded_globals(1, "model"):
        assert torch.equal(torch.rand(2), inside)


# ---------------------------------------------------------------- config

QUICK = """
name: demo
world: {size: tiny, seed: 0}
targets: [{language: near, tokenizer: {vocab_size: 300}}]
methods: [random, {id: ov, name: overlap}]
tasks: [{name: mlm-at-init, config: {max_eval_examples: 10}}]
seeds: [1, 2]
"""


def test_experiment_expands_and_ids_are_stable(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text(QUICK)
    cfg = hconfig.load_experiment(p)
    trials = cfg.trials()
    assert len(trials) == 4
    assert len({t.trial_id for t in trials}) == 4
    again = hconfig.load_experiment(p).trials()
    assert [t.trial_id for t in trials] == [t.trial_id for t in again]
    # the resolved config carries every default of the task config
    assert trials[0].resolved()["task"]["config"]["max_eval_examples"] == 10
    assert "mask_seed" in trials[0].resolved()["task"]["config"]


def test_overrides(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text(QUICK)
    cfg = hconfig.load_experiment(p, ["seeds=[7]", "tasks.0.config.max_eval_examples=3", "world.size=small"])
    assert cfg.seeds == (7,)
    assert cfg.tasks[0].config["max_eval_examples"] == 3
    assert cfg.world.size == "small"
    with pytest.raises(hconfig.ConfigError, match="unknown key 'sedes'"):
        hconfig.load_experiment(p, ["sedes=[1]"])


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"methods": ["randm"]}, r"methods\.0: unknown method 'randm'.*did you mean 'random'"),
        ({"tasks": [{"name": "mlm-at-init", "config": {"bogus": 1}}]}, r"tasks\.0\.config: unknown key 'bogus'"),
        ({"seeds": "x"}, r"seeds: expected a non-empty list of integers"),
        ({"extra_key": 1}, r"unknown key 'extra_key'"),
        ({"world": {"size": "huge"}}, r"world.size: expected 'tiny' or 'small'"),
        ({"methods": ["random", "random"]}, r"duplicate id 'random'"),
    ],
)
def test_config_errors_name_file_and_key(tmp_path, patch, message):
    import yaml

    raw = yaml.safe_load(QUICK)
    raw.update(patch)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(hconfig.ConfigError, match=message) as ei:
        hconfig.load_experiment(p)
    assert str(p) in str(ei.value)


def test_packaged_configs_validate():
    from harness.cli import CONFIG_DIR

    medium = sorted((CONFIG_DIR / "medium").glob("*.yaml"))  # the GPU presets, never run on CI
    assert medium
    files = sorted(CONFIG_DIR.glob("*.yaml")) + medium
    repo = Path(__file__).resolve().parents[2]
    for f in files:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# tokxfer"), f"{f.name} must start with a comment naming its command"
        words = first.split()
        if "--plugin" in words:  # a preset for the user's own method names the plugin it needs
            registry.load_plugin(repo / words[words.index("--plugin") + 1])
        assert hconfig.load_experiment(f).trials()


def _task_trial(tmp_path, task: dict, name: str = "e.yaml"):
    import yaml

    raw = yaml.safe_load(QUICK)
    raw["tasks"] = [task]
    p = tmp_path / name
    p.write_text(yaml.safe_dump(raw))
    return hconfig.load_experiment(p).trials()[0]


def test_train_block_nested_and_flat_are_one_config(tmp_path):
    from tasks.loop import TrainConfig

    nested = _task_trial(tmp_path, {"name": "xnli", "config": {"train": {"learning_rate": 2e-4, "epochs": 3}}})
    flat = _task_trial(tmp_path, {"name": "xnli", "config": {"learning_rate": 2e-4, "epochs": 3}}, "flat.yaml")
    assert nested.trial_id == flat.trial_id and nested.resolved() == flat.resolved()
    stored = nested.resolved()["task"]["config"]
    # stored flat (the layout trial ids were defined on): the FINETUNE_KEYS always, others when set
    assert "train" not in stored and stored["learning_rate"] == 2e-4 and stored["epochs"] == 3
    assert stored["batch_size"] == 128  # the block kept XNLI's own default for a key it did not name
    assert "lr_schedule" not in stored and "adam_beta2" not in stored
    cfg = hconfig.component_config("task", nested.task)
    assert isinstance(cfg.train, TrainConfig) and (cfg.train.learning_rate, cfg.train.batch_size) == (2e-4, 128)
    # a non-default value of a key outside FINETUNE_KEYS is stored, and changes the trial id
    other = _task_trial(tmp_path, {"name": "xnli", "config": {"train": {"learning_rate": 2e-4, "epochs": 3,
                                                                        "lr_schedule": "constant"}}}, "o.yaml")  # fmt: skip
    assert other.resolved()["task"]["config"]["lr_schedule"] == "constant" and other.trial_id != nested.trial_id


def test_component_config_validated_once_and_rebuilt_equal_after_pickling(tmp_path, monkeypatch):
    import pickle

    trial = _task_trial(tmp_path, {"name": "xnli", "config": {"train": {"epochs": 3}, "max_length": 64}})
    built = hconfig.component_config("task", trial.task)
    calls = []
    monkeypatch.setattr(registry, "build_config", lambda *a, **k: calls.append(a))
    assert hconfig.component_config("task", trial.task) is built and not calls  # no second validation
    monkeypatch.undo()
    sent = pickle.loads(pickle.dumps(trial))  # what an executor hands another process
    assert sent.task.built is None and sent.trial_id == trial.trial_id and sent.task == trial.task
    assert hconfig.component_config("task", sent.task) == built


@pytest.mark.parametrize(
    "config, message",
    [
        ({"epochs": 2, "train": {"epochs": 3}}, r"tasks\.0\.config: 'epochs' is given both at the top level and in 'train'"),
        ({"train": {"learnin_rate": 1e-3}}, r"tasks\.0\.config\.train: unknown key 'learnin_rate'.*did you mean 'learning_rate'"),
        ({"train": {"epochs": 0}}, r"tasks\.0\.config\.train: epochs must be >= 1"),
        ({"train": [1, 2]}, r"tasks\.0\.config\.train: expected a mapping"),
    ],
)
def test_train_block_errors_name_the_key(tmp_path, config, message):
    with pytest.raises(hconfig.ConfigError, match=message):
        _task_trial(tmp_path, {"name": "xnli", "config": config})


def test_every_finetuning_task_has_one_train_block_and_no_copied_fields():
    """The training keys live in one TrainConfig per task, never as same-named fields of the task
    config (which a renamed field would let fall back to a default silently)."""
    from tasks.loop import FINETUNE_KEYS, TrainConfig

    train_names = {f.name for f in dataclasses.fields(TrainConfig)}
    for name in ("xnli", "qa", "ner", "iwslt-bleu"):
        cls = registry.get("task", name).config_cls
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert isinstance(registry.field_default(fields["train"]), TrainConfig), name
        assert not (set(fields) & train_names), (name, set(fields) & train_names)
        always = registry.flat_blocks(cls)["train"]
        assert set(FINETUNE_KEYS) <= set(always) <= train_names, name


def test_packaged_and_committed_trial_ids_survive_the_train_block():
    """Every committed record's stored task config rebuilds to the same stored form (so its trial id,
    the hash of that form, is what the config files now produce)."""
    repo = Path(__file__).resolve().parents[2]
    files = sorted((repo / "leaderboards" / "records").glob("*/records/*.json"))
    assert len(files) > 100
    checked = 0
    for f in files:
        task = json.loads(f.read_text())["config"]["task"]
        if task["name"] not in ("xnli", "qa", "ner", "iwslt-bleu"):
            continue
        cfg = registry.build_config(registry.get("task", task["name"]).config_cls, task["config"])
        assert json.loads(json.dumps(hconfig.resolved_fields(cfg))) == task["config"], f
        checked += 1
    assert checked > 50


# ---------------------------------------------------------------- records


def test_record_roundtrip_and_atomicity(tmp_path, monkeypatch):
    rec = {"trial_id": "t1", "status": "ok", "metrics": {"near": {"loss": 1.5}}}
    p = records.write_record(tmp_path, rec)
    back = records.load_record(p)
    assert back["metrics"] == rec["metrics"] and back["schema_version"] == records.SCHEMA_VERSION
    # a crash while writing leaves the old record intact and no temp file behind
    import os

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        records.write_record(tmp_path, dict(rec, metrics={"near": {"loss": 9.9}}))
    monkeypatch.undo()
    assert records.load_record(p)["metrics"]["near"]["loss"] == 1.5
    assert [x.name for x in tmp_path.iterdir()] == ["t1.json"]


def test_truncated_and_newer_records_rejected(tmp_path):
    p = tmp_path / "a.json"
    p.write_text('{"trial_id": "a", "status": "ok", "schema_ver')
    with pytest.raises(records.RecordError, match=r"a\.json: truncated or corrupt"):
        records.load_record(p)
    p.write_text(json.dumps({"trial_id": "a", "status": "ok", "schema_version": records.SCHEMA_VERSION + 1}))
    with pytest.raises(records.RecordError, match="newer than this tokxfer"):
        records.load_record(p)
    assert records.completed_trial_ids(tmp_path) == set()


def test_old_record_fixtures_keep_loading():
    from pathlib import Path

    fixtures = sorted((Path(__file__).parents[1] / "fixtures" / "records").glob("*.json"))
    assert fixtures, "keep at least one record of every schema version as a fixture"
    for f in fixtures:
        rec = records.load_record(f)
        assert rec["schema_version"] == records.SCHEMA_VERSION
        assert "metrics" in rec


# ---------------------------------------------------------------- surgery


def _tiny_mlm(vocab: int = 12, untied: bool = False):
    from transformers import RobertaConfig, RobertaForMaskedLM

    cfg = RobertaConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=40, pad_token_id=1,
                        tie_word_embeddings=not untied)
    with seeding.seeded_globals(0, "test-model"):
        return RobertaForMaskedLM(cfg)


class _Tok:
    pad_token_id = 1
    bos_token_id = 0
    eos_token_id = 2


@pytest.mark.parametrize("untied", [False, True])
def test_install_maps_input_output_and_bias(untied):
    model = _tiny_mlm(12, untied=untied)
    with torch.no_grad():
        model.get_output_embeddings().bias.copy_(torch.arange(12, dtype=torch.float32))
    E_in = model.get_input_embeddings().weight.detach().clone()
    E_out = model.get_output_embeddings().weight.detach().clone()
    m = TokenMapping.from_coo(
        5, 12, rows=[0, 1, 2, 2, 3], cols=[0, 1, 4, 6, 9], weights=[1, 1, 0.25, 0.75, 1],
        provenance=[SPECIAL, SPECIAL, COMBINED, COPIED, FALLBACK],
    )
    surgery.install(model, InitResult(m, _Tok()), torch.Generator().manual_seed(0))
    W = model.get_input_embeddings().weight
    assert W.shape == (5, 16) and model.config.vocab_size == 5
    assert torch.equal(W[3], E_in[9]) and torch.allclose(W[2], 0.25 * E_in[4] + 0.75 * E_in[6])
    out = model.get_output_embeddings()
    assert out.weight.shape == (5, 16)
    if untied:
        assert out.weight is not W and torch.equal(out.weight[3], E_out[9])
    else:
        assert out.weight is W
    b = out.bias  # the bias the forward pass adds
    bv = b.detach()
    assert bv.shape == (5,) and bv[3].item() == 9.0 and bv[2].item() == pytest.approx(0.25 * 4 + 0.75 * 6)
    assert bv[4].item() == pytest.approx(torch.arange(12.0).mean().item())
    # RobertaLMHead's own ``bias`` is that tensor when tied; untied (transformers 5) it is a separate one,
    # mapped from its own values, so save_pretrained/from_pretrained keeps both
    assert (model.lm_head.bias is b) == (not untied) and model.lm_head.bias.shape == (5,)
    # the model runs with the new vocabulary
    logits = model(input_ids=torch.tensor([[0, 2, 3, 4]])).logits
    assert logits.shape == (1, 4, 5) and torch.isfinite(logits).all()


def test_fallback_rows_follow_source_statistics_and_generator():
    src = torch.randn(500, 8) * 3 + 1
    m = TokenMapping.from_coo(2000, 500, [], [], [], provenance=[FALLBACK] * 2000)
    a = surgery.materialize(m, src, torch.Generator().manual_seed(1))
    b = surgery.materialize(m, src, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert torch.allclose(a.mean(0), src.mean(0), atol=0.3)
    assert torch.allclose(a.std(0), src.std(0), rtol=0.15)


def test_install_rejects_mismatched_mapping():
    model = _tiny_mlm(12)
    m = TokenMapping.from_coo(3, 7, [0, 1, 2], [0, 1, 2], [1, 1, 1], provenance=[COPIED] * 3)
    with pytest.raises(surgery.SurgeryError, match="7 source tokens"):
        surgery.install(model, InitResult(m, _Tok()), torch.Generator())


def test_token_mapping_validation():
    with pytest.raises(ValueError, match="FALLBACK rows must have no entries"):
        TokenMapping.from_coo(1, 2, [0], [1], [1.0], provenance=[FALLBACK])
    with pytest.raises(ValueError, match="has no entries but is not FALLBACK"):
        TokenMapping.from_coo(1, 2, [], [], [], provenance=[COPIED])


# ---------------------------------------------------------------- corpus check


def test_check_corpus_accepts_a_character_split_by_the_chunk_boundary(tmp_path):
    from harness.run.resources import check_corpus

    p = tmp_path / "c.txt"
    p.write_bytes(b"a" * 1_048_575 + "é hello world\n".encode())  # é's two bytes straddle the 1 MiB boundary
    assert check_corpus(p) == p
    # the same at every boundary position of a small chunk size
    p.write_bytes("aé€😀\n".encode() * 3)
    for size in range(1, 9):
        assert check_corpus(p, chunk_size=size) == p


@pytest.mark.parametrize(
    "data, offset, reason",
    [
        (b"a" * 7 + b"\xff" + b"b" * 8, 7, "invalid start byte"),  # last byte of a 4-byte chunk
        (b"abc" + "é".encode() + b"\xff", 5, "invalid start byte"),
        (b"ab\xe2\x82xyz", 2, "invalid continuation byte"),
        (b"hello\xe2\x82", 5, "unexpected end of data"),  # truncated by the end of the file
    ],
)
def test_check_corpus_names_file_and_offset_of_invalid_bytes(tmp_path, data, offset, reason):
    from harness.run.resources import ResourceError, check_corpus

    p = tmp_path / "bad.txt"
    p.write_bytes(data)
    for size in (1, 2, 3, 4, 1 << 20):
        with pytest.raises(ResourceError, match=rf"bad\.txt: not UTF-8 \(invalid byte at offset {offset}: {reason}"):
            check_corpus(p, chunk_size=size)


def test_check_corpus_rejects_empty_file(tmp_path):
    from harness.run.resources import ResourceError, check_corpus

    p = tmp_path / "empty.txt"
    p.write_bytes(b"")
    with pytest.raises(ResourceError, match="empty.txt: corpus is empty"):
        check_corpus(p)
