"""TreeEnsemble: a loop program (te.extern) that walks every tree for blocks of rows, in parallel across
(tree chunk, row block) pairs, then a reduction over the chunks' partial aggregates.

Each tree is walked for its depth over one node table (leaves point to themselves): per level one load of the
node's row, one of the row's feature and a compare-and-select of the next node, no data-dependent branch. A
block of `rows_per_block` rows is walked together so that the block's independent walks overlap their memory
latency (the interleaved layout; one row per block is the plain per-row walk). With few rows, a few trees are
walked together instead (for the deepest one's depth), and the trees are split into chunks that run on
different threads (ONNX Runtime does the same).

The branchy layout walks one tree for one row at a time and branches on the node being a leaf: the levels past
a leaf load nothing, so a shallow leaf costs only a predicted branch per remaining level (TIR has no while loop;
the walk is bounded by the tree's own depth). It reaches the same leaves and adds them in the same order as the
branch-free walk, so both give the same bits. core/tune/templates_trees.py declares the choice as knobs (not
registered yet: tuning measurements still feed empty tree tables); the compute sizes the partials for `chunk_slots` chunks and a layout using fewer fills the rest with the
aggregate's identity, so any chunk count up to that is a point of the same kernel."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..errors import ScheduleError
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
# The heuristic always walks branch-free: with inputs that vary from call to call (bench/bench_ml.py --distinct),
# it beat the branchy walk at 1 to 1024 rows on both benchmark ensembles (4x at one row of the random forest).
# The branchy walk wins only when the same rows come again and the branch predictor has learnt their paths.
BRANCH_FREE, BRANCHY = "branch_free", "branchy"
WALKS = (BRANCH_FREE, BRANCHY)
LAYOUT_ATTR = "tree_layout"  # the partial stage's attrs entry its loop program is built from
PROGRAM_TAG = "tree_ensemble"  # the partial stage's tag (the tuning template's anchor)


@dataclass(frozen=True)
class TreeLayout:
    """How the walks are laid out: `rows_per_block` rows and `trees_per_step` trees walked together (their
    product is the interleaved lanes), trees split into `chunks` that run on different threads; `walk` is
    BRANCH_FREE (every lane for the group's full depth) or BRANCHY (one tree at a time, branching on leaves;
    trees_per_step is 1)."""

    rows_per_block: int
    trees_per_step: int
    chunks: int
    walk: str = BRANCH_FREE


def tree_layout(rows: int, trees: int) -> TreeLayout:
    """Interleave rows when there are enough for every parallel item; with few rows interleave trees instead,
    split into chunks across threads when there is enough work."""
    if rows >= ROW_LANES * PARALLEL_ITEMS:
        return TreeLayout(ROW_LANES, 1, 1)
    chunks = 1
    if rows * trees >= PARALLEL_MIN_WALKS:
        chunks = max(1, min(-(-trees // TREE_LANES), -(-PARALLEL_ITEMS // rows)))
    return TreeLayout(1, TREE_LANES, chunks)


def chunk_slots(rows: int, trees: int) -> int:
    """The most tree chunks a layout of this ensemble may use: enough for every parallel item when rows are few,
    none past the trees; one when rows alone fill the threads (at least the heuristic's count either way)."""
    if rows >= ROW_LANES * PARALLEL_ITEMS:
        return 1
    return max(1, min(-(-trees // TREE_LANES), -(-PARALLEL_ITEMS // rows)))


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def _as_index(value: Expr) -> Expr:
    return value if value.dtype == "int64" else cast("int64", value)


_COMPARE = {"leq": lambda a, b: a <= b, "lt": lambda a, b: a < b, "gte": lambda a, b: a >= b,
            "gt": lambda a, b: a > b, "eq": eq, "neq": ne}


class _WalkProgram:
    """The loop program writing partial[chunk, row, target] for one ensemble."""

    def __init__(self, ins: Sequence[Buffer], out: Buffer, attrs: Mapping[str, Any], layout: TreeLayout):
        if layout.walk == BRANCHY:
            layout = TreeLayout(layout.rows_per_block, 1, layout.chunks, BRANCHY)
        self.x, self.nodes, self.leaf, self.roots, self.depths, self.offsets = ins[:6]
        self.nan_true = ins[6] if len(ins) > 6 else None
        self.out = out
        self.rows, self.features = self.x.shape
        self.trees = self.roots.shape[0]
        self.width = self.leaf.shape[1]
        self.targets = int(attrs["n_targets"])
        self.mode, self.aggregate = attrs["mode"], attrs["aggregate"]
        self.per_block, self.per_step, self.chunks = layout.rows_per_block, layout.trees_per_step, layout.chunks
        self.walk, self.slots = layout.walk, out.shape[0]
        if self.chunks > self.slots or self.walk not in WALKS:
            raise ScheduleError(f"TreeEnsemble: layout {layout} does not fit {self.slots} chunk slots")
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

        if self.walk == BRANCHY:
            return seq(*(self.walk_branchy(block, r, trees[0]) for r in range(self.per_block)),
                       *(gather(r, 0) for r in range(self.per_block)))
        depth = _as_index(self.depths.load(trees[0]))
        for tree in trees[1:]:
            depth = maximum(depth, _as_index(self.depths.load(tree)))
        starts = [Store(self.node, lane(r, g), _as_index(self.roots.load(trees[g]))) for r, g in lanes]
        walk = For(Var("tree_level"), depth, ForKind.SERIAL, seq(*(step(r, g) for r, g in lanes)))
        return seq(*starts, walk, *(gather(r, g) for r, g in lanes))

    def walk_branchy(self, block: Expr, r: int, tree: Expr) -> Stmt:
        """Row `r` of `block` down `tree`, each level skipped once the node is a leaf (it points to itself)."""
        lane = _i64(r)
        node = self.node.load(lane)
        value = self.x.load(self.row(block, r) * self.features + self.field(node, "feature"))
        step = Store(self.node, lane, select(self.go_left(value, node), self.field(node, "left"),
                                             self.field(node, "right")))
        walk = For(Var("tree_level"), _as_index(self.depths.load(tree)), ForKind.SERIAL,
                   IfThenElse(ne(self.field(node, "left"), node), step))
        return seq(Store(self.node, lane, _as_index(self.roots.load(tree))), walk)

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
        walks = For(index, _i64(items), ForKind.PARALLEL if items > 1 else ForKind.SERIAL, self.item(index))
        unused = (self.slots - self.chunks) * self.rows * self.targets
        if unused <= 0:
            return walks
        i = Var("tree_unused")
        start = _i64(self.chunks * self.rows * self.targets)
        return seq(walks, For(i, _i64(unused), ForKind.SERIAL, Store(self.out, start + i, self.init_value())))


class _StageProgram:
    """The partial stage's `build`, a module-level object so that tuning tasks pickle: the layout is read from the
    stage's attrs when the stage is lowered, after a tuning config has set it there."""

    def __init__(self, attrs: Mapping[str, Any]):
        self.attrs, self.stage_attrs = attrs, {}

    def __call__(self, ins: Sequence[Buffer], out: Buffer) -> Stmt:
        return _WalkProgram(ins, out, self.attrs, self.stage_attrs[LAYOUT_ATTR]).build()


def fixed_layout(attrs: Mapping[str, Any]) -> Optional[TreeLayout]:
    """The layout the node's attrs fix (tests, benchmarks), if any."""
    if "rows_per_block" not in attrs:
        return None
    return TreeLayout(int(attrs["rows_per_block"]), int(attrs["trees_per_step"]), int(attrs["tree_chunks"]),
                      str(attrs.get("tree_walk", BRANCH_FREE)))


@register_compute("TreeEnsemble")
def tree_ensemble(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    tensors = [t for t in inputs if t is not None]
    x, roots = tensors[0], tensors[3]
    rows, targets, trees = x.shape[0], int(attrs["n_targets"]), roots.shape[0]
    layout = fixed_layout(attrs)
    chosen = layout or tree_layout(rows, trees)
    chunks = layout.chunks if layout is not None else max(chunk_slots(rows, trees), chosen.chunks)

    program = _StageProgram(attrs)
    partial = te.extern((chunks, rows, targets), tensors, program, x.dtype, name="tree_partial", tag=PROGRAM_TAG)
    program.stage_attrs = partial.op.attrs
    partial.op.attrs[LAYOUT_ATTR] = chosen
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
