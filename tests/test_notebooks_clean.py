"""Notebooks that open clean (issue 28 item 4): one kernelspec everywhere (the committed notebooks name the kernel
./study installs, so JupyterLab has nothing to change on open), every committed notebook is one complete run, and
JupyterLab's server refuses to save a committed notebook (an autosave during a run wrote a half-run
00_quickstart). The end-to-end check in a real browser is tests/test_jupyterlab_browser.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from studylib import notebooks
from studylib.notebooks import KERNELSPEC

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", notebooks.names())
def test_committed_notebooks_name_the_study_kernel_and_are_one_complete_run(name):
    path = REPO / "notebooks" / f"{name}.ipynb"
    assert json.loads(path.read_text())["metadata"]["kernelspec"] == KERNELSPEC
    assert notebooks.committed_problems(path) == []


def test_a_half_run_notebook_or_another_kernelspec_is_named(tmp_path):
    nb = json.loads((REPO / "notebooks" / "00_quickstart.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for c in code[4:]:  # what JupyterLab saves while "run all" is at the fifth cell
        c["execution_count"], c["outputs"] = None, []
    for k, c in enumerate(code[:4]):
        c["execution_count"] = k + 1
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    path = tmp_path / "half.ipynb"
    path.write_text(json.dumps(nb))
    problems = notebooks.committed_problems(path)
    assert problems[0].startswith("kernelspec ") and "Python 3 (ipykernel)" in problems[0]
    assert sum("was not executed" in p for p in problems) == len(code) - 4
    out = subprocess.run([notebooks.sys.executable, "-m", "studylib.notebooks", "check-committed", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "a half-run notebook" in out.stderr
    code[1]["outputs"].append({"output_type": "error", "ename": "E", "evalue": "", "traceback": []})
    path.write_text(json.dumps(nb))
    assert any("error output" in p for p in notebooks.committed_problems(path))


def test_reference_runs_get_the_kernelspec(tmp_path):
    """./study reference's clean-up writes the study's kernelspec whatever the executing kernel's name was."""
    nb = json.loads((REPO / "notebooks" / "00_quickstart.ipynb").read_text())
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "run.ipynb"
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    notebooks.clean_executed(path)
    assert json.loads(path.read_text())["metadata"]["kernelspec"] == KERNELSPEC


def test_setup_installs_the_one_kernelspec_and_the_save_hook(tmp_path):
    study = (REPO / "study").read_text()
    assert '"$PY" -m studylib.notebooks install-jupyter' in study
    assert not re.search(r"ipykernel install", study)  # no second place that names a display name
    written = notebooks.install_jupyter(tmp_path)
    kernel = json.loads(written[0].read_text())
    assert written[0] == tmp_path / "share" / "jupyter" / "kernels" / "python3" / "kernel.json"
    assert kernel["display_name"] == KERNELSPEC["display_name"] and kernel["language"] == "python"
    assert kernel["argv"][0] == notebooks.sys.executable
    config = json.loads(written[1].read_text())
    assert written[1].parent.name == "jupyter_server_config.d"
    assert config == {"ContentsManager": {"pre_save_hook": notebooks.SAVE_HOOK}}


@pytest.fixture
def checkout(tmp_path):
    """A study checkout in miniature: params/, a committed notebooks/a.ipynb and an untracked notebooks/b.ipynb."""
    root = tmp_path / "study"
    (root / "params").mkdir(parents=True)
    (root / "notebooks").mkdir()
    nb = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}
    for name in ("a", "b"):
        (root / "notebooks" / f"{name}.ipynb").write_text(json.dumps(nb))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "notebooks/a.ipynb"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    return root


def test_jupyter_server_refuses_to_save_a_committed_notebook(checkout, monkeypatch):
    """Through jupyter_server's own contents manager, configured as install_jupyter configures it: a save of the
    committed notebook is refused with 403 and the message, the file untouched; other notebooks save."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from tornado.web import HTTPError
    monkeypatch.delenv(notebooks.ALLOW_SAVE_ENV, raising=False)
    cm = FileContentsManager(root_dir=str(checkout), pre_save_hook=notebooks.SAVE_HOOK)
    before = (checkout / "notebooks" / "a.ipynb").read_bytes()
    model = cm.get("notebooks/a.ipynb")
    model["content"]["cells"].append({"cell_type": "code", "id": "x1", "source": "1", "metadata": {}, "outputs": [],
                                      "execution_count": None})
    with pytest.raises(HTTPError) as err:
        cm.save(model, "notebooks/a.ipynb")
    assert err.value.status_code == 403 and "written only by ./study reference" in err.value.log_message
    assert "Save Notebook As" in err.value.log_message
    assert (checkout / "notebooks" / "a.ipynb").read_bytes() == before
    cm.save(dict(model), "notebooks/b.ipynb")  # untracked: saved
    assert len(json.loads((checkout / "notebooks" / "b.ipynb").read_text())["cells"]) == 1
    cm.save(dict(model), "a.ipynb")  # outside notebooks/: saved
    monkeypatch.setenv(notebooks.ALLOW_SAVE_ENV, "1")  # on purpose
    cm.save(model, "notebooks/a.ipynb")
    assert (checkout / "notebooks" / "a.ipynb").read_bytes() != before
