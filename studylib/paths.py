"""Where the study's files live: the project root, its parameter files, figures and executed notebooks.

One rule everywhere: the *project root* is the checkout a notebook or command runs in, found by walking up
from the working directory to the first folder holding both ``params/`` and ``notebooks/`` (papermill with
``--cwd notebooks``, JupyterLab's kernel in ``notebooks/``, a shell at the root all find the same folder).
Outside any checkout (the library imported from elsewhere) it falls back to the folder above the installed
package. Outputs are separated by scale, so a smoke run never overwrites paper-scale results:
``figures/<notebook>/<scale>/`` and ``out/<scale>/<notebook>.ipynb``. The scales: ``smoke`` (embedded data, CPU,
minutes; nbval and CI), ``evidence`` (the smoke data and networks with the seeds and training the verdicts
need; about an hour on two cores), ``paper`` (the paper's data and protocol, GPU) and ``check`` (the paper
configuration cut to a few steps on stand-ins).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
SCALES = ("smoke", "evidence", "paper", "check")


def _is_root(folder: Path) -> bool:
    return (folder / "params").is_dir() and (folder / "notebooks").is_dir()


def project_root(start: str | Path | None = None) -> Path:
    """The checkout the study runs in (see the module docstring)."""
    here = Path(start).resolve() if start is not None else Path.cwd().resolve()
    for folder in (here, *here.parents):
        if _is_root(folder):
            return folder
    return PACKAGE_ROOT


def params_dir() -> Path:
    return project_root() / "params"


def notebooks_dir() -> Path:
    return project_root() / "notebooks"


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)}")
    return scale


def figures_dir(notebook: str, scale: str) -> Path:
    """``<root>/figures/<notebook>/<scale>/`` (created on demand by the writers)."""
    return project_root() / "figures" / notebook / check_scale(scale)


def notebook_names() -> list[str]:
    """The numbered notebooks of the project, in order (``00_quickstart``, ...)."""
    return sorted(p.stem for p in notebooks_dir().glob("[0-9][0-9]_*.ipynb"))
