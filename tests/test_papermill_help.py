"""``papermill --help-notebook`` shows every parameter with its type and help (issue 13): the generated
parameters cell is what papermill's parser reads."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import sys
import typing

import pytest
from papermill.translators import PythonTranslator

import studylib.experiments as experiments
from studylib.config import _compact_type, parameters_cell, param


def _schemas():
    out = []
    for m in pkgutil.iter_modules(experiments.__path__):
        try:
            mod = importlib.import_module(f"studylib.experiments.{m.name}")
        except ImportError:
            continue
        if hasattr(mod, "NOTEBOOK") and dataclasses.is_dataclass(getattr(mod, "Params", None)):
            out.append(pytest.param(mod.Params, id=mod.NOTEBOOK))
    return out


@dataclasses.dataclass
class Tricky:
    a: int = param(1, ge=0, help="T = 1 for PN; n >= 1, m <= 2, x != y, m+n=16")
    b: list[int] | None = param(None, help="# of seeds")
    c: str = param("x", choices=["x", "y"])


@pytest.mark.parametrize("schema", [pytest.param(Tricky, id="tricky"), *_schemas()])
def test_papermill_reads_every_parameter_with_type_and_help(schema):
    parsed = {p.name: p for p in PythonTranslator.inspect({"source": parameters_cell(schema)})}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        assert f.name in parsed, f"papermill does not see {f.name}"
        p = parsed[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert p.inferred_type_name == _compact_type(hints[f.name]) and p.default == repr(default)
        if f.metadata.get("help") or f.metadata.get("choices"):
            assert p.help, f"no help for {f.name}"
    if schema is Tricky:
        assert parsed["a"].help == "T is 1 for PN; n ≥ 1, m ≤ 2, x ≠ y, m+n is 16"
        assert parsed["c"].help == "one of x, y"


def test_help_notebook_of_the_quickstart(repo):
    out = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook",
                          str(repo / "notebooks" / "00_quickstart.ipynb")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    from studylib.experiments.quickstart import Params
    assert "Unknown type" not in out.stdout and f"epochs: int (default {Params().epochs})" in out.stdout
    assert "training epochs" in out.stdout
