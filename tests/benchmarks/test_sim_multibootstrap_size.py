"""benchmarks/sim_multibootstrap_size.py: the simulation scores true nulls with the leaderboards' own test."""

from __future__ import annotations

from benchmarks import sim_multibootstrap_size as sim


def test_the_simulation_reports_rejection_shares_of_every_test_at_every_level():
    r = sim.simulate(3, 40, 0.1, 0.3, sims=30, n_resamples=100)
    assert set(r) == {"test", "joint_minus_seed_share", "no_df_floor", "seeds_only_t"}
    for shares in r.values():
        assert set(shares) == {str(level) for level in sim.LEVELS}
        assert all(0.0 <= v <= 1.0 for v in shares.values())
        assert shares["0.005"] <= shares["0.0167"] <= shares["0.05"]  # a stricter level never rejects more
    # under a null with a shared example effect, the seeds-only t-test (test set held fixed) rejects more
    # often than the test that counts the test set's variance
    big = sim.simulate(5, 60, 0.02, 0.5, sims=120, n_resamples=100)
    assert big["seeds_only_t"]["0.05"] > big["test"]["0.05"]
