"""Bad inputs through the command line: each one exits 2 with one line naming the culprit.

Table-driven: every case is ``(id, argv, needles)``; ``argv`` may use ``{exp}`` (a valid tiny
experiment file), ``{tmp}`` (the test's folder) and ``{runs}`` (a runs dir). Every needle must be
in the single stderr line, and no traceback may be printed. Everything runs in-process and stops
before any trial runs (no model is loaded).
"""

from __future__ import annotations

import json

import pytest
import yaml

from harness.cli import main

BASE = {
    "name": "bad",
    "world": {"size": "tiny", "seed": 0},
    "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
    "methods": ["random"],
    "tasks": ["mlm-at-init"],
    "seeds": [1],
}

def _records(root, experiment="bad", methods=("random", "overlap"), seeds=(1, 2)):
    """Minimal ok records of mlm-at-init on "near" under ``root/<experiment>/records``."""
    d = root / experiment / "records"
    d.mkdir(parents=True, exist_ok=True)
    for m in methods:
        for s in seeds:
            rec = {"schema_version": 1, "tokxfer_version": "0", "trial_id": f"{m}-{s}", "experiment": experiment,
                   "status": "ok", "seed": s, "metrics": {"near": {"loss": 6.0 + s, "accuracy": 0.1 * s}},
                   "config": {"method": {"id": m, "name": m, "config": {}}, "task": {"name": "mlm-at-init"},
                              "target": {"language": "near"}, "encoding": {"name": "none"}}}
            (d / f"{m}-{s}.json").write_text(json.dumps(rec))
    return root / experiment


def _spec(tmp, **metric):
    spec = {"name": "t", "version": 1, "experiments": ["bad"], "required_seeds": [1, 2],
            "metrics": {"loss": {"direction": "lower"}, **metric},
            "columns": [{"task": "mlm-at-init", "languages": ["near"], "metrics": ["loss", *metric]}], "rows": "all"}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))


def _resume_record(tmp, exp, content):
    from harness.run.config import load_experiment

    tid = load_experiment(exp).trials()[0].trial_id
    d = tmp / "runs" / "bad" / "records"
    d.mkdir(parents=True)
    (d / f"{tid}.json").write_text(content)


def _plugin(tmp, text):
    (tmp / "plug.py").write_text(text)


NOOP = None
REGISTER_FOCUS = """
from dataclasses import dataclass
from harness.registry import register_method

@dataclass(frozen=True)
class C:
    k: int = 1

@register_method("focus", config=C)
class Mine:
    def __init__(self, config): ...
"""

