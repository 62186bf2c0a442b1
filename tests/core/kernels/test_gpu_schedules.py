"""cuda schedules per op family: each kernel lowered with the cuda compute and schedule, run on this
CPU (serial emulation of the threads) against ONNX Runtime on divisible and non-divisible shapes,
and its PTX assembled by ptxas for sm_80 and sm_90."""
from __future__ import annotations

import numpy as np
import pytest

from core.codegen.nvptx import launch_config
from core.graph.ir import TensorType
from core.backends.cuda.schedules.conv2d import schedule_conv2d
from core.backends.cuda.schedules.dense import schedule_matmul
from core.backends.cuda.schedules.launch import UnsupportedOnGPUError
from core.tir.functor import walk_stmt
from core.tir.stmt import Allocate, Barrier

from .test_gpu_harness import assemble_all, check_ops, f32, lower_gpu, needs_ptxas, rng


def same(op, inputs, attrs=None, onnx_attrs=None):
    """A case whose ONNX node takes the same inputs (and attributes, unless given)."""
    attrs = dict(attrs or {})
    return (op, list(inputs), attrs, [a for a in inputs], dict(attrs if onnx_attrs is None else onnx_attrs))


def conv(n, c, h, w, m, k, s=1, p=0, g=1, d=1, bias=True):
    x, wt = f32(n, c, h, w), f32(m, c // g, k, k)
    ins = [x, wt, f32(m)] if bias else [x, wt]
    attrs = {"strides": (s, s), "pads": (p,) * 4, "dilations": (d, d), "group": g}
    onnx = {"strides": [s, s], "pads": [p] * 4, "dilations": [d, d], "group": g, "kernel_shape": [k, k]}
    return ("Conv", ins, attrs, ins, onnx)


INJECTIVE = [
    same("Relu", [f32(3, 50, 70)]),
    same("Add", [f32(4, 33, 7), f32(33, 1)]),
    same("Transpose", [f32(2, 3, 17, 5)], {"perm": (0, 2, 3, 1)}, {"perm": [0, 2, 3, 1]}),
    same("Concat", [f32(2, 3, 5), f32(2, 4, 5)], {"axis": 1}),
    ("Gather", [f32(10, 6), np.array([[1, 9], [0, 3]], np.int64)], {"axis": 0},
     None, {"axis": 0}),
]
REDUCE = [
    same("ReduceMean", [f32(2, 5, 7)], {"axes": (1,), "keepdims": 1}, {"axes": [1], "keepdims": 1}),
    same("ReduceMax", [f32(6, 700)], {"axes": (1,), "keepdims": 1}, {"axes": [1], "keepdims": 1}),  # cooperative
    same("ReduceMean", [f32(3, 300, 4)], {"axes": (1,), "keepdims": 0}, {"axes": [1], "keepdims": 0}),  # strided
    same("GlobalAveragePool", [f32(1, 64, 7, 7)]),
    same("GlobalAveragePool", [f32(2, 6, 30, 31)]),  # 930 per output: a block each
    same("MaxPool", [f32(1, 4, 13, 13)], {"kernel": (3, 3), "strides": (2, 2), "ceil_mode": 1},
         {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    same("MaxPool", [f32(1, 3, 16, 16)], {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    same("AveragePool", [f32(1, 2, 9, 9)], {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
]
CONV = [
    conv(1, 16, 16, 16, 32, 3, 1, 1),  # tiles divide
    conv(1, 16, 14, 14, 40, 3, 1, 1),  # 40 channels, 14 columns: partial tiles
    conv(1, 3, 23, 23, 20, 7, 2, 3),  # stem-like: stride 2, pad 3, odd sizes
    conv(2, 6, 11, 9, 10, 3, 2, 2, d=2),  # implicit GEMM: dilated, strided, batch 2, K = 54
    conv(1, 8, 9, 11, 24, 1, bias=False),  # pointwise
    conv(1, 24, 13, 13, 48, 1, 2),  # strided pointwise
    conv(1, 12, 15, 15, 12, 3, 2, 1, g=12),  # depthwise, stride 2
    conv(1, 32, 28, 28, 32, 3, 1, 1, g=32),  # depthwise
    conv(2, 8, 10, 10, 16, 3, 1, 2, g=2, d=2),  # grouped, dilated, batch 2
    conv(1, 4, 8, 8, 6, 3, 1, 1, g=2),  # grouped, 3 outputs per group: the direct schedule
]
MATMUL = [
    same("MatMul", [f32(64, 128), f32(128, 128)]),
    same("MatMul", [f32(37, 50), f32(50, 29)]),
    same("MatMul", [f32(2, 64, 32), f32(2, 32, 64)]),
    same("MatMul", [f32(3, 1, 5, 7), f32(2, 7, 9)]),  # broadcast batch
    same("MatMul", [f32(1, 512), f32(512, 100)]),  # one row: the split-k matrix-vector schedule
    same("MatMul", [f32(2, 1, 200), f32(200, 70)]),  # two rows, k = 200 not a multiple of the split
    same("MatMul", [f32(7, 9), f32(9)]),  # matrix-vector
]
ROWS = [
    same("Softmax", [f32(2, 64, 64)], {"axis": -1}),
    same("Softmax", [f32(3, 100, 5)], {"axis": 1}),  # not the last axis
    same("LogSoftmax", [f32(4, 37)], {"axis": -1}),
    same("Softmax", [f32(1000)], {"axis": 0}),  # one row
    same("LayerNormalization", [f32(64, 128) + 2, f32(128), f32(128)], {"axis": -1, "epsilon": 1e-5}),
    same("LayerNormalization", [f32(3, 5, 6, 7) + 3, f32(6, 7)], {"axis": 2}),
]
FAMILIES = {"injective": INJECTIVE, "reduce": REDUCE, "conv": CONV, "matmul": MATMUL, "rows": ROWS}


def _fixed(cases):
    return [(op, ins, attrs, ins if onnx_ins is None else onnx_ins, onnx_attrs)
            for op, ins, attrs, onnx_ins, onnx_attrs in cases]


@pytest.fixture(scope="module")
def kernels():
    """Every family's kernels, checked against ONNX Runtime once (one build per family)."""
    return {family: check_ops(_fixed(cases), rtol=1e-4, atol=1e-4) for family, cases in FAMILIES.items()}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_matches_onnxruntime(kernels, family):
    assert len(kernels[family]) == len(FAMILIES[family])


@needs_ptxas
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_ptx_assembles(kernels, family):
    assemble_all(kernels[family])


def _shared(func):
    return [s.buffer for s in walk_stmt(func.body) if isinstance(s, Allocate) and s.buffer.scope == "shared"]


def _conv_checked(funcs, x, w, onnx_attrs):
    from tests.helpers.kernel_runs import onnx_reference

    from .test_gpu_harness import run_on_cpu

    (want,) = onnx_reference("Conv", [x, w], onnx_attrs)
    for (got,) in run_on_cpu(funcs, [[x, w]] * len(funcs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_1_conv_is_an_implicit_gemm_tiled_in_shared_memory_with_register_tiles():
    """A 3x3 conv: output channels x flattened pixels, reduced over C*KH*KW as dense.py's float32 GEMM."""
    x, w = f32(1, 16, 16, 16), f32(32, 16, 3, 3)
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    func = lower_gpu("tiles", "Conv", [x, w], attrs, [TensorType((1, 32, 16, 16), "float32")], schedule_conv2d,
                     f_threads=4, f_reg=2, p_threads=32, p_reg=2, rc_tile=8)
    assert launch_config(func).block == (32, 4, 1)  # pixels x channels
    assert sorted(b.name.split(".")[-1] for b in _shared(func)) == ["shared", "shared"]
    assert any(isinstance(s, Barrier) for s in walk_stmt(func.body))
    local = [s.buffer for s in walk_stmt(func.body) if isinstance(s, Allocate) and s.buffer.scope == "local"]
    assert local and local[0].numel == 4  # each thread accumulates 2 channels x 2 pixels
    _conv_checked([func], x, w, {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]})


def test_depthwise_conv_tiles_channels_rows_and_columns():
    x, w = f32(1, 16, 16, 16), f32(16, 1, 3, 3)
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 16}
    func = lower_gpu("dw", "Conv", [x, w], attrs, [TensorType((1, 16, 16, 16), "float32")], schedule_conv2d,
                     f_threads=4, f_reg=2, y_threads=4, y_reg=1, x_threads=8, x_reg=2, rc_tile=1)
    assert launch_config(func).block == (8, 4, 4)  # columns x rows x channels
    assert len(_shared(func)) == 2
    _conv_checked([func], x, w, {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3], "group": 16})


def test_matmul_knobs_change_the_launch_and_keep_results():
    a, b = f32(48, 40), f32(40, 72)
    types = [TensorType((48, 72), "float32")]
    small = lower_gpu("mm_small", "MatMul", [a, b], {}, types, schedule_matmul,
                      m_threads=4, m_reg=1, n_threads=8, n_reg=1, k_tile=8)
    big = lower_gpu("mm_big", "MatMul", [a, b], {}, types, schedule_matmul,
                    m_threads=8, m_reg=4, n_threads=8, n_reg=4, k_tile=16)
    assert launch_config(small).block == (8, 4, 1) and launch_config(big).block == (8, 8, 1)
    from .test_gpu_harness import run_on_cpu

    for (got,) in run_on_cpu([small, big], [[a, b], [a, b]]):
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_conv_knobs_keep_results():
    x, w = f32(1, 10, 12, 12), f32(20, 10, 3, 3)
    types = [TensorType((1, 20, 12, 12), "float32")]
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    funcs = [lower_gpu(f"cv{k}", "Conv", [x, w], attrs, types, schedule_conv2d, **knobs) for k, knobs in enumerate([
        dict(f_threads=4, f_reg=4, p_threads=16, p_reg=4, rc_tile=7),  # K = 90: a partial last k tile
        dict(f_threads=2, f_reg=1, p_threads=64, p_reg=1, rc_tile=32)])]
    _conv_checked(funcs, x, w, {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]})


def test_single_row_matmul_splits_the_reduction(kernels):
    launch = launch_config(kernels["matmul"][4])  # (1, 512) @ (512, 100)
    assert launch.block == (32, 16, 1) and launch.grid == (4, 1, 1)


def test_row_ops_reduce_cooperatively(kernels):
    func = kernels["rows"][0]  # Softmax over rows of 64: a block per row
    assert launch_config(func).grid == (128, 1, 1)
    assert sum(isinstance(s, Barrier) for s in walk_stmt(func.body)) >= 2 * 6  # partial + tree levels


def test_extern_stages_are_refused_on_cuda():
    x = rng.standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(UnsupportedOnGPUError, match="not supported on cuda"):
        lower_gpu("scan", "CumSum", [x], {"axis": 1}, [TensorType(x.shape, "float32")])
