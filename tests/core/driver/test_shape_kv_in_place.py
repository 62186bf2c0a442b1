"""A ranged decoder takes its KV cache in place: the past keys and values and the present ones go to the kernels as
the caller's own arrays (no copy in or out), at every past length in range, class boundaries and past 0 included."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import core

from tests.core.driver.dynamic_models import assert_same_outputs, greedy_tokens, ort_runner, tiny_decoder

# batch 1..4 (padded), new tokens 1..8 and past 0..40 (masked: length classes at 4 and 16 for the past)
SHAPES = {"input_ids": "1..4,1..8", "past_key_values.0.key": "1..4,2,0..40,4"}
PAST = [f"past_key_values.{i}.{n}" for i in range(2) for n in ("key", "value")]
PRESENT = [n.replace("past_key_values", "present") for n in PAST]


@pytest.fixture(scope="module")
def decoder():
    model = tiny_decoder()
    return model, core.compile(model, input_shapes=SHAPES, benchmark=False)


def _feeds(rng, batch: int, seq: int, past: int) -> dict:
    return {"input_ids": rng.integers(0, 32, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, past + seq), np.int64),
            **{n: rng.standard_normal((batch, 2, past, 4)).astype(np.float32) for n in PAST}}


def _copied_bytes(module) -> ctypes._CFuncPtr:
    copied = module._lib.kiln_shaped_copied_bytes
    copied.restype = ctypes.c_int64
    return copied


def test_one_token_steps_copy_nothing_and_match_onnxruntime_across_the_classes(decoder):
    model, art = decoder
    pasts = {b["past_key_values.0.key"][2] for b in art.metadata["dynamic_shapes"]["buckets"]}
    assert {4, 16, 40} <= pasts  # the length classes this test crosses
    run, rng = ort_runner(model), np.random.default_rng(5)
    with art.load() as module:
        copied = _copied_bytes(module)
        for past in (0, 1, 3, 4, 5, 15, 16, 17, 30, 39, 40, 20, 2):  # boundaries, then shrinking (buffers reused)
            feeds = _feeds(rng, 1, 1, past)
            assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
            assert copied() == 0, past  # every input and output was the caller's own array


def test_a_padded_batch_or_prompt_copies_only_what_the_layout_cannot_take(decoder):
    model, art = decoder
    run, rng = ort_runner(model), np.random.default_rng(6)
    with art.load() as module:
        copied = _copied_bytes(module)
        # batch 3 runs in a bucket of batch 4: every array is copied, the cache laid out at its run-time length
        feeds = _feeds(rng, 3, 1, 21)
        assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
        cache_in, cache_out = 4 * 3 * 2 * 21 * 4 * 4, 4 * 3 * 2 * 22 * 4 * 4
        assert copied() >= cache_in + cache_out
        # 3 new tokens in a bucket of 8: the logits (written by a reduction) are cut from the bucket's; the rest not
        feeds = _feeds(rng, 1, 3, 9)
        assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
        assert copied() == 3 * 32 * 4
        feeds = _feeds(rng, 1, 8, 0)  # the prompt with an empty cache
        assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
        assert copied() == 0


def test_greedy_generation_in_place_is_onnxruntimes(decoder):
    model, art = decoder
    with art.load() as module:
        tokens, outs = greedy_tokens(module.run, [3, 1, 4, 1, 5], steps=36)  # past 5 .. 40
    expected, ort_outs = greedy_tokens(ort_runner(model), [3, 1, 4, 1, 5], steps=36)
    assert tokens == expected
    for got, want in zip(outs, ort_outs):
        assert_same_outputs({n: got[n] for n in PRESENT}, {n: want[n] for n in PRESENT}, atol=1e-4)
