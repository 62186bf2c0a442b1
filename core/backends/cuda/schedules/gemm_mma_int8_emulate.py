"""The int8 tensor-core GEMM run on a CPU thread by thread: gemm_mma_emulate's blocks on the problem's 16-bit view
(the same cp.async copies, swizzle, ldmatrix lanes and checks), with mma.sync m16n8k32's own fragment layout for
s8/u8 operands (PTX ISA, "Matrix Fragments for mma.m16n8k32": A register r of lane 4g + t holds row g + 8 (r % 2)
at bytes 4t + 16 (r // 2) .. + 3, B register r column g at bytes 4t + 16 r .. + 3, element 0 in the low byte), so
a fragment the 16-bit view gets wrong gives a wrong product. Sums are exact (int64, checked to fit int32)."""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ....kernels.gemm_plan import gemm_mma_int8 as plan
from ....kernels.gemm_plan.gemm_mma import GemmConfig
from ....kernels.gemm_plan.gemm_mma_int8 import Int8GemmProblem
from .gemm_mma_emulate import EmulationStats, _Block, accumulate

MMA_M, MMA_N, MMA_K = 16, 8, 32


class _Int8Block(_Block):
    """A block whose mma is m16n8k32 s8 x s8 -> s32 (`a_dtype` u8 for _UInt8Block)."""

    a_dtype = np.int8

    def mma(self, a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
        """a (warps, 32, 4, 2) and b (warps, 32, 2, 2) uint16 pairs as ldmatrix gives them, read as the registers'
        bytes; acc (warps, 32, 4) int64."""
        warps = a.shape[0]
        a8 = np.ascontiguousarray(a).view(self.a_dtype).reshape(warps, 32, 4, 4).astype(np.int64)
        b8 = np.ascontiguousarray(b).view(np.int8).reshape(warps, 32, 2, 4).astype(np.int64)
        g, t = self.lane[0] // 4, self.lane[0] % 4
        big_a = np.zeros((warps, MMA_M, MMA_K), np.int64)
        big_b = np.zeros((warps, MMA_K, MMA_N), np.int64)
        big_c = np.zeros((warps, MMA_M, MMA_N), np.int64)
        for reg in range(4):
            for i in range(4):
                big_a[:, g + 8 * (reg % 2), 4 * t + 16 * (reg // 2) + i] = a8[:, :, reg, i]
        for reg in range(2):
            for i in range(4):
                big_b[:, 4 * t + 16 * reg + i, g] = b8[:, :, reg, i]
        for slot in range(4):
            big_c[:, g + 8 * (slot // 2), 2 * t + slot % 2] = acc[:, :, slot]
        d = big_c + np.matmul(big_a, big_b)
        if np.abs(d).max(initial=0) >= 2 ** 31:
            raise AssertionError("an int32 accumulator overflows (mma.sync .s32 would wrap)")
        self.stats.mma += warps
        return np.stack([d[:, g + 8 * (slot // 2), 2 * t + slot % 2] for slot in range(4)], -1)


class _UInt8Block(_Int8Block):
    a_dtype = np.uint8


def emulate_int8(problem: Int8GemmProblem, cfg: GemmConfig, a: np.ndarray, b_nk: np.ndarray,
                 extras: Mapping[str, np.ndarray], stats: Optional[EmulationStats] = None) -> np.ndarray:
    """C [m, n] as the kernel computes it: `a` [m, k] of problem.a_dtype, `b_nk` int8 [n, k] (dp4a's packed
    weights are this, as [n, k / 4, 1, 4]); extras: correction [n] int32 and, as the problem has them, zero,
    bias [n] int32, multiplier (float32, one or [n])."""
    stats = stats if stats is not None else EmulationStats()
    halves = [np.ascontiguousarray(x).reshape(rows, problem.k).view(np.uint16)
              for x, rows in ((a, problem.m), (b_nk, problem.n))]
    block = _UInt8Block if problem.a_dtype == "uint8" else _Int8Block
    sums = accumulate(plan.view(problem), cfg, *halves, stats, block, np.int64)[0]
    return plan.epilogue(problem, sums, dict(extras))
