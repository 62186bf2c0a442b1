"""The validation tolerance policy: how far each output may be from the reference, by dtype, scale and producer.

| output | passes when | why |
|---|---|---|
| float32/float64 | |d| <= 1e-4 + 1e-4*|ref| + 1e-5*max|ref| | fp32 reassociation; the last term keeps cancellations in huge outputs from failing |
| float16 | |d| <= 8 eps * (1 + |ref| + max|ref|), eps = 2^-10 | Kiln accumulates in float32 where a runtime may round after every op |
| bfloat16 | the same with eps = 2^-7 | as float16 |
| float32 of a model compiled at precision fp16/bf16 | that format's rule | its weights are rounded to that format |
| float from DequantizeLinear | the float rule plus 1 quantization step (its scale) | a rounding tie in an integer kernel moves one step |
| int8/uint8 from QuantizeLinear | |d| <= 1 (one step) | the same, before dequantization |
| ArgMax/ArgMin/TopK indices | at most 1% of elements differ | near-ties between scores pick another index |
| any output of a quantized model (QDQ, QLinear*, ...Integer ops) | its rule above on >= 99.9% of its elements | a tie rounded the other way moves a value one step, and later layers carry (and may amplify) it |
| other integers, bool | exact | |

A user tolerance (`--tolerance ATOL[,RTOL]`) replaces the float rules with |d| <= ATOL + RTOL*|ref| (RTOL defaults
to ATOL); integer and boolean outputs stay exact.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional

import numpy as np

from ..errors import ValidationInputError

FLOAT32_ATOL = FLOAT32_RTOL = 1e-4
FLOAT32_SCALE = 1e-5
NARROW_FLOAT_ULPS = 8  # in units of the format's epsilon
NARROW_FLOAT_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
INDEX_MISMATCH_FRACTION = 0.01
INDEX_OPS = {"ArgMax": (0,), "ArgMin": (0,), "TopK": (1,)}  # op -> which outputs are indices
QUANTIZED_OUTLIER_FRACTION = 0.001  # the bar for int8: one step on >= 99.9% of output elements
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                           "MatMulInteger", "ConvInteger", "QGemm", "QLinearAdd", "QLinearMul", "QLinearConcat",
                           "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool",
                           "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM"})


@dataclass(frozen=True)
class Tolerance:
    """|got - ref| <= atol + rtol*|ref| + scale*max|ref| elementwise, or, with `mismatch_fraction`, at most that
    share of elements may differ at all (index outputs). With `outlier_fraction`, that share of elements may be
    beyond the elementwise bound (quantized models). `why` says which rule chose it, for the report."""

    atol: float
    rtol: float
    scale: float = 0.0
    mismatch_fraction: Optional[float] = None
    why: str = ""
    outlier_fraction: Optional[float] = None

    def as_report(self) -> dict:
        out = {"atol": self.atol, "rtol": self.rtol, "scale": self.scale, "why": self.why}
        if self.mismatch_fraction is not None:
            out["mismatch_fraction"] = self.mismatch_fraction
        if self.outlier_fraction is not None:
            out["outlier_fraction"] = self.outlier_fraction
        return out

    def describe(self) -> str:
        if self.mismatch_fraction is not None:
            return f"at most {self.mismatch_fraction:.0%} of elements differ"
        if self.atol == self.rtol == self.scale == 0:
            return "exact"
        text = f"{self.atol:.3g} + {self.rtol:.3g}*|ref|"
        text += f" + {self.scale:.3g}*max|ref|" if self.scale else ""
        return text + (f" on {1 - self.outlier_fraction:.1%} of elements" if self.outlier_fraction else "")


EXACT = Tolerance(0.0, 0.0, why="integer and boolean outputs must match exactly")


@dataclass(frozen=True)
class OutputOrigin:
    """What produced a model output, as far as the tolerance cares: a quantization step or an index op."""

    step: Optional[float] = None  # the quantization scale of a DequantizeLinear/QuantizeLinear output
    quantized_ints: bool = False  # the integers of QuantizeLinear (step counts in units of 1)
    index_op: str = ""
    narrow: str = ""  # float16/bfloat16 when the output is a Cast of a value computed in that format
    precision: str = ""  # fp16/bf16: a float32 model compiled with its weights at that precision (compile(precision=))
    quantized_model: bool = False  # the model has quantized ops: a few elements may be off by a carried step


def parse_tolerance(text: str) -> tuple[float, float]:
    """`ATOL[,RTOL]` -> (atol, rtol); rtol defaults to atol."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        if not 1 <= len(parts) <= 2:
            raise ValueError
        values = [float(p) for p in parts]
    except ValueError:
        raise ValidationInputError(f"bad tolerance {text!r}: expected ATOL or ATOL,RTOL (e.g. 1e-3 or 1e-3,1e-2)") from None
    if any(not np.isfinite(v) or v < 0 for v in values):
        raise ValidationInputError(f"bad tolerance {text!r}: both numbers must be finite and >= 0")
    return values[0], values[-1]


