"""leaderboards/stats.py: the numbers against scipy/statsmodels, and the tests' error rates by simulation.

The simulations are vectorized over simulated tables and use fixed generators, so they run in seconds
and give the same numbers every time; their Monte-Carlo error is stated where an assertion allows
for it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from leaderboards.stats import (
    RankInterval,
    Sample,
    _pair_tests,
    example_share,
    holm,
    mean_interval,
    min_achievable_p,
    minimum_detectable_effect,
    not_worse_than_best,
    paired_difference,
    paired_t,
    probability_of_improvement,
    rank_intervals,
    regression_test,
    seeds_by_examples_se,
)

ALPHA = 0.05
A = (0.712, 0.745, 0.703, 0.731, 0.722)
B = (0.664, 0.702, 0.671, 0.690, 0.700)
SEEDS = (1, 2, 3, 4, 5)


def _mc_se(p: float, sims: int) -> float:
    """Monte-Carlo standard error of a rate ``p`` estimated from ``sims`` draws."""
    return math.sqrt(p * (1 - p) / sims)


# ---------------------------------------------------------------------------------------------
# Fixed inputs against the libraries
# ---------------------------------------------------------------------------------------------


def test_cell_interval_is_scipys_t_interval():
    ci = mean_interval(Sample(SEEDS, A))
    ref = sps.ttest_1samp(A, 0.0).confidence_interval(0.95)
    assert ci.estimate == pytest.approx(np.mean(A))
    assert (ci.low, ci.high) == pytest.approx((ref.low, ref.high))
    assert ci.method == "t over seeds"
    one = mean_interval(Sample((1,), (0.5,)))
    assert one.low is None and not one.defined
    flat = mean_interval(Sample((1, 2, 3), (2.0, 2.0, 2.0)))
    assert (flat.low, flat.high) == (2.0, 2.0)


def test_paired_difference_is_scipys_paired_t():
    d = paired_difference(Sample(SEEDS, A), Sample(SEEDS, B))
    ref = sps.ttest_rel(A, B)
    ci = ref.confidence_interval(0.95)
    assert d.diff == pytest.approx(np.mean(A) - np.mean(B))
    assert d.p == pytest.approx(ref.pvalue) and (d.low, d.high) == pytest.approx((ci.low, ci.high))
    assert d.sd == pytest.approx(np.std(np.subtract(A, B), ddof=1)) and d.n == 5 and d.test == "paired t"
    # pairing is by seed, not by position
    shuffled = Sample((5, 4, 3, 2, 1), tuple(reversed(B)))
    assert paired_difference(Sample(SEEDS, A), shuffled).p == pytest.approx(ref.pvalue)
    # the vectorized form gives the same numbers along the last axis
    r = paired_t(np.array([A, B]), np.array([B, A]))
    assert r["p"] == pytest.approx([ref.pvalue, ref.pvalue]) and r["diff"][0] == pytest.approx(-r["diff"][1])


def test_sign_flip_permutation_is_scipys_and_has_its_floor():
    d = paired_difference(Sample(SEEDS, A), Sample(SEEDS, B), test="permutation")
    ref = sps.permutation_test((np.subtract(A, B),), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                               permutation_type="samples", n_resamples=np.inf)
    assert d.p == pytest.approx(ref.pvalue) and d.test == "sign-flip permutation"
    # every difference positive is the most extreme pattern: p = 2/2^5, the floor, which is > 0.05
    assert d.p == pytest.approx(min_achievable_p(5, "permutation")) == 0.0625
    assert min_achievable_p(6, "permutation") < ALPHA < min_achievable_p(5, "permutation")
    assert min_achievable_p(3, "t") == 0.0


def test_probability_of_improvement_counts_seed_pairs():
    a, b = [3.0, 4.0, 5.0, 2.0], [1.0, 2.0, 4.0]
    brute = np.mean([1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b])
    p = probability_of_improvement(a, b)
    assert p.estimate == pytest.approx(brute) == pytest.approx(sps.mannwhitneyu(a, b).statistic / 12)
    assert 0 <= p.low <= p.estimate <= p.high <= 1
    # lower is better: A is better where it is smaller
    assert probability_of_improvement(a, b, higher_is_better=False).estimate == pytest.approx(1 - brute)
    # the bootstrap is seeded: the same CI twice
    assert probability_of_improvement(a, b) == p


def test_holm_is_statsmodels_holm():
    # few reference calls: statsmodels' Holm runs gc.collect() on each (the reason stats.holm exists)
    rng = np.random.default_rng(0)
    for m in (1, 2, 7, 20, 60):
        p = rng.uniform(0, 0.2, m)
        p[rng.integers(0, m, m // 3)] = p[0]  # ties
        p[-1] = 0.9  # a large one, capped at 1 when multiplied
        assert holm(list(p)) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert holm([None, 0.01, float("nan"), 0.04]) == pytest.approx([None, 0.02, None, 0.04])
    assert holm([]) == []


def test_mde_has_80_percent_power_by_the_noncentral_t():
    for n, alpha in [(3, 0.05), (3, 0.0025), (5, 0.0025), (10, 0.05), (30, 0.001)]:
        mde = minimum_detectable_effect(2.0, n, alpha)
        d = mde / 2.0
        crit = sps.t.isf(alpha / 2, n - 1)
        power = sps.nct.sf(crit, n - 1, d * math.sqrt(n))  # + the opposite tail, < 1e-6 here
        assert power == pytest.approx(0.8, abs=1e-4), (n, alpha)
    # where statsmodels' two-sided solve works it agrees …
    d10 = TTestPower().solve_power(effect_size=None, nobs=10, alpha=0.05, power=0.8, alternative="two-sided")
    assert minimum_detectable_effect(1.0, 10, 0.05) == pytest.approx(d10, rel=1e-3)
    # … and where it silently fails (n = 3, alpha = 0.0025: 5.5 instead of 14.6) this one does not
    wrong = TTestPower().solve_power(effect_size=None, nobs=3, alpha=0.0025, power=0.8, alternative="two-sided")
    assert minimum_detectable_effect(1.0, 3, 0.0025) > 2 * wrong
    assert minimum_detectable_effect(1.0, 1, 0.05) is None


def test_regression_test_is_welch_from_summary_statistics():
    cur, gold = (0.70, 0.012, 3), (0.72, 0.010, 5)
    r = regression_test(cur, gold, higher_is_better=True)
    ref = sps.ttest_ind_from_stats(*cur, *gold, equal_var=False, alternative="less")
    assert r["p_worse"] == pytest.approx(ref.pvalue) and r["p_worse"] + r["p_better"] == pytest.approx(1.0)
    lower = regression_test(cur, gold, higher_is_better=False)  # a lower loss is better: this is an improvement
    assert lower["p_worse"] == pytest.approx(r["p_better"]) and r["mde"] > 0
    assert regression_test((0.7, None, 1), gold, True)["p_worse"] is None
    assert regression_test((0.7, 0.0, 3), (0.7, 0.0, 3), True)["p_worse"] is None


def test_constant_paired_difference_is_the_t_tests_limit():
    a, b = Sample((1, 2, 3), (1.0, 2.0, 3.0)), Sample((1, 2, 3), (0.5, 1.5, 2.5))
    d = paired_difference(a, b)
    assert d.p == 0.0 and d.sd == 0.0 and (d.low, d.high) == (0.5, 0.5) and "same for every seed" in d.note
    same = paired_difference(a, a)
    assert same.p == 1.0 and same.diff == 0.0


def test_unpaired_or_duplicated_seeds_are_untestable():
    assert paired_difference(Sample((1, 2, 3), A[:3]), Sample((4, 5, 6), B[:3])).p is None
    dup = paired_difference(Sample((1, 1, 2), A[:3]), Sample((1, 2, 3), B[:3]))
    assert dup.p is None and "several records per seed" in dup.note


def test_rank_intervals_and_bold_from_holm_adjusted_pairs():
    s = {
        "a": Sample(SEEDS, (1.0, 1.1, 1.2, 1.05, 1.15)),
        "b": Sample(SEEDS, (1.02, 1.0, 1.25, 1.1, 1.12)),  # indistinguishable from a
        "c": Sample(SEEDS, (0.1, 0.3, 0.2, 0.25, 0.15)),  # clearly worst
    }
    r = rank_intervals(s)
    assert r["c"].rank == 3 and (r["c"].low, r["c"].high) == (3, 3)
    assert {r["a"].rank, r["b"].rank} == {1, 2} and (r["a"].low, r["a"].high) == (r["b"].low, r["b"].high) == (1, 2)
    assert not_worse_than_best(s) == {"a", "b"}
    # lower is better: c is now best and alone
    assert not_worse_than_best(s, higher_is_better=False) == {"c"}
    assert rank_intervals(s, higher_is_better=False)["c"] == RankInterval(1, 1, 1)
    # the vectorized all-pairs path gives what paired_difference gives pair by pair
    pairs = [("a", "b"), ("a", "c"), ("b", "c"), ("c", "c")]
    one_by_one = [(d.diff, d.p) for d in (paired_difference(s[x], s[y], with_improvement=False) for x, y in pairs)]
    assert np.ravel(_pair_tests(s, pairs, True, "t")) == pytest.approx(np.ravel(one_by_one))
    # a row with other seeds is compared pair by pair on the seeds it shares
    irregular = dict(s, d=Sample((1, 2, 3, 4), (0.5, 0.6, 0.55, 0.52)))
    assert rank_intervals(irregular)["d"].rank == 3 and rank_intervals(irregular)["d"].low >= 3


# ---------------------------------------------------------------------------------------------
# Simulation: error rates of the declared-comparison test
# ---------------------------------------------------------------------------------------------


def _tables(rng: np.random.Generator, sims: int, n: int, k: int = 6, c: int = 4, effect: float = 0.0) -> np.ndarray:
    """``sims`` tables of k rows × c columns × n seeds: a seed effect shared by all rows of a column
    (what pairing by seed removes), independent per-trial noise, and ``effect`` added to row 1 in
    column 0 (in units of the per-trial noise sd)."""
    x = rng.normal(0, 2.0, size=(sims, 1, c, n)) + rng.normal(0, 1.0, size=(sims, k, c, n))
    x[:, 1, 0, :] += effect
    return x


def _declared_against_row0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Raw and Holm-adjusted p of every row vs row 0 in every column (``against: row0``)."""
    a = x[:, 1:]
    p = paired_t(a, np.broadcast_to(x[:, :1], a.shape))["p"].reshape(len(x), -1)
    return p, np.array([holm(list(row)) for row in p], dtype=float)


