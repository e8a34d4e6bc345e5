"""What notebooks 10-12 (seeds 002 and 003, Omniglot) share for their regime checks and their evidence scale.

**The evidence scale on real Omniglot** (issue 31). ``params/<nb>/evidence.yaml`` of notebooks 10, 11 and 12
trains and tests on the Omniglot subset that sits beside every checkout, ``../shared/data/omniglot/
images_background_small1.zip`` (Lake et al.'s own subset: 5 alphabets, 136 characters, 20 drawers), read in
place, never copied. The reader's ``split="alphabet"`` gives whole alphabets to the splits: Balinese,
Early_Aramaic and Greek train (70 characters), Korean is the validation alphabet (40 characters: hyperparameters
such as Set2Model's variance floor are chosen there, never on the test alphabet), Latin is tested (26
characters); with the papers' rotations every character is four classes. The networks and episode shapes are the
papers'; only the training length is cut. The claims measured there are **proxies** of the papers' Omniglot
claims (a 5-alphabet subset, a short training), and every claim's test text says so (:func:`proxy_note`).
Where the subset is absent, ``./study run --scale evidence`` says "not run: needs the Omniglot subset" and goes
on (:mod:`studylib.preflight`).

**Regime checks** (:class:`~studylib.evaluation.verdicts.Regime`), computed from the same runs at every scale
and shown above the claims table; a claim gated by a check that did not pass reads "not tested":

* *learned*: a trained network beats its **untrained network** (the same architecture as
  :func:`~studylib.runs.runner.build_parts` initialises it for the run's training seed, before any
  step: :func:`untrained_network`) by at least :data:`UNTRAINED_MARGIN` on the same evaluation episodes, a
  paired difference per seed whose lower 95% bound over seeds must reach the margin (:func:`learned`). It gates
  every comparison the network enters. A claim about a trained number against the paper's number is not gated:
  a network that did not learn is what such a claim can find.
* *paper-relative level* of a baseline. Where the paper reports the baseline below the method it is compared
  with (notebook 10's PN, 11's AVG-FT and NN-FT), the baseline must lie within the paper's gap plus
  :data:`GAP_TOLERANCE` of that method (:func:`within_paper_gap`; the form of issue 31's SimpleShot check): a
  baseline far further behind than the paper's did not train enough, and a comparison with it would overstate
  the method. Where the paper reports the baseline above the method (notebook 12's Matching Networks), that form
  would hide a reversal, so the check is a floor instead: at least :data:`LEVEL_FRACTION` of its paper accuracy
  above chance (:func:`paper_level`; the test data are not the paper's, so a floor that catches a baseline that
  did not train, not a reproduction of the paper's number).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from studylib.data.base import FewShotDataset
from studylib.evaluation import stats
from studylib.evaluation.verdicts import Regime
from studylib.experiments import regimes
from studylib.experiments.regimes import (GAP_TOLERANCE, LEVEL_FRACTION, UNTRAINED_MARGIN, paper_level,
                                          within_paper_gap)
from studylib.methods.base import Method
from studylib.runs.runner import Outcome, build_parts
from studylib.utils import get_device

# The margins and the level checks are every notebook's (studylib/experiments/regimes.py): 5 points over the
# untrained network is small against the 20 to 50 points a trained Conv4 adds to a random one on Omniglot.
__all__ = ["GAP_TOLERANCE", "LEVEL_FRACTION", "UNTRAINED_MARGIN", "learned", "paper_level", "proxy_note",
           "untrained_network", "within_paper_gap"]


def proxy_note(p: Any) -> str:
    """The words every claim's test text gets at the evidence scale on Omniglot (``""`` elsewhere)."""
    if getattr(p, "scale", None) != "evidence" or getattr(p, "data", None) != "omniglot":
        return ""
    where = Path(str(p.data_root)).name if p.data_root else "Omniglot"
    batches = p.epochs * p.batches_per_epoch
    return (f" [proxy of the paper's Omniglot claim: the real subset {where}, whole alphabets per split "
            f"(split={p.split!r}), {batches} training batches, not the paper's full Omniglot to convergence]")


def untrained_network(outcome: Outcome, device: torch.device | str | None = None
                      ) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor], FewShotDataset]:
    """The network a run started from: :func:`~studylib.runs.runner.build_parts` seeds torch with the
    run's training seed before it builds the backbone and the method, so this is the run's initial network
    (no step taken), in eval mode on ``device`` (None: the run's device), with its evaluation transform and the
    data set, as :func:`~studylib.runs.runner.load_trained` returns the trained one."""
    spec = outcome.spec
    dataset = spec.data.load()
    method, transform = build_parts(spec, dataset)
    method.to(get_device(spec.train.device if device is None else device))
    method.eval()
    return method, transform, dataset


def learned(label: str, trained: list[torch.Tensor], untrained: list[torch.Tensor], claims: Iterable[str],
            what: str, margin: float = UNTRAINED_MARGIN) -> Regime:
    """:func:`regimes.learned` from ``trained - untrained`` per-episode values of each seed (the same episodes),
    paired per seed (:func:`stats.paired_difference`)."""
    gain = stats.paired_difference(trained, untrained) if trained and untrained else None
    return regimes.learned(label, gain, claims, what, margin)
