"""MatMul over packed B: panels built at run time or packed at compile time (constant weights),
ragged M and N padded and cropped, fused epilogues, and the micro-kernel's accumulators in registers."""
from __future__ import annotations

import re
import tempfile

import numpy as np
import pytest

from core.codegen.build import assembly
from tests.backend_calls import build_library
from core.codegen.kernel_library import load_kernels
from core.graph.ir import Graph, Node, TensorType
from core.graph.ops import get_op
from core.graph.passes.pack_matmul_weights import pack_matmul_weights
from core.kernels import get_compute
from core.kernels.elementwise import unary
from core.kernels.matmul_packed import micro_rows
from core.kernels.schedules.epilogue import schedule_epilogue
from core.kernels.schedules.matmul import schedule_matmul
from core.kernels.schedules.matmul_blocked import row_block_tiles
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.packing.panels import PANEL, micro_tile, pack_weights
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule

NATIVE = get_target("native")
rng = np.random.default_rng(11)

# (A shape, B shape): whole tiles, ragged rows and columns, a batch of attention products, K in one
# pass, K blocked (1200 = 2 x 600), a short sequence (M = 32: 4-row tiles), 5-row tiles with ragged N,
# 250 row tiles in blocks of 10 (a divisor, no guarded block)
SHAPES = [((60, 64), (64, 32)), ((37, 300), (300, 29)), ((1, 2, 64, 64), (1, 2, 64, 64)),
          ((64, 512), (512, 128)), ((13, 40), (3, 40, 24)), ((20, 1200), (1200, 40)), ((32, 256), (256, 96)),
          ((50, 72), (72, 33)), ((1500, 16), (16, 24))]


def _arrays(a_shape, b_shape):
    return rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)


# The micro-tiles of packing.panels.micro_tile (panel, rows): AVX2's and NEON's, and AVX-512's. Either
# runs on any host (an 8 x 32 tile is four AVX2 vectors wide), so both are checked everywhere.
TILES = [(16, 6), (32, 8)]


@pytest.fixture(scope="module")
def runs():
    kernels, expected = [], []
    for panel, rows in TILES:
        tile = {"tile_rows": rows}
        for n, (a_shape, b_shape) in enumerate(SHAPES):
            a, b = _arrays(a_shape, b_shape)
            kernels.append(OpKernel(f"runtime{n}_{panel}", "MatMul", [a, b], {"panel": panel, **tile}))
            expected.append(a @ b)
            if len(b_shape) == 2:  # a constant weight, packed at compile time
                kernels.append(OpKernel(f"const{n}_{panel}", "MatMul", [a, pack_weights(b, panel)],
                                        {"packed_columns": b_shape[1], **tile}))
                expected.append(a @ b)
    return list(zip(kernels, build_kernels(kernels), expected))


def test_packed_products_match_numpy(runs):
    for kernel, run, want in runs:
        assert kernel.schedule is not None
        (got,) = run.run()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=kernel.name)


def test_constant_weights_are_not_packed_again(runs):
    for kernel, _, _ in runs:
        packs = [s for s in kernel.schedule.stages if s.op.tag == "matmul_pack"]
        assert bool(packs) == kernel.name.startswith("runtime"), kernel.name


def test_packed_products_use_the_requested_tile(runs):
    for kernel, _, _ in runs:
        (product,) = [s.op for s in kernel.schedule.stages if s.op.tag == "matmul"]
        assert product.attrs["panel"] == int(kernel.name.rsplit("_", 1)[1]), kernel.name


def test_micro_rows_trade_padding_for_tile_height():
    assert micro_rows(1020) == 6 and micro_rows(1024) == 6  # 1026 rows: 0.2% padding
    assert micro_rows(8) == 4 and micro_rows(12) == 6
    assert micro_rows(32) == 4 and micro_rows(50) == 5  # whole tiles beat 6-row tiles with padding
    assert micro_rows(128, 8) == 8 and micro_rows(120, 8) == 8 and micro_rows(30, 8) == 6  # AVX-512's 8 rows
    assert micro_rows(197, 8) in (6, 8) and micro_rows(16, 8) == 8


