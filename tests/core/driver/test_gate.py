"""The CI gate: a -O0 candidate against its -O3 baseline fails with a clear message; the same build passes (under a
generous slowdown allowance, so that a noisy machine cannot flip it); the verdict's rules and the policy's syntax."""
from __future__ import annotations

import pytest

import core
from core.driver.gate import ERROR_FLOOR, GatePolicy, GatePolicyError, compare_with_baseline, verdict
from tests.core.frontend.test_frontend_control_flow_runtime import _loop_model
from tests.gate_models import elementwise_chain


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gate")
    model = elementwise_chain()
    paths = {}
    for level in (3, 0):
        artifact = core.compile(model, opt_level=level, benchmark=False)
        paths[level] = artifact.save(folder / f"O{level}.tar.gz")
    return model, paths


def test_an_O0_candidate_fails_against_its_O3_baseline(builds):
    model, paths = builds
    section = compare_with_baseline(paths[0], paths[3], model, policy=GatePolicy.parse("5%", "2x"),
                                    baseline_label="the -O3 baseline")
    assert section["verdict"] == "fail" and not section["passed"]
    assert section["message"].startswith("gate failed: ") and "slower than the -O3 baseline" in section["message"]
    assert section["ratio"] > 1.05 and section["candidate_ms"] > section["baseline_ms"]
    assert section["rounds"] == 15 and len(section["candidate_quartiles"]) == 3
    # Both builds were checked against ONNX Runtime on the same inputs: exact element-wise math either way.
    assert section["candidate_max_abs_err"] < 1e-5 and section["baseline_max_abs_err"] < 1e-5


def test_the_same_build_passes(builds):
    model, paths = builds
    section = compare_with_baseline(paths[3], paths[3], model, policy=GatePolicy.parse("100%", "2x"))
    assert section["passed"] and section["verdict"] == "pass", section["message"]
    assert section["message"].startswith("gate passed: ") and section["error_growth"] == 1.0


def test_the_verdict_fails_on_error_growth_above_the_floor_only():
    same = [1.0] * 5
    worse = verdict(same, same, (4e-3, 1e-3), GatePolicy(0.05, 2.0))
    assert not worse["passed"] and "4x that of the baseline" in worse["message"]
    assert verdict(same, same, (ERROR_FLOOR / 2, 0.0), GatePolicy(0.05, 2.0))["passed"]  # rounding noise, not growth
    assert verdict([1.04] * 5, same, (0.0, 0.0), GatePolicy(0.05, 2.0))["passed"]
    slower = verdict([1.2] * 5, same, (0.0, 0.0), GatePolicy(0.05, 2.0))
    assert not slower["passed"] and slower["message"].startswith("gate failed: 20% slower than the baseline")


@pytest.mark.parametrize("slowdown, growth, expected", [("5%", "2x", (0.05, 2.0)), ("0.1", "3", (0.1, 3.0)),
                                                        (None, None, (0.05, 2.0)), ("150%", "1.5x", (1.5, 1.5))])
def test_policy_syntax(slowdown, growth, expected):
    policy = GatePolicy.parse(slowdown, growth)
    assert (policy.max_slowdown, policy.max_error_growth) == pytest.approx(expected)


@pytest.mark.parametrize("slowdown, growth", [("fast", "2x"), ("5%", "0.5x"), ("-5%", "2x"), ("5%", "two")])
def test_bad_policies_are_refused(slowdown, growth):
    with pytest.raises(GatePolicyError):
        GatePolicy.parse(slowdown, growth)


def test_a_loop_with_a_declared_trip_bound_is_gated_on_random_inputs(tmp_path):
    """The gate imports the model for its random inputs under the build's --max-trip-count (refused without it
    before: the loop's scan outputs need the bound)."""
    model = _loop_model()
    path = core.compile(model, max_trip_count=16, benchmark=False).save(tmp_path / "loop.tar.gz")
    section = compare_with_baseline(path, path, model, policy=GatePolicy.parse("1000%", "2x"))
    assert section["passed"], section["message"]
    assert section["candidate_max_abs_err"] < 1e-5
