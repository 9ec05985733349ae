"""Intervals of one leaderboard cell: the t-interval over seeds and, where records carry per-example
results, the Multi-Bootstrap (Sellam et al., 2022) over seeds and examples together.

The lower layer of :mod:`leaderboards.stats` (which re-exports every public name here and explains
the choices); also the defaults every statistic shares (α, confidence, power, resampling seed).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from scipy import stats

from harness.cache import ProcessMemo
from harness.examples import ExampleScores

ALPHA = 0.05
"""Default significance level of a table's declared comparisons (family-wise, Holm)."""
CONFIDENCE = 0.95
"""Confidence level of every interval shown."""
POWER = 0.8
"""Power at which the minimum detectable effect is stated."""
TESTS = ("t", "permutation")
"""Verdict tests a spec may name (``test:``): the paired t-test (default) or the exact sign-flip
permutation test over seeds."""
SEED = 0
"""Seed of the default resampling generator (fixed: tables are reproducible bit for bit)."""
N_RESAMPLES = 2000
"""Bootstrap resamples (an SE from 2,000 resamples is within ~1.6 % of its limit)."""
_CHUNK = 256
"""Multi-Bootstrap resamples drawn at once (bounds memory at chunk × examples)."""


class SeedSample(Protocol):
    """What the functions here read from a cell: per-seed values and, optionally, per-example results.

    Attributes:
        seeds: the trial seeds, one per value.
        values: the seed-level metric values (record units).
        examples: ``None``, or one block per language (several for an average column): per seed, in
            ``seeds`` order, the per-example statistics behind the seed's value of that language
            (:class:`harness.examples.ExampleScores`, whose ``value()`` is the metric and
            ``resampled(weights)`` the metric of resampled examples: a mean, a ratio, an F1, a corpus
            BLEU …), the same examples in the same order for every seed. A 2-D array
            ``(len(seeds), n_examples)`` stands for per-example values whose mean is the metric.
    """

    seeds: tuple
    values: tuple[float, ...]
    examples: tuple | None


@dataclass(frozen=True)
class Sample:
    """A plain :class:`SeedSample` (e.g. for tests and ``tokxfer compare``)."""

    seeds: tuple
    values: tuple[float, ...]
    examples: tuple | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval.

    Attributes:
        estimate: the point estimate.
        low / high: the interval (``None`` when undefined, e.g. one seed).
        method: how the interval was made (shown in footnotes and the CSV).
    """

    estimate: float
    low: float | None
    high: float | None
    method: str

    @property
    def defined(self) -> bool:
        """Whether the interval has both ends."""
        return self.low is not None and self.high is not None


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return np.random.default_rng(SEED) if rng is None else rng


def _no_spread(x: np.ndarray) -> bool:
    """All values equal up to float noise (scipy's t-tests would divide by ~0)."""
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.max(np.abs(x)))))


# --------------------------------------------------------------------------------------------
# Per cell
# --------------------------------------------------------------------------------------------


def _block(block: Any) -> tuple:
    """A block as per-seed scorers (``.n``, ``.value()``, ``.resampled(weights)``); a 2-D array's rows
    are per-example values whose mean is the metric."""
    if isinstance(block, np.ndarray):
        return tuple(ExampleScores("mean", row) for row in np.atleast_2d(block))
    return tuple(block)


