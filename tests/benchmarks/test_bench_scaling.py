"""``benchmarks/bench_scaling.py``: the fitted slope, its refusals, one tiny point end to end (never its times), and
``--references`` (the reference implementations beside ours): its driver with a stand-in benchmark, and FOCUS for real."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import bench_scaling as bsc
from tests.conftest import reference_module


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


# ---------------------------------------------------------------------------------------------------------------
# --references: the reference implementations' cost beside ours (bench_focus.py / bench_wechsel.py --end-to-end)
# ---------------------------------------------------------------------------------------------------------------

RESULTS = Path(bsc.__file__).resolve().parent / "results"
TEMPLATES = {"focus": RESULTS / "focus_e2e_scale1.json", "wechsel": RESULTS / "wechsel_e2e_scale1_d972a20.json"}
"""Real end-to-end records (idle runs): the fake benchmark below writes their schema with its own numbers."""

FAKE_BENCH = """
import json, sys, time
from pathlib import Path

method, scale, out, template = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
print(f"building inputs in /x (scale {scale}) ...", flush=True)
print("running " + ("deepfocus.FOCUS" if method == "focus" else "wechsel.WECHSEL(...).apply(...)") + " ...", flush=True)
if method == "wechsel" and scale >= 1:
    time.sleep(120)  # past --timeout: killed in the reference's step
rec = json.loads(template.read_text())
ref = rec["deepfocus"] if method == "focus" else rec["reference"]
ref["focus_s" if method == "focus" else "wechsel_s"] = 10 * scale**2
rec["variants"]["reference"]["method_s" if method == "focus" else "method_s_information_only"] = scale
busy = method == "wechsel" and scale == 0.5
rec["load"] = {**rec["load"], "busy": busy, "max_1min": 9.0 if busy else 0.5}
out.write_text(json.dumps(rec))
"""


def _fake_build(method, scale, work, timeout):
    sizes = {"n_source": int(32_000 * scale), "n_target": int(16_000 * scale), "dim": 768}
    return {"exit": 0, "timed_out": False, "wall_s": 0.1, "last_output": None, "manifest": {"sizes": sizes, "build_s": 1.0}}


def test_references_fit_both_slopes_and_record_a_reference_past_its_timeout(tmp_path, monkeypatch):
    """The driver around the end-to-end benchmarks (processes, time-out, reading their JSON schema, slopes, table,
    plot), with a stand-in benchmark: the reference's seconds grow as n², ours as n."""
    fake = tmp_path / "fake_bench.py"
    fake.write_text(FAKE_BENCH)
    monkeypatch.setattr(bsc, "build_reference_inputs", _fake_build)
    monkeypatch.setattr(bsc, "reference_command", lambda method, scale, work, out, threads: [
        sys.executable, str(fake), method, repr(scale), str(out), str(TEMPLATES[method])])  # fmt: skip
    out, png = tmp_path / "refs.json", tmp_path / "refs.png"
    argv = ["--references", "--reference-scales", "0.25,0.5,1", "--timeout", "4", "--work-dir", str(tmp_path / "w"),
            "--json", str(out), "--plot", str(png)]  # fmt: skip
    assert bsc.main(argv) == 0  # a time-out is a result ("where they run"), not a failure
    rec = json.loads(out.read_text())
    assert [(e["method"], e["scale"], e["status"]) for e in rec["references"]] == [
        ("focus", 0.25, "ok"), ("wechsel", 0.25, "ok"), ("focus", 0.5, "ok"), ("wechsel", 0.5, "ok"),
        ("focus", 1.0, "ok"), ("wechsel", 1.0, "timed out")]  # fmt: skip
    f1 = rec["references"][4]
    assert (f1["reference"], f1["n_source"], f1["n_target"], f1["reference_s"], f1["ours_s"]) == ("deepfocus", 32_000, 16_000, 10.0, 1.0)
    assert f1["ratio"] == {"value": 10.0, "on_busy_machine": None} and f1["reference_process_s"] > 0 and f1["ours_process_s"] > 0
    w_busy, w_out = rec["references"][3], rec["references"][5]
    assert w_busy["ratio"] == {"value": None, "on_busy_machine": 5.0}  # a busy run's ratio is never a result
    assert w_out["timed_out"] and w_out["killed_in"] == "reference" and w_out["reference_s"] is None and w_out["ratio"] is None
    assert w_out["n_source"] == 32_000 and 4 <= w_out["run_wall_s"] < 60
    fits = rec["reference_fits"]
    assert (fits["focus"]["points"], fits["focus"]["reference_slope"], fits["focus"]["ours_slope"]) == (3, 2.0, 1.0)
    assert (fits["wechsel"]["points"], fits["wechsel"]["reference_slope"], fits["wechsel"]["busy_points"]) == (2, 2.0, 1)
    assert fits["wechsel"]["not_run"] == [{"scale": 1.0, "n_source": 32_000, "status": "timed out"}]
    assert "| focus | deepfocus | 1 | 32,000 | 16,000 | 768 | 10.00 | 1.00 | 10.0x |" in rec["table"]
    assert "| wechsel | wechsel | 1 | 32,000 | 16,000 | 768 | — | — | — |" in rec["table"]
    assert "TIMED OUT after 4 s (in the reference step)" in rec["table"] and "ON A BUSY MACHINE" in rec["table"]
    assert "| focus (deepfocus) | 3 | 2.0 | 1.0 | 0 |  |" in rec["table"] and "| wechsel (wechsel) | 2 | 2.0 | 1.0 | 1 | 1: timed out |" in rec["table"]
    assert png.read_bytes()[:4] == b"\x89PNG" and rec["points"] == [] and rec["mode"] == "references"


