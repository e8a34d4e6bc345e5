"""Name -> object registries filled by the modules that define the objects, looked up by name (timm's style).

A :class:`Registry` is a read-only mapping. The module that defines an object registers it where it defines it
(``@METHODS.register("nca")`` on a class or factory, ``CLASSIFIERS.register("knn", knn)``); nobody imports a
module only to fill a table. Lookup works from a fresh interpreter all the same: a registry names the one
package whose modules may register into it, and the first lookup that needs the whole table (a name it does not
hold yet, ``len``, iteration, ``names()``) imports every module of that package once, in sorted order, so their
registrations run. A name that is still unknown then is refused with the names there are.

Two registries use it: the training objectives (:data:`studylib.methods.registry.METHODS`, package
``studylib.methods``) and the few-shot classifiers (:data:`studylib.evaluation.classifiers.CLASSIFIERS`, package
``studylib.evaluation``). Each lives in the package its entries are defined in, so no package imports another to
fill a table, and the layers of ``pyproject.toml``'s import contract hold.

This module imports nothing of ``studylib``: it is the bottom layer.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from typing import Callable, Generic, TypeVar, overload

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Objects of one kind by name (see the module docstring).

    Args:
        kind: what the entries are, for messages (``"method"``, ``"classifier"``).
        package: the dotted package whose modules register into this registry; its modules are imported on the
            first lookup that needs the whole table.
    """

    def __init__(self, kind: str, package: str) -> None:
        self.kind, self.package = kind, package
        self._entries: dict[str, T] = {}
        self._discovered = False

    # -- registration -------------------------------------------------------------------------------------------
    @overload
    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T, *, replace: bool = False) -> T: ...

    def register(self, name: str, obj: T | None = None, *, replace: bool = False):
        """Register ``obj`` under ``name`` (``register(name)`` alone returns a decorator). Registering the same
        object twice under one name is a no-op; another object under a taken name is refused unless
        ``replace``."""

        def add(o: T) -> T:
            if not isinstance(name, str) or not name:
                raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
            held = self._entries.get(name)
            if held is not None and held is not o and not replace:
                raise ValueError(f"{self.kind} name {name!r} is already registered by {held!r}; pick another name")
            self._entries[name] = o
            return o

        return add if obj is None else add(obj)

    def held(self, name: str) -> T | None:
        """What ``name`` holds now, without importing anything (None when nothing)."""
        return self._entries.get(name)

    def unregister(self, name: str) -> T | None:
        """Remove ``name`` (a test's temporary entry); returns what it held, or None."""
        return self._entries.pop(name, None)

    # -- lookup -------------------------------------------------------------------------------------------------
    def discover(self) -> None:
        """Import every module of :attr:`package` once (sorted by name), so that their registrations run."""
        if self._discovered:
            return
        self._discovered = True  # set first: a module imported here may look a name up while it loads
        pkg = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            importlib.import_module(f"{self.package}.{info.name}")

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown(name)) from None

    def get(self, name: str, default: T | None = None) -> T | None:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self.discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self.discover()
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        self.discover()
        return len(self._entries)

    def names(self) -> list[str]:
        """Every registered name, sorted (after discovery)."""
        return list(self)

    def unknown(self, name: object) -> str:
        """The message for a name this registry does not hold: the allowed names."""
        return f"unknown {self.kind} {name!r}; allowed {self.kind}s: {', '.join(self.names())}"

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, package={self.package!r}, {len(self._entries)} registered so far)"


__all__ = ["Registry"]