class _Difference:
    """Per seed, A − B on the same examples: resampled jointly, so the pairing by example is kept."""

    def __init__(self, a: Any, b: Any) -> None:
        if a.n != b.n:
            raise ValueError(f"paired examples: {a.n} examples against {b.n}")
        self.a, self.b, self.n = a, b, a.n

    def value(self) -> float:
        return self.a.value() - self.b.value()

    def resampled(self, weights: np.ndarray, totals: np.ndarray | None = None) -> np.ndarray:
        return self.a.resampled(weights, totals) - self.b.resampled(weights, totals)


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Row-wise multiplicities of the draws ``idx`` (``size x draws`` of values in ``[0, n)``)."""
    size = idx.shape[0]
    flat = (idx + (np.arange(size) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=size * n).reshape(size, n).astype(np.float64)


def multi_bootstrap_se(
    blocks: Sequence[Any], n_resamples: int = N_RESAMPLES, rng: np.random.Generator | None = None
) -> float:
    """Multi-Bootstrap standard error of the statistic over seeds × examples (Sellam et al., 2022).

    Each resample draws n seeds with replacement and, per block, that block's examples with
    replacement (the same draw for every seed: the seeds score the same test set), and evaluates
    ``mean over blocks of (seed-weighted mean of each drawn seed's metric on the drawn examples)``.
    A seed's metric on drawn examples is its reducer of the drawn rows (an accuracy, an entity F1,
    a corpus BLEU …: :meth:`harness.examples.ExampleScores.resampled`), one matrix product per seed.

    Args:
        blocks: per block, the per-seed scorers (:data:`SeedSample` ``examples``), the same seeds and
            number of examples throughout a block; or ``(n_seeds, n_examples)`` arrays of values.
        n_resamples: bootstrap resamples.
        rng: the generator (default ``default_rng(SEED)``).

    Returns:
        The standard deviation (ddof=1) of the resampled statistic.

    Example:
        >>> x = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
        >>> 0.0 < multi_bootstrap_se([x]) < 0.5
        True
    """
    stat = np.empty(n_resamples)
    for start, weights, per_block in _per_seed_draws(blocks, n_resamples, rng, "multi_bootstrap_se", 1)[1]:
        total = np.zeros(len(weights))
        for per_seed in per_block:
            total += (weights * per_seed).sum(axis=1)
        stat[start:start + len(weights)] = total / len(per_block)
    return float(stat.std(ddof=1))


def _per_seed_draws(blocks: Sequence[Any], n_resamples: int, rng: np.random.Generator | None, who: str,
                    min_seeds: int) -> tuple[int, Iterator[tuple[int, np.ndarray, list[np.ndarray]]]]:
    """The number of seeds and, per chunk of resamples (:func:`_resample_draws`), its first index, the seed
    weights and, per block, the ``size x seeds`` metrics of every seed on the chunk's example draws (the
    same draws for every seed).

    Raises:
        ValueError: (naming ``who``) blocks with different seeds or examples, or fewer than ``min_seeds`` seeds.
    """
    rng = _rng(rng)
    blocks = [_block(b) for b in blocks]
    n_s = len(blocks[0])
    if n_s < min_seeds or any(len(b) != n_s or len({ex.n for ex in b}) != 1 for b in blocks):
        least = {1: "", 2: " (at least two)"}.get(min_seeds, f" (at least {min_seeds})")
        raise ValueError(f"{who}: every block must have the same seeds{least}, each with the same examples")
    chunks = zip(range(0, n_resamples, _CHUNK), _resample_draws(rng, n_resamples, n_s, [b[0].n for b in blocks]))
    return n_s, ((start, weights, [np.stack([_resampled(ex, counts, sums, known) for ex in block], axis=1)
                                   for block, (counts, sums, known) in zip(blocks, draws)])
                 for start, (weights, draws) in chunks)


def _resampled(ex: Any, counts: np.ndarray, sums: np.ndarray, known: dict) -> np.ndarray:
    """``ex.resampled(counts)`` (``sums``: the row sums of ``counts``). A cell's seed is compared with many
    others on the same resamples: an :class:`ExampleScores`' values are kept in ``known`` (by the object,
    which it holds) and a difference is taken of its two sides' kept values, the same numbers as computing them."""
    if isinstance(ex, _Difference):
        return _resampled(ex.a, counts, sums, known) - _resampled(ex.b, counts, sums, known)
    if not isinstance(ex, ExampleScores):
        return ex.resampled(counts)
    hit = known.get(id(ex))
    if hit is not None and hit[0] is ex:
        return hit[1]
    value = ex.resampled(counts, sums)
    if len(known) < _KNOWN_MAX:
        known[id(ex)] = (ex, value)
    return value


_KNOWN_MAX = 4096
"""Resampled values kept per draw (beyond this many scorers, for the largest tables, they are computed)."""


_DRAWS_MEMO = ProcessMemo(4)
"""Draws of :func:`_resample_draws` (and the generator state they end in) by the generator's state and the
shapes: a table's comparisons each start a fresh generator with the same seed, so they draw the same
resamples (hundreds of times)."""
_DRAWS_MEMO_MAX_BYTES = 256 << 20
"""Draws larger than this (resamples × examples × 8 bytes) are drawn again on every call instead of kept."""


def _resample_draws(rng: np.random.Generator, n_resamples: int, n_s: int, n_examples: Sequence[int]) -> list:
    """Per chunk of resamples: the seed weights and, per block, the example counts with their row sums (and
    a dict for :func:`_resampled`'s kept values), drawn from ``rng`` in :func:`multi_bootstrap_se`'s order
    (the seeds, then each block's examples).

    A call that starts from a generator state seen before (with the same shapes) gets the same arrays
    without drawing them again, and leaves ``rng`` in the state the draws would have left it in.
    """
    small = n_resamples * (sum(n_examples) + n_s) * 8 <= _DRAWS_MEMO_MAX_BYTES
    key = (repr(rng.bit_generator.state), n_resamples, n_s, tuple(n_examples)) if small else None  # None: not kept
    chunks, end = _DRAWS_MEMO.get(key, lambda: _draw_chunks(rng, n_resamples, n_s, n_examples))
    rng.bit_generator.state = end
    return chunks


