"""Progress is plain text (issue 13): one line per run over a sweep plus the current run's bar, on by default,
never an ipywidget (a frozen "0% 0/120" in a saved notebook)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from studylib import progress
from studylib.runs.runner import run_spec
from studylib.runs.sweeps import run_sweep
from studylib.training.runstore import RunStore

sys.path.insert(0, str(Path(__file__).parent / "runs"))
from test_runner_guards import tiny_spec  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WIDGET = "application/vnd.jupyter.widget-view+json"


def _specs():
    base = tiny_spec()
    return [dataclasses.replace(base, name="a"),
            dataclasses.replace(base, name="b", train=dataclasses.replace(base.train, seed=1))]


def test_sweep_shows_a_line_per_run_and_each_runs_bar_by_default(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    run_sweep(_specs(), RunStore(tmp_path))
    out = capsys.readouterr().out
    lines = [line for chunk in out.split("\n") for line in chunk.split("\r") if line.strip()]
    sweep = [line for line in lines if line.startswith("sweep")]
    assert len(sweep) == 3 and "0/2" in sweep[0] and "next: a" in sweep[0]
    assert "1/2" in sweep[1] and "next: b" in sweep[1] and "2/2" in sweep[2] and "done" in sweep[2]
    assert any(line.startswith("[1/2] a-") and "100%" in line for line in lines)  # the run's own bar, prefixed
    assert any(line.startswith("[2/2] b-") and "100%" in line for line in lines)
    assert "\x1b[" not in out  # no cursor movement: Jupyter and logs would print it as junk
    # a second sweep reuses both runs: only the sweep lines
    run_sweep(_specs(), RunStore(tmp_path))
    again = capsys.readouterr().out
    assert "[1/2]" not in again and again.count("sweep") == 3


def test_progress_off_by_argument_or_environment(tmp_path, capsys, monkeypatch):
    run_sweep(_specs()[:1], RunStore(tmp_path / "x"), progress=False)
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    run_spec(_specs()[1], RunStore(tmp_path / "y"))
    assert capsys.readouterr().out == ""


def test_bars_are_text_not_widgets():
    from tqdm.std import tqdm
    b = progress.bar(total=3, desc="x", enabled=False)
    assert type(b) is tqdm  # tqdm.auto would give tqdm.notebook.tqdm (an ipywidget) under Jupyter
    b.close()
    for mod in ("evaluation/evaluate.py", "runs/runner.py", "training/loop.py", "progress.py"):
        text = (REPO / "studylib" / mod).read_text()
        assert "tqdm.auto" not in text and "tqdm.notebook" not in text


@pytest.mark.parametrize("nb", sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb")))
def test_committed_notebooks_hold_no_progress_widgets(nb):
    """A saved widget shows as a frozen "0% 0/120" on GitHub/nbviewer; re-execute the notebook after the
    switch to text bars (``./study reference NB``)."""
    cells = json.loads((REPO / "notebooks" / nb).read_text())["cells"]
    frozen = [i for i, c in enumerate(cells) for o in c.get("outputs", []) if WIDGET in o.get("data", {})]
    assert not frozen, f"{nb}: cells {frozen} hold tqdm widgets; re-run ./study reference {nb[:-6]}"


def test_stale_widget_state_is_stripped(tmp_path):
    from studylib.notebooks import strip_stale_widgets
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "text": "x"}]}],
          "metadata": {"widgets": {"state": {}}, "kernelspec": {}}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "a.ipynb"
    path.write_text(json.dumps(nb))
    assert strip_stale_widgets(path) and json.loads(path.read_text())["metadata"] == {"kernelspec": {}}
    nb["cells"][0]["outputs"] = [{"output_type": "display_data", "data": {WIDGET: {}}}]
    path.write_text(json.dumps(nb))
    assert not strip_stale_widgets(path)  # a live widget keeps its state
