"""The sm_90 warpgroup GEMM run on a CPU as the GPU would: cp.async copies into the 128-byte swizzled stage ring
through gemm_wgmma's index functions, then each wgmma.mma_async reads its operands only through the 64-bit matrix
descriptors the plan builds, decoded here as the PTX ISA defines them ("Matrix Descriptor Format", the canonical
"Shared Memory Matrix Layout"s with Swizzle<3,4,3> on the byte address), and keeps its sums in the m64nNk16 D
register fragment; the epilogue reads them back through the plan's accumulator positions. It also checks the
pipeline: a stage is refilled only after the wgmma group that read it retired, every wgmma reads the slice it
should, every stage chunk is written once, the quarter-warp cp.async stores are free of bank conflicts, and each
output is written once."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ....kernels.gemm_plan import gemm_wgmma as plan
from ....kernels.gemm_plan.gemm_mma import GemmProblem, output_index
from ....kernels.gemm_plan.gemm_wgmma import WgmmaConfig
from .gemm_mma_emulate import BANKS, apply_epilogue, to_float32

WARPS = 4  # a warpgroup's


@dataclass
class WgmmaStats:
    wgmma: int = 0
    copy_phases: int = 0
    copy_conflict_phases: int = 0
    descriptors: int = 0


def decode_descriptor(desc: int) -> dict:
    """The fields of a 64-bit wgmma matrix descriptor (byte values)."""
    return {"start": (desc & 0x3FFF) << 4, "leading": ((desc >> 16) & 0x3FFF) << 4,
            "stride": ((desc >> 32) & 0x3FFF) << 4, "base_offset": (desc >> 49) & 7, "swizzle": desc >> 62}


def swizzled(address: np.ndarray) -> np.ndarray:
    """128-byte swizzling of a shared byte address: its 16-byte chunk bits (4-6) XOR its line bits (7-9)."""
    return address ^ (((address >> 7) & 7) << 4)


def descriptor_matrix(smem: np.ndarray, desc: int, rows: int, n_major: bool) -> np.ndarray:
    """The rows x 16 operand (uint16 bits; rows = M of A or N of B, columns k) that wgmma reads through `desc`
    from shared memory `smem` (uint16, byte address / 2), per the canonical 128-byte swizzled layouts:
    K-major ((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 halves."""
    f = decode_descriptor(desc)
    if f["swizzle"] != plan.SWIZZLE_128B or f["base_offset"] != 0:
        raise AssertionError(f"descriptor {desc:#x}: only 128-byte swizzling from atom-aligned patterns is emulated")
    r, k = np.indices((rows, plan.WGMMA_K))
    if n_major:
        address = f["start"] + (r // 64) * f["leading"] + (r % 64) * 2 + (k // 8) * f["stride"] + (k % 8) * plan.LINE
    else:
        if f["start"] % plan.LINE + plan.WGMMA_K * 2 > plan.LINE:
            raise AssertionError(f"descriptor {desc:#x}: a K-major k step must stay inside its 128-byte line")
        address = f["start"] + (r // 8) * f["stride"] + (r % 8) * plan.LINE + k * 2
    return smem[swizzled(address) // 2]


def fragment_positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) in the 64 x n tile of D register r of lane l of warp w, arrays (4, 32, n / 2): the PTX ISA's
    m64nNk16 accumulator fragment (row 16 w + l / 4 (+ 8 for r % 4 >= 2), column 8 (r / 4) + 2 (l % 4) + r % 2)."""
    w, lane, reg = np.indices((WARPS, 32, n // 2))
    return 16 * w + lane // 4 + 8 * ((reg % 4) // 2), 8 * (reg // 4) + 2 * (lane % 4) + reg % 2


class _Block:
    """One block's shared memory, its stage ring's contents and the wgmma groups not yet retired."""

    def __init__(self, cfg: WgmmaConfig, problem: GemmProblem, a: np.ndarray, b: np.ndarray, stats: WgmmaStats):
        self.cfg, self.problem, self.a, self.b, self.stats = cfg, problem, a.ravel(), b.ravel(), stats
        stage_bytes = cfg.stages * (cfg.a_stage_bytes + cfg.b_stage_bytes)
        for operand in ("a", "b"):
            if (plan.stage_base(cfg, operand, np.arange(cfg.stages)) % plan.ATOM).any():
                raise AssertionError(f"{operand}'s stage buffers are not 1024-byte aligned")
        self.smem = np.zeros(stage_bytes // 2, np.uint16)
        self.holds = [None] * cfg.stages  # the k slice each stage holds
        self.pending: list[set] = []  # stages read by each wgmma group not yet retired, oldest first

    def copy_slice(self, m0: int, n0: int, k_slice: int, stage: int) -> None:
        cfg, p = self.cfg, self.problem
        if any(stage in group for group in self.pending):
            raise AssertionError(f"slice {k_slice} overwrites stage {stage} while a wgmma group still reads it")
        tid = np.arange(cfg.threads)
        k0 = k_slice * plan.BLOCK_K
        for operand, source in (("a", self.a), ("b", self.b)):
            per_stage = plan.stage_chunks(cfg, operand)
            written = np.zeros(per_stage, int)
            base = plan.stage_base(cfg, operand, stage)
            for it in range(per_stage // cfg.threads):
                row, chunk = plan.copy_chunk(cfg, p, operand, tid, it)
                offset, inside = plan.copy_source(p, operand, row, chunk, m0, n0, k0)
                offset = np.where(inside > 0, offset, 0)
                data = np.where(inside[:, None] > 0, source[offset[:, None] + np.arange(plan.CHUNK)], 0)
                dst = plan.stage_offset(cfg, p, operand, row, chunk)
                np.add.at(written, dst // 16, 1)
                self.smem[(base + dst)[:, None] // 2 + np.arange(plan.CHUNK)] = data
                banks = (((base + dst) // 4)[:, None] + np.arange(4)) % BANKS  # a quarter warp: 8 x 16 bytes
                for quarter in banks.reshape(-1, 32):
                    self.stats.copy_phases += 1
                    self.stats.copy_conflict_phases += len(set(quarter.tolist())) < BANKS
            if not (written == 1).all():
                raise AssertionError(f"{operand} stage copy: chunks written {np.bincount(written)} times")
        self.holds[stage] = k_slice

    def wgmma_group(self, stage: int, k_slice: int, acc: np.ndarray, first: bool, base: int = 0) -> None:
        """Every warpgroup's wgmma of one slice (m_tiles x 4 k steps) on acc (warpgroups, m_tiles, 4, 32, n / 2),
        operands read through the plan's descriptors at shared address `base`; then commit_group. The kernel's
        first wgmma (`first`, k step 0) has scale-d 0: it ignores the undefined sums (NaN here)."""
        cfg, p = self.cfg, self.problem
        if self.holds[stage] != k_slice:
            raise AssertionError(f"the wgmma of slice {k_slice} reads stage {stage}, which holds {self.holds[stage]}")
        rows, cols = fragment_positions(cfg.block_n)
        for kk in range(plan.BLOCK_K // plan.WGMMA_K):
            (b_lo, b_hi), trans = plan.b_descriptor(cfg, p, base, stage, kk)
            b_op = to_float32(descriptor_matrix(self.smem, b_lo | b_hi << 32, cfg.block_n, bool(trans)), p.dtype)
            for wg in range(cfg.warpgroups):
                for tile in range(cfg.m_tiles):
                    a_lo, a_hi = plan.a_descriptor(cfg, base, stage, wg, tile, kk)
                    a_op = to_float32(descriptor_matrix(self.smem, a_lo | a_hi << 32, plan.WGMMA_M, False), p.dtype)
                    d = np.zeros((plan.WGMMA_M, cfg.block_n), np.float32)
                    if not (first and kk == 0):
                        d[rows, cols] = acc[wg, tile]
                    d += (a_op.astype(np.float64) @ b_op.astype(np.float64).T).astype(np.float32)
                    acc[wg, tile] = d[rows, cols]
                    self.stats.wgmma += 1
            self.stats.descriptors += 1 + cfg.warpgroups * cfg.m_tiles
        self.pending.append({stage})

    def wait_group(self, n: int) -> None:
        """wgmma.wait_group n: all but the newest n groups retire."""
        del self.pending[:max(0, len(self.pending) - n)]


def emulate(problem: GemmProblem, cfg: WgmmaConfig, a: np.ndarray, b: np.ndarray,
            extras: Optional[Mapping[str, np.ndarray]] = None, stats: Optional[WgmmaStats] = None) -> np.ndarray:
    """C [m, n] as the kernels compute it (float32, before rounding to problem.out_dtype). `a`, `b`: uint16 bits
    of problem.dtype, shapes [m, k] and problem.b_shape; extras: bias [n], residual [m, n] (float32 values)."""
    error = plan.config_error(cfg, problem)
    if error:
        raise ValueError(error)
    stats = stats if stats is not None else WgmmaStats()
    p = problem
    grid_n, grid_m, parts = plan.grid(cfg, p)
    partial = np.zeros((parts, p.m, p.n), np.float32)
    written = np.zeros((parts, p.m, p.n), int)
    warpgroup, warp, lane, reg = np.indices((cfg.warpgroups, WARPS, 32, cfg.block_n // 2))
    for z in range(parts):
        first, end = plan.k_slice_range(cfg, p, z)
        count = end - first
        for by in range(grid_m):
            for bx in range(grid_n):
                bm, bn = (int(t) for t in plan.block_tile(cfg, p, bx, by))
                m0, n0 = bm * cfg.block_m, bn * cfg.block_n
                blk = _Block(cfg, p, a, b, stats)
                acc = np.full((cfg.warpgroups, cfg.m_tiles, WARPS, 32, cfg.block_n // 2), np.nan, np.float32)
                for s in range(min(cfg.prefetch, count)):
                    blk.copy_slice(m0, n0, first + s, s)
                for kt in range(count):  # after the barrier: every warpgroup passed the last wait_group
                    if kt + cfg.prefetch < count:
                        blk.copy_slice(m0, n0, first + kt + cfg.prefetch, (kt + cfg.prefetch) % cfg.stages)
                    blk.wgmma_group(kt % cfg.stages, first + kt, acc, kt == 0)
                    blk.wait_group(cfg.in_flight)
                blk.wait_group(0)
                for tile in range(cfg.m_tiles):
                    row, col = plan.accumulator_position(cfg, warpgroup, warp, lane, tile, reg)
                    g_row, g_col = (m0 + row).ravel(), (n0 + col).ravel()
                    keep = (g_row < p.m) & (g_col < p.n)
                    np.add.at(written[z], (g_row[keep], g_col[keep]), 1)
                    partial[z, g_row[keep], g_col[keep]] = acc[:, tile].ravel()[keep]
    if not (written == 1).all():
        raise AssertionError(f"outputs written {np.unique(written)} times (each must be written once per part)")
    rows, cols = np.indices((p.m, p.n))
    out = np.zeros(p.m * p.n, np.float32)
    out[output_index(p, rows, cols)] = apply_epilogue(p, partial.sum(0), rows, cols, dict(extras or {}))
    return out.reshape(p.m, p.n)


__all__ = ["emulate", "WgmmaStats", "decode_descriptor", "descriptor_matrix", "fragment_positions", "swizzled"]
