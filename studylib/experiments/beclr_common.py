"""What notebooks 06-08 (seed 001, BECLR) share: parameters, run specs, per-epoch snapshots, OpTA evaluation.

* :class:`BeclrParams` holds the pretraining and evaluation parameters of every BECLR notebook; each notebook's
  ``Params`` extends it. :func:`beclr_spec` turns them into a :class:`~studylib.runs.runner.RunSpec`
  (``method="beclr"``); the DyCE variants and the Table 5 ablations differ only in their method options, so a
  run trained by one notebook is reused by the others (the run folder is ``beclr001-<label>-<hash>``).
* :func:`train_with_snapshots` trains a spec through the run store like
  :func:`~studylib.runs.runner.run_spec`, and at the end of every epoch saves the student backbone and
  the teacher DyCE memory (:meth:`~studylib.methods.dyce.DyCE.snapshot`) to ``snapshot-eNNN.pt`` in the run
  folder. The hook is the loop's per-epoch ``validate(method, epoch)`` callback (the runner's validator is
  still called inside it), so no library code changes. Fig. 6 (memory) and Fig. 7 (accuracy over
  pretraining) read these snapshots.
* Evaluation follows BECLR's inference (Sec. 4.2, PAPER-NOTES 001): features standardised per sample, then
  either logistic regression on the support set ("without OpTA") or OpTA + logistic regression on the
  transported prototypes (:func:`~studylib.evaluation.opta.opta_classifier`). Both see the same episodes, so
  per-episode differences give paired confidence intervals (:func:`paired_gain`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from studylib.config import param
from studylib.data.base import ImageSplit
from studylib.evaluation import episode_seed, evaluate
from studylib.evaluation.evaluate import EvalResult
from studylib.evaluation.logreg import logreg_classifier
from studylib.evaluation.opta import opta_classifier, standardize
from studylib.evaluation.verdicts import Regime
from studylib.experiments.common import BACKBONES, DataParams, data_spec, load_data
from studylib.methods.dyce import VARIANTS
from studylib.runs.runner import (EvalSpec, Outcome, RunSpec, build_parts, check_protocol, features_of,
                                         load_trained, make_validator, resolve_no_wait, run_lock, run_spec,
                                         take_run_lock)
from studylib.training import distributed
from studylib.training.loop import SCHEDULES, TrainConfig, train
from studylib.training.runstore import Run, RunStore
from studylib.utils import config_hash, get_device, mean_ci95

SNAPSHOT = "snapshot-e{:03d}.pt"
EVAL_SEED = 0  # base seed of the episodes; training seed s draws episode_seed(EVAL_SEED, s) (paired within s)


@dataclass
class BeclrParams(DataParams):
    """BECLR pretraining (Sec. 4.1, Appendix A) and inference (Sec. 4.2) parameters shared by notebooks 06-08.

    The defaults are the smoke scale (2 CPU cores, about 2 minutes per notebook with all seeds): grayscale
    glyphs resized to 20 px, a Conv4 with 32 filters, 4 "epochs" of 10 batches of 32 drawn with replacement
    (40 steps), memory M = 512 in P = 16 partitions, adaptation period 1 epoch. The paper's teacher momentum
    0.995 is an EMA time constant of 200 steps, longer than the whole smoke run; 0.95 (20 steps) keeps roughly
    the paper's ratio to the run length. Masking patches of 5 px on 20 px (a 4x4 grid, like 16 px on 224 px at
    a coarser grid); blur sigma scaled down. The RGB glyph variant is not used: its random per-instance colours
    put raw pixels and random-init features at chance and 40 steps do not learn colour invariance.
    """

    image_size: int = param(20, ge=8, help="side of the square images fed to the network")
    rgb: bool = param(False, help="glyphs only: RGB variant with random colours")
    max_classes: int | None = param(300, ge=3, help="glyphs only: keep this many classes (None: all)")
    rotations: bool = param(False, help="omniglot only: the four 90-degree rotations are classes (as 10-12)")
    backbone: str = param("conv4", choices=BACKBONES, help="encoder f")
    conv4_hidden: int = param(32, ge=1, help="conv4 only: filters per block")
    augment: str = param("beclr_default", help="default augmentation profile (Table 7)")
    view_profile: str = param("strong", choices=("strong", "default", "mixed"),
                              help="which profile the two views use (paper: strong for both)")
    blur_sigma: list[float] | None = param([0.1, 0.3], help="Gaussian-blur sigma range (None: the 224-px (0.1, 2.0))")
    proj_dim: int = param(128, ge=1, help="latent dimension d (Table 6: 512)")
    pred_hidden: int = param(32, ge=1, help="predictor bottleneck width")
    lam: float = param(0.1, ge=0, help="weight of the negative term of Eq. 3")
    temperature: float = param(2.0, gt=0, help="temperature of Eq. 3")
    mask_ratio: float = param(0.3, ge=0, lt=1, help="student patch-masking ratio (Table 6: 30%)")
    mask_patch: int = param(5, ge=1, help="masking patch side in pixels (16 on 224 px)")
    teacher_momentum: float = param(0.95, ge=0, le=1, help="EMA momentum m0 of the teacher, cosine-ramped to 1")
    memory_size: int = param(512, ge=1, help="DyCE memory size M (the check scale cuts it so the few steps fill it)",
                             cut=True)
    partitions: int = param(16, ge=1, help="DyCE partitions P (cut with the memory at the check scale)", cut=True)
    topk: int = param(3, ge=1, help="neighbours k appended per embedding")
    epsilon: float = param(0.05, gt=0, help="Sinkhorn epsilon of the memory assignment")
    proto_momentum: float = param(0.0, ge=0, lt=1, help="prototype EMA momentum (0: mean of the members, authors' code)")
    adapt_epochs: int = param(1, ge=0, help="adaptation period (epochs) before batch enhancement starts", cut=True)
    pairing: str = param("paper", choices=("paper", "anchor"), help="how enhanced rows are paired (beclr.py)")
    epochs: int = param(4, ge=1, help="pretraining epochs", cut=True)
    batch_size: int = param(32, ge=2, help="batch size B", cut=True)
    batches_per_epoch: int | None = param(10, ge=1, help="None: every image once per epoch (shuffled); else that "
                                                         "many batches drawn with replacement per epoch", cut=True)
    optimizer: str = param("sgd", choices=("sgd", "adam"), help="optimiser of the pretraining (paper: SGD); the "
                                                                "SimCLR baseline uses the same")
    lr: float = param(0.3, gt=0, help="base learning rate; the run uses lr * B / 256 (Appendix A.2)")
    momentum: float = param(0.9, ge=0, lt=1)
    weight_decay: float = param(1e-4, ge=0)
    schedule: str = param("cosine", choices=SCHEDULES)
    simclr: bool = param(True, help="also pretrain the SimCLR baseline (Table 1's SimCLR row, NT-Xent) with the "
                                    "same data, views, optimiser, batches and steps, one run per seed")
    simclr_temperature: float = param(0.5, gt=0, help="tau of SimCLR's NT-Xent")
    eval_ways: int = param(5, ge=2)
    eval_shots: list[int] = param([1, 5], ge=1)
    eval_queries: int = param(15, ge=1, cut=True)
    eval_episodes: int = param(100, ge=1, help="episodes per evaluation (paper: 2000; smoke: 100, cut from 200 for "
                                                       "the suite's time; evidence.yaml keeps 200)", cut=True)
    eval_mean_images: int | None = param(None, ge=1, help="CL2N centre from this many training images (None: all, "
                                                          "as the paper)", cut=True)
    eval_split: str = param("test", choices=("val", "test"))
    opta_passes_1shot: int = param(5, ge=0, help="OpTA passes delta for 1-shot (authors: 5)")
    opta_passes_kshot: int = param(1, ge=0, help="OpTA passes delta for more shots (authors: 1)")
    opta_epsilon: float = param(0.05, gt=0, help="Sinkhorn epsilon of OpTA on the max-normalised cost")
    seeds: list[int] = param([0, 1, 2], help="training seeds (one pretraining per seed; each seed draws its own "
                                             "evaluation episodes, shared by the runs of that seed, so "
                                             "differences are paired)",
                             cut=True)
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")

    def check(self) -> None:
        super().check()
        if 2 * self.batch_size > self.memory_size:
            raise ValueError(f"the memory (M={self.memory_size}) must hold one batch of both views "
                             f"(2B={2 * self.batch_size}); raise memory_size or lower batch_size")
        if self.partitions > self.memory_size:
            raise ValueError(f"partitions={self.partitions} exceeds memory_size={self.memory_size}")
        if not 0 <= self.adapt_epochs <= self.epochs:
            raise ValueError(f"adapt_epochs must lie in 0..epochs={self.epochs}, got {self.adapt_epochs}")
        if self.blur_sigma is not None and len(self.blur_sigma) != 2:
            raise ValueError(f"blur_sigma must be [lo, hi], got {self.blur_sigma}")
        if self.rotations and self.data != "omniglot":
            raise ValueError(f"rotations are Omniglot's classes; data={self.data!r} has none (set rotations: false)")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be a non-empty list of distinct training seeds, got {self.seeds}; "
                             f"e.g. [0, 1, 2]")


# ------------------------------------------------------------------------------------------------- run specs


def steps_per_epoch(p: BeclrParams, train_images: int) -> int:
    """Optimiser steps per epoch: ``batches_per_epoch`` or ``train_images // batch_size`` (shuffled)."""
    steps = p.batches_per_epoch or train_images // p.batch_size
    if steps < 1:
        raise ValueError(f"batch_size={p.batch_size} exceeds the {train_images} training images; lower it")
    return steps


