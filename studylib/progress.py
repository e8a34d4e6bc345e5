"""Progress display that reads the same in a terminal, in JupyterLab, in papermill's logs and in a committed
notebook: plain text (``tqdm.std``) on stdout, never ipywidgets.

A notebook widget bar is saved as a frozen "0% 0/120" in the executed notebook (GitHub, nbviewer and a
JupyterLab without the widget state show that text fallback), and papermill's ``--log-output`` never sees it.
Text bars have neither problem: JupyterLab renders their carriage returns as a bar updating in place, and the
saved notebook and the logs hold the text.

A sweep (:func:`studylib.experiments.runner.run_sweep`) prints one line per run over the whole sweep
(:class:`SweepProgress`: ``sweep 1/3 |███       | ... next: <run>``) and, under it, the current run's training
bar, whose description starts with the run's position in the sweep (``[2/3] <run folder>``).

Progress is on by default; ``STUDYLIB_PROGRESS=0`` turns it off wherever ``progress`` is left unset (None).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
from typing import Any, Iterator

from tqdm.std import tqdm

PROGRESS_ENV = "STUDYLIB_PROGRESS"
NOTEBOOK_INTERVAL = 2.0  # seconds between refreshes when stdout is not a terminal (keeps saved notebooks small)

_prefix: contextvars.ContextVar[str] = contextvars.ContextVar("studylib_progress_prefix", default="")


def default() -> bool:
    """Whether progress is shown when the caller leaves ``progress`` unset: on unless ``STUDYLIB_PROGRESS=0``."""
    return os.environ.get(PROGRESS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def resolve(progress: bool | None) -> bool:
    """``progress`` itself, or :func:`default` for None."""
    return default() if progress is None else bool(progress)


def _interactive() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def bar(total: int | None = None, desc: str = "", enabled: bool = True, **kw: Any) -> tqdm:
    """A text tqdm bar on stdout (position 0: no cursor movement, which Jupyter would print as junk).

    The description is prefixed with the current sweep position (``[2/3] ``) inside :meth:`SweepProgress.run`.
    """
    kw.setdefault("mininterval", 1.0 if _interactive() else NOTEBOOK_INTERVAL)
    kw.setdefault("dynamic_ncols", _interactive())
    if not _interactive():
        kw.setdefault("ncols", 100)
    return tqdm(total=total, desc=_prefix.get() + desc, disable=not enabled, file=sys.stdout, position=0, **kw)


class SweepProgress:
    """One line per step of a sweep: the bar over its runs (count, elapsed, remaining) and the run that comes next.

    Lines, not a carriage-return bar, so the current run's own bar (printed between them) never overwrites it.
    """

    def __init__(self, total: int, desc: str = "sweep", enabled: bool = True) -> None:
        self.total, self.desc, self.enabled = total, desc, enabled and total > 1
        self.done = 0
        self.t0 = time.perf_counter()

    def line(self, note: str = "") -> str:
        meter = tqdm.format_meter(self.done, self.total, time.perf_counter() - self.t0, ncols=80, prefix=self.desc,
                                  unit="run")
        return meter + (f"  {note}" if note else "")

    def _print(self, note: str) -> None:
        if self.enabled:
            print(self.line(note), file=sys.stdout, flush=True)

    @contextlib.contextmanager
    def run(self, name: str) -> Iterator[None]:
        """Around one run: prints the sweep line naming it, prefixes the run's bars with ``[i/n]``."""
        self._print(f"next: {name}")
        token = _prefix.set(f"[{self.done + 1}/{self.total}] " if self.enabled else "")
        try:
            yield
        finally:
            _prefix.reset(token)
        self.done += 1
        if self.done == self.total:
            self._print("done")
