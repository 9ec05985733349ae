"""The statistics behind every leaderboard number: cell CIs, declared comparisons, Holm, ranks, MDE.

One module, built on ``scipy.stats`` and ``statsmodels``; the leaderboards, ``tokxfer compare`` and
``tokxfer check-regression --mode statistical`` all call it. The unit of replication is the *trial
seed*: seed ``s`` of row A and seed ``s`` of row B share every random choice the harness derives
from ``s`` outside the method, so rows are compared **paired by seed** (and by example where records
carry per-example results).

Which test, and why (the default, ``test: t``):

* **Paired t-test over seed-level differences** (:func:`scipy.stats.ttest_rel`, df = n − 1). The
  whole replication (one seed through init, LAPT, fine-tuning) is the unit, so n is the number of
  seeds, not of examples. It is exact under normal differences and its p-value is continuous, so
  it can reject at any n ≥ 2 (the specs ask for n ≥ 3 so that the spread has 2 degrees of freedom).
* **Not the exact sign-flip permutation test**, although it is available (``test: permutation``,
  :func:`scipy.stats.permutation_test`): over n seeds it has 2ⁿ sign patterns, so its smallest
  two-sided p is 2/2ⁿ — 0.25 at n = 3, 0.0625 at n = 5. It can never reject at α = 0.05 with
  five seeds, let alone after Holm. A spec asking for it with too few seeds is refused at load
  (:func:`min_achievable_p`).
* **Not a percentile bootstrap over seeds** for CIs: with 3 seeds there are 10 distinct resamples,
  the resampled means never leave the observed range, and the bootstrap variance is (n−1)/n of the
  plug-in one. Measured here on normal data: a nominal 95 % percentile interval over 3 seeds covers
  the mean ≈ 76 % of the time; the t-interval 95 % (``tests/leaderboards/test_stats.py`` asserts both).
* **With per-example results** (per seed, the statistics behind its metric on each test example:
  0/1 for an accuracy, per-sentence entity counts for an F1, segment statistics for a corpus BLEU —
  :class:`harness.examples.ExampleScores`; the same examples in the same order for every trial of a
  column), the test set is a second random source.
  The **Multi-Bootstrap** (Sellam et al., ICLR 2022) resamples seeds and examples jointly, each
  resample recomputing every seed's metric from its drawn examples exactly as the task defines it; at
  n = 3–5 seeds its seed share has the same too-narrow problem, so its example resamples are used for
  the *example* share of the variance only — the covariance between two seeds' resampled metrics,
  what a test set drawn again moves in every seed (:func:`example_share`) — the seed share being the
  t-test's s²/n, with Welch–Satterthwaite degrees of freedom between the two (1 at n = 2, and a seed
  share below the seeds' own example noise buys none; :func:`seeds_by_examples_se`). Without example-level
  variation this is exactly the paired t-test; with it, the interval widens to cover a test set
  drawn again. A t-test over seeds alone is anti-conservative then (it treats the test set as
  fixed): the simulation tests measure both.

Multiplicity: every declared comparison of a table (pairs × columns) is one family, adjusted with
Holm (:func:`holm`: statsmodels' ``multipletests(method="holm")`` numbers, checked against it in the
tests, without its per-call ``gc.collect()``). The reported 95 % CIs of differences are
unadjusted; the verdict uses the Holm-adjusted p. The minimum detectable effect (MDE) of a
comparison is the difference the paired t-test detects with 80 % power at the Bonferroni level
α/m (the strictest Holm step, so the MDE holds whatever the other comparisons do), for the table's
n and the comparison's observed spread: ``MDE = d* × sd(differences)`` with d* from
:class:`statsmodels.stats.power.TTestPower`; a Multi-Bootstrap comparison's MDE is solved at its own
Welch–Satterthwaite df on its SE (:func:`minimum_detectable_effect`), so the MDE and the p always
come from the same test. ("No detectable difference" then reads "no difference
larger than the MDE".) statsmodels' two-sided ``solve_power`` silently returns wrong sizes at small n
and α (scipy's non-central t returns NaN in the far tail it adds; e.g. d* = 5.5 instead of 14.6 at
n = 3, α = 0.0025), so the MDE is solved one-sided at α/2 — the same power up to that negligible
opposite tail.

Probability of improvement P(A > B) (Agarwal et al., NeurIPS 2021; rliable): the mean over all
seed pairs (i, j) of 1[a_i > b_j] + ½·1[a_i = b_j], in the metric's better direction — the
Mann-Whitney U of A over B divided by n_A·n_B (:func:`scipy.stats.mannwhitneyu`) — with a
percentile bootstrap CI that resamples each side's seeds (rliable's stratified bootstrap). With
n ≤ 5 that CI is coarse (3 × 3 seed pairs give 19 possible values); it is descriptive, never a verdict.

Ranks: each row's rank by mean (1 = best), and a 95 % rank interval from the pairwise paired tests
of the column, Holm-adjusted over all its pairs: the lower end is 1 + the number of rows
significantly better, the upper end k − the number significantly worse (the confidence set for
ranks of Mogstad, Romano, Shaikh & Wilhelm, 2024, with a Holm step-down). Not a bootstrap over seeds:
at n = 3 that puts the rank intervals as far too narrow as the percentile CI above.

Bold: every row not significantly worse than the best mean (paired tests against the best row,
Holm-adjusted over those k − 1 comparisons), not only the best mean.

Randomness: every resampling draws from an explicit :class:`numpy.random.Generator`, by default
``default_rng(SEED)``, so a table renders to the same bytes every time.

Example:
    >>> d = paired_difference(Sample((1, 2, 3), (0.71, 0.74, 0.70)), Sample((1, 2, 3), (0.66, 0.70, 0.67)))
    >>> round(d.diff, 4), round(d.p, 4), d.test
    (0.04, 0.0202, 'paired t')
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from leaderboards.intervals import (
    ALPHA,
    CONFIDENCE,
    N_RESAMPLES,
    POWER,
    SEED,
    TESTS,
    Interval,
    Sample,
    SeedSample,
    _Difference,
    _no_spread,
    _rng,
    _t_from_se,
    _usable_examples,
    example_share,
    mean_interval,
    multi_bootstrap_se,
    seeds_by_examples_se,
)

# statsmodels (power) is imported where it is used: a spec load (which reads TESTS / min_achievable_p)
# and every CLI error path import this module, and statsmodels takes seconds to import.

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "POWER",
    "TESTS",
    "SEED",
    "SeedSample",
    "Sample",
    "Interval",
    "Difference",
    "mean_interval",
    "example_share",
    "multi_bootstrap_se",
    "seeds_by_examples_se",
    "paired_t",
    "paired_difference",
    "probability_of_improvement",
    "holm",
    "min_achievable_p",
    "minimum_detectable_effect",
    "RankInterval",
    "rank_intervals",
    "not_worse_than_best",
    "regression_test",
    "BETTER",
    "WORSE",
    "NO_DIFFERENCE",
    "UNTESTABLE",
    "Verdict",
    "TableStats",
    "analyze",
]



# --------------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------------


def paired_t(a: np.ndarray, b: np.ndarray, confidence: float = CONFIDENCE) -> dict[str, np.ndarray]:
    """Vectorized paired t-test of ``a`` vs ``b`` along the last axis (``scipy.stats.ttest_rel``).

    Args:
        a / b: arrays of the same shape ``(..., n)``; the last axis is the seed, paired.
        confidence: level of the CI of the mean difference.

    Returns:
        ``{"diff", "low", "high", "p", "sd"}``, each of shape ``a.shape[:-1]``: mean difference a − b,
        its CI, the two-sided p, and the sample std of the differences.

    Example:
        >>> r = paired_t(np.array([0.71, 0.74, 0.70]), np.array([0.66, 0.70, 0.67]))
        >>> round(float(r["p"]), 4)
        0.0202
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    res = stats.ttest_rel(a, b, axis=-1)
    ci = res.confidence_interval(confidence)
    d = a - b
    return {"diff": d.mean(axis=-1), "low": np.asarray(ci.low), "high": np.asarray(ci.high),
            "p": np.asarray(res.pvalue), "sd": d.std(axis=-1, ddof=1)}


