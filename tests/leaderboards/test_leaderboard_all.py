"""``tokxfer leaderboard --all``: every committed world table is what the committed records produce.

The records behind the top-level specs are committed under ``leaderboards/records/`` (put there by
``tokxfer leaderboard --all --collect RUNS_DIR``), so a clean clone regenerates every world table in
one command without re-running an experiment, and this test fails when a table is edited by hand
or its records change without re-rendering.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.run.records import TrialRecord
from leaderboards.aggregate import matches_where
from leaderboards.cli import collect_records
from leaderboards.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tox installs the package elsewhere)
ALL_SPECS = sorted((ROOT / "leaderboards" / "specs").glob("*.yaml"))
# World specs whose experiments have not been run yet, and why: no records, so no committed table.
PENDING: dict[str, str] = {
    # issue 28: the XLP tables on TLM-pretrained multilingual sources (the lead runs the 5-seed grids)
    "methods-x-encodings-new-downstream": "harness/configs/methods-x-encodings-new-downstream.yaml has not been run yet",
}
SPECS = [p for p in ALL_SPECS if p.stem not in PENDING]
RECORDS = ROOT / "leaderboards" / "records"
TABLES = ROOT / "leaderboards" / "tables"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("tables")
    assert main(["leaderboard", "--all", "--runs-dir", str(RECORDS), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_every_world_spec_has_committed_records(spec_path):
    spec = load_spec(spec_path)
    for exp in spec.experiments:
        files = list((RECORDS / exp / "records").glob("*.json"))
        assert files, f"{spec_path.name}: no committed records for experiment {exp!r} under {RECORDS}"
        for f in files:
            assert json.loads(f.read_text())["experiment"] == exp, f


@pytest.mark.parametrize("name", sorted(PENDING))
def test_pending_specs_have_neither_records_nor_tables(name):
    """A pending spec must not show a stale table; once its records are committed, it leaves PENDING."""
    assert (ROOT / "leaderboards" / "specs" / f"{name}.yaml").is_file(), f"PENDING names no spec {name!r}"
    spec = load_spec(ROOT / "leaderboards" / "specs" / f"{name}.yaml")
    waiting = []  # experiments of the spec without a committed record (a spec may also read finished ones)
    for exp in spec.experiments:
        files = list((RECORDS / exp / "records").glob("*.json"))
        # a spec with a filter (e.g. one setting of a shared experiment) is pending while no record matches it
        if not [f for f in files if matches_where(TrialRecord.from_json(json.loads(f.read_text()), where=str(f)), spec.where)]:
            waiting.append(exp)
    assert waiting, f"{name}: records of every experiment it reads are committed; remove it from PENDING and commit its table"
    assert not list(TABLES.glob(f"{name}.*")), f"{name}: a table is committed without records"


@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
@pytest.mark.parametrize("ext", ["md", "csv", "comparisons.csv", "tex"])
def test_committed_table_matches_committed_records(rendered, spec_path, ext):
    name = load_spec(spec_path).name
    fresh = (rendered / f"{name}.{ext}").read_text()
    committed = (TABLES / f"{name}.{ext}").read_text()
    assert fresh == committed, f"leaderboards/tables/{name}.{ext} differs from what its records produce; run tokxfer leaderboard --all"


def test_collect_replaces_an_experiments_records_as_a_whole(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text((ROOT / "leaderboards" / "specs" / "quickstart-tiny.yaml").read_text())
    runs = tmp_path / "runs" / "quickstart-tiny" / "records"
    runs.mkdir(parents=True)
    (runs / "a.json").write_text("{}")
    (runs / "a.examples.npz").write_bytes(b"npz")  # per-example results travel with their record
    (runs / "b.examples.npz").write_bytes(b"npz")  # (an orphan does not)
    dest = tmp_path / "committed"
    old = dest / "quickstart-tiny" / "records"
    old.mkdir(parents=True)
    (old / "stale.json").write_text("{}")
    assert collect_records([spec], tmp_path / "runs", dest) == ["quickstart-tiny"]
    assert sorted(p.name for p in old.iterdir()) == ["a.examples.npz", "a.json"]
    # an experiment missing from the runs keeps its committed records
    assert collect_records([spec], tmp_path / "nothing", dest) == []
    assert sorted(p.name for p in old.iterdir()) == ["a.examples.npz", "a.json"]


def test_a_spec_whose_filter_matches_no_record_is_skipped_like_one_without_records(tmp_path):
    """A setting of a shared experiment that has not been run (e.g. translate-train) renders no table."""
    from leaderboards.cli import _records_for
    from leaderboards.spec import parse_spec
    from tests.leaderboards.test_leaderboards import SPEC, all_records, write_records

    write_records(tmp_path, all_records())
    with pytest.raises(FileNotFoundError, match=r"matches its filter \{'encoding.name': 'xlp'\}"):
        _records_for(parse_spec(dict(SPEC, where={"encoding.name": "xlp"})), tmp_path)
    assert len(_records_for(parse_spec(dict(SPEC, where={"encoding.name": "none"})), tmp_path)) == len(all_records())


def test_all_skips_a_spec_until_every_experiment_it_reads_has_records(tmp_path):
    """New rows declared beside a finished experiment (e.g. new-methods beside focus-table4) wait for their run."""
    from leaderboards.cli import _records_for
    from leaderboards.spec import parse_spec
    from tests.leaderboards.test_leaderboards import SPEC, all_records, write_records

    write_records(tmp_path, all_records())
    spec = parse_spec(dict(SPEC, experiments=[*SPEC["experiments"], "not-run-yet"]))
    with pytest.raises(FileNotFoundError, match=r"experiment\(s\) not-run-yet \(of "):
        _records_for(spec, tmp_path, every_experiment=True)
    assert len(_records_for(spec, tmp_path)) == len(all_records())  # one spec asked for by name: what exists


def test_committed_findings_match_committed_records(rendered):
    """``FINDINGS.md`` (every declared comparison's verdict) is what the committed records give."""
    fresh = (rendered / "FINDINGS.md").read_text()
    assert fresh == (TABLES / "FINDINGS.md").read_text(), "leaderboards/tables/FINDINGS.md is stale; run tokxfer leaderboard --all"
    assert "## tasks-encoder" in fresh and "→" in fresh
