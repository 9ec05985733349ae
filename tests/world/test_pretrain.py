"""Built-in source models (harness/world/pretrain.py) on a stub world and, when it exists, the tiny world."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer, GPT2LMHeadModel, RobertaForMaskedLM

import harness.world
from harness.cache import cache_root
from harness.world import pretrain as pt
from harness.world import pretrain_data as pdata
from harness.world.pretrain import PretrainConfig, pretrain_on_files, pretrained_source


def _sentences(seed: int, n: int, suffix: str = "") -> list[str]:
    """Sentences from a tiny grammar over a pseudo-word lexicon: learnable, and rich enough for a
    200-piece tokenizer."""
    lex = random.Random(7)  # one lexicon for every language; ``suffix`` makes the "near" variants
    syl = list("abcdefghijklmnoprstuvyz") + ["ch", "sh", "th", "ng"]

    def words(k: int) -> list[str]:
        return ["".join(lex.choice(syl) for _ in range(lex.randint(3, 7))) + suffix for _ in range(k)]

    nouns, verbs, adjs = words(200), words(60), words(60)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        subj = f"the {rng.choice(adjs)} {rng.choice(nouns)}" if rng.random() < 0.5 else f"the {rng.choice(nouns)}"
        obj = f"a {rng.choice(nouns)}"
        tail = f" in the {rng.choice(nouns)}" if rng.random() < 0.3 else ""
        out.append(f"{subj.capitalize()} {rng.choice(verbs)} {obj}{tail} {rng.randint(1, 99)} times.")
    return out


class StubWorld:
    """The part of ``harness.world.World`` that pretraining uses (CONTRACTS.md, "World")."""

    languages = ["src", "near", "far"]
    source_language = "src"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def text(self, lang: str, split: str) -> Path:
        p = self.path / lang / f"{split}.txt"
        if not p.is_file():
            raise FileNotFoundError(p)
        return p


def make_stub_world(root: Path) -> Path:
    for i, (lang, suffix) in enumerate([("src", ""), ("near", "o"), ("far", "ku")]):
        (root / lang).mkdir(parents=True)
        (root / lang / "train.txt").write_text("\n".join(_sentences(i, 800, suffix)) + "\n", encoding="utf-8")
        (root / lang / "dev.txt").write_text("\n".join(_sentences(100 + i, 60, suffix)) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(harness.world, "World", StubWorld, raising=False)
    return make_stub_world(tmp_path / "world")


def _info(path: Path) -> dict:
    return json.loads((path / pt.INFO_FILE).read_text())


def _state(path: Path, cls: type = AutoModelForMaskedLM) -> dict[str, torch.Tensor]:
    return cls.from_pretrained(path).state_dict()


def test_tiny_mlm_loads_and_learns(world: Path) -> None:
    cfg = PretrainConfig.tiny()
    path = pretrained_source(world, config=cfg, progress=False)
    assert path.parent == cache_root() / "sources"
    model = AutoModelForMaskedLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert isinstance(model, RobertaForMaskedLM)
    assert model.config.max_position_embeddings == cfg.max_len + 2 and tok.model_max_length == cfg.max_len
    assert model.config.pad_token_id == tok.pad_token_id == 1
    assert (model.config.bos_token_id, model.config.eos_token_id) == (tok.bos_token_id, tok.eos_token_id) == (0, 2)
    assert model.config.vocab_size == len(tok)
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.config.hidden_dropout_prob == cfg.saved_dropout  # what fine-tuning will use
    info = _info(path)
    curve = [v for _, v in info["loss_curve"]]
    assert curve[-1] < curve[0] - 0.3, curve
    assert info["final_loss"] == curve[-1] and info["loss_curve"][-1][0] == cfg.steps
    assert len(info["dev_curve"]) == cfg.eval_points and info["dev_loss"] < 6.0
    assert info["config"] == cfg.to_dict() and info["tokenizer"]["algorithm"] == "unigram"
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    # the saved model predicts: MLM loss on a training sentence is finite and below uniform
    enc = tok(_sentences(0, 1)[0], return_tensors="pt", truncation=True)
    labels = enc["input_ids"].clone()
    with torch.no_grad():
        loss = model(**enc, labels=labels).loss
    assert torch.isfinite(loss) and float(loss) < torch.log(torch.tensor(float(len(tok))))


def test_deterministic_despite_global_rng(world: Path, tmp_path: Path) -> None:
    cfg = PretrainConfig.tiny(seed=3)
    torch.manual_seed(1)
    a = pretrained_source(world, config=cfg, cache_dir=tmp_path / "c1", progress=False)
    state_before = torch.random.get_rng_state()
    torch.manual_seed(12345)
    torch.rand(1000)
    state_disturbed = torch.random.get_rng_state()
    b = pretrained_source(world, config=cfg, cache_dir=tmp_path / "c2", progress=False)
    assert torch.equal(torch.random.get_rng_state(), state_disturbed)  # the caller's RNG is left alone
    assert not torch.equal(state_before, state_disturbed)
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert _info(a)["loss_curve"] == _info(b)["loss_curve"]
    # another seed gives other weights
    c = pretrained_source(world, config=dataclasses.replace(cfg, seed=4), cache_dir=tmp_path / "c1", progress=False)
    sc = _state(c)
    assert not torch.equal(
        sa["roberta.embeddings.word_embeddings.weight"], sc["roberta.embeddings.word_embeddings.weight"]
    )


def test_second_call_is_a_cache_hit(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = PretrainConfig.tiny()
    first = pretrained_source(world, config=cfg, progress=False)

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("pretrained again on a cache hit")

    monkeypatch.setattr(pt, "_pretrain_into", boom)
    assert pretrained_source(world, config=cfg, progress=False) == first
    assert pretrained_source(world, "mlm", cfg, progress=False) == first
    with pytest.raises(AssertionError, match="pretrained again"):  # a changed config is a miss
        pretrained_source(world, config=dataclasses.replace(cfg, steps=31), progress=False)
    with pytest.raises(AssertionError, match="pretrained again"):  # so is changed text
        with open(world / "src" / "train.txt", "a") as f:
            f.write("One more sentence.\n")
        pretrained_source(world, config=cfg, progress=False)


def test_tiny_clm(world: Path) -> None:
    cfg = PretrainConfig.tiny(kind="clm")
    path = pretrained_source(world, "clm", cfg, progress=False)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert isinstance(model, GPT2LMHeadModel)
    assert model.config.n_positions == cfg.max_len and model.config.n_embd == 16
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    curve = [v for _, v in _info(path)["loss_curve"]]
    assert curve[-1] < curve[0] - 0.3, curve
    assert pretrained_source(world, config=cfg, progress=False) == path  # kind taken from the config


def test_progress_bar_and_extra_languages(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = PretrainConfig.tiny(steps=5)
    plain = pretrained_source(world, config=base, progress=True)
    mixed = pretrained_source(world, config=dataclasses.replace(base, extra_languages=("near",)), progress=False)
    assert plain != mixed
    assert "pretraining mlm source" in capsys.readouterr().out
    tok = AutoTokenizer.from_pretrained(mixed)
    assert any(t.endswith("o") and t.startswith("▁") and len(t) > 4 for t in tok.get_vocab())  # "near" words seen
    assert _info(mixed)["train_tokens"] > _info(plain)["train_tokens"]
    with pytest.raises(ValueError, match=r"'klingon'.*choose from \['near', 'far'\]"):
        pretrained_source(world, config=dataclasses.replace(base, extra_languages=("klingon",)), progress=False)


def test_pretrain_on_files(world: Path, tmp_path: Path) -> None:
    path = pretrain_on_files([world / "src" / "train.txt"], PretrainConfig.tiny(steps=5), progress=False,
                             cache_dir=tmp_path / "c")  # fmt: skip
    assert _info(path)["dev_loss"] is None and path.parent == tmp_path / "c" / "sources"
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        pretrain_on_files([tmp_path / "missing.txt"], PretrainConfig.tiny())
    with pytest.raises(ValueError, match="extra_languages"):
        pretrain_on_files([world / "src" / "train.txt"], PretrainConfig.tiny(extra_languages=("near",)))


def test_too_little_text(world: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("\n".join(_sentences(0, 300)) + "\n")
    with pytest.raises(ValueError, match=r"fewer than one block of max_len=100000"):
        pretrain_on_files([short], PretrainConfig.tiny(max_len=100_000), progress=False)


def test_config_validation_names_the_field(world: Path) -> None:
    for kwargs, field in [
        ({"kind": "seq2seq"}, "kind"), ({"num_heads": 3}, "num_heads"), ({"steps": 0}, "steps"),
        ({"lr": 0.0}, "lr"), ({"warmup_ratio": 1.0}, "warmup_ratio"), ({"mlm_probability": 0.0}, "mlm_probability"),
        ({"tokenizer_algorithm": "spm"}, "tokenizer_algorithm"), ({"extra_languages": ("near", "near")}, "extra_languages"),
        ({"max_len": 4}, "max_len"), ({"dropout": 1.0}, "dropout"), ({"extra_fraction": 0.0}, "extra_fraction"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=f"PretrainConfig.{field}"):
            PretrainConfig(**kwargs)
    assert PretrainConfig(lr=1).lr == 1.0 and isinstance(PretrainConfig(lr=1).lr, float)
    assert PretrainConfig(extra_languages=["near"]).extra_languages == ("near",)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="conflicts with config.kind"):
        pretrained_source(world, "clm", PretrainConfig.tiny(), progress=False)


def test_mask_tokens_80_10_10() -> None:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (64, 128), generator=g)
    ids[:, 0], ids[:, -1] = 0, 2
    kwargs = dict(
        special_ids=torch.tensor([0, 1, 2, 3, 4]), regular_ids=torch.arange(5, 1000), mask_id=4, probability=0.15
    )
    inputs, labels = pdata.mask_tokens(ids, generator=torch.Generator().manual_seed(1), **kwargs)
    inputs2, labels2 = pdata.mask_tokens(ids, generator=torch.Generator().manual_seed(1), **kwargs)
    assert torch.equal(inputs, inputs2) and torch.equal(labels, labels2)
    sel = labels != -100
    assert not sel[:, 0].any() and not sel[:, -1].any()  # specials never selected
    assert torch.equal(labels[sel], ids[sel]) and torch.equal(inputs[~sel], ids[~sel])
    frac = sel.float().mean().item()
    assert 0.13 < frac < 0.17
    masked = (inputs[sel] == 4).float().mean().item()
    kept = (inputs[sel] == ids[sel]).float().mean().item()
    assert 0.76 < masked < 0.84 and 0.07 < kept < 0.14
    assert int((inputs[sel] < 5).sum()) == int((inputs[sel] == 4).sum())  # random replacements are regular tokens


def test_on_the_tiny_world_when_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(harness.world, "build_world"):
        pytest.skip("harness.world.build_world is not there yet")
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    world_dir = harness.world.build_world(size="tiny", seed=0)
    path = pretrained_source(world_dir, config=PretrainConfig.tiny(), progress=False)
    info = _info(path)
    assert info["loss_curve"][-1][1] < info["loss_curve"][0][1]
    assert isinstance(AutoModelForMaskedLM.from_pretrained(path), RobertaForMaskedLM)
