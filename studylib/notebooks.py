"""The study's notebooks by name, for the ``./study`` script: ``list`` (one line each on what it reproduces)
and ``resolve`` (a misspelt name gets "did you mean").

``python -m studylib.notebooks list`` prints ``NAME  TITLE`` per notebook (the title is the notebook's first
heading); ``python -m studylib.notebooks resolve NAME...`` prints each name as a notebook of ``notebooks/``
(``00`` and ``quickstart`` find ``00_quickstart``) or exits 2 naming the closest ones. Imports no torch.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from pathlib import Path

from studylib.paths import notebooks_dir


def names(folder: Path | None = None) -> list[str]:
    """The numbered notebooks ``NN_name`` of ``notebooks/``, in order."""
    folder = folder or notebooks_dir()
    return sorted(p.stem for p in folder.glob("[0-9][0-9]_*.ipynb"))


def title(name: str, folder: Path | None = None) -> str:
    """The first heading of the notebook, without ``#`` and its ``NN ·`` number."""
    nb = json.loads(((folder or notebooks_dir()) / f"{name}.ipynb").read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        for line in source.splitlines():
            if line.startswith("#"):
                return re.sub(r"^\d+\s*[·:.-]\s*", "", line.lstrip("#").strip())
    return ""


def resolve(name: str, folder: Path | None = None) -> str:
    """``name`` as a notebook name; a number (``00``), the part after it (``quickstart``) or a ``.ipynb`` path
    are accepted when they name one notebook. Raises ValueError with "did you mean" otherwise."""
    all_names = names(folder)
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


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_stale_widgets(path: Path) -> bool:
    """Remove a notebook's saved widget state (``metadata.widgets``) when no output shows a widget any more
    (progress bars are text now; papermill keeps the old state of an earlier run). True if it changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    if "widgets" not in nb.get("metadata", {}):
        return False
    if any(WIDGET_VIEW in o.get("data", {}) for c in nb.get("cells", []) for o in c.get("outputs", [])):
        return False
    del nb["metadata"]["widgets"]
    _write_atomic(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


INJECTED = "injected-parameters"  # papermill's tag on the cell it adds after the ``parameters`` cell


def strip_injected_parameters(path: Path) -> bool:
    """Remove papermill's ``injected-parameters`` cells from the notebook at ``path`` (the committed notebooks
    keep only their ``parameters`` cell: the values a run used are in its parameter file). Nothing else
    changes: the file is rewritten in nbformat's layout (indent 1, sorted keys), keeping whether it ended with
    a newline. True if it changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    cells = nb.get("cells", [])
    kept = [c for c in cells if INJECTED not in c.get("metadata", {}).get("tags", [])]
    if len(kept) == len(cells):
        return False
    nb["cells"] = kept
    out = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False)
    _write_atomic(path, out + "\n" if text.endswith("\n") else out)
    return True


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path`` (keeping its mode);
    no torch import, so the ./study script's calls stay quick."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def clean_executed(path: Path) -> None:
    """What ``./study reference`` does to a freshly executed notebook: :func:`strip_stale_widgets`, then
    :func:`strip_injected_parameters`."""
    strip_stale_widgets(path)
    strip_injected_parameters(path)


COMMANDS = {"strip-widgets": strip_stale_widgets, "strip-injected": strip_injected_parameters,
            "clean-executed": clean_executed}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("list", "resolve", *COMMANDS):
        print("usage: python -m studylib.notebooks list | resolve NAME... | strip-widgets FILE... | "
              "strip-injected FILE... | clean-executed FILE...", file=sys.stderr)
        return 2
    if argv[0] in COMMANDS:
        for f in argv[1:]:
            COMMANDS[argv[0]](Path(f))
        return 0
    if argv[0] == "list":
        all_names = names()
        width = max(map(len, all_names), default=0)
        for n in all_names:
            print(f"{n:<{width}}  {title(n)}")
        return 0
    try:
        for n in argv[1:]:
            print(resolve(n))
    except ValueError as e:
        print(f"study: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
