"""Conv and pooling kernels against ONNX Runtime: strides, dilations, groups, depthwise, pads, ceil_mode."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv(cid, x_shape, w_shape, bias=False, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
         both=False):
    x, w = f32(*x_shape), f32(*w_shape)
    inputs = [x, w] + ([f32(w_shape[0])] if bias else [])
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    onnx_attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilations), "group": group,
                  "kernel_shape": list(w_shape[2:])}
    # Sums of C*K*K products of unit normals: compare relative to their typical magnitude.
    scale = float(np.sqrt(w_shape[1] * w_shape[2] * w_shape[3]))
    return Case(f"Conv_{cid}", "Conv", inputs, attrs, lambda: onnx_reference("Conv", inputs, onnx_attrs),
                rtol=1e-4, atol=2e-5 * scale, unscheduled_too=both)


CONV_CASES = [
    conv("3x3_pad1_bias", (1, 8, 10, 12), (16, 8, 3, 3), bias=True, pads=(1, 1, 1, 1), both=True),
    conv("3x3_s2_odd", (1, 8, 15, 17), (12, 8, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1), both=True),
    conv("7x7_s2_stem", (1, 3, 32, 30), (16, 3, 7, 7), bias=True, strides=(2, 2), pads=(3, 3, 3, 3)),
    conv("dilated", (1, 4, 12, 12), (8, 4, 3, 3), pads=(2, 2, 2, 2), dilations=(2, 2), both=True),
    conv("groups2", (1, 8, 9, 9), (12, 4, 3, 3), bias=True, pads=(1, 1, 1, 1), group=2, both=True),
    conv("depthwise", (1, 16, 14, 14), (16, 1, 3, 3), bias=True, pads=(1, 1, 1, 1), group=16, both=True),
    conv("depthwise_s2", (1, 16, 15, 15), (16, 1, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1), group=16),
    conv("depthwise_multiplier2", (1, 4, 9, 9), (8, 1, 3, 3), pads=(1, 1, 1, 1), group=4),
    conv("1x1_batch2", (2, 16, 7, 9), (24, 16, 1, 1), both=True),  # flattened: 63 pixels -> 64
    conv("1x1_13x13_flat_bias", (1, 32, 13, 13), (20, 32, 1, 1), bias=True),
    conv("1x1_rows_fused", (1, 8, 4, 14), (12, 8, 1, 1), both=True),  # 56 pixels: one contiguous run
    conv("1x1_wide_rows", (1, 8, 3, 16), (4, 8, 1, 1)),
    conv("1x1_s2_bias", (1, 16, 14, 14), (32, 16, 1, 1), bias=True, strides=(2, 2)),
    conv("1x1_s2_pad", (1, 4, 9, 9), (6, 4, 1, 1), strides=(2, 2), pads=(1, 1, 1, 1)),
    conv("asym_pads_stride12", (1, 3, 11, 13), (5, 3, 3, 2), strides=(1, 2), pads=(0, 1, 2, 0)),
    conv("stride3_dil21", (1, 2, 17, 16), (4, 2, 3, 3), strides=(3, 3), pads=(1, 0, 1, 2), dilations=(2, 1)),
    conv("width28_widened", (1, 8, 28, 28), (16, 8, 3, 3), pads=(1, 1, 1, 1)),
    conv("width13_widened_bias", (1, 8, 13, 13), (10, 8, 3, 3), bias=True, pads=(1, 1, 1, 1)),
    conv("width113", (1, 4, 5, 113), (8, 4, 1, 3), pads=(0, 1, 0, 1)),
    conv("unused_rows_cropped", (1, 4, 10, 10), (4, 4, 3, 3), strides=(2, 2)),
    conv("odd_channels", (1, 5, 8, 8), (7, 5, 3, 3), pads=(1, 1, 1, 1)),
    conv("64ch_56_resnet_like", (1, 64, 16, 16), (64, 64, 3, 3), bias=True, pads=(1, 1, 1, 1)),
]


def pool(op, cid, shape, kernel, strides=(1, 1), pads=(0, 0, 0, 0), dilations=None, ceil_mode=0,
         count_include_pad=None, both=False):
    x = f32(*shape)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
    onnx_attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads), "ceil_mode": ceil_mode}
    if dilations is not None:
        attrs["dilations"] = dilations
        onnx_attrs["dilations"] = list(dilations)
    if count_include_pad is not None:
        attrs["count_include_pad"] = count_include_pad
        onnx_attrs["count_include_pad"] = count_include_pad
    return Case(f"{op}_{cid}", op, [x], attrs, lambda: onnx_reference(op, [x], onnx_attrs), rtol=1e-5, atol=1e-6,
                unscheduled_too=both)


POOL_CASES = [
    pool("MaxPool", "3x3_s2_p1", (1, 8, 16, 16), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), both=True),
    pool("MaxPool", "3x3_s2_ceil", (1, 4, 15, 15), (3, 3), (2, 2), ceil_mode=1, both=True),
    pool("MaxPool", "3x3_s2_ceil_even", (1, 4, 14, 14), (3, 3), (2, 2), ceil_mode=1),
    pool("MaxPool", "2x2_s2", (2, 3, 9, 8), (2, 2), (2, 2)),
    pool("MaxPool", "3x3_s1_p1", (1, 4, 7, 9), (3, 3), (1, 1), (1, 1, 1, 1)),
    pool("MaxPool", "dilated", (1, 2, 12, 12), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    pool("MaxPool", "asym_ceil", (1, 3, 10, 13), (3, 2), (2, 3), (1, 0, 0, 1), ceil_mode=1),
    pool("AveragePool", "3x3_p1_exclude", (1, 4, 9, 11), (3, 3), (1, 1), (1, 1, 1, 1), count_include_pad=0,
         both=True),
    pool("AveragePool", "3x3_p1_include", (1, 4, 9, 11), (3, 3), (1, 1), (1, 1, 1, 1), count_include_pad=1),
    pool("AveragePool", "3x3_s2_ceil_include", (1, 3, 10, 10), (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=1,
         count_include_pad=1),
    pool("AveragePool", "3x3_s2_ceil_exclude", (1, 3, 10, 10), (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=1,
         count_include_pad=0),
    pool("AveragePool", "2x2_s2", (2, 3, 8, 8), (2, 2), (2, 2), count_include_pad=0),
    pool("AveragePool", "5x3_asym", (1, 2, 11, 9), (5, 3), (2, 1), (2, 1, 1, 0), count_include_pad=0),
]


def global_pool(op, shape):
    x = f32(*shape)
    return Case(f"{op}_{'x'.join(map(str, shape))}", op, [x], {}, lambda: onnx_reference(op, [x]), rtol=1e-5,
                atol=1e-6)


GLOBAL_CASES = [global_pool(op, s) for op in ("GlobalAveragePool", "GlobalMaxPool")
                for s in ((2, 16, 7, 7), (1, 8, 13, 11), (1, 512, 7, 7))]
CASES = CONV_CASES + POOL_CASES + GLOBAL_CASES


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_window_op_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
