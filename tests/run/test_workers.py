"""``--workers N``: a grid split over worker processes on the CPU (one torch thread each) writes the same
numbers as one process, loses nothing when a worker is killed, and says clearly what went wrong."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.registry import PluginError
from harness.run import records
from harness.run.config import parse_experiment
from harness.run.executors import ExecutorError, LocalExecutor, WorkerPoolExecutor
from harness.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[2]


def ok_execute(spec, runs_dir, progress=False):
    """A stand-in trial that always succeeds (picklable by reference: workers import this module)."""
    rec = {"schema_version": records.SCHEMA_VERSION, "trial_id": spec.trial_id, "experiment": spec.experiment,
           "status": "ok", "seed": spec.seed, "config": spec.resolved(),
           "metrics": {spec.target.language: {"loss": 1.0, "accuracy": 0.5, "perplexity": 2.7}},
           "environment": {"pid": os.getpid(), "torch_threads": torch.get_num_threads()}}
    records.write_record(os.path.join(runs_dir, spec.experiment, "records"), rec)
    return rec


def dies_on_seed_2(spec, runs_dir, progress=False):
    """:func:`ok_execute`, except that the worker is killed (SIGKILL) in the trial of seed 2."""
    if spec.seed == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return ok_execute(spec, runs_dir, progress)


def waits_for_a_second_worker(spec, runs_dir, progress=False):
    """:func:`ok_execute` once trials have run in two processes (so the grid must be split to finish)."""
    here = Path(runs_dir) / "pids"
    here.mkdir(exist_ok=True)
    (here / str(os.getpid())).touch()
    deadline = time.monotonic() + 300
    while len(list(here.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return ok_execute(spec, runs_dir, progress)


def logs_its_interval(spec, runs_dir, progress=False):
    """:func:`waits_for_a_second_worker` that also writes when it ran and which initialization it reads."""
    start = time.time()
    rec = waits_for_a_second_worker(spec, runs_dir, progress)
    time.sleep(0.3)
    log = Path(runs_dir) / "intervals"
    log.mkdir(exist_ok=True)
    (log / spec.trial_id).write_text(f"{spec.method.id}/{spec.target.language}/{spec.seed} {start} {time.time()}")
    return rec


def records_its_builder(spec):
    """A stand-in source build: a file ``<name>.<pid>`` holding the torch thread count it ran at; with ``wait``, it
    returns only once two processes have built something (so the builds must run at once to finish quickly)."""
    out = Path(spec.out)
    out.mkdir(exist_ok=True)
    (out / f"{spec.name}.{os.getpid()}").write_text(str(torch.get_num_threads()))
    deadline = time.monotonic() + 120
    while spec.wait and len({p.suffix for p in out.iterdir()}) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)


def dies_building(spec):
    """A stand-in source build whose process dies (as one killed or out of memory would)."""
    os._exit(3)


@pytest.fixture()
def importable(monkeypatch):
    """Worker processes import the stand-ins from the checkout (as ``tests.run.test_workers``)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def _fake_cfg(seeds=(1, 2, 3, 4)):
    return parse_experiment({"name": "exp", "world": {"size": "tiny"}, "targets": [{"language": "near"}],
                             "methods": ["random"], "tasks": ["mlm-at-init"], "seeds": list(seeds)})


