"""Validation against a reference runtime: seeded random inputs, both runs, per-output errors.

The reference is chosen by core/driver/reference.py (ONNX Runtime; exact for quantized models); each output is judged
under core/driver/tolerance.py's policy. The user's own inputs are read by core/files/npz.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from ..errors import ValidationInputError
from ..graph.ir import Graph
from .tolerance import OutputOrigin, Tolerance, tolerance_for

def random_inputs(graph: Graph, seed: int = 0, index_bounds: Optional[Mapping[str, int]] = None) -> dict[str, np.ndarray]:
    """Normal floats; integers in [0, bound) where bound keeps Gather indices in range; random bools."""
    rng = np.random.default_rng(seed)
    bounds = dict(index_bounds or {})
    feeds = {}
    for name in graph.inputs:
        t = graph.type_of(name)
        if t.dtype == "bool":
            feeds[name] = np.asarray(rng.random(t.shape) < 0.5)  # a 0-d comparison gives a numpy scalar
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
class ShapeMismatch:
    """An output whose shape differs from the reference's: no element errors then, but both shapes, the node that
    produced it, and the shape ONNX's reference evaluator (the spec) gives, when it could run."""

    kiln: tuple[int, ...]
    reference: tuple[int, ...]
    spec: Optional[tuple[int, ...]] = None
    node: str = ""  # "Slice node 'slice_1'": the ONNX node that produces the output

    def follows_spec(self) -> str:
        """Which side has the spec's shape: "kiln", "reference", "both", "neither" or "unknown"."""
        if self.spec is None:
            return "unknown"
        sides = [side for side, shape in (("kiln", self.kiln), ("reference", self.reference)) if shape == self.spec]
        return {0: "neither", 2: "both"}.get(len(sides), sides[0] if sides else "neither")

    def as_report(self) -> dict:
        return {"kiln": list(self.kiln), "reference": list(self.reference),
                "spec": None if self.spec is None else list(self.spec), "node": self.node,
                "follows_spec": self.follows_spec()}

    def describe(self, name: str, against: str) -> str:
        where = f" (made by {self.node})" if self.node else ""
        text = f"output {name!r}{where} has shape {list(self.kiln)} in Kiln but {list(self.reference)} in {against}"
        verdict = {"kiln": f"Kiln follows the spec, {against} does not",
                   "reference": f"{against} follows the spec, Kiln does not",
                   "neither": "neither follows it"}.get(self.follows_spec())
        return text + (f"; ONNX's reference evaluator (the spec) gives {list(self.spec)}: {verdict}" if verdict else "")


@dataclass(frozen=True)
class OutputComparison:
    """One output against its reference, over every sample."""

    name: str
    dtype: str
    max_abs_err: float
    max_rel_err: float
    cosine: Optional[float]
    mismatches: int  # elements beyond tolerance
    size: int
    passed: bool
    tolerance: Tolerance
    top1: Optional[float] = None  # classifier-like outputs: share of rows whose argmax agrees
    top5: Optional[float] = None  # share of rows whose reference argmax is among Kiln's five largest
    shape_mismatch: Optional[ShapeMismatch] = None  # then the errors are infinite: no element compares

    def as_report(self) -> dict:
        out = {"name": self.name, "dtype": self.dtype, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
               "cosine": self.cosine, "mismatches": self.mismatches, "elements": self.size, "passed": self.passed,
               "tolerance": self.tolerance.as_report(), "rule": self.tolerance.describe()}
        if self.top1 is not None:
            out.update(top1=self.top1, top5=self.top5)
        if self.shape_mismatch is not None:
            out["shape_mismatch"] = self.shape_mismatch.as_report()
        return out


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    ok: bool
    worst_output: str
    outputs: tuple[OutputComparison, ...] = field(default=())
    reference: str = "onnxruntime"

    def as_report(self) -> dict:
        return {"max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "reference": self.reference,
                "passed": self.ok, "outputs": [o.as_report() for o in self.outputs]}

    def message(self) -> str:
        """The mismatch in one line: the worst failing output, its errors and its rule."""
        failing = [o for o in self.outputs if not o.passed] or list(self.outputs)
        worst = next((o for o in failing if o.name == self.worst_output), failing[0]) if failing else None
        if worst is None:
            return "compiled model does not match the reference"
        against = "ONNX Runtime" if self.reference == "onnxruntime" else self.reference
        if worst.shape_mismatch is not None:
            return f"compiled model does not match {against}: {worst.shape_mismatch.describe(worst.name, against)}"
        return (f"compiled model does not match {against}: output {worst.name!r} max abs error {worst.max_abs_err:.3g}, "
                f"max rel error {worst.max_rel_err:.3g}, {worst.mismatches} of {worst.size} elements out of tolerance "
                f"({worst.tolerance.describe()})")


