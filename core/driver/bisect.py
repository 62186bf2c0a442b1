"""Bisect a mismatch: run the compiled kernels one by one and compare each output with the reference's same tensor.

ONNX Runtime exposes intermediate values once they are added as extra graph outputs; Kiln's side calls each
kernel of the built library (core/codegen's KernelLibrary) in plan order on the previous kernels' outputs, so
the first kernel that leaves tolerance is where the error starts. Values are matched by their ONNX name (the
importer keeps it; alter_layout's blocked copies add `_nchw{x}c`), blocked layouts are unblocked to compare.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..graph.ir import Graph
from ..lowering.executable import Executable
from .tolerance import OutputOrigin, output_origins, tolerance_for
from .reference import reference_session
from .validate import compare_output

_BLOCKED_SUFFIX = re.compile(r"_nchw\d+c(_\d+)?$")


def _created_by(ops: tuple[str, ...]) -> str:
    """The graph pass that made this kernel what it is (its name in core/graph/passes)."""
    if any(op == "LayoutTransform" or op.endswith("NCHWc") for op in ops):
        return "alter_layout" + (" + fuse_ops" if len(ops) > 1 else "")
    return "fuse_ops" if len(ops) > 1 else "import (one ONNX op)"


@dataclass(frozen=True)
class KernelError:
    kernel: str
    ops: tuple[str, ...]
    onnx_nodes: tuple[dict, ...]  # {"name", "op"} of the ONNX nodes whose outputs the kernel computes
    value: str  # the ONNX tensor compared
    max_abs_err: float
    max_rel_err: float
    input_abs_err: Optional[float]  # the worst compared input (None: none of its inputs has an ONNX twin)
    passed: bool
    created_by: str
    rule: str

    def as_report(self) -> dict:
        return {"kernel": self.kernel, "ops": list(self.ops), "onnx_nodes": list(self.onnx_nodes), "value": self.value,
                "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "input_abs_err": self.input_abs_err,
                "passed": self.passed, "created_by": self.created_by, "tolerance": self.rule}

    def describe(self) -> str:
        nodes = ", ".join(f"{n['name']} ({n['op']})" for n in self.onnx_nodes[:4]) or "no ONNX node"
        more = f" and {len(self.onnx_nodes) - 4} more" if len(self.onnx_nodes) > 4 else ""
        return (f"first diverging kernel {self.kernel} [{' + '.join(self.ops)}] from ONNX nodes {nodes}{more}: "
                f"output {self.value!r} max abs error {self.max_abs_err:.3g} (inputs {_err(self.input_abs_err)})")


def _err(value: Optional[float]) -> str:
    return "not compared" if value is None else f"{value:.3g}"


def onnx_name(value: str, known: Mapping[str, object]) -> Optional[str]:
    """The ONNX tensor a graph value stands for, if any: its own name or its blocked copy's base."""
    if value in known:
        return value
    base = _BLOCKED_SUFFIX.sub("", value)
    return base if base in known else None


def to_reference_layout(value: np.ndarray, ref_shape: tuple) -> Optional[np.ndarray]:
    """Kiln's array in the reference's layout: NCHW[x]c unblocked (padding channels dropped); None if it has no such view."""
    if tuple(value.shape) == tuple(ref_shape):
        return value
    if value.ndim == len(ref_shape) + 1 and value.ndim >= 3 and value.shape[0] == ref_shape[0] \
            and tuple(value.shape[2:-1]) == tuple(ref_shape[2:]) and value.shape[1] * value.shape[-1] >= ref_shape[1]:
        order = (0, 1, value.ndim - 1, *range(2, value.ndim - 1))
        plain = value.transpose(order).reshape(value.shape[0], value.shape[1] * value.shape[-1], *value.shape[2:-1])
        return plain[:, :ref_shape[1]]
    if value.size == int(np.prod(ref_shape)):
        return value.reshape(ref_shape)
    return None


