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


def test_transfer_vs_alignment_pairs_each_language_that_has_both_and_plots_them(tmp_path):
    rows = xlp_probes.summarize()
    points = xlp_probes.transfer_vs_alignment(rows)
    # the four recipes with retrieval and XNLI, four target languages each (src is the pivot, never a point)
    assert len(points) == 16 and {p["language"] for p in points} == {"near", "agglu", "far", "script"}
    xlm = {p["language"]: (p["retrieval"], p["xnli"]) for p in points if p["recipe"].startswith("XLM-layout")}
    assert xlm == {"near": (51.4, 53.3), "agglu": (19.0, 36.4), "far": (12.8, 34.9), "script": (5.5, 33.9)}
    # the README's reading of the plot: no distant-language point reaches the gate (chance + 15)
    assert max(p["xnli"] for p in points if p["language"] != "near") < 100 / 3 + 15
    png = xlp_probes.plot(points, tmp_path / "sub" / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
