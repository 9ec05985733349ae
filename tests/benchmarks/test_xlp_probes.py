"""benchmarks/xlp_probes.py: the committed XLP source probes side by side, read from their result files."""

from __future__ import annotations

import json

import pytest

from benchmarks import xlp_probes


def test_every_listed_probe_is_committed_and_the_xlm_row_is_what_the_readme_quotes():
    rows = xlp_probes.summarize()
    assert len(rows) == len(xlp_probes.PROBES)
    for (_, _, files), row in zip(xlp_probes.PROBES, rows):
        assert all((xlp_probes.RESULTS / f).is_file() for f in files)
        assert row["xnli"] or row["retrieval"], row["recipe"]  # every probe contributes numbers
    xlm = next(r for r in rows if r["recipe"].startswith("XLM-layout"))
    # fine-tuning seeds 1-3 on the seed-1 source (README's XLP paragraph)
    assert xlm["xnli_n"] == 3
    assert xlm["xnli"] == {"src": 74.3, "near": 53.3, "agglu": 36.4, "far": 34.9, "script": 33.9}
    assert xlm["retrieval"] == {"near": 51.4, "agglu": 19.0, "far": 12.8, "script": 5.5}
    md = xlp_probes.markdown(rows)
    assert md.count("\n| ") == len(rows) and "| XLM-layout TLM, 2000 steps, bf16 | 12k x 2 epochs, bf16 | 3 | 74.3 |" in md


def test_a_file_that_is_not_a_probe_result_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(xlp_probes, "PROBES", [("r", "f", ("bad.json",))])
    (tmp_path / "bad.json").write_text(json.dumps({"note": "no records"}))
    with pytest.raises(xlp_probes.ProbeFileError, match=r"bad\.json: expected a 'records' list"):
        xlp_probes.summarize(tmp_path)
    # the command: one line naming the file, exit 2, no traceback
    assert xlp_probes.main(["--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json: expected a 'records' list" in err and "Traceback" not in err
    with pytest.raises(xlp_probes.ProbeFileError, match=r"missing\.json: cannot read a probe result"):
        monkeypatch.setattr(xlp_probes, "PROBES", [("r", "f", ("missing.json",))])
        xlp_probes.summarize(tmp_path)
