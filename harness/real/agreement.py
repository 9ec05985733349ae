"""Does the world predict the real ordering? Kendall's tau between the method orderings of two lanes.

For one metric (say bitext retrieval accuracy), each lane gives every method a mean over its seeds
(each seed's value itself the mean over the lane's languages). :func:`kendall_agreement` compares the
two orderings with Kendall's tau-b (``scipy.stats.kendalltau``) over the methods both lanes ran, with
a percentile bootstrap CI, and lists the *discordant* pairs: methods whose order the world gets
wrong. :func:`agreement_from_records` reads the two lanes' records; ``tokxfer real agreement``
prints the table (and with ``--out`` writes it as a Markdown section for ``leaderboards/tables/``).

The bootstrap is a Multi-Bootstrap (Sellam et al., 2022) when the records carry their per-example
results (:mod:`harness.examples`): each draw resamples every method's seeds *and* each language's
test examples — the same examples for every method of a lane, since they all read the same
sentences — and recomputes each metric from its per-example rows. A method that does not vary
with the seed (mean-of-pieces, VIPI) is then still uncertain by its test set. Without per-example
results only the seeds are resampled.

``original`` (the source tokenizer kept) is left out by default: it is the ceiling of both lanes by
construction (teacher agreement 1), so it would add agreement that says nothing about the world.
Methods whose per-seed values are identical in both lanes (TransInner at init *is* random) are
counted once, under the first name.

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

__all__ = ["kendall_agreement", "lane_scores", "lane_draws", "agreement_from_records", "format_markdown",
           "COMPARABLE", "add_arguments", "command"]

COMPARABLE: tuple[tuple[str, str, str], ...] = (
    ("bitext-retrieval", "accuracy", "bitext acc@1"),
    ("bitext-retrieval", "margin_accuracy", "bitext margin acc@1"),
    ("teacher-agreement", "cosine", "teacher cos"),
    ("teacher-agreement", "nn_accuracy", "teacher NN"),
)
"""The (task, metric, display name) triples both lanes report."""

Draws = Mapping[str, np.ndarray]
"""Method → ``n_seeds x n_boot`` matrix: each seed's value under each bootstrap resample of the test examples."""


