"""One training loop for every method.

The method supplies the loss of a batch (:class:`studylib.methods.base.Method`); this loop owns the rest:
the device (CUDA when present), bf16 autocast and channels-last on the GPU, the optimiser and learning-rate
schedule, a tqdm bar with the loss and images/s, periodic validation, checkpoints and exact resume.

Exact resume. Batches are a pure function of ``(seed, epoch)`` (see :mod:`studylib.data.samplers`), and a
checkpoint stores the model, optimiser, schedule, the global RNG states (CPU, CUDA, NumPy, Python) and the
position (epoch, step inside it, the epoch's partial loss sums). A run killed at any point restarts from its
last checkpoint (or the one before, when the last is damaged), regenerates that epoch's batches, skips those
already done and continues; on the CPU its final weights and its metrics equal those of an uninterrupted run bit
for bit (tested in ``tests/training/test_resume.py``). The metrics log is written before the checkpoint that
refers to it. A checkpoint records the settings exact resume depends on (:func:`exactness_settings`: torch
and NumPy versions, device, CPU threads and instruction set); resuming under others is refused unless
``STUDYLIB_ALLOW_INEXACT_RESUME=1``, which resumes with a warning and records it in ``result.json``.
A checkpoint is a snapshot (host copies of the tensors) taken between two steps; its serialisation, checksum and
write run in a background thread while training goes on (one at a time; the run waits for the last one before
it ends, and a write's error, such as a full disk, is raised at the next checkpoint or at the end).

Divergence (a non-finite or exploding loss, a non-finite parameter or buffer) stops the run with
:class:`Diverged` naming the step and the learning rate; nothing is stored as finished. TensorBoard scalars go
to ``<run>/tb/`` when the ``tensorboard`` package is installed, with validation under ``val/`` and the run's
hyperparameters in the HParams tab.

Under torchrun the same loop trains data-parallel (:mod:`studylib.training.distributed`; the lines marked
``[dist]``); in one process those lines change nothing.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import threading
import time
import warnings
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from studylib import progress as progress_display
from studylib.data.base import ImageSplit
from studylib.data.samplers import (Batch, EpisodicSampler, FixedCompositionSampler, ReplacementSampler,
                                    ShuffledSampler)
from studylib.methods.base import Method
from studylib.precision import autocast_enabled
from studylib.training import distributed
from studylib.training.runstore import CHECKPOINT, PREVIOUS, TENSORBOARD, WEIGHTS, Run, RunFileError, provenance
from studylib.utils import DiskFullError, apply_threads, get_device, kill_point

apply_threads()  # torch CPU threads from STUDYLIB_THREADS (default 1; studylib.utils.configured_threads)

SAMPLERS = ("episodic", "shuffled", "replacement", "fixed")
BEST = "best.pt"  # early stopping's best validation weights, in the run folder
OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("step", "cosine", "constant")
DIVERGENCE_FACTOR = 1e4  # a loss above this many times max(|first loss|, 1) has diverged
STATE_CHECK_EVERY = 50  # optimiser steps between checks that every parameter and buffer is finite
ETA_STEPS = 5  # paper scale: steps timed (after one warm-up step) for the wall-time estimate
ALLOW_INEXACT_RESUME = "STUDYLIB_ALLOW_INEXACT_RESUME"  # =1: resume a checkpoint under other settings
#: default ``log_every`` per device: steps whose values are read back in one block (on the CPU a read costs no
#: sync, but each block read, its stack and its progress update cost about 0.5 ms, a few % of a smoke-scale step)
LOG_EVERY = {"cpu": 10, "cuda": 50}


@dataclass
class TrainConfig:
    """Everything the loop needs besides the method and the data.

    ``sampler`` picks the batch construction of seed 000: ``episodic`` (``ways`` x (``shots`` + ``queries``)
    with support/query roles), ``fixed`` (the same composition, no roles), ``shuffled`` (every image once
    per epoch, ``batch_size``) and ``replacement`` (independent batches). ``batches_per_epoch`` defaults to
    ``len(train) // batch_size`` so every sampler sees the same number of images per epoch.
    ``milestones`` are fractions of the total number of steps (seed 000: x0.1 at 70%); each multiplies the rate
    by ``gamma``, or by its own factor ``gammas[i]`` when given (InfoPatch's code: x0.06, x0.2, x0.2).
    ``patience`` turns on early stopping (seed 002, Appendix A): training stops after that many validations
    without a new best ``val_acc`` and ends with the best validation weights. It needs a ``validate`` callback.
    ``max_steps`` ends training after that many optimiser steps (the check scale's cut of a paper
    configuration); the schedule then spans those steps, and the epoch in progress is closed as usual.
    On CUDA the loop also turns on ``cudnn.benchmark`` and the fused SGD kernel; ``compile`` compiles the
    backbone with ``torch.compile`` (``nn.Module.compile``: state-dict keys unchanged). None of these change the
    mathematics, only the kernels, so like the device and thread count they are not part of a run's hash.
    ``benchmarks/bench_train.py`` measures them against an official-style pipeline.
    """

    epochs: int = 10
    sampler: str = "shuffled"
    episodes_per_batch: int = 1
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
    gammas: list[float] | None = None  # one factor per milestone (InfoPatch's table: 0.1 -> 0.006 -> 0.0012 ...)
    warmup_steps: int = 0
    grad_clip: float | None = None
    amp: bool = True
    channels_last: bool = True
    checkpoint_every: int = 100
    val_every: int = 1
    patience: int | None = None
    max_steps: int | None = None
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    log_every: int | None = None
    scale: str = "smoke"
    compile: bool = False

    def check(self) -> None:
        for name, value, allowed in (("sampler", self.sampler, SAMPLERS), ("optimizer", self.optimizer, OPTIMIZERS),
                                     ("schedule", self.schedule, SCHEDULES)):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not known; allowed: {', '.join(allowed)}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.episodes_per_batch < 1 or (self.episodes_per_batch > 1 and self.sampler != "episodic"):
            raise ValueError(f"episodes_per_batch={self.episodes_per_batch} needs to be >= 1, and more than 1 only "
                             f"with sampler='episodic' (got sampler={self.sampler!r})")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 (or None for the whole schedule), got {self.max_steps}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 validations (or None for no early stopping), got {self.patience}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")
        if self.gammas is not None and (len(self.gammas) != len(self.milestones)
                                        or not all(math.isfinite(g) and g > 0 for g in self.gammas)):
            raise ValueError(f"gammas={self.gammas} needs one positive factor per milestone ({len(self.milestones)}: "
                             f"{self.milestones}), or None for the constant gamma={self.gamma}")
        for name in ("checkpoint_every", "val_every", "log_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    @property
    def images_per_batch(self) -> int:
        if self.sampler == "episodic":
            return self.ways * (self.shots + self.queries) * self.episodes_per_batch
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
                               cfg.seed, what=f"training split {split.name}", episodes_per_batch=cfg.episodes_per_batch)
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
    """The optimiser ``cfg`` names; SGD uses its fused kernel when every parameter lives on CUDA."""
    params = list(params)
    if cfg.optimizer == "sgd":
        fused = bool(params) and all(p.is_cuda for p in params)
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                               nesterov=cfg.nesterov and cfg.momentum > 0, fused=fused or None)
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
    if cfg.gammas is not None:  # milestone i multiplies the rate by gammas[i] (milestones in increasing order)
        return math.prod(g for m, g in sorted(zip(cfg.milestones, cfg.gammas)) if step >= int(round(m * total)))
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


def exactness_settings(device: torch.device) -> dict[str, Any]:
    """What bit-exact resume depends on besides the checkpoint: library versions, device, and on the CPU the
    thread count and the instruction set torch dispatches to (they change reduction orders)."""
    settings: dict[str, Any] = {"torch": str(torch.__version__), "numpy": np.__version__, "device_type": device.type}
    if device.type == "cuda":
        settings.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    else:
        settings.update(threads=torch.get_num_threads(), cpu_capability=torch.backends.cpu.get_cpu_capability())
    return settings


class Interrupted(RuntimeError):
    """Raised by the ``stop_after`` test hook to simulate a kill between two steps."""


class Diverged(FloatingPointError):
    """Training diverged (non-finite or exploding loss, non-finite weights); the message names the step and lr."""


class ResumeMismatch(RuntimeError):
    """A checkpoint would be resumed under settings that break exact resume (see :func:`exactness_settings`)."""


@dataclass
class _Position:
    """The loop's state besides the modules: saved in every checkpoint."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    loss_sum: float = 0.0  # sum of loss x images over the steps of the current epoch so far
    n_sum: int = 0  # images of the current epoch so far
    loss0: float | None = None  # the run's first loss: the divergence bound's reference
    best: float = -math.inf  # early stopping (cfg.patience)
    since_best: int = 0
    stopped: bool = False
    seconds: float = 0.0  # training wall time of earlier processes (up to their last checkpoint)
    inexact: list[dict[str, Any]] = field(default_factory=list)  # resumes allowed despite other settings


def train(method: Method, train_split: ImageSplit, cfg: TrainConfig, run: Run,
          validate: Callable[[Method, int], dict[str, float]] | None = None,
          stop_after: int | None = None) -> Method:
    """Train ``method`` on ``train_split``, resuming from ``run``'s checkpoint when there is one.

    A finished run (``run.finished``) is not trained again: its final weights are loaded into ``method``.
    At the end the loop writes ``weights.pt`` and the training record ``result.json`` (provenance, wall time)
    and deletes the checkpoints. A failure before the first checkpoint removes the run folder it created.

    Guards: the loss must stay finite and within :data:`DIVERGENCE_FACTOR` times its first value, and every
    floating-point parameter and buffer finite (checked every :data:`STATE_CHECK_EVERY` steps and before
    every checkpoint), else :class:`Diverged` names the step and the learning rate. The per-step values are
    read from the device every ``cfg.log_every`` steps (one transfer, no per-step sync on the GPU), so the
    loss guard fires at most that many steps late, naming the exact step.

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
        The trained method (in eval mode).

    Raises:
        Diverged: see above. ResumeMismatch: the checkpoint was written under other
        :func:`exactness_settings` and ``STUDYLIB_ALLOW_INEXACT_RESUME`` is not set.
        DiskFullError: the disk filled up at a checkpoint (the message says what is still on disk).
    """
    cfg.check()
    if cfg.patience is not None and validate is None:
        raise ValueError("early stopping (patience) needs validation: the run has no validation split or "
                         "val_episodes = 0")
    run = distributed.rank_view(run)  # [dist] under torchrun only rank 0 writes the run store
    device = get_device(cfg.device)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    if cfg.episodes_per_batch > 1 and not getattr(method, "multi_episode", False):
        raise ValueError(f"episodes_per_batch={cfg.episodes_per_batch}: {type(method).__name__} trains on one episode "
                         f"per batch; set episodes_per_batch=1 (only methods with multi_episode=True, e.g. "
                         f"'infopatch', take several)")
    sampler = build_sampler(cfg, train_split, labels_needed=method.uses_labels)
    method.to(device)
    on_gpu = device.type == "cuda"
    if on_gpu and cfg.channels_last:
        method.to(memory_format=torch.channels_last)
    if on_gpu:
        torch.backends.cudnn.benchmark = True  # fixed input shapes: pick the fastest convolution once
    if cfg.compile and hasattr(method, "backbone"):
        method.backbone.compile()
    if run.finished:
        method.load_state_dict(run.load_tensor(WEIGHTS))
        method.eval()
        return method
    created = not run.exists
    run.open()
    try:
        return _train(method, train_split, cfg, run, validate, stop_after, sampler, device)
    except BaseException:
        if created and run.status == "empty":  # nothing to resume: leave no folder behind
            run.remove()
        raise


def _train(method: Method, train_split: ImageSplit, cfg: TrainConfig, run: Run,
           validate: Callable[[Method, int], dict[str, float]] | None, stop_after: int | None,
           sampler: Any, device: torch.device) -> Method:
    on_gpu = device.type == "cuda"
    images = train_split.images.to(device)
    optimizer = build_optimizer(cfg, [p for p in method.parameters() if p.requires_grad])
    steps_per_epoch = len(sampler)
    total = cfg.epochs * steps_per_epoch if cfg.max_steps is None else min(cfg.max_steps, cfg.epochs * steps_per_epoch)
    settings = exactness_settings(device)
    pos = _Position()
    state = run.load_checkpoint(map_location=device)
    if state is not None:
        _check_settings(state.get("settings"), settings, run, pos, int(state["global_step"]))
        method.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        pos.epoch, pos.step_in_epoch, pos.global_step = (int(state["epoch"]), int(state["step_in_epoch"]),
                                                         int(state["global_step"]))
        if "early" in state:
            pos.best, pos.since_best, pos.stopped = (float(state["early"][0]), int(state["early"][1]),
                                                     bool(state["early"][2]))
        sums = state.get("epoch_sums", [0.0, 0])  # absent only in checkpoints resumed inexactly anyway
        pos.loss_sum, pos.n_sum = float(sums[0]), int(sums[1])
        pos.loss0 = state.get("loss0")
        pos.seconds = float(state.get("seconds", 0.0))
        pos.inexact = list(state.get("inexact", [])) + pos.inexact
        _set_rng_state(state["rng"], device)
        try:
            rows = run.metrics
        except RunFileError as e:
            if e.kind not in ("damaged", "sidecar"):
                raise
            rows = run.salvage_metrics(pos.global_step)  # the checkpoint is what resuming needs: heal the log
        run.set_metrics([r for r in rows if r.get("step", 0) <= pos.global_step])
    else:
        run.set_metrics([])
    loss_of = distributed.prepare(method, device)  # [dist] method.loss, or DDP over sharded backbones
    saved_step = pos.global_step if state is not None else None
    t_start = time.perf_counter()
    log_every = cfg.log_every or LOG_EVERY.get(device.type, LOG_EVERY["cuda"])
    tb = _tensorboard(run, pos.global_step) if distributed.is_main() else None  # [dist]
    if tb is not None:
        _tensorboard_hparams(tb, run, cfg, validate is not None)
    bar = progress_display.bar(total=total, initial=pos.global_step, desc=run.path.name,
                               enabled=cfg.progress and distributed.is_main())
    # Per-step values stay on the device until drain() reads a block of them in one transfer.
    pending: list[tuple[dict[str, Any], torch.Tensor, dict[str, Any], int]] = []
    block = {"t": time.perf_counter(), "images": 0}
    checked_step = pos.global_step  # the last step at which the parameters were known finite
    writer = _Background()  # checkpoints are written while training goes on, one at a time

    def fail(step: int, epoch: int, what: str) -> Diverged:
        lr_now = cfg.lr * lr_factor(cfg, max(step - 1, 0), total)
        return Diverged(f"training diverged at step {step} (epoch {epoch}) with learning rate {lr_now:.3g} (lr="
                        f"{cfg.lr:g}): {what}. Lower lr (or set grad_clip / warmup_steps) and re-run; nothing was "
                        f"stored as finished")

    def drain() -> None:
        if not pending:
            return
        tensors = [t for _, loss, logs, _ in pending for t in (loss, *(v for v in logs.values() if torch.is_tensor(v)))]
        values = iter(torch.stack([t.detach().reshape(()).double() for t in tensors]).tolist())  # one sync
        rows = list(pending)
        pending.clear()
        for row, _, logs, n in rows:
            loss = row["loss"] = next(values)
            row.update({k: next(values) if torch.is_tensor(v) else float(v) for k, v in logs.items()})
            if not math.isfinite(loss):
                raise fail(row["step"], row["epoch"], f"the loss became {loss}")
            if pos.loss0 is None:
                pos.loss0 = loss
            elif abs(loss) > DIVERGENCE_FACTOR * max(abs(pos.loss0), 1.0):
                raise fail(row["step"], row["epoch"], f"the loss reached {loss:.3g}, more than "
                                                      f"{DIVERGENCE_FACTOR:g} x its start ({pos.loss0:.3g})")
            pos.loss_sum += loss * n
            pos.n_sum += n
            run.log(row)
            if tb is not None:
                tb.add_scalar("train/loss", loss, row["step"])
                tb.add_scalar("train/lr", row["lr"], row["step"])
        now = time.perf_counter()
        rate = block["images"] / max(now - block["t"], 1e-9)
        block.update(t=now, images=0)
        if tb is not None:
            tb.add_scalar("train/img_per_s", rate, rows[-1][0]["step"])
        bar.set_postfix(loss=f"{rows[-1][0]['loss']:.3f}", img_s=f"{rate:.0f}", refresh=False)

    def check_state() -> None:
        nonlocal checked_step
        named = [(n, t) for n, t in (*method.named_parameters(), *method.named_buffers()) if t.is_floating_point()]
        if named:
            finite = torch.stack([torch.isfinite(t).all() for _, t in named]).cpu()
            if not bool(finite.all()):
                bad = [n for (n, _), ok in zip(named, finite.tolist()) if not ok]
                raise fail(pos.global_step, pos.epoch, f"{', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} "
                                                       f"became non-finite between steps {checked_step} and "
                                                       f"{pos.global_step}")
        checked_step = pos.global_step

    def checkpoint() -> None:
        """Snapshot the state (host copies) here; serialise, checksum and write it in the background."""
        drain()
        check_state()
        if not distributed.is_main():  # [dist] rank 0 writes the run store
            return
        state = {"model": _host_copy(method.state_dict()), "optimizer": _host_copy(optimizer.state_dict()),
                 "epoch": pos.epoch, "step_in_epoch": pos.step_in_epoch, "global_step": pos.global_step,
                 "rng": _rng_state(device), "epoch_sums": [pos.loss_sum, pos.n_sum], "loss0": pos.loss0,
                 "seconds": pos.seconds + time.perf_counter() - t_start, "settings": settings,
                 "inexact": list(pos.inexact)}
        if cfg.patience is not None:
            state["early"] = [pos.best, pos.since_best, pos.stopped]
        writer.submit(lambda rows=list(run.metrics), step=pos.global_step: write_checkpoint(state, rows, step))

    def write_checkpoint(state: dict[str, Any], rows: list[dict[str, Any]], step: int) -> None:
        nonlocal saved_step
        try:
            run.flush(rows)  # the metrics first: a kill between the two leaves rows the next resume rewrites
            kill_point("loop.after_metrics")
            run.save_checkpoint(state)
        except DiskFullError as e:
            kept = (f"{run.path} still holds the checkpoint of step {saved_step} and the metrics up to it; after "
                    f"freeing space, re-running resumes from step {saved_step}" if saved_step is not None else
                    f"this run had no checkpoint yet; re-running starts it again")
            raise DiskFullError(e.errno, f"{e.strerror}. Nothing was lost: {kept}", e.filename) from e
        saved_step = step

    calls = 0
    eta_t0 = None
    use_amp = cfg.amp and autocast_enabled(device)  # CUDA; the CPU at the check scale (studylib.precision)
    if cfg.scale == "paper":
        print(f"{run.path.name}: paper scale, {total - pos.global_step} training steps on {device} "
              f"({_device_name(device)}); estimating the wall time from the first {ETA_STEPS} steps", flush=True)
    try:
        while pos.epoch < cfg.epochs and not pos.stopped:
            method.train()
            batches = epoch_to_device(sampler.epoch(pos.epoch)[pos.step_in_epoch:], device)
            for batch in batches:
                for group in optimizer.param_groups:
                    group["lr"] = cfg.lr * lr_factor(cfg, pos.global_step, total)
                try:
                    x = images[batch.indices]
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                        loss, logs = loss_of(x, batch)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if cfg.grad_clip:
                        torch.nn.utils.clip_grad_norm_(method.parameters(), cfg.grad_clip)
                    optimizer.step()
                    method.on_step_end(pos.global_step, total)
                except Exception:
                    drain()  # a loss gone bad a few steps ago is the real cause: report it (with its step)
                    raise
                pos.global_step += 1
                pos.step_in_epoch += 1
                calls += 1
                pending.append(({"step": pos.global_step, "epoch": pos.epoch, "loss": None,
                                 "lr": optimizer.param_groups[0]["lr"]}, loss.detach(), logs, len(batch)))
                block["images"] += len(batch)
                bar.update(1)
                if len(pending) >= log_every:
                    drain()
                if pos.global_step % STATE_CHECK_EVERY == 0:
                    check_state()
                if cfg.scale == "paper" and calls in (1, 1 + ETA_STEPS):
                    eta_t0 = _announce_eta(eta_t0, device, total - pos.global_step, run)
                if pos.global_step % cfg.checkpoint_every == 0 and pos.step_in_epoch < steps_per_epoch:
                    checkpoint()
                if stop_after is not None and calls >= stop_after:
                    raise Interrupted(f"stopped after {calls} steps (test hook)")
                if pos.global_step >= total:
                    break
            drain()
            extra = method.on_epoch_end(pos.epoch) or {}
            epoch_row: dict[str, Any] = {"step": pos.global_step, "epoch": pos.epoch,
                                         "train_loss": pos.loss_sum / max(pos.n_sum, 1), **extra}
            last = pos.epoch + 1 == cfg.epochs or pos.global_step >= total
            if validate is not None and ((pos.epoch + 1) % cfg.val_every == 0 or last):
                method.eval()
                epoch_row.update(distributed.main_only(validate, method, pos.epoch))  # [dist] rank 0 validates
                if cfg.patience is not None:
                    if epoch_row["val_acc"] > pos.best:
                        pos.best, pos.since_best = float(epoch_row["val_acc"]), 0
                        run.save_tensor(BEST, {k: v.detach().cpu() for k, v in method.state_dict().items()})
                    else:
                        pos.since_best += 1
                        pos.stopped = pos.since_best >= cfg.patience
                    epoch_row.update(best_val_acc=pos.best, early_stop=pos.stopped)
            run.log(epoch_row)
            if tb is not None:
                for k, v in epoch_row.items():
                    if k not in ("step", "epoch") and isinstance(v, (int, float)) and not isinstance(v, bool):
                        tb.add_scalar(_tensorboard_tag(k), v, pos.global_step)
            pos.epoch += 1
            pos.step_in_epoch = 0
            pos.loss_sum, pos.n_sum = 0.0, 0
            checkpoint()
            if pos.global_step >= total:
                break
    finally:
        try:
            writer.wait()  # the checkpoint in flight is on disk (or its error raised) before anything else
        finally:
            bar.close()
            if tb is not None:
                tb.close()
    if cfg.patience is not None and run.has(BEST):
        method.load_state_dict(run.load_tensor(BEST))  # end with the best validation weights
    check_state()
    method.eval()
    run.save_tensor(WEIGHTS, {k: v.detach().cpu() for k, v in method.state_dict().items()})
    kill_point("loop.after_weights")
    last = next((r for r in reversed(run.metrics) if "train_loss" in r), {})
    run.save_result({"kind": "training", "steps": pos.global_step, "epochs": pos.epoch,
                     "early_stopped": pos.stopped, "final_train_loss": last.get("train_loss"),
                     "train_seconds": pos.seconds + time.perf_counter() - t_start, "inexact_resumes": pos.inexact,
                     **provenance(device)})
    run.discard_checkpoints()  # weights.pt holds the final model; result.json marks the training finished
    distributed.release(method)  # [dist]
    distributed.barrier()  # [dist] rank 0's last writes are visible to every rank
    return method


def _check_settings(saved: dict[str, Any] | None, now: dict[str, Any], run: Run, pos: _Position, step: int) -> None:
    """Refuse (or, with ``STUDYLIB_ALLOW_INEXACT_RESUME=1``, warn and record) a resume under other settings."""
    saved = saved or {}
    diff = [f"{k} {saved.get(k)!r} at the checkpoint, {v!r} now" for k, v in now.items() if saved.get(k) != v]
    if not diff:
        return
    text = "; ".join(diff)
    if os.environ.get(ALLOW_INEXACT_RESUME, "").strip().lower() not in ("", "0", "false", "no"):
        warnings.warn(f"resuming {run.path.name} at step {step} under other settings ({text}): the result will not "
                      f"be bit-identical to an uninterrupted run ({ALLOW_INEXACT_RESUME} is set; recorded in "
                      f"result.json as inexact_resumes)", stacklevel=3)
        pos.inexact.append({"step": step, "differences": text})
        return
    hint = (f" (torch.set_num_threads({saved['threads']}) or OMP_NUM_THREADS={saved['threads']})"
            if "threads" in saved and saved.get("threads") != now.get("threads") else "")
    raise ResumeMismatch(f"the checkpoint of {run.path} (step {step}) was written under other settings: {text}. "
                         f"Resuming would not reproduce an uninterrupted run exactly. Restore them{hint}, or set "
                         f"{ALLOW_INEXACT_RESUME}=1 to resume anyway (recorded in result.json), or delete the "
                         f"checkpoints to train from the start: rm -f '{run.path / CHECKPOINT}' "
                         f"'{run.path / PREVIOUS}'")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{torch.get_num_threads()} CPU threads"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _announce_eta(t0: float | None, device: torch.device, remaining: int, run: Run) -> float | None:
    """Paper scale: time :data:`ETA_STEPS` steps after the first (warm-up) one, print the estimated wall time,
    and warn loudly when the run is on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    now = time.perf_counter()
    if t0 is None:
        return now
    per_step = (now - t0) / ETA_STEPS
    estimate = per_step * remaining
    print(f"{run.path.name}: {per_step:.3f} s per step on {device} ({_device_name(device)}); the remaining "
          f"{remaining} steps take about {_duration(estimate)} (training only)", flush=True)
    if device.type == "cpu":
        warnings.warn(f"PAPER-SCALE RUN ON THE CPU: {run.path.name} will take about {estimate / 86400:.1f} days "
                      f"({remaining} steps x {per_step:.2f} s); no CUDA device was found. Run it on a GPU (device "
                      f"'cuda') or use the smoke scale", RuntimeWarning, stacklevel=3)
    return None


def _tensorboard(run: Run, step: int) -> Any:
    """A TensorBoard writer on ``<run>/tb`` when the ``tensorboard`` package is installed (and
    ``STUDYLIB_TENSORBOARD`` is not 0); None otherwise. A run resumed after ``step`` purges the events after
    it (the killed process may have written some; the resumed run writes them again)."""
    if os.environ.get("STUDYLIB_TENSORBOARD", "1").strip().lower() in ("0", "false", "no"):
        return None
    if importlib.util.find_spec("tensorboard") is None:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # an incompatible tensorboard: training goes on without it
        return None
    return SummaryWriter(str(run.path / TENSORBOARD), purge_step=step + 1 if step > 0 else None)


def _tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of an epoch row's value: validation values under ``val/`` (``val_acc`` ->
    ``val/acc``, ``val_ci95`` -> ``val/ci95``), the others under ``epoch/`` (``epoch/train_loss``)."""
    return f"val/{key[4:]}" if key.startswith("val_") else f"epoch/{key}"


def _tensorboard_hparams(tb: Any, run: Run, cfg: TrainConfig, validates: bool) -> None:
    """The run's hyperparameters in TensorBoard's HParams tab, in the run's own event file: its configuration
    (``config.json``: method, backbone, data, method and backbone options) and the training settings
    (:func:`config_dict`), flattened to ``train.lr``, ``method_options.temperature``...; lists, ``None`` and
    booleans as text. The metrics the tab shows against them: ``epoch/train_loss`` and, when the run validates,
    ``val/acc``."""
    import json
    from torch.utils.tensorboard.summary import hparams

    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, dict):
            return {prefix: d}
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out

    values = {**flat({"train": config_dict(cfg)}), **flat(dict(run.config or {}))}
    # numbers as numbers; booleans as True/False (torch's hparams() would store them as 1/0), the rest as text
    values = {k: str(v) if isinstance(v, bool) else v if isinstance(v, (int, float, str))
              else json.dumps(v, default=str) for k, v in sorted(values.items())}
    metrics = {"epoch/train_loss": 0.0, **({"val/acc": 0.0} if validates else {})}
    for summary in hparams(values, metrics):
        tb.file_writer.add_summary(summary)


