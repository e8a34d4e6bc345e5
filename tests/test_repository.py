"""What the suite needs is tracked: no source, test, notebook or parameter file is hidden by .gitignore.

Stop 44's fresh-clone suite lost tests/runs/ (the ``runs/`` pattern meant for run stores also matched it), so
three test modules and eight tests that import ``test_runner_guards`` failed in the clone and passed here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KINDS = (".py", ".ipynb", ".yaml", ".toml", ".md")


def test_no_file_the_suite_or_the_notebooks_read_is_ignored_by_git():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--others", "--ignored", "--exclude-standard",
                          "--", "studylib", "tests", "notebooks", "params", "benchmarks"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    hidden = [p for p in out if p.endswith(KINDS) and "__pycache__" not in p and ".ipynb_checkpoints" not in p
              and "/.reference-" not in p]
    assert hidden == [], f"ignored by .gitignore, so missing from every clone: {hidden}; un-ignore them (!path/)"
