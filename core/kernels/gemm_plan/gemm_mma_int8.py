"""The int8 tensor-core GEMM's plan (C = epilogue(A[M, K] @ B[K, N]), A uint8 or int8, B int8 stored n-major as
dp4a's packed weights, int32 sums by mma.sync m16n8k32): which problems it takes, when it beats dp4a, and its tiles.

An m16n8k32 s8/u8 fragment is, byte for byte, an m16n8k16 f16 fragment (PTX ISA, "Matrix Fragments for
mma.m16n8k32" and "for mma.m16n8k16"): A's four registers are rows g and g + 8 at bytes 4t..4t+3 and 16 + 4t..,
B's two are column g at the same bytes, the accumulators sit at the same (row, column). So the int8 kernel runs the
float plan (gemm_mma.py) on its 16-bit view, `view(problem)`: K int8 columns are K / 2 sixteen-bit ones, and every
cp.async chunk, swizzle, ldmatrix.x4 lane address and accumulator position is the float kernel's. Only the
instruction, the int32 accumulators and the integer epilogue differ (core/codegen/mma_gemm_int8.py). B must be
n-major ([n, k], k contiguous): ldmatrix's .trans transposes 16-bit elements, not bytes. Tile configs are
gemm_mma.GemmConfig in those 16-bit units (block_k 32 = 64 int8 k a slice); split-K is not used (int32 parts).

The epilogue, in the order ONNX Runtime's integer kernels apply it: the zero points' column correction (the packed
MatMul's: -za * sum_k b[k, n], or per unit of a run-time za), an int32 bias, then optionally Requantize
(float32(acc) * multiplier, clamped to [min - zp, max - zp], rounded half to even, plus zp) to uint8 / int8.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

import numpy as np

from . import gemm_mma
from .gemm_mma import GemmConfig, GemmProblem

ATTR = "gemm_mma_int8"
A_DTYPES = ("uint8", "int8")
OUT_DTYPES = ("int32", "uint8", "int8")
MULTIPLIERS = ("", "scalar", "column")  # no Requantize, one multiplier, one per output column
MIN_ARCH = 80  # m16n8k32 with cp.async and ldmatrix: sm_80 on (sm_75's s8 mma is m8n8k16, without cp.async)
# dp4a or mma: below MIN_ROWS rows (GEMV and small-batch shapes) a 64-row tile would compute mostly zero rows, below
# MIN_COLUMNS columns most of a 64-wide one, and below MIN_MACS multiply-adds both kernels are launch-bound (a few
# microseconds) while the mma kernel's pipeline prologue and large tiles leave most SMs idle; above all three,
# tensor cores (8x dp4a's peak on sm_80: 624 against 78 dense int8 TOPS on an A100) win.
MIN_ROWS = 64
MIN_COLUMNS = 32
MIN_MACS = 1 << 22


@dataclass(frozen=True)
class Int8GemmProblem:
    """What one kernel computes: A [m, k] (`a_dtype`), B int8 as [n, k], C [m, n] `out_dtype`. `run_time_zero`:
    the correction is per unit of a data zero point read at run time (parameter "zero"); `bias`: an int32 bias
    [n] after it; `multiplier` "scalar" / "column": Requantize to out_dtype with `zero_point`, `lo`, `hi`."""

    m: int
    n: int
    k: int
    a_dtype: str = "uint8"
    out_dtype: str = "int32"
    run_time_zero: bool = False
    bias: bool = False
    multiplier: str = ""
    zero_point: int = 0
    lo: int = 0
    hi: int = 0

    def __post_init__(self):
        if self.a_dtype not in A_DTYPES or self.out_dtype not in OUT_DTYPES or self.multiplier not in MULTIPLIERS:
            raise ValueError(f"int8 tensor-core GEMM: A {self.a_dtype} / output {self.out_dtype} / multiplier "
                             f"{self.multiplier!r} not supported")
        if (self.out_dtype == "int32") != (not self.multiplier):
            raise ValueError("int8 tensor-core GEMM: an 8-bit output needs a Requantize multiplier, int32 none")
        if min(self.m, self.n, self.k) < 1 or self.k % 16 or self.n % gemm_mma.CHUNK:
            raise ValueError(f"int8 tensor-core GEMM {self.m}x{self.n}x{self.k}: k must be a multiple of 16 and n "
                             f"of {gemm_mma.CHUNK} (16-byte rows for cp.async)")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def mma_types(self) -> str:
        """The instruction's .atype.btype."""
        return f".{'u8' if self.a_dtype == 'uint8' else 's8'}.s8"


