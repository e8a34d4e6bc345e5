"""Verdicts on a paper's claims, computed by stated rules from measured :class:`~studylib.evaluation.stats.Estimate`s.

Every notebook ends with a claims table; each row is a :class:`Claim` (what the paper says, where, and what the
study measures to test it). Its verdict comes from :func:`judge_family`, the one judgement that the notebook's
table, ``figures/claims.md`` and the README all show (issue 27): the same verdict, p and adjusted p.

**Each claim is a pair of tests that can decide both ways** (one-sample t statistics over the per-seed values,
the seed spread floored at each seed's own measurement noise, :attr:`~studylib.evaluation.stats.Estimate.sd`,
referred to Student's t with ``n - 1`` degrees of freedom: the floor only shrinks the statistic, so the tests
are conservative, exact where the training noise dominates the floor):

``greater`` / ``less`` (the paper says the effect is positive / negative; e.g. effect = NCA - PN)
    * the **difference** test, H0: effect = 0, **two-sided**: a result on either side is a finding, so the
      test must be able to reject on either side; rejected on the paper's side -> *reproduced*, on the other
      side -> *not reproduced (reversed)*;
    * the **no-effect** (equivalence) test, H0: \\|effect\\| >= delta, two one-sided tests (TOST): rejected ->
      *not reproduced (no effect)*: the effect lies inside the claim's band ``±delta``, the smallest effect
      the claim is about (stated per claim where the paper implies one, e.g. half the paper's gap; otherwise
      :data:`DEFAULT_DELTA` for accuracies; a claim in another unit without a stated band has no such test).
      Where both tests reject (a real effect smaller than delta), the band wins: the claim's effect is not there.
      So a true effect between 0 and delta can read *reproduced* with few seeds and *no effect* with many: the
      band is the claim's smallest meaningful effect, and only the latter reading is the claim as meant.
    * a claim about every one of several effects (:class:`~studylib.evaluation.stats.AllOf`, "0.3 beats 0.1, 0.5
      and 0.7") is an intersection-union test: *reproduced* when every effect's difference test rejects on the
      paper's side (p = the largest of their p-values), *reversed* when one rejects on the other side (Bonferroni
      over them), *no effect* when every effect lies inside the band (the largest TOST p). Its three nulls are
      not exclusive, so each of its tests counts as a member of its own in the family.
``noninferior`` (the paper says A is competitive with B, effect = A - B, margin ``m``)
    * one-sided H0: effect < -m, rejected -> *reproduced* (A is at most m worse);
    * one-sided H0: effect >= -m, rejected -> *not reproduced* (A is worse by more than m). NCA being much
      better than B is a reproduction of "competitive", not a failure.
``within`` (our number should match the paper's, or two things are about equal: effect = ours - paper)
    * TOST, H0: \\|effect\\| > m, rejected -> *reproduced*;
    * H0: \\|effect\\| <= m (two one-sided tests, the smaller p doubled), rejected -> *not reproduced*.
``equal`` (a formula or a count, no training noise)
    *reproduced* if the measured value equals the expected one (floats to a relative 1e-9), else *not
    reproduced*; no test, no family.

**A family fixed in advance** (:func:`family_adjust`). The family of a claim is its notebook's listing at the
scale's parameters: every claim of the table that applies (all kinds but ``equal``), measured or not, so its
size is known before anything runs and a claim's adjusted p never depends on what other notebooks ran. A claim
that is not measured (not run, one seed, or a failed regime check) stays in the family with p = 1. Many
contrasts share runs (an ablation's steps, full-vs-baseline), so no independence is assumed: the adjustment is
Holm's step-down, which controls the family-wise error rate under any dependence, over the family's tests. Each
claim has two tests, and at most one of its two null hypotheses is true (exactly one for ``noninferior`` and
``within``, whose nulls partition the line: effect < -m or >= -m; \\|effect\\| > m or <= m; for a directional
claim neither is true when 0 < \\|effect\\| < delta). So when the first true null is rejected, every true null
is still among the tests not yet passed, one per claim, and Holm's argument holds with the number of claims
instead of tests (Shaffer's refinement, 1986): step ``j`` multiplies the ``j``-th smallest p by the number of
claims with a test at or after it.

**Decisive at 1%**: a verdict is decided when the adjusted p of its test is ``<= DECIDE_ALPHA = 0.01``;
``0.01 < p_adj <= 0.05`` reads *inconclusive (marginal)*. The 1% level is the stability rule of issue 19: at 5%,
1-thread and 2-thread runs of the study (floating-point rounding acts as another seed) disagreed on many
verdicts (``benchmarks/verdict_stability.py``).

**Preconditions.** A claim whose test does not apply to this run is *not tested*, with the reason; so is a claim
measured on one training seed (no interval over seeds, no verdict), one whose seeds agree exactly with no floor
stated (no spread: a t statistic would be infinite), and a claim whose **regime check** failed
(:class:`Regime`: the trained model did not reach the regime the claim is about, e.g. BECLR's pretraining did
not beat its random encoder), with the check that failed. Such claims never read "inconclusive" or a lead
against the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from studylib.evaluation.stats import AllOf, Estimate, t_cdf

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
NOT_TESTED = "not tested"
NOT_RUN = "not run"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTED, NOT_RUN)
DIRECTIONAL = ("greater", "less")
KINDS = ("greater", "less", "noninferior", "within", "equal")
MIN_SEEDS = 2
DECIDE_ALPHA = 0.01  # a decisive verdict needs its family-adjusted p <= this (the stability rule)
MARGINAL_ALPHA = 0.05  # 0.01 < p_adj <= 0.05: "inconclusive (marginal)"
DEFAULT_DELTA = 0.01  # the no-effect band of a directional accuracy claim (a fraction: ±1 point) unless stated
ONE_SEED = "1 seed: no interval over seeds, no verdict"
NO_SPREAD = "no spread: the seeds agree exactly and no floor is stated, so no t statistic exists"


@dataclass(frozen=True)
class Expectation:
    """What the paper expects of the measured quantity.

    Attributes:
        kind: ``greater``, ``less``, ``noninferior``, ``within`` or ``equal`` (the module docstring).
        margin: the margin ``m`` of a ``within`` or ``noninferior`` claim, in the effect's unit.
        expected: the value of an ``equal`` claim.
        delta: the no-effect band of a directional claim, in the effect's unit; None: :data:`DEFAULT_DELTA` for
            accuracies (``unit == 100``), no band otherwise.
        why_delta: where a stated band comes from ("half the paper's gap of 0.50 pts").
        parts: how many effects a directional claim is about together (> 1: it is measured as an
            :class:`~studylib.evaluation.stats.AllOf` of that many; known before anything runs, so the claim's
            weight in its family is too).
    """

    kind: str
    margin: float = 0.0
    expected: Any = None
    delta: float | None = None
    why_delta: str = ""
    parts: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown claim kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.kind in ("within", "noninferior") and not self.margin > 0:
            raise ValueError(f"a {self.kind!r} claim needs a positive margin, got {self.margin}")
        if self.parts < 1 or (self.parts > 1 and self.kind not in DIRECTIONAL):
            raise ValueError(f"a claim about several effects (parts={self.parts}) must be directional and have "
                             f"parts >= 1; got a {self.kind!r} claim")
        if self.delta is not None and not (self.kind in DIRECTIONAL and self.delta > 0):
            raise ValueError(f"a no-effect band (delta) is for directional claims and positive, got {self.delta} "
                             f"on a {self.kind!r} claim")

    def band(self, unit: float = 100.0) -> float | None:
        """The no-effect band of a directional claim (None: none; see ``delta``)."""
        if self.kind not in DIRECTIONAL:
            return None
        if self.delta is not None:
            return self.delta
        return DEFAULT_DELTA if unit == 100.0 else None

    def rule(self, unit: float = 100.0, suffix: str | None = None) -> str:
        """The rule in words, for the claims table (margins shown in ``unit``)."""
        suffix = (" pts" if unit == 100.0 else "") if suffix is None else suffix
        if self.kind in DIRECTIONAL:
            sign = ">" if self.kind == "greater" else "<"
            band = self.band(unit)
            eq = f"; no effect if inside ±{band * unit:g}{suffix}" if band is not None else ""
            return f"effect {sign} 0 (two-sided t over seeds{eq}; Holm-adjusted p <= {DECIDE_ALPHA:g})"
        if self.kind == "noninferior":
            return f"effect > -{self.margin * unit:g}{suffix} (one-sided t over seeds; Holm-adjusted p <= {DECIDE_ALPHA:g})"
        if self.kind == "within":
            return f"inside ±{self.margin * unit:g}{suffix} (equivalence t over seeds; Holm-adjusted p <= {DECIDE_ALPHA:g})"
        return f"equals {self.expected!r}"


def beats(kind: str = "greater", paper_gap: float | None = None) -> Expectation:
    """A directional expectation whose no-effect band comes from the paper's own effect ``paper_gap`` (in the
    effect's unit, a fraction for accuracies): half of it, at most :data:`DEFAULT_DELTA`, so that a faithful
    reproduction of the paper's effect reads "no effect" only as a type I error (probability at most the level;
    NCA vs PN at 5 shots: 78.27 - 77.77 = 0.50 pts, band ±0.25 pts)."""
    if paper_gap is None or abs(paper_gap) / 2 >= DEFAULT_DELTA or paper_gap == 0:
        return Expectation(kind)
    return Expectation(kind, delta=abs(paper_gap) / 2, why_delta=f"half the paper's effect of {abs(paper_gap) * 100:.2f} pts")


@dataclass(frozen=True)
class Regime:
    """A check that a trained model reached the regime a claim is about (issue 31), shown above the claims table.

    Attributes:
        name: what is checked ("NCA beats its untrained network by >= 5 pts (1-shot)").
        passed: True, False, or None when it could not be measured (treated as not passed).
        detail: the measurement behind it ("+18.2 ± 3.1 pts over 10 seeds; lower 95% bound 15.1 >= 5").
        claims: the ids of the claims it gates: while it is not passed they read "not tested".
    """

    name: str
    passed: bool | None
    detail: str
    claims: tuple[str, ...]

    @classmethod
    def at_least(cls, name: str, effect: Estimate | None, bound: float, claims: Iterable[str],
                 unit: float = 100.0, suffix: str = " pts") -> "Regime":
        """Passed when the lower end of the 95% interval over seeds of ``effect`` is at least ``bound`` (in the
        effect's unit): the regime is shown, not merely suggested by a point estimate."""
        claims = tuple(claims)
        if effect is None:
            return cls(name, None, "not measured", claims)
        lo = effect.value - effect.ci95
        ok = bool(effect.n_seeds >= MIN_SEEDS and lo >= bound)
        detail = (f"{effect.fmt(unit, signed=True)}{suffix} over {effect.n_seeds} seed(s); lower 95% bound "
                  f"{lo * unit:+.1f} {'>=' if ok else '<'} {bound * unit:g}{suffix}")
        if effect.n_seeds < MIN_SEEDS:
            detail += f" ({ONE_SEED})"
        return cls(name, ok, detail, claims)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail, "claims": list(self.claims)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Regime":
        return cls(str(d["name"]), d.get("passed"), str(d.get("detail", "")), tuple(d.get("claims", ())))


@dataclass(frozen=True)
class Judgement:
    """The verdict of one claim in its family.

    Attributes:
        verdict: one of :data:`VERDICTS`.
        reason: why, in words.
        label: the verdict as shown ("not reproduced (no effect)", "inconclusive (marginal)").
        test: the test ``p`` and ``p_adj`` belong to ("difference", "no effect", "non-inferior", ...).
        p: its raw p-value (two-sided for the difference test).
        p_adj: its family-adjusted p-value (Holm-Shaffer over the notebook's family).
        family: the size of the family it was adjusted in (claims).
    """

    verdict: str
    reason: str
    label: str = ""
    test: str = ""
    p: float | None = None
    p_adj: float | None = None
    family: int = 0

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.verdict)


