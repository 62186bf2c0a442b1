"""Slice (clamping, negative steps, opset 9 vs 13), Split (11/13/18), Gather, GatherElements, Pad (2/11/18)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.errors import UnsupportedOpError
from core.frontend import import_onnx

F32 = "float32"
BIG = np.iinfo(np.int64).max


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 4], None, None),
    ([-1], [-BIG], [1], [-1]),
    ([10], [-10], [0], [-2]),
    ([-100, 2], [100, 1000], [0, 2], [1, 2]),
    ([4, 0], [1, 3], [-1, 0], [-1, 1]),
    ([3, 5, 6], [0, 0, 0], None, [-1, -2, -3]),
    ([2], [2], [1], [1]),
    ([0], [BIG], [2], [3]),
    ([3], [0], [1], [1]),
    ([-2], [-6], [2], [-2]),
])
def test_slice_opset13(starts, ends, axes, steps, onnx_model, check_ort):
    inits = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    inputs = ["x", "starts", "ends"]
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
        inputs.append("axes")
    if steps is not None:
        inits["steps"] = np.array(steps, np.int64)
        inputs += ([""] if axes is None else []) + ["steps"]
    model = onnx_model([helper.make_node("Slice", inputs, ["y"])], {"x": (F32, [5, 6, 7])}, {"y": F32},
                       opset=13, initializers=inits)
    check_ort(model)


def test_slice_opset9_attributes(onnx_model, check_ort):
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[0, 2])
    check_ort(onnx_model([node], {"x": (F32, [5, 6, 7])}, {"y": F32}, opset=9))


def test_split_opset11_attribute(onnx_model, check_ort):
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, split=[1, 3, 2])
    graph = check_ort(onnx_model([node], {"x": (F32, [2, 6, 3])}, {"a": F32, "b": F32, "c": F32}, opset=11))
    assert [n.op for n in graph.nodes] == ["Slice"] * 3


def test_split_opset11_equal(onnx_model, check_ort):
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=-1)
    check_ort(onnx_model([node], {"x": (F32, [2, 6])}, {"a": F32, "b": F32}, opset=11))


def test_split_opset13_input(onnx_model, check_ort):
    node = helper.make_node("Split", ["x", "split"], ["a", "b"], axis=0)
    check_ort(onnx_model([node], {"x": (F32, [5, 2])}, {"a": F32, "b": F32}, opset=13,
                         initializers={"split": np.array([2, 3], np.int64)}))


def test_split_opset18_num_outputs_uneven(onnx_model, check_ort):
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)
    graph = check_ort(onnx_model([node], {"x": (F32, [2, 7])}, {"a": F32, "b": F32, "c": F32}, opset=18))
    assert [graph.type_of(o).shape for o in graph.outputs] == [(2, 3), (2, 3), (2, 1)]


@pytest.mark.parametrize("axis,indices", [(0, [[0, 2], [-1, 1]]), (1, [3, -4, 0]), (2, 1), (-1, [[-1]])])
def test_gather(axis, indices, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)], {"x": (F32, [3, 4, 5])},
                       {"y": F32}, initializers={"i": np.array(indices, np.int64)})
    check_ort(model)


def test_gather_with_runtime_indices(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Gather", ["table", "ids"], ["y"])], {"ids": ("int64", [2, 3])}, {"y": F32},
                       initializers={"table": np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)})
    check_ort(model, {"ids": np.array([[0, 9, -1], [3, -10, 2]], np.int64)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis, onnx_model, check_ort):
    rng = np.random.default_rng(5)
    indices = rng.integers(-3, 3, (3, 2)).astype(np.int64)
    model = onnx_model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)], {"x": (F32, [3, 3])},
                       {"y": F32}, initializers={"i": indices})
    check_ort(model)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opset10_attributes(mode, onnx_model, check_ort):
    node = helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 2, 0, 2, 1], mode=mode, value=1.5)
    check_ort(onnx_model([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, opset=10))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opset11_inputs(mode, onnx_model, check_ort):
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)
    model = onnx_model([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, opset=11,
                       initializers={"pads": np.array([1, 0, 2, 0, 2, 1], np.int64), "value": np.float32(-2.0)})
    check_ort(model)


def test_pad_opset18_axes(onnx_model, check_ort):
    node = helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"])
    model = onnx_model([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, opset=18,
                       initializers={"pads": np.array([1, 2, 3, 0], np.int64), "axes": np.array([-1, 0], np.int64)})
    check_ort(model)


def test_pad_negative_is_unsupported(onnx_model):
    node = helper.make_node("Pad", ["x", "pads"], ["y"])
    model = onnx_model([node], {"x": (F32, [2, 3])}, {"y": F32}, opset=13,
                       initializers={"pads": np.array([0, -1, 0, 0], np.int64)})
    with pytest.raises(UnsupportedOpError, match="Pad.*negative"):
        import_onnx(model)
