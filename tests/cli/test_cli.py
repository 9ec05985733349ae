"""The ``tokxfer`` command line end to end on the tiny world."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from harness.cli import main


def _pretrain_override(overrides: dict) -> str:
    return "source.pretrain=" + json.dumps(overrides)


def _tiny_quickstart_args(runs_dir, tiny_pretrain_overrides, methods="[random, overlap, focus]"):
    return [
        "quickstart", "--size", "tiny", "--seeds", "1,2", "--runs-dir", str(runs_dir),
        _pretrain_override(tiny_pretrain_overrides),
        "targets.0.tokenizer.vocab_size=300", "targets.1.tokenizer.vocab_size=300",
        f"methods={methods}",
        "methods.2={name: focus, config: {aux_dim: 16, aux_epochs: 1, aux_min_count: 1, aux_bucket: 540672}}",
        "tasks.0.config.max_eval_examples=16",
    ]


def test_ls_lists_every_kind(capsys):
    assert main(["ls"]) == 0
    out = capsys.readouterr().out
    for name in ("focus", "wechsel", "vipi", "tiktotok", "mlm-at-init", "xnli", "lapt", "none"):
        assert name in out


def test_every_command_prints_its_help():
    """`tokxfer --help` and every subcommand's --help format (a bare % in a help string broke the top level)."""
    import argparse

    from harness.cli.main import build_parser

    seen = []

    def walk(parser, path):
        text = parser.format_help()
        assert text.startswith("usage: "), path
        seen.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    walk(build_parser(), "tokxfer")
    assert {"tokxfer compare", "tokxfer leaderboard", "tokxfer run"} <= set(seen)
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0


