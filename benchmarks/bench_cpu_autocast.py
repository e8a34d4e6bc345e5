"""Benchmark: the check scale's networks on the CPU in float32 and under bf16 autocast (:mod:`studylib.precision`),
measured in the same process.

The check scale runs the paper's networks at the paper's input sizes for a few steps; on the CPU its time is
their convolutions. Under bf16 autocast oneDNN runs them with the CPU's bf16 instructions (AVX512-BF16, AMX)
where it has them. Measured here for each notebook family's paper network: one training step (forward and
backward) and one evaluation forward, float32 against autocast, alternating ``--repeats`` times so that load from
other processes hits both alike; the median is reported with the ratio ``float32 / autocast`` (> 1: autocast is
faster) and the largest relative difference of the evaluation features (bf16 keeps 8 significant bits).

Usage: ``python benchmarks/bench_cpu_autocast.py [--threads 1] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from studylib.models.backbones import Conv4, ResNet12Basic, resnet12_infopatch, resnet18
from studylib.precision import cpu_bf16_native

# (label, network factory, batch, channels, side): the check scale's networks and batches.
CASES = [
    ("02-05 ResNet-12 (seed 000), 84 px, batch 32", ResNet12Basic, 32, 3, 84),
    ("13 ResNet-12 (InfoPatch), 84 px, batch 16", resnet12_infopatch, 16, 3, 84),
    ("06-08 ResNet-18, 224 px, batch 8", resnet18, 8, 3, 224),
    ("10-12 Conv4-64, 28 px, batch 300", lambda: Conv4(1, 64), 300, 1, 28),
]


def _step(net: torch.nn.Module, x: torch.Tensor, amp: bool) -> float:
    t = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        y = net(x)
    y.float().square().mean().backward()
    return time.perf_counter() - t


def _forward(net: torch.nn.Module, x: torch.Tensor, amp: bool) -> tuple[float, torch.Tensor]:
    t = time.perf_counter()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        y = net(x).float()
    return time.perf_counter() - t, y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}; "
          f"native bf16 on this CPU: {cpu_bf16_native()}")
    print("| network | train step fp32 s | autocast s | fp32 / autocast | eval forward fp32 s | autocast s "
          "| fp32 / autocast | max rel. feature diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, factory, batch, channels, side in CASES:
        torch.manual_seed(0)
        net = factory()
        x = torch.rand(batch, channels, side, side)
        for amp in (False, True):  # warm-up: oneDNN picks and caches its kernels on the first call
            net.train()
            _step(net, x, amp)
        train = {False: [], True: []}
        for _ in range(args.repeats):
            for amp in (False, True):
                net.train()
                net.zero_grad(set_to_none=True)
                train[amp].append(_step(net, x, amp))
        net.eval()
        fwd = {False: [], True: []}
        feats = {}
        for _ in range(args.repeats):
            for amp in (False, True):
                s, feats[amp] = _forward(net, x, amp)
                fwd[amp].append(s)
        t32, tbf = statistics.median(train[False]), statistics.median(train[True])
        f32, fbf = statistics.median(fwd[False]), statistics.median(fwd[True])
        rel = float(((feats[True] - feats[False]).abs().max() / feats[False].abs().max()))
        print(f"| {label} | {t32:.3f} | {tbf:.3f} | {t32 / tbf:.2f}x | {f32:.3f} | {fbf:.3f} | {f32 / fbf:.2f}x "
              f"| {rel:.4f} |")


if __name__ == "__main__":
    main()
