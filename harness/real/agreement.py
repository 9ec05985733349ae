"""Does the world predict the real ordering? Kendall's tau between the method orderings of two lanes.

For one metric (say bitext retrieval accuracy), each lane gives every method a mean over its seeds
(each seed's value itself the mean over the lane's languages). :func:`kendall_agreement` compares the
two orderings with Kendall's tau-b (``scipy.stats.kendalltau``) over the methods both lanes ran, and
a percentile bootstrap CI that resamples each method's seeds with replacement in both lanes (the
seed-to-seed spread is the uncertainty of each mean). It also lists the *discordant* pairs: methods
whose order the world gets wrong. :func:`agreement_from_records` reads the two lanes' records;
``tokxfer real agreement`` prints the table.

``original`` (the source tokenizer kept) is left out by default: it is the ceiling of both lanes by
construction (teacher agreement 1), so it would add agreement that says nothing about the world.

Example:
    >>> world = {"a": [1.0, 1.1], "b": [2.0, 2.1], "c": [3.0, 3.2]}
    >>> real = {"a": [0.1, 0.2], "b": [0.5, 0.4], "c": [0.9, 0.8]}
    >>> r = kendall_agreement(world, real, n_boot=200)
    >>> r["tau"], r["discordant"]
    (1.0, [])
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["kendall_agreement", "lane_scores", "agreement_from_records", "COMPARABLE", "add_arguments", "command"]

COMPARABLE: tuple[tuple[str, str], ...] = (
    ("bitext-retrieval", "accuracy"),
    ("bitext-retrieval", "margin_accuracy"),
    ("teacher-agreement", "cosine"),
    ("teacher-agreement", "nn_accuracy"),
)
"""The (task, metric) pairs both lanes report."""


def kendall_agreement(world: Mapping[str, Sequence[float]], real: Mapping[str, Sequence[float]], *,
                      n_boot: int = 2000, seed: int = 0, ci: float = 0.95, exclude: Iterable[str] = ()) -> dict:
    """Kendall's tau-b between the methods' mean scores in two lanes, with a bootstrap CI over seeds.

    Args:
        world / real: method → its per-seed values in that lane.
        n_boot: bootstrap resamples.
        seed: seed of the bootstrap's generator (the result is a pure function of the inputs and it).
        ci: coverage of the percentile interval.
        exclude: methods to leave out.

    Returns:
        ``{"methods", "n", "tau", "p_value", "ci": [lo, hi], "n_boot_valid", "world_means", "real_means",
        "discordant": [(a, b), …]}`` (``tau`` NaN when fewer than 3 methods or a lane's means are all equal).
    """
    from scipy.stats import kendalltau

    skip = set(exclude)
    methods = sorted(m for m in world if m in real and m not in skip and len(world[m]) and len(real[m]))
    w = [np.asarray(world[m], dtype=np.float64) for m in methods]
    r = [np.asarray(real[m], dtype=np.float64) for m in methods]
    wm = np.array([x.mean() for x in w])
    rm = np.array([x.mean() for x in r])
    out: dict = {"methods": methods, "n": len(methods), "world_means": dict(zip(methods, wm.tolist())),
                 "real_means": dict(zip(methods, rm.tolist()))}
    if len(methods) < 3:
        return {**out, "tau": float("nan"), "p_value": float("nan"), "ci": [float("nan")] * 2, "n_boot_valid": 0,
                "discordant": []}
    res = kendalltau(wm, rm)
    rng = np.random.default_rng(seed)
    taus = []
    for _ in range(n_boot):
        bw = np.array([x[rng.integers(0, len(x), len(x))].mean() for x in w])
        br = np.array([x[rng.integers(0, len(x), len(x))].mean() for x in r])
        t = kendalltau(bw, br).statistic
        if np.isfinite(t):
            taus.append(t)
    alpha = (1 - ci) / 2
    lo, hi = (np.quantile(taus, [alpha, 1 - alpha]).tolist() if taus else [float("nan")] * 2)
    discordant = [(a, b) for i, a in enumerate(methods) for j, b in enumerate(methods)
                  if i < j and np.sign(wm[i] - wm[j]) * np.sign(rm[i] - rm[j]) < 0]
    return {**out, "tau": float(res.statistic), "p_value": float(res.pvalue), "ci": [lo, hi], "n_boot_valid": len(taus),
            "discordant": discordant}


def lane_scores(records: Iterable[Mapping], task: str, metric: str,
                languages: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Method id → per-seed values of ``metric`` (mean over ``languages``, default every language of the
    lane) from ``ok`` records of ``task``. A seed missing a language is left out, never averaged partially."""
    per: dict[str, dict[int, dict[str, float]]] = {}
    langs_seen: set[str] = set()
    for rec in records:
        if rec.get("status") != "ok" or rec["config"]["task"]["name"] != task:
            continue
        method = rec["config"]["method"]["id"]
        for lang, m in (rec.get("metrics") or {}).items():
            if metric in m and (languages is None or lang in languages):
                per.setdefault(method, {}).setdefault(int(rec["seed"]), {})[lang] = float(m[metric])
                langs_seen.add(lang)
    want = set(languages) if languages is not None else langs_seen
    return {method: [float(np.mean([v[lang] for lang in sorted(want)])) for _, v in sorted(seeds.items()) if set(v) >= want]
            for method, seeds in sorted(per.items())}


def agreement_from_records(world_dir: str | Path, real_dir: str | Path, *,
                           comparable: Sequence[tuple[str, str]] = COMPARABLE, n_boot: int = 2000, seed: int = 0,
                           exclude: Iterable[str] = ("original",)) -> list[dict]:
    """:func:`kendall_agreement` for every comparable (task, metric), from two directories of records."""
    from harness.run.records import iter_records

    world = list(iter_records(world_dir))
    real = list(iter_records(real_dir))
    out = []
    for task, metric in comparable:
        res = kendall_agreement(lane_scores(world, task, metric), lane_scores(real, task, metric), n_boot=n_boot,
                                seed=seed, exclude=exclude)
        out.append({"task": task, "metric": metric, **res})
    return out


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer real agreement --world DIR --real DIR``."""
    sp.add_argument("--world", required=True, metavar="DIR", help="records of the world lane (e.g. runs/real-small-world/records)")
    sp.add_argument("--real", required=True, metavar="DIR", help="records of the real lane (e.g. runs/real-small/records)")
    sp.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    sp.add_argument("--include-original", action="store_true", help="keep `original` (the ceiling of both lanes)")


def command(args: argparse.Namespace) -> int:
    """Print the world-vs-real agreement table."""
    for d in (args.world, args.real):
        if not Path(d).is_dir():
            raise ValueError(f"{d}: not a directory of records")
    rows = agreement_from_records(args.world, args.real, n_boot=args.n_boot,
                                  exclude=() if args.include_original else ("original",))
    print(f"{'task':<18} {'metric':<16} {'methods':>7} {'tau':>6}  95% CI (seeds bootstrap)  discordant pairs (world order wrong)")
    for r in rows:
        pairs = ", ".join(f"{a}/{b}" for a, b in r["discordant"]) or "-"
        print(f"{r['task']:<18} {r['metric']:<16} {r['n']:>7} {r['tau']:>6.2f}  [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
              f"{'':<14}{pairs}")
    return 0
