"""Shape variables that cannot be zero-padded (a sequence under attention, a KV cache's length) run at a
bucket's size with their actual size as a run-time length: every bucket is imported again with those dims
as bounded values (core/graph/length_inputs.py); when an op cannot take a run-time length, the variables
keep needing an exact bucket size, and the reason is reported."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..frontend import import_onnx_with_lengths
from ..graph.ir import Graph, TensorType
from ..graph.length_inputs import Affine
from ..graph.padding import padded_value_axes
from .buckets import BucketPlan


@dataclass(frozen=True)
class MaskedBuckets:
    plan: BucketPlan  # with `masked` set
    graphs: tuple[Graph, ...] = ()  # every bucket imported with length inputs (empty when none is masked)
    outputs: Mapping[str, Mapping[int, Affine]] = field(default_factory=dict)  # output -> axis -> its length
    refused: Mapping[str, str] = field(default_factory=dict)  # variable -> why it must match a bucket exactly

    padded_lengths: tuple[int, ...] = ()  # the padded variables whose length the graphs take too, after the masked

    @property
    def length_variables(self) -> tuple[int, ...]:
        """The variables (indices) whose length the graphs take as inputs, in the graphs' input order."""
        return tuple(k for k, v in enumerate(self.plan.variables) if v.name in self.plan.masked) + self.padded_lengths


def find_masked(plan: BucketPlan, source, refused: Mapping[str, str]) -> MaskedBuckets:
    """The variables of `refused` (not paddable) that run on masks, with each bucket's graph; all or none."""
    candidates = [k for k, v in enumerate(plan.variables)  # with sizes between (or below) its buckets
                  if v.name in refused and v.range.hi - v.range.lo >= len(v.sizes)]
    if not candidates:
        return MaskedBuckets(plan, refused=refused)
    names = {k: plan.variables[k].name for k in candidates}
    lengths: dict[str, dict[int, tuple[tuple[str, ...], int]]] = {}
    for name, dims in plan.base.items():
        for axis, fixed in enumerate(dims):
            variables, constant = plan.terms_of(name, axis)
            if fixed is not None or not any(v in names for v in variables):
                continue
            if not all(v in names for v in variables):
                return _refuse(plan, refused, f"dim {axis} of {name!r} adds a padded variable to a masked one")
            lengths.setdefault(name, {})[axis] = (tuple(names[v] for v in variables), constant)
    graphs, found = [], []
    try:
        for b, sizes in enumerate(plan.buckets):
            # a dim whose bucket size is at most its range's low end is always full in that bucket
            full = {names[k]: sizes[k] for k in candidates if sizes[k] <= plan.variables[k].range.lo}
            bucket_lengths = {name: kept for name, axes in lengths.items()
                              if (kept := {a: t for a, t in axes.items() if not set(t[0]) <= set(full)})}
            graph, lengths_out = import_onnx_with_lengths(source, plan.input_shapes(b), bucket_lengths,
                                                          {names[k]: sizes[k] for k in candidates},
                                                          {names[k]: plan.variables[k].range.lo for k in candidates})
            graphs.append(graph)
            found.append((lengths_out, full))
        outputs = _output_lengths(graphs, found)
    except (ShapeError, UnsupportedOpError) as err:  # the graph imported without lengths: these stay unmasked
        return _refuse(plan, refused, str(err))
    masked = frozenset(names.values())
    padded = tuple(k for k, v in enumerate(plan.variables) if v.name in plan.padded)
    graphs = [with_padded_lengths(graph, plan, sizes, padded) for graph, sizes in zip(graphs, plan.buckets)]
    return MaskedBuckets(replace(plan, masked=masked), tuple(graphs), outputs,
                         {k: v for k, v in refused.items() if k not in masked}, padded)


