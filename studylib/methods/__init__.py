"""Training objectives, one module per paper, all behind :class:`studylib.methods.base.Method`.

Every method is registered by name in :data:`METHODS` with :func:`register_method`; a registered object is a
callable ``(backbone, augment, **params) -> Method`` (a ``Method`` subclass or a factory function).
:func:`build_method` is the one entry point configs and notebooks use.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from torch import nn

from studylib.methods.base import Method

MethodFactory = Callable[..., Method]
F = TypeVar("F", bound=Callable[..., Method])

METHODS: dict[str, MethodFactory] = {}


def register_method(name: str) -> Callable[[F], F]:
    """Decorator: register a ``(backbone, augment, **params) -> Method`` callable under ``name``."""

    def deco(factory: F) -> F:
        if name in METHODS and METHODS[name] is not factory:
            raise ValueError(f"method name {name!r} is already registered by {METHODS[name]!r}; pick another name")
        METHODS[name] = factory
        return factory

    return deco


def method_version(name: str) -> int:
    """The training-behaviour version of the registered method ``name`` (its factory's ``VERSION``, default 1).

    A method bumps ``VERSION`` when the same options train differently (a fixed gradient, say): the run's hash
    then includes it (:meth:`studylib.experiments.runner.RunSpec.config`), so runs trained before are never
    reused as if they were trained by today's code. Version 1 adds nothing to the hash.
    """
    return int(getattr(METHODS.get(name), "VERSION", 1))


def build_method(name: str, backbone: nn.Module, augment: Callable[..., Any], **params: Any) -> Method:
    """Build the registered method ``name`` around ``backbone`` (an ``nn.Module`` with ``out_dim``).

    Raises:
        ValueError: for an unknown name; the message lists the allowed names.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; allowed methods: {', '.join(sorted(METHODS))}")
    return METHODS[name](backbone, augment, **params)


# Importing a method module registers its methods (kept at the bottom: the modules import register_method).
from studylib.methods import episodes as _episodes  # noqa: E402,F401
from studylib.methods import beclr as _beclr  # noqa: E402,F401
from studylib.methods import spe as _spe  # noqa: E402,F401
from studylib.methods import set2model as _set2model  # noqa: E402,F401
from studylib.methods import infopatch as _infopatch  # noqa: E402,F401
from studylib.methods import opta as _opta  # noqa: E402,F401  (registers the "opta" classifiers)
