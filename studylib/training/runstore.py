"""The run store: one folder per training run, keyed by a hash of its configuration.

Layout of ``<root>/<name>-<hash>/``::

    config.json      the full configuration the hash was computed from
    metrics.jsonl    one JSON object per logged event (rewritten atomically)
    checkpoint.pt    the latest checkpoint (model, optimiser, schedule, RNG states, position)
    result.json      written last, atomically: its presence marks the run finished
    *.pt / *.json    anything else the run saves (per-episode accuracies, memory snapshots)

Re-running a notebook with the same parameters finds ``result.json`` and reuses the run; a run killed before
it finished finds ``checkpoint.pt`` and resumes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from studylib.utils import atomic_torch_save, atomic_write_json, atomic_write_text, config_hash, default_cache_dir


class Run:
    """One run's folder."""

    def __init__(self, path: Path, config: dict[str, Any]) -> None:
        self.path = path
        self.config = config
        self.path.mkdir(parents=True, exist_ok=True)
        cfg_file = self.path / "config.json"
        if not cfg_file.exists():
            atomic_write_json(cfg_file, config)
        self._metrics: list[dict[str, Any]] | None = None

    # -- state ----------------------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return (self.path / "result.json").exists()

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint.pt"

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        atomic_torch_save(state, self.checkpoint_path)

    def load_checkpoint(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The latest checkpoint, loaded with ``weights_only=True`` (tensors and plain containers only)."""
        if not self.checkpoint_path.exists():
            return None
        return torch.load(self.checkpoint_path, map_location=map_location, weights_only=True)

    # -- metrics --------------------------------------------------------------------------------------------
    @property
    def metrics(self) -> list[dict[str, Any]]:
        if self._metrics is None:
            f = self.path / "metrics.jsonl"
            self._metrics = [json.loads(line) for line in f.read_text().splitlines() if line] if f.exists() else []
        return self._metrics

    def set_metrics(self, rows: list[dict[str, Any]]) -> None:
        self._metrics = list(rows)
        self._flush_metrics()

    def log(self, row: dict[str, Any]) -> None:
        self.metrics.append(row)

    def _flush_metrics(self) -> None:
        atomic_write_text(self.path / "metrics.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n"
                                                               for r in self.metrics))

    def flush(self) -> None:
        self._flush_metrics()

    # -- results --------------------------------------------------------------------------------------------
    def save_result(self, result: dict[str, Any]) -> None:
        atomic_write_json(self.path / "result.json", result)

    def result(self) -> dict[str, Any]:
        return json.loads((self.path / "result.json").read_text())

    def save_tensor(self, name: str, obj: Any) -> None:
        atomic_torch_save(obj, self.path / name)

    def load_tensor(self, name: str) -> Any:
        return torch.load(self.path / name, map_location="cpu", weights_only=True)

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def __repr__(self) -> str:
        return f"Run({self.path}, finished={self.finished})"


class RunStore:
    """A folder of runs. ``store.run(name, config)`` gives the run for that configuration."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir() / "runs"
        self.root.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, config: dict[str, Any]) -> Run:
        return Run(self.root / f"{name}-{config_hash(config)}", config)

    def runs(self) -> list[Run]:
        out = []
        for p in sorted(self.root.iterdir()):
            if (p / "config.json").exists():
                out.append(Run(p, json.loads((p / "config.json").read_text())))
        return out