# -- the tests of one claim ------------------------------------------------------------------------------------
def _t(effect: Estimate, null: float) -> float:
    """t statistic of the per-seed values against ``null`` (the spread floored: Estimate.sd); +-inf when the
    spread is 0 and the mean differs from ``null``."""
    se = effect.sd / math.sqrt(effect.n_seeds)
    d = effect.value - null
    if se == 0.0:
        return 0.0 if d == 0.0 else math.copysign(math.inf, d)
    return d / se


def p_above(effect: Estimate, null: float) -> float:
    """One-sided p of H0: effect <= ``null`` (small when the effect is clearly above it)."""
    return 1.0 - t_cdf(_t(effect, null), effect.n_seeds - 1)


def p_below(effect: Estimate, null: float) -> float:
    """One-sided p of H0: effect >= ``null`` (small when the effect is clearly below it)."""
    return t_cdf(_t(effect, null), effect.n_seeds - 1)


def claim_tests(expect: Expectation, effect: Estimate | AllOf, unit: float = 100.0) -> dict[str, float]:
    """The raw p-values of a claim's tests (module docstring), by name; the first is the claim's primary test.

    ``effect`` needs at least :data:`MIN_SEEDS` seeds."""
    if effect.n_seeds < MIN_SEEDS:
        raise ValueError(f"a test over seeds needs at least {MIN_SEEDS} seeds, got {effect.n_seeds}")
    k = expect.kind
    band = expect.band(unit)
    if isinstance(effect, AllOf):  # an intersection-union test over every effect
        if k not in DIRECTIONAL:
            raise ValueError(f"an {k!r} claim cannot be about several effects (AllOf)")
        if len(effect.effects) != expect.parts:
            raise ValueError(f"the claim is about {expect.parts} effects (parts), measured {len(effect.effects)}")
        sign = 1 if k == "greater" else -1
        two = [(e, claim_tests(Expectation(k, delta=expect.delta), e, unit)) for e in effect.effects]
        toward = all(sign * e.value > 0 for e, _ in two)
        against = [t["difference"] for e, t in two if sign * e.value < 0]
        out = {"all shown": max(t["difference"] for _, t in two) if toward else 1.0,
               "one reversed": min(1.0, len(two) * min(against)) if against else 1.0}
        if band is not None:
            out["no effect"] = max(t["no effect"] for _, t in two)
        return out
    if expect.parts > 1:
        raise ValueError(f"the claim is about {expect.parts} effects together: measure it as an AllOf")
    if k in DIRECTIONAL:
        out = {"difference": min(1.0, 2.0 * min(p_above(effect, 0.0), p_below(effect, 0.0)))}
        if band is not None:
            out["no effect"] = max(p_above(effect, -band), p_below(effect, band))
        return out
    if k == "noninferior":
        return {"non-inferior": p_above(effect, -expect.margin), "inferior": p_below(effect, -expect.margin)}
    if k == "within":
        m = expect.margin
        return {"inside": max(p_above(effect, -m), p_below(effect, m)),
                "outside": min(1.0, 2.0 * min(p_above(effect, m), p_below(effect, -m)))}
    raise ValueError(f"an {k!r} claim has no test over seeds")


