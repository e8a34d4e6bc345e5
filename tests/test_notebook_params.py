"""The parameters cell is generated from the schema, papermill reads its types and help, and re-running it works."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from papermill.translators import PythonTranslator

from studylib.config import ParamError, cut_fields, defaults, notebook_params, param, parameters_cell


@dataclass
class Schema:
    scale: str = param("smoke", choices=("smoke", "paper", "check"), help="which scale", cut=True)
    lr: float = param(0.1, help="learning rate")
    shots: list[int] = param([1, 5], help="evaluation shots")
    root: str | None = param(None, help="data folder", cut=True)
    amp: bool = param(True)


def test_parameters_cell_executes_to_the_defaults():
    ns: dict = {}
    exec(parameters_cell(Schema), ns)
    assert {k: v for k, v in ns.items() if not k.startswith("__")} == defaults(Schema)
    assert defaults(Schema) == {"scale": "smoke", "lr": 0.1, "shots": [1, 5], "root": None, "amp": True}


def test_papermill_reads_types_and_help_from_the_cell():
    found = {p.name: p for p in PythonTranslator.inspect({"source": parameters_cell(Schema)})}
    assert list(found) == ["scale", "lr", "shots", "root", "amp"]
    assert found["lr"].inferred_type_name == "float" and found["lr"].help == "learning rate"
    assert found["root"].inferred_type_name == "str|None" and found["root"].default == "None"
    assert found["scale"].help == "which scale; one of smoke, paper, check"


def test_cut_fields():
    assert cut_fields(Schema) == {"scale", "root"}


def _notebook(tmp_path: Path, cells: list[tuple[str, list[str]]]) -> None:
    (tmp_path / "params").mkdir()
    (tmp_path / "notebooks").mkdir()
    nb = {"cells": [{"cell_type": "code", "metadata": {"tags": tags}, "source": src, "outputs": []}
                    for src, tags in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "notebooks" / "99_demo.ipynb").write_text(json.dumps(nb))


def test_rerunning_the_parameters_cell_after_run_all_works(tmp_path, monkeypatch):
    _notebook(tmp_path, [("import math\n_baseline = set(globals())", []), (parameters_cell(Schema), ["parameters"]),
                         ("P = notebook_params(Schema, globals(), _baseline, '99_demo')", []),
                         ("fig, rows = make(P)\nfor row in rows:\n    pass\nstats = {}", [])])
    monkeypatch.chdir(tmp_path / "notebooks")
    ns: dict = {"notebook_params": notebook_params, "Schema": Schema}
    exec("import math\n_baseline = set(globals())", ns)
    baseline = ns["_baseline"]
    exec(parameters_cell(Schema), ns)
    p = notebook_params(Schema, ns, baseline, "99_demo")
    # "Run All" created the later cells' names; the user edits lr and re-runs the parameters cell
    ns.update(P=p, fig=object(), rows=[1, 2], row=2, stats={})
    exec(parameters_cell(Schema).replace("lr = 0.1", "lr = 0.05"), ns)
    assert notebook_params(Schema, ns, baseline, "99_demo").lr == 0.05


def test_a_misspelt_injected_parameter_is_refused(tmp_path, monkeypatch):
    _notebook(tmp_path, [(parameters_cell(Schema), ["parameters"]), ("P = 1", [])])
    monkeypatch.chdir(tmp_path / "notebooks")
    ns: dict = {}
    baseline = set(ns)
    exec(parameters_cell(Schema) + "\nlrr = 0.5\n", ns)  # papermill -p lrr 0.5
    with pytest.raises(ParamError, match="unknown parameter 'lrr'"):
        notebook_params(Schema, {k: v for k, v in ns.items() if k != "__builtins__"}, baseline, "99_demo")
