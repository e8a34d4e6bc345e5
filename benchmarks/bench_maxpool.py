"""Benchmark: evaluation forwards with :class:`studylib.models.backbones.MaxPool2x2` (the study's backbones) against
the same networks with PyTorch's ``nn.MaxPool2d``, measured in the same process.

On the CPU, PyTorch's max-pool kernel without indices (what an evaluation forward under ``torch.no_grad`` runs)
costs about as much as the 3x3 convolution before it. ``MaxPool2x2`` takes the elementwise maximum of the window's
four strided views instead: the same tensor bit for bit (checked here on every workload, and in
``tests/models/test_backbones.py``), so only the time changes. Training forwards keep PyTorch's kernel (its indices
route the gradient), so they are not measured here.

Prints milliseconds per evaluation forward with each pool and the ratio ``nn.MaxPool2d / MaxPool2x2`` (> 1: the
study's pool is faster). The two alternate, ``--repeats`` times, so that load from other processes hits both
alike; the median is reported.

Usage: ``python benchmarks/bench_maxpool.py [--threads 1] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

from studylib.models import build_backbone
from studylib.models.backbones import MaxPool2x2

# (label, backbone, kwargs, input shape): the notebooks' evaluation workloads.
CASES = [
    ("glyphs 28 px, Conv4-64, 1 channel (00, 04, 05, 10-12)", "conv4", {"in_channels": 1}, (256, 1, 28, 28)),
    ("synthfs 16 px, Conv4-32 (02, 03)", "conv4", {"in_channels": 3, "hidden": 32}, (256, 3, 16, 16)),
    ("glyphs 20 px, Conv4-64, 3 channels (06-08)", "conv4", {"in_channels": 3}, (256, 3, 20, 20)),
    ("84 px, Conv4-64 (paper shape)", "conv4", {"in_channels": 3}, (64, 3, 84, 84)),
    ("84 px, InfoPatch ResNet-12 (13, paper shape)", "resnet12_infopatch", {}, (8, 3, 84, 84)),
]


def _with_pytorch_pool(net: nn.Module) -> nn.Module:
    """A copy of ``net`` whose MaxPool2x2 layers are PyTorch's nn.MaxPool2d (same settings)."""
    ref = copy.deepcopy(net)
    for mod in list(ref.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, MaxPool2x2):
                setattr(mod, name, nn.MaxPool2d(2, ceil_mode=child.ceil_mode))
    return ref


def _ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), cpu, evaluation forwards (torch.no_grad)")
    print(f"{'workload':50s} {'MaxPool2d ms':>12s} {'MaxPool2x2 ms':>13s} {'ratio':>6s}  bitwise")
    for label, name, kwargs, shape in CASES:
        torch.manual_seed(0)
        fast = build_backbone(name, **kwargs).eval()
        ref = _with_pytorch_pool(fast)
        x = torch.randn(*shape)
        with torch.no_grad():
            same = torch.equal(fast(x).view(torch.int32), ref(x).view(torch.int32))  # also the warm-up
            times: dict[str, list[float]] = {"ref": [], "fast": []}
            for _ in range(args.repeats):
                times["ref"].append(_ms(lambda: ref(x)))
                times["fast"].append(_ms(lambda: fast(x)))
        a, b = statistics.median(times["ref"]), statistics.median(times["fast"])
        print(f"{label:50s} {a:12.1f} {b:13.1f} {a / b:6.2f}  {'equal' if same else 'DIFFERENT'}")
        if not same:
            raise SystemExit(f"{label}: MaxPool2x2 changed the features")


if __name__ == "__main__":
    main()
