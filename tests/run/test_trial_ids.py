"""Trial ids are a versioned function of the resolved config: pinned here so a change cannot slip by.

Committed records are named by their trial id; an edit that moves ids (a new field in ``resolved()``
that is not omitted when unset, another hash) would orphan every committed record and re-run every
grid. Such a change must bump ``TRIAL_ID_VERSION`` and migrate records, and update these pins.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run.config import TRIAL_ID_VERSION, load_experiment

ROOT = Path(__file__).resolve().parents[2]


def test_trial_ids_of_a_packaged_config_are_pinned():
    assert TRIAL_ID_VERSION == 1
    trials = load_experiment(ROOT / "harness/configs/quickstart-tiny.yaml").trials()
    ids = {t.describe(): t.trial_id for t in trials}
    assert len(ids) == 44
    assert ids["random → near / mlm-at-init / seed 1"] == "d3174ca69716f543"
    assert ids["random → near / mlm-at-init / seed 2"] == "df9540a315f65e0a"
    assert ids["tiktotok → script / mlm-at-init / seed 2"] == "b8115f6696caa482"
    held = load_experiment(ROOT / "harness/configs/focus-table4.yaml", ["name=focus-table4-held", "source.pretrain.seed=0"])
    assert held.trials()[0].trial_id == "78c1a21f87e58391"  # the experiment's name is not part of the id


@pytest.mark.parametrize("name", ["quickstart-tiny", "real-small", "real-small-world"])
def test_every_committed_record_is_named_by_a_current_trial_id(name):
    """real-small gained a helper model on its targets (CLP's) after 440 records were committed: only the
    trials whose method reads the helper hash it, so those records keep their names."""
    ids = {t.trial_id for t in load_experiment(ROOT / f"harness/configs/{name}.yaml").trials()}
    names = {p.name.split(".")[0] for p in (ROOT / f"leaderboards/records/{name}/records").glob("*.json")}
    assert names and names <= ids, sorted(names - ids)[:3]
