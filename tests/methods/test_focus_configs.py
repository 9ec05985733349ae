"""The real-data presets of the FOCUS paper's tables (``harness/configs/real/focus-*.yaml``).

* Tables 2-3, replaced vocabulary: "Random + LAPT†" starts from a random *mapping* (footnote 9) and
  trains only the embeddings for an extra 20% of steps; the plain N(mean, std) "Random + LAPT" is run too.
* German trains FOCUS's fastText for 1 epoch, not 3 (App. B, "FastText training"), so German lives in
  experiments of its own (a method's config is per experiment) that the leaderboards include.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness import vocab as _canon
from harness.cli import CONFIG_DIR
from harness.protocols import COPIED, FALLBACK, SPECIAL, TransferInputs
from harness.registry import get
from harness.run.config import load_experiment
from leaderboards.spec import PACKAGED_SPECS, load_spec
from tests.methods.test_focus import SOURCE_LINES, TARGET_LINES, _unigram

REAL = CONFIG_DIR / "real"
FOCUS_CONFIGS = sorted(REAL.glob("focus-*.yaml"))
REPLACED_WITH_BASELINES = ["focus-table2-3", "focus-table2-3-de", "focus-table3-germeval", "focus-table3-masakhaner"]


def _methods(name: str) -> dict:
    return {m.id: m for m in load_experiment(REAL / f"{name}.yaml").methods}


@pytest.mark.parametrize("name", REPLACED_WITH_BASELINES)
def test_random_baselines_of_tables_2_3(name):
    methods = _methods(name)
    dagger = methods["transinner"]
    assert dagger.name == "transinner"
    assert (dagger.config["init"], dagger.config["schedule"], dagger.config["embeddings_only_fraction"]) == (
        "random-mapping", "extra", 0.2)
    assert methods["random"].name == "random"


def test_random_mapping_transinner_starts_from_a_random_mapping():
    src, tgt = _unigram(SOURCE_LINES), _unigram(TARGET_LINES)
    E = torch.randn(len(src), 8, generator=torch.Generator().manual_seed(0))
    method = get("method", "transinner").make({"init": "random-mapping", "schedule": "extra", "embeddings_only_fraction": 0.2})
    res = method.initialize(TransferInputs(src, tgt, E), np.random.default_rng(3))
    m = res.mapping
    regular = [t for t, c in enumerate(_canon.canonical_vocab(tgt)) if c is not None]
    assert all(m.provenance[t] == COPIED for t in regular) and not np.any(m.provenance == FALLBACK)
    rows = [int(m.row(t)[0][0]) for t in regular]
    assert len(set(rows)) == len(rows)  # distinct source rows
    assert not set(rows) & _canon.special_ids(src)
    assert np.sum(m.provenance == SPECIAL) == len(_canon.special_ids(tgt))
    assert res.directives == {"embeddings_only_fraction": 0.2, "embeddings_only_schedule": "extra"}
    plain = get("method", "transinner").make({"schedule": "extra", "embeddings_only_fraction": 0.2})
    assert plain.initialize(TransferInputs(src, tgt, E), np.random.default_rng(3)).mapping.counts()["copied"] == 0
    with pytest.raises(ValueError, match="init"):
        get("method", "transinner").make({"init": "normal"})


def _focus_methods(path: Path):
    cfg = load_experiment(path)
    return cfg, [m for m in cfg.methods if m.name == "focus"]


@pytest.mark.parametrize("path", FOCUS_CONFIGS, ids=[p.stem for p in FOCUS_CONFIGS])
def test_german_focus_fasttext_runs_one_epoch(path):
    cfg, focus = _focus_methods(path)
    langs = {t.language for t in cfg.targets}
    trained = [m for m in focus if m.config["aux"] == "token-fasttext" and not m.config["aux_model_path"]]
    if "de" in langs and trained:
        assert langs == {"de"}, f"{path.name}: German FOCUS needs its own experiment (1 fastText epoch)"
        assert all(m.config["aux_epochs"] == 1 for m in trained), path.name
        assert "App. B" in path.read_text(encoding="utf-8")  # the comment cites the paper
    else:
        assert all(m.config["aux_epochs"] == 3 for m in trained), path.name


def test_every_focus_experiment_is_on_a_leaderboard():
    listed = set()
    for spec_path in sorted((PACKAGED_SPECS / "real").glob("focus-*.yaml")):
        listed |= set(load_spec(spec_path).experiments)
    assert {p.stem for p in FOCUS_CONFIGS} <= listed
    for name in ("focus-table2", "focus-table3"):
        raw = yaml.safe_load((PACKAGED_SPECS / "real" / f"{name}.yaml").read_text(encoding="utf-8"))
        assert {"focus-table2-3-de", "focus-table2-3-extend-de"} <= set(raw["experiments"])
