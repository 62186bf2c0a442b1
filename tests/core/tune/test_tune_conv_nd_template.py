"""The ConvND (3-D conv) tuning template: its space holds the heuristic default, and sampled configs
(register tiles of columns x channels x rows) compile and compute the reference conv."""
from __future__ import annotations

import random

import numpy as np
import pytest

from core.graph.op_defs.conv_nd import conv_nd_fold
from core.kernels.schedules.conv_nd import schedule_conv_nd
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.target import get_target
from core.tune.templates import anchor_stage
from tests.backend_calls import get_template

rng = np.random.default_rng(8)
TARGET = get_target("native")


def space_of(inputs, attrs):
    template, captured = get_template("ConvND", TARGET), {}

    def probe(sch, outs, target):
        schedule_conv_nd(sch, outs, target)
        stage = anchor_stage(sch, outs, template)
        captured["op"], captured["default"] = stage.op, template.read_default(stage)

    OpKernel("probe", "ConvND", inputs, attrs, schedule_fn=probe).lower(TARGET)
    space = template.define(captured["op"], TARGET, captured["default"])
    space.default = space.from_values({k.name: captured["default"][k.name] for k in space.knobs})
    return template, space, captured["op"]


@pytest.mark.parametrize("x_shape,w_shape,attrs,knobs", [
    ((1, 8, 4, 6, 16), (16, 8, 3, 3, 3), {"pads": (1,) * 6, "group": 1}, ["ow_tile", "oc_tile", "oh_tile"]),
    ((1, 8, 5, 8, 12), (8, 1, 3, 3, 3), {"pads": (1,) * 6, "strides": (1, 2, 2), "group": 8}, ["ow_tile", "oh_tile"]),
])
def test_conv_nd_configs_compute_the_reference(x_shape, w_shape, attrs, knobs):
    inputs = [rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32),
              rng.standard_normal(w_shape[0]).astype(np.float32)]
    template, space, op = space_of(inputs, attrs)
    assert [k.name for k in space.knobs] == knobs
    valid = [c for c in space if template.valid(c.values, op, TARGET)]
    assert space.default.index in {c.index for c in valid} and len(valid) >= 4
    picks = [space.default] + random.Random(len(knobs)).sample(valid, min(5, len(valid)))
    picks = list({c.index: c for c in picks}.values())
    kernels = [OpKernel(f"conv_nd_{c.index}", "ConvND", inputs, attrs,
                        schedule_fn=lambda sch, outs, target, v=dict(c.values): template.apply(sch, outs, target, v))
               for c in picks]
    want = conv_nd_fold(inputs, attrs)[0]
    for run, config in zip(build_kernels(kernels), picks):
        (got,) = run.run()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=str(config.values))
