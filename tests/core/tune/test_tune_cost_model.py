"""The XGBoost ranking cost model orders held-out points of a synthetic problem, and transfers."""
from __future__ import annotations

import numpy as np

from core.tune.cost_model import XGBCostModel, pairwise_accuracy, spearman


def synthetic(rng: np.random.Generator, n: int, shift: float = 0.0, noise: float = 0.5):
    """Throughput of a made-up kernel: best at tile sizes near 8 and 4, a penalty on spills; the
    measurements are noisy, the truth the held-out points are judged by is not."""
    x = rng.integers(1, 6, size=(n, 4)).astype(np.float32)  # log2 of four tile sizes
    truth = np.maximum(100 / (1 + (x[:, 0] - 3 - shift) ** 2 + 0.5 * (x[:, 1] - 2) ** 2)
                       - 5 * (x[:, 2] + x[:, 3] > 7) + x[:, 3], 0.1)
    return x, truth + rng.normal(0, noise, n), truth


def test_ranks_held_out_points():
    rng = np.random.default_rng(0)
    x, y, truth = synthetic(rng, 300)
    model = XGBCostModel(seed=0)
    model.fit(x[:150], y[:150])
    scores = model.predict(x[150:])
    assert spearman(scores, truth[150:]) > 0.85
    assert pairwise_accuracy(scores, truth[150:]) > 0.85
    assert len(model.times.fits) == 1 and len(model.times.predicts) == 1


def test_history_warm_starts_a_new_workload():
    rng = np.random.default_rng(1)
    model = XGBCostModel(seed=0)
    assert not model.trained and (model.predict(np.zeros((3, 4))) == 0).all()
    for shift in (0.0, 0.5):  # two related workloads measured before
        model.add_history(*synthetic(rng, 120, shift)[:2])
    model.fit()  # nothing of the new workload measured yet
    x, _, truth = synthetic(rng, 200, shift=0.25)
    assert spearman(model.predict(x), truth) > 0.7


def test_rank_metrics():
    assert spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert abs(spearman([1, 1, 2], [1, 1, 2]) - 1.0) < 1e-12
    assert pairwise_accuracy([3, 2, 1], [1, 2, 3]) == 0.0

