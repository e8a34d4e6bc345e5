"""Parameter validation: unknown keys, wrong types and values outside the allowed ones are refused."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from studylib.config import ParamError, load_params, param, read_param_file, validate


@dataclass
class Schema:
    epochs: int = param(3)
    lr: float = param(0.1)
    backbone: str = param("conv4", choices=("conv4", "resnet12"))
    shots: list[int] = param([1, 5])
    root: str | None = param(None)
    amp: bool = param(True)


def test_defaults_and_coercion():
    p = validate(Schema, {"lr": 1, "shots": [1]})
    assert p.lr == 1.0 and isinstance(p.lr, float) and p.shots == [1] and p.epochs == 3


def test_unknown_key_names_key_and_allowed():
    with pytest.raises(ParamError, match=r"unknown parameter 'epoch'.*allowed: amp, backbone, epochs, lr, root, shots"):
        validate(Schema, {"epoch": 3})


@pytest.mark.parametrize("key,value,msg", [
    ("epochs", "3", r"'epochs' must be int, got str '3'"),
    ("epochs", 2.5, r"'epochs' must be int"),
    ("epochs", True, r"'epochs' must be int"),
    ("lr", "fast", r"'lr' must be float"),
    ("amp", 1, r"'amp' must be bool"),
    ("shots", 5, r"'shots' must be list"),
    ("shots", [1, "5"], r"'shots\[1\]' must be int"),
    ("root", 3, r"'root' must be"),
])
def test_wrong_types(key, value, msg):
    with pytest.raises(ParamError, match=msg):
        validate(Schema, {key: value})


def test_choices():
    with pytest.raises(ParamError, match=r"'backbone' = 'vgg'.*allowed values: conv4, resnet12"):
        validate(Schema, {"backbone": "vgg"})


def test_optional_accepts_none_and_str():
    assert validate(Schema, {"root": None}).root is None
    assert validate(Schema, {"root": "/data"}).root == "/data"


def test_float_parameters_accept_numbers_yaml_reads_as_strings(tmp_path):
    """PyYAML (YAML 1.1) reads ``1e-3`` as a string; a float parameter takes it as the number it spells."""
    f = tmp_path / "p.yaml"
    f.write_text("lr: 1e-3\nepochs: 3\n")
    raw = read_param_file(f)
    assert raw["lr"] == "1e-3"  # the YAML behaviour the rule exists for
    assert validate(Schema, raw).lr == 0.001
    # Reference: Python's float literal of the same text (what the user meant).
    for text, number in (("1e-3", 1e-3), ("5E-4", 5e-4), ("+2.5e+1", 25.0), (" .5 ", 0.5), ("-3", -3.0)):
        got = validate(Schema, {"lr": text}).lr
        assert isinstance(got, float) and got == number, text


@pytest.mark.parametrize("text", ["fast", "nan", "inf", "1e", "0x10", "1,5", ""])
def test_float_parameters_refuse_other_strings_with_an_example(text):
    with pytest.raises(ParamError, match=r"'lr' must be float \(a number such as 0\.001 or 1\.0e-3\), got str"):
        validate(Schema, {"lr": text})


def test_int_parameters_stay_strict_about_strings():
    with pytest.raises(ParamError, match=r"'epochs' must be int, got str '1e3'"):
        validate(Schema, {"epochs": "1e3"})


def test_unknown_key_suggests_the_closest_allowed_key():
    with pytest.raises(ParamError, match=r"unknown parameter 'lrr' in parameters; did you mean 'lr'\? allowed: amp, "):
        validate(Schema, {"lrr": 0.1})
    with pytest.raises(ParamError, match=r"unknown parameters 'backbne', 'epoc' in .*did you mean 'backbone' for "
                                         r"'backbne'\? did you mean 'epochs' for 'epoc'\? allowed"):
        validate(Schema, {"epoc": 1, "backbne": "conv4"})
    with pytest.raises(ParamError) as info:  # nothing close: no guess, only the allowed keys
        validate(Schema, {"zzz": 1})
    assert "did you mean" not in str(info.value) and "allowed: amp" in str(info.value)


@dataclass
class Bounded:
    lr: float = param(0.1, gt=0)
    momentum: float = param(0.9, ge=0, lt=1)
    milestones: list[float] = param([0.5], ge=0, le=1)
    max_classes: int | None = param(None, ge=3)


@pytest.mark.parametrize("key,value,msg", [
    ("lr", 0, r"'lr' = 0\.0 in parameters is out of range: it must be > 0"),
    ("lr", "-1e-3", r"'lr' = -0\.001 .* must be > 0"),  # the numeric-string rule applies before the bound
    ("momentum", 1.0, r"'momentum' = 1\.0 .* must be >= 0 and < 1"),
    ("milestones", [0.5, 1.5], r"'milestones\[1\]' = 1\.5 .* must be >= 0 and <= 1"),
    ("max_classes", 2, r"'max_classes' = 2 .* must be >= 3"),
])
def test_bounds_name_the_value_and_the_range(key, value, msg):
    with pytest.raises(ParamError, match=msg):
        validate(Bounded, {key: value})


def test_bounds_let_edges_and_none_through():
    p = validate(Bounded, {"lr": 1e-9, "momentum": 0, "milestones": [0, 1], "max_classes": None})
    assert (p.lr, p.momentum, p.milestones, p.max_classes) == (1e-9, 0.0, [0.0, 1.0], None)


def test_none_passes_the_choices_of_an_optional_parameter_only():
    """11_set2model's ``pretrained: str | None`` with choices ('ce',): None (no -PL network, its help says so) was
    refused as "not allowed" by load_params and the pre-flight; a None for a parameter whose type has no None is
    still refused."""
    from studylib import preflight
    from studylib.experiments import set2model as m
    assert load_params(m.Params, m.NOTEBOOK, "smoke", pretrained=None).pretrained is None
    assert preflight.check(m.NOTEBOOK, "smoke", {"pretrained": None}).ok
    with pytest.raises(ParamError, match="must be str"):
        load_params(m.Params, m.NOTEBOOK, "smoke", backbone=None)
    assert not preflight.check(m.NOTEBOOK, "smoke", {"backbone": None}).ok
