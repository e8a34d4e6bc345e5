"""The code version of a notebook's numbers: changes with what the code does, not with its comments or
docstrings; follows imports; leaves out the modules that only judge or present numbers."""

from __future__ import annotations

import os
import time

from studylib import provenance as V


def _package(tmp_path, files: dict[str, str]):
    root = tmp_path / "studylib"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _touch(path, text):
    path.write_text(text)
    t = time.time() + 5  # a new mtime, so the per-file caches see a new version
    os.utime(path, (t, t))


def test_code_version_follows_imports_and_ignores_comments_and_docstrings(tmp_path, monkeypatch):
    root = _package(tmp_path, {
        "__init__.py": "",
        "experiments/__init__.py": "",
        "experiments/nb.py": '"""Doc."""\nfrom studylib.core import f\nfrom . import helper\n\ndef g():\n    return f() + 1\n',
        "experiments/helper.py": "X = 1\n",
        "experiments/claims.py": "Y = 1\n",
        "core.py": "def f():\n    return 2\n",
        "unrelated.py": "Z = 3\n",
    })
    monkeypatch.setattr(V, "PACKAGE", root)
    assert V.closure("studylib.experiments.nb") == ["studylib", "studylib.core", "studylib.experiments",
                                                   "studylib.experiments.helper", "studylib.experiments.nb"]
    v0 = V.code_version("studylib.experiments.nb")
    _touch(root / "core.py", '"""A docstring now."""\n# a comment\ndef f():\n    """Two."""\n    return 2\n')
    assert V.code_version("studylib.experiments.nb") == v0
    _touch(root / "core.py", "def f():\n    return 3\n")  # what the code does changed
    v1 = V.code_version("studylib.experiments.nb")
    assert v1 != v0
    _touch(root / "unrelated.py", "Z = 4\n")  # not imported
    assert V.code_version("studylib.experiments.nb") == v1
    _touch(root / "experiments/helper.py", "X = 2\n")  # imported as `from . import helper`
    assert V.code_version("studylib.experiments.nb") != v1


def test_judging_modules_are_left_out(tmp_path, monkeypatch):
    root = _package(tmp_path, {
        "__init__.py": "",
        "experiments/__init__.py": "",
        "experiments/nb.py": "from studylib.claims.table import T\nfrom studylib.core import f\n",
        "claims/__init__.py": "",
        "claims/table.py": "from studylib.core import f\nT = 1\n",
        "core.py": "def f():\n    return 2\n",
    })
    monkeypatch.setattr(V, "PACKAGE", root)
    v0 = V.code_version("studylib.experiments.nb")
    closure = V.closure("studylib.experiments.nb")
    assert "studylib.claims.table" not in closure and "studylib.claims" not in closure  # the whole package
    _touch(root / "claims/table.py", "from studylib.core import f\nT = 2\n")
    assert V.code_version("studylib.experiments.nb") == v0


def test_the_real_notebooks_have_a_code_version_and_a_commit():
    v = V.code_version("studylib.experiments.quickstart")
    assert len(v) == 16 and int(v, 16) >= 0
    assert "studylib.training.loop" in V.closure("studylib.experiments.quickstart")
    commit = V.git_commit()
    assert commit is None or len(commit.split("+")[0]) == 40


def test_a_registry_counts_as_importing_every_module_of_its_package(tmp_path, monkeypatch):
    """A method trained by name is imported by its registry's discovery, not by an import statement: its module
    must still be in the closure of a notebook that reaches the registry, and change its code version."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "registry.py": "class Registry:\n    def __init__(self, kind, package):\n        pass\n",
        "methods/__init__.py": "",
        "methods/registry.py": 'from studylib.registry import Registry\nMETHODS = Registry("method", "studylib.methods")\n',
        "methods/alpha.py": "A = 1\n",
        "methods/beta.py": "B = 1\n",
        "experiments/__init__.py": "",
        "experiments/nb.py": "from studylib.methods.registry import METHODS\n",
        "experiments/other.py": "X = 1\n",
    })
    monkeypatch.setattr(V, "PACKAGE", root)
    closure = V.closure("studylib.experiments.nb")
    assert {"studylib.methods.alpha", "studylib.methods.beta", "studylib.methods.registry"} <= set(closure)
    assert "studylib.experiments.other" not in closure
    v0 = V.code_version("studylib.experiments.nb")
    _touch(root / "methods/beta.py", "B = 2\n")
    assert V.code_version("studylib.experiments.nb") != v0


def test_every_notebook_closure_holds_the_method_modules_it_trains():
    """Measured regression of issue 39: with lazy registries, 06-08 lacked methods.beclr and 00/02/04/05 lacked
    methods.episodes from their code versions."""
    from studylib.paths import experiment_module_name
    expected = {"00_quickstart": ["episodes"], "02_batch_size_sweep": ["episodes"], "04_ablations": ["episodes"],
                "05_comparison": ["episodes"], "06_beclr_pretraining": ["beclr", "dyce", "simclr"],
                "07_dyce_memory_umap": ["beclr", "dyce"], "08_opta_before_after": ["beclr"],
                "09_spe_synthetic": ["spe"], "11_set2model": ["set2model"], "13_infopatch": ["infopatch"]}
    for nb, methods in expected.items():
        closure = set(V.closure(experiment_module_name(nb)))
        missing = [m for m in methods if f"studylib.methods.{m}" not in closure]
        assert not missing, f"{nb}: {missing} not in its code version"
        assert "studylib.evaluation.opta" in closure or nb not in ("06_beclr_pretraining", "08_opta_before_after")
