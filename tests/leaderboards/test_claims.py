"""A paper's claims as verdicts (``leaderboards/claims.py``) and comparisons declared for some columns only."""

from __future__ import annotations

import pytest
from scipy import stats as sps

from leaderboards.aggregate import aggregate
from leaderboards.cli import render_findings
from leaderboards.render import claim_lines, render_html, render_latex, render_markdown
from leaderboards.spec import PACKAGED_SPECS, SpecError, load_spec, parse_spec
from tests.leaderboards.test_leaderboards import LOSSES, SPEC, TASK, all_records

NEAR_LOSS = f"{TASK}/near/loss"
AVG_LOSS = f"{TASK}/avg/loss"


def _spec(**extra):
    return parse_spec({**SPEC, **extra})


def _claim(a, b, column=NEAR_LOSS, **extra):
    return {"claim": f"{a} beats {b}", "a": a, "b": b, "column": column, **extra}


def test_a_comparison_declared_for_some_columns_is_tested_there_only():
    spec = _spec(comparisons=[{"a": "focus", "b": "random", "columns": [NEAR_LOSS]}, {"a": "focus", "b": "overlap"}])
    assert spec.compared_columns("focus", "random") == (NEAR_LOSS,) and spec.compared_columns("focus", "overlap") is None
    table = aggregate(all_records(), spec)
    keys = [(v.a, v.b, v.column) for v in table.stats.verdicts]
    n_columns = len(table.columns)
    assert keys.count(("focus", "random", NEAR_LOSS)) == 1 and sum(k[:2] == ("focus", "random") for k in keys) == 1
    assert sum(k[:2] == ("focus", "overlap") for k in keys) == n_columns
    # the Holm family counts the tests declared, not every column of every pair
    assert {v.family for v in table.stats.verdicts} == {1 + n_columns}
    only = aggregate(all_records(), _spec(comparisons=[{"a": "focus", "b": "random", "columns": [NEAR_LOSS]}]))
    (v,) = only.stats.verdicts
    p = sps.ttest_rel(LOSSES[("focus", "near")], LOSSES[("random", "near")]).pvalue
    assert v.family == 1 and v.p_holm == pytest.approx(p) and v.verdict == "better"


def test_each_claim_takes_its_comparisons_verdict():
    spec = _spec(
        comparisons=[{"a": "focus", "b": "random", "columns": [NEAR_LOSS]},
                     {"a": "random", "b": "overlap", "columns": [NEAR_LOSS]},
                     {"a": "focus", "b": "overlap", "columns": [NEAR_LOSS]}],
        claims=[_claim("focus", "random", paper="+2.0 in Table 9"), _claim("random", "overlap"),
                _claim("focus", "overlap"), {"claim": "gains most on the rare pair", "untestable": "no pair is rare here"}],
    )
    lines = claim_lines(aggregate(all_records(), spec))
    assert len(lines) == 4
    assert lines[0].startswith("Claim: focus beats random (paper: +2.0 in Table 9) — FOCUS vs random, loss ↓ near: Δ -2.03")
    assert lines[0].endswith("→ reproduced")  # a lower loss, significant after Holm over the 3 tests
    assert lines[1].endswith("→ not reproduced")  # random's loss is the higher one: the opposite holds
    # FOCUS's loss is above overlap's in every seed, but p > 0.05 at n = 3: no detectable difference, with its MDE
    assert "→ no detectable difference at n = 3 (MDE " in lines[2]
    assert lines[3] == "Claim: gains most on the rare pair → untestable here: no pair is rare here"


def test_a_claim_without_paired_seeds_is_untestable_and_says_why():
    spec = _spec(comparisons=[{"a": "focus", "b": "random", "columns": [NEAR_LOSS]}], claims=[_claim("focus", "random")])
    one_seed = [r for r in all_records() if r["config"]["seed"] == 1]
    (line,) = claim_lines(aggregate(one_seed, spec))
    assert "→ untestable: 1 shared seed" in line


