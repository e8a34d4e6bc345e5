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
