"""The Backend registry: one Backend per target kind (every module in this package registers its own)."""
from __future__ import annotations

import importlib
import pkgutil

from ..errors import UnknownTargetError
from ..target import Target
from .base import Backend

_BACKENDS: dict[str, Backend] = {}


def register_backend(backend_class: type[Backend]) -> type[Backend]:
    """Class decorator: targets whose `kind` is `backend_class.kind` compile through one instance of it."""
    if backend_class.kind in _BACKENDS:
        raise ValueError(f"a backend for target kind {backend_class.kind!r} is registered twice")
    _BACKENDS[backend_class.kind] = backend_class()
    return backend_class


def get_backend(target: Target) -> Backend:
    """The Backend that compiles, runs and measures code for `target` (by its kind)."""
    try:
        return _BACKENDS[target.kind]
    except KeyError:
        raise UnknownTargetError(f"no backend for target kind {target.kind!r} (target {target.name}); "
                                 f"known kinds: {', '.join(_BACKENDS)}") from None


def all_backends() -> list[Backend]:
    return list(_BACKENDS.values())


# A new target kind is one new module here: importing each one registers it.
for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Backend", "all_backends", "get_backend", "register_backend"]
