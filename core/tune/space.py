"""Config spaces (AutoTVM style): named knobs whose candidate lists form a mixed-radix grid; a config
is one integer point of that grid, mapped to and from its knob values.

`define_split` lists the factorizations of an axis, `define_knob` an explicit list of values,
`define_reorder`/`define_annotate` orders and loop annotations as choices among named options.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from ..errors import KilnError


class ConfigSpaceError(KilnError):
    """A knob or config point that the space does not contain."""

    code = "config_space_error"


@dataclass(frozen=True)
class Knob:
    """One dimension of the space: a name, its kind and the candidate values (JSON-able)."""

    name: str
    kind: str  # "split", "knob", "reorder" or "annotate"
    candidates: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.candidates)

    def position(self, value: Any) -> int:
        try:
            return self.candidates.index(_freeze(value))
        except ValueError:
            raise ConfigSpaceError(f"knob {self.name} has no candidate {value!r}") from None


@dataclass(frozen=True)
class Config:
    """One point of a space: its index and the value each knob takes there."""

    index: int
    values: Mapping[str, Any] = field(hash=False, compare=False)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.values.items()}


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def factorizations(extent: int, parts: int) -> list[tuple[int, ...]]:
    """Ordered factorizations of `extent` into `parts` factors (outermost first)."""
    if parts == 1:
        return [(extent,)]
    out = []
    for d in range(1, extent + 1):
        if extent % d == 0:
            out += [(d,) + rest for rest in factorizations(extent // d, parts - 1)]
    return out


class ConfigSpace:
    """Knobs in definition order; point index = mixed-radix number (first knob least significant)."""

    def __init__(self) -> None:
        self.knobs: list[Knob] = []
        self.default: Optional[Config] = None

    # -- definition ----------------------------------------------------------------------------
    def _add(self, knob: Knob) -> Knob:
        if any(k.name == knob.name for k in self.knobs):
            raise ConfigSpaceError(f"knob {knob.name} defined twice")
        if not knob.candidates:
            raise ConfigSpaceError(f"knob {knob.name} has no candidates")
        self.knobs.append(knob)
        return knob

    def define_split(self, name: str, extent: int, num_outputs: int = 2,
                     filter: Optional[Callable[[tuple[int, ...]], bool]] = None,
                     include: Sequence[Sequence[int]] = ()) -> Knob:
        """Every exact factorization of `extent` into `num_outputs` factors that `filter` keeps, plus
        `include` (e.g. a heuristic's non-dividing tile, so the default stays a point of the space)."""
        cands = [f for f in factorizations(extent, num_outputs) if filter is None or filter(f)]
        cands += [tuple(f) for f in include if tuple(f) not in cands]
        return self._add(Knob(name, "split", tuple(cands)))

    def define_knob(self, name: str, candidates: Sequence[Any]) -> Knob:
        return self._add(Knob(name, "knob", tuple(dict.fromkeys(_freeze(c) for c in candidates))))

    def define_reorder(self, name: str, orders: Sequence[Sequence[str]]) -> Knob:
        return self._add(Knob(name, "reorder", tuple(_freeze(o) for o in orders)))

    def define_annotate(self, name: str, annotations: Sequence[Sequence[str]]) -> Knob:
        return self._add(Knob(name, "annotate", tuple(_freeze(a) for a in annotations)))

    # -- points ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        n = 1
        for k in self.knobs:
            n *= len(k)
        return n

    def get(self, index: int) -> Config:
        if not 0 <= index < len(self):
            raise ConfigSpaceError(f"config index {index} outside the space of {len(self)}")
        values, rest = {}, index
        for k in self.knobs:
            rest, pos = divmod(rest, len(k))
            values[k.name] = k.candidates[pos]
        return Config(index, values)

    def positions(self, index: int) -> list[int]:
        out, rest = [], index
        for k in self.knobs:
            rest, pos = divmod(rest, len(k))
            out.append(pos)
        return out

    def index_of_positions(self, positions: Sequence[int]) -> int:
        index, radix = 0, 1
        for k, pos in zip(self.knobs, positions):
            index += pos * radix
            radix *= len(k)
        return index

    def from_values(self, values: Mapping[str, Any]) -> Config:
        """The point with these knob values (raises ConfigSpaceError if one is missing or unknown)."""
        missing = [k.name for k in self.knobs if k.name not in values]
        if missing:
            raise ConfigSpaceError(f"config lacks knob(s) {', '.join(missing)}")
        return self.get(self.index_of_positions([k.position(values[k.name]) for k in self.knobs]))

    def __iter__(self) -> Iterator[Config]:
        return (self.get(i) for i in range(len(self)))

    # -- walks -------------------------------------------------------------------------------------
    def neighbours(self, index: int) -> list[int]:
        """Points that differ from `index` in one knob by one position (the grid's edges)."""
        pos = self.positions(index)
        out = []
        for d, k in enumerate(self.knobs):
            for step in (-1, 1):
                p = pos[d] + step
                if 0 <= p < len(k):
                    out.append(self.index_of_positions(pos[:d] + [p] + pos[d + 1:]))
        return out

    def random_walk(self, index: int, rng: random.Random) -> int:
        """One step of a walk: one knob re-drawn to a different candidate (any, not only adjacent)."""
        movable = [d for d, k in enumerate(self.knobs) if len(k) > 1]
        if not movable:
            return index
        pos = self.positions(index)
        d = rng.choice(movable)
        pos[d] = rng.choice([p for p in range(len(self.knobs[d])) if p != pos[d]])
        return self.index_of_positions(pos)

    def sample(self, rng: random.Random, n: int, exclude: Optional[set[int]] = None) -> list[int]:
        """Up to n distinct random points not in `exclude`."""
        exclude = exclude or set()
        total = len(self)
        room = total - len(exclude)
        if room <= 0:
            return []
        if room <= 4 * n:  # nearly exhausted: draw from what is left
            left = [i for i in range(total) if i not in exclude]
            return rng.sample(left, min(n, len(left)))
        out: set[int] = set()
        while len(out) < min(n, room):
            i = rng.randrange(total)
            if i not in exclude:
                out.add(i)
        return list(out)

    def describe(self) -> list[dict]:
        return [{"name": k.name, "kind": k.kind, "size": len(k)} for k in self.knobs]

    def __repr__(self) -> str:
        return f"ConfigSpace({', '.join(f'{k.name}:{len(k)}' for k in self.knobs)}; {len(self)} points)"
