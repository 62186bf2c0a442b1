"""Inline float32 exp/log/tanh/erf (codegen/vecmath.py): ulp error over the whole float range and its
edge values, at every lane count, and vector code without per-lane calls on x86-64 and AArch64."""
from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pytest

from core.codegen import optimized_llvm_ir, vecmath
from tests.backend_calls import build_library
from core.target import get_target
from core.tir import Buffer, For, ForKind, IntImm, PrimFunc, Store, Var, call, const

EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38,
                  -3.4028235e38, 1e-30, -1e-30, 0.625, -0.625, 0.62499994, 1.0, -1.0, 0.99999994, 3.9, 4.0, 4.0000005,
                  44.0, -44.0, 88.72283, 88.72284, 89.0, -87.33655, -87.5, -103.27893, -103.972, -104.0, -105.0,
                  -110.0, 9.0, 0.5, 2.0, 0.70710677, 0.7071068, 1.4142135], np.float32)
MAX_ULP = {"exp": 1.0, "log": 1.0, "tanh": 2.0, "erf": 2.0}


def _sweep() -> np.ndarray:
    """Float32 bit patterns spread over the whole positive range (both signs), a dense grid where
    the approximations switch pieces, and the edge values; 33 extra values leave a vector tail."""
    wide = np.arange(0, 0x7F800000, 997 * 263, dtype=np.int64).astype(np.uint32).view(np.float32)
    grid = np.linspace(-12, 12, 48001, dtype=np.float32)
    return np.concatenate([wide, -wide, grid, EDGES, grid[:33] * np.float32(0.37)])


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if name == "erf":
            return np.frompyfunc(math.erf, 1, 1)(x64).astype(np.float64)
        return {"exp": np.exp, "log": np.log, "tanh": np.tanh}[name](x64)


def ulp_error(out: np.ndarray, ref: np.ndarray, dtype=np.float32) -> np.ndarray:
    """|out - ref| in units of `dtype`'s spacing at ref; 0 where both are NaN or both the same inf
    in `dtype` (ref beyond its range included), inf where only one of them is."""
    out = out.astype(np.float64)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        err = np.abs(out - ref) / np.spacing(np.abs(rounded)).astype(np.float64)
    err[(np.isnan(out) & np.isnan(ref)) | ((out == rounded) & np.isinf(rounded))] = 0.0
    err[np.isnan(err)] = np.inf
    return err


def _kernel(name: str, n: int, kind: ForKind, dtype: str = "float32", fn=None) -> PrimFunc:
    """vm_NAME(A, O): O[j] = NAME(A[j]) (or fn(A[j])) over n elements."""
    A, O = Buffer("A", (n,), dtype), Buffer("O", (n,), dtype)
    j = Var("j")
    value = fn(A.load(j)) if fn is not None else call(name, A.load(j))
    return PrimFunc(f"vm_{name}", (A, O), For(j, IntImm(n), kind, Store(O, j, value)), 1, 1)


@pytest.fixture
def without_libmvec(monkeypatch):
    """Builds as for a target without libmvec (AArch64): exp and log take the polynomials too."""
    monkeypatch.setattr(vecmath, "enable", lambda module, target: None)


@pytest.mark.parametrize("kind", [ForKind.VECTORIZED, ForKind.SERIAL], ids=["vector", "scalar"])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "erf"])
def test_inline_math_is_within_its_ulp_bound_over_the_float_range(build, without_libmvec, name, kind):
    x = _sweep()
    out = np.zeros_like(x)
    build(_kernel(name, x.size, kind)).call(f"vm_{name}", x, out)
    ref = _reference(name, x)
    err = ulp_error(out, ref)
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP[name], f"{name}({x[worst]!r}) = {out[worst]!r}: {err[worst]:.2f} ulp"
    zeros = x == 0  # tanh(-0) and erf(-0) are -0
    np.testing.assert_array_equal(np.signbit(out[zeros]), np.signbit(ref[zeros]))


