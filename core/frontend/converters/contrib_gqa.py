"""com.microsoft GroupQueryAttention as IR ops, as ONNX Runtime's CPU kernel computes it: each row's new keys
and values written into the KV cache at its own position (seqlens_k), causal and local-window masks from
those positions, grouped KV heads broadcast, optional rotary embedding, softcap and smooth softmax."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .attention import _Dims, _grouped_matmul, _select_bias, _softcapped
from .contrib import MS, _heads, _merge_heads, _slice_last
from .registry import ConvertContext, converter
from .rotary import rotate

# Inputs of ORT's GroupQueryAttention (contrib opset 1).
_QUERY, _KEY, _VALUE, _PAST_KEY, _PAST_VALUE, _SEQLENS_K, _TOTAL_LEN, _COS, _SIN, _POSITIONS, _BIAS, _SINK = range(12)


def _present_length(ctx: ConvertContext, seq: int, past: int) -> tuple[int, bool]:
    """(length of the present KV cache, whether this is the first prompt). ORT sizes the cache as
    max(total_sequence_length, past buffer); a run-time total (a graph input) is taken to be past + new
    (a cache that grows by the new tokens each step), which validation against ORT checks."""
    total = ctx.builder.constant_value(ctx.input(_TOTAL_LEN))
    if total is not None:
        total = int(np.asarray(total).reshape(-1)[0])
        return max(total, past), seq == total
    return past + seq, past == 0


def _positions(ctx: ConvertContext, past_len: str, batch: int, seq: int) -> str:
    """Absolute position of each new token [B, S]: the row's past length plus its index."""
    steps = ctx.const(np.arange(seq, dtype=np.int64).reshape(1, seq))
    return ctx.emit1("Add", [past_len, steps])


def _into_cache(ctx: ConvertContext, new: str, past_index: int, past_len: str, length: int) -> str:
    """The present cache [B, Nkv, T, H]: the past's first past_len[b] entries, then row b's new entries,
    zeros after them (ORT clears a cache it does not share with the past)."""
    batch, heads, seq, size = ctx.builder.type_of(new).shape
    slots = ctx.const(np.arange(length, dtype=np.int64).reshape(1, length))
    offset = ctx.emit1("Sub", [slots, past_len])  # [B, T]: index into the new entries
    is_new = ctx.emit1("And", [ctx.emit1("GreaterOrEqual", [offset, ctx.const(np.int64(0))]),
                               ctx.emit1("Less", [offset, ctx.const(np.int64(seq))])])
    index = ctx.emit1("Clip", [offset], min=0.0, max=float(seq - 1))
    index = ctx.emit1("Expand", [ctx.reshape(index, (batch, 1, length, 1))], shape=(batch, heads, length, size))
    moved = ctx.emit1("GatherElements", [new, index], axis=2)
    zero = ctx.scalar_like(0.0, new)
    kept = zero
    if ctx.has_input(past_index):
        past = ctx.input(past_index)
        extra = length - ctx.shape(past_index)[2]
        if extra:
            past = ctx.emit1("Pad", [past], pads=(0, 0, 0, 0, 0, 0, extra, 0), mode="constant", value=0.0)
        is_old = ctx.emit1("Less", [slots, past_len])
        kept = ctx.emit1("Where", [ctx.reshape(is_old, (batch, 1, length, 1)), past, zero])
    return ctx.emit1("Where", [ctx.reshape(is_new, (batch, 1, length, 1)), moved, kept])


def _allowed_keys(ctx: ConvertContext, positions: str, batch: int, seq: int, length: int) -> str:
    """[B, 1, S, T]: key t is visible to the query at absolute position p when t <= p (and, with a local
    window w, t > p - w: the query and the w - 1 keys before it)."""
    keys = ctx.const(np.arange(length, dtype=np.int64).reshape(1, 1, 1, length))
    query = ctx.reshape(positions, (batch, 1, seq, 1))
    allowed = ctx.emit1("LessOrEqual", [keys, query])
    window = int(ctx.attr("local_window_size", -1))
    if window > 0:
        start = ctx.emit1("Sub", [query, ctx.const(np.int64(window))])
        allowed = ctx.emit1("And", [allowed, ctx.emit1("Greater", [keys, start])])
    return allowed


def _softmax(ctx: ConvertContext, scores: str) -> str:
    """Softmax over keys; smooth_softmax adds a zero logit to each row (sum of exps plus exp(0 - max))."""
    if not ctx.attr("smooth_softmax", 0):
        return ctx.emit1("Softmax", [scores], axis=3)
    shape = ctx.builder.type_of(scores).shape
    zeros = ctx.const(np.zeros(shape[:3] + (1,), ctx.builder.type_of(scores).dtype))
    probs = ctx.emit1("Softmax", [ctx.emit1("Concat", [scores, zeros], axis=3)], axis=3)
    return _slice_last(ctx, probs, 0, shape[3])


