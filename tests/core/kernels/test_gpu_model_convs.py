"""Every convolution of the reference convnets in half precision compiles for cuda sm_90 to the tensor-core
implicit GEMM with its epilogue fused (a conv that falls off it fails here, by name); the kernels' numbers are
checked against ONNX Runtime by test_gpu_conv_group.py and test_gpu_conv_mma.py."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from core.backends.cuda.schedules.conv2d_pointwise import is_implicit_gemm
from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.driver.precision import store_weights
from core.frontend import import_onnx
from core.kernels.gemm_plan.kernel_attr import gemm_of
from core.target import get_target
from tests.backend_calls import backend_of, build_executable, optimize

MODELS = Path(__file__).resolve().parents[3].parent / "shared" / "models"


def model_bytes(name: str, float16: bool = False) -> bytes:
    path = MODELS / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"{path} not found (the shared reference models)")
    model = onnx.load(str(path))
    if float16:  # the model itself in half precision, as torch exports a .half() model: weights and inputs
        for init in model.graph.initializer:
            if init.data_type == onnx.TensorProto.FLOAT:
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
        for value in [*model.graph.input, *model.graph.output]:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
        del model.graph.value_info[:]
    return model.SerializeToString()


def conv_kernels(data: bytes, precision: str, requested: bool,
                 funcs_out: Optional[dict] = None) -> list[tuple[str, dict, str]]:
    """(kernel name, its Conv's attributes and K, its epilogue steps or "" when it is not the tensor-core GEMM) for each
    kernel of the compiled model that computes a Conv, as core.compile builds them for cuda -arch=sm_90 (`funcs_out`,
    if given, receives kernel name -> its PrimFunc)."""
    target = get_target("cuda -arch=sm_90")
    backend = backend_of(target)
    graph = optimize(import_onnx(data), 3, target)
    graph = store_weights(graph, precision, requested, backend.weight_storage_dtypes(target), target)
    graph = backend.finish_graph(graph, target)
    exe = build_executable(graph, target)
    funcs, producers, found = {f.name: f for f in exe.funcs}, graph.producers(), []
    for kernel in exe.kernels:
        if "Conv" not in kernel.ops:
            continue
        node = producers[kernel.outputs[0]]
        body = node.attr("body") or graph  # a Conv alone is a kernel of its own
        (conv,) = [n for n in body.nodes if n.op == "Conv"] if node.op == "Fused" else [node]
        c, kh, kw = body.type_of(conv.inputs[1]).shape[1:]
        gemm = gemm_of(funcs[kernel.func or kernel.name])
        if funcs_out is not None:
            funcs_out[kernel.name] = funcs[kernel.func or kernel.name]
        found.append((kernel.name, {"group": int(conv.attr("group") or 1), "k": c * kh * kw},
                      "+".join(gemm[0].epilogue) if gemm and gemm[0].conv is not None else ""))
    return found


@pytest.mark.parametrize("float16,precision", [(True, "fp16"), (False, "fp16"), (False, "bf16")],
                         ids=["float16-model", "precision-fp16", "precision-bf16"])
def test_every_resnet18_conv_runs_on_the_tensor_core_implicit_gemm(float16, precision):
    kernels = conv_kernels(model_bytes("resnet18", float16), precision, not float16)
    assert len(kernels) == 20  # the stem, 16 3x3 convs and 3 downsample 1x1s, as kernels
    assert [name for name, _, steps in kernels if not steps] == []
    assert kernels[0][1]["k"] == 3 * 7 * 8  # the stem: a zero tap per kernel row (conv_taps.py)
    assert {steps for _, _, steps in kernels} == {"bias+relu", "bias", "bias+residual+relu"}


def test_mobilenet_v2s_group_1_convs_run_on_the_implicit_gemm_but_the_stem_and_one_small_weight():
    """--precision fp16: its 1x1 expansions (ReLU6: relu6 fused) and projections on tensor cores; left: the 32
    depthwise convs (group = channels: not a GEMM), the 3x3 stem of 3 channels (K = 27: zero taps would be most of
    its work) and block 1's 1x1 projection, whose 512 weights stay float32 (narrow storage starts at 1024)."""
    kernels = conv_kernels(model_bytes("mobilenet_v2"), "fp16", True)
    off = [(name, conv) for name, conv, steps in kernels if not steps and conv["group"] == 1]
    assert [conv["k"] for _, conv in off] == [27, 32], off
    on = [steps for _, conv, steps in kernels if steps]
    assert len(on) == 16 + 17 - 1 + 1 and {"bias+relu6", "bias", "bias+residual"} <= set(on)
    assert all(conv["group"] > 1 for _, conv, steps in kernels if conv["k"] == 9)


def test_every_resnet18_float32_conv_runs_on_the_simt_implicit_gemm_without_spills():
    """A float32 model without --precision: each conv (the 7x7 stem over 3 channels too) is one kernel computing
    the implicit GEMM on the SIMT tiles with its bias, residual and ReLU fused; ptxas spills nothing for sm_90.
    Numbers: test_gpu_models.py emulates the whole model against ONNX Runtime, test_gpu_schedules.py the shapes."""
    funcs: dict = {}
    kernels = conv_kernels(model_bytes("resnet18"), "fp32", False, funcs)
    assert len(kernels) == 20 and all(not steps for _, _, steps in kernels)  # no tensor cores in float32
    assert [name for name, _, _ in kernels if not is_implicit_gemm(funcs[name])] == []
    assert sum("_add" in name for name, _, _ in kernels) == 8  # the residual Add fused into its conv's kernel
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    ptx, _ = emit_ptx(list({id(f): f for f in funcs.values()}.values()), get_target("cuda -arch=sm_90"))
    _, usage = assemble_with_usage(ptx, "sm_90")
    assert {name: usage[f.name]["spill_stores"] for name, f in funcs.items() if usage[f.name]["spill_stores"]} == {}
