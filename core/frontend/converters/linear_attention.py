"""LinearAttention (opset 27): the recurrent state update (linear, gated, delta, gated_delta rules)
unrolled over the static sequence length into MatMul and elementwise IR ops, computed in float32."""
from __future__ import annotations

import math

import numpy as np

from .registry import ConvertContext, converter

_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


def _as(ctx: ConvertContext, x: str, dtype: str) -> str:
    return x if ctx.builder.type_of(x).dtype == dtype else ctx.emit1("Cast", [x], to=dtype)


def _per_head(ctx: ConvertContext, index: int, heads: int, name: str) -> str:
    """[B, T, heads * d] as float32 [B, heads, T, d]."""
    batch, steps, hidden = ctx.shape(index)
    if hidden % heads:
        ctx.fail(f"{name}'s last dimension {hidden} is not a multiple of {heads} heads")
    split = ctx.reshape(_as(ctx, ctx.input(index), "float32"), (batch, steps, heads, hidden // heads))
    return ctx.emit1("Transpose", [split], perm=(0, 2, 1, 3))


def _step(ctx: ConvertContext, x: str, t: int) -> str:
    """Time step t of [B, H, T, d] as [B, H, 1, d]."""
    shape = ctx.builder.type_of(x).shape
    return ctx.emit1("Slice", [x], starts=(0, 0, t, 0), steps=(1, 1, 1, 1), sizes=shape[:2] + (1, shape[3]))


def _column(ctx: ConvertContext, x: str) -> str:
    """[B, H, 1, d] as [B, H, d, 1], to broadcast along the state's value axis."""
    batch, heads, _, d = ctx.builder.type_of(x).shape
    return ctx.reshape(x, (batch, heads, d, 1))


@converter("LinearAttention", since_version=27)
def linear_attention(ctx: ConvertContext) -> list[str]:
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in _RULES:
        ctx.fail(f"update_rule must be one of {', '.join(_RULES)}, got {rule!r}")
    gating, delta = _RULES[rule]
    if gating != ctx.has_input(4) or delta != ctx.has_input(5):
        ctx.fail(f"update_rule {rule!r} needs decay: {gating}, beta: {delta}; "
                 f"got decay: {ctx.has_input(4)}, beta: {ctx.has_input(5)}")
    q_heads, kv_heads = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        ctx.fail(f"q_num_heads={q_heads} must be a positive multiple of kv_num_heads={kv_heads}")
    if any(len(ctx.shape(i)) != 3 for i in range(3)):
        ctx.fail("query, key and value must be [batch, sequence, heads * head_size]")
    q = _per_head(ctx, 0, q_heads, "query")
    k, v = _per_head(ctx, 1, kv_heads, "key"), _per_head(ctx, 2, kv_heads, "value")
    batch, _, steps, d_k = ctx.builder.type_of(k).shape
    d_v = ctx.builder.type_of(v).shape[3]
    group = q_heads // kv_heads
    scale = float(ctx.attr("scale", 0.0) or 0.0) or 1.0 / math.sqrt(d_k)

    # decay [B, T, Hkv] or [B, T, Hkv * d_k] -> exp(decay) as [B, Hkv, T, 1 or d_k]; beta [B, T, Hkv or 1].
    decay_factor = _per_head(ctx, 4, kv_heads, "decay") if gating else None
    if decay_factor is not None:
        decay_factor = ctx.emit1("Exp", [decay_factor])
    beta = _per_head(ctx, 5, ctx.shape(5)[2], "beta") if delta else None

    if ctx.has_input(3):
        if ctx.shape(3) != (batch, kv_heads, d_k, d_v):
            ctx.fail(f"past_state must be {[batch, kv_heads, d_k, d_v]}, got {list(ctx.shape(3))}")
        state = _as(ctx, ctx.input(3), "float32")
    else:
        state = ctx.const(np.zeros((batch, kv_heads, d_k, d_v), np.float32))
    outputs = []
    for t in range(steps):
        k_t, v_t = _step(ctx, k, t), _step(ctx, v, t)
        if decay_factor is not None:
            state = ctx.emit1("Mul", [state, _column(ctx, _step(ctx, decay_factor, t))])
        if beta is not None:  # v_t <- beta_t * (v_t - S^T k_t)
            retrieved = ctx.emit1("MatMul", [k_t, state])
            v_t = ctx.emit1("Mul", [_step(ctx, beta, t), ctx.emit1("Sub", [v_t, retrieved])])
        state = ctx.emit1("Add", [state, ctx.emit1("Mul", [_column(ctx, k_t), v_t])])  # S += k_t (x) v_t
        # Query head h reads KV head h // group: queries grouped, the state broadcast over the group.
        q_t = ctx.reshape(_step(ctx, q, t), (batch, kv_heads, group, 1, d_k))
        read = ctx.emit1("MatMul", [q_t, ctx.reshape(state, (batch, kv_heads, 1, d_k, d_v))])
        outputs.append(ctx.reshape(read, (batch, q_heads, 1, d_v)))
    heads_out = outputs[0] if steps == 1 else ctx.emit1("Concat", outputs, axis=2)
    scaled = ctx.emit1("Mul", [heads_out, ctx.const(np.asarray(scale, np.float32))])
    merged = ctx.reshape(ctx.emit1("Transpose", [scaled], perm=(0, 2, 1, 3)), (batch, steps, q_heads * d_v))
    state_dtype = ctx.type_of(3).dtype if ctx.has_input(3) else ctx.type_of(0).dtype
    return [_as(ctx, merged, ctx.type_of(0).dtype), _as(ctx, state, state_dtype)]
