"""Tuning template of TreeEnsemble: its walk (branch-free or branchy) and layout (rows per block, trees per step,
tree chunks) of core/kernels/tree_ensemble.py, the heuristic `tree_layout` being the default point."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..kernels.registry import get_schedule
from ..kernels.schedules.generic import CPU_GENERIC
from ..kernels.schedules.util import find_ops
from ..kernels.tree_ensemble import BRANCHY, LAYOUT_ATTR, PROGRAM_TAG, WALKS, TreeLayout
from ..target import Target
from ..te.schedule import Schedule, Stage
from ..te.tensor import ComputeOp, Tensor
from .space import ConfigSpace
from .templates import Template, register_template

ROWS_PER_BLOCK = (1, 2, 4, 8, 16)
TREES_PER_STEP = (1, 4, 8, 16)
CHUNKS = (1, 2, 4, 8, 16)
MAX_LANES = 32  # interleaved walks per step: more spill their node indices and gain nothing


def _rows_trees(op: ComputeOp) -> tuple[int, int]:
    x, roots = op.input_tensors[0], op.input_tensors[3]
    return x.shape[0], roots.shape[0]


def define_tree_layout(op: ComputeOp, target: Target, default: Mapping[str, Any]) -> ConfigSpace:
    """Chunk counts up to the partials' slots (the compute's first extent), row blocks up to the rows."""
    rows, trees = _rows_trees(op)
    slots = op.shape[0]
    space = ConfigSpace()
    space.define_knob("walk", sorted(set(WALKS) | {default["walk"]}))
    space.define_knob("rows_per_block", sorted({r for r in ROWS_PER_BLOCK if r <= rows} | {default["rows_per_block"]}))
    space.define_knob("trees_per_step", sorted({g for g in TREES_PER_STEP if g <= trees}
                                               | {default["trees_per_step"]}))
    space.define_knob("chunks", sorted({c for c in CHUNKS if c <= slots} | {slots, default["chunks"]}))
    return space


def read_tree_layout_default(stage: Stage) -> dict:
    layout: TreeLayout = stage.op.attrs[LAYOUT_ATTR]
    return {"walk": layout.walk, "rows_per_block": layout.rows_per_block, "trees_per_step": layout.trees_per_step,
            "chunks": layout.chunks}


def tree_layout_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    # A branchy walk takes one tree at a time: other tree steps would only repeat its point.
    if cfg["walk"] == BRANCHY and cfg["trees_per_step"] != 1:
        return False
    return cfg["chunks"] <= op.shape[0] and cfg["rows_per_block"] * cfg["trees_per_step"] <= MAX_LANES


def apply_tree_layout(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    get_schedule("TreeEnsemble", target, CPU_GENERIC)(sch, outs, target)  # a CPU template: the CPU's generic one
    layout = TreeLayout(int(cfg["rows_per_block"]), int(cfg["trees_per_step"]), int(cfg["chunks"]), str(cfg["walk"]))
    for op in find_ops(outs, [PROGRAM_TAG]):
        op.attrs[LAYOUT_ATTR] = layout  # read when the stage is lowered, like a schedule's loop annotations


# Measured on the model's own tree tables and distinct inputs: with zero tables every walk ends at the root,
# and one repeated input lets the branch predictor learn its paths (a branchy walk would always look best).
register_template(Template("TreeEnsemble", PROGRAM_TAG, define_tree_layout, apply_tree_layout,
                           read_tree_layout_default, tree_layout_valid, real_inputs=True))
