"""AVX-512-BF16 intrinsics (vcvtneps2bf16, vdpbf16ps) for the sapphirerapids target: a bfloat16 dot kernel (float32
activations converted to bfloat16, weights packed 16 lanes x 2) tensorizes to both instructions in its assembly,
cross-compiled and never run (a host without AVX-512-BF16 could not); the same loops without the intrinsics, run
here, give numpy's float32 sums of the bfloat16-rounded operands."""
from __future__ import annotations

import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from core.codegen.build import assembly, lower_to_llvm_ir
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.te.intrinsics import get_intrinsic, intrinsics_for
from core.te.tensorize import TensorizeError
from core.tir.expr import cast
from tests.backend_calls import runs_on_host

SPR = get_target("sapphirerapids")
DOT, CONVERT = "x86_avx512bf16_dot_16x2", "x86_avx512bf16_cvt_16"


def bf16_dot_kernel(m: int, k: int, n: int, tensorized: bool = True):
    """y[m, n] = sum_k f32(bf16(x[m, k])) * f32(w[n / 16, k / 2, n % 16, k % 2])."""
    x = te.placeholder((m, k), "float32", "x")
    w = te.placeholder((n // 16, k // 2, 16, 2), "bfloat16", "w")
    xb = te.compute((m, k), lambda i, kk: cast("bfloat16", x(i, kk)), name="x_bf16")
    ko, ki = te.reduce_axis(k // 2, "ko"), te.reduce_axis(2, "ki")
    y = te.compute((m, n), lambda i, j: te.sum(cast("float32", xb(i, ko.var * 2 + ki.var))
                                               * cast("float32", w(j // 16, ko.var, j % 16, ki.var)), [ko, ki]),
                   name="y")
    sch = create_schedule(y)
    conv = sch[xb]
    c_o, c_i = conv.split(xb.op.axis[1], 16)
    stage = sch[y]
    i, j = y.op.axis
    jo, ji = stage.split(j, 16)
    stage.reorder(i, jo, ko, ji, ki)
    if tensorized:
        conv.tensorize(c_i, get_intrinsic(CONVERT))
        stage.tensorize(ji, get_intrinsic(DOT))
    return lower(sch, [x, w, y], f"bf16_dot_{m}_{k}_{n}_{int(tensorized)}")


def test_sapphirerapids_has_the_bf16_intrinsics_and_avx2_does_not():
    assert {DOT, CONVERT} <= {i.name for i in intrinsics_for(SPR)}
    assert not {DOT, CONVERT} & {i.name for i in intrinsics_for(get_target("x86-64-v3"))}
    assert not runs_on_host(SPR) or "+amx-bf16" in get_target("native").features


def test_the_bf16_kernel_holds_vcvtneps2bf16_and_vdpbf16ps():
    func = bf16_dot_kernel(4, 64, 32)
    ir_text = lower_to_llvm_ir([func], SPR)
    assert "llvm.x86.avx512bf16.dpbf16ps.512" in ir_text and "llvm.x86.avx512bf16.cvtneps2bf16.512" in ir_text
    asm = assembly([func], SPR)
    dots = [line for line in asm.splitlines() if line.startswith("\tvdpbf16ps\t")]
    assert dots and all("%zmm" in line for line in dots)  # 16 float32 lanes per instruction
    assert "\tvcvtneps2bf16\t" in asm


def test_a_target_without_avx512bf16_refuses_the_kernel():
    from core.errors import CodegenError

    with pytest.raises(CodegenError, match="needs x86_64 with .*avx512bf16"):
        lower_to_llvm_ir([bf16_dot_kernel(2, 32, 16)], get_target("x86-64-v4"))


def test_a_nest_that_is_not_the_conversion_is_refused():
    x = te.placeholder((32,), "float32", "x")
    y = te.compute((32,), lambda j: cast("float16", x(j)), name="y")
    sch = create_schedule(y)
    jo, ji = sch[y].split(y.op.axis[0], 16)
    sch[y].tensorize(ji, get_intrinsic(CONVERT))
    with pytest.raises(TensorizeError, match="bfloat16"):
        lower(sch, [x, y], "not_bf16")


def test_the_untensorized_loops_give_the_bfloat16_sums():
    """What the intrinsics are declared to compute, run on this host as plain loops."""
    from tests.backend_calls import build_library
    from core.codegen.kernel_library import load_kernels

    m, k, n = 3, 64, 32
    rng = np.random.default_rng(16)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    packed = np.ascontiguousarray(w.reshape(k // 2, 2, n // 16, 16).transpose(2, 0, 3, 1))
    func = bf16_dot_kernel(m, k, n, tensorized=False)
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("native"), Path(tmp) / "k.so"))
        y = np.zeros((m, n), np.float32)
        lib.call(func.name, x, packed, y, np.zeros((m, k), ml_dtypes.bfloat16))  # (x_bf16: a workspace)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32) @ w.astype(np.float32)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
