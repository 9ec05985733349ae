"""``tokxfer leaderboard`` figures and index page: PNG plots per spec and one ``index.html``.

All records are synthetic, written by the tests; nothing is trained.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from harness.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TASKS = ("mlm-at-init", "xnli")
LOSS = {"random": 8.2, "overlap": 7.0, "focus": 6.1}
GOLD = {"random": 0.01, "overlap": 0.30, "focus": 0.45}
LAPT = {"id": "lapt", "name": "lapt", "config": {"max_steps": 40}}


def make_record(method, lang, seed, task="mlm-at-init", *, experiment="qs", curves=True):
    """A trial record after init → LAPT → task; the LAPT curve is shared by every task of a trial."""
    loss = LOSS[method] + 0.1 * seed + (0.3 if lang == "script" else 0.0)
    lapt = [[s, 9.0 - 0.05 * s - LOSS[method] / 10 + 0.01 * seed] for s in range(0, 50, 10)]
    return {
        "schema_version": 1,
        "tokxfer_version": "0.1.0",
        "git": {"sha": "0123abc", "dirty": False},
        "experiment": experiment,
        "trial_id": f"{method}-{lang}-{task}-{seed}",
        "status": "ok",
        "error": None,
        "config": {
            "source": {"model": "world-tiny"},
            "target": {"language": lang, "tokenizer": {"algorithm": "unigram", "vocab_size": 1000}},
            "method": {"id": method, "name": method, "config": {}},
            "encoding": {"name": "none", "config": {}},
            "stages": [LAPT],
            "task": {"name": task, "config": {}},
            "seed": seed,
        },
        "seed": seed,
        "metrics": {lang: {"loss": loss, "accuracy": round(1.0 / loss, 6)}},
        "init": {"diagnostics": {"gold_top1": GOLD[method] + 0.01 * seed, "gold_top5": GOLD[method] + 0.2}},
        "counts": {lang: {"test": 8}},
        "curves": {"lapt.loss": lapt} if curves else {},
        "timings": {"total_s": 1.0},
        "revisions": {},
        "environment": {"python": "3.11", "device": "cpu"},
        "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": "2025-01-01T00:00:01+00:00",
    }


def write_runs(root: Path, experiment="qs", tasks=TASKS, **kw) -> Path:
    d = root / experiment / "records"
    d.mkdir(parents=True, exist_ok=True)
    for method in LOSS:
        for lang in ("near", "script"):
            for seed in (1, 2, 3):
                for task in tasks:
                    r = make_record(method, lang, seed, task, experiment=experiment, **kw)
                    (d / f"{r['trial_id']}.json").write_text(json.dumps(r))
    return root


SPEC = """\
# tokxfer leaderboard {name}.yaml
name: {name}
version: 1
description: "Synthetic {name} board."
experiments: [{experiment}]
required_seeds: [1, 2, 3]
metrics:
  loss: {{direction: lower, display: "MLM loss"}}
  accuracy: {{direction: higher, decimals: 1, scale: 100}}
  gold_top1: {{direction: higher, source: init.diagnostics, decimals: 1, scale: 100, display: "gold top-1"}}
columns:
  - {{task: mlm-at-init, languages: [near, script], metrics: [loss, accuracy], average: true}}
  - {{task: mlm-at-init, languages: [near, script], metrics: [gold_top1]}}
