"""Data-parallel training of one run over several processes (``torchrun``), equal to the one-process run.

``torchrun --nproc-per-node N script.py`` (or several nodes through torchrun's rendezvous) starts ``N``
processes with ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` in their environment. The first time the training loop
or the runner asks (:func:`world_size`), the process joins that group (NCCL on GPUs, gloo on CPUs). Without
those variables nothing here does anything and the one-process path is untouched.

How a step is split, and why the result equals the one-process run with the same (global) batch:

* Every rank draws the same global batch (samplers are pure functions of ``(seed, epoch)``), gathers its
  images and applies the method's augmentation to the *whole* batch with the same RNG state as every other
  rank, so the random views are exactly those of the one-process run.
* Each backbone of the method (every direct child whose name ends in ``backbone``: the student, BECLR's
  teacher) runs on this rank's contiguous slice of the rows, :func:`shard_bounds` (the deterministic shard of
  the batch's indices); its output rows are all-gathered (with gradient) so that the loss, the heads, DyCE
  and the EMA teacher see the full batch, in the same order, on every rank. DyCE memories are therefore
  enqueued with the gathered batch and stay identical on all ranks; the EMA teacher follows identical
  students. This is the backbone-level form of the SimCLR/MoCo "gather before the loss" pattern; it keeps
  batch-level losses (NCA's pairs, PN's prototypes, BECLR's negatives) exact instead of averaging
  per-shard losses, which would change them.
* BatchNorm inside the backbones normalises with the statistics of the global batch (``SyncBatchNorm`` on
  GPUs; :class:`GlobalBatchNorm` on CPUs, where torch's refuses to run), so per-shard statistics never enter.
  Every paper here was run with batch statistics over its whole batch (seed 001's authors used two GPUs
  with synchronised BatchNorm), so synchronisation is always on.
* :class:`~torch.nn.parallel.DistributedDataParallel` averages the parameter gradients. With the gathered
  loss replicated on every rank, the all-gather's backward sums ``N`` identical copies of each slice's
  gradient, and DDP's average divides by ``N``: every rank ends with the full-batch gradient.

What differs from one process is only floating-point summation order (a convolution on half the rows, two
partial sums of a weight gradient, BatchNorm statistics summed across ranks): in float64 two processes match
one to ~1e-12, in float32 to ~1e-6 after a few steps (``tests/training/test_distributed.py`` states the
tolerances). A backbone with random layers (Dropout, DropBlock) draws its masks per shard from a seed taken
from the shared RNG stream, so ranks stay in step but the masks differ from the one-process run's: such runs
are equal in distribution, not number for number.

Rank 0 alone writes to the run store (:func:`rank_view` gives the others a run that reads but never writes),
evaluates (:func:`main_only`) and writes results; every rank resumes from the same checkpoint, whose RNG
state is the one all ranks share.
"""

from __future__ import annotations

import os
import weakref
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

TIMEOUT_ENV = "STUDYLIB_DIST_TIMEOUT_MIN"  # collective timeout in minutes (default 60: rank 0 may evaluate alone)

# --------------------------------------------------------------------------------------------- process group


def launched() -> bool:
    """Whether this process was started by torchrun (or srun with the same variables) among several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init() -> bool:
    """Join the process group the environment describes (``env://``), once. True when there are >= 2 ranks."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size() > 1
    if not launched():
        return False
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed; run one process")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = timedelta(minutes=float(os.environ.get(TIMEOUT_ENV, "60")))
    r, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # The store torchrun's agent keeps across restarts still holds the previous attempt's gloo addresses (seen
    # with torch 2.14: a restarted group tried to reach the killed worker's port), so every attempt gets its
    # own key prefix. Outside torchrun (srun with the same variables) rank 0 hosts the store.
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    tcp = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                        is_master=(r == 0 and not agent), timeout=timeout)
    # A notebook under torchrun (studylib.launch) is a new kernel, so a new group, per notebook.
    group = f"{os.environ.get('STUDYLIB_DIST_GROUP', '')}/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    store = dist.PrefixStore(f"studylib/{group}", tcp)
    dist.init_process_group(backend, store=store, rank=r, world_size=world, timeout=timeout)
    return dist.get_world_size() > 1


def env_rank() -> int:
    """This process's rank as the launcher set it, without joining the group (0 when not launched)."""
    return int(os.environ.get("RANK", "0")) if launched() else 0


def world_size() -> int:
    return dist.get_world_size() if init() else 1


def rank() -> int:
    return dist.get_rank() if init() else 0


def is_main() -> bool:
    """Rank 0, or the only process."""
    return rank() == 0


def barrier() -> None:
    """Wait for every rank (nothing to do in one process)."""
    if init():
        dist.barrier()


