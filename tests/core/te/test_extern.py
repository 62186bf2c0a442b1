"""te.extern: a hand-written loop program as a stage (a running maximum, which a compute rule cannot
state without O(n^2) work), lowered among ordinary compute stages and run natively."""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np

from tests.backend_calls import build_library
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.expr import Var, const, maximum
from core.tir.stmt import Allocate, For, ForKind, Store, seq


def _running_max(ins, out):
    x = ins[0]
    best = type(x)("best", (1,), x.dtype, "local")
    i = Var("i")
    body = seq(Store(best, const(0, "int64"), x.load(0)),
               For(i, const(x.shape[0], "int64"), ForKind.SERIAL, seq(
                   Store(best, const(0, "int64"), maximum(best.load(0), x.load(i))),
                   Store(out, i, best.load(0)))))
    return Allocate(best, body)


def test_extern_stage_between_computes_runs_its_program():
    x = te.placeholder((9,), "float32", "x")
    doubled = te.compute((9,), lambda i: x(i) * 2.0, name="doubled")
    running = te.extern((9,), [doubled], _running_max, "float32", name="running")
    shifted = te.compute((9,), lambda i: running(i) + 1.0, name="shifted")
    func = lower(create_schedule(shifted), [x, shifted], "running_max")
    assert [b.name for b in func.workspaces] == ["doubled", "running"]  # both materialized for the program

    data = np.random.default_rng(0).standard_normal(9).astype(np.float32)
    got = _run(func, data)
    np.testing.assert_allclose(got, np.maximum.accumulate(data * 2) + 1, rtol=1e-6)


def _run(func, data):
    """Builds the kernel alone and calls it: inputs, outputs, then workspaces, as flat pointers."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        build_library([func], get_target("native"), path)
        lib = ctypes.CDLL(str(path))
        out = np.zeros(9, np.float32)
        workspaces = [np.zeros(b.shape, b.dtype) for b in func.workspaces]
        args = [data, out] + workspaces
        getattr(lib, func.name)(*[a.ctypes.data_as(ctypes.c_void_p) for a in args])
        return out
