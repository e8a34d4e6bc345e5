"""Benchmark: CPU training speed with 1 against 2 torch threads (issue 13: which default STUDYLIB_THREADS gets).

The workload is notebook 00's smoke run (NCA, Conv4, embedded glyphs at 28 px, 300 classes, batch 128) cut to
``--steps`` optimiser steps through the real training loop, without validation. Each measurement is a fresh
process (``OMP_NUM_THREADS`` and ``STUDYLIB_THREADS`` set to the thread count) that trains in a temporary run
store; the thread counts alternate (1, 2, 1, 2, ...) so that load from other processes hits both alike. The
machine's load average is printed with each measurement: on a shared machine it is part of the answer.

Usage: ``python benchmarks/bench_threads.py [--steps 30] [--repeats 3] [--threads 1 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time, torch
from studylib.experiments import quickstart as qs
from studylib.runs.runner import run_spec
from studylib.training.runstore import RunStore
p = qs.Params(seeds=[0], max_steps=int(sys.argv[2]), val_episodes=0, eval_episodes=10, device="cpu")
spec = qs.spec_from_params(p, 0)
spec.data.load()  # generate / read the glyphs before timing
t = time.perf_counter()
out = run_spec(spec, RunStore(sys.argv[1]), progress=False)
print(json.dumps({"threads": torch.get_num_threads(), "train_seconds": out.run.result()["train_seconds"],
                  "steps": out.run.result()["steps"], "batch": p.batch_size}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    rates: dict[int, list[float]] = {k: [] for k in args.threads}
    for r in range(args.repeats):
        for k in args.threads:
            env = {**os.environ, "OMP_NUM_THREADS": str(k), "STUDYLIB_THREADS": str(k)}
            with tempfile.TemporaryDirectory() as store:
                load = os.getloadavg()[0]
                res = subprocess.run([sys.executable, "-c", CHILD, store, str(args.steps)], env=env,
                                     capture_output=True, text=True)
                if res.returncode:
                    sys.exit(res.stderr)
                d = json.loads(res.stdout.strip().splitlines()[-1])
                rate = d["steps"] * d["batch"] / d["train_seconds"]
                rates[k].append(rate)
                print(f"repeat {r}: {d['threads']} thread(s): {d['steps']} steps in {d['train_seconds']:.1f} s = "
                      f"{rate:.0f} img/s (load average {load:.1f})", flush=True)
    for k, v in rates.items():
        print(f"{k} thread(s): median {statistics.median(v):.0f} img/s over {len(v)} runs "
              f"(min {min(v):.0f}, max {max(v):.0f})")


if __name__ == "__main__":
    main()
