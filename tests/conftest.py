"""Shared fixtures: an offline environment, a per-session cache, the tiny world and a tiny source model.

Everything is built locally in seconds: no network, no GPU. Hub names fail fast (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

# The benchmarks (not an installed package) are importable as ``benchmarks.*``; appended, so the
# installed tokxfer still wins over the checkout (tox tests the installed package).
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

# Before transformers/datasets are imported anywhere: offline, quiet, private caches.
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="tokxfer-tests-"))
# A session's caches hold fastText models of a few hundred MB each: removed when the process exits
# (each xdist worker has its own), unless TOKXFER_KEEP_TEST_TMP is set for a post-mortem.
if not os.environ.get("TOKXFER_KEEP_TEST_TMP"):
    atexit.register(shutil.rmtree, _SESSION_TMP, ignore_errors=True)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HOME"] = str(_SESSION_TMP / "hf_home")
os.environ["TOKXFER_CACHE"] = str(_SESSION_TMP / "cache")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# `tokxfer run`/`quickstart` run trials in one worker process per core by default; the suite's in-process
# calls of main() run them in the test's process (xdist already has one per core), tests of the workers ask
os.environ["TOKXFER_WORKERS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # xdist runs one worker per core


def reference_module(name: str):
    """Import a reference package (``deepfocus``, ``wechsel``'s helpers) for a parity test.

    Outside CI a missing package skips the test; under CI (``CI`` set) tox installs them, so a
    missing one fails instead of letting the parity checks pass by skipping.
    """
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name)


@pytest.fixture(scope="session")
def tiny_world() -> Path:
    """The ``tiny`` built-in world (built once per test session)."""
    from harness.world import build_world

    return Path(build_world(size="tiny", seed=0))


@pytest.fixture(scope="session")
def tiny_pretrain_overrides() -> dict:
    """``source.pretrain`` overrides giving a hidden-size-16 source model in seconds."""
    import dataclasses

    from harness.world.pretrain import PretrainConfig

    tiny = PretrainConfig.tiny()
    return {k: v for k, v in dataclasses.asdict(tiny).items() if k != "kind"}


@pytest.fixture(scope="session")
def tiny_source(tiny_world, tiny_pretrain_overrides) -> Path:
    """A tiny pretrained MLM source model directory (with its tokenizer) on the tiny world."""
    from harness.registry import build_config
    from harness.world.pretrain import PretrainConfig, pretrained_source

    cfg = build_config(PretrainConfig, {"kind": "mlm", **tiny_pretrain_overrides})
    return Path(pretrained_source(tiny_world, kind="mlm", config=cfg, progress=False))


@pytest.fixture()
def runs_dir(tmp_path) -> Path:
    d = tmp_path / "runs"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def tiny_helper(tiny_world, tiny_pretrain_overrides) -> Path:
    """A helper model in the target vocabulary (CLP's helper, OMP's donor): a tiny MLM that the harness
    pretrains on the tiny world's ``near`` text (``targets[].helper_model: world:mlm``) with the
    unigram-300 tokenizer the method tests train for ``near`` — the same vocabulary."""
    from harness.run.config import SourceSpec, TargetSpec, TokenizerSpec
    from harness.run.resources import helper_model_dir
    from harness.world import World

    target = TargetSpec("near", tokenizer=TokenizerSpec(algorithm="unigram", vocab_size=300), helper_model="world:mlm")
    return helper_model_dir(target, World(tiny_world), SourceSpec(pretrain=tiny_pretrain_overrides), progress=False)


@pytest.fixture(scope="session")
def near_transfer(tiny_world, tiny_source, tiny_helper, tmp_path_factory) -> dict:
    """The tiny source → ``near`` (unigram 300) transfer with a helper model, for the anchor methods' tests.

    ``inputs`` (a :class:`~harness.protocols.TransferInputs` with the target corpus, the helper model and a
    fresh cache), ``helper`` (the helper's input embeddings, float64, ids = the target's), ``model_dir``.
    """
    from transformers import AutoModel, AutoModelForMaskedLM

    from harness.protocols import TransferInputs
    from harness.tokenizers import load_tokenizer, train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    src_model = AutoModelForMaskedLM.from_pretrained(tiny_source)
    tgt_tok = train_tokenizer([w.text("near", "train")], "unigram", 300, cache_dir=tmp_path_factory.mktemp("tok"))
    inputs = TransferInputs(
        source_tokenizer=load_tokenizer(str(tiny_source)), target_tokenizer=tgt_tok,
        source_embeddings=src_model.get_input_embeddings().weight.detach().float().clone(),
        target_corpus=w.text("near", "train"), helper_model=tiny_helper, cache_dir=tmp_path_factory.mktemp("cache"),
    )
    assert load_tokenizer(tiny_helper).get_vocab() == tgt_tok.get_vocab()  # the world helper: the target vocabulary
    helper = AutoModel.from_pretrained(tiny_helper).get_input_embeddings().weight.detach().double().numpy()
    return {"inputs": inputs, "helper": helper, "model_dir": tiny_source}