_ARM_HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
%(decls)s
int main(int argc, char **argv) {  /* harness N IN OUT: each kernel on IN, results one after another */
    long n = atol(argv[1]);
    float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    FILE *f = fopen(argv[2], "rb"), *g = fopen(argv[3], "wb");
    if (!in || !out || !f || !g || fread(in, sizeof(float), n, f) != (size_t)n) return 2;
%(calls)s
    return fclose(g) != 0;
}
"""


def test_inline_math_on_aarch64_under_qemu(tmp_path):
    """The AArch64 build (no libmvec: every function is the polynomial, NEON lanes) run under qemu-user."""
    gcc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    assert gcc and qemu, "qemu-user and the AArch64 cross toolchain are missing (scripts/system-deps.sh installs them)"
    names = list(MAX_ULP)
    x = _sweep()
    build_library([_kernel(name, x.size, ForKind.VECTORIZED) for name in names], get_target("aarch64"),
                  tmp_path / "libvm.so")
    decls = "\n".join(f"void vm_{name}(const float *, float *);" for name in names)
    calls = "\n".join(f"    vm_{name}(in, out); fwrite(out, sizeof(float), n, g);" for name in names)
    (tmp_path / "main.c").write_text(_ARM_HARNESS % {"decls": decls, "calls": calls})
    subprocess.run([gcc, "-O1", "main.c", "libvm.so", "-Wl,-rpath,$ORIGIN", "-o", "harness"], cwd=tmp_path, check=True)
    x.tofile(tmp_path / "in.bin")
    subprocess.run([qemu, "-L", "/usr/aarch64-linux-gnu", "./harness", str(x.size), "in.bin", "out.bin"],
                   cwd=tmp_path, check=True, timeout=120)
    results = np.fromfile(tmp_path / "out.bin", np.float32).reshape(len(names), x.size)
    for name, out in zip(names, results):
        err = ulp_error(out, _reference(name, x))
        worst = int(np.argmax(err))
        assert err[worst] <= MAX_ULP[name], f"aarch64 {name}({x[worst]!r}) = {out[worst]!r}: {err[worst]:.2f} ulp"


@pytest.mark.parametrize("name", ["tanh", "erf", "exp"])
def test_float16_goes_through_float32_and_rounds_once(build, without_libmvec, name):
    x = np.linspace(-12 if name != "exp" else -17, 12 if name != "exp" else 11, 4001).astype(np.float16)
    out = np.zeros_like(x)
    build(_kernel(name, x.size, ForKind.VECTORIZED, "float16")).call(f"vm_{name}", x, out)
    assert ulp_error(out, _reference(name, x.astype(np.float32)), np.float16).max() <= 1.0


def test_libmvec_tail_narrower_than_every_variant_takes_the_polynomial(build):
    # 16 + 4 lanes from libmvec on AVX-512 (8 + 8 + 4 on AVX2), the last 3 without a libm call per lane.
    x = np.linspace(-20, 20, 23).astype(np.float32)
    out = np.zeros_like(x)
    build(_kernel("exp", x.size, ForKind.VECTORIZED)).call("vm_exp", x, out)
    assert ulp_error(out, np.exp(x.astype(np.float64))).max() <= 4.0  # libmvec's bound
    ir_text = optimized_llvm_ir([_kernel("exp", 23, ForKind.VECTORIZED)], get_target("x86-64-v3"))
    assert "_ZGVdN8v_expf" in ir_text and not re.search(r"call (fast )?float @(llvm\.exp\.f32|expf)\(", ir_text)


def _sigmoid(x):
    one = const(1.0, "float32")
    return one / (one + call("exp", -x))


@pytest.mark.parametrize("target,lanes", [("x86-64-v3", 8), ("x86-64-v4", 16), ("aarch64", 4)])
@pytest.mark.parametrize("name", ["tanh", "erf", "exp", "log", "sigmoid"])
def test_vector_code_without_per_lane_calls(target, lanes, name):
    fn = _sigmoid if name == "sigmoid" else None
    ir_text = optimized_llvm_ir([_kernel(name, 200, ForKind.VECTORIZED, fn=fn)], get_target(target))
    body = ir_text[ir_text.index("define"):]
    scalar_calls = re.findall(r"call [^(]*float @(\w+)\(", body)  # a call returning one float
    assert scalar_calls == [], scalar_calls
    if target == "aarch64" or name in ("tanh", "erf"):
        assert "_ZGV" not in body
        assert re.search(rf"<{lanes} x float> @llvm\.(fmuladd|fma)\.v{lanes}f32", body), "no vector polynomial"
    else:  # exp/log (and sigmoid's exp) on x86-64: libmvec's whole-register variants
        assert f"N{lanes}v_" in body


def _gelu_model() -> bytes:
    """h = x W + b; GELU-tanh(h) node for node as GPT-2 exports it (Pow(h, 3), Tanh), and Sigmoid(h) * Erf(h)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 48)) / 3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b")]
    for name, value in (("three", 3.0), ("c", 0.044715), ("k", math.sqrt(2 / math.pi)), ("half", 0.5), ("one", 1.0)):
        inits.append(numpy_helper.from_array(np.float32(value), name))
    node = helper.make_node
    nodes = [node("MatMul", ["x", "w"], ["mm"]), node("Add", ["mm", "b"], ["h"]),
             node("Pow", ["h", "three"], ["cube"]), node("Mul", ["cube", "c"], ["cc"]), node("Add", ["h", "cc"], ["in"]),
             node("Mul", ["in", "k"], ["ink"]), node("Tanh", ["ink"], ["t"]), node("Add", ["t", "one"], ["t1"]),
             node("Mul", ["h", "half"], ["hh"]), node("Mul", ["hh", "t1"], ["gelu"]),
             node("Sigmoid", ["h"], ["s"]), node("Erf", ["h"], ["e"]), node("Mul", ["s", "e"], ["se"])]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 32])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [40, 48]) for n in ("gelu", "se")],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_gelu_tanh_model_matches_onnxruntime_without_pow():
    import onnxruntime as ort

    import core

    model = _gelu_model()
    artifact = core.compile(model, target="native", opt_level=3, validate=False, benchmark=False)
    assert not any("Pow" in group["ops"] for group in artifact.report["graph"]["fusion_groups"])
    x = (np.random.default_rng(0).standard_normal((40, 32)) * 2).astype(np.float32)
    with artifact.load() as module:
        ours = module.run({"x": x})
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for name, expected in zip(("gelu", "se"), session.run(None, {"x": x})):
        np.testing.assert_allclose(ours[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)
