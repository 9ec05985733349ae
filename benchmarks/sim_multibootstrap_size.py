"""Size of the leaderboards' Multi-Bootstrap t-test under the null, by simulation.

Two methods A and B are scored on the same test examples over ``n`` seeds. Per example and seed the
A - B difference is ``effect_e + seed_s + noise_se``: an example effect shared by every seed (a test set
drawn again moves all seeds; standard deviation ``example_sd``), a per-seed offset (``seed_sd``) and
each seed's own per-example noise (0.5). The true mean difference is 0, so every rejection is a false
one. Per setting, the share of nulls rejected at each level is reported for:

* ``test``: the leaderboards' test as it is (:func:`leaderboards.stats.paired_difference`: the seed share
  ``s²/n``, the example share of :func:`leaderboards.intervals.example_share`, Welch–Satterthwaite df,
  df = 1 at n = 2);
* ``joint_minus_seed_share``: the first example share, the joint seeds × examples bootstrap variance
  minus its seed share (each seed's own noise counted again), with its Welch–Satterthwaite df;
* ``no_df_floor``: the test without its df guard (Welch–Satterthwaite df from the seed share as estimated,
  however far below the seeds' own example noise it fell);
* ``seeds_only_t``: the paired t-test on the per-seed means, which ignores that the test set is drawn.

Run (a few minutes on one core; not a timing, the machine's load does not matter)::

    python benchmarks/sim_multibootstrap_size.py --json benchmarks/results/multibootstrap_size.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from leaderboards.intervals import (  # noqa: E402
    Sample,
    _block,
    _Difference,
    _satterthwaite,
    example_share,
    multi_bootstrap_se,
)
from leaderboards.stats import paired_difference  # noqa: E402

SETTINGS = (  # n seeds, examples, seed_sd, example_sd
    (2, 60, 0.5, 0.0), (2, 60, 0.1, 0.3), (2, 60, 0.0, 0.5),
    (3, 60, 0.5, 0.0), (3, 60, 0.1, 0.3), (3, 60, 0.05, 0.5), (3, 60, 0.2, 0.2), (3, 60, 0.0, 0.5),
    (5, 60, 0.5, 0.0), (5, 60, 0.1, 0.3), (5, 60, 0.05, 0.5), (5, 60, 0.2, 0.2), (5, 60, 0.0, 0.5),
    (3, 500, 0.03, 0.0), (3, 500, 0.01, 0.3), (5, 500, 0.03, 0.0), (5, 500, 0.02, 0.3),
    (3, 2000, 0.02, 0.0), (3, 2000, 0.01, 0.3), (5, 2000, 0.005, 0.3),
)
LEVELS = (0.05, 0.0167, 0.005)


def _other_ps(a: np.ndarray, b: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """p of the first example share (joint bootstrap minus its seed share) and of the test without its df floor."""
    blocks = [tuple(_Difference(x, y) for x, y in zip(_block(a), _block(b)))]
    d = a.mean(1) - b.mean(1)
    n, n_ex = len(d), a.shape[1]
    v_seed = float(d.var(ddof=1)) / n
    v_joint = max(multi_bootstrap_se(blocks, n_resamples, np.random.default_rng(seed)) ** 2 - v_seed * (n - 1) / n, 0.0)
    v_shared = example_share(blocks, n_resamples, np.random.default_rng(seed))
    ps = []
    for v_ex, first in ((v_joint, True), (v_shared, False)):
        se2 = v_seed + v_ex
        df = 1.0 if n == 2 and not first else _satterthwaite(v_seed, n, v_ex, n_ex)
        ps.append(float(2 * stats.t.sf(abs(d.mean()) / math.sqrt(se2), df)))
    return ps[0], ps[1]


def simulate(n: int, n_ex: int, seed_sd: float, example_sd: float, sims: int, n_resamples: int) -> dict:
    rng = np.random.default_rng(11)
    p = {"test": [], "joint_minus_seed_share": [], "no_df_floor": [], "seeds_only_t": []}
    for i in range(sims):
        a = rng.normal(0, example_sd, n_ex) + rng.normal(0, seed_sd, (n, 1)) + rng.normal(0, 0.5, (n, n_ex))
        b = rng.normal(0, 0.5, (n, n_ex))
        seeds = tuple(range(n))
        d = paired_difference(Sample(seeds, tuple(a.mean(1)), (a,)), Sample(seeds, tuple(b.mean(1)), (b,)),
                              with_improvement=False, n_resamples=n_resamples, rng=np.random.default_rng(i))
        p["test"].append(d.p)
        joint, no_floor = _other_ps(a, b, n_resamples, i)
        p["joint_minus_seed_share"].append(joint)
        p["no_df_floor"].append(no_floor)
        p["seeds_only_t"].append(float(stats.ttest_rel(a.mean(1), b.mean(1)).pvalue))
    return {name: {str(level): float(np.mean(np.asarray(v) < level)) for level in LEVELS} for name, v in p.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=1000, help="nulls per setting")
    ap.add_argument("--resamples", type=int, default=300, help="bootstrap resamples per test")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for n, n_ex, seed_sd, example_sd in SETTINGS:
        r = simulate(n, n_ex, seed_sd, example_sd, args.sims, args.resamples)
        rows.append({"n": n, "examples": n_ex, "seed_sd": seed_sd, "example_sd": example_sd, "rejected": r})
        print(f"n={n} examples={n_ex} seed_sd={seed_sd} example_sd={example_sd}: " + "; ".join(
            f"{k} " + "/".join(f"{v[str(level)]:.3f}" for level in LEVELS) for k, v in r.items()), flush=True)
    out = {"benchmark": "sim_multibootstrap_size", "sims": args.sims, "resamples": args.resamples,
           "levels": list(LEVELS), "noise_sd": 0.5, "settings": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
