"""Einsum: the product of the inputs read at their letters, summed over the letters the output
drops (one reduce axis each); a repeated letter in one input reads its diagonal."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr
from .registry import register_compute


@register_compute("Einsum")
def einsum(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    if any(t is None for t in inputs):
        raise ShapeError("Einsum: an input is missing")
    terms, output = tuple(attrs["terms"]), str(attrs["output"])
    extents: dict[str, int] = {}
    for term, t in zip(terms, inputs):
        extents.update(zip(term, t.shape))
    summed = sorted({letter for term in terms for letter in term} - set(output))

    def body(*i: Expr) -> Expr:
        axes = [te.reduce_axis(extents[letter], f"r_{letter}") for letter in summed]
        at = dict(zip(output, i))
        at.update((letter, ax.var) for letter, ax in zip(summed, axes))
        product = None
        for term, t in zip(terms, inputs):
            read = t(*[at[letter] for letter in term])
            product = read if product is None else product * read
        return te.sum(product, axes) if axes else product

    return [te.compute(tuple(extents[letter] for letter in output), body, name="einsum", tag="reduce")]
