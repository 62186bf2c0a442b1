"""Quantize a float32 ONNX model to QDQ int8 with ONNX Runtime's quantize_static, and measure what it costs.

Calibration runs once (ORT's calibration cache, where this ONNX Runtime has it); every later quantization of
the same model (per-layer sensitivity, the fallback of sensitive layers to float32) reuses those ranges, so it
costs a quantization and an evaluation, not a calibration.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import logging
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import onnx
from onnx import version_converter
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

from ..frontend.model_loading import load_model
from . import accuracy
from .calibration import SampleReader, load_calibration, split_samples
from .errors import AlreadyQuantizedError, QuantizeOptionsError
from .options import QuantizeOptions

METHODS = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
           "entropy": CalibrationMethod.Entropy}  # by QuantizeOptions.method (options.METHOD_NAMES)
SENSITIVITY_OPS = ("Conv", "MatMul", "Gemm")  # the layers whose sensitivity is measured and that can fall back
_QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QGemm", "QAttention",
                  "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QOrderedMatMul"}
ProgressFn = Callable[[float, str], None]  # (fraction of the quantize job done, what it does now)


@dataclass
class QuantizeResult:
    model: bytes  # the QDQ model
    report: dict = field(default_factory=dict)  # the report's "quantization" section
    held_back: list = field(default_factory=list)  # the samples the accuracy is measured on (never calibrated on)
    reference: dict = field(default_factory=dict)  # the float32 model's outputs on them, by output name


def is_quantized_op(op_type: str) -> bool:
    """An op that means a model is quantized already (QDQ, QOperator, integer ops)."""
    return op_type in _QUANTIZED_OPS or op_type.startswith("QLinear") or op_type.endswith("Integer")


def quantized_ops(model: onnx.ModelProto) -> list[str]:
    return sorted({n.op_type for n in model.graph.node if is_quantized_op(n.op_type)})


def node_names(model: onnx.ModelProto) -> list[str]:
    """Every node's name as --keep-float and the report know it: its own, or `<op>_<index>` where it has none."""
    taken = {n.name for n in model.graph.node if n.name}
    names = []
    for index, node in enumerate(model.graph.node):
        name = node.name
        if not name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            taken.add(name)
        names.append(name)
    return names


def _name_nodes(model: onnx.ModelProto) -> None:
    for node, name in zip(model.graph.node, node_names(model)):
        node.name = name


