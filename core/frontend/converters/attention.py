"""Attention (opsets 23-25) and FlexAttention (modifier subgraphs inlined) decomposed into MatMul, Softmax and
elementwise IR ops: 3-D inputs split into heads, grouped KV heads broadcast (no copies), past KV
concatenated, every mask one additive bias."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..onnx_values import numpy_dtype
from .registry import ConvertContext, converter

# qk_matmul_output_mode: which intermediate the fourth output exposes.
_QK_RAW, _QK_SOFTCAPPED, _QK_WITH_BIAS, _QK_SOFTMAX = 0, 1, 2, 3


@dataclass(frozen=True)
class _Dims:
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int  # past plus new keys
    past_len: int
    head_size: int
    v_head_size: int
    dtype: str  # the inputs' type, which Y has
    compute: str  # the type scores and probabilities are computed in

    @property
    def group(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.q_heads // self.kv_heads


def _split_heads(ctx: ConvertContext, index: int, heads_attr: str) -> str:
    """A 3-D [batch, seq, heads * head_size] input as [batch, heads, seq, head_size]."""
    x, shape = ctx.input(index), ctx.shape(index)
    if len(shape) == 4:
        return x
    heads = ctx.attr(heads_attr)
    if heads is None or heads <= 0 or shape[2] % heads:
        ctx.fail(f"3-D inputs need {heads_attr} dividing the hidden size {shape[2]}, got {heads!r}")
    split = ctx.reshape(x, (shape[0], shape[1], int(heads), shape[2] // int(heads)))
    return ctx.emit1("Transpose", [split], perm=(0, 2, 1, 3))


def _with_past(ctx: ConvertContext, current: str, past_index: int) -> str:
    if not ctx.has_input(past_index):
        return current
    return ctx.emit1("Concat", [ctx.input(past_index), current], axis=2)


def _grouped_matmul(ctx: ConvertContext, dims: _Dims, a: str, b: str) -> str:
    """MatMul of per-query-head `a` [B, Hq, m, k] by per-KV-head `b` [B, Hkv, k, n]: query head h reads
    KV head h // group, so a splits into [B, Hkv, group, m, k] and b broadcasts as [B, Hkv, 1, k, n]."""
    if dims.group == 1:
        return ctx.emit1("MatMul", [a, b])
    a_shape, b_shape = ctx.builder.type_of(a).shape, ctx.builder.type_of(b).shape
    grouped_a = ctx.reshape(a, (dims.batch, dims.kv_heads, dims.group) + a_shape[2:])
    grouped_b = ctx.reshape(b, (dims.batch, dims.kv_heads, 1) + b_shape[2:])
    product = ctx.emit1("MatMul", [grouped_a, grouped_b])
    return ctx.reshape(product, (dims.batch, dims.q_heads) + ctx.builder.type_of(product).shape[3:])


def _select_bias(ctx: ConvertContext, dims: _Dims, allowed: str) -> str:
    """0 where `allowed`, -inf elsewhere (select, not multiply: 0 * -inf would be NaN)."""
    zero, masked = (ctx.const(np.asarray(v, dims.compute)) for v in (0.0, -np.inf))
    return ctx.emit1("Where", [allowed, zero, masked])


def _mask_bias(ctx: ConvertContext, dims: _Dims) -> Optional[str]:
    """attn_mask as an additive bias, its key axis padded with -inf up to the full KV length."""
    if not ctx.has_input(3):
        return None
    mask = ctx.input(3)
    if ctx.type_of(3).dtype == "bool":
        mask = _select_bias(ctx, dims, mask)
    elif ctx.type_of(3).dtype != dims.compute:
        mask = ctx.emit1("Cast", [mask], to=dims.compute)
    shape = ctx.shape(3)
    missing = dims.kv_len - shape[-1]
    if missing < 0:
        ctx.fail(f"attn_mask {list(shape)} covers more keys than the {dims.kv_len} there are")
    if missing:
        pads = [0] * (2 * len(shape))
        pads[len(shape) - 1 + len(shape)] = missing
        mask = ctx.emit1("Pad", [mask], pads=tuple(pads), mode="constant", value=float("-inf"))
    return mask


def _key_minus_query(dims: _Dims) -> np.ndarray:
    """j - i over the [q_len, kv_len] score grid."""
    return np.arange(dims.kv_len)[None, :] - np.arange(dims.q_len)[:, None]


def _frontier_bias(ctx: ConvertContext, dims: _Dims, nonpad: Optional[str], allowed_at) -> str:
    """Bias from a rule `allowed_at(distance)` on distance = i + offset - j, where a query at block
    index i sits at absolute position i + offset: offset is the past length (a constant), or, for an
    external cache, nonpad_kv_seqlen[b] - q_len per batch (computed at run time)."""
    if nonpad is None:
        distance = dims.past_len - _key_minus_query(dims)
        return ctx.const(np.where(allowed_at(distance), 0.0, -np.inf).astype(dims.compute))
    per_batch = ctx.reshape(nonpad, (dims.batch, 1, 1, 1))
    base = ctx.const((-_key_minus_query(dims) - dims.q_len).astype(np.int64))
    distance = ctx.emit1("Add", [base, per_batch])  # [B, 1, q_len, kv_len]
    return _select_bias(ctx, dims, allowed_at(_RuntimeDistance(ctx, distance)))


