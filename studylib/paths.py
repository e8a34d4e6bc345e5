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

import difflib
import importlib
from pathlib import Path
from types import ModuleType

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


def notebook_names(folder: Path | None = None) -> list[str]:
    """The numbered notebooks ``NN_name`` of ``notebooks/`` (or ``folder``), in order (``00_quickstart``, ...)."""
    return sorted(p.stem for p in (folder or notebooks_dir()).glob("[0-9][0-9]_*.ipynb"))


def resolve_notebook(name: str, folder: Path | None = None) -> str:
    """``name`` as a notebook name; a number (``00``), the part after it (``quickstart``) or a ``.ipynb`` path
    are accepted when they name one notebook. Raises ValueError with "did you mean" otherwise."""
    all_names = notebook_names(folder)
    stem = Path(name).stem if name.endswith(".ipynb") else name
    if stem in all_names:
        return stem
    matches = [n for n in all_names if n[:2] == stem or n[3:] == stem]
    if len(matches) == 1:
        return matches[0]
    close = difflib.get_close_matches(stem, all_names + [n[3:] for n in all_names], n=3, cutoff=0.6)
    close = list(dict.fromkeys(next(n for n in all_names if c in (n, n[3:])) for c in close))
    hint = f"did you mean {' or '.join(close)}?" if close else "see ./study list"
    raise ValueError(f"no notebook {name!r} in {folder or notebooks_dir()}: {hint}")


def experiment_module_name(notebook: str) -> str:
    """The experiment module of a notebook: ``NN_name`` -> ``studylib.experiments.name`` (the one rule, used by
    the parameter files, the claims, the pre-flight and ``./study gpu-check``)."""
    head, sep, rest = notebook.partition("_")
    if not (sep and len(head) == 2 and head.isdigit() and rest.isidentifier()):
        raise ValueError(f"{notebook!r} is not a notebook name of the form NN_name (e.g. 00_quickstart)")
    return f"studylib.experiments.{rest}"


def experiment_module(notebook: str) -> ModuleType:
    """The imported experiment module of ``notebook`` (:func:`experiment_module_name`).

    The one place where a notebook's name becomes its code. It imports by name at run time, so the layers
    below the experiments (the claims, which the experiments build their tables with; the parameter schema)
    can reach a notebook's listing without importing the experiments package.
    """
    return importlib.import_module(experiment_module_name(notebook))


def writable_file(text: str, flag: str, make_folder: bool = False) -> Path:
    """The file a command is asked to write (``--csv FILE``, ``--out FILE``...), checked before any work:
    a path that names a regular file or nothing yet, in an existing folder this process can create files in
    (probed with a temporary file, removed at once); with ``make_folder``, a missing folder is allowed where the
    nearest existing folder above it can be written (the writer creates it). ValueError otherwise, one line
    naming ``flag`` and the fix.
    """
    import os
    import tempfile
    if not text or not text.strip():
        raise ValueError(f"{flag} needs a file name, e.g. {flag} results.csv")
    path = Path(text).expanduser()
    shown = f"{flag} {text}"
    if path.is_dir():
        raise ValueError(f"{shown}: that is a folder; name a file in it, e.g. {flag} "
                         f"{(path / ('out' + _suffix(flag))).as_posix()}")
    if path.exists() and not path.is_file():
        raise ValueError(f"{shown}: not a regular file (a device or socket); name a file to write, e.g. {flag} "
                         f"out{_suffix(flag)}")
    folder = path.parent
    if make_folder:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{shown}: {folder} is a file, not a folder; name a file in a folder")
    if not folder.is_dir():
        raise ValueError(f"{shown}: the folder {folder} does not exist; create it first (mkdir -p {folder}) or name "
                         f"a file in an existing folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{shown}: cannot write in {folder} ({e.strerror or e}); name a file in a folder you can "
                         f"write") from None
    return path


def _suffix(flag: str) -> str:
    return {"--csv": ".csv", "--latex": ".tex", "--out": ".md"}.get(flag, "")


def existing_folder(text: str, flag: str, what: str) -> Path:
    """A folder a command reads (``--store DIR``): ValueError, one line naming ``flag`` and the fix, when it is
    missing or a file."""
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(f"{flag} {text}: no such folder; give {what}")
    if not path.is_dir():
        raise ValueError(f"{flag} {text}: a file, not a folder; give {what}")
    return path
