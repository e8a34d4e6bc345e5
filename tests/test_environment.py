"""The environment files agree, the CI script runs the README's test command, parameter files validate."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from studylib.config import cut_fields, defaults, parameters_cell, read_param_file, validate
from studylib.paths import experiment_module

REPO = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    """environment.yml lists the requirements and every optional extra's (the conda environment is complete)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    extras = [r for reqs in project.get("optional-dependencies", {}).values() for r in reqs]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    pip = [p for p in pip if not p.startswith("-e")]
    assert sorted(deps + extras) == sorted(pip), "pyproject.toml and environment.yml list different requirements"
    assert "ray" in {_name(r) for r in extras}
    required = {"torch", "torchvision", "jupyterlab", "matplotlib", "seaborn", "umap-learn", "papermill", "nbval"}
    assert required <= {_name(d) for d in deps}


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, flags=re.S)
    commands = [line.strip() for b in blocks for line in b.splitlines() if line.strip().startswith("./study")]
    assert "./study run" in commands and "./study test" in commands
    assert re.search(r"^\./study test\s*$", ci, flags=re.M)


def _notebooks():
    return sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _schema(notebook: str):
    module = experiment_module(notebook)
    assert module.NOTEBOOK == notebook
    return module.Params


def _values(notebook: str, scale: str):
    schema = _schema(notebook)
    return dataclasses.asdict(validate(schema, read_param_file(REPO / "params" / notebook / f"{scale}.yaml"),
                                       where=f"{notebook}/{scale}"))


@pytest.mark.parametrize("notebook", _notebooks())
def test_every_notebook_has_valid_smoke_paper_and_check_params(notebook):
    for scale in ("smoke", "paper", "check"):
        assert _values(notebook, scale)["scale"] == scale
    if (REPO / "params" / notebook / "evidence.yaml").is_file():  # only notebooks with trained claims have one
        assert _values(notebook, "evidence")["scale"] == "evidence"
    for variant in sorted((REPO / "params" / notebook).glob("*-*.yaml")):  # paper-cifarfs.yaml: a data-set variant
        base = variant.stem.split("-", 1)[0]
        assert base in ("smoke", "evidence", "paper", "check") and _values(notebook, variant.stem)["scale"] == base


@pytest.mark.parametrize("notebook", _notebooks())
def test_parameters_cell_schema_and_smoke_file_agree(notebook):
    """One source of truth: the schema's defaults are the smoke scale; the notebook's parameters cell is
    generated from the schema (./study sync-params) and smoke.yaml changes nothing."""
    schema = _schema(notebook)
    nb = json.loads((REPO / "notebooks" / f"{notebook}.ipynb").read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    assert "".join(cells[0]["source"]) == parameters_cell(schema), "run ./study sync-params " + notebook
    assert _values(notebook, "smoke") == defaults(schema)
    for f in dataclasses.fields(schema):
        assert "=" not in f.metadata.get("help", ""), f"{f.name}: papermill cannot parse '=' in a help text"


@pytest.mark.parametrize("notebook", _notebooks())
def test_check_scale_is_the_paper_configuration_cut(notebook):
    """check.yaml may differ from paper.yaml only in the schema's cut keys (param(..., cut=True))."""
    paper, check = _values(notebook, "paper"), _values(notebook, "check")
    cut = cut_fields(_schema(notebook))
    assert "scale" in cut
    differ = sorted(k for k in paper if paper[k] != check[k] and k not in cut)
    assert not differ, f"check.yaml differs from paper.yaml in non-cut keys {differ}"


@pytest.mark.parametrize("notebook", _notebooks())
def test_smoke_reference_matches_the_smoke_parameters(notebook):
    """Every notebook's trained numbers are asserted against a committed reference made with its parameters."""
    from studylib.claims.reference import params_hash
    path = REPO / "params" / notebook / "smoke.reference.json"
    assert path.is_file(), f"create it with ./study reference {notebook}"
    ref = json.loads(path.read_text())
    assert ref["params_hash"] == params_hash(_schema(notebook)()), f"regenerate with ./study reference {notebook}"
