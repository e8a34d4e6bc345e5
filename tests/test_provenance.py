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
