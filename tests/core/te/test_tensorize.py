"""The tensorize primitive: a loop nest that computes an intrinsic's declaration becomes one IntrinsicCall;
any difference (extents, dtypes, strides, a guard, no accumulation) is one clear TensorizeError."""
from __future__ import annotations

import dataclasses

import pytest

from core.codegen.build import lower_to_llvm_ir
from core.errors import CodegenError, ScheduleError
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.te.intrinsics import get_intrinsic, intrinsics_for
from core.te.tensorize import TensorizeError
from core.tir.expr import cast
from core.tir.functor import walk_stmt
from core.tir.stmt import IntrinsicCall

VNNI = "x86_vnni_u8s8_16x4"


def dot_kernel(m=4, k=32, n=32, lanes=16, a_dtype="uint8", b_dtype="int8", transposed=False):
    """acc[i, j] = sum_k a[i, k] * b_packed[j / lanes, k / 4, j % lanes, k % 4] (or the lanes and k swapped)."""
    a = te.placeholder((m, k), a_dtype, "a")
    shape = (n // lanes, k // 4, 4, lanes) if transposed else (n // lanes, k // 4, lanes, 4)
    b = te.placeholder(shape, b_dtype, "b")
    ko, ki = te.reduce_axis(k // 4, "ko"), te.reduce_axis(4, "ki")

    def read_b(j):
        return b(j // lanes, ko.var, ki.var, j % lanes) if transposed else b(j // lanes, ko.var, j % lanes, ki.var)

    c = te.compute((m, n), lambda i, j: te.sum(cast("int32", a(i, ko.var * 4 + ki.var)) * cast("int32", read_b(j)),
                                               [ko, ki]), name="c")
    return a, b, c


def tensorized(intrinsic=VNNI, split=16, **kernel):
    a, b, c = dot_kernel(**kernel)
    sch = create_schedule(c)
    stage = sch[c]
    i, j = c.op.axis
    ko, ki = c.op.reduce_axis
    jo, ji = stage.split(j, split)
    stage.reorder(i, jo, ko, ji, ki)
    stage.tensorize(ji, get_intrinsic(intrinsic))
    return lower(sch, [a, b, c], "k")


def test_a_matching_nest_becomes_one_intrinsic_call_per_block():
    func = tensorized()
    calls = [s for s in walk_stmt(func.body) if isinstance(s, IntrinsicCall)]
    assert len(calls) == 1 and calls[0].name == VNNI
    assert [o.buffer.name for o in calls[0].operands] == ["c", "a", "b"]  # output first, then inputs in order


def test_the_lowering_calls_the_instruction():
    target = get_target("x86-64-v4")
    target = dataclasses.replace(target, features=target.features + ",+avx512vnni")
    assert "llvm.x86.avx512.vpdpbusd.512" in lower_to_llvm_ir([tensorized()], target)


@pytest.mark.parametrize("change,message", [
    ({"split": 8}, r"extents \[8, 4\]"),  # 8 lanes against a 16-lane declaration
    ({"a_dtype": "int8"}, "expected a uint8 load for a"),  # vpdpbusd multiplies unsigned by signed bytes
    ({"transposed": True}, "does not step over the loops"),  # the weights' lanes and k swapped in memory
    ({"m": 4, "n": 24, "split": 16}, "IfThenElse"),  # 24 columns in blocks of 16: a guarded remainder
])
def test_a_nest_that_differs_is_refused_with_the_reason(change, message):
    kernel = {k: v for k, v in change.items() if k != "split"}
    if "n" in kernel:
        kernel["lanes"] = 8
    with pytest.raises(TensorizeError, match=message):
        tensorized(split=change.get("split", 16), **kernel)


def test_a_nest_that_does_not_accumulate_is_refused():
    a = te.placeholder((16,), "uint8", "a")
    c = te.compute((16,), lambda j: cast("int32", a(j)), name="c")
    sch = create_schedule(c)
    sch[c].tensorize(c.op.axis[0], get_intrinsic(VNNI))
    with pytest.raises(TensorizeError, match="extents"):
        lower(sch, [a, c], "k")


def test_tensorize_refuses_vectorized_loops():
    a, b, c = dot_kernel()
    sch = create_schedule(c)
    stage = sch[c]
    i, j = c.op.axis
    jo, ji = stage.split(j, 16)
    stage.vectorize(ji)
    with pytest.raises(ScheduleError, match="tensorize"):
        stage.tensorize(ji, get_intrinsic(VNNI))


def test_codegen_refuses_an_intrinsic_the_target_lacks():
    with pytest.raises(CodegenError, match="avx512vnni"):
        lower_to_llvm_ir([tensorized()], get_target("x86-64-v3"))


def test_intrinsics_are_chosen_by_target_features():
    names = lambda t: [i.name for i in intrinsics_for(t)]  # noqa: E731
    v3, v4 = get_target("x86-64-v3"), get_target("x86-64-v4")
    # most products per instruction first: the 7-bit-weight one, int16 data's vpmaddwd, then both widened per call
    assert names(v3) == ["x86_avx2_u8s7_8x4", "x86_avx2_s16s8_8x2", "x86_avx2_u8s8_8x4"]
    vnni = dataclasses.replace(v4, features=v4.features + ",+avx512vnni,+avxvnni")
    assert names(vnni)[0] == VNNI and "x86_avxvnni_u8s8_8x4" in names(vnni)
    assert names(get_target("aarch64")) == []  # plain NEON: no dot product
    assert set(names(get_target("rpi5"))) == {"aarch64_sdot_s8s8_4x4", "aarch64_udot_u8u8_4x4"}


def test_a_strided_intrinsic_measures_its_operands_strides():
    """cuda's mma declares a thread's 2 rows x 16 k of A at any row stride: the call carries the measured strides."""
    from core.te.intrinsics import MMA_F16

    a, b = te.placeholder((4, 40), "float16", "a"), te.placeholder((32, 24), "float16", "b")
    k = te.reduce_axis(32, "k")
    c = te.compute((4, 24), lambda i, j: te.sum(cast("float32", a(i, k.var)) * cast("float32", b(k.var, j)), k),
                   name="c")
    sch = create_schedule(c)
    i, j = c.op.axis
    io, ii = sch[c].split(i, 2)
    jo, ji = sch[c].split(j, 2)
    ko, ki = sch[c].split(k, 16)
    sch[c].reorder(io, jo, ko, ii, ji, ki)
    sch[c].tensorize(ii, get_intrinsic(MMA_F16))
    (call,) = [s for s in walk_stmt(lower(sch, [a, b, c], "k").body) if isinstance(s, IntrinsicCall)]
    assert call.strides == ((24, 1), (40, 1), (24, 1))  # c's rows, a's rows, b's k: each its buffer's row length


def test_a_conversion_is_an_elementwise_declaration():
    x = te.placeholder((32,), "float32", "x")
    y = te.compute((32,), lambda j: cast("bfloat16", x(j)), name="y")
    sch = create_schedule(y)
    _, ji = sch[y].split(y.op.axis[0], 16)
    sch[y].tensorize(ji, get_intrinsic("x86_avx512bf16_cvt_16"))
    calls = [s for s in walk_stmt(lower(sch, [x, y], "k").body) if isinstance(s, IntrinsicCall)]
    assert len(calls) == 1 and [o.buffer.name for o in calls[0].operands] == ["y", "x"]


def test_a_warp_wide_intrinsic_where_only_some_threads_arrive_is_refused():
    from core.te.intrinsics import MMA_F16
    from core.codegen.nvptx import GPUScheduleError, verify_gpu_kernel
    from core.tir.expr import Buffer, IntImm, Load, Var
    from core.tir.stmt import For, ForKind, PrimFunc, Seq

    a, b, c = Buffer("a", (16, 16), "float16"), Buffer("b", (16, 8), "float16"), Buffer("c", (16, 8), "float32")
    call = IntrinsicCall(MMA_F16, tuple(Load(buf, IntImm(0)) for buf in (c, a, b)), ((8, 1), (16, 1), (8, 1)))

    def lanes(extent, body):
        return For(Var(f"t{extent}"), IntImm(extent), ForKind.THREAD_BINDING, body, (("thread_tag", "threadIdx.x"),))

    whole = PrimFunc("whole", (a, b, c), lanes(32, call), 2, 1)
    assert verify_gpu_kernel(whole, get_target("cuda")).threads == 32
    partial = PrimFunc("partial", (a, b, c), Seq((lanes(64, Seq(())), lanes(32, call))), 2, 1)
    with pytest.raises(GPUScheduleError, match="whole warp"):
        verify_gpu_kernel(partial, get_target("cuda"))