def _tiny_grid(tiny_pretrain_overrides):
    return parse_experiment({
        "name": "grid", "world": {"size": "tiny"}, "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
        "targets": [{"language": "near", "tokenizer": {"vocab_size": 300}},
                    {"language": "script", "tokenizer": {"vocab_size": 300}}],
        "methods": ["random", "overlap",
                    {"name": "focus", "config": {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_bucket": 540672}}],
        "tasks": [{"name": "mlm-at-init", "config": {"max_eval_examples": 16}}], "seeds": [1, 2],
    })


def _numbers(runs: Path, name: str) -> dict:
    out = {}
    for rec in records.iter_records(runs / name):
        assert rec["status"] == "ok", rec.get("error")
        out[rec["trial_id"]] = {"metrics": rec["metrics"], "diagnostics": rec["init"].get("diagnostics"),
                                "counts": rec["init"].get("counts")}
    return out


def test_two_workers_write_the_same_numbers_as_one_process(tmp_path, tiny_source, tiny_pretrain_overrides):
    cfg = _tiny_grid(tiny_pretrain_overrides)
    threads = torch.get_num_threads()
    # one process whose torch runs 2 threads: a float32 matrix product's last bits may change with the thread count
    # (on this project's 2026-11-28 CI machine, an AMD EPYC, MLM loss at init moved by 1.5e-8 between 2 threads and
    # 1), so the one-process executor runs its trials at the workers' count (1, --threads) and restores the process's
    torch.set_num_threads(2)
    try:
        run_experiment(cfg, tmp_path / "one", executor=LocalExecutor(progress=False), progress=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    summary = run_experiment(cfg, tmp_path / "two", executor=WorkerPoolExecutor(2, progress=False), progress=False)
    assert summary.ran == 12 and summary.failed == 0
    one, two = _numbers(tmp_path / "one", "grid"), _numbers(tmp_path / "two", "grid")
    assert len(one) == 12 and one == two  # bit for bit: every metric, diagnostic and count
    for runs in ("one", "two"):
        assert {r["environment"]["torch_threads"] for r in records.iter_records(tmp_path / runs / "grid")} == {1}
    assert not list((tmp_path / "two" / "grid" / "claims").glob("*.claim"))


def test_a_killed_worker_costs_its_trial_only_and_resume_reruns_it(tmp_path, importable):
    cfg = _fake_cfg()
    summary = run_experiment(cfg, tmp_path, executor=WorkerPoolExecutor(2, progress=False), progress=False,
                             trial_fn=dies_on_seed_2)
    recs = {r["seed"]: r for r in records.iter_records(tmp_path / "exp")}
    assert sorted(recs) == [1, 2, 3, 4] and summary.ran == 4 and summary.failed == 1
    assert recs[2]["status"] == "failed" and recs[2]["error"]["type"] == "WorkerLost"
    assert "worker 1" in recs[2]["error"]["message"] or "worker 2" in recs[2]["error"]["message"]
    assert "died (exit code -9)" in recs[2]["error"]["message"]
    assert not list((tmp_path / "exp" / "claims").glob("*.claim"))
    # the same grid again: only the lost trial runs
    summary = run_experiment(cfg, tmp_path, executor=WorkerPoolExecutor(2, progress=False), progress=False,
                             trial_fn=ok_execute)
    assert (summary.ran, summary.skipped, summary.failed) == (1, 3, 0)
    recs = {r["seed"]: r for r in records.iter_records(tmp_path / "exp")}
    assert all(r["status"] == "ok" for r in recs.values())
    assert recs[2]["environment"]["torch_threads"] == 1


def test_workers_split_the_grid_and_never_outnumber_its_trials(tmp_path, importable):
    summary = run_experiment(_fake_cfg(seeds=range(1, 7)), tmp_path, executor=WorkerPoolExecutor(2, progress=False),
                             progress=False, trial_fn=waits_for_a_second_worker)
    pids = {r["environment"]["pid"] for r in records.iter_records(tmp_path / "exp")}
    assert summary.ran == 6 and len(pids) == 2 and os.getpid() not in pids
    assert len(WorkerPoolExecutor(8, progress=False)._slots(3)) == 3


def test_two_workers_never_run_two_tasks_of_one_initialization_at_once(tmp_path, importable):
    # listed task by task (the tasks of an initialization side by side, as method_order lists them): handed
    # out in that order, the second worker would take the first one's sibling and wait on its build lock
    cfg = parse_experiment({"name": "exp", "world": {"size": "tiny"}, "targets": [{"language": "near"}],
                            "methods": ["random", "overlap"], "seeds": [1],
                            "tasks": [{"id": "p", "name": "mlm-at-init", "config": {"max_eval_examples": 8}},
                                      {"id": "q", "name": "mlm-at-init", "config": {"max_eval_examples": 16}}]})
    order = {(m, t): i for i, (m, t) in enumerate([("random", "p"), ("random", "q"), ("overlap", "p"), ("overlap", "q")])}
    summary = run_experiment(cfg, tmp_path, executor=WorkerPoolExecutor(2, progress=False), progress=False,
                             trial_fn=logs_its_interval, order=lambda s: order[(s.method.id, s.task.id)])
    assert summary.ran == 4 and summary.failed == 0
    spans = [f.read_text().split() for f in (tmp_path / "intervals").iterdir()]
    assert len(spans) == 4 and len({g for g, _, _ in spans}) == 2
    for i, (g, a, b) in enumerate(spans):
        for h, c, d in spans[i + 1:]:
            assert g != h or float(b) <= float(c) or float(d) <= float(a), "two tasks of one init ran at once"


def test_a_worker_that_cannot_load_a_plugin_is_a_clear_error(tmp_path, importable):
    bad = tmp_path / "bad_plugin.py"
    bad.write_text("import no_such_module_anywhere\n")
    ex = WorkerPoolExecutor(2, progress=False, plugins=[str(bad)])
    with pytest.raises(ExecutorError, match=r"--workers: worker \d could not start: .*no_such_module_anywhere"):
        run_experiment(_fake_cfg(seeds=(1, 2)), tmp_path, executor=ex, progress=False, trial_fn=ok_execute)
    # one trial runs in this process: the plugin fails here, naming its file
    with pytest.raises(PluginError, match=r"--plugin .*bad_plugin.py: .*no_such_module_anywhere"):
        run_experiment(_fake_cfg(seeds=(1,)), tmp_path / "one", executor=ex, progress=False, trial_fn=ok_execute)


def test_a_single_trial_runs_in_this_process_at_the_workers_thread_count(tmp_path, importable):
    # no worker to start for one trial (it would import everything again while this process waits)
    threads = torch.get_num_threads()
    summary = run_experiment(_fake_cfg(seeds=(1,)), tmp_path, executor=WorkerPoolExecutor(2, progress=False),
                             progress=False, trial_fn=ok_execute)
    recs = list(records.iter_records(tmp_path / "exp"))
    assert summary.ran == 1 and len(recs) == 1 and recs[0]["status"] == "ok"
    assert recs[0]["environment"]["pid"] == os.getpid() and recs[0]["environment"]["torch_threads"] == 1
    assert torch.get_num_threads() == threads  # restored
    assert not list((tmp_path / "exp" / "claims").glob("*.claim"))


def test_one_worker_per_core_by_default_and_one_on_a_gpu_machine(monkeypatch):
    from harness.run.executors import default_workers

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert default_workers() == 3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # trials run on the GPU: not one per core
    assert default_workers() == 1


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_a_bad_worker_count_is_refused(workers):
    with pytest.raises(ExecutorError, match="--workers: expected a positive number"):
        WorkerPoolExecutor(workers)


def test_threads_set_what_each_trial_runs_with_and_records(tmp_path, importable):
    for executor, want in ((LocalExecutor(progress=False, threads=2), 2), (WorkerPoolExecutor(2, threads=2, progress=False), 2),
                           (LocalExecutor(progress=False, threads=None), torch.get_num_threads())):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        run_experiment(_fake_cfg(), out, executor=executor, progress=False, trial_fn=ok_execute)
        assert {r["environment"]["torch_threads"] for r in records.iter_records(out / "exp")} == {want}
    with pytest.raises(ExecutorError, match=r"--threads: expected a positive number of torch threads per trial, got 0"):
        LocalExecutor(threads=0)


def test_prepare_builds_several_sources_at_once_at_the_trials_thread_count(tmp_path, importable):
    ex = WorkerPoolExecutor(2, progress=False)
    ex.prepare([SimpleNamespace(out=str(tmp_path / "many"), name=n, wait=True) for n in "abc"], records_its_builder)
    built = list((tmp_path / "many").iterdir())
    assert sorted(p.stem for p in built) == ["a", "b", "c"]
    builders = {p.suffix[1:] for p in built}
    assert len(builders) == 2 and str(os.getpid()) not in builders  # two worker processes, side by side
    assert {p.read_text() for p in built} == {"1"}  # the trials' thread count, as a one-process run builds it
    # a single build runs here, at the trials' thread count, and the process's count comes back
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ex.prepare([SimpleNamespace(out=str(tmp_path / "one"), name="x", wait=False)], records_its_builder)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    [only] = list((tmp_path / "one").iterdir())
    assert only.name == f"x.{os.getpid()}" and only.read_text() == "1"


def test_shared_sources_lists_each_source_model_once_in_grid_order():
    from harness.run.runner import shared_sources

    cfg = parse_experiment({
        "name": "exp", "world": {"size": "tiny"},
        "source": {"model": "world:mlm", "pretrain": {"encoding": "trial", "extra_languages": ["near"]}},
        "targets": [{"language": "near"}], "methods": ["random", "overlap"], "encodings": ["none", "additive"],
        "tasks": ["mlm-at-init"], "seeds": [1, 2]})
    specs = cfg.trials()
    assert len(specs) == 8
    # one source per encoding and seed (each seed pretrains its own); the methods share it
    assert [(s.encoding.name, s.seed, s.method.id) for s in shared_sources(specs)] == [
        ("none", 1, "random"), ("none", 2, "random"), ("additive", 1, "random"), ("additive", 2, "random")]


def test_a_builder_that_dies_is_left_to_the_trials(tmp_path, importable, caplog):
    specs = [SimpleNamespace(trial_id=f"t{i}") for i in range(2)]
    with caplog.at_level("WARNING", logger="tokxfer"):
        WorkerPoolExecutor(2, progress=False).prepare(specs, dies_building)  # returns: the trials build it
    assert "could not prepare t0 before the trials" in caplog.text and "its trials will build it" in caplog.text


def builds_a_source(spec, runs_dir, progress=False):
    """A stand-in trial; those listed in ``<runs_dir>/building.json`` "build" a shared source (the directory
    appears when the trial ends) once another worker has started a trial too. Each writes when it ran."""
    import json

    start = time.time()
    here = Path(runs_dir) / "pids"
    here.mkdir(exist_ok=True)
    (here / str(os.getpid())).touch()
    where = json.loads((Path(runs_dir) / "building.json").read_text()).get(spec.trial_id)
    if where is not None:
        deadline = time.monotonic() + 60
        while len(list(here.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        Path(where).mkdir(exist_ok=True)
    rec = ok_execute(spec, runs_dir, progress)
    log = Path(runs_dir) / "intervals"
    log.mkdir(exist_ok=True)
    (log / str(spec.seed)).write_text(f"{start} {time.time()}")
    return rec


def test_two_trials_of_a_source_being_built_never_run_at_once_and_a_third_runs_beside(tmp_path, importable):
    import json

    cfg = _fake_cfg(seeds=(1, 2, 3))
    specs = cfg.trials()
    source = tmp_path / "cache" / "source-of-1-and-2"
    (tmp_path / "cache").mkdir()
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "building.json").write_text(json.dumps({s.trial_id: str(source) for s in specs if s.seed in (1, 2)}))
    ex = WorkerPoolExecutor(2, progress=False)
    ex.building = {s.trial_id: str(source) for s in specs if s.seed in (1, 2)}  # what run_experiment's plan sets
    out = ex.run(specs, str(runs), lambda rec: None, execute=builds_a_source)
    assert sorted(r.status for r in out) == ["ok"] * 3
    span = {int(p.name): tuple(map(float, p.read_text().split())) for p in (runs / "intervals").iterdir()}
    assert sorted(span) == [1, 2, 3] and source.is_dir()
    (a0, a1), (b0, b1) = sorted([span[1], span[2]])
    assert b0 >= a1 - 0.05  # the second reader of the source waited for the build, on no worker's time
    builder = span[1] if span[1][0] < span[2][0] else span[2]
    assert span[3][0] < builder[1]  # meanwhile the other worker ran the trial that needs no build


def test_plan_sources_builds_whole_rounds_first_and_hands_the_rest_to_the_first_trials(tmp_path, monkeypatch):
    from harness.run import runner

    cfg = parse_experiment({
        "name": "exp", "world": {"size": "tiny"},
        "source": {"model": "world:mlm", "pretrain": {"encoding": "trial", "extra_languages": ["near"]}},
        "targets": [{"language": "near"}], "methods": ["random", "overlap"],
        "encodings": ["none", "additive", "attached", "xlp", "xlp-shared"], "tasks": ["mlm-at-init"], "seeds": [1]})
    specs = cfg.trials()  # 10 trials (2 methods x 5 encodings), 5 sources

    def located(source, world, *, encoding=None, locate_only=False, progress=True):
        assert locate_only
        return str(tmp_path / f"src-{encoding}")

    monkeypatch.setattr(runner.resources, "source_model_dir", located)
    plan = runner.plan_sources(specs, workers=2)
    assert [s.encoding.name for s in plan.before] == ["none", "additive", "attached", "xlp"]  # two whole rounds
    assert plan.order[0].encoding.name == "xlp-shared" and sorted(map(id, plan.order)) == sorted(map(id, specs))
    assert set(plan.building) == {s.trial_id for s in specs if s.encoding.name == "xlp-shared"}
    assert set(plan.building.values()) == {str(tmp_path / "src-xlp-shared")}
    # sources already in the cache are not built again: one left with two workers is built by its first trial
    for enc in ("none", "additive", "attached", "xlp"):
        (tmp_path / f"src-{enc}").mkdir()
    plan = runner.plan_sources(specs, workers=2)
    assert plan.before == [] and plan.order[0].encoding.name == "xlp-shared" and len(plan.building) == 2
    (tmp_path / "src-xlp-shared").mkdir()
    assert runner.plan_sources(specs, workers=2) == runner.SourcePlan([], specs, {})
    # one worker builds every source before the trials, in grid order (as before)
    for d in tmp_path.iterdir():
        d.rmdir()
    plan = runner.plan_sources(specs, workers=1)
    assert len(plan.before) == 5 and plan.order == specs and plan.building == {}
    # when every trial reads a source left over, nothing could run beside its build: it is built first
    xs = [s for s in specs if s.encoding.name == "xlp-shared"]
    assert runner.plan_sources(xs, workers=2) == runner.SourcePlan([xs[0]], xs, {})
