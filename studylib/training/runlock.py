"""One worker per run: a lock file with its owner's host and pid, kept fresh by a heartbeat, taken over when stale.

Sweeps on several workers (:mod:`studylib.runs.sweeps`) meet in the run store, a shared folder. Before a
worker trains a run it takes ``<store>/.locks/<run folder>.json``:

* **Taking** it is ``open(O_CREAT | O_EXCL)``, atomic on local file systems and on NFS (v3 and later); the
  file holds ``{"host", "pid", "token", "since"}``.
* **Holding** it: a daemon thread touches the file every ``heartbeat`` seconds, so its modification time says
  the owner is alive, across hosts.
* **Stale** when the owner is on this host and its pid is gone (or a zombie), or, from any host, when the file
  was not touched for ``stale_after`` seconds (a dead machine, a frozen process). A stale lock is taken over:
  renamed aside (``rename`` is atomic; of two workers taking over at once exactly one succeeds), checked to be
  the very file judged stale (else it is put back), removed, and the worker tries to take it afresh.
* **Releasing** removes the file only if it is still ours.

The lock saves work; it is not what keeps results right: every file of a run is written atomically and
training is deterministic, so even two workers on one run would write the same files. ``fcntl`` locks were
not used because they are not honoured by every shared file system a cluster mounts, and a lock file can be
read by a person (``cat``) to see who is training what.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process of this host (a zombie, killed but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


_HELD_HERE: set[str] = set()  # tokens of the locks this process holds (a Ray task's lock, then its run_spec)


def describe_owner(info: dict[str, Any]) -> str:
    """``host H, pid P, notebook N (heartbeat 3 s ago)`` of a lock file's content (:meth:`RunLock.owner`)."""
    parts = [f"host {info.get('host', '?')}", f"pid {info.get('pid', '?')}"]
    if info.get("notebook"):
        parts.append(f"notebook {info['notebook']}")
    age = info.get("age")
    return ", ".join(parts) + (f" (heartbeat {age:.0f} s ago)" if isinstance(age, (int, float)) else "")


class RunLock:
    """The lock file at ``path``.

    Args:
        path: the lock file (its folder is created).
        stale_after: seconds without a heartbeat after which another host may take the lock over.
        heartbeat: seconds between touches of the file while held.
    """

    def __init__(self, path: str | Path, stale_after: float = 120.0, heartbeat: float = 10.0) -> None:
        if heartbeat >= stale_after:
            raise ValueError(f"heartbeat ({heartbeat} s) must be shorter than stale_after ({stale_after} s)")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stale_after, self.heartbeat = stale_after, heartbeat
        self.token = uuid.uuid4().hex
        self.info = {"host": socket.gethostname(), "pid": os.getpid(), "token": self.token}
        self.held = False
        self.lost = False  # set by the heartbeat when the file is no longer ours
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------------ state
    def owner(self) -> dict[str, Any] | None:
        """The current lock file's content and age (``age`` seconds since its last heartbeat), or None."""
        try:
            text = self.path.read_text()
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            info = json.loads(text)
        except json.JSONDecodeError:  # being written this instant (O_EXCL then write): not stale yet
            info = {}
        return {**info, "age": age}

    def is_stale(self, info: dict[str, Any]) -> bool:
        if info.get("age", 0.0) > self.stale_after:
            return True
        if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
            return not _pid_alive(info["pid"])
        return False

    def held_by_this_process(self, info: dict[str, Any] | None = None) -> bool:
        """Whether the lock file belongs to a lock object of this process (this one or another, e.g. the Ray
        task that calls :func:`studylib.runs.runner.run_spec` while holding the run's lock)."""
        info = self.owner() if info is None else info
        return info is not None and info.get("token") in _HELD_HERE

    def busy(self) -> bool:
        """Held by someone alive (not us)."""
        info = self.owner()
        return info is not None and info.get("token") != self.token and not self.is_stale(info)

    # --------------------------------------------------------------------------------------------- acquire
    def acquire(self) -> bool:
        """Take the lock without waiting: True when this object now holds it."""
        if self.held:
            return True
        for _ in range(10):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                info = self.owner()
                if info is None:
                    continue  # released meanwhile: try again
                if not self.is_stale(info):
                    return False
                self._take_over(info)
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump({**self.info, "since": time.time()}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            self.held, self.lost = True, False
            _HELD_HERE.add(self.token)
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, name=f"runlock-{self.path.name}", daemon=True)
            self._thread.start()
            return True
        return False

    def _take_over(self, stale: dict[str, Any]) -> None:
        aside = self.path.with_name(f"{self.path.name}.stale-{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # someone else moved it first
        try:
            moved = json.loads(aside.read_text())
        except (OSError, json.JSONDecodeError):
            moved = {}
        if moved.get("token") != stale.get("token"):
            # A fresh lock replaced the stale one between our look and the rename: put it back if we can.
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
        aside.unlink(missing_ok=True)

    # ----------------------------------------------------------------------------------------------- hold
    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            info = self.owner()
            if info is None or info.get("token") != self.token:
                self.lost = True
                return
            try:
                os.utime(self.path)
            except FileNotFoundError:
                self.lost = True
                return

    def release(self) -> None:
        """Stop the heartbeat and remove the file if it is still ours."""
        if not self.held:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        info = self.owner()
        if info is not None and info.get("token") == self.token:
            self.path.unlink(missing_ok=True)
        self.held = False
        _HELD_HERE.discard(self.token)

    def __enter__(self) -> "RunLock":
        if not self.acquire():
            raise RuntimeError(f"{self.path} is held by {self.owner()}")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


__all__ = ["RunLock", "describe_owner"]
