"""Training speed against its own ceiling, measured in one run (issues 9 and 30).

For every benchmarked configuration the script times, in the same process:

* the **project's loop** (:func:`studylib.training.loop.train`: sampler, uint8 data on the device, batched
  augmentation, bf16 autocast and channels-last on CUDA, fused SGD, logging, checkpoint guards);
* the **bare step** ("ceiling"): the same method's modules and loss and the same optimiser on one fixed batch
  already on the device (its augmentation computed once and replayed), the same autocast and channels-last,
  ``zero_grad + backward + step`` and the method's step hook (BECLR's EMA teacher), nothing else; eager, and
  ``torch.compile``\\d as a whole (on CUDA by default; ``--ceiling-compile on`` on the CPU, where inductor's
  C++ compile of a Conv4 step took 77 s on 2 cores and ran slower than eager);
* **FLOPs per step** of the bare step (``torch.utils.flop_counter.FlopCounterMode``, forward + backward) and the
  device's **matrix rate**, a timed large matmul (bf16 on CUDA, fp32 on the CPU), hence the model FLOP
  utilisation (MFU) of the loop and of the ceiling.

Every rate is throughput over a window: (timed steps x images per step) / the time between a device sync
before the first timed step and one after the last (periodic costs such as the loop's block reads count);
wall time on CUDA, the process's CPU time on the CPU (a shared machine's other jobs barely move it).

Configurations (``--rows``):

* ``nca``: seed 000's miniImageNet NCA (ResNet-12 BasicBlock, 84 px, batch 512, 128-d projection, T = 0.9),
  plus the authors' style of pipeline (PIL + torchvision transforms in DataLoader workers, fp32, same backbone,
  projection and NCA loss, SGD) for the project / official-style ratio; ``--compile`` adds the loop with the
  backbone compiled (``TrainConfig.compile``).
* ``beclr``: seed 001's BECLR (ResNet-18, 224 px, B = 256) with and without the DyCE memories (memory full and
  past its adaptation period before timing), in bf16 autocast and/or fp32 (``--precision``): DyCE's overhead
  ``t_with / t_without - 1`` and its share ``1 - t_without / t_with`` of the step, for the loop and the bare
  step.
* ``pn``, ``spe``, ``set2model`` (``conv4`` selects the three): the Conv4 paper configurations of notebooks 10
  (PN and 64-d SPE: 60-way 1-shot 5-query Omniglot episodes, Adam) and 12 (S2M-Gauss: 3 tuples of 5 + 15
  images, Adam), 28 px grey images.

Sizes (``SIZES``): ``full`` on CUDA; ``quick`` every path on a CPU in a few minutes; ``tiny`` in seconds (the
CPU plan of ``./study gpu-check --tiny``). The data are generated (class colour patterns plus noise), as the
timing does not depend on the pixels. ``--budget S`` ends the run within about ``S`` seconds: a measurement that
would not fit (the compiled ones first) is skipped and named in the JSON; the JSON is rewritten after every row,
so a run killed at its limit keeps what it measured. ``--profile DIR`` writes torch.profiler tables of the loop
and of the bare step (by operator, self time) per configuration.

    .venv/bin/python benchmarks/bench_train.py                      # on a GPU: nca and beclr, full size
    .venv/bin/python benchmarks/bench_train.py --quick --rows nca,conv4   # anywhere
    .venv/bin/python benchmarks/bench_train.py --rows nca --compile --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from studylib.data.base import FewShotDataset, ImageSplit
from studylib.runs.runner import DataSpec, EvalSpec, RunSpec, build_parts
from studylib.training.loop import TrainConfig, build_optimizer, build_sampler, epoch_to_device, train
from studylib.training.runstore import RunStore
from studylib.utils import get_device

CONV4_ROWS = ("pn", "spe", "set2model")
ROWS = ("nca", "beclr", *CONV4_ROWS)
#: seconds a compiled measurement is expected to need at least (the compile itself); skipped below it
COMPILE_RESERVE_S = {"cuda": 60.0, "cpu": 150.0}


def synthetic(classes: int, per_class: int, size: int, channels: int = 3, seed: int = 0) -> FewShotDataset:
    """A class-structured uint8 data set (class patterns plus noise), like a real split's shapes."""
    g = np.random.default_rng(seed)
    pats = g.integers(0, 256, (classes, channels, 12, 12), dtype=np.uint8)
    reps = -(-size // 12)
    pats = pats.repeat(reps, 2).repeat(reps, 3)[:, :, :size, :size]
    labels = np.repeat(np.arange(classes), per_class)
    noise = g.integers(-60, 61, (len(labels), channels, size, size), dtype=np.int16)
    imgs = np.clip(pats[labels].astype(np.int16) + noise, 0, 255).astype(np.uint8)
    split = ImageSplit(torch.from_numpy(imgs), torch.from_numpy(labels), [f"c{i}" for i in range(classes)],
                       name="bench/train")
    return FewShotDataset("bench", {"train": split, "test": split})


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _now(device: torch.device) -> float:
    """The clock of a timed window: wall time on CUDA; on the CPU this process's CPU time (user + system, all
    its threads), which a shared machine's other jobs disturb far less than the wall clock."""
    return time.perf_counter() if device.type == "cuda" else time.process_time()


@dataclass
class Case:
    """One benchmarked configuration: the run spec (on the bench's data) and how to time it."""

    key: str                 # figure prefix: nca, beclr_bf16_dyce, pn, ...
    title: str
    spec: RunSpec
    data: FewShotDataset
    per_step: int            # images (BECLR: views) per optimiser step
    warm: int                # steps before timing (BECLR: until the memory is full and DyCE retrieves)
    steps: int               # timed steps
    unit: str = "img/s"
    epoch_end: bool = False  # the loop's timed window holds one end of an epoch (its checkpoint)

    def with_train(self, **changes: Any) -> "Case":
        return replace(self, spec=replace(self.spec, train=replace(self.spec.train, **changes)))


# ------------------------------------------------------------------------------------------------ the loop


class StepClock:
    """Wall-clock stamps around the timed window of steps, via the method's step hook: a device sync after the
    last warm-up step and after the last timed step, none in between (the loop keeps its own overlap)."""

    def __init__(self, method: Any, device: torch.device, warm: int, steps: int) -> None:
        self.t0: float | None = None
        self.t1: float | None = None
        self.steps = steps
        inner = method.on_step_end
        count = [0]

        def hook(step: int, total: int) -> None:
            inner(step, total)
            count[0] += 1
            if count[0] in (warm, warm + steps):
                _sync(device)
                now = _now(device)
                if count[0] == warm:
                    self.t0 = now
                else:
                    self.t1 = now

        method.on_step_end = hook

    def rate(self, per_step: int) -> float:
        if self.t0 is None or self.t1 is None:
            raise RuntimeError("the run ended before the timed window closed")
        return self.steps * per_step / (self.t1 - self.t0)


def loop_config(cfg: TrainConfig, warm: int, steps: int, epoch: int | None) -> TrainConfig:
    """The loop's settings for ``warm`` + ``steps`` steps: with ``epoch``, epochs of that many steps and the
    default checkpoint period, the run cut at ``warm + steps`` (so a window of ``epoch`` steps holds one epoch
    end with its checkpoint, and the mid-epoch checkpoints of a real run); without, one epoch and no checkpoint
    before the end."""
    total = warm + steps
    if epoch is None:
        return replace(cfg, epochs=1, batches_per_epoch=total, max_steps=None, checkpoint_every=10**9,
                       progress=False)
    return replace(cfg, epochs=-(-total // epoch), batches_per_epoch=epoch, max_steps=total,
                   checkpoint_every=TrainConfig.checkpoint_every, progress=False)


def loop_rate(case: Case, profile: Path | None = None) -> float:
    """Throughput of the project's loop on ``case`` (``warm`` steps, then ``steps`` timed)."""
    spec = case.spec
    method, _ = build_parts(spec, case.data)
    clock = StepClock(method, get_device(spec.train.device), case.warm, case.steps)
    with tempfile.TemporaryDirectory() as tmp:
        run = RunStore(tmp).run(spec.name, spec.config())
        with _profiled(profile, f"{case.key}-loop"):
            train(method, case.data["train"], spec.train, run)
    return clock.rate(case.per_step)


# -------------------------------------------------------------------------------------------- the bare step


class Replay(nn.Module):
    """Stands in for an augmentation: computes it once, then returns that float batch on every call."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        self.out: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out is None:
            with torch.no_grad():
                self.out = self.fn(x).detach()
        return self.out


AUGMENT_ATTRIBUTES = ("augment", "augment_a", "augment_b")


class BareStep:
    """The method's step without the loop around it (module docstring): a callable doing one optimiser step."""

    def __init__(self, case: Case, compiled: bool) -> None:
        cfg = case.spec.train
        self.device = device = get_device(cfg.device)
        method, _ = build_parts(case.spec, case.data)
        for name in AUGMENT_ATTRIBUTES:  # the batch's augmentation is computed once and replayed
            fn = getattr(method, name, None)
            if fn is not None:
                setattr(method, name, Replay(fn))
        method.to(device)
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # as the loop
            if cfg.channels_last:
                method.to(memory_format=torch.channels_last)
        method.train()
        split = case.data["train"]
        sampler = build_sampler(cfg, split, labels_needed=method.uses_labels)
        batch = epoch_to_device(sampler.epoch(0)[:1], device)[0]
        images = split.images[batch.indices.cpu()].to(device)
        optimizer = build_optimizer(cfg, [p for p in method.parameters() if p.requires_grad])
        amp = cfg.amp and device.type == "cuda"
        for m in method.modules():  # the augmented batch exists before the first (possibly compiled) step
            if isinstance(m, Replay):
                m(images)
        total = case.warm + case.steps
        self.method, self.calls = method, 0

        def step() -> torch.Tensor:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                loss, _ = method.loss(images, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss.detach()

        self.eager = step
        run = torch.compile(step) if compiled else step

        def call() -> torch.Tensor:
            out = run()
            method.on_step_end(self.calls, total)  # BECLR's teacher EMA: part of the method's step
            self.calls += 1
            return out

        self.step = call

    def rate(self, case: Case, warm: int, profile: Path | None = None, label: str = "") -> float:
        for _ in range(warm):
            self.step()
        _sync(self.device)
        t0 = _now(self.device)
        with _profiled(profile, label):
            for _ in range(case.steps):
                self.step()
            _sync(self.device)
        return case.steps * case.per_step / (_now(self.device) - t0)

    def flops(self) -> float:
        """FLOPs of one eager step (forward + backward), from torch's FLOP counter."""
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as counter:
            self.eager()
        self.method.on_step_end(self.calls, self.calls + 1)
        self.calls += 1
        return float(counter.get_total_flops())


def matrix_rate(device: torch.device, n: int, reps: int) -> tuple[float, str]:
    """FLOP/s of an ``n x n`` matmul: bf16 on CUDA, fp32 on the CPU (median of ``reps`` timed products)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = _now(device)
        a @ b
        _sync(device)
        times.append(_now(device) - t0)
    return 2.0 * n**3 / float(np.median(times)), str(dtype).replace("torch.", "")


class _profiled:
    """``torch.profiler`` around a block when ``folder`` is set: the operator table (self time) to a file."""

    def __init__(self, folder: Path | None, label: str) -> None:
        self.folder, self.label, self.prof = folder, label, None

    def __enter__(self) -> None:
        if self.folder is not None:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.prof is None:
            return
        self.prof.__exit__(*exc)
        key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
        table = self.prof.key_averages().table(sort_by=key, row_limit=40)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{self.label}.txt").write_text(table)


# ------------------------------------------------------------------------------------------ configurations


#: Sizes per mode. NCA: (batch, timed steps, warm-up steps, images per class of 64 classes, image size); the
#: timed steps are one epoch (full: 38,400 / 512 = 75, miniImageNet's). BECLR: (batch, timed steps, memory
#: size, partitions, images per class of 64 classes, image size); 64 x 40 images at 224 px on the GPU (385 MB;
#: the sampler draws with replacement, so the step time does not depend on it); no epoch end in its window (its
#: epoch is 150 steps of 0.15 s). Conv4: (timed steps, warm-up steps, classes, images per class, image size);
#: full: timed steps None = the paper's epoch (100 episodes for notebook 10, 500 batches for 12); the episode
#: shapes are the paper's (params/10_spe_omniglot, params/12_set2model_omniglot) at every size but tiny. The
#: loop's window holds one epoch end in every mode but BECLR's (quick and tiny: epochs as short as the window).
SIZES: dict[str, dict[str, tuple]] = {
    "full": {"nca": (512, 75, 10, 600, 84), "beclr": (256, 15, 8192, 200, 40, 224),
             "conv4": (None, 10, 100, 20, 28)},
    "quick": {"nca": (16, 6, 2, 40, 84), "beclr": (4, 5, 64, 4, 20, 224), "conv4": (6, 2, 64, 20, 28)},
    "tiny": {"nca": (4, 2, 1, 8, 32), "beclr": (4, 2, 16, 2, 4, 32), "conv4": (2, 1, 8, 6, 28)},
}


def nca_spec(batch: int, steps: int, size: int, compile_: bool, device: str) -> RunSpec:
    """Seed 000's miniImageNet NCA (00_quickstart's paper parameters) with ``steps`` steps in one epoch; a batch
    smaller than the paper's 512 scales the learning rate 0.1 with it (0.1 on 32 images diverges; the step
    time does not depend on the rate)."""
    return RunSpec(name="bench-nca", data=DataSpec("memory", None, {}), backbone="resnet12_basic", method="nca",
                   method_options={"temperature": 0.9, "projection_dim": 128}, augment="standard",
                   train=TrainConfig(epochs=1, sampler="replacement", batch_size=batch, batches_per_epoch=steps,
                                     lr=0.1 * min(batch, 512) / 512, checkpoint_every=10**9, progress=False,
                                     compile=compile_,
                                     device=device),
                   eval=EvalSpec(val_episodes=0))


def nca_case(mode: str, device: str, data: FewShotDataset | None = None) -> Case:
    b, steps, warm, per_class, size = SIZES[mode]["nca"]
    data = data or synthetic(64, per_class, size)
    spec = nca_spec(b, warm + steps, size, False, device)
    spec.data = DataSpec.of(data)
    epoch = min(len(data["train"]) // b, steps)
    spec.train = loop_config(spec.train, warm, steps, epoch)
    return Case("nca", f"NCA ResNet-12 {size} px", spec, data, b, warm, steps, epoch_end=epoch <= steps)


def beclr_spec(batch: int, steps: int, size: int, dyce: bool, memory: int, partitions: int,
               device: str, amp: bool = True) -> RunSpec:
    opts: dict[str, Any] = dict(use_dyce=dyce, memory_size=memory, partitions=partitions, topk=3,
                                adapt_steps=0, mask_ratio=0.3, mask_patch=16)
    return RunSpec(name=f"bench-beclr-{dyce}", data=DataSpec("memory", None, {}), backbone="resnet18",
                   method="beclr", method_options=opts, augment="beclr_default",
                   train=TrainConfig(epochs=1, sampler="replacement", batch_size=batch, batches_per_epoch=steps,
                                     lr=0.3 * batch / 256, weight_decay=1e-4, schedule="cosine",
                                     checkpoint_every=10**9, progress=False, device=device, amp=amp),
                   eval=EvalSpec(val_episodes=0))


def beclr_case(mode: str, device: str, dyce: bool, prec: str, data: FewShotDataset) -> Case:
    b, steps, mem, parts, _, size = SIZES[mode]["beclr"]
    fill = -(-mem // (2 * b))  # steps before the memory is full and DyCE starts retrieving
    spec = beclr_spec(b, fill + 1 + steps, size, dyce, mem, parts, device, amp=prec == "bf16")
    spec.data = DataSpec.of(data)
    spec.train = loop_config(spec.train, fill + 1, steps, None)
    return Case(f"beclr_{prec}_{'dyce' if dyce else 'nodyce'}",
                f"BECLR ResNet-18 {size} px {prec}, {'with' if dyce else 'without'} DyCE", spec, data, 2 * b,
                fill + 1, steps, unit="views/s")


def conv4_case(key: str, mode: str, device: str, data: FewShotDataset) -> Case:
    """The paper configuration of notebook 10 (PN, SPE) or 12 (S2M-Gauss) on the bench's data."""
    from studylib.config import load_params
    steps, warm, *_ = SIZES[mode]["conv4"]
    if key in ("pn", "spe"):
        from studylib.experiments import spe_omniglot as nb
        p = load_params(nb.Params, "10_spe_omniglot", "paper", device=device)
        if mode == "tiny":
            p = replace(p, train_ways=5)
        spec = nb.make_spec(p, key, 64)
        title = f"{'PN' if key == 'pn' else 'SPE 64-d'} Conv4 28 px, {p.train_ways}-way {spec.train.shots}-shot"
    else:
        from studylib.experiments import set2model_omniglot as nb
        p = load_params(nb.Params, "12_set2model_omniglot", "paper", device=device)
        if mode == "tiny":
            p = replace(p, tuples=2, set_size=2, relevant=2)
        spec = nb.make_spec(p, "gauss", 0)
        title = f"S2M-Gauss Conv4 28 px, {p.tuples} tuples of {p.set_size} + {p.relevant}"
    steps = steps or spec.train.batches_per_epoch  # full: one epoch of the paper's length
    train_cfg = loop_config(replace(spec.train, patience=None, scale="smoke"), warm, steps, steps)
    spec = replace(spec, name=f"bench-{key}", data=DataSpec.of(data), train=train_cfg,
                   eval=replace(spec.eval, val_episodes=0))
    return Case(key, title, spec, data, train_cfg.images_per_batch, warm, steps, epoch_end=True)


# -------------------------------------------------------------------------------------------- official-style


def official_nca_rate(dataset: FewShotDataset, batch: int, steps: int, warm: int, size: int,
                      device: torch.device, workers: int) -> float:
    """The authors' style: PIL transforms in DataLoader workers, fp32, backbone + projection + NCA loss, SGD."""
    import torchvision.transforms as T
    from PIL import Image

    from studylib.methods.episodes import nca_loss
    from studylib.models import build_backbone

    split = dataset["train"]
    data = split.images.permute(0, 2, 3, 1).contiguous().numpy()
    labels = split.labels.numpy()
    tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    class Images(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(data)

        def __getitem__(self, i: int):
            return tf(Image.fromarray(data[i])), int(labels[i])

    loader = torch.utils.data.DataLoader(Images(), batch_size=batch, shuffle=True, drop_last=True,
                                         num_workers=workers, pin_memory=device.type == "cuda",
                                         persistent_workers=workers > 0)
    net = build_backbone("resnet12_basic").to(device)
    proj = torch.nn.Linear(net.out_dim, 128).to(device)
    opt = torch.optim.SGD([*net.parameters(), *proj.parameters()], lr=0.1, momentum=0.9, weight_decay=5e-4)
    it = iter(loader)
    # workers' CPU time is not this process's: wall time then
    clock = time.perf_counter if workers > 0 else (lambda: _now(device))
    t0 = 0.0
    for s in range(warm + steps):
        if s == warm:
            _sync(device)
            t0 = clock()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nca_loss(proj(net(x)), y, temperature=0.9).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss.detach())  # the authors read the loss every step
    _sync(device)
    return steps * batch / (clock() - t0)


# ---------------------------------------------------------------------------------------------------- main


class Report:
    """Rows, ratios and skipped measurements; rewritten to ``path`` (atomically) after every change."""

    def __init__(self, path: str | None, device: torch.device, mode: str, deadline: float) -> None:
        self.path, self.deadline = path, deadline
        self.data: dict[str, Any] = {"device": str(device), "mode": mode, "rows": [], "ratios": {}, "skipped": [],
                                     "flops_per_step": {}, "matrix_rate": None}
        self.rates: dict[str, float] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def row(self, key: str, case: str, batch: int, rate: float, unit: str, **extra: Any) -> None:
        self.rates[key] = rate
        self.data["rows"].append({"key": key, "case": case, "batch": batch, "img_per_s": rate, "unit": unit, **extra})
        print(f"  {case:72s} {rate:10.1f} {unit}", flush=True)
        self.save()

    def ratio(self, key: str, value: float) -> None:
        self.data["ratios"][key] = value
        self.save()

    def skip(self, key: str, why: str) -> None:
        self.data["skipped"].append({"key": key, "why": why})
        print(f"  skipped {key}: {why}", flush=True)
        self.save()

    def save(self) -> None:
        if self.path:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f, indent=1)
            os.replace(tmp, self.path)


