"""Kiln: an ONNX deep-learning compiler. Public API: `compile()`, `runtime.load()`, `targets`."""
from ._version import __version__


def compile(model, target="native", opt_level=3, tuning=None, **kwargs):  # noqa: A001 - the documented name
    """Compile an ONNX model (path, bytes or ModelProto) for `target`; returns an Artifact."""
    from .driver.pipeline import compile as _compile

    return _compile(model, target, opt_level, tuning, **kwargs)


def load(path):
    """Load a saved artifact (.tar.gz or folder) for running: `load(p).run({name: array})`."""
    from .runtime import load as _load

    return _load(path)


__all__ = ["__version__", "compile", "load"]
