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
    # 3 seeds: the 99% interval is the 95% one x t(0.995, 2) / t(0.975, 2) = 9.924843 / 4.302653 = 2.306680,
    # so a stored +-0.02 becomes +-0.046134
    assert v.within(est(0.01, 0.02, (0.0, 0.01, 0.02)), 0.06)[0] == v.REPRODUCED  # [-0.0361, 0.0561]
    assert v.within(est(0.10, 0.02, (0.09, 0.10, 0.11)), 0.05)[0] == v.NOT_REPRODUCED  # [0.0539, 0.1461]
    assert v.within(est(-0.10, 0.02, (-0.09, -0.10, -0.11)), 0.05)[0] == v.NOT_REPRODUCED
    assert v.within(est(0.04, 0.02, (0.03, 0.04, 0.05)), 0.05)[0] == v.INCONCLUSIVE  # straddles at 95% too
    # marginal: the 95% interval [0.06, 0.10] lies outside +-0.05, the 99% one [0.0339, 0.1261] does not
    verdict, reason = v.within(est(0.08, 0.02, (0.07, 0.08, 0.09)), 0.05)
    assert verdict == v.INCONCLUSIVE and reason.startswith("marginal")
    verdict, reason = v.within(est(0.01, 0.02, (0.0, 0.01, 0.02)), 0.05)  # 95% inside, 99% [-0.036, 0.056] not
    assert verdict == v.INCONCLUSIVE and reason.startswith("marginal")


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
    straddle = over_seeds([-0.01, 0.0, 0.01])  # 0 ± 4.303 * 0.01 / sqrt(3) = ± 0.0248; at 99%: ± 0.0573
    assert straddle.ci95 == pytest.approx(4.302653 * 0.01 / 3 ** 0.5, rel=1e-6)
    assert v.within(straddle, 0.02)[0] == v.INCONCLUSIVE
    assert v.within(straddle, 0.025) == (v.INCONCLUSIVE, "marginal: the 95% interval clears ±0.025, the 99% one "
                                                        "does not")
    assert v.within(straddle, 0.0572)[0] == v.INCONCLUSIVE  # 9.924843 * 0.01 / sqrt(3) = 0.057301
    assert v.within(straddle, 0.0574)[0] == v.REPRODUCED
    # the episode-error floor: identical seeds do not make a zero-width interval when their episodes are noisy
    flat = over_seeds([0.003, 0.003, 0.003], [0.0196] * 3, episodes=500)  # floor sd = 0.0196 / 1.96 = 0.01
    assert flat.sd == pytest.approx(0.0196 / 1.959964) and flat.ci95 == pytest.approx(4.302653 * 0.01 / 3 ** 0.5,
                                                                                     rel=1e-4)
    assert v.greater(flat)[0] == v.INCONCLUSIVE  # was "reproduced" with p = 0 from a zero spread
    # equal: lists of other length never equal; ints and floats compare by value
    assert v.equal([1, 2], [1, 2, 3])[0] == v.NOT_REPRODUCED
    assert v.equal([1, 2, 3], [1, 2])[0] == v.NOT_REPRODUCED
    assert v.equal([[8, 8], [20, 25]], [[8.0, 8], [20, 25.0]])[0] == v.REPRODUCED
    assert v.equal(3, 3.0000001)[0] == v.NOT_REPRODUCED


def test_the_margin_is_stated_in_the_tables_unit():
    c = v.Claim("level", "ours matches", "T1", "62.55", "ours - paper", v.Expectation("within", margin=0.01),
                measured=est(0.03, 0.005, (0.025, 0.03, 0.035)))
    assert "±1 pts" in c.expect.rule(c.unit) and c.verdict == v.NOT_REPRODUCED  # 99%: 0.03 ± 0.0115
    assert c.reason == "the 99% interval lies outside ±1 pts"  # was "±0.01": a fraction beside points
    counts = v.Claim("n", "", "", "", "", v.Expectation("within", margin=2.5), unit=1.0,
                     measured=est(1.0, 0.5, (0.5, 1.0, 1.5)))  # 99%: 1.0 ± 1.153
    assert counts.reason == "the 99% interval lies inside ±2.5"


def test_decisive_verdicts_need_the_false_discovery_adjusted_q():
    assert v.with_fdr(v.REPRODUCED, "r", 0.01) == (v.REPRODUCED, "r, q = 0.01 <= 0.01")
    assert v.with_fdr(v.REPRODUCED, "r", 0.0101) == (v.INCONCLUSIVE, "marginal: r, q = 0.010 <= 0.05 but > 0.01 "
                                                                     "(stability rule)")
    assert v.with_fdr(v.REPRODUCED, "r", 0.05)[0] == v.INCONCLUSIVE
    assert v.with_fdr(v.REPRODUCED, "r", 0.0501)[1].endswith("> 0.05 (Benjamini-Hochberg)")
    assert v.with_fdr(v.NOT_REPRODUCED, "r", 0.2)[0] == v.INCONCLUSIVE
    assert v.with_fdr(v.NOT_REPRODUCED, "r", 0.009)[0] == v.NOT_REPRODUCED
    assert v.with_fdr(v.REPRODUCED, "r", None)[0] == v.INCONCLUSIVE
    assert v.with_fdr(v.INCONCLUSIVE, "r", 0.001) == (v.INCONCLUSIVE, "r")
