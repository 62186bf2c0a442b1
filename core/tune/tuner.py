"""Tuners: next_batch(n) proposes configs, update(inputs, results) learns from their measurements.

XGBTuner (cost model + simulated annealing + diverse top-k + epsilon-greedy), RandomTuner and
GridSearchTuner; `tune()` drives any of them with a Measurer under a trial and time budget.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from .cost_model import XGBCostModel
from .features import itervar_features, knob_features
from .measure import MeasureResult
from .search import diverse_pick, simulated_annealing
from .space import Config
from .task import Task

INVALID_SCORE = -1e9


class Tuner:
    """Base: remembers what was proposed; the untuned default is proposed first (tuning never loses)."""

    def __init__(self, task: Task, seed: int = 0, default_first: bool = True):
        self.task, self.space = task, task.space
        self.rng = random.Random(seed)
        # Points the template rules out up front are never proposed (nor counted as trials).
        self.visited: set[int] = {c.index for c in self.space if not task.valid(c)} if len(self.space) <= 100_000 else set()
        self._pending_default = default_first and self.space.default is not None

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list[Config]:
        out: list[int] = []
        if self._pending_default:
            self._pending_default = False
            out.append(self.space.default.index)
            self.visited.add(out[0])
        out += self._propose(n - len(out))
        self.visited.update(out)
        return [self.space.get(i) for i in out]

    def _propose(self, n: int) -> list[int]:
        raise NotImplementedError

    def warm_start(self, configs: Sequence[Config], gflops: Sequence[float],
                   features: Sequence[Optional[np.ndarray]] = ()) -> None:
        """Continue from earlier trials (records): their configs are not proposed again."""
        self.visited.update(c.index for c in configs)
        if self.space.default is not None and self.space.default.index in self.visited:
            self._pending_default = False

    def update(self, inputs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        pass


class RandomTuner(Tuner):
    def _propose(self, n: int) -> list[int]:
        return self.space.sample(self.rng, n, self.visited)


class GridSearchTuner(Tuner):
    def __init__(self, task: Task, seed: int = 0, default_first: bool = True):
        super().__init__(task, seed, default_first)
        self._next = 0

    def _propose(self, n: int) -> list[int]:
        out = []
        while len(out) < n and self._next < len(self.space):
            if self._next not in self.visited:
                out.append(self._next)
            self._next += 1
        return out


class XGBTuner(Tuner):
    """Cost-model guided: SA chains score candidates with the model, a diverse top-k becomes the
    batch, and an epsilon share of it is random (exploration the model cannot talk us out of)."""

    def __init__(self, task: Task, seed: int = 0, feature_type: str = "itervar", epsilon: float = 0.1,
                 diversity: float = 2.0, chains: int = 16, iters: int = 40,
                 history: Sequence[tuple[np.ndarray, np.ndarray]] = (), default_first: bool = True):
        super().__init__(task, seed, default_first)
        self.feature_type, self.epsilon, self.diversity = feature_type, epsilon, diversity
        self.chains, self.iters = chains, iters
        self.model = XGBCostModel(seed=seed)
        for x, y in history:
            self.model.add_history(x, y)
        self.history_groups = len(self.model.history)  # other workloads it learned from (transfer)
        self._features: dict[int, Optional[np.ndarray]] = {}
        self._scores: dict[int, float] = {}
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []
        self.indices: list[int] = []
        if self.model.history:
            self.model.fit()  # warm start: rank this task's candidates by what other workloads taught
        self.feature_s = 0.0

    def features(self, index: int) -> Optional[np.ndarray]:
        """The candidate's features (cached); None when the config cannot be instantiated."""
        if index not in self._features:
            start = time.perf_counter()
            config = self.space.get(index)
            feats = None
            if self.task.valid(config):
                if self.feature_type == "knob":
                    feats = knob_features(config.values, [k.name for k in self.space.knobs])
                else:
                    try:
                        feats = itervar_features(self.task.instantiate(config))
                    except Exception:  # noqa: BLE001 - an unlowerable config is simply never proposed
                        feats = None
            self._features[index] = feats
            self.feature_s += time.perf_counter() - start
        return self._features[index]

    def score(self, indices: Sequence[int]) -> np.ndarray:
        """Model scores, memoized until the next fit (SA chains revisit points often)."""
        todo = list(dict.fromkeys(i for i in indices if i not in self._scores))
        feats = [self.features(i) for i in todo]
        ok = [k for k, f in enumerate(feats) if f is not None]
        for i in todo:
            self._scores[i] = INVALID_SCORE
        if ok:
            for k, s in zip(ok, self.model.predict(np.stack([feats[k] for k in ok]))):
                self._scores[todo[k]] = float(s)
        return np.asarray([self._scores[i] for i in indices])

    def _propose(self, n: int) -> list[int]:
        if n <= 0:
            return []
        if not self.model.trained:
            return self.space.sample(self.rng, n, self.visited)
        n_random = int(round(self.epsilon * n)) if len(self.indices) >= 2 * n else 0
        n_model = n - n_random
        starts = [i for _, i in sorted(zip(self.ys, self.indices), reverse=True)[: self.chains // 2]]
        ranked = simulated_annealing(self.space, self.score, max(n_model, int(self.diversity * n_model)), self.rng,
                                     self.visited, self.chains, self.iters, starts=starts)
        ranked = [i for i in ranked if self.features(i) is not None]
        picked = diverse_pick(self.space, ranked, n_model)
        rest = self.space.sample(self.rng, n - len(picked), self.visited | set(picked))
        return picked + rest

    def warm_start(self, configs: Sequence[Config], gflops: Sequence[float],
                   features: Sequence[Optional[np.ndarray]] = ()) -> None:
        """Earlier trials of this task also train the cost model (and seed the annealing chains);
        their recorded `features` (None where absent) spare recomputing them."""
        super().warm_start(configs, gflops, features)
        if self.feature_type == "itervar":
            for config, feats in zip(configs, features):
                if feats is not None:
                    self._features.setdefault(config.index, np.asarray(feats, np.float32))
        self._learn(configs, gflops)

    def update(self, inputs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self._learn(inputs, [self.task.flops / r.mean_cost / 1e9 if r.ok else 0.0 for r in results])

    def _learn(self, inputs: Sequence[Config], gflops: Sequence[float]) -> None:
        for config, g in zip(inputs, gflops):
            feats = self.features(config.index)
            if feats is None:
                continue
            self.xs.append(feats)
            self.ys.append(g)
            self.indices.append(config.index)
        if len(self.xs) >= 2:
            self.model.fit(np.stack(self.xs), np.asarray(self.ys))
            self._scores.clear()


TUNERS: dict[str, Callable[..., Tuner]] = {"xgb": XGBTuner, "random": RandomTuner, "grid": GridSearchTuner}


@dataclass
class TuneResult:
    task: Task
    trials: int = 0
    best: Optional[Config] = None
    best_gflops: float = 0.0
    default_gflops: float = 0.0
    curve: list[tuple[int, float]] = field(default_factory=list)  # (trial, best GFLOP/s so far)
    measured: list[tuple[Config, MeasureResult]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    time_s: float = 0.0
    stopped: str = ""  # why tuning ended: trials, budget, early_stopping, exhausted, finished_early


def tune(task: Task, tuner: Tuner, measure: Callable[[Sequence[Config]], list[MeasureResult]], trials: int,
         batch_size: int = 8, early_stopping: Optional[int] = None, deadline: Optional[float] = None,
         on_batch: Optional[Callable[[TuneResult], None]] = None,
         should_stop: Optional[Callable[[], bool]] = None) -> TuneResult:
    """Measure up to `trials` configs in batches. Anytime: whatever stops it (trials, the monotonic
    `deadline`, no progress in `early_stopping` trials, `should_stop()` turning true between batches)
    leaves the best found so far in the result."""
    result = TuneResult(task)
    start = time.perf_counter()
    best_at = 0
    result.stopped = "trials"
    while result.trials < trials:
        if not tuner.has_next():
            result.stopped = "exhausted"
            break
        if deadline is not None and time.monotonic() >= deadline:
            result.stopped = "budget"
            break
        if should_stop is not None and should_stop():
            result.stopped = "finished_early"
            break
        configs = tuner.next_batch(min(batch_size, trials - result.trials))
        if not configs:
            result.stopped = "exhausted"
            break
        results = measure(configs)
        tuner.update(configs, results)
        for config, res in zip(configs, results):
            result.trials += 1
            result.measured.append((config, res))
            if res.ok:
                gflops = task.flops / res.mean_cost / 1e9
                if task.space.default is not None and config.index == task.space.default.index:
                    result.default_gflops = gflops
                if gflops > result.best_gflops:
                    result.best, result.best_gflops, best_at = config, gflops, result.trials
            else:
                name = res.error_no.name
                result.errors[name] = result.errors.get(name, 0) + 1
            result.curve.append((result.trials, round(result.best_gflops, 3)))
        if on_batch is not None:
            on_batch(result)
        if early_stopping is not None and result.trials - best_at >= early_stopping:
            result.stopped = "early_stopping"
            break
    result.time_s = time.perf_counter() - start
    return result
