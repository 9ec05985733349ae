"""``benchmarks/bench_scaling.py``: the fitted slope, its refusals, and one tiny point end to end (never its times)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_scaling as bsc


def test_slope_is_the_log_log_exponent():
    assert bsc.slope([1e3, 1e4, 1e5], [3.0, 30.0, 300.0]) == 1.0
    assert bsc.slope([10, 20, 40], [1.0, 4.0, 16.0]) == 2.0
    assert bsc.slope([10, 10], [1.0, 2.0]) is None and bsc.slope([10], [1.0]) is None


@pytest.mark.parametrize("argv,needle", [
    (["--sources", "8000", "--targets", "4000,16000"], "pair up"),
    (["--sources", "8000", "--targets", "5000"], ">= 2 x its target"),
    (["--methods", "focus,nope"], "unknown ['nope']"),
    (["--max", "100"], "no source vocabulary"),
])  # fmt: skip
def test_bad_arguments_are_refused(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        bsc.main(argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_bad_sizes_name_the_flag():
    with pytest.raises(SystemExit, match="--dims: expected comma-separated integers"):
        bsc.main(["--dims", "768,big"])


def test_one_tiny_point_end_to_end(tmp_path):
    out, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    argv = ["--sources", "2000,4000", "--targets", "400,800", "--max", "2000", "--dims", "16", "--methods", "init",
            "--threads", "1", "--work-dir", str(tmp_path / "work"), "--json", str(out), "--plot", str(png)]  # fmt: skip
    assert bsc.main(argv) == 0
    rec = json.loads(out.read_text())
    [p] = rec["points"]
    assert (p["method"], p["source_vocab"], p["target_vocab"], p["dim"], p["exit"]) == ("init", 2000, 400, 16, 0)
    assert p["wall_s"] > 0 and p["peak_rss_gb"] > 0.05 and len(p["load"]["before"]) == 3
    assert rec["fits"]["init@16"] == {"points": 1, "wall_slope": None, "rss_slope": None, "busy_points": int(p["load"]["busy"])}
    assert "| init | 16 | 2,000 | 400 |" in rec["table"] and png.read_bytes()[:4] == b"\x89PNG"