class _RuntimeDistance:
    """A distance tensor on which the window and causal rules build IR comparisons, like numpy's."""

    def __init__(self, ctx: ConvertContext, value: str):
        self.ctx, self.value = ctx, value

    def _compare(self, op: str, bound: int) -> str:
        return self.ctx.emit1(op, [self.value, self.ctx.const(np.asarray(bound, np.int64))])

    def __le__(self, bound: int) -> str:
        return self._compare("LessOrEqual", bound)

    def __ge__(self, bound: int) -> str:
        return self._compare("GreaterOrEqual", bound)


def _both(ctx: Optional[ConvertContext], a, b):
    """Logical and of two rules' results (numpy arrays, or IR values at run time); None means no rule."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, np.ndarray):
        return a & b
    return ctx.emit1("And", [a, b])


def _window_rule(ctx: ConvertContext, left: int, right: int):
    def allowed(distance):
        rule = distance <= left if left >= 0 else None
        return _both(ctx, rule, distance >= -right if right >= 0 else None)

    return allowed


def _padding_bias(ctx: ConvertContext, dims: _Dims, nonpad: str) -> str:
    """Keys at or past nonpad_kv_seqlen[b] are padding of an external cache."""
    keys = ctx.const(np.arange(dims.kv_len, dtype=np.int64))
    valid = ctx.emit1("Less", [keys, ctx.reshape(nonpad, (dims.batch, 1, 1, 1))])
    return _select_bias(ctx, dims, valid)


def _attention_bias(ctx: ConvertContext, dims: _Dims, nonpad: Optional[str]) -> Optional[str]:
    """Sum of the mask, causal, sliding-window and padding biases that apply (None: no masking)."""
    parts = [_mask_bias(ctx, dims)]
    if ctx.attr("is_causal", 0):
        parts.append(_frontier_bias(ctx, dims, nonpad, lambda distance: distance >= 0))
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if left >= 0 or right >= 0:
        parts.append(_frontier_bias(ctx, dims, nonpad, _window_rule(ctx, left, right)))
    if nonpad is not None:
        parts.append(_padding_bias(ctx, dims, nonpad))
    bias = None
    for part in parts:
        if part is not None:
            bias = part if bias is None else ctx.emit1("Add", [bias, part])
    return bias


def _fully_masked_rows(ctx: ConvertContext, bias: str) -> Optional[str]:
    """Rows whose every key is masked (bias all -inf): their probabilities are 0, not NaN. None when
    the bias is a constant that masks no whole row."""
    last = ctx.builder.type_of(bias).rank - 1
    row_max = ctx.emit1("ReduceMax", [bias], axes=(last,), keepdims=1)
    masked = ctx.emit1("Equal", [row_max, ctx.scalar_like(-np.inf, bias)])
    known = ctx.builder.constant_value(bias)
    if known is not None and not np.isneginf(known.max(axis=-1)).any():
        return None
    return masked


def _softcapped(ctx: ConvertContext, scores: str) -> str:
    cap = float(ctx.attr("softcap", 0.0))
    if cap <= 0:
        return scores
    cap_value = ctx.scalar_like(cap, scores)
    return ctx.emit1("Mul", [ctx.emit1("Tanh", [ctx.emit1("Div", [scores, cap_value])]), cap_value])


def _dims(ctx: ConvertContext, q: str, k: str, v: str) -> _Dims:
    (batch, q_heads, q_len, head_size), (_, kv_heads, kv_len, _) = (ctx.builder.type_of(t).shape for t in (q, k))
    if q_heads % kv_heads:
        ctx.fail(f"{q_heads} query heads are not a multiple of {kv_heads} key/value heads")
    past_len = ctx.shape(4)[2] if ctx.has_input(4) else 0
    dtype = ctx.type_of(0).dtype
    # float16 products and softmax sums lose digits: accumulate in float32 as ONNX Runtime does.
    compute = "float32" if dtype == "float16" else dtype
    return _Dims(batch, q_heads, kv_heads, q_len, kv_len, past_len, head_size,
                 ctx.builder.type_of(v).shape[3], dtype, compute)


def _as(ctx: ConvertContext, x: str, dtype: str) -> str:
    return x if ctx.builder.type_of(x).dtype == dtype else ctx.emit1("Cast", [x], to=dtype)


def _scaled(ctx: ConvertContext, dims: _Dims, x: str) -> str:
    # ONNX scales Q and K each by sqrt(scale) (cast to the input type), so large logits stay finite.
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(dims.head_size) if scale is None else float(scale)
    factor = np.asarray(np.sqrt(scale), dims.dtype).astype(dims.compute)
    return ctx.emit1("Mul", [_as(ctx, x, dims.compute), ctx.const(factor)])


@converter("Attention", since_version=23)
def attention(ctx: ConvertContext) -> list[str]:
    ranks = {len(ctx.shape(i)) for i in range(3)}
    if ranks not in ({3}, {4}):
        ctx.fail(f"Q, K and V must all be 3-D or all 4-D, got ranks {[len(ctx.shape(i)) for i in range(3)]}")
    if ctx.has_input(4) != ctx.has_input(5):
        ctx.fail("past_key and past_value come together")
    nonpad = ctx.input(6) if ctx.has_input(6) else None
    if nonpad is not None and ctx.has_input(4):
        ctx.fail("nonpad_kv_seqlen cannot be combined with a past key/value cache")
    q = _split_heads(ctx, 0, "q_num_heads")
    present_key = _with_past(ctx, _split_heads(ctx, 1, "kv_num_heads"), 4)
    present_value = _with_past(ctx, _split_heads(ctx, 2, "kv_num_heads"), 5)
    dims = _dims(ctx, q, present_key, present_value)

    keys_t = ctx.emit1("Transpose", [_scaled(ctx, dims, present_key)], perm=(0, 1, 3, 2))
    scores = _softcapped(ctx, _grouped_matmul(ctx, dims, _scaled(ctx, dims, q), keys_t))
    bias = _attention_bias(ctx, dims, nonpad)
    biased = scores if bias is None else ctx.emit1("Add", [scores, bias])

    precision = ctx.attr("softmax_precision")
    softmax_in = biased
    if precision is not None and numpy_dtype(int(precision), ctx.where) != dims.compute:
        softmax_in = ctx.emit1("Cast", [biased], to=numpy_dtype(int(precision), ctx.where))
    probs = ctx.emit1("Softmax", [softmax_in], axis=3)
    masked_rows = None if bias is None else _fully_masked_rows(ctx, bias)
    if masked_rows is not None:
        probs = ctx.emit1("Where", [masked_rows, ctx.scalar_like(0.0, probs), probs])
    probs = _as(ctx, probs, dims.compute)

    y = _as(ctx, _grouped_matmul(ctx, dims, probs, _as(ctx, present_value, dims.compute)), dims.dtype)
    if ranks == {3}:  # back to [batch, q_len, heads * v_head_size]
        y = ctx.reshape(ctx.emit1("Transpose", [y], perm=(0, 2, 1, 3)),
                        (dims.batch, dims.q_len, dims.q_heads * dims.v_head_size))
    mode = int(ctx.attr("qk_matmul_output_mode", _QK_RAW))
    exposed = {_QK_RAW: scores, _QK_SOFTCAPPED: scores, _QK_WITH_BIAS: biased, _QK_SOFTMAX: probs}.get(mode)
    if exposed is None:
        ctx.fail(f"qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")
    return [y, present_key, present_value, _as(ctx, exposed, dims.dtype)]


def _modified(ctx: ConvertContext, attribute: str, scores: str) -> str:
    """`scores` through the FlexAttention modifier subgraph `attribute` (one tensor in, one out), inlined."""
    graph = ctx.attr(attribute)
    if graph is None:
        return scores
    if len(graph.input) != 1 or len(graph.output) != 1:
        ctx.fail(f"{attribute} must take one tensor and give one, got {len(graph.input)} and {len(graph.output)}")
    (result,) = ctx.scope.import_graph(graph, {graph.input[0].name: scores})
    if not isinstance(result, str) or ctx.builder.type_of(result).shape != ctx.builder.type_of(scores).shape:
        ctx.fail(f"{attribute} must give a tensor of the scores' shape {list(ctx.builder.type_of(scores).shape)}")
    return _as(ctx, result, ctx.builder.type_of(scores).dtype)


@converter("FlexAttention", since_version=1, domain="ai.onnx.preview")
def flex_attention(ctx: ConvertContext) -> str:
    if any(len(ctx.shape(i)) != 4 for i in range(3)):
        ctx.fail(f"Q, K and V must be 4-D, got {[list(ctx.shape(i)) for i in range(3)]}")
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    dims = _dims(ctx, q, k, v)
    precision = ctx.attr("softmax_precision")
    compute = dims.compute if precision is None else numpy_dtype(int(precision), ctx.where)
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(dims.head_size) if scale is None else float(scale)
    # sqrt(scale) in float32, rounded to the input type, multiplies Q and K (ONNX's reference).
    factor = ctx.const(np.asarray(np.sqrt(np.float32(scale)), dims.dtype).astype(compute))
    q_scaled, k_scaled = (ctx.emit1("Mul", [_as(ctx, x, compute), factor]) for x in (q, k))
    keys_t = ctx.emit1("Transpose", [k_scaled], perm=(0, 1, 3, 2))
    scores = _modified(ctx, "score_mod", _grouped_matmul(ctx, dims, q_scaled, keys_t))
    probs = _modified(ctx, "prob_mod", ctx.emit1("Softmax", [scores], axis=3))
    return _as(ctx, _grouped_matmul(ctx, dims, probs, _as(ctx, v, compute)), ctx.type_of(2).dtype)
