"""Fused Conv groups compiled for cuda become the implicit-GEMM convolution on tensor cores (conv_group.py): a
float16 model's convs, and a float32 model's under `--precision fp16|bf16`; the kernel the model compiles to, run
by the CPU emulation of its threads on the model's own weights, matches ONNX Runtime at the half format's
tolerance; its PTX has mma.sync and ldmatrix and ptxas takes it; convs it cannot take keep their loops."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.driver.precision import store_weights
from core.frontend import import_onnx
from core.kernels.gemm_plan.kernel_attr import gemm_of
from core.backends.cuda.schedules.gemm_mma_emulate import emulate
from core.lowering.executable import group_inputs
from core.target import get_target
from tests.backend_calls import backend_of, build_executable, optimize
from tests.helpers.onnx_models import make_model

rng = np.random.default_rng(37)
ONNX_TYPES = {np.float16: onnx.TensorProto.FLOAT16, np.float32: onnx.TensorProto.FLOAT}


def conv_model(dtype, channels=32, size=10, out_channels=48, kernel=3, stride=1, pad=1, group=1,
               tail=("Relu",), own_bias=True) -> onnx.ModelProto:
    """x [2, C, size, size] -> Conv (with its bias unless not `own_bias`) -> `tail`: "residual" (+ input r of the output's shape), "bias2"
    (+ a per-channel [OC, 1, 1] constant), or an op name."""
    out = (size + 2 * pad - kernel) // stride + 1
    t = ONNX_TYPES[dtype]
    w = numpy_helper.from_array((rng.standard_normal((out_channels, channels // group, kernel, kernel)) * 0.1)
                                .astype(dtype), "w")
    b = numpy_helper.from_array((rng.standard_normal(out_channels) * 0.1).astype(dtype), "b")
    b2 = numpy_helper.from_array((rng.standard_normal((out_channels, 1, 1)) * 0.1).astype(dtype), "b2")
    inputs = [helper.make_tensor_value_info("x", t, [2, channels, size, size])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"][:3 if own_bias else 2], ["t0"], pads=[pad] * 4, strides=[stride] * 2, group=group)]
    current = "t0"
    for step, what in enumerate(tail, 1):
        if what == "residual":
            inputs.append(helper.make_tensor_value_info("r", t, [2, out_channels, out, out]))
            nodes.append(helper.make_node("Add", ["r", current], [f"t{step}"]))
        elif what == "bias2":
            nodes.append(helper.make_node("Add", [current, "b2"], [f"t{step}"]))
        elif what == "relu6":  # mobilenet's ReLU6: Clip with its bounds as constant inputs
            nodes.append(helper.make_node("Clip", [current, "zero", "six"], [f"t{step}"]))
        else:
            nodes.append(helper.make_node(what, [current], [f"t{step}"]))
        current = f"t{step}"
    nodes.append(helper.make_node("Identity", [current], ["y"]))
    bounds = [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (("zero", 0), ("six", 6))]
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", t, [2, out_channels, out, out])],
                              [w, b, b2, *bounds])
    return make_model(graph)


def compiled(model: onnx.ModelProto, precision: str, requested: bool, arch: str = "sm_80"):
    """The graph and executable as the pipeline makes them (weights stored at `precision`)."""
    target = get_target(f"cuda -arch={arch}")
    graph = optimize(import_onnx(model.SerializeToString()), 3, target)
    graph = store_weights(graph, precision, requested, backend_of(target).weight_storage_dtypes(target), target)
    return graph, build_executable(graph, target), target


def emulated(graph, exe, feeds: dict) -> np.ndarray:
    """The model's one conv kernel emulated on its own arrays (a float16 model's input: widened first)."""
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    problem, cfg, where = gemm_of(func)
    (fused,) = [n for n in graph.nodes if n.op == "Fused"]
    values = group_inputs(list(fused.attr("body").nodes))
    widened = {f"{k}_f32": v.astype(np.float32) for k, v in feeds.items()}
    arrays = [np.asarray(graph.constants[v]) if v in graph.constants else {**feeds, **widened}[v] for v in values]
    role = {r: arrays[i] for r, i in where.items() if r not in ("c", "workspace")}
    extras = {r: role[r].astype(np.float32).ravel() if r == "bias" else role[r].astype(np.float32)
              for r in ("bias", "residual") if r in role}
    a = role["a"] if role["a"].dtype == np.float32 else role["a"].view(np.uint16)
    assert role["b"].dtype.itemsize == 2  # the half weight as stored: the kernel's B as it is
    return emulate(problem, cfg, a, role["b"].reshape(problem.n, problem.k).view(np.uint16), extras), problem


@pytest.mark.parametrize("shape,tail", [
    (dict(), ("Relu",)),
    (dict(kernel=1, pad=0), ("residual", "Relu")),
    (dict(stride=2, size=11), ("Sigmoid",)),
    (dict(channels=16, out_channels=64, own_bias=False), ("bias2", "Relu")),
    (dict(channels=16, out_channels=1024, kernel=1, pad=0, size=4), ("residual", "Relu")),
    (dict(channels=16), ("relu6",)),
], ids=["3x3", "1x1-residual", "3x3s2", "second-bias", "narrow-bias", "relu6"])
def test_a_float16_models_conv_runs_on_the_implicit_gemm_and_matches_onnxruntime(shape, tail):
    model = conv_model(np.float16, tail=tail, **shape)
    graph, exe, _ = compiled(model, "fp16", False)
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    scale = 4 if "relu6" in tail else 1  # sums beyond 6 for the clip to cut
    feeds = {k: (rng.standard_normal(s) * scale).astype(np.float16) for k, s in inputs.items()}
    got, problem = emulated(graph, exe, feeds)
    assert problem.conv is not None and problem.dtype == "float16" and problem.out_dtype == "float16"
    steps = ["bias"] * shape.get("own_bias", True) + [{"bias2": "bias"}.get(t, t.lower()) for t in tail]
    assert list(problem.epilogue) == steps
    if shape.get("out_channels") == 1024:  # 1024 bias values: a weight stored narrow, widened by a Cast in the group
        assert problem.bias_stored == "float16"  # the kernel reads it as stored
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got.astype(np.float16).astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_float32_model_at_half_precision_computes_its_conv_in_half(precision):
    """`--precision fp16|bf16`: weights stored narrow are B as they are, the float32 input is rounded as it is
    copied, sums stay float32, the output stays float32; within that format's tolerance of ONNX Runtime."""
    model = conv_model(np.float32, tail=("residual", "Relu"))
    graph, exe, _ = compiled(model, precision, True)
    feeds = {"x": rng.standard_normal((2, 32, 10, 10)).astype(np.float32),
             "r": rng.standard_normal((2, 48, 10, 10)).astype(np.float32)}
    got, problem = emulated(graph, exe, feeds)
    half = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    assert (problem.dtype, problem.a_stored, problem.out_dtype) == (half, "float32", "float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    tolerance = 1e-2 if precision == "fp16" else 4e-2
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_a_conv_with_few_tiles_over_a_deep_k_splits_k_and_matches_onnxruntime():
    """A layer4-like conv of few output tiles (M = 2*4*4, N = 64) over K = 128*9 on sm_90's 132 SMs: split along K into
    a float32 workspace (a kernel parameter the model's arena holds), the parts summed with the epilogue by the
    `_reduce` companion launched right after; emulated, it matches ONNX Runtime; ptxas takes both kernels."""
    from core.codegen.build_cuda import render_tables
    from core.codegen.nvptx import split_reduce_name

    model = conv_model(np.float16, channels=128, size=4, out_channels=64, tail=("residual", "Relu"))
    graph, exe, target = compiled(model, "fp16", False, "sm_90")
    feeds = {"x": rng.standard_normal((2, 128, 4, 4)).astype(np.float16),
             "r": rng.standard_normal((2, 64, 4, 4)).astype(np.float16)}
    got, problem = emulated(graph, exe, feeds)
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    _, cfg, where = gemm_of(func)
    assert cfg.split_k == 4 and func.workspaces[0].shape == (4, problem.m, problem.n)
    assert where["workspace"] == len(func.params) - 1
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got.astype(np.float16).astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
    ptx, launches = emit_ptx(list(exe.funcs), target)
    reduce = split_reduce_name(func.name)
    assert launches[func.name].grid[2] == 4  # the parts: blockIdx.z
    assert launches[reduce].block[0] * launches[reduce].grid[0] >= problem.m * problem.n // 2  # a thread per pair
    tables = render_tables(exe.plan, list(exe.funcs), ptx, launches, target)
    assert f'"{reduce}"' in tables and f"kiln_graph_num_calls = {len(exe.plan.calls) + 1};" in tables
    if find_ptxas() is not None:
        _, usage = assemble_with_usage(ptx, "sm_90")
        assert usage[func.name]["spill_stores"] == 0 and usage[reduce]["spill_stores"] == 0


def test_convs_the_implicit_gemm_does_not_take_keep_their_loops():
    """A float32 compile, sm_75 (no cp.async), a grouped conv, 3 input channels (K = 27 and too few channels), a
    second bias after the conv's own."""
    assert not any(gemm_of(f) for f in compiled(conv_model(np.float32), "fp32", False)[1].funcs)
    assert not any(gemm_of(f) for f in compiled(conv_model(np.float16), "fp16", False, "sm_75")[1].funcs)
    assert not any(gemm_of(f) for f in compiled(conv_model(np.float16, group=2), "fp16", False)[1].funcs)
    assert not any(gemm_of(f) for f in compiled(conv_model(np.float16, channels=3), "fp16", False)[1].funcs)
    assert not any(gemm_of(f) for f in compiled(conv_model(np.float16, tail=("bias2",)), "fp16", False)[1].funcs)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
def test_the_model_ptx_runs_the_conv_on_tensor_cores():
    graph, exe, target = compiled(conv_model(np.float16, tail=("residual", "Relu")), "fp16", False, "sm_90")
    ptx, launches = emit_ptx(list(exe.funcs), target)
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    _, cfg, _ = gemm_of(func)
    assert launches[func.name].block == (cfg.threads, 1, 1)
    for instruction in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global",
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"):
        assert instruction in ptx
    _, usage = assemble_with_usage(ptx, "sm_90")
    assert usage[func.name]["spill_stores"] == 0 and usage[func.name]["shared_bytes"] == cfg.shared_bytes


def test_activations_between_tensor_core_groups_stay_half_with_the_same_results():
    """A float16 model's conv -> relu -> conv -> relu: without half_activations the first kernel writes float32
    and the second rounds it to float16 as it copies; with it the first writes float16 and the second reads it
    as it is (and the first reads the half input, its Cast kernel gone): the same numbers (emulated), within
    float16 tolerance of ONNX Runtime, half the bytes between."""
    from core.backends.cuda.schedules.half_activations import half_activations

    f16 = onnx.TensorProto.FLOAT16
    w1 = numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float16), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 32, 1, 1)) * 0.1).astype(np.float16), "w2")
    model = make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4), helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("Conv", ["b", "w2"], ["c"]), helper.make_node("Relu", ["c"], ["y"])], "chain",
        [helper.make_tensor_value_info("x", f16, [2, 16, 8, 8])], [helper.make_tensor_value_info("y", f16, [2, 64, 8, 8])],
        [w1, w2]))
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float16)
    graph, _, target = compiled(model, "fp16", False)
    results = {}
    for label, g in (("float32 between", graph), ("half between", half_activations(graph, target))):
        exe = build_executable(g, target)
        first, second = [f for f in exe.funcs if gemm_of(f) is not None]
        fused = [n for n in g.nodes if n.op == "Fused"]
        between = fused[0].outputs[0]
        results[label] = (g.type_of(between).dtype, gemm_of(first)[0].out_dtype, gemm_of(second)[0].a_stored)
        arrays = {"x": x, "x_f32": x.astype(np.float32), **{k: np.asarray(v) for k, v in g.constants.items()}}
        for node, func in zip(fused, (first, second)):
            problem, cfg, where = gemm_of(func)
            values = group_inputs(list(node.attr("body").nodes))
            a = arrays[values[where["a"]]]
            a = a if a.dtype == np.float32 else a.view(np.uint16)
            b = arrays[values[where["b"]]].reshape(problem.n, problem.k).view(np.uint16)
            out = emulate(problem, cfg, a, b)
            arrays[node.outputs[0]] = out.astype(np.float16 if problem.out_dtype == "float16" else np.float32)
        results[label] += (arrays[fused[1].outputs[0]].astype(np.float32),)
    assert results["float32 between"][:3] == ("float32", "float32", "float32")
    assert results["half between"][:3] == ("float16", "float16", "float16")
    np.testing.assert_array_equal(results["float32 between"][3], results["half between"][3])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(results["half between"][3], want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_a_value_also_read_as_a_residual_or_on_sm_75_stays_float32():
    """--precision fp16 on a float32 residual block: the Add reads its operand in float32 (rounding it would
    change the result), so it stays float32; a float16 model's Cast kernel feeding a conv that also reads the
    half value as its residual stays too; sm_75 has no tensor-core groups: the graphs are left as they are."""
    from core.backends.cuda.schedules.half_activations import half_activations

    for dtype, precision, requested in ((np.float32, "fp16", True), (np.float16, "fp16", False)):
        t = ONNX_TYPES[dtype]
        w1 = numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(dtype), "w1")
        w2 = numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(dtype), "w2")
        model = make_model(helper.make_graph(
            [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1] * 4), helper.make_node("Add", ["c", "b"], ["y"])],
            "block", [helper.make_tensor_value_info("x", t, [2, 16, 8, 8])],
            [helper.make_tensor_value_info("y", t, [2, 32, 8, 8])], [w1, w2]))
        for arch in ("sm_80", "sm_75"):
            graph, exe, target = compiled(model, precision, requested, arch)
            assert len([f for f in exe.funcs if gemm_of(f)]) == (2 if arch == "sm_80" else 0)
            rewritten = half_activations(graph, target)
            if dtype == np.float32 or arch == "sm_75":
                assert rewritten is graph
            else:  # only the input's Cast goes: conv1 reads x itself; b's stays (conv2's residual reads b too)
                assert [(n.op, n.inputs[0]) for n in rewritten.nodes if n.op == "Cast"] == [("Cast", "b")]


