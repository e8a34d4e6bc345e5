"""Benchmark: one training step on 1 process against 2 data-parallel processes (torchrun, gloo), same global batch.

The workload is notebook 02's smoke NCA run: the embedded glyph set at 28 px (300 classes), Conv4 with 32
filters, a global batch of ``--batch`` images, through the real training loop (:func:`studylib.training.loop.
train`: augmentation, DDP, sharded backbone + all-gather, global BatchNorm). The time per step is measured as
``(T(long) - T(short)) / (long - short steps)`` after a warm-up pass, so that start-up, data loading, the
process group's first connections and DDP set-up cancel out.

Configurations: 1 process x 1 torch thread, 1 process x N threads (N = ``--procs``: the same cores as the
data-parallel run), and N processes x 1 thread (torchrun, gloo). On a GPU machine pass ``--device cuda`` and
``--procs`` = the number of GPUs (NCCL); the numbers printed there are that machine's.

Usage: ``python benchmarks/bench_distributed.py [--batch 128] [--procs 2] [--short 4] [--long 24]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def worker(args: argparse.Namespace) -> None:
    """Inside torchrun (or alone): train ``short`` then ``long`` steps, print seconds per step from rank 0."""
    import torch
    from studylib.data import load_dataset
    from studylib.runs.runner import RunSpec, DataSpec, build_parts
    from studylib.training import distributed as D
    from studylib.training.loop import TrainConfig, train
    from studylib.training.runstore import RunStore

    torch.set_num_threads(args.threads)
    data = load_dataset("glyphs", size=28, max_classes=300)
    spec = RunSpec(name="bench", data=DataSpec("glyphs", options={"size": 28, "max_classes": 300}),
                   backbone="conv4", backbone_options={"hidden": 32}, method="nca", augment="none")
    D.init()
    times = {}
    for steps in (args.short, args.short, args.long):  # the first pass warms up (group, kernels, allocator)
        method, _ = build_parts(spec, data)
        cfg = TrainConfig(epochs=1, sampler="replacement", batch_size=args.batch, batches_per_epoch=steps,
                          lr=0.1, seed=0, device=args.device, progress=False, checkpoint_every=10**9)
        D.barrier()
        t0 = time.perf_counter()
        train(method, data["train"], cfg, RunStore(tempfile.mkdtemp()).run("bench", {"steps": steps}))
        D.barrier()
        times[steps] = time.perf_counter() - t0
    if D.is_main():
        per_step = (times[args.long] - times[args.short]) / (args.long - args.short)
        print(json.dumps({"procs": D.world_size(), "threads": args.threads, "s_per_step": per_step}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--short", type=int, default=4)
    ap.add_argument("--long", type=int, default=24)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    base = [sys.executable, __file__, "--worker", f"--batch={args.batch}", f"--short={args.short}",
            f"--long={args.long}", f"--device={args.device}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [("1 process x 1 thread", base + ["--threads=1"]),
            (f"1 process x {args.procs} threads", base + [f"--threads={args.procs}"]),
            (f"{args.procs} processes x 1 thread (torchrun, {'nccl' if args.device == 'cuda' else 'gloo'})",
             [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.procs}",
              *base[1:], "--threads=1"])]
    load = os.getloadavg()[0]
    print(f"NCA, Conv4-32, glyphs 28 px, global batch {args.batch}, {args.device}; "
          f"{os.cpu_count()} cores, load average {load:.1f} at start")
    ref = None
    for label, cmd in runs:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        r = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
        ref = ref or r["s_per_step"]
        print(f"  {label:<44} {1000 * r['s_per_step']:8.1f} ms/step   speed-up {ref / r['s_per_step']:.2f}x")


if __name__ == "__main__":
    main()
