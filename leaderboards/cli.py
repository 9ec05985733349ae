"""Command implementations for ``tokxfer leaderboard | check-regression | golden update | compare``."""

from __future__ import annotations

import dataclasses
import difflib
import shutil
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from harness.inputs import check_name, name_problem, require_inside
from harness.run.records import TrialRecord, as_trial_records
from leaderboards.aggregate import aggregate, load_records, matches_where
from leaderboards.regression import check_regression, default_golden_path, update_golden
from leaderboards.render import claim_lines, findings_lines, render_markdown, write_all, write_index, write_text_atomic
from leaderboards.spec import LATER_STAGE_METRICS, ROW_KEY_SEPARATOR, SpecError, load_spec

SPECS_DIR = Path(__file__).resolve().parent / "specs"
TABLES_DIR = Path(__file__).resolve().parent / "tables"
RECORDS_DIR = Path(__file__).resolve().parent / "records"
"""Committed records of the world experiments behind the top-level specs (``<experiment>/records/*.json``):
``tokxfer leaderboard --all`` renders every world table from them, in seconds, on a clean clone."""


def _records_for(spec, runs_dir: Path, every_experiment: bool = False) -> list[dict]:
    """The records of a spec's experiments under ``runs_dir``.

    ``every_experiment`` (``--all``): a spec that reads an experiment with no records yet is not
    rendered (e.g. new rows declared beside a finished experiment's): FileNotFoundError names it.
    """
    every = spec.records_dirs(runs_dir)
    dirs = [d for d in every if d.is_dir()]
    if not dirs:
        raise FileNotFoundError(
            f"spec {spec.name!r}: no records under {runs_dir} for experiment(s) {', '.join(spec.experiments)}; run them first"
        )
    if every_experiment:
        waiting = [e for e, d in zip(spec.experiments, every) if d not in dirs]
        if waiting:
            raise FileNotFoundError(f"spec {spec.name!r}: no records under {runs_dir} for experiment(s) "
                                    f"{', '.join(waiting)} (of {', '.join(spec.experiments)}); run them first")
    records = load_records(dirs)
    if spec.where and not any(matches_where(r, spec.where) for r in records):
        raise FileNotFoundError(
            f"spec {spec.name!r}: no record of experiment(s) {', '.join(spec.experiments)} under {runs_dir} matches "
            f"its filter {dict(spec.where)}; run them first"
        )
    return records


def _render(spec, runs_dir: Path, out_dir: str | Path, known: KnownNames | None = None, every_experiment: bool = False):
    """Aggregate one spec's records and write .md/.csv/.tex/.html into ``out_dir``; return ``(table, records)``.

    ``known``: see :func:`check_spec_names`; ``every_experiment``: see :func:`_records_for`.
    """
    records = _records_for(spec, Path(runs_dir), every_experiment)
    check_spec_names(spec, records, known)
    table = aggregate(records, spec)
    check_columns(table, records)
    write_all(table, out_dir)
    return table, records