def view(problem: Int8GemmProblem) -> GemmProblem:
    """The 16-bit problem whose plan addresses (in 16-bit units) are this int8 problem's bytes."""
    return GemmProblem(problem.m, problem.n, problem.k // 2, "float16", "float32", (), b_layout="nk")


def config_error(cfg: GemmConfig, problem: Int8GemmProblem, max_shared_bytes: int) -> Optional[str]:
    if cfg.split_k != 1:
        return "split-K is not used by the int8 kernel (its parts would need an int32 workspace and reduction)"
    return gemm_mma.config_error(cfg, view(problem), max_shared_bytes)


def default_config(problem: Int8GemmProblem, max_shared_bytes: int, sm_count: int = 108) -> GemmConfig:
    """The float kernel's default on the view (128x128 tiles of 64 int8 k a slice, 3 stages; 128x64 for narrow n;
    64x64 when the big tiles leave most SMs idle), never split along k."""
    return gemm_mma.default_config(view(problem), max_shared_bytes, sm_count, split=False)


def config_space(problem: Int8GemmProblem, max_shared_bytes: int) -> Iterator[GemmConfig]:
    """The tuning space: the float kernel's knob grid on the view, without split-K."""
    return (cfg for cfg in gemm_mma.config_space(view(problem), max_shared_bytes) if cfg.split_k == 1)


def grid(cfg: GemmConfig, problem: Int8GemmProblem) -> tuple[int, int, int]:
    return gemm_mma.grid(cfg, view(problem))


def prefers_mma(m: int, n: int, k: int, arch: str) -> bool:
    """Whether the tensor-core kernel, rather than dp4a, computes an m x n x k int8 product on `arch`."""
    return (int(arch.removeprefix("sm_") or 0) >= MIN_ARCH and m >= MIN_ROWS and n >= MIN_COLUMNS
            and m * n * k >= MIN_MACS)


def int8_gemm_attr(problem: Int8GemmProblem, cfg: GemmConfig, params: dict[str, int]) -> dict[str, str]:
    """The PrimFunc attributes that make a kernel this int8 GEMM (`params`: role -> parameter index)."""
    return {ATTR: json.dumps({"problem": asdict(problem), "config": asdict(cfg), "params": params}, sort_keys=True)}


def int8_gemm_of(func) -> Optional[tuple[Int8GemmProblem, GemmConfig, dict]]:
    """(problem, config, role -> parameter index) of an int8 tensor-core GEMM kernel, None for any other."""
    attr = func.attrs.get(ATTR)
    if attr is None:
        return None
    data = json.loads(attr)
    return Int8GemmProblem(**data["problem"]), GemmConfig(**data["config"]), data["params"]


def param_roles(problem: Int8GemmProblem) -> list[str]:
    """The kernel's parameters in order: A, B (n-major), the correction [n], then the optional run-time zero point,
    bias and multiplier, then C."""
    optional = [("zero", problem.run_time_zero), ("bias", problem.bias), ("multiplier", bool(problem.multiplier))]
    return ["a", "b", "correction", *[role for role, used in optional if used], "c"]


def reference(problem: Int8GemmProblem, a: np.ndarray, b_nk: np.ndarray, extras: dict) -> np.ndarray:
    """The exact result: int64 sums of A [m, k] @ B (given n-major [n, k]), then the epilogue."""
    return epilogue(problem, a.astype(np.int64) @ b_nk.astype(np.int64).T, extras)


def epilogue(problem: Int8GemmProblem, sums: np.ndarray, extras: dict) -> np.ndarray:
    """The integer epilogue on exact int64 sums [m, n]: the correction (times the run-time zero point), the bias,
    then Requantize in MLAS's order (op_defs.quantize.requantize_reference) or the int32 sums."""
    from ...graph.op_defs.quantize import requantize_reference

    correction = extras["correction"].astype(np.int64)
    if problem.run_time_zero:
        correction = correction * int(np.asarray(extras["zero"]).ravel()[0])
    acc = sums + correction
    if problem.bias:
        acc = acc + extras["bias"].astype(np.int64).ravel()
    if not (np.abs(acc) < 2 ** 31).all():
        raise ValueError("the int32 sums overflow")
    acc = acc.astype(np.int32)
    if not problem.multiplier:
        return acc
    attrs = {"zero_point": problem.zero_point, "min": problem.lo, "max": problem.hi, "to": problem.out_dtype}
    return requantize_reference(acc, np.asarray(extras["multiplier"], np.float32).ravel(), attrs)


__all__ = ["Int8GemmProblem", "view", "config_error", "default_config", "config_space", "grid", "prefers_mma",
           "int8_gemm_attr", "int8_gemm_of", "param_roles", "reference", "epilogue", "MIN_ROWS", "MIN_COLUMNS", "MIN_MACS", "MIN_ARCH"]
