"""The kernel registry API the graph executor uses, and properties of the default CPU schedules."""
from __future__ import annotations

import dataclasses
import tempfile

import numpy as np
import pytest

from core.backends import resolve
from core.codegen.build import build_cpu_library
from core.codegen.kernel_library import load_kernels
from core.errors import KilnError
from core.graph.ir import TensorType
from core.kernels import (MissingKernelError, get_compute, get_schedule, register_compute, register_schedule,
                          registered_ops, schedule_injective, schedule_reduce)
from core.kernels.elementwise import unary
from core.kernels.schedules.conv2d import schedule_conv2d
from tests.helpers.kernel_runs import onnx_reference
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.functor import walk_stmt
from core.tir.stmt import For, ForKind

GRAPH_OPS = """Relu Sigmoid Tanh Erf Sqrt Exp Log Neg Abs Reciprocal Floor Ceil Not IsNaN Identity Cast Clip LeakyRelu
Add Sub Mul Div Pow Max Min Equal Less Greater LessOrEqual GreaterOrEqual And Or Where Conv MaxPool AveragePool
GlobalAveragePool GlobalMaxPool MatMul Reshape Transpose Concat Slice Gather GatherElements Expand Pad ReduceSum
ReduceMean ReduceMax ReduceMin ReduceProd Softmax LogSoftmax LayerNormalization""".split()

NATIVE, CPU = resolve("native")  # the generic schedules of ops without their own are the Backend's


def kernel(op, shapes, attrs=None, out_types=None, target=NATIVE, dtype="float32"):
    """Compute + default schedule + lowering of one op, as the executor does it."""
    holders = [te.placeholder(s, dtype, f"in{k}") for k, s in enumerate(shapes)]
    outs = get_compute(op)(holders, attrs or {}, out_types or [])
    sch = create_schedule(outs)
    resolve(target)[1].schedule(op, target)(sch, outs, target)
    return lower(sch, holders + outs, f"k_{op.lower()}", num_outputs=len(outs)), sch, outs


def loop_kinds(func):
    return [s.kind for s in walk_stmt(func.body) if isinstance(s, For)]


def test_every_graph_op_has_a_compute_and_a_schedule():
    missing = [op for op in GRAPH_OPS if op not in registered_ops()]
    assert not missing
    for op in GRAPH_OPS:
        assert callable(get_compute(op)) and callable(CPU.schedule(op, NATIVE))


def test_unknown_op_is_a_typed_error():
    with pytest.raises(MissingKernelError, match="NoSuchOp") as err:
        get_compute("NoSuchOp")
    assert isinstance(err.value, KilnError) and err.value.code == "unsupported_op"


def test_registering_twice_is_refused():
    with pytest.raises(ValueError):
        register_compute("Relu")(lambda inputs, attrs, types: [])
    with pytest.raises(ValueError):
        register_schedule("Conv")(lambda sch, outs, target: None)


def test_unscheduled_op_falls_back_to_a_generic_schedule():
    @register_compute("KernelsTestOnlyTwice")
    def twice(inputs, attrs, out_types):
        x = inputs[0]
        return [te.compute(x.shape, lambda *i: x(*i) * 2.0, name="twice")]

    assert CPU.schedule("KernelsTestOnlyTwice", NATIVE) is schedule_injective
    with pytest.raises(MissingKernelError, match="KernelsTestOnlyTwice"):  # the registry alone has none for it
        get_schedule("KernelsTestOnlyTwice", NATIVE)
    assert schedule_reduce is not schedule_injective
    # The generic schedules are the caller's (its Backend's, handed down); cuda has its own; none: a clear refusal.
    cuda, cuda_backend = resolve("cuda")
    assert cuda_backend.schedule("KernelsTestOnlyTwice", cuda) is not schedule_injective
    assert get_schedule("KernelsTestOnlyTwice", cuda, cuda_backend.fallback_schedules()) is cuda_backend.schedule(
        "KernelsTestOnlyTwice", cuda)
    other = dataclasses.replace(NATIVE, kind="tpu")
    with pytest.raises(MissingKernelError, match="tpu"):
        get_schedule("KernelsTestOnlyTwice", other)


def test_optional_input_absent_is_none():
    x, s = te.placeholder((2, 8), "float32", "x"), te.placeholder((8,), "float32", "s")
    outs = get_compute("LayerNormalization")([x, s, None], {"axis": -1, "epsilon": 1e-5}, [TensorType((2, 8), "float32")])
    assert len(outs) == 1 and outs[0].shape == (2, 8)


def test_conv_schedule_is_register_tiled_and_parallel():
    func, sch, outs = kernel("Conv", [(1, 64, 56, 56), (64, 64, 3, 3)],
                             {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1})
    kinds = loop_kinds(func)
    assert ForKind.PARALLEL in kinds and ForKind.VECTORIZED in kinds and ForKind.UNROLLED in kinds
    # The padded input is its own workspace, not recomputed inside the FMA loop.
    assert [b.name for b in func.workspaces] == ["conv2d_pad"]


def test_small_ops_stay_single_threaded():
    func, _, _ = kernel("Add", [(1, 64, 128), (128,)])
    assert ForKind.PARALLEL not in loop_kinds(func) and ForKind.VECTORIZED in loop_kinds(func)
    big, _, _ = kernel("Add", [(1, 64, 56, 56), (1, 64, 56, 56)])
    assert ForKind.PARALLEL in loop_kinds(big)


def test_vector_width_follows_the_target():
    v4 = get_target("x86-64-v4")
    func, _, _ = kernel("Relu", [(4, 64)], target=v4)
    vec = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
    assert vec and all(s.extent.value == 16 for s in vec)
    func, _, _ = kernel("Relu", [(4, 64)])
    vec = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
    assert all(s.extent.value == NATIVE.lanes("float32") for s in vec)


