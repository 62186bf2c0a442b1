"""A compile's tuning options (TuningOptions): the budget, the records, and how the tuner searches and measures."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from ..errors import KilnError
from .tuner import TUNERS

if TYPE_CHECKING:
    from .remote import RemoteMeasurement


class TuningOptionsError(KilnError):
    code = "bad_tuning_options"


@dataclass(frozen=True)
class TuningOptions:
    """A compile's tuning: the budget, where records live, and how the tuner searches and measures."""

    trials: int = 0
    time_budget_s: Optional[float] = None
    records: Optional[str] = None
    records_out: Optional[str] = None  # where new records are appended (default: records), read with them
    progress: Optional[Callable[[int, int], None]] = None  # (trials measured, trials planned), from 0 to the plan
    on_plan: Optional[Callable[[dict], None]] = None  # told tasks, trials and the estimate before measuring
    on_batch: Optional[Callable[[dict], None]] = None  # told trials done, best GFLOP/s so far, seconds left per batch
    should_stop: Optional[Callable[[], bool]] = None  # true: stop measuring, build with the best so far (finish now)
    tuner: str = "xgb"
    batch_size: int = 8
    early_stopping: Optional[int] = None
    seed: int = 0
    timeout_s: float = 10.0
    min_repeat_ms: float = 10.0
    threads: Optional[int] = None
    build_workers: Optional[int] = None  # processes building candidates (None: this machine's cores, at most 8)
    timing_lock: Optional[str] = None  # a file that tuning runs sharing this machine lock while timing
    remote: Optional[RemoteMeasurement] = None  # measure on devices elsewhere (cross-compiled candidates), not here

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 0:
            raise TuningOptionsError(f"tuning trials must be a non-negative integer, not {self.trials!r}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise TuningOptionsError(f"tuning time budget must be positive, not {self.time_budget_s!r}")
        if self.tuner not in TUNERS:
            raise TuningOptionsError(f"unknown tuner {self.tuner!r}; known: {', '.join(TUNERS)}")

    @classmethod
    def from_mapping(cls, options: Optional[Mapping[str, Any]]) -> "TuningOptions":
        """The options from a plain mapping (the Python API's `tuning={"trials": 200}`), names checked."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TuningOptionsError(f"unknown tuning option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**options)