rows: all
display_names: {{focus: FOCUS}}
"""

EXPECTED = [
    "bars-mlm-at-init-loss",
    "bars-mlm-at-init-accuracy",
    "bars-mlm-at-init-gold_top1",
    "lapt-lapt.loss",
    "gold-alignment-near",
    "gold-alignment-script",
]


def write_spec(d: Path, name="qs", experiment="qs") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.yaml"
    p.write_text(SPEC.format(name=name, experiment=experiment))
    return p


def leaderboard(*args) -> int:
    return main(["leaderboard", *map(str, args)])


def test_plots_and_index_for_one_spec(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs")
    spec = write_spec(tmp_path / "specs")
    out = tmp_path / "out"
    assert leaderboard(spec, "--runs-dir", runs, "--out", out) == 0
    assert "warning" not in capsys.readouterr().err
    for ext in ("md", "csv", "tex", "html"):
        assert (out / f"qs.{ext}").is_file()
    pngs = sorted(p.stem for p in (out / "plots" / "qs").glob("*.png"))
    assert pngs == sorted(EXPECTED)
    assert json.loads((out / "plots" / "qs" / ".tokxfer-plots.json").read_text())["written"] == sorted(f"{n}.png" for n in EXPECTED)
    index = (out / "index.html").read_text(encoding="utf-8")
    for name in EXPECTED:
        data = (out / "plots" / "qs" / f"{name}.png").read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, name
        assert f'<img src="plots/qs/{name}.png"' in index
    # the table comes first, its figures below it; self-contained (no external resource, no script)
    assert index.index("<h2>qs <small>v1</small></h2>") < index.index('<div class="plots">')
    assert "Synthetic qs board." in index
    assert not re.search(r"https?://|<script|<link", index)
    # deterministic: a second render gives the same page
    assert leaderboard(spec, "--runs-dir", runs, "--out", out) == 0
    assert (out / "index.html").read_text(encoding="utf-8") == index


def test_index_of_all_specs_holds_every_table_and_its_plots(tmp_path, monkeypatch):
    import leaderboards.cli as lcli

    runs = write_runs(tmp_path / "runs", experiment="qs-a")
    write_runs(runs, experiment="qs-b", tasks=("mlm-at-init",))
    specs = tmp_path / "specs"
    write_spec(specs, "qs-a", "qs-a")
    write_spec(specs, "qs-b", "qs-b")
    write_spec(specs, "qs-c", "never-ran")
    monkeypatch.setattr(lcli, "SPECS_DIR", specs)
    out = tmp_path / "tables"
    assert leaderboard("--all", "--runs-dir", runs, "--out", out) == 0
    first = (out / "index.html").read_text(encoding="utf-8")
    for name in ("qs-a", "qs-b"):
        assert f"<h2>{name} <small>v1</small></h2>" in first and f'id="board-{name}"' in first
        for plot in EXPECTED:
            assert (out / "plots" / name / f"{plot}.png").read_bytes()[:8] == PNG_MAGIC
            assert f'src="plots/{name}/{plot}.png"' in first
    assert "Not rendered (no records): qs-c." in first
    assert leaderboard("--all", "--runs-dir", runs, "--out", out) == 0
    assert (out / "index.html").read_text(encoding="utf-8") == first


def test_a_plot_that_cannot_be_made_is_a_warning(tmp_path, capsys):
    # the records say a LAPT stage ran, but none carries its curve
    runs = write_runs(tmp_path / "runs", tasks=("mlm-at-init",), curves=False)
    spec = write_spec(tmp_path / "specs")
    out = tmp_path / "out"
    assert leaderboard(spec, "--runs-dir", runs, "--out", out) == 0
    err = capsys.readouterr().err
    assert "warning: spec 'qs': plot 'lapt-lapt.loss' not written" in err and "lapt.loss" in err
    assert (out / "qs.md").is_file() and (out / "qs.csv").is_file() and (out / "qs.tex").is_file()
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "lapt-lapt.loss.png" not in index and not (out / "plots" / "qs" / "lapt-lapt.loss.png").exists()
    assert 'src="plots/qs/gold-alignment-near.png"' in index


def test_a_crashing_plotter_never_fails_the_tables(tmp_path, capsys, monkeypatch):
    import leaderboards.plots as plots

    runs = write_runs(tmp_path / "runs", tasks=("mlm-at-init",))
    spec = write_spec(tmp_path / "specs")
    out = tmp_path / "out"

    def boom(*a, **k):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(plots, "plot_language_bars", boom)
    assert leaderboard(spec, "--runs-dir", runs, "--out", out) == 0
    err = capsys.readouterr().err
    assert "plot 'bars-mlm-at-init-loss' not written: RuntimeError: renderer exploded" in err
    assert (out / "plots" / "qs" / "gold-alignment-near.png").is_file()

    monkeypatch.setattr(plots, "write_spec_plots", boom)  # the whole figure step failing
    assert leaderboard(spec, "--runs-dir", runs, "--out", out) == 0
    assert "warning: spec 'qs': no plots written (RuntimeError: renderer exploded)" in capsys.readouterr().err
    assert (out / "qs.md").is_file()
    assert "<img" not in (out / "index.html").read_text(encoding="utf-8")


def test_a_lapt_curve_shared_by_several_tasks_counts_once(tmp_path, monkeypatch):
    import leaderboards.plots as plots
    from leaderboards.aggregate import aggregate, load_records
    from leaderboards.spec import load_spec

    runs = write_runs(tmp_path / "runs")  # every trial ran two tasks after one LAPT run
    spec = load_spec(write_spec(tmp_path / "specs"))
    # the second task is not in the spec's columns: add it, so both tasks' records reach the plot
    spec = dataclasses.replace(
        spec, columns=spec.columns + tuple(dataclasses.replace(c, task="xnli") for c in spec.columns if not c.is_average)
    )
    records = load_records(runs / "qs")
    seen = {}

    def capture(recs, path, curve, methods, labels):
        seen["records"] = list(recs)
        seen["methods"], seen["labels"] = methods, labels
        return Path(path)

    monkeypatch.setattr(plots, "plot_curves", capture)
    plots.write_spec_plots(aggregate(records, spec), records, tmp_path / "plots")
    keys = [(r.method_id, r.target_language, r.seed) for r in seen["records"]]  # TrialRecords
    assert len(keys) == len(set(keys)) == 3 * 2 * 3
    assert seen["methods"] == ["focus", "overlap", "random"] and seen["labels"]["focus"] == "FOCUS"
