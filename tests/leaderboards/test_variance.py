"""The variance decomposition: free vs held source, from records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.errors import UserInputError
from harness.run import records
from leaderboards.variance import decompose, main, seed_values


def _rec(method: str, seed: int, loss: float, task: str = "mlm-at-init", status: str = "ok", exp: str = "e") -> dict:
    return {"schema_version": records.SCHEMA_VERSION, "trial_id": f"{method}-{seed}-{task}", "status": status,
            "experiment": exp, "seed": seed, "config": {"method": {"id": method}, "task": {"name": task}},
            "metrics": {"near": {"loss": loss}}}


def test_the_share_is_one_minus_the_variance_ratio():
    rng = np.random.default_rng(0)
    source, rest = rng.normal(0, 2.0, 400), rng.normal(0, 1.0, 400)
    free = {"m": dict(enumerate(source + rest))}
    held = {"m": dict(enumerate(1.0 + rest[::-1]))}
    (d,) = decompose(free, held)
    assert d.source_share == pytest.approx(1 - d.var_held / d.var_free)
    assert 0.7 < d.source_share < 0.9  # the truth is 4 / 5


def test_a_negative_share_is_clipped_but_kept_raw():
    (d,) = decompose({"m": {1: 1.0, 2: 1.1}}, {"m": {1: 0.0, 2: 2.0}})
    assert d.raw_share < 0 and d.source_share == 0.0


def test_methods_need_two_seeds_in_both_runs():
    assert decompose({"a": {1: 1.0}}, {"a": {1: 1.0, 2: 2.0}}) == []
    assert decompose({"a": {1: 1.0, 2: 2.0}}, {"b": {1: 1.0, 2: 2.0}}) == []


def test_seed_values_keep_successful_trials_of_the_task_and_refuse_duplicates():
    recs = [_rec("focus", 1, 7.0), _rec("focus", 2, 7.2), _rec("focus", 3, 9.9, status="failed"),
            _rec("focus", 1, 1.0, task="xnli")]
    assert seed_values(recs, "mlm-at-init", "loss", "near") == {"focus": {1: 7.0, 2: 7.2}}
    dup = [_rec("focus", 1, 7.0), {**_rec("focus", 1, 7.1), "trial_id": "other"}]
    with pytest.raises(UserInputError, match="two records for seed 1"):
        seed_values(dup, "mlm-at-init", "loss", "near")


def test_the_command_prints_and_writes_json(tmp_path, capsys):
    for name, values in (("free", [7.0, 7.4, 6.6]), ("held", [7.0, 7.1, 6.9])):
        for seed, v in enumerate(values, 1):
            records.write_record(tmp_path / name / "records", _rec("focus", seed, v, exp=name))
    out = tmp_path / "d.json"
    assert main(["--free", str(tmp_path / "free"), "--held", str(tmp_path / "held"), "--task", "mlm-at-init",
                 "--metric", "loss", "--language", "near", "--json", str(out)]) == 0
    assert "| focus | 3 | 3 |" in capsys.readouterr().out
    row = json.loads(out.read_text())["rows"][0]
    assert row["source_share"] == pytest.approx(1 - 0.01 / 0.16)


def test_the_command_reports_bad_input_in_one_line(tmp_path, capsys):
    for seed in (1, 1):
        records.write_record(tmp_path / "free" / "records",
                             {**_rec("focus", seed, 7.0, exp="free"), "trial_id": f"t{len(list((tmp_path / 'free').rglob('*.json')))}"})
    code = main(["--free", str(tmp_path / "free"), "--held", str(tmp_path / "missing"), "--task", "mlm-at-init",
                 "--metric", "loss", "--language", "near"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "two records for seed 1" in err
