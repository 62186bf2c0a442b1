"""The CI gate: a new build against a baseline artifact, timed interleaved in one run and checked against ONNX Runtime
on the same inputs; it fails when the new build is slower or less accurate than the policy allows."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from ..errors import KilnError
from .benchmark import BUSY_SPREAD, interleaved_rounds, quartiles, significant, spread

# Below this, an error is float32 rounding: growth from 1e-9 to 1e-8 is no loss of accuracy worth failing a build.
ERROR_FLOOR = 1e-6


class GatePolicyError(KilnError):
    code = "bad_gate_policy"


@dataclass(frozen=True)
class GatePolicy:
    """`max_slowdown`: a fraction (0.05: the new build may take 5% longer than the baseline); `max_error_growth`: a
    factor (2.0: its largest error against ONNX Runtime may be twice the baseline's, above ERROR_FLOOR)."""

    max_slowdown: float = 0.05
    max_error_growth: float = 2.0

    def __post_init__(self) -> None:
        if not self.max_slowdown >= 0:
            raise GatePolicyError(f"the maximum slowdown must be >= 0%, not {self.max_slowdown:.0%}")
        if not self.max_error_growth >= 1:
            raise GatePolicyError(f"the maximum error growth must be >= 1x, not {self.max_error_growth}x")

    @classmethod
    def parse(cls, max_slowdown: "str | float | None" = None, max_error_growth: "str | float | None" = None) -> "GatePolicy":
        """`5%` or 0.05; `2x` or 2."""
        default = cls()
        return cls(default.max_slowdown if max_slowdown is None else _number(max_slowdown, "%", 100.0, "--max-slowdown"),
                   default.max_error_growth if max_error_growth is None
                   else _number(max_error_growth, "x", 1.0, "--max-error-growth"))

    def as_dict(self) -> dict[str, float]:
        return {"max_slowdown": self.max_slowdown, "max_error_growth": self.max_error_growth}


def _number(value: "str | float", suffix: str, scale: float, what: str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    match = re.fullmatch(rf"\s*([0-9]*\.?[0-9]+)\s*({re.escape(suffix)})?\s*", value)
    if not match:
        raise GatePolicyError(f"bad {what} {value!r}: expected a number like 5{suffix}" if suffix == "%" else
                              f"bad {what} {value!r}: expected a factor like 2{suffix}")
    number = float(match.group(1))
    return number / scale if match.group(2) else number


def _max_abs_err(module, session, feeds, user_tolerance) -> float:
    from .validate import validate

    comparison, _ = validate(module, session, None, samples=[feeds], user_tolerance=user_tolerance)
    return float(comparison.max_abs_err)


RANDOM_FEEDS_STOPPED = ("the gate's seeded random inputs took a path the build does not run ({error}): give real "
                        "inputs (--validation-inputs FILE.npz, a job's validation inputs), which the gate then times")


def _user_feeds(module, validation_inputs: Any) -> Optional[dict]:
    """The first of the user's samples (.npz paths or bytes, as compile() takes them), checked against the build's
    inputs (any size along each axis of a ranged build: it refuses one out of range itself); None without any."""
    from ..files.npz import load_validation_inputs

    if not validation_inputs:
        return None
    ranged = bool((getattr(module, "metadata", {}) or {}).get("dynamic_shapes"))
    wanted = {t["name"]: ((None,) * len(t["shape"]) if ranged else tuple(t["shape"]), t["dtype"]) for t in module.inputs}
    sources = validation_inputs if isinstance(validation_inputs, (list, tuple)) else [validation_inputs]
    return dict(load_validation_inputs(list(sources), wanted)[0])


def compare_with_baseline(candidate: "str | Path", baseline: "str | Path", model: "str | Path | bytes", *,
                          policy: GatePolicy, input_shapes: Optional[Mapping[str, tuple[int, ...]]] = None,
                          threads: Optional[int] = None, rounds: int = 15, baseline_label: str = "the baseline",
                          validation_inputs: Any = None) -> dict[str, Any]:
    """The report's `baseline` section: both builds' latencies (interleaved rounds, same feeds and threads), their
    ratio, both largest errors against the reference (ONNX Runtime; exact for int8) on the same inputs (the user's
    first validation sample, else seeded random ones), and the verdict with its reason. Random inputs that take a
    path the build does not run (an If branch refused at the compiled shapes) are a ValidationInputError saying so."""
    import os

    from ..codegen.control_flow import CONTROL_ERROR
    from ..errors import ValidationInputError
    from ..frontend import import_onnx
    from ..frontend.converters.control_flow_runtime import max_trip_count
    from ..runtime import load
    from ..runtime.loader import KilnRuntimeError
    from .reference import reference_session
    from .validate import index_bounds, random_inputs

    data = model if isinstance(model, bytes) else Path(model).read_bytes()
    nthreads = threads or os.cpu_count() or 1
    session = reference_session(data, nthreads)
    with load(candidate) as new, load(baseline) as old:
        if [t["name"] for t in new.inputs] != [t["name"] for t in old.inputs]:
            raise GatePolicyError("the baseline artifact takes other inputs than the new build: "
                                  "it is not a build of the same model")
        feeds = _user_feeds(new, validation_inputs)
        if feeds is None:
            options = ((getattr(new, "metadata", {}) or {}).get("manifest") or {}).get("options") or {}
            with max_trip_count(options.get("max_trip_count")):  # a loop's declared bound, as the build had it
                graph = import_onnx(data, input_shapes=input_shapes)
            feeds = random_inputs(graph, 0, index_bounds(graph))
            try:  # before the reference, which refuses such a path less clearly (or runs it)
                new.run(feeds)
            except KilnRuntimeError as err:
                if err.rc != CONTROL_ERROR:
                    raise
                raise ValidationInputError(RANDOM_FEEDS_STOPPED.format(error=err)) from None
        new.set_num_threads(nthreads)
        old.set_num_threads(nthreads)
        errors = (_max_abs_err(new, session, feeds, None), _max_abs_err(old, session, feeds, None))
        new_ms, old_ms = interleaved_rounds(lambda: new.run(feeds), lambda: old.run(feeds), rounds=rounds)
    return verdict(new_ms, old_ms, errors, policy, baseline_label)


def verdict(new_ms, old_ms, errors: tuple[float, float], policy: GatePolicy,
            baseline_label: str = "the baseline") -> dict[str, Any]:
    """Pass or fail from the rounds and errors: slower than (1 + max_slowdown) x the baseline's median, or an error
    above max_error_growth x the baseline's (ERROR_FLOOR at least), fails."""
    import statistics

    new_med, old_med = statistics.median(new_ms), statistics.median(old_ms)
    ratio = new_med / old_med if old_med else float("inf")
    new_err, old_err = errors
    growth = max(new_err, ERROR_FLOOR) / max(old_err, ERROR_FLOOR)
    reasons = []
    if ratio > 1 + policy.max_slowdown:
        reasons.append(f"{ratio - 1:.0%} slower than {baseline_label} ({significant(new_med)} ms vs "
                       f"{significant(old_med)} ms, median of {len(new_ms)} interleaved rounds; allowed "
                       f"{policy.max_slowdown:.0%})")
    if growth > policy.max_error_growth:
        reasons.append(f"max abs error {new_err:.3g} is {growth:.3g}x that of {baseline_label} ({old_err:.3g}) (allowed "
                       f"{policy.max_error_growth:g}x)")
    passed = not reasons
    message = ("gate passed: " + f"{ratio:.2f}x the latency of {baseline_label}, {growth:.3g}x its error"
               if passed else "gate failed: " + "; ".join(reasons))
    busy = max(spread(new_ms), spread(old_ms)) > BUSY_SPREAD
    return {"baseline": baseline_label, "candidate_ms": significant(new_med),
            "baseline_ms": significant(old_med), "ratio": round(ratio, 3),
            "candidate_quartiles": [significant(v) for v in quartiles(new_ms)],
            "baseline_quartiles": [significant(v) for v in quartiles(old_ms)], "rounds": len(new_ms),
            "candidate_max_abs_err": new_err, "baseline_max_abs_err": old_err, "error_growth": round(growth, 3),
            **policy.as_dict(), "passed": passed, "verdict": "pass" if passed else "fail", "message": message,
            "busy": busy}
