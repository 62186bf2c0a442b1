"""Pre-flight inspection of an ONNX model: checker, shape inference, I/O signature and op coverage.

`python -m core.frontend.inspect MODEL.onnx` prints the summary as JSON, so that a service can run
the (native, crash-prone) checker in a child process and a segfault costs only that child.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import onnx

from core.errors import KilnError, UnsupportedOpError

from .converters import find_converter
from .converters.registry import canonical_domain
from .model_loading import ModelSource, load_model
from .onnx_importer import import_onnx
from .onnx_values import numpy_dtype


def _signature(values, initializers: set[str]) -> list[dict[str, Any]]:
    out = []
    for value in values:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = ([d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
                 if tensor.HasField("shape") else None)
        try:
            dtype = numpy_dtype(tensor.elem_type, f"value {value.name!r}")
        except KilnError:
            dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
        out.append({"name": value.name, "shape": shape, "dtype": dtype})
    return out


def unsupported_ops(proto: onnx.ModelProto) -> list[tuple[str, str, int]]:
    """Every (domain, op, opset) of the main graph that has no converter, deduplicated and sorted."""
    opsets = {canonical_domain(o.domain): int(o.version) for o in proto.opset_import}
    missing = set()
    for node in proto.graph.node:
        domain = canonical_domain(node.domain)
        opset = opsets.get(domain, 0)
        if find_converter(domain, node.op_type, opset) is None:
            missing.add((domain, node.op_type, opset))
    return sorted(missing)


def inspect_model(model: ModelSource) -> dict[str, Any]:
    """The model's signature, or the KilnError a compile would raise first (every unsupported op listed).

    A model whose inputs all have static shapes is imported in full, which also catches unsupported
    attribute combinations; symbolic dimensions are left for the compile's `input_shapes`.
    """
    proto = load_model(model)
    missing = unsupported_ops(proto)
    if missing:
        raise UnsupportedOpError(missing)
    initializers = {t.name for t in proto.graph.initializer}
    inputs = _signature(proto.graph.input, initializers)
    symbolic = [i["name"] for i in inputs if i["shape"] is None or any(isinstance(d, str) for d in i["shape"])]
    if not symbolic:
        import_onnx(proto)
    return {
        "inputs": inputs,
        "outputs": _signature(proto.graph.output, set()),
        "opsets": {canonical_domain(o.domain) or "ai.onnx": int(o.version) for o in proto.opset_import},
        "ir_version": int(proto.ir_version),
        "producer": proto.producer_name,
        "nodes": len(proto.graph.node),
        "symbolic_inputs": symbolic,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(json.dumps({"ok": False, "code": "usage", "message": "usage: python -m core.frontend.inspect MODEL.onnx"}))
        return 2
    try:
        summary = inspect_model(argv[0])
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
