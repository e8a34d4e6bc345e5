"""Docs that tell a user where things are (issue 20): the figure paths in figures/README.md are the ones the
notebooks write, and the README gives JupyterLab's root flag and no stale "edit data_root in the yaml"."""

from __future__ import annotations

import json
import re
from pathlib import Path

from studylib.paths import figures_dir, project_root

ROOT = Path(__file__).resolve().parents[1]


def test_figure_paths_in_figures_readme_are_where_the_notebooks_write():
    text = (ROOT / "figures" / "README.md").read_text()
    examples = re.findall(r"`(figures/[^`<>]+\.png)`", text)  # the concrete examples, not the pattern
    assert examples, "figures/README.md names no example figure path"
    for ex in examples:
        _, notebook, scale, name = ex.split("/")
        assert project_root() / ex == figures_dir(notebook, scale) / name
        cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
        sources = "".join("".join(c["source"]) for c in cells)
        assert re.search(rf'plots\.save\([^)]*"{Path(name).stem}"', sources), f"{notebook} writes no {name}"


def test_readme_gives_the_root_flag_and_no_stale_data_root_advice():
    text = (ROOT / "README.md").read_text()
    assert "jupyter lab" in text
    for m in re.finditer(r"jupyter lab", text):
        assert "--allow-root" in text[m.start():m.start() + 300], "a JupyterLab mention without --allow-root"
    assert not re.search(r"edit data_root in the yaml", text)
    assert "-p data_root" in text
