"""The stages of a compile, in order: each owns its name, the label a user sees and its share of the progress bar."""
from __future__ import annotations

from enum import Enum
from typing import Callable


class Stage(Enum):
    """`value` is the stage's name (and its key in the report's `timings_s`)."""

    QUANTIZE = "quantize"  # int8 only: before everything else, with its own share (QUANTIZE_SHARE)
    IMPORT = "import"
    OPTIMIZE = "optimize"
    TUNE = "tune"
    BUILD = "build"
    VALIDATE = "validate"
    BENCHMARK = "benchmark"
    PACKAGE = "package"

    @property
    def label(self) -> str:
        """What a user sees while the stage runs (a job's `stage`): importing, optimizing, ..."""
        return _LABELS[self]

    @property
    def start(self) -> float:
        """The fraction of the whole compile done when this stage begins."""
        return _STARTS[self]

    def at(self, done: float) -> float:
        """The whole compile's progress when this stage is `done` (0..1) through."""
        stages = list(Stage)
        end = stages[stages.index(self) + 1].start if self is not stages[-1] else 1.0
        return self.start + (end - self.start) * min(max(done, 0.0), 1.0)


_LABELS = {Stage.QUANTIZE: "quantizing", Stage.IMPORT: "importing", Stage.OPTIMIZE: "optimizing", Stage.TUNE: "tuning", Stage.BUILD: "building",
           Stage.VALIDATE: "validating", Stage.BENCHMARK: "benchmarking", Stage.PACKAGE: "packaging"}
# Rough shares of a compile's time on a CNN: building (LLVM) dominates an untuned compile.
_STARTS = {Stage.QUANTIZE: 0.0, Stage.IMPORT: 0.0, Stage.OPTIMIZE: 0.1, Stage.TUNE: 0.15, Stage.BUILD: 0.2, Stage.VALIDATE: 0.8,
           Stage.BENCHMARK: 0.9, Stage.PACKAGE: 0.98}

# An int8 compile quantizes first: that takes this share of its bar, the stages above the rest (quantize_stage.py).
QUANTIZE_SHARE = 0.3

# compile()'s progress callback: (stage, the whole compile's fraction done, detail such as "tuning 12/200" or "").
ProgressFn = Callable[[Stage, float, str], None]