def beclr_spec(p: BeclrParams, train_images: int, label: str = "dyce", seed: int | None = None,
               **method_overrides: Any) -> RunSpec:
    """The run of BECLR pretraining under ``p``, with ``method_overrides`` of :class:`~studylib.methods.beclr.BECLR`
    arguments (``variant="fifo"``, ``use_dyce=False``, ``mask_ratio=0.0`` ...).

    ``adapt_epochs`` is converted to DyCE's ``adapt_steps`` (it counts updates, one per training step); the
    learning rate is ``lr * B / 256``. ``label`` names the run folder (``beclr001-<label>-<hash>``); the hash
    covers everything else, so two notebooks asking for the same configuration share one run. ``seed`` is the
    training seed (default: the first of ``p.seeds``); the evaluation episodes come from
    ``episode_seed(EVAL_SEED, seed)``.
    """
    seed = p.seeds[0] if seed is None else seed
    steps = steps_per_epoch(p, train_images)
    blur = {"blur_sigma": tuple(p.blur_sigma)} if p.blur_sigma is not None else {}
    opts: dict[str, Any] = dict(profile=p.view_profile, proj_dim=p.proj_dim, pred_hidden=p.pred_hidden, lam=p.lam,
                                temperature=p.temperature, mask_ratio=p.mask_ratio, mask_patch=p.mask_patch,
                                teacher_momentum=p.teacher_momentum, use_dyce=True, memory_size=p.memory_size,
                                partitions=p.partitions, topk=p.topk, epsilon=p.epsilon,
                                proto_momentum=p.proto_momentum, variant="dyce", adapt_steps=p.adapt_epochs * steps,
                                pairing=p.pairing, seed=seed)
    if blur:
        opts["strong_options"] = dict(blur)
    unknown = set(method_overrides) - set(opts) - {"sinkhorn_iters", "proj_hidden", "strong_profile", "ema"}
    if unknown:
        raise ValueError(f"unknown BECLR option(s) {sorted(unknown)}; see studylib.methods.beclr.BECLR")
    opts.update(method_overrides)
    tc = train_config(p, seed)
    ev = EvalSpec(ways=p.eval_ways, shots=list(p.eval_shots), queries=p.eval_queries, episodes=p.eval_episodes,
                  classifiers=["nearest_centroid"], cl2n=True, split=p.eval_split, val_episodes=0, seed=EVAL_SEED,
                  mean_images=p.eval_mean_images)
    bb_opts = {"hidden": p.conv4_hidden} if p.backbone == "conv4" and p.conv4_hidden != 64 else {}
    return RunSpec(name=f"beclr001-{label}", data=beclr_data(p), backbone=p.backbone, backbone_options=bb_opts,
                   method="beclr", method_options=opts, augment=p.augment, augment_options=dict(blur), train=tc,
                   eval=ev)


