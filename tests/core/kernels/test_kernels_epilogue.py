"""Fused epilogues: elementwise stages after a conv or matmul run inside its tile loop
(reverse_compute_at) when they read it elementwise, and as their own pass otherwise."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from tests.backend_calls import build_library, runs_on_host
from core.codegen.kernel_library import load_kernels
from core.errors import ScheduleError
from core.kernels import get_compute
from core.kernels.elementwise import unary
from core.kernels.schedules.conv2d import schedule_conv2d
from core.kernels.schedules.epilogue import schedule_epilogue
from core.kernels.schedules.matmul import schedule_matmul
from tests.helpers.kernel_runs import onnx_reference
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.functor import walk_stmt
from core.tir.stmt import For, Store

NATIVE = get_target("native")

# (channels, size, out channels, kernel, stride, pad, attached?): 3x3 rows of whole vectors, a widened
# 28-column row (cropped), 1x1 over the image, and 1x1 convs over the flattened (padded) pixels. The tiles
# follow the vector width, so each case names its target: at 512 bits (x86-64-v4) the strided 1x1 conv's
# 16 pixels x 8 channels are one register tile (the tile loops have extent 1 and vanish, leaving no loop
# to find the epilogue in), so there it takes 16 output channels.
CONVS = [(8, 12, 8, 3, 1, 1, True), (8, 28, 16, 3, 1, 1, True), (16, 8, 32, 1, 1, 0, True),
         (16, 14, 24, 1, 1, 0, True), (8, 7, 8, 1, 2, 0, True), (4, 13, 6, 3, 1, 1, True)]
CONVS_V4 = [(8, 7, 16, 1, 2, 0, True) if conv == (8, 7, 8, 1, 2, 0, True) else conv for conv in CONVS]
TARGET_CONVS = [("x86-64-v3", *conv) for conv in CONVS] + [("x86-64-v4", *conv) for conv in CONVS_V4]


def _stores(stmt, name: str) -> bool:
    return any(isinstance(s, Store) and s.buffer.name == name for s in walk_stmt(stmt))


def _run(func, arrays, out_shape, target=NATIVE):
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], target, f"{tmp}/k.so"))
        out = np.zeros(out_shape, np.float32)
        lib.call(func.name, *arrays, out, *[np.zeros(b.shape, b.dtype) for b in func.workspaces])
    return out


@pytest.mark.parametrize("target_name,c,size,m,k,stride,pad,attached", TARGET_CONVS)
def test_conv_bias_residual_relu_epilogue(target_name, c, size, m, k, stride, pad, attached):
    target = get_target(target_name)
    x, w = te.placeholder((1, c, size, size), "float32", "x"), te.placeholder((m, c, k, k), "float32", "w")
    b = te.placeholder((m,), "float32", "b")
    attrs = {"strides": (stride, stride), "pads": (pad,) * 4, "dilations": (1, 1), "group": 1}
    (conv,) = get_compute("Conv")([x, w, b], attrs, [])
    res = te.placeholder(conv.shape, "float32", "res")
    added = te.compute(conv.shape, lambda *i: conv(*i) + res(*i), name="add")
    relu = unary("Relu", added, {})
    sch = create_schedule([relu])
    sch[added].compute_inline()
    schedule_conv2d(sch, [relu], target)
    schedule_epilogue(sch, [relu], target)
    assert (sch[relu].attach is not None) == attached
    func = lower(sch, [x, w, b, res, relu], "k_epilogue")
    widened = conv.op.input_tensors[0].shape != relu.shape
    # Attached and of the same shape, the conv accumulates right in the output buffer.
    assert ("conv2d" in [b.name for b in func.workspaces]) == (widened or not attached)
    if attached:  # the epilogue's loops sit inside the conv's tile loop, next to its reduction
        assert any(_stores(loop, "relu") and any(isinstance(x, For) and x.var.name.startswith("rc")
                                                 for x in walk_stmt(loop))
                   for loop in walk_stmt(func.body) if isinstance(loop, For))
    if not runs_on_host(target):  # the structure above is checked on any host
        return
    rng = np.random.default_rng(c * size + m)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (x, w, b, res)]
    ref = onnx_reference("Conv", arrays[:3], {"pads": [pad] * 4, "strides": [stride] * 2})[0]
    out = _run(func, arrays, relu.shape, target)
    np.testing.assert_allclose(out, np.maximum(ref + arrays[3], 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(1, 64, 40), (6, 300, 32), (5, 7, 9)])
def test_matmul_bias_epilogue(m, k, n):
    a, bm = te.placeholder((m, k), "float32", "a"), te.placeholder((k, n), "float32", "b")
    bias = te.placeholder((n,), "float32", "bias")
    (mm,) = get_compute("MatMul")([a, bm], {}, [])
    out = te.compute(mm.shape, lambda i, j: mm(i, j) + bias(j), name="add")
    sch = create_schedule([out])
    schedule_matmul(sch, [out], NATIVE)
    schedule_epilogue(sch, [out], NATIVE)
    assert sch[out].attach is not None
    rng = np.random.default_rng(m * k)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (a, bm, bias)]
    got = _run(lower(sch, [a, bm, bias, out], "k_mm"), arrays, out.shape)
    np.testing.assert_allclose(got, arrays[0] @ arrays[1] + arrays[2], rtol=1e-4, atol=1e-4)


def test_a_consumer_that_reads_a_neighbour_cannot_be_attached():
    a, bm = te.placeholder((4, 8), "float32", "a"), te.placeholder((8, 16), "float32", "b")
    (mm,) = get_compute("MatMul")([a, bm], {}, [])
    shifted = te.compute((4, 15), lambda i, j: mm(i, j + 1), name="shift")
    sch = create_schedule([shifted])
    schedule_matmul(sch, [shifted], NATIVE)
    schedule_epilogue(sch, [shifted], NATIVE)
    assert sch[shifted].attach is None and sch[shifted].annotations  # its own (vectorized) pass
    stage = sch[mm]
    sch[shifted].reverse_compute_at(stage, stage.leaf_iter_vars[0])
    with pytest.raises(ScheduleError, match="elementwise"):
        lower(sch, [a, bm, shifted], "k_bad")
    with pytest.raises(ScheduleError, match="reduce axis"):
        sch[shifted].reverse_compute_at(stage, next(iv for iv in stage.leaf_iter_vars if iv.kind == "reduce"))


def test_a_point_map_that_lies_is_caught_when_lowering():
    a, bm = te.placeholder((4, 8), "float32", "a"), te.placeholder((8, 16), "float32", "b")
    (mm,) = get_compute("MatMul")([a, bm], {}, [])
    shifted = te.compute((4, 15), lambda i, j: mm(i, j + 1), name="shift")
    sch = create_schedule([shifted])
    schedule_matmul(sch, [shifted], NATIVE)
    stage = sch[mm]
    sch[shifted].reverse_compute_at(stage, stage.leaf_iter_vars[0], lambda at: (at, None))
    with pytest.raises(ScheduleError, match="mapped point"):
        lower(sch, [a, bm, shifted], "k_lie")