def test_short_products_run_two_tiles_or_more():
    """A single tile of several rows keeps its accumulators in memory (micro_rows): a few rows run as
    whole tiles of M's largest proper divisor, a GEMV as one row."""
    assert [micro_rows(m) for m in (1, 2, 3, 4, 5, 6)] == [1, 1, 1, 2, 1, 3]
    assert micro_rows(4, 8) == 2 and micro_rows(8, 8) == 4


def test_micro_tile_is_two_vectors_wide_and_taller_with_32_registers():
    assert micro_tile(get_target("x86-64-v3").lanes(), get_target("x86-64-v3").vector_registers) == (16, 6)
    assert micro_tile(get_target("x86-64-v4").lanes(), get_target("x86-64-v4").vector_registers) == (32, 8)
    assert micro_tile(get_target("aarch64").lanes(), get_target("aarch64").vector_registers) == (16, 6)


def test_row_blocks_prefer_a_divisor_to_a_guarded_last_block():
    assert row_block_tiles(250, 6) == 10 and row_block_tiles(33, 6) == 11 and row_block_tiles(8, 4) == 8
    assert row_block_tiles(97, 6) == 20  # prime: 20-tile blocks, the last one guarded


def test_bias_relu_epilogue_runs_in_the_tile_of_a_padded_product():
    a, bm = te.placeholder((37, 300), "float32", "a"), te.placeholder((300, 29), "float32", "b")
    bias = te.placeholder((29,), "float32", "bias")
    (mm,) = get_compute("MatMul")([a, bm], {}, [])
    added = te.compute(mm.shape, lambda i, j: mm(i, j) + bias(j), name="add")
    out = unary("Relu", added, {})
    sch = create_schedule([out])
    sch[added].compute_inline()
    schedule_matmul(sch, [out], NATIVE)
    schedule_epilogue(sch, [out], NATIVE)
    assert sch[out].attach is not None
    func = lower(sch, [a, bm, bias, out], "k_mm_epi")
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (a, bm, bias)]
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], NATIVE, f"{tmp}/k.so"))
        got = np.zeros(out.shape, np.float32)
        lib.call(func.name, *arrays, got, *[np.zeros(b.shape, b.dtype) for b in func.workspaces])
    np.testing.assert_allclose(got, np.maximum(arrays[0] @ arrays[1] + arrays[2], 0), rtol=1e-4, atol=1e-4)


def test_graph_pass_packs_constant_weights_and_keeps_semantics():
    w = rng.standard_normal((64, 40)).astype(np.float32)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    types = {"x": TensorType((8, 64), "float32"), "w": TensorType((64, 40), "float32"),
             "y": TensorType((8, 40), "float32")}
    graph = Graph(("x",), ("y",), (Node("MatMul", ("x", "w"), ("y",)),), types, {"w": w})
    packed = pack_matmul_weights(graph)
    (node,) = packed.nodes
    assert node.attr("packed_columns") == 40 and packed.constants[node.inputs[1]].shape == (3, 64, PANEL)
    op = get_op("MatMul")
    assert op.infer([packed.type_of(i) for i in node.inputs], node.attrs) == [types["y"]]
    (folded,) = op.fold([x, packed.constants[node.inputs[1]]], node.attrs)
    np.testing.assert_allclose(folded, x @ w, rtol=1e-5, atol=1e-5)


def test_graph_pass_gives_every_product_worth_packing_the_targets_tile():
    w = rng.standard_normal((64, 40)).astype(np.float32)
    types = {"x": TensorType((8, 64), "float32"), "w": TensorType((64, 40), "float32"),
             "y": TensorType((8, 40), "float32"), "z": TensorType((8, 16), "float32")}
    nodes = (Node("MatMul", ("x", "w"), ("y",)), Node("MatMul", ("y", "y_t"), ("z",)))
    types["y_t"] = TensorType((40, 16), "float32")
    graph = Graph(("x", "y_t"), ("z",), nodes, types, {"w": w})
    assert pack_matmul_weights(graph, panel=PANEL, tile_rows=6).nodes[1].attrs == {}  # the defaults: no attributes
    const, runtime = pack_matmul_weights(graph, panel=32, tile_rows=8).nodes
    assert dict(const.attrs) == {"packed_columns": 40, "tile_rows": 8}
    assert dict(runtime.attrs) == {"panel": 32, "tile_rows": 8}
    assert pack_matmul_weights(graph, panel=32, tile_rows=8).constants[const.inputs[1]].shape == (2, 64, 32)


