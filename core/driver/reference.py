"""The validation reference: ONNX Runtime for float graphs; for quantized graphs an exact evaluation on every host.

ONNX Runtime's integer kernels are not exact everywhere: on x86 hosts without VNNI, MLAS's u8 x s8 path
(`vpmaddubsw`) saturates 16-bit pair sums, tens of quantization steps off the ONNX definition. So a quantized
model is checked against ONNX Runtime running a rewritten copy of it, with graph optimizations off (no QDQ
fusion into those kernels): every integer product op (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul,
com.microsoft QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul) becomes float arithmetic on integer values
that is exact by construction (see `_exact_conv` and `_exact_matmul`), requantized as the ONNX reference does;
QDQ patterns run as the float ops the ONNX spec defines them by. What ONNX Runtime itself gives on this host
is compared with that reference as well, and reported (`onnxruntime_on_host`), never failing the compile.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional

import numpy as np

from .tolerance import OutputOrigin
from .validate import ReferenceEvaluatorSession, onnxruntime_session, session_outputs, validate, with_external_data

if TYPE_CHECKING:
    import onnx

EXACT_REFERENCE = "exact integer reference (ONNX Runtime, integer ops as exact float arithmetic, no fusion)"
FLOAT_EXACT = 1 << 24  # float32 holds every integer below this: sums of integer products stay exact under it
SAT_NOTE = ("ONNX Runtime's int8 kernels differ from the exact result on this host (on x86 without VNNI, MLAS's "
            "u8 x s8 kernels saturate 16-bit pair sums); Kiln is checked against the exact reference")


def is_quantized(model) -> bool:
    """The model (an onnx.ModelProto) has quantized or integer-product ops anywhere, subgraphs included."""
    from .tolerance import QUANTIZED_OPS

    from .reference_ops import EVALUATED

    return any(node.op_type in QUANTIZED_OPS or node.op_type in _REWRITES or node.op_type in EVALUATED
               for node in _all_nodes(model.graph))


def reference_session(model: "bytes | str | Path | onnx.ModelProto", threads: int):
    """The session validation compares against: ONNX Runtime as is for float models, the exact reference for
    quantized ones. Its `reference_name` says which (the report names it)."""
    import onnx

    if isinstance(model, (str, Path)):
        from ..frontend.model_loading import serialized_model

        model = serialized_model(model)  # its external data stays beside it
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else model
    if not is_quantized(proto):
        return onnxruntime_session(model if isinstance(model, bytes) else model.SerializeToString(), threads)
    return ExactSession(exact_model(with_external_data(proto, model)), threads)


def reference_outputs(model: "bytes | str | Path | onnx.ModelProto", feeds: Mapping[str, np.ndarray], threads: int = 1) -> dict:
    """The reference's outputs by name (exact for quantized models): what tests and tools compare a build with."""
    return session_outputs(reference_session(model, threads), dict(feeds))


@dataclass
class Sessions:
    """A compile's two ONNX Runtime roles: `reference` checks the artifact, `baseline` is what its latency is compared
    with (ORT as a user deploys it). `skipped` says why there is no baseline (ORT has no kernel for the model): the
    reference is then ONNX's own evaluator."""

    reference: object
    baseline: object
    skipped: str = ""

    @property
    def exact(self) -> bool:
        """The reference is the exact rewrite (a quantized model), not the baseline itself."""
        return isinstance(self.reference, ExactSession)


def open_sessions(model_bytes: bytes, threads: int) -> Sessions:
    try:
        baseline = onnxruntime_session(model_bytes, threads)
    except Exception as err:  # ORT has no kernel for what Kiln compiled (e.g. bfloat16 Mul): nothing to compare to
        if type(err).__name__ != "NotImplemented":
            raise
        return Sessions(ReferenceEvaluatorSession(model_bytes), None,
                        f"ONNX Runtime cannot run this model: {str(err).splitlines()[0]}")
    import onnx

    model = onnx.load_from_string(model_bytes)
    if not is_quantized(model):
        return Sessions(baseline, baseline)
    return Sessions(ExactSession(exact_model(with_external_data(model, model_bytes)), threads), baseline)


