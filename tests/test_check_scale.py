"""The check scale: every notebook's paper configuration, cut to a few steps, runs end to end on the CPU.

Each notebook is executed by papermill with ``params/<notebook>/check.yaml``; its data are stand-ins written by
:mod:`studylib.data.standins` in the real on-disk format and read back through the real readers.
"""

from __future__ import annotations

from pathlib import Path

import papermill
import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_check_scale_runs(notebook, tmp_path):
    params = REPO / "params" / notebook / "check.yaml"
    assert params.is_file(), f"{notebook} has no check.yaml"
    import yaml
    papermill.execute_notebook(str(REPO / "notebooks" / f"{notebook}.ipynb"), str(tmp_path / f"{notebook}.ipynb"),
                               parameters=yaml.safe_load(params.read_text()), cwd=str(REPO / "notebooks"),
                               kernel_name="python3", progress_bar=False)
