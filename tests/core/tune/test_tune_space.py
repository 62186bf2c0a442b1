"""Config spaces: mixed-radix enumeration, knob values <-> points, walks, and the templates' defaults."""
from __future__ import annotations

import random

import pytest

from core.tune.features import itervar_features, store_nests
from core.tune.space import ConfigSpace, ConfigSpaceError, factorizations


def small_space() -> ConfigSpace:
    space = ConfigSpace()
    space.define_split("tile_x", 12, num_outputs=2)
    space.define_knob("unroll", [0, 1])
    space.define_reorder("order", [("x", "y"), ("y", "x")])
    space.define_annotate("ann", [("vec",), ("none",)])
    return space


def test_factorizations_are_exact_and_ordered():
    assert factorizations(12, 2) == [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]
    assert all(a * b * c == 8 for a, b, c in factorizations(8, 3))
    assert len(factorizations(8, 3)) == 10


def test_enumeration_is_a_bijection():
    space = small_space()
    assert len(space) == 6 * 2 * 2 * 2
    seen = set()
    for config in space:
        again = space.from_values(config.values)
        assert again.index == config.index
        seen.add(tuple(sorted((k, str(v)) for k, v in config.values.items())))
    assert len(seen) == len(space)
    with pytest.raises(ConfigSpaceError):
        space.get(len(space))
    with pytest.raises(ConfigSpaceError):
        space.from_values({"tile_x": (5, 5), "unroll": 0, "order": ("x", "y"), "ann": ("vec",)})
    # JSON turns tuples into lists: values read back from records still find their point.
    assert space.from_values(space.get(17).to_json()).index == 17


def test_neighbours_and_walks_change_one_knob():
    space = small_space()
    rng = random.Random(0)
    for index in range(len(space)):
        for n in space.neighbours(index):
            diff = [a != b for a, b in zip(space.positions(index), space.positions(n))]
            assert sum(diff) == 1
        step = space.random_walk(index, rng)
        assert step != index
        assert sum(a != b for a, b in zip(space.positions(index), space.positions(step))) == 1


def test_sample_is_distinct_and_avoids_excluded():
    space = small_space()
    rng = random.Random(1)
    exclude = set(range(0, len(space), 2))
    picks = space.sample(rng, 10, exclude)
    assert len(picks) == len(set(picks)) == 10 and not set(picks) & exclude
    assert sorted(space.sample(rng, 100, exclude)) == sorted(set(range(len(space))) - exclude)


def test_template_defaults_are_points_of_their_space(tiny_tasks):
    assert {t.template.op for t in tiny_tasks} == {"Conv2dNCHWc", "MatMul"}
    for task in tiny_tasks:
        space = task.space
        assert len(space) > 1 and space.default is not None
        assert task.valid(space.default)
        # The default point schedules exactly as the untuned kernel does (same loop nests, same features).
        tuned, untuned = task.instantiate(space.default, "k"), task.instantiate(None, "k")
        shape = lambda f: [[(l.extent, l.kind) for l in n.loops] for n in store_nests(f)]  # noqa: E731
        assert shape(tuned) == shape(untuned)
        assert (itervar_features(tuned) == itervar_features(untuned)).all()
