"""Quantized graphs as integer computation: DequantizeLinear -> Conv (1-D or 2-D)/MatMul (+bias) (-> Relu/Clip) ->
QuantizeLinear becomes ConvInteger/MatMulInteger -> int32 bias Add -> Requantize, layout/max ops between
a DequantizeLinear and a QuantizeLinear of one scale run on the 8-bit values directly, a Concat of parts
of other scales concatenates them requantized to its output's scale, Add/Mul become QuantizedBinary (ONNX
Runtime's QLinearAdd/QLinearMul) and other elementwise ops (Sigmoid, LeakyRelu...) a 256-entry LookupTable.

Whatever does not match keeps its DequantizeLinear/QuantizeLinear nodes around a float op, which is correct
(their computes fuse with it into one elementwise kernel). ONNX Runtime's com.microsoft QOperator ops (QGemm,
QLinearAdd...) import as the same pattern, so they take the same path; QLinearConv/QLinearMatMul import
straight to the integer ops.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

from core.errors import ShapeError
from core.graph.ir import Graph, Node, TensorType, topological_sort
from core.graph.op_defs.quantize import QUANT_INT_RANGES
from core.graph.fold import fold_node
from core.graph.ops import Pattern, get_op

from .eliminate_dead_code import eliminate_dead_code
from .registry import register_pass
from .rewrite import fresh_name, use_counts

MAX_TABULATED_NODES = 8  # elementwise nodes one LookupTable may replace (HardSwish decomposes into 4)

# Ops that commute with an 8-bit quantization of one scale and zero point: they only move, select or
# take the max of values, so DQ -> op -> Q with equal parameters is op on the integers.
PASS_THROUGH = frozenset({"MaxPool", "GlobalMaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice",
                          "Concat", "Identity", "DepthToSpace", "SpaceToDepth", "Gather"})


def usable_scales(*scales) -> bool:
    """Finite positive scales whose ratios are finite: a calibration that saw only infinities or one value (an
    attention mask) leaves 0, inf or nan scales, which only the float path reproduces as ONNX Runtime does."""
    values = np.asarray(scales, np.float64)
    return bool(np.all(np.isfinite(values)) and np.all(values > 0)
                and np.isfinite(values.max() / values.min()) and values.min() > np.finfo(np.float32).tiny)


@dataclass(frozen=True)
class Quantized:
    """A DequantizeLinear with constant parameters: the integers' value name, their scale and zero point."""

    node: Node
    value: str
    scale: np.ndarray
    zero: np.ndarray  # int zeros when the node has none
    axis: int

    @property
    def per_tensor(self) -> bool:
        return self.scale.ndim == 0