def _host_copy(obj: Any) -> Any:
    """``obj`` (a state dict, nested dicts and lists) with every tensor copied to host memory: a snapshot that
    training can go on changing the originals of while it is written."""
    if torch.is_tensor(obj):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return type(obj)((k, _host_copy(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_host_copy(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_host_copy(v) for v in obj)
    return obj


class _Background:
    """Runs one job at a time in a background thread (the checkpoint writes, which would otherwise stall the
    training step for their serialisation, checksum and write: about 0.5 s for a ResNet-12 with its optimiser
    on a CPU core). :meth:`submit` first waits for the job before it; :meth:`wait` raises a job's error."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as e:  # handed to the training thread by wait()
            self._error = e

    def submit(self, job: Callable[[], None]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(job,), name="studylib-checkpoint", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def epoch_to_device(batches: Sequence[Batch], device: torch.device) -> list[Batch]:
    """An epoch's batches on ``device`` in one host-to-device copy per field.

    A pageable ``.to(device)`` per step waits for the GPU on every step (CUDA's sync debug mode counted about 4
    per step); here each field of the whole epoch is concatenated, pinned and copied without blocking, then cut
    back into views. On the CPU the batches are returned as they are.
    """
    batches = list(batches)
    if device.type == "cpu" or not batches:
        return batches
    pin = device.type == "cuda"

    def move(parts: list[torch.Tensor | None]) -> list[torch.Tensor]:
        if any(t is None for t in parts):
            raise ValueError("an epoch mixes batches with and without labels/roles; a sampler draws one kind")
        sizes = [int(t.shape[0]) for t in parts]  # type: ignore[union-attr]
        flat = torch.cat(parts)  # type: ignore[arg-type]
        flat = (flat.pin_memory() if pin else flat).to(device, non_blocking=pin)
        return list(flat.split(sizes))

    # every tensor field of Batch (indices, labels, support, classes ...), whatever fields it gains later
    names = [f.name for f in dataclasses.fields(Batch)
             if any(torch.is_tensor(getattr(b, f.name)) for b in batches)]
    moved = {name: move([getattr(b, name) for b in batches]) for name in names}
    return [dataclasses.replace(b, **{name: moved[name][k] for name in names}) for k, b in enumerate(batches)]


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The fields that change what a run computes (progress, checkpoint_every, log_every and scale do not)."""
    d = asdict(cfg)
    for name in ("progress", "checkpoint_every", "log_every", "scale", "compile"):
        d.pop(name)
    for key in ("patience", "max_steps", "gammas"):  # added later: leaving them out when off keeps earlier runs' hashes
        if d[key] is None:
            d.pop(key)
    if d["episodes_per_batch"] == 1:  # likewise
        d.pop("episodes_per_batch")
    return d
