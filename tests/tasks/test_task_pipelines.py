"""The packaged task experiments (init → LAPT → tasks, perplexity, translation) run end to end
through the runner on the tiny world, with budgets cut to seconds by overrides."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.cli import CONFIG_DIR
from harness.run import records
from harness.run.config import load_experiment
from harness.run.experiment import run_experiment


def _tiny(tiny_pretrain_overrides, n_tasks: int, extra: list[str]) -> list[str]:
    ov = ["world.size=tiny", "source.pretrain=" + json.dumps(tiny_pretrain_overrides),
          "targets.0.tokenizer.vocab_size=300", "methods=[random, overlap]", "seeds=[1]"]
    for i in range(n_tasks):
        ov += [f"tasks.{i}.config.max_train_examples=8", f"tasks.{i}.config.max_eval_examples=8"]
    return ov + extra


@pytest.mark.slow
def test_encoder_pipeline_with_lapt(tmp_path, tiny_source, tiny_pretrain_overrides):
    extra = ["stages.0.config.max_steps=3", "stages.0.config.batch_size=4", "stages.0.config.max_length=32"]
    extra += [f"tasks.{i}.config.train.epochs=1" for i in range(3)]
    cfg = load_experiment(CONFIG_DIR / "tasks-encoder.yaml", _tiny(tiny_pretrain_overrides, 3, extra))
    summary = run_experiment(cfg, tmp_path, progress=False)
    recs = list(records.iter_records(tmp_path / "tasks-encoder"))
    assert summary.failed == 0, [r["error"]["message"] for r in recs if r["status"] != "ok"]
    assert len(recs) == 6
    by_task = {}
    for r in recs:
        by_task.setdefault(r["config"]["task"]["name"], []).append(r)
        assert "lapt" in r["stages"] and any(k.startswith("lapt.") for k in r["curves"])
    assert {m for r in by_task["xnli"] for m in r["metrics"]["near"]} >= {"accuracy"}
    assert all(0 <= r["metrics"]["near"]["accuracy"] <= 1 for r in by_task["xnli"])
    assert all("f1" in r["metrics"]["near"] for r in by_task["ner"] + by_task["qa"])
    # forgetting (tasks/forgetting.py): all three scores on the world's held-out src text, (c) - (b) as the
    # headline, and one number per LAPT run whichever task reused it from the cache
    by_run: dict = {}
    for r in recs:
        fg = r["stages"]["lapt"]["metrics"]["near"]
        assert fg["source_forgetting"] == pytest.approx(fg["source_loss_after"] - fg["source_loss_before"])
        assert fg["source_loss_original"] > 0 and r["stages"]["lapt"]["info"]["forgetting"]["language"] == "src"
        by_run.setdefault((r["config"]["method"]["id"], r["seed"]), set()).add(fg["source_forgetting"])
    assert len(by_run) == 2 and all(len(v) == 1 for v in by_run.values()), by_run


@pytest.mark.slow
def test_decoder_perplexity_pipeline(tmp_path, tiny_pretrain_overrides):
    cfg = load_experiment(CONFIG_DIR / "tasks-decoder.yaml", _tiny(tiny_pretrain_overrides, 0, ["tasks.0.config.max_eval_examples=8"]))
    summary = run_experiment(cfg, tmp_path, progress=False)
    recs = list(records.iter_records(tmp_path / "tasks-decoder"))
    assert summary.failed == 0, [r["error"]["message"] for r in recs if r["status"] != "ok"]
    for r in recs:
        m = r["metrics"]["near"]
        assert m["token_perplexity"] > 1 and m["bits_per_byte"] > 0


@pytest.mark.slow
def test_translation_pipeline(tmp_path, tiny_source, tiny_pretrain_overrides):
    cfg = load_experiment(CONFIG_DIR / "tasks-iwslt.yaml", _tiny(tiny_pretrain_overrides, 1, [
        "tasks.0.config.train.epochs=1", "tasks.0.config.train.warmup_steps=1", "tasks.0.config.target_vocab_size=80"]))
    cfg = dataclasses.replace(cfg, tasks=cfg.tasks[:1])  # the 6k entry; the others are its learning curve's budgets
    summary = run_experiment(cfg, tmp_path, progress=False)
    recs = list(records.iter_records(tmp_path / "tasks-iwslt"))
    assert summary.failed == 0, [r["error"]["message"] for r in recs if r["status"] != "ok"]
    for r in recs:
        assert 0 <= r["metrics"]["near"]["bleu"] <= 100
        assert "signature" in json.dumps(r["task_info"])
