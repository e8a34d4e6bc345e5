"""Regime checks (issue 31): did a trained model reach the regime its paper's claims are about?

A paper's claim about a method ("NCA beats PN", "OpTA helps good features") is about models that learned. A
model that did not (too few steps, a baseline trained too briefly) turns such a claim into a statement about a
random network, and more seeds only make that look decisive. So every notebook with trained claims states
:class:`~studylib.evaluation.verdicts.Regime` checks, computed from the same runs, shown above its claims table
(:meth:`~studylib.claims.table.ClaimsTable.show`) and saved with it; a claim gated by a check that did not
pass reads "not tested: regime check failed: ..." (:func:`~studylib.evaluation.verdicts.judge_family`).

Two kinds:

* **learned**: a trained model beats its untrained network, the same architecture randomly initialised for the
  same training seed (:func:`~studylib.runs.runner.run_untrained`), by at least :data:`UNTRAINED_MARGIN`
  on the same evaluation episodes (a paired difference per seed: :func:`gain_over_untrained`); passed when the
  lower end of its 95% interval over seeds reaches the margin (:meth:`Regime.at_least`).
* **level**: a baseline reaches the level its paper implies: within the paper's gap of the method it is compared
  with plus a tolerance (:func:`within_paper_gap`; notebook 05's SimpleShot, 10's PN, 11's AVG-FT and NN-FT), or,
  where the paper reports the baseline above the method, a floor of its paper accuracy above chance
  (:func:`paper_level`; 12's Matching Networks).

Which checks gate which claim is decided per notebook, in its ``claims``, with the rule: a claim is gated by the
checks of every model whose accuracy enters its effect (a comparison "A beats B" is a statement about two
learned models: if B did not learn, A beats a random network), and by a level check where the claim is about
the baseline that check concerns. A claim about a trained number against the paper's number (a "level" claim,
e.g. "NCA 1-shot: 62.55") is not gated: a model that did not learn is exactly what such a claim can find.
"""

from __future__ import annotations

from typing import Hashable, Iterable, Mapping, Sequence, TypeVar

from studylib.evaluation import stats
from studylib.evaluation.verdicts import Regime
from studylib.runs.runner import Outcome, run_untrained
from studylib.training.runstore import RunStore

K = TypeVar("K", bound=Hashable)

# A trained model must beat its untrained network by at least 5 points of few-shot accuracy (lower 95% bound
# over seeds): ten times the episode noise of a paired difference at 500 episodes (about 0.5 points), and small
# against the 20 to 50 points the papers' methods add to a random network, so a pass means features of its own.
UNTRAINED_MARGIN = 0.05
LEVEL_FRACTION = 0.5  # a baseline reaches at least half its paper accuracy above chance
GAP_TOLERANCE = 0.05  # a baseline lies within the paper's gap to the method plus 5 points


def untrained(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The untrained network of each trained run (:func:`~studylib.runs.runner.run_untrained`), evaluated
    on that run's episodes, in the run's store; models that share a backbone and a seed share one evaluation."""
    return [run_untrained(o.spec, RunStore(o.run.path.parent)) for o in outcomes]


def untrained_of(outcomes: Mapping[K, Sequence[Outcome]]) -> dict[K, list[Outcome]]:
    """:func:`untrained` of every model of a notebook (``{model: [outcome per seed]}``)."""
    return {k: untrained(os) for k, os in outcomes.items()}


def gain_over_untrained(trained: Sequence[Outcome], base: Sequence[Outcome], classifier: str,
                        shots: int) -> stats.Estimate:
    """``trained - untrained`` accuracy over seeds, paired per episode (seed ``i`` of both on seed ``i``'s
    episodes)."""
    return stats.paired_difference([o.accuracies(classifier, shots) for o in trained],
                                   [o.accuracies(classifier, shots) for o in base])


def learned(label: str, gain: stats.Estimate | None, claims: Iterable[str], what: str = "",
            margin: float = UNTRAINED_MARGIN) -> Regime:
    """The check "``label`` beats its untrained network by >= ``margin``" on ``gain`` (trained - untrained, paired;
    None: not measured), gating ``claims``; ``what`` names the measure ("1-shot, nearest centroid")."""
    name = f"{label} beats its untrained network by >= {margin * 100:g} pts" + (f" ({what})" if what else "")
    return Regime.at_least(name, gain, margin, claims)


def learned_check(label: str, trained: Sequence[Outcome], base: Sequence[Outcome], classifier: str, shots: int,
                  claims: Iterable[str], margin: float = UNTRAINED_MARGIN) -> Regime:
    """:func:`learned` on the runs' own evaluation (``classifier`` at ``shots``)."""
    return learned(label, gain_over_untrained(trained, base, classifier, shots), claims,
                   f"{shots}-shot, {classifier.replace('_', ' ')}", margin)


def claims_of(gates: Mapping[str, Iterable[K]]) -> dict[K, list[str]]:
    """Invert ``{claim id: the models it is about}`` into ``{model: the claims its check gates}`` (in order)."""
    out: dict[K, list[str]] = {}
    for cid, models in gates.items():
        for m in dict.fromkeys(models):
            out.setdefault(m, []).append(cid)
    return out


def paper_level(label: str, measured: stats.Estimate | None, paper: float, chance: float, claims: Iterable[str],
                what: str, fraction: float = LEVEL_FRACTION, unit: str = "pts") -> Regime:
    """"``label`` reaches ``fraction`` of its paper accuracy above chance": ``measured - level >= 0`` (lower 95%
    bound over seeds), ``level = chance + fraction (paper - chance)``."""
    level = chance + fraction * (paper - chance)
    name = (f"{label} reaches {fraction:g} of its paper level above chance ({what}: paper {100 * paper:g}, chance "
            f"{100 * chance:.3g}, level {100 * level:.3g} {unit})")
    effect = stats.combine(lambda a: a - level, measured) if measured is not None else None
    return Regime.at_least(name, effect, 0.0, claims, suffix=f" {unit}")


def within_paper_gap(label: str, method: str, baseline_minus_method: stats.Estimate | None, paper_gap: float,
                     claims: Iterable[str], what: str, tolerance: float = GAP_TOLERANCE, unit: str = "pts") -> Regime:
    """"``label`` is within the paper's gap of ``method`` + tolerance": ``baseline - method >= -(paper_gap +
    tolerance)`` (lower 95% bound over seeds; ``paper_gap`` = the paper's method - baseline, > 0)."""
    bound = -(paper_gap + tolerance)
    name = (f"{label} within the paper's gap of {method} + {100 * tolerance:g} {unit} ({what}: paper gap "
            f"{100 * paper_gap:.3g}, bound {100 * bound:.3g} {unit})")
    return Regime.at_least(name, baseline_minus_method, bound, claims, suffix=f" {unit}")
