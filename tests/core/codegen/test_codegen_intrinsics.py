"""The dot-product tensor intrinsics: each lowers to its instruction (checked in the assembly of a
target with its features, on any host), and each the host can run gives the exact int32 sums of the
numpy reference, at the saturation edges too (255 x -128 everywhere: AVX2's vpmaddubsw would clip);
CUDA's dp4a is checked in PTX and by ptxas."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.codegen.build import assembly
from tests.backend_calls import runs_on_host
from core.graph.op_defs.integer import matmul_integer_reference
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.packing.int8 import column_correction, pack_dot_weights
from core.target import get_target
from core.te.intrinsics import get_intrinsic, intrinsics_for

# intrinsic -> (a target with the features it needs, the instruction its assembly must hold)
INSTRUCTIONS = {
    "x86_vnni_u8s8_16x4": ("x86-64-v4", "+avx512vnni", "vpdpbusd\t%zmm"),
    "x86_avxvnni_u8s8_8x4": ("x86-64-v3", "+avxvnni", "{vex}\tvpdpbusd\t%ymm"),
    "x86_avx512vl_vnni_u8s8_8x4": ("x86-64-v4", "+avx512vnni", "vpdpbusd\t%ymm"),
    "x86_avx512vl_vnni_s16s8_8x2": ("x86-64-v4", "+avx512vnni", "vpdpwssd\t%ymm"),
    "x86_avx2_u8s8_8x4": ("x86-64-v3", "", "vpmaddwd\t%ymm"),
    "x86_avx2_u8s7_8x4": ("x86-64-v3", "", "vpmaddubsw\t%ymm"),
    "x86_avx2_s16s8_8x2": ("x86-64-v3", "", "vpmaddwd\t%ymm"),
    "aarch64_sdot_s8s8_4x4": ("rpi5", "", "sdot\tv"),
    "aarch64_udot_u8u8_4x4": ("rpi5", "", "udot\tv"),
}
LIMITS = {"uint8": (0, 255), "int8": (-128, 127)}
rng = np.random.default_rng(4)


def packed_kernel(name: str, a: np.ndarray, b: np.ndarray, zero: int, shift: int = 0) -> OpKernel:
    intrinsic = get_intrinsic(name)
    k, n = b.shape
    inputs = [a, pack_dot_weights(b, intrinsic.lanes, intrinsic.depth), column_correction(b, zero + shift)]
    attrs = {"columns": n, "depth": k, "data_shift": shift, "intrinsic": name}
    return OpKernel(f"k_{len(a)}_{k}_{n}_{a.dtype.name}", "MatMulIntegerPacked", inputs, attrs)


def data_dtypes(intrinsic) -> list[str]:
    """The 8-bit data types a packed kernel with this intrinsic reads: its own, or either (int16 holds both)."""
    dtype = intrinsic.inputs[0].dtype
    return [dtype] if dtype in LIMITS else list(LIMITS)


def data_shift(intrinsic, data_dtype: str) -> int:
    own = intrinsic.inputs[0].dtype
    return 0 if data_dtype == own or own not in LIMITS else (128 if data_dtype == "int8" else -128)


def with_features(spec: str, extra: str):
    target = get_target(spec)
    return dataclasses.replace(target, features=target.features + ("," + extra if extra else ""))


@pytest.mark.parametrize("name", sorted(INSTRUCTIONS))
def test_each_intrinsic_lowers_to_its_instruction(name):
    spec, features, instruction = INSTRUCTIONS[name]
    target = with_features(spec, features)
    intrinsic = get_intrinsic(name)
    a = np.zeros((4, 64), data_dtypes(intrinsic)[0])
    b = np.zeros((64, 2 * intrinsic.lanes), intrinsic.inputs[1].dtype)
    kernel = packed_kernel(name, a, b, 0)
    assert instruction in assembly([kernel.lower(target)], target)


@pytest.mark.parametrize("name,instruction,gone", [("x86_avx2_u8s8_8x4", "vpdpbusd\t%ymm", ("vpmaddwd",)),
                                                   ("x86_avx2_u8s7_8x4", "vpdpbusd\t%ymm", ("vpmaddubsw", "vpmaddwd")),
                                                   ("x86_avx2_s16s8_8x2", "vpdpwssd\t%ymm", ())])
def test_an_avx2_dot_compiled_with_vnni_takes_the_one_instruction_equivalent(name, instruction, gone):
    """The multi-ISA x86-64 target's AVX-512 variant compiles kernels tensorized for AVX2 (same packing). (The
    int16 kernel's data stage keeps a vpmaddwd of LLVM's own.)"""
    target = get_target("x86-64").isa_variants[1][1]
    intrinsic = get_intrinsic(name)
    kernel = packed_kernel(name, np.zeros((4, 64), data_dtypes(intrinsic)[0]), np.zeros((64, 16), np.int8), 0)
    text = assembly([kernel.lower(target)], target)
    assert instruction in text and not any(old in text for old in gone)


def test_every_declared_intrinsic_is_checked():
    """(the 8-bit dots; bfloat16's: test_codegen_bf16.py; dp4a: the test below)"""
    eight_bit = lambda i: i.op.dtype == "int32"  # noqa: E731
    known = {i.name for spec in ("native", "x86-64-v3", "rpi5")
             for i in intrinsics_for(with_features(spec, ""), eight_bit)}
    v4 = with_features("x86-64-v4", "+avx512vnni,+avxvnni")
    assert known | {i.name for i in intrinsics_for(v4, eight_bit)} <= set(INSTRUCTIONS)


def cases(data_dtype: str, weight_limit: int | None):
    """(id, a, b, zero point) with the extremes: every product 255 x -128 (or -128 x -128) over a long K;
    weights within the intrinsic's limit (+-64 for vpmaddubsw: 2 x 255 x -64 is its int16 edge)."""
    lo, hi = LIMITS[data_dtype]
    edge = hi if data_dtype == "uint8" else lo
    w_lo, w_hi = (-128, 127) if weight_limit is None else (-weight_limit, weight_limit)

    def weights(shape):
        return rng.integers(w_lo, w_hi + 1, shape).astype(np.int8)

    return [
        ("random", rng.integers(lo, hi + 1, (7, 36)).astype(data_dtype), weights((36, 40)), (lo + hi) // 2),
        ("saturated", np.full((4, 2048), edge, data_dtype), np.full((2048, 32), w_lo, np.int8), lo),
        ("zero_point_high", rng.integers(lo, hi + 1, (3, 64)).astype(data_dtype), np.full((64, 16), w_hi, np.int8), hi),
        ("ragged_k", rng.integers(lo, hi + 1, (5, 13)).astype(data_dtype), weights((13, 9)), 0),
    ]


def host_intrinsics():
    found = {i.name: "native" for i in intrinsics_for(get_target("native"), lambda i: i.weight_dtype == "int8")}
    if runs_on_host(get_target("x86-64-v3")):  # the AVX2 lowerings, on every AVX2 host
        found.update({name: "x86-64-v3" for name in ("x86_avx2_u8s8_8x4", "x86_avx2_u8s7_8x4", "x86_avx2_s16s8_8x2")})
    return sorted(found.items())


@pytest.mark.parametrize("name,spec", host_intrinsics() or [pytest.param("none", "", marks=pytest.mark.skip(
    reason="the host has no 8-bit dot-product intrinsic"))])
@pytest.mark.parametrize("data_dtype", ["uint8", "int8"])
def test_packed_kernels_match_the_integer_reference(name, spec, data_dtype):
    target = get_target(spec)
    intrinsic = get_intrinsic(name)
    shift = data_shift(intrinsic, data_dtype)
    kernels, expected = [], []
    made = cases(data_dtype, intrinsic.weight_limit)
    for cid, a, b, zero in made:
        kernels.append(packed_kernel(name, a, b, zero, shift))
        expected.append(matmul_integer_reference([a, b, np.array(zero, data_dtype)], {})[0])
    for run, want, (cid, *_) in zip(build_kernels(kernels, target), expected, made):
        np.testing.assert_array_equal(run.run()[0], want, err_msg=f"{name} {data_dtype} {cid}")


def test_dp4a_lowers_to_ptx_that_ptxas_accepts():
    """CUDA: a one-thread-per-output schedule tensorized with dp4a (no GPU needed: PTX, then ptxas if present)."""
    from core.codegen.nvptx import emit_ptx
    from core.codegen.ptxas import assemble, find_ptxas
    from core.te import tensor as te
    from core.te.lower import lower
    from core.te.schedule import create_schedule
    from core.tir.expr import cast

    cuda = get_target("cuda")
    dp4a = [i.name for i in intrinsics_for(cuda, lambda i: i.lanes == 1)]
    assert dp4a == ["cuda_dp4a_s8s8_1x4", "cuda_dp4a_u8s8_1x4"]
    a, b = te.placeholder((8, 32), "int8", "a"), te.placeholder((64, 8, 1, 4), "int8", "b")
    ko, ki = te.reduce_axis(8, "ko"), te.reduce_axis(4, "ki")
    c = te.compute((8, 64), lambda i, j: te.sum(cast("int32", a(i, ko.var * 4 + ki.var))
                                                * cast("int32", b(j, ko.var, 0, ki.var)), [ko, ki]), name="c")
    sch = create_schedule(c)
    stage = sch[c]
    i, j = c.op.axis
    jo, ji = stage.split(j, 1)
    stage.reorder(i, jo, ko, ji, ki)
    stage.bind(i, "blockIdx.x")
    stage.bind(jo, "threadIdx.x")
    stage.tensorize(ji, get_intrinsic("cuda_dp4a_s8s8_1x4"))
    ptx, _ = emit_ptx([lower(sch, [a, b, c], "dot")], cuda)
    assert ptx.count("dp4a.s32.s32") == 8  # one per group of 4 along K, the ko loop unrolled by LLVM
    if find_ptxas() is not None:
        assert assemble(ptx, "sm_80")


def test_every_declared_intrinsic_has_one_lowering():
    """te declares the intrinsics (data), codegen lowers them by name: neither may have a name the other lacks."""
    from core.codegen.intrinsics import LOWERINGS
    from core.te.intrinsics import intrinsic_names

    assert sorted(LOWERINGS) == intrinsic_names()