def kendall_agreement(world: Mapping[str, Sequence[float]], real: Mapping[str, Sequence[float]], *,
                      n_boot: int = 2000, seed: int = 0, ci: float = 0.95, exclude: Iterable[str] = (),
                      world_draws: Draws | None = None, real_draws: Draws | None = None) -> dict:
    """Kendall's tau-b between the methods' mean scores in two lanes, with a bootstrap CI.

    Args:
        world / real: method → its per-seed values in that lane.
        n_boot: bootstrap resamples.
        seed: seed of the bootstrap's generator (the result is a pure function of the inputs and it).
        ci: coverage of the percentile interval.
        exclude: methods to leave out.
        world_draws / real_draws: per method, its seeds' values under ``n_boot`` resamples of the test
            examples (:func:`lane_draws`); ``None``: the seeds alone are resampled.

    Returns:
        ``{"methods", "n", "tau", "p_value", "ci": [lo, hi], "n_boot_valid", "world_means", "real_means",
        "discordant": [(a, b), …], "resampled": "seeds" | "seeds and examples"}`` (``tau`` NaN when
        fewer than 3 methods or a lane's means are all equal).
    """
    from scipy.stats import kendalltau

    skip = set(exclude)
    methods = sorted(m for m in world if m in real and m not in skip and len(world[m]) and len(real[m]))
    w = [np.asarray(world[m], dtype=np.float64) for m in methods]
    r = [np.asarray(real[m], dtype=np.float64) for m in methods]
    wm = np.array([x.mean() for x in w])
    rm = np.array([x.mean() for x in r])
    examples = world_draws is not None and real_draws is not None
    out: dict = {"methods": methods, "n": len(methods), "world_means": dict(zip(methods, wm.tolist())),
                 "real_means": dict(zip(methods, rm.tolist())),
                 "resampled": "seeds and examples" if examples else "seeds"}
    if len(methods) < 3:
        return {**out, "tau": float("nan"), "p_value": float("nan"), "ci": [float("nan")] * 2, "n_boot_valid": 0,
                "discordant": []}
    res = kendalltau(wm, rm)
    rng = np.random.default_rng(seed)

    def means(values: list[np.ndarray], draws: Draws | None) -> np.ndarray:
        """``n_methods x n_boot`` bootstrap means: seeds resampled per method (and examples, through the draws)."""
        out = np.empty((len(methods), n_boot))
        for i, (m, x) in enumerate(zip(methods, values)):
            idx = rng.integers(0, len(x), (n_boot, len(x)))
            out[i] = x[idx].mean(axis=1) if draws is None else np.asarray(draws[m])[idx, np.arange(n_boot)[:, None]].mean(axis=1)
        return out

    bw, br = means(w, world_draws if examples else None), means(r, real_draws if examples else None)
    taus = [t for t in (kendalltau(bw[:, b], br[:, b]).statistic for b in range(n_boot)) if np.isfinite(t)]
    alpha = (1 - ci) / 2
    lo, hi = (np.quantile(taus, [alpha, 1 - alpha]).tolist() if taus else [float("nan")] * 2)
    discordant = [(a, b) for i, a in enumerate(methods) for j, b in enumerate(methods)
                  if i < j and np.sign(wm[i] - wm[j]) * np.sign(rm[i] - rm[j]) < 0]
    return {**out, "tau": float(res.statistic), "p_value": float(res.pvalue), "ci": [lo, hi], "n_boot_valid": len(taus),
            "discordant": discordant}


def _per_seed_languages(records: Iterable, task: str, metric: str,
                        languages: Sequence[str] | None) -> tuple[dict[str, dict[int, dict[str, object]]], list[str]]:
    """Method → seed → language → record, of ``ok`` records of ``task`` with ``metric``; and the languages used."""
    per: dict[str, dict[int, dict[str, object]]] = {}
    seen: set[str] = set()
    for rec in records:
        rec_json = rec if isinstance(rec, Mapping) else None
        status = rec_json.get("status") if rec_json is not None else rec.status
        config = rec_json["config"] if rec_json is not None else rec.config
        if status != "ok" or config["task"]["name"] != task:
            continue
        metrics = (rec_json.get("metrics") if rec_json is not None else rec.metrics) or {}
        seed = int(rec_json["seed"] if rec_json is not None else rec.seed)
        for lang, m in metrics.items():
            if metric in m and (languages is None or lang in languages):
                per.setdefault(config["method"]["id"], {}).setdefault(seed, {})[lang] = rec
                seen.add(lang)
    return per, sorted(set(languages) if languages is not None else seen)


def _value(rec: object, lang: str, metric: str) -> float:
    metrics = rec["metrics"] if isinstance(rec, Mapping) else rec.metrics
    return float(metrics[lang][metric])


