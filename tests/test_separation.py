"""The separation summary: best row vs baseline in pooled seed stds, computed from the cells."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leaderboards.aggregate import aggregate
from leaderboards.render import render_markdown
from leaderboards.separation import separation_lines, separations
from leaderboards.spec import SpecError, parse_spec
from tests.test_leaderboards import SPEC, all_records


def _spec(**extra):
    data = dict(SPEC, **extra)
    data["metrics"] = dict(SPEC["metrics"], accuracy=dict(SPEC["metrics"]["accuracy"], chance=0.1))
    return parse_spec(data)


def test_gap_and_pooled_std_match_numpy():
    table = aggregate(all_records(), _spec(separation={"baseline": "random"}))
    seps = {(s.column.language, s.column.metric.name): s for s in separations(table)}
    s = seps[("near", "loss")]
    # lower is better: overlap has the lowest near loss
    assert s.best == "overlap" and s.baseline == "random"
    over, rand = np.array([6.00, 6.05, 5.98]), np.array([8.21, 8.25, 8.19])
    assert s.gap == pytest.approx(rand.mean() - over.mean())
    pooled = math.sqrt((over.std(ddof=1) ** 2 + rand.std(ddof=1) ** 2) / 2)
    assert s.pooled == pytest.approx(pooled)
    assert s.ratio == pytest.approx(s.gap / pooled) and s.separates is True


def test_threshold_decides_and_lines_render():
    table = aggregate(all_records(), _spec(separation={"baseline": "random", "threshold": 1e6}))
    assert not any(s.separates for s in separations(table))
    lines = separation_lines(table)
    assert any("does not separate" in line and "near" in line for line in lines)
    assert any("chance 10.0" in line for line in lines)  # accuracy's chance, scaled like the column
    md = render_markdown(table)
    assert "separation, loss near: best overlap" in md


def test_baseline_best_is_said_and_absent_spec_adds_nothing():
    recs = all_records()
    table = aggregate(recs, _spec(separation={"baseline": "overlap"}))
    near_loss = [s for s in separations(table) if (s.column.language, s.column.metric.name) == ("near", "loss")][0]
    assert near_loss.best == "overlap" and near_loss.separates is False
    assert separation_lines(aggregate(recs, parse_spec(SPEC))) == []


@pytest.mark.parametrize("bad, match", [
    ({"separation": {"threshold": 3}}, "baseline"),
    ({"separation": {"baseline": "random", "threshold": 0}}, "threshold"),
    ({"separation": {"baseline": "random", "by": 1}}, "unknown key 'by'"),
])
def test_bad_separation_is_an_error(bad, match):
    with pytest.raises(SpecError, match=match):
        parse_spec(dict(SPEC, **bad))


def test_bad_chance_is_an_error():
    data = dict(SPEC, metrics=dict(SPEC["metrics"], loss={"direction": "lower", "chance": "a third"}))
    with pytest.raises(SpecError, match="metrics.loss.chance"):
        parse_spec(data)