def with_padded_lengths(graph: Graph, plan: BucketPlan, sizes, padded: tuple[int, ...]) -> Graph:
    """`graph` (a bucket at `sizes`) taking each `padded` variable's actual size as one more length input, after
    the masked ones: its float values that carry the variable whole along an axis stop there
    (Graph.run_time_bounds: their rows past it are independent padding the runtime cuts off; not what flows into
    the masks' gathers through computed indices). Integer values keep
    every row: one may become a gather's indices, which padding rows must not make out of range."""
    inputs, types = list(graph.inputs), dict(graph.types)
    bounds = {value: tuple(axes) for value, axes in graph.run_time_bounds.items()}
    for k in padded:
        var = plan.variables[k]
        name = next(n for n in (f"{var.name}::length", *(f"{var.name}::length_{i}" for i in range(len(types))))
                    if n not in types)
        inputs.append(name)
        types[name] = TensorType((1,), "int64")
        seeds: dict[str, set[int]] = {}
        for value, axis in var.dims:
            seeds.setdefault(value, set()).add(axis)
        for value, axes in padded_value_axes(graph, {v: frozenset(a) for v, a in seeds.items()}).items():
            if not types[value].dtype.startswith(("float", "bfloat")):
                continue
            have = bounds.get(value, ())
            more = tuple((axis, name) for axis in sorted(axes)
                         if types[value].shape[axis] == sizes[k] and all(a != axis for a, _ in have))
            if more:
                bounds[value] = tuple(sorted(have + more))
    return graph.replace(inputs=tuple(inputs), types=types, run_time_bounds=bounds)


def _output_lengths(graphs: list[Graph], found: list[tuple[dict, dict[str, int]]]) -> dict[str, dict[int, Affine]]:
    """One length per output axis for every bucket: the one with the most variables, which each bucket's own
    must equal once its full variables (those at their bucket size) are put in."""
    general: dict[str, dict[int, Affine]] = {}
    for lengths, _ in found:
        for name, axes in lengths.items():
            for axis, affine in axes.items():
                known = general.setdefault(name, {}).setdefault(axis, affine)
                if len(affine[0]) > len(known[0]):
                    general[name][axis] = affine
    for graph, (lengths, full) in zip(graphs, found):
        for name, axes in general.items():
            for axis, (coefs, constant) in axes.items():
                rest = {v: c for v, c in coefs.items() if v not in full}
                expected = (rest, constant + sum(c * full[v] for v, c in coefs.items() if v in full))
                own = lengths.get(name, {}).get(axis, ({}, graph.type_of(name).shape[axis]))
                if own != expected:
                    raise ShapeError(f"output {name!r} axis {axis} has run-time lengths that differ between buckets")
    return general


def _refuse(plan: BucketPlan, refused: Mapping[str, str], why: str) -> MaskedBuckets:
    return MaskedBuckets(plan, refused={k: f"{v}; and run-time lengths: {why}" for k, v in refused.items()})


def cut_feeds(plan: BucketPlan, feeds: Mapping[str, np.ndarray], sizes) -> dict[str, np.ndarray]:
    """The largest bucket's `feeds` cut to the variables' `sizes` (derived dims follow)."""
    cut = {}
    for name, array in feeds.items():
        index = tuple(slice(0, plan.dim_size(name, a, sizes)) if d is None else slice(None)
                      for a, d in enumerate(plan.base[name]))
        cut[name] = np.array(array[index], order="C")  # ascontiguousarray makes a 0-d input 1-d
    return cut


def between_bucket_samples(plan: BucketPlan, top_feeds: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Per padded or masked variable, the largest bucket's inputs with that variable at sizes no bucket has (the
    first below the largest, one in the middle of the range, and its low end: an empty KV cache); then every such
    variable at its low end and every one in its middle at once."""
    samples = []
    top = plan.buckets[-1]
    stretched = [k for k, var in enumerate(plan.variables) if plan.stretchable(var)]
    lows, middles = list(top), list(top)
    for k in stretched:
        var = plan.variables[k]
        picks = [s for s in range(var.range.hi - 1, var.range.lo - 1, -1) if s not in var.sizes][:1]
        middle = (var.range.lo + var.range.hi) // 2 + 1  # past a power of two: between the old buckets
        for size in (middle, var.range.lo):
            if size < var.range.hi and size not in var.sizes and size not in picks:
                picks.append(size)
        for size in picks:
            samples.append(cut_feeds(plan, top_feeds, top[:k] + (size,) + top[k + 1:]))
        lows[k], middles[k] = var.range.lo, min(middle, var.range.hi)
    if len(stretched) > 1:
        samples += [cut_feeds(plan, top_feeds, tuple(sizes)) for sizes in (lows, middles)]
    return samples


__all__ = ["MaskedBuckets", "find_masked", "cut_feeds", "between_bucket_samples"]
