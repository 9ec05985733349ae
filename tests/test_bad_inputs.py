"""Bad inputs through the command line: each one exits 2 with one line naming the culprit.

Table-driven: every case is ``(id, argv, needles)``; ``argv`` may use ``{exp}`` (a valid tiny
experiment file), ``{tmp}`` (the test's folder) and ``{runs}`` (a runs dir). Every needle must be
in the single stderr line, and no traceback may be printed. Everything runs in-process and stops
before any trial runs (no model is loaded).
"""

from __future__ import annotations

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

CASES = [
    # experiment names become folders under the runs dir
    ("name-absolute", ["validate", "{exp}", "name=/tmp/evil"], ["name", "path separator"]),
    ("name-dotdot", ["validate", "{exp}", "name=.."], ["name", "'..'"]),
    ("name-traversal", ["validate", "{exp}", "name=../../etc"], ["name", "path separator"]),
    ("name-empty", ["validate", "{exp}", "name="], ["name", "empty"]),
    ("name-blank", ["validate", "{exp}", "name='   '"], ["name", "empty"]),
    ("name-hidden", ["validate", "{exp}", "name=.hidden"], ["name", "starts with '.'"]),
    ("name-list", ["validate", "{exp}", "name=[a, b]"], ["name", "expected a text"]),
    ("name-null", ["validate", "{exp}", "name=null"], ["name", "expected a text"]),
]


@pytest.fixture()
def exp(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(BASE))
    return p


def _fill(argv, **kw):
    return [a.format(**kw) for a in argv]


@pytest.mark.parametrize("case_id, argv, needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_clear_line(case_id, argv, needles, exp, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    code = main(_fill(argv, exp=exp, tmp=tmp_path, runs=runs))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{case_id}: exit {code}, stderr: {err}"
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"{case_id}: expected one line, got:\n{err}"
    for needle in needles:
        assert needle in lines[0], f"{case_id}: {needle!r} not in {lines[0]!r}"