def _sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided sign-flip permutation p of the mean of paired differences."""
    res = stats.permutation_test(
        (d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples", vectorized=True,
        n_resamples=np.inf, alternative="two-sided",
    )
    return float(res.pvalue)


def min_achievable_p(n: int, test: str = "t") -> float:
    """The smallest two-sided p a test can give with n paired seeds.

    ``t``: 0 (the statistic is continuous). ``permutation``: 2/2ⁿ, the exact sign-flip test's
    floor (one sign pattern and its mirror out of 2ⁿ).

    Example:
        >>> min_achievable_p(5, "permutation"), min_achievable_p(5)
        (0.0625, 0.0)
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; known: {', '.join(TESTS)}")
    return 0.0 if test == "t" else min(1.0, 2.0 / 2.0**n)


@dataclass(frozen=True)
class Difference:
    """One paired comparison A vs B in one column.

    Attributes:
        diff: mean(A) − mean(B) over the paired seeds, record units (``None``: a side is empty).
        low / high: its 95 % CI (unadjusted; ``None`` when undefined).
        p: two-sided p of the test (``None`` when untestable, see ``note``).
        n: number of paired seeds.
        test: ``paired t``, ``sign-flip permutation`` or ``Multi-Bootstrap t`` (``""`` if none).
        sd: standard deviation of the seed-level differences (for Multi-Bootstrap: the effective
            one, SE × √n), the spread the MDE is computed from.
        improvement: P(A better than B) with its CI (``None`` when a side has no values).
        note: why there is no test, if there is none.
        df: the test's degrees of freedom when they are not n − 1 (Multi-Bootstrap t:
            Welch–Satterthwaite between the seed and example shares); ``None``: n − 1. The MDE is
            solved at these df, so it belongs to the test that gave ``p``.
    """

    diff: float | None
    low: float | None
    high: float | None
    p: float | None
    n: int
    test: str
    sd: float | None
    improvement: Interval | None = None
    note: str = ""
    df: float | None = None