def family_adjust(tests: Sequence[tuple[int, float]]) -> list[float]:
    """Holm's step-down with Shaffer's bound, for families whose members each carry one or more tests of which at
    most one null hypothesis can be true (module docstring).

    Args:
        tests: ``(member, p)`` per test; ``member`` identifies the claim the test belongs to.

    Returns:
        the adjusted p-values in the input order: with the p-values sorted ascending, ``p_adj_(j) = max_{i <= j}
        min(1, d_i p_(i))``, ``d_i`` the number of members with a test at position ``i`` or later (the multiplier
        of step ``i``). With one test per member this is Holm's adjustment (``d_i = N - i + 1``).
    """
    p = [float(x) for _, x in tests]
    if any(not (0.0 <= x <= 1.0) for x in p):
        raise ValueError(f"p-values must lie in [0, 1], got {p}")
    order = sorted(range(len(p)), key=lambda i: (p[i], i))
    remaining: list[int] = [0] * len(p)
    seen: set[Any] = set()
    for j in reversed(range(len(order))):
        seen.add(tests[order[j]][0])
        remaining[j] = len(seen)
    adj = [0.0] * len(p)
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, remaining[j] * p[i]))
        adj[i] = running
    return adj


# -- one claim's verdict from its adjusted tests ---------------------------------------------------------------
def _fmt_p(x: float) -> str:
    return f"{x:.3g}" if x >= 0.001 else f"{x:.1e}"


