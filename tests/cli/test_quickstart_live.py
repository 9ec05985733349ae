"""``tokxfer quickstart``: each method's row printed as soon as its trials finish, the same output run to run
and whatever the number of workers; ``--workers`` refused in one line when it makes no sense."""

from __future__ import annotations

import re

import pytest

from harness.cli import main

METHODS = "methods=[random, overlap, mean-of-pieces]"


def _quickstart(runs, workers: int, capsys) -> str:
    assert main(["quickstart", "--size", "tiny", "--workers", str(workers), "--runs-dir", str(runs), "--no-tracking",
                 "--quiet", METHODS, "tasks.0.config.max_eval_examples=8"]) == 0
    out = capsys.readouterr().out
    assert out.count("2/3 running the trials") == 1
    out = out[out.index("2/3 running the trials"):]  # before: whether the source model was pretrained or reused
    # the one line that may differ: the wall time and where the runs dir is
    return re.sub(r"failed 0 in \d+s\. Leaderboard: \S+", "failed 0 in …s. Leaderboard: …", out)


def test_rows_come_as_trials_finish_and_the_output_is_the_same_with_one_or_two_workers(tmp_path, capsys):
    two = _quickstart(tmp_path / "a", 2, capsys)
    one = _quickstart(tmp_path / "b", 1, capsys)
    assert two.replace("2 worker(s)", "1 worker(s)") == one
    live, table = two.split("3/3 the leaderboard")
    live_rows = [line for line in live.splitlines() if line.startswith("| ") and not line.startswith("| Method")]
    # in the experiment's method order, each once, before the table
    assert [r.split(" | ")[0] for r in live_rows] == ["| Random", "| Overlap copy", "| Mean of pieces"]
    # the same numbers as the final table's rows (which add bold marks: they compare rows)
    main_table = table.split("####")[0]  # not the comparisons' or ranks' tables below it
    final_rows = {line.split(" | ")[0]: line.replace("**", "") for line in main_table.splitlines() if line.startswith("| ")}
    assert [final_rows[r.split(" | ")[0]] for r in live_rows] == live_rows
    # a resumed quickstart prints the rows of the records it finds, and runs nothing
    again = _quickstart(tmp_path / "a", 2, capsys)
    assert "ran 0 trials, skipped 12" in again
    assert [line for line in again.splitlines() if line in live_rows] == live_rows


@pytest.mark.parametrize("argv, needle", [
    (["run", "x.yaml", "--workers", "0"], "--workers: expected a positive whole number, e.g. 2, got '0'"),
    (["run", "x.yaml", "--threads", "0"], "--threads: expected a positive whole number, e.g. 2, got '0'"),
    (["quickstart", "--workers", "two"], "--workers: expected a positive whole number"),
    (["run", "{cfg}", "--executor", "gpus", "--workers", "2"], "--workers applies to --executor local"),
    (["run", "{cfg}", "--executor", "slurm", "--threads", "2"], "--threads applies to --executor local"),
])
def test_bad_workers_are_one_line_errors(argv, needle, tmp_path, capsys):
    from harness.cli import CONFIG_DIR

    argv = [a.replace("{cfg}", str(CONFIG_DIR / "quickstart-tiny.yaml")) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's errors (harness.cli.main._Parser.error)
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_a_bad_workers_variable_names_itself(tmp_path, monkeypatch, capsys):
    from harness.cli import CONFIG_DIR

    monkeypatch.setenv("TOKXFER_WORKERS", "many")
    assert main(["run", str(CONFIG_DIR / "quickstart-tiny.yaml"), "--runs-dir", str(tmp_path), "--no-tracking"]) == 2
    assert "TOKXFER_WORKERS='many': expected a positive whole number" in capsys.readouterr().err


def test_two_workers_run_the_fasttext_methods_in_turns_and_one_worker_method_by_method():
    """Side by side (neighbours in the order), two workers run different methods, so a held-seed fastText
    model (FOCUS's aux_seed, WECHSEL's fasttext_seed) is trained once per target, not once per worker."""
    from harness.cli import CONFIG_DIR
    from harness.cli.live import method_order
    from harness.run.config import load_experiment

    cfg = load_experiment(CONFIG_DIR / "quickstart.yaml")
    specs = cfg.trials()
    two = [(s.method.id, s.target.language, s.seed) for s in sorted(specs, key=method_order(specs, 2))]
    ft = [t for t in two if t[0] in ("focus", "wechsel")]
    assert ft[:4] == [("focus", "near", 1), ("wechsel", "near", 1), ("focus", "script", 1), ("wechsel", "script", 1)]
    assert all(a[0] != b[0] for a, b in zip(ft, ft[1:]))
    assert all(a[0] != b[0] for a, b in zip(two, two[1:]))  # nowhere do two workers run one method side by side
    one = [s.method.id for s in sorted(specs, key=method_order(specs, 1))]
    assert [m for i, m in enumerate(one) if i == 0 or one[i - 1] != m] == [m.id for m in cfg.methods]
    with pytest.raises(ValueError, match="workers must be a positive int, got 0"):
        method_order(specs, 0)


def test_two_workers_run_the_tasks_of_one_init_one_after_the_other():
    """real-small's two tasks read one cached init and the student's cached embeddings: side by side
    (neighbours in the order) run different methods, so no worker waits on the other's build lock."""
    from harness.cli import CONFIG_DIR
    from harness.cli.live import method_order
    from harness.run.config import load_experiment

    specs = load_experiment(CONFIG_DIR / "real-small.yaml").trials()
    order = sorted(specs, key=method_order(specs, 2))
    init = [(s.method.id, s.target.language, s.seed) for s in order]
    assert len({s.task.id for s in specs}) == 2 and len(order) == len(specs)
    assert all(a != b for a, b in zip(init, init[1:]))  # no two neighbours share an initialization
    assert [s.task.id for s in order[:4]] == ["bitext-retrieval", "bitext-retrieval", "teacher-agreement", "teacher-agreement"]


@pytest.mark.parametrize("workers, waves", [(1, False), (2, True)])
def test_run_with_several_workers_hands_out_the_trials_in_method_waves(workers, waves, tmp_path, monkeypatch):
    """``tokxfer run --workers N`` (N > 1) sorts the trials as the quickstart does, so a grid's two workers
    build different cache entries side by side; one worker keeps the grid's own order."""
    from harness.run import experiment

    seen = {}

    def fake(cfg, runs_dir, **kw):
        seen["order"] = kw.get("order")
        seen["specs"] = cfg.trials()
        return experiment.ExperimentSummary(ran=0, skipped=0, failed=0, records_dir=runs_dir, tracking_errors=[])

    monkeypatch.setattr(experiment, "run_experiment", fake)
    from harness.cli import CONFIG_DIR

    assert main(["run", str(CONFIG_DIR / "quickstart.yaml"), "--workers", str(workers), "--runs-dir", str(tmp_path),
                 "--no-tracking", "--quiet"]) == 0
    assert (seen["order"] is not None) is waves
    if waves:
        ids = [s.method.id for s in sorted(seen["specs"], key=seen["order"])]
        assert ids[:2] == ["random", "random-mapping"]  # two methods side by side, not one method's two seeds
