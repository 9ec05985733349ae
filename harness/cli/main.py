"""The ``tokxfer`` command line: run | ls | validate | leaderboard | check-regression | init | tokenizer | cache | real | overlap | world | quickstart | sync."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
import time
from pathlib import Path

from harness.errors import UserInputError

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CONFIG_DIR = PACKAGE_DIR / "configs"
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
CACHE_COMMANDS = frozenset({"run", "validate", "init", "tokenizer", "cache", "world", "quickstart"})
"""Commands that use the cache (:func:`harness.cache.cache_root`): its location is checked before they start."""


LIGHT_COMMANDS = frozenset({"leaderboard", "compare", "check-regression"})
"""Commands that read records and specs only: they do not import transformers/datasets (seconds of start-up)."""


def _quiet_libraries(command: str | None = None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if command in LIGHT_COMMANDS:
        return
    # "Creating initial MLflow database tables…" is noise here; mlflow resets its logger level on
    # import from MLFLOW_LOGGING_LEVEL, so set that (users can still override it)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass
    try:
        import datasets

        datasets.utils.logging.set_verbosity_error()
        datasets.disable_progress_bars()
    except Exception:
        pass


def worker_setup(verbose: bool = False) -> None:
    """A worker process's start (``--workers``, ``--executor gpus``): this command's logging and quiet libraries."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format=LOG_FORMAT)
    _quiet_libraries()


def _console():
    from rich.console import Console

    # soft wrap: tables and commands stay copy-pasteable at any terminal width
    return Console(stderr=False, soft_wrap=True)


def _load_plugins(args) -> None:
    from harness import registry

    for p in getattr(args, "plugin", None) or []:
        registry.load_plugin(p)


def _tracker(args, runs_dir: Path):
    if getattr(args, "no_tracking", False):
        return None
    from harness.run.tracking import make_tracker

    return make_tracker(args.tracking_uri, runs_dir)


def _tracking_summary(errors: list[str]) -> str:
    """One line for all tracking failures of a run: how many, the last error (it names the fix command)."""
    last = " ".join(errors[-1].split())
    return f"tracking: {len(errors)} mirror(s) failed; every record is safe on disk. Last error: {last}"


def failure_summary(records_dir: Path, trial_ids: set[str], *, shown: int = 5) -> list[str]:
    """The failed records among ``trial_ids``, grouped by method, target language and the error's first
    sentence, largest group first: what ``tokxfer run`` prints under its count, so a known failure (a
    method the data cannot serve) reads as one line and a new one stands out.

    Example:
        >>> import json, tempfile
        >>> from harness.run.records import SCHEMA_VERSION
        >>> d = Path(tempfile.mkdtemp())
        >>> for i in range(3):
        ...     _ = (d / f"t{i}.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "trial_id": f"t{i}", "status": "failed",
        ...         "config": {"method": {"id": "wechsel"}, "target": {"language": "ta"}},
        ...         "error": {"type": "DictionaryError", "message": "no pairs. Check it"}}))
        >>> failure_summary(d, {"t0", "t1", "t2"})
        ['wechsel → ta × 3: DictionaryError: no pairs.']
    """
    from harness.run import records

    groups: dict[tuple, int] = {}
    for tid in sorted(trial_ids):
        try:
            rec = records.read_record(records_dir / f"{tid}.json")
        except (OSError, records.RecordError):
            continue
        if rec.status != "failed":
            continue
        err = rec.error if isinstance(rec.error, dict) else {}
        first = str(err.get("message", "")).split(". ")[0].strip()
        first = first[:157] + "…" if len(first) > 160 else first.rstrip(".") + "."
        key = (rec.method_id, rec.target_language, err.get("type", "error"), first)
        groups[key] = groups.get(key, 0) + 1
    ordered = sorted(groups.items(), key=lambda kv: -kv[1])
    lines = [f"{m} → {lang} × {n}: {kind}: {msg}" for (m, lang, kind, msg), n in ordered[:shown]]
    if len(ordered) > shown:
        lines.append(f"… and {len(ordered) - shown} more kinds of failure (the records' 'error' fields)")
    return lines


# --------------------------------------------------------------------------------------------
# commands


