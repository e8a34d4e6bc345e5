"""The claims tables saved on this machine and committed in ``params/``: where they are, which parameter file
a table belongs to, whether the code that made it is today's, and the notebooks' static listings.

A notebook's table is saved by :meth:`studylib.claims.table.ClaimsTable.save` to
``<cache>/claims/<notebook>/<name>.json`` (``<name>``: the parameter file it was made with) and committed by
``./study claims --save SCALE NB`` as ``params/<nb>/<name>.claims.json`` (:func:`save_committed`). The static
listing of a notebook (:func:`static_claims`: its claims built from a parameter file alone, before anything
runs) comes from its experiment module, found by name through :func:`studylib.paths.experiment_module` (the
claims package sits below the experiments, which build their tables with it, and reaches them only by name).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from studylib.paths import check_scale, experiment_module, experiment_module_name, project_root
from studylib.utils import atomic_write_many, default_cache_dir, json_text


def claims_dir() -> Path:
    """``<cache>/claims``: this machine's saved tables."""
    return default_cache_dir() / "claims"


def code_version(notebook: str) -> str:
    """The code version (:func:`studylib.provenance.code_version`) of a notebook's experiment module."""
    from studylib.provenance import code_version as cv
    return cv(experiment_module_name(notebook))


def param_files(notebook: str, base: str | None = None) -> list[str]:
    """The names of ``params/<notebook>/*.yaml`` (``smoke``, ``paper``, ``paper-cifarfs``, ...), those of scale
    ``base`` only when given (the base and its ``base-*`` variants)."""
    folder = project_root() / "params" / notebook
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    if base is not None:
        names = [n for n in names if n == base or n.startswith(base + "-")]
    return names


_STATIC: dict[tuple[Any, ...], Any] = {}


def static_claims(notebook: str, scale: str = "smoke") -> Any:
    """The claims a notebook tests with ``params/<notebook>/<scale>.yaml`` (a :class:`~studylib.claims.table.ClaimsTable`;
    ``scale``: a scale or a variant's file name; the smoke scale: the schema's defaults); None if its module
    defines no ``claims``.

    Some listings compute formulas (01's Table 1 counts: seconds), so a listing is kept for the process, keyed
    by the notebook, the file, its text and the ``claims`` function; each call returns a copy (a caller may
    measure into it)."""
    module = experiment_module(notebook)
    if not hasattr(module, "claims"):
        return None
    path = project_root() / "params" / notebook / f"{scale}.yaml"
    key = (notebook, scale, path.read_text() if scale != "smoke" and path.is_file() else None, module.claims,
           module.Params)
    if key not in _STATIC:
        if scale == "smoke":
            _STATIC[key] = module.claims(module.Params())
        else:
            from studylib.config import load_params
            _STATIC[key] = module.claims(load_params(module.Params, notebook, scale))
    return copy.deepcopy(_STATIC[key])


_HASHES: dict[tuple[str, str, str | None], str | None] = {}


def scale_params_hash(notebook: str, name: str) -> str | None:
    """Hash of ``params/<notebook>/<name>.yaml`` as validated (None when the file is missing)."""
    from studylib.config import load_params
    from studylib.claims.reference import params_hash
    path = project_root() / "params" / notebook / f"{name}.yaml"
    if not path.is_file():
        return None
    key = (notebook, name, path.read_text())
    if key not in _HASHES:
        module = experiment_module(notebook)
        _HASHES[key] = params_hash(module.Params() if name == "smoke" else load_params(module.Params, notebook, name))
    return _HASHES[key]


def variant_problem(notebook: str, name: str) -> str:
    """Why ``params/<notebook>/<name>.yaml`` cannot be read and validated against the notebook's schema (its
    one-line message), or "" when it can."""
    from studylib.config import ParamError
    try:
        scale_params_hash(notebook, name)
    except (ParamError, ValueError, TypeError, OSError) as err:
        return " ".join(str(err).split())
    return ""


