"""ONNX Runtime's com.microsoft contrib ops that transformer optimizers (onnxruntime.transformers,
Optimum O2+) write, decomposed into IR ops that fuse: the GELU family, skip/simplified layer norms,
FusedMatMul, Attention, MultiHeadAttention, EmbedLayerNormalization and RotaryEmbedding."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .elementwise import gelu_of
from .normalization import rms_norm_of
from .registry import ConvertContext, converter
from .rotary import rotate_halves

MS = "com.microsoft"


# -- activations -------------------------------------------------------------------------------
def _with_bias(ctx: ConvertContext, bias_index: int) -> str:
    x = ctx.input(0)
    return ctx.emit1("Add", [x, ctx.input(bias_index)]) if ctx.has_input(bias_index) else x


@converter("Gelu", since_version=1, domain=MS)
def gelu(ctx: ConvertContext) -> str:
    return gelu_of(ctx, ctx.input(0), tanh=False)


@converter("BiasGelu", since_version=1, domain=MS)
def bias_gelu(ctx: ConvertContext) -> str:
    return gelu_of(ctx, _with_bias(ctx, 1), tanh=False)


@converter("FastGelu", since_version=1, domain=MS)
def fast_gelu(ctx: ConvertContext) -> str:
    return gelu_of(ctx, _with_bias(ctx, 1), tanh=True)


@converter("QuickGelu", since_version=1, domain=MS)
def quick_gelu(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    scaled = ctx.emit1("Mul", [x, ctx.scalar_like(float(ctx.attr("alpha", 1.702)), x)])
    return ctx.emit1("Mul", [x, ctx.emit1("Sigmoid", [scaled])])


# -- normalizations ----------------------------------------------------------------------------
def _skip_sum(ctx: ConvertContext, bias_index: int) -> str:
    """input + skip (+ bias): what the norm normalizes, and the op's input_skip_bias_sum output."""
    total = ctx.emit1("Add", [ctx.input(0), ctx.input(1)])
    return ctx.emit1("Add", [total, ctx.input(bias_index)]) if ctx.has_input(bias_index) else total


def _layer_norm(ctx: ConvertContext, x: str, gamma: str, beta: Optional[str]) -> list[str]:
    """The fused LayerNormalization over the last axis: Y, and the mean and 1/std when they are used."""
    epsilon = float(ctx.attr("epsilon", 1e-12))
    axis = ctx.builder.type_of(x).rank - 1
    inputs = [x, gamma] + ([beta] if beta else [])
    statistics = 2 if ctx.output_used(2) else 1 if ctx.output_used(1) else 0
    if not statistics:
        return [ctx.emit1("LayerNormalization", inputs, axis=axis, epsilon=epsilon)]
    return ctx.emit("LayerNormalization", inputs, 1 + statistics, axis=axis, epsilon=epsilon, statistics=statistics)


@converter("SkipLayerNormalization", since_version=1, domain=MS)
def skip_layer_norm(ctx: ConvertContext) -> list[str]:
    total = _skip_sum(ctx, 4)
    out = _layer_norm(ctx, total, ctx.input(2), ctx.input(3) if ctx.has_input(3) else None)
    # Outputs 1 and 2 (mean, inv_std_var) exist only when read; an unread one just names the sum.
    return out + [total] * (3 - len(out)) + [total]


def _rms_norm(ctx: ConvertContext, x: str, scale: str) -> str:
    if ctx.output_used(1) or ctx.output_used(2):
        ctx.unsupported("the statistics outputs (1 and 2) of a simplified layer norm")
    return rms_norm_of(ctx, x, scale)


@converter("SimplifiedLayerNormalization", since_version=1, domain=MS)
def simplified_layer_norm(ctx: ConvertContext) -> str:
    """RMSNorm. ONNX Runtime registers it in the ONNX domain; model loading moves it here
    (core/frontend/model_loading.py: adopt_runtime_ops)."""
    return _rms_norm(ctx, ctx.input(0), ctx.input(1))