def test_a_cast_kernel_of_a_half_value_into_a_conv_is_skipped():
    """A float16 model's Cast of a half activation to float32 that only a tensor-core conv reads (as A): the conv
    reads the half value itself (what it rounded the float32 copy back to anyway) and the Cast kernel goes."""
    from core.backends.cuda.schedules.half_activations import half_activations

    model = conv_model(np.float16, tail=("Relu",))
    graph, _, target = compiled(model, "fp16", False)
    assert [n.op for n in graph.nodes] == ["Cast", "Fused"]
    rewritten = half_activations(graph, target)
    assert [n.op for n in rewritten.nodes] == ["Fused"]
    (func,) = build_executable(rewritten, target).funcs
    problem = gemm_of(func)[0]
    assert problem.a_stored == "float16" and problem.conv is not None
    feeds = {"x": rng.standard_normal((2, 32, 10, 10)).astype(np.float16)}
    got, _ = emulated(rewritten, build_executable(rewritten, target), feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got.astype(np.float16).astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_taps_to_add_makes_k_whole_16_byte_rows_within_a_quarter_more_work():
    from core.backends.cuda.schedules.conv_taps import taps_to_add

    assert taps_to_add(3, 7, 7) == 1  # resnet's stem: K 147 -> 168
    assert taps_to_add(6, 7, 7) == 1  # 294 -> 336
    assert taps_to_add(16, 3, 3) is None  # K 144 already is
    assert taps_to_add(3, 3, 3) is None  # K 27 -> 72: the zero taps would be most of the work
    assert taps_to_add(3, 11, 11) is None  # 363 -> 528


def stem_model(dtype, batch: int = 2, size: int = 20) -> onnx.ModelProto:
    """resnet's stem: a 7x7 stride-2 conv of 3 channels (K = 147), pads 3, with bias, then Relu."""
    return conv_model(dtype, channels=3, size=size, out_channels=64, kernel=7, stride=2, pad=3)


@pytest.mark.parametrize("dtype,precision", [(np.float16, "fp16"), (np.float32, "fp16"), (np.float32, "bf16")])
def test_a_stem_conv_of_3_channels_runs_on_the_implicit_gemm_with_a_zero_tap_per_kernel_row(dtype, precision):
    """The cuda backend's finish_graph gives the 7x7 kernel an 8th, zero column and one more column of right
    padding: K = 3 * 7 * 8 = 168, whole 16-byte rows; the same convolution (the reference interpreter on the graph
    before and after), on the tensor cores, emulated within the half format's tolerance of ONNX Runtime."""
    from core.backends.cuda.schedules.conv_taps import widen_kernel_rows
    from core.graph.interpret import evaluate

    model = stem_model(dtype)
    graph, exe, target = compiled(model, precision, dtype == np.float32)
    assert not any(gemm_of(f) for f in exe.funcs)
    widened = widen_kernel_rows(graph, target)
    (fused,) = [n for n in widened.nodes if n.op == "Fused"]
    (conv,) = [n for n in fused.attr("body").nodes if n.op == "Conv"]
    assert tuple(conv.attr("pads")) == (3, 3, 3, 4)
    feeds = {"x": rng.standard_normal((2, 3, 20, 20)).astype(dtype)}
    before, after = evaluate(graph, feeds), evaluate(widened, feeds)
    np.testing.assert_allclose(after["y"].astype(np.float32), before["y"].astype(np.float32), rtol=1e-3, atol=1e-3)
    finished = backend_of(target).finish_graph(graph, target)
    exe = build_executable(finished, target)
    got, problem = emulated(finished, exe, feeds)
    assert problem.conv is not None and problem.k == 168 and list(problem.epilogue) == ["bias", "relu"]
    if find_ptxas() is not None:
        ptx, _ = emit_ptx(list(exe.funcs), target)
        assert "mma.sync.aligned.m16n8k16" in ptx
        assert all(u["spill_stores"] == 0 for u in assemble_with_usage(ptx, "sm_80")[1].values())
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    tolerance = 4e-2 if precision == "bf16" else 1e-2
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tolerance, atol=tolerance)


