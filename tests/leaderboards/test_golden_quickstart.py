"""CI's regression check: the reduced quickstart against its committed golden values and table.

The golden file is written only by ``tokxfer golden update`` (its provenance names the command,
git sha, date, device and library versions); a metric that moves the wrong way beyond tolerance
fails this test with the readable diff of ``tokxfer check-regression``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import CONFIG_DIR, main

ROOT = Path(__file__).resolve().parents[2]  # the checkout: committed golden values and tables
GOLDEN = ROOT / "leaderboards" / "golden" / "quickstart-tiny.json"


@pytest.fixture(scope="module")
def fresh_runs(tmp_path_factory):
    runs = tmp_path_factory.mktemp("golden") / "runs"
    assert main(["run", str(CONFIG_DIR / "quickstart-tiny.yaml"), "--runs-dir", str(runs), "--no-tracking", "--quiet"]) == 0
    return runs


def test_reduced_quickstart_matches_golden(fresh_runs, capsys):
    golden = json.loads(GOLDEN.read_text())
    assert golden["provenance"]["command"].startswith("tokxfer golden update")
    assert golden["provenance"]["git"]["sha"]
    code = main(["check-regression", "--records", str(fresh_runs / "quickstart-tiny"), "--golden", str(GOLDEN)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{len(golden['cells'])} cells, 0 failing" in out


def test_committed_table_matches_fresh_records(fresh_runs, tmp_path):
    """``leaderboards/tables/quickstart-tiny.md`` is what ``tokxfer leaderboard`` makes of fresh records."""
    spec = ROOT / "leaderboards" / "specs" / "quickstart-tiny.yaml"
    assert main(["leaderboard", str(spec), "--runs-dir", str(fresh_runs), "--out", str(tmp_path)]) == 0
    committed = (ROOT / "leaderboards" / "tables" / "quickstart-tiny.md").read_text()
    fresh = (tmp_path / "quickstart-tiny.md").read_text()
    # Provenance is the one thing fresh records cannot share with the committed ones: the tree they
    # are written from (git.dirty) and the world build (the committed records predate world
    # fingerprints). Every number, interval, bold mark and rank must be the same.
    assert _without_provenance(fresh) == _without_provenance(committed)


def _without_provenance(md: str) -> str:
    """The table without its provenance marks (◊ dirty tree, ≠ world build), their legend lines and the
    provenance footnote."""
    lines = [line for line in md.splitlines()
             if not line.startswith(("- ◊ ", "- ≠ ", "- Provenance: "))]
    return "\n".join(lines).replace("◊", "").replace("≠", "")
