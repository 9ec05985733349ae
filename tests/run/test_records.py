"""TrialRecord: the typed record, its JSON form, the schema migrations and the committed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run import records
from harness.run.config import config_hash
from harness.run.records import RecordError, TrialRecord

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "records").glob("*.json"))
COMMITTED = sorted((ROOT / "leaderboards" / "records").glob("*/records/*.json"))


def test_fixtures_cover_every_schema_version():
    versions = {json.loads(p.read_text())["schema_version"] for p in FIXTURES}
    assert versions == set(range(1, records.SCHEMA_VERSION + 1))


def test_schema_1_to_2_drops_the_task_seed_and_keeps_the_rest():
    raw = json.loads((ROOT / "tests" / "fixtures" / "records" / "schema1-seeds.json").read_text())
    assert raw["seeds"] == {"init": 5023, "task": 7311}
    rec2 = records.MIGRATIONS[1](raw)
    assert rec2["schema_version"] == 2 and rec2["seeds"] == {"init": 5023}
    assert all(rec2[k] == v for k, v in raw.items() if k not in ("schema_version", "seeds"))


@pytest.mark.parametrize("source, expected", [
    ({"model": "world:mlm", "pretrain": {}}, 0),              # pretrained once, whatever the trial seed
    ({"model": "world:clm", "pretrain": {"seed": 7}}, 7),
    ({"model": "xlm-roberta-base", "pretrain": {}}, None),   # not pretrained by tokxfer
])
def test_schema_2_to_3_names_the_seed_of_every_random_source(source, expected):
    raw = {"schema_version": 2, "trial_id": "t", "status": "ok", "seed": 3, "seeds": {"init": 123456},
           "config": {"source": source, "seed": 3}}
    rec = TrialRecord.from_json(raw)
    assert rec.schema_version == 3 == records.SCHEMA_VERSION
    assert rec.seeds == {"source": expected, "init": 3, "stages": 3, "task": 3} and rec.examples is None


@pytest.mark.parametrize("path", FIXTURES + COMMITTED, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_kept_record_loads_and_round_trips(path):
    raw = json.loads(path.read_text())
    rec = records.read_record(path)
    out = rec.to_json()
    assert TrialRecord.from_json(out) == rec
    assert out["schema_version"] == records.SCHEMA_VERSION
    for key, value in raw.items():  # nothing is lost; only the migration changes what was there
        if key == "schema_version":
            continue
        if key == "seeds" and raw["schema_version"] < 3:  # migration 2 -> 3 names every source's seed
            assert set(out["seeds"]) == {"source", "init", "stages", "task"}
            assert out["seeds"]["task"] == raw.get("seed", (raw.get("config") or {}).get("seed"))
            continue
        assert out[key] == value, key
    added = {"schema_version"} | ({"seeds"} if raw["schema_version"] < 3 else set())  # migration 2 -> 3 adds them
    assert all(out[k] is None for k in set(out) - set(raw) - added)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_committed_trial_ids_are_still_the_hash_of_their_config(path):
    rec = records.read_record(path)
    assert config_hash(rec.config) == rec.trial_id


def test_committed_records_name_the_seeds_of_their_schema():
    """The reason for migration 1 → 2 (schema-1 records name a task seed no task used), and what the
    records written since say."""
    assert COMMITTED
    raw = [json.loads(p.read_text()) for p in COMMITTED]
    versions = {r["schema_version"] for r in raw}
    assert 1 in versions and versions <= {1, 2, 3}, versions
    expected = {1: {"init", "task"}, 2: {"init"}, 3: {"source", "init", "stages", "task"}}
    for r in raw:
        if r.get("seeds"):
            assert set(r["seeds"]) == expected[r["schema_version"]], r["trial_id"]


def test_fields_identify_the_trial():
    rec = TrialRecord.from_json({
        "trial_id": "t", "status": "failed", "seed": None,
        "config": {"method": {"id": "focus-cbow", "name": "focus"}, "encoding": {"name": "xlp"},
                   "task": {"name": "ner"}, "target": {"language": "near"}, "seed": 3,
                   "stages": [{"id": "lapt", "name": "lapt"}, "junk"]},
        "init": {"counts": {"copied": 4}, "diagnostics": {"gold_top1": 0.5}},
        "flags": [{"code": "loss_near_zero", "message": "m"}],
    })
    assert (rec.method_id, rec.encoding_id, rec.task_name, rec.target_language) == ("focus-cbow", "xlp", "ner", "near")
    assert rec.trial_seed == 3 and not rec.ok and rec.version == "schema 3 / tokxfer None"
    assert rec.init_counts == {"copied": 4} and rec.init_diagnostics == {"gold_top1": 0.5}
    assert rec.flag_codes == {"loss_near_zero"} and rec.stage_specs == [{"id": "lapt", "name": "lapt"}]
    assert rec.config_value("target.language") == "near" and rec.config_value("target.nope") is None
    bare = TrialRecord.from_json({"trial_id": "u", "status": "ok"})
    assert bare.method_id is None and bare.encoding_id == "none" and bare.init_counts == {} and bare.flag_codes == set()


def test_unknown_top_level_keys_are_kept_and_written_back(tmp_path):
    rec = TrialRecord.from_json({"trial_id": "t", "status": "ok", "from_a_newer_tokxfer": [1, 2]})
    assert rec.extra == {"from_a_newer_tokxfer": [1, 2]}
    path = records.write_record(tmp_path, rec)
    assert json.loads(path.read_text())["from_a_newer_tokxfer"] == [1, 2]
    assert records.read_record(path) == rec


@pytest.mark.parametrize("data, message", [
    ({"status": "ok"}, "missing required field.*trial_id"),
    ({"trial_id": "t"}, "missing required field.*status"),
    ({"trial_id": "t", "status": "ok", "metrics": [1]}, "field 'metrics' must be a JSON object"),
    ({"trial_id": "t", "status": "ok", "flags": "x"}, "field 'flags' must be a list"),
    ({"trial_id": "t", "status": "ok", "schema_version": 99}, "newer than this tokxfer"),
    ({"trial_id": "t", "status": "ok", "schema_version": "1"}, "schema_version must be a positive integer"),
])
def test_what_is_not_a_record_is_refused_naming_the_field(data, message):
    with pytest.raises(RecordError, match=message):
        TrialRecord.from_json(data)


def test_a_bad_record_file_is_named(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"trial_id": "t", "status": "ok", "schema_version": 2, "init": "x"}))
    with pytest.raises(RecordError, match=r"t\.json: field 'init'"):
        records.read_record(p)
