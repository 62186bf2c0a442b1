"""Latency with its spread: quartiles over the interleaved rounds, the number of rounds, a `busy` warning
when the rounds disagree; kernels timed inside whole-model runs, their sum next to the end-to-end time;
each kernel named by the ONNX nodes it came from."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.benchmark import BUSY_SPREAD, LatencyComparison, quartiles
from core.report.html import render_html


def test_quartiles_and_the_busy_warning():
    steady = LatencyComparison((1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0), (2.0, 2.02, 1.98, 2.0, 2.01, 1.99, 2.0))
    report = steady.as_report()
    assert report["rounds"] == 7 and report["ratio"] == 0.5 and not report["busy"] and "warning" not in report
    q1, median, q3 = report["kiln_quartiles"]
    assert q1 <= median <= q3 and median == 1.0
    assert report["ratio_quartiles"][0] <= 0.5 <= report["ratio_quartiles"][2]
    # A neighbour took a core for some rounds: Kiln's rounds vary by far more than BUSY_SPREAD.
    noisy = LatencyComparison((1.0, 1.9, 0.9, 1.6, 1.0, 2.2, 1.1), steady.onnxruntime_rounds).as_report()
    assert noisy["busy"] and noisy["spread"] > BUSY_SPREAD and "busy" in noisy["warning"]
    assert quartiles([1, 2, 3, 4, 5]) == (2.0, 3.0, 4.0)


def _named_model() -> bytes:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal((8 * 16 * 16, 10)).astype(np.float32) * 0.01, "fc"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="stem_conv"),
             helper.make_node("Relu", ["c"], ["r"], name="stem_relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="classifier")]
    graph = helper.make_graph(nodes, "named", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.fixture(scope="module")
def report():
    return core.compile(_named_model()).report


def test_the_report_gives_the_spread_and_the_rounds(report):
    lat = report["latency_ms"]
    assert lat["rounds"] == 7 and isinstance(lat["busy"], bool)
    for key in ("kiln", "onnxruntime"):
        q1, median, q3 = lat[f"{key}_quartiles"]
        assert 0 < q1 <= median <= q3 and median == pytest.approx(lat[key], abs=1e-4)
    assert report["validation"]["passed"]


def test_kernel_times_add_up_against_the_end_to_end_time(report):
    breakdown = report["latency_ms"]["kernel_breakdown"]
    calls = [k["time_ms"] for k in report["kernels"]]
    assert breakdown["calls"] == len(calls) and all(t is not None and t > 0 for t in calls)
    assert breakdown["kernels_sum_ms"] == pytest.approx(sum(calls), rel=1e-3, abs=1e-4)
    assert breakdown["end_to_end_ms"] == report["latency_ms"]["kiln"]
    assert breakdown["ratio"] == pytest.approx(breakdown["kernels_sum_ms"] / breakdown["end_to_end_ms"], rel=1e-2)
    assert breakdown["ratio"] > 0


def test_kernels_are_named_by_their_onnx_nodes(report):
    named = [set(k["onnx_nodes"]) for k in report["kernels"]]
    assert any({"stem_conv", "stem_relu"} <= n for n in named)  # the fused conv + relu kernel
    assert any("classifier" in n for n in named)
    assert all(n <= {"stem_conv", "stem_relu", "flatten", "classifier"} for n in named)
    page = render_html(report)
    assert "interleaved rounds" in page and "stem_conv" in page and "end to end" in page
