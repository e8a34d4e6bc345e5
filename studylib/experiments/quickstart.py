"""Notebook 00_quickstart: train NCA (seed 000) on one data set and evaluate 5-way 1- and 5-shot.

The notebook's cells call :func:`spec_from_params`, :func:`run`, and the plotting helpers; nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studylib.config import param
from studylib.experiments.common import BACKBONES, CLASSIFIERS, DataParams, data_spec, load_data  # noqa: F401 (load_data: the notebook calls qs.load_data)
from studylib.experiments.runner import EvalSpec, Outcome, RunSpec, run_spec
from studylib.training.loop import OPTIMIZERS, SCHEDULES, TrainConfig

NOTEBOOK = "00_quickstart"


@dataclass
class Params(DataParams):
    """Parameters of ``notebooks/00_quickstart.ipynb`` (``params/00_quickstart/{smoke,paper}.yaml``)."""

    backbone: str = param("conv4", choices=BACKBONES, help="embedding network")
    augment: str = param("none", help="training augmentation profile (studylib.data.augment.PROFILES)")
    temperature: float = param(1.0, help="NCA temperature T: distances are divided by T")
    projection_dim: int | None = param(None, help="NCA through a linear projection used only in training")
    epochs: int = param(3, help="training epochs")
    batch_size: int = param(128, help="NCA batch size (images)")
    optimizer: str = param("sgd", choices=OPTIMIZERS)
    lr: float = param(0.1)
    momentum: float = param(0.9)
    weight_decay: float = param(5e-4)
    schedule: str = param("step", choices=SCHEDULES)
    milestones: list[float] = param([0.7], help="fractions of training where the step schedule decays")
    eval_ways: int = param(5)
    eval_shots: list[int] = param([1, 5])
    eval_queries: int = param(15)
    eval_episodes: int = param(1000)
    val_episodes: int = param(200, help="validation episodes after each epoch (0: none)")
    classifiers: list[str] = param(["nearest_centroid", "soft_assignment", "knn"], choices=CLASSIFIERS)
    seed: int = param(0)
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")


def spec_from_params(p: Params) -> RunSpec:
    method_opts: dict[str, Any] = {"temperature": p.temperature}
    if p.projection_dim:
        method_opts["projection_dim"] = p.projection_dim
    return RunSpec(
        name=f"{NOTEBOOK}-nca",
        data=data_spec(p),
        backbone=p.backbone,
        method="nca",
        method_options=method_opts,
        augment=p.augment,
        train=TrainConfig(epochs=p.epochs, sampler="shuffled", batch_size=p.batch_size, optimizer=p.optimizer,
                          lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay, schedule=p.schedule,
                          milestones=list(p.milestones), seed=p.seed, device=p.device),
        eval=EvalSpec(ways=p.eval_ways, shots=list(p.eval_shots), queries=p.eval_queries,
                      episodes=p.eval_episodes, classifiers=list(p.classifiers), val_episodes=p.val_episodes,
                      seed=p.seed),
    )


def run(p: Params) -> Outcome:
    return run_spec(spec_from_params(p))


def results_table(outcome: Outcome) -> list[dict[str, Any]]:
    """One row per (classifier, shots) in the order the run's evaluation lists them (the same whether the run
    was just trained or loaded from the run store): mean accuracy and CI95 half-width, as fractions."""
    test = outcome.result["test"]
    return [{"classifier": clf, "shots": shots, **{k: test[f"{clf}/{shots}"][k] for k in ("mean", "ci95", "episodes")}}
            for clf in outcome.spec.eval.classifiers for shots in sorted(outcome.spec.eval.shots)]


# Seed 000, Table 2 (miniImageNet, ResNet-12, our NCA): the paper's figures, for the paper-scale comparison.
PAPER_NCA_MINIIMAGENET = {("nearest_centroid", 1): (62.55, 0.12), ("nearest_centroid", 5): (78.27, 0.09),
                          ("soft_assignment", 1): (62.55, 0.12), ("soft_assignment", 5): (76.93, 0.11)}
