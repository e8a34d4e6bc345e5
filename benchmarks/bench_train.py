"""Training speed: the project's loop against an official-style fp32 PIL + DataLoader pipeline, in one run.

Cases (seed 000 and seed 001 paper configurations):

* **NCA**, ResNet-12 (the authors' BasicBlock variant) at 84 px, batch 512, 128-d projection, T = 0.9:
  the project's loop (data on the device as uint8, batched on-device augmentation, bf16 autocast and
  channels-last on CUDA, losses read in blocks, fused SGD, cudnn.benchmark, optionally ``torch.compile``)
  against the authors' style of pipeline (uint8 array -> PIL -> torchvision RandomResizedCrop + flip +
  ToTensor + Normalize in DataLoader workers, fp32, the same backbone, projection and NCA loss, SGD).
* **BECLR**, ResNet-18 at 224 px, B = 256, bf16: the project's loop with and without the DyCE memory (the
  memory is filled and past its adaptation period before timing starts).

It prints img/s for each and the ratios. Targets on an H100 (issue 9): NCA >= 16,000 img/s and >= 4x the
official-style pipeline; BECLR's DyCE overhead < 10 %. ``--quick`` shrinks batches and steps so the script runs
in a minute or two on a CPU (numbers then only show that every path works, not the GPU's speed).

    .venv/bin/python benchmarks/bench_train.py                # on a GPU
    .venv/bin/python benchmarks/bench_train.py --quick        # anywhere
    .venv/bin/python benchmarks/bench_train.py --compile      # also the compiled backbone
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np
import torch

from studylib.data.base import FewShotDataset, ImageSplit
from studylib.experiments.runner import DataSpec, EvalSpec, RunSpec, build_parts
from studylib.training.loop import TrainConfig, train
from studylib.training.runstore import RunStore
from studylib.utils import get_device


def synthetic(classes: int, per_class: int, size: int, seed: int = 0) -> FewShotDataset:
    """A class-structured uint8 RGB data set (class colour patterns plus noise), like a real split's shapes."""
    g = np.random.default_rng(seed)
    pats = g.integers(0, 256, (classes, 3, 12, 12), dtype=np.uint8)
    reps = -(-size // 12)
    pats = pats.repeat(reps, 2).repeat(reps, 3)[:, :, :size, :size]
    labels = np.repeat(np.arange(classes), per_class)
    noise = g.integers(-60, 61, (len(labels), 3, size, size), dtype=np.int16)
    imgs = np.clip(pats[labels].astype(np.int16) + noise, 0, 255).astype(np.uint8)
    split = ImageSplit(torch.from_numpy(imgs), torch.from_numpy(labels), [f"c{i}" for i in range(classes)],
                       name="bench/train")
    return FewShotDataset("bench", {"train": split, "test": split})


class StepClock:
    """Wall-clock stamps after every optimiser step (synchronising the device), via the method's step hook."""

    def __init__(self, method: Any, device: torch.device) -> None:
        self.stamps: list[float] = []
        inner = method.on_step_end

        def hook(step: int, total: int) -> None:
            inner(step, total)
            if device.type == "cuda":
                torch.cuda.synchronize()
            self.stamps.append(time.perf_counter())

        method.on_step_end = hook

    def rate(self, images_per_step: int, warm: int) -> float:
        dts = np.diff(self.stamps[warm:])
        return images_per_step / float(np.median(dts))


def project_rate(spec: RunSpec, dataset: FewShotDataset, images_per_step: int, warm: int) -> float:
    """img/s of the project's loop on ``spec`` (median step time after ``warm`` steps)."""
    method, _ = build_parts(spec, dataset)
    clock = StepClock(method, get_device(spec.train.device))
    with tempfile.TemporaryDirectory() as tmp:
        run = RunStore(tmp).run(spec.name, spec.config())
        train(method, dataset["train"], spec.train, run)
    return clock.rate(images_per_step, warm)


def nca_spec(batch: int, steps: int, size: int, compile_: bool, device: str) -> RunSpec:
    return RunSpec(name="bench-nca", data=DataSpec("memory", None, {}), backbone="resnet12_basic", method="nca",
                   method_options={"temperature": 0.9, "projection_dim": 128}, augment="standard",
                   train=TrainConfig(epochs=1, sampler="replacement", batch_size=batch, batches_per_epoch=steps,
                                     lr=0.1, checkpoint_every=10**9, progress=False, compile=compile_,
                                     device=device),
                   eval=EvalSpec(val_episodes=0))


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
    stamps, it = [], iter(loader)
    for _ in range(warm + steps):
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
        stamps.append(time.perf_counter())
    return batch / float(np.median(np.diff(stamps[warm:])))


def beclr_spec(batch: int, steps: int, size: int, dyce: bool, memory: int, partitions: int,
               device: str) -> RunSpec:
    opts: dict[str, Any] = dict(use_dyce=dyce, memory_size=memory, partitions=partitions, topk=3,
                                adapt_steps=0, mask_ratio=0.3, mask_patch=16)
    return RunSpec(name=f"bench-beclr-{dyce}", data=DataSpec("memory", None, {}), backbone="resnet18",
                   method="beclr", method_options=opts, augment="beclr_default",
                   train=TrainConfig(epochs=1, sampler="replacement", batch_size=batch, batches_per_epoch=steps,
                                     lr=0.3 * batch / 256, weight_decay=1e-4, schedule="cosine",
                                     checkpoint_every=10**9, progress=False, device=device),
                   eval=EvalSpec(val_episodes=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small batches and few steps (CPU check of every path)")
    ap.add_argument("--compile", action="store_true", help="also time the project's loop with torch.compile")
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="official-style DataLoader workers")
    ap.add_argument("--skip-beclr", action="store_true")
    args = ap.parse_args()
    device = get_device("auto")
    quick = args.quick or device.type != "cuda"
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads{' (quick sizes)' if quick else ''}", flush=True)
    rows = []

    b, steps, warm = (16, 6, 2) if quick else (512, 40, 10)
    data = synthetic(64, 40 if quick else 600, 84)
    spec = nca_spec(b, warm + steps, 84, False, str(device))
    spec.data = DataSpec.of(data)
    ours = project_rate(spec, data, b, warm)
    rows.append(("NCA ResNet-12 84 px, project loop", b, ours))
    if args.compile:
        spec_c = nca_spec(b, warm + steps, 84, True, str(device))
        spec_c.data = spec.data
        rows.append(("NCA ResNet-12 84 px, project loop + torch.compile", b, project_rate(spec_c, data, b, warm + 3)))
    base = official_nca_rate(data, b, steps, warm, 84, device, 0 if quick else args.workers)
    rows.append(("NCA ResNet-12 84 px, official-style fp32 PIL + DataLoader", b, base))

    if not args.skip_beclr:
        b2, steps2 = (4, 5) if quick else (256, 25)
        mem, parts = (64, 4) if quick else (8192, 200)
        fill = -(-mem // (2 * b2))  # steps before the memory is full and DyCE starts retrieving
        data2 = synthetic(64, 20 if quick else 600, 224)
        per_step = 2 * b2  # two views per image
        rates = {}
        for dyce in (False, True):
            s = beclr_spec(b2, fill + 1 + steps2, 224, dyce, mem, parts, str(device))
            s.data = DataSpec.of(data2)
            rates[dyce] = project_rate(s, data2, per_step, fill + 1)
            rows.append((f"BECLR ResNet-18 224 px, {'with' if dyce else 'without'} DyCE (views/s)", b2, rates[dyce]))

    print(f"\n{'case':64s} {'batch':>6s} {'img/s':>9s}")
    for name, batch, rate in rows:
        print(f"{name:64s} {batch:6d} {rate:9.1f}")
    print(f"\nNCA: project / official-style = {ours / base:.2f}x")
    if not args.skip_beclr:
        print(f"BECLR: DyCE overhead = {100 * (rates[False] / rates[True] - 1):+.1f} % of the step time")


if __name__ == "__main__":
    main()
