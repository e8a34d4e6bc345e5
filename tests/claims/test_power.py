"""The power analysis: noncentral-t tails against scipy, the TOST power against a simulation of the very
tests the verdicts run, the seeds needed against a direct search, and the report from a saved table."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from studylib.claims import power as W
from studylib.evaluation import verdicts as v
from studylib.evaluation.stats import over_seeds


@pytest.mark.parametrize("c, dof, ncp", [(2.0, 5, 1.0), (4.0, 2, 3.0), (-1.0, 9, 0.5), (3.5, 20, 4.0)])
def test_noncentral_t_tail_matches_scipy_where_scipy_is_finite(c, dof, ncp):
    assert W._sf(c, dof, ncp) == pytest.approx(scipy.stats.nct.sf(c, dof, ncp), abs=2e-4)


def test_powers_match_a_simulation_of_the_verdicts_own_tests():
    """Draw n per-seed values N(value, sd), judge them with verdicts.claim_tests at the same level, count."""
    rng = np.random.default_rng(0)
    n, alpha, sims = 6, 0.01 / 4, 4000
    for expect, value, sd in ((v.Expectation("greater"), 0.03, 0.02),
                              (v.Expectation("greater", delta=0.02), 0.002, 0.008),
                              (v.Expectation("noninferior", margin=0.03), 0.0, 0.02),
                              (v.Expectation("within", margin=0.02), 0.001, 0.01)):
        want = W.powers(expect, value, sd, n, alpha)
        hits = {k: 0 for k in want}
        for _ in range(sims):
            e = over_seeds(rng.normal(value, sd, n))
            for k, p in v.claim_tests(expect, e).items():
                hits[k] += p <= alpha
        for k in want:
            assert hits[k] / sims == pytest.approx(want[k], abs=0.03), (expect.kind, k, hits[k] / sims, want[k])


def test_seeds_needed_is_the_first_n_with_the_target_power():
    e = v.Expectation("greater")
    n, test = W.seeds_needed(e, 0.0638, 0.0169, 12)
    alpha = v.DECIDE_ALPHA / 12
    assert test == "difference" and W.powers(e, 0.0638, 0.0169, n, alpha)["difference"] >= 0.8
    assert W.powers(e, 0.0638, 0.0169, n - 1, alpha)["difference"] < 0.8
    assert W.seeds_needed(e, 0.0095, 0.05, 12) == (None, "no effect")  # at the band's edge: no affordable number
    n0, t0 = W.seeds_needed(e, 0.0, 0.004, 12)  # a precise null: the no-effect test decides it
    assert t0 == "no effect" and n0 <= 20
    assert W.aimed_at(e, 0.02) == "difference" and W.aimed_at(e, -0.005) == "no effect"
    assert W.aimed_at(v.Expectation("noninferior", margin=0.03), -0.05) == "inferior"


def test_powers_with_the_floor_match_a_simulation_of_the_floored_test():
    """The verdicts floor the spread; the power must be that of the floored statistic (a floor above the true
    spread lowers the power)."""
    rng = np.random.default_rng(1)
    n, alpha, sims, floor = 5, 0.01 / 3, 4000, 0.02
    expect = v.Expectation("greater", delta=0.01)
    want = W.powers(expect, 0.03, 0.015, n, alpha, floor=floor)
    assert want["difference"] < W.powers(expect, 0.03, 0.015, n, alpha)["difference"]
    hits = 0
    for _ in range(sims):
        e = over_seeds(rng.normal(0.03, 0.015, n), sd_floor=floor)
        hits += v.claim_tests(expect, e)["difference"] <= alpha
    assert hits / sims == pytest.approx(want["difference"], abs=0.03)


def test_planning_sd_is_the_upper_confidence_limit_of_the_pilots_spread():
    e = over_seeds([0.01, 0.03, 0.02])  # s = 0.01 on 2 dof; chi2_0.2(2) = 0.4463
    assert W.planning_sd(e) == pytest.approx(0.01 * math.sqrt(2 / scipy.stats.chi2.ppf(0.2, 2)))
    assert W.planning_sd(over_seeds([0.02, 0.02, 0.02], sd_floor=0.005)) == 0.005


def test_the_report_reads_a_saved_table_and_its_cost(tmp_path, monkeypatch):
    from studylib.claims import store as C
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    t = C.static_claims("00_quickstart")
    t.measure("table2-nc-beats-soft-5shot", over_seeds([0.02, 0.03, 0.025]))
    t.save()
    text = W.report(["00_quickstart"], "smoke")
    assert "table2-nc-beats-soft-5shot" in text and "seeds to decide:" in text and "min per seed" in text
    need = W.needs(C.saved_table("00_quickstart", "smoke"))[0]
    assert need.family == 1 and need.seeds == 3 and need.needed is not None


def test_level_claims_at_paper_scale_say_the_seeds_a_perfect_reproduction_needs():
    c = v.Claim("level", "ours", "Table 1", "75.74 ± 0.62", "ours - paper", v.Expectation("within", margin=0.01))
    n = W.level_seeds(c, 10)
    sd = 0.0062 / 1.959963984540054
    alpha = v.DECIDE_ALPHA / 10
    assert W.powers(v.Expectation("within", margin=0.01), 0.0, sd, n, alpha)["inside"] >= 0.8 > \
        W.powers(v.Expectation("within", margin=0.01), 0.0, sd, n - 1, alpha)["inside"]
    assert n > 3  # paper.yaml's 3 seeds are too few for a perfect reproduction to pass
    assert W.level_seeds(v.Claim("x", "", "", "62.55", "", v.Expectation("within", margin=0.01)), 10) is None
