"""Where a result came from: the commit, and a version of the code that made its numbers (issue 27, item 6).

A committed claims table records the git commit it was made at and :func:`code_version`: a hash of the code its
notebook runs, the experiment module and every ``studylib`` module it imports, directly or not. The hash is
taken over each module's syntax tree with docstrings removed (``ast.dump``), so comments, docstrings and
formatting do not change it; any change to what the code does does. A module that builds a
:class:`~studylib.registry.Registry` (``Registry(kind, "studylib.methods")``) counts as importing every module of
that package: the registry imports them by name on its first lookup, so a notebook that trains a method by name
runs that method's module without any import naming it. The modules that judge, present or check
numbers without making them (:data:`NOT_NUMBERS`: the verdict rules, the claims tables and page, the claim
registry, the reference check, the pre-flight, progress lines) are left out, so a change of a rule re-judges the
stored numbers instead of marking them stale. The claims page marks a table whose code version differs from
today's as *stale*: its numbers were made by other code.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import subprocess
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
NOT_NUMBERS = frozenset(f"studylib.{m}" for m in (
    "evaluation.verdicts", "claims", "provenance", "preflight", "progress", "notebooks"))


def _not_numbers(module: str) -> bool:
    """Whether ``module`` is one of :data:`NOT_NUMBERS` or inside one of its packages (``studylib.claims.*``)."""
    return any(module == m or module.startswith(m + ".") for m in NOT_NUMBERS)


def _module_path(name: str) -> Path | None:
    """The source file of a ``studylib`` module name (a package's ``__init__.py``), or None."""
    parts = name.split(".")[1:]
    if not parts:
        return PACKAGE / "__init__.py"
    rel = Path(*parts)
    for cand in (PACKAGE / rel.with_suffix(".py"), PACKAGE / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


@functools.lru_cache(maxsize=None)
def _tree(path: Path, mtime: float) -> ast.Module:
    """The module's syntax tree without docstrings (parsed once per process and file version)."""
    return _strip_docstrings(ast.parse(path.read_text()))


def _statements(body: list[ast.stmt]):
    """Every statement of a body, nested bodies included (imports are statements: no expression is walked)."""
    for node in body:
        yield node
        for attr in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(node, attr, []) or [])
        for h in getattr(node, "handlers", []) or []:
            yield from _statements(h.body)


def _imports(path: Path, name: str) -> set[str]:
    """The ``studylib`` modules a module imports (at any depth of its body, relative imports resolved)."""
    return set(_imports_cached(path, name, path.stat().st_mtime))


@functools.lru_cache(maxsize=None)
def _imports_cached(path: Path, name: str, mtime: float) -> frozenset[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in _statements(_tree(path, mtime).body):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "studylib")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "studylib":
                continue
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from studylib.x import module`
    out.update(_registry_modules(_tree(path, mtime)))
    # a module's parent packages run first on import
    for mod in list(out):
        parts = mod.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(m for m in out if _module_path(m) is not None)


def _registry_modules(tree: ast.Module) -> set[str]:
    """The modules a registry built in ``tree`` imports on lookup: every module of the package named by a call
    ``Registry(kind, "<studylib package>")`` (as :meth:`~studylib.registry.Registry.discover` does, one level)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and len(node.args) >= 2):
            continue
        func = node.func
        if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) != "Registry":
            continue
        package = node.args[1]
        if not (isinstance(package, ast.Constant) and isinstance(package.value, str)
                and package.value.split(".")[0] == "studylib"):
            continue
        folder = _module_path(package.value)
        if folder is None or folder.name != "__init__.py":
            continue
        out.add(package.value)
        out.update(f"{package.value}.{f.stem}" for f in folder.parent.glob("*.py") if f.name != "__init__.py")
        out.update(f"{package.value}.{d.name}" for d in folder.parent.iterdir() if (d / "__init__.py").is_file())
    return out


def _strip_docstrings(tree: ast.Module) -> ast.Module:
    for node in [tree, *_statements(tree.body)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@functools.lru_cache(maxsize=None)
def _module_digest(path: Path, mtime: float) -> str:
    return hashlib.sha256(ast.dump(_tree(path, mtime), annotate_fields=False).encode()).hexdigest()


def closure(module: str) -> list[str]:
    """Every ``studylib`` module ``module`` imports, directly or not, with itself, sorted (those of
    :data:`NOT_NUMBERS` left out, and not followed)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        if m in seen or (_not_numbers(m) and m != module):
            continue
        path = _module_path(m)
        if path is None:
            continue
        seen.add(m)
        todo.extend(_imports(path, m) - seen)
    return sorted(seen)


def code_version(module: str) -> str:
    """A 16-hex-digit hash of the code ``module`` runs (the module docstring): changes with what the code does,
    not with its comments, docstrings or layout."""
    h = hashlib.sha256()
    for m in closure(module):
        path = _module_path(m)
        assert path is not None
        h.update(f"{m}:{_module_digest(path, path.stat().st_mtime)}\n".encode())
    return h.hexdigest()[:16]


# The recorded seconds of the training and evaluation this process reused from the run store (each run folder
# counted once; runs this process trained or evaluated are not counted: its wall time holds them). A claims table
# adds them to its wall time (studylib.claims.table.provenance), so that a table re-made from cached runs still
# says about what its notebook costs from an empty cache, which ./study power scales by seeds. The runner
# (studylib.runs.runner) reports here; the claims read here, so neither imports the other.
REUSED_SECONDS: dict[str, float] = {}
_MADE_HERE: set[str] = set()


def made_here(*folders: str | Path) -> None:
    """Record run folders this process trained or evaluated (their time is in its wall time)."""
    _MADE_HERE.update(str(f) for f in folders)


def count_reused(*runs: tuple[str | Path, float | None]) -> None:
    """Record ``(run folder, recorded seconds)`` pairs taken from the store instead of computed here."""
    for folder, seconds in runs:
        if str(folder) not in _MADE_HERE:
            REUSED_SECONDS.setdefault(str(folder), float(seconds or 0.0))


def reused_seconds() -> float:
    """Seconds of training and evaluation this process took from the store instead of computing them."""
    return float(sum(REUSED_SECONDS.values()))


def git_commit(root: Path | None = None) -> str | None:
    """The checkout's commit, with ``+dirty`` when ``studylib/`` has uncommitted changes; None outside git."""
    root = root or PACKAGE.parent
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "studylib"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")
