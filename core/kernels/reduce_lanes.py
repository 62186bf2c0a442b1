"""Reductions over the contiguous last axis, split into vector lanes (a compute-level rfactor).

A float reduction along the innermost axis is a serial chain of adds (or max/min): LLVM may not
reassociate it, so it runs one scalar operation per element at the add latency (~2 ns per element
on znver3: Softmax rows, LayerNormalization, ReduceMean). Here it is computed in two stages:

    partial[..., l] = combine over c of x[..., c * LANES + l]        (l < LANES: spatial, contiguous)
    result[...]     = combine over r of (partial[..., r] if r < LANES else x[..., main + r - LANES])

The first stage reduces over an outer axis with the lanes inside, the shape `reduce_stage` already
vectorizes (`inner_spatial` = 1); the second folds the LANES partials and the ragged tail (n % LANES
elements) in a short scalar loop. The association order changes, so float results may differ from
a left-to-right sum in the last bits, as they do between any two BLAS/ONNX Runtime builds.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..te import tensor as te
from ..tir.expr import Expr, const, maximum, minimum, select
from .common import prod

LANES = 32  # four AVX2 vectors of float32: four independent accumulator chains hide the add latency
MIN_EXTENT = 2 * LANES  # shorter rows keep the plain loop (the second stage would be most of the work)
_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min}


def lane_split_applies(x: te.Tensor, axes: Sequence[int], combiner: str) -> bool:
    """Float32 sum/max/min over exactly the last axis, long enough to fill the lanes twice."""
    return (list(axes) == [x.ndim - 1] and x.dtype == "float32" and combiner in _REDUCERS
            and isinstance(x.shape[-1], int) and x.shape[-1] >= MIN_EXTENT)


def trailing_axes_flat(x: te.Tensor, axes: Sequence[int], keepdims: bool, combiner: str) -> bool:
    """Float32 sum/max/min over several trailing axes (a whole tensor: DynamicQuantizeLinear's range), without
    kept dims: contiguous, so they reduce as one flattened last axis (`flat_shape`)."""
    trailing = len(axes) > 1 and list(axes) == list(range(x.ndim - len(axes), x.ndim))
    sizes = x.shape[x.ndim - len(axes):]
    return (trailing and not keepdims and x.dtype == "float32" and combiner in _REDUCERS
            and all(isinstance(d, int) for d in sizes) and prod(sizes) >= MIN_EXTENT)


def flat_shape(x: te.Tensor, axes: Sequence[int]) -> tuple[tuple, Callable[[list[Expr]], list[Expr]]]:
    """(x's shape with `axes` (trailing) flattened into one, and the map from its index to x's)."""
    sizes, kept = x.shape[x.ndim - len(axes):], x.ndim - len(axes)

    def unflatten(idx: list[Expr]) -> list[Expr]:
        *rest, flat = idx
        strides = [prod(sizes[k + 1:]) for k in range(len(sizes))]
        return [*rest, *((flat // stride) % size if k else flat // stride
                         for k, (stride, size) in enumerate(zip(strides, sizes)))]

    return tuple(x.shape[:kept]) + (prod(sizes),), unflatten


def lane_split_reduce(x: te.Tensor, keepdims: bool, combiner: str, name: str,
                      read: Callable[[list[Expr]], Expr], tag: str, shape: Sequence = ()) -> te.Tensor:
    """`combiner` of `read(index)` over the last axis of `x` (or of `shape`, x's with trailing axes flattened:
    `read` then takes its indices) (see the module docstring); both stages carry `tag`, so the op's schedule
    treats them as its reductions."""
    *outer, n = shape or x.shape
    chunks = n // LANES
    main, tail = chunks * LANES, n - chunks * LANES
    reducer = _REDUCERS[combiner]

    def partial_body(*idx: Expr) -> Expr:
        *rest, lane = idx
        rc = te.reduce_axis(chunks, "rc")
        return reducer(read([*rest, rc.var * LANES + lane]), [rc])

    partial = te.compute(tuple(outer) + (LANES,), partial_body, name=f"{name}_lanes", tag=tag,
                         attrs={"inner_spatial": 1})

    def total_body(*idx: Expr) -> Expr:
        rest = list(idx[:len(outer)])
        rl = te.reduce_axis(LANES + tail, "rl")
        lane_value = partial(*rest, minimum(rl.var, const(LANES - 1, "int64")))
        if not tail:
            return reducer(lane_value, [rl])
        # Both arms' indices stay in range (clamped), so evaluating either is safe.
        tail_value = read([*rest, const(main, "int64") + maximum(rl.var - LANES, const(0, "int64"))])
        return reducer(select(rl.var < LANES, lane_value, tail_value), [rl])

    shape = tuple(outer) + ((1,) if keepdims else ())
    return te.compute(shape, total_body, name=name, tag=tag, attrs={"inner_spatial": 0})
