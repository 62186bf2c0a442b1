"""The validation reference run ahead: ONNX Runtime's outputs on the samples, on a forked child during the build.

A compile that validates but does not benchmark (`quick`) needs the reference only for its outputs on a few known
inputs. Right after the import, a forked child opens the sessions (core/driver/reference.py) and runs them; the
build goes on meanwhile, and this process never imports ONNX Runtime. At validation the answers stand behind the
session interface validate() uses (`ReplayedSession`); any other feeds, or a quantized model (whose report also
wants ONNX Runtime as deployed), open the real sessions here as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..backends.base import Backend

from ..graph.ir import Graph
from ..narrow_dtypes import NARROW_DTYPES
from ..process.fork_map import ForkedCall
from ..target import Target
from .reference import Sessions, open_sessions
from .validate import index_bounds, random_inputs


@dataclass(frozen=True)
class _Answers:
    """What the child sends back: per sample, the reference's outputs (or the first line of its error)."""

    names: tuple[str, ...]
    outputs: tuple[Any, ...]  # per sample: a list of arrays, or the error's text
    reference_name: str
    has_baseline: bool
    skipped: str
    exact: bool


def _answers(model_bytes: bytes, samples: Sequence[Mapping[str, np.ndarray]], threads: int) -> _Answers:
    sessions = open_sessions(model_bytes, threads)
    reference = sessions.reference
    names = tuple(o.name for o in reference.get_outputs())
    outputs = []
    for feeds in samples:
        if sessions.exact:
            break  # the compile opens the sessions itself (onnxruntime_on_host): nothing to send
        try:
            outputs.append(list(reference.run(list(names), dict(feeds))))
        except Exception as err:  # noqa: BLE001 - raised at validation, by session_outputs, in its words
            outputs.append(str(err) or type(err).__name__)
    return _Answers(names, tuple(outputs), getattr(reference, "reference_name", "onnxruntime"),
                    sessions.baseline is not None, sessions.skipped, sessions.exact)


@dataclass(frozen=True)
class _OutputInfo:
    name: str


class ReplayedSession:
    """A reference session's answers on the samples it ran on ahead; other feeds on real sessions opened here."""

    def __init__(self, answers: _Answers, samples: Sequence[Mapping[str, np.ndarray]], model_bytes: bytes,
                 threads: int):
        self._answers, self._samples = answers, list(samples)
        self._model_bytes, self._threads = model_bytes, threads  # _model_bytes: explain_shape_mismatches reads it
        self.reference_name = answers.reference_name
        self._opened: Optional[Sessions] = None

    def get_outputs(self) -> list[_OutputInfo]:
        return [_OutputInfo(n) for n in self._answers.names]

    def run(self, names, feeds):
        for sample, outputs in zip(self._samples, self._answers.outputs):
            if feeds is sample and list(names) == list(self._answers.names):
                if isinstance(outputs, str):
                    raise RuntimeError(outputs)
                return outputs
        if self._opened is None:
            self._opened = open_sessions(self._model_bytes, self._threads)
        return self._opened.reference.run(names, feeds)


class ReferenceAhead:
    """The reference's answers on `samples`, computed on a forked child from construction on. `sessions()` waits for
    them: Sessions whose reference replays them, or None when this process must open the sessions itself."""

    def __init__(self, model_bytes: bytes, samples: Sequence[Mapping[str, np.ndarray]], threads: int):
        self.samples = list(samples)
        self._model_bytes, self._threads = model_bytes, threads
        self._call = ForkedCall(lambda: _answers(model_bytes, self.samples, threads))

    def sessions(self) -> Optional[Sessions]:
        answers = self._call.result()
        if answers.exact:
            return None
        replayed = ReplayedSession(answers, self.samples, self._model_bytes, self._threads)
        return Sessions(replayed, replayed if answers.has_baseline else None, answers.skipped)

    def cancel(self) -> None:
        self._call.cancel()


def reference_ahead(model_bytes: bytes, graph: Graph, samples: Optional[Sequence[Mapping[str, np.ndarray]]],
                    target: Target, backend: "Backend", threads: Optional[int]) -> Optional[ReferenceAhead]:
    """The reference started on `samples` (None: validate()'s seeded random one, drawn from the imported `graph`) for
    a model that runs here and whose inputs and outputs ONNX Runtime's Python API exchanges; else None."""
    if backend.cannot_run_reason(target) is not None:
        return None
    if {graph.type_of(n).dtype for n in (*graph.inputs, *graph.outputs)} & NARROW_DTYPES:
        return None
    samples = samples or [random_inputs(graph, 0, index_bounds(graph))]
    return ReferenceAhead(model_bytes, samples, threads or target.num_cores)
