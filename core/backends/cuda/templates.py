"""Tunable GPU templates (target kind cuda, registered by CudaBackend.load_templates): the knobs of the cuda Conv (spatial and pointwise), MatMul
(tiled, tensor cores for float16, and matrix-vector) and packed int8 (dp4a) schedules as config spaces.
Candidates are PTX kernel bundles measured on the GPU by the same tuner (measure.py), their records shared
like the CPU's."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .schedules import conv2d as gpu_conv
from .schedules import conv2d_pointwise as gpu_pointwise
from .schedules import dense as gpu_dense
from .schedules import dense_tensorcore as tensorcore
from .schedules import gemv
from .schedules import integer as gpu_integer
from ...target import CUDA_KIND, Target, get_target
from ...te.schedule import Schedule, Stage
from ...te.tensor import ComputeOp, Tensor
from ...tune.space import ConfigSpace
from ...tune.templates import Template, register_template

_CUDA = get_target("cuda")
_MIN_THREADS = 32  # below a warp per block most of every SM's lanes idle


def _options(limit: int, candidates: Sequence[int], default: int) -> list[int]:
    """The candidates that fit `limit` (a tile never exceeds its axis), plus the default."""
    return sorted({c for c in candidates if c <= max(1, limit)} | {int(default)})


def _threads(cfg: Mapping[str, Any], names: Sequence[str]) -> int:
    return math.prod(int(cfg[name]) for name in names)


# -- Conv -----------------------------------------------------------------------------------------
def define_conv(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    space = ConfigSpace()
    channels = op.reduce_axis[0].extent
    if op.attrs.get("flat"):  # a pointwise conv: output channels x pixels, as a GEMM
        _, m, pixels = op.shape
        space.define_knob("f_threads", _options(m, (1, 2, 4, 8, 16, 32), default["f_threads"]))
        space.define_knob("f_reg", _options(m, (1, 2, 4, 8), default["f_reg"]))
        space.define_knob("p_threads", _options(pixels, (8, 16, 32, 64, 128), default["p_threads"]))
        space.define_knob("p_reg", _options(pixels, (1, 2, 4), default["p_reg"]))
    else:
        _, m, oh, ow = op.shape
        space.define_knob("f_threads", _options(m, (1, 2, 4, 8, 16), default["f_threads"]))
        space.define_knob("f_reg", _options(m, (1, 2, 4), default["f_reg"]))
        space.define_knob("y_threads", _options(oh, (1, 2, 4, 7, 8), default["y_threads"]))
        space.define_knob("y_reg", _options(oh, (1, 2), default["y_reg"]))
        space.define_knob("x_threads", _options(ow, (2, 4, 7, 8, 14, 16), default["x_threads"]))
        space.define_knob("x_reg", _options(ow, (1, 2, 4, 7, 14), default["x_reg"]))
    space.define_knob("rc_tile", _options(channels, (1, 2, 4, 8, 16, 32), default["rc_tile"]))
    return space


def read_conv_default(stage: Stage) -> dict:
    op = stage.op
    return gpu_pointwise.default_tiles(op) if op.attrs.get("flat") else gpu_conv.default_tiles(op, _CUDA)


def conv_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    if op.attrs.get("flat"):
        threads = _threads(cfg, ("f_threads", "p_threads"))
        return _MIN_THREADS <= threads <= target.max_threads_per_block
    threads = _threads(cfg, ("f_threads", "y_threads", "x_threads"))
    return (_MIN_THREADS <= threads <= target.max_threads_per_block
            and gpu_conv.conv_shared_bytes(op, cfg, int(cfg["rc_tile"])) <= target.max_shared_bytes)


def apply_conv(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    gpu_conv.schedule_conv2d(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


# -- MatMul ---------------------------------------------------------------------------------------
def define_matmul(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    space = ConfigSpace()
    k = op.reduce_axis[0].extent
    if "k_split" in default:  # matrix-vector: how many threads share one column's reduction
        space.define_knob("k_split", _options(k, (1, 2, 4, 8, 16, 32), default["k_split"]))
        return space
    *_, m, n = op.shape
    if "warps" in default and tensorcore.default_tiles(op, target) is not None:  # float16 on tensor cores
        space.define_knob("warps", _options(n // tensorcore.MMA_N, (1, 2, 4, 8), default["warps"]))
        space.define_knob("mma_m", _options(m // tensorcore.MMA_M, (1, 2, 4, 8), default["mma_m"]))
        space.define_knob("k_tile", _options(k, (16, 32, 64), default["k_tile"]))
        space.define_knob("tensor_cores", [1])
        return space
    if "warps" in default:  # a target without mma.sync: the SIMT tiles
        default = gpu_dense.default_tiles(op)
    space.define_knob("m_threads", _options(m, (1, 2, 4, 8, 16, 32), default["m_threads"]))
    space.define_knob("m_reg", _options(m, (1, 2, 4, 8), default["m_reg"]))
    space.define_knob("n_threads", _options(n, (4, 8, 16, 32), default["n_threads"]))
    space.define_knob("n_reg", _options(n, (1, 2, 4, 8), default["n_reg"]))
    space.define_knob("k_tile", _options(k, (4, 8, 16, 32), default["k_tile"]))
    return space


def read_matmul_default(stage: Stage) -> dict:
    if gemv.applies(stage.op):
        return {"k_split": gemv.DEFAULT_K_SPLIT}
    return tensorcore.default_tiles(stage.op, _CUDA) or gpu_dense.default_tiles(stage.op)


def matmul_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    if "k_split" in cfg:
        return 32 * int(cfg["k_split"]) <= target.max_threads_per_block
    if "warps" in cfg:
        return tensorcore.fits(op, {k: int(v) for k, v in cfg.items()}, target)
    threads = _threads(cfg, ("m_threads", "n_threads"))
    tile_floats = int(cfg["k_tile"]) * (int(cfg["m_threads"]) * int(cfg["m_reg"]) + int(cfg["n_threads"]) * int(cfg["n_reg"]))
    return _MIN_THREADS <= threads <= target.max_threads_per_block and 4 * tile_floats <= target.max_shared_bytes


def apply_matmul(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    gpu_dense.schedule_matmul(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


# -- int8 (dp4a) -----------------------------------------------------------------------------------
def define_int8(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """A packed MatMul's (rows x columns) or conv's (channels x rows x columns) thread and register tiles, and
    the reduction step: column (channel) tiles only among those that divide, as the schedule needs."""
    space = ConfigSpace()
    depth_groups = op.reduce_axis[-2].extent
    if op.attrs.get("conv_columns") is None:
        *_, m, n = op.shape
        space.define_knob("row_threads", _options(m, (1, 2, 4, 8, 16), default["row_threads"]))
        space.define_knob("rows_reg", _options(m, (1, 2, 4, 8), default["rows_reg"]))
        space.define_knob("col_threads", _divisors(n, (8, 16, 32, 64), default["col_threads"]))
        space.define_knob("cols_reg", _divisors(n, (1, 2, 4), default["cols_reg"]))
        space.define_knob("k_tile", _options(4 * depth_groups, (16, 32, 64, 128), default["k_tile"]))
        return space
    _, oh, ow, channels = op.shape
    space.define_knob("o_threads", _divisors(channels, (1, 2, 4, 8, 16), default["o_threads"]))
    space.define_knob("o_reg", _divisors(channels, (1, 2, 4), default["o_reg"]))
    space.define_knob("y_threads", _options(oh, (1, 2, 4, 8), default["y_threads"]))
    space.define_knob("y_reg", _options(oh, (1, 2), default["y_reg"]))
    space.define_knob("x_threads", _options(ow, (4, 8, 16), default["x_threads"]))
    space.define_knob("x_reg", _options(ow, (1, 2, 4), default["x_reg"]))
    space.define_knob("c_groups", _options(depth_groups, (4, 8, 16), default["c_groups"]))
    return space


def _divisors(n: int, candidates: Sequence[int], default: int) -> list[int]:
    return sorted({c for c in candidates if n % c == 0} | {int(default)})


def read_int8_default(stage: Stage) -> dict:
    op = stage.op
    return gpu_integer.default_tiles(op) if op.attrs.get("conv_columns") is None else gpu_integer.default_conv_tiles(op)


def int8_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    if op.attrs.get("conv_columns") is None:
        threads, columns = _threads(cfg, ("row_threads", "col_threads")), _threads(cfg, ("col_threads", "cols_reg"))
        return _MIN_THREADS <= threads <= target.max_threads_per_block and op.shape[-1] % columns == 0
    threads = _threads(cfg, ("o_threads", "y_threads", "x_threads"))
    return (_MIN_THREADS <= threads <= target.max_threads_per_block
            and op.shape[3] % _threads(cfg, ("o_threads", "o_reg")) == 0)


def apply_int8(schedule_fn):
    def apply(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
        schedule_fn(sch, outs, target, **{k: int(v) for k, v in cfg.items()})

    return apply


register_template(Template("Conv", "conv2d", define_conv, apply_conv, read_conv_default, conv_valid,
                           target_kind=CUDA_KIND))
register_template(Template("MatMul", "matmul", define_matmul, apply_matmul, read_matmul_default, matmul_valid,
                           target_kind=CUDA_KIND))
for _op, _schedule in (("MatMulIntegerPacked", gpu_integer.schedule_matmul_integer),
                       ("ConvIntegerPacked", gpu_integer.schedule_conv_integer)):
    register_template(Template(_op, "int8_dot", define_int8, apply_int8(_schedule), read_int8_default, int8_valid,
                               target_kind=CUDA_KIND))