@converter("SkipSimplifiedLayerNormalization", since_version=1, domain=MS)
def skip_simplified_layer_norm(ctx: ConvertContext) -> list[str]:
    total = _skip_sum(ctx, 3)
    return [_rms_norm(ctx, total, ctx.input(2)), total, total, total]  # outputs 1, 2: refused when read


# -- FusedMatMul -------------------------------------------------------------------------------
def _swap_last(ctx: ConvertContext, x: str) -> str:
    rank = ctx.builder.type_of(x).rank
    if rank < 2:
        ctx.fail(f"transA/transB need inputs of rank 2 or more, got rank {rank}")
    return ctx.emit1("Transpose", [x], perm=tuple(range(rank - 2)) + (rank - 1, rank - 2))


@converter("FusedMatMul", since_version=1, domain=MS)
def fused_matmul(ctx: ConvertContext) -> str:
    """alpha * op(A) @ op(B), op a transpose of the last two axes where transA/transB say."""
    if ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
        ctx.unsupported("FusedMatMul with transBatchA/transBatchB")
    a, b = ctx.input(0), ctx.input(1)
    a = _swap_last(ctx, a) if ctx.attr("transA", 0) else a
    b = _swap_last(ctx, b) if ctx.attr("transB", 0) else b
    y = ctx.emit1("MatMul", [a, b])
    alpha = float(ctx.attr("alpha", 1.0))
    return y if alpha == 1.0 else ctx.emit1("Mul", [y, ctx.scalar_like(alpha, y)])


