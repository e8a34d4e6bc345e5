"""Every outcome of every verdict rule, on hand-made estimates whose intervals are known."""

from __future__ import annotations

import pytest

from studylib.evaluation import verdicts as v
from studylib.evaluation.stats import Estimate, over_seeds


def est(value: float, ci: float, seeds: tuple[float, ...]) -> Estimate:
    return Estimate(value, ci, seeds)


def test_greater_reproduced_and_not_reproduced():
    assert v.greater(est(0.05, 0.02, (0.04, 0.05, 0.06)))[0] == v.REPRODUCED
    assert v.greater(est(-0.05, 0.02, (-0.04, -0.05, -0.06)))[0] == v.NOT_REPRODUCED
    assert v.less(est(-0.05, 0.02, (-0.04, -0.05, -0.06)))[0] == v.REPRODUCED
    assert v.less(est(0.05, 0.02, (0.04, 0.05, 0.06)))[0] == v.NOT_REPRODUCED


def test_inconclusive_when_the_interval_includes_zero():
    verdict, reason = v.greater(est(0.01, 0.02, (0.0, 0.01, 0.02)))
    assert verdict == v.INCONCLUSIVE and "includes 0" in reason
    assert v.less(est(-0.01, 0.02, (0.0, -0.01, -0.02)))[0] == v.INCONCLUSIVE


def test_inconclusive_when_the_seeds_disagree():
    # Seeds that disagree in sign: the spread (std ~ 0.08) exceeds the effect (0.02). The interval is given
    # narrow on purpose, as a CI over pooled episodes would be, so only the spread rule can catch it.
    disagree = est(0.02, 0.01, (0.10, -0.08, 0.04))
    verdict, reason = v.greater(disagree)
    assert verdict == v.INCONCLUSIVE and "spread" in reason
    # And through the real interval of over_seeds, such seeds give an interval that includes 0.
    assert v.greater(over_seeds([0.10, -0.08, 0.04]))[0] == v.INCONCLUSIVE


def test_one_seed_is_never_enough_for_a_difference():
    one = est(0.2, 0.01, (0.2,))
    assert v.greater(one) == (v.INCONCLUSIVE, "1 training seed(s); a difference needs at least 2")
    assert v.within(one, 0.05)[0] == v.INCONCLUSIVE


def test_within_all_three_outcomes():
    assert v.within(est(0.01, 0.02, (0.0, 0.01, 0.02)), 0.05)[0] == v.REPRODUCED
    assert v.within(est(0.10, 0.02, (0.09, 0.10, 0.11)), 0.05)[0] == v.NOT_REPRODUCED
    assert v.within(est(-0.10, 0.02, (-0.09, -0.10, -0.11)), 0.05)[0] == v.NOT_REPRODUCED
    assert v.within(est(0.04, 0.02, (0.03, 0.04, 0.05)), 0.05)[0] == v.INCONCLUSIVE


def test_equal_for_formulas_and_counts():
    assert v.equal(120, 120)[0] == v.REPRODUCED
    assert v.equal(0.1 + 0.2, 0.3)[0] == v.REPRODUCED
    assert v.equal([1, 2.0], (1, 2))[0] == v.REPRODUCED
    assert v.equal(119, 120) == (v.NOT_REPRODUCED, "measured 119, expected 120")


def test_judge_dispatches_and_marks_untested_and_unrun_claims():
    good = est(0.05, 0.02, (0.04, 0.05, 0.06))
    assert v.judge(v.Expectation("greater"), good)[0] == v.REPRODUCED
    assert v.judge(v.Expectation("less"), good)[0] == v.NOT_REPRODUCED
    assert v.judge(v.Expectation("within", margin=0.1), good)[0] == v.REPRODUCED
    assert v.judge(v.Expectation("equal", expected=3), 3)[0] == v.REPRODUCED
    assert v.judge(v.Expectation("greater"), good, applies=False, why_not="needs miniImageNet") == (
        v.NOT_TESTED, "needs miniImageNet")
    assert v.judge(v.Expectation("greater"), None)[0] == v.NOT_RUN
    with pytest.raises(TypeError, match="needs an Estimate"):
        v.judge(v.Expectation("greater"), 0.3)


