"""Verdicts on a paper's claims, computed by stated rules from measured :class:`~studylib.evaluation.stats.Estimate`s.

Every notebook ends with a claims table; each row is a :class:`Claim` (what the paper says, where, and what
the study measures to test it) and its verdict comes from :func:`judge`, never from prose. The rules:

``greater`` (the paper says the measured effect is positive, e.g. "NCA beats PN": effect = NCA - PN)
    1. fewer than :data:`MIN_SEEDS` training seeds -> **inconclusive** (a difference needs training-seed
       variance; an episode CI of one run says nothing about it);
    2. the 95% interval includes 0 -> **inconclusive**;
    3. the seed spread (sample std of the per-seed effects, floored at the episode error:
       :attr:`~studylib.evaluation.stats.Estimate.sd`) exceeds the effect's size -> **inconclusive**;
    4. otherwise **reproduced** if the effect is positive, **not reproduced** if it is negative.
``less``
    the same with the sign flipped.
``within`` (the paper says two things are about equal, or our number should match the paper's: effect =
ours - paper, margin ``m`` in the effect's unit)
    fewer than :data:`MIN_SEEDS` seeds -> **inconclusive**; the whole 99% interval inside ``[-m, m]`` ->
    **reproduced**; the whole 99% interval outside it -> **not reproduced**; otherwise **inconclusive** (where
    the 95% interval alone clears the margin, the reason says "marginal").
``equal`` (a formula or a count, no training noise)
    **reproduced** if the measured value equals the expected one (floats to a relative 1e-9), else
    **not reproduced**.
Any claim whose test does not apply to this run (a number measured on miniImageNet, judged on generated
smoke data) is **not tested**, with the reason.

``figures/claims.md`` adds a multiplicity correction (:func:`with_fdr`): over the measured ``greater`` /
``less`` claims of one scale, a decisive verdict also needs its Benjamini-Hochberg q-value ``<= 0.05``.

**Marginal effects** (issue 19: a verdict is evidence only if another machine gives the same one). Rounding
differences between machines act like another training seed, and with 3 seeds a t statistic moves a lot from
one seed draw to the next: in a 1-thread against a 2-thread run of every notebook, nearly every directional
verdict decided at ``0.01 < q <= 0.05`` flipped (``benchmarks/verdict_stability.py``). So a decisive verdict
needs the stronger evidence of the 1% level: a directional one ``q <= STABLE_Q = 0.01`` (a q-value between
0.01 and 0.05 is reported as "inconclusive (marginal)"), a ``within`` one its 99% interval clear of the
margin. And no seed spread is trusted below the noise of the seed's own episodes (``Estimate.sd``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from studylib.evaluation.stats import Estimate, t_quantile

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
NOT_TESTED = "not tested"
NOT_RUN = "not run"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTED, NOT_RUN)
KINDS = ("greater", "less", "within", "equal")
MIN_SEEDS = 2


@dataclass(frozen=True)
class Expectation:
    """What the paper expects of the measured quantity: its ``kind`` (see the module docstring), the
    ``margin`` of a ``within`` claim, and the ``expected`` value of an ``equal`` claim."""

    kind: str
    margin: float = 0.0
    expected: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown claim kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.kind == "within" and not self.margin > 0:
            raise ValueError(f"a 'within' claim needs a positive margin, got {self.margin}")

    def rule(self, unit: float = 100.0, suffix: str = " pts") -> str:
        """The rule in words, for the claims table (margins shown in ``unit``)."""
        if self.kind == "greater":
            return "effect > 0 (95% CI over seeds excludes 0, spread < effect)"
        if self.kind == "less":
            return "effect < 0 (95% CI over seeds excludes 0, spread < effect)"
        if self.kind == "within":
            return f"99% CI inside ±{self.margin * unit:g}{suffix}"
        return f"equals {self.expected!r}"


def _directional(effect: Estimate, sign: int) -> tuple[str, str]:
    """Rules 1-4 of the module docstring for an expected sign of ``effect`` (+1 or -1)."""
    if effect.n_seeds < MIN_SEEDS:
        return INCONCLUSIVE, f"{effect.n_seeds} training seed(s); a difference needs at least {MIN_SEEDS}"
    if effect.lo <= 0.0 <= effect.hi:
        return INCONCLUSIVE, "the 95% interval includes 0"
    if effect.sd > abs(effect.value):
        return INCONCLUSIVE, "the seed spread exceeds the effect"
    expected, other = (">", "<") if sign > 0 else ("<", ">")
    if sign * effect.value > 0:
        return REPRODUCED, f"effect {expected} 0, interval excludes 0"
    return NOT_REPRODUCED, f"effect {other} 0, interval excludes 0"


def greater(effect: Estimate) -> tuple[str, str]:
    """Verdict and reason for a claim that ``effect`` is positive (rules 1-4 of the module docstring)."""
    return _directional(effect, +1)


def less(effect: Estimate) -> tuple[str, str]:
    """Verdict and reason for a claim that ``effect`` is negative."""
    return _directional(effect, -1)


def within(effect: Estimate, margin: float, unit: float = 1.0, suffix: str = "") -> tuple[str, str]:
    """Verdict for a claim that ``|effect| <= margin`` (an equivalence, or a match of the paper's number).

    ``margin`` is in the effect's own unit (a fraction for accuracies); ``unit`` and ``suffix`` only say it in
    the table's unit (``unit=100, suffix=" pts"`` writes a margin of 0.01 as ``±1 pts``). The point estimate
    alone never decides: an interval that straddles the margin is inconclusive.
    """
    if effect.n_seeds < MIN_SEEDS:
        return INCONCLUSIVE, f"{effect.n_seeds} training seed(s); a comparison needs at least {MIN_SEEDS}"
    m = f"±{margin * unit:g}{suffix}"
    h = effect.ci95 * _widen(effect.n_seeds)  # the stored 95% interval, widened to the 99% one
    lo, hi = effect.value - h, effect.value + h
    if -margin <= lo and hi <= margin:
        return REPRODUCED, f"the 99% interval lies inside {m}"
    if lo > margin or hi < -margin:
        return NOT_REPRODUCED, f"the 99% interval lies outside {m}"
    if (-margin <= effect.lo and effect.hi <= margin) or effect.lo > margin or effect.hi < -margin:
        return INCONCLUSIVE, f"marginal: the 95% interval clears {m}, the 99% one does not"
    return INCONCLUSIVE, f"the 95% interval straddles {m}"


def _widen(n_seeds: int) -> float:
    """The factor from a 95% to a :data:`STABLE_LEVEL` interval: Student's t with ``n - 1`` dof, or the normal
    quantiles for one seed (its episode interval)."""
    dof = n_seeds - 1 if n_seeds >= 2 else math.inf
    return t_quantile(STABLE_LEVEL, dof) / t_quantile(0.95, dof)


def equal(measured: Any, expected: Any) -> tuple[str, str]:
    """Verdict for a deterministic claim (a formula, a count)."""
    if _equal(measured, expected):
        return REPRODUCED, "equal"
    return NOT_REPRODUCED, f"measured {measured!r}, expected {expected!r}"


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_equal(x, y) for x, y in zip(a, b)))
    if isinstance(a, (float, np.floating)) or isinstance(b, (float, np.floating)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def judge(expect: Expectation, measured: Any, applies: bool = True, why_not: str = "",
          unit: float = 1.0) -> tuple[str, str]:
    """The verdict of a claim: ``(verdict, reason)`` by the rule of ``expect.kind`` (``unit``: the factor
    the reason states a ``within`` margin in, as the table shows the effect)."""
    if not applies:
        return NOT_TESTED, why_not or "the test does not apply to this run"
    if measured is None:
        return NOT_RUN, "no measurement yet"
    if expect.kind == "equal":
        return equal(measured, expect.expected)
    if not isinstance(measured, Estimate):
        raise TypeError(f"a {expect.kind!r} claim needs an Estimate, got {type(measured).__name__}")
    if expect.kind == "greater":
        return greater(measured)
    if expect.kind == "less":
        return less(measured)
    return within(measured, expect.margin, unit, " pts" if unit == 100.0 else "")


FDR_ALPHA = 0.05  # Benjamini-Hochberg false-discovery rate over the directional claims of one scale
STABLE_Q = 0.01  # marginal-effects rule: a decisive directional verdict needs q <= this (module docstring)
STABLE_LEVEL = 0.99  # ... and a decisive 'within' verdict its interval at this level clear of the margin


def with_fdr(verdict: str, reason: str, q: float | None) -> tuple[str, str]:
    """A directional verdict after the multiplicity correction: a decisive verdict (reproduced or not
    reproduced) also needs its Benjamini-Hochberg q-value ``<= FDR_ALPHA``, and by the marginal-effects rule
    ``<= STABLE_Q``; otherwise it is inconclusive (the reason says which)."""
    if verdict not in (REPRODUCED, NOT_REPRODUCED):
        return verdict, reason
    if q is None:
        return INCONCLUSIVE, f"{reason}, but no q-value (no t-test over seeds)"
    if q > FDR_ALPHA:
        return INCONCLUSIVE, f"{reason}, but q = {q:.3f} > {FDR_ALPHA:g} (Benjamini-Hochberg)"
    if q > STABLE_Q:
        return INCONCLUSIVE, f"marginal: {reason}, q = {q:.3f} <= {FDR_ALPHA:g} but > {STABLE_Q:g} (stability rule)"
    return verdict, f"{reason}, q = {q:.3g} <= {STABLE_Q:g}"


@dataclass
class Claim:
    """One row of a claims table.

    Attributes:
        id: short stable key (``"appD-nc-vs-soft-5shot"``), unique within a notebook.
        claim: the paper's claim in words.
        source: where the paper makes it (``"Table 2"``, ``"Fig. 2"``, ``"Sec. 3.2"``).
        paper: the paper's number(s) as text, or ``""`` for a qualitative claim.
        test: what the study measures, in words (``"NC - soft assignment, 5-shot, paired episodes"``).
        expect: the rule (:class:`Expectation`).
        measured: an :class:`Estimate` (or the value of an ``equal`` claim); None until measured.
        applies: False when this run cannot test the claim; ``why_not`` says why.
        unit: the factor the table shows ``measured`` in (100 for accuracies, 1 for counts).
    """

    id: str
    claim: str
    source: str
    paper: str
    test: str
    expect: Expectation
    measured: Any = None
    applies: bool = True
    why_not: str = ""
    unit: float = 100.0
    signed: bool = field(default=True)

    @property
    def verdict(self) -> str:
        return judge(self.expect, self.measured, self.applies, self.why_not, self.unit)[0]

    @property
    def reason(self) -> str:
        return judge(self.expect, self.measured, self.applies, self.why_not, self.unit)[1]

    def measured_text(self) -> str:
        if self.measured is None:
            return ""
        if isinstance(self.measured, Estimate):
            n = self.measured.n_seeds
            return f"{self.measured.fmt(self.unit, signed=self.signed)} ({n} seed{'s' if n != 1 else ''})"
        return str(self.measured)
