"""Task extraction: one task per distinct kernel workload, stable keys, weights = occurrences."""
from __future__ import annotations

from core.frontend import import_onnx
from tests.backend_calls import optimize, extract_tasks
from core.target import get_target
from core.tune.session import split_trials


def test_identical_workloads_share_a_task(tiny_tasks):
    convs = [t for t in tiny_tasks if t.template.op == "Conv2dNCHWc"]
    # Two convs with the same shapes, attrs and fused ReLU: one task of weight 2 (weights differ in value only).
    assert len(convs) == 1 and convs[0].weight == 2
    assert [t.template.op for t in tiny_tasks] == ["Conv2dNCHWc", "MatMul"]  # heaviest first
    assert "Relu" in convs[0].desc["epilogue"]


def test_constant_inputs_are_the_kernels_weight_parameters(tiny_tasks, tiny_graph):
    from core.tune.task import group_inputs

    for task in tiny_tasks:
        inputs = group_inputs(task.nodes)
        assert task.constant_inputs  # conv weights and bias, MatMul weights
        assert [k for k, v in enumerate(inputs) if v in tiny_graph.constants] == list(task.constant_inputs)
        assert 0 not in task.constant_inputs  # each kernel's first input is the activation


def test_keys_are_stable_and_distinguish_workloads(tiny_tasks, make_tiny_cnn):
    tiny_cnn = make_tiny_cnn
    again = extract_tasks(optimize(import_onnx(tiny_cnn()), 3), get_target("native"))
    assert [t.key for t in again] == [t.key for t in tiny_tasks]
    other_target = extract_tasks(optimize(import_onnx(tiny_cnn()), 3), get_target("x86-64-v4"))
    assert not {t.key for t in other_target} & {t.key for t in tiny_tasks}
    unfused = extract_tasks(optimize(import_onnx(tiny_cnn()), 0), get_target("native"))
    assert {t.key for t in unfused} != {t.key for t in tiny_tasks}  # no fused ReLU: another kernel


def test_trials_split_by_weight(tiny_tasks):
    assert split_trials(tiny_tasks, 9) == [6, 3]
    assert sum(split_trials(tiny_tasks, 1)) == 1
    assert split_trials(tiny_tasks, 0) == [0, 0]


def test_cross_target_tuning_measures_nothing(tiny_graph):
    from core.tune import TuningOptions
    from tests.backend_calls import tune_graph

    target = get_target("aarch64")
    outcome = tune_graph(tiny_graph, target, TuningOptions(trials=8))
    assert outcome.report["trials"] == 0 and not outcome.chosen