def tolerance_for(dtype: np.dtype, origin: OutputOrigin = OutputOrigin(),
                  user: Optional[tuple[float, float]] = None) -> Tolerance:
    """The rule for one output of `dtype` (the reference's), made by `origin`, under a user tolerance if given."""
    tol = _elementwise_rule(np.dtype(dtype), origin, user)
    if origin.quantized_model and user is None and tol.mismatch_fraction is None and tol is not EXACT:
        return replace(tol, outlier_fraction=QUANTIZED_OUTLIER_FRACTION,
                       why=f"{tol.why}; quantized model: up to {QUANTIZED_OUTLIER_FRACTION:.1%} of elements may be "
                           f"beyond it (a tie rounded the other way moves a value one step, later layers carry it)")
    return tol


def _elementwise_rule(dtype: np.dtype, origin: OutputOrigin, user: Optional[tuple[float, float]]) -> Tolerance:
    if dtype.kind == "b":
        return EXACT
    if dtype.kind in "iu":
        if origin.index_op:
            return Tolerance(0.0, 0.0, mismatch_fraction=INDEX_MISMATCH_FRACTION,
                             why=f"{origin.index_op} indices: near-ties may pick another index")
        if origin.quantized_ints:
            return Tolerance(1.0, 0.0, why="QuantizeLinear output: one quantization step (rounding ties)")
        return EXACT
    if user is not None:
        return Tolerance(user[0], user[1], why="user tolerance (--tolerance)")
    computed_in = origin.narrow or dtype.name
    eps = NARROW_FLOAT_EPS.get(computed_in)
    if eps is not None:
        u = NARROW_FLOAT_ULPS * eps
        source = (f" (compiled at precision {origin.precision}: {computed_in} weights, against the {dtype.name} reference)"
                  if origin.precision else f" (cast to {dtype.name})" if origin.narrow else "")
        base = Tolerance(u, u, u, why=f"{computed_in}{source}: {NARROW_FLOAT_ULPS} eps (eps={eps:.3g}) absolute, relative "
                                      f"and of the output's scale")
    else:
        base = Tolerance(FLOAT32_ATOL, FLOAT32_RTOL, FLOAT32_SCALE,
                         why=f"{dtype.name}: absolute and relative, plus the output's scale")
    if origin.step:
        return Tolerance(base.atol + origin.step, base.rtol, base.scale,
                         why=f"DequantizeLinear output: one quantization step ({origin.step:.3g}) on top of {base.why}")
    return base


def output_origins(model, names: Optional[Iterable[str]] = None) -> dict[str, OutputOrigin]:
    """The values `names` (default: the graph outputs) of an onnx.ModelProto whose producer matters (Identity
    followed back)."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    constants = _constant_scalars(graph)
    narrow_of = _NarrowFloats(model)
    quantized = any(n.op_type in QUANTIZED_OPS for n in graph.node)
    origins: dict[str, OutputOrigin] = {}
    for wanted in (names if names is not None else [o.name for o in graph.output]):
        name = wanted
        node = producer.get(name)
        while node is not None and node.op_type == "Identity":
            name = node.input[0]
            node = producer.get(name)
        if node is None:
            continue
        if node.op_type in ("DequantizeLinear", "QuantizeLinear") and len(node.input) > 1:
            step = constants.get(node.input[1])
            if step:
                origins[wanted] = OutputOrigin(step=step, quantized_ints=node.op_type == "QuantizeLinear")
        elif node.op_type in INDEX_OPS and list(node.output).index(name) in INDEX_OPS[node.op_type]:
            origins[wanted] = OutputOrigin(index_op=node.op_type)
        elif node.op_type == "Cast":
            narrow = narrow_of(node.input[0])
            if narrow:
                origins[wanted] = OutputOrigin(narrow=narrow)
        if quantized:
            origins[wanted] = replace(origins.get(wanted, OutputOrigin()), quantized_model=True)
    return origins


class _NarrowFloats:
    """float16 or bfloat16 when a value (a Cast's input) has that type, by ONNX shape inference run once; else ""."""

    def __init__(self, model):
        self.model, self.types = model, None

    def __call__(self, value: str) -> str:
        import onnx

        if self.types is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model).graph
            except Exception:  # noqa: BLE001 - a refinement only: without it the value's own dtype rules
                inferred = onnx.GraphProto()
            self.types = {i.name: i.type.tensor_type.elem_type for i in (*inferred.value_info, *inferred.input)}
        elem = self.types.get(value)
        return {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}.get(elem, "")


def _constant_scalars(graph) -> dict[str, float]:
    """The largest magnitude of each initializer or Constant small enough to be a quantization scale."""
    from onnx import numpy_helper

    found: dict[str, float] = {}
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    for name, tensor in tensors:
        if np.prod(tensor.dims, dtype=np.int64) <= 4096:
            value = numpy_helper.to_array(tensor)
            if value.dtype.kind == "f" and value.size:
                found[name] = float(np.max(np.abs(value.astype(np.float64))))
    return found


def origins_or_empty(model_bytes: bytes) -> Mapping[str, OutputOrigin]:
    """output_origins of serialized model bytes, without loading external data."""
    import onnx

    try:
        return output_origins(onnx.load_from_string(model_bytes))
    except Exception:  # noqa: BLE001 - a model the importer accepted; its origins are a refinement only
        return {}