def _split_packed(ctx: ConvertContext, heads: int, kv_heads: int) -> tuple[str, str, str]:
    """Query, key and value: separate inputs, or one packed [B, S, (N + 2 Nkv) * H] query."""
    if ctx.has_input(_KEY) != ctx.has_input(_VALUE):
        ctx.fail("key and value come together (or neither, with a packed query)")
    if ctx.has_input(_KEY):
        return ctx.input(_QUERY), ctx.input(_KEY), ctx.input(_VALUE)
    hidden = ctx.shape(_QUERY)[2]
    if hidden % (heads + 2 * kv_heads):
        ctx.fail(f"a packed query's hidden size {hidden} is not (num_heads + 2 * kv_num_heads) * head_size")
    size = hidden // (heads + 2 * kv_heads)
    query = ctx.input(_QUERY)
    return (_slice_last(ctx, query, 0, heads * size), _slice_last(ctx, query, heads * size, kv_heads * size),
            _slice_last(ctx, query, (heads + kv_heads) * size, kv_heads * size))


@converter("GroupQueryAttention", since_version=1, domain=MS)
def group_query_attention(ctx: ConvertContext) -> list[str]:
    heads, kv_heads = int(ctx.attr("num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        ctx.fail(f"num_heads ({heads}) must be a positive multiple of kv_num_heads ({kv_heads})")
    for index, what in ((_BIAS, "attention_bias"), (_SINK, "head_sink")):
        if ctx.has_input(index):
            ctx.unsupported(f"GroupQueryAttention with {what}")
    if ctx.output_used(3):
        ctx.unsupported("GroupQueryAttention's output_qk")
    if ctx.has_input(_PAST_KEY) != ctx.has_input(_PAST_VALUE):
        ctx.fail("past_key and past_value come together")
    query, key, value = _split_packed(ctx, heads, kv_heads)
    batch, seq, _ = ctx.builder.type_of(query).shape
    if ctx.builder.type_of(key).shape[1] != seq:
        ctx.fail("key and value must have the query's sequence length")
    q, k, v = _heads(ctx, query, heads), _heads(ctx, key, kv_heads), _heads(ctx, value, kv_heads)
    head_size = ctx.builder.type_of(q).shape[3]
    past = ctx.shape(_PAST_KEY)[2] if ctx.has_input(_PAST_KEY) else 0
    length, first_prompt = _present_length(ctx, seq, past)

    seqlens = ctx.emit1("Cast", [ctx.reshape(ctx.input(_SEQLENS_K), (batch, 1))], to="int64")
    if first_prompt:
        past_len = ctx.const(np.zeros((batch, 1), np.int64))
    else:  # seqlens_k is the position of each row's last token: total - 1
        past_len = ctx.emit1("Sub", [seqlens, ctx.const(np.int64(seq - 1))])
    positions = _positions(ctx, past_len, batch, seq)
    if ctx.attr("do_rotary", 0):
        rotary_positions: Optional[str] = positions
        if ctx.has_input(_POSITIONS):
            rotary_positions = ctx.emit1("Cast", [ctx.input(_POSITIONS)], to="int64")
        rotary = 2 * ctx.shape(_COS)[1]
        interleaved = bool(ctx.attr("rotary_interleaved", 0))
        q, k = (rotate(ctx, x, rotary_positions, ctx.input(_COS), ctx.input(_SIN), (batch, 1, seq), rotary, interleaved)
                for x in (q, k))

    present_k = _into_cache(ctx, k, _PAST_KEY, past_len, length)
    present_v = _into_cache(ctx, v, _PAST_VALUE, past_len, length)
    dtype = ctx.type_of(_QUERY).dtype
    dims = _Dims(batch, heads, kv_heads, seq, length, past, head_size, head_size, dtype, dtype)
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / np.sqrt(head_size)
    scores = _grouped_matmul(ctx, dims, q, ctx.emit1("Transpose", [present_k], perm=(0, 1, 3, 2)))
    scores = _softcapped(ctx, ctx.emit1("Mul", [scores, ctx.scalar_like(scale, scores)]))
    scores = ctx.emit1("Add", [scores, _select_bias(ctx, dims, _allowed_keys(ctx, positions, batch, seq, length))])
    output = _merge_heads(ctx, _grouped_matmul(ctx, dims, _softmax(ctx, scores), present_v))
    return [output, present_k, present_v]
