"""2-D projections for the figures: umap-learn's UMAP with its numba compilations kept on disk.

umap-learn compiles about 250 numba functions on first use in every process (about 30 s on one core of the 2-core
machine: a third of notebook 07's and 08's smoke runs, paid again in each check run) and marks none of them
``cache=True``. :func:`umap_2d` turns numba's own on-disk cache on for them before the first call, so a second
process loads the machine code (0.31 s instead of 15.6 s for a 120-point projection, measured in three fresh
processes by ``benchmarks/bench_umap_cache.py``: ``benchmarks/results/umap-cache-2026-11-29.txt``). The compiled
code is the same, so the projection is bit-for-bit the one without the cache (``tests/evaluation/test_projection.py``).
numba keys each cached function by its source file's time stamp and size, keeps the files next to the package
(``__pycache__``, or ``NUMBA_CACHE_DIR``) and recompiles when they do not match, so an upgraded umap-learn is never
served stale code.
"""

from __future__ import annotations

import sys

import numpy as np

PACKAGES = ("umap", "pynndescent")


def enable_numba_caching(packages: tuple[str, ...] = PACKAGES) -> int:
    """Turn numba's on-disk cache on for every not-yet-cached jitted function of the imported ``packages``.

    Returns how many functions were switched (0 when already done). Functions compiled before the call stay
    compiled in memory; only later compilations are written to or read from the cache.
    """
    from numba.core.registry import CPUDispatcher
    from numba.core.caching import NullCache

    switched = 0
    for name in [m for m in list(sys.modules) if m.split(".")[0] in packages]:
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, CPUDispatcher) and isinstance(value._cache, NullCache):
                value.enable_caching()
                switched += 1
    return switched


def umap_2d(x: np.ndarray, neighbors: int = 15, seed: int = 0, metric: str = "euclidean") -> np.ndarray:
    """``x [n, d] -> [n, 2]``: umap-learn's UMAP (``n_neighbors = min(neighbors, n - 1)``, fixed ``random_state``,
    one job so that the layout is reproducible), with numba's compilations cached on disk."""
    import umap  # imports umap_, layouts, spectral, utils, distances, sparse and pynndescent
    enable_numba_caching()
    return umap.UMAP(n_neighbors=min(neighbors, len(x) - 1), metric=metric, random_state=seed,
                     n_jobs=1).fit_transform(x)