class ExactSession:
    """ONNX Runtime on the exact rewrite, optimizations off, behind the part of a session validation uses; ONNX's
    reference evaluator instead where the model has an op only an exact numpy evaluation expresses
    (core/driver/reference_ops.py: DynamicQuantizeLSTM)."""

    reference_name = EXACT_REFERENCE

    def __init__(self, model, threads: int):
        import onnxruntime as ort

        from .reference_ops import EVALUATED

        self.model = model
        evaluated = {EVALUATED[n.op_type] for n in _all_nodes(model.graph) if n.op_type in EVALUATED}
        if evaluated:
            self._session = ReferenceEvaluatorSession(model.SerializeToString(), new_ops=sorted(evaluated, key=str))
        else:
            self._session = onnxruntime_session(model.SerializeToString(), threads,
                                                optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)

    def get_outputs(self):
        return self._session.get_outputs()

    def run(self, names, feeds):
        return self._session.run(names, feeds)


def exact_model(model):
    """A copy of `model` whose integer product ops are exact float arithmetic (same output names and types)."""
    import onnx

    from onnx import version_converter

    out = onnx.ModelProto()
    out.CopyFrom(model)
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 11:  # Round and Clip's min/max inputs, emitted here, exist since opset 11
        out = version_converter.convert_version(out, 11)
    _rewrite_graph(out.graph, _Names())
    return out


@dataclass
class _Names:
    """Fresh value names (the prefix is Kiln's own: no exported model uses it)."""

    count: int = 0

    def __call__(self, hint: str) -> str:
        self.count += 1
        return f"_kiln_exact{self.count}_{hint}"


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _all_nodes(sub)


def _rewrite_graph(graph, names: _Names) -> None:
    from onnx import numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = numpy_helper.to_array(value)
    new_nodes = []
    for node in graph.node:
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                _rewrite_graph(sub, names)
        rewrite = _REWRITES.get(node.op_type) if node.domain in _DOMAINS.get(node.op_type, ("", "ai.onnx")) else None
        if rewrite is None:
            new_nodes.append(node)
            continue
        builder = _Builder(names, constants, graph)
        rewrite(builder, node)
        new_nodes.extend(builder.nodes)
    del graph.node[:]
    graph.node.extend(new_nodes)


