"""Progress display that reads the same in a terminal, in JupyterLab, in papermill's logs and in a committed
notebook: plain text (``tqdm.std``) on stdout, never ipywidgets.

A notebook widget bar is saved as a frozen "0% 0/120" in the executed notebook (GitHub, nbviewer and a
JupyterLab without the widget state show that text fallback), and papermill's ``--log-output`` never sees it.
Text bars have neither problem: JupyterLab renders their carriage returns as a bar updating in place, and the
saved notebook and the logs hold the text.

A sweep (:func:`studylib.runs.sweeps.run_sweep`) prints one line per run over the whole sweep
(:class:`SweepProgress`: ``sweep 1/3 |███       | ... next: <run>``) and, under it, the current run's training
bar, whose description starts with the run's position in the sweep (``[2/3] <run folder>``).

Progress is on by default; ``STUDYLIB_PROGRESS=0`` turns it off wherever ``progress`` is left unset (None).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
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


# ----------------------------------------------------------------------------------------------------------
# ./study run: the notebook's progress lines out of papermill's log (``--log-output``)
# ----------------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_METER = re.compile(r"^(?P<desc>.*?):?\s*(?P<pct>\d+)%\|.*\|\s*(?P<n>[\d.]+[kMG]?)/(?P<total>[\d.?]+[kMG]?)\s*\[")
# the training loop's paper-scale announcements (studylib.training.loop: the step count, then the wall time)
_STUDY_LINE = re.compile(r"paper scale, \d+ training steps|s per step on .* take about")
_ERROR = re.compile(r"^[A-Za-z_][\w.]*:( |$)")  # "ValueError: ...", "pkg.mod.NoSuchKernel: ..."
LOG_INTERVAL = 30.0  # seconds between two lines of the same bar when the output is not a terminal


def progress_line(raw: str) -> tuple[str, str] | None:
    """The study's progress in one line of papermill's log, as ``(kind, text)``, or None for everything else.

    ``kind`` is the bar's description for a tqdm meter (``[2/3] <run> epoch 1/4``, ``sweep``), ``"study"`` for
    the training loop's paper-scale lines and studylib's own notices (``studylib: waiting for run ...``), and
    ``"warning"`` for a warning raised in ``studylib``. papermill's
    own lines (cells executing/ending, the notebook paths), the kernel's ``Kernel is running over TCP without
    encryption`` warning and the notebook's other output are not progress (None). A line holding several
    carriage-return updates counts as its last one.
    """
    text = _ANSI.sub("", raw).split("\r")
    text = next((t.strip() for t in reversed(text) if t.strip()), "")
    if not text:
        return None
    m = _METER.match(text)
    if m:
        return m.group("desc").strip(), text
    if _STUDY_LINE.search(text) or text.startswith("studylib: "):  # the loop's lines; studylib's notices (waiting)
        return "study", text
    if "/studylib/" in text and "Warning: " in text:
        return "warning", text
    return None


def filter_run_log(lines: Iterator[str], out: Any = None, interactive: bool | None = None,
                   interval: float = LOG_INTERVAL, clock: Any = time.monotonic) -> int:
    """Copy the progress lines of a papermill log (``--log-output``) from ``lines`` to ``out``; returns how many.

    In a terminal (``interactive``) a bar updates in place (carriage return) and moves to a new line when
    another bar starts. Elsewhere (a log file, CI) a bar prints a line when it starts, finishes or changes
    description, and at most every ``interval`` seconds in between. After a failed cell papermill prints its
    traceback; only its last error line (``ValueError: ...``, the study's message with the fix) is kept.
    """
    out = out or sys.stderr
    interactive = _interactive_stream(out) if interactive is None else interactive
    shown, last_kind, last_t, open_line, error = 0, None, -math.inf, False, None
    in_traceback, last = False, None
    for raw in lines:
        raw = raw.rstrip("\n")
        plain = _ANSI.sub("", raw).strip()
        if plain.startswith("Traceback (most recent call last)") or plain.startswith("---> ") or in_traceback:
            in_traceback = True
            if _ERROR.match(plain) and not plain.startswith("papermill.exceptions"):
                error = plain
            elif plain and error is None:
                last = plain
            continue
        got = progress_line(raw)
        if got is None:
            continue
        kind, text = got
        now = clock()
        done = bool(re.search(r"\b100%\|", text))
        if interactive:
            if kind != last_kind and open_line:
                out.write("\n")
            out.write("\r" + text + "\x1b[K" + ("\n" if kind in ("study", "warning") else ""))
            open_line = kind not in ("study", "warning")
        else:
            if kind == last_kind and not done and now - last_t < interval:
                continue
            out.write(text + "\n")
        out.flush()
        last_kind, last_t = kind, now
        shown += 1
    if open_line:
        out.write("\n")
    if error or last:
        out.write(f"error: {error or last}\n")
    out.flush()
    return shown


def _interactive_stream(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


if __name__ == "__main__":  # ./study run: papermill ... --log-output 2>&1 | python -m studylib.progress
    filter_run_log(sys.stdin)
