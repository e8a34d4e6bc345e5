"""Parameter schemas: every notebook's parameters are validated before anything runs.

A schema is a dataclass whose fields are the notebook's parameters. :func:`validate` checks a mapping
against it: an unknown key fails naming the key and the allowed keys; a value of the wrong type fails naming
the key, the expected type and the value; a value outside its ``choices`` fails naming the allowed values.
Choices are declared with :func:`param`::

    @dataclass
    class Params:
        backbone: str = param("conv4", choices=BACKBONE_NAMES, help="embedding network")

Parameter files live in ``params/<notebook>/<scale>.yaml`` and hold a subset of the schema's keys.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

import yaml

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent
PARAMS_DIR = REPO_ROOT / "params"


class ParamError(ValueError):
    """A notebook parameter is unknown, of the wrong type, or outside its allowed values."""


def param(default: Any, *, choices: Sequence[Any] | None = None, help: str = "") -> Any:
    """A dataclass field with optional allowed values and a help text."""
    meta = {"choices": tuple(choices) if choices is not None else None, "help": help}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _check(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` coerced to ``tp`` where that is lossless (int -> float, list -> tuple), else raise."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for a in args:
            try:
                return _check(value, a, key)
            except ParamError:
                continue
        raise ParamError(f"parameter {key!r} must be {_type_name(tp)}, got {type(value).__name__} {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise ParamError(f"parameter {key!r} must be None, got {value!r}")
    if origin in (list, tuple, Sequence, typing.Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ParamError(f"parameter {key!r} must be {_type_name(tp)} (a list), got "
                             f"{type(value).__name__} {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ParamError(f"parameter {key!r} must have {len(args)} items, got {len(value)}: {value!r}")
            return tuple(_check(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        inner = args[0] if args else Any
        items = [_check(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ParamError(f"parameter {key!r} must be a mapping, got {type(value).__name__} {value!r}")
        return dict(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(f"parameter {key!r} must be float, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamError(f"parameter {key!r} must be int, got {type(value).__name__} {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamError(f"parameter {key!r} must be bool (true/false), got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ParamError(f"parameter {key!r} must be str, got {type(value).__name__} {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ParamError(f"parameter {key!r} must be {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def validate(schema: type[T], values: Mapping[str, Any], where: str = "parameters") -> T:
    """Build ``schema`` from ``values``, failing on unknown keys, wrong types and values outside choices."""
    fields = {f.name: f for f in dataclasses.fields(schema)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ParamError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in "
                         f"{where}; allowed: {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(schema)
    kwargs = {}
    for key, value in values.items():
        v = _check(value, hints[key], key)
        choices = fields[key].metadata.get("choices")
        if choices is not None:
            seq = v if isinstance(v, (list, tuple)) else [v]
            bad = [x for x in seq if x not in choices]
            if bad:
                raise ParamError(f"parameter {key!r} = {value!r} in {where} is not allowed; allowed values: "
                                 f"{', '.join(map(str, choices))}")
        kwargs[key] = v
    obj = schema(**kwargs)
    check = getattr(obj, "check", None)
    if callable(check):
        check()
    return obj


def read_param_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML parameter file into a dict (an empty file is an empty dict)."""
    path = Path(path)
    if not path.is_file():
        raise ParamError(f"no parameter file at {path}; the files are params/<notebook>/<scale>.yaml")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ParamError(f"{path} must hold a mapping of parameter names to values, got {type(data).__name__}")
    return data


def load_params(schema: type[T], notebook: str, scale: str = "smoke", **overrides: Any) -> T:
    """Validate ``params/<notebook>/<scale>.yaml`` (plus ``overrides``) against ``schema``."""
    values = read_param_file(PARAMS_DIR / notebook / f"{scale}.yaml")
    values.update(overrides)
    return validate(schema, values, where=f"params/{notebook}/{scale}.yaml")


def notebook_params(schema: type[T], namespace: Mapping[str, Any], baseline: set[str], notebook: str) -> T:
    """Validate the parameters a notebook holds after papermill's injection.

    ``baseline`` is the set of global names captured before the ``parameters`` cell; every new public name
    (the parameters cell's and papermill's injected ones) must be a schema field, so a misspelt key in a
    parameter file fails here instead of being silently ignored.
    """
    values = {k: v for k, v in namespace.items()
              if k not in baseline and not k.startswith("_") and not isinstance(v, types.ModuleType)}
    return validate(schema, values, where=f"notebook {notebook}")


def describe(schema: type) -> str:
    """A table of the schema's parameters, defaults, allowed values and help texts."""
    hints = typing.get_type_hints(schema)
    rows = []
    for f in dataclasses.fields(schema):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        choices = f.metadata.get("choices")
        extra = f" (one of {', '.join(map(str, choices))})" if choices else ""
        rows.append(f"{f.name}: {_type_name(hints[f.name])} = {default!r}{extra}  {f.metadata.get('help', '')}")
    return "\n".join(rows)
