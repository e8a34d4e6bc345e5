"""Every parameter bounded before work starts, YAML read safely (issue 29 items 2-3): ranges for every number,
non-finite values refused, list lengths bounded, parameter documents that must be mappings and whose aliases
cannot expand them beyond a small bound."""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import time
import typing
from pathlib import Path

import pytest

from studylib.config import (MAX_YAML_NODES, ParamError, field_limits, load_yaml, read_param_file, show,
                             validate)
from studylib.experiments import quickstart as qs


def billion_laughs(levels: int = 9, width: int = 10, key: str = "eval_shots") -> str:
    """The classic alias bomb: level k is ``width`` references to level k-1 (``width ** levels`` leaves)."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for k in range(1, levels):
        lines.append(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * width) + "]")
    lines.append(f"{key}: *a{levels - 1}")
    return "\n".join(lines) + "\n"


def _schemas():
    folder = Path(qs.__file__).parent
    for path in sorted(folder.glob("*.py")):
        if re.search(r"^NOTEBOOK\s*=", path.read_text(), re.M):
            yield importlib.import_module(f"studylib.experiments.{path.stem}").Params


def _numeric(tp) -> bool:
    return tp in (int, float) or any(_numeric(a) for a in typing.get_args(tp))


def test_every_number_of_every_notebook_has_a_closed_range_and_every_list_a_length():
    seen = 0
    for schema in _schemas():
        hints = typing.get_type_hints(schema)
        for f in dataclasses.fields(schema):
            bounds, max_len = field_limits(f, hints[f.name])
            assert 1 <= max_len <= 1000, (schema.__module__, f.name)
            if _numeric(hints[f.name]):
                seen += 1
                assert {"ge", "gt"} & set(bounds) and {"le", "lt"} & set(bounds), (schema.__module__, f.name, bounds)
                assert all(math.isfinite(b) for b in bounds.values())
    assert seen > 100


@pytest.mark.parametrize("key, value, want", [
    ("epochs", 10**30, r"'epochs' = 1000000000000000000000000000000 .* out of range: it must be >= 1 and <= 10,000"),
    ("image_size", 100_000, r"'image_size' = 100000 .* it must be >= 1 and <= 1,024"),
    ("batch_size", 10**9, r"'batch_size' = 1000000000 .* <= 65,536"),
    ("lr", math.inf, r"'lr' must be a finite number, got inf"),
    ("lr", math.nan, r"'lr' must be a finite number, got nan"),
    ("lr", 1e300, r"'lr' = 1e\+300 .* <= 100"),
    ("seeds", [-1], r"'seeds\[0\]' = -1 .* >= 0"),
    ("epochs", 1e30, r"'epochs' must be int \(a whole number written without a decimal point or exponent"),
])
def test_numbers_outside_their_range_are_refused_naming_it(key, value, want):
    """Before: epochs 10**30 and image_size 100000 validated (the run then trained without end or asked numpy for
    8.51 TiB); lr inf validated."""
    with pytest.raises(ParamError, match=want):
        validate(qs.Params, {key: value})


def test_lists_are_bounded_at_every_depth():
    with pytest.raises(ParamError, match=r"'seeds' in .* is a list of 101 items; at most 100"):
        validate(qs.Params, {"seeds": list(range(101))})
    validate(qs.Params, {"seeds": list(range(100))})
    from studylib.experiments import episodes_pairs as ep
    with pytest.raises(ParamError, match=r"'settings\[0\]\[1\]' = 10000000000000 .* out of range"):
        validate(ep.Params, {"settings": [[5, 10**13, 15]]})


def test_a_huge_value_is_never_printed_whole():
    value = [[1] * 1000] * 1000
    with pytest.raises(ParamError) as e:
        validate(qs.Params, {"eval_shots": value})
    assert len(str(e.value)) < 400
    assert len(show(value)) < 200


def test_a_list_given_with_p_points_to_y():
    """Before: "must be list[int] (a list), got str '[0]'" and nothing more."""
    with pytest.raises(ParamError, match=r"-p passes its value as text: give a list with -y, e.g. -y \"seeds: \[0\]\""):
        validate(qs.Params, {"seeds": "[0]"})
    with pytest.raises(ParamError, match=r"-y \"seeds: \[3\]\""):
        validate(qs.Params, {"seeds": "3"})


@pytest.mark.parametrize("text, want", [
    ("5", r"must be a mapping of names to values .*got an int 5; for one parameter use -p NAME VALUE"),
    ("[1, 2]", r"must be a mapping of names to values .*got a list \[1, 2\]"),
    ("abc", r"must be a mapping .*got a str 'abc'; for one parameter use -p NAME VALUE, or -y \"NAME: abc\""),
    ("{1: 2}", r"parameter names must be text, got 1"),
    ("a: [1", r"not valid YAML"),
])
def test_y_text_must_be_a_mapping(text, want):
    """Before: TypeError tracebacks for 5 and [1, 2], 'dictionary update sequence element' for abc."""
    with pytest.raises(ParamError, match=want):
        load_yaml(text, f"-y {text!r}")


def test_small_aliases_are_allowed_and_empty_documents_are_empty():
    assert load_yaml("a: &s [1, 5]\neval_shots: *s\n", "-y") == {"a": [1, 5], "eval_shots": [1, 5]}
    assert load_yaml("", "-y") == {} and load_yaml("# nothing\n", "-y") == {}


def test_a_billion_laughs_document_is_refused_before_it_is_built():
    """Before: 300 bytes expanding eval_shots reached MemoryError after 11 s under a 4 GB cap."""
    text = billion_laughs()
    assert len(text) < 600
    t0 = time.process_time()
    with pytest.raises(ParamError, match=rf"expands to more than {MAX_YAML_NODES:,} values .*'&anchor' / '\*alias'"):
        load_yaml(text, "-y")
    assert time.process_time() - t0 < 1.0
    with pytest.raises(ParamError, match="expands to more than"):
        load_yaml(billion_laughs(levels=3, width=40), "-y")  # 64,000 values: past the bound, though not a bomb


def test_parameter_files_are_read_the_same_safe_way(tmp_path):
    (tmp_path / "bomb.yaml").write_text(billion_laughs())
    with pytest.raises(ParamError, match="bomb.yaml: the YAML expands"):
        read_param_file(tmp_path / "bomb.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ParamError, match="list.yaml: parameters must be a mapping"):
        read_param_file(tmp_path / "list.yaml")
    (tmp_path / "big.yaml").write_text("a: " + "x" * (1 << 20) + "\n")
    with pytest.raises(ParamError, match="big.yaml: 1,048,580 bytes; a parameter file has at most"):
        read_param_file(tmp_path / "big.yaml")
