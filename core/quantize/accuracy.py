"""The accuracy cost of a quantized model: its outputs against the float32 model's on held-back samples.

The QDQ model is evaluated by ONNX Runtime with graph optimizations off: its Q/DQ pairs then run as the float ops the
ONNX spec defines them by, which Kiln's integer kernels compute exactly; fused, ORT would run its own int8 kernels,
which saturate 16-bit pair sums on x86 hosts without VNNI (core/driver/reference.py). The final figure is measured on
Kiln's own compiled artifact (core/driver/quantize_stage.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np
import onnxruntime as ort


def session(model: "bytes | str", threads: int = 0, fuse: bool = True) -> ort.InferenceSession:
    """`fuse` False: no graph optimizations (a QDQ model's Q/DQ pairs stay as written)."""
    opts = ort.SessionOptions()
    if not fuse:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def run_all(sess: ort.InferenceSession, samples: Sequence[dict]) -> dict[str, list[np.ndarray]]:
    """Every output of `sess` on every sample, by output name."""
    names = [o.name for o in sess.get_outputs()]
    outs: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for feeds in samples:
        for name, value in zip(names, sess.run(names, feeds)):
            outs[name].append(np.asarray(value))
    return outs


def looks_like_scores(value: np.ndarray) -> bool:
    """Class scores (logits or probabilities): floats with a last axis of at least two classes."""
    return value.dtype.kind == "f" and value.ndim >= 2 and value.shape[-1] >= 2


@dataclass(frozen=True)
class OutputError:
    """One output of the quantized model against the float32 model, over the held-back samples."""

    name: str
    max_abs_err: float
    mean_abs_err: float
    rel_err: float  # ||q - f|| / ||f|| over every element of every sample (0: identical)
    top1_agreement: Optional[float]  # share of argmaxes over the last axis that agree, for class scores
    top1_positions: Optional[int]  # how many argmaxes were compared (samples x positions)


def compare(reference: dict[str, list[np.ndarray]], quantized: dict[str, list[np.ndarray]]) -> list[OutputError]:
    results = []
    for name, refs in reference.items():
        f = np.concatenate([np.asarray(r, np.float64).ravel() for r in refs])
        q = np.concatenate([np.asarray(v, np.float64).ravel() for v in quantized[name]])
        diff = np.abs(q - f)
        norm = float(np.linalg.norm(f))
        rel = float(np.linalg.norm(q - f) / norm) if norm > 0 else float(np.linalg.norm(q - f) > 0)
        top1 = positions = None
        if all(looks_like_scores(r) for r in refs):
            agree = [np.argmax(r, axis=-1) == np.argmax(v, axis=-1) for r, v in zip(refs, quantized[name])]
            positions = int(sum(a.size for a in agree))
            top1 = float(sum(int(a.sum()) for a in agree) / positions)
        results.append(OutputError(name, float(diff.max(initial=0.0)), float(diff.mean()) if diff.size else 0.0,
                                   rel, top1, positions))
    return results


def worst_rel_err(errors: Sequence[OutputError]) -> float:
    """The error budget's measure: the largest relative error over the outputs."""
    return max((e.rel_err for e in errors), default=0.0)


def as_dicts(errors: Sequence[OutputError]) -> list[dict]:
    return [asdict(e) for e in errors]
