"""NonMaxSuppression as a hand-written sequential loop program (te.extern): per batch and class,
boxes are ordered by score (ties by index, a merge sort), then taken greedily while no box
already kept for the class overlaps them by more than the IoU threshold. An optional third input
counts the valid boxes when their number is data-dependent (core/graph/bounded.py).

The program writes a packed int64 buffer: `rows` x [batch, class, box] selections (the upper bound
B * C * min(max_output, N)), then the number selected; two small stages unpack it into the padded
selected_indices output and its `[0, count]` bound (see core/graph/op_defs/data_dependent.py)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.data_dependent import nms_rows
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, const, eq, logical_and, logical_or, maximum, minimum, select
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq
from .common import require
from .registry import register_compute


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def _loop(name: str, extent: int, body_fn) -> Stmt:
    var = Var(name)
    return For(var, _i64(extent), ForKind.SERIAL, body_fn(var))


class _Program:
    def __init__(self, boxes: Buffer, scores: Buffer, out: Buffer, attrs: Mapping[str, Any],
                 valid: Optional[Buffer] = None):
        self.boxes, self.scores, self.out, self.valid = boxes, scores, out, valid
        self.batches, self.classes, self.n = scores.shape
        self.keep = min(int(attrs["max_output"]), self.n)
        self.center = bool(attrs["center_point_box"])
        self.iou = float(attrs["iou_threshold"])
        self.score_threshold = attrs.get("score_threshold")
        self.rows = nms_rows(self.batches, self.classes, self.n, int(attrs["max_output"]))
        self.order = Buffer("nms_order", (max(1, self.n),), "int64", "local")
        self.scratch = Buffer("nms_scratch", (max(1, self.n),), "int64", "local")
        self.run = Buffer("nms_run", (2,), "int64", "local")  # the merge cursors: left run, right run
        self.kept = Buffer("nms_kept", (max(1, self.keep),), "int64", "local")
        # [selected so far, kept for this class, whether the candidate survives]
        self.state = Buffer("nms_state", (3,), "int64", "local")

    def fconst(self, value: float) -> Expr:
        return const(value, self.scores.dtype)

    def score(self, b: Expr, c: Expr, i: Expr) -> Expr:
        return self.scores.load((b * self.classes + c) * self.n + i)

    def extent(self, b: Expr, i: Expr) -> tuple[Expr, Expr, Expr, Expr]:
        """(x_min, x_max, y_min, y_max) of box i of batch b."""
        at = [self.boxes.load((b * self.n + i) * 4 + j) for j in range(4)]
        if self.center:  # [x_center, y_center, width, height]
            half_w, half_h = at[2] / self.fconst(2), at[3] / self.fconst(2)
            return at[0] - half_w, at[0] + half_w, at[1] - half_h, at[1] + half_h
        # [y1, x1, y2, x2], corners in either order
        return minimum(at[1], at[3]), maximum(at[1], at[3]), minimum(at[0], at[2]), maximum(at[0], at[2])

    def suppresses(self, b: Expr, i: Expr, j: Expr) -> Expr:
        """Whether kept box j overlaps candidate i by more than the IoU threshold (ONNX's rules)."""
        ax0, ax1, ay0, ay1 = self.extent(b, i)
        bx0, bx1, by0, by1 = self.extent(b, j)
        ix = minimum(ax1, bx1) - maximum(ax0, bx0)
        iy = minimum(ay1, by1) - maximum(ay0, by0)
        inter = ix * iy
        area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
        union = area_a + area_b - inter
        zero = self.fconst(0)
        conds = [ix > zero, iy > zero, inter > zero, area_a > zero, area_b > zero, union > zero,
                 inter / union > self.fconst(self.iou)]
        out = conds[0]
        for c in conds[1:]:
            out = logical_and(out, c)
        return out

    def sort_by_score(self, b: Expr, c: Expr) -> Stmt:
        """order = the boxes by descending score, ties by index: a bottom-up merge sort (stable, from
        index order), O(N log N), one pass per power-of-two run width."""
        passes, width = [], 1
        while width < self.n:
            passes.append(self.merge_pass(b, c, width))
            width *= 2
        return seq(_loop("i", self.n, lambda i: Store(self.order, i, i)), *passes)

    def merge_pass(self, b: Expr, c: Expr, width: int) -> Stmt:
        """Merges each pair of sorted runs of `width` boxes into `scratch`, then copies it back."""
        order, run, last = self.order, self.run, _i64(self.n - 1)

        def block(blk: Var) -> Stmt:
            lo = blk * (2 * width)
            mid, hi = minimum(lo + width, _i64(self.n)), minimum(lo + 2 * width, _i64(self.n))

            def place(k: Var) -> Stmt:
                left, right = run.load(0), run.load(1)
                # a drained run's cursor sits one past its end: clamp the read, the flag ignores it
                first, second = order.load(minimum(left, last)), order.load(minimum(right, last))
                take_left = logical_and(left < mid, logical_or(
                    right >= hi, self.score(b, c, first) >= self.score(b, c, second)))
                from_left = seq(Store(self.scratch, lo + k, first), Store(run, _i64(0), left + 1))
                from_right = seq(Store(self.scratch, lo + k, second), Store(run, _i64(1), right + 1))
                return IfThenElse(lo + k < hi, IfThenElse(take_left, from_left, from_right))

            return seq(Store(run, _i64(0), lo), Store(run, _i64(1), mid), _loop("k", 2 * width, place))

        merged = _loop("blk", -(-self.n // (2 * width)), block)
        return seq(merged, _loop("i", self.n, lambda i: Store(order, i, self.scratch.load(i))))

    def greedy(self, b: Expr, c: Expr) -> Stmt:
        st, kept, out = self.state, self.kept, self.out

        def visit(t: Var) -> Stmt:
            cand = self.order.load(t)
            take = st.load(1) < _i64(self.keep)
            if self.valid is not None:  # boxes past the run-time count are padding (they sort last)
                take = logical_and(take, cand < self.valid.load(_i64(0)))
            if self.score_threshold is not None:
                take = logical_and(take, self.score(b, c, cand) > self.fconst(float(self.score_threshold)))

            q = Var("q")  # over the boxes kept so far for this class only (a run-time trip count)
            check = For(q, st.load(1), ForKind.SERIAL,
                        IfThenElse(self.suppresses(b, cand, kept.load(q)), Store(st, _i64(2), _i64(0))))

            row = st.load(0) * 3
            keep_it = seq(Store(kept, st.load(1), cand), Store(out, row, b), Store(out, row + 1, c),
                          Store(out, row + 2, cand), Store(st, _i64(0), st.load(0) + 1),
                          Store(st, _i64(1), st.load(1) + 1))
            survives = IfThenElse(eq(st.load(2), _i64(1)), keep_it)
            return IfThenElse(take, seq(Store(st, _i64(2), _i64(1)), check, survives))

        return seq(Store(st, _i64(1), _i64(0)), _loop("t", self.n, visit))

    def build(self) -> Stmt:
        clear = _loop("r", self.rows * 3, lambda r: Store(self.out, r, _i64(0)))
        per_class = _loop("b", self.batches, lambda b: _loop(
            "c", self.classes, lambda c: seq(self.sort_by_score(b, c), self.greedy(b, c))))
        body: Stmt = seq(clear, Store(self.state, _i64(0), _i64(0)))
        if self.keep > 0 and self.n > 0:
            body = seq(body, per_class)
        body = seq(body, Store(self.out, _i64(self.rows * 3), self.state.load(0)))
        for buffer in (self.order, self.scratch, self.run, self.kept, self.state):
            body = Allocate(buffer, body)
        return body


@register_compute("NonMaxSuppression")
def non_max_suppression(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any],
                        out_types: list[TensorType]):
    boxes, scores = require(inputs, 2, "NonMaxSuppression")
    batches, classes, n = scores.shape
    rows = nms_rows(batches, classes, n, int(attrs["max_output"]))
    counted = [inputs[2]] if len(inputs) > 2 and inputs[2] is not None else []
    packed = te.extern((rows * 3 + 1,), [boxes, scores] + counted,
                       lambda ins, out: _Program(ins[0], ins[1], out, attrs, ins[2] if counted else None).build(),
                       "int64", name="nms_packed")
    selected = te.compute((rows, 3), lambda r, j: packed(r * 3 + j), name="nms_selected", tag="injective")
    bound = te.compute((2,), lambda t: select(eq(t, _i64(0)), _i64(0), packed(_i64(rows * 3))), name="nms_bound",
                       tag="injective")
    return [selected, bound]