def compare_output(name: str, got: np.ndarray, ref: np.ndarray, tol: Tolerance) -> OutputComparison:
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return OutputComparison(name, str(ref.dtype), float("inf"), float("inf"), None, int(ref.size), int(ref.size),
                                False, tol, shape_mismatch=ShapeMismatch(tuple(got.shape), tuple(ref.shape)))
    g, r = got.astype(np.float64), ref.astype(np.float64)
    nan_match = np.isnan(g) == np.isnan(r)
    diff = np.where(np.isnan(r) | np.isnan(g), 0.0, np.abs(g - r))
    diff = np.where(np.isinf(r) & (g == r), 0.0, diff)
    finite = np.abs(np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0))
    scale = float(np.max(finite, initial=0.0))
    abs_err = float(np.max(diff, initial=0.0))
    if ref.dtype.kind in "biu":
        rel_err = abs_err / max(1.0, scale)
    else:
        rel_err = float(np.max(diff / np.maximum(finite, 1e-6), initial=0.0)) if r.size else 0.0
    if tol.mismatch_fraction is not None:
        bad = int(np.count_nonzero(got != ref))
        passed = bad <= tol.mismatch_fraction * ref.size
    else:
        bad = int(np.count_nonzero(~nan_match | (diff > tol.atol + tol.rtol * finite + tol.scale * scale)))
        passed = bad <= (tol.outlier_fraction or 0.0) * ref.size
    top1 = top5 = None
    if ref.dtype.kind == "f" and ref.ndim == 2 and ref.shape[1] >= 2 and ref.shape[0] >= 1:
        ref_top = np.argmax(np.nan_to_num(r), axis=1)
        top1 = float(np.mean(np.argmax(np.nan_to_num(g), axis=1) == ref_top))
        k = min(5, ref.shape[1])
        got_top5 = np.argsort(-np.nan_to_num(g), axis=1, kind="stable")[:, :k]
        top5 = float(np.mean([ref_top[i] in got_top5[i] for i in range(ref.shape[0])]))
    return OutputComparison(name, str(ref.dtype), abs_err, rel_err, _cosine(g, r), bad, int(ref.size), passed, tol,
                            top1, top5)


def _cosine(g: np.ndarray, r: np.ndarray) -> Optional[float]:
    g, r = np.nan_to_num(g.ravel(), posinf=0.0, neginf=0.0), np.nan_to_num(r.ravel(), posinf=0.0, neginf=0.0)
    norm = float(np.linalg.norm(g) * np.linalg.norm(r))
    if norm == 0.0:
        return 1.0 if not g.any() and not r.any() else 0.0
    return float(np.dot(g, r) / norm)


def explain_shape_mismatches(outputs: Sequence[OutputComparison], session, feeds: Mapping[str, np.ndarray]
                             ) -> list[OutputComparison]:
    """Outputs whose shapes differ, completed with their producing node and the spec's shape (ONNX's reference
    evaluator on the same feeds, when it can run the reference's model); the others as they are."""
    if all(o.shape_mismatch is None for o in outputs):
        return list(outputs)
    import dataclasses

    import onnx

    model_bytes = getattr(session, "_model_bytes", None)
    model_path = getattr(session, "_model_path", None)
    try:
        proto = with_external_data(onnx.load_from_string(model_bytes), model_bytes) if model_bytes \
            else onnx.load(model_path)
    except Exception:  # noqa: BLE001 - the explanation is a courtesy: the mismatch stands without it
        return list(outputs)
    producers = {out: f"{n.op_type} node {n.name!r}" if n.name else f"{n.op_type} node of output {out!r}"
                 for n in proto.graph.node for out in n.output}
    wanted = [o.name for o in outputs if o.shape_mismatch is not None]
    spec: dict[str, tuple] = {}
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(proto)  # onnx.load read any external data already
        spec = {n: tuple(np.shape(v)) for n, v in zip(wanted, evaluator.run(wanted, dict(feeds)))}
    except Exception:  # noqa: BLE001 - the spec's shape stays unknown (an op the evaluator lacks, a sequence output)
        pass
    return [o if o.shape_mismatch is None else dataclasses.replace(o, shape_mismatch=dataclasses.replace(
        o.shape_mismatch, spec=spec.get(o.name), node=producers.get(o.name, ""))) for o in outputs]


def _merge(parts: Sequence[OutputComparison]) -> OutputComparison:
    """One output over several samples: worst errors, lowest cosine, mean agreement."""
    first = parts[0]
    cosines = [p.cosine for p in parts if p.cosine is not None]
    tops = [p for p in parts if p.top1 is not None]
    return OutputComparison(
        first.name, first.dtype, max(p.max_abs_err for p in parts), max(p.max_rel_err for p in parts),
        min(cosines) if cosines else None, sum(p.mismatches for p in parts), sum(p.size for p in parts),
        all(p.passed for p in parts), first.tolerance,
        float(np.mean([p.top1 for p in tops])) if tops else None, float(np.mean([p.top5 for p in tops])) if tops else None,
        next((p.shape_mismatch for p in parts if p.shape_mismatch is not None), None))


