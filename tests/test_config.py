"""Parameter validation: unknown keys, wrong types and values outside the allowed ones are refused."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from studylib.config import ParamError, param, validate


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
