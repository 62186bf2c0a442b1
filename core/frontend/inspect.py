"""Pre-flight inspection of an ONNX model: checker, shape inference, I/O signature and op coverage.

`python -m core.frontend.inspect MODEL.onnx [--upload] [--max-tensor-bytes N]` prints the summary as
JSON, so that a service can run the (native, crash-prone) checker in a child process and a segfault
costs only that child.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np
import onnx

from core.errors import InvalidModelError, KilnError, ModelTooLargeError, UnsupportedOpError
from core.graph.ir import Graph

from .converters import find_converter
from .converters.registry import canonical_domain
from .model_loading import DEFAULT_BUDGET, ModelSource, SizeBudget, load_model
from .converters.control_flow_runtime import DECLARE_BOUND, max_trip_count
from .onnx_importer import import_onnx
from .onnx_values import declared_dims, numpy_dtype


def _signature(values, initializers: set[str]) -> list[dict[str, Any]]:
    out = []
    for value in values:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = declared_dims(tensor)
        try:
            dtype = numpy_dtype(tensor.elem_type, f"value {value.name!r}")
        except KilnError:
            try:
                dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
            except ValueError:  # a number no ONNX version defines (the checker lets it through): found by fuzzing
                raise InvalidModelError(f"not an ONNX model: value {value.name!r} has unknown element type "
                                        f"{tensor.elem_type}") from None
        out.append({"name": value.name, "shape": shape, "dtype": dtype})
    return out


def unsupported_ops(proto: onnx.ModelProto) -> list[tuple[str, str, int]]:
    """Every (domain, op, opset) of the model, subgraphs (If/Loop/Scan bodies) included, that has no
    converter, deduplicated and sorted."""
    opsets = {canonical_domain(o.domain): int(o.version) for o in proto.opset_import}
    missing = set()
    for node in _nodes(proto.graph):
        domain = canonical_domain(node.domain)
        opset = opsets.get(domain, 0)
        if find_converter(domain, node.op_type, opset) is None:
            missing.add((domain, node.op_type, opset))
    return sorted(missing)


def check_supported(proto: onnx.ModelProto) -> None:
    """UnsupportedOpError listing every op of the model without a converter (the upload's check, the CLI's too)."""
    missing = unsupported_ops(proto)
    if missing:
        raise UnsupportedOpError(missing)


def _nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
                yield from _nodes(sub)


def onnx_node_names(model_bytes: bytes) -> dict[str, str]:
    """The model's named ONNX nodes by their first output, the name the graph nodes converted from them
    carry (ConvertContext.hint); {} for a model that cannot be parsed here."""
    try:
        proto = onnx.load_from_string(model_bytes)
    except Exception:  # noqa: BLE001 - names only label the report; the compile already read the model
        return {}
    return {n.output[0]: n.name for n in proto.graph.node if n.name and n.output and n.output[0]}


def check_graph_sizes(graph: Graph, budget: SizeBudget = DEFAULT_BUDGET) -> None:
    """Every value of the imported graph (Kiln's own shape inference) within the per-tensor budget.

    Catches what ONNX could not size from the file alone, such as Expand/Tile/Resize fed by Shape.
    """
    for name, ttype in graph.types.items():
        nbytes = math.prod(ttype.shape) * np.dtype(ttype.dtype).itemsize
        if nbytes > budget.max_tensor_bytes:
            raise ModelTooLargeError(f"model too large: value {name!r} {list(ttype.shape)} would need {nbytes:,} "
                                     f"bytes, over the limit of {budget.max_tensor_bytes:,} bytes per tensor")


def inspect_model(model: ModelSource, *, allow_external_data: bool = True,
                  budget: SizeBudget = DEFAULT_BUDGET) -> dict[str, Any]:
    """The model's signature, or the KilnError a compile would raise first (every unsupported op listed).

    A model whose inputs all have static shapes is imported in full, which also catches unsupported
    attribute combinations and sizes every value; symbolic dimensions are left for the compile's `input_shapes`.
    """
    proto = load_model(model, allow_external_data=allow_external_data, budget=budget)
    check_supported(proto)
    initializers = {t.name for t in proto.graph.initializer}
    inputs = _signature(proto.graph.input, initializers)
    symbolic = [i["name"] for i in inputs if i["shape"] is None or any(isinstance(d, str) for d in i["shape"])]
    needs_trip_bound = False
    if not symbolic:
        try:
            graph = import_onnx(proto)
        except UnsupportedOpError as err:
            if DECLARE_BOUND not in str(err):
                raise
            needs_trip_bound = True  # a job must give max_trip_count: refused at job creation without it
            with max_trip_count(1):  # sized for one iteration here: the job's bound sizes the rest
                graph = import_onnx(proto)
        check_graph_sizes(graph, budget)
    return {
        "inputs": inputs,
        "outputs": _signature(proto.graph.output, set()),
        "opsets": {canonical_domain(o.domain) or "ai.onnx": int(o.version) for o in proto.opset_import},
        "ir_version": int(proto.ir_version),
        "producer": proto.producer_name,
        "nodes": len(proto.graph.node),
        # default-domain op types, subgraphs included: what a target-aware check (Backend.check_ops) reads
        "op_types": sorted({n.op_type for n in _nodes(proto.graph) if canonical_domain(n.domain) == ""}),
        "symbolic_inputs": symbolic,
        "needs_trip_bound": needs_trip_bound,  # a loop run at run time needs max_trip_count (static inputs only)
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core.frontend.inspect")
    parser.add_argument("model")
    parser.add_argument("--upload", action="store_true", help="a single uploaded file: refuse any external data")
    parser.add_argument("--max-tensor-bytes", type=int, default=DEFAULT_BUDGET.max_tensor_bytes)
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    budget = SizeBudget(max_tensor_bytes=args.max_tensor_bytes,
                        max_weights_bytes=max(args.max_tensor_bytes, DEFAULT_BUDGET.max_weights_bytes))
    try:
        summary = inspect_model(args.model, allow_external_data=not args.upload, budget=budget)
    except KilnError as err:
        payload = {"ok": False, "code": err.code, "message": str(err)}
        if isinstance(err, UnsupportedOpError):
            payload["unsupported_ops"] = [{"domain": d or "ai.onnx", "op": o, "opset": v} for d, o, v in err.ops]
        print(json.dumps(payload))
        return 0
    print(json.dumps({"ok": True, **summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