def beclr_data(p: BeclrParams):
    """The data of ``p``'s runs: :func:`~studylib.experiments.common.data_spec`, with Omniglot's rotations."""
    spec = data_spec(p)
    if p.rotations:
        spec.options["rotations"] = True
    return spec


def train_config(p: BeclrParams, seed: int) -> TrainConfig:
    """The pretraining's optimiser and schedule (``lr * B / 256``, Appendix A.2; SGD with momentum or Adam),
    shared by BECLR and its SimCLR baseline, so both get the same budget."""
    sampler = "replacement" if p.batches_per_epoch else "shuffled"
    adam = p.optimizer == "adam"
    return TrainConfig(epochs=p.epochs, sampler=sampler, batch_size=p.batch_size, batches_per_epoch=p.batches_per_epoch,
                       optimizer=p.optimizer, lr=p.lr * p.batch_size / 256, momentum=0.0 if adam else p.momentum,
                       weight_decay=p.weight_decay, schedule=p.schedule, seed=seed, device=p.device, val_every=1,
                       scale=p.scale)


def simclr_spec(p: BeclrParams, train_images: int, seed: int | None = None) -> RunSpec:
    """The SimCLR baseline of ``p`` for one training seed (:class:`~studylib.methods.simclr.SimCLR`, NT-Xent at
    ``simclr_temperature``): BECLR's data, backbone, optimiser, batches and steps (:func:`train_config`), both
    views from the run's ``augment`` profile (BECLR's default view). Its evaluation (:func:`final_eval`) uses the
    episodes of BECLR's run of the same seed, so BECLR - SimCLR is paired per episode."""
    beclr = beclr_spec(p, train_images, "simclr-ref", seed=seed)
    return replace(beclr, name="simclr001", method="simclr", method_options={"temperature": p.simclr_temperature})