def cmd_ls(args) -> int:
    from rich.table import Table

    from harness import registry

    kinds = {"methods": "method", "encodings": "encoding", "tasks": "task", "stages": "stage"}
    want = [args.kind] if args.kind else list(kinds)
    con = _console()
    for k in want:
        t = Table(title=k, show_lines=False)
        t.add_column("name", style="bold")
        t.add_column("description")
        if kinds[k] == "task":
            t.add_column("model")
        for e in registry.entries(kinds[k]):
            row = [e.name, e.description]
            if kinds[k] == "task":
                row.append(getattr(e.cls, "model_kind", "?"))
            t.add_row(*row)
        con.print(t)
    return 0


def cmd_validate(args) -> int:
    from harness.run.config import load_experiment

    cfg = load_experiment(args.experiment, args.overrides)
    trials = cfg.trials()
    print(f"{args.experiment}: ok — experiment {cfg.name!r}, {len(cfg.methods)} method(s) × "
          f"{len(cfg.encodings) or 1} encoding(s) × {len(cfg.targets)} target(s) × "
          f"{f'{len(cfg.stage_sets)} stage set(s) × ' if cfg.stage_sets else ''}{len(cfg.tasks)} task(s) × "
          f"{len(cfg.seeds)} seed(s) = {len(trials)} trials")
    return 0


def cmd_run(args) -> int:
    from harness.run.config import load_experiment
    from harness.run.executors import make_executor
    from harness.run.experiment import run_experiment

    cfg = load_experiment(args.experiment, args.overrides)
    runs_dir = Path(args.runs_dir)
    tracker = _tracker(args, runs_dir)
    plugins = [str(Path(p).resolve()) for p in args.plugin or []]
    for flag, value in (("--workers", args.workers), ("--threads", args.threads)):
        if args.executor != "local" and value is not None:
            raise UserInputError(f"{flag} applies to --executor local (worker processes on this machine's cores), not "
                                 f"--executor {args.executor}")
    init = functools.partial(worker_setup, args.verbose)
    kw: dict = {"workers": _workers(args), "threads": args.threads or 1, "plugins": plugins, "worker_init": init}
    if args.executor == "gpus":
        kw = {"plugins": plugins, "gpus": _gpu_list(args.gpus) if args.gpus else None, "worker_init": init}
    elif args.executor == "slurm":
        kw = {"plugins": plugins, "folder": Path(args.slurm_folder or runs_dir / cfg.name / "slurm").resolve(),
              "slurm": _slurm_params(args.slurm_param or []), "cluster": args.slurm_cluster}
    executor = make_executor(args.executor, progress=not args.quiet, **kw)
    # several local workers: the methods in waves (harness.cli.live.method_order), so the trials running
    # side by side are of different methods and build different cache entries (a held-seed fastText
    # model) instead of one waiting on the other's build lock; one worker keeps the grid's order
    order = None
    if args.executor == "local" and kw["workers"] > 1:
        from harness.cli.live import method_order

        order = method_order(cfg.trials(), kw["workers"])
    t0 = time.perf_counter()
    summary = run_experiment(cfg, runs_dir, executor=executor, tracker=tracker, force=args.force,
                             progress=not args.quiet, order=order)
    others = f", {summary.by_others} run by other processes" if summary.by_others else ""
    print(f"{cfg.name}: ran {summary.ran}, skipped {summary.skipped} (already recorded){others}, failed "
          f"{summary.failed} in {time.perf_counter() - t0:.1f}s; records in {summary.records_dir}")
    if summary.failed:
        for line in failure_summary(Path(summary.records_dir), {t.trial_id for t in cfg.trials()}):
            print(f"  failed: {line}", file=sys.stderr)
    if summary.tracking_errors:
        print(_tracking_summary(summary.tracking_errors), file=sys.stderr)
    return 1 if summary.failed else 0


WORKERS_ENV = "TOKXFER_WORKERS"
"""``--workers``' default when the flag is not given (else one worker per core); the test suite sets 1."""


def _workers(args) -> int:
    """Worker processes for a local grid: ``--workers``, else ``$TOKXFER_WORKERS``, else the cores this process may use."""
    from harness.run.executors import default_workers

    if args.workers is not None:
        return args.workers
    text = os.environ.get(WORKERS_ENV)
    if text is None or not text.strip():
        return default_workers()
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError as e:
        raise UserInputError(f"{WORKERS_ENV}={text!r}: {e}") from None


