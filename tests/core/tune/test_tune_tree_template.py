"""The TreeEnsemble tuning template: its space holds both walks (branch-free, branchy) and the heuristic default,
and sampled configs, chunk counts below the partials' slots included, compute the numpy reference."""
from __future__ import annotations

import pickle
import random
import re

import numpy as np
import pytest

from core.graph.op_defs.ml import tree_ensemble_fold
from tests.backend_calls import get_schedule, get_template
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.kernels.tree_ensemble import BRANCH_FREE, BRANCHY, LAYOUT_ATTR, WALKS, tree_layout
from core.target import get_target
from core.tune import templates_trees  # noqa: F401 (registers the template)
from core.tune.templates import anchor_stage
from tests.core.kernels.test_kernels_tree_ensemble import random_trees

TARGET = get_target("native")


def ensemble(rows: int, trees: int, seed: int, targets: int = 2):
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.6, 1.0], size=(rows, 5)).astype(np.float32)
    inputs = [x] + random_trees(rng, trees, 6, 5, targets, 1)
    return inputs, dict(n_targets=targets, mode="leq", aggregate="sum")


def space_of(inputs, attrs):
    template, captured = get_template("TreeEnsemble", TARGET), {}

    def probe(sch, outs, target):
        get_schedule("TreeEnsemble", target)(sch, outs, target)
        stage = anchor_stage(sch, outs, template)
        captured["op"], captured["default"] = stage.op, template.read_default(stage)

    OpKernel("probe", "TreeEnsemble", inputs, attrs, schedule_fn=probe).lower(TARGET)
    space = template.define(captured["op"], TARGET, captured["default"])
    space.default = space.from_values({k.name: captured["default"][k.name] for k in space.knobs})
    return template, space, captured["op"]


@pytest.mark.parametrize("rows,trees,chunks", [(3, 40, [1, 2, 3]), (200, 12, [1])])
def test_space_holds_both_walks_and_the_heuristic_default(rows, trees, chunks):
    inputs, attrs = ensemble(rows, trees, seed=rows)
    template, space, op = space_of(inputs, attrs)
    knobs = {k.name: list(k.candidates) for k in space.knobs}
    assert sorted(knobs["walk"]) == sorted(WALKS) and knobs["chunks"] == chunks
    heuristic = tree_layout(rows, trees)
    assert space.default.values == {"walk": BRANCH_FREE, "rows_per_block": heuristic.rows_per_block,
                                    "trees_per_step": heuristic.trees_per_step, "chunks": heuristic.chunks}
    valid = [c for c in space if template.valid(c.values, op, TARGET)]
    assert space.default.index in {c.index for c in valid}
    assert {c["walk"] for c in valid} == set(WALKS)
    assert all(c["trees_per_step"] == 1 for c in valid if c["walk"] == BRANCHY)


def test_configs_compute_the_reference():
    inputs, attrs = ensemble(3, 40, seed=5)
    template, space, op = space_of(inputs, attrs)
    valid = [c for c in space if template.valid(c.values, op, TARGET)]
    branchy = [c for c in valid if c["walk"] == BRANCHY]
    picks = [space.default] + random.Random(3).sample(branchy, 3) + random.Random(4).sample(valid, 3)
    picks = list({c.index: c for c in picks}.values())
    assert {c["chunks"] for c in picks} != {3}  # some leave partial slots unused
    kernels = [OpKernel(f"trees_{c.index}", "TreeEnsemble", inputs, attrs,
                        schedule_fn=lambda sch, outs, target, v=dict(c.values): template.apply(sch, outs, target, v))
               for c in picks]
    want = tree_ensemble_fold(inputs, attrs)[0]
    programs = {re.sub(r"\.\d+'", "'", str(kernel.lower(TARGET).body)) for kernel in kernels}  # less var ids
    assert len(programs) == len(picks)  # each config lowers to its own loop program
    for run, config in zip(build_kernels(kernels), picks):
        (got,) = run.run()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(config.values))
        if config["chunks"] == 1:  # one chunk adds the leaves in tree order, whichever walk found them
            np.testing.assert_array_equal(got, want, err_msg=str(config.values))


def test_the_anchor_pickles_for_the_build_workers():
    _, _, op = space_of(*ensemble(3, 40, seed=6))
    clone = pickle.loads(pickle.dumps(op))  # tuning tasks travel to build processes with their anchor
    assert clone.attrs[LAYOUT_ATTR] == op.attrs[LAYOUT_ATTR] and clone.build.stage_attrs is clone.attrs


def test_tree_tasks_are_measured_on_their_tables_and_distinct_inputs():
    """The tuner's measuring process gets the model's tree tables (not seeded zeros) and cycles through
    distinct inputs; candidates measured that way check out against the reference on those tables."""
    import skl2onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier

    from core.frontend import import_onnx
    from tests.backend_calls import optimize
    from core.tune.measure import DISTINCT_INPUTS, LocalRunner, Measurer, real_inputs
    from core.tune.measure_worker import distinct_sets, seeded_arrays, with_real_inputs
    from core.tune.task import group_inputs
    from tests.backend_calls import extract_tasks

    x, y = make_classification(120, 5, random_state=0)
    model = skl2onnx.to_onnx(GradientBoostingClassifier(n_estimators=12, max_depth=3, random_state=0).fit(x, y),
                             x[:1].astype(np.float32), options={"zipmap": False})
    graph = optimize(import_onnx(model, input_shapes={"X": (1, 5)}), 3)  # batch 1
    (task,) = [t for t in extract_tasks(graph, TARGET) if t.template.op == "TreeEnsemble"]
    fields = real_inputs(task)
    names = group_inputs(task.nodes)
    assert fields["distinct"] == DISTINCT_INPUTS and set(fields["inputs"]) == set(task.constant_inputs)
    assert all(np.array_equal(v, task.graph.constants[names[k]]) for k, v in fields["inputs"].items())
    assert any(np.asarray(v).any() for v in fields["inputs"].values() if np.asarray(v).dtype.kind in "iu")

    params = [{"shape": [3, 2], "dtype": "float32"}, {"shape": [4], "dtype": "int64"},
              {"shape": [3], "dtype": "float32"}]
    sig = {"num_inputs": 2, "num_outputs": 1, "params": params}
    arrays = with_real_inputs(seeded_arrays(sig, 0), {1: [1, 2, 3, 4]})
    assert arrays[1].tolist() == [1, 2, 3, 4] and arrays[1].dtype == np.int64
    sets = distinct_sets([arrays], sig, 0, {1}, 4)
    assert len(sets) == 4 and len({s[0].tobytes() for s in sets}) == 4  # the data input drawn anew
    assert all(s[1] is arrays[1] and s[2] is arrays[2] for s in sets)  # the tables and the output shared

    space = task.space
    configs = [space.default] + random.Random(1).sample([c for c in space if task.valid(c)], 2)
    measurer = Measurer(task, LocalRunner(timeout_s=30, min_repeat_ms=1.0, repeat=1, threads=1))
    try:
        _, results = measurer.measure(configs)
    finally:
        measurer.close()
    assert all(r.ok for r in results), [r.error_msg for r in results]
