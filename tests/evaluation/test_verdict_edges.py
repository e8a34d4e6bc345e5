"""Every verdict rule at its threshold (issue 42): an adjusted p of exactly 0.01 decides and the next float above
it does not; 0.05 is the last marginal value; and the adjustment of a compound (all-of) claim's branches, computed
by hand here from Holm's step-down with Shaffer's bound (verdicts.py's docstring), not by the code under test."""

from __future__ import annotations

import math

import pytest

from studylib.evaluation import verdicts as v
from studylib.evaluation.stats import AllOf, over_seeds

JUST_ABOVE = math.nextafter(v.DECIDE_ALPHA, 1.0)
UP = over_seeds([0.05, 0.051, 0.049])  # an effect on the paper's side of a "greater" claim
DOWN = over_seeds([-0.05, -0.051, -0.049])


def decide(kind: str, effect, adj: dict[str, float], **kw) -> v.Judgement:
    """_decide with the adjusted p-values given (raw = adjusted: a family of one)."""
    e = v.Expectation(kind, **kw)
    return v._decide(e, effect, dict(adj), dict(adj), 100.0, 1)


@pytest.mark.parametrize("kind, effect, tests, decided_as", [
    ("greater", UP, {"difference": None, "no effect": 1.0}, "reproduced"),
    ("greater", DOWN, {"difference": None, "no effect": 1.0}, "not reproduced (reversed)"),
    ("less", DOWN, {"difference": None, "no effect": 1.0}, "reproduced"),
    ("greater", UP, {"difference": 1.0, "no effect": None}, "not reproduced (no effect)"),
    ("noninferior", UP, {"non-inferior": None, "inferior": 1.0}, "reproduced"),
    ("noninferior", DOWN, {"non-inferior": 1.0, "inferior": None}, "not reproduced"),
    ("within", UP, {"inside": None, "outside": 1.0}, "reproduced"),
    ("within", UP, {"inside": 1.0, "outside": None}, "not reproduced"),
])
def test_an_adjusted_p_of_exactly_one_percent_decides_and_just_above_it_is_marginal(kind, effect, tests, decided_as):
    kw = {"margin": 0.03} if kind in ("noninferior", "within") else {}
    at = decide(kind, effect, {t: (v.DECIDE_ALPHA if p is None else p) for t, p in tests.items()}, **kw)
    assert at.label == decided_as and at.p_adj == 0.01
    above = decide(kind, effect, {t: (JUST_ABOVE if p is None else p) for t, p in tests.items()}, **kw)
    assert above.verdict == v.INCONCLUSIVE and above.label == "inconclusive (marginal)"
    last = decide(kind, effect, {t: (v.MARGINAL_ALPHA if p is None else p) for t, p in tests.items()}, **kw)
    assert last.label == "inconclusive (marginal)"
    past = decide(kind, effect, {t: (math.nextafter(v.MARGINAL_ALPHA, 1.0) if p is None else p)
                                 for t, p in tests.items()}, **kw)
    assert past.label == "inconclusive"


def test_the_band_wins_at_the_threshold_too():
    """Both the difference and the no-effect test at exactly 0.01: a real effect smaller than the band reads "no
    effect" (the band is the claim's smallest meaningful effect)."""
    j = decide("greater", UP, {"difference": 0.01, "no effect": 0.01})
    assert j.label == "not reproduced (no effect)" and "real" in j.reason
    j = decide("greater", UP, {"difference": 0.01, "no effect": JUST_ABOVE})
    assert j.label == "reproduced"


def _holm_shaffer(tests: list[tuple[object, float]]) -> list[float]:
    """The adjustment written out the slow way: sort, multiply the j-th smallest p by the number of distinct
    members with a test at or after it, running maximum, capped at 1."""
    order = sorted(range(len(tests)), key=lambda i: (tests[i][1], i))
    out = [0.0] * len(tests)
    running = 0.0
    for j, i in enumerate(order):
        later = {tests[k][0] for k in order[j:]}
        running = max(running, min(1.0, len(later) * tests[i][1]))
        out[i] = running
    return out


