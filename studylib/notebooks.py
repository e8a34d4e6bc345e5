"""The study's notebooks by name, for the ``./study`` script: ``list`` (one line each on what it reproduces)
and ``resolve`` (a misspelt name gets "did you mean").

``python -m studylib.notebooks list`` prints ``NAME  TITLE`` per notebook (the title is the notebook's first
heading); ``python -m studylib.notebooks resolve NAME...`` prints each name as a notebook of ``notebooks/``
(``00`` and ``quickstart`` find ``00_quickstart``) or exits 2 naming the closest ones. Imports no torch.
"""

from __future__ import annotations

import difflib
import json
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
    from studylib.utils import atomic_write_text
    atomic_write_text(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("list", "resolve", "strip-widgets"):
        print("usage: python -m studylib.notebooks list | resolve NAME... | strip-widgets FILE...", file=sys.stderr)
        return 2
    if argv[0] == "strip-widgets":
        for f in argv[1:]:
            strip_stale_widgets(Path(f))
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
