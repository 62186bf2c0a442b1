"""The tile plan of Kiln's CUTLASS-class tensor-core GEMM (C = epilogue(A[M, K] @ B[K, N]), float16 or bfloat16
operands, float32 sums): its knobs, which configs are valid, and every index function the kernel uses.

A block computes a block_m x block_n tile with warps_m x warps_n warps, each a (block_m / warps_m) x
(block_n / warps_n) warp tile of (mi x ni) mma.sync m16n8k16 instructions per 16-deep k step (several in both M
and N, so each ldmatrix'd fragment feeds several mma). The k loop streams block_k-deep slices of A and B through
`stages` shared-memory buffers filled by cp.async (16 bytes a thread, zero-filled past the matrix edges) that run
`stages - 1` slices ahead of the tensor cores. Shared memory holds 16-byte chunks XOR-swizzled within each
128-byte line (`swizzle`), so the eight row addresses of every ldmatrix phase hit distinct banks. The A operand
may be a convolution's implicit im2col matrix (conv_mma.py) and B may be stored n-major ([n, k], a weight in
OIHW/OHWI order: loaded by plain ldmatrix). Split-K
(grid z) gives each z-slice a range of k slices; its float32 partial tiles go to a workspace that a second kernel
sums before the epilogue.

The index functions are written once over +, *, //, %, ^, &, <<, >> so that the NVPTX emitter
(core/codegen/mma_gemm.py) evaluates them on LLVM values and the CPU emulator (core/backends/cuda/schedules/gemm_mma_emulate.py) on numpy
arrays: the CPU check runs the very addresses and fragment maps the GPU code uses.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from typing import Iterator, Optional

import numpy as np

from . import conv_mma
from .conv_mma import ConvShape, below

MMA_M, MMA_N, MMA_K = 16, 8, 16
WARP = 32
CHUNK = 8  # halves per 16-byte cp.async / ldmatrix row
LINE_CHUNKS = 8  # 16-byte chunks per 128-byte shared-memory line (32 banks x 4 bytes)
GROUP_M = 8  # tile rows per group of the block order (block_tile)
STATIC_SHARED_BYTES = 48 * 1024  # more is dynamic shared memory, which a kernel must be allowed at load
# Shared memory a block may have (dynamic, opted in) per architecture; CUDA's "maximum shared memory per block".
SHARED_LIMITS = {"sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024,
                 "sm_90": 227 * 1024, "sm_90a": 227 * 1024}
EPILOGUE_STEPS = ("bias", "residual", "relu", "relu6", "gelu", "sigmoid")  # relu6: Clip(0, 6), mobilenet's
OPERAND_DTYPES = ("float16", "bfloat16")
OUTPUT_DTYPES = ("float32", "float16", "bfloat16")
B_LAYOUTS = ("kn", "nk")  # B[k, n] row-major, or stored transposed as [n, k] (k contiguous)


@dataclass(frozen=True)
class GemmProblem:
    """What one kernel computes: shapes (row-major A[m, k], B[k, n], C[m, n]), dtypes and the fused epilogue,
    applied in order (bias[n] added, residual[m, n] added, an activation); bias and residual are `extra_dtype`
    (default: the output's; `bias_dtype` the bias's own when it differs). A float32 A (`a_dtype`, a half-precision compile's activations) is rounded to
    `dtype` as it is copied to shared memory. `b_layout` "nk": B is stored as [n, k]. `conv`: A is the implicit
    im2col matrix of that convolution's input (m, n, k its GEMM sizes; see conv_problem) and C lands in its
    output layout."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    out_dtype: str = "float32"
    epilogue: tuple[str, ...] = ()
    extra_dtype: str = ""
    a_dtype: str = ""
    b_layout: str = "kn"
    conv: Optional[ConvShape] = None
    bias_dtype: str = ""

    @property
    def a_stored(self) -> str:
        return self.a_dtype or self.dtype

    @property
    def extras_dtype(self) -> str:
        return self.extra_dtype or self.out_dtype

    @property
    def bias_stored(self) -> str:
        return self.bias_dtype or self.extras_dtype

    def __post_init__(self):
        if (self.dtype not in OPERAND_DTYPES or {self.out_dtype, self.extras_dtype, self.bias_stored} - set(OUTPUT_DTYPES)
                or self.a_stored not in (self.dtype, "float32")):
            raise ValueError(f"tensor-core GEMM: operands {self.dtype} / output {self.out_dtype} not supported")
        unknown = [s for s in self.epilogue if s not in EPILOGUE_STEPS]
        if unknown:
            raise ValueError(f"tensor-core GEMM: unknown epilogue steps {unknown} (known: {EPILOGUE_STEPS})")
        if self.b_layout not in B_LAYOUTS:
            raise ValueError(f"tensor-core GEMM: B layout {self.b_layout!r} is not one of {B_LAYOUTS}")
        if self.conv is not None and (self.conv.gemm_mnk != (self.m, self.n, self.k) or self.b_layout != "nk"):
            raise ValueError(f"tensor-core GEMM: {self.m}x{self.n}x{self.k} with an n-major B is not the GEMM of "
                             f"{self.conv} ({self.conv.gemm_mnk})")
        if min(self.m, self.n, self.k) < 1 or self.k % CHUNK or self.n % CHUNK:
            raise ValueError(f"tensor-core GEMM {self.m}x{self.n}x{self.k}: k and n must be multiples of {CHUNK} "
                             f"(16-byte rows for cp.async)")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def gathered(self) -> bool:
        """A is gathered element by element (an NCHW convolution) rather than copied in 16-byte chunks."""
        return self.conv is not None and self.conv.gathered

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.k, self.n) if self.b_layout == "kn" else (self.n, self.k)


