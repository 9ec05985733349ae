"""The forgetting column of the task tables: a ``stages`` metric (LAPT's ``source_forgetting``), shown
beside the task metrics, "–" for records written before LAPT measured it, outside the declared comparisons."""

from __future__ import annotations

import pytest

from leaderboards.aggregate import aggregate
from leaderboards.cli import check_columns
from leaderboards.render import render_markdown
from leaderboards.spec import SpecError, parse_spec


def record(method: str, seed: int, acc: float, forgetting: float | None) -> dict:
    lapt = {"metrics": {"near": {"first_loss": 9.0, "final_loss": 6.0}}, "info": {}, "counts": {}}
    if forgetting is not None:
        lapt["metrics"]["near"].update(source_loss_before=7.0, source_loss_after=7.0 + forgetting,
                                       source_forgetting=forgetting)  # fmt: skip
    return {"trial_id": f"{method}{seed}", "status": "ok", "seed": seed,
            "config": {"method": {"id": method}, "task": {"name": "xnli", "id": "xnli"},
                       "stages": [{"id": "lapt", "name": "lapt", "config": {}}]},
            "metrics": {"near": {"accuracy": acc}}, "stages": {"lapt": lapt}}  # fmt: skip


def spec(key: str = "source_forgetting"):
    return parse_spec({
        "name": "t", "version": 1, "experiments": ["x"], "required_seeds": [1, 2, 3], "against": "random",
        "metrics": {"accuracy": {"direction": "higher"},
                    "src": {"key": key, "source": "stages", "direction": "lower", "display": "src MLM Δ", "compare": False}},
        "columns": [{"task": "xnli", "languages": ["near"], "metrics": ["accuracy", "src"]}],
    })  # fmt: skip


RECORDS = (
    [record("random", s, 0.60 + 0.01 * s, 0.10 + 0.01 * s) for s in (1, 2, 3)]
    + [record("focus", s, 0.70 + 0.02 * s, 0.30 + 0.02 * s) for s in (1, 2, 3)]
    + [record("old", s, 0.65, None) for s in (1, 2, 3)]  # written before LAPT measured forgetting
)


def test_forgetting_cells_come_from_the_stage_and_stay_out_of_the_comparisons():
    table = aggregate(RECORDS, spec())
    cells = {row.method: row.cells["xnli/near/src"] for row in table.rows}
    assert cells["focus"].mean == pytest.approx(0.34) and cells["focus"].n == 3
    assert cells["random"].mean == pytest.approx(0.12)
    assert cells["old"].mean is None
    assert any("3 record(s) carry no 'source_forgetting'" in n for n in table.notes)
    tested = {v.column for v in table.stats.verdicts}
    assert tested == {"xnli/near/accuracy"}  # compare: false keeps the column out of the Holm family
    md = render_markdown(table)
    old_line = next(line for line in md.splitlines() if line.startswith("| old |"))
    assert old_line.rstrip(" |").endswith("–")
    check_columns(table, RECORDS)  # an empty column of a later stage metric is not a typo


def test_a_stage_metric_no_record_has_is_refused():
    bad = spec("source_forgeting")
    table = aggregate(RECORDS, bad)
    with pytest.raises(SpecError, match="source_forgeting"):
        check_columns(table, RECORDS)


def test_compare_must_be_a_boolean():
    with pytest.raises(SpecError, match="compare must be true or false"):
        parse_spec({"name": "t", "version": 1, "experiments": ["x"], "metrics": {"a": {"compare": "no"}},
                    "columns": [{"task": "xnli", "languages": ["near"], "metrics": ["a"]}]})  # fmt: skip
