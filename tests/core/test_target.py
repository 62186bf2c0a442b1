"""Arm device presets: real LLVM CPUs and features, NEON-width schedules, described with their emulator."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.backends import resolve
from core.codegen import assembly, optimized_llvm_ir
from core.frontend import import_onnx
from tests.backend_calls import optimize, build_executable
from core.target import ARM_DEVICES, all_targets, get_target

PRESETS = sorted(ARM_DEVICES)


def test_the_issues_presets_are_registered_with_their_cpus():
    expected = {"rpi4": "cortex-a72", "rpi5": "cortex-a76", "graviton2": "neoverse-n1", "graviton3": "neoverse-v1",
                "ampere-altra": "neoverse-n1", "jetson-orin": "cortex-a78ae"}
    assert {name: get_target(name).cpu for name in expected} == expected
    assert "+dotprod" in get_target("rpi5").features.split(",")
    assert {"+sve", "+bf16", "+i8mm"} <= set(get_target("graviton3").features.split(","))
    assert {t.name for t in all_targets()} >= set(expected)


@pytest.mark.parametrize("name", PRESETS)
def test_llvm_knows_each_presets_cpu_and_features(name, capfd):
    """LLVM only warns (on stderr, from C++) about a CPU or feature it does not know: catch the warning."""
    target = get_target(name)
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.Target.from_triple(target.triple).create_target_machine(cpu=target.cpu, features=target.features)
    assert "not a recognized" not in capfd.readouterr().err
    assert target.arch == "aarch64" and target.features.split(",")[0] == "+neon"


@pytest.mark.parametrize("name", PRESETS + ["aarch64"])
def test_arm_schedules_block_for_128_bit_neon(name):
    target = get_target(name)
    assert target.vector_bits == 128 and target.lanes("float32") == 4 and target.lanes("float16") == 8


def test_presets_describe_their_device_and_emulator():
    rpi5, native = resolve("rpi5"), resolve("native")
    described = rpi5[1].describe(rpi5[0])
    assert described["runs_on_host"] is False and described["emulator"] == "qemu-aarch64"
    assert "Raspberry Pi 5" in described["description"] and described == {**rpi5[0].describe(), **described}
    assert get_target("graviton3").num_cores == 64 and get_target("rpi4").num_cores == 4
    assert native[1].describe(native[0])["emulator"] is None and "runs_on_host" not in native[0].describe()


def conv_model(channels: int = 8, size: int = 12) -> bytes:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def conv_kernels(target_name: str):
    target = get_target(target_name)
    exe = build_executable(optimize(import_onnx(conv_model()), 3, target), target)
    convs = [f for f in exe.funcs if "conv" in f.name]
    assert convs, [f.name for f in exe.funcs]
    return convs, target


def test_a_conv_kernel_for_aarch64_is_neon_fma_on_4_float_vectors():
    convs, target = conv_kernels("rpi5")
    text = optimized_llvm_ir(convs, target)
    # Multiply-adds on NCHW4c blocks: `contract` products and sums that LLVM fuses, all 4 floats wide.
    assert set(re.findall(r"f(?:mul|add) contract (<\d+ x float>)", text)) == {"<4 x float>"}
    assert re.search(r"fmla\s+v\d+\.4s", assembly(convs, target))  # fused: NEON FMA on 4 floats
    x86_convs, x86 = conv_kernels("x86-64-v3")  # the same conv for AVX2 blocks 8 floats: widths follow the target
    assert "fmul contract <8 x float>" in optimized_llvm_ir(x86_convs, x86)
