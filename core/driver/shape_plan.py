"""The shapes one compile builds for, asked by the pipeline at each stage: a single point (static shapes) or the
buckets of declared ranges (one library over every bucket, validated at and between its buckets)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import onnx

from ..codegen.llvm_types import itemsize as element_bytes
from ..errors import ShapeError, ValidationInputError
from ..frontend import import_onnx
from ..frontend.inspect import check_graph_sizes
from ..graph.ir import Graph
from ..graph.padding import NotPaddable, padded_output_axes
from ..lowering.bucketed import merge_buckets
from ..lowering.executable import Executable
from ..lowering.run_time_layouts import layout_table, planned_layouts, with_run_time_layouts
from ..target import Target
from .bucket_masks import MaskedBuckets, between_bucket_samples, find_masked
from .buckets import (DEFAULT_SHAPES, LENGTH_CLASSES, MAX_BUCKETS, BucketPlan, default_specializations, length_classes,
                      plan_buckets)
from .numerics import ValidationOptions
from .shape_ranges import check_ranges_supported, has_ranges
from .validate import index_bounds, random_inputs

MAX_RANK = 16  # kiln_shaped.c's limit


@dataclass(frozen=True)
class Linked:
    """What the build stage links into the library: its functions, the call plan, the weights, and the executable
    whose kernels the report and the profile describe (the largest bucket's)."""

    funcs: tuple
    plan: Any
    weights: bytes
    arena_bytes: int
    top: Executable


def shape_plan(source, data: bytes, input_shapes: Optional[Mapping[str, Any]]):
    """StaticShapes, or BucketedShapes when `input_shapes` declares a range (ShapeError for bad ranges)."""
    if not has_ranges(input_shapes):
        return StaticShapes(source, input_shapes)
    return BucketedShapes(source, plan_buckets(onnx.load_from_string(data), input_shapes))


def io_info(graph: Graph, names) -> list[dict]:
    return [{"name": n, "shape": list(graph.type_of(n).shape), "dtype": graph.type_of(n).dtype} for n in names]


class StaticShapes:
    """One point: the model's shapes, with `input_shapes` fixing symbolic dims."""

    ranged = False
    no_bisect = ""

    def __init__(self, source, input_shapes):
        self.source, self.input_shapes = source, input_shapes

    def refuse(self, target: Target, backend, checks: ValidationOptions) -> None:
        """Nothing: every target and option takes static shapes."""

    def import_graphs(self) -> list[Graph]:
        graph = import_onnx(self.source, input_shapes=self.input_shapes)
        check_graph_sizes(graph)  # an absurd input shape fails here, not after a whole build
        return [graph]

    def samples(self, checks: ValidationOptions, graphs: Sequence[Graph]):
        """The user's samples, checked before minutes of building (None: validate() draws seeded random ones)."""
        return checks.samples(graphs[-1]) if checks.enabled else None

    def link(self, executables: Sequence[Executable], graphs: Sequence[Graph]) -> Linked:
        (exe,) = executables
        return Linked(exe.funcs, exe.plan, exe.weights, exe.memory.arena_bytes, exe)

    def user_inputs(self, graph: Graph) -> tuple[str, ...]:
        return graph.inputs

    def benchmark_feeds(self, graph: Graph) -> dict[str, np.ndarray]:
        return random_inputs(graph, 1, index_bounds(graph))

    def metadata(self) -> dict:
        return {}

    def report(self, linked: Linked) -> dict:
        return {}

    def shapes_of(self, samples) -> dict:
        return {}


class BucketedShapes:
    """Declared ranges: every bucket compiled, linked into one library with one weights file; the variables that
    can be zero-padded, or run on masks with a run-time length, serve the sizes between buckets."""

    ranged = True
    no_bisect = "a shape-bucketed library is compared as a whole"

    def __init__(self, source, plan: BucketPlan):
        self.source, self.plan = source, plan
        self.carried: dict = {}
        self.refused: dict = {}
        self.masks = MaskedBuckets(plan)
        self.gathered: dict = {}

    def refuse(self, target: Target, backend, checks: ValidationOptions) -> None:
        """What ranges cannot be combined with yet, before anything is built (the API asks the same at job creation)."""
        check_ranges_supported(bisect=bool(checks.bisect))

    def import_graphs(self) -> list[Graph]:
        plan = self.plan
        top = import_onnx(self.source, input_shapes=plan.input_shapes(len(plan.buckets) - 1))
        check_graph_sizes(top)  # the largest bucket: an absurd range fails before any other bucket is imported
        deep = [n for n in top.inputs + top.outputs if len(top.type_of(n).shape) > MAX_RANK]
        if deep:
            raise ShapeError(f"input-shape ranges support tensors of rank {MAX_RANK} at most; {deep} have more")
        self.gathered = index_bounds(top)  # the ids each input indexes (masked graphs gather through masks)
        at_top, carried, refused = find_padded(plan.resized({v.name: (v.range.hi,) for v in plan.variables}), [top])
        masks = find_masked(at_top, self.source, refused)
        stretch, at_hi, found_at_top = masks.plan.padded | masks.plan.masked, set(), (carried, masks)
        while True:  # once more with hi alone for a variable that a smaller specialization could not pad or mask
            resized = self._stretched(plan, stretch, found_at_top[1].refused, at_hi, found_at_top[1].plan.masked)
            if resized.buckets == at_top.buckets:
                imported, (carried, masks) = [top], found_at_top
                break
            imported = [import_onnx(self.source, input_shapes=resized.input_shapes(b))
                        for b in range(len(resized.buckets) - 1)] + [top]
            resized, carried, refused = find_padded(resized, imported)
            masks = find_masked(resized, self.source, refused)
            lost = stretch - at_hi - masks.plan.padded - masks.plan.masked
            if not lost:
                break
            at_hi |= lost
        self.carried, self.masks = carried, masks
        self.plan, self.refused = masks.plan, dict(masks.refused)
        layouts = planned_layouts(masks.plan, masks.outputs)
        return [with_run_time_layouts(g, layouts) for g in masks.graphs] or imported

    def _stretched(self, plan: BucketPlan, stretch: set, refused: Mapping[str, str], at_hi: set,
                   masked: frozenset = frozenset()) -> BucketPlan:
        """`plan` with each variable padded or masked at the upper bounds (`stretch`) compiled at the sizes its step
        or list names, at hi alone (`at_hi`), else at default specializations within DEFAULT_SHAPES, plus the
        length classes of the `masked` ones (buckets.length_classes); ShapeError when the variables that must match
        a size exactly make too many buckets."""
        chosen = {v.name: (v.range.hi,) if v.name in at_hi else v.range.sizes()
                  for v in plan.variables if v.name in stretch and (v.name in at_hi or v.range.names_sizes)}
        fixed = 1
        for v in plan.variables:
            fixed *= len(chosen.get(v.name, (0,) if v.name in stretch else v.range.sizes()))
        chosen.update(default_specializations({v.name: v.range for v in plan.variables
                                               if v.name in stretch and v.name not in chosen}, DEFAULT_SHAPES // fixed))
        try:
            resized = plan.resized(chosen, MAX_BUCKETS)
            return resized.with_buckets(length_classes(resized, masked - at_hi, LENGTH_CLASSES))
        except ShapeError as err:
            raise ShapeError(f"{err}. Sizes must match a compiled one exactly where no padding or run-time length "
                             f"covers them: " + "; ".join(f"{k}: {v}" for k, v in refused.items())) from None

    def samples(self, checks: ValidationOptions, graphs: Sequence[Graph]):
        """The user's samples, at any shapes in range (an input may choose a path only some shapes run: silero VAD's
        sample rate); else one random sample at every bucket's shapes and at sizes between buckets."""
        if checks.enabled and checks.inputs:
            return self._user_samples(checks, graphs[-1])
        top = self._feeds(graphs[-1])
        return [self._feeds(g) for g in graphs[:-1]] + [top] + between_bucket_samples(self.plan, top)

    def _user_samples(self, checks: ValidationOptions, top: Graph) -> list[dict[str, np.ndarray]]:
        inputs = self.user_inputs(top)
        samples = checks.samples(top, {n: self.plan.base[n] for n in inputs})
        for number, sample in enumerate(samples):
            for name in inputs:
                lo, hi = self.plan.bounds(name)
                shape = sample[name].shape
                if not all(a <= d <= b for d, a, b in zip(shape, lo, hi)):
                    raise ValidationInputError(f"validation sample {number + 1}: input {name!r} has shape "
                                               f"{list(shape)}, outside its declared range {list(lo)}..{list(hi)}")
        return samples

    def _feeds(self, graph: Graph) -> dict[str, np.ndarray]:
        feeds = random_inputs(graph, 0, self.gathered)
        return {name: feeds[name] for name in self.user_inputs(graph)}

    def link(self, executables: Sequence[Executable], graphs: Sequence[Graph]) -> Linked:
        tables = _tables(self.plan, graphs, self.carried, self.masks, [e.run_time_layouts for e in executables])
        merged = merge_buckets(executables, tables,
                               hidden_inputs=len(self.masks.length_variables))
        top = dataclasses.replace(merged.buckets[-1], weights=merged.weights)
        return Linked(merged.funcs, merged.plan, merged.weights, merged.plan.arena_bytes, top)

    def user_inputs(self, graph: Graph) -> tuple[str, ...]:
        """The model's inputs (the graph's without the run-time lengths that follow them)."""
        return graph.inputs[:len(graph.inputs) - len(self.masks.length_variables)]

    def benchmark_feeds(self, graph: Graph) -> dict[str, np.ndarray]:
        return self._feeds(graph)

    def describe(self) -> dict:
        return {**self.plan.describe(), "padded_outputs": self.carried, "not_padded": self.refused,
                "masked_outputs": {o: {a: {"variables": c, "constant": k} for a, (c, k) in axes.items()}
                                   for o, axes in self.masks.outputs.items()}}

    def metadata(self) -> dict:
        return {"dynamic_shapes": self.describe()}

    def report(self, linked: Linked) -> dict:
        return {"dynamic_shapes": {**self.describe(), "kernels_compiled": len(linked.funcs),
                                   "kernel_calls": sum(len(p.calls) for p in linked.plan.plans)}}

    def shapes_of(self, samples) -> dict:
        return {"shapes": [{n: list(a.shape) for n, a in s.items()} for s in samples]}


def find_padded(plan: BucketPlan, graphs: list[Graph]
                ) -> tuple[BucketPlan, dict[str, dict[str, list[int]]], dict[str, str]]:
    """The plan with the variables that may be zero-padded (core/graph/padding.py on every bucket's imported
    graph, the largest last); per padded variable the output axes it carries; per other variable why not."""
    padded, carried, refused = set(), {}, {}
    for var in plan.variables:
        if len(var.sizes) == 1 and var.range.lo == var.range.hi:
            continue
        seeds: dict[str, set[int]] = {}
        for name, axis in var.dims:
            seeds.setdefault(name, set()).add(axis)
        try:
            name, axis = var.dims[0]
            for graph in graphs:  # each bucket padded into (above lo) has its own folded shapes and indices
                if graph is graphs[-1] or graph.type_of(name).shape[axis] > var.range.lo:
                    outputs = padded_output_axes(graph, {n: frozenset(a) for n, a in seeds.items()})
        except NotPaddable as why:
            refused[var.name] = str(why)
            continue
        padded.add(var.name)
        carried[var.name] = {o: sorted(a) for o, a in outputs.items() if a}
    return replace(plan, padded=frozenset(padded)), carried, refused


def _tables(plan: BucketPlan, graphs: Sequence[Graph], carried: dict[str, dict[str, list[int]]],
            masks: MaskedBuckets, layouts: Sequence[Mapping[str, tuple]]) -> dict:
    """The dispatch tables of core/codegen/bucket_entry.py."""
    top, count = graphs[-1], len(plan.variables)
    inputs = top.inputs[:len(top.inputs) - len(masks.length_variables)]
    in_var, in_fixed, in_coef, in_const, out_var, out_coef, out_const, out_shapes = [], [], [], [], [], [], [], []
    for name in inputs:
        for axis, size in enumerate(top.type_of(name).shape):
            var = plan.var_of(name, axis)
            variables, constant = plan.derived.get((name, axis), ((), 0))
            in_var.append(var if var is not None else -2 if variables else -1)  # -2: a sum of variables
            in_fixed.append(size)
            in_coef += [variables.count(k) for k in range(count)]
            in_const.append(constant)
    index = {v.name: k for k, v in enumerate(plan.variables)}
    for name in top.outputs:
        axes_var = {a: index[v] for v, outs in carried.items() for a in outs.get(name, [])}
        lengths = masks.outputs.get(name, {})
        for axis in range(len(top.type_of(name).shape)):
            coefs, constant = lengths.get(axis, ({}, 0))
            out_var.append(-2 if axis in lengths else axes_var.get(axis, -1))  # -2: its run-time length
            out_coef += [coefs.get(v.name, 0) for v in plan.variables]
            out_const.append(constant)
    for graph, sizes in zip(graphs, plan.buckets):
        for name in graph.outputs:  # the table holds out_ndim dims per output and bucket: one rank for all buckets
            shape, top_shape = graph.type_of(name).shape, top.type_of(name).shape
            if len(shape) != len(top_shape):
                at = ", ".join(f"{v.name}={s}" for v, s in zip(plan.variables, sizes))
                raise ShapeError(f"output {name!r} has rank {len(shape)} at {at} but rank {len(top_shape)} at the "
                                 f"largest shapes (an If branch taken at some sizes only?); one artifact for the "
                                 f"declared ranges needs one rank per output: narrow the ranges or compile each "
                                 f"case on its own")
            out_shapes += list(shape)
    itemsize = lambda n: element_bytes(top.type_of(n).dtype)  # noqa: E731
    in_ranks, out_ranks = [len(top.type_of(n).shape) for n in inputs], [len(top.type_of(n).shape) for n in top.outputs]
    return {
        "in_layout": ("i32", layout_table(layouts, inputs, in_ranks)),
        "out_layout": ("i32", layout_table(layouts, top.outputs, out_ranks)),
        "num_buckets": ("i32", len(plan.buckets)), "num_vars": ("i32", len(plan.variables)),
        "in_ndim": ("i32", tuple(len(top.type_of(n).shape) for n in inputs)),
        "out_ndim": ("i32", tuple(len(top.type_of(n).shape) for n in top.outputs)),
        "in_var": ("i32", tuple(in_var)), "in_fixed": ("i64", tuple(in_fixed)),
        "out_var": ("i32", tuple(out_var)), "out_shapes": ("i64", tuple(out_shapes)),
        "in_coef": ("i64", tuple(in_coef)), "in_const": ("i64", tuple(in_const)),
        "out_coef": ("i64", tuple(out_coef)), "out_const": ("i64", tuple(out_const)),
        "var_mode": ("i32", tuple(1 if v.name in plan.padded else 2 if v.name in plan.masked else 0
                                  for v in plan.variables)),
        "num_lengths": ("i32", len(masks.length_variables)), "length_var": ("i32", masks.length_variables),
        "var_lo": ("i64", tuple(v.range.lo for v in plan.variables)),
        "var_hi": ("i64", tuple(v.range.hi for v in plan.variables)),
        "bucket_sizes": ("i64", tuple(s for combo in plan.buckets for s in combo)),
        "in_itemsize": ("i32", tuple(itemsize(n) for n in inputs)),
        "out_itemsize": ("i32", tuple(itemsize(n) for n in top.outputs)),
        "in_names": ("str", tuple(inputs)), "var_names": ("str", tuple(v.name for v in plan.variables)),
    }


def shapes_option(input_shapes: Optional[Mapping[str, Any]]) -> dict:
    """The manifest's `input_shapes`: JSON, ranges in their text form ("1..8"), read back by compile()."""
    return {k: [d if isinstance(d, int) else str(d) for d in v] for k, v in sorted((input_shapes or {}).items())}


__all__ = ["BucketedShapes", "Linked", "StaticShapes", "find_padded", "io_info", "shape_plan", "shapes_option"]
