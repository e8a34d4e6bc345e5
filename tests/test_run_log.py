"""./study run streams the notebook's progress (issue 20, item 7): papermill's ``--log-output`` log filtered to
the study's progress lines, without the kernel's TCP warning or papermill's cell markers."""

from __future__ import annotations

import io

from tqdm.std import tqdm

from studylib.progress import SweepProgress, filter_run_log

TCP = ("[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication (including code "
       "and outputs) is sent in plain text and is susceptible to eavesdropping.")


def _meter(n: int, total: int, desc: str) -> str:
    # what a text bar prints (tqdm's own formatter), as papermill logs a stream chunk: after a carriage return
    return "\r" + tqdm.format_meter(n, total, 1.0 + n, ncols=100, prefix=desc)


def _log(desc: str = "[1/3] 90_use_your_data-nca-7cf7", steps: int = 10) -> list[str]:
    """A papermill log of a run (its shape as ./study run receives it, stderr and stdout together)."""
    return ["Input Notebook:  notebooks/90_use_your_data.ipynb", "Output Notebook: out/smoke/90_use_your_data.ipynb",
            TCP, "Executing notebook with kernel: python3", "Executing Cell 1---------------------------------------",
            "Ending Cell 1------------------------------------------", "hello from a print()",
            SweepProgress(3).line("next: 90_use_your_data-nca-7cf7"),
            *(_meter(i, steps, desc) for i in range(steps + 1)),
            "90_use_your_data-nca-7cf7: paper scale, 4800 training steps on cuda (H100); estimating the wall time "
            "from the first 5 steps", "Ending Cell 7------------------------------------------"]


def test_progress_lines_pass_and_the_rest_is_dropped():
    out = io.StringIO()
    shown = filter_run_log(iter(_log()), out=out, interactive=False, clock=lambda: 0.0)
    text = out.getvalue()
    assert "TCP" not in text and "Executing" not in text and "Ending Cell" not in text and "hello" not in text
    assert "Input Notebook" not in text
    lines = text.splitlines()
    # the sweep line, the bar's first line and its 100% line (the others within LOG_INTERVAL), the loop's line
    assert lines[0].startswith("sweep:   0%|") and lines[0].endswith("next: 90_use_your_data-nca-7cf7")
    assert lines[1] == _meter(0, 10, "[1/3] 90_use_your_data-nca-7cf7").strip()
    assert lines[2] == _meter(10, 10, "[1/3] 90_use_your_data-nca-7cf7").strip()
    assert "estimating the wall time" in lines[3] and len(lines) == 4 == shown


def test_a_slow_bar_prints_a_line_per_interval_and_a_terminal_updates_in_place():
    ticks = iter(range(0, 1000, 10))  # every log line 10 s after the previous
    out = io.StringIO()
    filter_run_log(iter(_log(steps=9)), out=out, interactive=False, interval=30.0, clock=lambda: next(ticks))
    bars = [line for line in out.getvalue().splitlines() if line.startswith("[1/3]")]
    assert len(bars) == 4, bars  # steps 0, 3, 6 and the 100% line of 0..9
    term = io.StringIO()
    filter_run_log(iter(_log(steps=9)), out=term, interactive=True)
    assert term.getvalue().count("\r") == 1 + 10 + 1  # the sweep line, every update in place, the loop's line


def test_a_failed_cell_leaves_its_error_line_not_papermills_traceback():
    log = [*_log(steps=2), "Traceback (most recent call last):", '  File ".venv/bin/papermill", line 6, in <module>',
           "papermill.exceptions.PapermillExecutionError: ", "---> 3 raise DataError(...)",
           "DataError: batch_size=64 must lie in 1..60 (the number of training images)"]
    out = io.StringIO()
    filter_run_log(iter(log), out=out, interactive=False, clock=lambda: 0.0)
    text = out.getvalue()
    assert text.endswith("error: DataError: batch_size=64 must lie in 1..60 (the number of training images)\n")
    assert "papermill.exceptions" not in text and "File " not in text


def test_an_error_before_any_cell_is_named_too():
    log = ["Input Notebook:  notebooks/00_quickstart.ipynb", "Traceback (most recent call last):",
           '  File "papermill/cli.py", line 235, in papermill', "    execute_notebook(",
           "jupyter_client.kernelspec.NoSuchKernel: No such kernel named python3"]
    out = io.StringIO()
    assert filter_run_log(iter(log), out=out, interactive=False) == 0
    assert out.getvalue() == "error: jupyter_client.kernelspec.NoSuchKernel: No such kernel named python3\n"