def test_schedules_lower_for_avx512_and_compile():
    from core.codegen.build import optimized_llvm_ir

    v4 = get_target("x86-64-v4")
    funcs = [kernel("Conv", [(1, 32, 14, 14), (32, 32, 3, 3)],
                    {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}, target=v4)[0],
             kernel("MatMul", [(64, 128), (128, 96)], target=v4)[0],
             kernel("Softmax", [(2, 64, 64)], {"axis": -1}, target=v4)[0]]
    text = optimized_llvm_ir(funcs, v4)
    assert "<16 x float>" in text


def test_conv_schedule_leaves_foreign_stages_alone():
    """With an elementwise consumer after the conv (a fused epilogue), only the conv's stages change:
    the conv is tiled, its bias stage is inlined into the consumer, the consumer is untouched."""
    x, w = te.placeholder((1, 8, 10, 10), "float32", "x"), te.placeholder((8, 8, 3, 3), "float32", "w")
    b = te.placeholder((8,), "float32", "b")
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    (conv,) = get_compute("Conv")([x, w, b], attrs, [])
    relu = unary("Relu", conv, {})
    sch = create_schedule([relu])
    schedule_conv2d(sch, [relu], NATIVE)
    stage = sch[relu]
    assert stage.leaf_iter_vars == list(relu.op.axis) and not stage.annotations
    assert sch[conv].inlined
    assert sch[conv.op.input_tensors[0]].annotations  # the conv reduction itself was tiled
    func = lower(sch, [x, w, b, relu], "k_conv_relu")
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_cpu_library([func], NATIVE, f"{tmp}/k.so"))
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((1, 8, 10, 10)).astype(np.float32), rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    ba = rng.standard_normal(8).astype(np.float32)
    out = np.zeros((1, 8, 10, 10), np.float32)
    lib.call("k_conv_relu", xa, wa, ba, out, *[np.zeros(buf.shape, buf.dtype) for buf in func.workspaces])
    ref = onnx_reference("Conv", [xa, wa, ba], {"pads": [1, 1, 1, 1]})[0]
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


FUSED = [  # (op, input shapes, kiln attrs, onnx attrs): each followed by a Relu consumer in one kernel
    ("MatMul", [(2, 5, 7), (7, 9)], {}, {}),
    ("Softmax", [(3, 17)], {"axis": -1}, {"axis": -1}),
    ("LayerNormalization", [(4, 16), (16,), (16,)], {"axis": -1, "epsilon": 1e-5}, {"axis": -1}),
    ("ReduceMean", [(2, 6, 5)], {"axes": (1,), "keepdims": 1}, {"axes": [1], "keepdims": 1}),
    ("GlobalAveragePool", [(1, 4, 5, 5)], {}, {}),
    ("AveragePool", [(1, 2, 7, 7)], {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": 0,
                                     "count_include_pad": 0}, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                               "pads": [1, 1, 1, 1]}),
]


def test_op_schedules_with_a_fused_consumer():
    """Group outputs can be a consumer's: each op schedules (or inlines) only its own stages."""
    rng = np.random.default_rng(3)
    funcs, feeds, refs = [], [], []
    for k, (op, shapes, attrs, onnx_attrs) in enumerate(FUSED):
        holders = [te.placeholder(s, "float32", f"in{j}") for j, s in enumerate(shapes)]
        (out,) = get_compute(op)(holders, attrs, [])
        relu = unary("Relu", out, {})
        sch = create_schedule([relu])
        CPU.schedule(op, NATIVE)(sch, [relu], NATIVE)
        assert not sch[relu].annotations and sch[relu].leaf_iter_vars == list(relu.op.axis), op
        funcs.append(lower(sch, holders + [relu], f"fused{k}"))
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        feeds.append(arrays)
        refs.append(np.maximum(onnx_reference(op, arrays, onnx_attrs)[0], 0))
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_cpu_library(funcs, NATIVE, f"{tmp}/fused.so"))
    for func, arrays, ref, (op, *_) in zip(funcs, feeds, refs, FUSED):
        out = np.zeros(ref.shape, np.float32)
        lib.call(func.name, *arrays, out, *[np.zeros(b.shape, b.dtype) for b in func.workspaces])
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=op)


@pytest.mark.parametrize("op, shapes, attrs", [
    ("Conv", [(1, 3, 8, 8), (4, 2, 3, 3)], {"group": 1}),  # channels disagree
    ("Conv", [(1, 3, 2, 2), (4, 3, 5, 5)], {"group": 1}),  # kernel larger than the image
    ("MatMul", [(2, 3), (4, 5)], {}),
    ("Add", [(2, 3), (4, 3)], {}),
    ("Reshape", [(2, 3)], {"shape": (4, 2)}),
    ("Transpose", [(2, 3)], {"perm": (0, 0)}),
    ("Slice", [(4,)], {"starts": (2,), "steps": (1,), "sizes": (3,)}),
    ("Pad", [(2, 3)], {"pads": (0, 3, 0, 0), "mode": "reflect"}),
    ("Pad", [(2, 3)], {"pads": (0, 0), "mode": "constant"}),
    ("ReduceSum", [(2, 3)], {"axes": (2,)}),
    ("LayerNormalization", [(2, 3), (3,)], {"axis": 2}),
])
def test_bad_shapes_and_attributes_are_shape_errors(op, shapes, attrs):
    from core.errors import ShapeError

    with pytest.raises(ShapeError, match=op.replace("Normalization", "")):
        get_compute(op)([te.placeholder(s, "float32", f"in{k}") for k, s in enumerate(shapes)], attrs, [])
