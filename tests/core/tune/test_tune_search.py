"""Tuners on a real task's space with a synthetic measurement: the model-guided search finds the
best config early, nothing is proposed twice, and tuning is anytime (deadline, early stopping)."""
from __future__ import annotations

import time

from core.tune.measure import MeasureErrorNo, MeasureResult
from core.tune.search import diverse_pick
from core.tune.tuner import GridSearchTuner, RandomTuner, XGBTuner, tune


def synthetic_measure(task, calls=None):
    """Run time falls with wider column tiles and more channels per tile, up to a point; deterministic."""
    def cost(config) -> float:
        v = config.values
        return 1e-3 * (1 + abs(v["ow_tile"] - 8) / 8 + abs(v.get("oc_tile", 4) - 4) / 4 + 0.1 * v.get("oh_tile", 1))

    def measure(configs):
        if calls is not None:
            calls.append(len(configs))
        return [MeasureResult((cost(c),), MeasureErrorNo.NO_ERROR) for c in configs]

    return measure, cost


def best_index(task, cost) -> int:
    valid = [c for c in task.space if task.valid(c)]
    return min(valid, key=cost).index


def test_xgb_tuner_finds_the_best_config_early(conv_task):
    measure, cost = synthetic_measure(conv_task)
    valid = sum(1 for c in conv_task.space if conv_task.valid(c))
    found = []
    for seed in range(3):
        tuner = XGBTuner(conv_task, seed=seed)
        result = tune(conv_task, tuner, measure, trials=valid, batch_size=4,
                      early_stopping=None)
        indices = [c.index for c, _ in result.measured]
        assert len(indices) == len(set(indices))
        found.append(indices.index(best_index(conv_task, cost)) + 1)
        assert tuner.model.times.fits
    assert sorted(found)[1] <= valid // 2, (found, valid)  # the median seed needs at most half the space


def test_baselines_enumerate_without_repeats(conv_task):
    measure, _ = synthetic_measure(conv_task)
    valid = sum(1 for c in conv_task.space if conv_task.valid(c))
    for tuner in (RandomTuner(conv_task, seed=1), GridSearchTuner(conv_task)):
        result = tune(conv_task, tuner, measure, trials=10_000, batch_size=16)
        indices = [c.index for c, _ in result.measured]
        assert indices[0] == conv_task.space.default.index  # the untuned config is measured first
        assert len(indices) == len(set(indices)) == valid and result.stopped == "exhausted"
        gflops = [g for _, g in result.curve]
        assert gflops == sorted(gflops)


def test_tuning_is_anytime(conv_task):
    measure, _ = synthetic_measure(conv_task)
    result = tune(conv_task, RandomTuner(conv_task, seed=0), measure, trials=50, batch_size=4,
                  deadline=time.monotonic() - 1)
    assert result.trials == 0 and result.stopped == "budget" and result.best is None
    calls = []
    measure, _ = synthetic_measure(conv_task, calls)
    result = tune(conv_task, GridSearchTuner(conv_task), measure, trials=50, batch_size=2, early_stopping=4)
    assert result.stopped in ("early_stopping", "exhausted") and result.best is not None
    assert result.trials < 50 and round(result.best_gflops, 3) == max(g for _, g in result.curve)


def test_diverse_pick_covers_knob_values(conv_task):
    space = conv_task.space
    ranked = list(range(len(space)))
    batch = diverse_pick(space, ranked, 4)
    assert batch[0] == 0 and len(set(batch)) == 4
    first_knob = {space.positions(i)[0] for i in batch}
    assert len(first_knob) == min(4, len(space.knobs[0]))
