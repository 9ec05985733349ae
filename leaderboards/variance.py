"""How much of a table's seed-to-seed spread comes from source pretraining (findings issue).

Two runs of one experiment: *free*, where each trial seed drives every random source (its own source
model, initialization, training order, evaluation masks), and *held*, the same grid with the source
held at one pretraining seed (``source.pretrain.seed=0``). Per method, the variance over seeds of the
free run is the whole procedure's; the held run's is what remains without source pretraining. With
independent sources, ``Var(free) = Var(source) + Var(rest)``, so the share from source pretraining is
estimated as ``1 - Var(held) / Var(free)`` (clipped to [0, 1]; at n = 5 seeds each variance is itself
uncertain by a factor of ~2–3, so the shares are rough, and a negative raw value — held spread larger
than free — is reported as such before clipping).

    python -m leaderboards.variance --free runs/focus-table4 --held runs/focus-table4-held \\
        --task mlm-at-init --metric loss --language near [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import numpy as np

from harness.errors import TokxferError, UserInputError
from harness.files import write_atomic
from harness.run.records import TrialRecord, as_trial_records

__all__ = ["Decomposition", "decompose", "seed_values", "main"]


@dataclass(frozen=True)
class Decomposition:
    """One method's variance over seeds, free vs held source, and the share from source pretraining."""

    method: str
    n_free: int
    n_held: int
    mean_free: float
    mean_held: float
    var_free: float
    var_held: float
    raw_share: float | None
    """``1 - var_held / var_free`` before clipping (``None`` when the free run has no spread)."""
    source_share: float | None
    """The raw share clipped to [0, 1]."""


def seed_values(records: Iterable[TrialRecord | Mapping], task: str, metric: str, language: str) -> dict[str, dict[int, float]]:
    """``{method: {seed: value}}`` of the successful trials of ``task`` with a finite ``metric``."""
    out: dict[str, dict[int, float]] = {}
    for r in as_trial_records(records):
        if not r.ok or r.task_name != task:
            continue
        value = (r.metrics or {}).get(language, {}).get(metric)
        if value is None or not math.isfinite(float(value)):
            continue
        method = r.method_id
        if r.trial_seed in out.setdefault(method, {}):
            raise UserInputError(f"{method}: two records for seed {r.trial_seed} of task {task!r}; one run per folder")
        out[method][r.trial_seed] = float(value)
    return out


def decompose(free: Mapping[str, Mapping[int, float]], held: Mapping[str, Mapping[int, float]]) -> list[Decomposition]:
    """Per method present in both runs with ≥ 2 seeds each (sample variances, ddof = 1).

    Example:
        >>> d = decompose({"a": {1: 1.0, 2: 3.0, 3: 5.0}}, {"a": {1: 2.0, 2: 3.0, 3: 4.0}})[0]
        >>> d.var_free, d.var_held, d.source_share
        (4.0, 1.0, 0.75)
    """
    out = []
    for method in sorted(set(free) & set(held)):
        a, b = np.array(list(free[method].values())), np.array(list(held[method].values()))
        if len(a) < 2 or len(b) < 2:
            continue
        vf, vh = float(a.var(ddof=1)), float(b.var(ddof=1))
        raw = 1.0 - vh / vf if vf > 0 else None
        share = None if raw is None else min(1.0, max(0.0, raw))
        out.append(Decomposition(method, len(a), len(b), float(a.mean()), float(b.mean()), vf, vh, raw, share))
    return out


def render(rows: list[Decomposition], task: str, metric: str, language: str) -> str:
    """The decomposition as a Markdown table."""
    lines = [f"Variance over seeds of {task} {metric} ({language}): free (every source per seed) vs held source",
             "", "| Method | n free | n held | mean free | mean held | var free | var held | share from source pretraining |",
             "|:---|---:|---:|---:|---:|---:|---:|---:|"]
    for d in rows:
        share = "–" if d.raw_share is None else f"{d.source_share:.2f}" + (f" (raw {d.raw_share:.2f})" if d.raw_share < 0 else "")
        lines.append(f"| {d.method} | {d.n_free} | {d.n_held} | {d.mean_free:.4f} | {d.mean_held:.4f} | "
                     f"{d.var_free:.3g} | {d.var_held:.3g} | {share} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from leaderboards.aggregate import load_records

    p = argparse.ArgumentParser(prog="python -m leaderboards.variance", description=__doc__.split("\n\n")[0])
    p.add_argument("--free", required=True, help="records of the run with every source per seed")
    p.add_argument("--held", required=True, help="records of the same grid with the source held")
    p.add_argument("--task", required=True)
    p.add_argument("--metric", required=True)
    p.add_argument("--language", required=True)
    p.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    try:
        free = seed_values(load_records(args.free), args.task, args.metric, args.language)
        held = seed_values(load_records(args.held), args.task, args.metric, args.language)
    except (TokxferError, FileNotFoundError) as e:  # one line, like the tokxfer command's errors
        print(f"python -m leaderboards.variance: error: {e}", file=sys.stderr)
        return 2
    rows = decompose(free, held)
    if not rows:
        print(f"no method has >= 2 seeds of {args.task} {args.metric} ({args.language}) in both runs", file=sys.stderr)
        return 2
    print(render(rows, args.task, args.metric, args.language))
    if args.json:
        write_atomic(args.json, json.dumps({"task": args.task, "metric": args.metric, "language": args.language,
                                            "free": args.free, "held": args.held,
                                            "rows": [asdict(d) for d in rows]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