def test_light_commands_do_not_import_transformers(tmp_path):
    """leaderboard / compare / check-regression read records only: no seconds spent importing transformers."""
    import subprocess
    import sys

    from leaderboards.cli import RECORDS_DIR, SPECS_DIR

    out = tmp_path / "tables"
    argv = ["leaderboard", str(SPECS_DIR / "quickstart-tiny.yaml"), "--runs-dir", str(RECORDS_DIR), "--out", str(out)]
    code = ("import sys; from harness.cli.main import main\n"
            f"try:\n    main({argv!r})\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('transformers' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False False"
    assert (out / "quickstart-tiny.md").is_file()


def test_validate_and_bad_experiment(tmp_path, capsys):
    from harness.cli import CONFIG_DIR

    assert main(["validate", str(CONFIG_DIR / "quickstart.yaml")]) == 0
    assert "66 trials" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntargets: [near]\nmethods: [focuss]\ntasks: [mlm-at-init]\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "did you mean 'focus'" in err


def test_quickstart_leaderboard_sync_and_regression(tmp_path, tiny_source, tiny_pretrain_overrides, capsys):
    runs = tmp_path / "runs"
    assert main(_tiny_quickstart_args(runs, tiny_pretrain_overrides)) == 0
    out = capsys.readouterr().out
    assert "FOCUS" in out and "mlflow ui --backend-store-uri sqlite:///" in out
    md = (runs / "quickstart-tiny" / "quickstart-tiny.md").read_text()
    assert "Overlap copy" in md and re.search(r"\d \[-?\d+\.\d+, -?\d+\.\d+\]", md)  # mean [95 % CI]
    for ext in ("csv", "tex", "html"):
        assert (runs / "quickstart-tiny" / f"quickstart-tiny.{ext}").is_file()
    recs = list((runs / "quickstart-tiny" / "records").glob("*.json"))
    assert len(recs) == 3 * 2 * 2
    # a second run reproduces nothing new and changes no record (resume)
    before = {p.name: p.read_text() for p in recs}
    assert main(_tiny_quickstart_args(runs, tiny_pretrain_overrides)) == 0
    assert {p.name: p.read_text() for p in (runs / "quickstart-tiny" / "records").glob("*.json")} == before
    # re-running from scratch with the same seeds reproduces every metric exactly
    runs2 = tmp_path / "runs2"
    assert main(_tiny_quickstart_args(runs2, tiny_pretrain_overrides) + ["--no-tracking"]) == 0
    m1 = {json.loads(t)["trial_id"]: json.loads(t)["metrics"] for t in before.values()}
    m2 = {json.loads(p.read_text())["trial_id"]: json.loads(p.read_text())["metrics"]
          for p in (runs2 / "quickstart-tiny" / "records").glob("*.json")}
    assert m1 == m2
    # sync to a fresh sqlite store
    assert main(["sync", str(runs / "quickstart-tiny"), "--tracking-uri", f"sqlite:///{tmp_path / 'other.db'}"]) == 0
    # golden from these records passes; a degraded method fails the check
    golden = tmp_path / "golden.json"
    from harness.cli import PACKAGE_DIR

    spec = tmp_path / "spec.yaml"
    raw = yaml.safe_load((PACKAGE_DIR.parent / "leaderboards" / "specs" / "quickstart.yaml").read_text())
    raw["required_seeds"] = [1, 2]
    raw["experiments"] = ["quickstart-tiny"]  # `quickstart --size tiny` runs harness/configs/quickstart-tiny.yaml
    raw.pop("against")  # two seeds are too few for declared comparisons (a spec error): the golden needs none
    spec.write_text(yaml.safe_dump(raw))
    assert main(["golden", "update", "--records", str(runs / "quickstart-tiny"), "--spec", str(spec), "--golden", str(golden)]) == 0
    assert main(["check-regression", "--records", str(runs / "quickstart-tiny"), "--golden", str(golden)]) == 0
    capsys.readouterr()
    for p in (runs / "quickstart-tiny" / "records").glob("*.json"):
        rec = json.loads(p.read_text())
        if rec["config"]["method"]["id"] == "focus":
            for lang in rec["metrics"]:
                rec["metrics"][lang]["loss"] += 1.0
            p.write_text(json.dumps(rec))
    assert main(["check-regression", "--records", str(runs / "quickstart-tiny"), "--golden", str(golden)]) == 1
    assert "focus" in capsys.readouterr().out.lower()


def test_init_writes_loadable_model(tmp_path, tiny_world, tiny_source, capsys):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from harness.tokenizers import train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    tok = train_tokenizer([w.text("near", "train")], "unigram", 300)
    tok_dir = tmp_path / "tok"
    tok.save_pretrained(tok_dir)
    out = tmp_path / "model"
    assert main(["init", "--method", "overlap", "--source", str(tiny_source), "--target-tokenizer", str(tok_dir),
                 "--target-corpus", str(w.text("near", "train")), "--seed", "2", "--out", str(out)]) == 0
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert model.get_input_embeddings().weight.shape[0] == len(AutoTokenizer.from_pretrained(out))
    info = json.loads((out / "init_info.json").read_text())
    assert info["counts"]["copied"] > 0 and len(info["provenance"]) == info["n_target"]
    assert main(["overlap", str(tiny_source), str(tok_dir)]) == 0
    assert '"exact"' in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["init", "--method", "overlap", "--source", "/nonexistent/model", "--target-tokenizer", "/nonexistent/tok", "--out", "x"], "/nonexistent"),
    (["run", "/nonexistent/experiment.yaml"], "experiment file not found"),
])
def test_bad_inputs_give_clear_errors(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_model_dir_without_weights(tmp_path, tiny_source, capsys):
    import shutil

    broken = tmp_path / "noweights"
    shutil.copytree(tiny_source, broken)
    for p in list(broken.glob("*.safetensors")) + list(broken.glob("*.bin")):
        p.unlink()
    assert main(["init", "--method", "random", "--source", str(broken), "--target-tokenizer", str(tiny_source),
                 "--out", str(tmp_path / "o")]) == 2
    assert "no weights" in capsys.readouterr().err


def test_leaderboard_experiment_renders_a_spec_from_another_presets_records(tmp_path, capsys):
    """`--experiment NAME` reads NAME's records under the spec (a GPU preset's records under the small spec): the
    same records under another experiment name give the same table; a name that is not one is refused in one line."""
    import shutil

    from leaderboards.cli import RECORDS_DIR, SPECS_DIR

    spec = str(SPECS_DIR / "quickstart-tiny.yaml")
    dest = tmp_path / "runs" / "quickstart-tiny-gpu" / "records"
    shutil.copytree(RECORDS_DIR / "quickstart-tiny" / "records", dest)
    for path in dest.glob("*.json"):  # what a run of a preset named quickstart-tiny-gpu would have written
        rec = json.loads(path.read_text())
        rec["experiment"] = "quickstart-tiny-gpu"
        path.write_text(json.dumps(rec))
    main(["leaderboard", spec, "--runs-dir", str(RECORDS_DIR), "--out", str(tmp_path / "a")])
    main(["leaderboard", spec, "--runs-dir", str(tmp_path / "runs"), "--experiment", "quickstart-tiny-gpu",
          "--out", str(tmp_path / "b")])
    a, b = ((tmp_path / d / "quickstart-tiny.csv").read_text() for d in "ab")
    assert a == b and a.count("\n") > 2
    capsys.readouterr()
    assert main(["leaderboard", spec, "--runs-dir", str(tmp_path / "runs"), "--experiment", "../x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--experiment '../x' is not an experiment name" in err
    assert main(["leaderboard", "--all", "--experiment", "quickstart-tiny-gpu"]) == 2
    assert "--experiment goes with one SPEC" in capsys.readouterr().err
