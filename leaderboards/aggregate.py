"""Aggregation: trial records + a leaderboard spec → a table of mean ± sample std with n.

This is a pure function of its inputs (:func:`aggregate`); reading records from disk is kept
apart in :func:`load_records`. Nothing is silently averaged: a cell whose seeds are incomplete,
whose records come from different schema/tokxfer versions, or that holds two records for one
seed (two configurations mixed in one cell) still shows its mean but carries a flag, and failed
trials are counted separately (never averaged, never dropped without a trace). Cells built from
records that :mod:`harness.run.sanity` flagged (the record's ``flags``) carry the ``sanity`` or
``nondeterministic`` flag and the codes behind it (:attr:`Cell.guards`). Provenance is marked too:
a cell holding a record written from a dirty git tree (``git.dirty``) carries ``dirty``, one holding
a record of another world build than the table's (``revisions.world.fingerprint`` differing from the
most common one, or missing) carries ``world``.

Every cell gets its 95 % CI and the table its declared comparisons, bold sets and rank intervals
from :mod:`leaderboards.stats` (:attr:`Table.stats`). Records may carry per-example results
(:func:`record_examples`); a cell whose every seed has them uses them (the Multi-Bootstrap).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.examples import ExampleScores
from harness.run.records import TrialRecord, as_trial_records
from leaderboards.seed_sources import random_sources, record_row  # re-exported
from leaderboards.spec import Column, LeaderboardSpec, MetricSpec
from leaderboards.stats import Interval, Sample, TableStats, analyze, mean_interval

"""A trial record, typed or as its JSON mapping (what :func:`load_records` returns)."""

__all__ = [
    "Cell",
    "Row",
    "Table",
    "FLAGS",
    "load_records",
    "record_row",
    "matches_where",
    "cell_observations",
    "summarize",
    "aggregate",
    "best_methods",
    "rounded",
    "Observation",
    "record_flag_codes",
    "record_examples",
    "ExampleReader",
    "Provenance",
    "random_sources",
]

FLAGS: dict[str, tuple[str, str]] = {
    "missing_seeds": ("†", "fewer seeds than required (mean of the seeds present)"),
    "mixed_versions": ("‡", "records from different schema/tokxfer versions"),
    "duplicate_seeds": ("§", "several records for one seed (different configurations in one cell)"),
    "failed": ("¶", "some trials of this cell failed (counted, not averaged)"),
    "sanity": ("!", "a sanity guard flagged a trial of this cell (the number is kept; see the records' flags)"),
    "nondeterministic": ("?", "a trial of this cell used a component that is not reproducible from the seed"),
    "dirty": ("◊", "a record of this cell was written from a git tree with uncommitted changes (git.dirty)"),
    "world": ("≠", "a record of this cell has no world fingerprint or another world build than the table's "
                   "(revisions.world.fingerprint)"),
}
"""Flag name → (footnote marker, legend text), in rendering order."""

NONDETERMINISTIC_PREFIX = "nondeterministic:"
"""Record flags (:mod:`harness.run.sanity`) with this code prefix mark cells ``nondeterministic``; every
other record flag marks them ``sanity``."""


def record_flag_codes(record: TrialRecord) -> frozenset[str]:
    """Codes of the sanity flags a record carries (``flags`` is ``None`` or absent when unchecked).

    Example:
        >>> sorted(record_flag_codes(TrialRecord("t", "ok", flags=[{"code": "loss_near_zero", "message": "…"}])))
        ['loss_near_zero']
    """
    return record.flag_codes


def _cell_flags(codes: Iterable[str]) -> set[str]:
    out = set()
    for c in codes:
        out.add("nondeterministic" if c.startswith(NONDETERMINISTIC_PREFIX) else "sanity")
    return out


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


def load_records(dirs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[TrialRecord]:
    """Load every trial record from one or more records directories.

    Accepts ``runs/<experiment>`` or ``runs/<experiment>/records``; records are validated and
    migrated by :func:`harness.run.records.read_records` (the one record reader) and know their files,
    so their per-example results are found beside them. Every function of this module also takes
    record mappings (tests), read as :class:`~harness.run.records.TrialRecord` values.

    Raises:
        FileNotFoundError: a directory does not exist.
        harness.run.records.RecordError: a file is truncated, corrupt or from a newer schema (named).

    Example:
        >>> load_records("runs/quickstart")  # doctest: +SKIP
    """
    from harness.run.records import read_records

    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    return [rec for d in dirs for rec in read_records(Path(d))]


def matches_where(record: TrialRecord, where: Iterable[tuple[str, Any]]) -> bool:
    """Whether the record's resolved config has every ``dotted.path == value`` (a spec's ``where``)."""
    return all(record.config_value(k) == v for k, v in where)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Observation:
    """One value of one record for one (method, column)."""

    seed: int | None
    value: float
    version: str
    trial_id: str
    guards: frozenset[str] = frozenset()
    dirty: bool = False
    world: str | None = None
    examples: ExampleScores | None = field(default=None, compare=False)


_INIT_SECTIONS: dict[str, Callable[[TrialRecord], Mapping]] = {
    "init.diagnostics": lambda r: r.init_diagnostics,
    "init.counts": lambda r: r.init_counts,
}
"""How each non-``metrics`` source of :data:`leaderboards.spec.SOURCES` is read from a record."""


def _value(record: TrialRecord, column: Column, language: str) -> float | None:
    m = column.metric
    if m.source == "metrics":
        v = ((record.metrics or {}).get(language) or {}).get(m.record_key)
    elif m.source == "stages":
        v = stage_value(record, language, m.record_key)
    else:
        if record.target_language != language:
            return None
        v = _INIT_SECTIONS[m.source](record).get(m.record_key)
    return float(v) if _is_number(v) else None


def stage_value(record: TrialRecord, language: str, key: str) -> Any:
    """``record["stages"][id]["metrics"][language][key]`` of the first of the trial's stages that has it.

    Example:
        >>> r = TrialRecord("t", "ok", config={"stages": [{"id": "lapt"}]},
        ...                 stages={"lapt": {"metrics": {"near": {"source_forgetting": 0.3}}}})
        >>> stage_value(r, "near", "source_forgetting"), stage_value(r, "far", "source_forgetting")
        (0.3, None)
    """
    stages = record.stages or {}
    declared = [s.get("id") for s in record.stage_specs]
    for sid in declared + [k for k in stages if k not in declared]:
        v = (((stages.get(sid) or {}).get("metrics") or {}).get(language) or {}).get(key)
        if v is not None:
            return v
    return None


def _missing_stage_notes(recs: list[TrialRecord], spec: LeaderboardSpec, methods: list[str]) -> list[str]:
    """A note per stage-measurement column whose cells lack records that predate the measurement."""
    notes = []
    for col in spec.columns:
        if col.metric.source != "stages" or col.is_average:
            continue
        lacking = [r for r in recs if r.ok and record_row(r, spec.row_by) in methods and _in_column_task(r, col)
                   and (not spec.required_seeds or r.trial_seed in spec.required_seeds)
                   and stage_value(r, col.language, col.metric.record_key) is None]  # fmt: skip
        if lacking:
            notes.append(f"{col.metric.label}: {len(lacking)} record(s) carry no {col.metric.record_key!r} (written before "
                         "their stages recorded it, or without such a stage); their cells show – or average the rest.")
    return notes


ExampleReader = Callable[[TrialRecord, Column, str], "ExampleScores | None"]
"""Reads a record's per-example results for one column and language (``None``: the record has none)."""