def test_reference_commands_are_the_end_to_end_benchmarks(tmp_path):
    cmd = bsc.reference_command("wechsel", 0.5, tmp_path / "w", tmp_path / "o.json", 2)
    assert Path(cmd[1]).name == "bench_wechsel.py" and cmd[2:4] == ["--end-to-end", "--scale"] and cmd[4] == "0.5"
    assert cmd[cmd.index("--variants") + 1] == "reference" and cmd[-2:] == ["--language", "near"]
    assert Path(bsc.reference_command("focus", 1, tmp_path, tmp_path / "o.json", 1)[1]).name == "bench_focus.py"


@pytest.fixture(scope="module")
def focus_references(tmp_path_factory):
    """``--references`` for real, FOCUS beside deepfocus at the smallest scale the input builders make (500 x 300)."""
    reference_module("deepfocus")
    root = tmp_path_factory.mktemp("refs")
    out, png = root / "refs.json", root / "refs.png"
    argv = ["--references", "--reference-methods", "focus", "--reference-scales", "0.01", "--threads", "1",
            "--timeout", "300", "--work-dir", str(root / "work"), "--json", str(out), "--plot", str(png)]  # fmt: skip
    return bsc.main(argv), json.loads(out.read_text()), png, root


@pytest.mark.slow  # the inputs' build and both processes: ~40 s on 2 idle cores
def test_references_run_deepfocus_beside_ours_end_to_end(focus_references):
    code, rec, png, _ = focus_references
    assert code == 0
    [e] = rec["references"]
    assert (e["method"], e["reference"], e["status"], e["n_source"], e["n_target"], e["dim"]) == ("focus", "deepfocus", "ok", 500, 300, 768)
    assert e["reference_s"] > 0 and e["ours_s"] > 0 and e["reference_process_s"] > e["reference_s"] and e["ours_process_s"] > e["ours_s"]
    assert e["build_s"] > 0 and len(e["load"]["before"]) == 3 and e["run_wall_s"] >= e["reference_process_s"] + e["ours_process_s"]
    r = round(e["reference_s"] / e["ours_s"], 2)
    assert e["ratio"] == ({"value": None, "on_busy_machine": r} if e["load"]["busy"] else {"value": r, "on_busy_machine": None})
    steps = e["ours_steps_s"]  # our method's split, kept from the run's init_info.json
    assert {"overlap_s", "aux_s", "combine_s", "total_s"} <= set(steps) and steps["total_s"] == e["ours_s"]
    assert rec["reference_fits"]["focus"] == {"reference": "deepfocus", "points": 1, "reference_slope": None, "ours_slope": None,
                                              "busy_points": int(e["load"]["busy"]), "not_run": []}  # fmt: skip
    assert "| focus | deepfocus | 0.01 | 500 | 300 | 768 |" in rec["table"] and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # the inputs' build and both processes: ~40 s on 2 idle cores