@pytest.mark.parametrize("n", [3, 5])
def test_false_positive_rate_under_no_effect_stays_at_alpha(n):
    sims = 4000
    p, adjusted = _declared_against_row0(_tables(np.random.default_rng(100 + n), sims, n))
    tol = 2.5 * _mc_se(ALPHA, sims)
    # the paired t is exact: each single comparison rejects at rate alpha …
    assert abs((p < ALPHA).mean() - ALPHA) < 2.5 * _mc_se(ALPHA, p.size // 4)
    # … so 20 unadjusted comparisons would claim something in most null tables …
    assert (p < ALPHA).any(axis=1).mean() > 0.5
    # … and Holm keeps the family-wise rate of a whole table at alpha
    fwer = (adjusted < ALPHA).any(axis=1).mean()
    assert fwer <= ALPHA + tol, fwer


def test_a_percentile_bootstrap_over_three_seeds_undercovers_and_the_t_interval_does_not():
    x = np.random.default_rng(7).normal(size=(2000, 3))
    boot = sps.bootstrap((x,), np.mean, axis=-1, vectorized=True, method="percentile", n_resamples=999,
                         rng=np.random.default_rng(8)).confidence_interval
    t = sps.ttest_1samp(x, 0.0, axis=-1).confidence_interval(0.95)
    cover_boot = ((boot.low <= 0) & (0 <= boot.high)).mean()
    cover_t = ((t.low <= 0) & (0 <= t.high)).mean()
    assert cover_boot < 0.85  # about 0.76: why the cells use the t-interval
    assert abs(cover_t - 0.95) < 2.5 * _mc_se(0.95, 2000)
    # and the cell function is that t-interval
    i = mean_interval(Sample((1, 2, 3), tuple(x[0])))
    assert (i.low, i.high) == pytest.approx((t.low[0], t.high[0]))


def test_power_against_a_known_effect_matches_theory():
    sims, n, d = 4000, 5, 1.5
    # the paired differences of row 1 vs row 0 have sd √2 (two unit noises): effect d·√2 is d sds
    p, adjusted = _declared_against_row0(_tables(np.random.default_rng(11), sims, n, effect=d * math.sqrt(2)))
    power = (p[:, 0] < ALPHA).mean()
    theory = TTestPower().power(effect_size=d, nobs=n, alpha=ALPHA, alternative="two-sided")
    assert abs(power - theory) < 2.5 * _mc_se(theory, sims), (power, theory)
    assert 0.6 < power < 0.8  # a sane band: ≈ 0.71
    # inside a table of 20 declared comparisons Holm costs power: ≈ 0.11 at n = 5 …
    holm_power = (adjusted[:, 0] < ALPHA).mean()
    assert 0.05 < holm_power < power / 3
    # … which the MDE states: at alpha/20 the detectable effect is far larger than 1.5 sd
    assert minimum_detectable_effect(1.0, n, ALPHA / 20) > 2 * d


def _seed_example_data(rng, n_s, n_e, seed_sd, example_sd, noise_sd=0.5):
    """A vs B per example over n_s seeds: a shared difficulty, a per-example A-vs-B effect with mean 0
    over the population of examples (a fresh test set per call), per-seed offsets and noise."""
    base = rng.normal(0, 1, n_e)
    a = base + rng.normal(0, example_sd, n_e) + rng.normal(0, seed_sd, (n_s, 1)) + rng.normal(0, noise_sd, (n_s, n_e))
    b = base + rng.normal(0, seed_sd, (n_s, 1)) + rng.normal(0, noise_sd, (n_s, n_e))
    seeds = tuple(range(n_s))
    return Sample(seeds, tuple(a.mean(1)), (a,)), Sample(seeds, tuple(b.mean(1)), (b,))


@pytest.mark.parametrize("seed_sd, example_sd", [(0.02, 0.5), (0.5, 0.0)], ids=["examples-dominate", "seeds-dominate"])
def test_multi_bootstrap_test_keeps_alpha_where_seeds_alone_do_not(seed_sd, example_sd):
    rng = np.random.default_rng(5)
    sims = 300
    mb = seeds_only = 0
    for i in range(sims):
        a, b = _seed_example_data(rng, 5, 60, seed_sd, example_sd)
        d = paired_difference(a, b, with_improvement=False, n_resamples=400, rng=np.random.default_rng(i))
        assert d.test == "Multi-Bootstrap t"
        mb += d.p < ALPHA
        seeds_only += sps.ttest_rel(a.values, b.values).pvalue < ALPHA
    tol = 2.5 * _mc_se(ALPHA, sims)
    assert mb / sims <= ALPHA + tol
    if example_sd > 0:
        # the test set is a random source the seeds do not see: a t over seeds alone rejects too often
        assert seeds_only / sims > ALPHA + tol
    else:
        assert abs(mb - seeds_only) / sims < 0.03  # no example variance: it is the paired t-test


def test_seeds_by_examples_se_reduces_to_the_t_test_without_example_variance():
    seed_values = np.array([0.5, 0.7, 0.55, 0.62, 0.58])
    block = np.repeat(seed_values[:, None], 50, axis=1)  # every example of a seed scores the seed's value
    se, df = seeds_by_examples_se([block], n_resamples=4000)
    assert df == pytest.approx(4.0) and se == pytest.approx(sps.sem(seed_values))
    i = mean_interval(Sample(tuple(range(5)), tuple(seed_values), (block,)))
    ref = sps.ttest_1samp(seed_values, 0).confidence_interval(0.95)
    assert (i.low, i.high) == pytest.approx((ref.low, ref.high)) and "Multi-Bootstrap" in i.method


def test_multi_bootstrap_mde_is_solved_at_the_tests_own_df():
    # the MDE belongs to the test behind p: at the Multi-Bootstrap's Welch-Satterthwaite df, on its SE
    for n, df, alpha in [(2, 1.0, 0.05), (3, 7.4, 0.0025), (5, 4.0, 0.01), (5, 230.0, 0.05 / 6)]:
        sd = 3.0
        mde = minimum_detectable_effect(sd, n, alpha, df=df)
        se = sd / math.sqrt(n)
        power = sps.nct.sf(sps.t.isf(alpha / 2, df), df, mde / se)
        assert power == pytest.approx(0.8, abs=1e-4), (n, df, alpha)
    assert minimum_detectable_effect(3.0, 5, 0.01, df=4.0) == pytest.approx(minimum_detectable_effect(3.0, 5, 0.01))
    # examples dominate: the test has many df, so its MDE is far below the one n - 1 df would claim
    a, b = _seed_example_data(np.random.default_rng(0), 5, 200, 0.02, 0.5)
    d = paired_difference(a, b, with_improvement=False, n_resamples=400, rng=np.random.default_rng(0))
    assert d.test == "Multi-Bootstrap t" and d.df > 20
    alpha = 0.05 / 6
    assert minimum_detectable_effect(d.sd, d.n, alpha, df=d.df) < 0.6 * minimum_detectable_effect(d.sd, d.n, alpha)
    # without examples the comparison is the paired t-test: df stays n - 1 (None)
    t = paired_difference(Sample((1, 2, 3), (1.0, 2.0, 3.5)), Sample((1, 2, 3), (0.5, 1.0, 1.5)), with_improvement=False)
    assert t.test == "paired t" and t.df is None


@pytest.mark.parametrize("seed_sd, example_sd", [(0.0, 0.5), (0.1, 0.3)], ids=["examples-only", "mixed"])
def test_multi_bootstrap_test_has_its_size_at_three_seeds(seed_sd, example_sd):
    # the example share is what every seed shares, not each seed's own noise counted again: the test
    # rejects a true null about alpha of the time (the twice-counted estimate rejected ~1-2 %: no power)
    rng = np.random.default_rng(11)
    sims = 400
    rejected = 0
    for i in range(sims):
        a, b = _seed_example_data(rng, 3, 60, seed_sd, example_sd)
        d = paired_difference(a, b, with_improvement=False, n_resamples=300, rng=np.random.default_rng(i))
        rejected += d.p < ALPHA
    assert 0.025 <= rejected / sims <= ALPHA + 2.5 * _mc_se(ALPHA, sims)


def test_example_share_counts_what_the_seeds_share_and_two_seeds_keep_one_df():
    rng = np.random.default_rng(3)
    common = rng.normal(0, 1, 300)
    x = common + rng.normal(0, 2, (5, 300))  # each seed's own noise is 4x the shared variance
    assert example_share([x], n_resamples=1000) * 300 == pytest.approx(np.var(common, ddof=1), rel=0.25)
    # without a shared part there is (almost) no example share, however noisy each seed is
    assert example_share([rng.normal(0, 2, (5, 300))], n_resamples=1000) * 300 < 0.3
    se, df = seeds_by_examples_se([x[:2]], n_resamples=500)
    assert df == 1.0 and se > 0


def test_a_seed_share_below_the_seeds_own_noise_buys_no_degrees_of_freedom():
    rng = np.random.default_rng(4)
    n, n_ex = 3, 400
    x = rng.normal(0, 0.2, n_ex) + rng.normal(0, 1.0, (n, n_ex))  # each seed's own noise dominates
    x -= x.mean(axis=1, keepdims=True) - x.mean()  # ... yet the seed means agree exactly (by chance, say)
    se, df = seeds_by_examples_se([x], n_resamples=1000)
    own = 1.0 / n_ex  # each seed mean carries its own noise: var 1 / n_ex
    v_ex = se**2  # the seed share is 0, so the SE is the example share alone
    floor_df = (own / n + v_ex) ** 2 / ((own / n) ** 2 / (n - 1) + v_ex**2 / (n_ex - 1))
    assert df < 20 and df == pytest.approx(floor_df, rel=0.2)  # not the ~n_examples a zero seed share would give
