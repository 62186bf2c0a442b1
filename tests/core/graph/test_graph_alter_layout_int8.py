"""alter_layout's 8-bit rules: a quantized 1x1 -> depthwise -> 1x1 block (MobileNetV2's) runs channels-last between
its convs, a lone packed conv stays NCHW, and the compiled block matches the exact integer reference."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.reference import EXACT_REFERENCE, reference_outputs
from tests.backend_calls import runs_on_host
from core.target import get_target

HOST_TARGETS = [spec for spec in ("x86-64-v3", "native") if runs_on_host(get_target(spec))]
rng = np.random.default_rng(5)


def qlinear_conv(name, x, channels_in, channels_out, kernel, group=1, stride=1, inits=None):
    """QLinearConv with per-channel s8 weights (zero 0), u8 data and output; appends its constants to inits."""
    w = rng.integers(-128, 128, (channels_out, channels_in // group, kernel, kernel)).astype(np.int8)
    consts = {f"{name}_xs": np.array(0.02, np.float32), f"{name}_xz": np.array(rng.integers(0, 256), np.uint8),
              f"{name}_w": w, f"{name}_ws": (rng.random(channels_out) * 0.004 + 0.001).astype(np.float32),
              f"{name}_wz": np.zeros(channels_out, np.int8), f"{name}_ys": np.array(0.05, np.float32),
              f"{name}_yz": np.array(rng.integers(0, 256), np.uint8),
              f"{name}_b": rng.integers(-3000, 3000, channels_out).astype(np.int32)}
    inits.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    pad = kernel // 2
    return helper.make_node("QLinearConv", [x, *consts], [name], group=group, strides=[stride, stride],
                            pads=[pad] * 4, kernel_shape=[kernel, kernel])


def model(blocks: int, stride: int = 1) -> onnx.ModelProto:
    inits: list = []
    nodes = [qlinear_conv("expand", "x", 8, 32, 1, inits=inits)]
    if blocks:
        nodes.append(qlinear_conv("depthwise", "expand", 32, 32, 3, group=32, stride=stride, inits=inits))
        nodes.append(qlinear_conv("project", "depthwise", 32, 16, 1, inits=inits))
    size = 12 // stride if blocks else 12
    out = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.UINT8,
                                        [1, 16 if blocks else 32, size, size])
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 12, 12])],
                              [out], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def kernel_ops(artifact) -> list[str]:
    return [op for k in artifact.report["kernels"] for op in k["ops"]]


@pytest.mark.parametrize("spec", HOST_TARGETS)
@pytest.mark.parametrize("stride", [1, 2])
def test_quantized_block_runs_channels_last_and_matches_the_exact_reference(spec, stride):
    m = model(1, stride)
    artifact = core.compile(m, target=spec, opt_level=3)
    ops = kernel_ops(artifact)
    assert ops.count("ConvIntegerPackedNCHWc") == 2 and "DepthwiseConvIntegerNCHWc" in ops, ops
    assert ops.count("LayoutTransform") == 1, ops  # only back to NCHW at the graph's output
    x = rng.integers(0, 256, (1, 8, 12, 12)).astype(np.uint8)
    x[0, :, 0, :] = 255  # saturated rows at the top border
    ours = artifact.load().run({"x": x})["project"].astype(np.int32)
    want = reference_outputs(m, {"x": x})["project"]
    steps = np.abs(ours - want.astype(np.int32))
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.999, (steps.max(), np.mean(steps == 0))
    assert artifact.report["validation"]["reference"] == EXACT_REFERENCE


def test_a_lone_packed_conv_stays_nchw():
    artifact = core.compile(model(0), target="x86-64-v3", opt_level=3, validate=bool(HOST_TARGETS))
    ops = kernel_ops(artifact)
    assert "ConvIntegerPacked" in ops and "LayoutTransform" not in ops, ops


@pytest.mark.slow
def test_quantized_block_under_qemu_runs_sdot_channels_last_exactly():
    artifact = core.compile(model(1, 2), target="rpi5", opt_level=3)
    validation = artifact.report["validation"]
    assert validation.get("passed") and validation["max_abs_err"] == 0.0, validation
    assert "DepthwiseConvIntegerNCHWc" in kernel_ops(artifact)
