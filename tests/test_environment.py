"""The environment files agree, the CI script runs the README's test command, parameter files validate."""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from studylib.config import read_param_file, validate

REPO = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    pip = [p for p in pip if not p.startswith("-e")]
    assert sorted(deps) == sorted(pip), "pyproject.toml and environment.yml list different requirements"
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
    module = importlib.import_module(f"studylib.experiments.{notebook.split('_', 1)[1]}")
    assert module.NOTEBOOK == notebook
    return module.Params


@pytest.mark.parametrize("notebook", _notebooks())
def test_every_notebook_has_valid_smoke_and_paper_params(notebook):
    schema = _schema(notebook)
    for scale in ("smoke", "paper"):
        values = read_param_file(REPO / "params" / notebook / f"{scale}.yaml")
        validate(schema, values, where=f"{notebook}/{scale}")


@pytest.mark.parametrize("notebook", _notebooks())
def test_notebook_parameters_cell_equals_smoke_file(notebook):
    """nbval executes the notebook's own parameters cell: it must hold exactly the smoke parameters."""
    nb = json.loads((REPO / "notebooks" / f"{notebook}.ipynb").read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    ns: dict = {}
    exec("".join(cells[0]["source"]), ns)
    ns = {k: v for k, v in ns.items() if not k.startswith("__")}
    smoke = read_param_file(REPO / "params" / notebook / "smoke.yaml")
    assert ns == smoke
