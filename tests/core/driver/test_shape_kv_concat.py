"""A ranged decoder appends its new keys and values to the past ones by an offset copy (rows [0, past) from the
past, then the new ones), not by a gather at computed positions: the structure, and numerics against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

import core
from core.backends import resolve
from core.driver.shape_plan import shape_plan
from core.lowering.executable import build_executable

from tests.core.driver.dynamic_models import assert_same_outputs, ort_runner, tiny_decoder

SHAPES = {"input_ids": "1..4,1..8", "past_key_values.0.key": "1..4,2,0..40,4"}
PAST = [f"past_key_values.{i}.{n}" for i in range(2) for n in ("key", "value")]


def _bucket(shapes: dict):
    """The optimized graph and kernels of the bucket compiled at exactly `shapes` (input -> shape)."""
    tgt, backend = resolve("x86-64-v3")
    model = tiny_decoder()
    graph = next(g for g in shape_plan(model, model, SHAPES).import_graphs()
                 if all(g.type_of(name).shape == tuple(shape) for name, shape in shapes.items()))
    graph = backend.optimize(graph, 3, tgt)
    return graph, build_executable(graph, tgt, backend)


@pytest.mark.parametrize("new", [1, 8])  # one new token (a static part), a prompt (bounded by its own length)
def test_the_present_keys_and_values_are_an_offset_copy_of_past_and_new(new):
    graph, exe = _bucket({"input_ids": (1, new), "past_key_values.0.key": (1, 2, 40, 4)})
    presents = [o for o in graph.outputs if o.startswith("present")]
    writers = [k for k in exe.kernels if set(k.outputs) & set(presents)]
    assert len(presents) == 4 and writers
    for kernel in writers:  # the past's row i below its length, else the new entries' row i - past: a Where last
        assert kernel.ops[-1] == "Where" and "Concat" in kernel.ops, kernel.ops
    # they hold 0 past their length, so the product of the attention weights with the values reads them unmasked
    present_values = {o for o in presents if o.endswith("value")}
    context = [k for k in exe.kernels if k.ops[0] == "MatMul" and set(k.inputs) & present_values]
    assert len(context) == 2 and not any(k.ops == ("Where",) for k in exe.kernels)
    # no op compares positions against a part's start and end to build a table of positions (the compacting gather)
    assert not any("And" in k.ops and "GreaterOrEqual" in k.ops for k in exe.kernels), [k.ops for k in exe.kernels]


def test_offset_copies_match_onnxruntime_across_pasts_and_new_lengths():
    model = tiny_decoder()
    art = core.compile(model, input_shapes=SHAPES, benchmark=False)
    run, rng = ort_runner(model), np.random.default_rng(11)
    with art.load() as module:
        # past 0 and the class boundaries (4, 16, 40), one new token and prompts inside their own classes
        for batch, seq, past in ((1, 1, 0), (1, 1, 1), (1, 1, 4), (1, 1, 5), (1, 1, 16), (1, 1, 17), (1, 1, 40),
                                 (1, 3, 0), (1, 3, 9), (2, 8, 32), (3, 5, 1), (1, 2, 38)):
            feeds = {"input_ids": rng.integers(0, 32, (batch, seq)).astype(np.int64),
                     "attention_mask": np.ones((batch, past + seq), np.int64),
                     **{n: rng.standard_normal((batch, 2, past, 4)).astype(np.float32) for n in PAST}}
            assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