def record_examples(record: TrialRecord, column: Column, language: str) -> ExampleScores | None:
    """A record's per-example statistics for a column (:meth:`harness.run.records.TrialRecord.scores`).

    The default :data:`ExampleReader`: the statistics the runner stored beside the record (read once
    and hash-checked), or those a record built in memory carries. Metrics not read from ``metrics``
    have none.

    Example:
        >>> from leaderboards.spec import MetricSpec
        >>> from harness.examples import ExampleScores
        >>> r = TrialRecord("t", "ok", example_scores={"near": {"accuracy": ExampleScores("mean", np.ones(3))}})
        >>> record_examples(r, Column("xnli", "near", MetricSpec("accuracy")), "near").value()
        1.0
    """
    if column.metric.source != "metrics":
        return None
    return record.scores(language, column.metric.record_key)


def _world(record: TrialRecord) -> str | None:
    world = (record.revisions or {}).get("world")
    fp = world.get("fingerprint") if isinstance(world, Mapping) else None
    return str(fp) if fp else None


def _in_column_task(record: TrialRecord, column: Column) -> bool:
    """Whether a record is of the column's task (and, for a column with a ``task_id``, of that task id)."""
    if record.task_name != column.task:
        return False
    if column.stage_set is not None and record.config_value("stage_set") != column.stage_set:
        return False
    return column.task_id is None or (record.config_value("task.id") or column.task) == column.task_id


