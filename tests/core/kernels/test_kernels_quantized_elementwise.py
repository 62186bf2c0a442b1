"""QuantizedBinary (QDQ Add/Mul as ONNX Runtime's QLinearAdd/QLinearMul) and LookupTable kernels against their numpy
integer references: zero points at the ends of their ranges, inputs of 255/-128/127, saturated results, a fused
Relu's clamp, per-channel broadcasting, every one of the 256 table indices of u8 and s8 data (on the host, which
may have AVX-512 VBMI's byte permutes, and on AVX2)."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.op_defs.quantize import QUANT_INT_RANGES, quantized_binary_reference
from tests.helpers.kernel_runs import Case, assert_matches, run_cases

rng = np.random.default_rng(2121)


def data(shape, dtype, fill=None):
    lo, hi = QUANT_INT_RANGES[dtype]
    if fill is not None:
        return np.full(shape, {"max": hi, "min": lo}[fill], dtype)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def binary(cid, kind, a, b, to="uint8", zero_point=None, clamp=None, **scales):
    lo, hi = QUANT_INT_RANGES[to]
    zero_point = (lo + hi + 1) // 2 if zero_point is None else zero_point
    low, high = clamp or (lo, hi)
    attrs = dict(kind=kind, to=to, zero_point=zero_point, min=low, max=high, **scales)
    return Case(f"QuantizedBinary_{cid}", "QuantizedBinary", [a, b], attrs,
                lambda: [quantized_binary_reference(a, b, attrs)])


def lookup(cid, x_dtype, table_dtype):
    lo, hi = QUANT_INT_RANGES[x_dtype]
    x = np.concatenate([np.arange(lo, hi + 1), data(300, x_dtype).astype(np.int64)]).astype(x_dtype).reshape(4, 139)
    table = data(256, table_dtype)
    return Case(f"LookupTable_{cid}", "LookupTable", [x, table], {},
                lambda: [table[x.astype(np.int32) - lo]])


CASES = [
    binary("add_u8", "add", data((2, 8, 9, 7), "uint8"), data((2, 8, 9, 7), "uint8"), a_zero=0, b_zero=255,
           a_ratio=0.4137, b_ratio=0.7219),
    # 255 - 0 and 255 - 0 at ratios above 1 saturate at 255; -128 - 127 at 0 (the fused Relu's clamp is 128).
    binary("add_saturated", "add", data((1, 16, 5, 5), "uint8", "max"), data((1, 16, 5, 5), "uint8", "max"),
           a_zero=0, b_zero=0, a_ratio=1.37, b_ratio=2.11, zero_point=128),
    binary("add_s8_relu", "add", data((1, 4, 6, 6), "int8"), data((1, 4, 6, 6), "int8", "min"), to="int8",
           zero_point=-5, clamp=(-5, 127), a_zero=127, b_zero=-128, a_ratio=0.9, b_ratio=0.31),
    binary("add_per_channel", "add", data((1, 12, 5, 5), "uint8"), data((1, 12, 1, 1), "uint8"), a_zero=3,
           b_zero=200, a_ratio=0.55, b_ratio=0.125),
    binary("mul_u8_s8", "mul", data((1, 8, 7, 7), "uint8"), data((1, 8, 7, 7), "int8"), to="int8", zero_point=0,
           a_zero=128, b_zero=-3, ratio=0.00731),
    binary("mul_saturated_scale", "mul", data((1, 16, 4, 4), "uint8", "max"), data((1, 16, 1, 1), "uint8"),
           a_zero=0, b_zero=0, ratio=0.0213),
    lookup("u8_to_u8", "uint8", "uint8"),
    lookup("s8_to_u8", "int8", "uint8"),
    lookup("u8_to_s8", "uint8", "int8"),
]


@pytest.mark.parametrize("spec", ["x86-64-v3", "native"])
def test_quantized_elementwise_kernels_match_numpy(spec):
    results = run_cases(CASES, spec)
    for case in CASES:
        assert_matches(case, results[case.id][0], case.reference())


def test_saturation_edges_reach_the_ends():
    # The reference itself: the saturated cases reach 255, the Relu clamp holds at the zero point.
    by_id = {c.id: c.reference()[0] for c in CASES}
    assert (by_id["QuantizedBinary_add_saturated"] == 255).all()
    assert by_id["QuantizedBinary_add_s8_relu"].min() >= -5
    assert (by_id["QuantizedBinary_mul_saturated_scale"] == 255).any()


def test_lookup_table_uses_byte_permutes_with_avx512_vbmi():
    """Where the target has AVX-512 VBMI the table is read by vpermi2b (two per 64 lanes), checked in the assembly
    on any host; without it (x86-64-v4 alone), by scalar loads per lane."""
    import dataclasses

    from core.codegen.build import assembly
    from tests.helpers.kernel_runs import OpKernel
    from core.target import get_target

    x, table = data((4, 8, 64), "uint8"), data(256, "uint8")
    v4 = get_target("x86-64-v4")
    vbmi = dataclasses.replace(v4, features=v4.features + ",+avx512vbmi")
    kernel = OpKernel("lookup", "LookupTable", [x, table])
    permutes = {"vpermi2b", "vpermt2b"}  # (LLVM picks either form of the same permute)
    assert permutes & set(assembly([kernel.lower(vbmi)], vbmi).split())
    assert not permutes & set(assembly([kernel.lower(v4)], v4).split())
