"""The README's "your own method" walkthrough runs as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness import registry

REPO = Path(__file__).resolve().parents[2]  # the checkout (tox tests an installed package)
EXAMPLE = REPO / "docs" / "examples" / "my_method.py"


def test_readme_example_method_registers_and_satisfies_the_contract(tiny_world, tiny_source):
    from transformers import AutoModelForMaskedLM

    from harness import seeding
    from harness.protocols import TransferInputs
    from harness.tokenizers import load_tokenizer, train_tokenizer
    from harness.world import World

    readme = (REPO / "README.md").read_text()
    code = [line for line in EXAMPLE.read_text().splitlines()[1:] if line.strip()]
    assert code and all(line in readme for line in code), "README walkthrough and docs/examples/my_method.py differ"
    registry.load_plugin(EXAMPLE)
    entry = registry.get("method", "overlap-mean")
    w = World(tiny_world)
    src = load_tokenizer(str(tiny_source))
    tgt = train_tokenizer([w.text("near", "train")], "unigram", 300)
    emb = AutoModelForMaskedLM.from_pretrained(tiny_source).get_input_embeddings().weight.detach()
    res = entry.make().initialize(TransferInputs(src, tgt, emb), seeding.numpy_rng(1, "t"))
    m = res.mapping
    assert m.n_target == len(tgt) and m.counts()["copied"] > 0 and m.counts()["combined"] > 0
    sums = np.add.reduceat(m.weights, m.indptr[:-1])
    assert np.allclose(sums, 1.0, atol=1e-5)


def test_vs_baselines_preset_needs_and_accepts_the_plugin(capsys):
    """The "my method vs all baselines" preset names the README's method and is valid with its plugin."""
    from harness.cli import CONFIG_DIR, main

    preset = str(CONFIG_DIR / "vs-baselines.yaml")
    assert main(["validate", preset, "--plugin", str(EXAMPLE)]) == 0
    assert "54 trials" in capsys.readouterr().out


def test_a_plugin_file_already_imported_as_a_module_loads_as_a_no_op(tmp_path, monkeypatch):
    """A plugin file imported from ``sys.path`` (as a test or another package may do) registered its
    names once; ``--plugin`` with the same file must not collide with itself."""
    import importlib
    import uuid

    from harness import registry

    name = f"plug_{uuid.uuid4().hex[:8]}"
    plugin = tmp_path / f"{name}.py"
    plugin.write_text(
        "from dataclasses import dataclass\nfrom harness.registry import register_method\n\n"
        "@dataclass(frozen=True)\nclass C:\n    pass\n\n"
        f"@register_method('{name}', config=C, description='probe')\nclass M:\n"
        "    def __init__(self, config):\n        self.config = config\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(name)
    registry.load_plugin(plugin)  # the same file: nothing new to register, no error
    assert registry.get("method", name).origin == f"{name}.M"
    other = tmp_path / "other" / f"{name}.py"  # another file registering the same name still collides
    other.parent.mkdir()
    other.write_text(plugin.read_text())
    with pytest.raises(registry.PluginError, match="already registered"):
        registry.load_plugin(other)
