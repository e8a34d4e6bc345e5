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

Integrity without trust on first use: a run folder records its format (:data:`RUN_FORMAT`, in the hidden file
``.run-format``, written before any other file). In a run that records a format, or carries any checksum, a
file whose sidecar is missing or damaged is *damaged*: it is named, never loaded and never signed again. Only a
run with no sidecar and no format record at all (written by studylib before checksums) is *adoptable*, and
only by the person who vouches for it: ``python -m studylib.training.adopt --trust RUN_FOLDER``
(:func:`adopt`); nothing adopts a run on its own.

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
RUN_FORMAT = 2  # 0: before checksums (no sidecars); 1: checksums, no format record; 2: checksums + .run-format
FORMAT_FILE = ".run-format"
_FOLDER_NAME = re.compile(r"(?P<name>.+)-(?P<hash>[0-9a-f]{12})")  # <name>-<config_hash(config)>
_DIGESTS_KEPT = 3  # digests a sidecar lists: the new one and those of the content it may still replace


class RunFileError(RuntimeError):
    """A run-store file is damaged (checksum mismatch, truncated, unparsable); the message names it and the fix."""

    def __init__(self, path: Path, problem: str, fix: str, kind: str = "damaged") -> None:
        super().__init__(f"{path}: {problem}. {fix}" if fix else f"{path}: {problem}")
        self.path, self.problem, self.fix = path, problem, fix
        # "damaged"; "sidecar" (its sidecar is damaged: the file is damaged too); "unchecked" (a run of the format
        # before checksums, loaded only once adopted); "unverified" (adopt without --trust)
        self.kind = kind


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


ADOPT = "python -m studylib.training.adopt"  # the command that gives a run of the format before checksums checksums


def _run_root(path: Path) -> Path:
    """The training run folder ``path`` (a file or folder) belongs to: an ``eval-<hash>/`` sub-run's parent."""
    folder = path if path.is_dir() else path.parent
    if folder.name.startswith("eval-") and (folder.parent / CONFIG).exists():
        return folder.parent
    return folder


def _run_folders(root: Path) -> list[Path]:
    return [root, *sorted(p for p in root.glob("eval-*") if p.is_dir())] if root.is_dir() else []


def run_format(path: str | Path) -> int:
    """The format of the run holding ``path`` (its folder and its ``eval-*`` sub-runs judged as one run).

    :data:`RUN_FORMAT` when any of them records its format (``.run-format``), 1 when none does but one carries
    a checksum sidecar (written after checksums, before format records), 0 when none has either: a run written
    before checksums, the only kind :func:`adopt` accepts.
    """
    folders = _run_folders(_run_root(Path(path)))
    for f in folders:
        marker = f / FORMAT_FILE
        if marker.exists():
            try:
                return int(marker.read_text().split()[-1])
            except (OSError, ValueError, IndexError):
                return RUN_FORMAT  # a damaged record still says the run is not of the old format
    return 1 if any(next(f.glob(".*.sha256"), None) is not None for f in folders) else 0


def _holds_files(root: Path) -> bool:
    """Whether a run folder (or an ``eval-*`` sub-run of it) holds any file a run writes (not hidden)."""
    return any(not p.name.startswith(".") and p.is_file() for f in _run_folders(root) for p in f.iterdir())


def _write_format(folder: Path) -> None:
    atomic_write_bytes(folder / FORMAT_FILE, f"studylib run format {RUN_FORMAT}\n".encode())


