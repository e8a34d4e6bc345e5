"""Benchmark: Gaussian and GMM log-densities of many queries, computed in cache-sized blocks of queries
(:func:`studylib.numerics.gaussian._by_query_blocks`, what scoring runs without a graph) against the direct
formula on all queries at once (the same computation with the block size set beyond the query count), measured in
the same process.

Set2Model's retrieval evaluation scores every database image under every concept set's fitted model: chunks of 64
sets x ``Q`` queries x ``K`` components x ``d`` dimensions, temporaries of hundreds of MB at Q = 2000. The blocked
path computes every output element by the same operations, so the outputs are compared bit for bit here (and in
``tests/numerics/test_gaussian_blocks.py``); only the time changes.

Prints milliseconds per call each way and the ratio ``direct / blocked`` (> 1: blocks are faster). The two
alternate, ``--repeats`` times, so that load from other processes hits both alike; the median is reported.

Usage: ``python benchmarks/bench_gaussian_blocks.py [--threads 1] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from studylib.numerics import gaussian as G

# (label, sets B, components K, dimensions d, queries Q): notebook 11's and 12's scoring shapes.
CASES = [
    ("11 retrieval, GMM-2, 100-d, 2000 database images", 64, 2, 100, 2000),
    ("11 retrieval, GMM-3, 100-d, 2000 database images", 64, 3, 100, 2000),
    ("11 retrieval, Gauss, 100-d, 2000 database images", 64, 1, 100, 2000),
    ("12 classification, Gauss, 64-d, 20-way x 15 queries", 20, 1, 64, 300),
]


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} thread(s), median of {a.repeats}; block = {G._BLOCK_ELEMENTS} "
          "elements")
    print("| workload | direct ms | blocked ms | direct / blocked | bitwise equal |")
    print("| --- | --- | --- | --- | --- |")
    default = G._BLOCK_ELEMENTS
    for label, b, k, d, q in CASES:
        g = torch.Generator().manual_seed(0)
        z = torch.randn(q, d, generator=g)
        gmm = G.GMM(torch.softmax(torch.randn(b, k, generator=g), -1), torch.randn(b, k, d, generator=g),
                    torch.rand(b, k, d, generator=g) + 1e-3)
        score = (lambda: G.gmm_logpdf(z, gmm)) if k > 1 else (lambda: G.diag_gaussian_logpdf(z, gmm.means[:, 0],
                                                                                             gmm.vars[:, 0]))
        direct, blocked = [], []
        with torch.no_grad():
            for _ in range(a.repeats):
                G._BLOCK_ELEMENTS = 1 << 62  # one block: the direct formula
                direct.append(_time(score))
                ref = score()
                G._BLOCK_ELEMENTS = default
                blocked.append(_time(score))
                out = score()
        dm, bm = statistics.median(direct) * 1e3, statistics.median(blocked) * 1e3
        print(f"| {label} | {dm:.1f} | {bm:.1f} | {dm / bm:.2f}x | {torch.equal(ref, out)} |")


if __name__ == "__main__":
    main()
