"""The ConvNDNCHWc (blocked 3-D conv) tuning template: its space holds the heuristic default, and sampled configs
(register tiles, input-channel loop order, unrolled window columns) compile and compute the reference conv."""
from __future__ import annotations

import random

import numpy as np
import pytest

from core.graph.op_defs.conv_nd import conv_nd_fold
from core.kernels.schedules.conv_nd_nchwc import schedule_conv_nd_nchwc
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.packing.blocked import from_blocked, pack_weights, to_blocked
from core.target import get_target
from core.tune.templates import anchor_stage
from tests.backend_calls import get_template

rng = np.random.default_rng(9)
TARGET = get_target("native")
BLOCK = 8  # whatever the host's lanes: the kernel computes any block


def space_of(inputs, attrs):
    template, captured = get_template("ConvNDNCHWc", TARGET), {}

    def probe(sch, outs, target):
        schedule_conv_nd_nchwc(sch, outs, target)
        stage = anchor_stage(sch, outs, template)
        captured["op"], captured["default"] = stage.op, template.read_default(stage)

    OpKernel("probe", "ConvNDNCHWc", inputs, attrs, schedule_fn=probe).lower(TARGET)
    space = template.define(captured["op"], TARGET, captured["default"])
    space.default = space.from_values({k.name: captured["default"][k.name] for k in space.knobs})
    return template, space, captured["op"]


@pytest.mark.parametrize("x_shape,w_shape,attrs,knobs", [
    ((1, 16, 4, 6, 8), (16, 16, 3, 3, 3), {"pads": (1,) * 6, "group": 1},
     ["ow_tile", "oc_tile", "oh_tile", "reduce_order", "unroll_kw"]),
    ((1, 16, 5, 8, 12), (16, 1, 3, 3, 3), {"pads": (1,) * 6, "strides": (1, 2, 2), "group": 16},
     ["ow_tile", "oh_tile", "unroll_kw"]),
])
def test_conv_nd_nchwc_configs_compute_the_reference(x_shape, w_shape, attrs, knobs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    depthwise = attrs["group"] > 1
    blocked_attrs = dict(attrs, group=1, depthwise=depthwise)
    inputs = [to_blocked(x, BLOCK), pack_weights(w, BLOCK, BLOCK, depthwise)]
    template, space, op = space_of(inputs, blocked_attrs)
    assert [k.name for k in space.knobs] == knobs
    valid = [c for c in space if template.valid(c.values, op, TARGET)]
    assert space.default.index in {c.index for c in valid} and len(valid) >= 4
    picks = [space.default] + random.Random(len(knobs)).sample(valid, min(5, len(valid)))
    picks = list({c.index: c for c in picks}.values())
    kernels = [OpKernel(f"conv_nd_nchwc_{c.index}", "ConvNDNCHWc", inputs, blocked_attrs,
                        schedule_fn=lambda sch, outs, target, v=dict(c.values): template.apply(sch, outs, target, v))
               for c in picks]
    want = conv_nd_fold([x, w], attrs)[0]
    for run, config in zip(build_kernels(kernels), picks):
        (got,) = run.run()
        np.testing.assert_allclose(from_blocked(got), want, rtol=1e-4, atol=1e-3, err_msg=str(config.values))
