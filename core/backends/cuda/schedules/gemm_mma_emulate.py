"""The tensor-core GEMM run on a CPU, thread by thread as the GPU would (numpy, every warp and lane at once):
cp.async copies into the swizzled stage ring, ldmatrix's lane-to-fragment distribution, mma.sync's m16n8k16
fragment semantics (PTX ISA, "Matrix Fragments for mma.m16n8k16") and the epilogue at each accumulator's position,
all through gemm_mma's index functions. It checks what would fail silently on a GPU: two threads copying to one
chunk, a chunk never filled, an output written twice or never, and bank conflicts of any ldmatrix phase."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from ....kernels.gemm_plan import gemm_mma as plan
from ....kernels.gemm_plan.gemm_mma import GemmConfig, GemmProblem

BANKS = 32


def to_float32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """float16 / bfloat16 bit patterns (uint16) as float32."""
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def half_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype` (nearest even), as uint16 bit patterns."""
    if dtype == "float16":
        return x.astype(np.float16).view(np.uint16)
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


def apply_epilogue(problem: GemmProblem, sums: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                   extras: Mapping[str, np.ndarray]) -> np.ndarray:
    """The epilogue steps on float32 sums at (rows, cols), in float32 as the kernel does."""
    out = sums.astype(np.float32)
    for step in problem.epilogue:
        if step == "bias":
            out = out + extras["bias"].astype(np.float32)[cols]
        elif step == "residual":
            residual = extras["residual"].astype(np.float32)
            out = out + (residual if residual.shape == out.shape else residual[rows, cols])
        elif step in ("relu", "relu6"):
            out = np.maximum(out, 0) if step == "relu" else np.minimum(np.maximum(out, 0), 6)
        elif step == "sigmoid":
            with np.errstate(over="ignore"):  # exp(-x) overflows to inf for very negative x: sigmoid 0, as on the GPU
                out = 1 / (1 + np.exp(-out))
        else:
            erf = np.vectorize(math.erf, otypes=[np.float64])
            out = (0.5 * out * (1 + erf(out / math.sqrt(2)))).astype(np.float32)
    return out


@dataclass
class EmulationStats:
    ldmatrix_phases: int = 0
    bank_conflict_phases: int = 0
    copies: int = 0
    mma: int = 0
    notes: list = field(default_factory=list)


