"""The trial runner end to end on the tiny world: records, determinism, resume, failure isolation."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import yaml

from harness.run import records
from harness.run.config import load_experiment, parse_experiment
from harness.run.experiment import run_experiment
from harness.run.runner import execute


def _experiment(tmp_path, tiny_pretrain_overrides, methods=("random", "overlap"), seeds=(1, 2), name="exp"):
    raw = {
        "name": name,
        "world": {"size": "tiny", "seed": 0},
        "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
        "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
        "methods": list(methods),
        "tasks": [{"name": "mlm-at-init", "config": {"max_eval_examples": 16, "batch_size": 8}}],
        "seeds": list(seeds),
    }
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_trial_record_is_complete_and_deterministic(tmp_path, tiny_source, tiny_pretrain_overrides, runs_dir):
    cfg = load_experiment(_experiment(tmp_path, tiny_pretrain_overrides, methods=("overlap",), seeds=(1,)))
    spec = cfg.trials()[0]
    record = execute(spec, str(runs_dir))
    assert record.ok, record.error
    rec = record.to_json()  # what the file holds
    for key in ("schema_version", "tokxfer_version", "git", "trial_id", "config", "metrics", "init", "timings",
                "environment", "started_at", "finished_at"):
        assert rec.get(key) is not None, key
    m = rec["metrics"]["near"]
    assert np.isfinite(m["loss"]) and 0 <= m["accuracy"] <= 1
    assert rec["init"]["counts"]["copied"] > 0
    # the seeds section names the seed of every random source (the tiny source is held at 0)
    assert rec["seeds"] == {"source": 0, "init": 1, "stages": 1, "task": 1}
    # the per-example results lie beside the record, named with their hash, and recompute its metrics
    section = rec["examples"]
    assert section["file"] == f"{spec.trial_id}.examples.npz" and section["metrics"]["near"]["loss"]["reducer"] == "ratio"
    from harness.examples import read_examples

    back = read_examples(runs_dir / "exp" / "records", spec.trial_id, section)
    assert back["near"]["loss"].value() == pytest.approx(m["loss"], rel=1e-9)
    assert "gold_top1" in rec["init"]["diagnostics"]
    from harness.world import GENERATOR_VERSION

    world = rec["revisions"]["world"]
    assert world["generator_version"] == GENERATOR_VERSION and len(world["fingerprint"]) == 12
    on_disk = records.load_record(runs_dir / "exp" / "records" / f"{spec.trial_id}.json")
    assert on_disk["metrics"] == rec["metrics"]
    assert (runs_dir / "exp" / "artifacts" / spec.trial_id / "init_info.json").is_file()
    # same spec, disturbed global RNGs, fresh cache entry for the init → identical metrics
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    rec2 = execute(spec, str(tmp_path / "runs2"))
    assert rec2.metrics == record.metrics
    assert rec2.init_diagnostics == record.init_diagnostics


def test_random_methods_differ_across_seeds(tmp_path, tiny_source, tiny_pretrain_overrides, runs_dir):
    cfg = load_experiment(_experiment(tmp_path, tiny_pretrain_overrides, methods=("random",), seeds=(1, 2)))
    a, b = (execute(s, str(runs_dir)) for s in cfg.trials())
    assert a.metrics["near"]["loss"] != b.metrics["near"]["loss"]


def test_resume_runs_only_missing_trials(tmp_path, tiny_source, tiny_pretrain_overrides, runs_dir):
    cfg = load_experiment(_experiment(tmp_path, tiny_pretrain_overrides))
    specs = cfg.trials()
    # simulate a grid killed after two trials: run those two only
    for s in specs[:2]:
        execute(s, str(runs_dir))
    # plus a half-written record of a third one (a crash mid-write of an older, non-atomic tool):
    # resume stops, naming it, instead of overwriting what may be someone's data
    broken = runs_dir / "exp" / "records" / f"{specs[2].trial_id}.json"
    broken.write_text('{"trial_id": "x", "sta')
    with pytest.raises(records.RecordError, match=f"{specs[2].trial_id}.json.*would overwrite"):
        run_experiment(cfg, runs_dir, progress=False)
    assert broken.read_text() == '{"trial_id": "x", "sta'
    broken.unlink()
    before = {p.name: p.stat().st_mtime_ns for p in (runs_dir / "exp" / "records").glob("*.json")}
    summary = run_experiment(cfg, runs_dir, progress=False)
    assert summary.skipped == 2 and summary.ran == 2 and summary.failed == 0
    recs = {r["trial_id"]: r for r in records.iter_records(runs_dir / "exp")}
    assert set(recs) == {s.trial_id for s in specs}
    for s in specs[:2]:
        assert (runs_dir / "exp" / "records" / f"{s.trial_id}.json").stat().st_mtime_ns == before[f"{s.trial_id}.json"]
    again = run_experiment(cfg, runs_dir, progress=False)
    assert again.ran == 0 and again.skipped == 4


def test_failed_trial_is_recorded_and_grid_continues(tmp_path, tiny_source, tiny_pretrain_overrides, runs_dir):
    p = _experiment(tmp_path, tiny_pretrain_overrides, methods=("random",), seeds=(1,))
    raw = yaml.safe_load(p.read_text())
    raw["targets"].append({"language": "near", "corpus": str(tmp_path / "empty.txt"), "tokenizer": {"vocab_size": 300}})
    (tmp_path / "empty.txt").write_text("text\n")  # a corpus when the grid is validated (an empty one is refused then)
    cfg = parse_experiment(raw)
    (tmp_path / "empty.txt").write_text("")  # emptied before its trial reads it: that trial fails, the grid goes on
    summary = run_experiment(cfg, runs_dir, progress=False)
    assert summary.ran == 2 and summary.failed == 1
    recs = list(records.iter_records(runs_dir / "exp"))
    failed = [r for r in recs if r["status"] == "failed"]
    assert len(failed) == 1
    assert "empty.txt" in failed[0]["error"]["message"] and "empty" in failed[0]["error"]["message"]
    assert failed[0]["error"]["traceback"]
    ok = [r for r in recs if r["status"] == "ok"]
    assert len(ok) == 1 and json.dumps(ok[0]["metrics"])


def test_unreachable_tracker_never_loses_records(tmp_path, tiny_source, tiny_pretrain_overrides, runs_dir):
    from harness.run.tracking import make_tracker

    cfg = load_experiment(_experiment(tmp_path, tiny_pretrain_overrides, methods=("random",), seeds=(1,)))
    tracker = make_tracker("http://127.0.0.1:9", runs_dir)
    summary = run_experiment(cfg, runs_dir, tracker=tracker, progress=False)
    assert summary.failed == 0
    assert summary.tracking_errors and "tokxfer sync" in summary.tracking_errors[0]
    assert len(list(records.iter_records(runs_dir / "exp"))) == 1


def test_gold_diagnostics_memoize_the_pairs_not_the_scores(tiny_world, tiny_source, monkeypatch):
    """The gold pairs of a tokenizer pair are computed once per process; each trial's own rows are
    scored every time, and the result equals a computation from scratch."""
    from transformers import AutoTokenizer

    from harness.model import diagnostics
    from harness.world import World

    world = World(tiny_world)
    lang = next(lg for lg in world.languages if lg != world.source_language)
    src = AutoTokenizer.from_pretrained(tiny_source)
    tgt = AutoTokenizer.from_pretrained(tiny_source)  # another object, same state: a memo hit
    g = torch.Generator().manual_seed(0)
    source_emb = torch.randn(len(src), 16, generator=g)
    new_a, new_b = torch.randn(len(tgt), 16, generator=g), source_emb.clone()
    diagnostics._PAIRS_MEMO.clear()
    calls = []
    real = diagnostics.gold_token_pairs
    monkeypatch.setattr(diagnostics, "gold_token_pairs", lambda *a: calls.append(1) or real(*a))
    first = diagnostics.world_diagnostics(world, lang, src, tgt, source_emb, new_a)
    second = diagnostics.world_diagnostics(world, lang, src, AutoTokenizer.from_pretrained(tiny_source), source_emb, new_b)
    assert len(calls) == 1 and first["gold_pairs"] == second["gold_pairs"] > 0
    assert second["gold_top1"] == 1.0 and first["gold_top1"] < 1.0  # each trial's rows scored
    diagnostics._PAIRS_MEMO.clear()
    assert diagnostics.world_diagnostics(world, lang, src, tgt, source_emb, new_a) == first and len(calls) == 2