def run_simclr(p: BeclrParams, progress: bool = True, seeds: Sequence[int] | None = None) -> list[Outcome]:
    """One SimCLR pretraining per training seed (``p.seeds``) through the run store (no snapshots)."""
    n = train_images(p)
    return [run_spec(simclr_spec(p, n, seed=s), progress=progress) for s in (p.seeds if seeds is None else seeds)]


def train_images(p: BeclrParams) -> int:
    """Number of training images of ``p``'s data set (loads it once; the loader caches it)."""
    return len(load_data(p)["train"])


# ------------------------------------------------------------------------------------------------- snapshots


def _save_snapshot(run: Run, method: torch.nn.Module, epoch: int) -> None:
    """``snapshot-eNNN.pt`` (``NNN`` = epochs completed): student backbone and the teacher DyCE memory."""
    memory = getattr(method, "memory_teacher", None) if getattr(method, "use_dyce", False) else None
    run.save_tensor(SNAPSHOT.format(epoch + 1), {
        "epoch": epoch + 1,
        "backbone": {k: v.detach().cpu().clone() for k, v in method.backbone.state_dict().items()},
        "memory": memory.snapshot() if memory is not None else None,
        "memory_variant": memory.variant if memory is not None else None,
    })


def train_with_snapshots(spec: RunSpec, store: RunStore | None = None, progress: bool = True) -> Outcome:
    """Train ``spec`` through the run store, saving a snapshot at the end of every epoch; then evaluate it.

    Resumes an interrupted run (the snapshots of finished epochs are kept); a finished run is only loaded.
    The final evaluation and ``weights.pt`` come from :func:`~studylib.runs.runner.run_spec`, which finds
    the completed checkpoint and trains nothing more.

    Raises:
        ValueError: the run was finished by plain ``run_spec`` (no snapshots); delete its folder to retrain.
    """
    if spec.train.val_every != 1:
        raise ValueError(f"snapshots are taken by the per-epoch hook; set train.val_every=1 (got "
                         f"{spec.train.val_every})")
    store = store or RunStore()
    run = store.run(spec.name, spec.config())
    if run.finished:
        return _snapshot_outcome(spec, store, progress)
    # One trainer per run, as in run_spec: another process training this run (07 and 08 reuse 06's runs, and
    # the test suite's two workers may meet on one) is waited for, and its run reused.
    lock = run_lock(store, run) if distributed.is_main() else None  # [dist] rank 0 holds it, as in run_spec
    took = lock is not None and take_run_lock(lock, run, resolve_no_wait(None))
    try:
        if not run.finished:
            _train_snapshots(spec, run, progress)
        return _snapshot_outcome(spec, store, progress)
    finally:
        if took:
            lock.release()


