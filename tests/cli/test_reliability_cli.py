"""Ctrl-C, --debug, tracking noise and file modes of the command line."""

from __future__ import annotations

import logging
import os
import stat

import pytest
import yaml

from harness.cli import main
from harness.run import records

EXP = {
    "name": "exp", "world": {"size": "tiny", "seed": 0},
    "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}],
    "methods": ["random"], "tasks": ["mlm-at-init"], "seeds": [1, 2, 3],
}


@pytest.fixture()
def exp(tmp_path):
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(EXP))
    return p


def _ok_trial(spec, *, progress=False, artifacts_dir=None):
    return records.TrialRecord.from_json({
        "schema_version": records.SCHEMA_VERSION, "trial_id": spec.trial_id, "experiment": spec.experiment,
        "status": "ok", "error": None, "seed": spec.seed, "config": spec.resolved(),
        "metrics": {"near": {"loss": 1.0 + spec.seed, "accuracy": 0.1, "perplexity": 7.4}}})


def test_ctrl_c_exits_130_with_one_line_and_no_partial_record(exp, tmp_path, capsys, monkeypatch):
    import harness.run.runner as runner

    calls = []

    def interrupted(spec, **kw):
        calls.append(spec.seed)
        if spec.seed == 2:
            raise KeyboardInterrupt
        return _ok_trial(spec)

    monkeypatch.setattr(runner, "run_trial", interrupted)
    runs = tmp_path / "runs"
    assert main(["run", str(exp), "--runs-dir", str(runs), "--no-tracking", "--quiet"]) == 130
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "interrupted" in err[0] and "Traceback" not in err[0]
    recs = list(records.iter_records(runs / "exp"))
    assert [r["seed"] for r in recs] == [1], "the finished trial is kept, the interrupted one leaves nothing"
    assert not list((runs / "exp" / "claims").glob("*.claim")), "claims are released"
    assert not list((runs / "exp" / "records").glob(".*.tmp"))
    # the same command resumes with the rest
    monkeypatch.setattr(runner, "run_trial", lambda spec, **kw: _ok_trial(spec))
    assert main(["run", str(exp), "--runs-dir", str(runs), "--no-tracking", "--quiet"]) == 0
    assert "ran 2, skipped 1" in capsys.readouterr().out


def test_debug_prints_the_traceback_only_when_asked(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "nope.yaml"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("tokxfer: error:")


def test_unexpected_error_is_one_line_with_a_hint(exp, capsys, monkeypatch):
    import harness.run.config as config

    def boom(*a, **k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(config, "load_experiment", boom)
    assert main(["validate", str(exp)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error" in err[0] and "--debug" in err[0]


def test_tracking_failures_give_one_warning_and_one_summary(exp, tmp_path, capsys, caplog, monkeypatch):
    import harness.run.runner as runner

    monkeypatch.setattr(runner, "run_trial", lambda spec, **kw: _ok_trial(spec))
    runs = tmp_path / "runs"
    with caplog.at_level(logging.WARNING, logger="tokxfer"):
        code = main(["run", str(exp), "--runs-dir", str(runs), "--quiet", "--tracking-uri", "http://127.0.0.1:9"])
    assert code == 0
    warnings = [r for r in caplog.records if r.name == "tokxfer" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tracking:")]
    assert len(err) == 1 and "3 mirror(s) failed" in err[0] and "tokxfer sync" in err[0]
    assert len(list(records.iter_records(runs / "exp"))) == 3


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_records_are_written_with_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        p = records.write_record(tmp_path, {"trial_id": "t", "status": "ok", "metrics": {}})
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == mode


def test_full_disk_while_writing_a_record_is_one_line_and_leaves_no_partial_record(exp, tmp_path, capsys, monkeypatch):
    import errno

    import harness.run.runner as runner

    monkeypatch.setattr(runner, "run_trial", lambda spec, **kw: _ok_trial(spec))

    def full(f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # the write of the record's temp file fails like on a full disk
    runs = tmp_path / "runs"
    assert main(["run", str(exp), "--runs-dir", str(runs), "--no-tracking", "--quiet"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "No space left on device" in err[0] and "cannot write record" in err[0]
    assert str(runs / "exp" / "records") in err[0]
    assert not list((runs / "exp" / "records").iterdir()), "no record and no temp file is left behind"
    assert not list((runs / "exp" / "claims").glob("*.claim"))


def test_failed_trials_are_summarized_by_kind_under_the_count(exp, tmp_path, capsys, monkeypatch):
    """A run with failures exits 1 and says, one line per kind, which method and language failed and why,
    so a failure the data explains (the real lane's WECHSEL on Tamil) is not mistaken for a new one."""
    import harness.run.runner as runner

    def flaky(spec, **kw):
        if spec.seed > 1:
            raise ValueError(f"bilingual dictionary /x/ta.tsv: no usable word pairs. Read {spec.seed} pairs")
        return _ok_trial(spec)

    monkeypatch.setattr(runner, "run_trial", flaky)
    assert main(["run", str(exp), "--runs-dir", str(tmp_path / "runs"), "--no-tracking", "--quiet"]) == 1
    out = capsys.readouterr()
    assert "failed 2 in" in out.out
    lines = [x for x in out.err.splitlines() if x.startswith("  failed: ")]
    assert lines == ["  failed: random → near × 2: ValueError: bilingual dictionary /x/ta.tsv: no usable word pairs."]
