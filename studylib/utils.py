"""Small shared helpers: devices, seeds, atomic files, configuration hashes, confidence intervals."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import random
import re
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

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


THREADS_ENV = "STUDYLIB_THREADS"
# Default torch CPU threads when neither STUDYLIB_THREADS nor OMP_NUM_THREADS is set: measured with
# benchmarks/bench_threads.py (README: Day-to-day use); on a shared 2-core machine one thread per process trains
# faster than torch's default of one per core, and it keeps results and resumes thread-count independent.
DEFAULT_THREADS = 1


def configured_threads() -> int | None:
    """The torch CPU thread count the study uses: ``$STUDYLIB_THREADS`` when set; None (keep torch's own choice)
    when only ``$OMP_NUM_THREADS`` is set (torch already follows it); else :data:`DEFAULT_THREADS`.

    Raises:
        ValueError: ``STUDYLIB_THREADS`` is not a positive integer.
    """
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{THREADS_ENV}={raw!r} must be a positive integer (torch CPU threads), e.g. "
                             f"{THREADS_ENV}=1")
        return n
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return None
    return DEFAULT_THREADS


def apply_threads() -> int:
    """Set torch's CPU threads from :func:`configured_threads` (called when the training loop is imported, so
    every notebook and command gets it); returns the thread count in effect."""
    n = configured_threads()
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


class DiskFullError(OSError):
    """The disk (or quota) filled up while a file was written; the target file was left as it was."""


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (``/proc/self/status`` on Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (a brief window in which other threads see 0o022)
    os.umask(mask)
    return mask


_HOST = socket.gethostname().replace("/", "_") or "host"
# Temporary files are named ``.<name>.<pid>@<host>.<random>.tmp``: their owner can be told dead or alive.
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)@(?P<host>.+)\.[A-Za-z0-9_]+\.tmp$")
STALE_TMP_SECONDS = 3600.0  # a temporary file no local process owns is stale after this long


def _write_all(fh: Any, data: bytes, target: Path) -> None:
    """The one place file bytes are written (to a temporary file for ``target``; tests replace it to simulate
    a full disk). Half-way through, the test hook ``write.partial`` (:func:`kill_point`, detail: the target's
    name) can stop the process with part of the file written."""
    half = len(data) // 2
    fh.write(data[:half])
    if os.environ.get("STUDYLIB_KILL_AT"):
        fh.flush()
        kill_point("write.partial", target.name)
    fh.write(data[half:])
    fh.flush()
    os.fsync(fh.fileno())


def atomic_write_bytes(path: str | Path, data: bytes, before_replace: Callable[[], None] | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    A kill at any point leaves either the old or the new file, never a partial one (the temporary file it may
    leave is removed later by :func:`remove_stale_temp_files`). The file gets the mode a plain ``open`` would
    (``0o666`` minus the umask), so a store on a group drive stays readable by the group. A full disk raises
    :class:`DiskFullError` naming the path. ``before_replace`` runs once the new bytes are safely in the
    temporary file, just before it replaces ``path`` (the run store writes checksums and rotates checkpoints
    there, so a failed write changes nothing).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}@{_HOST}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # mkstemp makes 0o600
            os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            _write_all(fh, data, path)
        if before_replace is not None:
            before_replace()
        kill_point("write.before_replace", path.name)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise DiskFullError(e.errno, f"the disk is full (or the quota exceeded) while writing {path} "
                                         f"({len(data) / 2**20:.1f} MiB); {path.name} was left as it was. Free "
                                         f"space on that drive (or point STUDYLIB_CACHE elsewhere) and re-run",
                                str(path)) from e
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _temp_for(path: Path) -> str:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}@{_HOST}.", suffix=".tmp")
    os.close(fd)
    return tmp


def atomic_write_many(files: dict[Path, bytes]) -> None:
    """Write several files as one change: every file's bytes go to a temporary file beside it first (fsynced),
    then all are renamed into place with Ctrl-C held back until the last rename, so an interrupt (or an error)
    leaves every file as it was, or all of them new; a Ctrl-C that arrives while they are installed is raised
    (``KeyboardInterrupt``) once they all are. No temporary file stays behind, except after a SIGKILL (then
    :func:`remove_stale_temp_files` removes it later)."""
    temps: dict[Path, str] = {}
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            temps[path] = tmp = _temp_for(path)
            if hasattr(os, "chmod"):  # mkstemp makes 0o600; a plain open gives 0o666 minus the umask
                os.chmod(tmp, 0o666 & ~current_umask())
            with open(tmp, "wb") as fh:
                try:
                    _write_all(fh, data, path)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
                        raise DiskFullError(e.errno, f"the disk is full (or the quota exceeded) while writing "
                                                     f"{path}; no file was changed. Free space and re-run",
                                            str(path)) from e
                    raise
        with holding_interrupts():
            for path, tmp in temps.items():
                kill_point("write.before_replace", path.name)
                os.replace(tmp, path)
            temps.clear()
    finally:
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)


class holding_interrupts:
    """``with holding_interrupts(): ...``: a Ctrl-C (SIGINT) during the block is held back and raised as
    ``KeyboardInterrupt`` when the block ends (a few renames that must happen together). Outside the main
    thread, where no signal handler can be set, the block runs unprotected."""

    def __enter__(self) -> "holding_interrupts":
        import threading
        self.got: list[int] = []
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, lambda signum, frame: self.got.append(signum))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        if self.got and exc[0] is None:
            raise KeyboardInterrupt


def figure_bytes(fig: Any, path: str | Path, **savefig: Any) -> bytes:
    """A matplotlib figure rendered in memory in the format of ``path``'s suffix (``.png``, ``.pdf``, ``.svg``),
    for :func:`atomic_write_bytes`: the file on disk is never half-drawn."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower() or "png", **savefig)
    return buf.getvalue()