def _draw_chunks(rng: np.random.Generator, n_resamples: int, n_s: int, n_examples: Sequence[int]) -> tuple[list, dict]:
    """:func:`_resample_draws`'s arrays drawn from ``rng``, and the generator state they leave."""
    chunks = []
    for start in range(0, n_resamples, _CHUNK):
        size = min(_CHUNK, n_resamples - start)
        weights = _counts(rng.integers(0, n_s, size=(size, n_s)), n_s) / n_s
        draws = []
        for n_e in n_examples:
            counts = _counts(rng.integers(0, n_e, size=(size, n_e)), n_e)
            draws.append((counts, counts.sum(axis=1), {}))
        chunks.append((weights, draws))
    for weights, draws in chunks:
        for a in (weights, *(x for counts, sums, _ in draws for x in (counts, sums))):
            a.flags.writeable = False  # may be shared by later calls: never changed in place
    return chunks, rng.bit_generator.state


def _t_from_se(estimate: float, se: float, df: float, confidence: float) -> tuple[float, float, float]:
    """CI ends and two-sided p of ``estimate`` with standard error ``se`` on ``df`` degrees of freedom."""
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    p = float(2 * stats.t.sf(abs(estimate) / se, df)) if se > 0 else (1.0 if estimate == 0 else 0.0)
    return estimate - half, estimate + half, p


def example_share(blocks: Sequence[Any], n_resamples: int = N_RESAMPLES, rng: np.random.Generator | None = None) -> float:
    """The example share of the variance of a mean over seeds: what drawing the test set again moves in
    every seed at once.

    The examples are resampled as :func:`multi_bootstrap_se` draws them (the same draws, the same
    generator state after; the seed draws are not used), each seed's metric recomputed on every resample
    (averaged over the blocks), and the share is the mean *covariance between two different seeds'*
    resampled metrics, clipped at 0. A seed's own variance over the resamples also holds its
    seed × example noise (which examples that seed's fine-tuning happens to get right), already in the
    seeds' spread: counting it again, as the joint bootstrap's variance minus its seed share did, made a
    pure seed effect look like example variance and gave the Welch–Satterthwaite df too many degrees of
    freedom (up to 13.6 % of true nulls rejected at α = 0.05 at n = 2:
    ``benchmarks/sim_multibootstrap_size.py``). For a mean metric this is σ²(per-example effect) /
    n_examples of the two-way random-effects model.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> common = rng.normal(0, 1, 200)  # the examples' effect, shared by every seed
        >>> x = common + rng.normal(0, 1, (4, 200))  # plus each seed's own noise per example
        >>> 0.7 < example_share([x]) * 200 < 1.3  # ~ Var(common) / 200, the noise left out
        True
    """
    return max(_example_covariances(_resampled_per_seed(blocks, n_resamples, rng))[0], 0.0)


def _resampled_per_seed(blocks: Sequence[Any], n_resamples: int, rng: np.random.Generator | None) -> np.ndarray:
    """``resamples x seeds``: each seed's metric (averaged over the blocks) on the same example resamples."""
    n_s, chunks = _per_seed_draws(blocks, n_resamples, rng, "example_share", 2)
    per_seed = np.empty((n_resamples, n_s))
    for start, weights, per_block in chunks:
        total = np.zeros((len(weights), n_s))
        for block_values in per_block:
            total += block_values
        per_seed[start:start + len(weights)] = total / len(per_block)
    return per_seed


def _example_covariances(per_seed: np.ndarray) -> tuple[float, float]:
    """``(shared, own)`` from resampled per-seed metrics (``resamples x seeds``): the mean covariance between
    two different seeds (the example share, unclipped) and the mean variance of one seed beyond it (its own
    seed × example noise: what its own per-example luck moves in a seed's metric)."""
    n_s = per_seed.shape[1]
    cov = np.cov(per_seed, rowvar=False)
    shared = float((cov.sum() - np.trace(cov)) / (n_s * (n_s - 1)))
    return shared, float(np.trace(cov)) / n_s - shared


def _satterthwaite(v_seed: float, n: int, v_ex: float, n_ex: int) -> float:
    return (v_seed + v_ex) ** 2 / (v_seed**2 / (n - 1) + v_ex**2 / (n_ex - 1))