class _Rewriter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.constants, self.types = dict(graph.constants), dict(graph.types)
        self.producers = graph.producers()
        self.uses = use_counts(graph)
        self.replaced: dict[str, list[Node]] = {}  # Q output -> the nodes computing it instead

    # -- helpers -------------------------------------------------------------------------------
    def const(self, value: np.ndarray, hint: str) -> str:
        name = fresh_name(hint, set(self.types) | set(self.constants))
        value = np.array(value, order="C")  # a copy that keeps 0-d arrays 0-d
        value.flags.writeable = False
        self.constants[name], self.types[name] = value, TensorType(value.shape, value.dtype.name)
        return name

    def value_name(self, hint: str, ttype: TensorType) -> str:
        name = fresh_name(hint, set(self.types) | set(self.constants))
        self.types[name] = ttype
        return name

    def dequantized(self, value: str, constant: bool = False) -> Optional[Quantized]:
        """The DequantizeLinear producing `value` with constant parameters (and constant integers if asked)."""
        node = self.producers.get(value)
        if node is None or node.op != "DequantizeLinear":
            return None
        params = [self.constants.get(i) for i in node.inputs[1:]]
        if any(p is None for p in params) or (constant and node.inputs[0] not in self.constants):
            return None
        x_dtype = self.types[node.inputs[0]].dtype
        zero = params[1] if len(params) > 1 else np.zeros(params[0].shape, x_dtype)
        return Quantized(node, node.inputs[0], params[0], zero, int(node.attr("axis", 0)))

    def quantize_params(self, node: Node) -> Optional[tuple[np.float32, int, str]]:
        """A per-tensor QuantizeLinear's (scale, zero point, dtype) when they are constants."""
        scale, zero = (self.constants.get(i) for i in node.inputs[1:3])
        if scale is None or zero is None or scale.ndim != 0:
            return None
        return np.float32(scale), int(zero), zero.dtype.name

    def single_use(self, value: str) -> bool:
        return self.uses.get(value, 0) == 1 and value not in self.graph.outputs

    def activation_clamp(self, quantize: Node, params: tuple[np.float32, int, str]) -> Optional[tuple[str, int, int]]:
        """(the value before a single-use Relu/Clip feeding `quantize`, or its input, and the output range [lo, hi]
        that clamp becomes in the quantized domain); None when the clamp leaves no value."""
        y_scale, y_zero, y_dtype = params
        lo, hi = QUANT_INT_RANGES[y_dtype]
        value = quantize.inputs[0]
        node = self.producers.get(value)
        if node is None or node.op not in ("Relu", "Clip") or not self.single_use(value):
            return value, lo, hi
        low = 0.0 if node.op == "Relu" else node.attr("min")
        high = None if node.op == "Relu" else node.attr("max")
        # round(clip(v, a, b) / s) == clip(round(v / s), round(a / s), round(b / s)): rounding is monotone.
        with np.errstate(over="ignore"):
            low, high = (None if b is None else np.float32(b) / y_scale for b in (low, high))
        if low is not None and np.isfinite(low):
            lo = max(lo, y_zero + int(np.clip(np.round(low), -512, 512)))
        if high is not None and np.isfinite(high):
            hi = min(hi, y_zero + int(np.clip(np.round(high), -512, 512)))
        return (node.inputs[0], lo, hi) if lo <= hi else None

    # -- Conv / MatMul anchors -----------------------------------------------------------------
    def match_anchor(self, quantize: Node) -> Optional[list[Node]]:
        params = self.quantize_params(quantize)
        if params is None:
            return None
        y_scale, y_zero, y_dtype = params
        clamped = self.activation_clamp(quantize, params)
        if clamped is None:
            return None
        value, lo, hi = clamped
        node = self.producers.get(value)
        bias_value = None
        if node is not None and node.op == "Add" and self.single_use(value):
            first, second = (self.producers.get(i) for i in node.inputs)
            if first is not None and first.op == "MatMul":
                bias_value, value, node = node.inputs[1], node.inputs[0], first
            elif second is not None and second.op == "MatMul":
                bias_value, value, node = node.inputs[0], node.inputs[1], second
        if node is None or not self.single_use(value) or node.op not in ("Conv", "MatMul"):
            return None
        if node.op == "Conv":
            if len(node.inputs) > 2:
                bias_value = node.inputs[2]
            channel_axis, weight_axis = 1, 0
        else:
            if node.attr("packed_columns") is not None or self.types[node.inputs[1]].rank != 2:
                return None
            channel_axis, weight_axis = self.types[node.inputs[0]].rank - 1, 1
        x, w = self.dequantized(node.inputs[0]), self.dequantized(node.inputs[1], constant=True)
        if x is None or w is None or not x.per_tensor or (not w.per_tensor and w.axis != weight_axis) \
                or {self.types[x.value].dtype, self.types[w.value].dtype} - set(QUANT_INT_RANGES):
            return None
        out_type = self.types[value]
        channels = out_type.shape[channel_axis]
        # ORT's multiplier: (s_x * s_w) / s_y in float32; the bias is the int32 accumulator's unit s_x * s_w.
        acc_scale = np.float32(x.scale) * w.scale.astype(np.float32)
        bias = self.integer_bias(bias_value, acc_scale, channels) if bias_value is not None else None
        if bias_value is not None and bias is None:
            return None
        multiplier = (acc_scale / y_scale).astype(np.float32)
        per_channel = (channels,) + (1,) * (out_type.rank - 1 - channel_axis)
        if multiplier.ndim:
            multiplier = multiplier.reshape(per_channel)
        return self.integer_nodes(node, x, w, bias, per_channel, multiplier, quantize.outputs[0],
                                  dict(to=y_dtype, zero_point=y_zero, min=lo, max=hi))

    def integer_bias(self, value: str, acc_scale: np.ndarray, channels: int) -> Optional[np.ndarray]:
        """The bias in accumulator units: a DequantizeLinear's int32 as is when its scale is s_x*s_w (ORT's
        quantizer writes that), else the float bias divided by s_x*s_w and rounded."""
        quantized = self.dequantized(value, constant=True)
        if quantized is not None:
            integers = self.constants[quantized.value].astype(np.int64) - quantized.zero.astype(np.int64)
            if np.allclose(quantized.scale, acc_scale, rtol=1e-6, atol=0):
                bias = integers
            else:
                bias = np.round(integers * quantized.scale.astype(np.float64) / acc_scale.astype(np.float64))
        elif value in self.constants:
            bias = np.round(self.constants[value].astype(np.float64) / acc_scale.astype(np.float64))
        else:
            return None
        bias = np.broadcast_to(np.asarray(bias).reshape(-1), (channels,)) if np.size(bias) in (1, channels) else None
        if bias is None or np.abs(bias).max(initial=0) >= 2 ** 31 - 1:
            return None
        return bias.astype(np.int32)

    def integer_nodes(self, anchor: Node, x: Quantized, w: Quantized, bias: Optional[np.ndarray],
                      per_channel: tuple[int, ...], multiplier: np.ndarray, output: str,
                      requantize: dict) -> list[Node]:
        hint = output
        op = "ConvInteger" if anchor.op == "Conv" else "MatMulInteger"
        x_zero = np.asarray(x.zero, self.types[x.value].dtype).reshape(())
        inputs = [x.value, w.value, self.const(x_zero, f"{hint}_x_zero")]
        if w.zero.any():
            inputs.append(self.const(np.asarray(w.zero, self.types[w.value].dtype), f"{hint}_w_zero"))
        elif not np.asarray(x.zero).any():
            inputs.pop()  # both zero points zero: the kernels' plain path
        attrs = {k: v for k, v in anchor.attrs.items() if k in ("strides", "pads", "dilations", "group")}
        acc_type = get_op(op).infer([self.types[i] for i in inputs], attrs)[0]
        acc = self.value_name(f"{hint}_acc", acc_type)
        nodes = [Node(op, tuple(inputs), (acc,), attrs, name=anchor.name)]
        if bias is not None and bias.any():
            with_bias = self.value_name(f"{hint}_biased", acc_type)
            nodes.append(Node("Add", (acc, self.const(bias.reshape(per_channel), f"{hint}_bias")), (with_bias,)))
            acc = with_bias
        nodes.append(Node("Requantize", (acc, self.const(multiplier, f"{hint}_multiplier")), (output,), requantize,
                          name=anchor.name))
        return nodes

    # -- ops that run on the integers ----------------------------------------------------------
    def match_pass_through(self, quantize: Node) -> Optional[list[Node]]:
        params = self.quantize_params(quantize)
        node = self.producers.get(quantize.inputs[0])
        if params is None or node is None or node.op not in PASS_THROUGH or not self.single_use(quantize.inputs[0]):
            return None
        scale, zero, dtype = params
        data = range(len(node.inputs)) if node.op == "Concat" else (0,)
        inputs, rescaled = list(node.inputs), []
        for index in data:
            source = self.dequantized(node.inputs[index])
            if source is None or not source.per_tensor:
                return None
            same = np.float32(source.scale) == scale and int(source.zero) == zero
            if same and self.types[source.value].dtype == dtype:
                inputs[index] = source.value
            elif node.op == "Concat":  # a part of another scale is requantized to the output's (ORT's QLinearConcat)
                part = self.value_name(f"{quantize.outputs[0]}_part{index}",
                                       TensorType(self.types[node.inputs[index]].shape, dtype))
                rescaled.append(Node("QuantizeLinear", (node.inputs[index],) + quantize.inputs[1:], (part,),
                                     dict(axis=0)))
                inputs[index] = part
            else:
                return None
        if any(self.producers.get(i) is not None and self.producers[i].op == "DequantizeLinear"
               for k, i in enumerate(node.inputs) if k not in data):
            return None
        try:
            (out_type,) = get_op(node.op).infer([self.types[i] if i else None for i in inputs], node.attrs)
        except ShapeError:
            return None  # the op has no integer form
        self.types[quantize.outputs[0]] = out_type
        return rescaled + [dataclasses.replace(node, inputs=tuple(inputs), outputs=quantize.outputs)]

    # -- QDQ Add/Mul and tabulated unary functions ---------------------------------------------
    def match_binary(self, quantize: Node) -> Optional[list[Node]]:
        """DQ(a), DQ(b) -> Add/Mul [-> Relu/Clip] -> Q, all per tensor: one QuantizedBinary (QLinearAdd/Mul)."""
        params = self.quantize_params(quantize)
        clamped = params and self.activation_clamp(quantize, params)
        if not clamped:
            return None
        value, lo, hi = clamped
        node = self.producers.get(value)
        if node is None or node.op not in ("Add", "Mul") or not self.single_use(value):
            return None
        a, b = (self.dequantized(i) for i in node.inputs)
        if a is None or b is None or not a.per_tensor or not b.per_tensor \
                or {self.types[a.value].dtype, self.types[b.value].dtype} - set(QUANT_INT_RANGES):
            return None
        y_scale, y_zero, y_dtype = params
        sa, sb = np.float32(a.scale), np.float32(b.scale)
        if not usable_scales(sa, sb, y_scale):
            return None
        ratios = dict(a_ratio=float(sa / y_scale), b_ratio=float(sb / y_scale)) if node.op == "Add" else \
            dict(ratio=float(sa * sb / y_scale))
        attrs = dict(kind=node.op.lower(), a_zero=int(a.zero), b_zero=int(b.zero), to=y_dtype, zero_point=y_zero,
                     min=lo, max=hi, **ratios)
        return [Node("QuantizedBinary", (a.value, b.value), quantize.outputs, attrs, name=node.name)]

    def elementwise_region(self, root: str) -> Optional[tuple[Quantized, list[Node]]]:
        """(the one per-tensor 8-bit DequantizeLinear, the float elementwise nodes from it to `root`, in graph order)
        when `root` is computed from that DequantizeLinear and scalar constants alone through at most
        MAX_TABULATED_NODES such nodes, each read only inside the region; None otherwise."""
        region: dict[str, Node] = {}
        source: Optional[Quantized] = None
        stack = [root]
        while stack:
            value = stack.pop()
            node = self.producers.get(value)
            if value in self.constants:
                if self.constants[value].size != 1:
                    return None
                continue
            if node is not None and node.op == "DequantizeLinear":
                quantized = self.dequantized(value)
                if quantized is None or not quantized.per_tensor or (source is not None and source.node is not node) \
                        or self.types[quantized.value].dtype not in QUANT_INT_RANGES:
                    return None
                source = quantized
                continue
            if node is None:
                return None
            if value in region:
                continue
            definition = get_op(node.op)
            if definition.pattern > Pattern.BROADCAST or definition.fold is None or len(node.outputs) != 1 \
                    or node.op == "QuantizeLinear" or self.types[value].dtype != "float32" \
                    or len(region) == MAX_TABULATED_NODES:
                return None
            region[value] = node
            stack.extend(i for i in node.inputs if i)
        reads = [i for node in region.values() for i in node.inputs]
        if source is None or not region or any(
                v != root and (self.uses.get(v) != reads.count(v) or v in self.graph.outputs) for v in region):
            return None
        return source, [n for n in self.graph.nodes if n.outputs[0] in region]

    def match_lookup_table(self, quantize: Node) -> Optional[list[Node]]:
        """DQ(x) -> elementwise ops of x and scalar constants (Sigmoid, LeakyRelu, HardSwish's Mul/Add/Clip...) -> Q,
        per tensor: a LookupTable of their 256 results, computed here as ONNX Runtime's QLinearSigmoid/
        QLinearLeakyRelu compute theirs (dequantize, the float ops, quantize)."""
        params = self.quantize_params(quantize)
        found = self.elementwise_region(quantize.inputs[0]) if params and self.single_use(quantize.inputs[0]) else None
        if found is None:
            return None
        x, region = found
        if not usable_scales(x.scale, params[0]):
            return None
        lo, hi = QUANT_INT_RANGES[self.types[x.value].dtype]
        codes = np.arange(lo, hi + 1).astype(self.types[x.value].dtype)
        values = {x.node.outputs[0]: get_op("DequantizeLinear").fold([codes, x.scale, x.zero], {})[0]}
        try:
            for node in region:
                args = [values[i] if i in values else (self.constants[i].reshape(()) if i else None)
                        for i in node.inputs]
                out_types = get_op(node.op).infer([TensorType(a.shape, a.dtype.name) if a is not None else None
                                                   for a in args], node.attrs)
                (values[node.outputs[0]],) = fold_node(node.op, args, node.attrs, out_types)
        except (ShapeError, NotImplementedError, ValueError, TypeError):
            return None
        y_scale, y_zero, y_dtype = params
        result = values[quantize.inputs[0]].astype(np.float32).reshape(-1)
        table = get_op("QuantizeLinear").fold([result, np.float32(y_scale), np.asarray(y_zero, y_dtype)], {})[0]
        return [Node("LookupTable", (x.value, self.const(table, f"{quantize.outputs[0]}_table")), quantize.outputs,
                     {}, name=region[-1].name)]

    def run(self) -> Graph:
        for node in self.graph.nodes:
            if node.op == "QuantizeLinear":
                nodes = self.match_anchor(node) or self.match_pass_through(node) or self.match_binary(node) \
                    or self.match_lookup_table(node)
                if nodes:
                    self.replaced[node.outputs[0]] = nodes
        if not self.replaced:
            return self.graph
        nodes: list[Node] = []
        for node in self.graph.nodes:
            nodes.extend(self.replaced.get(node.outputs[0], [node]) if node.op == "QuantizeLinear" else [node])
        ordered = topological_sort(nodes, list(self.graph.inputs) + list(self.constants))
        return eliminate_dead_code(self.graph.replace(nodes=ordered, constants=self.constants, types=self.types))