def _positive_int(text: str) -> int:
    """``--workers`` / ``--threads``: a positive whole number."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, e.g. 2, got {text!r}")
    return value


def _gpu_list(text: str) -> list[str]:
    from harness.run.executors import parse_gpu_ids

    return parse_gpu_ids(text, "--gpus")


def _alpha(text: str) -> float:
    """``--alpha``: a family-wise significance level in (0, 0.5) (``7`` would call every test significant)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"expected a significance level in (0, 0.5), e.g. 0.05, got {text!r}")
    return value


def _slurm_params(items: list[str]) -> dict:
    import yaml

    from harness.inputs import load_yaml, one_line

    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UserInputError(f"--slurm-param {item!r}: expected KEY=VALUE, e.g. slurm_partition=gpu")
        try:
            out[key.strip()] = load_yaml(value)
        except yaml.YAMLError as e:
            raise UserInputError(f"--slurm-param {item!r}: the value is not valid YAML ({one_line(e)})") from None
    return out


def known_names(kind: str) -> list[str]:
    """Names tokxfer knows without records, for checking leaderboard specs
    (:func:`leaderboards.cli.check_spec_names`, which may not import the harness): registered tasks,
    methods and encodings (loading the registry, so asked only for names the records lack), and
    the built-in world's languages."""
    if kind == "language":
        from harness.world.config import SIZES

        return sorted({lang for cfg in SIZES.values() for lang in cfg.languages})
    from harness import registry

    return registry.names(kind)


def cmd_leaderboard(args) -> int:
    from leaderboards.cli import leaderboard_command

    args.known_names = known_names
    return leaderboard_command(args)


def cmd_check_regression(args) -> int:
    from leaderboards.cli import check_regression_command

    return check_regression_command(args)


def cmd_golden(args) -> int:
    from leaderboards.cli import golden_update_command

    args.known_names = known_names
    return golden_update_command(args)


def cmd_compare(args) -> int:
    from leaderboards.cli import compare_command

    args.known_names = known_names
    return compare_command(args)


def cmd_sync(args) -> int:
    from harness.run.store import rebuild_sqlite_store, sqlite_path
    from harness.run.sync import sync
    from harness.run.tracking import default_tracking_uri, make_tracker

    exp_dir = Path(args.experiment_dir)
    rec_dir = exp_dir / "records" if (exp_dir / "records").is_dir() else exp_dir
    if not rec_dir.is_dir() or not any(rec_dir.glob("*.json")):
        raise FileNotFoundError(f"{args.experiment_dir}: no records found (expected RUNS_DIR/EXPERIMENT/records/*.json)")
    runs_dir = rec_dir.parent.parent
    uri = args.tracking_uri or default_tracking_uri(runs_dir)
    dirs = [rec_dir.parent]
    if args.rebuild:
        db = sqlite_path(uri)
        if db is None:
            raise UserInputError(f"--rebuild: only a sqlite store can be rebuilt, not --tracking-uri {uri}")
        moved = rebuild_sqlite_store(db)
        print(f"moved the old store aside to {moved}" if moved else f"created a new store {db}")
        # the new store must hold every experiment the old one did: re-mirror all of this runs dir
        dirs = sorted(d for d in runs_dir.iterdir() if (d / "records").is_dir() and any((d / "records").glob("*.json")))
    tracker = make_tracker(uri, runs_dir)
    for d in dirs:
        report = sync(d, tracker)
        print(f"synced {d} to {args.tracking_uri or 'the default store'}: {dict(report)}")
    return 0


def cmd_init(args) -> int:
    from harness.cli.init_cmd import run

    dog = getattr(args, "watchdog", None)
    return run(args) if dog is None else run(args, t0=dog.t0, watchdog=dog)


