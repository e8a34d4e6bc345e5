"""Every outcome of every verdict rule, against scipy's t-tests and hand-computed Holm-Shaffer adjustments.

Each rule is tested at its boundary, and each of these tests fails on the rules before issue 27 (BH over the
scale's claims, rule 3 "spread < effect", no no-effect outcome, "competitive" judged two-sided)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from studylib.evaluation import verdicts as v
from studylib.evaluation.stats import Estimate, over_seeds


def claim(cid: str, kind: str = "greater", measured=None, **kw) -> v.Claim:
    expect_kw = {k: kw.pop(k) for k in ("margin", "delta", "expected") if k in kw}
    return v.Claim(cid, f"claim {cid}", "Table 1", "", "A - B", v.Expectation(kind, **expect_kw), measured, **kw)


def one(c: v.Claim) -> v.Judgement:
    return v.judge_family([c])[c.id]


# -- the tests of one claim, against scipy -----------------------------------------------------------------
SEEDS = [0.031, 0.042, 0.018, 0.027, 0.036]


def test_claim_tests_are_scipys_one_sample_t_tests():
    e = over_seeds(SEEDS)
    t = v.claim_tests(v.Expectation("greater", delta=0.01), e)
    assert t["difference"] == pytest.approx(scipy.stats.ttest_1samp(SEEDS, 0.0).pvalue, rel=1e-10)
    tost = max(scipy.stats.ttest_1samp(SEEDS, -0.01, alternative="greater").pvalue,
               scipy.stats.ttest_1samp(SEEDS, 0.01, alternative="less").pvalue)
    assert t["no effect"] == pytest.approx(tost, rel=1e-10)
    ni = v.claim_tests(v.Expectation("noninferior", margin=0.03), e)
    assert ni["non-inferior"] == pytest.approx(scipy.stats.ttest_1samp(SEEDS, -0.03, alternative="greater").pvalue)
    assert ni["inferior"] == pytest.approx(scipy.stats.ttest_1samp(SEEDS, -0.03, alternative="less").pvalue)
    w = v.claim_tests(v.Expectation("within", margin=0.02), e)
    assert w["inside"] == pytest.approx(max(scipy.stats.ttest_1samp(SEEDS, -0.02, alternative="greater").pvalue,
                                            scipy.stats.ttest_1samp(SEEDS, 0.02, alternative="less").pvalue))
    assert w["outside"] == pytest.approx(min(1.0, 2 * min(
        scipy.stats.ttest_1samp(SEEDS, 0.02, alternative="greater").pvalue,
        scipy.stats.ttest_1samp(SEEDS, -0.02, alternative="less").pvalue)))


def test_the_floor_enters_the_tests():
    flat = over_seeds([0.003, 0.003, 0.003], [0.0196] * 3, episodes=500)  # floor sd = 0.01
    p = v.claim_tests(v.Expectation("greater"), flat)["difference"]
    t = 0.003 / (0.0196 / 1.959963984540054 / math.sqrt(3))
    assert p == pytest.approx(2 * scipy.stats.t.sf(t, 2), rel=1e-9)  # not 0 from a zero spread
    stated = over_seeds([0.5, 0.5, 0.5], sd_floor=0.1)  # a measure without episodes, its floor stated
    assert stated.sd == 0.1 and v.claim_tests(v.Expectation("greater", delta=0.05), stated)["difference"] > 0


# -- Holm-Shaffer ---------------------------------------------------------------------------------------------
def test_family_adjust_is_holm_with_one_test_per_member():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm by hand: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> cummax
    assert v.family_adjust(list(enumerate(p))) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_family_adjust_counts_members_not_tests():
    # two members with two tests each: sorted p 0.001 (a), 0.002 (b), 0.3 (a), 0.6 (b)
    tests = [("a", 0.001), ("a", 0.3), ("b", 0.002), ("b", 0.6)]
    # step 1: both members still have tests -> x2; step 2: x2; step 3: x2 (a and b still have one); step 4: x1
    assert v.family_adjust(tests) == pytest.approx([0.002, 0.6, 0.004, 0.6])
    with pytest.raises(ValueError, match="must lie in"):
        v.family_adjust([("a", 1.5)])


# -- directional claims: both ways ----------------------------------------------------------------------------
def test_directional_reproduced_reversed_no_effect_and_inconclusive():
    up = over_seeds([0.05, 0.04, 0.06, 0.05, 0.055])
    assert one(claim("a", measured=up)).verdict == v.REPRODUCED
    down = over_seeds([-0.05, -0.04, -0.06, -0.05, -0.055])
    j = one(claim("a", measured=down))
    assert j.verdict == v.NOT_REPRODUCED and j.label == "not reproduced (reversed)"
    assert one(claim("a", "less", down)).verdict == v.REPRODUCED
    # a reliable null: every seed within 0.2 pts of 0, band ±1 pt -> "no effect" (never possible before)
    null = over_seeds([0.001, -0.002, 0.0015, -0.001, 0.0005, 0.0, -0.0005, 0.001, -0.001, 0.0008])
    j = one(claim("a", measured=null))
    assert j.verdict == v.NOT_REPRODUCED and j.label == "not reproduced (no effect)" and j.test == "no effect"
    noisy = over_seeds([0.03, -0.02, 0.05])
    j = one(claim("a", measured=noisy))
    assert j.verdict == v.INCONCLUSIVE and j.label == "inconclusive"


def test_no_effect_band_boundary_and_unit():
    # 10 seeds with mean 0.004 and sd 0.002: the TOST p against the band decides; find the band where the
    # adjusted p (a family of one: p_adj = p) crosses 0.01 using scipy, and check both sides of it
    seeds = [0.004 + 0.002 * z for z in (-1.5, -1, -0.5, 0, 0.5, 1, 1.5, -0.25, 0.25, 0)]
    e = over_seeds(seeds)
    def tost(d):
        return max(scipy.stats.ttest_1samp(seeds, -d, alternative="greater").pvalue,
                   scipy.stats.ttest_1samp(seeds, d, alternative="less").pvalue)
    d0 = scipy.optimize.brentq(lambda d: tost(d) - 0.01, 0.0041, 0.02)
    inside = one(claim("a", measured=e, delta=d0 * 1.001))
    outside = one(claim("a", measured=e, delta=d0 * 0.999))
    assert inside.label == "not reproduced (no effect)" and "real" in inside.reason  # also p_adj(diff) <= 0.01
    assert outside.verdict == v.REPRODUCED  # the effect is real and not inside the band
    # a claim in another unit has no band unless stated
    assert "no effect" not in v.claim_tests(v.Expectation("greater"), e, unit=1.0)
    assert "no effect" in v.claim_tests(v.Expectation("greater", delta=0.5), e, unit=1.0)
    with pytest.raises(ValueError, match="for directional claims"):
        v.Expectation("within", margin=0.1, delta=0.1)


def test_decisive_at_one_percent_marginal_at_five():
    # two seeds on 1 dof: p = 2 * t.sf(|t|, 1); pick values with p just below / above 0.01 and 0.05
    def at(p):  # seeds (x - 0.01, x + 0.01): sd = 0.01 * sqrt 2, t = x / (0.01 * sqrt2 / sqrt2) = x / 0.01
        t = scipy.stats.t.isf(p / 2, 1)
        return over_seeds([t * 0.01 - 0.01, t * 0.01 + 0.01])
    assert one(claim("a", measured=at(0.0099), delta=1e-6)).verdict == v.REPRODUCED
    j = one(claim("a", measured=at(0.0101), delta=1e-6))
    assert j.verdict == v.INCONCLUSIVE and j.label == "inconclusive (marginal)"
    assert one(claim("a", measured=at(0.0499), delta=1e-6)).label == "inconclusive (marginal)"
    assert one(claim("a", measured=at(0.0501), delta=1e-6)).label == "inconclusive"


def test_rule_3_is_gone_more_seeds_decide():
    # d = mean / sd = 0.5: rule 3 ("spread < effect") made this undecidable at any number of seeds
    rng = [0.01 + 0.02 * z for z in scipy.stats.norm.ppf([(i + 0.5) / 60 for i in range(60)])]
    e = over_seeds(rng)
    assert e.sd > abs(e.value) and one(claim("a", measured=e)).verdict == v.REPRODUCED


# -- non-inferiority and within ------------------------------------------------------------------------------
def test_competitive_is_one_sided_non_inferiority():
    much_better = over_seeds([0.10, 0.11, 0.12, 0.10, 0.11])  # A far better than B: still "competitive"
    assert one(claim("c", "noninferior", much_better, margin=0.03)).verdict == v.REPRODUCED
    much_worse = over_seeds([-0.10, -0.11, -0.12, -0.10, -0.11])
    assert one(claim("c", "noninferior", much_worse, margin=0.03)).verdict == v.NOT_REPRODUCED
    near = over_seeds([-0.03, -0.02, -0.04])
    assert one(claim("c", "noninferior", near, margin=0.03)).verdict == v.INCONCLUSIVE


def test_within_all_outcomes():
    assert one(claim("w", "within", over_seeds([0.001, -0.001, 0.0, 0.0005, -0.0005]), margin=0.01)).verdict \
        == v.REPRODUCED
    assert one(claim("w", "within", over_seeds([0.10, 0.11, 0.09, 0.10, 0.105]), margin=0.01)).verdict \
        == v.NOT_REPRODUCED
    assert one(claim("w", "within", over_seeds([0.01, -0.01, 0.02]), margin=0.01)).verdict == v.INCONCLUSIVE


def test_within_boundary_is_the_tost_at_the_adjusted_level():
    seeds = [0.002, -0.001, 0.003, 0.0, 0.001]
    e = over_seeds(seeds)
    def tost(m):
        return max(scipy.stats.ttest_1samp(seeds, -m, alternative="greater").pvalue,
                   scipy.stats.ttest_1samp(seeds, m, alternative="less").pvalue)
    m0 = scipy.optimize.brentq(lambda m: tost(m) - 0.01, 0.0031, 0.1)
    assert one(claim("w", "within", e, margin=m0 * 1.001)).verdict == v.REPRODUCED
    assert one(claim("w", "within", e, margin=m0 * 0.999)).verdict == v.INCONCLUSIVE


# -- preconditions, families, aliases -------------------------------------------------------------------------
def test_one_seed_not_tested_and_not_run_stay_in_the_family():
    strong = over_seeds([0.05, 0.051, 0.049, 0.05, 0.0505])
    p = v.claim_tests(v.Expectation("greater"), strong)
    alone = v.judge_family([claim("a", measured=strong)])["a"]
    fam = v.judge_family([claim("a", measured=strong), claim("b"), claim("c", measured=over_seeds([0.2])),
                          claim("d", measured=strong, applies=False, why_not="needs miniImageNet"),
                          claim("e", "equal", 3, expected=3)])
    assert fam["b"].verdict == v.NOT_RUN and fam["c"].verdict == v.NOT_TESTED and fam["c"].reason == v.ONE_SEED
    assert fam["d"] == v.Judgement(v.NOT_TESTED, "needs miniImageNet") and fam["e"].verdict == v.REPRODUCED
    # a, b, c are the family (3 members): the smallest p is multiplied by 3, not 1
    assert alone.family == 1 and alone.p_adj == pytest.approx(p["difference"])  # one member: nothing to adjust
    assert fam["a"].family == 3 and fam["a"].p_adj == pytest.approx(3 * fam["a"].p)


def test_a_failed_regime_check_gates_its_claims():
    strong = over_seeds([-0.05, -0.051, -0.049, -0.05, -0.0505])  # against the paper
    r = v.Regime.at_least("pretraining beats the random encoder", over_seeds([0.01, -0.02, 0.0]), 0.02,
                          ["a"])
    assert r.passed is False and "lower 95% bound" in r.detail
    fam = v.judge_family([claim("a", measured=strong), claim("b", measured=strong)], [r])
    assert fam["a"].verdict == v.NOT_TESTED and fam["a"].reason.startswith("regime check failed: pretraining")
    assert fam["b"].label == "not reproduced (reversed)" and fam["b"].family == 2  # "a" still counts
    ok = v.Regime.at_least("x", over_seeds([0.1, 0.11, 0.12]), 0.02, ["a"])
    assert ok.passed and v.judge_family([claim("a", measured=strong)], [ok])["a"].verdict == v.NOT_REPRODUCED
    assert v.Regime.at_least("x", None, 0.02, ["a"]).passed is None
    assert v.Regime.from_dict(ok.as_dict()) == ok


def test_an_alias_with_the_same_values_takes_its_canonical_judgement_and_does_not_grow_the_family():
    e = over_seeds([0.05, 0.051, 0.049, 0.05, 0.0505])
    fam = v.judge_family([claim("a", measured=e), claim("b", measured=e), claim("c", measured=e)],
                         same_as={"b": "a"})
    assert fam["a"].family == 2 and fam["b"].p_adj == fam["a"].p_adj and "same measurement as a" in fam["b"].reason
    other = over_seeds([0.02, 0.021, 0.019, 0.02, 0.0205])
    fam = v.judge_family([claim("a", measured=e), claim("b", measured=other)], same_as={"b": "a"})
    assert fam["a"].family == 2  # different values: judged as a member of its own


def test_equal_for_formulas_and_counts():
    assert v.equal(120, 120).verdict == v.REPRODUCED
    assert v.equal(0.1 + 0.2, 0.3).verdict == v.REPRODUCED
    assert v.equal([1, 2.0], (1, 2)).verdict == v.REPRODUCED
    assert v.equal(119, 120) == v.Judgement(v.NOT_REPRODUCED, "measured 119, expected 120")
    assert v.equal([1, 2], [1, 2, 3]).verdict == v.NOT_REPRODUCED
    assert v.equal([[8, 8], [20, 25]], [[8.0, 8], [20, 25.0]]).verdict == v.REPRODUCED
    assert v.equal(3, 3.0000001).verdict == v.NOT_REPRODUCED


def test_expectations_are_validated():
    with pytest.raises(ValueError, match="unknown claim kind"):
        v.Expectation("bigger")
    with pytest.raises(ValueError, match="positive margin"):
        v.Expectation("within")
    with pytest.raises(ValueError, match="positive margin"):
        v.Expectation("noninferior")
    with pytest.raises(TypeError, match="needs an Estimate"):
        v.judge_family([claim("a", measured=0.3)])


def test_claim_reports_its_verdict_and_measurement_and_rule_in_the_tables_unit():
    c = claim("c1", measured=Estimate(0.05, 0.02, (0.04, 0.05, 0.06, 0.05, 0.055)))
    assert c.verdict == v.REPRODUCED and c.measured_text() == "+5.0 ± 2.0 (5 seeds)"
    assert v.Expectation("within", margin=0.01).rule(100.0) == ("inside ±1 pts (equivalence t over seeds; "
                                                                "Holm-adjusted p <= 0.01)")
    assert "no effect if inside ±1 pts" in v.Expectation("greater").rule(100.0)
    assert "no effect" not in v.Expectation("greater").rule(1.0)
    assert "effect > -3 pts" in v.Expectation("noninferior", margin=0.03).rule(100.0)


def test_noninferiority_boundary_is_the_one_sided_test_at_the_adjusted_level():
    seeds = [-0.010, -0.004, -0.012, -0.006, -0.008]
    e = over_seeds(seeds)
    def p_ni(m):
        return scipy.stats.ttest_1samp(seeds, -m, alternative="greater").pvalue
    m0 = scipy.optimize.brentq(lambda m: p_ni(m) - 0.01, 0.0081, 0.2)
    assert one(claim("c", "noninferior", e, margin=m0 * 1.001)).verdict == v.REPRODUCED
    assert one(claim("c", "noninferior", e, margin=m0 * 0.999)).verdict == v.INCONCLUSIVE
    # and the other way: worse than the margin at the adjusted level
    def p_inf(m):
        return scipy.stats.ttest_1samp(seeds, -m, alternative="less").pvalue
    m1 = scipy.optimize.brentq(lambda m: p_inf(m) - 0.01, 1e-6, 0.0079)
    assert one(claim("c", "noninferior", e, margin=m1 * 0.999)).verdict == v.NOT_REPRODUCED
    assert one(claim("c", "noninferior", e, margin=m1 * 1.001)).verdict == v.INCONCLUSIVE


def test_a_claim_about_every_effect_is_an_intersection_union_test():
    from studylib.evaluation.stats import AllOf
    up = [over_seeds([0.05 + d, 0.051 + d, 0.049 + d, 0.05 + d, 0.0505 + d]) for d in (0.0, 0.01, 0.02)]
    e3 = v.Expectation("greater", parts=3)
    j = v.judge_family([v.Claim("best", "", "", "", "", e3, AllOf(tuple(up)))])["best"]
    assert j.verdict == v.REPRODUCED and j.test == "all shown"
    assert j.p == pytest.approx(max(v.claim_tests(v.Expectation("greater"), x)["difference"] for x in up))
    # one of the three on the other side, clearly: reversed (Bonferroni over the three); not "reproduced"
    mixed = (up[0], up[1], over_seeds([-0.05, -0.051, -0.049, -0.05, -0.0505]))
    j = v.judge_family([v.Claim("best", "", "", "", "", e3, AllOf(mixed))])["best"]
    assert j.label == "not reproduced (reversed)" and j.test == "one reversed"
    # the bias of a per-seed minimum: three noisy zero differences; their per-seed min is negative on average,
    # which a combine(min) estimate reads as "reversed"; the intersection-union test does not
    rng = np.random.default_rng(0)
    zeros = tuple(over_seeds(rng.normal(0.0, 0.01, 20)) for _ in range(3))
    from studylib.evaluation import stats
    assert stats.combine(lambda *d: min(d), *zeros).value < -0.005
    assert v.judge_family([v.Claim("best", "", "", "", "", e3, AllOf(zeros))])["best"].label != \
        "not reproduced (reversed)"
    with pytest.raises(ValueError, match="parts"):
        v.claim_tests(e3, AllOf(zeros[:2]))
    with pytest.raises(ValueError, match="AllOf"):
        v.claim_tests(e3, zeros[0])


def test_a_claim_about_several_effects_weighs_in_its_family_as_fixed_in_advance():
    from studylib.evaluation.stats import AllOf
    strong = over_seeds([0.05, 0.051, 0.049, 0.05, 0.0505])
    e3 = v.Expectation("greater", parts=3)
    unmeasured = v.judge_family([claim("a", measured=strong), v.Claim("best", "", "", "", "", e3)])["a"]
    measured = v.judge_family([claim("a", measured=strong),
                               v.Claim("best", "", "", "", "", e3, AllOf((strong, strong, strong)))])["a"]
    assert unmeasured.p_adj == measured.p_adj  # the weight does not depend on whether it was measured


def test_no_spread_without_a_floor_is_not_tested_and_marginal_looks_at_both_tests():
    j = one(claim("a", measured=over_seeds([0.02, 0.02, 0.02])))
    assert j.verdict == v.NOT_TESTED and j.reason == v.NO_SPREAD
    # the no-effect test alone is marginal: the label says so (before, only the difference test counted)
    e = over_seeds([0.0, 0.004, -0.002])
    t = v.claim_tests(v.Expectation("greater"), e)
    j = one(claim("a", measured=e))
    assert 0.01 < t["no effect"] <= 0.05 and j.label == "inconclusive (marginal)" and j.test == "no effect"
