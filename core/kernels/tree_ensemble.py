"""TreeEnsemble: a loop program (te.extern) that walks every tree for blocks of rows, in parallel across
(tree chunk, row block) pairs, then a reduction over the chunks' partial aggregates.

Each tree is walked for its depth over one node table (leaves point to themselves): per level one load of the
node's row, one of the row's feature and a compare-and-select of the next node, no data-dependent branch. A
block of `rows_per_block` rows is walked together so that the block's independent walks overlap their memory
latency (the interleaved layout; one row per block is the plain per-row walk). With few rows, a few trees are
walked together instead (for the deepest one's depth), and the trees are split into chunks that run on
different threads (ONNX Runtime does the same)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.ml import NODE_FIELDS
from ..te import tensor as te
from ..tir.expr import (Buffer, Expr, Var, call, cast, const, eq, logical_and, logical_or, maximum, minimum, ne,
                        reinterpret, select)
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq
from .registry import register_compute

# Independent walks interleaved in one step, enough to hide a load's latency: rows of a block when there are
# many rows, trees of one row when few. Measured on a znver5 host (bench/bench_ml.py and single kernels):
# 16 trees beat 1, 4 and 8 per step; 8 rows beat the per-row walk by 1.7-2x at 1024 rows.
ROW_LANES, TREE_LANES = 8, 16
PARALLEL_ITEMS = 16  # tree chunks x row blocks to spread over the thread pool; more only adds partials
PARALLEL_MIN_WALKS = 64 * 1024  # rows x trees below which a fork/join of the pool costs more than it saves
MAX_UNROLLED_WIDTH = 16


@dataclass(frozen=True)
class TreeLayout:
    """How the walks are laid out: `rows_per_block` rows and `trees_per_step` trees walked together (their
    product is the interleaved lanes), trees split into `chunks` that run on different threads."""

    rows_per_block: int
    trees_per_step: int
    chunks: int


def tree_layout(rows: int, trees: int) -> TreeLayout:
    """Interleave rows when there are enough for every parallel item; with few rows interleave trees instead,
    split into chunks across threads when there is enough work."""
    if rows >= ROW_LANES * PARALLEL_ITEMS:
        return TreeLayout(ROW_LANES, 1, 1)
    chunks = 1
    if rows * trees >= PARALLEL_MIN_WALKS:
        chunks = max(1, min(-(-trees // TREE_LANES), -(-PARALLEL_ITEMS // rows)))
    return TreeLayout(1, TREE_LANES, chunks)


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def _as_index(value: Expr) -> Expr:
    return value if value.dtype == "int64" else cast("int64", value)


_COMPARE = {"leq": lambda a, b: a <= b, "lt": lambda a, b: a < b, "gte": lambda a, b: a >= b,
            "gt": lambda a, b: a > b, "eq": eq, "neq": ne}


class _WalkProgram:
    """The loop program writing partial[chunk, row, target] for one ensemble."""

    def __init__(self, ins: Sequence[Buffer], out: Buffer, attrs: Mapping[str, Any], layout: TreeLayout):
        self.x, self.nodes, self.leaf, self.roots, self.depths, self.offsets = ins[:6]
        self.nan_true = ins[6] if len(ins) > 6 else None
        self.out = out
        self.rows, self.features = self.x.shape
        self.trees = self.roots.shape[0]
        self.width = self.leaf.shape[1]
        self.targets = int(attrs["n_targets"])
        self.mode, self.aggregate = attrs["mode"], attrs["aggregate"]
        self.per_block, self.per_step, self.chunks = layout.rows_per_block, layout.trees_per_step, layout.chunks
        self.blocks = -(-self.rows // self.per_block)
        self.steps = -(-(-(-self.trees // self.chunks)) // self.per_step)  # tree groups per chunk
        lanes = self.per_block * self.per_step
        self.acc = Buffer("tree_acc", (self.per_block * self.targets,), self.x.dtype, "local")
        self.node = Buffer("tree_node", (lanes,), "int64", "local")

    def init_value(self) -> Expr:
        value = {"sum": 0.0, "average": 0.0, "min": float("inf"), "max": -float("inf")}[self.aggregate]
        return const(value, self.x.dtype)

    def combine(self, old: Expr, new: Expr) -> Expr:
        if self.aggregate in ("sum", "average"):
            return old + new
        return minimum(old, new) if self.aggregate == "min" else maximum(old, new)

    def field(self, node: Expr, name: str) -> Expr:
        value = self.nodes.load(node * len(NODE_FIELDS) + NODE_FIELDS.index(name))
        return reinterpret(self.x.dtype, value) if name == "threshold" else _as_index(value)

    def go_left(self, value: Expr, node: Expr) -> Expr:
        taken = _COMPARE[self.mode](value, self.field(node, "threshold"))
        if self.nan_true is None:
            return taken
        missing = logical_and(call("isnan", value), ne(self.nan_true.load(node), const(0, self.nan_true.dtype)))
        return logical_or(taken, missing)

    def row(self, block: Expr, r: int) -> Expr:
        """Row `r` of `block`, clamped to the last row: a partial last block walks a real row, writes nothing."""
        return minimum(block * self.per_block + r, _i64(self.rows - 1))

    def unrolled(self, name: str, extent: int, body) -> Stmt:
        var = Var(name)
        return For(var, _i64(extent), ForKind.UNROLLED if extent <= MAX_UNROLLED_WIDTH else ForKind.SERIAL, body(var))

    def walk_group(self, block: Expr, first: Expr) -> Stmt:
        """Trees first .. first + per_step - 1 for every row of `block`; a tree past the last walks the last
        tree again and adds nothing."""
        trees = [minimum(first + g, _i64(self.trees - 1)) for g in range(self.per_step)]
        lanes = [(r, g) for r in range(self.per_block) for g in range(self.per_step)]

        def lane(r: int, g: int) -> Expr:
            return _i64(r * self.per_step + g)

        def step(r: int, g: int) -> Stmt:
            node = self.node.load(lane(r, g))
            value = self.x.load(self.row(block, r) * self.features + self.field(node, "feature"))
            nxt = select(self.go_left(value, node), self.field(node, "left"), self.field(node, "right"))
            return Store(self.node, lane(r, g), nxt)

        def gather(r: int, g: int) -> Stmt:
            def one(w: Var) -> Stmt:
                slot = _i64(r * self.targets) + _as_index(self.offsets.load(trees[g])) + w
                weight = self.leaf.load(self.node.load(lane(r, g)) * self.width + w)
                return Store(self.acc, slot, self.combine(self.acc.load(slot), weight))

            add = self.unrolled("tree_w", self.width, one)
            return add if self.per_step == 1 else IfThenElse(first + g < _i64(self.trees), add)

        depth = _as_index(self.depths.load(trees[0]))
        for tree in trees[1:]:
            depth = maximum(depth, _as_index(self.depths.load(tree)))
        starts = [Store(self.node, lane(r, g), _as_index(self.roots.load(trees[g]))) for r, g in lanes]
        walk = For(Var("tree_level"), depth, ForKind.SERIAL, seq(*(step(r, g) for r, g in lanes)))
        return seq(*starts, walk, *(gather(r, g) for r, g in lanes))

    def item(self, index: Var) -> Stmt:
        chunk, block = index // self.blocks, index % self.blocks
        i = Var("tree_i")
        init = For(i, _i64(self.per_block * self.targets), ForKind.SERIAL, Store(self.acc, i, self.init_value()))
        group = Var("tree_group")
        first = (chunk * self.steps + group) * self.per_step
        walks = For(group, _i64(self.steps), ForKind.SERIAL,
                    IfThenElse(first < _i64(self.trees), self.walk_group(block, first)))

        def write(r: int) -> Stmt:
            k = Var("tree_k")
            row = block * self.per_block + r
            store = For(k, _i64(self.targets), ForKind.SERIAL,
                        Store(self.out, (chunk * self.rows + row) * self.targets + k,
                              self.acc.load(_i64(r * self.targets) + k)))
            return IfThenElse(row < _i64(self.rows), store)

        body = seq(init, walks, *(write(r) for r in range(self.per_block)))
        return Allocate(self.acc, Allocate(self.node, body))

    def build(self) -> Stmt:
        items = self.chunks * self.blocks
        index = Var("tree_item")
        return For(index, _i64(items), ForKind.PARALLEL if items > 1 else ForKind.SERIAL, self.item(index))


@register_compute("TreeEnsemble")
def tree_ensemble(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    tensors = [t for t in inputs if t is not None]
    x, roots = tensors[0], tensors[3]
    rows, targets, trees = x.shape[0], int(attrs["n_targets"]), roots.shape[0]
    layout = TreeLayout(int(attrs["rows_per_block"]), int(attrs["trees_per_step"]), int(attrs["tree_chunks"])) \
        if "rows_per_block" in attrs else tree_layout(rows, trees)
    chunks = layout.chunks
    partial = te.extern((chunks, rows, targets), tensors,
                        lambda ins, out: _WalkProgram(ins, out, attrs, layout).build(), x.dtype, name="tree_partial")
    aggregate = attrs["aggregate"]
    if chunks == 1 and aggregate != "average":
        return [te.compute((rows, targets), lambda n, k: partial(_i64(0), n, k), name="tree_scores", tag="injective")]
    c = te.reduce_axis(chunks, "tree_chunk")
    reducer = {"sum": te.sum, "average": te.sum, "min": te.min, "max": te.max}[aggregate]
    total = te.compute((rows, targets), lambda n, k: reducer(partial(c, n, k), axis=c), name="tree_total")
    if aggregate != "average":
        return [total]
    count = const(float(max(1, trees)), x.dtype)
    return [te.compute((rows, targets), lambda n, k: total(n, k) / count, name="tree_scores", tag="injective")]
