"""``benchmarks/bench_quickstart.py``: the smoke mode end to end, and the pieces that read a run.

The end-to-end test runs the cold and warm phases of the tiny quickstart, reduced by overrides to
two cheap methods, one target and one seed, through the real command line, and checks the JSON's
fields (never its times). The breakdown and the leaderboard comparison are also checked on the
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
    assert [s["name"] for s in cold["steps"]] == ["cold-world", "cold-run"]
    assert [s["name"] for s in warm["steps"]] == ["warm-run"]
    assert cold["steps"][0]["command"][:3] == ["tokxfer", "world", "build"]
    assert warm["steps"][0]["command"][:3] == ["tokxfer", "run", "harness/configs/quickstart-tiny.yaml"]
    for p in (cold, warm):
        assert p["experiment"] == "quickstart-tiny" and p["n_trials"] == 2
        assert p["wall_s"] == pytest.approx(sum(s["wall_s"] for s in p["steps"]), abs=0.01)
        assert p["peak_rss_bytes"] > 50e6  # a Python process with torch loaded
        assert len(p["load_avg_start"]) == 3 and len(p["load_avg_end"]) == 3
        bd = p["breakdown"]
        assert bd["trials"] == 2 and bd["failed"] == 0
        assert set(bd["per_method"]) == {"random", "overlap"}
        assert bd["timings_s"]["total_s"] >= bd["timings_s"]["task_s"] > 0
        assert bd["torch_threads"] and all(t >= 1 for t in bd["torch_threads"])
        assert bd["fasttext"]["trained"] == 0 and bd["alignment"]["computed"] == 0  # neither method trains any
        assert p["cache"]["bytes"] == sum(p["cache"]["by_folder"].values()) > 0
        assert "world" in p["cache"]["by_folder"]
    # cold builds the world and pretrains the source; warm reuses both from the cache
    assert cold["breakdown"]["world_build_s"] > 0 and warm["breakdown"]["world_build_s"] == 0
    pre = cold["breakdown"]["source_pretraining"]
    assert pre["built"] and pre["models"][0]["kind"] == "mlm" and pre["total_s"] > 0
    assert warm["breakdown"]["source_pretraining"]["built"] is False
    # the warm run found every initialization in the cache
    assert sum(v["init_cache_hits"] for v in warm["breakdown"]["per_method"].values()) == 2
    assert sum(v["init_cache_hits"] for v in cold["breakdown"]["per_method"].values()) == 0


@pytest.mark.slow
def test_smoke_reports_leaderboard_machine_and_targets(smoke):
    for p in smoke["phases"].values():
        lb = p["leaderboard"]
        assert lb["committed"] == "leaderboards/tables/quickstart-tiny.md"
        assert lb["identical"] is False and lb["diff_head"]  # a reduced grid cannot reproduce the full table
    m = smoke["machine"]
    assert m["cores_usable"] >= 1 and m["cpus"] >= 1 and set(m["thread_env"]) == set(bq.THREAD_VARS)
    assert {t["target"] for t in smoke["targets"]} == {"cold quickstart", "warm quickstart", "cache after the run", "leaderboard"}
    assert all(t["status"] == "n/a" for t in smoke["targets"])  # targets apply to the full small quickstart only
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


def test_targets_met_and_missed():
    def phase(wall, cache, same):
        return {"wall_s": wall, "cache": {"bytes": cache}, "leaderboard": {"identical": same}}

    result = {"size": "small", "overrides": [], "phases": {"cold": phase(300.0, 0.9e9, True), "warm": phase(75.0, 0.9e9, True)}}
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(result)}
    assert status == {"cold quickstart": "met", "warm quickstart": "missed", "cache after the run": "met", "leaderboard": "met"}
    result["phases"]["warm"] = phase(40.0, 1.2e9, False)
    status = {t["target"]: t["status"] for t in bq.evaluate_targets(result)}
    assert status == {"cold quickstart": "met", "warm quickstart": "met", "cache after the run": "missed", "leaderboard": "missed"}


def test_bad_flags_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bq.main(["--size", "tiny", "--override", "seeds"])
    assert "--override 'seeds': expected key=value" in capsys.readouterr().err
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "x").write_text("x")
    with pytest.raises(SystemExit, match="not empty"):
        bq.main(["--size", "tiny", "--cache", str(tmp_path / "cache"), "--json", str(tmp_path / "r.json")])
    with pytest.raises(SystemExit, match="needs --cache"):
        bq.main(["--size", "tiny", "--phases", "warm", "--json", str(tmp_path / "r.json")])
