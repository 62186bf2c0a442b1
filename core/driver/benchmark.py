"""Latency of a compiled module next to ONNX Runtime: same inputs and threads, warm-up, interleaved
rounds, medians. Used by the pipeline's report and by the scripts in bench/."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np


# A round set whose interquartile range exceeds this share of its median was measured on a busy machine
# (other processes, throttling): its ratio moved 0.72x -> 1.43x between two such runs of one model.
BUSY_SPREAD = 0.15


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile), linear interpolation (numpy's default)."""
    q1, q2, q3 = np.percentile(np.asarray(values, np.float64), [25, 50, 75])
    return float(q1), float(q2), float(q3)


def spread(values: Sequence[float]) -> float:
    """The interquartile range as a share of the median."""
    q1, q2, q3 = quartiles(values)
    return (q3 - q1) / q2 if q2 else 0.0


@dataclass(frozen=True)
class LatencyComparison:
    """Per-round latencies (ms) of both runtimes, round k of each measured back to back."""

    kiln_rounds: tuple[float, ...]
    onnxruntime_rounds: tuple[float, ...]

    @property
    def kiln_ms(self) -> float:
        return statistics.median(self.kiln_rounds)

    @property
    def onnxruntime_ms(self) -> float:
        return statistics.median(self.onnxruntime_rounds)

    @property
    def ratio(self) -> float:
        return self.kiln_ms / self.onnxruntime_ms if self.onnxruntime_ms else float("inf")

    @property
    def round_ratios(self) -> tuple[float, ...]:
        return tuple(k / o for k, o in zip(self.kiln_rounds, self.onnxruntime_rounds) if o)

    @property
    def busy(self) -> bool:
        return max(spread(self.kiln_rounds), spread(self.onnxruntime_rounds)) > BUSY_SPREAD

    def as_report(self) -> dict:
        def q(values):
            return [significant(v) for v in quartiles(values)] if values else None

        out = {"kiln": significant(self.kiln_ms), "onnxruntime": significant(self.onnxruntime_ms),
               "ratio": round(self.ratio, 3),
               "rounds": len(self.kiln_rounds), "kiln_quartiles": q(self.kiln_rounds),
               "onnxruntime_quartiles": q(self.onnxruntime_rounds), "ratio_quartiles": q(self.round_ratios),
               "spread": round(max(spread(self.kiln_rounds), spread(self.onnxruntime_rounds)), 3), "busy": self.busy}
        if self.busy:
            out["warning"] = (f"the machine was busy: latencies varied by more than {BUSY_SPREAD:.0%} of the median "
                              f"between rounds; the ratio is uncertain (see ratio_quartiles)")
        return out


def significant(ms: float, digits: int = 4) -> float:
    """`ms` to `digits` significant digits: a microsecond kernel keeps its precision, as a second-long one does."""
    return float(f"{ms:.{digits}g}")


@dataclass(frozen=True)
class KernelProfile:
    """Each kernel call's time (ms) inside runs of the whole model, in call order (the median per call
    over the profiled runs; GPU libraries: device timers)."""

    call_ms: tuple[float, ...]
    funcs: tuple[str, ...]  # the compiled function each call runs (identical kernels share one)

    @property
    def by_func(self) -> dict[str, float]:
        """Per compiled function: its first call's time."""
        times: dict[str, float] = {}
        for func, ms in zip(self.funcs, self.call_ms):
            times.setdefault(func, ms)
        return times

    def breakdown(self, end_to_end_ms: float) -> dict:
        """How much of the end-to-end latency (Kiln's median round) the kernels explain: their sum and its
        ratio to it; the rest is the call itself (argument checks, thread wake-ups between kernels)."""
        total = float(sum(self.call_ms))
        return {"kernels_sum_ms": significant(total), "end_to_end_ms": significant(end_to_end_ms),
                "ratio": round(total / end_to_end_ms, 3) if end_to_end_ms else None, "calls": len(self.call_ms)}


def profile_kernels(module, exe, feeds: Mapping[str, np.ndarray], repeat: int = 5) -> KernelProfile:
    """The runtime's per-call profile of `module` (compiled as `exe`) on `feeds`."""
    calls = module.profile(repeat=repeat, feeds=feeds)
    return KernelProfile(tuple(c["time_ms"] for c in calls), tuple(k.func for k in exe.kernels))


def _time_ms(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) * 1000.0 / number


def compare_latency(module, session, feeds: Mapping[str, np.ndarray], rounds: int = 15, warmup: int = 3,
                    min_round_ms: float = 20.0, settle_s: float = 0.1) -> LatencyComparison:
    """Kiln's module and ONNX Runtime's session on the same feeds, in interleaved rounds."""
    outputs = [o.name for o in session.get_outputs()]
    kiln, ort = interleaved_rounds(lambda: module.run(feeds), lambda: session.run(outputs, dict(feeds)), rounds=rounds,
                                   warmup=warmup, min_round_ms=min_round_ms, settle_s=settle_s)
    return LatencyComparison(kiln, ort)


def interleaved_rounds(run_a: Callable[[], object], run_b: Callable[[], object], rounds: int = 15, warmup: int = 3,
                       min_round_ms: float = 20.0, settle_s: float = 0.1) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-round latencies (ms) of two runners, alternating rounds so that drift (turbo, neighbours) hits both alike.
    Each round starts with one untimed call: both runtimes park their idle threads, and the call
    that wakes them measures the wake-up (a scheduler tick on small VMs), not the steady state."""
    for _ in range(warmup):
        run_a()
        run_b()
    # Repeat each call enough times per round that a round lasts about min_round_ms.
    single = max(_time_ms(run_a, 1), _time_ms(run_b, 1), 1e-3)
    number = max(1, int(min_round_ms / single))
    a_ms, b_ms = [], []
    for _ in range(rounds):
        # ONNX Runtime's workers spin for ~40 ms after its last call (Kiln's park within ~2 ms of
        # kiln_run returning); without a pause they take a core from Kiln's round (measured: mobilenet
        # 9.5 -> 14 ms). So let the other runtime's pool go idle before each round.
        time.sleep(settle_s)
        run_a()
        a_ms.append(_time_ms(run_a, number))
        time.sleep(settle_s)
        run_b()
        b_ms.append(_time_ms(run_b, number))
    return tuple(a_ms), tuple(b_ms)