def _fmt(x: float, unit: float, sign: str = "") -> str:
    return f"{x * unit:{sign}.3g}" + (" pts" if unit == 100.0 else "")


def _decide(expect: Expectation, effect: Estimate | AllOf, raw: dict[str, float], adj: dict[str, float], unit: float,
            family: int) -> Judgement:
    """The verdict of a measured claim from its raw and adjusted p-values (module docstring)."""
    def j(verdict: str, reason: str, test: str, label: str = "") -> Judgement:
        return Judgement(verdict, reason, label, test, raw[test], adj[test], family)

    k = expect.kind
    at = f"p_adj <= {DECIDE_ALPHA:g}"
    best = min(adj, key=lambda t: (adj[t], list(adj).index(t)))  # the claim's test closest to deciding
    if k in DIRECTIONAL:
        band = expect.band(unit)
        shown = effect.worst if isinstance(effect, AllOf) else effect
        toward = (shown.value > 0) == (k == "greater")
        up, rev = ("all shown", "one reversed") if isinstance(effect, AllOf) else ("difference", "difference")
        if "no effect" in adj and adj["no effect"] <= DECIDE_ALPHA:
            real = (f"; the effect is real (p_adj = {_fmt_p(min(adj[up], adj[rev]))}) but smaller than the claim's "
                    "band" if min(adj[up], adj[rev]) <= DECIDE_ALPHA else "")
            what = "every estimate" if isinstance(effect, AllOf) else f"the estimate {_fmt(shown.value, unit, '+')}"
            return j(NOT_REPRODUCED, f"no effect: {what} lies inside ±{_fmt(band, unit)} ({at}){real}",
                     "no effect", f"{NOT_REPRODUCED} (no effect)")
        if adj[up] <= DECIDE_ALPHA and (isinstance(effect, AllOf) or toward):
            return j(REPRODUCED, ("every effect " if isinstance(effect, AllOf) else "effect ")
                     + f"{'>' if k == 'greater' else '<'} 0 ({at})", up)
        if adj[rev] <= DECIDE_ALPHA and (isinstance(effect, AllOf) or not toward):
            return j(NOT_REPRODUCED, ("reversed: an effect " if isinstance(effect, AllOf) else "reversed: effect ")
                     + f"{'<' if k == 'greater' else '>'} 0 ({at})", rev, f"{NOT_REPRODUCED} (reversed)")
        if adj[best] <= MARGINAL_ALPHA:
            side = "no effect" if best == "no effect" else ("as the paper says" if toward else "against the paper")
            return j(INCONCLUSIVE, f"marginal: the '{best}' test has {at.replace('<=', '>')} but <= "
                     f"{MARGINAL_ALPHA:g} ({side})", best, f"{INCONCLUSIVE} (marginal)")
        return j(INCONCLUSIVE, f"neither a difference nor no effect shown (smallest p_adj {_fmt_p(adj[best])})"
                 + ("" if band is not None else "; no no-effect band stated for this unit"), best)
    yes, no = ("non-inferior", "inferior") if k == "noninferior" else ("inside", "outside")
    m = _fmt(expect.margin, unit)
    if adj[yes] <= DECIDE_ALPHA:
        return j(REPRODUCED, (f"no worse than -{m}" if k == "noninferior" else f"inside ±{m}") + f" ({at})", yes)
    if adj[no] <= DECIDE_ALPHA:
        return j(NOT_REPRODUCED, (f"worse by more than {m}" if k == "noninferior" else f"outside ±{m}") + f" ({at})",
                 no)
    if adj[best] <= MARGINAL_ALPHA:
        return j(INCONCLUSIVE, f"marginal: the '{best}' test has {at.replace('<=', '>')} but <= {MARGINAL_ALPHA:g}",
                 best, f"{INCONCLUSIVE} (marginal)")
    shown_as = f"no worse than -{m}" if k == "noninferior" else f"inside ±{m}"
    return j(INCONCLUSIVE, f"neither {shown_as} nor the opposite shown at {at} (p_adj = {_fmt_p(adj[yes])})", yes)


