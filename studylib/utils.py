"""Small shared helpers: devices, seeds, atomic files, configuration hashes, confidence intervals."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


def get_device(name: str = "auto") -> torch.device:
    """``"auto"`` picks CUDA when present, else CPU; any other string is passed to ``torch.device``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a CPU generator seeded with ``seed`` for explicit use."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` through a temporary file, so a kill never leaves a half-written checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.ndarray, torch.Tensor)):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot serialise {type(o).__name__} to JSON")


def config_hash(config: dict[str, Any], length: int = 12) -> str:
    """Stable hash of a JSON-serialisable configuration (key order does not matter)."""
    blob = json.dumps(config, sort_keys=True, default=_json_default, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


def mean_ci95(values: torch.Tensor | np.ndarray | list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% confidence interval, ``1.96 * std / sqrt(n)`` (seed 000, Sec. 3.1)."""
    v = np.asarray(torch.as_tensor(values, dtype=torch.float64).cpu())
    if v.size == 0:
        raise ValueError("mean_ci95 of an empty sequence")
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return float(v.mean()), 1.96 * std / math.sqrt(v.size)


def default_cache_dir() -> Path:
    """Where generated data and runs are cached: ``$STUDYLIB_CACHE`` or ``<repo>/.cache``."""
    env = os.environ.get("STUDYLIB_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / ".cache"
