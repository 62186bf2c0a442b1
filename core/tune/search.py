"""Search over a config space scored by the cost model: parallel simulated-annealing chains that keep
the best points seen, then a diverse pick of a batch among them (AutoTVM's submodular pick)."""
from __future__ import annotations

import heapq
import math
import random
from typing import Callable, Sequence

import numpy as np

from .space import ConfigSpace

ScoreFn = Callable[[Sequence[int]], np.ndarray]


def simulated_annealing(space: ConfigSpace, score: ScoreFn, keep: int, rng: random.Random, exclude: set[int],
                        chains: int = 16, iters: int = 40, temperature: tuple[float, float] = (1.0, 0.0),
                        starts: Sequence[int] = (), patience: int = 8) -> list[int]:
    """The `keep` best-scored points outside `exclude` that the chains visit, best first. Chains start
    from `starts` (e.g. the best measured points) filled up with random points."""
    points = list(dict.fromkeys(starts))[:chains]
    points += [rng.randrange(len(space)) for _ in range(chains - len(points))]
    scores = score(points)
    best: list[tuple[float, int]] = []  # min-heap of (score, index) of the `keep` best unmeasured points
    seen: set[int] = set()

    def offer(idx: Sequence[int], sc: np.ndarray) -> bool:
        changed = False
        for i, s in zip(idx, sc):
            if i in exclude or i in seen:
                continue
            seen.add(i)
            if len(best) < keep:
                heapq.heappush(best, (float(s), i))
                changed = True
            elif s > best[0][0]:
                heapq.heapreplace(best, (float(s), i))
                changed = True
        return changed

    offer(points, scores)
    t0, t1 = temperature
    still = 0
    for k in range(iters):
        temp = t0 + (t1 - t0) * k / max(1, iters - 1)
        proposals = [space.random_walk(p, rng) for p in points]
        new = score(proposals)
        for c in range(len(points)):
            gain = new[c] - scores[c]
            if gain >= 0 or (temp > 0 and rng.random() < math.exp(gain / temp)):
                points[c], scores[c] = proposals[c], new[c]
        still = 0 if offer(proposals, new) else still + 1
        if still >= patience:
            break
    return [i for _, i in sorted(best, reverse=True)]


def diverse_pick(space: ConfigSpace, ranked: Sequence[int], n: int) -> list[int]:
    """n of the `ranked` points (best first), greedily preferring ones that bring knob values the
    batch has not covered yet; ties go to the better-ranked point."""
    chosen: list[int] = []
    covered: list[set[int]] = [set() for _ in space.knobs]
    pool = list(ranked)
    while pool and len(chosen) < n:
        def novelty(i: int) -> int:
            return sum(p not in cov for p, cov in zip(space.positions(i), covered))

        pick = max(range(len(pool)), key=lambda r: (novelty(pool[r]), -r))
        i = pool.pop(pick)
        chosen.append(i)
        for p, cov in zip(space.positions(i), covered):
            cov.add(p)
    return chosen
