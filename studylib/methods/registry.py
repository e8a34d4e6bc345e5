"""The training objectives by name: :data:`METHODS`, filled by the method modules themselves.

A method module registers its objective where it defines it (``@register_method("nca")`` on a ``Method``
subclass or a factory); a registered object is a callable ``(backbone, augment, **params) -> Method``.
:func:`build_method` is the one entry point configs and notebooks use. A lookup from a fresh interpreter finds
every method: the registry imports the modules of ``studylib.methods`` on the first lookup that needs them
(:class:`studylib.registry.Registry`), so no ``__init__`` imports the method modules to fill the table.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from torch import nn

from studylib.methods.base import Method
from studylib.registry import Registry

MethodFactory = Callable[..., Method]
F = TypeVar("F", bound=Callable[..., Method])

METHODS: Registry[MethodFactory] = Registry("method", "studylib.methods")


def register_method(name: str) -> Callable[[F], F]:
    """Decorator: register a ``(backbone, augment, **params) -> Method`` callable under ``name``."""
    return METHODS.register(name)  # type: ignore[return-value]


def method_version(name: str) -> int:
    """The training-behaviour version of the registered method ``name`` (its factory's ``VERSION``, default 1).

    A method bumps ``VERSION`` when the same options train differently (a fixed gradient, say): the run's hash
    then includes it (:meth:`studylib.runs.runner.RunSpec.config`), so runs trained before are never reused as if
    they were trained by today's code. Version 1 adds nothing to the hash.
    """
    return int(getattr(METHODS.get(name), "VERSION", 1))


def build_method(name: str, backbone: nn.Module, augment: Callable[..., Any], **params: Any) -> Method:
    """Build the registered method ``name`` around ``backbone`` (an ``nn.Module`` with ``out_dim``).

    Raises:
        ValueError: for an unknown name; the message lists the allowed names.
    """
    if name not in METHODS:
        raise ValueError(METHODS.unknown(name))
    return METHODS[name](backbone, augment, **params)


__all__ = ["METHODS", "MethodFactory", "build_method", "method_version", "register_method"]
