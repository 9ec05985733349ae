"""``benchmarks/bench_quickstart.py``: the smoke mode end to end, and the pieces that read a run.

The end-to-end test runs every phase (cold, warm, the grid with one and with two workers) of the tiny
quickstart, reduced by overrides to two cheap methods, one target and one seed, through the real
command line, and checks the JSON's fields (never its times). The breakdown and the leaderboard comparison are also checked on the
committed quickstart records, which have every method's fastText and alignment reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_quickstart as bq

ROOT = Path(__file__).resolve().parents[2]
SMOKE = [
    "--override", "seeds=[1]",
    "--override", "methods=[random, overlap]",
    "--override", "targets=[{language: near, tokenizer: {algorithm: unigram, vocab_size: 300}}]",
]  # fmt: skip


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("bench-quickstart")
    out = tmp / "result.json"
    assert bq.main(["--size", "tiny", *SMOKE, "--work-dir", str(tmp / "work"), "--json", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_smoke_runs_cold_then_warm_through_the_cli(smoke):
    assert smoke["bench"] == "quickstart" and smoke["size"] == "tiny"
    assert smoke["config"] == "harness/configs/quickstart-tiny.yaml" and len(smoke["overrides"]) == 3
    cold, warm = smoke["phases"]["cold"], smoke["phases"]["warm"]
    for p in (cold, warm):
        assert p["steps"][0]["command"][:4] == ["tokxfer", "quickstart", "--size", "tiny"]
        # the marks of the quickstart's output: setup, then the first row, then the table
        assert 0 < p["marks"]["setup_s"] <= p["marks"]["first_row_s"] <= p["marks"]["table_s"] <= p["wall_s"]
        assert "| Random |" in p["printed_table"]
    for name, p in smoke["phases"].items():
        assert p["experiment"] == "quickstart-tiny" and p["n_trials"] == 2
        assert [s["name"] for s in p["steps"]] == [name]
        assert p["wall_s"] == pytest.approx(sum(s["wall_s"] for s in p["steps"]), abs=0.01)
        assert p["peak_rss_bytes"] > 50e6  # a Python process with torch loaded
        assert len(p["load_avg_start"]) == 3 and len(p["load_avg_end"]) == 3
        assert p["load"]["cores"] >= 1 and p["load"]["max_1min"] is not None
        bd = p["breakdown"]
        assert bd["trials"] == 2 and bd["failed"] == 0
        assert set(bd["per_method"]) == {"random", "overlap"}
        assert bd["timings_s"]["total_s"] >= bd["timings_s"]["task_s"] > 0
        assert bd["torch_threads"] and all(t >= 1 for t in bd["torch_threads"])
        assert bd["fasttext"]["trained"] == 0 and bd["alignment"]["computed"] == 0  # neither method trains any
        assert p["cache"]["bytes"] == sum(p["cache"]["by_folder"].values()) > 0
        assert "world" in p["cache"]["by_folder"]
    # cold pretrains the source; the others reuse it (the grid phases from a copy of the cold cache's shared part)
    pre = cold["breakdown"]["source_pretraining"]
    assert pre["built"] and pre["models"][0]["kind"] == "mlm" and pre["total_s"] > 0
    assert all(smoke["phases"][n]["breakdown"]["source_pretraining"]["built"] is False for n in ("warm", "grid-1", "grid-2"))
    # the warm run found every initialization in the cache; the grid phases computed theirs
    assert sum(v["init_cache_hits"] for v in warm["breakdown"]["per_method"].values()) == 2
    for n in ("cold", "grid-1", "grid-2"):
        assert sum(v["init_cache_hits"] for v in smoke["phases"][n]["breakdown"]["per_method"].values()) == 0
    g1, g2 = smoke["phases"]["grid-1"], smoke["phases"]["grid-2"]
    assert g1["steps"][0]["command"][:3] == ["tokxfer", "run", "harness/configs/quickstart-tiny.yaml"]
    for g, n in ((g1, "1"), (g2, "2")):
        cmd = g["steps"][0]["command"]
        assert cmd[cmd.index("--workers") + 1] == n
    comp = smoke["comparison"]
    assert comp["bit_identical"] is True and comp["differing_trials"] == [] and comp["speedup_2_over_1"] > 0
    assert comp["tables_identical"] is True


@pytest.mark.slow
def test_smoke_reports_leaderboard_machine_and_targets(smoke):
    for p in smoke["phases"].values():
        lb = p["leaderboard"]
        assert lb["committed"] == "leaderboards/tables/quickstart-tiny.md"
        assert lb["identical"] is False and lb["diff_head"]  # a reduced grid cannot reproduce the full table
    m = smoke["machine"]
    assert m["cores_usable"] >= 1 and m["cpus"] >= 1 and set(m["thread_env"]) == set(bq.THREAD_VARS)
    assert {t["target"] for t in smoke["targets"]} == set(TARGET_NAMES)
    assert all(t["status"] == "n/a" for t in smoke["targets"])  # targets apply to the full small quickstart only
    load = smoke["load"]
    verdicts = [p["load"]["valid"] for p in smoke["phases"].values()]
    assert load["valid"] == (False if False in verdicts else None if None in verdicts else True) and smoke["valid"] == load["valid"]
    for p in smoke["phases"].values():  # each phase by its own rule: foreign CPU where /proc/stat exists
        v = p["load"]
        assert v["valid"] == (not v["foreign_cpu"]["busy"] if v["rule"] == "foreign CPU" else v["max_1min"] <= v["cores"])
    assert load["samples"] and all(len(x) == 2 for x in load["samples"])
    assert smoke["git"]["sha"] and smoke["work_dir"] is not None


def test_leaderboard_comparison_reproduces_committed_table(tmp_path):
    """The committed quickstart-tiny records render to the committed table, byte for byte."""
    env = bq.child_env(tmp_path / "cache", None)
    r = bq.compare_leaderboard(ROOT / "leaderboards" / "specs" / "quickstart-tiny.yaml", ROOT / "leaderboards" / "records",
                               tmp_path / "out", env, tmp_path, "committed")  # fmt: skip
    assert r["identical"] is True and r["diff_head"] == []


def test_breakdown_of_the_committed_quickstart_records():
    records = bq.load_records(ROOT / "leaderboards" / "records" / "quickstart" / "records")
    bd = bq.breakdown(records)
    assert bd["trials"] == 66 and bd["failed"] == 0
    assert len(bd["per_method"]) == 11 and sum(v["trials"] for v in bd["per_method"].values()) == 66
    ft = bd["fasttext"]
    assert ft["trained"] > 0 and ft["seconds"] > 0
    assert ft["seconds"] == pytest.approx(sum(v["fasttext_s"] for v in bd["per_method"].values()), abs=0.01)
    assert {c.split("/")[0] for c in ft["by_corpus"]} >= {"near", "script", "src"}
    assert {r["method"] for r in ft["runs"]} >= {"focus", "wechsel"}
    al = bd["alignment"]
    assert al["computed"] > 0 and {r["method"] for r in al["runs"]} >= {"tiktotok", "wechsel"}
    assert bd["per_method"]["focus"]["method_timings"]["aux_s"] > 0  # the method's own timings, summed
    assert bd["per_method"]["random"]["fasttext_s"] == 0


def test_cache_hits_are_left_out_of_fasttext_and_alignment():
    rec = {"status": "ok", "seed": 1, "config": {"method": {"name": "focus"}, "target": {"language": "near"}},
           "timings": {"total_s": 1.0}, "environment": {"torch_threads": 2},
           "init": {"info": {"cache_hit": True, "aux": {"source": {"cache": "miss", "seconds": 9.0, "params": {}}}}}}  # fmt: skip
    bd = bq.breakdown([rec])
    assert bd["fasttext"]["trained"] == 0 and bd["per_method"]["focus"]["init_cache_hits"] == 1
    rec["init"]["info"]["cache_hit"] = False
    bd = bq.breakdown([rec])
    assert bd["fasttext"]["trained"] == 1 and bd["fasttext"]["seconds"] == 9.0


TARGET_NAMES = ("first row (cold)", "cold quickstart", "warm quickstart", "2 workers vs 1", "2 workers' numbers",
                "printed table", "cache after the run", "leaderboard")


def _result(cold_wall, warm_wall, first_row, speedup, same, cache, invalid=()):
    def phase(name, wall):
        return {"wall_s": wall, "cache": {"bytes": cache}, "leaderboard": {"identical": same},
                "marks": {"first_row_s": first_row}, "load": {"valid": name not in invalid}}

    return {"size": "small", "overrides": [],
            "phases": {"cold": phase("cold", cold_wall), "warm": phase("warm", warm_wall),
                       "grid-1": phase("grid-1", 100.0), "grid-2": phase("grid-2", 55.0)},
            "comparison": {"speedup_2_over_1": speedup, "bit_identical": same, "tables_identical": same}}


def test_targets_met_and_missed():
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(_result(290.0, 50.0, 100.0, 1.8, True, 0.9e9))}
    assert status == {**dict.fromkeys(TARGET_NAMES, "met"), "warm quickstart": "missed"}
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(_result(310.0, 40.0, 130.0, 1.5, False, 1.2e9))}
    assert status == {**dict.fromkeys(TARGET_NAMES, "missed"), "warm quickstart": "met"}


def test_a_busy_phase_withholds_only_the_timings_read_from_it():
    timed = {"first row (cold)", "cold quickstart", "warm quickstart", "2 workers vs 1"}
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(_result(1.0, 1.0, 1.0, 2.0, True, 1.0, invalid=bq.PHASES))}
    assert status == {name: "invalid (load)" if name in timed else "met" for name in TARGET_NAMES}
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(_result(1.0, 1.0, 1.0, 2.0, True, 1.0, invalid=("cold",)))}
    assert status == {name: "invalid (load)" if name in {"first row (cold)", "cold quickstart"} else "met" for name in TARGET_NAMES}
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(_result(1.0, 1.0, 1.0, 1.0, True, 1.0, invalid=("grid-2",)))}
    assert status["2 workers vs 1"] == "invalid (load)" and status["warm quickstart"] == "met"


def test_a_phase_is_judged_by_the_cpu_other_processes_took():
    # the quickstart's own two workers hold the load average at 2.01 on 2 cores: idle by the foreign CPU
    idle = {"cpu_s": 3.0, "cores": 0.02, "limit": 0.25, "busy": False}
    v = bq.load_verdict([1.2, 2.01], cores=2, foreign=idle)
    assert v["valid"] is True and v["rule"] == "foreign CPU" and v["max_1min"] == 2.01 and v["foreign_cpu"] == idle
    assert bq.load_verdict([0.5, 1.0], cores=2, foreign={**idle, "cores": 0.6, "busy": True})["valid"] is False
    # without /proc/stat the load average decides: valid while it stays at or under the cores
    unknown = {"cpu_s": None, "cores": None, "limit": 0.25, "busy": None}
    assert bq.load_verdict([0.5, 1.9, 2.0], cores=2, foreign=unknown) == {
        "max_1min": 2.0, "mean_1min": 1.47, "cores": 2, "valid": True, "rule": "load average"}
    assert bq.load_verdict([0.5, 2.1], cores=2)["valid"] is False
    assert bq.load_verdict([], cores=2) == {"max_1min": None, "mean_1min": None, "cores": 2, "valid": None, "rule": "none"}


def test_the_quickstarts_marks_and_printed_table(tmp_path):
    seen = dict.fromkeys(bq.MARKS)
    for t, line in enumerate(["1/3 building …", "| Method | x |", "2/3 running …", "| Method | x |", "|:---|---:|",
                              "| Random | 1.0 |", "| Overlap | 2.0 |", "3/3 the leaderboard"]):
        bq._mark(seen, line, float(t))
    assert seen == {"setup_s": 2.0, "first_row_s": 5.0, "table_s": 7.0}
    log = tmp_path / "q.log"
    log.write_text("1/3 x\n2/3 rows …\n| Random | 1.0 |\nWARNING tokxfer: a flag\n\n3/3 the leaderboard\n"
                   "| Random | 1.0 |\nran 2 trials, skipped 0, failed 0 in 12s. Leaderboard: /tmp/x\n")
    assert bq.printed_table(log) == "| Random | 1.0 |\n3/3 the leaderboard\n| Random | 1.0 |"


def test_bad_flags_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bq.main(["--size", "tiny", "--override", "seeds"])
    assert "--override 'seeds': expected key=value" in capsys.readouterr().err
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "x").write_text("x")
    with pytest.raises(SystemExit, match="not empty"):
        bq.main(["--size", "tiny", "--cache", str(tmp_path / "cache"), "--json", str(tmp_path / "r.json")])
    with pytest.raises(SystemExit, match="without cold needs --cache"):
        bq.main(["--size", "tiny", "--phases", "warm", "--json", str(tmp_path / "r.json")])