def broadcast_from_main(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (picklable objects; identity in one process)."""
    if not init():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def main_only(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` on rank 0 only and hand its (picklable) result to every rank: evaluation runs once."""
    out = fn(*args, **kwargs) if is_main() else None
    return broadcast_from_main(out)


# ------------------------------------------------------------------------------------------------- sharding


def shard_sizes(n: int, world: int) -> list[int]:
    """Rows per rank when ``n`` rows are cut into ``world`` contiguous shards (``torch.tensor_split``'s rule:
    the first ``n % world`` ranks take one more)."""
    return [n // world + (1 if r < n % world else 0) for r in range(world)]


def shard_bounds(n: int, world: int, rank_: int) -> tuple[int, int]:
    """``[lo, hi)`` rows of a batch of ``n`` that rank ``rank_`` of ``world`` computes."""
    sizes = shard_sizes(n, world)
    lo = sum(sizes[:rank_])
    return lo, lo + sizes[rank_]


def gather_rows(y: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Concatenate every rank's ``[sizes[r], ...]`` rows into ``[sum(sizes), ...]`` in rank order.

    Differentiable when ``y`` needs a gradient (``torch.distributed.nn.functional.all_gather``: its backward
    sums the gradients that every rank's copy of the loss sends to this rank's rows). Shards of unequal size
    are padded for the collective and cut back.
    """
    width = max(sizes)
    if y.shape[0] < width:
        y_pad = torch.cat([y, y.new_zeros((width - y.shape[0], *y.shape[1:]))], dim=0)
    else:
        y_pad = y
    if torch.is_grad_enabled() and y.requires_grad:
        from torch.distributed.nn.functional import all_gather
        parts = list(all_gather(y_pad.contiguous()))
    else:
        parts = [torch.empty_like(y_pad) for _ in sizes]
        dist.all_gather(parts, y_pad.contiguous())
    return torch.cat([p[:s] for p, s in zip(parts, sizes)], dim=0)


class _ShardedForward:
    """Replaces a backbone's ``forward`` while training: compute this rank's rows, all-gather the outputs."""

    def __init__(self, module: nn.Module, stochastic: bool) -> None:
        self.module = module
        self.inner = type(module).forward.__get__(module)
        self.stochastic = stochastic

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not self.module.training:
            return self.inner(x, *args, **kwargs)
        world, r = dist.get_world_size(), dist.get_rank()
        n = x.shape[0]
        if n < world:
            raise ValueError(f"a batch of {n} rows cannot be shared by {world} processes; use a global batch of at "
                             f"least {world} images or fewer processes")
        sizes = shard_sizes(n, world)
        lo, hi = shard_bounds(n, world, r)
        if self.stochastic:
            # One draw from the stream every rank shares keeps the ranks in step; each shard gets its own masks.
            seed = int(torch.randint(0, 2**62, (1,)))
            devices = [x.device] if x.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed + 1_000_003 * r)
                y = self.inner(x[lo:hi], *args, **kwargs)
        else:
            y = self.inner(x[lo:hi], *args, **kwargs)
        if not isinstance(y, torch.Tensor) or y.shape[0] != hi - lo:
            raise TypeError(f"data-parallel training needs a backbone that maps [B, ...] to a [B, ...] tensor; "
                            f"{type(self.module).__name__} returned {type(y).__name__}")
        return gather_rows(y, sizes)


def _is_stochastic(module: nn.Module) -> bool:
    from studylib.models.backbones import DropBlock
    return any(isinstance(m, (nn.modules.dropout._DropoutNd, DropBlock)) for m in module.modules())


# ------------------------------------------------------------------------------------------------ BatchNorm


class GlobalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm over the global batch of all ranks (any device; used where ``nn.SyncBatchNorm`` refuses CPUs).

    In training with >= 2 ranks, with ``x`` of shape ``[B_r, C, ...]`` on rank ``r``:
    ``mean = sum_r sum(x_r) / n``, ``var = sum_r sum((x_r - mean)^2) / n`` (two differentiable all-reduces,
    ``n = sum_r B_r * prod(spatial)``), ``y = (x - mean) / sqrt(var + eps) * weight + bias``; running
    statistics take the unbiased ``var * n / (n - 1)`` (as ``nn.BatchNorm`` does). Evaluation, or a single
    process, is plain BatchNorm. Parameters and buffers keep their names, so state dicts are unchanged.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input, got {input.dim()}D")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        use_batch = self.training or not self.track_running_stats
        if not (use_batch and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce
        self._check_input_dim(x)
        dims = [0] + list(range(2, x.dim()))
        shape = [1, -1] + [1] * (x.dim() - 2)
        count = torch.tensor([x.numel() // x.shape[1]], dtype=torch.int64, device=x.device)
        dist.all_reduce(count)
        n = int(count.item())
        mean = all_reduce(x.sum(dims)) / n
        xc = x - mean.view(shape)
        var = all_reduce((xc * xc).sum(dims)) / n
        y = xc * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                f = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                unbiased = var.detach() * (n / max(n - 1, 1))
                self.running_mean.mul_(1 - f).add_(mean.detach(), alpha=f)
                self.running_var.mul_(1 - f).add_(unbiased, alpha=f)
        return y


def sync_batchnorm(module: nn.Module, device: torch.device) -> nn.Module:
    """Swap every BatchNorm inside ``module`` for a global one, in place (same parameters and buffers).

    CUDA: ``nn.SyncBatchNorm`` (torch's fused kernels); elsewhere :class:`GlobalBatchNorm`.
    """
    if device.type == "cuda":
        for name, child in list(module.named_children()):
            setattr(module, name, nn.SyncBatchNorm.convert_sync_batchnorm(child))
        return module
    for name, child in list(module.named_children()):
        if isinstance(child, nn.modules.batchnorm._BatchNorm) and not isinstance(child, GlobalBatchNorm):
            new = GlobalBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                  child.track_running_stats)
            if child.affine:
                new.weight, new.bias = child.weight, child.bias
            if child.track_running_stats:
                new.running_mean, new.running_var = child.running_mean, child.running_var
                new.num_batches_tracked = child.num_batches_tracked
            new.train(child.training)
            setattr(module, name, new)
        else:
            sync_batchnorm(child, device)
    return module


# ----------------------------------------------------------------------------------------- the loop's hooks


class _LossModule(nn.Module):
    """What DDP wraps: its forward is the method's loss, so DDP sees every forward and backward."""

    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method

    def forward(self, images: torch.Tensor, batch: Any) -> Any:
        return self.method.loss(images, batch)


_PREPARED: "weakref.WeakKeyDictionary[nn.Module, list[nn.Module]]" = weakref.WeakKeyDictionary()


def prepare(method: nn.Module, device: torch.device) -> Callable[..., Any]:
    """Make ``method`` data-parallel when running on several ranks; return the loss function to call.

    One process: returns ``method.loss`` and changes nothing. Several: global BatchNorm and sharded forwards
    in every ``*backbone`` child, then DDP around the loss (``broadcast_buffers=False``: DyCE memories and
    BatchNorm statistics are identical on every rank by construction, so re-sending them each step is waste).
    Call after the checkpoint is loaded (DDP broadcasts rank 0's weights once) and :func:`release` after.
    """
    if world_size() == 1:
        return method.loss
    from torch.nn.parallel import DistributedDataParallel as DDP
    release(method)
    backbones = [m for name, m in method.named_children() if name.endswith("backbone")]
    if not backbones:
        raise ValueError(f"{type(method).__name__} has no '*backbone' child to share across ranks; data-parallel "
                         "training splits the backbone's rows")
    for bb in backbones:
        sync_batchnorm(bb, device)
        bb.forward = _ShardedForward(bb, _is_stochastic(bb))  # instance attribute: state_dict keys unchanged
    _PREPARED[method] = backbones
    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return DDP(_LossModule(method), device_ids=ids, broadcast_buffers=False)


def release(method: nn.Module) -> None:
    """Undo :func:`prepare`'s sharded forwards (global BatchNorm stays; it is plain BatchNorm in evaluation)."""
    for bb in _PREPARED.pop(method, []):
        bb.__dict__.pop("forward", None)


# Every method of studylib.training.runstore.Run that writes (a new writer must be added here).
_WRITERS = frozenset({"open", "write_bytes", "discard", "remove", "save_checkpoint", "discard_checkpoints",
                      "set_metrics", "log", "flush", "save_result", "save_tensor"})


class _ReadOnlyRun:
    """A run as ranks other than 0 see it: reads go to the store, writes are dropped (rank 0 writes)."""

    def __init__(self, run: Any) -> None:
        self._run = run

    def __getattr__(self, name: str) -> Any:
        if name in _WRITERS:
            return lambda *a, **k: None
        return getattr(self._run, name)


def rank_view(run: Any) -> Any:
    """``run`` itself on rank 0 (or in one process); a read-only view of it on the other ranks."""
    return run if is_main() else _ReadOnlyRun(run)


__all__ = ["init", "launched", "env_rank", "world_size", "rank", "is_main", "barrier", "broadcast_from_main", "main_only",
           "shard_sizes", "shard_bounds", "gather_rows", "GlobalBatchNorm", "sync_batchnorm", "prepare",
           "release", "rank_view"]
