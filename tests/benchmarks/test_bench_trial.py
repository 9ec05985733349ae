"""``benchmarks/bench_trial.py``: the pieces that cut the experiment, qualify overrides, read a profile
and summarize runs (the timed runs themselves need the small world's caches and minutes per trial)."""

from __future__ import annotations

import cProfile
from pathlib import Path

import pytest
import yaml

from benchmarks import bench_trial as bt

ROOT = Path(__file__).resolve().parents[2]


def test_trial_config_keeps_one_method_and_one_task_with_their_settings(tmp_path):
    out = bt.trial_config(ROOT / bt.DEFAULT_CONFIG, "focus", "qa", tmp_path / "trial.yaml")
    raw = yaml.safe_load(out.read_text())
    assert [m["name"] for m in raw["methods"]] == ["focus"] and raw["methods"][0]["config"]["aux_dim"] == 100
    assert [t["name"] for t in raw["tasks"]] == ["qa"] and raw["tasks"][0]["config"]["max_train_examples"] == 8000
    with pytest.raises(bt.TrialConfigError, match="no task 'nope'"):
        bt.trial_config(ROOT / bt.DEFAULT_CONFIG, "focus", "nope", tmp_path / "bad.yaml")


def test_trial_config_cuts_an_xlp_grid_to_one_encoding_by_name_or_id(tmp_path):
    cfg = ROOT / "harness/configs/xlp-table2.yaml"
    raw = yaml.safe_load(bt.trial_config(cfg, "original", "iwslt-bleu", tmp_path / "a.yaml", "xlp-nodec").read_text())
    assert raw["encodings"] == [{"id": "xlp-nodec", "name": "xlp", "config": {"decoder": False}}]
    raw = yaml.safe_load(bt.trial_config(cfg, "original", "iwslt-bleu", tmp_path / "b.yaml", "none").read_text())
    assert raw["encodings"] == ["none"]
    with pytest.raises(bt.TrialConfigError, match="no encoding 'nope'"):
        bt.trial_config(cfg, "original", "iwslt-bleu", tmp_path / "c.yaml", "nope")


def test_source_seed_is_held_or_follows_the_trial():
    assert bt.held_source("0") == ["source.pretrain.seed=0"] and bt.held_source("3") == ["source.pretrain.seed=3"]
    assert bt.held_source("trial") == []


def test_an_unknown_row_ends_the_command_in_one_line_with_exit_2(capsys):
    assert bt.main(["--config", "harness/configs/xlp-table1.yaml", "--task", "xnli-cross-lingual", "--method", "original",
                    "--encoding", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no encoding 'nope'" in err and "Traceback" not in err


def test_a_bad_source_seed_is_refused_in_one_line_with_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        bt.main(["--task", "qa", "--source-seed", "-1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--source-seed: expected a non-negative integer or 'trial', got '-1'" in err


def test_task_overrides_are_qualified_and_experiment_overrides_pass():
    assert bt._qualified(["train.epochs=3", "source.pretrain.seed=0", "seeds=[2]"]) == [
        "tasks.0.config.train.epochs=3", "source.pretrain.seed=0", "seeds=[2]"]  # fmt: skip


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_profile_phases_reads_cumulative_seconds_and_marks_phases_never_called(tmp_path, monkeypatch):
    here = Path(__file__).resolve()
    monkeypatch.setattr(bt, "PHASES", {"finetune": (here.name, "_busy"), "backward": ("nowhere.py", "backward")})
    prof = cProfile.Profile()
    prof.runcall(_busy, 200_000)
    prof.dump_stats(str(tmp_path / "p.prof"))
    phases = bt.profile_phases(tmp_path / "p.prof")
    assert phases["backward"] is None
    assert phases["finetune"] is not None and phases["finetune"] >= 0
    assert phases["train_forward_and_rest"] == phases["finetune"]


def test_summarize_gives_medians_and_ratios_and_flags_load():
    def run(side, wall, cpu, loaded=False, metrics=None):
        return {"side": side, "wall_s": wall, "cpu_s": cpu, "timings": {"task_s": wall - 1}, "loaded": loaded,
                "metrics": metrics or {"near": {"f1": 1.0}}}  # fmt: skip

    s = bt.summarize([run("this", 10, 8), run("baseline", 20, 16), run("this", 12, 9, loaded=True), run("baseline", 22, 18)])
    assert s["this"]["wall_s_median"] == 11 and s["baseline"]["cpu_s_median"] == 17
    assert s["ratio_wall"] == round(21 / 11, 3) and s["ratio_cpu"] == round(17 / 8.5, 3) and s["loaded"] is True
    assert s["this"]["metrics_identical"] is True
    assert bt.summarize([run("this", 10, 8, metrics={"a": 1}), run("this", 10, 8, metrics={"a": 2})])["this"][
        "metrics_identical"] is False  # fmt: skip


FAKE_CLI = '''
import json, sys, time
from pathlib import Path
runs = Path(sys.argv[sys.argv.index("--runs-dir") + 1]) / "exp" / "records"
runs.mkdir(parents=True)
end = time.process_time() + 0.3
while time.process_time() < end:  # the trial's own CPU: must not count against the machine
    pass
(runs / "t.json").write_text(json.dumps({"status": "ok", "trial_id": "t", "metrics": {"near": {"f1": 1.0}},
                                         "timings": {"task_s": 0.3, "total_s": 0.3}}))
'''


def test_a_timed_trial_is_judged_by_the_benchmarks_load_monitor(tmp_path, monkeypatch):
    """The trial runs as a child: its CPU is the benchmark's own, and the run carries the monitor's record."""
    tree = tmp_path / "tree"
    (tree / "harness").mkdir(parents=True)
    (tree / "harness" / "__init__.py").write_text("")
    (tree / "harness" / "cli.py").write_text(FAKE_CLI)
    (tmp_path / "runs").mkdir()
    seen = []

    class Monitor(bt.LoadMonitor):
        def record(self):
            rec = super().record()
            seen.append(rec)
            return {**rec, "busy": True}  # as if other processes had taken the machine

    monkeypatch.setattr(bt, "LoadMonitor", Monitor)
    r = bt.run_trial(tree, tmp_path / "exp.yaml", [], 1, tmp_path / "runs", tmp_path / "log.txt")
    assert r["metrics"] == {"near": {"f1": 1.0}} and r["cpu_s"] >= 0.3
    assert r["load"]["verdict"] == seen[0]["verdict"] and r["loaded"] is True
    assert r["load_before"] == seen[0]["before"] and r["load_after"] == seen[0]["after"]
    assert seen[0]["rule"] in ("foreign CPU", "load average", "none")
