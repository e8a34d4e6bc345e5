"""What notebooks 01-05 (seed 000, "On Episodes") share: parameters, training variants, specs, pooling.

A :class:`Variant` is one way of training an embedding in the paper: a loss (NCA, PN, MN, CE or an ablation
switch of :mod:`studylib.methods.episodes`), a batch construction (shuffled, with replacement, fixed
composition, or an episode ``w`` ways x ``n`` shots + ``m`` queries) and a batch size. :func:`make_spec` turns
a variant, the notebook's parameters and a seed into a :class:`~studylib.runs.runner.RunSpec`.

Conventions that make the sweeps comparable (Sec. 3.2, PAPER-NOTES 000):

* An episode is named by its batch size ``b``, shots ``n`` and images per class ``m + n``; it has
  ``w = b / (m + n)`` ways (:func:`episode_shape`).
* Every variant sees the same number of images per epoch: ``batches_per_epoch = images_per_epoch // b``
  (the paper: batches of 128/256/512 for 300/150/75 episodes per epoch). NCA on shuffled batches visits
  every training image once per epoch, so ``images_per_epoch`` defaults to the training split's size.
* Run names do not carry the notebook: the same variant trained by two notebooks is one run in the store
  (its folder is ``ep000-<label>-<hash>``), so a notebook reuses what another one already trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from studylib.config import param
from studylib.evaluation import stats
from studylib.experiments.common import BACKBONES, CLASSIFIERS, FEW_SHOT_DATASETS, DataParams, data_spec, load_data
from studylib.runs.runner import EvalSpec, Outcome, RunSpec
from studylib.runs.sweeps import run_sweep
from studylib.training.loop import OPTIMIZERS, SCHEDULES, TrainConfig
from studylib.utils import mean_ci95

METHODS = ("nca", "pn", "mn", "ce")
SAMPLER_OF = {"nca": "shuffled"}


@dataclass
class CommonParams(DataParams):
    """Parameters every seed-000 training notebook has (data, network, optimiser, evaluation, seeds)."""

    max_classes: int | None = param(300, ge=3, help="glyphs only: keep this many classes (None: all)")
    backbone: str = param("conv4", choices=BACKBONES, help="embedding network")
    conv4_hidden: int = param(64, ge=1, help="conv4 only: filters per block (64 in Snell et al.; fewer is faster)")
    augment: str = param("none", help="training augmentation profile (studylib.data.augment.PROFILES)")
    nca_temperature: float = param(1.0, gt=0, help="NCA temperature T (distances divided by T); PN and MN use T of 1")
    nca_projection_dim: int | None = param(None, ge=1, help="NCA through a linear projection used only in training")
    epochs: int = param(1, ge=1, help="training epochs of every run", cut=True)
    images_per_epoch: int | None = param(None, ge=1, help="images per epoch of every run (None: training split size)",
                                         cut=True)
    optimizer: str = param("sgd", choices=OPTIMIZERS)
    lr: float = param(0.1, gt=0)
    momentum: float = param(0.9, ge=0, lt=1)
    weight_decay: float = param(5e-4, ge=0)
    schedule: str = param("step", choices=SCHEDULES)
    milestones: list[float] = param([0.7], ge=0, le=1, help="fractions of training where the step schedule decays")
    eval_ways: int = param(5, ge=2)
    eval_queries: int = param(15, ge=1, cut=True)
    eval_episodes: int = param(1000, ge=1, help="evaluation episodes per model (paper: 10,000)", cut=True)
    eval_split: str = param("val", choices=("val", "test"), help="split the figures are measured on")
    val_episodes: int = param(0, ge=0, help="validation episodes after each epoch (0: none)", cut=True)
    seeds: list[int] = param([0], help="training seeds; episodes of all seeds are pooled for the CI95", cut=True)
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")

    def check(self) -> None:
        super().check()
        if not self.seeds:
            raise ValueError("seeds is empty; give at least one training seed, e.g. [0]")
        if self.epochs < 1 or self.eval_episodes < 1:
            raise ValueError(f"epochs and eval_episodes must be >= 1, got {self.epochs} and {self.eval_episodes}")


@dataclass
class SweepParams(CommonParams):
    """:class:`CommonParams` of the Fig. 2 / Fig. 3 sweeps (notebooks 02 and 03), on the notebook contract.

    The smoke defaults use ``synthfs`` (100 generated classes x 600 images, CIFAR-FS's 64/16/20 split): seed
    000's sweeps concern data where a random batch holds many same-class pairs (600 images per class), which
    the glyph set (20 per class) does not have (issue 8). Images are drawn at 16 px and the Conv4 has 32
    filters, every model trains on the same ``train_images`` images (a few dozen steps) and three training
    seeds are trained for every model, so that each verdict rests on the seed-to-seed variance.
    """

    data: str = param("synthfs", choices=FEW_SHOT_DATASETS, help="data set; 'glyphs' and 'synthfs' are generated, "
                                                                  "others need data_root; 'folder' is your own images")
    image_size: int = param(16, ge=1, help="side of the square images fed to the network")
    max_classes: int | None = param(None, ge=3, help="glyphs only: keep this many classes (None: all)")
    conv4_hidden: int = param(32, ge=1, help="conv4 only: filters per block (64 in Snell et al.; fewer is faster)")
    eval_episodes: int = param(500, ge=1, help="evaluation episodes per model and seed (paper: 10,000)", cut=True)
    seeds: list[int] = param([0, 1, 2], help="training seeds; every estimate is a mean over seeds with Student's "
                                             "t interval (the paper: 3)", cut=True)
    train_images: int | None = param(3840, ge=1, help="images each model trains on in all: it stops after "
                                                      "train_images // b steps (None: all epochs; smoke: 3840, cut "
                                                      "from 7680 for the suite's time; evidence.yaml keeps 7680)",
                                      cut=True)
    eval_mean_images: int | None = param(2000, ge=1, help="CL2N centre from this many training images (None: all)",
                                         cut=True)

    def check(self) -> None:
        super().check()
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed; give distinct training seeds, e.g. [0, 1, 2]")


def episode_shape(batch_size: int, shots: int, per_class: int) -> tuple[int, int, int]:
    """``(w, n, m)`` of the episode with ``b`` images, ``n`` shots and ``m + n`` images per class (Sec. 3.2).

    ``w = b / (m + n)`` must be a whole number of at least 2 ways and ``1 <= n < m + n``.
    """
    if not 1 <= shots < per_class:
        raise ValueError(f"need 1 <= shots < images per class, got shots={shots}, m+n={per_class}; an episode "
                         "needs at least one support and one query image per class")
    if batch_size % per_class:
        raise ValueError(f"batch size {batch_size} is not a multiple of m+n={per_class}; pick a batch size that "
                         f"{per_class} divides (w = b / (m+n) ways)")
    ways = batch_size // per_class
    if ways < 2:
        raise ValueError(f"batch {batch_size} with m+n={per_class} gives {ways} way(s); a loss needs >= 2 classes")
    return ways, shots, per_class - shots


@dataclass(frozen=True)
class Variant:
    """One way of training (a loss, a batch construction, a batch size).

    Attributes:
        method: ``"nca"``, ``"pn"``, ``"mn"`` or ``"ce"`` (the registered methods).
        sampler: ``"shuffled"``, ``"replacement"``, ``"fixed"`` or ``"episodic"``.
        batch_size: images per batch ``b``.
        shots: ``n`` (episodic) or None.
        per_class: ``m + n`` images per class (episodic and fixed) or None.
        prototypes, sq_split: the ablation switches of :class:`~studylib.methods.episodes.DistanceMethod`
            (None: the method's default).
        fraction: pair subsampling (Fig. 3), the same fraction for positives and negatives; 1 = all pairs.
        reduction: the loss's divisor (:func:`~studylib.methods.episodes.episode_loss`): ``"anchors"`` or
            ``"batch"`` (the paper's ``1/|B|``).

    The episode shape follows from ``b``, ``n`` and ``m + n`` (:func:`episode_shape`); Snell et al.'s
    20-way 5-shot 15-query episodes are ``b = 400, n = 5, m + n = 20``.
    """

    method: str
    sampler: str
    batch_size: int
    shots: int | None = None
    per_class: int | None = None
    prototypes: bool | None = None
    sq_split: bool | None = None
    fraction: float = 1.0
    reduction: str = "anchors"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; allowed: {', '.join(METHODS)}")
        if self.sampler in ("episodic", "fixed"):
            if self.per_class is None or (self.sampler == "episodic" and self.shots is None):
                raise ValueError(f"a {self.sampler} variant needs per_class (m+n)"
                                 f"{' and shots' if self.sampler == 'episodic' else ''}")
            episode_shape(self.batch_size, self.shots if self.sampler == "episodic" else 1, self.per_class)
        elif self.shots is not None or self.per_class is not None:
            raise ValueError(f"sampler {self.sampler!r} has no episode shape; leave shots and per_class unset")
        if (self.method in ("pn", "mn") or self.prototypes or self.sq_split) and self.sampler != "episodic":
            raise ValueError(f"{self.method} with support/query roles needs the 'episodic' sampler")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must lie in (0, 1], got {self.fraction}")

    @property
    def ways(self) -> int | None:
        return self.batch_size // self.per_class if self.per_class else None

    @property
    def queries(self) -> int | None:
        return self.per_class - self.shots if self.sampler == "episodic" else None

    @property
    def label(self) -> str:
        """Short unique name, e.g. ``pn-b128-n5-mn8``, ``nca-b256-f0.1``, ``pn-noSQ-b64-n5-mn8``."""
        parts = [self.method]
        if self.prototypes is not None:
            parts.append("proto" if self.prototypes else "noproto")
        if self.sq_split is not None:
            parts.append("SQ" if self.sq_split else "noSQ")
        if self.sampler not in ("episodic", SAMPLER_OF.get(self.method, "shuffled")):
            parts.append(self.sampler)
        parts.append(f"b{self.batch_size}")
        if self.sampler == "episodic":
            parts.append(f"n{self.shots}-mn{self.per_class}")
        elif self.sampler == "fixed":
            parts.append(f"mn{self.per_class}")
        if self.fraction < 1.0:
            parts.append(f"f{self.fraction:g}")
        if self.reduction != "anchors":
            parts.append(f"per-{self.reduction}")
        return "-".join(parts)


def nca(batch_size: int, sampler: str = "shuffled", per_class: int | None = None, fraction: float = 1.0,
        reduction: str = "anchors") -> Variant:
    """NCA on shuffled / replacement batches, or on a fixed composition of ``b/per_class`` classes."""
    return Variant("nca", sampler, batch_size, per_class=per_class, fraction=fraction, reduction=reduction)


def episodic(method: str, batch_size: int, shots: int, per_class: int, prototypes: bool | None = None,
             sq_split: bool | None = None) -> Variant:
    """PN / MN (or an ablation) on episodes of ``b/(m+n)`` ways, ``n`` shots, ``m+n`` images per class."""
    return Variant(method, "episodic", batch_size, shots, per_class, prototypes, sq_split)


def make_spec(p: Any, v: Variant, seed: int, train_images: int, eval_shots: Sequence[int] = (1, 5)) -> RunSpec:
    """The :class:`RunSpec` of variant ``v`` under notebook parameters ``p`` (a :class:`CommonParams`).

    ``train_images`` is the size of the training split; every variant trains on
    ``p.images_per_epoch or train_images`` images per epoch (``// b`` batches). NCA's temperature and
    projection apply to ``method == "nca"`` only (the authors' PN/MN use T = 1 and no projection).
    """
    per_epoch_images = p.images_per_epoch or train_images
    batches = per_epoch_images // v.batch_size
    if batches < 1:
        raise ValueError(f"batch {v.batch_size} is larger than the {per_epoch_images} images of an epoch; lower "
                         "the batch size or raise images_per_epoch")
    opts: dict[str, Any] = {}
    if v.method == "nca":
        opts["temperature"] = p.nca_temperature
        if p.nca_projection_dim:
            opts["projection_dim"] = p.nca_projection_dim
    if v.prototypes is not None:
        opts["prototypes"] = v.prototypes
    if v.sq_split is not None:
        opts["sq_split"] = v.sq_split
    if v.fraction < 1.0:
        opts["pos_fraction"] = opts["neg_fraction"] = v.fraction
    if v.reduction != "anchors":
        opts["reduction"] = v.reduction
    max_images = getattr(p, "train_images", None)  # SweepParams only: every model sees the same images in all
    if max_images is not None and max_images < v.batch_size:
        raise ValueError(f"train_images={max_images} is smaller than the batch of {v.batch_size}; raise "
                         "train_images (it must allow at least one step per model) or lower the batch size")
    common = dict(epochs=p.epochs, optimizer=p.optimizer, lr=p.lr, momentum=p.momentum,
                  weight_decay=p.weight_decay, schedule=p.schedule, milestones=list(p.milestones), seed=seed,
                  device=p.device, scale=getattr(p, "scale", "smoke"))
    if max_images is not None:
        common["max_steps"] = max_images // v.batch_size
    if v.sampler == "episodic":
        w, n, m = v.ways, v.shots, v.queries
        train = TrainConfig(sampler="episodic", batch_size=v.batch_size, ways=w, shots=n, queries=m,
                            batches_per_epoch=batches, **common)
    elif v.sampler == "fixed":
        train = TrainConfig(sampler="fixed", batch_size=v.batch_size, ways=v.ways, shots=v.per_class, queries=0,
                            batches_per_epoch=batches, **common)
    elif v.sampler == "replacement":
        train = TrainConfig(sampler="replacement", batch_size=v.batch_size, batches_per_epoch=batches, **common)
    else:
        if p.images_per_epoch not in (None, train_images):
            raise ValueError(f"shuffled batches visit all {train_images} training images per epoch; "
                             f"images_per_epoch={p.images_per_epoch} contradicts it (leave it None)")
        train = TrainConfig(sampler="shuffled", batch_size=v.batch_size, **common)
    ev = EvalSpec(ways=p.eval_ways, shots=list(eval_shots), queries=p.eval_queries, episodes=p.eval_episodes,
                  classifiers=list(CLASSIFIERS), cl2n=True, split=p.eval_split, val_episodes=p.val_episodes,
                  seed=0, mean_images=getattr(p, "eval_mean_images", None))
    bb_opts = {"hidden": p.conv4_hidden} if p.backbone == "conv4" and p.conv4_hidden != 64 else {}
    return RunSpec(name=f"ep000-{v.label}", data=data_spec(p), backbone=p.backbone, backbone_options=bb_opts,
                   method=v.method,
                   method_options=opts, augment=p.augment, train=train, eval=ev)


def run_variants(p: Any, variants: Iterable[Variant], train_images: int,
                 progress: bool = True) -> dict[Variant, list[Outcome]]:
    """Train (or load) every variant for every seed of ``p.seeds``; ``{variant: [outcome per seed]}``."""
    unique = list(dict.fromkeys(variants))
    specs = [make_spec(p, v, s, train_images) for v in unique for s in p.seeds]
    outcomes = run_sweep(specs, progress=progress)
    k = len(p.seeds)
    return {v: outcomes[i * k:(i + 1) * k] for i, v in enumerate(unique)}


def pooled(outcomes: Sequence[Outcome], classifier: str, shots: int) -> tuple[float, float, int]:
    """Mean accuracy and CI95 half-width over the pooled episodes of all seeds (Sec. 3.1), and the count."""
    acc = torch.cat([o.accuracies(classifier, shots).double() for o in outcomes])
    mean, ci = mean_ci95(acc)
    return mean, ci, int(acc.numel())


def pct(mean: float, ci: float) -> str:
    """``"62.5 ± 0.4"`` from fractions (accuracies rounded to 0.1%)."""
    return f"{100 * mean:.1f} ± {100 * ci:.1f}"


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether the CI95 intervals of two ``(mean, ci95)`` pairs overlap."""
    return abs(a[0] - b[0]) <= a[1] + b[1]


def train_size(p: Any) -> int:
    """Number of images of the training split of ``p``'s data set (loads it once)."""
    return len(load_data(p)["train"])


def pairs_used(outcomes: Sequence[Outcome]) -> tuple[float, float]:
    """Mean positives and negatives per training batch that the loss actually used (logged by the method at
    every step, in Table 1's unit), averaged over the steps of all seeds."""
    pos = [m["positives"] for o in outcomes for m in o.metrics if "positives" in m]
    neg = [m["negatives"] for o in outcomes for m in o.metrics if "negatives" in m]
    if not pos:
        raise ValueError("these runs logged no pair counts (cross-entropy runs use no distance pairs)")
    return sum(pos) / len(pos), sum(neg) / len(neg)


# -- estimates over training seeds (the notebook contract) ----------------------------------------------------
def accuracy(outcomes: Sequence[Outcome], classifier: str, shots: int) -> stats.Estimate:
    """Accuracy over the training seeds: each seed's mean over the shared evaluation episodes."""
    return stats.accuracy([o.accuracies(classifier, shots) for o in outcomes])


def paired(a: Sequence[Outcome], b: Sequence[Outcome], classifier: str, shots: int) -> stats.Estimate:
    """``A - B`` over seeds, each seed's value the mean per-episode difference on the episodes both share."""
    return stats.paired_difference([o.accuracies(classifier, shots) for o in a],
                                   [o.accuracies(classifier, shots) for o in b])
