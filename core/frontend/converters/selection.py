"""Element selection: Slice (ONNX clamping resolved statically), Split (one Slice per output),
Gather, GatherElements, GatherND, Pad, CenterCropPad, Trilu, EyeLike, OneHot, ReverseSequence and TopK."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx

from core.graph.bounded import arithmetic, entry_minus, length_constant, limit_length, parts_of, shape_operand
from core.graph.length_inputs import affine_length, always_negative, largest_length, simplest_length
from core.graph.run_time_entries import extremes

from .pad_runtime import pad_at_run_time, pads_at_run_time
from .registry import ConvertContext, converter


def clamp_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice rules for one axis -> (first index, element count)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    size = max(0, -(-(end - start) // step))
    return (start if size else 0), size


def emit_slice(ctx: ConvertContext, value: str, starts: Sequence[int], steps: Sequence[int],
               sizes: Sequence[int]) -> str:
    shape = ctx.builder.type_of(value).shape
    if all(s == 0 and t == 1 and n == d for s, t, n, d in zip(starts, steps, sizes, shape)):
        return value
    return ctx.emit1("Slice", [value], starts=tuple(starts), steps=tuple(steps), sizes=tuple(sizes))


def _slice(ctx: ConvertContext, starts, ends, axes, steps) -> str:
    shape = ctx.shape(0)
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [ctx.axis(a, rank, "axes") for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        ctx.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} do not line up")
    first, stride, count = [0] * rank, [1] * rank, list(shape)
    bounds = {part.axis: part for part in parts_of(ctx.builder.bounds.get(ctx.input(0)))}
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            ctx.fail("steps must not be 0")
        if axis in bounds and min(start, end) < 0:
            if len(axes) == 1 and start < 0 and step == 1 and end >= shape[axis]:
                return _last_entries(ctx, axis, -start, bounds[axis].length)
            ctx.unsupported(f"a slice counted from the end of axis {axis}, whose length is data-dependent")
        first[axis], count[axis] = clamp_slice(start, end, step, shape[axis])
        stride[axis] = step
    return emit_slice(ctx, ctx.input(0), first, stride, count)


def _last_entries(ctx: ConvertContext, axis: int, count: int, length: str) -> str:
    """x[-count:] along an axis whose valid length is `length` (a sequence that grows at run time: its last tokens)."""
    b = ctx.builder
    dim = ctx.shape(0)[axis]
    count = min(count, dim)
    first = arithmetic(b, "Max", arithmetic(b, "Sub", length, length_constant(b, count)), length_constant(b, 0))
    positions = arithmetic(b, "Add", first, b.add_constant(np.arange(count, dtype=np.int64), "position"))
    positions = arithmetic(b, "Min", positions, length_constant(b, max(dim - 1, 0)))
    result = ctx.emit1("Gather", [ctx.input(0), positions], axis=axis)
    limit_length(b, [result], axis, arithmetic(b, "Min", length, length_constant(b, count)))
    return result


def _int_list(value: np.ndarray | None) -> list[int] | None:
    return None if value is None else [int(v) for v in value.reshape(-1)]


@converter("Slice", since_version=1)
def slice_attrs(ctx: ConvertContext) -> str:
    axes = ctx.attr("axes")
    return _slice(ctx, list(ctx.attr("starts")), list(ctx.attr("ends")), None if axes is None else list(axes), None)


@converter("Slice", since_version=10)
def slice_inputs(ctx: ConvertContext) -> str:
    b = ctx.builder
    if b.constant_value(ctx.input(1)) is None and (ctx.input(1) in b.runtime_ints or (
            b.length_symbols and affine_length(b, ctx.input(1), b.length_symbols) is not None)):
        return _run_time_start_slice(ctx)
    starts = _int_list(ctx.constant(1, "starts"))
    run_time_ends = shape_operand(ctx.builder, ctx.input(2))  # x[:n] with n from a data-dependent length
    ends = list(run_time_ends[0]) if run_time_ends is not None else _int_list(ctx.constant(2, "ends"))
    axes, steps = _int_list(ctx.optional_constant(3, "axes")), _int_list(ctx.optional_constant(4, "steps"))
    result = _slice(ctx, starts, ends, axes, steps)
    if run_time_ends is not None:  # sliced at the largest end, then cut to the run-time one
        rank = ctx.type_of(0).rank
        for entry, (start, end) in enumerate(zip(starts, ends)):
            if (steps and steps[entry] != 1) or start < 0 or end < 0:
                ctx.unsupported("a run-time slice end with a negative start, end or step")
            axis = ctx.axis(axes[entry] if axes else entry, rank, "axes")
            limit_length(ctx.builder, [result], axis, entry_minus(ctx.builder, ctx.input(2), entry, start))
    return result


def _run_time_start_slice(ctx: ConvertContext) -> str:
    """x[start:end] along one axis with a start known at run time (GPT-2's causal buffer sliced at
    key_length - query_length): a gather of the largest count of entries from the start, bounded by end - start."""
    b = ctx.builder
    axes, steps = _int_list(ctx.optional_constant(3, "axes")), _int_list(ctx.optional_constant(4, "steps"))
    shape = ctx.shape(0)
    if b.type_of(ctx.input(1)).numel != 1 or (steps and steps != [1]) or (axes and len(axes) != 1):
        ctx.unsupported("a slice with a run-time start along more than one axis or with a step")
    axis = ctx.axis(axes[0] if axes else 0, len(shape), "axes")
    dim = shape[axis]
    ends = [b.add_unbounded_node("Cast", [b.add_unbounded_node("Reshape", [ctx.input(i)], 1, "length", shape=(1,))[0]],
                                 1, "length", to="int64")[0] for i in (1, 2)]
    if always_negative(b, ends[0]):
        ends = _from_the_end(ctx, axis, ends)
    length = arithmetic(b, "Max", arithmetic(b, "Sub", ends[1], ends[0]), length_constant(b, 0))
    count = largest_length(b, length)
    if count is not None and largest_length(b, ends[1]) is not None and largest_length(b, ends[1]) <= dim:
        length = simplest_length(b, length)  # within the axis: no clamping, the length as a sum of inputs
    else:
        ends = [arithmetic(b, "Min", e, length_constant(b, dim)) for e in ends]
        length = arithmetic(b, "Max", arithmetic(b, "Sub", ends[1], ends[0]), length_constant(b, 0))
    if count is None:  # (offset + n) - offset: at most the end's largest less the start's smallest
        (start_low, _), (_, end_high) = extremes(b, ends[0]), extremes(b, ends[1])
        if start_low is None or end_high is None or start_low < 0:
            ctx.unsupported("a slice whose run-time start and end are neither sums of input sizes nor of a known "
                            "range")
        count = max(int(end_high - start_low), 0)
    count = min(count, dim)
    positions = arithmetic(b, "Add", ends[0], b.add_constant(np.arange(count, dtype=np.int64), "position"))
    positions = arithmetic(b, "Min", positions, length_constant(b, max(dim - 1, 0)))  # padding reads the last entry
    result = ctx.emit1("Gather", [ctx.input(0), positions], axis=axis)
    b.runtime_ints[length] = np.array([count], np.int64)
    fixed = b.constant_value(length)
    if fixed is None or int(fixed.reshape(-1)[0]) != count:  # unless fixed in this bucket (one new token)
        limit_length(b, [result], axis, length)
    return result


def _from_the_end(ctx: ConvertContext, axis: int, ends: list[str]) -> list[str]:
    """x[-n:] (T5's position bias cut to the new tokens): a start counted back from the axis's actual length,
    its run-time length where the axis has one; an end past the axis (or counted back too) likewise."""
    b = ctx.builder
    dim = ctx.shape(0)[axis]
    actual = next((p.length for p in parts_of(b.bounds.get(ctx.input(0))) if p.axis == axis), None)
    actual = actual or length_constant(b, dim)
    start = simplest_length(b, arithmetic(b, "Add", actual, ends[0]))
    end = b.constant_value(ends[1])
    if end is not None and int(end.reshape(-1)[0]) >= dim:
        return [start, actual]
    if always_negative(b, ends[1]):
        return [start, simplest_length(b, arithmetic(b, "Add", actual, ends[1]))]
    if end is not None and int(end.reshape(-1)[0]) < 0:
        return [start, arithmetic(b, "Add", actual, ends[1])]
    return [start, ends[1]]


def _split_sizes(ctx: ConvertContext, dim: int, outputs: int) -> list[int]:
    if ctx.opset >= 13:
        given = _int_list(ctx.optional_constant(1, "split"))
    else:
        given = None if ctx.attr("split") is None else [int(s) for s in ctx.attr("split")]
    if given is not None:
        if len(given) != outputs or sum(given) != dim or any(s < 0 for s in given):
            ctx.fail(f"split {given} does not cut an axis of {dim} into {outputs} parts")
        return given
    parts = int(ctx.attr("num_outputs", outputs)) if ctx.opset >= 18 else outputs
    if parts != outputs:
        ctx.fail(f"num_outputs={parts} but the node has {outputs} outputs")
    if ctx.opset >= 18 and ctx.attr("num_outputs") is not None:
        chunk = -(-dim // parts)  # the last chunk is smaller when the axis does not divide evenly
        sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
        if sizes[-1] < 0:
            ctx.fail(f"cannot split an axis of {dim} into {parts} chunks of {chunk}")
        return sizes
    if dim % parts:
        ctx.fail(f"cannot split an axis of {dim} into {parts} equal parts")
    return [dim // parts] * parts


@converter("Split", since_version=2)
def split(ctx: ConvertContext) -> list[str]:
    shape = ctx.shape(0)
    axis = ctx.axis(ctx.attr("axis", 0), len(shape))
    if any(p.axis == axis for p in parts_of(ctx.builder.bounds.get(ctx.input(0)))):  # sizes would depend on it
        ctx.unsupported(f"Split along axis {axis}, whose length is data-dependent")
    sizes = _split_sizes(ctx, shape[axis], len(ctx.node.output))
    results, offset = [], 0
    for size in sizes:
        starts = [offset if a == axis else 0 for a in range(len(shape))]
        counts = [size if a == axis else d for a, d in enumerate(shape)]
        results.append(emit_slice(ctx, ctx.input(0), starts, [1] * len(shape), counts))
        offset += size
    return results


@converter("Gather", since_version=1)
def gather(ctx: ConvertContext) -> str:
    axis = ctx.axis(ctx.attr("axis", 0), ctx.type_of(0).rank)
    b, indices = ctx.builder, ctx.input(1)
    valid = [p.length for p in parts_of(b.bounds.get(ctx.input(0))) if p.axis == axis]
    constant = b.constant_value(indices)
    if valid and constant is not None and (constant < 0).any():  # counted from the end of the valid entries
        length = b.add_unbounded_node("Reshape", [valid[0]], 1, "length", shape=(1,) * constant.ndim)[0]
        ends = b.add_unbounded_node("Mul", [b.add_constant((constant < 0).astype(np.int64), "from_end"), length])[0]
        indices = b.add_unbounded_node("Add", [b.add_constant(constant.astype(np.int64), "index"), ends])[0]
    return ctx.emit1("Gather", [ctx.input(0), indices], axis=axis)


@converter("GatherElements", since_version=11)
def gather_elements(ctx: ConvertContext) -> str:
    axis = ctx.axis(ctx.attr("axis", 0), ctx.type_of(0).rank)
    return ctx.emit1("GatherElements", [ctx.input(0), ctx.input(1)], axis=axis)


def _pad(ctx: ConvertContext, pads: list[int], value: float) -> str:
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        ctx.unsupported(f"Pad mode {mode!r}")
    if any(p < 0 for p in pads):
        ctx.unsupported("Pad with negative pads (cropping)")
    if not any(pads):
        return ctx.input(0)
    return ctx.emit1("Pad", [ctx.input(0)], pads=tuple(pads), mode=mode, value=value)


@converter("Pad", since_version=2)
def pad_attrs(ctx: ConvertContext) -> str:
    return _pad(ctx, [int(p) for p in ctx.attr("pads", ())], float(ctx.attr("value", 0.0)))


@converter("Pad", since_version=11)
def pad_inputs(ctx: ConvertContext) -> str:
    rank = ctx.type_of(0).rank
    value = ctx.optional_constant(2, "constant_value")
    axes = _int_list(ctx.optional_constant(3, "axes")) if ctx.opset >= 18 else None
    fill = 0.0 if value is None or value.size == 0 else float(value.reshape(-1)[0])
    listed = None if axes is None else [ctx.axis(a, rank, "axes") for a in axes]
    if pads_at_run_time(ctx, ctx.input(1), listed):
        return pad_at_run_time(ctx, ctx.input(1), fill, ctx.attr("mode", "constant"), listed)
    given = _int_list(ctx.constant(1, "pads"))
    if axes is None:
        pads = given
    else:
        axes = [ctx.axis(a, rank, "axes") for a in axes]
        if len(given) != 2 * len(axes):
            ctx.fail(f"pads {given} need two values per axis in {axes}")
        pads = [0] * (2 * rank)
        for i, a in enumerate(axes):
            pads[a], pads[a + rank] = given[i], given[i + len(axes)]
    if len(pads) != 2 * rank:
        ctx.fail(f"pads {pads} need {2 * rank} values for a rank-{rank} input")
    return _pad(ctx, pads, fill)


@converter("Trilu", since_version=14)
def trilu(ctx: ConvertContext) -> str:
    if ctx.type_of(0).rank < 2:
        ctx.fail("input must have rank 2 or more")
    k = ctx.optional_constant(1, "k")
    return ctx.emit1("Trilu", [ctx.input(0)], upper=int(ctx.attr("upper", 1)),
                     k=0 if k is None else int(k.reshape(-1)[0]))


@converter("EyeLike", since_version=9)
def eye_like(ctx: ConvertContext) -> str:
    dtype = ctx.attr("dtype")
    name = ctx.type_of(0).dtype if dtype is None else onnx.helper.tensor_dtype_to_np_dtype(dtype).name
    return ctx.emit1("EyeLike", [ctx.input(0)], dtype=name, k=int(ctx.attr("k", 0)))


@converter("GatherND", since_version=11)
def gather_nd(ctx: ConvertContext) -> str:
    return ctx.emit1("GatherND", [ctx.input(0), ctx.input(1)], batch_dims=int(ctx.attr("batch_dims", 0)))


@converter("OneHot", since_version=9)
def one_hot(ctx: ConvertContext) -> str:
    depth = float(ctx.constant(1, "depth").reshape(-1)[0])
    axis = ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank + 1)
    return ctx.emit1("OneHot", [ctx.input(0), ctx.input(2)], depth=int(depth), axis=axis)


@converter("ReverseSequence", since_version=10)
def reverse_sequence(ctx: ConvertContext) -> str:
    return ctx.emit1("ReverseSequence", [ctx.input(0), ctx.input(1)], time_axis=int(ctx.attr("time_axis", 0)),
                     batch_axis=int(ctx.attr("batch_axis", 1)))


@converter("TopK", since_version=1)
def top_k(ctx: ConvertContext) -> list[str]:
    axis = ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank)
    run_time_k = ctx.opset >= 10 and ctx.input(1) in ctx.builder.runtime_ints
    if run_time_k:  # computed from a data-dependent length: the largest k, then the outputs cut to k
        k = int(ctx.builder.runtime_ints[ctx.input(1)].reshape(-1)[0])
    elif ctx.opset >= 10:
        k = int(ctx.constant(1, "K").reshape(-1)[0])
    else:
        k = int(ctx.attr("k"))
    values, indices = ctx.emit("TopK", [ctx.input(0)], 2, axis=axis, k=k, largest=int(ctx.attr("largest", 1)),
                               sorted=int(ctx.attr("sorted", 1)))
    if run_time_k:
        limit_length(ctx.builder, [values, indices], axis, ctx.reshape(ctx.input(1), [1]))
    return [values, indices]


@converter("CenterCropPad", since_version=18)
def center_crop_pad(ctx: ConvertContext) -> str:
    """A centered Slice of the axes that shrink, then a centered zero Pad of those that grow."""
    shape = ctx.shape(0)
    rank = len(shape)
    sizes = _int_list(ctx.constant(1, "shape"))
    axes = ctx.attr("axes")
    axes = list(range(rank)) if axes is None else [ctx.axis(a, rank, "axes") for a in axes]
    if len(axes) != len(sizes):
        ctx.fail(f"shape {sizes} needs one size per axis in {axes}")
    starts, counts, pads = [0] * rank, list(shape), [0] * (2 * rank)
    for axis, size in zip(axes, sizes):
        if size < shape[axis]:
            starts[axis], counts[axis] = (shape[axis] - size) // 2, size
        elif size > shape[axis]:
            extra = size - shape[axis]
            pads[axis], pads[axis + rank] = extra // 2, extra - extra // 2
    cropped = emit_slice(ctx, ctx.input(0), starts, [1] * rank, counts)
    if not any(pads):
        return cropped
    return ctx.emit1("Pad", [cropped], pads=tuple(pads), mode="constant", value=0.0)