def measure(case: Case, rep: Report, device: torch.device, ceiling_compile: bool, loop_compile: bool,
            profile: Path | None, between: Callable[[], None] | None = None) -> None:
    """Loop, bare step (eager, compiled) and FLOPs of ``case``; the ratios and MFU to ``rep``. ``between`` runs
    after the eager measurements and before the compiled ones (which the budget may cut)."""
    k, reserve = case.key, COMPILE_RESERVE_S[device.type]
    loop = loop_rate(case, profile)
    rep.row(f"{k}_project", f"{case.title}, project loop", case.per_step, loop, case.unit,
            epoch_end_in_window=case.epoch_end)
    bare = BareStep(case, compiled=False)
    ceil_eager = bare.rate(case, case.warm, profile, f"{k}-bare")
    rep.row(f"{k}_ceiling_eager", f"{case.title}, bare step eager", case.per_step, ceil_eager, case.unit)
    flops = bare.flops()
    del bare
    rep.data["flops_per_step"][k] = flops
    rep.ratio(f"{k}_gflop_per_step", flops / 1e9)
    rep.ratio(f"{k}_loop_over_ceiling_eager", loop / ceil_eager)
    rate_flops = rep.data["matrix_rate"]["flops"]
    steps_per_s = {"loop": loop / case.per_step, "ceiling_eager": ceil_eager / case.per_step}
    best = ceil_eager
    for name, sps in steps_per_s.items():
        rep.ratio(f"{k}_mfu_{name}", flops * sps / rate_flops)
    if between is not None:
        between()
    if ceiling_compile:
        if rep.left() < reserve:
            rep.skip(f"{k}_ceiling_compiled", f"{rep.left():.0f} s left of the budget, a compile needs about {reserve:.0f}")
        else:
            try:
                t0 = time.monotonic()
                comp = BareStep(case, compiled=True)
                rate = comp.rate(case, case.warm + 3)
                rep.row(f"{k}_ceiling_compiled", f"{case.title}, bare step torch.compile", case.per_step, rate,
                        case.unit, seconds=round(time.monotonic() - t0, 1))
                rep.ratio(f"{k}_loop_over_ceiling_compiled", loop / rate)
                steps_per_s["ceiling_compiled"] = rate / case.per_step
                best = max(best, rate)
                del comp
            except Exception as e:  # noqa: BLE001 - a compile failure is a finding, not the end of the run
                rep.skip(f"{k}_ceiling_compiled", f"torch.compile failed: {type(e).__name__}: {str(e)[:300]}")
    if loop_compile:
        if rep.left() < reserve:
            rep.skip(f"{k}_project_compiled", f"{rep.left():.0f} s left of the budget, a compile needs about {reserve:.0f}")
        else:
            t0 = time.monotonic()
            rate = loop_rate(case.with_train(compile=True))
            rep.row(f"{k}_project_compiled", f"{case.title}, project loop + compiled backbone", case.per_step, rate,
                    case.unit, seconds=round(time.monotonic() - t0, 1), epoch_end_in_window=case.epoch_end)
            steps_per_s["loop_compiled"] = rate / case.per_step
            loop = max(loop, rate)
    rep.ratio(f"{k}_loop_over_ceiling", loop / best)  # the best loop over the best bare step
    for name, sps in steps_per_s.items():
        if name not in ("loop", "ceiling_eager"):
            rep.ratio(f"{k}_mfu_{name}", flops * sps / rate_flops)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small batches and few steps (CPU check of every path)")
    ap.add_argument("--tiny", action="store_true", help="a few steps on small images (seconds on a CPU)")
    ap.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")
    ap.add_argument("--rows", default="nca,beclr",
                    help=f"comma-separated configurations: {', '.join(ROWS)}, or conv4 for the last three "
                         f"(default nca,beclr)")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32", "both"),
                    help="BECLR rows: bf16 autocast (the loop's default on CUDA), fp32, or both")
    ap.add_argument("--compile", action="store_true", help="also time the project's loop with the backbone compiled")
    ap.add_argument("--ceiling-compile", default="auto", choices=("auto", "on", "off"),
                    help="the compiled bare step: auto = on CUDA only (default)")
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="official-style DataLoader workers")
    ap.add_argument("--skip-beclr", action="store_true")
    ap.add_argument("--budget", type=float, default=None, help="seconds for the whole run; measurements that would "
                                                               "not fit are skipped (named in the JSON)")
    ap.add_argument("--profile", default=None, help="write torch.profiler operator tables of loop and bare step here")
    ap.add_argument("--json", default=None, help="also write the rows and ratios to this JSON file")
    args = ap.parse_args(argv)
    rows_wanted = {r.strip() for r in args.rows.split(",") if r.strip()}
    if "conv4" in rows_wanted:
        rows_wanted = (rows_wanted - {"conv4"}) | set(CONV4_ROWS)
    if not rows_wanted <= set(ROWS):
        ap.error(f"--rows {args.rows!r}: allowed rows are {', '.join(ROWS)} and conv4")
    if args.skip_beclr:
        rows_wanted.discard("beclr")
    device = get_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here (use --device cpu)")
    mode = "tiny" if args.tiny else "quick" if (args.quick or device.type != "cuda") else "full"
    ceiling_compile = args.ceiling_compile == "on" or (args.ceiling_compile == "auto" and device.type == "cuda")
    profile = Path(args.profile) if args.profile else None
    start = time.monotonic()
    rep = Report(args.json, device, mode, start + (args.budget if args.budget is not None else math.inf))
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, {mode} sizes", flush=True)
    n = {"full": 8192, "quick": 1024, "tiny": 256}[mode] if device.type == "cuda" else {"full": 2048, "quick": 1024,
                                                                                           "tiny": 512}[mode]
    flops_s, dtype = matrix_rate(device, n, 10 if mode != "tiny" else 3)
    rep.data["matrix_rate"] = {"flops": flops_s, "dtype": dtype, "n": n}
    rep.ratio("matrix_tflops", flops_s / 1e12)
    print(f"  matrix rate ({n} x {n} {dtype} matmul): {flops_s / 1e12:.3f} TFLOP/s", flush=True)
    str_dev = str(device)

    if "nca" in rows_wanted:
        case = nca_case(mode, str_dev)

        def official() -> None:
            b, steps, warm, _, size = SIZES[mode]["nca"]
            base = official_nca_rate(case.data, b, steps, warm, size, device, 0 if mode != "full" else args.workers)
            rep.row("nca_official", f"{case.title}, official-style fp32 PIL + DataLoader", b, base, case.unit)
            rep.ratio("nca_project_over_official", rep.rates["nca_project"] / base)

        measure(case, rep, device, ceiling_compile, args.compile, profile, between=official)

    if "beclr" in rows_wanted:
        _, _, _, _, per_class, size = SIZES[mode]["beclr"]
        data = synthetic(64, per_class, size)
        for prec in (("bf16", "fp32") if args.precision == "both" else (args.precision,)):
            for dyce in (False, True):
                case = beclr_case(mode, str_dev, dyce, prec, data)
                measure(case, rep, device, False, False, profile)  # eager ceilings: DyCE breaks the graph
            for what in ("project", "ceiling_eager"):
                without, with_ = (rep.rates[f"beclr_{prec}_{d}_{what}"] for d in ("nodyce", "dyce"))
                tag = "" if what == "project" else "_ceiling"
                rep.ratio(f"beclr_{prec}{tag}_dyce_overhead_pct", 100 * (without / with_ - 1))
                rep.ratio(f"beclr_{prec}{tag}_dyce_share_pct", 100 * (1 - with_ / without))

    conv4 = [k for k in CONV4_ROWS if k in rows_wanted]
    if conv4:
        _, _, classes, per_class, size = SIZES[mode]["conv4"]
        data = synthetic(classes, per_class, size, channels=1)
        for key in conv4:
            measure(conv4_case(key, mode, str_dev, data), rep, device, ceiling_compile, False, profile)

    rep.data["seconds"] = round(time.monotonic() - start, 1)
    rep.save()
    r = rep.data["ratios"]
    print("\nratios (measured in this run):")
    for key, v in r.items():
        print(f"  {key:44s} {v:10.4g}")
    if "nca_project_over_official" in r:
        print(f"NCA: project / official-style = {r['nca_project_over_official']:.2f}x")
    for prec in ("bf16", "fp32"):
        if f"beclr_{prec}_dyce_overhead_pct" in r:
            print(f"BECLR {prec}: DyCE overhead = {r[f'beclr_{prec}_dyce_overhead_pct']:+.1f} % of the step time")


if __name__ == "__main__":
    main()
