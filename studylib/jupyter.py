"""JupyterLab server settings that keep the committed notebooks as ``./study reference`` wrote them.

The committed notebooks (``notebooks/*.ipynb`` tracked by git) are written only by ``./study reference``: one
complete smoke run each, the outputs nbval compares. JupyterLab autosaves an open notebook every two minutes, so
a user running cells would otherwise replace one with a half-run state (issue 28: autosave deleted 694 lines of
outputs of ``00_quickstart``). ``./study setup`` installs two settings into the venv's
``etc/jupyter/jupyter_server_config.json`` (:func:`studylib.notebooks.install_jupyter`):

* :class:`StudyContentsManager` (the server's contents manager, jupyter_server's default one otherwise): a
  committed notebook is served with ``writable: false``. JupyterLab then opens it read-only: cells run and can be
  edited, autosave skips it, and Save says "read-only, use Save as…" (File > Save Notebook As..., e.g. under
  ``out/``).
* :func:`refuse_committed_save` (the contents manager's ``pre_save_hook``, whatever the manager class): a save
  of a committed notebook that reaches the server anyway (another client, a user config with another contents
  manager) is refused with 403 and a message naming the fix; the file is never written.

``STUDYLIB_SAVE_COMMITTED=1`` in JupyterLab's environment turns both off (editing a committed notebook on
purpose). Which files count: :func:`studylib.notebooks.committed_notebook`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado.web import HTTPError

from studylib.notebooks import ALLOW_SAVE_ENV, committed_notebook


def _protected(root_dir: str, path: str) -> bool:
    """Whether ``path`` (an API path under ``root_dir``) is a committed notebook and saving it is not allowed."""
    if os.environ.get(ALLOW_SAVE_ENV, "") not in ("", "0") or not str(path).endswith(".ipynb"):
        return False
    return committed_notebook(Path(str(root_dir)) / str(path).lstrip("/")) is not None


def refuse_committed_save(model: dict[str, Any], path: str, contents_manager: Any, **kwargs: Any) -> None:
    """jupyter_server ``pre_save_hook``: raise 403 for a save of a committed notebook (jupyter_server answers the
    save with the ``HTTPError`` raised here, so the file is not written)."""
    if model.get("type") != "notebook" or not _protected(getattr(contents_manager, "root_dir", "."), path):
        return
    raise HTTPError(403, f"{path} is a committed notebook of the study: it is written only by ./study reference (one "
                         f"complete run), so JupyterLab does not save it; a save now would commit a half-run "
                         f"notebook. Keep your version with File > Save Notebook As... (e.g. under out/), or start "
                         f"JupyterLab with {ALLOW_SAVE_ENV}=1 to edit it on purpose.")


class StudyContentsManager(AsyncLargeFileManager):
    """jupyter_server's default contents manager, serving committed notebooks as not writable (JupyterLab opens
    them read-only: no autosave, Save points to Save As)."""

    async def get(self, path: str, content: bool = True, type: str | None = None, format: str | None = None,
                  **kwargs: Any) -> dict[str, Any]:
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model.get("type") == "notebook" and model.get("writable") and _protected(self.root_dir, path):
            model["writable"] = False
        return model


__all__ = ["StudyContentsManager", "refuse_committed_save"]
