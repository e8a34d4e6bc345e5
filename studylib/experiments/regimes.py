"""Regime checks (issue 31): did a trained model reach the regime its paper's claims are about?

A paper's claim about a method ("NCA beats PN", "OpTA helps good features") is about models that learned. A
model that did not (too few steps, a baseline trained too briefly) turns such a claim into a statement about a
random network, and more seeds only make that look decisive. So every notebook with trained claims states
:class:`~studylib.evaluation.verdicts.Regime` checks, computed from the same runs, shown above its claims table
(:meth:`~studylib.experiments.claims.ClaimsTable.show`) and saved with it; a claim gated by a check that did not
pass reads "not tested: regime check failed: ..." (:func:`~studylib.evaluation.verdicts.judge_family`).

Two kinds:

* **learned**: a trained model beats its untrained network, the same architecture randomly initialised for the
  same training seed (:func:`~studylib.experiments.runner.run_untrained`), by at least :data:`UNTRAINED_MARGIN`
  on the same evaluation episodes (a paired difference per seed: :func:`gain_over_untrained`); passed when the
  lower end of its 95% interval over seeds reaches the margin (:meth:`Regime.at_least`).
* **level**: a baseline reaches the level its paper implies relative to another model (notebook 05: SimpleShot
  within the paper's gap of NCA plus a tolerance), stated in the notebook's module.

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
from studylib.experiments.runner import Outcome, run_untrained
from studylib.training.runstore import RunStore

K = TypeVar("K", bound=Hashable)

# A trained model must beat its untrained network by at least 5 points of few-shot accuracy (lower 95% bound
# over seeds): ten times the episode noise of a paired difference at 500 episodes (about 0.5 points), and small
# against the 20 to 50 points the papers' methods add to a random network, so a pass means features of its own.
UNTRAINED_MARGIN = 0.05


def untrained(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The untrained network of each trained run (:func:`~studylib.experiments.runner.run_untrained`), evaluated
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
