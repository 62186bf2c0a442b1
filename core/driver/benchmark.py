"""Latency of a compiled module next to ONNX Runtime: same inputs and threads, warm-up, interleaved
rounds, medians. Used by the pipeline's report and by the scripts in bench/."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np


@dataclass(frozen=True)
class LatencyComparison:
    kiln_ms: float
    onnxruntime_ms: float

    @property
    def ratio(self) -> float:
        return self.kiln_ms / self.onnxruntime_ms if self.onnxruntime_ms else float("inf")

    def as_report(self) -> dict:
        return {"kiln": round(self.kiln_ms, 4), "onnxruntime": round(self.onnxruntime_ms, 4), "ratio": round(self.ratio, 3)}


def _time_ms(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) * 1000.0 / number


def compare_latency(module, session, feeds: Mapping[str, np.ndarray], rounds: int = 15, warmup: int = 3,
                    min_round_ms: float = 20.0, settle_s: float = 0.1) -> LatencyComparison:
    """Alternate Kiln and ONNX Runtime rounds so that drift (turbo, neighbours) hits both alike.
    Each round starts with one untimed call: both runtimes park their idle threads, and the call
    that wakes them measures the wake-up (a scheduler tick on small VMs), not the steady state."""
    outputs = [o.name for o in session.get_outputs()]
    run_kiln = lambda: module.run(feeds)  # noqa: E731
    run_ort = lambda: session.run(outputs, dict(feeds))  # noqa: E731
    for _ in range(warmup):
        run_kiln()
        run_ort()
    # Repeat each call enough times per round that a round lasts about min_round_ms.
    single = max(_time_ms(run_kiln, 1), _time_ms(run_ort, 1), 1e-3)
    number = max(1, int(min_round_ms / single))
    kiln, ort = [], []
    for _ in range(rounds):
        # ONNX Runtime's workers spin for ~40 ms after its last call (Kiln's park within ~2 ms of
        # kiln_run returning); without a pause they take a core from Kiln's round (measured: mobilenet
        # 9.5 -> 14 ms). So let the other runtime's pool go idle before each round.
        time.sleep(settle_s)
        run_kiln()
        kiln.append(_time_ms(run_kiln, number))
        time.sleep(settle_s)
        run_ort()
        ort.append(_time_ms(run_ort, number))
    return LatencyComparison(statistics.median(kiln), statistics.median(ort))