def equal(measured: Any, expected: Any) -> Judgement:
    """The verdict of a deterministic claim (a formula, a count)."""
    if _equal(measured, expected):
        return Judgement(REPRODUCED, "equal")
    return Judgement(NOT_REPRODUCED, f"measured {measured!r}, expected {expected!r}")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_equal(x, y) for x, y in zip(a, b)))
    if isinstance(a, (float, np.floating)) or isinstance(b, (float, np.floating)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _spread(m: Estimate | AllOf) -> float:
    """The floored per-seed spread a test divides by (the smallest of an AllOf's)."""
    return min(e.sd for e in m.effects) if isinstance(m, AllOf) else m.sd


# -- a family ---------------------------------------------------------------------------------------------------
def judge_family(claims: Sequence["Claim"], regimes: Sequence[Regime] = (),
                 same_as: dict[str, str] | None = None) -> dict[str, Judgement]:
    """The verdict of every claim of one family (one notebook's table at one scale; module docstring).

    Args:
        claims: the family's claims, measured or not (their ``applies`` says which belong to the family).
        regimes: the notebook's regime checks; a claim gated by one that did not pass is not tested.
        same_as: ``{alias id: canonical id}`` for claims of this family that measure the same thing as another
            of its claims (the claim registry's aliases within one notebook): an alias with the canonical's
            per-seed values takes its judgement and does not enlarge the family.

    Returns:
        ``{claim id: Judgement}``.
    """
    same_as = same_as or {}
    by_id = {c.id: c for c in claims}
    gate: dict[str, Regime] = {}
    for r in regimes:
        if r.passed is not True:
            for cid in r.claims:
                gate.setdefault(cid, r)
    out: dict[str, Judgement] = {}
    members: list[str] = []
    tests: list[tuple[int, float]] = []
    names: list[str] = []
    raws: dict[str, dict[str, float]] = {}
    for c in claims:
        if not c.applies:
            out[c.id] = Judgement(NOT_TESTED, c.why_not or "the test does not apply to this run")
            continue
        if c.expect.kind == "equal":
            out[c.id] = (Judgement(NOT_RUN, "no measurement yet") if c.measured is None
                         else equal(c.measured, c.expect.expected))
            continue
        canon = by_id.get(same_as.get(c.id, ""))
        if (canon is not None and canon.applies and isinstance(c.measured, Estimate)
                and isinstance(canon.measured, Estimate) and c.measured.seeds == canon.measured.seeds):
            continue  # judged as its canonical below
        if c.measured is not None and not isinstance(c.measured, (Estimate, AllOf)):
            raise TypeError(f"claim {c.id!r}: a {c.expect.kind!r} claim needs an Estimate, got "
                            f"{type(c.measured).__name__}")
        i = len(members)
        members.append(c.id)
        measured = (isinstance(c.measured, (Estimate, AllOf)) and c.measured.n_seeds >= MIN_SEEDS
                    and c.id not in gate and _spread(c.measured) > 0)
        raw = claim_tests(c.expect, c.measured, c.unit) if measured else None
        # a claim about several effects: its tests' nulls are not exclusive, each counts as a member of its own
        several = ["all shown", "one reversed"] + (["no effect"] if c.expect.band(c.unit) is not None else [])
        if raw is None:  # in the family all the same, with p = 1 (its weight is fixed in advance)
            keys = [(i, t) for t in several] if c.expect.parts > 1 else [i, i]
            tests += [(key, 1.0) for key in keys]
            names += [""] * len(keys)
        else:
            raws[c.id] = raw
            for name, p in raw.items():
                tests.append(((i, name) if c.expect.parts > 1 else i, p))
                names.append(name)
    adjusted = family_adjust(tests) if tests else []
    adj: dict[str, dict[str, float]] = {cid: {} for cid in members}
    for (key, _), name, a in zip(tests, names, adjusted):
        if name:
            adj[members[key[0] if isinstance(key, tuple) else key]][name] = a
    family = len(members)
    for cid in members:
        c = by_id[cid]
        if c.measured is None:
            out[cid] = Judgement(NOT_RUN, "no measurement yet", family=family)
        elif cid in gate:
            r = gate[cid]
            out[cid] = Judgement(NOT_TESTED, f"regime check {'not measured' if r.passed is None else 'failed'}: "
                                             f"{r.name} ({r.detail})", family=family)
        elif c.measured.n_seeds < MIN_SEEDS:
            out[cid] = Judgement(NOT_TESTED, ONE_SEED, family=family)
        elif _spread(c.measured) == 0:
            out[cid] = Judgement(NOT_TESTED, NO_SPREAD, family=family)
        else:
            out[cid] = _decide(c.expect, c.measured, raws[cid], adj[cid], c.unit, family)
    for c in claims:  # aliases with the canonical's values
        if c.id not in out:
            src = out[same_as[c.id]]
            out[c.id] = Judgement(src.verdict, f"{src.reason} (the same measurement as {same_as[c.id]})", src.label,
                                  src.test, src.p, src.p_adj, src.family)
    return {c.id: out[c.id] for c in claims}


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

    ``verdict`` / ``reason`` / ``judgement``: the claim's judgement in its table's family once it belongs to a
    :class:`~studylib.claims.table.ClaimsTable`, else in a family of its own.
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
    table: Any = field(default=None, repr=False, compare=False)

    @property
    def judgement(self) -> Judgement:
        if self.table is not None:
            return self.table.judgements()[self.id]
        return judge_family([self])[self.id]

    @property
    def verdict(self) -> str:
        return self.judgement.verdict

    @property
    def reason(self) -> str:
        return self.judgement.reason

    def measured_text(self) -> str:
        if self.measured is None:
            return ""
        if isinstance(self.measured, (Estimate, AllOf)):
            n = self.measured.n_seeds
            return f"{self.measured.fmt(self.unit, signed=self.signed)} ({n} seed{'s' if n != 1 else ''})"
        return str(self.measured)

    def __deepcopy__(self, memo: dict) -> "Claim":
        import copy
        out = Claim(**{f: copy.deepcopy(getattr(self, f), memo) for f in
                       ("id", "claim", "source", "paper", "test", "expect", "measured", "applies", "why_not",
                        "unit", "signed")})
        return out
