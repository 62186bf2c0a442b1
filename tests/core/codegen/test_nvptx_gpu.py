"""Generated PTX on a real GPU (skipped without an NVIDIA driver and GPU): the cooperative
shared-memory matmul and guarded grids compute exactly what numpy does, and every float intrinsic,
built without libm, is accurate to a few 1e-7 (relative, absolute near zero) over its domain."""
from __future__ import annotations

import math

import numpy as np
import pytest

from core.codegen.cuda_kernels import load_cuda_kernels
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from tests.helpers.gpu_prim_funcs import elementwise_on_grid, tiled_matmul

pytestmark = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")
CUDA = get_target("cuda")

# Domains where the float32 function is well conditioned, so float32 rounding of the input alone
# does not dominate the comparison with float64 numpy.
DOMAINS = {"exp": (-80, 80), "log": (1e-3, 1e3), "sqrt": (0, 1e4), "erf": (-5, 5), "tanh": (-10, 10),
           "sin": (-20, 20), "cos": (-20, 20), "tan": (-1.4, 1.4), "asin": (-1, 1), "acos": (-1, 1),
           "atan": (-50, 50), "sinh": (-10, 10), "cosh": (-10, 10), "asinh": (-50, 50), "acosh": (1, 50),
           "atanh": (-0.99, 0.99)}
NUMPY = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
         "atanh": np.arctanh, "erf": lambda x: np.array([math.erf(v) for v in x])}
TOLERANCE = {"tan": 5e-6, "sin": 1e-6, "cos": 1e-6}  # sin/cos.approx: 2^-20.9 absolute after reduction


def test_cooperative_matmul_on_the_gpu():
    rng = np.random.default_rng(1)
    funcs = [tiled_matmul(64, 96, 128), tiled_matmul(32, 48, 80, tile=8, k_tile=8)]
    lib = load_cuda_kernels(funcs, CUDA)
    for func in funcs:
        a_buf, b_buf, c_buf = func.params
        a = rng.standard_normal(a_buf.shape, dtype=np.float32)
        b = rng.standard_normal(b_buf.shape, dtype=np.float32)
        c = np.zeros(c_buf.shape, np.float32)
        lib.call(func.name, a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    lib.close()


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_math_accuracy(name):
    from core.tir.expr import call

    n = 1 << 16
    func = elementwise_on_grid(lambda v: call(name, v), f"g_{name}", n=n, threads=256)
    lib = load_cuda_kernels([func], CUDA)
    lo, hi = DOMAINS[name]
    x = np.random.default_rng(2).uniform(lo, hi, n).astype(np.float32)
    y = np.zeros(n, np.float32)
    lib.call(func.name, x, y)
    want = (NUMPY[name] if name in NUMPY else getattr(np, name))(x.astype(np.float64))
    err = np.abs(y.astype(np.float64) - want) / np.maximum(np.abs(want), 1.0)
    assert err.max() < TOLERANCE.get(name, 5e-7), f"{name}: max error {err.max():.2e} at x={x[err.argmax()]}"


def test_pow_follows_c():
    from core.te import tensor as te
    from core.te.lower import lower
    from core.te.schedule import create_schedule
    from core.tir.expr import binop

    x = te.placeholder((8,), "float32", "x")
    y = te.placeholder((8,), "float32", "y")
    z = te.compute((8,), lambda i: binop("pow", x[i], y[i]), "z")
    s = create_schedule(z)
    s[z].bind(z.op.axis[0], "threadIdx.x")
    lib = load_cuda_kernels([lower(s, [x, y, z], "pow8")], CUDA)
    xs = np.array([2, -2, -2, 0, 0, 3, -8, 10], np.float32)
    ys = np.array([10, 3, 2, 2, 0, -1, 1 / 3, 0.5], np.float32)
    out = np.zeros(8, np.float32)
    lib.call("pow8", xs, ys, out)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.power(xs, ys)
    np.testing.assert_allclose(out, want, rtol=2e-6, equal_nan=True)


def test_guarded_last_block():
    func = elementwise_on_grid(lambda v: v * 3 + 1, "affine", n=1000, threads=128)
    lib = load_cuda_kernels([func], CUDA)
    x = np.arange(1000, dtype=np.float32)
    y = np.full(1000 + 0, -1, np.float32)
    lib.call("affine", x, y)
    np.testing.assert_array_equal(y, x * 3 + 1)
    assert lib.time_ms("affine", x, y, repeat=3) > 0


def test_exp_saturates_without_nan():
    """Masked attention scores are -FLT_MAX: e^x must be 0 there (and inf past 89), never NaN."""
    from core.tir.expr import call

    func = elementwise_on_grid(lambda v: call("exp", v), "exp_edges", n=8, threads=8)
    lib = load_cuda_kernels([func], CUDA)
    x = np.array([-3.4e38, -1e30, -110, -104, 89, 100, np.inf, np.nan], np.float32)
    y = np.zeros(8, np.float32)
    lib.call(func.name, x, y)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-44)
