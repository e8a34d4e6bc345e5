"""Parameter schemas: every notebook's parameters are validated before anything runs.

A schema is a dataclass whose fields are the notebook's parameters. :func:`validate` checks a mapping
against it: an unknown key fails naming the key, the closest allowed key ("did you mean") and the allowed
keys; a value of the wrong type fails naming the key, the expected type and the value; a value outside its
``choices`` or its bounds (``ge``/``gt``/``le``/``lt``) fails naming the allowed values or range.

Numbers written in a parameter file: YAML 1.1 (PyYAML) reads ``1e-3`` as the *string* ``"1e-3"`` (its float
pattern wants a dot and a signed exponent, ``1.0e-3``). A ``float`` parameter therefore also accepts a string
that spells a finite decimal number (``"1e-3"``, ``"5E-4"``, ``"0.1"``) and converts it; any other string
(``"fast"``, ``"nan"``, ``"inf"``) is refused. ``int`` parameters stay strict: ``"3"`` is refused.
Non-finite numbers (``nan``, ``inf``, YAML's ``.inf``) are refused everywhere.

Every number has a range: a field's own bounds (:func:`param`'s ``ge``/``gt``/``le``/``lt``), completed by
:data:`RANGES` (by parameter name: ``epochs <= 10000``, ``image_size <= 1024``, ...) and, for a name it does not
list, the default range of its type (:data:`DEFAULT_RANGE`); every list has a length limit (``max_len``, default
:data:`MAX_LIST`). :func:`field_limits` gives the limits a field ends up with. What the sizes cost together
(memory, time) is the pre-flight's estimate (:mod:`studylib.preflight`).

YAML is read by :func:`load_yaml`: a parameter document must be a mapping of names to values, at most
:data:`MAX_YAML_BYTES` long, and anchors/aliases may not expand it beyond :data:`MAX_YAML_NODES` nodes (a
"billion laughs" document is refused before it is built).

Choices are declared with :func:`param`::

    @dataclass
    class Params:
        backbone: str = param("conv4", choices=BACKBONE_NAMES, help="embedding network")

One source of truth: a notebook's schema defaults ARE its smoke parameters. The notebook's ``parameters`` cell
is generated from the schema (:func:`parameters_cell`, with types and help that ``papermill --help-notebook``
shows), and ``params/<notebook>/{paper,check}.yaml`` hold only what differs from those defaults (a test keeps
all of this in agreement). Fields marked ``cut=True`` are the only ones a ``check.yaml`` may change with
respect to its ``paper.yaml`` (the check scale is the paper configuration cut to a few steps).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import math
import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

import yaml

T = TypeVar("T")



# A finite decimal number as text: what a float parameter accepts from a string (YAML reads "1e-3" as one).
_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class ParamError(ValueError):
    """A notebook parameter is unknown, of the wrong type, or outside its allowed values."""


# Ranges by parameter name, completing a field's own bounds (a side the field sets itself is kept). Generous for
# research use; what a configuration costs as a whole (memory, hours) is the pre-flight's estimate.
_STEPS = 10_000_000
RANGES: dict[str, dict[str, float]] = {
    # training length
    "epochs": {"le": 10_000}, "adapt_epochs": {"le": 10_000}, "max_steps": {"le": _STEPS},
    "batches_per_epoch": {"le": 1_000_000}, "images_per_epoch": {"le": 100_000_000}, "halve_every": {"le": _STEPS},
    "drop_ramp_steps": {"le": _STEPS}, "patience": {"le": 100_000}, "em_iters": {"le": 100_000},
    "em_unroll": {"le": 1_000},
    # sizes of a batch, an image, a network
    "batch_size": {"le": 65_536}, "batch_sizes": {"le": 65_536}, "episodes_per_batch": {"le": 1_024},
    "image_size": {"le": 1_024}, "conv4_hidden": {"le": 4_096}, "hidden": {"le": 4_096}, "widths": {"le": 8_192},
    "conv_blocks": {"le": 64}, "embed_dim": {"le": 65_536}, "dim": {"le": 65_536}, "proj_dim": {"le": 65_536},
    "pred_hidden": {"le": 65_536}, "projection_dim": {"le": 65_536}, "nca_projection_dim": {"le": 65_536},
    "spe_dim": {"le": 65_536}, "fig4_dim": {"le": 65_536}, "table_dims": {"le": 65_536},
    "memory_size": {"le": 1_000_000}, "mask_patch": {"le": 1_024},
    # episodes and evaluation
    "eval_episodes": {"le": 1_000_000}, "val_episodes": {"le": 1_000_000}, "eval_queries": {"le": 10_000},
    "eval_shots": {"le": 10_000}, "eval_ways": {"le": 10_000}, "eval_samples": {"le": 100_000},
    "eval_draws": {"le": 10_000}, "eval_mean_images": {"le": 100_000_000}, "measure_max_images": {"le": 100_000_000},
    # data
    "max_classes": {"le": 1_000_000}, "train_images": {"le": 100_000_000}, "train_per_class": {"le": 1_000_000},
    "val_per_class": {"le": 1_000_000}, "test_per_class": {"le": 1_000_000},
    # seeds: what torch, NumPy and Python all accept
    "seed": {"ge": 0, "le": 2**31 - 1}, "seeds": {"ge": 0, "le": 2**31 - 1}, "data_seed": {"ge": 0, "le": 2**31 - 1},
    "split_seed": {"ge": 0, "le": 2**31 - 1},
    # rates and weights
    "lr": {"le": 100.0}, "weight_decay": {"le": 10.0}, "lr_factors": {"le": 100.0},
}
DEFAULT_RANGE: dict[type, dict[str, float]] = {int: {"ge": -1_000_000_000, "le": 1_000_000_000},
                                               float: {"ge": -1e9, "le": 1e9}}
MAX_LIST = 64  # items of a list parameter (at any depth), unless the field sets max_len
LIST_LENGTHS: dict[str, int] = {"seeds": 100}
MAX_YAML_BYTES = 1 << 20  # a parameter document (a file or -y text)
MAX_YAML_NODES = 10_000  # scalars, lists and mappings of a parameter document, aliases expanded
MAX_YAML_DEPTH = 32  # lists and mappings inside each other (a parameter needs 3 at most)
MAX_NUMBER_DIGITS = 100  # characters of a number in a parameter document (Python refuses ints of 4,300 digits)
UNIQUE: dict[str, str] = {"seeds": "seed"}  # list parameters whose items must differ, and what one item is

_REPR = reprlib.Repr()
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 8
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 3


def show(value: Any) -> str:
    """A bounded ``repr`` for messages (a huge or deeply nested value is cut, never printed whole)."""
    text = _REPR.repr(value)
    return text if len(text) <= 120 else text[:116] + " ..."


def param(default: Any, *, choices: Sequence[Any] | None = None, help: str = "", ge: float | None = None,
          gt: float | None = None, le: float | None = None, lt: float | None = None, cut: bool = False,
          max_len: int | None = None) -> Any:
    """A dataclass field with optional allowed values, numeric bounds and a help text.

    ``ge``/``gt``/``le``/``lt`` bound a number (or every number of a list): ``>=``, ``>``, ``<=``, ``<``;
    ``None`` stays allowed for an optional field. A side left open is closed by :data:`RANGES` or
    :data:`DEFAULT_RANGE` (:func:`field_limits`). ``max_len`` bounds the length of a list (default
    :data:`MAX_LIST`). ``cut=True`` marks a field that sets how far the check scale cuts the paper
    configuration (epochs, steps, episodes, seeds, sweep lengths, the stand-in data): ``check.yaml`` may differ
    from ``paper.yaml`` only there.
    """
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    meta = {"choices": tuple(choices) if choices is not None else None, "help": help, "bounds": bounds, "cut": cut,
            "max_len": max_len}
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
        raise ParamError(f"parameter {key!r} must be {_type_name(tp)}, got {type(value).__name__} {show(value)}"
                         + (_quote_hint(key, value) if str in args else ""))
    if tp is type(None):
        if value is None:
            return None
        raise ParamError(f"parameter {key!r} must be None, got {show(value)}")
    if origin in (list, tuple, Sequence, typing.Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            hint = ""
            if isinstance(value, str):  # papermill's -p passes text; a list needs YAML
                hint = (f"; -p passes its value as text: give a list with -y, e.g. -y \"{key}: "
                        f"{value if value.strip().startswith('[') else '[' + value + ']'}\"")
            raise ParamError(f"parameter {key!r} must be {_type_name(tp)} (a list), got "
                             f"{type(value).__name__} {show(value)}{hint}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ParamError(f"parameter {key!r} must have {len(args)} items, got {len(value)}: {show(value)}")
            return tuple(_check(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        inner = args[0] if args else Any
        items = [_check(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ParamError(f"parameter {key!r} must be a mapping, got {type(value).__name__} {show(value)}")
        return dict(value)
    if tp is float:
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-3 as a string (see the module docstring)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(f"parameter {key!r} must be float (a number such as 0.001 or 1.0e-3), got "
                             f"{type(value).__name__} {show(value)}")
        try:
            out = float(value)
        except OverflowError:
            out = math.inf
        if not math.isfinite(out):
            raise ParamError(f"parameter {key!r} must be a finite number, got {show(value)}")
        return out
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            whole = isinstance(value, float) and math.isfinite(value) and value == int(value)
            hint = " (a whole number written without a decimal point or exponent, e.g. 3)" if whole else ""
            raise ParamError(f"parameter {key!r} must be int{hint}, got {type(value).__name__} {show(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamError(f"parameter {key!r} must be bool (true/false), got {type(value).__name__} {show(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ParamError(f"parameter {key!r} must be str, got {type(value).__name__} {show(value)}"
                             + _quote_hint(key, value))
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ParamError(f"parameter {key!r} must be {tp.__name__}, got {type(value).__name__} {show(value)}")
    return value


def _quote_hint(key: str, value: Any) -> str:
    """For text that YAML read as something else (``2026-01-01`` a date, ``yes``/``off`` a boolean): quote it."""
    import datetime
    if isinstance(value, (datetime.date, datetime.datetime)):
        return (f"; YAML reads an unquoted {value} as a date: quote it, e.g. -y \"{key}: '{value}'\" (or "
                f"{key}: '{value}' in a parameter file)")
    if isinstance(value, bool):
        return (f"; YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote the text, e.g. -y \"{key}: "
                f"'yes'\"")
    return ""


def _check_unique(key: str, value: Any, where: str) -> None:
    """ParamError when a list parameter of :data:`UNIQUE` (``seeds``) repeats an item: each seed is one training
    run, so a repeated seed would count one run twice (an interval over copies, a p-value it does not support)."""
    if key not in UNIQUE or not isinstance(value, (list, tuple)):
        return
    seen: set[Any] = set()
    repeated = [v for v in value if v in seen or seen.add(v)]  # type: ignore[func-returns-value]
    if not repeated:
        return
    fresh = list(dict.fromkeys(value))
    spare = (n for n in range(len(value) * 2 + 1) if n not in seen)
    fresh += [next(spare) for _ in range(len(value) - len(fresh))]
    item = UNIQUE[key]
    twice = list(dict.fromkeys(repeated))
    text = f"{item}{'s' if len(twice) > 1 else ''} {', '.join(map(str, twice))}"
    raise ParamError(f"parameter {key!r} = {show(value)} in {where} repeats {text}: each {item} is one "
                     f"training run, so a repeat would count the same run twice; give distinct {key}, e.g. "
                     f"-y \"{key}: [{', '.join(map(str, fresh))}]\"")


_BOUND_TEXT = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_BOUND_OK = {"ge": lambda x, b: x >= b, "gt": lambda x, b: x > b, "le": lambda x, b: x <= b, "lt": lambda x, b: x < b}


def _numeric_type(tp: Any) -> type | None:
    """``int`` or ``float`` when ``tp`` holds numbers (``int``, ``float | None``, ``list[list[int]]``...), else None."""
    if tp in (int, float):
        return tp
    for a in typing.get_args(tp):
        found = _numeric_type(a)
        if found is not None:
            return found
    return None


def field_limits(f: dataclasses.Field, tp: Any) -> tuple[dict[str, float], int]:
    """``(bounds, max_len)`` of a schema field: its own bounds, completed by :data:`RANGES` for its name and the
    default range of its number type (:data:`DEFAULT_RANGE`); ``max_len`` bounds every list in its value."""
    own = dict(f.metadata.get("bounds") or {})
    kind = _numeric_type(tp)
    bounds = own
    if kind is not None:
        for extra in (RANGES.get(f.name, {}), DEFAULT_RANGE[kind]):
            for k, v in extra.items():
                lower = k in ("ge", "gt")
                if not any((o in ("ge", "gt")) == lower for o in bounds):
                    bounds[k] = v
    max_len = f.metadata.get("max_len") or LIST_LENGTHS.get(f.name, MAX_LIST)
    return bounds, int(max_len)


def _check_length(key: str, value: Any, max_len: int, where: str) -> None:
    """ParamError when a list (at any depth of ``value``) holds more than ``max_len`` items."""
    if isinstance(value, (list, tuple)):
        if len(value) > max_len:
            raise ParamError(f"parameter {key!r} in {where} is a list of {len(value):,} items; at most {max_len} "
                             f"are allowed")
        for i, v in enumerate(value):
            _check_length(f"{key}[{i}]", v, max_len, where)


def _check_bounds(key: str, value: Any, bounds: Mapping[str, float], where: str) -> None:
    """ParamError when a number (or a number of a list, at any depth) lies outside ``bounds`` (see :func:`param`)."""
    if not bounds or value is None:
        return
    if isinstance(value, (list, tuple)):
        for i, x in enumerate(value):
            _check_bounds(f"{key}[{i}]", x, bounds, where)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    bad = [k for k, b in bounds.items() if not _BOUND_OK[k](value, b)]
    if bad:
        rule = " and ".join(f"{_BOUND_TEXT[k]} {bounds[k]:,}" if isinstance(bounds[k], int) else
                            f"{_BOUND_TEXT[k]} {bounds[k]:g}" for k in bounds)
        raise ParamError(f"parameter {key!r} = {show(value)} in {where} is out of range: it must be {rule}")


def check_field(f: dataclasses.Field, tp: Any, key: str, value: Any, where: str) -> Any:
    """One value against its field: list lengths, type (coerced where lossless), allowed values, range."""
    bounds, max_len = field_limits(f, tp)
    _check_length(key, value, max_len, where)
    v = _check(value, tp, key)
    choices = f.metadata.get("choices")
    if choices is not None:
        seq = v if isinstance(v, (list, tuple)) else [v]
        bad = [x for x in seq if x is not None and x not in choices]  # None: only where the type allows it
        if bad:
            raise ParamError(f"parameter {key!r} = {show(value)} in {where} is not allowed; allowed values: "
                             f"{', '.join(map(str, choices))}")
    _check_bounds(key, v, bounds, where)
    _check_unique(key, v, where)
    return v


def validate(schema: type[T], values: Mapping[str, Any], where: str = "parameters") -> T:
    """Build ``schema`` from ``values``, failing on unknown keys, wrong types and values outside choices.

    An unknown key's message suggests the closest allowed key (``difflib.get_close_matches``, ratio >= 0.6),
    e.g. ``unknown parameter 'lrr' in ...; did you mean 'lr'? allowed: ...``.
    """
    fields = {f.name: f for f in dataclasses.fields(schema)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        close = {k: c[0] for k in unknown if (c := difflib.get_close_matches(k, sorted(fields), n=1, cutoff=0.6))}
        if len(unknown) == 1:
            hint = "".join(f"did you mean {c!r}? " for c in close.values())
        else:
            hint = "".join(f"did you mean {c!r} for {k!r}? " for k, c in close.items())
        raise ParamError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in "
                         f"{where}; {hint}allowed: {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(schema)
    kwargs = {key: check_field(fields[key], hints[key], key, value, where) for key, value in values.items()}
    obj = schema(**kwargs)
    check = getattr(obj, "check", None)
    if callable(check):
        check()
    return obj


def _node_count(node: yaml.Node, limit: int, where: str) -> int:
    """Nodes of a composed YAML document with every alias expanded, counted without building anything (each
    node's count is computed once, so a "billion laughs" chain costs a few steps per node); ParamError past
    ``limit``."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in sizes:
            continue
        kids = ([c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode) else
                list(n.value) if isinstance(n, yaml.SequenceNode) else [])
        if done:
            sizes[id(n)] = 1 + sum(sizes[id(c)] for c in kids)
            if sizes[id(n)] > limit:
                raise ParamError(f"{where}: the YAML expands to more than {limit:,} values (anchors and aliases "
                                 f"repeat parts of it); a parameter document this large is refused. Write the "
                                 f"values out without '&anchor' / '*alias'")
            continue
        stack.append((n, True))
        stack.extend((c, False) for c in kids if id(c) not in sizes)
    return sizes[id(node)]


def _check_shape(text: str, where: str) -> None:
    """The document's nesting (at most :data:`MAX_YAML_DEPTH` lists and mappings inside each other) and size
    (:data:`MAX_YAML_NODES`), read from the parser's events, which are produced without recursion, before the
    document is composed (PyYAML's composer recurses once per level: 3,000 nested brackets overflowed Python's
    stack). ParamError naming ``where`` and the fix."""
    depth = count = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ParamError(f"{where}: lists and mappings nest more than {MAX_YAML_DEPTH} levels deep; no "
                                 f"parameter needs more than 3: write the value out flat, e.g. -y 'seeds: [0, 1]'")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
        if isinstance(event, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            count += 1
            if count > MAX_YAML_NODES:
                raise ParamError(f"{where}: more than {MAX_YAML_NODES:,} values; a parameter document this large is "
                                 f"refused")


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _check_numbers(node: yaml.Node, where: str) -> None:
    """A number written with more than :data:`MAX_NUMBER_DIGITS` characters is refused naming its parameter
    (Python's own refusal of a 5,000-digit integer names none). The document's depth is bounded already."""
    pairs = node.value if isinstance(node, yaml.MappingNode) else [(None, node)]
    for key, value in pairs:
        name = key.value if isinstance(key, yaml.ScalarNode) else "?"
        stack = [value]
        while stack:
            n = stack.pop()
            if isinstance(n, yaml.ScalarNode):
                if n.tag in _NUMBER_TAGS and len(n.value) > MAX_NUMBER_DIGITS:
                    raise ParamError(f"parameter {name!r} in {where}: a number written with {len(n.value):,} "
                                     f"characters is beyond every parameter's range; give one in its range, e.g. "
                                     f"-y '{name}: 10'")
            elif isinstance(n, yaml.SequenceNode):
                stack.extend(n.value)
            elif isinstance(n, yaml.MappingNode):
                stack.extend(v for pair in n.value for v in pair)


def load_yaml(text: str, where: str) -> dict[str, Any]:
    """A parameter document (a parameter file or ``-y`` text) read safely: ``yaml.safe_load``'s types only, at
    most :data:`MAX_YAML_BYTES` and :data:`MAX_YAML_NODES` values with aliases expanded, and a mapping of names
    to values (an empty document is ``{}``). ParamError naming ``where`` and the fix otherwise; a YAML syntax
    error is a ParamError too."""
    if len(text) > MAX_YAML_BYTES:
        raise ParamError(f"{where}: {len(text):,} characters of YAML; a parameter document has at most "
                         f"{MAX_YAML_BYTES:,}")
    try:
        _check_shape(text, where)
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return {}
            _node_count(node, MAX_YAML_NODES, where)
            _check_numbers(node, where)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise ParamError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
    example = "e.g. -y 'seeds: [0, 1]' or -y '{epochs: 2, lr: 0.05}'" if where.startswith("-y") else \
        "one 'name: value' per line"
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        what = "a list" if isinstance(data, list) else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
        hint = (f"; for one parameter use -p NAME VALUE, or -y \"NAME: {data}\"" if isinstance(data, (str, int, float))
                and where.startswith("-y") else "")
        raise ParamError(f"{where}: parameters must be a mapping of names to values ({example}), got {what} "
                         f"{show(data)}{hint}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ParamError(f"{where}: parameter names must be text, got {show(bad[0])} ({type(bad[0]).__name__}); "
                         f"{example}")
    return data


def read_param_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML parameter file into a dict (an empty file is an empty dict), safely (:func:`load_yaml`)."""
    path = Path(path)
    if not path.is_file():
        raise ParamError(f"no parameter file at {path.absolute()}; the files are params/<notebook>/<scale>.yaml")
    if path.stat().st_size > MAX_YAML_BYTES:
        raise ParamError(f"{path}: {path.stat().st_size:,} bytes; a parameter file has at most {MAX_YAML_BYTES:,}")
    return load_yaml(path.read_text(), str(path))


def load_params(schema: type[T], notebook: str, scale: str = "smoke", **overrides: Any) -> T:
    """Validate ``params/<notebook>/<scale>.yaml`` (plus ``overrides``) against ``schema``."""
    from studylib.paths import params_dir
    values = read_param_file(params_dir() / notebook / f"{scale}.yaml")
    values.update(overrides)
    return validate(schema, values, where=f"params/{notebook}/{scale}.yaml")


def _cell_source(cell: Mapping[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _assigned_names(source: str) -> set[str]:
    """Names a cell of code binds (assignments, loops, imports, definitions, ``with ... as``)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def notebook_own_names(notebook: str) -> set[str] | None:
    """Every name the notebook's own code cells bind, except its ``parameters`` and papermill's injected cell.

    None when the notebook file is not found (then only names new since the baseline are considered).
    """
    from studylib.paths import notebooks_dir
    path = notebooks_dir() / f"{notebook}.ipynb"
    if not path.is_file():
        return None
    nb = json.loads(path.read_text())
    names: set[str] = set()
    for cell in nb.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.get("cell_type") == "code" and "parameters" not in tags and "injected-parameters" not in tags:
            names |= _assigned_names(_cell_source(cell))
    return names


def notebook_params(schema: type[T], namespace: Mapping[str, Any], baseline: set[str], notebook: str) -> T:
    """Validate the parameters a notebook holds after its ``parameters`` cell (and papermill's injection).

    Every schema field present in ``namespace`` is taken. A new public name (not in ``baseline``, the globals
    captured before the ``parameters`` cell) that is neither a schema field nor bound by the notebook's own
    code cells is an unknown parameter: a misspelt key in a parameter file or in ``-p`` fails here instead of
    being silently ignored. Names the notebook's later cells create (``P``, ``fig``, ...) are not parameters,
    so editing the ``parameters`` cell and re-running it after "Run All" works.
    """
    fields = {f.name for f in dataclasses.fields(schema)}  # type: ignore[arg-type]
    own = notebook_own_names(notebook) or set()
    new = {k for k, v in namespace.items()
           if k not in baseline and not k.startswith("_") and not isinstance(v, types.ModuleType)}
    values = {k: namespace[k] for k in fields if k in namespace}
    values.update({k: namespace[k] for k in new - fields - own})
    params = validate(schema, values, where=f"notebook {notebook}")
    _CURRENT["notebook"] = notebook  # recorded in the runs this process trains (./study results)
    _CURRENT["params"] = params  # recorded in the claims table the notebook saves (its params_hash)
    from studylib.precision import set_cpu_autocast
    set_cpu_autocast(getattr(params, "scale", None))  # the check scale runs the GPU's bf16 path on the CPU
    return params


_CURRENT: dict[str, Any] = {"notebook": None, "params": None}


def current_params() -> Any:
    """The parameters :func:`notebook_params` last validated in this process (None outside a notebook)."""
    return _CURRENT.get("params")


def current_notebook() -> str | None:
    """The notebook this process runs (set by :func:`notebook_params`; else ``$STUDYLIB_NOTEBOOK``), or None."""
    import os
    return _CURRENT["notebook"] or os.environ.get("STUDYLIB_NOTEBOOK") or None


def _compact_type(tp: Any) -> str:
    return _type_name(tp).replace(" ", "")


def parameters_cell(schema: type) -> str:
    """The source of a notebook's ``parameters`` cell: every field with its default (= smoke), type and help.

    The ``# type: T  help`` comments are what ``papermill --help-notebook`` reads.
    """
    hints = typing.get_type_hints(schema)
    lines = ["# Parameters: defaults are the smoke scale; params/<notebook>/{paper,check}.yaml change them "
             "(papermill -f), or edit and re-run this cell."]
    for f in dataclasses.fields(schema):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f.metadata.get("help", "")
        choices = f.metadata.get("choices")
        if choices:
            help_text = (help_text + "; " if help_text else "") + "one of " + ", ".join(map(str, choices))
        lines.append(f"{f.name} = {default!r}  # type: {_compact_type(hints[f.name])}  {_comment_text(help_text)}"
                     .rstrip())
    return "\n".join(lines) + "\n"


def _comment_text(text: str) -> str:
    """``text`` without ``=``: papermill's parameter parser skips a whole line holding more than one ``=`` (the
    parameter vanishes from ``papermill --help-notebook``), so ``a = b`` reads ``a is b`` and ``<=`` reads ``≤``."""
    for a, b in (("<=", "≤"), (">=", "≥"), ("!=", "≠"), ("==", "=")):
        text = text.replace(a, b)
    return re.sub(r"\s*=\s*", " is ", text)


def sync_parameters_cell(notebook: str) -> bool:
    """Rewrite ``notebooks/<notebook>.ipynb``'s ``parameters`` cell from its schema; True if it changed.

    The schema is ``studylib.experiments.<name>.Params`` for notebook ``NN_name`` (``./study sync-params``).
    """
    from studylib.paths import experiment_module, notebooks_dir
    schema = experiment_module(notebook).Params
    path = notebooks_dir() / f"{notebook}.ipynb"
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParamError(f"{path} must have exactly one cell tagged 'parameters', found {len(cells)}")
    source = parameters_cell(schema)
    if _cell_source(cells[0]) == source:
        return False
    cells[0]["source"] = source.splitlines(keepends=True)
    cells[0]["outputs"] = []
    from studylib.utils import atomic_write_text
    atomic_write_text(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def defaults(schema: type) -> dict[str, Any]:
    """The schema's default values (the smoke parameters)."""
    return {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())  # type: ignore[misc]
            for f in dataclasses.fields(schema)}


def cut_fields(schema: type) -> set[str]:
    """Fields a ``check.yaml`` may set differently from ``paper.yaml`` (``param(..., cut=True)``)."""
    return {f.name for f in dataclasses.fields(schema) if f.metadata.get("cut")}


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