@contextlib.contextmanager
def _quiet_ort():
    """quantize_static logs advice (pre-processing, opset upgrades) on the root logger for every call, and its
    entropy calibrator prints to stdout (the CLI's output)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


class _Quantizer:
    """One float model, calibrated once; quantize() with any set of float layers, evaluate() on held-back samples."""

    def __init__(self, model: onnx.ModelProto, calibration: list[dict], held_back: list[dict],
                 options: QuantizeOptions, workdir: Path):
        self.options, self.workdir = options, workdir
        original = workdir / "float.onnx"
        onnx.save_model(model, str(original))
        self.reference = accuracy.run_all(accuracy.session(original.read_bytes(), options.threads), held_back)
        self.float_path = _prepared(model, workdir / "prepared.onnx", options.per_channel)
        # ORT releases since mid-2026 keep the calibrated ranges in a file for the next call; older ones recalibrate
        self._cache = ({"calibration_cache_path": str(workdir / "ranges.json")}
                       if "calibration_cache_path" in inspect.signature(quantize_static).parameters else {})
        self.reader = SampleReader(calibration)
        self.held_back = held_back
        self.runs = 0

    def quantize(self, exclude: Sequence[str] = (), only: Optional[Sequence[str]] = None) -> bytes:
        self.runs += 1
        out = self.workdir / f"quantized-{self.runs}.onnx"
        self.reader.rewind()
        with _quiet_ort():
            quantize_static(str(self.float_path), str(out), self.reader, quant_format=QuantFormat.QDQ,
                            per_channel=self.options.per_channel, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude),
                            nodes_to_quantize=list(only) if only is not None else None,
                            op_types_to_quantize=list(self.options.op_types) if self.options.op_types else None,
                            calibrate_method=METHODS[self.options.method], **self._cache)
        data = out.read_bytes()
        out.unlink()
        return data

    def evaluate(self, model: bytes) -> list[accuracy.OutputError]:
        quantized = accuracy.run_all(accuracy.session(model, self.options.threads, fuse=False), self.held_back)
        return accuracy.compare(self.reference, quantized)


def _prepared(model: onnx.ModelProto, path: Path, per_channel: bool) -> Path:
    """ORT's pre-processing (quant_pre_process: constants become initializers, BatchNorm folds into Conv), without
    its symbolic shape inference (it gives up on many exported models' dynamic shapes); opset 13 at least for
    per-channel weights (DequantizeLinear's axis)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if per_channel and opset < 13:
        try:
            model = version_converter.convert_version(model, 13)
        except Exception as err:  # the converter's own errors carry no common type
            raise QuantizeOptionsError(f"per-channel weights need opset 13, and this opset-{opset} model does not "
                                       f"convert to it ({str(err).splitlines()[0][:200]}); quantize per-tensor") from None
    source = path.with_name("source.onnx")
    onnx.save_model(model, str(source))
    with _quiet_ort():
        quant_pre_process(str(source), str(path), skip_symbolic_shape=True)
    return path


def quantize_model(model_path: "str | Path", calibration_path: "str | Path", options: QuantizeOptions = QuantizeOptions(),
                   progress: Optional[ProgressFn] = None) -> QuantizeResult:
    """The QDQ int8 model and the report's "quantization" section: accuracy cost on held-back samples, per-layer
    sensitivity (capped), and the layers that fell back to float32 to meet `options.max_error`."""
    started = time.perf_counter()
    tell = progress or (lambda fraction, detail: None)
    model = load_model(Path(model_path))  # one clear InvalidModelError for a file that is not a usable model
    already = quantized_ops(model)
    if already:
        raise AlreadyQuantizedError(f"the model is already quantized (it has {', '.join(already)}); "
                                    f"quantize its float32 original instead")
    _name_nodes(model)
    ops_of = {n.name: n.op_type for n in model.graph.node}
    _check_keep_float(options.keep_float, ops_of)
    calibration, held_back = split_samples(load_calibration(calibration_path, model))
    keep = list(options.keep_float)
    layers = [n for n, op in ops_of.items()  # quantized, so measured and able to fall back
              if op in SENSITIVITY_OPS and (not options.op_types or op in options.op_types)]
    candidates = [n for n in layers if n not in keep]
    measured = candidates[:options.sensitivity_layers]
    with tempfile.TemporaryDirectory(prefix="kiln-quantize-") as tmp:
        tell(0.0, "calibrating")
        q = _Quantizer(model, calibration, held_back, options, Path(tmp))
        quantized = q.quantize(exclude=keep)
        first_errors = errors = q.evaluate(quantized)
        sensitivity = []
        for number, name in enumerate(measured):
            tell(0.3 + 0.5 * number / len(measured), f"sensitivity {number + 1}/{len(measured)}")
            sensitivity.append({"layer": name, "op": ops_of[name],
                                "rel_err": accuracy.worst_rel_err(q.evaluate(q.quantize(only=[name])))})
        sensitivity.sort(key=lambda entry: -entry["rel_err"])
        fallback, steps = [], []
        for entry in sensitivity if options.max_error is not None else ():
            if accuracy.worst_rel_err(errors) <= options.max_error:
                break
            tell(0.8 + 0.2 * len(fallback) / len(sensitivity), f"fallback {entry['layer']}")
            fallback.append(entry["layer"])
            quantized = q.quantize(exclude=keep + fallback)
            errors = q.evaluate(quantized)
            steps.append({"layer": entry["layer"], "rel_err": accuracy.worst_rel_err(errors)})
    tell(1.0, "quantized")
    worst = accuracy.worst_rel_err(errors)
    if not measured:
        note = "sensitivity not measured (its cap is 0): no layer can fall back"
    elif len(measured) < len(candidates):
        note = (f"sensitivity measured for the first {len(measured)} of {len(candidates)} {'/'.join(SENSITIVITY_OPS)} "
                f"layers (the cap); only those can fall back")
    else:
        note = ""
    report = {
        "method": options.method, "per_channel": options.per_channel, "format": "QDQ",
        "op_types": list(options.op_types) or "all", "activation_type": "int8", "weight_type": "int8",
        "calibration": {"samples": len(calibration), "held_back": len(held_back)},
        "layers": {"quantizable": len(layers), "quantized": len(layers) - len(set(keep + fallback) & set(layers)),
                   "ops": dict(sorted(Counter(n.op_type for n in onnx.load_from_string(quantized).graph.node
                                              if n.op_type in ("QuantizeLinear", "DequantizeLinear")).items()))},
        "keep_float": keep, "fallback": fallback, "float_layers": keep + fallback,
        "accuracy": {"outputs": accuracy.as_dicts(errors), "rel_err": worst,
                     "before_fallback": accuracy.as_dicts(first_errors) if fallback else None},
        "sensitivity": {"layers": sensitivity, "measured": len(measured), "candidates": len(candidates), "note": note},
        "max_error": options.max_error, "fallback_steps": steps,
        "budget_met": None if options.max_error is None else worst <= options.max_error,
        "time_s": round(time.perf_counter() - started, 3),
    }
    return QuantizeResult(model=quantized, report=report, held_back=held_back, reference=q.reference)


def _check_keep_float(names: Sequence[str], ops_of: dict[str, str]) -> None:
    unknown = [name for name in names if name not in ops_of]
    if unknown:
        layers = [n for n, op in ops_of.items() if op in SENSITIVITY_OPS]
        raise QuantizeOptionsError(f"--keep-float names no node of the model: {', '.join(map(repr, unknown))} "
                                   f"(its {'/'.join(SENSITIVITY_OPS)} layers: {', '.join(layers[:8]) or 'none'}"
                                   f"{', ...' if len(layers) > 8 else ''})")
