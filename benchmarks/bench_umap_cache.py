"""Benchmark: the first UMAP projection of a process with numba's compilations cached on disk
(:func:`studylib.evaluation.projection.umap_2d`) against the same projection compiled from scratch.

umap-learn compiles its numba functions on first use in every process and marks none ``cache=True``;
``umap_2d`` turns numba's on-disk cache on for them. Three fresh processes share one empty ``NUMBA_CACHE_DIR``:
``compile`` (umap-learn as it comes, no cache), ``first`` (``umap_2d``: compiles and writes the cache) and
``cached`` (``umap_2d`` again: loads the machine code). Each prints its import time and the time of its first
projection (notebook 07's shape: 120 points of 64 dimensions, cosine metric) and the projection itself, which must
be the same bits in all three.

Usage: ``python benchmarks/bench_umap_cache.py`` (about a minute on one core).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, umap
from studylib.evaluation.projection import umap_2d
t1 = time.perf_counter()
x = np.random.default_rng(0).normal(size=(120, 64))
if sys.argv[1] == "compile":
    xy = umap.UMAP(n_neighbors=15, metric="cosine", random_state=0, n_jobs=1).fit_transform(x)
else:
    xy = umap_2d(x, neighbors=15, seed=0, metric="cosine")
print(json.dumps({"import_s": t1 - t0, "umap_s": time.perf_counter() - t1, "xy": xy.tolist()}))
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        rows = {}
        for mode in ("compile", "first", "cached"):
            out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True,
                                 check=True)
            rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print("| process | import s | first projection s |")
    print("| --- | --- | --- |")
    for mode, r in rows.items():
        print(f"| {mode} | {r['import_s']:.1f} | {r['umap_s']:.2f} |")
    same = rows["compile"]["xy"] == rows["first"]["xy"] == rows["cached"]["xy"]
    print(f"compile / cached projection time: {rows['compile']['umap_s'] / rows['cached']['umap_s']:.0f}x; "
          f"the same projection bit for bit in all three: {same}")


if __name__ == "__main__":
    main()
