"""A leaderboard's rows printed while its grid runs (``tokxfer quickstart``).

A method's row is printed once every trial of it has a record, in the order the experiment lists
the methods (a row waits for the rows above it), so that what is printed is the same run to run,
whatever the number of workers and whichever trial finishes first. The grid runs the methods in
waves of as many methods as workers (:func:`method_order`), so the rows come a wave at a time. A
live row carries no bold marks and no comparisons: those compare rows, and the full table printed at
the end has them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.run import records

__all__ = ["LiveRows", "method_order"]


def method_order(specs: Sequence, workers: int = 1) -> Callable:
    """A sort key (for :func:`harness.run.experiment.run_experiment`'s ``order``): the methods in waves
    of ``workers`` methods (the last wave takes the methods left over, so none runs alone beside
    itself), in the order the experiment lists them; within a wave seed by seed, target by target,
    task by task, the wave's methods taking turns.

    Why turns: a method's first trial on a target may train what its other seeds then read from the
    cache (a fastText model whose seed the config holds: FOCUS's ``aux_seed``, WECHSEL's
    ``fasttext_seed``). Handed out back to back, two workers would start that training at once and
    both do it; with the wave's methods alternating, the trials running side by side are of different
    methods, and a method's next seed usually starts after its first one has filled the cache. With
    one worker the waves are single methods: method by method, so the rows still come one after
    another. The same holds for the tasks of one initialization (real-small: bitext retrieval and
    teacher agreement read one cached init and the student's cached embeddings): task by task with the
    methods alternating, the second task of an init starts after the first has filled the cache,
    instead of its worker waiting on the other's build lock (and where methods' costs differ so much that
    it would, the worker pool passes over it: :func:`harness.run.executors.next_spec`). The order changes no number (each trial
    is seeded on its own), only when rows print.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> specs = [NS(method=NS(id=m), target=NS(language=t), seed=s)
        ...          for m in ("a", "b") for t in ("x", "y") for s in (1, 2)]
        >>> [(s.method.id, s.target.language, s.seed) for s in sorted(specs, key=method_order(specs, 2))][:4]
        [('a', 'x', 1), ('b', 'x', 1), ('a', 'y', 1), ('b', 'y', 1)]
        >>> specs = [NS(method=NS(id=m), target=NS(language="x"), task=NS(id=t), seed=1) for m in "ab" for t in "PQ"]
        >>> [(s.method.id, s.task.id) for s in sorted(specs, key=method_order(specs, 2))]
        [('a', 'P'), ('b', 'P'), ('a', 'Q'), ('b', 'Q')]
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"method_order: workers must be a positive int, got {workers!r}")
    rank: dict[str, int] = {}
    seeds: dict[int, int] = {}
    targets: dict[str, int] = {}
    tasks: dict[str | None, int] = {}
    for s in specs:
        rank.setdefault(s.method.id, len(rank))
        seeds.setdefault(s.seed, len(seeds))
        targets.setdefault(s.target.language, len(targets))
        tasks.setdefault(_task_id(s), len(tasks))

    last = max(1, len(rank) // workers) - 1  # a last wave short of methods joins the one before it

    def key(spec) -> tuple[int, int, int, int, int]:
        r = rank[spec.method.id]
        return min(r // workers, last), seeds[spec.seed], targets[spec.target.language], tasks[_task_id(spec)], r

    return key


def _task_id(spec) -> str | None:
    task = getattr(spec, "task", None)
    return None if task is None else task.id


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