def lane_scores(records: Iterable, task: str, metric: str,
                languages: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Method id → per-seed values of ``metric`` (mean over ``languages``, default every language of the
    lane) from ``ok`` records of ``task`` (JSON mappings or :class:`harness.run.records.TrialRecord`). A seed
    missing a language is left out, never averaged partially."""
    per, want = _per_seed_languages(records, task, metric, languages)
    return {method: [float(np.mean([_value(v[lang], lang, metric) for lang in want])) for _, v in sorted(seeds.items())
                     if set(v) >= set(want)]
            for method, seeds in sorted(per.items())}


def lane_draws(records: Iterable, task: str, metric: str, *, n_boot: int, rng: np.random.Generator,
               languages: Sequence[str] | None = None) -> dict[str, np.ndarray] | None:
    """Method → ``n_seeds x n_boot``: each seed's language mean of ``metric`` recomputed from its per-example
    rows under ``n_boot`` resamples of each language's test examples, the same resamples for every
    method (they read the same sentences); rows follow :func:`lane_scores`'s seeds. ``None`` when a
    record has no per-example rows for the metric, or the methods' test sets differ in size.

    ``records`` are :class:`harness.run.records.TrialRecord` values that know their files
    (:func:`harness.run.records.read_records`).
    """
    per, want = _per_seed_languages(records, task, metric, languages)
    scores: dict[str, list[dict[str, object]]] = {}
    sizes: dict[str, set[int]] = {lang: set() for lang in want}
    for method, seeds in sorted(per.items()):
        rows = []
        for _, v in sorted(seeds.items()):
            if not set(v) >= set(want):
                continue
            ex = {lang: (v[lang].scores(lang, metric) if hasattr(v[lang], "scores") else None) for lang in want}
            if any(e is None for e in ex.values()):
                return None
            for lang, e in ex.items():
                sizes[lang].add(e.n)
            rows.append(ex)
        scores[method] = rows
    if any(len(s) != 1 for s in sizes.values()):
        return None
    weights = {lang: rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot) for lang, (n,) in sizes.items()}
    return {method: np.array([np.mean([ex[lang].resampled(weights[lang]) for lang in want], axis=0) for ex in rows])
            .reshape(len(rows), n_boot) for method, rows in scores.items()}


def _identical(world: Mapping[str, Sequence[float]], real: Mapping[str, Sequence[float]]) -> dict[str, str]:
    """Method → the first method (by name) whose per-seed values it repeats exactly in both lanes."""
    same: dict[str, str] = {}
    names = sorted(m for m in world if m in real)
    for i, a in enumerate(names):
        if a in same:
            continue
        for b in names[i + 1:]:
            if b not in same and list(world[a]) == list(world[b]) and list(real[a]) == list(real[b]):
                same[b] = a
    return same


def agreement_from_records(world_dir: str | Path, real_dir: str | Path, *,
                           comparable: Sequence[tuple[str, str, str]] = COMPARABLE, n_boot: int = 2000, seed: int = 0,
                           exclude: Iterable[str] = ("original",)) -> list[dict]:
    """:func:`kendall_agreement` for every comparable (task, metric), from two directories of records
    (Multi-Bootstrap where the records carry per-example results; duplicates counted once)."""
    from harness.run.records import read_records

    world, real = read_records(world_dir), read_records(real_dir)
    exclude = set(exclude)  # read more than once below (an iterator would be spent after the first metric)
    out = []
    for k, (task, metric, display) in enumerate(comparable):
        w, r = lane_scores(world, task, metric), lane_scores(real, task, metric)
        same = _identical(w, r)
        rng = np.random.default_rng([seed, k])
        wd = lane_draws(world, task, metric, n_boot=n_boot, rng=rng)
        rd = lane_draws(real, task, metric, n_boot=n_boot, rng=rng)
        res = kendall_agreement(w, r, n_boot=n_boot, seed=seed, exclude={*exclude, *same}, world_draws=wd, real_draws=rd)
        # what kendall_agreement could not rank (no seed with every language in one lane, e.g. failed trials):
        # the table names it rather than dropping it silently
        incomplete = sorted({*w, *r} - exclude - set(same) - set(res["methods"]))
        out.append({"task": task, "metric": metric, "display": display, "identical": same, "incomplete": incomplete, **res})
    return out


def _ranks(means: Mapping[str, float]) -> dict[str, int]:
    """1 = highest mean (ties share the better rank)."""
    values = sorted(means.values(), reverse=True)
    return {m: 1 + values.index(v) for m, v in means.items()}


def format_markdown(rows: Sequence[dict], *, world: str, real: str, n_boot: int, excluded: Iterable[str]) -> str:
    """The agreement as a Markdown section: tau per metric with its CI and discordant pairs, then each
    method's rank in both lanes per metric (a section to print under the real lane's table)."""
    same = sorted({f"{b} = {a}" for r in rows for b, a in r["identical"].items()})
    resampled = sorted({r["resampled"] for r in rows})
    incomplete = sorted({m for r in rows for m in r.get("incomplete", ())})
    lines = [
        "### World vs real: does the world predict the real ordering?", "",
        f"Kendall's τ-b between the methods' means (over seeds, each the mean over the lane's languages) on the "
        f"world (`{world}`) and on the real lane (`{real}`); 95 % percentile bootstrap CI over {n_boot} draws that "
        f"resample {' / '.join(resampled)}. Left out: {', '.join(sorted(excluded)) or 'nothing'}"
        + (f"; counted once (identical in both lanes): {', '.join(same)}" if same else "")
        + (f"; not ranked (no seed with a result in every language of one lane, e.g. failed trials): {', '.join(incomplete)}"
           if incomplete else "") + ". "
        "Generated by `tokxfer real agreement`.", "",
        "| metric | methods | τ | 95 % CI | p | pairs the world orders wrongly |",
        "|:---|---:|---:|:---|---:|:---|",
    ]
    for r in rows:
        pairs = ", ".join(f"{a}/{b}" for a, b in r["discordant"]) or "–"
        lines.append(f"| {r['display']} | {r['n']} | {r['tau']:.2f} | [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] | "
                     f"{r['p_value']:.3f} | {pairs} |")
    methods = sorted({m for r in rows for m in r["methods"]})
    ranks = [(_ranks(r["world_means"]), _ranks(r["real_means"])) for r in rows]
    lines += ["", "Rank of each method (1 = best) on the world → on the real lane:", "",
              "| Method | " + " | ".join(r["display"] for r in rows) + " |",
              "|:---|" + "---:|" * len(rows)]
    for m in methods:
        cells = [f"{w[m]} → {rl[m]}" if m in w else "–" for w, rl in ranks]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer real agreement --world DIR --real DIR [--out FILE]``."""
    sp.add_argument("--world", required=True, metavar="DIR", help="records of the world lane (e.g. runs/real-small-world/records)")
    sp.add_argument("--real", required=True, metavar="DIR", help="records of the real lane (e.g. runs/real-small/records)")
    sp.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    sp.add_argument("--include-original", action="store_true", help="keep `original` (the ceiling of both lanes)")
    sp.add_argument("--out", default=None, metavar="FILE",
                    help="also write the table as Markdown (e.g. leaderboards/tables/real-small.agreement.md)")