def _train_snapshots(spec: RunSpec, run: Run, progress: bool) -> None:
    """Train ``spec`` into ``run`` with a snapshot at the end of every epoch (resuming from its checkpoint)."""
    dataset = spec.data.load()
    check_protocol(spec, dataset)  # before any training: the evaluation must be possible on this data
    method, transform = build_parts(spec, dataset)
    device = get_device(spec.train.device)
    validator = make_validator(spec, dataset, transform, device)

    def on_epoch(m: torch.nn.Module, epoch: int) -> dict[str, float]:
        _save_snapshot(run, m, epoch)
        return validator(m, epoch) if validator is not None else {}

    spec.train.progress = progress
    train(method, dataset["train"], spec.train, run, validate=on_epoch)


def _snapshot_outcome(spec: RunSpec, store: RunStore, progress: bool) -> Outcome:
    """The evaluated outcome of a run trained by :func:`train_with_snapshots` (evaluated here if needed)."""
    outcome = run_spec(spec, store, progress=progress)
    if not snapshot_epochs(outcome):
        raise ValueError(f"run {outcome.run.path} finished without snapshots (trained by plain run_spec); delete "
                         f"that folder to retrain it with train_with_snapshots")
    return outcome


def run_seeds(p: BeclrParams, label: str = "dyce", progress: bool = True, seeds: Sequence[int] | None = None,
              **method_overrides: Any) -> list[Outcome]:
    """One pretraining per training seed (``p.seeds``), each with per-epoch snapshots, through the run store:
    a configuration another notebook already trained (same spec, same hash) is loaded, not retrained."""
    n = train_images(p)
    return [train_with_snapshots(beclr_spec(p, n, label, seed=s, **method_overrides), progress=progress)
            for s in (p.seeds if seeds is None else seeds)]


def snapshot_epochs(outcome: Outcome) -> list[int]:
    """Epochs (completed, 1-based) that have a snapshot in the run folder, ascending."""
    return sorted(int(f.stem.split("-e")[1]) for f in outcome.run.path.glob("snapshot-e*.pt"))


def load_snapshot(outcome: Outcome, epoch: int) -> dict[str, Any]:
    """``{"epoch", "backbone": state_dict, "memory": DyCE.snapshot() or None, "memory_variant"}``."""
    name = SNAPSHOT.format(epoch)
    if not outcome.run.has(name):
        raise ValueError(f"no snapshot after epoch {epoch} in {outcome.run.path}; available: "
                         f"{snapshot_epochs(outcome)}")
    return outcome.run.load_tensor(name)


# ------------------------------------------------------------------------------------------------ evaluation


