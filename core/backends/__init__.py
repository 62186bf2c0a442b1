"""The Backend registry: one Backend per target kind, each a package here (core/backends/<kind>/) that registers
its own. Looked up once at the boundary (core.compile, the API, the CLI) and handed down, never from below."""
from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from ..errors import UnknownTargetError
from ..target import Target, all_targets, get_target
from .base import Backend

if TYPE_CHECKING:
    from ..tune.measuring_device import MeasuringDevice

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


def resolve(spec: "str | Target") -> tuple[Target, Backend]:
    """A target spec resolved once at a boundary (core.compile, an API request, a CLI command, a worker task):
    the Target and its Backend, handed down together from there."""
    target = get_target(spec)
    return target, get_backend(target)


def all_targets_with_backends() -> list[tuple[Target, Backend]]:
    """Every named target with its Backend (`kiln targets`, GET /targets, the measure queues of this machine)."""
    return [(target, get_backend(target)) for target in all_targets()]


def measuring_device(kind: str) -> "MeasuringDevice":
    """A measuring worker's boundary: how this machine measures code of device kind `kind` (a named target)."""
    target, backend = resolve(kind)
    return backend.measuring_device(target)


# A new target kind is one new package here: importing each one registers it.
for _module in pkgutil.iter_modules(__path__):
    if _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Backend", "all_backends", "all_targets_with_backends", "get_backend", "measuring_device", "register_backend",
           "resolve"]