@contextlib.contextmanager
def _silence_guard(argv: list[str]):
    """For ``tokxfer init`` in a log (stderr not a terminal, no ``--quiet``/``--explain``): a watchdog, from
    before the parser and the libraries load to the end, that writes a line whenever HEARTBEAT_S pass
    without one (``args.watchdog``, told of every note). Nothing extra is written unless a silence
    happens, so a bad input found early is still reported as one line. A terminal shows live bars
    instead; other commands get ``None``. Read from the raw arguments: the parser is what takes seconds."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command != "init" or {"--quiet", "--explain", "-h", "--help"} & set(argv) or sys.stderr.isatty():
        yield None
        return
    from harness import progress
    from harness.cli.init_checks import stamped

    # a first line soon (a log shows the command started), and every HEARTBEAT_S of silence after that;
    # lines are stamped from the watchdog's start, as init's own notes are (run(t0=dog.t0))
    dog = progress.Watchdog(lambda msg: stamped(dog.t0, msg), first=progress.HEARTBEAT_S / 2,
                            what="importing torch, transformers and the registered methods")
    with dog:
        yield dog


def cmd_tokenizer(args) -> int:
    from harness.cli.tools import train_tokenizer_command

    return train_tokenizer_command(args)


def cmd_cache(args) -> int:
    from harness.cli.tools import cache_command

    return cache_command(args)


def cmd_real(args) -> int:
    from harness.real.fetch import command

    return command(args)


def cmd_overlap(args) -> int:
    from harness.run import resources
    from harness.vocab import compute_overlap

    rep = compute_overlap(resources.load_tokenizer(args.source), resources.load_tokenizer(args.target)).report()
    print(json.dumps(rep, indent=2))
    return 0


def cmd_world(args) -> int:
    from harness.world import build_world

    if args.action != "pretrain" and (args.encoding is not None or args.languages is not None):
        raise UserInputError("world build: --encoding and --languages apply to 'world pretrain' only")
    if args.languages is not None and args.encoding is None:
        raise UserInputError("world pretrain: --languages needs --encoding (the multilingual sources are per encoding)")
    t0 = time.perf_counter()
    path = build_world(size=args.size, seed=args.seed)
    print(f"world ({args.size}, seed {args.seed}) at {path} [{time.perf_counter() - t0:.1f}s]")
    if args.action == "pretrain":
        from harness.world.pretrain import PretrainConfig, multilingual_config, pretrained_source

        for kind in args.kind:
            t0 = time.perf_counter()
            if args.encoding is None:
                config = PretrainConfig(kind=kind)
                what = f"{kind} source model"
            else:  # the XLP settings' multilingual source (same config as 'pretrain: {encoding: trial, ...}')
                config = multilingual_config(path, kind, args.encoding, args.languages)
                what = f"{kind} source model (source language + {', '.join(config.extra_languages)}; encoding {args.encoding})"
            p = pretrained_source(path, kind=kind, config=config, progress=True)
            print(f"{what} at {p} [{time.perf_counter() - t0:.1f}s]")
    return 0


QUICKSTARTS = {"small": "quickstart", "tiny": "quickstart-tiny"}
"""``tokxfer quickstart --size``: the experiment (``harness/configs/<name>.yaml``) and its leaderboard spec
(``leaderboards/specs/<name>.yaml``). The tiny world needs the tiny experiment: the full one's source
vocabulary is larger than the tiny world's text supports."""


def cmd_quickstart(args) -> int:
    from harness.cli.live import LiveRows, method_order
    from harness.run.config import load_experiment
    from harness.run.executors import make_executor
    from harness.run.experiment import run_experiment
    from harness.run.tracking import ui_command

    con = _console()
    t0 = time.perf_counter()
    name = QUICKSTARTS[args.size]
    overrides = ([f"seeds=[{args.seeds}]"] if args.seeds is not None else []) + list(args.overrides)
    cfg = load_experiment(CONFIG_DIR / f"{name}.yaml", overrides)
    spec_path = PACKAGE_DIR.parent / "leaderboards" / "specs" / f"{name}.yaml"
    runs_dir = Path(args.runs_dir)
    specs = cfg.trials()
    workers = min(_workers(args), len(specs)) or 1
    con.print(f"[bold]tokxfer quickstart[/]: {len(specs)} trials — every method on mlm-at-init, "
              f"targets {', '.join(t.language for t in cfg.targets)}, seeds {list(cfg.seeds)}, "
              f"{workers} worker(s)")
    con.print("1/3 building the world and pretraining (or reusing) the source model …")
    from harness.run import resources

    resources.source_model_dir(cfg.source, cfg.world, progress=not args.quiet)
    con.print("2/3 running the trials; each method's row as soon as its trials are done (no significance "
              "marks: those come with the table) …")
    tracker = _tracker(args, runs_dir)
    live = LiveRows(spec_path, specs, runs_dir / cfg.name / "records", con.print)
    live()
    executor = make_executor("local", progress=not args.quiet, workers=workers, threads=args.threads or 1,
                             plugins=[str(Path(p).resolve()) for p in args.plugin or []],
                             worker_init=functools.partial(worker_setup, args.verbose))
    summary = run_experiment(cfg, runs_dir, executor=executor, tracker=tracker, progress=not args.quiet,
                             order=method_order(specs, workers), on_trial=live)
    live()
    con.print("3/3 the leaderboard")
    from leaderboards.cli import render_spec_file

    out_dir = runs_dir / cfg.name
    md = render_spec_file(spec_path, runs_dir, out_dir, known=known_names)
    con.print(md)
    con.print(f"\nran {summary.ran} trials, skipped {summary.skipped}, failed {summary.failed} in "
              f"{time.perf_counter() - t0:.0f}s. Leaderboard: {out_dir}/{cfg.name}.md (also .csv, .tex, .html)")
    if tracker is not None:
        con.print(f"Open the MLflow UI on these runs with:\n  [bold]{ui_command(runs_dir)}[/]")
    if summary.tracking_errors:
        print(_tracking_summary(summary.tracking_errors), file=sys.stderr)
    return 1 if summary.failed else 0


# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # Long but flat: one declarative argparse block per subcommand, read top to bottom like `tokxfer --help`.
    p = _Parser(prog="tokxfer", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--debug", action="store_true", help="print the traceback of an error (anywhere on the line)")
    sub = p.add_subparsers(dest="command", required=True)

    def common_run(sp):
        sp.add_argument("--runs-dir", default="runs", help="where records go (default: ./runs)")
        sp.add_argument("--tracking-uri", default=None, help="MLflow URI (default: sqlite:///RUNS_DIR/mlflow.db)")
        sp.add_argument("--no-tracking", action="store_true", help="do not mirror records to MLflow")
        sp.add_argument("--plugin", action="append", help="Python file registering extra methods/tasks")
        sp.add_argument("--quiet", action="store_true", help="no progress bars")
        sp.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                        help="worker processes splitting the grid, one torch thread each (default: $"
                             f"{WORKERS_ENV}, else one per core; 1 where a CUDA device is visible); 1 (or a grid with "
                             "one trial left to run) runs the trials in this process. Records are the same either way")
        sp.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                        help="torch threads per trial (default 1, whatever --workers says, so that the worker count never "
                             "moves a number: a float32 product's last bits can follow the thread count on some CPUs; every "
                             "record carries it)")

    sp = sub.add_parser("run", help="run an experiment YAML (resumes: trials with records are skipped)")
    sp.add_argument("experiment")
    sp.add_argument("overrides", nargs="*", help="key=value overrides, e.g. seeds=[1] world.size=tiny")
    common_run(sp)
    sp.add_argument("--executor", default="local", choices=["local", "gpus", "slurm"],
                    help="local: this process; gpus: one worker per GPU; slurm: one job per trial (submitit). "
                         "Several `tokxfer run` of one experiment split the grid between them")
    sp.add_argument("--gpus", default=None, help="with --executor gpus: device ids, e.g. 0,1 (default: all visible)")
    sp.add_argument("--slurm-folder", default=None,
                    help="with --executor slurm: submitit's job folder (default: RUNS_DIR/EXPERIMENT/slurm)")
    sp.add_argument("--slurm-param", action="append", metavar="KEY=VALUE",
                    help="with --executor slurm: a submitit parameter, e.g. slurm_partition=gpu timeout_min=120")
    sp.add_argument("--slurm-cluster", default=None, choices=["slurm", "local", "debug"],
                    help="with --executor slurm: submitit's cluster (default: auto; local runs jobs as local processes)")
    sp.add_argument("--force", action="store_true", help="re-run trials that already have records")
    sp.set_defaults(fn=cmd_run)

    sp = sub.add_parser("ls", help="list registered methods, encodings, tasks and stages")
    sp.add_argument("kind", nargs="?", choices=["methods", "encodings", "tasks", "stages"])
    sp.add_argument("--plugin", action="append")
    sp.set_defaults(fn=cmd_ls)

    sp = sub.add_parser("validate", help="validate an experiment YAML without running anything")
    sp.add_argument("experiment")
    sp.add_argument("overrides", nargs="*")
    sp.add_argument("--plugin", action="append")
    sp.set_defaults(fn=cmd_validate)

    sp = sub.add_parser("leaderboard", help="render leaderboard tables from records")
    sp.add_argument("spec", nargs="?", help="leaderboard spec YAML")
    sp.add_argument("--all", action="store_true",
                    help="every spec in leaderboards/specs/, from the committed records in leaderboards/records/, "
                         "into leaderboards/tables/")
    sp.add_argument("--runs-dir", default=None,
                    help="where the experiments' records are (default: ./runs; with --all: leaderboards/records)")
    sp.add_argument("--collect", metavar="RUNS_DIR", default=None,
                    help="with --all: first copy the specs' experiments' records from RUNS_DIR into leaderboards/records")
    sp.add_argument("--experiment", action="append", default=None, metavar="NAME",
                    help="read these experiments' records instead of the spec's (repeatable; e.g. a GPU preset's "
                         "xlp-table1-medium under the xlp-table1 spec)")
    sp.add_argument("--out", default=None, help="output directory (default: next to the records)")
    sp.set_defaults(fn=cmd_leaderboard)

    sp = sub.add_parser("check-regression", help="compare records against golden values; non-zero exit on regression")
    sp.add_argument("--records", required=True, nargs="+")
    sp.add_argument("--golden", required=True)
    sp.add_argument("--mode", choices=["exact", "statistical"], default="exact",
                    help="exact: within the golden's tolerances (CI's determinism check, default); statistical: "
                         "fail only on a drop beyond the golden's seed noise (one-sided Welch per cell, Holm over "
                         "cells) — for runs that are not bit-identical, e.g. on a GPU")
    sp.add_argument("--alpha", type=float, default=0.05, help="statistical mode: family-wise level (default 0.05)")
    sp.set_defaults(fn=cmd_check_regression)

    sp = sub.add_parser("golden", help="golden files")
    sp.add_argument("action", choices=["update"])
    sp.add_argument("--records", required=True, nargs="+")
    sp.add_argument("--spec", required=True)
    sp.add_argument("--golden", default=None, help="default: leaderboards/golden/<spec name>.json")
    sp.set_defaults(fn=cmd_golden)

    sp = sub.add_parser("compare", help="a method against baselines: difference, 95 %% CI, Holm-adjusted p and "
                                         "P(A > B) per column (paired by seed)")
    sp.add_argument("experiment_dir")
    sp.add_argument("--method", required=True)
    sp.add_argument("--against", nargs="+", required=True)
    sp.add_argument("--alpha", type=_alpha, default=0.05, help="family-wise level over all the comparisons (Holm), in (0, 0.5)")
    sp.add_argument("--spec", default=None, help="leaderboard spec defining the cells (default: every metric found)")
    sp.set_defaults(fn=cmd_compare)

    sp = sub.add_parser("sync", help="re-mirror an experiment's records to MLflow")
    sp.add_argument("experiment_dir")
    sp.add_argument("--tracking-uri", default=None, help="MLflow URI (default: sqlite:///RUNS_DIR/mlflow.db)")
    sp.add_argument("--rebuild", action="store_true",
                    help="move a broken sqlite store aside, create a new one and re-mirror every experiment of "
                         "the runs dir into it from the records")
    sp.set_defaults(fn=cmd_sync)

    sp = sub.add_parser("init", help="initialize a model for a new tokenizer and save it (HF directory)")
    from harness.cli.init_cmd import add_arguments
    from harness.cli.tools import add_cache_arguments, add_tokenizer_arguments

    add_arguments(sp)
    sp.set_defaults(fn=cmd_init)

    sp = sub.add_parser("tokenizer", help="train a target tokenizer like the source model's (`tokenizer train`)")
    add_tokenizer_arguments(sp)
    sp.set_defaults(fn=cmd_tokenizer)

    sp = sub.add_parser("cache", help="list or prune tokxfer's cache (`cache ls`, `cache prune`)")
    add_cache_arguments(sp)
    sp.set_defaults(fn=cmd_cache)

    sp = sub.add_parser("real", help="the real-model lane: `real fetch` (e5-small + catalogue text, into the cache), `real info`")
    from harness.real.fetch import add_arguments as add_real_arguments

    add_real_arguments(sp)
    sp.set_defaults(fn=cmd_real)

    sp = sub.add_parser("overlap", help="overlap report (exact and fuzzy) of two tokenizers")
    sp.add_argument("source")
    sp.add_argument("target")
    sp.set_defaults(fn=cmd_overlap)

    sp = sub.add_parser("world", help="build the built-in world / pretrain its source models")
    sp.add_argument("action", choices=["build", "pretrain"])
    sp.add_argument("--size", default="small", choices=["tiny", "small"])
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--kind", nargs="+", default=["mlm"], choices=["mlm", "clm"])
    sp.add_argument("--encoding", default=None, metavar="ENCODING",
                    help="pretrain a multilingual source (src + the world's targets) with this language encoding "
                         "(a registered encoding: none|additive|attached|xlp|xlp-shared|langsamp; cached per encoding); default: the plain src-only source")
    sp.add_argument("--languages", nargs="+", default=None, metavar="LANG",
                    help="with --encoding: the target languages pretrained beside src (default: all of the world's)")
    sp.set_defaults(fn=cmd_world)

    sp = sub.add_parser("quickstart", help="world + source + every method on mlm-at-init + leaderboard")
    sp.add_argument("--size", default="small", choices=["tiny", "small"],
                    help="small: harness/configs/quickstart.yaml; tiny: harness/configs/quickstart-tiny.yaml (seconds, CI's)")
    sp.add_argument("--seeds", default=None, help="comma-separated seeds (default: the experiment's, 1,2,3 for small)")
    sp.add_argument("overrides", nargs="*", help="extra key=value overrides of the experiment YAML")
    common_run(sp)
    sp.set_defaults(fn=cmd_quickstart)
    return p


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2), like every other tokxfer error."""

    def error(self, message: str):  # noqa: D102 - argparse API
        print(f"tokxfer: error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def _one_line(e: BaseException) -> str:
    """An exception as one line of text that names what it is about."""
    from harness.registry import RegistryError

    if isinstance(e, KeyError) and type(e).__str__ is KeyError.__str__ and not isinstance(e, RegistryError):
        msg = f"missing key {e}"
    elif isinstance(e, ImportError) and not str(e):
        msg = f"import failed: {type(e).__name__}"
    else:
        msg = str(e) or type(e).__name__
    if isinstance(e, OSError) and e.filename is not None and str(e.filename) not in msg:
        msg = f"{msg}: {e.filename}"
    msg = " ".join(msg.split())
    return msg if len(msg) <= 2000 else msg[:1997] + "…"


def main(argv: list[str] | None = None) -> int:
    """Run the ``tokxfer`` command line; returns the exit status.

    Errors caused by inputs or the environment (a bad file, flag or field; a missing, unreadable or
    full path; an unknown name; a broken plugin: :func:`harness.errors.is_user_error`) print one line
    naming the culprit and exit 2; the traceback only with ``--debug``. Anything else is a bug:
    "internal error", exit 1. Ctrl-C exits 130; finished trials' records are kept and
    the trial that was running leaves no record.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    with _silence_guard(argv) as dog:  # building the parser imports every registered method: seconds
        return _main(argv, debug, dog)


def _main(argv: list[str], debug: bool, dog) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    args.watchdog = dog
    # key=value overrides may also come after options (`tokxfer run X.yaml --quiet seeds=[1]`)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = argv  # the command as given, for provenance (init_info.json)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format=LOG_FORMAT)
    try:
        _quiet_libraries(args.command)
        if args.command in CACHE_COMMANDS:
            from harness.cache import cache_root

            cache_root()  # a relative TOKXFER_CACHE / XDG_CACHE_HOME stops the command here, not in a trial
        _load_plugins(args)
        return args.fn(args)
    except KeyboardInterrupt:
        if debug:
            import traceback

            traceback.print_exc()
        print("tokxfer: interrupted; records of finished trials are on disk, the same command resumes",
              file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            import traceback

            traceback.print_exc()
        from harness.errors import is_user_error

        if is_user_error(e):
            print(f"tokxfer: error: {_one_line(e)}", file=sys.stderr)
            return 2
        hint = "" if debug else " (run with --debug for the traceback)"
        print(f"tokxfer: internal error: {type(e).__name__}: {_one_line(e)}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
