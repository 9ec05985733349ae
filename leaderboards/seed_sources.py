"""Row keys of records and what a table's seeds vary: :func:`record_row` (a record's row under a spec's
``row_by``) and :func:`random_sources` (the footnote saying which random sources a table's CIs cover).

Kept apart from :mod:`leaderboards.aggregate`, which builds the cells and re-exports both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from harness.run.records import TrialRecord, as_trial_records
from leaderboards.spec import ROW_KEY_SEPARATOR

__all__ = ["record_row", "SEED_COMPONENTS", "random_sources"]


def record_row(record: TrialRecord, row_by: str = "method") -> str | None:
    """The row key of a record under a spec's ``row_by`` (see :data:`leaderboards.spec.ROW_BY`).

    Example:
        >>> r = TrialRecord("t", "ok", config={"method": {"id": "focus"}, "encoding": {"id": "xlp"}})
        >>> record_row(r), record_row(r, "encoding"), record_row(r, "method+encoding")
        ('focus', 'xlp', 'focus + xlp')
    """
    method = record.method_id
    if row_by == "method":
        return method
    if row_by == "encoding":
        return record.encoding_id
    return None if method is None else f"{method}{ROW_KEY_SEPARATOR}{record.encoding_id}"



SEED_COMPONENTS = {
    "source": "source pretraining",
    "pretrain": "source pretraining",
    "init": "initialization",
    "lapt": "LAPT",
    "finetune": "fine-tuning",
    "task": "fine-tuning",
    "data": "data order",
}
"""Display names of the per-component seeds a record may carry under ``seeds``."""


def random_sources(records: Iterable[TrialRecord | Mapping], row_by: str = "method") -> str:
    """One sentence: which random sources vary across a table's seeds (what its CIs cover).

    Per cell (row, task, task id, target language), a component seed under ``seeds`` that takes
    several values across the cell's trial seeds varies; one that never does is held fixed. The
    source model counts as pretrained once when no record has a ``source``/``pretrain`` seed and every
    cell's records share one ``revisions.source_model``. With one trial seed per cell nothing is claimed.

    Example:
        >>> recs = [{"trial_id": f"t{s}", "status": "ok", "seed": s, "seeds": {"init": 10 + s},
        ...          "revisions": {"source_model": "src/abc"}, "config": {"method": {"id": "focus"}, "task": {"name": "ner"}}}
        ...         for s in (1, 2, 3)]
        >>> random_sources(recs)
        'The CIs cover the seeds that vary per trial: initialization and, where the pipeline trains, LAPT and fine-tuning (seeded from the trial seed); the source model was pretrained once (one checkpoint for every seed of a row), so its variance is not in them.'
    """
    groups: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in as_trial_records(records):
        if r.ok:
            key = (record_row(r, row_by), r.task_name, r.config_value("task.id"), r.target_language)
            groups[key].append(r)
    if not groups:
        return ""
    if all(len({r.trial_seed for r in g}) < 2 for g in groups.values()):  # one seed: nothing observable
        return "Every cell has one trial seed so far: no CI, and which random sources vary across seeds is not yet observable."
    order = list(SEED_COMPONENTS)
    # a component whose seed is null everywhere is not a random source of these trials (a source model
    # tokxfer did not pretrain)
    keys = sorted({k for g in groups.values() for r in g for k, v in (r.seeds or {}).items() if v is not None},
                  key=lambda k: (order.index(k) if k in order else len(order), k))

    def varies(get: Callable[[TrialRecord], Any]) -> bool:
        return any(len({repr(get(r)) for r in g}) > 1 for g in groups.values() if len({r.trial_seed for r in g}) > 1)

    def spread(k: str) -> tuple[dict, dict]:
        """Per row, the cells (of several trial seeds) where component ``k``'s seed varies, and those where it does not."""
        on: dict = defaultdict(set)
        held: dict = defaultdict(set)
        for key, g in groups.items():
            if len({r.trial_seed for r in g}) > 1:
                row, task, task_id, lang = key
                cell = f"{row} [{task_id or task}{f' {lang}' if lang else ''}]"
                (on if len({repr((r.seeds or {}).get(k)) for r in g}) > 1 else held)[str(row)].add(cell)
        return on, held

    def covered_name(k: str, on: dict, held: dict) -> str:
        # a table mixing protocols (e.g. rows or columns run before sources followed the seed, beside new
        # ones) says which rows, or where a row is mixed which cells, a source covers instead of claiming
        # it for all of them
        label = SEED_COMPONENTS.get(k, k)
        if not any(held.values()):
            return label
        if not set(on) & set(held):  # every row is one protocol: name the rows
            rows = f": {', '.join(sorted(on))}" if len(on) <= 8 else ""
            return f"{label} (only in {len(on)} of {len(set(on) | set(held))} rows{rows}; held fixed in the others)"
        on_cells = sorted(c for cells in on.values() for c in cells)
        n_cells = len(on_cells) + sum(len(c) for c in held.values())
        cells = f": {', '.join(on_cells)}" if len(on_cells) <= 8 else ""
        return f"{label} (only in {len(on_cells)} of {n_cells} cells{cells}; held fixed in the others)"

    spreads = {k: spread(k) for k in keys}
    vary = [k for k in keys if any(spreads[k][0].values())]
    fixed = [k for k in keys if k not in vary]
    names = [covered_name(k, *spreads[k]) for k in vary]
    source_key = next((k for k in ("source", "pretrain") if k in keys), None)
    if source_key is None:
        src_varies = varies(lambda r: (r.revisions or {}).get("source_model"))
        source = ("" if src_varies else
                  "; the source model was pretrained once (one checkpoint for every seed of a row), so its "
                  "variance is not in them")
        if src_varies:
            names.insert(0, "the source model (its checkpoint differs across seeds)")
    else:
        source = ""
    covered = ", ".join(dict.fromkeys(names)) or "no per-component seed"
    trains = "" if {"lapt", "finetune", "task"} & set(vary) else (
        " and, where the pipeline trains, LAPT and fine-tuning (seeded from the trial seed)")
    text = f"The CIs cover the seeds that vary per trial: {covered}{trains}"
    if fixed:
        text += f"; held fixed across seeds: {', '.join(dict.fromkeys(SEED_COMPONENTS.get(k, k) for k in fixed))}"
    return text + source + "."
