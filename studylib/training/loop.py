"""One training loop for every method.

The method supplies the loss of a batch (:class:`studylib.methods.base.Method`); this loop owns the rest:
the device (CUDA when present), bf16 autocast and channels-last on the GPU, the optimiser and learning-rate
schedule, a tqdm bar with the loss and images/s, periodic validation, checkpoints and exact resume.

Exact resume. Batches are a pure function of ``(seed, epoch)`` (see :mod:`studylib.data.samplers`), and a
checkpoint stores the model, optimiser, schedule, the global RNG states (CPU, CUDA, NumPy, Python) and the
position (epoch, step inside it). A run killed at any point restarts from its last checkpoint, regenerates
that epoch's batches, skips those already done and continues; on the CPU its final weights equal those of an
uninterrupted run bit for bit (tested in ``tests/training/test_resume.py``).
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from studylib.data.base import ImageSplit
from studylib.data.samplers import (Batch, EpisodicSampler, FixedCompositionSampler, ReplacementSampler,
                                    ShuffledSampler)
from studylib.methods.base import Method
from studylib.training.runstore import Run
from studylib.utils import get_device

SAMPLERS = ("episodic", "shuffled", "replacement", "fixed")
BEST = "best.pt"  # early stopping's best validation weights, in the run folder
OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("step", "cosine", "constant")


@dataclass
class TrainConfig:
    """Everything the loop needs besides the method and the data.

    ``sampler`` picks the batch construction of seed 000: ``episodic`` (``ways`` x (``shots`` + ``queries``)
    with support/query roles), ``fixed`` (the same composition, no roles), ``shuffled`` (every image once
    per epoch, ``batch_size``) and ``replacement`` (independent batches). ``batches_per_epoch`` defaults to
    ``len(train) // batch_size`` so every sampler sees the same number of images per epoch.
    ``milestones`` are fractions of the total number of steps (seed 000: x0.1 at 70%).
    ``patience`` turns on early stopping (seed 002, Appendix A): training stops after that many validations
    without a new best ``val_acc`` and ends with the best validation weights. It needs a ``validate`` callback.
    """

    epochs: int = 10
    sampler: str = "shuffled"
    batch_size: int = 128
    ways: int = 5
    shots: int = 1
    queries: int = 15
    batches_per_epoch: int | None = None
    replacement: bool = True
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    schedule: str = "step"
    milestones: list[float] = field(default_factory=lambda: [0.7])
    gamma: float = 0.1
    warmup_steps: int = 0
    grad_clip: float | None = None
    amp: bool = True
    channels_last: bool = True
    checkpoint_every: int = 100
    val_every: int = 1
    patience: int | None = None
    seed: int = 0
    device: str = "auto"
    progress: bool = True

    def check(self) -> None:
        for name, value, allowed in (("sampler", self.sampler, SAMPLERS), ("optimizer", self.optimizer, OPTIMIZERS),
                                     ("schedule", self.schedule, SCHEDULES)):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not known; allowed: {', '.join(allowed)}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 validations (or None for no early stopping), got {self.patience}")

    @property
    def images_per_batch(self) -> int:
        if self.sampler == "episodic":
            return self.ways * (self.shots + self.queries)
        if self.sampler == "fixed":
            return self.ways * self.shots
        return self.batch_size


def build_sampler(cfg: TrainConfig, split: ImageSplit, labels_needed: bool) -> ShuffledSampler | EpisodicSampler:
    """The sampler ``cfg`` names over ``split``; episodic ones fail early when the split cannot hold them.

    For ``fixed`` the composition is ``ways`` classes x ``shots`` images (no roles).
    ``labels_needed=False`` (self-supervised methods) builds batches without ever reading ``split.labels``.
    """
    per_epoch = cfg.batches_per_epoch or max(1, len(split) // cfg.images_per_batch)
    if cfg.sampler == "episodic":
        return EpisodicSampler(split.labels, cfg.ways, cfg.shots, cfg.queries, per_epoch, cfg.replacement,
                               cfg.seed, what=f"training split {split.name}")
    if cfg.sampler == "fixed":
        return FixedCompositionSampler(split.labels, cfg.ways, cfg.shots, per_epoch, cfg.replacement, cfg.seed,
                                       what=f"training split {split.name}")
    labels = split.labels if labels_needed else None
    if cfg.sampler == "replacement":
        return ReplacementSampler(len(split), cfg.batch_size, per_epoch, labels, cfg.seed)
    sampler = ShuffledSampler(len(split), cfg.batch_size, labels, cfg.seed)
    if cfg.batches_per_epoch is not None and cfg.batches_per_epoch != len(sampler):
        raise ValueError(f"the shuffled sampler visits every image once per epoch ({len(sampler)} batches of "
                         f"{cfg.batch_size}); batches_per_epoch={cfg.batches_per_epoch} contradicts it. Leave it "
                         f"unset or use sampler='replacement'")
    return sampler


def build_optimizer(cfg: TrainConfig, params: Any) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                               nesterov=cfg.nesterov and cfg.momentum > 0)
    cls = torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def lr_factor(cfg: TrainConfig, step: int, total: int) -> float:
    """Multiplier of the base learning rate at optimiser step ``step`` of ``total`` (per-step schedule)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / max(total, 1)))
    passed = sum(step >= int(round(m * total)) for m in cfg.milestones)
    return cfg.gamma ** passed


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": torch.from_numpy(np.frombuffer(np.random.get_state()[1].tobytes(), dtype=np.uint8).copy()),
        "numpy_pos": int(np.random.get_state()[2]),
        "python": torch.tensor(list(random.getstate()[1]), dtype=torch.int64),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    keys = np.frombuffer(state["numpy"].numpy().tobytes(), dtype=np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy_pos"], 0, 0.0))
    random.setstate((3, tuple(int(x) for x in state["python"].tolist()), None))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class Interrupted(RuntimeError):
    """Raised by the ``stop_after`` test hook to simulate a kill between two steps."""


def train(method: Method, train_split: ImageSplit, cfg: TrainConfig, run: Run,
          validate: Callable[[Method, int], dict[str, float]] | None = None,
          stop_after: int | None = None) -> Method:
    """Train ``method`` on ``train_split``, resuming from ``run``'s checkpoint when there is one.

    Args:
        method: the objective and its trainable modules.
        train_split: the training split (moved to the device once, as uint8).
        cfg: loop settings.
        run: where checkpoints and metrics go.
        validate: called as ``validate(method, epoch)`` every ``cfg.val_every`` epochs and after the last one
            (the method in eval mode); returns metrics to log, such as few-shot validation accuracy.
        stop_after: test hook: raise :class:`Interrupted` after this many optimiser steps in this call,
            right after (possibly) checkpointing, to simulate a kill.

    Returns:
        The trained method (also left in ``run``'s checkpoint).
    """
    cfg.check()
    device = get_device(cfg.device)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    sampler = build_sampler(cfg, train_split, labels_needed=method.uses_labels)
    method.to(device)
    on_gpu = device.type == "cuda"
    if on_gpu and cfg.channels_last:
        method.to(memory_format=torch.channels_last)
    images = train_split.images.to(device)
    optimizer = build_optimizer(cfg, [p for p in method.parameters() if p.requires_grad])
    steps_per_epoch = len(sampler)
    total = cfg.epochs * steps_per_epoch

    if cfg.patience is not None and validate is None:
        raise ValueError("early stopping (patience) needs validation: the run has no validation split or "
                         "val_episodes = 0")
    epoch, step_in_epoch, global_step = 0, 0, 0
    best, since_best, stopped = -math.inf, 0, False  # early stopping (cfg.patience)
    state = run.load_checkpoint(map_location=device)
    if state is not None:
        method.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, step_in_epoch, global_step = int(state["epoch"]), int(state["step_in_epoch"]), int(state["global_step"])
        if "early" in state:
            best, since_best, stopped = float(state["early"][0]), int(state["early"][1]), bool(state["early"][2])
        _set_rng_state(state["rng"], device)
        run.set_metrics([r for r in run.metrics if r.get("step", 0) <= global_step])
    else:
        run.set_metrics([])

    def checkpoint() -> None:
        state = {"model": method.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                 "step_in_epoch": step_in_epoch, "global_step": global_step, "rng": _rng_state(device)}
        if cfg.patience is not None:
            state["early"] = [best, since_best, stopped]
        run.save_checkpoint(state)
        run.flush()

    calls = 0
    bar = tqdm(total=total, initial=global_step, disable=not cfg.progress, desc=run.path.name,
               dynamic_ncols=True, file=sys.stdout, mininterval=1.0)
    use_amp = cfg.amp and on_gpu
    while epoch < cfg.epochs and not stopped:
        method.train()
        batches = sampler.epoch(epoch)
        loss_sum, n_sum, t0 = 0.0, 0, time.perf_counter()
        for batch in batches[step_in_epoch:]:
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * lr_factor(cfg, global_step, total)
            x = images[batch.indices.to(device)]
            batch = _to_device(batch, device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                loss, logs = method.loss(x, batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at step {global_step} (epoch {epoch}); lower "
                                         f"the learning rate ({cfg.lr}) or check the data")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(method.parameters(), cfg.grad_clip)
            optimizer.step()
            method.on_step_end(global_step, total)
            global_step += 1
            step_in_epoch += 1
            calls += 1
            loss_value = float(loss.detach())  # one device sync per step, for the log and the bar
            loss_sum += loss_value * len(batch)
            n_sum += len(batch)
            rate = n_sum / max(time.perf_counter() - t0, 1e-9)
            row = {"step": global_step, "epoch": epoch, "loss": loss_value,
                   "lr": optimizer.param_groups[0]["lr"], **{k: float(v) for k, v in logs.items()}}
            run.log(row)
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.3f}", img_s=f"{rate:.0f}", refresh=False)
            if global_step % cfg.checkpoint_every == 0 and step_in_epoch < steps_per_epoch:
                checkpoint()
            if stop_after is not None and calls >= stop_after:
                bar.close()
                raise Interrupted(f"stopped after {calls} steps (test hook)")
        extra = method.on_epoch_end(epoch) or {}
        epoch_row: dict[str, Any] = {"step": global_step, "epoch": epoch, "train_loss": loss_sum / max(n_sum, 1),
                                     **extra}
        if validate is not None and ((epoch + 1) % cfg.val_every == 0 or epoch + 1 == cfg.epochs):
            method.eval()
            epoch_row.update(validate(method, epoch))
            if cfg.patience is not None:
                if epoch_row["val_acc"] > best:
                    best, since_best = float(epoch_row["val_acc"]), 0
                    run.save_tensor(BEST, {k: v.detach().cpu() for k, v in method.state_dict().items()})
                else:
                    since_best += 1
                    stopped = since_best >= cfg.patience
                epoch_row.update(best_val_acc=best, early_stop=stopped)
        run.log(epoch_row)
        epoch += 1
        step_in_epoch = 0
        checkpoint()
    bar.close()
    if cfg.patience is not None and run.has(BEST):
        method.load_state_dict(run.load_tensor(BEST))  # end with the best validation weights
    method.eval()
    return method


def _to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(batch.indices.to(device),
                 batch.labels.to(device) if batch.labels is not None else None,
                 batch.support.to(device) if batch.support is not None else None,
                 batch.ways, batch.shots, batch.queries)


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The fields that change what a run computes (the progress flag does not)."""
    d = asdict(cfg)
    d.pop("progress")
    d.pop("checkpoint_every")
    if d["patience"] is None:  # added later: leaving it out when off keeps the hashes of earlier runs
        d.pop("patience")
    return d