def conv_problem(conv: ConvShape, dtype: str = "float16", out_dtype: str = "float32", epilogue: tuple = (),
                 extra_dtype: str = "", a_dtype: str = "", bias_dtype: str = "") -> GemmProblem:
    """The implicit GEMM of `conv`: M = N*OH*OW, N = OC, K = C*KH*KW, B the weights as [OC, K]."""
    m, n, k = conv.gemm_mnk
    return GemmProblem(m, n, k, dtype, out_dtype, tuple(epilogue), extra_dtype, a_dtype, "nk", conv, bias_dtype)


@dataclass(frozen=True)
class GemmConfig:
    """The tuner's knobs."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    stages: int = 3
    split_k: int = 1

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    @property
    def warp_m(self) -> int:
        return self.block_m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.block_n // self.warps_n

    @property
    def mi(self) -> int:  # mma tiles per warp along M
        return self.warp_m // MMA_M

    @property
    def ni(self) -> int:  # mma tiles per warp along N
        return self.warp_n // MMA_N

    @property
    def a_chunks_per_row(self) -> int:
        return self.block_k // CHUNK

    @property
    def b_chunks_per_row(self) -> int:
        return self.block_n // CHUNK

    @property
    def a_stage_chunks(self) -> int:
        return self.block_m * self.a_chunks_per_row

    @property
    def b_stage_chunks(self) -> int:
        return self.block_k * self.b_chunks_per_row

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.a_stage_chunks + self.b_stage_chunks) * 16

    def to_json(self) -> dict:
        return asdict(self)


KNOB_CHOICES = {"block_m": (64, 128, 256), "block_n": (64, 128, 256), "block_k": (16, 32, 64),
                "warps_m": (1, 2, 4), "warps_n": (1, 2, 4), "stages": (2, 3, 4, 5), "split_k": (1, 2, 4, 8)}


def config_error(cfg: GemmConfig, problem: GemmProblem, max_shared_bytes: int, max_threads: int = 1024,
                 max_accumulators: int = 128) -> Optional[str]:
    """Why `cfg` cannot run `problem` (None when it can)."""
    if cfg.block_m % (cfg.warps_m * MMA_M) or cfg.block_n % (cfg.warps_n * 2 * MMA_N):
        return "warp tiles must be whole 16-row and 16-column (two n8 tiles: one ldmatrix.x4.trans) multiples"
    if cfg.block_k % MMA_K or cfg.a_chunks_per_row > LINE_CHUNKS or cfg.b_chunks_per_row % min(cfg.b_chunks_per_row,
                                                                                              LINE_CHUNKS):
        return "block_k must be 16, 32 or 64 (a row of at most one 128-byte line)"
    if (cfg.a_stage_chunks % cfg.threads or cfg.b_stage_chunks % cfg.threads) or cfg.threads > max_threads:
        return f"{cfg.threads} threads must copy whole 16-byte chunks of each stage"
    if cfg.stages < 2 or cfg.shared_bytes > max_shared_bytes:
        return f"{cfg.stages} stages need {cfg.shared_bytes} bytes of shared memory (at most {max_shared_bytes})"
    if cfg.mi * cfg.ni * 4 > max_accumulators:
        return f"a warp tile of {cfg.warp_m}x{cfg.warp_n} holds {cfg.mi * cfg.ni * 4} accumulators a thread"
    k_slices = -(-problem.k // cfg.block_k)
    if cfg.split_k < 1 or cfg.split_k > k_slices:
        return f"split_k {cfg.split_k} exceeds the {k_slices} k slices"
    return None


def default_config(problem: GemmProblem, max_shared_bytes: int, sm_count: int = 108, split: bool = True) -> GemmConfig:
    """128x128x32, 3 stages, 4 warps of 64x64 (CUTLASS's sm_80 default shape class); 128x64 (4 warps of 64x32,
    4 stages) when n is at most 64 (resnet's 64-channel convs and stem: a 128-wide tile would compute half zeros);
    64x64 tiles (4 warps of 32x32, 4 stages) when the large ones would leave more than half the SMs idle; then
    split along k (unless `split` is off) while the tiles still leave most SMs idle over a deep k (tall and
    skinny)."""
    def tiles_of(c: GemmConfig) -> int:
        return -(-problem.m // c.block_m) * -(-problem.n // c.block_n)

    cfg = GemmConfig() if problem.n > 64 else GemmConfig(block_n=64, stages=4)
    if tiles_of(cfg) < sm_count // 2:
        cfg = GemmConfig(block_m=64, block_n=64, stages=4)
    tiles = tiles_of(cfg)
    k_slices = -(-problem.k // cfg.block_k)
    parts = 1
    while (split and parts < max(KNOB_CHOICES["split_k"]) and tiles * parts * 2 <= sm_count  # inside the space
           and k_slices // (parts * 2) >= 8):
        parts *= 2
    cfg = replace(cfg, split_k=parts)
    if config_error(cfg, problem, max_shared_bytes):
        cfg = replace(cfg, stages=2)
    return cfg


def shared_limit(arch: str) -> int:
    """The most shared memory a block may have on `arch` (48 KiB where the architecture is not known here)."""
    return SHARED_LIMITS.get(arch, STATIC_SHARED_BYTES)


def config_space(problem: GemmProblem, max_shared_bytes: int) -> Iterator[GemmConfig]:
    """Every valid config of the knob grid (the default among them)."""
    names = list(KNOB_CHOICES)
    for values in itertools.product(*(KNOB_CHOICES[n] for n in names)):
        cfg = GemmConfig(**dict(zip(names, values)))
        if cfg.block_m > max(64, 2 * problem.m) or cfg.block_n > max(64, 2 * problem.n):
            continue
        if config_error(cfg, problem, max_shared_bytes) is None:
            yield cfg


# -- index functions (ints, numpy arrays or the emitter's LLVM values) ------------------------------------------
def swizzle(row, chunk, chunks_per_row: int):
    """The physical 16-byte chunk of logical (row, chunk) in a row-major tile: the chunk's slot within its
    128-byte line XOR the line's row index mod 8, so 8 consecutive rows at one chunk lie in 8 distinct bank
    groups (ldmatrix reads 8 rows per phase) and a row's chunks stay in its own line."""
    rows_per_line = max(1, LINE_CHUNKS // chunks_per_row)
    linear = row * chunks_per_row + chunk
    return linear - (linear & 7) + ((linear & 7) ^ ((row // rows_per_line) & 7))


def b_chunks_per_row(cfg: GemmConfig, problem: GemmProblem) -> int:
    """16-byte chunks per row of B's stage tile: [block_k, block_n] for a "kn" B, [block_n, block_k] for "nk"."""
    return cfg.b_chunks_per_row if problem.b_layout == "kn" else cfg.a_chunks_per_row


def copy_a_chunk(cfg: GemmConfig, tid, it, problem: Optional[GemmProblem] = None):
    """(row, chunk) of the A slice that thread `tid` copies in its `it`-th copy of a stage. A gathered A runs
    rows fastest, so a warp's element loads read 32 neighbouring output pixels (coalesced in NCHW)."""
    index = it * cfg.threads + tid
    if problem is not None and problem.gathered:
        return index % cfg.block_m, index // cfg.block_m
    return index // cfg.a_chunks_per_row, index % cfg.a_chunks_per_row


def copy_b_chunk(cfg: GemmConfig, tid, it, problem: Optional[GemmProblem] = None):
    per_row = cfg.b_chunks_per_row if problem is None else b_chunks_per_row(cfg, problem)
    index = it * cfg.threads + tid
    return index // per_row, index % per_row


def copy_source(problem: GemmProblem, operand: str, row, chunk, m0, n0, k0):
    """(offset in the operand's array, inside: 1/0) of chunk (row, chunk) of an `operand` ("a" or "b") slice, for
    the block tile at (m0, n0) and the slice starting at k0; outside chunks are zero-filled."""
    if operand == "a":
        if problem.conv is not None:
            return conv_mma.a_chunk_source(problem.conv, m0 + row, k0 + chunk * CHUNK)
        g_row, g_col, width, rows = m0 + row, k0 + chunk * CHUNK, problem.k, problem.m
    elif problem.b_layout == "kn":
        g_row, g_col, width, rows = k0 + row, n0 + chunk * CHUNK, problem.n, problem.k
    else:
        g_row, g_col, width, rows = n0 + row, k0 + chunk * CHUNK, problem.k, problem.n
    return g_row * width + g_col, below(g_row, rows) * below(g_col, width)


def gather_source(problem: GemmProblem, row, chunk, m0, k0, element: int):
    """(offset in the NCHW input, inside: 1/0) of element `element` of a gathered A chunk (row, chunk)."""
    return conv_mma.a_element_source(problem.conv, m0 + row, k0 + chunk * CHUNK + element)


def output_index(problem: GemmProblem, row, col):
    """The offset of C[row, col] in the output (and a residual of the output's shape)."""
    if problem.conv is not None:
        return conv_mma.output_index(problem.conv, row, col)
    return row * problem.n + col


def column_stride(problem: GemmProblem) -> int:
    """How far apart in the output C[row, col] and C[row, col + 1] lie (1: a pair is one 2-wide access)."""
    return 1 if problem.conv is None else conv_mma.column_stride(problem.conv)


def warp_origin(cfg: GemmConfig, warp):
    """(first row, first column) of a warp's tile within the block tile."""
    return (warp // cfg.warps_n) * cfg.warp_m, (warp % cfg.warps_n) * cfg.warp_n


def ldmatrix_a(cfg: GemmConfig, warp, lane, tile_m, kk):
    """(row, chunk) of the A slice whose address `lane` gives to ldmatrix.x4 for mma tile `tile_m` at k step
    `kk`: matrices 0..3 = rows 0-7 / 8-15 at k 0-7, then at k 8-15 (a0..a3 of the m16n8k16 A fragment)."""
    row0, _ = warp_origin(cfg, warp)
    return row0 + tile_m * MMA_M + lane % 16, kk * 2 + lane // 16


def ldmatrix_b(cfg: GemmConfig, warp, lane, pair, kk):
    """(k row, chunk) of the B slice whose address `lane` gives to ldmatrix.x4.trans for n tiles 2 pair and
    2 pair + 1 at k step `kk`: matrices k 0-7 / 8-15 of the first n tile, then of the second (b0b1, b2b3 each)."""
    _, col0 = warp_origin(cfg, warp)
    return kk * MMA_K + lane % 16, (col0 + pair * 2 * MMA_N) // CHUNK + lane // 16


def b_fragment_address(cfg: GemmConfig, problem: GemmProblem, warp, lane, pair, kk):
    """(row, chunk, transposed) of `lane`'s ldmatrix.x4 address for B's n tiles 2 pair, 2 pair + 1 at k step kk:
    ldmatrix_b's .trans load of a "kn" B; for an "nk" B (rows = n) a plain load, matrices n 0-7 at k 0-7 / 8-15,
    then n 8-15 (the b0b1, b2b3 registers of each n tile as they come)."""
    if problem.b_layout == "kn":
        return (*ldmatrix_b(cfg, warp, lane, pair, kk), True)
    _, col0 = warp_origin(cfg, warp)
    return col0 + pair * 2 * MMA_N + (lane // 16) * 8 + lane % 8, kk * 2 + (lane // 8) % 2, False


def accumulator_position(cfg: GemmConfig, warp, lane, tile_m, tile_n, slot):
    """(row, column) within the block tile of accumulator `slot` (0..3) of mma tile (tile_m, tile_n): the
    m16n8 D fragment gives lane 4g + t rows g and g + 8, columns 2t and 2t + 1."""
    row0, col0 = warp_origin(cfg, warp)
    return (row0 + tile_m * MMA_M + lane // 4 + 8 * (slot // 2),
            col0 + tile_n * MMA_N + 2 * (lane % 4) + slot % 2)


def k_slice_range(cfg: GemmConfig, problem: GemmProblem, z: int) -> tuple[int, int]:
    """[first, end) of the block_k slices that split-K part `z` sums (python ints: the grid's z is known at
    build time per launch, the range per part is computed in-kernel from the same formula)."""
    slices = -(-problem.k // cfg.block_k)
    per = -(-slices // cfg.split_k)
    return min(slices, z * per), min(slices, (z + 1) * per)


def grid(cfg: GemmConfig, problem: GemmProblem) -> tuple[int, int, int]:
    return -(-problem.n // cfg.block_n), -(-problem.m // cfg.block_m), cfg.split_k


def block_tile(cfg: GemmConfig, problem: GemmProblem, bx, by):
    """(m tile, n tile) of launch block (bx, by): tiles taken GROUP_M tile rows at a time, down each column of
    the group before the next, so the blocks resident together share A's rows and B's columns in L2."""
    grid_n, grid_m, _ = grid(cfg, problem)
    block = by * grid_n + bx
    per_group = GROUP_M * grid_n
    first_m = block // per_group * GROUP_M
    rows = grid_m - first_m
    rows = rows.minimum(GROUP_M) if hasattr(rows, "minimum") else np.minimum(rows, GROUP_M)
    return first_m + block % per_group % rows, block % per_group // rows


__all__ = ["GemmProblem", "GemmConfig", "config_error", "default_config", "config_space", "swizzle", "grid",
           "conv_problem", "b_chunks_per_row", "gather_source", "output_index", "column_stride", "b_fragment_address",
           "copy_a_chunk", "copy_b_chunk", "copy_source", "ldmatrix_a", "ldmatrix_b", "accumulator_position", "k_slice_range",
           "warp_origin", "block_tile", "shared_limit", "KNOB_CHOICES", "EPILOGUE_STEPS"]
