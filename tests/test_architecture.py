"""The architecture as a contract: ``pyproject.toml``'s import-linter contracts hold, and they can fail.

The layers (highest first) and the no-cycle rule are written in ``[tool.importlinter]``; ``lint-imports`` checks
them on the import graph of every module (imports inside functions included). These tests run it on the package
as it is, on a copy with an import added against the layers and one that closes a circle (both must fail,
naming the import), and check that every part of ``studylib`` sits in exactly one layer and no module grows
past the size a reader can hold.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "studylib"
MAX_LINES = 800


def _lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` of the package under ``root`` with the contracts of ``root/pyproject.toml`` (no cache
    folder is written)."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "importlinter.cli"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([*cmd, "--no-cache", "--no-logo", str(root / "pyproject.toml")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(PACKAGE, root / "studylib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_package_keeps_its_contracts():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_an_import_against_the_layers_breaks_the_contract_and_is_named(tmp_path):
    root = _copy(tmp_path)
    with open(root / "studylib" / "data" / "base.py", "a") as f:
        f.write("\n\ndef _upward():\n    from studylib.experiments import common  # a lazy import counts too\n")
    done = _lint(root)
    assert done.returncode == 1, done.stdout
    assert "studylib's layers BROKEN" in done.stdout
    assert "studylib.data is not allowed to import studylib.experiments" in done.stdout
    assert "studylib.data.base -> studylib.experiments.common" in done.stdout


def test_an_import_circle_inside_a_package_breaks_the_contract(tmp_path):
    """The page imports the store; the store importing the page back closes a circle inside one layer, which
    the layers contract alone cannot see."""
    root = _copy(tmp_path)
    with open(root / "studylib" / "claims" / "store.py", "a") as f:
        f.write("\nfrom studylib.claims import page  # noqa: E402\n")
    done = _lint(root)
    assert done.returncode == 1, done.stdout
    assert "no import cycle between the modules of any studylib package BROKEN" in done.stdout
    assert ".store -> .page" in done.stdout
    assert "studylib's layers KEPT" in done.stdout


def _parts() -> set[str]:
    """Every top-level module and package of ``studylib`` (``data``, ``api``, ...)."""
    return {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"} | \
        {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}


def test_every_part_of_the_package_sits_in_exactly_one_layer():
    """A new module or package outside the layers would escape the contract: it must be placed in one."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    placed = [name.strip() for layer in layers["layers"] for name in layer.replace(":", "|").split("|")]
    assert sorted(placed) == sorted(set(placed)), "a part is named in two layers"
    assert set(placed) == _parts()


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


@pytest.mark.parametrize("module", ["studylib.methods", "studylib.evaluation"])
def test_no_package_init_imports_the_modules_it_registers(module):
    """Registration is done by the defining modules (studylib.registry); an ``__init__`` that imports its
    registering modules for their side effect is what closed the old circles."""
    import ast
    init = PACKAGE / module.split(".", 1)[1] / "__init__.py"
    imported = {n.module for n in ast.walk(ast.parse(init.read_text())) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(ast.parse(init.read_text())) if isinstance(n, ast.Import) for a in n.names}
    registering = {"studylib.methods": {"studylib.methods.episodes", "studylib.methods.beclr", "studylib.methods.spe",
                                        "studylib.methods.set2model", "studylib.methods.infopatch"},
                   "studylib.evaluation": {"studylib.methods", "studylib.evaluation.opta",
                                           "studylib.evaluation.likelihood", "studylib.evaluation.logreg"}}[module]
    assert not imported & registering