def test_a_real_run_past_its_timeout_is_recorded_not_dropped(focus_references, tmp_path):
    _, _, _, root = focus_references  # its inputs are built: only the run is timed out
    out = tmp_path / "refs.json"
    argv = ["--references", "--reference-methods", "focus", "--reference-scales", "0.01", "--threads", "1",
            "--timeout", "1", "--work-dir", str(root / "work"), "--json", str(out)]  # fmt: skip
    assert bsc.main(argv) == 0
    [e] = json.loads(out.read_text())["references"]
    assert (e["status"], e["timed_out"], e["n_source"], e["reference_s"], e["ours_s"], e["ratio"]) == ("timed out", True, 500, None, None, None)
    assert e["killed_in"] in ("start", "inputs", "reference") and e["run_wall_s"] < 10


def test_a_build_past_its_timeout_is_recorded(tmp_path):
    out = tmp_path / "refs.json"
    argv = ["--references", "--reference-methods", "wechsel", "--reference-scales", "0.01", "--build-timeout", "1",
            "--work-dir", str(tmp_path / "w"), "--json", str(out)]  # fmt: skip
    assert bsc.main(argv) == 1  # the inputs were never built: nothing was measured
    [e] = json.loads(out.read_text())["references"]
    assert (e["method"], e["status"], e["timed_out"], e["n_source"], e["reference_s"]) == ("wechsel", "build timed out", True, None, None)
    assert "BUILD TIMED OUT" in json.loads(out.read_text())["table"]


def test_killed_in_reads_the_last_step_of_the_log(tmp_path):
    log = tmp_path / "run.log"
    assert bsc.killed_in(log) == "start"
    log.write_text("building inputs in /w (scale 1.0) ...\nrunning deepfocus.FOCUS ...\n")
    assert bsc.killed_in(log) == "reference"
    log.write_text(log.read_text() + "running tokxfer init (reference) ...\nTraceback\n")
    assert bsc.killed_in(log) == "tokxfer"


@pytest.mark.parametrize("argv,needle", [
    (["--references", "--reference-methods", "focus,tiktotok"], "unknown ['tiktotok']"),
    (["--references", "--reference-scales", "0.5,x"], "expected comma-separated numbers"),
    (["--references", "--reference-scales", "0,1"], "expected positive numbers"),
])  # fmt: skip
def test_bad_reference_arguments_are_refused(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        bsc.main(argv)
    assert needle in str(e.value.code) + capsys.readouterr().err


def test_the_wechsel_end_to_end_bench_passes_its_screen_to_the_method():
    """``bench_wechsel.py --end-to-end --screen S`` runs tokxfer's WECHSEL with that screen (the rows are the same
    for every screen; only the time differs), and without it the method's own default."""
    from benchmarks.bench_wechsel import _variant_config
    from methods.wechsel import WechselConfig

    assert _variant_config("reference", "bf16")["screen"] == "bf16"
    assert "screen" not in _variant_config("reference") and WechselConfig().screen == "auto"
    assert {k: v for k, v in _variant_config("reference", "fp32").items() if k != "screen"} == _variant_config("reference")