def test_family_adjust_by_hand_with_a_compound_claims_three_tests_as_members_of_their_own():
    # claim 0: a plain directional claim (two tests, one member); claim 1: an all-of claim whose three tests
    # each count as a member (their nulls are not exclusive)
    tests = [(0, 0.004), (0, 0.5), ((1, "all shown"), 1.0), ((1, "one reversed"), 0.006), ((1, "no effect"), 0.9)]
    # sorted: 0.004 (4 members at or after it), 0.006 (4), 0.5 (3), 0.9 (2), 1.0 (1)
    by_hand = [0.016, 1.0, 1.0, 0.024, 1.0]
    assert v.family_adjust(tests) == pytest.approx(by_hand)
    assert _holm_shaffer(tests) == pytest.approx(by_hand)


def _family(compound, plain=UP):
    e3 = v.Expectation("greater", parts=3)
    return [v.Claim("plain", "", "", "", "", v.Expectation("greater"), plain),
            v.Claim("all", "", "", "", "", e3, compound)]


def test_a_compound_claim_with_one_part_reversed_is_adjusted_as_three_members():
    """The all-of claim with its third effect reversed: "one reversed" = 3 x that effect's two-sided p
    (Bonferroni over the parts), "all shown" = 1 (not every effect is on the paper's side), "no effect" = the
    largest TOST p of the parts; then Holm-Shaffer over the plain claim (one member) and these three."""
    parts = (over_seeds([0.05, 0.052, 0.048, 0.05]), over_seeds([0.04, 0.043, 0.037, 0.04]),
             over_seeds([-0.03, -0.036, -0.024, -0.03]))
    plain = over_seeds([0.02, 0.03, 0.01, 0.02])
    g = v.Expectation("greater")
    each = [v.claim_tests(g, e) for e in parts]
    raw_plain = v.claim_tests(g, plain)
    raw_all = {"all shown": 1.0, "one reversed": min(1.0, 3 * each[2]["difference"]),
               "no effect": max(t["no effect"] for t in each)}
    assert v.claim_tests(v.Expectation("greater", parts=3), AllOf(parts)) == pytest.approx(raw_all)
    tests = [(0, raw_plain["difference"]), (0, raw_plain["no effect"])] + [((1, k), p) for k, p in raw_all.items()]
    adj = _holm_shaffer(tests)
    j = v.judge_family(_family(AllOf(parts), plain))
    assert j["plain"].p_adj == pytest.approx(adj[0])
    assert (j["all"].test, j["all"].p_adj) == ("one reversed", pytest.approx(adj[3]))
    assert j["all"].label == ("not reproduced (reversed)" if adj[3] <= 0.01 else
                              "inconclusive (marginal)" if adj[3] <= 0.05 else "inconclusive")
    assert j["all"].family == 2


def test_a_compound_claim_not_measured_keeps_its_three_members_at_p_one():
    """An all-of claim without a measurement (its run missing) stays in the family with its weight fixed in
    advance: three members at p = 1, so the plain claim's difference p is multiplied by 4 (by hand: Holm's first
    step over 4 members), not by 1."""
    plain = over_seeds([0.02, 0.03, 0.01, 0.02])
    raw = v.claim_tests(v.Expectation("greater"), plain)
    j = v.judge_family(_family(None, plain))
    first = min(raw.values())
    assert j["plain"].p_adj == pytest.approx(min(1.0, 4 * first))
    assert j["all"].verdict == v.NOT_RUN


def test_a_compound_claim_with_a_part_missing_is_refused():
    """Two effects measured where the claim is about three: no test (its weight was fixed at three)."""
    with pytest.raises(ValueError, match="3 effects"):
        v.judge_family(_family(AllOf((UP, UP))))
