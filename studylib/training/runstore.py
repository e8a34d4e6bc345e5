"""The run store: one folder per training run, keyed by a hash of its configuration.

Layout of ``<root>/<name>-<hash>/`` (the hash covers the training configuration only)::

    config.json          the configuration the hash was computed from
    metrics.jsonl        one JSON object per logged event (rewritten atomically)
    checkpoint.pt        the latest checkpoint (model, optimiser, schedule, RNG states, position, partial sums)
    checkpoint.prev.pt   the one before it: the fallback when the latest is damaged
    weights.pt           the final weights (the checkpoints are deleted once it and result.json exist)
    result.json          the training record, written last: its presence marks the training finished
    eval-<hash>/         one folder per evaluation protocol (its own config.json, result.json, accuracies)
    tb/                  TensorBoard scalars, when the ``tensorboard`` package is installed
    *.pt / *.json        anything else the run saves (snapshots, cached derived results)

Every file is written atomically (temporary file + ``os.replace``) with the mode a plain ``open`` gives
(the umask is respected), and with a SHA-256 checksum in a hidden sidecar ``.<file>.sha256`` that is checked
on every load: a damaged file raises :class:`RunFileError`, which names the file and the command that clears
it, unless the caller can heal (an older checkpoint, a re-evaluation). The sidecar is written before the file
is replaced and lists the new digest followed by the previous ones, so a kill between the two steps leaves
a file that still verifies.

Looking a run up (:meth:`RunStore.run`) writes nothing; :meth:`Run.open`, the one place a run folder is
created, makes it when training starts (and removes the temporary files of killed writers).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from studylib.utils import (atomic_write_bytes, config_hash, default_cache_dir, json_text, kill_point,
                            remove_stale_temp_files, torch_bytes)

CONFIG = "config.json"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"
RESULT = "result.json"
WEIGHTS = "weights.pt"
TENSORBOARD = "tb"
_DIGESTS_KEPT = 3  # digests a sidecar lists: the new one and those of the content it may still replace


class RunFileError(RuntimeError):
    """A run-store file is damaged (checksum mismatch, truncated, unparsable); the message names it and the fix."""

    def __init__(self, path: Path, problem: str, fix: str, kind: str = "damaged") -> None:
        super().__init__(f"{path}: {problem}. {fix}" if fix else f"{path}: {problem}")
        self.path, self.problem, self.fix = path, problem, fix
        self.kind = kind  # "damaged", "unchecked" (no sidecar: older format), "sidecar" (the sidecar is damaged)


def _sidecar(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _digests(path: Path) -> list[str]:
    """The digests a sidecar lists; [] when it is missing or damaged (see :func:`_sidecar_state`)."""
    try:
        lines = [line.strip() for line in _sidecar(path).read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError):
        return []
    return lines if lines and all(_HEX64.fullmatch(x) for x in lines) else []


def _sidecar_state(path: Path) -> str:
    """``ok``, ``missing`` (no sidecar: a run of the previous format) or ``damaged`` (not lines of SHA-256)."""
    if not _sidecar(path).exists():
        return "missing"
    return "ok" if _digests(path) else "damaged"


ADOPT = "python -m studylib.training.runstore adopt"  # the command that gives a run of an older format checksums


def _write_verified(path: Path, data: bytes, keep: list[str] | None = None) -> None:
    """Write ``data`` to a temporary file, then the checksum sidecar (new digest first, then ``keep`` or the old
    ones), then install the file."""
    digest = hashlib.sha256(data).hexdigest()
    kept = keep if keep is not None else _digests(path)
    atomic_write_bytes(path, data, before_replace=lambda: _write_digests(path, [digest, *kept]))


def _write_digests(path: Path, digests: list[str]) -> None:
    lines = list(dict.fromkeys(digests))[:_DIGESTS_KEPT]
    atomic_write_bytes(_sidecar(path), ("\n".join(lines) + "\n").encode())


def _read_verified(path: Path, fix: str) -> bytes:
    """The bytes of ``path`` after checking them against its sidecar; :class:`RunFileError` when they differ."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunFileError(path, "is missing", fix) from None
    digests = _digests(path)
    if not digests:
        state = _sidecar_state(path)
        if state == "damaged":
            raise RunFileError(_sidecar(path), f"the checksum sidecar of {path.name} is damaged (not a list of "
                                               f"SHA-256 digests); {path.name} itself may be intact",
                               f"Check it and write a new sidecar with: {ADOPT} '{path.parent}'", kind="sidecar")
        raise RunFileError(path, f"has no checksum ({_sidecar(path).name} is missing: written by an older version "
                                 f"of studylib), so it cannot be trusted yet",
                           f"Verify the run and give it checksums with: {ADOPT} '{path.parent}'", kind="unchecked")
    if hashlib.sha256(data).hexdigest() not in digests:
        what = "is empty" if not data else f"is damaged ({len(data)} bytes that do not match the stored SHA-256)"
        raise RunFileError(path, what, fix)
    return data