def _applies(record: TrialRecord, column: Column, language: str) -> bool:
    """Whether a (failed) record belongs to a cell: same task and target/evaluated language."""
    if not _in_column_task(record, column):
        return False
    return record.target_language == language or language in (record.metrics or {})


def cell_observations(
    records: Iterable[TrialRecord],
    method: str,
    column: Column,
    language: str | None = None,
    row_by: str = "method",
    examples: ExampleReader | None = record_examples,
) -> tuple[list[Observation], int]:
    """Values of ``method`` for one (non-average) column, and the number of failed trials.

    Args:
        records: records already filtered by the spec's ``where``.
        method: the row key: a method id (or what ``row_by`` makes a row, see :func:`record_row`).
        column: the column (its ``language`` is used unless ``language`` is given).
        language: override the language (for average components).
        row_by: the spec's ``row_by``.
        examples: reader of per-example results (``None``: ignore them).

    Returns:
        ``(observations of ok records, failed trial count)``.
    """
    lang = language or column.language
    obs: list[Observation] = []
    failed = 0
    for r in records:
        if record_row(r, row_by) != method or not _in_column_task(r, column):
            continue
        if not r.ok:
            failed += _applies(r, column, lang)
            continue
        v = _value(r, column, lang)
        if v is None:
            continue
        ex = examples(r, column, lang) if examples is not None else None
        obs.append(Observation(r.trial_seed, v, r.version, str(r.trial_id), r.flag_codes,
                               dirty=bool((r.git or {}).get("dirty")), world=_world(r), examples=ex))
    return obs, failed