def _pairs(a: SeedSample, b: SeedSample) -> tuple[list[int], list[int], str]:
    """Indices of the shared seeds in ``a`` and ``b`` (each seed once on each side), or a reason."""
    if len(set(a.seeds)) != len(a.seeds) or len(set(b.seeds)) != len(b.seeds):
        return [], [], "several records per seed: no pairing"
    pos_b = {s: i for i, s in enumerate(b.seeds)}
    ia = [i for i, s in enumerate(a.seeds) if s in pos_b]
    ib = [pos_b[a.seeds[i]] for i in ia]
    return ia, ib, "" if len(ia) >= 2 else f"{len(ia)} shared seed(s): nothing to pair"


def paired_difference(
    a: SeedSample,
    b: SeedSample,
    higher_is_better: bool = True,
    test: str = "t",
    confidence: float = CONFIDENCE,
    with_improvement: bool = True,
    rng: np.random.Generator | None = None,
    n_resamples: int = N_RESAMPLES,
) -> Difference:
    """Compare A with B, paired by seed (and by example when both carry per-example results).

    Args:
        a / b: the two cells.
        higher_is_better: the metric's direction (for P(A > B)).
        test: ``t`` (paired t over seeds, default) or ``permutation`` (exact sign flips).
        confidence: CI level.
        with_improvement: also compute P(A > B) and its bootstrap CI.
        rng: generator for the bootstraps.
        n_resamples: bootstrap resamples (Multi-Bootstrap and P(A > B)).

    Returns:
        The :class:`Difference`. Zero spread in the differences (a constant offset, e.g. two methods
        that do not depend on the seed) gives the t-test's limit: ``p`` 0 and a zero-width CI (1 and
        0 when the difference itself is 0); the footnote says the intervals cover the seeds only.

    Example:
        >>> d = paired_difference(Sample((1, 2, 3), (6.1, 6.3, 6.15)), Sample((1, 2, 3), (8.21, 8.25, 8.19)),
        ...                       higher_is_better=False)
        >>> d.diff < 0 and d.p < 0.01, d.improvement.estimate
        (True, 1.0)
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; known: {', '.join(TESTS)}")
    if not a.values or not b.values:
        return Difference(None, None, None, None, 0, "", None, note="a side has no values")
    improvement = (
        probability_of_improvement(a.values, b.values, higher_is_better, confidence, n_resamples, rng)
        if with_improvement else None
    )
    ia, ib, why = _pairs(a, b)
    if why and len(ia) < 2:
        diff = float(np.mean(a.values) - np.mean(b.values))
        return Difference(diff, None, None, None, len(ia), "", None, improvement, why)
    x = np.asarray(a.values, dtype=np.float64)[ia]
    y = np.asarray(b.values, dtype=np.float64)[ib]
    d = x - y
    n = len(d)
    diff = float(d.mean())
    ea, eb = _usable_examples(a), _usable_examples(b)
    if ea is not None and eb is not None and [e[0].n for e in ea] == [e[0].n for e in eb]:
        blocks = [tuple(_Difference(xa[i], xb[j]) for i, j in zip(ia, ib)) for xa, xb in zip(ea, eb)]
        se, df = seeds_by_examples_se(blocks, n_resamples, rng)
        if se > 0:
            low, high, p = _t_from_se(diff, se, df, confidence)
            return Difference(diff, low, high, p, n, "Multi-Bootstrap t", se * math.sqrt(n), improvement, df=df)
    if _no_spread(d):
        # The t-test's limit as the spread of the differences goes to 0 (scipy would divide by ~0):
        # the difference does not move with the seed, so no seed noise can explain it.
        name = "paired t" if test == "t" else "sign-flip permutation"
        if diff == 0:
            return Difference(diff, 0.0, 0.0, 1.0, n, name, 0.0, improvement, "identical values")
        p = 0.0 if test == "t" else _sign_flip_p(d)
        return Difference(diff, diff, diff, p, n, name, 0.0, improvement,
                          "the difference is the same for every seed (no seed-to-seed spread)")
    r = paired_t(x, y, confidence)
    p = float(r["p"]) if test == "t" else _sign_flip_p(d)
    return Difference(diff, float(r["low"]), float(r["high"]), p, n,
                      "paired t" if test == "t" else "sign-flip permutation", float(r["sd"]), improvement)


def probability_of_improvement(
    a: Sequence[float],
    b: Sequence[float],
    higher_is_better: bool = True,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    rng: np.random.Generator | None = None,
) -> Interval:
    """P(A better than B) over all seed pairs (Agarwal et al., 2021), with a bootstrap CI.

    ``mannwhitneyu(a, b).statistic / (n_a n_b)`` counts pairs with a > b plus half the ties; for
    lower-is-better metrics the values are negated first. The CI resamples each side's seeds
    independently (``scipy.stats.bootstrap``, percentile, as rliable's stratified bootstrap).

    Example:
        >>> p = probability_of_improvement([3.0, 4.0, 5.0], [1.0, 2.0, 4.0])
        >>> round(p.estimate, 4)
        0.8333
    """
    x = np.asarray(a, dtype=np.float64) * (1 if higher_is_better else -1)
    y = np.asarray(b, dtype=np.float64) * (1 if higher_is_better else -1)

    def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return stats.mannwhitneyu(x, y, axis=axis).statistic / (x.shape[axis] * y.shape[axis])

    est = float(statistic(x, y))
    if len(x) < 2 or len(y) < 2:
        return Interval(est, None, None, "none (n=1)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples (all pairs one way) are expected at n = 3
        res = stats.bootstrap((x, y), statistic, paired=False, vectorized=True, method="percentile",
                              n_resamples=n_resamples, confidence_level=confidence, rng=_rng(rng))
    ci = res.confidence_interval
    return Interval(est, float(ci.low), float(ci.high), "percentile bootstrap over each side's seeds")


def holm(pvalues: Sequence[float | None], alpha: float = ALPHA) -> list[float | None]:
    """Holm-adjusted p-values (step-down: sort, multiply the i-th smallest by m − i + 1, running max, cap 1).

    The same numbers as ``statsmodels.stats.multitest.multipletests(p, method="holm")[1]``
    (``tests/leaderboards/test_stats.py`` checks it on random inputs with ties); computed here because statsmodels'
    Holm branch calls ``gc.collect()`` on every call — 0.13 s each with this project's heap, and a
    table needs two families per column (bold, ranks) besides its declared comparisons.

    ``None`` entries (untestable comparisons) stay ``None`` and are not part of the family: they
    cannot be rejected, so leaving them out keeps the family-wise error rate at ``alpha``.
    ``alpha`` does not change the adjusted values; it is accepted for symmetry with the callers.

    Example:
        >>> [round(p, 3) for p in holm([0.01, 0.04, 0.03])]
        [0.03, 0.06, 0.06]
        >>> holm([None, 0.02])
        [None, 0.02]
    """
    idx = [i for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    out: list[float | None] = [None] * len(pvalues)
    if idx:
        p = np.array([pvalues[i] for i in idx], dtype=np.float64)
        order = np.argsort(p, kind="stable")
        steps = np.arange(len(p), 0, -1)
        adjusted = np.empty_like(p)
        adjusted[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * steps))
        for i, q in zip(idx, adjusted):
            out[i] = float(q)
    return out


def minimum_detectable_effect(
    sd: float, n: int, alpha: float, power: float = POWER, df: float | None = None
) -> float | None:
    """The difference a two-sided t-test at ``alpha`` detects with ``power``, given n pairs, the
    standard deviation ``sd`` of the paired differences (SE = sd / √n) and the test's ``df``.

    ``df=None`` is the paired t-test (n − 1 df): ``d* = TTestPower().solve_power(nobs=n, alpha=alpha/2,
    power=power, alternative="larger")`` (solved one-sided at α/2: statsmodels' two-sided solve is
    wrong at small n, see the module docstring), and the MDE is ``d* × sd``. Other df (the
    Multi-Bootstrap t's Welch–Satterthwaite df) solve the same non-central t at ``nobs = df + 1``,
    whose non-centrality ``λ* = d* × √(df + 1)`` gives ``MDE = λ* × SE`` — at df = n − 1 exactly the
    paired t's MDE. ``None`` when n < 2 or sd is unknown.

    Example:
        >>> round(minimum_detectable_effect(1.0, 5, 0.05), 3)
        1.682
        >>> round(minimum_detectable_effect(1.0, 5, 0.05, df=4.0), 3)
        1.682
        >>> round(minimum_detectable_effect(1.0, 5, 0.05, df=500.0), 3)  # examples dominate: ~(z + z) × SE
        1.255
    """
    from statsmodels.stats.power import TTestPower

    if sd is None or n < 2 or not math.isfinite(sd):
        return None
    nobs = n if df is None else float(df) + 1.0
    d = TTestPower().solve_power(effect_size=None, nobs=nobs, alpha=alpha / 2, power=power, alternative="larger")
    return float(np.asarray(d).item()) * math.sqrt(nobs) * sd / math.sqrt(n)


# --------------------------------------------------------------------------------------------
# Ranks and the bold set
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankInterval:
    """A row's rank in a column (1 = best; ties share the better rank) and its 95 % rank interval."""

    rank: int
    low: int
    high: int


def _order(samples: Mapping[str, SeedSample], higher_is_better: bool) -> list[str]:
    sign = 1.0 if higher_is_better else -1.0
    return sorted(samples, key=lambda r: (-sign * float(np.mean(samples[r].values)), r))


def _pair_tests(
    samples: Mapping[str, SeedSample], pairs: Sequence[tuple[str, str]], higher_is_better: bool, test: str
) -> list[tuple[float | None, float | None]]:
    """``(mean difference, two-sided p)`` of each pair, as :func:`paired_difference` gives them.

    When every sample has the same distinct seeds and no per-example results (the usual table), the
    paired t-tests of all pairs run as one vectorized :func:`paired_t` call; otherwise pair by pair.
    """
    first = next(iter(samples.values()), None)
    seeds = tuple(first.seeds) if first is not None else ()
    regular = (
        test == "t" and len(seeds) >= 2 and len(set(seeds)) == len(seeds)
        and all(set(x.seeds) == set(seeds) and len(x.seeds) == len(seeds) and _usable_examples(x) is None
                for x in samples.values())
    )
    if not regular or not pairs:
        out = []
        for x, y in pairs:
            d = paired_difference(samples[x], samples[y], higher_is_better, test, with_improvement=False)
            out.append((d.diff, d.p))
        return out
    aligned = {r: np.array([dict(zip(x.seeds, x.values))[s] for s in seeds], dtype=np.float64) for r, x in samples.items()}
    a = np.stack([aligned[x] for x, _ in pairs])
    b = np.stack([aligned[y] for _, y in pairs])
    d = a - b
    flat = np.array([_no_spread(row) for row in d])
    res = paired_t(a[~flat], b[~flat]) if (~flat).any() else None
    out, k = [], 0
    for i, row in enumerate(d):
        diff = float(row.mean())
        if flat[i]:
            out.append((diff, 1.0 if diff == 0 else 0.0))  # as paired_difference: the t-test's limit
        else:
            out.append((diff, float(res["p"][k])))
            k += 1
    return out


def rank_intervals(
    samples: Mapping[str, SeedSample],
    higher_is_better: bool = True,
    alpha: float = 1 - CONFIDENCE,
    test: str = "t",
) -> dict[str, RankInterval]:
    """Ranks by mean and simultaneous rank intervals from all pairwise paired tests (Holm).

    Args:
        samples: row → cell (rows without values are left out by the caller).
        higher_is_better: the metric's direction.
        alpha: 1 − the intervals' joint confidence.
        test: as in :func:`paired_difference`.

    Returns:
        row → :class:`RankInterval`; a row's interval is ``[1 + #rows significantly better,
        k − #rows significantly worse]``.

    Example:
        >>> s = {"a": Sample((1, 2, 3), (1.0, 1.1, 1.2)), "b": Sample((1, 2, 3), (0.1, 0.3, 0.2))}
        >>> rank_intervals(s)["a"]
        RankInterval(rank=1, low=1, high=1)
    """
    rows = _order(samples, higher_is_better)
    sign = 1.0 if higher_is_better else -1.0
    means = {r: sign * float(np.mean(samples[r].values)) for r in rows}
    pairs = [(rows[i], rows[j]) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    tests = _pair_tests(samples, pairs, higher_is_better, test)
    adjusted = holm([p for _, p in tests], alpha)
    better: dict[str, int] = dict.fromkeys(rows, 0)
    worse: dict[str, int] = dict.fromkeys(rows, 0)
    for (x, y), (diff, _), q in zip(pairs, tests, adjusted):
        if q is None or q >= alpha or diff is None or diff == 0:
            continue
        win, lose = (x, y) if sign * diff > 0 else (y, x)
        better[lose] += 1
        worse[win] += 1
    k = len(rows)
    return {
        r: RankInterval(1 + sum(means[o] > means[r] for o in rows), 1 + better[r], k - worse[r]) for r in rows
    }


def not_worse_than_best(
    samples: Mapping[str, SeedSample],
    higher_is_better: bool = True,
    alpha: float = ALPHA,
    test: str = "t",
) -> frozenset[str]:
    """The rows not significantly worse than the best mean (Holm over the k − 1 comparisons with it).

    Example:
        >>> s = {"a": Sample((1, 2, 3), (1.0, 1.1, 1.2)), "b": Sample((1, 2, 3), (0.1, 0.3, 0.2)),
        ...      "c": Sample((1, 2, 3), (1.0, 0.9, 1.3))}
        >>> sorted(not_worse_than_best(s))
        ['a', 'c']
    """
    if not samples:
        return frozenset()
    rows = _order(samples, higher_is_better)
    best, others = rows[0], rows[1:]
    tests = _pair_tests(samples, [(best, r) for r in others], higher_is_better, test)
    adjusted = holm([p for _, p in tests], alpha)
    sign = 1.0 if higher_is_better else -1.0
    worse = {r for r, (diff, _), q in zip(others, tests, adjusted)
             if q is not None and q < alpha and diff is not None and sign * diff > 0}
    return frozenset(rows) - worse


# --------------------------------------------------------------------------------------------
# Regression
# --------------------------------------------------------------------------------------------


def regression_test(
    current: tuple[float, float | None, int],
    golden: tuple[float, float | None, int],
    higher_is_better: bool,
    mde_alpha: float = ALPHA,
) -> dict[str, Any]:
    """One-sided Welch test of fresh seeds against the golden's seeds, from summary statistics.

    ``scipy.stats.ttest_ind_from_stats(equal_var=False)``: unpaired because runs that are not bit
    identical (another device, another library build) share seed numbers but not their noise; from
    (mean, std, n) because that is what a golden file stores. Both directions are tested, so a
    caller can report a significant improvement too.

    Args:
        current / golden: ``(mean, sample std, n)``.
        higher_is_better: the metric's direction.
        mde_alpha: the one-sided level at which the MDE is stated (a caller adjusting over many
            cells passes its Bonferroni level).

    Returns:
        ``{"p_worse", "p_better"}`` (one-sided p-values; ``None`` when the test is undefined: fewer
        than two values on a side or no spread on both) and ``"mde"``: the drop this test detects with
        80 % power at ``mde_alpha`` (``statsmodels`` ``TTestIndPower``, pooled sd), ``None`` if undefined.

    Example:
        >>> r = regression_test((0.60, 0.01, 3), (0.70, 0.01, 3), higher_is_better=True)
        >>> r["p_worse"] < 0.001 < 0.99 < r["p_better"]
        True
    """
    from statsmodels.stats.power import TTestIndPower

    (m1, s1, n1), (m2, s2, n2) = current, golden
    if s1 is None or s2 is None or n1 < 2 or n2 < 2 or (s1 == 0 and s2 == 0):
        return {"p_worse": None, "p_better": None, "mde": None}
    worse_alt = "less" if higher_is_better else "greater"
    better_alt = "greater" if higher_is_better else "less"
    p_worse = stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False, alternative=worse_alt).pvalue
    p_better = stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False, alternative=better_alt).pvalue
    pooled = math.sqrt(((n1 - 1) * s1**2 + (n2 - 1) * s2**2) / (n1 + n2 - 2))
    d = TTestIndPower().solve_power(effect_size=None, nobs1=n1, ratio=n2 / n1, alpha=mde_alpha, power=POWER,
                                    alternative="larger")
    return {"p_worse": float(p_worse), "p_better": float(p_better), "mde": float(np.asarray(d).item()) * pooled}


# --------------------------------------------------------------------------------------------
# A table's declared comparisons, bold sets and ranks
# --------------------------------------------------------------------------------------------

BETTER, WORSE, NO_DIFFERENCE, UNTESTABLE = "better", "worse", "no detectable difference", "untestable"
"""Verdicts of a declared comparison (A vs B): A significantly better / worse after Holm, neither,
or no test possible."""


@dataclass(frozen=True)
class Verdict:
    """The verdict on one declared comparison in one column.

    Attributes:
        a / b: row keys (A vs B; the difference is A − B).
        column: column key.
        difference: the paired comparison.
        p_holm: the Holm-adjusted p over the table's family (``None``: untestable).
        family: how many comparisons the family holds (the testable ones).
        alpha: the family-wise level.
        mde: minimum detectable effect (record units) at 80 % power and level α / family.
        verdict: :data:`BETTER`, :data:`WORSE`, :data:`NO_DIFFERENCE` or :data:`UNTESTABLE`.
    """

    a: str
    b: str
    column: str
    difference: Difference
    p_holm: float | None
    family: int
    alpha: float
    mde: float | None
    verdict: str

    @property
    def significant(self) -> bool:
        """Whether the Holm-adjusted p is below alpha."""
        return self.verdict in (BETTER, WORSE)


@dataclass(frozen=True)
class TableStats:
    """Everything :mod:`leaderboards.render` shows beyond the cells.

    Attributes:
        alpha: family-wise level of the declared comparisons and of bold.
        test: the verdict test.
        verdicts: one per declared pair × column, pairs in declared order, columns in table order.
        bold: column key → rows not significantly worse than the best.
        ranks: column key → row → :class:`RankInterval`.
        mde_alpha: the level the MDEs are stated at (α / family).
    """

    alpha: float
    test: str
    verdicts: tuple[Verdict, ...] = ()
    bold: Mapping[str, frozenset[str]] = field(default_factory=dict)
    ranks: Mapping[str, Mapping[str, RankInterval]] = field(default_factory=dict)
    mde_alpha: float | None = None


def _verdict(diff: Difference, q: float | None, alpha: float, higher_is_better: bool) -> str:
    if q is None or diff.diff is None:
        return UNTESTABLE
    if q >= alpha or diff.diff == 0:
        return NO_DIFFERENCE
    return BETTER if (diff.diff > 0) == higher_is_better else WORSE


def analyze(
    table: Any,
    pairs: Sequence[tuple[str, str]] | None = None,
    alpha: float | None = None,
    test: str | None = None,
    rng_seed: int = SEED,
) -> TableStats:
    """The declared comparisons (Holm over the whole table), bold sets and rank intervals of a table.

    Args:
        table: a :class:`leaderboards.aggregate.Table` (its measured rows' cells are the samples).
        pairs: the comparisons to test (in every column); default: the spec's declared ones
            (:meth:`~leaderboards.spec.LeaderboardSpec.declared_pairs`), each in its declared columns.
        alpha / test: default: the spec's.
        rng_seed: seed of the bootstrap generators (one fresh generator per comparison, so a
            comparison's numbers do not depend on which others the table holds).

    Returns:
        The :class:`TableStats`.

    Raises:
        leaderboards.spec.SpecError: a declared comparison names a row the table does not have.
    """
    spec = table.spec
    alpha = spec.alpha if alpha is None else alpha
    test = spec.test if test is None else test
    rows = {r.method: r for r in table.rows}
    declared = pairs is None
    pairs = spec.declared_pairs(list(rows)) if pairs is None else list(pairs)
    todo = []
    for a, b in pairs:
        only = spec.compared_columns(a, b) if declared else None  # a declared comparison's own columns
        for col in table.columns:
            if not col.metric.compare or (only is not None and col.key not in only):  # shown, not tested
                continue
            ca, cb = rows[a].cells[col.key], rows[b].cells[col.key]
            if ca.mean is None or cb.mean is None:
                continue
            higher = col.metric.direction == "higher"
            d = paired_difference(ca, cb, higher, test, rng=np.random.default_rng(rng_seed))
            todo.append((a, b, col, d, higher))
    adjusted = holm([d.p for *_, d, _ in todo], alpha)
    family = sum(q is not None for q in adjusted)
    mde_alpha = alpha / family if family else None
    verdicts = tuple(
        Verdict(a, b, col.key, d, q, family, alpha,
                minimum_detectable_effect(d.sd, d.n, mde_alpha, df=d.df) if mde_alpha and d.p is not None else None,
                _verdict(d, q, alpha, higher))
        for (a, b, col, d, higher), q in zip(todo, adjusted)
    )
    bold, ranks = {}, {}
    for col in table.columns:
        samples = {m: r.cells[col.key] for m, r in rows.items() if r.cells[col.key].mean is not None
                   and math.isfinite(r.cells[col.key].mean)}
        if len(samples) < 2:
            continue
        higher = col.metric.direction == "higher"
        bold[col.key] = not_worse_than_best(samples, higher, alpha, test)
        ranks[col.key] = rank_intervals(samples, higher, 1 - CONFIDENCE, test)
    return TableStats(alpha, test, verdicts, bold, ranks, mde_alpha)
