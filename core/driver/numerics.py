"""compile()'s validation options (mode, tolerance, the user's inputs, bisect) and the verdict they give a comparison."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import logging

import numpy as np

from ..errors import ValidationError, ValidationInputError
from ..graph.ir import Graph
from .tolerance import parse_tolerance
from ..files.npz import load_validation_inputs
from .validate import Comparison

log = logging.getLogger(__name__)
MODES = ("error", "warn", "off")
ToleranceLike = Union[None, float, str, Sequence[float]]


@dataclass(frozen=True)
class ValidationOptions:
    """`mode`: error (a mismatch fails the compile), warn (the artifact is kept, the report says it did not
    match) or off; `tolerance`: (atol, rtol) replacing the float policy; `inputs`: .npz files (paths or bytes)
    of real inputs; `bisect`: compare kernel by kernel even when the outputs match; `quick`: the first sample only."""

    mode: str = "error"
    tolerance: Optional[tuple[float, float]] = None
    inputs: tuple = ()
    bisect: bool = False
    quick: bool = False

    @classmethod
    def of(cls, validate: "bool | str" = True, tolerance: ToleranceLike = None, inputs: Any = None,
           bisect: bool = False, quick: bool = False) -> "ValidationOptions":
        if isinstance(validate, bool):
            mode = "error" if validate else "off"
        elif validate in MODES:
            mode = validate
        else:
            raise ValidationInputError(f"validate must be one of {', '.join(MODES)} (or True/False), not {validate!r}")
        if inputs is None:
            sources: tuple = ()
        elif isinstance(inputs, (str, Path, bytes, bytearray)):
            sources = (inputs,)
        else:
            sources = tuple(inputs)
        return cls(mode, _tolerance_pair(tolerance), sources, bool(bisect), bool(quick))

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def samples(self, graph: Graph, shapes: Optional[Mapping[str, tuple]] = None
                ) -> Optional[list[dict[str, np.ndarray]]]:
        """The user's inputs checked against the model's (names, shapes, dtypes; `shapes`: the inputs and their
        shapes, None for a dim any size fits, instead of the graph's); None: seeded random ones."""
        if not self.inputs:
            return None
        wanted = {n: (tuple(graph.type_of(n).shape) if shapes is None else tuple(shapes[n]), graph.type_of(n).dtype)
                  for n in (graph.inputs if shapes is None else shapes)}
        samples = load_validation_inputs(list(self.inputs), wanted)
        return samples[:1] if self.quick else samples

    def as_report(self, samples: Optional[Sequence[dict]]) -> dict:
        return {"on_mismatch": self.mode, "user_tolerance": list(self.tolerance) if self.tolerance else None,
                "inputs": f"{len(samples)} user sample(s)" if samples else "seeded random (seed 0)",
                "samples": len(samples) if samples else 1}

    def verdict(self, comparison: Comparison, samples: Optional[Sequence[dict]],
                bisector: "Callable[[], dict] | str") -> dict:
        """The report's validation section; a mismatch under mode `error` raises ValidationError naming the first
        diverging kernel. `bisector` runs the kernel-by-kernel comparison, or is the reason none can run here."""
        report = {**comparison.as_report(), **self.as_report(samples), "first_divergent_kernel": None}
        if self.bisect or not comparison.ok:
            trace = {"skipped": bisector} if isinstance(bisector, str) else _guarded(bisector)
            report["bisect"] = trace
            report["first_divergent_kernel"] = trace.get("first_divergent_kernel")
        if not comparison.ok and self.mode == "error":
            trace = report.get("bisect") or {}
            where = trace.get("summary") or (f"no bisect: {trace['skipped']}" if trace.get("skipped") else "")
            raise ValidationError(comparison.message() + (f"; {where}" if where else ""))
        return report


def _guarded(bisector: Callable[[], dict]) -> dict:
    """The bisect is a diagnosis: when it cannot run (ORT refuses an intermediate output, ...) the verdict stands
    and the report says why there is no kernel-by-kernel trace."""
    try:
        return bisector()
    except Exception as err:  # noqa: BLE001 - any failure of the diagnosis becomes its note
        log.exception("bisect failed")
        return {"skipped": f"the bisect could not run: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}


def _tolerance_pair(tolerance: ToleranceLike) -> Optional[tuple[float, float]]:
    if tolerance is None:
        return None
    if isinstance(tolerance, str):
        return parse_tolerance(tolerance)
    values = [tolerance] if isinstance(tolerance, (int, float)) else list(tolerance)
    return parse_tolerance(",".join(str(float(v)) for v in values))
