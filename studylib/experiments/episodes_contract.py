"""The notebook contract for the seed-000 comparison notebooks 04 and 05: cut marks, several seeds, paired estimates.

:mod:`studylib.experiments.episodes_common` defines the training variants and run specs every seed-000 notebook
shares. This module adds what notebooks 04 (ablations) and 05 (comparison) need on top of it, without changing
it:

* :class:`ContractParams`: :class:`~studylib.experiments.episodes_common.CommonParams` with the fields the check
  scale may cut marked ``cut=True`` (epochs, evaluation episodes, seeds, ...), three training seeds by default,
  and two cuts of the check scale that the common schema lacks: ``max_steps`` (stop each run after that many
  optimiser steps) and ``eval_mean_images`` (CL2N centre from a fixed subset of training images);
* :func:`specs` / :func:`run`: every variant for every seed, through the run store; the models of a training
  seed are evaluated on that seed's episodes (:func:`~studylib.evaluation.episode_seed`), so differences are
  paired within a seed and the interval over seeds carries the episode sampling too;
* :func:`accuracy` / :func:`difference`: :class:`~studylib.evaluation.stats.Estimate` s over the training seeds
  (a paired per-episode difference for two models).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from studylib.config import param
from studylib.evaluation import stats
from studylib.experiments.episodes_common import CommonParams, Variant, make_spec, train_size  # noqa: F401
from studylib.runs.runner import Outcome, RunSpec
from studylib.runs.sweeps import run_sweep

# Data sets in the paper's regime: about 600 images per class, 64 training classes (miniImageNet, CIFAR-FS),
# or tieredImageNet's larger split; and the embedded synthfs set built to match CIFAR-FS's counts.
PAPER_REGIME_DATA = ("mini_imagenet", "cifar_fs", "tiered_imagenet", "fc100", "synthfs")


@dataclass
class ContractParams(CommonParams):
    """:class:`CommonParams` with cut marks, several seeds and the check scale's cuts (see the module docstring)."""

    # redefined only for its help text: papermill cannot parse '=' in a help text (CommonParams says "T = 1")
    nca_temperature: float = param(1.0, gt=0, help="NCA temperature T (distances divided by T); PN and MN use T 1")
    epochs: int = param(1, ge=1, help="training epochs of every run", cut=True)
    images_per_epoch: int | None = param(None, ge=1, help="images per epoch of every run (None: training split "
                                                          "size)", cut=True)
    eval_episodes: int = param(1000, ge=1, help="evaluation episodes per model (paper: 10,000)", cut=True)
    val_episodes: int = param(0, ge=0, help="validation episodes after each epoch (0: none)", cut=True)
    seeds: list[int] = param([0, 1, 2], help="training seeds (the paper: 3); verdicts need at least 2", cut=True)
    max_steps: int | None = param(None, ge=1, help="stop every run after this many optimiser steps (None: all "
                                                   "epochs)", cut=True)
    eval_mean_images: int | None = param(None, ge=1, help="CL2N centre from this many training images (None: "
                                                          "all)", cut=True)

    def check(self) -> None:
        super().check()
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed; give distinct training seeds, e.g. [0, 1, 2]")


def specs(p: ContractParams, variants: Iterable[Variant], train_images: int) -> list[RunSpec]:
    """Run specs of every variant x seed (variant-major), with the check scale's cuts applied."""
    out = []
    for v in dict.fromkeys(variants):
        for s in p.seeds:
            spec = make_spec(p, v, s, train_images)
            if p.max_steps is not None:
                spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, max_steps=p.max_steps))
            if p.eval_mean_images is not None:
                spec = dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, mean_images=p.eval_mean_images))
            out.append(spec)
    return out


def run(p: ContractParams, variants: Iterable[Variant], train_images: int,
        progress: bool = True) -> dict[Variant, list[Outcome]]:
    """Train (or load) every variant for every seed; ``{variant: [outcome per seed]}``."""
    unique = list(dict.fromkeys(variants))
    outcomes = run_sweep(specs(p, unique, train_images), progress=progress)
    k = len(p.seeds)
    return {v: outcomes[i * k:(i + 1) * k] for i, v in enumerate(unique)}


def accuracy(outcomes: Sequence[Outcome], classifier: str, shots: int) -> stats.Estimate:
    """Accuracy over the training seeds (each seed's mean over the shared episodes)."""
    return stats.accuracy([o.accuracies(classifier, shots) for o in outcomes])


def difference(a: Sequence[Outcome], b: Sequence[Outcome], classifier: str, shots: int,
               classifier_b: str | None = None) -> stats.Estimate:
    """``A - B`` over seeds, paired per episode (seed ``i`` of A with seed ``i`` of B, on seed ``i``'s episodes)."""
    return stats.paired_difference([o.accuracies(classifier, shots) for o in a],
                                   [o.accuracies(classifier_b or classifier, shots) for o in b])


def estimate_row(est: stats.Estimate, **fields: Any) -> dict[str, Any]:
    """A table row with an estimate's mean, CI95 over seeds and its text."""
    return {**fields, "mean": est.value, "ci95": est.ci95, "seeds": est.n_seeds, "episodes": est.episodes,
            "accuracy (%)": est.fmt()}