def command(args: argparse.Namespace) -> int:
    """Print the world-vs-real agreement table (and write it as Markdown with ``--out``)."""
    from harness.errors import UserInputError

    for flag, d in (("--world", args.world), ("--real", args.real)):
        if not Path(d).is_dir():
            raise UserInputError(f"{flag} {d}: not a directory of records (e.g. runs/real-small/records)")
    if args.n_boot < 1:
        raise UserInputError(f"--n-boot must be >= 1, got {args.n_boot}")
    excluded = () if args.include_original else ("original",)
    rows = agreement_from_records(args.world, args.real, n_boot=args.n_boot, exclude=excluded)
    print(f"{'task':<18} {'metric':<16} {'methods':>7} {'tau':>6}  95% CI ({rows[0]['resampled'] if rows else 'seeds'})"
          "  discordant pairs (world order wrong)")
    for r in rows:
        pairs = ", ".join(f"{a}/{b}" for a, b in r["discordant"]) or "-"
        print(f"{r['task']:<18} {r['metric']:<16} {r['n']:>7} {r['tau']:>6.2f}  [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
              f"{'':<14}{pairs}")
    if args.out:
        from harness.files import write_atomic

        write_atomic(Path(args.out), format_markdown(rows, world=args.world, real=args.real, n_boot=args.n_boot,
                                                     excluded=excluded))
        print(f"wrote {args.out}")
    return 0
