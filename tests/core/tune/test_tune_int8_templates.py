"""The tuning templates of the 8-bit kernels: each space holds the heuristic default, and sampled register tiles
(rows x column blocks of intrinsic calls; a depthwise ConvInteger's column tiles) compute the exact reference."""
from __future__ import annotations

import random

import numpy as np
import pytest

from core.graph.op_defs.integer import conv_integer_reference, matmul_integer_reference, packed_conv_integer_reference
from core.kernels.schedules.integer import schedule_conv_integer, schedule_depthwise_blocked, schedule_packed_integer
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.packing.int8 import column_correction, conv_weights_as_columns, pack_dot_weights
from core.target import get_target
from core.tune.templates import anchor_stage
from tests.backend_calls import get_template, tunable_ops, runs_on_host

TARGET = get_target("x86-64-v3")  # the AVX2 intrinsics: every x86-64-v3 host runs them
INTRINSIC = "x86_avx2_u8s8_8x4"
WORDS = "x86_avx2_s16s8_8x2"  # int16 data, 2 deep
rng = np.random.default_rng(12)
pytestmark = pytest.mark.skipif(not runs_on_host(TARGET), reason="needs an AVX2 host")


def matmul_case():
    a, b = rng.integers(0, 256, (12, 40)).astype(np.uint8), rng.integers(-128, 128, (40, 48)).astype(np.int8)
    inputs = [a, pack_dot_weights(b, 8), column_correction(b, 9)]
    attrs = {"columns": 48, "depth": 40, "data_shift": 0, "intrinsic": INTRINSIC}
    return "MatMulIntegerPacked", inputs, attrs, matmul_integer_reference([a, b, np.array(9, np.uint8)], {})[0]


def conv_case(intrinsic=INTRINSIC):
    x, w = rng.integers(0, 256, (1, 8, 6, 8)).astype(np.uint8), rng.integers(-128, 128, (32, 8, 3, 3)).astype(np.int8)
    b = conv_weights_as_columns(w)
    inputs = [x, pack_dot_weights(b, 8, 2 if intrinsic == WORDS else 4), column_correction(b, 5)]
    attrs = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "columns": 32,
             "data_zero_point": 5, "data_shift": 0, "intrinsic": intrinsic}
    return "ConvIntegerPacked", inputs, attrs, packed_conv_integer_reference(inputs, attrs)[0]


def depthwise_case():
    x = rng.integers(0, 256, (1, 16, 10, 30)).astype(np.uint8)
    w = rng.integers(-128, 128, (16, 1, 3, 3)).astype(np.int8)
    inputs = [x, w, np.array(255, np.uint8)]
    attrs = {"strides": (2, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 16}
    return "ConvInteger", inputs, attrs, conv_integer_reference(inputs, attrs)[0]


def depthwise_blocked_case():
    x, w = rng.integers(0, 256, (1, 16, 9, 24)).astype(np.uint8), rng.integers(-128, 128, (16, 1, 3, 3)).astype(np.int8)
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
    want = conv_integer_reference([x, w, np.array(3, np.uint8)], dict(attrs, group=16))[0]
    taps = w[:, 0].transpose(1, 2, 0).astype(np.int32)
    inputs = [x.transpose(0, 2, 3, 1)[:, None].copy(), taps, np.array(3, np.uint8)]
    return "DepthwiseConvIntegerNCHWc", inputs, attrs, want.transpose(0, 2, 3, 1)[:, None]


SCHEDULES = {"ConvInteger": schedule_conv_integer, "DepthwiseConvIntegerNCHWc": schedule_depthwise_blocked}


@pytest.mark.parametrize("make", [matmul_case, conv_case, lambda: conv_case(WORDS), depthwise_case,
                                  depthwise_blocked_case],
                         ids=["matmul", "conv", "conv_int16_data", "depthwise", "depthwise_channels_last"])
def test_int8_dot_configs_compute_the_reference(make):
    op, inputs, attrs, want = make()
    assert op in tunable_ops(TARGET)
    template, captured = get_template(op, TARGET), {}

    def probe(sch, outs, target):
        SCHEDULES.get(op, schedule_packed_integer)(sch, outs, target)
        stage = anchor_stage(sch, outs, template)
        captured["op"], captured["default"] = stage.op, template.read_default(stage)

    OpKernel("probe", op, inputs, attrs, schedule_fn=probe).lower(TARGET)
    space = template.define(captured["op"], TARGET, captured["default"])
    default = space.from_values(captured["default"])
    valid = [c for c in space if template.valid(c.values, captured["op"], TARGET)]
    assert default.index in {c.index for c in valid} and len(valid) >= 4
    picks = list({c.index: c for c in [default] + random.Random(3).sample(valid, min(4, len(valid)))}.values())
    kernels = [OpKernel(f"k{c.index}", op, inputs, attrs,
                        schedule_fn=lambda sch, outs, target, v=dict(c.values): template.apply(sch, outs, target, v))
               for c in picks]
    for run, config in zip(build_kernels(kernels, TARGET), picks):
        np.testing.assert_array_equal(run.run()[0], want, err_msg=str(config.values))