# (id, setup(tmp, exp) or None, argv, needles in the one stderr line)
CASES = [
    # experiment files and overrides
    ("exp-missing", NOOP, ["run", "{tmp}/nope.yaml"], ["nope.yaml", "not found"]),
    ("exp-invalid-yaml", lambda t, e: e.write_text("name: [x\n"), ["validate", "{exp}"], ["bad.yaml", "not valid YAML"]),
    ("exp-top-level-list", lambda t, e: e.write_text("- 1\n"), ["validate", "{exp}"], ["bad.yaml", "mapping"]),
    ("exp-unknown-key", NOOP, ["validate", "{exp}", "sedes=[1]"], ["sedes"]),
    ("exp-missing-targets", lambda t, e: e.write_text("name: x\nmethods: [random]\ntasks: [mlm-at-init]\n"),
     ["validate", "{exp}"], ["bad.yaml", "targets"]),
    ("methods-empty", NOOP, ["validate", "{exp}", "methods=[]"], ["methods", "non-empty"]),
    ("tasks-empty", NOOP, ["validate", "{exp}", "tasks=[]"], ["tasks", "non-empty"]),
    ("targets-empty", NOOP, ["validate", "{exp}", "targets=[]"], ["targets", "non-empty"]),
    ("method-unknown", NOOP, ["validate", "{exp}", "methods=[focuss]"], ["methods.0", "did you mean 'focus'"]),
    ("task-unknown", NOOP, ["validate", "{exp}", "tasks=[xnlii]"], ["tasks.0", "xnlii"]),
    ("method-duplicate", NOOP, ["validate", "{exp}", "methods=[random, random]"], ["methods.1", "duplicate id"]),
    ("method-config-unknown-key", NOOP, ["validate", "{exp}", "methods=[{{name: focus, config: {{kk: 1}}}}]"],
     ["methods.0.config", "'kk'"]),
    ("method-config-wrong-type", NOOP, ["validate", "{exp}", "methods=[{{name: focus, config: {{aux_dim: abc}}}}]"],
     ["methods.0.config.aux_dim", "integer", "'abc'"]),
    ("method-config-literal", NOOP, ["validate", "{exp}", "methods=[{{name: focus, config: {{aux_model: glove}}}}]"],
     ["aux_model", "'glove'"]),
    ("method-config-bool", NOOP, ["validate", "{exp}", "methods=[{{name: focus, config: {{aux_dim: true}}}}]"],
     ["aux_dim", "integer"]),
    ("seeds-bool", NOOP, ["validate", "{exp}", "seeds=[true]"], ["seeds", "integers"]),
    ("seeds-duplicate", NOOP, ["validate", "{exp}", "seeds=[1, 1]"], ["seeds", "twice"]),
    ("seeds-text", NOOP, ["validate", "{exp}", "seeds=abc"], ["seeds", "'abc'"]),
    ("seeds-empty", NOOP, ["validate", "{exp}", "seeds=[]"], ["seeds", "non-empty"]),
    ("vocab-size-text", NOOP, ["validate", "{exp}", "targets.0.tokenizer.vocab_size=abc"],
     ["targets.0.tokenizer.vocab_size", "integer", "'abc'"]),
    ("vocab-size-small", NOOP, ["validate", "{exp}", "targets.0.tokenizer.vocab_size=10"], ["vocab_size", ">= 50"]),
    ("algorithm-unknown", NOOP, ["validate", "{exp}", "targets.0.tokenizer.algorithm=sentencepiece"],
     ["tokenizer.algorithm", "sentencepiece"]),
    ("target-not-mapping", NOOP, ["validate", "{exp}", "targets=[5]"], ["targets.0", "5"]),
    ("language-no", NOOP, ["validate", "{exp}", "targets=[{{language: no}}]"], ["targets.0.language", "text", "False"]),
    ("world-size", NOOP, ["validate", "{exp}", "world.size=huge"], ["world.size", "huge"]),
    ("mode-unknown", NOOP, ["validate", "{exp}", "mode=sideways"], ["mode", "sideways"]),
    ("extend-top-n-text", NOOP, ["validate", "{exp}", "extend_top_n=lots"], ["extend_top_n", "lots"]),
    ("override-no-equals", NOOP, ["validate", "{exp}", "seeds"], ["seeds", "key=value"]),
    ("override-bad-index", NOOP, ["validate", "{exp}", "methods.9.config.k=1"], ["methods.9", "list index"]),
    ("override-into-scalar", NOOP, ["validate", "{exp}", "name.x=1"], ["name.x=1", "not a mapping"]),
    ("override-bad-yaml", NOOP, ["validate", "{exp}", "seeds=[1"], ["seeds=[1", "YAML"]),
    ("name-absolute", NOOP, ["validate", "{exp}", "name=/tmp/evil"], ["name", "path separator"]),
    ("name-dotdot", NOOP, ["validate", "{exp}", "name=.."], ["name", "'..'"]),
    ("name-traversal", NOOP, ["validate", "{exp}", "name=../../etc"], ["name", "path separator"]),
    ("name-empty", NOOP, ["validate", "{exp}", "name="], ["name", "empty"]),
    ("name-blank", NOOP, ["validate", "{exp}", "name='   '"], ["name", "empty"]),
    ("name-hidden", NOOP, ["validate", "{exp}", "name=.hidden"], ["name", "starts with '.'"]),
    ("name-list", NOOP, ["validate", "{exp}", "name=[a, b]"], ["name", "expected a text"]),
    ("name-null", NOOP, ["validate", "{exp}", "name=null"], ["name", "expected a text"]),
    # flags of `run`
    ("tracking-uri-folder", NOOP, ["run", "{exp}", "--runs-dir", "{runs}", "--tracking-uri", "./mlruns"],
     ["./mlruns", "sqlite"]),
    ("executor-gpus-without-gpu", NOOP, ["run", "{exp}", "--runs-dir", "{runs}", "--executor", "gpus"],
     ["--executor gpus", "no CUDA device"]),
    ("gpus-list", NOOP, ["run", "{exp}", "--runs-dir", "{runs}", "--executor", "gpus", "--gpus", "0,,1"], ["--gpus"]),
    ("slurm-param", NOOP, ["run", "{exp}", "--runs-dir", "{runs}", "--executor", "slurm", "--slurm-param", "oops"],
     ["--slurm-param", "KEY=VALUE"]),
    ("executor-unknown", NOOP, ["run", "{exp}", "--executor", "kubernetes"], ["--executor", "kubernetes"]),
    ("runs-dir-is-a-file", lambda t, e: (t / "afile").write_text("x"),
     ["run", "{exp}", "--runs-dir", "{tmp}/afile", "--no-tracking"], ["afile"]),
    ("runs-dir-not-writable", NOOP, ["run", "{exp}", "--runs-dir", "/proc/tokxfer-runs", "--no-tracking"],
     ["/proc/tokxfer-runs", "writable"]),
    ("plugin-missing", NOOP, ["validate", "{exp}", "--plugin", "{tmp}/nope.py"], ["--plugin", "nope.py", "not found"]),
    ("plugin-syntax", lambda t, e: _plugin(t, "def f(:\n"), ["validate", "{exp}", "--plugin", "{tmp}/plug.py"],
     ["--plugin", "plug.py", "syntax error at line 1"]),
    ("plugin-import", lambda t, e: _plugin(t, "import no_such_module_xyz\n"),
     ["validate", "{exp}", "--plugin", "{tmp}/plug.py"], ["plug.py", "no_such_module_xyz", "line 1"]),
    ("plugin-raises", lambda t, e: _plugin(t, "x = 1\nraise RuntimeError('boom')\n"),
     ["validate", "{exp}", "--plugin", "{tmp}/plug.py"], ["plug.py", "line 2", "boom"]),
    ("plugin-registers-builtin", lambda t, e: _plugin(t, REGISTER_FOCUS),
     ["validate", "{exp}", "--plugin", "{tmp}/plug.py"], ["plug.py", "'focus' is already registered", "tokxfer_plugin"]),
    # records that resume would overwrite
    ("resume-corrupt-record", lambda t, e: _resume_record(t, e, '{"trial_id": "x", "sta'),
     ["run", "{exp}", "--runs-dir", "{runs}", "--no-tracking"], [".json", "corrupt", "would overwrite"]),
    ("resume-newer-record", lambda t, e: _resume_record(t, e, json.dumps({"schema_version": 99, "trial_id": "x", "status": "ok"})),
     ["run", "{exp}", "--runs-dir", "{runs}", "--no-tracking"], [".json", "schema_version 99", "would overwrite"]),
    # sync
    ("sync-no-records", NOOP, ["sync", "{tmp}/nothing"], ["nothing", "no records"]),
    ("sync-rebuild-http", lambda t, e: _records(t / "runs"), ["sync", "{runs}/bad", "--rebuild", "--tracking-uri",
                                                              "http://127.0.0.1:9"], ["--rebuild", "sqlite"]),
    # leaderboards
    ("leaderboard-spec-missing", NOOP, ["leaderboard", "{tmp}/nope.yaml"], ["nope.yaml", "not found"]),
    ("leaderboard-spec-invalid-yaml", lambda t, e: (t / "spec.yaml").write_text("name: [t\n"),
     ["leaderboard", "{tmp}/spec.yaml"], ["spec.yaml", "invalid YAML"]),
    ("leaderboard-spec-and-all", NOOP, ["leaderboard", "{tmp}/spec.yaml", "--all"], ["one SPEC or --all"]),
    ("leaderboard-direction-down", lambda t, e: (_records(t / "runs"), _spec(t, acc={"direction": "down"})),
     ["leaderboard", "{tmp}/spec.yaml", "--runs-dir", "{runs}"], ["spec.yaml", "direction", "'down'"]),
    ("leaderboard-metric-nobody-has", lambda t, e: (_records(t / "runs"), _spec(t, bleu={"direction": "higher"})),
     ["leaderboard", "{tmp}/spec.yaml", "--runs-dir", "{runs}", "--out", "{tmp}/out"],
     ["mlm-at-init/near/bleu", "'bleu'", "accuracy, loss"]),
    ("leaderboard-no-records", lambda t, e: _spec(t), ["leaderboard", "{tmp}/spec.yaml", "--runs-dir", "{runs}"],
     ["experiment(s) bad", "no records"]),
    ("compare-unknown-method", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "focus", "--against", "random"], ["--method", "'focus'", "overlap, random"]),
    ("compare-unknown-baseline", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "overlap", "--against", "randm"], ["--against", "'randm'"]),
    ("compare-no-records", NOOP, ["compare", "{tmp}/none", "--method", "a", "--against", "b"], ["none"]),
    ("check-regression-golden-missing", lambda t, e: _records(t / "runs"),
     ["check-regression", "--records", "{runs}/bad", "--golden", "{tmp}/nope.json"], ["nope.json"]),
    # init
    ("init-out-not-empty", lambda t, e: ((t / "out").mkdir(), (t / "out" / "config.json").write_text("{}")),
     ["init", "--method", "random", "--source", "x", "--target-tokenizer", "y", "--out", "{tmp}/out"],
     ["--out", "not empty", "--overwrite"]),
    ("init-config-wrong-type", NOOP, ["init", "--method", "focus", "--source", "x", "--target-tokenizer", "y",
                                      "--out", "{tmp}/o", "--config", "aux_dim=abc"], ["aux_dim", "integer", "'abc'"]),
    ("init-config-no-equals", NOOP, ["init", "--method", "focus", "--source", "x", "--target-tokenizer", "y",
                                     "--out", "{tmp}/o", "--config", "aux_dim"], ["--config", "KEY=VALUE"]),
    ("init-method-unknown", NOOP, ["init", "--method", "focsu", "--source", "x", "--target-tokenizer", "y",
                                   "--out", "{tmp}/o"], ["--method", "focsu", "did you mean"]),
    ("init-source-missing", NOOP, ["init", "--method", "random", "--source", "{tmp}/nomodel", "--target-tokenizer",
                                   "{tmp}/notok", "--out", "{tmp}/o"], ["notok"]),
    ("init-seed-text", NOOP, ["init", "--method", "random", "--source", "x", "--target-tokenizer", "y", "--out",
                              "{tmp}/o", "--seed", "one"], ["--seed", "'one'"]),
    ("init-hub-id-offline", NOOP, ["init", "--method", "random", "--source", "xlm-roberta-base", "--target-tokenizer",
                                   "xlm-roberta-base", "--out", "{tmp}/o"], ["'xlm-roberta-base'", "offline"]),
    ("overlap-hub-id-offline", NOOP, ["overlap", "xlm-roberta-base", "bert-base-cased"], ["'xlm-roberta-base'"]),
    # the command line itself
    ("command-unknown", NOOP, ["frobnicate"], ["frobnicate"]),
    ("run-without-experiment", NOOP, ["run"], ["experiment"]),
    ("world-size-choice", NOOP, ["world", "build", "--size", "huge"], ["--size", "huge"]),
    ("overlap-missing-tokenizer", NOOP, ["overlap", "{tmp}/a", "{tmp}/b"], ["{tmp}/a"]),
]