def reference_intermediates(model_bytes: bytes, names: list[str], feeds: Mapping[str, np.ndarray],
                            threads: int) -> dict[str, np.ndarray]:
    """The reference's values of `names` (intermediate tensors made extra graph outputs) on `feeds`: ONNX Runtime's,
    or the exact rewrite's for a quantized model (core/driver/reference.py keeps every value's name)."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    present = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in present)
    changed = model.SerializeToString()
    session = reference_session(model_bytes.sharing_folder(changed) if hasattr(model_bytes, "sharing_folder")
                                else changed, threads)
    wanted = [o.name for o in session.get_outputs()]
    return {n: v for n, v in zip(wanted, session.run(wanted, dict(feeds))) if isinstance(v, np.ndarray)}


def run_kernels(exe: Executable, graph: Graph, library: Path, feeds: Mapping[str, np.ndarray]):
    """Every kernel called in plan order on numpy buffers; yields (kernel info, {output value: array})."""
    from ..codegen import load_kernels

    lib = load_kernels(library)
    funcs = {f.name: f for f in exe.funcs}
    values: dict[str, np.ndarray] = dict(feeds)
    last_use = {v: k for k, info in enumerate(exe.kernels) for v in (*info.inputs, info.inplace) if v}
    for k, info in enumerate(exe.kernels):
        if info.func not in funcs:  # an If or Loop call (its branches run inside the library): compared up to here
            return
        func = funcs[info.func]
        ins = []
        for value, param in zip(info.inputs, func.inputs):
            source = values[value] if value in values else graph.constants[value]
            ins.append(np.ascontiguousarray(source, dtype=param.dtype).reshape(param.shape))
        outs = [np.empty(b.shape, dtype=b.dtype) for b in func.outputs]
        if info.inplace:
            outs[0][...] = np.asarray(values[info.inplace]).reshape(outs[0].shape)
        spaces = [np.zeros(b.shape, dtype=b.dtype) for b in func.workspaces]
        lib.call(func.name, *ins, *outs, *spaces)
        produced = {v: a.reshape(graph.type_of(v).shape) for v, a in zip(info.outputs, outs)}
        values.update(produced)
        yield info, produced
        for value in [v for v in values if last_use.get(v, -1) <= k]:  # dead: no later kernel reads it
            del values[value]


def bisect(exe: Executable, graph: Graph, library: Path, model_bytes: bytes, feeds: Mapping[str, np.ndarray], *,
           threads: int, user_tolerance: Optional[tuple[float, float]] = None,
           default_origin: OutputOrigin = OutputOrigin()) -> dict:
    """The error kernel by kernel and the first kernel whose output leaves tolerance (None if every one holds).
    `default_origin` judges values whose producer does not decide (a half-precision compile: core/driver/precision.py)."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    producers = {o: n for n in model.graph.node for o in n.output if o}
    wanted = list(dict.fromkeys(n for info in exe.kernels for v in info.outputs
                                if (n := onnx_name(v, producers)) is not None))
    reference = {**feeds, **reference_intermediates(model_bytes, wanted, feeds, threads)}
    producers.update((name, None) for name in feeds)  # model inputs are known tensors too, produced by no node
    origins = output_origins(model, wanted)  # quantized intermediates are judged in their steps too
    errors: dict[str, float] = {name: 0.0 for name in feeds}  # value -> max abs error, for later kernels' inputs
    trace: list[KernelError] = []
    first: Optional[KernelError] = None
    owners = list(graph.nodes)  # build_executable makes one kernel per graph node, in order
    for k, (info, produced) in enumerate(run_kernels(exe, graph, library, feeds)):
        computed = _computed_values(owners[k]) if len(owners) == len(exe.kernels) else list(info.outputs)
        nodes = tuple({"name": producers[n].name or n, "op": producers[n].op_type}
                      for n in dict.fromkeys(onnx_name(o, producers) for o in computed)
                      if n is not None and producers[n] is not None)
        inputs = [errors[v] for v in info.inputs if v in errors]
        worst = None
        for value, array in produced.items():
            name = onnx_name(value, producers)
            ref = reference.get(name) if name else None
            view = to_reference_layout(array, ref.shape) if ref is not None else None
            if view is None:
                continue
            tol = tolerance_for(ref.dtype, origins.get(name, default_origin), user=user_tolerance)
            result = compare_output(name, view, ref, tol)
            errors[value] = result.max_abs_err
            if worst is None or (not result.passed, result.max_abs_err) > (not worst[0].passed, worst[0].max_abs_err):
                worst = (result, name)
        if worst is None:
            continue
        result, name = worst
        entry = KernelError(info.name, info.ops, nodes, name, result.max_abs_err, result.max_rel_err,
                            max(inputs) if inputs else None, result.passed, _created_by(info.ops),
                            result.tolerance.describe())
        trace.append(entry)
        if first is None and not entry.passed:
            first = entry
    return {"kernels": [k.as_report() for k in trace], "compared": len(trace), "total_kernels": len(exe.kernels),
            "first_divergent_kernel": first.as_report() if first else None,
            "summary": first.describe() if first else "every compared kernel output is within tolerance"}


def _computed_values(node) -> list[str]:
    """Every value a kernel's graph node computes: a fused body's inner values too."""
    body = node.attr("body") if node.op == "Fused" else None
    return [o for n in (body.nodes if body is not None else [node]) for o in n.outputs]