def test_a_float32_compile_or_sm_75_leaves_the_stem_conv_as_it_is():
    from core.backends.cuda.schedules.conv_taps import widen_kernel_rows

    for precision, arch in (("fp32", "sm_80"), ("fp16", "sm_75")):
        graph, _, target = compiled(stem_model(np.float32), precision, precision != "fp32", arch)
        assert widen_kernel_rows(graph, target) is graph


def test_a_maxpool_group_ending_in_a_widening_cast_ends_half_for_the_convs_reading_it():
    """A float16 model's MaxPool (computed in half, then widened) read only by tensor-core convs as their A, as
    resnet's first block reads it: its group ends in the half value (the Cast a copy) and the convs read it so;
    the pool's body gives the half maximum (reference interpreter) and the conv matches ONNX Runtime, emulated."""
    from core.backends.cuda.schedules.half_activations import half_activations
    from core.graph.interpret import evaluate

    f16 = onnx.TensorProto.FLOAT16
    w = numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float16), "w")
    model = make_model(helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Conv", ["p", "w"], ["c"], pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"])], "pool",
        [helper.make_tensor_value_info("x", f16, [2, 16, 12, 12])], [helper.make_tensor_value_info("y", f16, [2, 32, 6, 6])],
        [w]))
    graph, _, target = compiled(model, "fp16", False)
    rewritten = half_activations(graph, target)
    pool, conv = [n for n in rewritten.nodes if n.op == "Fused"]
    assert rewritten.type_of(pool.outputs[0]).dtype == "float16" and graph.type_of(pool.outputs[0]).dtype == "float32"
    x = rng.standard_normal((2, 16, 12, 12)).astype(np.float16)
    pooled = x.reshape(2, 16, 6, 2, 6, 2).max(axis=(3, 5))
    body = pool.attr("body")  # what the pool kernel computes: the half maximum, copied
    np.testing.assert_array_equal(evaluate(body, {body.inputs[0]: x})[pool.outputs[0]], pooled)
    exe = build_executable(rewritten, target)
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    problem, cfg, where = gemm_of(func)
    assert problem.a_stored == "float16"
    if find_ptxas() is not None:  # the pool kernel's half-to-half Cast too
        assemble_with_usage(emit_ptx(list(exe.funcs), target)[0], target.cpu)
    got = emulate(problem, cfg, pooled.view(np.uint16), np.asarray(rewritten.constants[
        group_inputs(list(conv.attr("body").nodes))[where["b"]]]).reshape(problem.n, problem.k).view(np.uint16))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
