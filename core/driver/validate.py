"""Validation against ONNX Runtime: seeded random inputs, both runtimes, max abs/rel error.

ONNX Runtime is the reference for every compiled model; a mismatch beyond tolerance is an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ..errors import ValidationError
from ..graph.ir import Graph

ATOL = 1e-4
RTOL = 1e-4


def random_inputs(graph: Graph, seed: int = 0, index_bounds: Optional[Mapping[str, int]] = None) -> dict[str, np.ndarray]:
    """Normal floats; integers in [0, bound) where bound keeps Gather indices in range; random bools."""
    rng = np.random.default_rng(seed)
    bounds = dict(index_bounds or {})
    feeds = {}
    for name in graph.inputs:
        t = graph.type_of(name)
        if t.dtype == "bool":
            feeds[name] = rng.random(t.shape) < 0.5
        elif np.issubdtype(np.dtype(t.dtype), np.integer):
            feeds[name] = rng.integers(0, bounds.get(name, 2), size=t.shape).astype(t.dtype)
        else:
            feeds[name] = rng.standard_normal(t.shape).astype(t.dtype)
    return feeds


def index_bounds(graph: Graph) -> dict[str, int]:
    """For integer inputs used directly as Gather indices: the size of the gathered axis."""
    bounds: dict[str, int] = {}
    for node, owner in graph.walk():  # fused groups included
        if node.op == "Gather" and node.inputs[1] in graph.inputs:
            dim = owner.type_of(node.inputs[0]).shape[node.attr("axis", 0)]
            name = node.inputs[1]
            bounds[name] = min(bounds.get(name, dim), dim)
    return bounds


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    ok: bool
    worst_output: str

    def as_report(self) -> dict:
        return {"max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "reference": "onnxruntime",
                "atol": ATOL, "rtol": RTOL, "passed": self.ok}


def compare(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> Comparison:
    max_abs = max_rel = 0.0
    ok, worst = True, ""
    for name, ref in expected.items():
        got = actual[name]
        if got.shape != ref.shape:
            return Comparison(float("inf"), float("inf"), False, name)
        if ref.dtype.kind in "biu":
            bad = int(np.count_nonzero(got != ref))
            abs_err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)), initial=0.0))
            rel_err = abs_err / max(1.0, float(np.max(np.abs(ref), initial=0)))
            passed = bad == 0
        else:
            g, r = got.astype(np.float64), ref.astype(np.float64)
            nan_match = np.isnan(g) == np.isnan(r)
            diff = np.where(np.isnan(r), 0.0, np.abs(g - r))
            abs_err = float(np.max(diff, initial=0.0))
            rel_err = float(np.max(diff / np.maximum(np.abs(r), 1e-6), initial=0.0)) if r.size else 0.0
            passed = bool(np.all(nan_match)) and bool(np.all(diff <= ATOL + RTOL * np.abs(np.nan_to_num(r))))
        if abs_err >= max_abs:
            worst = name
        max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
        ok = ok and passed
    return Comparison(max_abs, max_rel, ok, worst)


def onnxruntime_session(model_bytes: bytes, threads: int):
    """An ONNX Runtime CPU session with `threads` intra-op threads (the reference and the baseline)."""
    import re

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnx may write a newer IR version than this ONNX Runtime reads
        found = re.search(r"max supported IR version: (\d+)", str(err))
        if not found:
            raise
        import onnx

        proto = onnx.load_from_string(model_bytes)
        proto.ir_version = int(found.group(1))
        return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _flat_reference(session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX Runtime's outputs named as the compiled model's: a sequence `y` as `y::0`, `y::1`, ...
    (core.frontend.structured_values), an empty optional as nothing."""
    from ..frontend.structured_values import flatten_reference

    names = [o.name for o in session.get_outputs()]
    return flatten_reference(dict(zip(names, session.run(names, feeds))))


def validate(module, session, graph: Graph, seed: int = 0) -> Comparison:
    """Run both on the same seeded inputs; raise ValidationError on a mismatch beyond tolerance."""
    feeds = random_inputs(graph, seed, index_bounds(graph))
    expected = _flat_reference(session, feeds)
    actual = module.run(feeds)
    result = compare(actual, expected)
    if not result.ok:
        raise ValidationError(f"compiled model does not match ONNX Runtime: output {result.worst_output!r} "
                              f"max abs error {result.max_abs_err:.3g}, max rel error {result.max_rel_err:.3g} "
                              f"(tolerance {ATOL:g} + {RTOL:g}*|ref|)")
    return result
