"""benchmarks/lane_cost.py: a grid run's cost from its records and its `/usr/bin/time -v` report, and
whether the run reproduced the committed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import lane_cost

TIME = """\tCommand being timed: "tokxfer run harness/configs/real-small.yaml --workers 2"
\tUser time (seconds): 2860.15
\tSystem time (seconds): 333.91
\tPercent of CPU this job got: 197%
\tElapsed (wall clock) time (h:mm:ss or m:ss): 27:01.31
\tMaximum resident set size (kbytes): 3594624
\tExit status: 1
"""


def _record(d: Path, tid: str, method: str, status: str, acc: float, total: float) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{tid}.json").write_text(json.dumps({
        "trial_id": tid, "status": status, "config": {"method": {"id": method, "name": method}},
        "metrics": {"de": {"acc": acc}}, "timings": {"task_s": total / 2, "total_s": total}}))


def test_the_summary_of_a_run(tmp_path):
    (tmp_path / "t").write_text(TIME)
    (tmp_path / "load").write_text("1 0.9 1.0 1.1\n31 2.1 1.5 1.2\n")
    run, committed = tmp_path / "run", tmp_path / "committed"
    for d in (run, committed):
        _record(d, "a", "focus", "ok", 0.5, 4.0)
        _record(d, "b", "wechsel", "failed", 0.0, 2.0)
    _record(run, "c", "focus", "ok", 0.7, 6.0)
    _record(committed, "c", "focus", "ok", 0.6, 6.0)  # the same trial, another number
    _record(run, "d", "focus", "ok", 0.1, 1.0)  # no committed record
    out = tmp_path / "cost.json"
    assert lane_cost.main(["--records", str(run), "--time", str(tmp_path / "t"), "--load", str(tmp_path / "load"),
                           "--commit", "abc", "--compare", str(committed), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["run"]["wall_s"] == pytest.approx(27 * 60 + 1.31) and got["run"]["user_s"] == 2860.15
    assert got["run"]["peak_rss_gb"] == 3.68 and got["run"]["cpu_percent"] == 197
    assert got["load"] == {"samples": 2, "min_1min": 0.9, "max_1min": 2.1, "mean_1min": 1.5}
    assert got["trials"] == {"ok": 3, "failed": 1}
    assert got["timings_by_method_s"]["focus"] == {"trials": 3, "task_s": 5.5, "total_s": 11.0}
    assert got["timings_total_s"]["total_s"] == 13.0
    assert (got["identical_to_committed"], got["different"], got["not_committed"]) == (2, 1, 1)


def test_a_file_that_is_not_a_time_report_is_refused(tmp_path):
    (tmp_path / "t").write_text("real 1m2s\n")
    with pytest.raises(ValueError, match="not a /usr/bin/time -v report"):
        lane_cost.parse_time(tmp_path / "t")