class _Block:
    """One thread block's shared memory and registers."""

    def __init__(self, cfg: GemmConfig, problem: GemmProblem, a: np.ndarray, b: np.ndarray, stats: EmulationStats):
        self.cfg, self.problem, self.a, self.b, self.stats = cfg, problem, a.ravel(), b.ravel(), stats
        self.smem = np.zeros((cfg.shared_bytes // 16, plan.CHUNK), np.uint16)
        self.filled = np.zeros(cfg.shared_bytes // 16, bool)
        self.warp = np.arange(cfg.threads // plan.WARP)[:, None]
        self.lane = np.arange(plan.WARP)[None, :]

    def stage_chunk(self, operand: str, stage: int) -> int:
        cfg = self.cfg
        if operand == "a":
            return stage * cfg.a_stage_chunks
        return cfg.stages * cfg.a_stage_chunks + stage * cfg.b_stage_chunks

    def copy_slice(self, m0: int, n0: int, k_slice: int, stage: int) -> None:
        cfg, p = self.cfg, self.problem
        tid = np.arange(cfg.threads)
        k0 = k_slice * cfg.block_k
        for operand, per_stage, cpr, source in (
                ("a", cfg.a_stage_chunks, cfg.a_chunks_per_row, self.a),
                ("b", cfg.b_stage_chunks, plan.b_chunks_per_row(cfg, p), self.b)):
            base = self.stage_chunk(operand, stage)
            written = np.zeros(per_stage, int)
            chunk_of = plan.copy_a_chunk if operand == "a" else plan.copy_b_chunk
            for it in range(per_stage // cfg.threads):
                row, chunk = chunk_of(cfg, tid, it, p)
                if operand == "a" and p.gathered:  # element by element, each with its own padding test
                    where = [plan.gather_source(p, row, chunk, m0, k0, e) for e in range(plan.CHUNK)]
                    offset = np.stack([np.where(inside > 0, off, 0) for off, inside in where], -1)
                    data = np.where(np.stack([inside for _, inside in where], -1) > 0, source[offset], 0)
                else:
                    offset, inside = plan.copy_source(p, operand, row, chunk, m0, n0, k0)
                    offset = np.where(inside > 0, offset, 0)
                    data = np.where(inside[:, None] > 0, source[offset[:, None] + np.arange(plan.CHUNK)], 0)
                dst = plan.swizzle(row, chunk, cpr)
                np.add.at(written, dst, 1)
                data = data.astype(source.dtype)
                if data.dtype != np.uint16:  # a float32 A: rounded to the operand dtype on the way
                    data = half_bits(data.astype(np.float32), p.dtype)
                self.smem[base + dst] = data
                self.stats.copies += cfg.threads
            if not (written == 1).all():
                raise AssertionError(f"{operand} stage copy: chunks written {np.bincount(written)} times "
                                     "(each must be written exactly once)")
            self.filled[base:base + per_stage] = True

    def ldmatrix(self, chunk: np.ndarray, trans: bool) -> np.ndarray:
        """(warps, 32 lanes, 4 registers, 2 halves) from lane addresses `chunk` (warps, 32) in 16-byte units."""
        if not self.filled[chunk].all():
            raise AssertionError("ldmatrix reads shared memory no cp.async filled")
        for j in range(4):  # one 8-address phase per matrix: 8 rows x 16 bytes must cover all 32 banks once
            banks = ((chunk[:, 8 * j:8 * j + 8, None] * 4 + np.arange(4)) % BANKS).reshape(chunk.shape[0], 32)
            self.stats.ldmatrix_phases += chunk.shape[0]
            self.stats.bank_conflict_phases += int(sum(len(set(w)) < BANKS for w in banks.tolist()))
        rows = self.smem[chunk]  # (warps, 32, 8): lane 8j + r gives row r of matrix j
        matrices = rows.reshape(rows.shape[0], 4, 8, 8)  # (warps, matrix, row, column)
        g, t = self.lane[0] // 4, self.lane[0] % 4
        if trans:
            pair = np.stack([matrices[:, :, 2 * t, g], matrices[:, :, 2 * t + 1, g]], -1)  # (warps, 4, 32, 2)
        else:
            pair = np.stack([matrices[:, :, g, 2 * t], matrices[:, :, g, 2 * t + 1]], -1)
        return pair.transpose(0, 2, 1, 3)

    def ldmatrix_b(self, stage: int, pair: int, kk: int) -> np.ndarray:
        row, chunk, trans = plan.b_fragment_address(self.cfg, self.problem, self.warp, self.lane, pair, kk)
        cpr = plan.b_chunks_per_row(self.cfg, self.problem)
        return self.ldmatrix(self.stage_chunk("b", stage) + plan.swizzle(row, chunk, cpr), trans)

    def mma(self, a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
        """m16n8k16 on every warp: a (warps, 32, 4, 2), b (warps, 32, 2, 2), acc (warps, 32, 4) float32."""
        dtype = self.problem.dtype
        warps = a.shape[0]
        g, t = self.lane[0] // 4, self.lane[0] % 4
        big_a = np.zeros((warps, 16, 16), np.float32)
        big_b = np.zeros((warps, 16, 8), np.float32)
        big_c = np.zeros((warps, 16, 8), np.float32)
        af, bf = to_float32(a, dtype), to_float32(b, dtype)
        for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            for e in (0, 1):
                big_a[:, g + dr, 2 * t + dk + e] = af[:, :, reg, e]
        for reg in (0, 1):
            for e in (0, 1):
                big_b[:, 2 * t + 8 * reg + e, g] = bf[:, :, reg, e]
        for slot in range(4):
            big_c[:, g + 8 * (slot // 2), 2 * t + slot % 2] = acc[:, :, slot]
        d = big_c + np.matmul(big_a.astype(np.float64), big_b.astype(np.float64)).astype(np.float32)
        self.stats.mma += warps
        return np.stack([d[:, g + 8 * (slot // 2), 2 * t + slot % 2] for slot in range(4)], -1)


def accumulate(problem: GemmProblem, cfg: GemmConfig, a: np.ndarray, b: np.ndarray, stats: EmulationStats,
               block: type = _Block, acc_dtype=np.float32) -> np.ndarray:
    """The accumulators every block's warps hold after the mainloop, placed at their C positions: [split_k parts,
    m, n] of `acc_dtype`; `block` a _Block whose `mma` is the instruction (another for the int8 kernel)."""
    p = problem
    grid_n, grid_m, parts = plan.grid(cfg, p)
    partial = np.zeros((parts, p.m, p.n), acc_dtype)
    written = np.zeros((parts, p.m, p.n), int)
    slices = -(-p.k // cfg.block_k)
    per = -(-slices // cfg.split_k)
    for z in range(parts):
        first = z * per
        count = max(0, min(per, slices - min(first, slices)))
        for by in range(grid_m):
            for bx in range(grid_n):
                bm, bn = (int(t) for t in plan.block_tile(cfg, p, bx, by))
                blk = block(cfg, p, a, b, stats)
                m0, n0 = bm * cfg.block_m, bn * cfg.block_n
                acc = np.zeros((cfg.mi, cfg.ni, cfg.threads // plan.WARP, plan.WARP, 4), acc_dtype)
                for s in range(cfg.stages - 1):
                    if s < count:
                        blk.copy_slice(m0, n0, first + s, s)
                for kt in range(count):
                    if kt + cfg.stages - 1 < count:  # refills the stage computed at kt - 1, before computing kt
                        blk.copy_slice(m0, n0, first + kt + cfg.stages - 1, (kt + cfg.stages - 1) % cfg.stages)
                    stage = kt % cfg.stages
                    for kk in range(cfg.block_k // plan.MMA_K):
                        a_frags = [blk.ldmatrix(blk.stage_chunk("a", stage) + plan.swizzle(
                            *plan.ldmatrix_a(cfg, blk.warp, blk.lane, tm, kk), cfg.a_chunks_per_row), False)
                            for tm in range(cfg.mi)]
                        b_frags = [blk.ldmatrix_b(stage, pair, kk) for pair in range(cfg.ni // 2)]
                        for tm in range(cfg.mi):
                            for tn in range(cfg.ni):
                                part_b = b_frags[tn // 2][:, :, 2 * (tn % 2):2 * (tn % 2) + 2]
                                acc[tm, tn] = blk.mma(a_frags[tm], part_b, acc[tm, tn])
                for tm in range(cfg.mi):
                    for tn in range(cfg.ni):
                        for slot in range(4):
                            row, col = plan.accumulator_position(cfg, blk.warp, blk.lane, tm, tn, slot)
                            g_row, g_col = (m0 + row).ravel(), (n0 + col).ravel()
                            keep = (g_row < p.m) & (g_col < p.n)
                            np.add.at(written[z], (g_row[keep], g_col[keep]), 1)
                            partial[z, g_row[keep], g_col[keep]] = acc[tm, tn, :, :, slot].ravel()[keep]
    if not (written == 1).all():
        raise AssertionError(f"outputs written {np.unique(written)} times (each must be written once per part)")
    return partial


def emulate(problem: GemmProblem, cfg: GemmConfig, a: np.ndarray, b: np.ndarray,
            extras: Optional[Mapping[str, np.ndarray]] = None, stats: Optional[EmulationStats] = None) -> np.ndarray:
    """C as the kernels compute it (float32 before rounding to problem.out_dtype). `a`, `b`: uint16 bit
    patterns of problem.dtype, shapes [m, k] (a convolution's input for a conv problem) and problem.b_shape (`a`
    float32 values when problem.a_dtype is float32); extras: bias [n], residual of the output's shape (float32
    values). The result has the output's shape ([m, n], or the convolution's NCHW / NHWC output)."""
    stats = stats if stats is not None else EmulationStats()
    extras = extras or {}
    p = problem
    partial = accumulate(p, cfg, a, b, stats)
    rows, cols = np.indices((p.m, p.n))
    place = plan.output_index(p, rows, cols)
    if np.bincount(place.ravel(), minlength=p.m * p.n).max() != 1 or (
            plan.output_index(p, rows[:, :-1], cols[:, :-1]) + plan.column_stride(p) != place[:, 1:]).any():
        raise AssertionError("the output index does not place each C[row, col] once, columns a stride apart")
    extras = dict(extras)
    if "residual" in extras:  # given in the output's layout: read where C[row, col] lands, as the kernel does
        extras["residual"] = np.asarray(extras["residual"]).ravel()[place]
    out = np.zeros(p.m * p.n, np.float32)
    out[place] = apply_epilogue(p, partial.sum(0), rows, cols, extras)
    return out.reshape(p.conv.output_shape) if p.conv is not None else out.reshape(p.m, p.n)