def _load_torch(data: bytes, path: Path, fix: str, map_location: str | torch.device = "cpu") -> Any:
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as e:  # verified bytes that torch cannot read: written by an incompatible version
        raise RunFileError(path, f"cannot be read by torch {torch.__version__} ({type(e).__name__}: {e})", fix) from e


def _load_json(data: bytes, path: Path, fix: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunFileError(path, f"is not valid JSON ({e})", fix) from e


def _check_content(path: Path, data: bytes) -> str | None:
    """Why ``path``'s bytes cannot be trusted without a checksum, or None when they load as their format does
    (``.pt``: ``torch.load(weights_only=True)``, so a pickled payload is refused; ``.json``/``.jsonl``: JSON)."""
    try:
        if path.suffix == ".pt":
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        elif path.suffix == ".json":
            json.loads(data.decode("utf-8"))
        elif path.suffix == ".jsonl":
            for line in data.decode("utf-8").splitlines():
                if line:
                    json.loads(line)
        else:
            return "a kind of file studylib does not write, so it cannot be checked"
    except Exception as e:  # noqa: BLE001 (any failure to load is the answer)
        return f"does not load ({type(e).__name__}: {str(e)[:200]})"
    return None


def adopt(folder: str | Path, config: dict[str, Any] | None = None, trust: bool = False) -> list[Path]:
    """Give a run folder written without checksum sidecars (studylib before checksums) its sidecars.

    Verified another way first: ``config.json`` parses and hashes to the hash in the folder's name (and equals
    ``config`` when given), and every file without a sidecar loads as its format does (:func:`_check_content`:
    checkpoints and weights ``weights_only=True``). The same for its ``eval-<hash>/`` sub-folders. Files that
    have a valid sidecar are left alone (a mismatch there is damage, reported by the readers).

    Args:
        folder: the run folder.
        config: the configuration the caller expects the run to have (None: not compared).
        trust: write the sidecars even when the checks fail (the person running it vouches for the files).

    Returns:
        The files that got a sidecar.

    Raises:
        RunFileError: (``kind="unverifiable"``) naming what failed and the command that adopts it anyway.
    """
    folder = Path(folder)
    problems: list[str] = []
    todo: list[tuple[Path, bytes]] = []
    for sub in [folder, *sorted(p for p in folder.glob("eval-*") if p.is_dir())]:
        want = sub.name.rsplit("-", 1)[-1]
        rel = (sub / CONFIG).relative_to(folder)
        try:
            cfg = json.loads((sub / CONFIG).read_text(encoding="utf-8"))
            got = config_hash(cfg, len(want))
            if got != want:
                problems.append(f"{rel} hashes to {got}, not to the {want} its folder is named by")
            elif sub == folder and config and cfg != json.loads(json_text(config)):
                problems.append(f"{CONFIG} differs from the configuration asked for")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            problems.append(f"{rel} cannot be read ({type(e).__name__})")
        for f in sorted(sub.iterdir()):
            if not f.is_file() or f.name.startswith(".") or _sidecar_state(f) == "ok":
                continue
            data = f.read_bytes()
            why = _check_content(f, data)
            if why:
                problems.append(f"{f.relative_to(folder)}: {why}")
            todo.append((f, data))
    if problems and not trust:
        raise RunFileError(folder, "has files without valid checksums that cannot be verified another way: "
                                   + "; ".join(problems),
                           f"If you trust these files, adopt the run as it is: {ADOPT} --trust '{folder}'",
                           kind="unverifiable")
    for f, data in todo:
        _write_digests(f, [hashlib.sha256(data).hexdigest()])
    return [f for f, _ in todo]


class Run:
    """One run's folder. Creating the object reads and writes nothing; :meth:`open` creates the folder."""

    def __init__(self, path: Path, config: dict[str, Any]) -> None:
        self.path = Path(path)
        self.config = config
        self._metrics: list[dict[str, Any]] | None = None
        self._opened = False

    # -- the folder -----------------------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return self.path.is_dir()

    def open(self) -> "Run":
        """Create the folder and ``config.json`` if needed, heal a damaged ``config.json``, and delete the
        temporary files of killed writers. The one place a run folder is created (called by the training loop
        when training starts and by the first write)."""
        if self._opened:
            return self
        self.path.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(self.path)
        cfg = self.path / CONFIG
        if cfg.exists() and _sidecar_state(cfg) == "missing":  # a run of the previous format: adopt it first
            try:
                self.adopt()
            except RunFileError:
                pass  # config.json is rewritten below; the other files are checked when they are read
        try:
            if _load_json(_read_verified(cfg, ""), cfg, "") != json.loads(json_text(self.config)):
                raise RunFileError(cfg, "differs from the configuration", "")
        except RunFileError as e:
            if cfg.exists():
                warnings.warn(f"rewriting {cfg}: {e}", stacklevel=2)
            _write_verified(cfg, json_text(self.config).encode())
        self._opened = True
        return self

    def child(self, name: str, config: dict[str, Any]) -> "Run":
        """The sub-run ``<this run>/<name>-<hash of config>/`` (e.g. one evaluation protocol of a training run)."""
        return Run(self.path / f"{name}-{config_hash(config)}", config)

    def remove(self) -> None:
        """Delete the whole folder (a failed attempt that left nothing worth resuming)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._metrics, self._opened = None, False

    def _fix(self, name: str) -> str:
        return f"Delete the run folder to start this run again: rm -r '{self.path}'"

    # -- verified files -------------------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> None:
        self.open()
        _write_verified(self.path / name, data)

    def read_bytes(self, name: str, fix: str | None = None) -> bytes:
        try:
            return _read_verified(self.path / name, fix or self._fix(name))
        except RunFileError as e:
            if e.kind != "unchecked":
                raise
        self.adopt()
        return _read_verified(self.path / name, fix or self._fix(name))

    def adopt(self) -> None:
        """Verify a run of the previous format (no checksums) and give it sidecars, with a one-line notice
        (:func:`adopt`); raises :class:`RunFileError` naming the adopt command when it cannot be verified."""
        done = adopt(self.path, self.config or None)
        if done:
            warnings.warn(f"{self.path.name}: run of an older format without checksums; its configuration hash and "
                          f"{len(done)} file(s) verified (weights load weights-only), checksums written", stacklevel=3)

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def discard(self, name: str) -> None:
        (self.path / name).unlink(missing_ok=True)
        _sidecar(self.path / name).unlink(missing_ok=True)

    def save_tensor(self, name: str, obj: Any) -> None:
        self.write_bytes(name, torch_bytes(obj))

    def load_tensor(self, name: str, fix: str | None = None) -> Any:
        if fix is None and name == WEIGHTS:
            fix = (f"The final weights cannot be rebuilt without training: delete the run folder to retrain it: "
                   f"rm -r '{self.path}'")
        fix = fix or (f"Delete it to have it computed again (rm '{self.path / name}' '{_sidecar(self.path / name)}'"
                      f"), or the whole run: rm -r '{self.path}'")
        return _load_torch(self.read_bytes(name, fix), self.path / name, fix)

    # -- state ----------------------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return (self.path / RESULT).exists()

    @property
    def status(self) -> str:
        """``finished`` (result.json), ``interrupted`` (a checkpoint, no result), ``empty`` (neither) or
        ``missing`` (no folder). Read-only; a damaged result still counts as finished here."""
        if not self.exists:
            return "missing"
        if self.finished:
            return "finished"
        if self.has(CHECKPOINT) or self.has(PREVIOUS):
            return "interrupted"
        return "empty"

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Write ``state`` as the latest checkpoint, keeping the current one as ``checkpoint.prev.pt``.

        Order: the new bytes are written to a temporary file; the previous checkpoint's sidecar learns the
        current digests and the current file is renamed over it; the new checkpoint's digest is written and
        the temporary file installed. A kill between any two steps leaves at least one checkpoint that
        verifies; a full disk leaves both as they were.
        """
        self.open()
        data = torch_bytes(state)
        digest = hashlib.sha256(data).hexdigest()
        cur, prev = self.path / CHECKPOINT, self.path / PREVIOUS

        def rotate() -> None:  # runs once the new bytes are on disk (a full disk changes nothing)
            if cur.exists():
                _write_digests(prev, [*_digests(cur), *_digests(prev)])  # accepts prev's content before and after
                os.replace(cur, prev)
                kill_point("runstore.checkpoint_rotated")
            _write_digests(cur, [digest])

        atomic_write_bytes(cur, data, before_replace=rotate)

    def load_checkpoint(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The latest checkpoint that verifies (``weights_only=True``), or None when there is none.

        A damaged latest checkpoint falls back to ``checkpoint.prev.pt`` with a warning; when neither can be
        used, :class:`RunFileError` names both and the command that restarts the training from scratch.
        """
        cur, prev = self.path / CHECKPOINT, self.path / PREVIOUS
        if not cur.exists() and not prev.exists():
            return None
        fix = (f"Delete the checkpoints to train this run from the start (rm -f '{cur}' '{prev}'), or the whole "
               f"run: rm -r '{self.path}'")
        if any(p.exists() and _sidecar_state(p) == "missing" for p in (cur, prev)):
            self.adopt()  # an interrupted run of the previous format
        problems = []
        for path in (cur, prev):
            if not path.exists():
                continue
            try:
                state = _load_torch(_read_verified(path, fix), path, fix, map_location)
            except RunFileError as e:
                problems.append(f"{path}: {e.problem}")
                continue
            if problems:  # the latest is damaged: drop it, so the next save does not keep it as the fallback
                warnings.warn(f"{problems[0]}; resuming from the previous checkpoint {path.name} (step "
                              f"{state.get('global_step')}) instead", stacklevel=2)
                self.discard(CHECKPOINT)
            return state
        raise RunFileError(self.path, "no usable checkpoint: " + "; ".join(problems), fix)

    def discard_checkpoints(self) -> None:
        self.discard(CHECKPOINT)
        self.discard(PREVIOUS)

    # -- metrics --------------------------------------------------------------------------------------------
    @property
    def metrics(self) -> list[dict[str, Any]]:
        if self._metrics is None:
            if self.has(METRICS):
                fix = ("The weights and results do not depend on it (an interrupted run rebuilds it from its "
                       "checkpoint when it resumes); the curve of a finished run comes back only by training it "
                       "again, e.g. in another store (STUDYLIB_CACHE=/tmp/elsewhere)")
                text = self.read_bytes(METRICS, fix).decode("utf-8")
                self._metrics = [json.loads(line) for line in text.splitlines() if line]
            else:
                self._metrics = []
        return self._metrics

    def salvage_metrics(self, up_to_step: int) -> list[dict[str, Any]]:
        """The readable rows of a damaged metrics log up to ``up_to_step`` (the checkpoint training resumes
        from), with a one-line warning; the caller rewrites the log from them (with a fresh checksum)."""
        path = self.path / METRICS
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            text = ""
        rows, bad = [], 0
        for line in text.splitlines():
            try:
                row = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict) and isinstance(row.get("step", 0), int):
                if row.get("step", 0) <= up_to_step:
                    rows.append(row)
            elif line.strip():
                bad += 1
        warnings.warn(f"{path} was damaged (it does not match its checksum): rebuilt from its {len(rows)} readable "
                      f"row(s) up to the checkpoint's step {up_to_step} ({bad} unreadable line(s) dropped); training "
                      f"resumes from the checkpoint, the weights are not affected", stacklevel=3)
        self._metrics = rows
        return rows

    def set_metrics(self, rows: list[dict[str, Any]]) -> None:
        self._metrics = list(rows)
        self.flush()

    def log(self, row: dict[str, Any]) -> None:
        self.metrics.append(row)

    def flush(self, rows: list[dict[str, Any]] | None = None) -> None:
        """Write the metrics log (atomically, with its checksum): the current rows, or ``rows`` (a copy the
        training loop takes at a checkpoint and writes from its background thread)."""
        rows = self.metrics if rows is None else rows
        self.write_bytes(METRICS, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode())

    # -- results --------------------------------------------------------------------------------------------
    def save_result(self, result: dict[str, Any]) -> None:
        self.write_bytes(RESULT, json_text(result).encode())

    def result(self) -> dict[str, Any]:
        fix = self._fix(RESULT)
        return _load_json(self.read_bytes(RESULT, fix), self.path / RESULT, fix)

    def __repr__(self) -> str:
        return f"Run({self.path}, status={self.status})"


# ------------------------------------------------------------------------------------------------ provenance


def git_commit(root: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding studylib, or ``(None, None)`` when it is not in one."""
    root = root or Path(__file__).resolve().parent.parent.parent
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode != 0:
            return None, None
        lines = top.stdout.split()
        if len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
            return None, None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)
        return lines[1], (bool(status.stdout.strip()) if status.returncode == 0 else None)
    except (OSError, subprocess.SubprocessError):
        return None, None


def provenance(device: torch.device | str) -> dict[str, Any]:
    """What a result was computed with: code (git commit, studylib version), torch, device, threads."""
    import studylib
    device = torch.device(device)
    commit, dirty = git_commit()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    from studylib.config import current_notebook
    out = {"git_commit": commit, "git_dirty": dirty, "studylib_version": studylib.__version__,
           "torch_version": str(torch.__version__), "python_version": platform.python_version(), "device": str(device),
           "device_name": name, "threads": torch.get_num_threads()}
    notebook = current_notebook()
    return {**out, "notebook": notebook} if notebook else out


# ----------------------------------------------------------------------------------------------------- store


@dataclass(frozen=True)
class RunInfo:
    """One run as :meth:`RunStore.list_runs` sees it (read-only).

    ``status``: ``finished``, ``interrupted`` (checkpoint, no result), ``empty`` (neither) or ``damaged`` (a
    result.json that does not verify); :mod:`studylib.results` tells ``running`` from ``interrupted`` by the
    run's lock (``<store>/.locks/<run>.json``, held while a process trains it). ``evaluations``: one entry per finished evaluation protocol, with its
    configuration and headline results ``{"<classifier>/<shots>": (mean, ci95)}``.
    """

    name: str
    path: Path
    status: str
    created: float
    config: dict[str, Any] | None
    training: dict[str, Any] | None
    evaluations: list[dict[str, Any]] = field(default_factory=list)


class RunStore:
    """A folder of runs. ``store.run(name, config)`` gives the run for that configuration (nothing is written)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir() / "runs"

    def run(self, name: str, config: dict[str, Any]) -> Run:
        return Run(self.root / f"{name}-{config_hash(config)}", config)

    def runs(self) -> list[Run]:
        out = []
        for p in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if not p.name.startswith(".") and (p / CONFIG).exists():  # never .locks/
                try:
                    config = _load_json(_read_verified(p / CONFIG, ""), p / CONFIG, "")
                except RunFileError:
                    config = {}
                out.append(Run(p, config))
        return out

    def list_runs(self) -> list[RunInfo]:
        """Every run folder with its status, creation time and headline results, oldest first. Reads only."""
        infos = []
        for p in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if not p.is_dir() or p.name.startswith("."):  # .locks/ of the run locks
                continue
            run = Run(p, {})
            cfg = _try_json(p / CONFIG)
            created = (p / CONFIG).stat().st_mtime if (p / CONFIG).exists() else p.stat().st_mtime
            status = run.status
            training = _try_json(p / RESULT) if status == "finished" else None
            if status == "finished" and training is None:
                status = "damaged"
            evals = []
            for e in sorted(p.glob("eval-*/")):
                res = _try_json(e / RESULT)
                if res is not None:
                    headline = {k: (v["mean"], v["ci95"]) for k, v in res.get("test", {}).items()
                                if isinstance(v, dict) and "mean" in v}
                    evals.append({"name": e.name, "config": _try_json(e / CONFIG), "headline": headline,
                                  "result": res})
            infos.append(RunInfo(p.name, p, status, created, cfg, training, evals))
        return sorted(infos, key=lambda i: (i.created, i.name))


def _try_json(path: Path) -> Any:
    try:
        return _load_json(_read_verified(path, ""), path, "")
    except RunFileError:
        return None


__all__ = ["Run", "RunStore", "adopt", "RunInfo", "RunFileError", "provenance", "git_commit", "CHECKPOINT", "PREVIOUS",
           "METRICS", "RESULT", "WEIGHTS", "CONFIG", "TENSORBOARD"]


def main(argv: list[str]) -> int:
    """``python -m studylib.training.runstore adopt [--trust] RUN_FOLDER...`` (see :func:`adopt`)."""
    import sys
    args = [a for a in argv[1:] if a != "--trust"]
    if not argv or argv[0] != "adopt" or not args:
        print(f"usage: {ADOPT} [--trust] RUN_FOLDER...", file=sys.stderr)
        return 2
    failed = 0
    for folder in args:
        if not (Path(folder) / CONFIG).is_file():
            print(f"error: {folder} is not a run folder (no {CONFIG}); ./study results lists the runs", file=sys.stderr)
            failed = 1
            continue
        try:
            done = adopt(folder, trust="--trust" in argv)
            print(f"{folder}: checksums written for {len(done)} file(s)" if done else f"{folder}: nothing to adopt")
        except RunFileError as e:
            print(f"error: {e}", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
