"""SoftmaxAttention as one loop program (te.extern): per block of query rows, the scores, their softmax and
the product with V stay in a per-thread row buffer, so the [.., M, N] score tensor never goes to memory."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, call, const, eq, maximum, minimum, select
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq
from .common import prod, require
from .registry import register_compute

PARTIAL_LANES = 16  # a row's max and sum go through this many partial results (vectorized), then one scalar pass
MAX_ROW_ACCUMULATORS = 8  # query rows x 16-float vectors of one output row block, kept in registers across keys
SCORE_CHUNK = 128  # query rows x keys of scores accumulated in registers over d: 8 vectors of 16 (FMA latency x ports)


def _i(value) -> Expr:
    return const(int(value), "int64")


def row_block(rows: int, cols: int) -> int:
    """Query rows per block: they share each K and V load; at most MAX_ROW_ACCUMULATORS output vectors. When
    the block does not divide the rows, the last block starts `rows - block` (it recomputes a few rows)."""
    vectors = -(-cols // PARTIAL_LANES)
    return next((r for r in (4, 3, 2) if r <= rows and r * vectors <= MAX_ROW_ACCUMULATORS), 1)


def _loop(name: str, extent: int, kind: ForKind, body) -> Stmt:
    var = Var(name)
    return For(var, _i(extent), kind if extent > 1 else ForKind.SERIAL, body(var))


class AttentionProgram:
    """out[b, i, :] = softmax_j(scale * q[b, i, :] . kt[b, :, j] + bias[b, i, j] (+ causal)) @ v[b, j, :],
    over flat batch b; `bias_strides` are the bias's element strides over (batch dims..., M, N), 0 where it
    broadcasts."""

    def __init__(self, batch: Sequence[int], m: int, d: int, n: int, e: int, attrs: Mapping[str, Any],
                 bias_strides: Optional[Sequence[int]]):
        self.batch, self.m, self.d, self.n, self.e = tuple(batch), m, d, n, e
        self.scale = float(attrs.get("scale", 1.0))
        self.causal, self.nan_to_zero = bool(attrs.get("causal", 0)), bool(attrs.get("nan_to_zero", 0))
        self.bias_strides = bias_strides
        self.rows = row_block(m, e)

    def bias_batch_offset(self, b: Expr) -> Expr:
        """Where flat batch b's bias plane starts."""
        strides, index, inner = self.bias_strides, _i(0), 1
        for k in range(len(self.batch) - 1, -1, -1):  # batch dim k of the flat batch index
            if strides[k]:
                index = index + (b // inner) % self.batch[k] * strides[k]
            inner *= self.batch[k]
        return index

    def program(self, ins: list[Buffer], out: Buffer) -> Stmt:
        blocks = prod(self.batch) * -(-self.m // self.rows)
        return _loop("attn_block", blocks, ForKind.PARALLEL, lambda t: self.block(ins, out, t))

    def block(self, ins: list[Buffer], out: Buffer, t: Var) -> Stmt:
        q, kt, v = ins[:3]
        bias = ins[3] if len(ins) > 3 else None
        m, d, n, e, rows = self.m, self.d, self.n, self.e, self.rows
        dtype = out.dtype
        zero = const(0.0, dtype)
        blocks = -(-m // rows)
        block = t % blocks
        if self.causal:  # alternate short and long rows, so each thread's contiguous share of blocks costs alike
            block = select(eq(block % 2, 0), block // 2, _i(blocks - 1) - block // 2)
        # Block-wide values bound once (a vectorized loop would otherwise divide per lane).
        b, i0, bias_base = Var("attn_b"), Var("attn_i0"), Var("attn_bias_base")
        bindings = [(b, t // blocks), (i0, minimum(block * rows, _i(m - rows)))]
        if bias is not None:
            bindings.append((bias_base, self.bias_batch_offset(b)))
        p = Buffer("attn_p", (rows * n,), dtype, "local")  # the block's scores, then their exponentials
        o = Buffer("attn_o", (rows * e,), dtype, "local")
        stats = Buffer("attn_stats", (2 * rows,), dtype, "local")  # per row: max, then sum of exponentials
        part = Buffer("attn_partial", (PARTIAL_LANES,), dtype, "local")

        def rows_loop(kind, body) -> Stmt:
            return _loop("attn_r", rows, kind, body)

        lanes = PARTIAL_LANES
        # keys at or after `limit` are masked for every row of the block (causal): never computed
        limit = minimum(_i(n), i0 + _i(rows + n - m)) if self.causal else _i(n)
        scaled = Buffer("attn_q", (rows * d,), dtype, "local")  # the block's queries times the scale, once
        scale_queries = rows_loop(ForKind.SERIAL, lambda r: _loop("attn_d", d, ForKind.VECTORIZED, lambda dd: Store(
            scaled, r * d + dd, q.load((b * m + i0 + r) * d + dd) * const(self.scale, dtype))))

        def query(r: Expr, dd: Expr) -> Expr:
            return scaled.load(r * d + dd)

        def over_chunks(chunk, width: int = PARTIAL_LANES, chunks: bool = True, tail: bool = True) -> Stmt:
            """chunk(start, width) over the whole `width`-key chunks, then one chunk of the rest (causal: only the
            chunks holding a key some row of the block sees)."""
            whole = n // width * width
            count = _i(n // width)
            if self.causal:
                count = minimum(count, (limit + _i(width - 1)) // _i(width))
            var = Var("attn_jo")
            chunks = For(var, count, ForKind.SERIAL, chunk(var * width, width)) if whole and chunks else None
            tail = chunk(_i(whole), n - whole) if n > whole and tail else None
            if tail is not None and self.causal:
                tail = IfThenElse(limit > _i(whole), tail)
            return seq(chunks, tail)

        def scores(start: Expr, width: int) -> Stmt:
            """One chunk of keys: the block's rows accumulate over d in registers (the matmul micro-kernel's
            order): each kt vector serves every row, each q element is one broadcast."""
            def accumulate(r: Var, dd: Var) -> Stmt:
                return _loop("attn_ji", width, ForKind.VECTORIZED, lambda ji: Store(
                    p, r * n + start + ji,
                    p.load(r * n + start + ji) + query(r, dd) * kt.load((b * d + dd) * n + start + ji)))
            init = rows_loop(ForKind.UNROLLED, lambda r: _loop(
                "attn_ji", width, ForKind.VECTORIZED, lambda ji: Store(p, r * n + start + ji, zero)))
            return seq(init, _loop("attn_d", d, ForKind.SERIAL,
                                   lambda dd: rows_loop(ForKind.UNROLLED, lambda r: accumulate(r, dd))))

        def biased(r: Var, j: Var) -> Expr:
            s = p.load(r * n + j)
            if bias is not None:
                strides = self.bias_strides
                s = s + bias.load(bias_base + (i0 + r) * strides[-2] + j * strides[-1])
            if self.causal:  # keys after the query's own position (the queries are the last m of n)
                s = select(j <= i0 + r + _i(n - m), s, const(-float("inf"), dtype))
            return s

        def row_pass(r: Var, slot: int, identity: float, combine, value) -> Stmt:
            """p[r, j] = value(j) for every key, and stats[slot * rows + r] = their combination: PARTIAL_LANES
            running results (vectorized), then one pass over those."""
            at = _i(slot * rows) + r

            def update(start: Expr, width: int) -> Stmt:
                def one(l: Var) -> Stmt:
                    j = start + l
                    acc, acc_at = (part, l) if width == lanes else (stats, at)  # the tail goes to the result
                    return seq(Store(p, r * n + j, value(j)),
                               Store(acc, acc_at, combine(acc.load(acc_at), p.load(r * n + j))))
                return _loop("attn_l", width, ForKind.VECTORIZED if width == lanes else ForKind.SERIAL, one)
            init = _loop("attn_l", lanes, ForKind.VECTORIZED, lambda l: Store(part, l, const(identity, dtype)))
            fold = seq(Store(stats, at, const(identity, dtype)), _loop(
                "attn_l", lanes, ForKind.SERIAL, lambda l: Store(stats, at, combine(stats.load(at), part.load(l)))))
            return seq(init, over_chunks(update, tail=False), fold, over_chunks(update, chunks=False))

        def softmax_row(r: Var) -> Stmt:
            """Two sweeps over the row: bias and mask applied while finding the max, exp while summing."""
            top = stats.load(r)
            return seq(row_pass(r, 0, -float("inf"), maximum, lambda j: biased(r, j)),
                       row_pass(r, 1, 0.0, lambda a, x: a + x, lambda j: call("exp", p.load(r * n + j) - top)))

        def weighted(j: Var) -> Stmt:
            return rows_loop(ForKind.UNROLLED, lambda r: _loop("attn_e", e, ForKind.VECTORIZED, lambda ee: Store(
                o, r * e + ee, o.load(r * e + ee) + p.load(r * n + j) * v.load((b * n + j) * e + ee))))

        def write(r: Var) -> Stmt:
            total = stats.load(_i(rows) + r)

            def value(ee: Var) -> Expr:
                y = o.load(r * e + ee) / total
                return select(total > zero, y, zero) if self.nan_to_zero else y
            return _loop("attn_e", e, ForKind.VECTORIZED, lambda ee: Store(out, (b * m + i0 + r) * e + ee, value(ee)))

        jv = Var("attn_jv")
        body = seq(
            scale_queries,
            over_chunks(scores, max(lanes, SCORE_CHUNK // rows // lanes * lanes)),
            rows_loop(ForKind.SERIAL, softmax_row),
            rows_loop(ForKind.UNROLLED, lambda r: _loop("attn_e", e, ForKind.VECTORIZED,
                                                        lambda ee: Store(o, r * e + ee, zero))),
            For(jv, limit, ForKind.SERIAL, weighted(jv)),
            rows_loop(ForKind.UNROLLED, write))
        program = Allocate(p, Allocate(o, Allocate(stats, Allocate(part, Allocate(scaled, body)))))
        for var, value in reversed(bindings):
            program = LetStmt(var, value, program)
        return program


def _bias_strides(bias: te.Tensor, scores: Sequence[int]) -> list[int]:
    """Element strides of `bias` over the score dims (right-aligned numpy broadcast; 0 where it broadcasts)."""
    shape = (1,) * (len(scores) - bias.ndim) + tuple(bias.shape)
    strides, inner = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        strides[k] = inner if shape[k] != 1 else 0
        inner *= shape[k]
    return strides


@register_compute("SoftmaxAttention")
def softmax_attention(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    q, kt, v = require(inputs, 3, "SoftmaxAttention")
    bias = inputs[3] if len(inputs) > 3 else None
    *batch, m, d = q.shape
    n, e = kt.shape[-1], v.shape[-1]
    strides = _bias_strides(bias, (*batch, m, n)) if bias is not None else None
    program = AttentionProgram(batch, m, d, n, e, attrs, strides)
    tensors = [q, kt, v] + ([bias] if bias is not None else [])
    return [te.extern((*batch, m, e), tensors, program.program, q.dtype, name="softmax_attention")]