def seeds_by_examples_se(
    blocks: Sequence[np.ndarray], n_resamples: int = N_RESAMPLES, rng: np.random.Generator | None = None
) -> tuple[float, float]:
    """Standard error and degrees of freedom of the mean over seeds × examples.

    The variance of a mean over n seeds that each score the same drawn test set holds a seed share and
    an example share. The seed share is the t-test's ``s²/n`` of the per-seed statistics (a bootstrap
    over 3–5 seeds is too narrow; the seeds' own seed × example noise is in it). The example share is
    :func:`example_share`: the part of the examples' resampling variance that every seed shares (a test
    set drawn again moves all seeds together). The df combine the two by Welch–Satterthwaite: n − 1
    when the seeds dominate (then this is exactly the paired t-test), up to ~n_examples − 1 when the
    examples do. Two guards against the seed share's few df: at n = 2 (one df; its estimate is often
    near 0 by chance, and the Welch–Satterthwaite df then grow exactly when the t statistic does) the df
    stay 1; at n ≥ 3 the df are computed with the seed share raised to its known floor where it fell
    below it — every seed's mean carries its own seed × example noise (``own / n``, measured from the same
    resamples), so a smaller estimate is chance, and it keeps the SE but buys no df.

    Size under the null (``python benchmarks/sim_multibootstrap_size.py``; 1,000 nulls per setting,
    60/500/2,000 examples, 300 resamples; ``benchmarks/results/multibootstrap_size.json``) is in
    ``benchmarks/README.md`` beside the earlier estimates: the joint bootstrap's variance minus its seed
    share (each seed's own noise counted again) and the example share without the df floor.

    Returns:
        ``(se, df)``.
    """
    blocks = [_block(b) for b in blocks]
    n = len(blocks[0])
    per_seed = np.mean([[ex.value() for ex in b] for b in blocks], axis=0)
    v_seed = float(per_seed.var(ddof=1)) / n
    shared, own = _example_covariances(_resampled_per_seed(blocks, n_resamples, rng))
    v_ex = max(shared, 0.0)
    se2 = v_seed + v_ex
    if se2 == 0:
        return 0.0, float(n - 1)
    if n == 2:
        return math.sqrt(se2), 1.0  # see the docstring: with one df in the seed share, n − 1
    n_ex = min(b[0].n for b in blocks)
    # a seed share below the seeds' own example noise (own / n, which every seed mean carries) is an
    # underestimate by chance: it keeps the SE, but buys no degrees of freedom (see the docstring)
    df = min(_satterthwaite(v_seed, n, v_ex, n_ex), _satterthwaite(max(v_seed, own / n), n, v_ex, n_ex))
    return math.sqrt(se2), float(df)


def _usable_examples(sample: SeedSample) -> tuple | None:
    """The sample's blocks as per-seed scorers, or ``None`` when they cannot be resampled (a block
    per seed, at least two examples, the same number for every seed)."""
    if not sample.examples:
        return None
    blocks = tuple(_block(b) for b in sample.examples)
    if any(len(b) != len(sample.values) or len({ex.n for ex in b}) != 1 or b[0].n < 2 for b in blocks):
        return None
    return blocks


def mean_interval(
    sample: SeedSample,
    confidence: float = CONFIDENCE,
    rng: np.random.Generator | None = None,
    n_resamples: int = N_RESAMPLES,
) -> Interval:
    """Mean of a cell and its CI.

    Over seeds only: the t-interval, ``scipy.stats.ttest_1samp(values).confidence_interval`` (n − 1
    df; see the module docstring for why not a bootstrap). With per-example results: a t-interval on
    the seeds × examples SE and df of :func:`seeds_by_examples_se` (Multi-Bootstrap). One value: no
    interval.

    Example:
        >>> i = mean_interval(Sample((1, 2, 3), (1.0, 2.0, 3.0)))
        >>> round(i.estimate, 3), round(i.low, 3), round(i.high, 3), i.method
        (2.0, -0.484, 4.484, 't over seeds')
    """
    x = np.asarray(sample.values, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        raise ValueError("mean_interval: no values")
    est = float(x.mean())
    if n < 2:
        return Interval(est, None, None, "none (n=1)")
    blocks = _usable_examples(sample)
    if blocks is not None:
        se, df = seeds_by_examples_se(blocks, n_resamples, rng)
        low, high, _ = _t_from_se(est, se, df, confidence)
        return Interval(est, low, high, "t on the seeds × examples SE (Multi-Bootstrap)")
    if _no_spread(x):
        return Interval(est, est, est, "t over seeds")
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(confidence)
    return Interval(est, float(ci.low), float(ci.high), "t over seeds")
