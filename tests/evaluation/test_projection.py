"""studylib.evaluation.projection: UMAP with numba's compilations cached on disk gives the same bits as without."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

# One process: the projection through umap_2d (caching on) and through umap-learn directly (the same compiled code,
# so the same bits), with numba's count of functions loaded from its cache (hits) and compiled (misses).
SCRIPT = r"""
import json, numpy as np
from studylib.evaluation.projection import enable_numba_caching, umap_2d
x = np.random.default_rng(0).normal(size=(60, 12))
ours = umap_2d(x, neighbors=8, seed=3, metric="cosine")
import umap
from numba.core.registry import CPUDispatcher
direct = umap.UMAP(n_neighbors=8, metric="cosine", random_state=3, n_jobs=1).fit_transform(x)
f = umap.umap_.smooth_knn_dist
print(json.dumps({"ours": ours.tolist(), "direct": direct.tolist(), "again": enable_numba_caching(),
                  "hits": sum(f.stats.cache_hits.values()), "misses": sum(f.stats.cache_misses.values()),
                  "cached": type(f._cache).__name__}))
"""


def _run() -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_umap_2d_loads_numbas_cache_in_a_second_process_and_gives_the_same_bits():
    spec = importlib.util.find_spec("umap")
    if spec is None:
        pytest.skip("umap-learn is not installed")
    if not (os.environ.get("NUMBA_CACHE_DIR") or os.access(os.path.dirname(spec.origin), os.W_OK)):
        pytest.skip("numba cannot write its cache here: umap-learn's folder is read-only and NUMBA_CACHE_DIR is unset")
    first = _run()
    assert first["ours"] == first["direct"]  # the wrapper is umap-learn's UMAP with the stated arguments
    assert first["again"] == 0 and first["cached"] != "NullCache"  # switched once, for smooth_knn_dist too
    second = _run()
    assert second["hits"] > 0 and second["misses"] == 0  # smooth_knn_dist's machine code came from the disk, not from a compilation
    assert second["ours"] == first["ours"]  # bit for bit (floats through JSON round-trip exactly)