def table_name(notebook: str, scale: str, params_hash: str | None) -> str:
    """The parameter file (of ``scale`` or one of its variants) whose parameters hash to ``params_hash``; the
    scale's own name when none does (an override: the page does not count it). A variant file that cannot be
    read is skipped with a warning naming it (``./study check`` warns about it before the run), so a broken
    stray file never fails a notebook at its end."""
    if params_hash is not None:
        for name in param_files(notebook, scale):
            if name != scale and (why := variant_problem(notebook, name)):
                print(f"claims: params/{notebook}/{name}.yaml is ignored: {why}; fix it or delete it", file=sys.stderr)
                continue
            if scale_params_hash(notebook, name) == params_hash:
                return name
    return scale


def committed_claims_path(notebook: str, name: str) -> Path:
    """``params/<notebook>/<name>.claims.json``: a committed table (smoke: written by ``./study reference``;
    the others by ``./study claims --save SCALE NB``), used where this machine has not run the notebook."""
    return project_root() / "params" / notebook / f"{name}.claims.json"


def load_table_file(path: Path) -> dict[str, Any] | None:
    """A saved table's JSON, or None when the file is missing; a damaged file is named, not trusted."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        data["by_id"] = {c["id"]: c for c in data["claims"]}
        return data
    except (ValueError, KeyError, TypeError) as err:
        print(f"claims: ignoring unreadable {path} ({err}); re-run the notebook to rewrite it", file=sys.stderr)
        return None


def saved_table(notebook: str, name: str) -> dict[str, Any] | None:
    """The saved table ``name`` of ``notebook``: this machine's run, else the committed one (``from`` says which)."""
    for where, path in (("this machine", claims_dir() / notebook / f"{name}.json"),
                        ("committed", committed_claims_path(notebook, name))):
        table = load_table_file(path)
        if table is not None:
            table["from"] = where
            return table
    return None


def of_params(table: dict[str, Any] | None, notebook: str, name: str) -> bool:
    """Whether a saved table was made with ``params/<notebook>/<name>.yaml`` itself (not a ``-p`` override).
    Smoke tables made before the hash was recorded are the committed reference runs and count as smoke."""
    if table is None:
        return False
    h = table.get("params_hash")
    if h is None:
        return name == "smoke"
    return h == scale_params_hash(notebook, name)


def is_stale(table: dict[str, Any], notebook: str) -> bool:
    """Whether a saved table was made by other code than today's (its ``code_version``; a table without one
    predates the record and counts as stale)."""
    return table.get("code_version") != code_version(notebook)


def save_committed(scale: str, notebooks: Iterable[str]) -> list[Path]:
    """Copy this machine's claims tables of each notebook at ``scale`` (the scale's file and its variants that
    were run) to ``params/<nb>/<name>.claims.json``.

    Refuses (before copying anything) a table that is missing, or was made with other parameters than the
    parameter file it is named after (a ``-p`` override), or without its provenance.
    """
    scale = check_scale(scale)
    names = list(notebooks)
    if not names:
        raise ValueError("name the notebooks whose tables to commit: ./study claims --save paper 09_spe_synthetic")
    plan = []
    for nb in names:
        found = False
        for name in param_files(nb, scale) or [scale]:
            src = claims_dir() / nb / f"{name}.json"
            table = load_table_file(src)
            if table is None:
                continue
            found = True
            if ("made_on" not in table or "code_version" not in table or table.get("params_hash") is None
                    or not of_params(table, nb, name)):
                raise ValueError(f"{src} was not made with params/{nb}/{name}.yaml itself (an override, or an older "
                                 f"table without its parameters' hash or code version); re-run: "
                                 f"./study run --scale {scale} {nb}")
            if is_stale(table, nb):
                raise ValueError(f"{src} was made by other code than this checkout's (code version "
                                 f"{table.get('code_version')} != {code_version(nb)}); re-run: "
                                 f"./study run --scale {scale} {nb}")
            table.pop("by_id")
            table.pop("from", None)
            plan.append((committed_claims_path(nb, name), table))
        if not found:
            raise ValueError(f"no claims table {claims_dir() / nb / scale}.json; run the notebook first: "
                             f"./study run --scale {scale} {nb}")
    # all tables as one change: an interrupt leaves every committed table old, or all of them new
    atomic_write_many({dst: json_text(table).encode("utf-8") for dst, table in plan})
    return [dst for dst, _ in plan]