def hoist_weight_layout(graph: Graph) -> Graph:
    """Transpose(DequantizeLinear(constant)) -> DequantizeLinear(transposed constant), so that a Gemm's
    transB weights reach the MatMul as dequantized integers."""
    producers, uses = graph.producers(), use_counts(graph)
    constants, types = dict(graph.constants), dict(graph.types)
    nodes = []
    for node in graph.nodes:
        source = producers.get(node.inputs[0]) if node.op == "Transpose" else None
        if source is None or source.op != "DequantizeLinear" or source.inputs[0] not in constants \
                or uses[node.inputs[0]] != 1:
            nodes.append(node)
            continue
        perm = tuple(node.attr("perm"))
        name = fresh_name(f"{source.inputs[0]}_transposed", set(types) | set(constants))
        value = np.ascontiguousarray(np.transpose(constants[source.inputs[0]], perm))
        value.flags.writeable = False
        constants[name], types[name] = value, TensorType(value.shape, value.dtype.name)
        axis = perm.index(int(source.attr("axis", 0)))
        nodes.append(Node("DequantizeLinear", (name,) + source.inputs[1:], node.outputs, dict(axis=axis),
                          name=source.name))
    if len(constants) == len(graph.constants):
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants, types=types))


def move_reshapes_into_integers(graph: Graph) -> Graph:
    """Around a Conv: Reshape(DequantizeLinear(x)) -> DequantizeLinear(Reshape(x)) (x constant, or per tensor) and
    QuantizeLinear(Reshape(conv)) -> Reshape(QuantizeLinear(conv)) (per tensor). The frontend lifts a 1-D Conv to
    rows of height 1 with Reshapes around it, which then sit inside the DQ -> Conv -> Q pattern instead of outside."""
    producers, uses = graph.producers(), use_counts(graph)
    constants, types = dict(graph.constants), dict(graph.types)
    feeds_conv = {i for node in graph.nodes if node.op == "Conv" for i in node.inputs}

    def fresh(hint: str, ttype: TensorType) -> str:
        name = fresh_name(hint, set(types) | set(constants))
        types[name] = ttype
        return name

    def per_tensor(node: Node) -> bool:
        return all(i in constants and constants[i].ndim == 0 for i in node.inputs[1:] if i)

    nodes: list[Node] = []
    for node in graph.nodes:
        source = producers.get(node.inputs[0]) if node.inputs else None
        if node.op == "Reshape" and node.outputs[0] in feeds_conv and source is not None \
                and source.op == "DequantizeLinear" and all(i in constants for i in source.inputs[1:] if i):
            integers, out_shape = source.inputs[0], graph.type_of(node.outputs[0]).shape
            axis = int(source.attr("axis", 1))
            same_axis = out_shape[:axis + 1] == types[integers].shape[:axis + 1]  # a per-axis scale still fits
            if integers in constants and (per_tensor(source) or same_axis):
                value = np.ascontiguousarray(constants[integers].reshape(out_shape))
                value.flags.writeable = False
                reshaped = fresh(f"{integers}_reshaped", TensorType(value.shape, value.dtype.name))
                constants[reshaped] = value
                nodes.append(dataclasses.replace(source, inputs=(reshaped,) + source.inputs[1:], outputs=node.outputs))
                continue
            if per_tensor(source):
                reshaped = fresh(f"{integers}_reshaped", TensorType(out_shape, types[integers].dtype))
                nodes += [dataclasses.replace(node, inputs=(integers,) + node.inputs[1:], outputs=(reshaped,)),
                          dataclasses.replace(source, inputs=(reshaped,) + source.inputs[1:], outputs=node.outputs)]
                continue
        data = source.inputs[0] if source is not None and source.op == "Reshape" else None
        conv = producers.get(data)
        if node.op == "QuantizeLinear" and conv is not None and conv.op == "Conv" and per_tensor(node) \
                and uses[node.inputs[0]] == 1 and node.inputs[0] not in graph.outputs:
            quantized = fresh(f"{data}_quantized", TensorType(types[data].shape, types[node.outputs[0]].dtype))
            nodes += [dataclasses.replace(node, inputs=(data,) + node.inputs[1:], outputs=(quantized,)),
                      dataclasses.replace(source, inputs=(quantized,) + source.inputs[1:], outputs=node.outputs)]
            continue
        nodes.append(node)
    if len(types) == len(graph.types):
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants, types=types))


@register_pass("integer_qdq")
def integer_qdq(graph: Graph) -> Graph:
    if not any(node.op == "QuantizeLinear" for node in graph.nodes):
        return graph
    return _Rewriter(move_reshapes_into_integers(hoist_weight_layout(graph))).run()
