"""Declared input-shape ranges (`NAME=1..8,224..512:32,8|128|384,0..512`): parsing and each range's sizes to compile."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from ..errors import ShapeError

# A powers-of-two range keeps at most this many sizes (the largest ones, hi always among them: the sizes a dim that
# can be neither padded nor masked must match exactly); a step or an explicit list that names more sizes than this
# is refused: each size is a whole compile of the model.
MAX_SIZES_PER_DIM = 16


@dataclass(frozen=True)
class DimRange:
    """One input dimension that takes several sizes: lo..hi, lo..hi:step, or a list. Which sizes are compiled: a
    padded or masked dim runs every size in range at hi, plus the sizes a step or a list names (specializations);
    any other dim compiles sizes() (powers of two plus hi by default) and must match one of them."""

    lo: int
    hi: int
    step: Optional[int] = None
    choices: Optional[tuple[int, ...]] = None

    def __post_init__(self):
        if self.choices is not None and not self.choices:
            raise ShapeError("an empty list of sizes")
        sizes = self.choices or (self.hi,)
        # 0 may start a range (an empty KV cache: 0..512); it is never a compiled size
        if any(d < 1 for d in sizes) or self.lo < 0:
            raise ShapeError(f"range {self}: sizes must not be negative, and compiled sizes (the high end, a list's "
                             f"sizes) must be positive")
        if self.choices is not None and not self.lo <= min(self.choices) <= max(self.choices) == self.hi:
            raise ShapeError(f"range {self}: the bucket sizes must lie within the range and end at its high end")
        if self.lo > self.hi:
            raise ShapeError(f"range {self}: its low end {self.lo} is above its high end {self.hi}")
        if self.step is not None and self.step < 1:
            raise ShapeError(f"range {self}: the step must be positive, not {self.step}")
        if len(self.sizes()) > MAX_SIZES_PER_DIM:
            raise ShapeError(f"range {self} names {len(self.sizes())} sizes; at most {MAX_SIZES_PER_DIM} per "
                             f"dimension (each is compiled): use a larger step or fewer sizes")

    @property
    def names_sizes(self) -> bool:
        """Whether the user chose the compiled sizes (a step or a list), rather than leaving them to Kiln."""
        return self.step is not None or self.choices is not None

    def thinned(self, stride: int) -> tuple[int, ...]:
        """Specializations of a padded or masked dim: the powers of two of sizes() taking every `stride`-th from
        the top, and the smallest (a decoder's one-token step, a batch of one), ascending; stride 0: hi alone."""
        sizes = self.sizes()
        if stride == 0:
            return (self.hi,)
        return tuple(sorted({sizes[0], *sizes[::-1][::stride]}))

    def sizes(self) -> tuple[int, ...]:
        """The sizes compiled for a dim that must match one exactly, ascending; the last is hi."""
        if self.choices is not None:
            return tuple(sorted(set(self.choices)))
        if self.step is not None:
            first = self.lo or self.step  # a range from 0: its buckets from one step on
            return tuple(sorted(set(range(first, self.hi + 1, self.step)) | {self.hi}))
        powers, p = [], 1
        while p < self.hi:  # 1, 2, 4... (never 0)
            if p >= self.lo:
                powers.append(p)
            p *= 2
        return tuple(powers[-(MAX_SIZES_PER_DIM - 1):]) + (self.hi,)

    def __str__(self) -> str:
        if self.choices is not None and self.lo < self.choices[0]:
            return f"{self.lo}..{self.hi}:" + "|".join(map(str, self.choices))
        if self.choices is not None:
            return "|".join(map(str, self.choices))
        return f"{self.lo}..{self.hi}" + (f":{self.step}" if self.step is not None else "")


Dim = Union[int, DimRange]


def parse_dim(text: str) -> Dim:
    """`7`, `1..8`, `224..512:32`, `8|128|384` or `1..384:8|128|384` (any size 1..384, buckets 8, 128, 384;
    a size between them runs in the next bucket where the model allows) (raises ShapeError)."""
    text = text.strip()
    try:
        if ".." in text:
            bounds, _, step = text.partition(":")
            lo, _, hi = bounds.partition("..")
            if "|" in step:
                return DimRange(int(lo), int(hi), choices=tuple(sorted({int(t) for t in step.split("|")})))
            return DimRange(int(lo), int(hi), int(step) if step else None)
        if "|" in text:
            sizes = sorted({int(t) for t in text.split("|")})
            return DimRange(sizes[0], sizes[-1], choices=tuple(sizes))
        return int(text)
    except ValueError:
        raise ShapeError(f"bad dimension {text!r}: expected a size (7), a range (1..8, 224..512:32) or a list "
                         f"of sizes (8|128|384)") from None


def parse_shape(text: str) -> tuple[Dim, ...]:
    """`1..8,3,224..512:32,224..512:32` -> its dimensions (raises ShapeError)."""
    dims = tuple(parse_dim(d) for d in text.split(","))
    if any(isinstance(d, int) and d < 1 for d in dims):
        raise ShapeError(f"bad shape {text!r}: every dimension must be a positive size or range")
    return dims


def parse_input_shape(spec: str) -> tuple[str, tuple[Dim, ...]]:
    """`NAME=d0,d1,...` (each d a size or a range) -> (NAME, dims)."""
    name, sep, dims = spec.rpartition("=")
    if not sep or not name or not dims:
        raise ShapeError(f"bad input shape {spec!r}: expected NAME=d0,d1,... (e.g. input=1,3,224,224 or "
                         f"input_ids=1..8,1..512)")
    try:
        return name, parse_shape(dims)
    except ShapeError as err:
        raise ShapeError(f"input {name!r}: {err}") from None


def _dim_of(value: Any) -> Dim:
    if isinstance(value, DimRange):
        return value
    if isinstance(value, str):
        return parse_dim(value)
    if isinstance(value, (tuple, list)) and len(value) == 2:  # (lo, hi)
        return DimRange(int(value[0]), int(value[1]))
    return int(value)


def normalize_shapes(input_shapes: Optional[Mapping[str, Any]]) -> dict[str, tuple[Dim, ...]]:
    """compile()'s input_shapes, each dim an int, a DimRange, a range string or a (lo, hi) pair; a whole
    shape may be one string (`"1..8,128"`)."""
    shapes = {}
    for name, dims in (input_shapes or {}).items():
        shapes[name] = parse_shape(dims) if isinstance(dims, str) else tuple(_dim_of(d) for d in dims)
    return shapes


def check_ranges_supported(*, bisect: bool = False) -> None:
    """What a compile with declared ranges cannot be combined with yet, checked before any work (core.compile, and the
    API when it creates the job): bisection. Every target takes ranges: the artifact is validated where it runs (this
    machine, qemu-user, a GPU) and only built elsewhere, as with fixed shapes; on the user's inputs, at any shapes in
    range, when given."""
    if bisect:
        raise ShapeError("input-shape ranges cannot be combined with --bisect yet")


def has_ranges(input_shapes: Optional[Mapping[str, Any]]) -> bool:
    return any(isinstance(d, DimRange) for dims in normalize_shapes(input_shapes).values() for d in dims)


def largest_shapes(input_shapes: Optional[Mapping[str, Any]]) -> dict[str, tuple[int, ...]]:
    """Each input at the upper bound of its ranges (what sizes a compile's largest tensors)."""
    return {name: tuple(d.hi if isinstance(d, DimRange) else d for d in dims)
            for name, dims in normalize_shapes(input_shapes).items()}


def shape_text(dims) -> str:
    return ",".join(map(str, dims))


__all__ = ["DimRange", "Dim", "MAX_SIZES_PER_DIM", "parse_dim", "parse_shape", "parse_input_shape",
           "normalize_shapes", "has_ranges", "largest_shapes", "shape_text"]