def _unchecked_error(path: Path) -> RunFileError:
    root = _run_root(path)
    return RunFileError(path, f"has no checksum, and its run records no format and carries no checksum at all: a run "
                              f"written by studylib before checksums, which is not loaded until someone vouches for it",
                        f"Check the run, then adopt it: {ADOPT} --trust '{root}' (or delete it to train it again: "
                        f"rm -r '{root}')", kind="unchecked")


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
        fmt = run_format(path)
        if fmt == 0:
            raise _unchecked_error(path)
        if _sidecar_state(path) == "damaged":
            raise RunFileError(path, f"its checksum sidecar {_sidecar(path).name} is damaged (not a list of SHA-256 "
                                     f"digests) in a run of format {fmt}: {path.name} cannot be verified, so it is "
                                     f"treated as damaged and not loaded", fix, kind="sidecar")
        raise RunFileError(path, f"is damaged: its checksum {_sidecar(path).name} is missing in a run of format {fmt} "
                                 f"(which writes one with every file), so its content cannot be trusted and is not "
                                 f"loaded", fix)
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
    """Give a run written before checksums (format 0: no sidecar and no format record anywhere in it) its
    checksum sidecars and format record, on the word of the person who runs it (``trust=True``).

    Checked first, and reported: ``config.json`` parses and hashes to the hash in the folder's name (and equals
    ``config`` when given), and every file loads as its format does (:func:`_check_content`: checkpoints and
    weights ``weights_only=True``); the same for its ``eval-<hash>/`` sub-runs. A run that records its format
    or carries any checksum is never adopted: a file there without a valid checksum is damaged, not old.

    Args:
        folder: the run folder.
        config: the configuration the caller expects the run to have (None: not compared).
        trust: write the sidecars (after the checks, whatever they found); without it nothing is written.

    Returns:
        The files that got a sidecar.

    Raises:
        RunFileError: ``kind="damaged"`` for a run of a later format; ``kind="unverified"`` without ``trust``,
        naming what the checks found and the command that adopts the run.
    """
    folder = _run_root(Path(folder))
    fmt = run_format(folder)
    if fmt != 0:
        marks = "it records its format" if fmt > 1 else "it carries checksums"
        raise RunFileError(folder, f"is a run of format {fmt} ({marks}), not one written before checksums: a file of "
                                   f"it without a valid checksum is damaged, not old, and is never signed again",
                           f"Delete the run to train it again: rm -r '{folder}'", kind="damaged")
    problems: list[str] = []
    todo: list[tuple[Path, bytes]] = []
    for sub in _run_folders(folder):
        rel = (sub / CONFIG).relative_to(folder)
        try:
            cfg = json.loads((sub / CONFIG).read_text(encoding="utf-8"))
            got = config_hash(cfg)
            named = _FOLDER_NAME.fullmatch(sub.name)
            if named is None:
                problems.append(f"the folder name {sub.name!r} does not end in '-<12 hex digits>', the hash of its "
                                f"{CONFIG} (the folder was renamed?); {rel} hashes to {got}")
            elif named["hash"] != got:
                problems.append(f"{rel} hashes to {got}, but the folder {sub.name!r} is named by {named['hash']} "
                                f"(the configuration was edited, or the folder renamed)")
            elif sub == folder and config and cfg != json.loads(json_text(config)):
                problems.append(f"{CONFIG} differs from the configuration asked for")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            problems.append(f"{rel} cannot be read ({type(e).__name__})")
        for f in sorted(sub.iterdir()):
            if not f.is_file() or f.name.startswith("."):
                continue
            data = f.read_bytes()
            why = _check_content(f, data)
            if why:
                problems.append(f"{f.relative_to(folder)}: {why}")
            todo.append((f, data))
    if not trust:
        found = ("the checks found: " + "; ".join(problems)) if problems else (
            f"its configuration hash and {len(todo)} file(s) check out (weights load weights-only), but that "
            f"does not show that nobody changed them")
        raise RunFileError(folder, f"was written by studylib before checksums; {found}. Nothing was written",
                           f"If you trust these files, adopt the run as it is: {ADOPT} --trust '{folder}'; "
                           f"otherwise delete it to train it again: rm -r '{folder}'", kind="unverified")
    for f, data in todo:
        _write_digests(f, [hashlib.sha256(data).hexdigest()])
    for sub in _run_folders(folder):
        _write_format(sub)
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
        if not (self.path / FORMAT_FILE).exists():
            root = _run_root(self.path)
            if run_format(root) == 0 and _holds_files(root):  # never mix new checksummed files into an old run
                raise _unchecked_error(self.path)
            _write_format(self.path)  # before any other file: a run of this format is never taken for an old one
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
        return _read_verified(self.path / name, fix or self._fix(name))

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
        problems = []
        for path in (cur, prev):
            if not path.exists():
                continue
            try:
                state = _load_torch(_read_verified(path, fix), path, fix, map_location)
            except RunFileError as e:
                if e.kind == "unchecked":  # a run of the format before checksums: adopted only on purpose
                    raise
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
    from studylib.precision import autocast_enabled
    if device.type == "cpu" and autocast_enabled(device):  # the check scale's bf16 path (studylib.precision)
        out["cpu_autocast"] = "bf16"
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
            if (status == "finished" and training is None) or _damaged(p / CONFIG):
                status = "damaged"  # an unreadable result.json or config.json (not "empty": the run is there)
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


def _damaged(path: Path) -> bool:
    """Whether a run's JSON file is there but cannot be trusted: it fails its checksum, is not a JSON object,
    or its sidecar is damaged (a run of the format before checksums, not yet adopted, is not damaged)."""
    if not path.exists():
        return False
    try:
        return not isinstance(_load_json(_read_verified(path, ""), path, ""), dict)
    except RunFileError as e:
        if e.kind != "unchecked":
            return True
    try:  # an unadopted run of the old format: damaged only when the file is not even a JSON object
        return not isinstance(json.loads(path.read_bytes()), dict)
    except (OSError, ValueError):
        return True


def _try_json(path: Path) -> Any:
    try:
        return _load_json(_read_verified(path, ""), path, "")
    except RunFileError:
        return None


__all__ = ["Run", "RunStore", "adopt", "run_format", "RunInfo", "RunFileError", "provenance", "git_commit",
           "CHECKPOINT", "PREVIOUS", "METRICS", "RESULT", "WEIGHTS", "CONFIG", "TENSORBOARD", "RUN_FORMAT"]
