"""Einsum over explicit subscripts: one letter per input axis, the output's letters, every letter
not in the output summed over (the frontend expands ellipses and implicit outputs)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import NUMERIC_DTYPES, expect_dtype, expect_same_dtype


def letter_extents(op: str, terms: Sequence[str], shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    extents: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if len(term) != len(shape):
            raise ShapeError(f"{op}: subscripts {term!r} do not match an input of rank {len(shape)}")
        for letter, dim in zip(term, shape):
            if extents.setdefault(letter, dim) != dim:
                raise ShapeError(f"{op}: letter {letter!r} has extents {extents[letter]} and {dim}")
    return extents


def _einsum_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    equation = ",".join(attrs["terms"]) + "->" + attrs["output"]
    return [np.asarray(np.einsum(equation, *inputs)).astype(inputs[0].dtype)]


@register_op("Einsum", Pattern.OPAQUE, fold=_einsum_fold)
def _einsum(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    terms, output = attrs.get("terms"), attrs.get("output")
    if not isinstance(terms, tuple) or len(terms) != len(types) or not isinstance(output, str):
        raise ShapeError(f"Einsum: needs one subscript string per input and an output string, got {terms!r}, {output!r}")
    for t in types:
        expect_dtype("Einsum", t, NUMERIC_DTYPES)
    dtype = expect_same_dtype("Einsum", types)
    extents = letter_extents("Einsum", terms, [t.shape for t in types])
    if len(set(output)) != len(output) or any(letter not in extents for letter in output):
        raise ShapeError(f"Einsum: output subscripts {output!r} must be distinct letters of the inputs")
    return [TensorType(tuple(extents[letter] for letter in output), dtype)]
