"""compile()'s `precision`: the storage type of a model's weights (fp32, fp16, bf16; float32 arithmetic always),
how each output is then judged against the float32 reference, and what the report says about it."""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

import numpy as np

from ..errors import KilnError
from ..graph.ir import Graph
from ..graph.passes.narrow_weight_storage import MIN_ELEMENTS, narrow_weight_storage
from ..target import Target
from .tolerance import OutputOrigin

# Every precision Kiln compiles at (the CLI's choices, the API's schema and compile() read this one list): int8
# quantizes the model first (core/driver/quantize_stage.py) and runs it on integer kernels.
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
HALF_PRECISIONS = ("fp16", "bf16")
STORAGE = {"fp32": None, "fp16": "float16", "bf16": "bfloat16"}
_OF_DTYPE = {"float16": "fp16", "bfloat16": "bf16"}


class PrecisionError(KilnError):
    """A precision Kiln does not know, or one the target cannot store weights in."""

    code = "bad_precision"


def check_precision(precision: Optional[str]) -> Optional[str]:
    """`precision` itself when Kiln knows it (None: the model's own), else one clear error."""
    if precision is None or precision in PRECISIONS:
        return precision
    raise PrecisionError(f"unknown precision {precision!r}: expected one of {', '.join(PRECISIONS)}")


def model_precision(graph: Graph) -> str:
    """fp16 (bf16) when every weight of an imported model that matters (MIN_ELEMENTS or more) is float16 (bfloat16);
    else fp32: a mixed model's layers kept in float32 keep their weights exact (all of them float32)."""
    dtypes = {graph.type_of(v).dtype for v, data in graph.constants.items()
              if np.asarray(data).size >= MIN_ELEMENTS and graph.type_of(v).dtype in ("float32", "float16", "bfloat16")}
    return _OF_DTYPE.get(dtypes.pop(), "fp32") if len(dtypes) == 1 else "fp32"


def store_weights(graph: Graph, precision: str, requested: bool, storage_dtypes: tuple[str, ...],
                  target: Target) -> Graph:
    """The optimized graph with its weights in the precision's storage type: at fp16/bf16 every float32 weight
    (packed and Winograd-transformed ones included) is rounded to it; at fp32 the weights stay as they are. A
    requested half precision the target cannot widen cheaply is refused; a model's own one then stays float32."""
    round_to = STORAGE[precision]
    if round_to is None:
        return graph
    if round_to not in storage_dtypes:
        if requested:
            raise PrecisionError(f"target {target.name} cannot store weights as {round_to} "
                                 f"(it converts {', '.join(storage_dtypes) or 'no narrow float'} cheaply)")
        return graph
    return narrow_weight_storage(graph, storage_dtypes, round_to=round_to)


def judged_origin(precision: str, requested: bool) -> OutputOrigin:
    """How a float32 value of a model compiled at a requested half precision is judged: at that format's epsilon
    (against ONNX Runtime's float32 result); otherwise by its own dtype."""
    narrow = STORAGE[precision]
    return OutputOrigin(narrow=narrow, precision=precision) if requested and narrow else OutputOrigin()


def judged_as(precision: str, requested: bool, outputs: Mapping[str, str]) -> dict[str, OutputOrigin]:
    """judged_origin for each float32 output; `outputs`: name -> dtype."""
    origin = judged_origin(precision, requested)
    return {name: origin for name, dtype in outputs.items() if dtype == "float32" and origin.precision}


def report_section(precision: str, requested: bool, storage_dtypes: tuple[str, ...], graph: Graph,
                   weights: Iterable[str]) -> dict:
    """The report's `precision`: what was asked, the bytes of the `weights` (the constants kernels read) by storage
    type, and the arithmetic."""
    stored: dict[str, int] = {}
    for value in set(weights):
        dtype, data = graph.type_of(value).dtype, graph.constants[value]
        stored[dtype] = stored.get(dtype, 0) + int(np.asarray(data).nbytes)
    return {"precision": precision, "requested": requested, "weights_bytes_by_dtype": stored,
            "storage_dtypes": list(storage_dtypes), "accumulation": "float32",
            "judged": (f"outputs judged at {STORAGE[precision]}'s tolerance against the float32 reference"
                       if requested and STORAGE[precision] else "each output at its own dtype's tolerance")}