def test_expectations_are_validated():
    with pytest.raises(ValueError, match="unknown claim kind"):
        v.Expectation("bigger")
    with pytest.raises(ValueError, match="positive margin"):
        v.Expectation("within")


def test_claim_reports_its_verdict_and_measurement():
    c = v.Claim("c1", "A beats B", "Table 2", "62.6 vs 60.4", "A - B", v.Expectation("greater"),
                measured=est(0.05, 0.02, (0.04, 0.05, 0.06)))
    assert c.verdict == v.REPRODUCED
    assert c.measured_text() == "+5.0 ± 2.0 (3 seeds)"


def test_rules_at_their_boundaries():
    # an interval ending exactly at 0 includes 0
    assert v.greater(est(0.02, 0.02, (0.01, 0.02, 0.03)))[0] == v.INCONCLUSIVE
    assert v.less(est(-0.02, 0.02, (-0.01, -0.02, -0.03)))[0] == v.INCONCLUSIVE
    # two seeds are enough for the rules, through the t interval on 1 dof (t = 12.706): seeds 0.10, 0.11 give
    # 0.105 ± 12.706 * 0.005 = ± 0.0635 -> excludes 0; seeds 0.01, 0.03 give 0.02 ± 0.127 -> includes 0
    assert v.greater(over_seeds([0.10, 0.11]))[0] == v.REPRODUCED
    assert v.greater(over_seeds([0.01, 0.03]))[0] == v.INCONCLUSIVE
    # "within": a point estimate of 0 inside the margin does not decide while the interval straddles it
    straddle = over_seeds([-0.01, 0.0, 0.01])  # 0 ± 4.303 * 0.01 / sqrt(3) = ± 0.0248
    assert straddle.ci95 == pytest.approx(4.302653 * 0.01 / 3 ** 0.5, rel=1e-6)
    assert v.within(straddle, 0.02)[0] == v.INCONCLUSIVE
    assert v.within(straddle, 0.025)[0] == v.REPRODUCED
    # an interval touching the margin is inside it
    assert v.within(est(0.01, 0.01, (0.0, 0.01, 0.02)), 0.02)[0] == v.REPRODUCED
    # equal: lists of other length never equal; ints and floats compare by value
    assert v.equal([1, 2], [1, 2, 3])[0] == v.NOT_REPRODUCED
    assert v.equal([1, 2, 3], [1, 2])[0] == v.NOT_REPRODUCED
    assert v.equal([[8, 8], [20, 25]], [[8.0, 8], [20, 25.0]])[0] == v.REPRODUCED
    assert v.equal(3, 3.0000001)[0] == v.NOT_REPRODUCED


def test_the_margin_is_stated_in_the_tables_unit():
    c = v.Claim("level", "ours matches", "T1", "62.55", "ours - paper", v.Expectation("within", margin=0.01),
                measured=est(0.03, 0.005, (0.025, 0.03, 0.035)))
    assert "±1 pts" in c.expect.rule(c.unit) and c.verdict == v.NOT_REPRODUCED
    assert c.reason == "the 95% interval lies outside ±1 pts"  # was "±0.01": a fraction beside points
    counts = v.Claim("n", "", "", "", "", v.Expectation("within", margin=2.0), unit=1.0,
                     measured=est(1.0, 0.5, (0.5, 1.0, 1.5)))
    assert counts.reason == "the 95% interval lies inside ±2"


def test_decisive_verdicts_need_the_false_discovery_adjusted_q():
    assert v.with_fdr(v.REPRODUCED, "r", 0.05) == (v.REPRODUCED, "r, q = 0.050 <= 0.05")
    assert v.with_fdr(v.REPRODUCED, "r", 0.0501)[0] == v.INCONCLUSIVE
    assert v.with_fdr(v.NOT_REPRODUCED, "r", 0.2)[0] == v.INCONCLUSIVE
    assert v.with_fdr(v.NOT_REPRODUCED, "r", 0.01)[0] == v.NOT_REPRODUCED
    assert v.with_fdr(v.REPRODUCED, "r", None)[0] == v.INCONCLUSIVE
    assert v.with_fdr(v.INCONCLUSIVE, "r", 0.001) == (v.INCONCLUSIVE, "r")
