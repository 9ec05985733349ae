"""A leaderboard's rows printed while its grid runs (``tokxfer quickstart``).

A method's row is printed once every trial of it has a record, in the order the experiment lists
the methods (a row waits for the rows above it), so that what is printed is the same run to run,
whatever the number of workers and whichever trial finishes first. The grid runs the trials method
by method (:func:`method_order`), so the rows come one after another. A live row carries no bold
marks and no comparisons: those compare rows, and the full table printed at the end has them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.run import records

__all__ = ["LiveRows", "method_order"]


def method_order(specs: Sequence) -> Callable:
    """A sort key (for :func:`harness.run.experiment.run_experiment`'s ``order``): trials method by
    method, in the order the experiment lists the methods; the grid's order within a method."""
    rank: dict[str, int] = {}
    for s in specs:
        rank.setdefault(s.method.id, len(rank))
    return lambda spec: rank[spec.method.id]


class LiveRows:
    """Print each row of a leaderboard spec as soon as its trials have records.

    Args:
        spec_path: the leaderboard spec (its columns, display names and number formats are used).
        specs: the experiment's trials (every one, also those a resumed run skips).
        records_dir: where their records land.
        emit: prints one line (e.g. ``console.print``).

    Call the object with each record the grid writes (it is the grid's ``on_trial`` hook), and with no
    record before and after the grid, when no trial runs: then every record on disk counts (rows whose
    records already exist are printed at the first call). While the grid runs only the records it
    handed over count: a record another worker is still writing (its per-example results) does not.
    """

    def __init__(self, spec_path: str | Path, specs: Sequence, records_dir: Path, emit: Callable[[str], None]):
        from leaderboards.spec import load_spec

        spec = load_spec(spec_path)
        # a row alone: no comparisons (they need the baseline's row), no paper numbers
        self.spec = dataclasses.replace(spec, comparisons=(), against=None, paper=())
        self.rows: dict[str, list[str]] = {}
        for s in specs:
            self.rows.setdefault(s.method.id, []).append(s.trial_id)
        self.order = list(self.rows)
        self.records_dir = Path(records_dir)
        self.emit = emit
        self.done: set[str] = set()
        self.shown = 0
        self.header = False

    def __call__(self, record=None) -> None:
        from leaderboards.aggregate import aggregate
        from leaderboards.render import markdown_header, markdown_row

        if record is not None:
            self.done.add(str(record.trial_id))
        else:
            self.done |= {tid for tids in self.rows.values() for tid in tids
                          if (self.records_dir / f"{tid}.json").is_file()}
        while self.shown < len(self.order):
            method = self.order[self.shown]
            if not self.done.issuperset(self.rows[method]):
                return
            # in the order the full table reads them (records.iter_record_files: by file name): a cell's
            # Multi-Bootstrap draws its resamples seed block by seed block, so the order is part of its interval
            paths = sorted(self.records_dir / f"{tid}.json" for tid in self.rows[method])
            table = aggregate([records.read_record(p) for p in paths], self.spec)
            if not self.header:
                for line in markdown_header(table):
                    self.emit(line)
                self.header = True
            for row in table.rows:
                self.emit(markdown_row(table, row))
            self.shown += 1
