"""Leaderboard specs: what a table is, as a versioned YAML file of values.

A spec names the experiments whose records feed the table, the rows (methods), the columns
(task × language × metric, plus per-metric averages over languages), each metric's direction and
number format, the seeds every cell needs, and optionally files of the papers' reference numbers
(``leaderboards/paper_numbers/*.yaml``), which are rendered as separate rows marked "paper" and
never mixed into measured cells.

Example spec::

    # tokxfer leaderboard leaderboards/specs/quickstart.yaml
    name: quickstart
    version: 1
    experiments: [quickstart]
    required_seeds: [1, 2, 3]
    format: {decimals: 2, scale: 1}
    metrics:
      loss: {direction: lower, display: "MLM loss"}
      accuracy: {direction: higher, decimals: 1, scale: 100, display: "Acc."}
      gold_top1: {direction: higher, source: init.diagnostics, decimals: 1, scale: 100}
    columns:
      - {task: mlm-at-init, languages: [near, script], metrics: [loss, accuracy], average: true}
    rows: all                      # or a list of {method: focus, display: FOCUS}
    display_names: {focus: FOCUS}  # used with rows: all
    row_by: method                 # or method+encoding (the methods x encodings cross) or encoding
    where: {encoding.name: none}   # optional filter on the resolved config (dotted paths)
    paper_numbers: []              # paths relative to this file, e.g. ../paper_numbers/focus.yaml
    against: random                # declared comparisons: every row vs random, in every column …
    comparisons: [{a: focus, b: wechsel}]   # … and/or named pairs (a vs b); only these get a verdict
                                   #   ({a, b, columns: [xnli/avg/accuracy]}: tested in those columns only)
    claims: [{claim: "…", a: focus, b: wechsel, column: xnli/avg/accuracy, paper: "+1.2"}]
                                   # a paper's claims, each a declared comparison's verdict (leaderboards/claims.py)
    alpha: 0.05                    # family-wise level of the declared comparisons (Holm); default 0.05
    test: t                        # paired t over seeds (default) or permutation (exact sign flips)

The hypotheses are declared before the run: only declared comparisons get a verdict, tested paired
by seed and Holm-adjusted over all of them (:mod:`leaderboards.stats`). A spec that declares
comparisons needs ``required_seeds`` with at least :data:`MIN_SEEDS` seeds, and enough for its test
to reach ``alpha`` at all; a comparison naming a row the spec does not have is an error (at load for
listed ``rows``, when the table is built for ``rows: all``).

Unknown keys anywhere are errors naming the key and the file.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import TokxferError
from harness.inputs import InputFileError, load_yaml, name_problem, one_line, read_text_file
from leaderboards.claims import Claim, parse_claims, parse_comparison_columns
from leaderboards.stats import ALPHA, TESTS, min_achievable_p

__all__ = [
    "SpecError",
    "MetricSpec",
    "Column",
    "RowSpec",
    "PaperNumbers",
    "LeaderboardSpec",
    "load_spec",
    "parse_spec",
    "load_paper_numbers",
    "SOURCES",
    "LATER_STAGE_METRICS",
    "ROW_BY",
    "ROW_KEY_SEPARATOR",
    "AVERAGE",
    "PACKAGED_SPECS",
    "MIN_SEEDS",
]

SOURCES = ("metrics", "init.diagnostics", "init.counts", "stages")
"""Where a metric is read from: ``record["metrics"][lang][name]``, ``record["init"][...][name]``
(for trials whose target language is the column's language), or ``record["stages"][id]["metrics"]
[lang][name]`` of the first stage (in the trial's order) that has it — e.g. LAPT's forgetting
measurement ``source_forgetting`` (:mod:`tasks.forgetting`)."""
LATER_STAGE_METRICS = ("source_forgetting", "source_loss_before", "source_loss_after", "source_loss_original")
"""Stage metrics added after records existed (LAPT's forgetting, issue 30): a ``stages`` column of one
of them may be empty for older records (shown –, with a note) instead of being refused as a typo."""
ROW_BY = ("method", "encoding", "method+encoding")
"""What one table row stands for (spec key ``row_by``)."""
ROW_KEY_SEPARATOR = " + "
"""Joins the method and encoding ids of a ``method+encoding`` row key."""
AVERAGE = "avg"
"""The language label of an average column."""
PACKAGED_SPECS = Path(__file__).resolve().parent / "specs"
"""Directory of the specs shipped with tokxfer."""
MIN_SEEDS = 3
"""Fewest required seeds for a spec with declared comparisons: a paired test over n seeds has n − 1
degrees of freedom for the spread, and n = 2 leaves it one."""


class SpecError(TokxferError, ValueError):
    """A leaderboard spec or paper-numbers file is invalid (the message names file and key)."""


@dataclass(frozen=True)
class MetricSpec:
    """How one metric is read and shown.

    Attributes:
        name: metric name in the record (``loss``, ``accuracy``, ``gold_top1`` …).
        direction: ``"higher"`` or ``"lower"`` is better.
        source: one of :data:`SOURCES`.
        decimals: digits after the decimal point when rendered.
        scale: factor applied before rendering (100 shows a fraction as a percentage).
        display: column header text (defaults to ``name``).
        key: the record's key for the metric when it differs from ``name`` — two tasks may use one
            key on different scales (QA's ``f1`` is a percentage like the SQuAD script's, NER's
            ``f1`` a fraction like seqeval's), so a spec names them apart (``qa_f1: {key: f1}``).
    """

    name: str
    direction: str = "higher"
    source: str = "metrics"
    decimals: int = 2
    scale: float = 1.0
    display: str = ""
    key: str = ""
    chance: float | None = None
    """The metric's chance level in record units (e.g. 1/3 for 3-way accuracy), stated under the
    table's comparisons; ``None``: not stated."""
    compare: bool = True
    """Whether the declared comparisons test this metric's columns; ``false`` shows a measurement
    beside the table's outcomes (e.g. LAPT's forgetting) without entering the Holm family the
    comparisons were declared on."""

    @property
    def record_key(self) -> str:
        """The key read from the record."""
        return self.key or self.name

    @property
    def label(self) -> str:
        """Header text."""
        return self.display or self.name

    @property
    def arrow(self) -> str:
        """↑ or ↓ by direction."""
        return "↑" if self.direction == "higher" else "↓"

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b``."""
        return a > b if self.direction == "higher" else a < b


@dataclass(frozen=True)
class Column:
    """One table column: a metric of a task in a language (``language == "avg"``: average).

    Attributes:
        task: task name as in ``record["config"]["task"]["name"]``.
        language: language code, or :data:`AVERAGE`.
        metric: the metric's spec.
        components: for an average column, the languages averaged (per seed); else empty.
        task_id: only records whose task has this id (``record["config"]["task"]["id"]``): one of
            several entries of the same task in an experiment (e.g. budgets of a learning curve);
            ``None``: every record of the task.
    """

    task: str
    language: str
    metric: MetricSpec
    components: tuple[str, ...] = ()
    task_id: str | None = None
    stage_set: str | None = None
    """Only records of this stage set (``record["config"]["stage_set"]``, an experiment's
    ``stage_sets`` axis, e.g. a LAPT budget); ``None``: records of any."""

    @property
    def is_average(self) -> bool:
        """Whether this is an average over languages."""
        return bool(self.components)

    @property
    def key(self) -> str:
        """Stable identifier ``task/language/metric`` (``task[id]/…`` for a column of one task id)."""
        task = self.task if self.task_id is None else f"{self.task}[{self.task_id}]"
        if self.stage_set is not None:
            task = f"{task}@{self.stage_set}"
        return f"{task}/{self.language}/{self.metric.name}"


@dataclass(frozen=True)
class RowSpec:
    """One table row.

    Attributes:
        method: method id as in ``record["config"]["method"]["id"]``.
        display: row label.
    """

    method: str
    display: str = ""

    @property
    def label(self) -> str:
        """Row label."""
        return self.display or self.method


@dataclass(frozen=True)
class PaperNumbers:
    """Reference numbers from a paper, kept apart from measured cells.

    Attributes:
        path: the YAML file they were read from.
        paper: citation of the paper.
        table: which table/figure of the paper.
        scale: how the numbers are printed relative to record units (100: printed in %).
        note: free text (setting differences, model used …).
        url: where the paper is.
        rows: ``((method, display), {column key: value in record units}, …)``.
    """

    path: Path
    paper: str
    table: str
    scale: float
    note: str
    rows: tuple[tuple[str, str, tuple[tuple[str, float], ...]], ...]
    url: str = ""

    @property
    def citation(self) -> str:
        """``paper, table`` as one line."""
        return f"{self.paper}, {self.table}"

    def values(self, method: str) -> dict[str, float]:
        """Values of one method, ``{column key: value in record units}``."""
        for m, _, vals in self.rows:
            if m == method:
                return dict(vals)
        return {}


@dataclass(frozen=True)
class LeaderboardSpec:
    """A parsed, validated leaderboard spec (see module docstring for the YAML form).

    Attributes:
        name: table name (also the output file stem).
        version: integer version of the spec; bump when a change alters the numbers.
        description: one line shown above the table.
        experiments: experiment names; records are read from ``<runs_dir>/<name>/records``.
        rows: explicit rows, or ``None`` for all methods found in the records.
        display_names: method id → label (used when ``rows`` is ``None``); with ``row_by`` other than
            ``method`` also encoding id → label and whole row key → label.
        row_by: what a row is: ``method`` (default), ``encoding``, or ``method+encoding`` (one row per
            pair, keyed ``"<method> + <encoding>"``: the methods × encodings cross).
        columns: expanded columns in display order.
        required_seeds: seeds each cell must have; fewer are flagged.
        where: ``((dotted config path, value), …)`` filter applied to every record.
        paper: reference-number files.
        comparisons: declared ``(a, b)`` row pairs, in order (each tested in every column, or in
            those of ``comparison_columns``).
        comparison_columns: ``((a, b), column keys)`` for the declared pairs tested in some columns only.
        claims: the paper's claims, each a declared comparison in one column (:mod:`leaderboards.claims`).
        against: a declared baseline row: every other row is compared with it (after ``comparisons``).
        alpha: family-wise significance level of the declared comparisons (Holm).
        test: the verdict test, one of :data:`leaderboards.stats.TESTS`.
        source: the spec file (``None`` when parsed from a dict).
    """

    name: str
    version: int
    columns: tuple[Column, ...]
    experiments: tuple[str, ...]
    description: str = ""
    rows: tuple[RowSpec, ...] | None = None
    display_names: tuple[tuple[str, str], ...] = ()
    row_by: str = "method"
    required_seeds: tuple[int, ...] = ()
    where: tuple[tuple[str, Any], ...] = ()
    paper: tuple[PaperNumbers, ...] = ()
    comparisons: tuple[tuple[str, str], ...] = ()
    comparison_columns: tuple[tuple[tuple[str, str], tuple[str, ...]], ...] = ()
    claims: tuple[Claim, ...] = ()
    against: str | None = None
    alpha: float = ALPHA
    test: str = "t"
    source: Path | None = field(default=None, compare=False)

    @property
    def origin(self) -> str:
        """The spec file (or ``<spec name>``), for error messages."""
        return str(self.source) if self.source is not None else f"<spec {self.name}>"

    def declared_pairs(self, rows: list[str]) -> list[tuple[str, str]]:
        """The declared comparisons among ``rows`` (the table's row keys): ``comparisons`` then, with
        ``against``, every other row vs it, without repeats.

        Raises:
            SpecError: a comparison names a row not in ``rows`` (naming the spec and the rows it has).
        """
        pairs = list(self.comparisons)
        if self.against is not None:
            pairs += [(r, self.against) for r in rows if r != self.against]
        unknown = sorted({m for pair in pairs for m in pair if m not in rows})
        if unknown and rows:
            raise SpecError(
                f"{self.origin}: declared comparisons name row(s) {', '.join(map(repr, unknown))} that the table "
                f"does not have (rows: {', '.join(rows)})"
            )
        return list(dict.fromkeys(p for p in pairs if p[0] in rows and p[1] in rows))

    def compared_columns(self, a: str, b: str) -> tuple[str, ...] | None:
        """The column keys the declared comparison ``a`` vs ``b`` is tested in (``None``: every column)."""
        return dict(self.comparison_columns).get((a, b))

    def label(self, method: str) -> str:
        """Display label of a method id."""
        if self.rows is not None:
            for r in self.rows:
                if r.method == method:
                    return r.label
        names = dict(self.display_names)
        if method in names or self.row_by != "method+encoding":
            return names.get(method, method)
        return " + ".join(names.get(part, part) for part in method.split(ROW_KEY_SEPARATOR))

    def records_dirs(self, runs_dir: str | os.PathLike) -> list[Path]:
        """Records directories of the spec's experiments under ``runs_dir``."""
        return [Path(runs_dir) / e / "records" for e in self.experiments]


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def _where(origin: str, ctx: str) -> str:
    return f"{origin}: {ctx}" if ctx else origin


def _check_keys(obj: Any, allowed: set[str], origin: str, ctx: str, required: set[str] = frozenset()) -> dict:
    if not isinstance(obj, Mapping):
        raise SpecError(f"{_where(origin, ctx)}: expected a mapping, got {type(obj).__name__}")
    for key in obj:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise SpecError(
                f"{origin}: unknown key {key!r}{' in ' + ctx if ctx else ''}{hint}; allowed: {', '.join(sorted(allowed))}"
            )
    for key in required:
        if key not in obj:
            raise SpecError(f"{origin}: missing required key {key!r}{' in ' + ctx if ctx else ''}")
    return dict(obj)


def _str_list(value: Any, origin: str, ctx: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value) or not value:
        raise SpecError(f"{origin}: {ctx} must be a non-empty list of names")
    return tuple(str(v) for v in value)


_METRIC_KEYS = {"direction", "source", "decimals", "scale", "display", "key", "chance", "compare"}


def _metric(name: str, raw: Any, defaults: Mapping[str, Any], origin: str) -> MetricSpec:
    raw = _check_keys(raw if raw is not None else {}, _METRIC_KEYS, origin, f"metrics.{name}")
    direction = raw.get("direction", "higher")
    if direction not in ("higher", "lower"):
        raise SpecError(f"{origin}: metrics.{name}.direction must be 'higher' or 'lower', got {direction!r}")
    source = raw.get("source", "metrics")
    if source not in SOURCES:
        raise SpecError(f"{origin}: metrics.{name}.source must be one of {SOURCES}, got {source!r}")
    decimals = raw.get("decimals", defaults.get("decimals", 2))
    scale = raw.get("scale", defaults.get("scale", 1))
    if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= 10:
        raise SpecError(f"{origin}: metrics.{name}.decimals must be an integer in [0, 10], got {decimals!r}")
    if not _finite_number(scale) or scale == 0:
        raise SpecError(f"{origin}: metrics.{name}.scale must be a finite non-zero number, got {scale!r}")
    return MetricSpec(
        name=name,
        direction=direction,
        source=source,
        decimals=decimals,
        scale=float(scale),
        display=str(raw.get("display", "")),
        key=str(raw.get("key", "")),
        chance=_chance(raw.get("chance"), name, origin),
        compare=_flag(raw.get("compare", True), f"metrics.{name}.compare", origin),
    )


def _flag(value: Any, ctx: str, origin: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{origin}: {ctx} must be true or false, got {value!r}")
    return value


def _chance(value: Any, name: str, origin: str) -> float | None:
    if value is None:
        return None
    if not _finite_number(value):
        raise SpecError(f"{origin}: metrics.{name}.chance must be a number (record units), got {value!r}")
    return float(value)


def _finite_number(value: Any) -> bool:
    """A number that is not a bool, NaN or infinite (YAML reads ``.nan`` and ``.inf`` as floats)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _comparisons(raw: Mapping, origin: str, rows: tuple[RowSpec, ...] | None, seeds: list[int],
                 column_keys: list[str]) -> dict:  # fmt: skip
    """The declared comparisons (``comparisons`` with their ``columns``, ``against``, ``alpha``, ``test``)
    and the ``claims`` they test, checked."""
    pairs: list[tuple[str, str]] = []
    only: list[tuple[tuple[str, str], tuple[str, ...]]] = []
    comps = raw.get("comparisons") or []
    if not isinstance(comps, list):
        raise SpecError(f"{origin}: comparisons must be a list of {{a: row, b: row}}")
    for i, c in enumerate(comps):
        c = _check_keys(c, {"a", "b", "columns"}, origin, f"comparisons[{i}]", required={"a", "b"})
        a, b = c["a"], c["b"]
        if not isinstance(a, str) or not isinstance(b, str) or not a or not b:
            raise SpecError(f"{origin}: comparisons[{i}]: a and b must be row names, got {a!r} and {b!r}")
        if a == b:
            raise SpecError(f"{origin}: comparisons[{i}] compares {a!r} with itself")
        if (a, b) in pairs or (b, a) in pairs:
            raise SpecError(f"{origin}: comparisons[{i}] ({a} vs {b}) is declared twice")
        pairs.append((a, b))
        try:
            cols = parse_comparison_columns(c.get("columns"), f"comparisons[{i}]", column_keys)
        except ValueError as e:
            raise SpecError(f"{origin}: {e}") from None
        if cols is not None:
            only.append(((a, b), cols))
    against = raw.get("against")
    if against is not None and (not isinstance(against, str) or not against):
        raise SpecError(f"{origin}: against must be a row name, got {against!r}")
    alpha = raw.get("alpha", ALPHA)
    if not _finite_number(alpha) or not 0 < alpha < 0.5:
        raise SpecError(f"{origin}: alpha must be a number in (0, 0.5), got {alpha!r}")
    test = raw.get("test", "t")
    if test not in TESTS:
        raise SpecError(f"{origin}: test must be one of {', '.join(TESTS)}, got {test!r}")
    declared = bool(pairs) or against is not None
    if declared and len(seeds) < MIN_SEEDS:
        got = f"{len(seeds)} ({seeds})" if seeds else "none (all seeds found)"
        raise SpecError(
            f"{origin}: required_seeds: declared comparisons need at least {MIN_SEEDS} required seeds "
            f"(a paired test over n seeds has n - 1 degrees of freedom), got {got}"
        )
    if declared and min_achievable_p(len(seeds), test) > alpha:
        raise SpecError(
            f"{origin}: test: {test} over {len(seeds)} seeds cannot reach p <= alpha = {alpha:g} (its smallest "
            f"two-sided p is {min_achievable_p(len(seeds), test):.4g}); use test: t or more seeds"
        )
    if rows is not None:
        names = [r.method for r in rows]
        unknown = sorted(({m for pair in pairs for m in pair} | ({against} if against else set())) - set(names))
        if unknown:
            raise SpecError(
                f"{origin}: declared comparisons name row(s) {', '.join(map(repr, unknown))} that are not in "
                f"rows ({', '.join(names)})"
            )
    compared = {p: dict(only).get(p) for p in pairs}
    names = [r.method for r in rows] if rows is not None else []
    compared.update({(r, against): None for r in names if against is not None and r != against})
    if against is not None and rows is None:  # rows: all — any row's claim against the baseline (rows checked later)
        claimed = [c for c in raw.get("claims") or [] if isinstance(c, Mapping) and c.get("b") == against]
        compared.update({(c["a"], against): None for c in claimed if isinstance(c.get("a"), str) and c["a"] != against})
    try:
        claims = parse_claims(raw.get("claims"), compared, column_keys)
    except ValueError as e:
        raise SpecError(f"{origin}: {e}") from None
    return {"comparisons": tuple(pairs), "comparison_columns": tuple(only), "claims": claims, "against": against,
            "alpha": float(alpha), "test": test}


_TOP_KEYS = {
    "name",
    "version",
    "description",
    "experiments",
    "experiment",
    "rows",
    "display_names",
    "row_by",
    "columns",
    "metrics",
    "required_seeds",
    "format",
    "where",
    "paper_numbers",
    "comparisons",
    "claims",
    "against",
    "alpha",
    "test",
}
_COLUMN_KEYS = {"task", "id", "stage_set", "languages", "language", "metrics", "metric", "average"}
_ROW_KEYS = {"method", "display"}


def _parse_columns(cols_raw: Any, metrics: dict[str, MetricSpec], fmt: dict, origin: str) -> list[Column]:
    """The spec's ``columns`` (one :class:`Column` per task x language x metric, plus averages);
    metrics named only here are added to ``metrics`` with the defaults."""
    if not isinstance(cols_raw, list) or not cols_raw:
        raise SpecError(f"{origin}: columns must be a non-empty list")
    columns: list[Column] = []
    for i, c in enumerate(cols_raw):
        ctx = f"columns[{i}]"
        c = _check_keys(c, _COLUMN_KEYS, origin, ctx, required={"task"})
        langs = _str_list(c.get("languages", c.get("language")), origin, f"{ctx}.languages")
        names = _str_list(c.get("metrics", c.get("metric")), origin, f"{ctx}.metrics")
        average = c.get("average", False)
        task_id = c.get("id")
        if task_id is not None and (not isinstance(task_id, str) or not task_id):
            raise SpecError(f"{origin}: {ctx}.id must be a task id (a non-empty string), got {task_id!r}")
        stage_set = c.get("stage_set")
        if stage_set is not None and (not isinstance(stage_set, str) or not stage_set):
            raise SpecError(f"{origin}: {ctx}.stage_set must be a stage set id (a non-empty string), got {stage_set!r}")
        if not isinstance(average, bool):
            raise SpecError(f"{origin}: {ctx}.average must be true or false")
        if AVERAGE in langs:
            raise SpecError(f"{origin}: {ctx}.languages may not contain {AVERAGE!r} (use average: true)")
        for mname in names:
            if mname not in metrics:
                metrics[mname] = _metric(mname, {}, fmt, origin)
            m = metrics[mname]
            for lang in langs:
                columns.append(Column(task=str(c["task"]), language=lang, metric=m, task_id=task_id, stage_set=stage_set))
            if average:
                if len(langs) < 2:
                    raise SpecError(f"{origin}: {ctx}.average needs at least two languages")
                columns.append(Column(task=str(c["task"]), language=AVERAGE, metric=m, components=langs, task_id=task_id,
                                      stage_set=stage_set))
    keys = [col.key for col in columns]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise SpecError(f"{origin}: duplicate columns {dup}")
    return columns


def _parse_rows(rows_raw: Any, origin: str) -> tuple[RowSpec, ...] | None:
    """The spec's ``rows``: None for ``all``, else the listed rows in order."""
    rows: tuple[RowSpec, ...] | None
    if rows_raw == "all" or rows_raw is None:
        rows = None
    elif isinstance(rows_raw, list) and rows_raw:
        parsed = []
        for i, r in enumerate(rows_raw):
            if isinstance(r, str):
                parsed.append(RowSpec(method=r))
                continue
            r = _check_keys(r, _ROW_KEYS, origin, f"rows[{i}]", required={"method"})
            parsed.append(RowSpec(method=str(r["method"]), display=str(r.get("display", ""))))
        rows = tuple(parsed)
        methods = [r.method for r in rows]
        if len(set(methods)) != len(methods):
            raise SpecError(f"{origin}: rows list a method twice")
    else:
        raise SpecError(f"{origin}: rows must be 'all' or a non-empty list of methods")
    return rows


def _parse_paper_numbers(paper_raw: Any, known: set[str], origin: str, base_dir: Path | None) -> tuple:
    """The spec's ``paper_numbers`` files, loaded; each value must name one of the ``known`` column keys."""
    if isinstance(paper_raw, str):
        paper_raw = [paper_raw]
    if not isinstance(paper_raw, list):
        raise SpecError(f"{origin}: paper_numbers must be a list of file paths")
    base = base_dir or Path.cwd()
    paper = tuple(load_paper_numbers(p if Path(p).is_absolute() else base / p) for p in paper_raw)
    for pn in paper:
        for _, _, vals in pn.rows:
            for key, _ in vals:
                if key not in known:
                    raise SpecError(f"{pn.path}: value for column {key!r}, which spec {origin} does not have")
    return paper


def parse_spec(data: Any, origin: str = "<spec>", base_dir: Path | None = None) -> LeaderboardSpec:
    """Validate a spec given as plain data (the parsed YAML).

    Args:
        data: the mapping read from YAML.
        origin: file name used in error messages.
        base_dir: directory that relative ``paper_numbers`` paths are resolved against.

    Returns:
        The frozen spec.

    Raises:
        SpecError: naming the file and the offending key.

    Example:
        >>> s = parse_spec({"name": "t", "version": 1, "experiments": ["qs"],
        ...                 "metrics": {"loss": {"direction": "lower"}},
        ...                 "columns": [{"task": "mlm-at-init", "languages": ["near"], "metrics": ["loss"]}]})
        >>> [c.key for c in s.columns]
        ['mlm-at-init/near/loss']
    """
    # Stays whole: one validation step per top-level key of a spec, in the order the spec format documents them.
    if isinstance(data, Mapping) and "separation" in data:
        raise SpecError(
            f"{origin}: 'separation' (best row vs a baseline in pooled stds, chosen after the fact) was removed; "
            f"declare the comparisons instead, e.g. 'against: random' (see leaderboards/stats.py)"
        )
    raw = _check_keys(data, _TOP_KEYS, origin, "", required={"name", "version", "columns"})
    name = raw["name"]
    if not isinstance(name, str) or not name:
        raise SpecError(f"{origin}: name must be a non-empty string")
    if name_problem(name):
        raise SpecError(f"{origin}: name: {name!r} cannot be a file name ({name_problem(name)}): it names the table's "
                        f"files under --out; use letters, digits and - _ . +")
    version = raw["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SpecError(f"{origin}: version must be a positive integer, got {version!r}")

    if "experiment" in raw and "experiments" in raw:
        raise SpecError(f"{origin}: give either 'experiment' or 'experiments', not both")
    exps = raw.get("experiments", raw.get("experiment"))
    if exps is None:
        raise SpecError(f"{origin}: missing required key 'experiments'")
    experiments = _str_list(exps, origin, "experiments")
    for e in experiments:
        if name_problem(e):
            raise SpecError(f"{origin}: experiments: {e!r} cannot be an experiment name ({name_problem(e)}): "
                            f"records are read from RUNS_DIR/<experiment>/records")

    fmt = _check_keys(raw.get("format") or {}, {"decimals", "scale"}, origin, "format")
    metrics_raw = raw.get("metrics") or {}
    if not isinstance(metrics_raw, Mapping):
        raise SpecError(f"{origin}: metrics must be a mapping name -> {{direction, source, decimals, scale, display}}")
    metrics = {str(k): _metric(str(k), v, fmt, origin) for k, v in metrics_raw.items()}

    columns = _parse_columns(raw["columns"], metrics, fmt, origin)
    rows = _parse_rows(raw.get("rows", "all"), origin)

    display = raw.get("display_names") or {}
    if not isinstance(display, Mapping):
        raise SpecError(f"{origin}: display_names must be a mapping method -> label")

    row_by = raw.get("row_by", "method")
    if row_by not in ROW_BY:
        raise SpecError(f"{origin}: row_by must be one of {', '.join(ROW_BY)}, got {row_by!r}")

    seeds_raw = raw.get("required_seeds") or []
    if not isinstance(seeds_raw, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds_raw):
        raise SpecError(f"{origin}: required_seeds must be a list of integers")
    if len(set(seeds_raw)) != len(seeds_raw):
        raise SpecError(f"{origin}: required_seeds has duplicates")

    where_raw = raw.get("where") or {}
    if not isinstance(where_raw, Mapping):
        raise SpecError(f"{origin}: where must be a mapping of dotted config paths to values")
    for k, v in where_raw.items():
        if isinstance(v, (dict, list)):
            raise SpecError(f"{origin}: where.{k} must be a scalar value")

    paper = _parse_paper_numbers(raw.get("paper_numbers") or [], {c.key for c in columns}, origin, base_dir)

    return LeaderboardSpec(
        name=name,
        version=version,
        description=str(raw.get("description", "")),
        experiments=experiments,
        rows=rows,
        display_names=tuple((str(k), str(v)) for k, v in display.items()),
        row_by=row_by,
        columns=tuple(columns),
        required_seeds=tuple(sorted(seeds_raw)),
        where=tuple((str(k), v) for k, v in where_raw.items()),
        paper=paper,
        **_comparisons(raw, origin, rows, seeds_raw, [c.key for c in columns]),
        source=None if origin == "<spec>" else Path(origin),
    )


def load_spec(path: str | os.PathLike) -> LeaderboardSpec:
    """Read and validate a spec YAML file (values only; relative paper-number paths are resolved
    against the spec file's directory).

    Example:
        >>> spec = load_spec(PACKAGED_SPECS / "quickstart.yaml")
        >>> spec.name, spec.required_seeds
        ('quickstart', (1, 2, 3))
    """
    path = Path(path)
    try:
        data = load_yaml(read_text_file(path, "leaderboard spec"))
    except InputFileError as e:
        raise SpecError(str(e)) from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: invalid YAML ({one_line(e)})") from None
    return parse_spec(data, origin=str(path), base_dir=path.parent)


_PAPER_KEYS = {"paper", "table", "scale", "note", "url", "rows"}
_PAPER_ROW_KEYS = {"method", "display", "values"}


def load_paper_numbers(path: str | os.PathLike) -> PaperNumbers:
    """Read a paper-numbers YAML file.

    Format::

        paper: "Dobler & de Melo (2023). FOCUS. EMNLP."
        table: "Table 2"
        scale: 100          # numbers are printed as percentages; records hold fractions
        note: "XLM-R base, full fine-tuning"
        rows:
          - method: focus
            display: FOCUS
            values: {"xnli/de/accuracy": 78.4}   # keys: task/language/metric

    Raises:
        SpecError: naming the file and key.
    """
    path = Path(path)
    origin = str(path)
    try:
        data = load_yaml(read_text_file(path, "paper numbers file"))
    except InputFileError as e:
        raise SpecError(str(e)) from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: invalid YAML ({one_line(e)})") from None
    raw = _check_keys(data, _PAPER_KEYS, origin, "", required={"paper", "table", "rows"})
    scale = raw.get("scale", 1)
    if not _finite_number(scale) or scale == 0:
        raise SpecError(f"{origin}: scale must be a finite non-zero number, got {scale!r}")
    rows = []
    if not isinstance(raw["rows"], list) or not raw["rows"]:
        raise SpecError(f"{origin}: rows must be a non-empty list")
    for i, r in enumerate(raw["rows"]):
        r = _check_keys(r, _PAPER_ROW_KEYS, origin, f"rows[{i}]", required={"method", "values"})
        vals = r["values"]
        if not isinstance(vals, Mapping):
            raise SpecError(f"{origin}: rows[{i}].values must map 'task/language/metric' to numbers")
        parsed = []
        for k, v in vals.items():
            if str(k).count("/") != 2:
                raise SpecError(f"{origin}: rows[{i}].values key {k!r} is not 'task/language/metric'")
            if not _finite_number(v):
                raise SpecError(f"{origin}: rows[{i}].values[{k!r}] must be a finite number, got {v!r}")
            parsed.append((str(k), float(v) / float(scale)))
        rows.append((str(r["method"]), str(r.get("display", r["method"])), tuple(parsed)))
    return PaperNumbers(
        path=path,
        paper=str(raw["paper"]),
        table=str(raw["table"]),
        scale=float(scale),
        note=str(raw.get("note", "")),
        rows=tuple(rows),
        url=str(raw.get("url", "")),
    )
