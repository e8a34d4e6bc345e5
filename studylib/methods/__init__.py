"""Training objectives, one module per paper, all behind :class:`studylib.methods.base.Method`.

Each method module registers its objectives by name where it defines them (:mod:`studylib.methods.registry`);
:func:`build_method` builds one by name. This ``__init__`` imports no method module: the registry finds them on
the first lookup.
"""

from studylib.methods.base import Method
from studylib.methods.registry import METHODS, build_method, method_version, register_method

__all__ = ["METHODS", "Method", "build_method", "method_version", "register_method"]
