"""Shape buckets: the concrete input shapes one artifact is compiled for, from the declared ranges.

Ranged dimensions that share an ONNX dim_param (input_ids and attention_mask's "batch") are one
variable; each bucket gives every variable one of its sizes (the cartesian product, smallest first, the
all-upper-bounds bucket last). A variable that is zero-padded or masked (core/graph/padding.py,
core/driver/bucket_masks.py, decided on the all-upper-bounds graph) runs every size in its range in a bucket
at least as large, so it needs only its upper bound (plus the sizes a step or a list names, as specializations);
the others must match a bucket exactly at run time, and only they multiply the count of buckets.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

import onnx

from ..errors import ShapeError
from ..frontend.onnx_values import declared_dims
from .shape_ranges import Dim, DimRange, normalize_shapes, shape_text

MAX_BUCKETS = 64  # compiles of the whole model per artifact, when dims that must match exactly multiply them
# Shapes the default specializations of padded and masked dims may add up to, with the exact-size buckets: a size
# runs in the smallest compiled shape that holds it, whose loops still run to that shape (not yet to the run-time
# length), so a few sizes spread over the range keep small shapes near a static compile's speed.
DEFAULT_SHAPES = 8
LENGTH_CLASSES = 6  # buckets length_classes may add for masked variables, beyond DEFAULT_SHAPES


@dataclass(frozen=True)
class ShapeVariable:
    """One ranged size: its name (the model's dim_param, else INPUT[AXIS]), range, the dims it sets and the sizes
    compiled for it (the range's exact-match sizes unless the plan says otherwise)."""

    name: str
    range: DimRange
    dims: tuple[tuple[str, int], ...]  # (input name, axis), in input order
    sizes: tuple[int, ...] = ()

    def __post_init__(self):
        if not self.sizes:
            object.__setattr__(self, "sizes", self.range.sizes())


@dataclass(frozen=True)
class BucketPlan:
    inputs: tuple[str, ...]  # every model input, in order
    base: Mapping[str, tuple[Optional[int], ...]]  # per input: fixed sizes, None where a variable sets it
    variables: tuple[ShapeVariable, ...]
    buckets: tuple[tuple[int, ...], ...]  # per bucket, each variable's size; ascending, all-hi last
    padded: frozenset[str] = field(default_factory=frozenset)  # variables zero-padded into a larger bucket
    # (input, axis) -> the variables whose sizes add up to that dim, plus a constant (a mask's
    # "past_sequence_length + sequence_length", or "past_sequence_length + 1")
    derived: Mapping[tuple[str, int], tuple[tuple[int, ...], int]] = field(default_factory=dict)
    masked: frozenset[str] = field(default_factory=frozenset)  # run at a bucket's size with a run-time length

    def var_of(self, name: str, axis: int) -> Optional[int]:
        for k, var in enumerate(self.variables):
            if (name, axis) in var.dims:
                return k
        return None

    def terms_of(self, name: str, axis: int) -> tuple[tuple[int, ...], int]:
        """The variables adding up to dim `axis` of input `name` and a constant (one variable and 0 for a
        plain ranged dim, several for a derived one)."""
        var = self.var_of(name, axis)
        return ((var,), 0) if var is not None else self.derived.get((name, axis), ((), 0))

    def dim_size(self, name: str, axis: int, sizes) -> int:
        variables, constant = self.terms_of(name, axis)
        return constant + sum(sizes[v] for v in variables)

    def input_shapes(self, bucket: int) -> dict[str, tuple[int, ...]]:
        sizes = self.buckets[bucket]
        return {name: tuple(self.dim_size(name, a, sizes) if d is None else d for a, d in enumerate(dims))
                for name, dims in self.base.items()}

    def bounds(self, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(smallest, largest) shape of input `name`."""
        lows = [v.range.lo for v in self.variables]
        lo = tuple(self.dim_size(name, a, lows) if d is None else d for a, d in enumerate(self.base[name]))
        return lo, self.input_shapes(len(self.buckets) - 1)[name]

    def stretchable(self, var: ShapeVariable) -> bool:
        """Whether sizes between buckets run in the next bucket (padded, or masked by run-time lengths)."""
        return var.name in self.padded or var.name in self.masked

    def resized(self, sizes: Mapping[str, tuple[int, ...]], limit: Optional[int] = None) -> "BucketPlan":
        """The plan with the variables named in `sizes` compiled at those sizes (the others at their range's
        exact-match sizes) and its buckets remade, smallest first; ShapeError past `limit` buckets."""
        variables = tuple(replace(v, sizes=tuple(sorted(sizes.get(v.name, v.range.sizes())))) for v in self.variables)
        count = 1
        for v in variables:
            count *= len(v.sizes)
        if limit is not None and count > limit:
            raise ShapeError(f"the declared ranges make {count} shape buckets "
                             f"({' x '.join(f'{v.name}: {len(v.sizes)}' for v in variables if len(v.sizes) > 1)}); "
                             f"at most {limit}: narrow a range, use a larger step or list fewer sizes")
        plan = replace(self, variables=variables, buckets=())
        return replace(plan, buckets=tuple(sorted(itertools.product(*(v.sizes for v in variables)), key=plan._volume)))

    def with_buckets(self, combos) -> "BucketPlan":
        """The plan with the size combinations `combos` compiled too (buckets kept smallest first)."""
        return replace(self, buckets=tuple(sorted(set(self.buckets) | set(combos), key=self._volume)))

    def _volume(self, combo) -> tuple:
        """A bucket's order: the elements of its inputs (kiln_shaped.c runs the first bucket that holds a shape)."""
        total = 0
        for name, dims in self.base.items():
            n = 1
            for a, d in enumerate(dims):
                n *= self.dim_size(name, a, combo) if d is None else d
            total += n
        return (total, combo)

    def describe(self) -> dict[str, Any]:
        """The metadata/report form: variables with range, sizes and padding; each input's min/max shape."""
        return {"variables": [{"name": v.name, "range": str(v.range), "sizes": list(v.sizes),
                               "padded": v.name in self.padded, "masked": v.name in self.masked,
                               "dims": [{"input": n, "axis": a} for n, a in v.dims]}
                              for v in self.variables],
                "inputs": [{"name": n, "min_shape": list(self.bounds(n)[0]), "max_shape": list(self.bounds(n)[1])}
                           for n in self.inputs],
                "buckets": [self.input_shapes(b) for b in range(len(self.buckets))]}


def _model_inputs(proto: onnx.ModelProto) -> dict[str, Optional[list]]:
    initializers = {t.name for t in proto.graph.initializer}
    return {i.name: declared_dims(i.type.tensor_type) if i.type.HasField("tensor_type") else None
            for i in proto.graph.input if i.name not in initializers}


def plan_buckets(proto: onnx.ModelProto, input_shapes: Optional[Mapping[str, Any]]) -> Optional[BucketPlan]:
    """The buckets of `input_shapes` (compile()'s argument, with ranges) for `proto`; None when nothing is
    ranged. ShapeError for a rank mismatch, a range on a dim the model fixes, or ranges that disagree."""
    shapes = normalize_shapes(input_shapes)
    if not any(isinstance(d, DimRange) for dims in shapes.values() for d in dims):
        return None
    declared = _model_inputs(proto)
    unknown = sorted(set(shapes) - set(declared))
    if unknown:
        raise ShapeError(f"input shapes name unknown inputs {unknown}; the model's inputs are {list(declared)}")
    variables: dict[str, tuple[DimRange, list[tuple[str, int]]]] = {}
    base: dict[str, tuple[Optional[int], ...]] = {}
    fixed_params = {declared[n][a]: d for n, dims in shapes.items() if declared.get(n) is not None
                    for a, d in enumerate(dims) if isinstance(d, int) and isinstance(declared[n][a], str)}
    for name, dims in declared.items():
        given = shapes.get(name)
        if given is None:
            continue
        if dims is not None and len(dims) != len(given):
            raise ShapeError(f"input shape {name}={shape_text(given)} has rank {len(given)}, but the model declares "
                             f"rank {len(dims)} {dims}")
        fixed: list[Optional[int]] = []
        for axis, dim in enumerate(given):
            model_dim = dims[axis] if dims is not None else "?"
            if isinstance(dim, int):
                if isinstance(model_dim, int) and model_dim != dim:
                    raise ShapeError(f"input shape {name}={shape_text(given)} contradicts the model's fixed shape "
                                     f"{dims} at dim {axis}")
                fixed.append(dim)
                continue
            if isinstance(model_dim, int):
                raise ShapeError(f"input {name!r} dim {axis} is fixed to {model_dim} by the model; it cannot take "
                                 f"the range {dim}")
            key = model_dim if model_dim != "?" else f"{name}[{axis}]"
            known = variables.setdefault(key, (dim, []))
            if known[0] != dim:
                raise ShapeError(f"inputs share the dimension {key!r} but declare different ranges for it: "
                                 f"{known[0]} and {dim}")
            known[1].append((name, axis))
            fixed.append(None)
        base[name] = tuple(fixed)
    # An input left out whose symbolic dims are all variables (attention_mask beside input_ids), dims given
    # elsewhere or sums of them ("past_sequence_length + sequence_length") follows them.
    derived_names: dict[tuple[str, int], tuple[tuple[str, ...], int]] = {}
    for name, dims in declared.items():
        terms = {a: _sum_terms(d, variables, fixed_params) for a, d in enumerate(dims or ()) if isinstance(d, str)}
        if name in base or dims is None or any(t is None for t in terms.values()):
            continue
        fixed = []
        for axis, d in enumerate(dims):
            names = terms.get(axis, ())
            constant = sum(fixed_params.get(t, 0) if not t.isdigit() else int(t) for t in names)
            ranged = [t for t in names if t in variables]
            if isinstance(d, int) or not ranged:
                fixed.append(d if isinstance(d, int) else constant)
            elif len(ranged) == 1 and not constant:
                variables[ranged[0]][1].append((name, axis))
                fixed.append(None)
            else:
                derived_names[(name, axis)] = (tuple(ranged), constant)
                fixed.append(None)
        base[name] = tuple(fixed)
    order = list(declared)
    vars_ = tuple(ShapeVariable(k, r, tuple(sorted(dims, key=lambda na: (order.index(na[0]), na[1]))))
                  for k, (r, dims) in variables.items())
    index = {v.name: k for k, v in enumerate(vars_)}
    derived = {key: (tuple(index[t] for t in names), constant) for key, (names, constant) in derived_names.items()}
    inputs_in_order = tuple(n for n in order if n in base)
    if len(inputs_in_order) != len(order):
        missing = [n for n in order if n not in base]
        raise ShapeError(f"with ranged input shapes, every input needs a shape: give one for {missing}")
    return BucketPlan(inputs_in_order, base, vars_, (), derived=derived).resized({})


def default_specializations(ranges: Mapping[str, DimRange], budget: int) -> dict[str, tuple[int, ...]]:
    """Each padded or masked variable's compiled sizes when the user named none: powers of two, thinned (the
    variable with the most sizes first, the narrower range on a tie) until their product is at most `budget`,
    keeping each one's smallest size and hi as long as two sizes fit."""
    strides = {name: 1 for name in ranges}

    def sizes(name: str) -> tuple[int, ...]:
        return ranges[name].thinned(strides[name])

    def count() -> int:
        n = 1
        for name in ranges:
            n *= len(sizes(name))
        return n

    while count() > max(1, budget):
        name = max(ranges, key=lambda k: (len(sizes(k)), -ranges[k].hi, k))  # a tie: the narrower range first
        before = sizes(name)
        while strides[name] and sizes(name) == before:  # the next stride that drops a size; past two sizes: hi alone
            strides[name] = 0 if len(before) <= 2 else strides[name] + 1
    return {name: sizes(name) for name in ranges}


def length_classes(plan: BucketPlan, names, budget: int = LENGTH_CLASSES) -> tuple[tuple[int, ...], ...]:
    """Buckets that specialize the masked variables `names` (left to Kiln's defaults) at the powers of 4 (from 4)
    in their range below hi not compiled yet, every other variable at its smallest compiled size (a decoder's
    one-token step at batch 1 over a short past): a short length then runs kernels compiled, scheduled and
    parallelized for a size near its own, as a static compile's, instead of the largest bucket's with run-time
    bounds; kernels that do not depend on it are shared with the other buckets (built once). At most `budget` of
    them (the smallest classes of the variable with the most go first); none the plan has already."""
    smallest = tuple(v.sizes[0] for v in plan.variables)
    classes: dict[int, list[int]] = {}
    for k, var in enumerate(plan.variables):
        if var.name in names and not var.range.names_sizes:
            p, found = 4, []
            while p < var.range.hi:
                if p >= var.range.lo and p not in var.sizes:
                    found.append(p)
                p *= 4
            if found:
                classes[k] = found
    while sum(map(len, classes.values())) > max(0, budget):
        k = max(classes, key=lambda k: (len(classes[k]), plan.variables[k].range.hi))
        classes[k] = classes[k][1:]
    combos = [smallest[:k] + (p,) + smallest[k + 1:] for k, found in classes.items() for p in found]
    return tuple(c for c in combos if c not in plan.buckets)


def _sum_terms(dim_param: str, variables: Mapping, fixed: Mapping) -> Optional[tuple[str, ...]]:
    """A dim_param as the names (or digits) it adds up ("past_sequence_length + 1"), when each is a variable,
    a dim given a size elsewhere or a number; None otherwise."""
    terms = tuple(t.strip() for t in dim_param.split("+"))
    return terms if all(t in variables or t in fixed or t.isdigit() for t in terms) else None


__all__ = ["ShapeVariable", "BucketPlan", "plan_buckets", "length_classes", "MAX_BUCKETS", "Dim"]
