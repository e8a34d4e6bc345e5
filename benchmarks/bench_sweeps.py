"""Benchmark: notebook 02's sweep (Fig. 2, smoke scale) run sequentially against Ray with one worker per core.

Runs ``studylib.experiments.batch_size_sweep.run`` (the function the notebook calls; 16 runs at smoke scale)
three times, each in a fresh process with an empty run store: sequentially with 1 torch thread, sequentially
with one thread per core, and through Ray (``$STUDYLIB_RAY_ADDRESS=local``: the path ``./study run --ray local``
takes; a local cluster with one 1-CPU worker per core). Prints the wall times (Ray's with and without
starting the cluster) and checks that every run's result equals the sequential 1-thread run's (same thread
count per run, so the same arithmetic).

Usage: ``python benchmarks/bench_sweeps.py [--params params/02_batch_size_sweep/smoke.yaml]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def worker(params: str, threads: int) -> None:
    import torch
    import studylib.experiments.batch_size_sweep as ex
    from studylib.config import read_param_file, validate
    from studylib.experiments import episodes_common as ec
    from studylib.runs import sweeps

    torch.set_num_threads(threads)
    p = validate(ex.Params, read_param_file(params), where="bench")
    n_train = ec.train_size(p)
    start = 0.0
    if os.environ.get(sweeps.ADDRESS_ENV):
        t0 = time.perf_counter()
        sweeps.connect()
        start = time.perf_counter() - t0
    t0 = time.perf_counter()
    outcomes = ex.run(p, n_train)
    wall = time.perf_counter() - t0
    results = {o.run.path.name: o.result["test"] for runs in outcomes.values() for o in runs}
    print(json.dumps({"wall": wall, "start": start, "runs": len(results), "results": results}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=str(REPO / "params" / "02_batch_size_sweep" / "smoke.yaml"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.params, args.threads)
        return
    cores = os.cpu_count() or 1
    base = Path(tempfile.mkdtemp(prefix="bench-sweeps-"))
    # Generate the glyph set once; every mode gets a copy of it and an empty run store.
    subprocess.run([sys.executable, "-c", "import studylib.experiments.batch_size_sweep as ex, "
                    "studylib.experiments.episodes_common as ec; from studylib.config import read_param_file, "
                    f"validate; ec.train_size(validate(ex.Params, read_param_file({args.params!r}), where='b'))"],
                   env={**os.environ, "STUDYLIB_CACHE": str(base / "data")}, check=True)
    modes = [("sequential, 1 thread", 1, {}), (f"sequential, {cores} threads", cores, {}),
             (f"Ray, {cores} workers x 1 thread", 1, {"STUDYLIB_RAY_ADDRESS": "local"})]
    print(f"notebook 02 sweep at {Path(args.params).name}; {cores} cores, load average {os.getloadavg()[0]:.1f}")
    ref = None
    for label, threads, extra in modes:
        cache = base / label.split(",")[0].replace(" ", "") / str(threads)
        shutil.copytree(base / "data", cache)
        env = {**os.environ, "STUDYLIB_CACHE": str(cache), "OMP_NUM_THREADS": str(threads), **extra}
        env.pop("STUDYLIB_RAY_ADDRESS", None) if not extra else None
        out = subprocess.run([sys.executable, __file__, "--worker", f"--params={args.params}",
                              f"--threads={threads}"], env=env, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ref = ref or r
        if r["results"] == ref["results"]:
            same = "same results as sequential, 1 thread"
        elif threads != 1:
            same = "results differ slightly: another thread count sums in another order"
        else:
            same = "RESULTS DIFFER from sequential, 1 thread"
        start = f" (+ {r['start']:.0f} s starting the cluster)" if r["start"] else ""
        print(f"  {label:<28} {r['runs']} runs  {r['wall']:7.1f} s{start}   {ref['wall'] / r['wall']:.2f}x   {same}")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
