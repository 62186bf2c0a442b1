"""com.microsoft GroupQueryAttention (prompt, decoding with a KV cache, rotary, local window, softcap,
smooth softmax, packed QKV, multi-query): compiled by Kiln and compared with ONNX Runtime's CPU kernel."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.errors import UnsupportedOpError
from core.frontend import import_onnx

from .conftest import make_model
from .test_frontend_contrib import MS, compiled_matches_ort

F32 = "float32"
rng = np.random.default_rng(7)
OUTS = {"y": F32, "present_key": F32, "present_value": F32}


def _f(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _node(inputs, **attrs):
    return helper.make_node("GroupQueryAttention", inputs, list(OUTS), domain=MS, **attrs)


def _rotary_caches(max_len: int, rotary: int) -> dict:
    angles = np.arange(max_len)[:, None] / (10000 ** (np.arange(rotary // 2) / (rotary // 2)))
    return {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}


@pytest.mark.parametrize("heads,kv_heads,attrs", [
    (4, 2, {}),
    (4, 1, {"scale": 0.3}),  # multi-query
    (2, 2, {"softcap": 3.0}),
    (4, 2, {"smooth_softmax": 1}),
    (4, 2, {"local_window_size": 2}),
])
def test_prompt(heads, kv_heads, attrs):
    batch, seq, size = 2, 5, 8
    total = np.array(seq, np.int32)
    inputs = {"q": _f(batch, seq, heads * size), "k": _f(batch, seq, kv_heads * size),
              "v": _f(batch, seq, kv_heads * size), "seqlens": np.full(batch, seq - 1, np.int32)}
    node = _node(["q", "k", "v", "", "", "seqlens", "total"], num_heads=heads, kv_num_heads=kv_heads, **attrs)
    compiled_matches_ort(node, inputs, OUTS, initializers={"total": total})


@pytest.mark.parametrize("batch,seq", [(2, 1), (1, 3)])  # ORT takes several new tokens after a past for batch 1 only
@pytest.mark.parametrize("total_is_input", [False, True])
def test_decoding_with_a_cache_of_different_lengths_per_row(batch, seq, total_is_input):
    """Rows whose past lengths differ (the last row's cache is full, the others' hold 2 stale entries): each
    row's new keys land at its own position, keys past it stay hidden."""
    heads, kv_heads, size, past = 4, 2, 8, 6
    seqlens = np.array([past + seq - 3] * (batch - 1) + [past + seq - 1], np.int32)
    total = np.array(past + seq, np.int32)
    inputs = {"q": _f(batch, seq, heads * size), "k": _f(batch, seq, kv_heads * size),
              "v": _f(batch, seq, kv_heads * size), "past_key": _f(batch, kv_heads, past, size),
              "past_value": _f(batch, kv_heads, past, size), "seqlens": seqlens}
    consts = {}
    if total_is_input:
        inputs["total"] = total
    else:
        consts["total"] = total
    node = _node(["q", "k", "v", "past_key", "past_value", "seqlens", "total"], num_heads=heads,
                 kv_num_heads=kv_heads)
    compiled_matches_ort(node, inputs, OUTS, initializers=consts)


def test_a_cache_buffer_longer_than_the_sequence():
    """A fixed-size cache (max 10) holding 4 tokens: present keeps the buffer length."""
    batch, heads, kv_heads, size, cache = 1, 2, 1, 8, 10
    inputs = {"q": _f(batch, 1, heads * size), "k": _f(batch, 1, kv_heads * size), "v": _f(batch, 1, kv_heads * size),
              "past_key": _f(batch, kv_heads, cache, size), "past_value": _f(batch, kv_heads, cache, size),
              "seqlens": np.array([4], np.int32)}
    node = _node(["q", "k", "v", "past_key", "past_value", "seqlens", "total"], num_heads=heads, kv_num_heads=kv_heads)
    compiled_matches_ort(node, inputs, OUTS, initializers={"total": np.array(5, np.int32)})


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("packed", [False, True])
def test_rotary_prompt_then_step(interleaved, packed):
    batch, heads, kv_heads, size = 2, 4, 2, 16  # ORT's rotary wants head sizes that are multiples of 16
    caches = _rotary_caches(16, size)
    for seq, past in ((4, 0), (1, 4)):
        width = (heads + 2 * kv_heads) * size
        inputs = {"seqlens": np.full(batch, past + seq - 1, np.int32)}
        if packed:
            inputs["q"] = _f(batch, seq, width)
            names = ["q", "", ""]
        else:
            inputs.update(q=_f(batch, seq, heads * size), k=_f(batch, seq, kv_heads * size),
                          v=_f(batch, seq, kv_heads * size))
            names = ["q", "k", "v"]
        if past:
            inputs.update(past_key=_f(batch, kv_heads, past, size), past_value=_f(batch, kv_heads, past, size))
        names += ["past_key", "past_value"] if past else ["", ""]
        node = _node(names + ["seqlens", "total", "cos", "sin"], num_heads=heads, kv_num_heads=kv_heads,
                     do_rotary=1, rotary_interleaved=interleaved)
        compiled_matches_ort(node, inputs, OUTS, initializers={"total": np.array(past + seq, np.int32), **caches})


def test_attention_bias_is_refused_clearly():
    node = _node(["q", "k", "v", "", "", "seqlens", "total", "", "", "", "bias"], num_heads=2, kv_num_heads=2)
    model = make_model([node], {"q": (F32, [1, 2, 16]), "k": (F32, [1, 2, 16]), "v": (F32, [1, 2, 16]),
                                "seqlens": ("int32", [1]), "bias": (F32, [1, 1, 2, 2])}, OUTS,
                       initializers={"total": np.array(2, np.int32)}, domains={MS: 1})
    with pytest.raises(UnsupportedOpError, match="attention_bias"):
        import_onnx(model)