def _did_you_mean(name: str, candidates) -> str:
    close = difflib.get_close_matches(str(name), sorted(set(candidates)), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


KnownNames = Callable[[str], Collection[str]]
"""``known(kind)``: the names tokxfer knows of a kind (``task``, ``method``, ``encoding``, ``language``)
without records. Given by the command line (``harness/cli/main.py``: the registry and the built-in world;
this room reads records only), so a spec's names can be checked against more than its records."""


def check_spec_names(spec, records: list[dict], known: KnownNames | None = None) -> None:
    """Refuse a spec whose column task, column language or row names nothing (a typo renders an
    empty column or row instead of an error).

    A name is known when a record of the spec's experiments has it (any status; a language in any
    task's records), or when ``known`` lists it (a registered task, method or encoding, a language
    of the built-in world). A known name without records yet (an experiment still running) renders
    as missing, as before. Columns the spec's paper numbers fill are the paper's and are not
    checked. Without ``known`` only the records count, and names they lack are not checked.

    Raises:
        SpecError: naming the spec file, the column or row, and close matches.
    """


    if known is None:
        return
    recs = as_trial_records(records)
    origin = str(spec.source) if spec.source is not None else f"spec {spec.name!r}"
    exps = ", ".join(spec.experiments)
    until = "; leave it out until its experiment has run"
    # a column the spec's paper numbers fill shows the paper's task/language, which we may not measure
    referenced = {key for pn in spec.paper for _, _, vals in pn.rows for key, _ in vals}
    tasks = {r.task_name for r in recs if r.task_name}
    langs = {lang for r in recs for lang in [r.target_language, *(r.metrics or {})] if isinstance(lang, str)}
    for c in spec.columns:
        if c.key in referenced:
            continue
        if c.task not in tasks and c.task not in known("task"):
            names = tasks | set(known("task"))
            raise SpecError(
                f"{origin}: column {c.key}: task {c.task!r} is in no record of experiment(s) {exps} and is not a "
                f"registered task{_did_you_mean(c.task, names)} (known: {', '.join(sorted(names))})"
            )
        for lang in c.components or (c.language,):
            if lang not in langs and lang not in known("language"):
                names = langs | set(known("language"))
                raise SpecError(
                    f"{origin}: column {c.key}: language {lang!r} is in no record of experiment(s) {exps} and is not "
                    f"a language of the built-in world{_did_you_mean(lang, names)} (languages in the records: "
                    f"{', '.join(sorted(langs)) or 'none'}){until}"
                )
    if spec.rows is None:
        return
    kinds = {"method": ("method",), "encoding": ("encoding",), "method+encoding": ("method", "encoding")}[spec.row_by]
    found = {kind: {r.method_id if kind == "method" else r.encoding_id for r in recs} - {None} for kind in kinds}
    for i, row in enumerate(spec.rows):
        parts = row.method.split(ROW_KEY_SEPARATOR) if len(kinds) == 2 else [row.method]
        if len(parts) != len(kinds):
            raise SpecError(f"{origin}: rows[{i}]: {row.method!r} is not 'METHOD{ROW_KEY_SEPARATOR}ENCODING' (row_by: {spec.row_by})")
        for kind, part in zip(kinds, parts):
            if part in found[kind] or part in known(kind):
                continue
            raise SpecError(
                f"{origin}: rows[{i}]: {kind} {part!r} is in no record of experiment(s) {exps} and no {kind} is "
                f"registered under that name{_did_you_mean(part, found[kind] | set(known(kind)))} "
                f"({kind}s in the records: {', '.join(sorted(found[kind])) or 'none'}){until}"
            )


def check_columns(table, records: list) -> None:
    """Refuse a spec column whose metric no record of its task has (a typo renders an empty column).

    Raises:
        SpecError: naming the spec, the column and the metrics the task's records do have.
    """
    by_task: dict[str, list[TrialRecord]] = {}
    for r in as_trial_records(records):
        if r.ok:
            by_task.setdefault(r.task_name, []).append(r)
    for c in table.columns:
        recs = by_task.get(c.task)
        if not recs or any(row.cells[c.key].n for row in table.rows if c.key in row.cells):
            continue
        if c.metric.source == "metrics":
            have = sorted({m for r in recs for ms in (r.metrics or {}).values() if isinstance(ms, dict) for m in ms})
        elif c.metric.source == "stages":
            if c.metric.record_key in LATER_STAGE_METRICS:  # older records lack it: the column shows – (a note says why)
                continue
            have = sorted({m for r in recs for st in (r.stages or {}).values() if isinstance(st, dict)
                           for ms in (st.get("metrics") or {}).values() if isinstance(ms, dict) for m in ms})  # fmt: skip
        else:
            section = c.metric.source.split(".", 1)[1]
            have = sorted({m for r in recs for m in ((r.init or {}).get(section) or {})})
        if c.metric.record_key not in have:
            raise SpecError(
                f"spec {table.spec.name!r}: column {c.key}: no record of task {c.task!r} has the metric "
                f"{c.metric.record_key!r} in {c.metric.source} (they have: {', '.join(have) or 'none'})"
            )


def render_spec_file(spec_path: str | Path, runs_dir: str | Path, out_dir: str | Path,
                     known: KnownNames | None = None) -> str:  # fmt: skip
    """Aggregate one spec's records, write .md/.csv/.tex/.html into ``out_dir``, return the Markdown."""
    table, _ = _render(load_spec(spec_path), runs_dir, out_dir, known)
    return render_markdown(table)


def collect_records(specs: list[Path], runs_dir: Path, records_dir: Path = RECORDS_DIR) -> list[str]:
    """Copy the records of every spec's experiments found under ``runs_dir`` into ``records_dir``.

    An experiment's committed records are replaced as a whole (never merged with older ones, so a
    table never mixes two runs); experiments not found under ``runs_dir`` keep theirs. Returns the
    experiments copied.
    """
    done = []
    for sp in specs:
        for exp in load_spec(sp).experiments:
            src = Path(runs_dir) / exp / "records"
            if exp in done or not src.is_dir():
                continue
            files = sorted(src.glob("*.json"))
            if not files:
                continue
            dst = Path(records_dir) / check_name(exp, "experiment") / "records"
            require_inside(dst, records_dir, "--collect")  # <exp>/ or <exp>/records may be a link elsewhere
            tmp = dst.with_name("records.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for f in files:
                shutil.copy2(f, tmp / f.name)
                examples = f.with_name(f"{f.stem}.examples.npz")  # per-example results travel with their record
                if examples.is_file():
                    shutil.copy2(examples, tmp / examples.name)
            shutil.rmtree(dst, ignore_errors=True)
            tmp.rename(dst)
            done.append(exp)
            print(f"collected {len(files)} records of {exp} from {src} into {dst}", file=sys.stderr)
    return done


def _write_plots(table, records: list[dict], out: Path) -> list[tuple[str, str]]:
    """Write the spec's figures under ``<out>/plots/<spec name>/``; return ``[(path relative to out, caption)]``.

    A figure that cannot be made (or matplotlib itself failing) is a warning on stderr naming the
    spec and the figure, never a failed command: the tables are already written.
    """
    name = check_name(table.spec.name, "leaderboard spec name")
    folder = require_inside(out / "plots" / name, out, "--out")  # plots/ or plots/<spec> may be a link elsewhere
    if not table.rows:
        print(f"warning: spec {name!r}: no measured rows, no plots", file=sys.stderr)
    try:
        from leaderboards.plots import write_spec_plots

        plots = write_spec_plots(table, records, folder)
    except Exception as e:  # e.g. a broken matplotlib install: the tables still stand
        print(f"warning: spec {name!r}: no plots written ({type(e).__name__}: {e})", file=sys.stderr)
        return []
    figures = []
    for p in plots:
        if p.path is None:
            print(f"warning: spec {name!r}: plot {p.name!r} not written: {p.error}", file=sys.stderr)
        else:
            figures.append((p.path.relative_to(out).as_posix(), p.caption))
    return figures


def _write_budget(spec, records: list, out: Path) -> list[tuple[str, str]]:
    """The budget curves of a spec with ``stage_set`` columns (:mod:`leaderboards.budget`): its steps-saved
    table beside the spec's tables and its figure; ``[(relative path, caption)]`` of the figure."""
    from leaderboards.budget import PLOT_CAPTION, has_budget_curves, write_budget_files

    if not has_budget_curves(spec):
        return []
    paths = write_budget_files(spec, records, out)
    print(f"→ {paths[0]} (steps saved vs {spec.against})\n")
    return [(paths[-1].relative_to(out).as_posix(), PLOT_CAPTION.replace("<spec>", spec.name))]


FINDINGS_FILE = "FINDINGS.md"
"""Written by ``tokxfer leaderboard --all`` beside the tables; the README's results quote it verbatim."""


def render_findings(tables: list, skipped: list[str] = ()) -> str:
    """Every declared comparison of every table, one line each, grouped by table (Markdown).

    Only what a spec declared before its run gets a line (:func:`leaderboards.render.findings_lines`:
    Δ with its 95 % CI, Holm-adjusted p, P(A > B), verdict; "no detectable difference" with the
    minimum detectable effect), then the spec's paper claims (:func:`leaderboards.render.claim_lines`:
    each the verdict of one of those comparisons). Tables that declare nothing are named as such, so a
    reader sees that they make no claim.
    """
    lines = ["# Findings: the declared comparisons of every committed table", "",
             "Generated by `tokxfer leaderboard --all` from the committed records; the README's results quote",
             "this file. Each line: Δ (A − B) [95 % CI], p Holm-adjusted over the table's comparisons,",
             "P(A > B) and the verdict at α = 0.05 (MDE: the smallest difference the table could detect).",
             "A line that starts with \"Claim:\" is a paper's claim: reproduced, not reproduced, no detectable",
             "difference or untestable, by the declared comparison it names (leaderboards/claims.py).", ""]
    silent = []
    for table in sorted(tables, key=lambda t: t.spec.name):
        found = findings_lines(table, with_spec=False) + claim_lines(table)
        if not found:
            silent.append(table.spec.name)
            continue
        lines += [f"## {table.spec.name}", "", *(f"- {f}" for f in found), ""]
    if silent:
        lines += ["## Tables without declared comparisons (no claims)", "", ", ".join(silent), ""]
    if skipped:
        lines += ["## Specs without records (not rendered)", "", ", ".join(skipped), ""]
    return "\n".join(lines).rstrip() + "\n"


def leaderboard_command(args) -> int:
    """Render one spec (or every packaged spec with ``--all``) into ``--out``.

    Per spec: ``<spec>.{md,csv,tex,html}`` and its figures ``plots/<spec>/*.png``; then one
    ``index.html`` with every rendered table followed by its figures (relative links).
    """
    if args.all == bool(args.spec):
        print("tokxfer: error: leaderboard: give one SPEC or --all", file=sys.stderr)
        return 2
    if args.collect and not args.all:
        print("tokxfer: error: leaderboard: --collect goes with --all", file=sys.stderr)
        return 2
    experiments = tuple(getattr(args, "experiment", None) or ())
    if experiments and args.all:
        print("tokxfer: error: leaderboard: --experiment goes with one SPEC, not --all", file=sys.stderr)
        return 2
    for e in experiments:
        if name_problem(e):
            print(f"tokxfer: error: leaderboard: --experiment {e!r} is not an experiment name ({name_problem(e)})", file=sys.stderr)
            return 2
    specs = sorted(SPECS_DIR.glob("*.yaml")) if args.all else [Path(args.spec)]
    runs_dir = Path(args.runs_dir) if args.runs_dir else (RECORDS_DIR if args.all else Path("runs"))
    if args.collect:
        collect_records(specs, Path(args.collect), RECORDS_DIR)
        runs_dir = RECORDS_DIR
    out = Path(args.out) if args.out else (TABLES_DIR if args.all else runs_dir / "leaderboards")
    missing: dict[str, str] = {}  # spec name -> why it was not rendered
    tables, figures = [], {}
    for sp in specs:
        spec = load_spec(sp)
        if experiments:  # the same table from another preset's records (e.g. xlp-table1-medium)
            spec = dataclasses.replace(spec, experiments=experiments)
        try:
            table, records = _render(spec, runs_dir, out, getattr(args, "known_names", None), every_experiment=args.all)
        except FileNotFoundError as e:
            if not args.all:
                raise
            missing[spec.name] = str(e)
            continue
        print(render_markdown(table))
        print(f"\n→ {out}/{spec.name}.{{md,csv,tex,html}}\n")
        tables.append(table)
        figures[spec.name] = _write_plots(table, records, out)
        figures[spec.name] += _write_budget(spec, records, out)
    if tables:
        index = write_index(tables, out, figures=figures, skipped=list(missing))
        print(f"→ {index} (every table with its plots under {out / 'plots'})\n")
    if args.all:
        findings = out / FINDINGS_FILE
        write_text_atomic(findings, render_findings(tables, skipped=sorted(missing)), within=out)
        print(f"→ {findings} (every declared comparison's verdict: what the README's results may claim)\n")
    for m in missing.values():
        print(f"skipped: {m}", file=sys.stderr)
    return 0


def check_regression_command(args) -> int:
    if not 0 < args.alpha < 0.5:
        raise SpecError(f"--alpha: expected a number in (0, 0.5), got {args.alpha}")
    records = load_records(args.records)
    report = check_regression(records, args.golden, mode=args.mode, alpha=args.alpha)
    print(report.format())
    return report.exit_code


def golden_update_command(args) -> int:
    spec = load_spec(args.spec)
    records = load_records(args.records)
    check_spec_names(spec, records, getattr(args, "known_names", None))
    path = Path(args.golden) if args.golden else default_golden_path(spec)
    update_golden(records, spec, path, command="tokxfer " + " ".join(sys.argv[1:]))
    print(f"wrote {path}")
    return 0


def compare_command(args) -> int:
    """``tokxfer compare``: the method vs each baseline, per column, Holm-adjusted over all of them."""
    from leaderboards.compare import compare_table, render_comparison_markdown
    from leaderboards.spec import parse_spec

    if args.method in args.against:
        raise SpecError(f"--against {args.method!r} is the --method itself; compare it against other methods")
    dups = sorted({m for m in args.against if args.against.count(m) > 1})
    if dups:
        raise SpecError(f"--against lists {', '.join(map(repr, dups))} twice; name each baseline once")
    records = load_records(args.experiment_dir)
    if not any(r.ok for r in records):
        raise SpecError(f"{args.experiment_dir}: no successful trial records to compare")
    if not 0 < args.alpha < 0.5:
        raise SpecError(f"--alpha: expected a number in (0, 0.5), got {args.alpha}")
    spec = load_spec(args.spec) if getattr(args, "spec", None) else parse_spec(_auto_spec(records), origin="<compare>")
    if getattr(args, "spec", None):
        check_spec_names(spec, records, getattr(args, "known_names", None))
    table = aggregate(records, spec)
    rows = sorted(r.method for r in table.rows)
    for flag, names in (("--method", [args.method]), ("--against", args.against)):
        unknown = [m for m in names if m not in rows]
        if unknown:
            raise SpecError(f"{flag}: method(s) {', '.join(map(repr, unknown))} not in the records of "
                            f"{args.experiment_dir}{_did_you_mean(unknown[0], rows)} (methods: {', '.join(rows)})")
    print(render_comparison_markdown(table, compare_table(table, args.method, args.against, alpha=args.alpha)))
    return 0


def _auto_spec(records: list) -> dict:
    """A spec covering every task × language × metric found in the records (for ``compare``)."""
    cols: dict[tuple[str, str], set[str]] = {}
    seeds, exps = set(), set()
    for r in as_trial_records(records):
        if not r.ok:
            continue
        task = r.task_name
        seeds.add(r.trial_seed)
        exps.add(r.experiment)
        for lang, ms in (r.metrics or {}).items():
            for m, v in ms.items():
                if isinstance(v, (int, float)):
                    cols.setdefault((task, m), set()).add(lang)
    metrics = {m: {"direction": "lower" if m in ("loss", "perplexity", "token_perplexity", "bits_per_byte") else "higher"}
               for (_, m) in cols}
    columns = [{"task": t, "languages": sorted(langs), "metrics": [m]} for (t, m), langs in sorted(cols.items())]
    return {"name": "compare", "version": 1, "experiments": sorted(e for e in exps if e), "required_seeds": sorted(s for s in seeds if s is not None),
            "metrics": metrics, "columns": columns, "rows": "all"}
