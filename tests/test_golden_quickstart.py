"""CI's regression check: the reduced quickstart against its committed golden values.

The golden file is written only by ``tokxfer golden update`` (its provenance names the command,
git sha, date, device and library versions); a metric that moves the wrong way beyond tolerance
fails this test with the readable diff of ``tokxfer check-regression``.
"""

from __future__ import annotations

import json

from harness.cli import CONFIG_DIR, PACKAGE_DIR, main

GOLDEN = PACKAGE_DIR.parent / "leaderboards" / "golden" / "quickstart-tiny.json"


def test_reduced_quickstart_matches_golden(tmp_path, capsys):
    golden = json.loads(GOLDEN.read_text())
    assert golden["provenance"]["command"].startswith("tokxfer golden update")
    assert golden["provenance"]["git"]["sha"]
    runs = tmp_path / "runs"
    assert main(["run", str(CONFIG_DIR / "quickstart-tiny.yaml"), "--runs-dir", str(runs), "--no-tracking", "--quiet"]) == 0
    code = main(["check-regression", "--records", str(runs / "quickstart-tiny"), "--golden", str(GOLDEN)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{len(golden['cells'])} cells, 0 failing" in out