@pytest.mark.parametrize("target_name,reg,accumulators", [("x86-64-v3", "ymm", 12), ("x86-64-v4", "zmm", 16)])
def test_micro_kernel_keeps_accumulators_in_registers(target_name, reg, accumulators):
    """The innermost loop of the target's tile: per k, 12 FMAs into 12 distinct ymm registers (AVX2, 6 x
    16) or 16 into 16 zmm (AVX-512, 8 x 32), no stores. Assembly only (nothing runs), so any host checks both."""
    target = get_target(target_name)
    panel, rows = micro_tile(target.lanes(), target.vector_registers)
    a, b = np.zeros((120, 256), np.float32), np.zeros((256, 64), np.float32)
    kernel = OpKernel("mm_asm", "MatMul", [a, pack_weights(b, panel)], {"packed_columns": 64, "tile_rows": rows})
    asm = assembly([kernel.lower(target)], target)
    blocks = re.split(r"\n\.LBB\d+_\d+:", asm)
    loop = max(blocks, key=lambda blk: blk.count("vfmadd231ps")).split("\n\tj")[0]  # up to the back edge
    fmas = re.findall(rf"vfmadd231ps\s+[^\n]*%({reg}\d+)\n", loop)
    assert len(fmas) >= accumulators and len(set(fmas)) == accumulators
    assert not re.search(rf"vmovups\s+%{reg}\d+, [^\n]*\(", loop)  # no accumulator goes back to memory


def _dense_model(m: int, k: int, n: int) -> tuple[bytes, np.ndarray]:
    """[m, k] @ a constant [k, n] + bias (a Linear layer: a classifier head, a decoder step) and an input."""
    from onnx import TensorProto, helper, numpy_helper

    w, bias = rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["y"])]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString(), rng.standard_normal((m, k)).astype(np.float32)


# (m, k, n): GEMVs and short decoder batches, k odd and n not a whole number of vectors or panels, K in
# one pass and K blocked (1283 > 1024), a classifier head's 1000 columns
SMALL_M = [(1, 333, 1001), (2, 257, 203), (3, 1283, 100), (4, 77, 1000), (1, 1283, 37)]


@pytest.mark.parametrize("m,k,n", SMALL_M, ids=["x".join(map(str, s)) for s in SMALL_M])
def test_small_m_products_over_constant_panels_match_onnxruntime(m, k, n):
    """From one row on a constant weight is packed (a GEMV streams each thread's panels contiguously),
    built for AVX2 (x86-64-v3 runs on every x86 host kind) and checked against ONNX Runtime."""
    import core
    from core.driver.validate import onnxruntime_session
    from core.frontend import import_onnx
    from tests.backend_calls import optimize

    data, x = _dense_model(m, k, n)
    (fused,) = optimize(import_onnx(data), 3, "x86-64-v3").nodes
    (product,) = [nd for nd in fused.attr("body").nodes if nd.op == "MatMul"]
    assert product.attr("packed_columns") == n
    module = core.compile(data, "x86-64-v3", 3, benchmark=False, validate=False).load()
    try:
        got = module.run({"x": x})["y"]
    finally:
        module.close()
    want = onnxruntime_session(data, 1).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("m", [1, 2, 4])
def test_short_products_with_a_bias_keep_accumulators_in_registers(m):
    """The kernel of a Linear layer on a few rows (MatMul + Add over constant panels, AVX2): its busiest loop
    stores nothing, so the accumulators of the fused product stay in registers. Assembly only."""
    from core.frontend import import_onnx
    from tests.backend_calls import extract_tasks, optimize

    target = get_target("x86-64-v3")
    data, _ = _dense_model(m, 256, 1024)
    (task,) = extract_tasks(optimize(import_onnx(data), 3, target), target)
    asm = assembly([task.instantiate(None)], target)
    loop = max(re.split(r"\n\.LBB\d+_\d+:", asm), key=lambda blk: blk.count("vfmadd")).split("\n\tj")[0]
    assert loop.count("vfmadd") >= 2 and not re.search(r"vmovups\s+%ymm\d+, [^\n]*\(", loop)