# --------------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One aggregated cell.

    Attributes:
        mean: mean over seeds (``None`` when there is no value).
        std: sample standard deviation (ddof=1); ``None`` when ``n < 2`` (undefined).
        n: number of values averaged.
        seeds: seeds of those values.
        values: the values (record units, not scaled).
        flags: names from :data:`FLAGS`.
        failed: failed trials belonging to this cell.
        versions: distinct record versions behind the values.
        reference: whether this is a paper number (not measured here).
        guards: codes of the sanity flags of the records behind the values (:mod:`harness.run.sanity`).
        ci: the mean's 95 % CI (:func:`leaderboards.stats.mean_interval`; ``None`` for paper and empty cells).
        examples: per-example results behind the values, one block per language (several for an
            average column) holding each seed's :class:`~harness.examples.ExampleScores`, or ``None``
            (:func:`record_examples`).
        examples_note: why per-example results present in the records were not used (else ``""``).
        dirty: how many of the records behind the values come from a dirty git tree.
        other_world: how many of them lack the table's world fingerprint.
    """

    mean: float | None
    std: float | None = None
    n: int = 0
    seeds: tuple = ()
    values: tuple[float, ...] = ()
    flags: frozenset[str] = frozenset()
    failed: int = 0
    versions: tuple[str, ...] = ()
    reference: bool = False
    guards: tuple[str, ...] = ()
    ci: Interval | None = None
    examples: tuple | None = field(default=None, compare=False, repr=False)
    examples_note: str = ""
    dirty: int = 0
    other_world: int = 0

    @property
    def empty(self) -> bool:
        """No value at all."""
        return self.mean is None


@dataclass(frozen=True)
class Row:
    """One table row.

    Attributes:
        method: method id.
        label: display label.
        cells: column key → cell.
        failed: failed trials of this method in the spec's tasks (any language).
        kind: ``"measured"`` or ``"paper"``.
        source: for paper rows, the citation.
    """

    method: str
    label: str
    cells: Mapping[str, Cell]
    failed: int = 0
    kind: str = "measured"
    source: str = ""


@dataclass(frozen=True)
class Provenance:
    """Where a table's records come from, and which random sources its intervals cover.

    Attributes:
        records: ok records of the spec's tasks and required seeds (the ones behind the cells).
        dirty: how many of them were written from a dirty git tree.
        world: the table's world fingerprint (the most common one; ``None`` when no record has one).
        other_world: how many records lack that fingerprint — none, or another one (``0`` when no
            record has world revisions: a table of real models).
        sources: one sentence saying which random sources vary with the seed (:func:`random_sources`).
    """

    records: int = 0
    dirty: int = 0
    world: str | None = None
    other_world: int = 0
    sources: str = ""


@dataclass(frozen=True)
class Table:
    """An aggregated leaderboard.

    Attributes:
        spec: the spec it was built from.
        columns: the spec's columns.
        rows: measured rows.
        paper_rows: reference rows from the papers (never mixed with measured cells).
        notes: facts about the inputs (ignored records, versions present …).
        n_records: records considered (after the spec's ``where`` filter).
        versions: distinct record versions among them.
        stats: the declared comparisons, bold sets and rank intervals (:func:`leaderboards.stats.analyze`).
        provenance: dirty-tree and world-build counts, and the random sources the CIs cover.
    """

    spec: LeaderboardSpec
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    paper_rows: tuple[Row, ...] = ()
    notes: tuple[str, ...] = ()
    n_records: int = 0
    versions: tuple[str, ...] = field(default=())
    stats: TableStats | None = None
    provenance: Provenance = field(default_factory=Provenance)

    def flags_used(self) -> list[str]:
        """Flag names that occur in the table, in :data:`FLAGS` order."""
        used = {f for row in self.rows for c in row.cells.values() for f in c.flags}
        return [f for f in FLAGS if f in used]

    def guards_used(self) -> list[str]:
        """Sanity-flag codes of the records behind the table's cells, sorted."""
        return sorted({g for row in self.rows for c in row.cells.values() for g in c.guards})


def summarize(values: Iterable[float]) -> tuple[float | None, float | None, int]:
    """Mean, sample std (ddof=1; ``None`` for fewer than two values) and n.

    Example:
        >>> summarize([1.0, 2.0, 3.0])
        (2.0, 1.0, 3)
        >>> summarize([5.0])
        (5.0, None, 1)
    """
    arr = np.asarray(list(values), dtype=np.float64)
    n = int(arr.size)
    if n == 0:
        return None, None, 0
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if n >= 2 else None
    return mean, std, n


def _example_block(obs: list[Observation]) -> tuple[tuple | None, str]:
    """The per-seed statistics of one language's observations (a block of :data:`SeedSample`
    ``examples``), or ``None`` and why not."""
    scores = [o.examples for o in obs]
    if all(x is None for x in scores):
        return None, ""
    if any(x is None for x in scores):
        return None, "only some seeds have per-example results"
    if len({x.n for x in scores}) != 1:
        return None, "per-example results over different numbers of examples"
    if any(abs(x.value() - o.value) > 1e-6 * max(1.0, abs(o.value)) for x, o in zip(scores, obs)):
        return None, "per-example results do not reproduce the metric"
    return tuple(scores), ""


def _other_world(fingerprint: str | None, world: str | None) -> bool:
    """Whether a record's world build is not the table's: no fingerprint, or another one."""
    return fingerprint is None or fingerprint != world


def _provenance_flags(obs: Iterable[Observation], world: str | None, world_table: bool) -> tuple[set[str], int, int]:
    obs = list(obs)
    dirty = sum(o.dirty for o in obs)
    other = sum(_other_world(o.world, world) for o in obs) if world_table else 0
    return {f for f, k in (("dirty", dirty), ("world", other)) if k}, dirty, other


def _single_cell(obs: list[Observation], failed: int, required: tuple[int, ...],
                 world: str | None = None, world_table: bool = False) -> Cell:
    flags: set[str] = set()
    if required:
        obs = [o for o in obs if o.seed in required]
    seeds = [o.seed for o in obs]
    if len(set(seeds)) != len(seeds):
        flags.add("duplicate_seeds")
    if required and not set(required) <= set(seeds):
        flags.add("missing_seeds")
    versions = tuple(sorted({o.version for o in obs}))
    if len(versions) > 1:
        flags.add("mixed_versions")
    if failed:
        flags.add("failed")
    guards = sorted({g for o in obs for g in o.guards})
    flags |= _cell_flags(guards)
    prov, dirty, other = _provenance_flags(obs, world, world_table)
    mean, std, n = summarize(o.value for o in obs)
    block, note = _example_block(obs) if len(set(seeds)) == len(seeds) else (None, "")
    examples = None if block is None else (block,)
    values = tuple(o.value for o in obs)
    return Cell(
        mean=mean,
        std=std,
        n=n,
        seeds=tuple(seeds),
        values=values,
        flags=frozenset(flags | prov),
        failed=failed,
        versions=versions,
        guards=tuple(guards),
        ci=mean_interval(Sample(tuple(seeds), values, examples)) if n else None,
        examples=examples,
        examples_note=note,
        dirty=dirty,
        other_world=other,
    )


def _average_cell(components: list[tuple[list[Observation], int]], required: tuple[int, ...],
                  world: str | None = None, world_table: bool = False) -> Cell:
    """Average over languages per seed, then mean ± std over the seeds that have every language."""
    flags: set[str] = set()
    per_lang: list[dict[Any, list[Observation]]] = []
    versions: set[str] = set()
    guards: set[str] = set()
    failed = 0
    for obs, f in components:
        failed += f
        if required:
            obs = [o for o in obs if o.seed in required]
        by_seed: dict[Any, list[Observation]] = defaultdict(list)
        for o in obs:
            by_seed[o.seed].append(o)
            versions.add(o.version)
            guards |= o.guards
        if any(len(v) > 1 for v in by_seed.values()):
            flags.add("duplicate_seeds")
        per_lang.append(by_seed)
    all_seeds = set().union(*(set(d) for d in per_lang)) if per_lang else set()
    complete = sorted((s for s in all_seeds if all(s in d for d in per_lang)), key=lambda s: (s is None, s))
    if set(complete) != all_seeds or (required and not set(required) <= set(complete)):
        flags.add("missing_seeds")
    if len(versions) > 1:
        flags.add("mixed_versions")
    if failed:
        flags.add("failed")
    flags |= _cell_flags(guards)
    used = [o for d in per_lang for s in complete for o in d[s]]
    prov, dirty, other = _provenance_flags(used, world, world_table)
    values = tuple(float(np.mean([np.mean([o.value for o in d[s]]) for d in per_lang])) for s in complete)
    mean, std, n = summarize(values)
    blocks, notes = [], []
    if "duplicate_seeds" not in flags:
        for d in per_lang:
            block, note = _example_block([d[s][0] for s in complete])
            blocks.append(block)
            notes.append(note)
    examples = tuple(blocks) if blocks and all(b is not None for b in blocks) else None
    note = next((n_ for n_ in notes if n_), "") or ("only some languages have per-example results"
                                                    if examples is None and any(b is not None for b in blocks) else "")
    return Cell(
        mean=mean,
        std=std,
        n=n,
        seeds=tuple(complete),
        values=values,
        flags=frozenset(flags | prov),
        failed=failed,
        versions=tuple(sorted(versions)),
        guards=tuple(sorted(guards)),
        ci=mean_interval(Sample(tuple(complete), values, examples)) if n else None,
        examples=examples,
        examples_note=note,
        dirty=dirty,
        other_world=other,
    )


def _majority_world(recs: list[TrialRecord]) -> tuple[str | None, bool]:
    """The most common world fingerprint among records (ties: the smallest), and whether any record
    has world revisions at all (a table of real models has none and gets no world marks)."""
    world_table = any(isinstance((r.revisions or {}).get("world"), Mapping) for r in recs)
    counts: dict[str, int] = defaultdict(int)
    for r in recs:
        if (fp := _world(r)) is not None:
            counts[fp] += 1
    world = min(counts, key=lambda k: (-counts[k], k)) if counts else None
    return world, world_table


def aggregate(
    records: Iterable[TrialRecord | Mapping], spec: LeaderboardSpec, examples: ExampleReader | None = record_examples
) -> Table:
    """Build the table of a spec from trial records (pure: no I/O).

    Args:
        records: trial records (:class:`~harness.run.records.TrialRecord` values or their JSON mappings).
        spec: the leaderboard spec.
        examples: reader of per-example results (default: arrays inline in the record,
            :func:`record_examples`; ``None``: seeds only).

    Returns:
        The :class:`Table` with its statistics (:attr:`Table.stats`); render it with :mod:`leaderboards.render`.

    Raises:
        leaderboards.spec.SpecError: a declared comparison names a row the records do not have.

    Example:
        >>> from leaderboards.spec import parse_spec
        >>> spec = parse_spec({"name": "t", "version": 1, "experiments": ["x"], "required_seeds": [1, 2],
        ...     "columns": [{"task": "mlm-at-init", "languages": ["near"], "metrics": ["loss"]}]})
        >>> recs = [{"trial_id": f"t{s}", "status": "ok", "seed": s, "config": {"method": {"id": "focus"},
        ...          "task": {"name": "mlm-at-init"}}, "metrics": {"near": {"loss": v}}}
        ...         for s, v in [(1, 6.0), (2, 6.2)]]
        >>> cell = aggregate(recs, spec).rows[0].cells["mlm-at-init/near/loss"]
        >>> round(cell.mean, 2), round(cell.std, 4), cell.n
        (6.1, 0.1414, 2)
    """
    # Stays whole: filter -> rows -> cells -> paper rows -> flags and statistics is the table's definition, read in one place.
    all_records = as_trial_records(records)
    recs = [r for r in all_records if matches_where(r, spec.where)]
    notes: list[str] = []
    if len(recs) != len(all_records):
        notes.append(f"{len(all_records) - len(recs)} record(s) excluded by the spec's filter {dict(spec.where)}.")
    tasks = {c.task for c in spec.columns}
    if spec.required_seeds:
        other = sorted({r.seed for r in recs if r.task_name in tasks and r.seed not in spec.required_seeds}, key=str)
        if other:
            notes.append(f"Records with seeds {other} (outside the required {list(spec.required_seeds)}) are not used.")

    found = sorted({m for r in recs if (m := record_row(r, spec.row_by)) is not None and r.task_name in tasks})
    if spec.rows is not None:
        methods = [r.method for r in spec.rows]
        unlisted = [m for m in found if m not in methods]
        if unlisted:
            notes.append(f"Methods in the records but not in the spec's rows: {', '.join(unlisted)}.")
    else:
        methods = found

    used = [r for r in recs if r.ok and r.task_name in tasks and record_row(r, spec.row_by) in methods
            and (not spec.required_seeds or r.trial_seed in spec.required_seeds)]
    world, world_table = _majority_world(used)

    rows = []
    for method in methods:
        cells: dict[str, Cell] = {}
        for col in spec.columns:
            if col.is_average:
                comps = [cell_observations(recs, method, col, lang, spec.row_by, examples) for lang in col.components]
                cells[col.key] = _average_cell(comps, spec.required_seeds, world, world_table)
            else:
                obs, failed = cell_observations(recs, method, col, row_by=spec.row_by, examples=examples)
                cells[col.key] = _single_cell(obs, failed, spec.required_seeds, world, world_table)
        failed_total = sum(
            1
            for r in recs
            if record_row(r, spec.row_by) == method and not r.ok and r.task_name in tasks
        )
        rows.append(Row(method=method, label=spec.label(method), cells=cells, failed=failed_total))

    paper_rows = []
    for pn in spec.paper:
        for method, display, vals in pn.rows:
            values = dict(vals)
            cells = {
                col.key: Cell(mean=values[col.key], reference=True) if col.key in values else Cell(mean=None, reference=True)
                for col in spec.columns
            }
            paper_rows.append(Row(method=method, label=display, cells=cells, kind="paper", source=pn.citation))

    notes += _missing_stage_notes(recs, spec, methods)
    versions = tuple(sorted({r.version for r in recs}))
    if len(versions) > 1:
        notes.append(f"Records come from several versions: {'; '.join(versions)}.")
    ignored = sorted({c.examples_note for row in rows for c in row.cells.values() if c.examples_note})
    if ignored:
        notes.append(f"Per-example results not used in some cells (CIs over seeds there): {'; '.join(ignored)}.")
    provenance = Provenance(
        records=len(used),
        dirty=sum(bool((r.git or {}).get("dirty")) for r in used),
        world=world,
        other_world=sum(_other_world(_world(r), world) for r in used) if world_table else 0,
        sources=random_sources(used, spec.row_by),
    )
    table = Table(
        spec=spec,
        columns=spec.columns,
        rows=tuple(rows),
        paper_rows=tuple(paper_rows),
        notes=tuple(notes),
        n_records=len(recs),
        versions=versions,
        provenance=provenance,
    )
    return replace(table, stats=analyze(table))


def rounded(value: float, metric: MetricSpec) -> float:
    """The value as displayed (scaled and rounded), for ties in 'best'."""
    return round(value * metric.scale, metric.decimals)


def best_methods(table: Table, column: Column) -> set[str]:
    """Methods whose displayed mean is best in ``column`` (ties at display precision all count).

    Only measured rows compete; paper rows never do. Empty when fewer than two rows have a value.
    """
    cands = {
        row.method: rounded(c.mean, column.metric)
        for row in table.rows
        if (c := row.cells[column.key]).mean is not None and math.isfinite(c.mean)
    }
    if len(cands) < 2:
        return set()
    target = max(cands.values()) if column.metric.direction == "higher" else min(cands.values())
    return {m for m, v in cands.items() if v == target}