def compare(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
            tolerances: Optional[Mapping[str, Tolerance]] = None) -> Comparison:
    """Every expected output against the actual one, each under its tolerance (default: the dtype's policy)."""
    return _combine([[compare_output(name, actual[name], ref, (tolerances or {}).get(name) or tolerance_for(np.asarray(ref).dtype))
                      for name, ref in expected.items()]])


def _combine(per_sample: Sequence[Sequence[OutputComparison]], reference: str = "onnxruntime") -> Comparison:
    outputs = [_merge(parts) for parts in zip(*per_sample)]
    if not outputs:
        return Comparison(0.0, 0.0, True, "", ())
    worst = max(outputs, key=lambda o: (not o.passed, o.max_abs_err))
    return Comparison(max(o.max_abs_err for o in outputs), max(o.max_rel_err for o in outputs),
                      all(o.passed for o in outputs), worst.name, tuple(outputs), reference)


def policy(expected: Mapping[str, np.ndarray], origins: Mapping[str, OutputOrigin],
           user: Optional[tuple[float, float]] = None) -> dict[str, Tolerance]:
    return {name: tolerance_for(np.asarray(ref).dtype, origins.get(name, OutputOrigin()), user)
            for name, ref in expected.items()}


def onnxruntime_session(model_bytes: bytes, threads: int, optimization=None):
    """An ONNX Runtime CPU session with `threads` intra-op threads (the baseline, and the reference of float
    models: core/driver/reference.py); `optimization` a GraphOptimizationLevel (default: ORT's own, all)."""
    import re

    import onnxruntime as ort

    opts = ort.SessionOptions()
    if optimization is not None:
        opts.graph_optimization_level = optimization
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    folder = getattr(model_bytes, "folder", None)  # core.frontend.model_loading.SerializedModel
    if folder is not None:  # external data files resolve beside the model file, not in the working directory
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
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


class ReferenceEvaluatorSession:
    """ONNX's reference evaluator behind the part of ORT's session interface validation uses, for models ONNX
    Runtime has no kernel for (bfloat16 arithmetic): slow, exact to the spec, a reference all the same."""

    reference_name = "onnx.reference"

    def __init__(self, model_bytes: bytes, new_ops=None):
        import onnx
        from onnx.reference import ReferenceEvaluator

        self._model_bytes = model_bytes  # as ORT's session keeps it (explain_shape_mismatches reads it)
        self._evaluator = ReferenceEvaluator(with_external_data(onnx.load_from_string(model_bytes), model_bytes),
                                             new_ops=new_ops)

    def get_outputs(self) -> list:
        from types import SimpleNamespace

        return [SimpleNamespace(name=n) for n in self._evaluator.output_names]

    def run(self, names, feeds):
        return self._evaluator.run(list(names), dict(feeds))


def with_external_data(proto, model_bytes: bytes):
    """`proto` with the weights of its external data files read in, from the folder its serialized form names."""
    folder = getattr(model_bytes, "folder", None)  # core.frontend.model_loading.SerializedModel
    if folder is not None:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(proto, str(folder))
    return proto


def session_outputs(session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX Runtime's outputs named as the compiled model's: a sequence `y` as `y::0`, `y::1`, ...
    (core.frontend.structured_values), an empty optional as nothing."""
    from ..frontend.structured_values import flatten_reference

    names = [o.name for o in session.get_outputs()]
    try:
        results = session.run(names, feeds)
    except Exception as err:  # e.g. a random value taking an If branch that does not fit the shapes
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValidationInputError(f"the reference ({getattr(session, 'reference_name', 'onnxruntime')}) cannot run "
                                   f"the model on these validation inputs: {message[:400]}; validate on real inputs "
                                   f"(--validation-inputs FILE.npz) or not at all (--validate off)") from None
    return flatten_reference(dict(zip(names, results)))


def validate(module, session, graph: Graph, seed: int = 0, *, samples: Optional[Sequence[Mapping[str, np.ndarray]]] = None,
             origins: Optional[Mapping[str, OutputOrigin]] = None, user_tolerance: Optional[tuple[float, float]] = None
             ) -> tuple[Comparison, dict[str, np.ndarray]]:
    """Run both on the same inputs (the user's samples, else seeded random); the comparison under the tolerance
    policy, and the inputs of the worst sample (for a bisect). Raises nothing: the caller's mode decides."""
    samples = list(samples) if samples else [random_inputs(graph, seed, index_bounds(graph))]
    per_sample, worst = [], (None, samples[0])
    for feeds in samples:
        expected = session_outputs(session, feeds)
        actual = module.run(feeds)
        tolerances = policy(expected, origins or {}, user_tolerance)
        outputs = [compare_output(name, actual[name], ref, tolerances[name]) for name, ref in expected.items()]
        outputs = explain_shape_mismatches(outputs, session, feeds)
        per_sample.append(outputs)
        badness = (sum(not o.passed for o in outputs), max((o.max_abs_err for o in outputs), default=0.0))
        if worst[0] is None or badness > worst[0]:
            worst = (badness, feeds)
    return _combine(per_sample, getattr(session, "reference_name", "onnxruntime")), worst[1]