class _Builder:
    """Emits the replacement nodes of one op; constants become initializers of the graph being rewritten."""

    def __init__(self, names: _Names, constants: Mapping[str, np.ndarray], graph):
        self.names, self.constants, self.graph = names, constants, graph
        self.nodes: list = []

    def op(self, op_type: str, inputs: list[str], output: Optional[str] = None, **attrs) -> str:
        from onnx import helper

        out = output or self.names(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.names(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def value(self, name: str) -> Optional[np.ndarray]:
        """A constant input's value (None: computed at run time, or absent)."""
        return self.constants.get(name) if name else None

    def centered(self, q: str, zero: str, dtype, axis_shape: Callable[[np.ndarray], np.ndarray] = lambda z: z) -> str:
        """`q - zero` as `dtype` floats (integers, exact); `axis_shape` broadcasts a per-channel zero point."""
        cast = self.op("Cast", [q], to=_onnx_type(dtype))
        if not zero:
            return cast
        z = self.value(zero)
        if z is not None:
            return self.op("Sub", [cast, self.const(axis_shape(z.astype(dtype)), "zero")])
        return self.op("Sub", [cast, self.op("Cast", [zero], to=_onnx_type(dtype))])


def _onnx_type(dtype) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _input(node, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def _attr(node, name: str, default=None):
    from onnx import helper

    found = next((a for a in node.attribute if a.name == name), None)
    return helper.get_attribute_value(found) if found is not None else default


def _span(b: _Builder, q: str, zero: str) -> float:
    """The largest |q - zero| the operand can take: from its values when constant, else from its dtype's range."""
    z = b.value(zero)
    values = b.value(q)
    if values is not None:
        return float(np.max(np.abs(values.astype(np.int64) - np.asarray(0 if z is None else z, np.int64)), initial=0))
    info = np.iinfo(np.uint8 if z is None else z.dtype)
    return float(max(abs(info.max), abs(info.min)) + (np.max(np.abs(z.astype(np.int64))) if z is not None else 0))


# ---- exact integer products ----------------------------------------------------------------------------------------

def _exact_matmul(b: _Builder, a: str, a_zero: str, w: str, w_zero: str) -> str:
    """(a - a_zero) @ (w - w_zero) as float64: every product and sum of 8-bit integers is exact there (< 2^53).
    A's zero point is per row ([M] -> [M, 1]), B's per column ([N])."""
    a_c = b.centered(a, a_zero, np.float64, lambda z: z.reshape(-1, 1) if z.ndim == 1 and z.size > 1 else z)
    w_c = b.centered(w, w_zero, np.float64)
    return b.op("MatMul", [a_c, w_c])


def _exact_conv(b: _Builder, node, x: str, x_zero: str, w: str, w_zero: str) -> str:
    """conv(x - x_zero, w - w_zero) exactly, as float64. ONNX Runtime convolves float32 only; a float32 sum of
    integer products is exact while every partial sum stays below 2^24, and every partial sum is bounded by
    max|x - x_zero| * max over output channels of sum|w - w_zero|. Where that bound is too large, x is split into
    signed base-2^k digits (x = sum d_i 2^(k i)), each digit's conv is exact, and the digits are recombined in
    float64 (exact)."""
    attrs = {a.name: _attr(node, a.name) for a in node.attribute}
    w_values, z = b.value(w), b.value(w_zero)
    if w_values is not None:
        centered_w = w_values.astype(np.int64) - (np.asarray(z, np.int64).reshape((-1,) + (1,) * (w_values.ndim - 1))
                                                 if z is not None and z.size > 1 else np.asarray(0 if z is None else z, np.int64))
        weight_sum = float(np.max(np.abs(centered_w).reshape(centered_w.shape[0], -1).sum(axis=1), initial=0))
        w_float = b.const(centered_w.astype(np.float32), "weight")
    else:
        w_dtype_span = _span(b, w, w_zero)
        # weights computed at run time: their sums are bounded by assuming at most 4096 input channels
        weight_sum = w_dtype_span * float(np.prod(attrs.get("kernel_shape") or [1])) * 4096
        w_float = b.centered(w, w_zero, np.float32,
                             lambda v: v.reshape((-1,) + (1,) * (_spatial(b, node) + 1)) if v.size > 1 else v)
    x_span = _span(b, x, x_zero)
    if weight_sum >= FLOAT_EXACT:
        raise ValueError(f"{node.op_type} {node.name!r}: its weights' sums ({weight_sum:.0f}) are too large for an "
                         f"exact float32 reference")
    x_float = b.centered(x, x_zero, np.float32)
    conv_attrs = {k: v for k, v in attrs.items() if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")}
    if x_span * weight_sum < FLOAT_EXACT:  # no split: the whole conv is exact in float32
        return b.op("Cast", [b.op("Conv", [x_float, w_float], **conv_attrs)], to=_onnx_type(np.float64))
    bits = next(k for k in (4, 2, 1) if (2 ** k - 1) * weight_sum < FLOAT_EXACT)  # the widest exact digit
    sign = b.op("Sign", [x_float])
    rest = b.op("Abs", [x_float])
    base = b.const(np.array(2.0 ** bits, np.float32), "base")
    total = None
    for digit_index in range(int(np.ceil(np.log2(x_span + 1) / bits))):
        high = b.op("Floor", [b.op("Div", [rest, base])])  # exact: division by a power of two
        digit = b.op("Sub", [rest, b.op("Mul", [high, base])])
        part = b.op("Cast", [b.op("Conv", [b.op("Mul", [digit, sign]), w_float], **conv_attrs)], to=_onnx_type(np.float64))
        part = b.op("Mul", [part, b.const(np.array(2.0 ** (bits * digit_index)), "place")])
        total = part if total is None else b.op("Add", [total, part])
        rest = high
    return total


def _requantize(b: _Builder, acc: str, scale: np.ndarray, y_scale: str, y_zero: str, out: str,
                scale_shape: Callable[[np.ndarray], np.ndarray] = lambda s: s) -> None:
    """y = saturate(round(acc * scale / y_scale) + y_zero) as ONNX's QLinear ops define it (float64, ties to even)."""
    ys, yz = b.value(y_scale), b.value(y_zero)
    multiplier = scale_shape(np.asarray(scale, np.float64))
    if ys is not None:
        scaled = b.op("Mul", [acc, b.const(multiplier / np.float64(ys), "multiplier")])
    else:
        scaled = b.op("Div", [b.op("Mul", [acc, b.const(multiplier, "multiplier")]), b.op("Cast", [y_scale], to=_onnx_type(np.float64))])
    rounded = b.op("Round", [scaled])
    dtype = np.dtype(yz.dtype) if yz is not None else np.uint8
    if y_zero:
        zero = b.const(yz.astype(np.float64), "yzero") if yz is not None else b.op("Cast", [y_zero], to=_onnx_type(np.float64))
        rounded = b.op("Add", [rounded, zero])
    info = np.iinfo(dtype)
    clipped = b.op("Min", [b.op("Max", [rounded, b.const(np.array(info.min, np.float64), "lo")]),
                           b.const(np.array(info.max, np.float64), "hi")])
    b.op("Cast", [clipped], out, to=_onnx_type(dtype))


def _scales(b: _Builder, *names: str) -> Optional[np.ndarray]:
    """The product of constant scales (float64 of their float32 values), None if any is computed at run time."""
    values = [b.value(n) for n in names]
    if any(v is None for v in values):
        return None
    product = np.float64(1.0)
    for v in values:
        product = product * v.astype(np.float64)
    return product


def _runtime_scale(b: _Builder, *names: str) -> str:
    product = None
    for name in names:
        cast = b.op("Cast", [name], to=_onnx_type(np.float64))
        product = cast if product is None else b.op("Mul", [product, cast])
    return product


def _conv_integer(b: _Builder, node) -> None:
    acc = _exact_conv(b, node, node.input[0], _input(node, 2), node.input[1], _input(node, 3))
    b.op("Cast", [acc], node.output[0], to=_onnx_type(np.int32))


def _matmul_integer(b: _Builder, node) -> None:
    acc = _exact_matmul(b, node.input[0], _input(node, 2), node.input[1], _input(node, 3))
    b.op("Cast", [acc], node.output[0], to=_onnx_type(np.int32))


def _qlinear_conv(b: _Builder, node) -> None:
    x, xs, xz, w, ws, wz, ys, yz = (_input(node, i) for i in range(8))
    acc = _exact_conv(b, node, x, xz, w, wz)
    if _input(node, 8):
        bias = b.op("Cast", [node.input[8]], to=_onnx_type(np.float64))
        acc = b.op("Add", [acc, b.op("Reshape", [bias, b.const(np.array([1, -1] + [1] * _spatial(b, node), np.int64), "shape")])])
    per_channel = (lambda s: s.reshape((1, -1) + (1,) * _spatial(b, node)) if np.asarray(s).size > 1 else s)
    _requantize_any(b, acc, (xs, ws), ys, yz, node.output[0], per_channel)


def _spatial(b: _Builder, node) -> int:
    shape = _attr(node, "kernel_shape")
    if shape:
        return len(shape)
    w = b.value(node.input[3] if node.op_type == "QLinearConv" else node.input[1])
    return w.ndim - 2 if w is not None else 2


def _requantize_any(b: _Builder, acc: str, scales: tuple[str, ...], ys: str, yz: str, out: str, shape) -> None:
    constant = _scales(b, *scales)
    if constant is not None:
        _requantize(b, acc, constant, ys, yz, out, shape)
        return
    scaled = b.op("Mul", [acc, _runtime_scale(b, *scales)])
    _requantize(b, scaled, np.float64(1.0), ys, yz, out)


def _qlinear_matmul(b: _Builder, node) -> None:
    a, a_s, a_z, w, w_s, w_z, ys, yz = (_input(node, i) for i in range(8))
    acc = _exact_matmul(b, a, a_z, w, w_z)
    _requantize_any(b, acc, (a_s, w_s), ys, yz, node.output[0], lambda s: s)


def _transposed(b: _Builder, name: str, flag: int) -> str:
    return b.op("Transpose", [name]) if flag else name


def _qgemm(b: _Builder, node) -> None:
    """com.microsoft QGemm: alpha * (A - a_zero) @ (B - b_zero) * a_scale * b_scale + C (C in int32 steps of
    a_scale * b_scale); quantized to y_scale/y_zero when given, float32 otherwise."""
    a, a_s, a_z, w, w_s, w_z, c, ys, yz = (_input(node, i) for i in range(9))
    a_t = _transposed(b, a, _attr(node, "transA", 0))
    w_t = _transposed(b, w, _attr(node, "transB", 0))
    acc = _exact_matmul(b, a_t, a_z, w_t, w_z)
    if c:
        acc = b.op("Add", [acc, b.op("Cast", [c], to=_onnx_type(np.float64))])
    alpha = b.const(np.array(_attr(node, "alpha", 1.0), np.float64), "alpha")
    scaled = b.op("Mul", [b.op("Mul", [acc, alpha]), _runtime_scale(b, a_s, w_s)])
    if ys:
        _requantize(b, scaled, np.float64(1.0), ys, yz, node.output[0])
    else:
        b.op("Cast", [scaled], node.output[0], to=_onnx_type(np.float32))


def _matmul_integer_to_float(b: _Builder, node) -> None:
    a, w, a_s, w_s, a_z, w_z, bias = (_input(node, i) for i in range(7))
    _to_float(b, _exact_matmul(b, a, a_z, w, w_z), (a_s, w_s), bias, node.output[0])


def _dynamic_quantize_matmul(b: _Builder, node) -> None:
    """com.microsoft DynamicQuantizeMatMul: A quantized to uint8 per call (DynamicQuantizeLinear), then as
    MatMulIntegerToFloat."""
    a, w, w_s, w_z, bias = (_input(node, i) for i in range(5))
    q, q_s, q_z = b.names("a_q"), b.names("a_scale"), b.names("a_zero")
    from onnx import helper

    b.nodes.append(helper.make_node("DynamicQuantizeLinear", [a], [q, q_s, q_z]))
    _to_float(b, _exact_matmul(b, q, q_z, w, w_z), (q_s, w_s), bias, node.output[0])


def _to_float(b: _Builder, acc: str, scales: tuple[str, ...], bias: str, out: str) -> None:
    scaled = b.op("Cast", [b.op("Mul", [acc, _runtime_scale(b, *scales)])], to=_onnx_type(np.float32))
    if bias:
        b.op("Add", [scaled, bias], out)
    else:
        b.op("Identity", [scaled], out)


_REWRITES = {"ConvInteger": _conv_integer, "MatMulInteger": _matmul_integer, "QLinearConv": _qlinear_conv,
             "QLinearMatMul": _qlinear_matmul, "QGemm": _qgemm, "MatMulIntegerToFloat": _matmul_integer_to_float,
             "DynamicQuantizeMatMul": _dynamic_quantize_matmul}
_MS = ("com.microsoft",)
_DOMAINS = {"QGemm": _MS, "MatMulIntegerToFloat": _MS, "DynamicQuantizeMatMul": _MS}


def onnxruntime_on_host(sessions: Sessions, feeds: Mapping[str, np.ndarray], origins: Mapping[str, OutputOrigin],
                        user_tolerance: Optional[tuple[float, float]] = None) -> dict:
    """ONNX Runtime as a user deploys it (optimized, its own int8 kernels) against the exact reference on `feeds`,
    under the validation policy: whether it matches, and where it does not, by how much."""
    comparison, _ = validate(_Named(sessions.baseline), sessions.reference, None, samples=[feeds], origins=origins,
                             user_tolerance=user_tolerance)
    if comparison.ok:
        return {"matches_exact": True}
    worst = next(o for o in comparison.outputs if o.name == comparison.worst_output)
    return {"matches_exact": False, "output": worst.name, "max_abs_err": worst.max_abs_err,
            "mismatches": worst.mismatches, "size": worst.size, "note": SAT_NOTE}


class _Named:
    """An ONNX Runtime session behind a compiled module's `run(feeds) -> {name: array}`."""

    def __init__(self, session):
        self.session = session

    def run(self, feeds):
        return session_outputs(self.session, dict(feeds))


__all__ = ["EXACT_REFERENCE", "ExactSession", "Sessions", "exact_model", "is_quantized",
           "onnxruntime_on_host", "open_sessions", "reference_outputs", "reference_session"]
