"""The tile plan of Kiln's sm_90 warpgroup GEMM (wgmma.mma_async m64nNk16, float16/bfloat16, float32 sums).

A block computes a block_m x block_n tile with `warpgroups` warpgroups of 128 threads, each block_m / warpgroups
rows as m_tiles wgmma tiles of 64 x block_n (block_n is the instruction's N). The k loop streams 64-deep slices
(one 128-byte line of halves) of A and B through `stages` shared-memory buffers, filled by cp.async (16 bytes a
thread, zero-filled past the edges; not TMA: see core/codegen/wgmma_gemm.py) in the 128-byte swizzled layout
wgmma reads through its matrix descriptors (PTX ISA, "Shared Memory Matrix Layout", "Matrix Descriptor Format"):
lines of 128 bytes, eight to a 1024-byte atom, the 16-byte chunk c of line l stored at chunk c ^ (l % 8). A is
K-major (rows of k); B is K-major when stored [n, k] ("nk") and N-major when stored [k, n] ("kn": atoms of 64 n x 8
k). `in_flight` wgmma groups keep running while the next iteration waits for its slice, so the copies run
stages - 1 - in_flight slices ahead (a stage is refilled only once the wgmma group that read it has retired).
Split-K, the block order and the epilogue's steps are gemm_mma's.

Index functions use +, *, //, %, ^, &, <<, >> only, so the NVPTX emitter (core/codegen/wgmma_gemm.py) evaluates
them on LLVM values and the CPU emulator (core/backends/cuda/schedules/gemm_wgmma_emulate.py) on numpy arrays.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from typing import Iterator, Optional

from .gemm_mma import CHUNK, GemmProblem, block_tile, copy_source, grid, k_slice_range  # noqa: F401 (re-exported)

WARPGROUP = 128  # threads: four warps issue one wgmma together
WGMMA_M, WGMMA_K = 64, 16
BLOCK_K = 64  # halves a slice: one 128-byte line
LINE = 128  # bytes
ATOM = 1024  # bytes: 8 lines, the 128-byte swizzle's repeating pattern (its start is 1024-byte aligned)
SWIZZLE_128B = 1  # the descriptor's swizzle mode
ALIGN_SLACK = ATOM  # shared bytes allocated beyond the stages so the kernel can round its base up to an atom
SHARED_LIMIT = 227 * 1024  # sm_90's opt-in shared memory per block
MAX_ACCUMULATORS = 128  # float32 sums a thread
KNOB_CHOICES = {"block_m": (64, 128, 256), "block_n": (64, 128, 256), "warpgroups": (1, 2), "stages": (2, 3, 4, 5, 6),
                "in_flight": (0, 1), "split_k": (1, 2, 4, 8)}


@dataclass(frozen=True)
class WgmmaConfig:
    """The tuner's knobs."""

    block_m: int = 128
    block_n: int = 256
    warpgroups: int = 2
    stages: int = 4
    in_flight: int = 1
    split_k: int = 1

    block_k = BLOCK_K

    @property
    def threads(self) -> int:
        return WARPGROUP * self.warpgroups

    @property
    def m_tiles(self) -> int:  # wgmma tiles of 64 rows a warpgroup
        return self.block_m // self.warpgroups // WGMMA_M

    @property
    def prefetch(self) -> int:  # slices the copies run ahead
        return self.stages - 1 - self.in_flight

    @property
    def a_stage_bytes(self) -> int:
        return self.block_m * LINE

    @property
    def b_stage_bytes(self) -> int:
        return self.block_n * LINE

    @property
    def shared_bytes(self) -> int:
        """The stages and the alignment slack: what a launch allocates."""
        return self.stages * (self.a_stage_bytes + self.b_stage_bytes) + ALIGN_SLACK

    @property
    def accumulators(self) -> int:
        return self.m_tiles * self.block_n // 2

    def to_json(self) -> dict:
        return asdict(self)


def problem_error(problem: GemmProblem) -> Optional[str]:
    """Why the wgmma kernel does not compute `problem` (None when it does)."""
    if problem.conv is not None:
        return "convolutions stay on the mma.sync implicit GEMM"
    if problem.a_stored != problem.dtype:
        return f"A must be stored as {problem.dtype} (a float32 A is converted by the mma.sync kernel only)"
    return None


