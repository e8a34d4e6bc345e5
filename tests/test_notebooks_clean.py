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
    assert written[1] == tmp_path / "etc" / "jupyter" / "jupyter_server_config.json"
    assert config == notebooks.SERVER_CONFIG
    written[1].write_text(json.dumps({"ServerApp": {"ip": "127.0.0.1"}}))  # a setting of the user's: kept
    notebooks.install_jupyter(tmp_path)
    assert json.loads(written[1].read_text()) == {
        "ServerApp": {"ip": "127.0.0.1", **notebooks.SERVER_CONFIG["ServerApp"]},
        "ContentsManager": notebooks.SERVER_CONFIG["ContentsManager"]}


def test_a_jupyter_server_started_with_the_installed_config_has_the_hook(tmp_path, monkeypatch):
    """The installed file is one jupyter_server reads (its .d folders only enable extensions)."""
    from jupyter_server.serverapp import ServerApp
    from studylib import jupyter
    notebooks.install_jupyter(tmp_path)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(tmp_path / "etc" / "jupyter"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "user"))
    app = ServerApp()
    app.jpserver_extensions = {}
    app.initialize(argv=["--allow-root", f"--ServerApp.root_dir={tmp_path}", "--ServerApp.open_browser=False"],
                   find_extensions=False, new_httpserver=False)
    assert app.contents_manager.pre_save_hook is jupyter.refuse_committed_save  # (no server was started)
    assert type(app.contents_manager) is jupyter.StudyContentsManager


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


def test_jupyter_server_serves_committed_notebooks_read_only_and_refuses_to_save_them(checkout, monkeypatch):
    """Through the contents manager the study installs: the committed notebook is served not writable (JupyterLab
    opens it read-only: no autosave) and a save of it is refused with 403 and the message, the file untouched;
    other notebooks are writable and save. The hook alone does the refusing for jupyter_server's own manager."""
    import asyncio
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from tornado.web import HTTPError
    from studylib import jupyter
    monkeypatch.delenv(notebooks.ALLOW_SAVE_ENV, raising=False)
    hook = notebooks.SERVER_CONFIG["ContentsManager"]["pre_save_hook"]
    cm = jupyter.StudyContentsManager(root_dir=str(checkout), pre_save_hook=hook)
    a, b = "notebooks/a.ipynb", "notebooks/b.ipynb"
    assert asyncio.run(cm.get(a))["writable"] is False and asyncio.run(cm.get(b))["writable"] is True
    assert asyncio.run(cm.get(a, content=False))["writable"] is False
    before = (checkout / a).read_bytes()
    model = asyncio.run(cm.get(a))
    model["content"]["cells"].append({"cell_type": "code", "id": "x1", "source": "1", "metadata": {}, "outputs": [],
                                      "execution_count": None})
    for manager in (cm, FileContentsManager(root_dir=str(checkout), pre_save_hook=hook)):
        with pytest.raises(HTTPError) as err:
            result = manager.save(model, a)
            asyncio.run(result) if asyncio.iscoroutine(result) else None
        assert err.value.status_code == 403 and "written only by ./study reference" in err.value.log_message
        assert "Save Notebook As" in err.value.log_message
        assert (checkout / a).read_bytes() == before
    asyncio.run(cm.save(dict(model), b))  # untracked: saved
    assert len(json.loads((checkout / b).read_text())["cells"]) == 1
    asyncio.run(cm.save(dict(model), "a.ipynb"))  # outside notebooks/: saved
    monkeypatch.setenv(notebooks.ALLOW_SAVE_ENV, "1")  # on purpose: writable, and saved
    assert asyncio.run(cm.get(a))["writable"] is True
    asyncio.run(cm.save(model, a))
    assert (checkout / a).read_bytes() != before