# -- attention ---------------------------------------------------------------------------------
def _heads(ctx: ConvertContext, x: str, heads: int) -> str:
    """[B, L, heads * size] as [B, heads, L, size]."""
    b, length, hidden = ctx.builder.type_of(x).shape
    if hidden % heads:
        ctx.fail(f"hidden size {hidden} is not a multiple of num_heads={heads}")
    return ctx.emit1("Transpose", [ctx.reshape(x, (b, length, heads, hidden // heads))], perm=(0, 2, 1, 3))


def _merge_heads(ctx: ConvertContext, y: str) -> str:
    b, heads, length, size = ctx.builder.type_of(y).shape
    return ctx.reshape(ctx.emit1("Transpose", [y], perm=(0, 2, 1, 3)), (b, length, heads * size))


def _slice_last(ctx: ConvertContext, x: str, start: int, size: int) -> str:
    shape = ctx.builder.type_of(x).shape
    return ctx.emit1("Slice", [x], starts=(0,) * (len(shape) - 1) + (start,), steps=(1,) * len(shape),
                     sizes=tuple(shape[:-1]) + (size,))


def _key_mask_bias(ctx: ConvertContext, index: int, batch: int, q_len: int, kv_len: int, dtype: str) -> Optional[str]:
    """The mask input as an additive bias (mask_filter_value where masked), broadcast over heads:
    1-D key lengths [B] (or end and start positions [2B]), a raw 0/1 key mask [B, T] or a
    [B, S, T] mask."""
    if not ctx.has_input(index):
        return None
    mask, shape = ctx.input(index), ctx.shape(index)
    masked = ctx.const(np.asarray(float(ctx.attr("mask_filter_value", -10000.0)), dtype))
    zero = ctx.const(np.asarray(0.0, dtype))
    if len(shape) == 1 and shape[0] in (batch, 2 * batch):
        keys = ctx.const(np.arange(kv_len, dtype=ctx.type_of(index).dtype).reshape(1, kv_len))
        ends = ctx.reshape(_slice_last(ctx, mask, 0, batch), (batch, 1))
        valid = ctx.emit1("Less", [keys, ends])
        if shape[0] == 2 * batch:
            starts = ctx.reshape(_slice_last(ctx, mask, batch, batch), (batch, 1))
            valid = ctx.emit1("And", [valid, ctx.emit1("GreaterOrEqual", [keys, starts])])
        return ctx.reshape(ctx.emit1("Where", [valid, zero, masked]), (batch, 1, 1, kv_len))
    if shape in ((batch, kv_len), (batch, q_len, kv_len)):
        keep = ctx.emit1("Cast", [mask], to=dtype)
        bias = ctx.emit1("Mul", [ctx.emit1("Sub", [ctx.const(np.asarray(1.0, dtype)), keep]), masked])
        return ctx.reshape(bias, (batch, 1, 1, kv_len) if len(shape) == 2 else (batch, 1, q_len, kv_len))
    ctx.unsupported(f"a mask of shape {list(shape)} (key lengths [B] or [2B], or a 0/1 mask [B, T] or [B, S, T])")


def _causal_bias(ctx: ConvertContext, q_len: int, kv_len: int, dtype: str) -> str:
    """Query i (at absolute position kv_len - q_len + i) sees keys up to its own position."""
    past = kv_len - q_len
    allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + past
    return ctx.const(np.where(allowed, 0.0, float(ctx.attr("mask_filter_value", -10000.0))).astype(dtype))


def _attend(ctx: ConvertContext, q: str, k: str, v: str, biases: list[Optional[str]]) -> str:
    """softmax(scale * Q K^T + biases) V over [B, N, L, H] heads, merged back to [B, S, N * Hv]."""
    head_size = ctx.builder.type_of(q).shape[3]
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(head_size) if not scale else float(scale)
    scores = ctx.emit1("MatMul", [q, ctx.emit1("Transpose", [k], perm=(0, 1, 3, 2))])
    scores = ctx.emit1("Mul", [scores, ctx.scalar_like(scale, scores)])
    for bias in biases:
        if bias is not None:
            scores = ctx.emit1("Add", [scores, bias])
    probs = ctx.emit1("Softmax", [scores], axis=3)
    return _merge_heads(ctx, ctx.emit1("MatMul", [probs, v]))


def _num_heads(ctx: ConvertContext) -> int:
    heads = int(ctx.attr("num_heads", 0))
    if heads <= 0:
        ctx.fail(f"num_heads must be positive, got {heads}")
    return heads


@converter("Attention", since_version=1, domain=MS)
def attention(ctx: ConvertContext) -> str:
    """BERT's fused self-attention: one packed QKV projection [hidden, Dq + Dk + Dv] (+ bias), heads,
    mask_index and attention_bias added to the scaled scores, softmax, merged heads."""
    if ctx.has_input(4) or ctx.output_used(1) or ctx.attr("do_rotary", 0) or ctx.attr("past_present_share_buffer", 0):
        ctx.unsupported("Attention with a past/present state or rotary embedding (use MultiHeadAttention)")
    heads = _num_heads(ctx)
    batch, seq, _ = ctx.shape(0)
    total = ctx.shape(1)[1]
    sizes = [int(s) for s in ctx.attr("qkv_hidden_sizes", [])] or [total // 3] * 3
    if len(sizes) != 3 or sum(sizes) != total or sizes[0] != sizes[1]:
        ctx.fail(f"qkv_hidden_sizes {sizes} do not split the weights' {total} columns into Q, K, V")
    qkv = ctx.emit1("MatMul", [ctx.input(0), ctx.input(1)])
    if ctx.has_input(2):
        qkv = ctx.emit1("Add", [qkv, ctx.input(2)])
    q, k, v = (_heads(ctx, _slice_last(ctx, qkv, start, size), heads)
               for start, size in zip((0, sizes[0], sizes[0] + sizes[1]), sizes))
    dtype = ctx.type_of(0).dtype
    biases = [_key_mask_bias(ctx, 3, batch, seq, seq, dtype), ctx.input(5) if ctx.has_input(5) else None]
    if ctx.attr("unidirectional", 0):
        biases.append(_causal_bias(ctx, seq, seq, dtype))
    return _attend(ctx, q, k, v, biases)


@converter("MultiHeadAttention", since_version=1, domain=MS)
def multi_head_attention(ctx: ConvertContext) -> list[str]:
    """Separate 3-D Q [B, S, D], K and V [B, L, D] (+ a packed bias [Dq + Dk + Dv]), a key padding mask,
    attention_bias, optional past key/value [B, N, P, H] before the new ones (the present outputs)."""
    heads = _num_heads(ctx)
    if not (ctx.has_input(1) and ctx.has_input(2)) or any(len(ctx.shape(i)) != 3 for i in range(3)):
        ctx.unsupported("MultiHeadAttention with packed or pre-split (4-D) query/key/value")
    if ctx.has_input(6) != ctx.has_input(7):
        ctx.fail("past_key and past_value come together")
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if ctx.has_input(3):
        dq, dk, dv = ctx.shape(0)[2], ctx.shape(1)[2], ctx.shape(2)[2]
        bias = ctx.input(3)
        q, k, v = (ctx.emit1("Add", [x, _slice_last(ctx, bias, start, size)])
                   for x, start, size in ((q, 0, dq), (k, dq, dk), (v, dq + dk, dv)))
    if ctx.attr("unidirectional", 0) and ctx.shape(1)[1] != ctx.shape(0)[1]:
        ctx.unsupported("a unidirectional MultiHeadAttention whose new keys are not the queries' own positions")
    q, k, v = (_heads(ctx, x, heads) for x in (q, k, v))
    if ctx.has_input(6):
        k, v = (ctx.emit1("Concat", [ctx.input(i), x], axis=2) for i, x in ((6, k), (7, v)))
    batch, q_len = ctx.shape(0)[:2]
    kv_len = ctx.builder.type_of(k).shape[2]
    dtype = ctx.type_of(0).dtype
    biases = [_key_mask_bias(ctx, 4, batch, q_len, kv_len, dtype), ctx.input(5) if ctx.has_input(5) else None]
    if ctx.attr("unidirectional", 0):
        biases.append(_causal_bias(ctx, q_len, kv_len, dtype))
    return [_attend(ctx, q, k, v, biases), k, v]


# -- embeddings --------------------------------------------------------------------------------
@converter("EmbedLayerNormalization", since_version=1, domain=MS)
def embed_layer_norm(ctx: ConvertContext) -> list[str]:
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids]); the
    mask_index output is each row's count of unmasked tokens (int32), zeros without a mask."""
    batch, seq = ctx.shape(0)
    total = ctx.emit1("Gather", [ctx.input(2), ctx.input(0)], axis=0)
    if ctx.has_input(8):
        positions = ctx.emit1("Gather", [ctx.input(3), ctx.input(8)], axis=0)
    else:
        hidden = ctx.shape(3)[1]
        positions = ctx.emit1("Slice", [ctx.input(3)], starts=(0, 0), steps=(1, 1), sizes=(seq, hidden))
    total = ctx.emit1("Add", [total, positions])
    if ctx.has_input(1) and ctx.has_input(4):
        total = ctx.emit1("Add", [total, ctx.emit1("Gather", [ctx.input(4), ctx.input(1)], axis=0)])
    y = ctx.emit1("LayerNormalization", [total, ctx.input(5), ctx.input(6)], axis=2,
                  epsilon=float(ctx.attr("epsilon", 1e-12)))
    if ctx.has_input(7):
        mask = ctx.emit1("Cast", [ctx.input(7)], to="int32")
        mask_index = ctx.emit1("ReduceSum", [mask], axes=(1,), keepdims=0)
    else:
        mask_index = ctx.const(np.zeros(batch, np.int32))
    return [y, mask_index, total]


@converter("RotaryEmbedding", since_version=1, domain=MS)
def rotary_embedding(ctx: ConvertContext) -> str:
    """Inputs (input, position_ids, cos_cache, sin_cache); position_ids [B, S], or [1]: the first
    position, the rest following it."""
    if ctx.attr("is_packed_batching", 0):
        ctx.unsupported("RotaryEmbedding with is_packed_batching")
    shape = ctx.shape(0)
    if len(shape) not in (3, 4):
        ctx.fail(f"expects a 3-D or 4-D input, got {list(shape)}")
    batch, seq = shape[0], shape[1] if len(shape) == 3 else shape[2]
    positions = ctx.input(1)
    if ctx.shape(1) in ((1,), ()):  # an offset: positions offset .. offset + S - 1 for every row
        steps = np.zeros((batch, 1), ctx.type_of(1).dtype) + np.arange(seq, dtype=ctx.type_of(1).dtype)
        positions = ctx.emit1("Add", [ctx.const(steps), ctx.reshape(positions, (1, 1))])
    return rotate_halves(ctx, positions, ctx.input(2), ctx.input(3))