@pytest.fixture()
def exp(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(BASE))
    return p


def _fill(argv, **kw):
    return [a.format(**kw) for a in argv]


def _main(argv) -> int:
    """``main`` with argparse's ``SystemExit`` turned into its exit code."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_there_are_at_least_40_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id, setup, argv, needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_clear_line(case_id, setup, argv, needles, exp, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOKXFER_GPUS", raising=False)
    runs = tmp_path / "runs"
    if setup is not None:
        setup(tmp_path, exp)
    code = _main(_fill(argv, exp=exp, tmp=tmp_path, runs=runs))
    needles = _fill(needles, exp=exp, tmp=tmp_path, runs=runs)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{case_id}: exit {code}, stderr: {err}"
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"{case_id}: expected one line, got:\n{err}"
    for needle in needles:
        assert needle in lines[0], f"{case_id}: {needle!r} not in {lines[0]!r}"


if __name__ == "__main__":  # print every case's message, for reading them side by side
    import contextlib
    import io
    import sys
    import tempfile
    from pathlib import Path

    for case_id, setup, argv, _ in CASES:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            e = tmp / "bad.yaml"
            e.write_text(yaml.safe_dump(BASE))
            if setup is not None:
                setup(tmp, e)
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = _main(_fill(argv, exp=e, tmp=tmp, runs=tmp / "runs"))
            print(f"{case_id:34s} {code} {err.getvalue().strip().replace(str(tmp), '$TMP')}", file=sys.stdout)
