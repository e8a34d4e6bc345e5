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
in a minute or two on a CPU (numbers then only show that every path works, not the GPU's speed); ``--tiny``
takes seconds. ``--precision both`` times BECLR in bf16 autocast and in fp32; ``--json FILE`` writes the rows
and ratios for ``./study gpu-check``.

    .venv/bin/python benchmarks/bench_train.py                # on a GPU
    .venv/bin/python benchmarks/bench_train.py --quick        # anywhere
    .venv/bin/python benchmarks/bench_train.py --compile      # also the compiled backbone
"""

from __future__ import annotations

import argparse
import json
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
               device: str, amp: bool = True) -> RunSpec:
    opts: dict[str, Any] = dict(use_dyce=dyce, memory_size=memory, partitions=partitions, topk=3,
                                adapt_steps=0, mask_ratio=0.3, mask_patch=16)
    return RunSpec(name=f"bench-beclr-{dyce}", data=DataSpec("memory", None, {}), backbone="resnet18",
                   method="beclr", method_options=opts, augment="beclr_default",
                   train=TrainConfig(epochs=1, sampler="replacement", batch_size=batch, batches_per_epoch=steps,
                                     lr=0.3 * batch / 256, weight_decay=1e-4, schedule="cosine",
                                     checkpoint_every=10**9, progress=False, device=device, amp=amp),
                   eval=EvalSpec(val_episodes=0))


#: Sizes per mode: NCA (batch, timed steps, warm-up steps, classes x images per class, image size), BECLR
#: (batch, timed steps, memory size, partitions, images per class of 64 classes, image size). ``full`` is the GPU
#: run; ``quick`` every path on a CPU in a minute or two; ``tiny`` a few steps on 32-px images (seconds; the
#: CPU plan of ``./study gpu-check --tiny``). BECLR's data set holds 64 x 40 images at 224 px on the GPU (385 MB;
#: the sampler draws with replacement, so the step time does not depend on it).
SIZES: dict[str, dict[str, tuple]] = {
    "full": {"nca": (512, 40, 10, 600, 84), "beclr": (256, 25, 8192, 200, 40, 224)},
    "quick": {"nca": (16, 6, 2, 40, 84), "beclr": (4, 5, 64, 4, 20, 224)},
    "tiny": {"nca": (4, 2, 1, 8, 32), "beclr": (4, 2, 16, 2, 4, 32)},
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small batches and few steps (CPU check of every path)")
    ap.add_argument("--tiny", action="store_true", help="a few steps on 32-px images (seconds on a CPU)")
    ap.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")
    ap.add_argument("--rows", default="nca,beclr", help="comma-separated: nca, beclr (default both)")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32", "both"),
                    help="BECLR rows: bf16 autocast (the loop's default on CUDA), fp32, or both")
    ap.add_argument("--compile", action="store_true", help="also time the project's loop with torch.compile")
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="official-style DataLoader workers")
    ap.add_argument("--skip-beclr", action="store_true")
    ap.add_argument("--json", default=None, help="also write the rows and ratios to this JSON file")
    args = ap.parse_args(argv)
    rows_wanted = {r.strip() for r in args.rows.split(",") if r.strip()}
    if not rows_wanted <= {"nca", "beclr"}:
        ap.error(f"--rows {args.rows!r}: allowed rows are nca and beclr")
    if args.skip_beclr:
        rows_wanted.discard("beclr")
    device = get_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here (use --device cpu)")
    mode = "tiny" if args.tiny else "quick" if (args.quick or device.type != "cuda") else "full"
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, {mode} sizes", flush=True)
    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}

    def row(key: str, name: str, batch: int, rate: float, **extra: Any) -> None:
        rows.append({"key": key, "case": name, "batch": batch, "img_per_s": rate, **extra})

    if "nca" in rows_wanted:
        b, steps, warm, per_class, size = SIZES[mode]["nca"]
        data = synthetic(64, per_class, size)
        spec = nca_spec(b, warm + steps, size, False, str(device))
        spec.data = DataSpec.of(data)
        ours = project_rate(spec, data, b, warm)
        row("nca_project", f"NCA ResNet-12 {size} px, project loop", b, ours)
        if args.compile:
            spec_c = nca_spec(b, warm + steps, size, True, str(device))
            spec_c.data = spec.data
            row("nca_project_compiled", f"NCA ResNet-12 {size} px, project loop + torch.compile", b,
                project_rate(spec_c, data, b, warm + 3))
        base = official_nca_rate(data, b, steps, warm, size, device, 0 if mode != "full" else args.workers)
        row("nca_official", f"NCA ResNet-12 {size} px, official-style fp32 PIL + DataLoader", b, base)
        ratios["nca_project_over_official"] = ours / base

    if "beclr" in rows_wanted:
        b2, steps2, mem, parts, per_class2, size2 = SIZES[mode]["beclr"]
        fill = -(-mem // (2 * b2))  # steps before the memory is full and DyCE starts retrieving
        data2 = synthetic(64, per_class2, size2)
        per_step = 2 * b2  # two views per image
        precisions = ("bf16", "fp32") if args.precision == "both" else (args.precision,)
        for prec in precisions:
            rates = {}
            for dyce in (False, True):
                s = beclr_spec(b2, fill + 1 + steps2, size2, dyce, mem, parts, str(device), amp=prec == "bf16")
                s.data = DataSpec.of(data2)
                rates[dyce] = project_rate(s, data2, per_step, fill + 1)
                row(f"beclr_{prec}_{'dyce' if dyce else 'nodyce'}",
                    f"BECLR ResNet-18 {size2} px {prec}, {'with' if dyce else 'without'} DyCE (views/s)", b2,
                    rates[dyce], autocast=prec == "bf16" and device.type == "cuda")
            ratios[f"beclr_{prec}_dyce_overhead_pct"] = 100 * (rates[False] / rates[True] - 1)

    print(f"\n{'case':64s} {'batch':>6s} {'img/s':>9s}")
    for r in rows:
        print(f"{r['case']:64s} {r['batch']:6d} {r['img_per_s']:9.1f}")
    if "nca_project_over_official" in ratios:
        print(f"\nNCA: project / official-style = {ratios['nca_project_over_official']:.2f}x")
    for prec in ("bf16", "fp32"):
        if f"beclr_{prec}_dyce_overhead_pct" in ratios:
            print(f"BECLR {prec}: DyCE overhead = {ratios[f'beclr_{prec}_dyce_overhead_pct']:+.1f} % of the step time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "mode": mode, "rows": rows, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