def test_claims_are_rendered_in_the_table_and_in_findings():
    spec = _spec(comparisons=[{"a": "focus", "b": "random", "columns": [NEAR_LOSS, AVG_LOSS]}],
                 claims=[_claim("focus", "random", column=AVG_LOSS)])
    table = aggregate(all_records(), spec)
    md = render_markdown(table)
    assert "#### The paper's claims" in md and "- Claim: focus beats random — FOCUS vs random, loss ↓ avg" in md
    assert "<h3>The paper's claims</h3>" in render_html(table) and "focus beats random" in render_html(table)
    tex = render_latex(table)
    assert r"\item Claim: focus beats random --- FOCUS vs random" in tex and r"$\rightarrow$ reproduced" in tex
    assert "→" not in tex and "—" not in tex  # pdflatex without extra packages
    findings = render_findings([table])
    assert "- Claim: focus beats random — FOCUS vs random, loss ↓ avg" in findings
    # without claims a table shows no claims section
    assert "The paper's claims" not in render_markdown(aggregate(all_records(), _spec(against="random")))


def test_a_claim_against_the_baseline_of_rows_all_is_accepted():
    spec = _spec(against="random", claims=[_claim("focus", "random")])
    (line,) = claim_lines(aggregate(all_records(), spec))
    assert line.endswith("→ reproduced")


@pytest.mark.parametrize("extra, match", [
    ({"comparisons": [{"a": "focus", "b": "random", "columns": ["mlm-at-init/xx/loss"]}]},
     r"comparisons\[0\]\.columns has 'mlm-at-init/xx/loss', not a column of this spec \(columns: mlm-at-init/near/loss"),
    ({"comparisons": [{"a": "focus", "b": "random", "columns": []}]}, r"columns must be a non-empty list"),
    ({"comparisons": [{"a": "focus", "b": "random", "columns": [NEAR_LOSS, NEAR_LOSS]}]}, "lists a column twice"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [_claim("focus", "overlap")]},
     r"claims\[0\]: focus vs overlap is not a declared comparison; declare it"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [_claim("random", "focus")]},
     "declared the other way round"),
    ({"comparisons": [{"a": "focus", "b": "random", "columns": [AVG_LOSS]}], "claims": [_claim("focus", "random")]},
     rf"focus vs random is not tested in '{NEAR_LOSS}' \(its columns: {AVG_LOSS}\)"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [_claim("focus", "random", column="near")]},
     r"column 'near' is not a column of this spec"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [{"claim": "x", "a": "focus", "b": "random"}]},
     r"claims\[0\]: missing 'column'"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [_claim("focus", "random", untestable="why")]},
     "an untestable claim names no comparison"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [_claim("focus", "random"), _claim("focus", "random")]},
     r"claims\[1\]: focus vs random in .* is claimed twice"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [_claim("focus", "random", effect="+1")]},
     r"claims\[0\]: unknown key 'effect'"),
    ({"comparisons": [{"a": "focus", "b": "random"}], "claims": [{"claim": "", "untestable": "x"}]},
     "'claim' must be the claim in words"),
    ({"claims": {"a": "focus"}}, "claims must be a list"),
])
def test_bad_claims_are_errors_naming_the_entry_at_spec_load(extra, match):
    with pytest.raises(SpecError, match=match):
        _spec(**extra)


@pytest.mark.parametrize("name, tests, claims", [
    ("xlp-table1", 6, 3), ("xlp-table1-translate-train", 3, 2), ("xlp-table2", 4, 4),
])
def test_the_xlp_specs_test_the_claims_columns_only(name, tests, claims):
    spec = load_spec(PACKAGED_SPECS / f"{name}.yaml")
    assert sum(len(cols) for _pair, cols in spec.comparison_columns) == tests
    assert len(spec.comparison_columns) == len(spec.comparisons)  # every comparison names its columns
    assert len(spec.claims) == claims and all(c.a == "xlp" for c in spec.claims if not c.untestable)