def atomic_savefig(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """``fig.savefig(path)`` atomically: drawn in memory (:func:`figure_bytes`), written to a temporary file in
    the same folder, fsynced and renamed over ``path``; an interrupt leaves the old file and no temporary one."""
    atomic_write_bytes(path, figure_bytes(fig, path, **savefig))
    return Path(path)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


def json_text(obj: Any) -> str:
    """The JSON text every studylib file uses (indented, sorted keys, NumPy/torch scalars allowed)."""
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def torch_bytes(obj: Any) -> bytes:
    """``torch.save(obj)`` into memory (so the bytes can be checksummed and written atomically)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` through a temporary file, so a kill never leaves a half-written checkpoint."""
    atomic_write_bytes(path, torch_bytes(obj))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else
    return True


def remove_stale_temp_files(folder: str | Path, max_age: float = STALE_TMP_SECONDS) -> list[Path]:
    """Delete the temporary files of killed writers in ``folder`` (not recursive); return what was removed.

    A temporary file is stale when its owner (pid in its name) is a dead process on this host, or, when the
    owner cannot be checked (another host, or an unnamed ``*.tmp`` of an older version), when it is older
    than ``max_age`` seconds. Files of live writers are never touched.
    """
    removed: list[Path] = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    now = time.time()
    for f in folder.glob(".*.tmp"):
        m = _TMP_RE.match(f.name)
        try:
            if m and m["host"] == _HOST:
                stale = int(m["pid"]) != os.getpid() and not _pid_alive(int(m["pid"]))
            else:
                stale = now - f.stat().st_mtime > max_age
            if stale:
                f.unlink()
                removed.append(f)
        except FileNotFoundError:
            pass  # its writer installed or removed it meanwhile
    return removed


_KILL_COUNTS: dict[str, int] = {}


def kill_point(name: str, detail: str = "") -> None:
    """Test hook: SIGKILL this process at a named point when ``STUDYLIB_KILL_AT`` asks for it.

    ``STUDYLIB_KILL_AT=<point>[@<detail>][:<n>]`` kills at the ``n``-th time (default 1) the point is reached
    with that detail (e.g. ``loop.after_metrics:2``, ``write.before_replace@metrics.jsonl``);
    ``STUDYLIB_KILL_SIGNAL=INT`` sends a Ctrl-C (SIGINT) instead of SIGKILL. Points:
    ``write.partial`` (half of a file's bytes in its temporary file; detail = file name),
    ``write.before_replace`` (temporary file written, not installed; detail = file name),
    ``loop.after_metrics`` (metrics written, their checkpoint not yet), ``runstore.checkpoint_rotated`` (the
    checkpoint moved to ``checkpoint.prev.pt``, the new one not installed), ``loop.after_weights`` (final
    weights written, the training record not yet), ``runner.before_result`` (per-episode accuracies written,
    the evaluation result not yet). Unset: one dictionary lookup.
    """
    spec = os.environ.get("STUDYLIB_KILL_AT")
    if not spec:
        return
    point, _, count = spec.partition(":")
    point, _, want_detail = point.partition("@")
    if point != name or (want_detail and want_detail != detail):
        return
    key = f"{name}@{want_detail}"
    _KILL_COUNTS[key] = _KILL_COUNTS.get(key, 0) + 1
    if _KILL_COUNTS[key] >= int(count or 1):
        sys.stdout.flush()
        sys.stderr.flush()
        if os.environ.get("STUDYLIB_KILL_SIGNAL", "").upper() in ("INT", "SIGINT"):
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C: KeyboardInterrupt at the next bytecode
            time.sleep(0.5)  # (delivered before this returns)
            return
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
        os._exit(137)  # pragma: no cover (where SIGKILL does not exist)


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


def run_command(main: Callable[[], int | None], name: str) -> None:
    """A command's ``main`` as ``python -m`` runs it: its return value is the exit status; ``SystemExit`` passes
    (argparse's usage errors: 2); Ctrl-C prints one line, ``<name>: interrupted``, with no traceback, and ends
    the process by SIGINT (exit status 130 as the shell reports it; a script that ran the command stops too,
    where an exit of 130 would let bash go on); a closed stdout (``| head``) ends it quietly."""
    try:
        code = main()
    except KeyboardInterrupt:
        try:
            print(f"{name}: interrupted", file=sys.stderr, flush=True)
        except OSError:
            pass
        interrupted_exit()
    except BrokenPipeError:
        try:  # the rest of the output has nowhere to go: silence the flush at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        sys.exit(0)
    sys.exit(code or 0)


def interrupted_exit() -> None:
    """End this process as a Ctrl-C does (SIGINT at its default action: status 130 to the shell), else exit 130."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)
    except (OSError, ValueError):  # not the main thread, or no such signal here
        pass
    sys.exit(130)
