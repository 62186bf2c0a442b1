"""Fixtures for codegen tests: build hand-written kernels into a library and call them on numpy arrays."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from core.codegen import load_kernels
from tests.backend_calls import build_library
from core.target import get_target
from core.tir import Buffer, For, ForKind, IntImm, PrimFunc, Store, Var

_ids = itertools.count()


@pytest.fixture
def build(tmp_path):
    """build(funcs, target="native") -> KernelLibrary."""
    def _build(funcs, target="native"):
        funcs = funcs if isinstance(funcs, (list, tuple)) else [funcs]
        return load_kernels(build_library(list(funcs), get_target(target), tmp_path / f"lib{next(_ids)}.so"))
    return _build


@pytest.fixture
def run_elementwise(build):
    """run_elementwise(fn, inputs, out_dtype, kind=SERIAL) -> output array.

    Builds `out[i] = fn(*loads of inputs at i)` over the flat arrays and runs it."""
    def _run(fn, inputs, out_dtype, kind=ForKind.SERIAL):
        inputs = [np.ascontiguousarray(a) for a in inputs]
        n = inputs[0].size
        bufs = [Buffer(f"in{k}", (n,), _dtype_name(a.dtype)) for k, a in enumerate(inputs)]
        out = Buffer("out", (n,), out_dtype)
        i = Var("i")
        value = fn(*[b.load(i) for b in bufs])
        name = f"ew{next(_ids)}"
        func = PrimFunc(name, (*bufs, out), For(i, IntImm(n), kind, Store(out, i, value)), len(bufs), 1)
        result = np.zeros(n, dtype=_np_dtype(out_dtype))
        build(func).call(name, *inputs, result)
        return result
    return _run


def _dtype_name(dt: np.dtype) -> str:
    return "bool" if dt == np.bool_ else dt.name


def _np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)