def config_error(cfg: WgmmaConfig, problem: GemmProblem, max_shared_bytes: int = SHARED_LIMIT) -> Optional[str]:
    """Why `cfg` cannot run `problem` (None when it can)."""
    error = problem_error(problem)
    if error:
        return error
    if cfg.warpgroups < 1 or cfg.block_m % (cfg.warpgroups * WGMMA_M):
        return f"block_m {cfg.block_m} must be whole 64-row wgmma tiles for each of {cfg.warpgroups} warpgroups"
    if cfg.block_n % 64 or not 64 <= cfg.block_n <= 256:
        return f"block_n {cfg.block_n} must be 64, 128, 192 or 256 (whole 64-wide N-major atoms, wgmma's N <= 256)"
    if cfg.in_flight not in (0, 1) or cfg.prefetch < 1:
        return f"{cfg.stages} stages cannot keep {cfg.in_flight} wgmma groups in flight and copy ahead"
    if cfg.shared_bytes > max_shared_bytes:
        return f"{cfg.stages} stages need {cfg.shared_bytes} bytes of shared memory (at most {max_shared_bytes})"
    if cfg.accumulators > MAX_ACCUMULATORS:
        return f"{cfg.accumulators} accumulators a thread (at most {MAX_ACCUMULATORS})"
    k_slices = -(-problem.k // BLOCK_K)
    if cfg.split_k < 1 or (cfg.split_k - 1) * -(-k_slices // cfg.split_k) >= k_slices:
        return f"split_k {cfg.split_k} leaves a part without any of the {k_slices} k slices"
    return None


def default_config(problem: GemmProblem, sm_count: int = 132, split: bool = True) -> WgmmaConfig:
    """128x256 tiles of two warpgroups (64 x 256 each, 128 sums a thread), 4 stages (CUTLASS's sm_90 fp16 class);
    128x128 when n is at most 128 or the big tiles leave more than half the SMs idle, then 64x128 (one warpgroup);
    then split along k while the tiles still leave most SMs idle over a deep k."""
    def tiles_of(c: WgmmaConfig) -> int:
        return -(-problem.m // c.block_m) * -(-problem.n // c.block_n)

    cfg = WgmmaConfig()
    if problem.n <= 128 or tiles_of(cfg) < sm_count // 2:
        cfg = WgmmaConfig(block_n=128, stages=5)
    if tiles_of(cfg) < sm_count // 2:
        cfg = WgmmaConfig(block_m=64, block_n=128, warpgroups=1, stages=6)
    tiles, k_slices, parts = tiles_of(cfg), -(-problem.k // BLOCK_K), 1
    while (split and parts < max(KNOB_CHOICES["split_k"]) and tiles * parts * 2 <= sm_count
           and k_slices // (parts * 2) >= 4 and config_error(replace(cfg, split_k=parts * 2), problem) is None):
        parts *= 2
    return replace(cfg, split_k=parts)


def config_space(problem: GemmProblem, max_shared_bytes: int = SHARED_LIMIT) -> Iterator[WgmmaConfig]:
    """Every valid config of the knob grid (the default among them)."""
    names = list(KNOB_CHOICES)
    for values in itertools.product(*(KNOB_CHOICES[n] for n in names)):
        cfg = WgmmaConfig(**dict(zip(names, values)))
        if cfg.block_m > max(64, 2 * problem.m) or cfg.block_n > max(64, 2 * problem.n):
            continue
        if config_error(cfg, problem, max_shared_bytes) is None:
            yield cfg


# -- index functions (ints, numpy arrays or the emitter's LLVM values) ------------------------------------------
def n_major(problem: GemmProblem, operand: str) -> bool:
    """Whether `operand`'s stage tile is MN-major (B stored [k, n]); otherwise K-major."""
    return operand == "b" and problem.b_layout == "kn"


def chunks_per_row(cfg: WgmmaConfig, problem: GemmProblem, operand: str) -> int:
    """16-byte chunks per row of a stage tile as copied: rows of k for K-major tiles, rows of n for N-major."""
    return cfg.block_n // CHUNK if n_major(problem, operand) else BLOCK_K // CHUNK


def stage_chunks(cfg: WgmmaConfig, operand: str) -> int:
    return (cfg.a_stage_bytes if operand == "a" else cfg.b_stage_bytes) // 16


def copy_chunk(cfg: WgmmaConfig, problem: GemmProblem, operand: str, tid, it):
    """(row, chunk) of the `operand` slice that thread `tid` copies in its `it`-th copy of a stage (gemm_mma's
    copy_source takes these: A's rows are m, a "kn" B's rows k, an "nk" B's rows n). Eight consecutive threads
    copy one 128-byte line, so each quarter warp's 16-byte stores cover the 32 banks once."""
    index = it * cfg.threads + tid
    per_row = chunks_per_row(cfg, problem, operand)
    return index // per_row, index % per_row


def stage_offset(cfg: WgmmaConfig, problem: GemmProblem, operand: str, row, chunk):
    """The byte offset within a (1024-byte aligned) stage tile of logical 16-byte chunk (row, chunk): line l holds
    a K-major row, or, N-major, the 64 n of one k in atom n // 64 (block_k lines an atom column); the chunk is
    swizzled as 128-byte swizzling does it (16-byte chunk XOR line % 8)."""
    if n_major(problem, operand):
        line, slot = (chunk // 8) * BLOCK_K + row, chunk % 8
    else:
        line, slot = row, chunk
    return line * LINE + ((slot ^ (line & 7)) << 4)


def stage_base(cfg: WgmmaConfig, operand: str, stage):
    """Byte offset of `operand`'s buffer of `stage` from the (atom-aligned) shared base: A's stages, then B's."""
    if operand == "a":
        return stage * cfg.a_stage_bytes
    return stage * cfg.b_stage_bytes + cfg.stages * cfg.a_stage_bytes


def descriptor(start, leading: int, stride: int) -> tuple:
    """The 64-bit wgmma matrix descriptor as (low, high) 32-bit words: start address >> 4 in bits 0-13, leading
    byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, base offset 0 (atoms start 1024-byte aligned),
    the 128-byte swizzle mode in 62-63."""
    return ((start & 0x3FFFF) >> 4) + ((leading >> 4) << 16), (stride >> 4) + (SWIZZLE_128B << 30)


def a_descriptor(cfg: WgmmaConfig, base, stage, warpgroup, tile: int, kk: int) -> tuple:
    """A's descriptor for wgmma tile `tile` of `warpgroup` at k step kk (`base`: the shared address of the atom-
    aligned buffers). K-major: 8-row groups an atom apart (stride 1024), the k step 32 bytes into each line;
    the leading offset is unused by swizzled K-major layouts (1 by convention)."""
    row0 = (warpgroup * cfg.m_tiles + tile) * WGMMA_M
    return descriptor(base + stage_base(cfg, "a", stage) + row0 * LINE + kk * WGMMA_K * 2, 16, ATOM)


def b_descriptor(cfg: WgmmaConfig, problem: GemmProblem, base, stage, kk: int) -> tuple:
    """B's descriptor at k step kk, and whether wgmma must read it transposed (imm-trans-b: N-major). N-major: the
    step's 16 k are two 8-line groups an atom apart (stride 1024), 64-wide n atoms block_k lines apart (leading)."""
    start = base + stage_base(cfg, "b", stage)
    if n_major(problem, "b"):
        return descriptor(start + kk * WGMMA_K * LINE, BLOCK_K * LINE, ATOM), 1
    return descriptor(start + kk * WGMMA_K * 2, 16, ATOM), 0


def accumulator_position(cfg: WgmmaConfig, warpgroup, warp, lane, tile: int, reg: int):
    """(row, column) within the block tile of accumulator `reg` (0 .. block_n / 2 - 1) of wgmma tile `tile`,
    held by `lane` of `warp` (0..3 within its warpgroup): the m64nNk16 D fragment gives warp w rows 16 w .. 16 w +
    15; lane 4g + t rows g and g + 8, columns 8 i + 2 t and + 1 for each 8-column group i (registers 4 i .. 4 i + 3)."""
    row = (warpgroup * cfg.m_tiles + tile) * WGMMA_M + warp * 16 + lane // 4 + 8 * ((reg >> 1) & 1)
    return row, 8 * (reg >> 2) + 2 * (lane % 4) + (reg & 1)


__all__ = ["WgmmaConfig", "problem_error", "config_error", "default_config", "config_space", "n_major",
           "chunks_per_row", "stage_chunks", "copy_chunk", "stage_offset", "stage_base", "descriptor", "a_descriptor",
           "b_descriptor", "accumulator_position", "copy_source", "block_tile", "grid", "k_slice_range",
           "KNOB_CHOICES", "WARPGROUP", "BLOCK_K", "SHARED_LIMIT"]
