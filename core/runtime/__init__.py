"""Running compiled models: `load(path) -> Module` (the loader that also ships inside every artifact)."""
from .loader import KilnRuntimeError, Module, load

__all__ = ["load", "Module", "KilnRuntimeError"]