def logreg_standardized(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """BECLR's inference without OpTA: per-sample standardisation, then logistic regression (C = 1) fit on the
    support set. ``support [E, w, n, D]``, ``query [E, Q, D]`` -> ``[E, Q, w]`` logits."""
    return logreg_classifier(standardize(support), standardize(query))


def opta_for(p: BeclrParams) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """OpTA + logistic regression with ``p``'s passes (delta, per shot count) and epsilon (Sec. 4.2)."""

    def classify(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        passes = p.opta_passes_1shot if support.shape[2] == 1 else p.opta_passes_kshot
        return opta_classifier(support, query, passes=passes, epsilon=p.opta_epsilon)

    return classify


def inference_classifiers(p: BeclrParams) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """``{"logreg": without OpTA, "opta": with OpTA}`` (explicit callables, so the passes and epsilon are
    ``p``'s whatever the registry holds)."""
    return {"logreg": logreg_standardized, "opta": opta_for(p)}


def evaluate_features(p: BeclrParams, feats: torch.Tensor, labels: torch.Tensor, train_seed: int,
                      classifiers: dict[str, Callable] | None = None, ways: int | None = None,
                      shots: Sequence[int] | None = None) -> dict[tuple[str, int], EvalResult]:
    """:func:`~studylib.evaluation.evaluate` with and without OpTA on ``p``'s episodes of the run trained with
    ``train_seed`` (``episode_seed(EVAL_SEED, train_seed)``: every run of a seed shares them; no CL2N: OpTA's
    standardisation replaces it)."""
    return evaluate(feats, labels, ways=ways or p.eval_ways, shots=list(shots or p.eval_shots),
                    queries=p.eval_queries, episodes=p.eval_episodes,
                    classifier=classifiers or inference_classifiers(p), seed=episode_seed(EVAL_SEED, train_seed))


def _eval_key(p: BeclrParams, extra: dict[str, Any] | None = None) -> str:
    keys = ("eval_ways", "eval_shots", "eval_queries", "eval_episodes", "eval_split", "opta_passes_1shot",
            "opta_passes_kshot", "opta_epsilon")
    return config_hash({**{k: getattr(p, k) for k in keys}, "eval_seed": EVAL_SEED,
                        "episode_seeds": "per training seed", **(extra or {})})


def checkpoint_curve(p: BeclrParams, outcome: Outcome, include_init: bool = True
                     ) -> dict[int, dict[tuple[str, int], EvalResult]]:
    """Few-shot accuracy with and without OpTA after every snapshot epoch (Fig. 7); epoch 0 = initial weights.

    Cached in the run folder (``curve-<hash of the evaluation settings>.pt``, per-episode accuracies).

    Returns:
        ``{epoch: {(classifier, shots): EvalResult}}``.
    """
    cache = f"curve-{_eval_key(p, {'init': include_init})}.pt"
    meta = dict(ways=p.eval_ways, queries=p.eval_queries)
    if outcome.run.has(cache):
        saved = outcome.run.load_tensor(cache)
        return {int(e): {(c, int(s)): EvalResult.from_accuracies(a, classifier=c, shots=int(s), **meta)
                         for (c, s), a in ((k.split("/"), v) for k, v in per.items())}
                for e, per in saved.items()}
    method, transform, dataset = load_trained(outcome)  # on the run's device
    split = dataset[p.eval_split]
    device = get_device(outcome.spec.train.device)
    out: dict[int, dict[tuple[str, int], EvalResult]] = {}
    if include_init:
        out[0] = initial_eval(p, outcome)
    for epoch in snapshot_epochs(outcome):
        method.backbone.load_state_dict(load_snapshot(outcome, epoch)["backbone"])
        out[epoch] = evaluate_features(p, features_of(method, split, transform, device), split.labels,
                                       outcome.spec.train.seed)
    outcome.run.save_tensor(cache, {str(e): {f"{c}/{s}": r.accuracies for (c, s), r in per.items()}
                                    for e, per in out.items()})
    return out


def initial_eval(p: BeclrParams, outcome: Outcome, store: RunStore | None = None
                 ) -> dict[tuple[str, int], EvalResult]:
    """Few-shot accuracy with and without OpTA of the run's untrained network: its encoder as
    :func:`~studylib.runs.runner.build_parts` initialises it for the run's training seed (Fig. 7's epoch
    0), on ``p``'s episodes of that seed, so ``trained - initial`` is paired per episode.

    Stored in the run store's untrained folder of the network (:func:`~studylib.runs.runner.untrained_config`:
    the data, the seed and the SHA-256 of the initial encoder, since BECLR's features are the backbone's), one
    file per evaluation setting: the runs of one seed that share an encoder (DyCE, its memory variants, the
    Table 5 rows, the Table 6 settings that keep the backbone) share one evaluation.

    Returns:
        ``{(classifier, shots): EvalResult}`` as :func:`final_eval`.
    """
    from studylib.runs.runner import UNTRAINED, untrained_config, untrained_network
    spec = outcome.spec
    method, transform, dataset = untrained_network(spec)
    store = store or RunStore(outcome.run.path.parent)  # beside the trained run, in its store
    run = store.run(UNTRAINED, untrained_config(spec, method))
    cache = f"beclr-{_eval_key(p)}.pt"
    meta = dict(ways=p.eval_ways, queries=p.eval_queries)
    if run.has(cache):
        saved = run.load_tensor(cache)
        return {(c, int(s)): EvalResult.from_accuracies(a, classifier=c, shots=int(s), **meta)
                for (c, s), a in ((k.split("/"), v) for k, v in saved.items())}
    split = dataset[p.eval_split]
    device = get_device(spec.train.device)
    out = evaluate_features(p, features_of(method, split, transform, device), split.labels, spec.train.seed)
    if not run.finished:
        run.save_result({"kind": UNTRAINED, "steps": 0, "train_seconds": 0.0, "seed": spec.train.seed,
                         "first_spec": spec.name})
    run.save_tensor(cache, {f"{c}/{s}": r.accuracies for (c, s), r in out.items()})
    return out


def final_eval(p: BeclrParams, outcome: Outcome) -> dict[tuple[str, int], EvalResult]:
    """Few-shot accuracy of the final weights with and without OpTA on ``p``'s episodes of the run's training
    seed; cached in the run folder (``final-<hash of the evaluation settings>.pt``)."""
    cache = f"final-{_eval_key(p)}.pt"
    meta = dict(ways=p.eval_ways, queries=p.eval_queries)
    if outcome.run.has(cache):
        saved = outcome.run.load_tensor(cache)
        return {(c, int(s)): EvalResult.from_accuracies(a, classifier=c, shots=int(s), **meta)
                for (c, s), a in ((k.split("/"), v) for k, v in saved.items())}
    feats, labels, _ = final_features(outcome, p.eval_split)
    out = evaluate_features(p, feats, labels, outcome.spec.train.seed)
    outcome.run.save_tensor(cache, {f"{c}/{s}": r.accuracies for (c, s), r in out.items()})
    return out


def learned_check(p: BeclrParams, label: str, outcomes: Sequence[Outcome],
                  final: Sequence[dict[tuple[str, int], EvalResult]], claims: Sequence[str]) -> Regime:
    """The regime check "``label``'s pretraining beats its random encoder by
    :data:`~studylib.experiments.regimes.UNTRAINED_MARGIN`": final - initial weights (:func:`initial_eval`),
    logistic regression without OpTA at the fewest evaluated shots, paired per episode, over seeds; ``final``:
    each seed's :func:`final_eval`."""
    from studylib.evaluation import stats
    from studylib.experiments import regimes
    shots = min(p.eval_shots)
    init = [initial_eval(p, o) for o in outcomes]
    gain = stats.paired_difference(per_seed(final, "logreg", shots), per_seed(init, "logreg", shots))
    return regimes.learned(f"{label} pretraining", gain, claims, f"{shots}-shot, logistic regression without OpTA")


def per_seed(results: Sequence[dict[tuple[str, int], EvalResult]], classifier: str, shots: int
             ) -> list[torch.Tensor]:
    """``[E]`` per-episode accuracies of ``(classifier, shots)``, one tensor per seed (for :mod:`stats`)."""
    return [r[(classifier, shots)].accuracies for r in results]


def curve_rows(curve: dict[int, dict[tuple[str, int], EvalResult]]) -> list[dict[str, Any]]:
    """Flat rows ``{epoch, classifier, shots, mean, ci95}`` of :func:`checkpoint_curve`."""
    return [{"epoch": e, "classifier": c, "shots": s, "mean": r.mean, "ci95": r.ci95}
            for e, per in curve.items() for (c, s), r in per.items()]


def paired_gain(with_: EvalResult, without: EvalResult) -> tuple[float, float]:
    """Mean and CI95 of the per-episode accuracy difference ``with - without`` (same episodes)."""
    if with_.accuracies.shape != without.accuracies.shape:
        raise ValueError("paired_gain needs results over the same episodes")
    return mean_ci95(with_.accuracies - without.accuracies)


def gain_difference(res: dict[tuple[str, int], EvalResult], low: int = 1, high: int = 5,
                    with_: str = "opta", without: str = "logreg") -> dict[str, tuple[float, float]]:
    """Does OpTA help ``low``-shot more than ``high``-shot? Per-episode gains at both shot counts (the shots
    share their episodes, :func:`~studylib.evaluation.evaluate`), and the CI95 of their per-episode difference.

    Returns:
        ``{"gain_<low>": (mean, ci), "gain_<high>": (mean, ci), "difference": (mean, ci)}`` as fractions.
    """
    g_lo = res[(with_, low)].accuracies - res[(without, low)].accuracies
    g_hi = res[(with_, high)].accuracies - res[(without, high)].accuracies
    return {f"gain_{low}": mean_ci95(g_lo), f"gain_{high}": mean_ci95(g_hi), "difference": mean_ci95(g_lo - g_hi)}


def pct(mean: float, ci: float, signed: bool = False) -> str:
    """``"62.5 ± 0.4"`` from fractions (``"+1.2 ± 0.3"`` when ``signed``)."""
    return f"{100 * mean:+.1f} ± {100 * ci:.1f}" if signed else f"{100 * mean:.1f} ± {100 * ci:.1f}"


def final_features(outcome: Outcome, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    """``[N, D]`` features of ``split`` with the final weights, the labels, and the trained method."""
    method, transform, dataset = load_trained(outcome)  # on the run's device
    device = get_device(outcome.spec.train.device)
    s: ImageSplit = dataset[split]
    return features_of(method, s, transform, device).cpu(), s.labels, method


def variant(p: BeclrParams, **changes: Any) -> BeclrParams:
    """A copy of ``p`` with ``changes`` (keeps the Params class)."""
    return replace(p, **changes)


# Seed 001, miniImageNet 5-way, ResNet-18 (Table 1; Table 14: BECLR w/o OpTA), accuracies in %.
PAPER_BECLR_RN18 = {("opta", 1): (75.74, 0.62), ("opta", 5): (84.93, 0.33),
                    ("logreg", 1): (66.14, 0.43), ("logreg", 5): (84.32, 0.27)}

__all__ = ["BeclrParams", "EVAL_SEED", "run_seeds", "run_simclr", "simclr_spec", "train_config", "beclr_data", "final_eval", "per_seed", "beclr_spec", "train_images", "steps_per_epoch", "train_with_snapshots",
           "snapshot_epochs", "load_snapshot", "logreg_standardized", "opta_for", "inference_classifiers",
           "evaluate_features", "checkpoint_curve", "initial_eval", "learned_check", "curve_rows", "paired_gain", "gain_difference", "pct",
           "final_features", "variant", "PAPER_BECLR_RN18", "VARIANTS"]
