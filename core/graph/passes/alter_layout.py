"""AlterOpLayout for CPUs: conv chains run in NCHW[x]c (x = the target's float lanes) with weights
packed at compile time; LayoutTransform nodes appear only where a blocked region starts or ends."""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.graph.op_defs.blocked import BLOCKED_VARIANTS
from core.graph.op_facts import Fact, elementwise_rule, op_rule, rule_for
from core.graph.ops import get_op
from core.packing.blocked import block_for, expand_groups, grouped_blocking, pack_channel_vector, pack_weights
from core.packing.winograd import winograd_weights

from .registry import register_pass
from .rewrite import fresh_name


@dataclasses.dataclass
class _Rewriter:
    """Builds the new node list; each original value is available plain (NCHW, its own name) and/or
    blocked (a new name); transforms are made on demand and shared by every reader."""

    graph: Graph
    lanes: int
    nodes: list = dataclasses.field(default_factory=list)
    types: dict = dataclasses.field(default_factory=dict)
    constants: dict = dataclasses.field(default_factory=dict)
    blocked: dict = dataclasses.field(default_factory=dict)  # value -> (blocked value, block)
    plain_ready: set = dataclasses.field(default_factory=set)
    transformed: dict = dataclasses.field(default_factory=dict)  # (value, block) -> blocked copy
    keep_nchw: set = dataclasses.field(default_factory=set)  # outputs of convs that stay NCHW
    max_winograd_tile: int = 4  # 0: every conv direct (a quick compile: Winograd kernels cost most of its build)

    def block_of(self, value: str) -> Optional[int]:
        entry = self.blocked.get(value)
        return entry[1] if entry else None

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.types)
        self.types[name] = None  # reserved until typed
        return name

    def add_constant(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        value = np.ascontiguousarray(value)
        value.flags.writeable = False
        self.constants[name] = value
        self.types[name] = TensorType(value.shape, value.dtype.name)
        return name

    def emit(self, op: str, inputs: list, attrs: Mapping, outputs: list, name: str = "") -> None:
        in_types = [self.types[i] if i else None for i in inputs]
        out_types = get_op(op).infer([t for t in in_types if t is not None], attrs)
        for out, t in zip(outputs, out_types):
            self.types[out] = t
        self.nodes.append(Node(op, tuple(inputs), tuple(outputs), dict(attrs), name=name))

    def plain(self, value: str) -> str:
        """`value` in NCHW, transformed back under its own name the first time a reader needs it."""
        entry = self.blocked.get(value)
        if entry is None or value in self.plain_ready:
            return value
        self.plain_ready.add(value)
        self.emit("LayoutTransform", [entry[0]], {"src_block": entry[1], "dst_block": 0}, [value],
                  name=f"{value}_to_nchw")
        return value

    def as_blocked(self, value: str, block: int) -> str:
        entry = self.blocked.get(value)
        if entry is not None and entry[1] == block:
            return entry[0]
        key = (value, block)
        if key not in self.transformed:
            src, src_block = entry if entry is not None else (value, 0)
            out = self.fresh(f"{value}_nchw{block}c")
            self.emit("LayoutTransform", [src], {"src_block": src_block, "dst_block": block}, [out],
                      name=f"{value}_to_nchw{block}c")
            self.transformed[key] = out
        return self.transformed[key]

    def emit_blocked(self, node: Node, op: str, inputs: list, attrs: Mapping, block: int) -> None:
        outs = [self.fresh(f"{o}_nchw{block}c") for o in node.outputs]
        self.emit(op, inputs, attrs, outs, name=node.name)
        for o, new in zip(node.outputs, outs):
            self.blocked[o] = (new, block)

    def keep(self, node: Node) -> None:
        """A node that runs in NCHW: its blocked inputs are transformed back first."""
        inputs = [self.plain(i) if i else i for i in node.inputs]
        self.nodes.append(dataclasses.replace(node, inputs=tuple(inputs)))
        for o in node.outputs:
            self.types[o] = self.graph.type_of(o)


Rule = Callable[[_Rewriter, Node], bool]  # a Fact.LAYOUT rule: rewrites node into the blocked layout (True) or declines


# A conv whose output block is narrower than this share of a vector computes partial vectors: NCHW wins.
MIN_BLOCK_SHARE = 2


def conv_blocks(node: Node, graph: Graph, lanes: int) -> Optional[tuple[int, int, bool]]:
    """(input block, output block, depthwise) when `node` (a Conv) can run in NCHW[x]c, else None."""
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if w not in graph.constants or (bias and bias not in graph.constants) or x in graph.constants:
        return None
    xt, wt = graph.type_of(x), graph.type_of(w)
    if xt.rank != 4 or wt.rank != 4 or xt.dtype != "float32":
        return None
    group, (oc, cg), ic = node.attr("group", 1), wt.shape[:2], xt.shape[1]
    depthwise = group > 1 and group == ic == oc and cg == 1
    if group != 1 and not depthwise:
        grouped = conv_groups_blocked(node, graph, lanes)
        return None if grouped is None else (grouped[0], grouped[0], False)
    ob = block_for(oc, lanes)
    if ob * MIN_BLOCK_SHARE < lanes:
        return None
    return (ob if depthwise else block_for(ic, lanes)), ob, depthwise


def conv_groups_blocked(node: Node, graph: Graph, lanes: int) -> Optional[tuple[int, int]]:
    """(block, groups of the blocked kernel) for a grouped Conv that is not depthwise (grouped_blocking)."""
    ic, oc = graph.type_of(node.inputs[0]).shape[1], graph.type_of(node.inputs[1]).shape[0]
    return grouped_blocking(ic, oc, node.attr("group", 1), lanes, -(-lanes // MIN_BLOCK_SHARE))


# Measured on AVX2 (2 cores), each conv with its epilogue in the register tile as in a model: every
# conv of resnet18, mobilenet_v2 and squeezenet1_1 runs faster blocked than in NCHW (squeezenet
# 16 -> 64 1x1 at 55x55: 0.087 vs 0.108 ms; depthwise 1.3-2.4x: NCHW splits strided inputs into
# stride phases in a scalar pad stage). A region of only depthwise convs stays NCHW: a lone depthwise
# conv does not pay for its two transforms. Regions with short-reduction convs (3-channel stems,
# squeezenet's 16-channel expand 1x1s, the 16/32-channel 1x1s of transformers' ResNet bottlenecks) once
# stayed NCHW too, when blocked channel Concats cost 4x NCHW's; with the blocked copy schedule
# (generic.injective_stage) they run blocked. Kernel sums NCHW -> blocked (native znver5, 2 threads,
# load 4-7): squeezenet1_1 2.95 -> 2.38 ms (per-kernel minimums of 6 alternating profiles; only its
# 1000-channel classifier conv, in half-vector blocks of 8, is slower: 0.54 -> 0.95), squeezenet1_0
# 12.2 -> 7.2 ms and resnet_bottleneck 2.66 -> 2.20 ms (x86-64-v3: 11.4 -> 4.1) (medians of 21 runs).
# GROUPED_AS_DEPTHWISE: a grouped conv (few channels per group: regnet, resnext) counts as depthwise,
# as NCHW runs it 2-3x slower (x86-64-v3, one kernel: regnet's 104-channel 28x28 0.121 vs 0.054 ms
# blocked), so its region runs blocked whatever its short 1x1 convs; and as dense, as it reduces over
# its groups' channels and needs no dense partner. Whole models, x86-64-v3, 2 threads, interleaved
# medians (shared machine): regnet_y_400mf 12.5 -> 8.0 ms (ORT 7.0, 31 rounds), resnext50_32x4d
# 98 -> 85 ms (its transforms 34 -> 2; 21 rounds).


@dataclasses.dataclass
class _RegionConvs:
    """What kinds of blockable convs a region (convs joined through blocked ops) holds."""

    depthwise: bool = False
    dense: bool = False

    def losing(self) -> bool:
        return self.depthwise and not self.dense


def losing_regions(graph: Graph, lanes: int) -> set[str]:
    """Outputs of the convs to keep in NCHW: every conv of a region (convs joined through ops that
    stay blocked between them) that the blocked layout makes slower as a whole (_RegionConvs)."""
    parent: dict[str, str] = {}

    def root(v: str) -> str:
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    producers = graph.producers()
    for node in graph.nodes:
        if node.op != "Conv" and rule_for(node.op, Fact.LAYOUT) is None:
            continue
        for i in node.inputs:
            src = producers.get(i)
            if src is not None and (src.op == "Conv" or rule_for(src.op, Fact.LAYOUT) is not None):
                parent[root(node.outputs[0])] = root(src.outputs[0])
    convs = [(n, conv_blocks(n, graph, lanes)) for n in graph.nodes if n.op == "Conv"]
    regions: dict[str, _RegionConvs] = {}
    for node, blocks in convs:
        if blocks is None:
            continue
        region = regions.setdefault(root(node.outputs[0]), _RegionConvs())
        if blocks[2]:
            region.depthwise = True
        elif node.attr("group", 1) > 1:
            region.depthwise = region.dense = True  # a grouped conv is both (GROUPED_AS_DEPTHWISE)
        else:
            region.dense = True
    losing = {r for r, kinds in regions.items() if kinds.losing()}
    return {n.outputs[0] for n, _ in convs if root(n.outputs[0]) in losing}


# Winograd F(m x m, 3x3) for dense 3x3 stride-1 convs with at least this many input and output
# channels. Measured on AVX2 (2 cores, warm, one kernel each, .stage/exp/wino_stages.py), F(2x2)
# against the direct Conv2dNCHWc: 64ch 56x56 1.09 vs 1.80 ms, 128ch 28x28 0.72 vs 1.39, 256ch 14x14
# 0.89 vs 1.94, 512ch 7x7 1.43 vs 2.14 (there 8x8 outputs are computed for 7x7). With few channels
# the transforms' passes over memory cost as much as the multiplies saved (16ch 10x12: 0.11 vs 0.12).
WINOGRAD_MIN_CHANNELS = 32
# F(4x4) on maps at least this large: 2.25x fewer multiplies than F(2x2) for larger transforms and
# 2.25x larger weights, which pays where there are many tiles per weight (same measurement, F(4x4)
# vs F(2x2): 56x56 0.65 vs 1.12 ms, 28x28 0.49 vs 0.66; 14x14 0.90 vs 0.81, partial 4x4 tiles).
WINOGRAD_4X4_MIN_SIZE = 28


def winograd_tile(node: Node, graph: Graph, ib: int, ob: int, depthwise: bool, max_tile: int = 4) -> int:
    """The Winograd output tile m for this conv (2 or 4, at most `max_tile`), or 0 when it runs direct."""
    w = graph.type_of(node.inputs[1]).shape
    fits = (max_tile >= 2 and not depthwise and node.attr("group", 1) == 1 and tuple(w[2:]) == (3, 3)
            and tuple(node.attr("strides", (1, 1))) == (1, 1)
            and tuple(node.attr("dilations", (1, 1))) == (1, 1) and min(w[0], w[1]) >= WINOGRAD_MIN_CHANNELS
            and ib == ob)
    if not fits:
        return 0
    return 4 if max_tile >= 4 and min(graph.type_of(node.outputs[0]).shape[2:]) >= WINOGRAD_4X4_MIN_SIZE else 2


@op_rule(Fact.LAYOUT, "Conv")
def _conv(rw: _Rewriter, node: Node) -> bool:
    blocks = conv_blocks(node, rw.graph, rw.lanes)
    if blocks is None or node.outputs[0] in rw.keep_nchw:
        return False
    ib, ob, depthwise = blocks
    w = node.inputs[1]
    x = rw.as_blocked(node.inputs[0], ib)
    winograd = winograd_tile(node, rw.graph, ib, ob, depthwise, rw.max_winograd_tile)
    weight, group = rw.graph.constants[w], node.attr("group", 1)
    if group > 1 and not depthwise:
        group = conv_groups_blocked(node, rw.graph, rw.lanes)[1]
        weight = expand_groups(weight, node.attr("group"), group)
    weights = winograd_weights(weight, ib, ob, winograd) if winograd else pack_weights(weight, ib, ob, depthwise)
    inputs = [x, rw.add_constant(f"{w}_winograd" if winograd else f"{w}_packed", weights)]
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = node.inputs[2]
        inputs.append(rw.add_constant(f"{bias}_packed", pack_channel_vector(rw.graph.constants[bias], ob)))
    if winograd:
        rw.emit_blocked(node, "Conv2dWinogradNCHWc", inputs, {"pads": node.attr("pads")}, ob)
        return True
    attrs = {k: node.attr(k) for k in ("strides", "pads", "dilations")}
    if group > 1 and not depthwise:
        attrs["group"] = group
    rw.emit_blocked(node, "Conv2dNCHWc", inputs, dict(attrs, depthwise=depthwise), ob)
    return True


@op_rule(Fact.LAYOUT, *BLOCKED_VARIANTS)
def _pool(rw: _Rewriter, node: Node) -> bool:
    """Pools stay blocked inside a region; they never start one."""
    block = rw.block_of(node.inputs[0])
    if block is None:
        return False
    rw.emit_blocked(node, BLOCKED_VARIANTS[node.op], [rw.blocked[node.inputs[0]][0]], node.attrs, block)
    return True


@op_rule(Fact.LAYOUT, "Concat")
def _concat(rw: _Rewriter, node: Node) -> bool:
    """Concat along channels of values blocked alike is a Concat of their channel blocks."""
    blocks = {rw.block_of(i) for i in node.inputs}
    if node.attr("axis") != 1 or len(blocks) != 1 or None in blocks:
        return False
    (block,) = blocks
    rw.emit_blocked(node, "Concat", [rw.blocked[i][0] for i in node.inputs], node.attrs, block)
    return True


@op_rule(Fact.LAYOUT, "Interpolate")
def _interpolate(rw: _Rewriter, node: Node) -> bool:
    """A resize of the spatial axes of a blocked value resizes its blocked form along the same axes (N, C/x, H, W
    keep their places): every tap is then a whole channel block, one vector load, where in NCHW each lane of a
    row gathers its own column (a segmentation head's upsampling between blocked convs also needs no transforms)."""
    block = rw.block_of(node.inputs[0])
    if block is None or rw.graph.type_of(node.inputs[0]).rank != 4 or not set(node.attrs.get("axes") or ()) <= {2, 3}:
        return False
    if any(i and i not in rw.graph.constants for i in node.inputs[1:]):
        return False  # tables computed at run time: left in NCHW
    rw.emit_blocked(node, node.op, [rw.blocked[node.inputs[0]][0], *node.inputs[1:]], node.attrs, block)
    return True


def blocked_constant(value: np.ndarray, out: TensorType, block: int) -> Optional[np.ndarray]:
    """A constant operand of an NCHW elementwise op, broadcast the same way to the blocked value:
    scalars stay, per-channel vectors ((C,1,1), (1,C,1,1)) become (1, C/x, 1, 1, x); others None."""
    if value.size == 1:
        return value
    if value.ndim > 4:
        return None
    shape = (1,) * (4 - value.ndim) + value.shape
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] != out.shape[1]:
        return None
    return pack_channel_vector(value.reshape(-1), block).reshape(1, -1, 1, 1, block)


@elementwise_rule(Fact.LAYOUT)
def _elementwise(rw: _Rewriter, node: Node) -> bool:
    """Elementwise ops on a blocked value stay blocked: other data operands of the same shape or per
    channel (N, C, 1, 1) are blocked too, constants re-laid out when they broadcast per channel or are scalars."""
    if len(node.outputs) != 1 or rw.graph.type_of(node.outputs[0]).rank != 4:
        return False
    out = rw.graph.type_of(node.outputs[0])
    blocks = [rw.block_of(i) for i in node.inputs if i and rw.block_of(i)]
    if not blocks or out.shape[1] % blocks[0]:
        return False
    block = blocks[0]
    plan: list = []
    for i in node.inputs:
        if not i:
            plan.append(("", None))
        elif i in rw.graph.constants:
            packed = blocked_constant(rw.graph.constants[i], out, block)
            if packed is None:
                return False
            plan.append(("constant", (i, packed)))
        elif rw.graph.type_of(i).shape in (out.shape, out.shape[:2] + (1, 1)):
            plan.append(("data", i))  # same shape, or per channel (a squeeze-excitation's scales)
        else:
            return False  # a data operand that broadcasts otherwise: leave the op in NCHW
    inputs = []
    for kind, item in plan:
        if kind == "constant":
            name, packed = item
            inputs.append(name if packed is rw.graph.constants[name] else rw.add_constant(f"{name}_nchw{block}c", packed))
        else:
            inputs.append(rw.as_blocked(item, block) if kind == "data" else "")
    rw.emit_blocked(node, node.op, inputs, node.attrs, block)
    return True


@register_pass("alter_layout")
def alter_layout(graph: Graph, *, lanes: int, max_winograd_tile: int = 4) -> Graph:
    """Conv regions in NCHW[x]c blocks of up to `lanes` channels (the target's float lanes: its Backend binds them);
    `max_winograd_tile` caps the Winograd output tile: 2 F(2x2) only, 0 every conv direct (cheaper to build, slower
    to run: what a quick compile asks for)."""
    rw = _Rewriter(graph, lanes, keep_nchw=losing_regions(graph, lanes), max_winograd_tile=max_winograd_tile)
    return rewrite_regions(graph, rw, Fact.LAYOUT)


def rewrite_regions(graph: Graph, rw: "_Rewriter", fact: Fact) -> Graph:
    """`graph` with every node offered to its rule for the layout `fact` (kept as it is when it has none or the
    rule declines) and its outputs back in plain layout: the walk alter_layout and alter_layout_3d share."""
    rw.types.update(graph.types)
    rw.constants.update(graph.constants)
    for node in graph.nodes:
        rule = rule_for(node.op, fact)
        if rule is None or not rule(rw, node):
            rw.keep(node)
    for out in graph.outputs:
        rw.plain(out)
    types = {k: t for k, t in rw.types.items() if t is not None}
    return graph.replace(nodes=tuple(rw.nodes), types=types, constants=rw.constants)

