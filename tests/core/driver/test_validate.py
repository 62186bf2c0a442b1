"""Validation in compile(): the user's inputs (checked like an upload), --validate modes, and the bisect."""
from __future__ import annotations

import io
import tempfile
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.bisect import to_reference_layout
from core.files.npz import load_validation_inputs
from core.errors import ValidationError, ValidationInputError

INPUTS = {"x": ((2, 3), "float32"), "ids": ((2,), "int64")}


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def exp_model():
    """Exp: Kiln's and ONNX Runtime's differ by an ulp on most random inputs, never at 0."""
    graph = helper.make_graph([helper.make_node("Exp", ["x"], ["y"])], "exp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv_a"),
             helper.make_node("Relu", ["c"], ["r"], name="relu_a"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool_a")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_samples_along_a_leading_axis_and_across_files():
    one = npz(x=np.ones((2, 3), np.float32), ids=np.zeros(2, np.int64))
    three = npz(x=np.zeros((3, 2, 3), np.float32), ids=np.arange(6, dtype=np.int64).reshape(3, 2))
    samples = load_validation_inputs([one, three], INPUTS)
    assert len(samples) == 4 and samples[0]["x"][0, 0] == 1 and samples[3]["ids"].tolist() == [4, 5]


@pytest.mark.parametrize("data, needle", [
    (npz(x=np.ones((2, 3), np.float32)), "missing input(s) 'ids'"),
    (npz(x=np.ones((2, 3), np.float32), ids=np.zeros(2, np.int64), extra=np.ones(1)), "unknown name(s) 'extra'"),
    (npz(x=np.ones((2, 3), np.float64), ids=np.zeros(2, np.int64)), "input 'x' is float64, the model takes float32"),
    (npz(x=np.ones((3, 2), np.float32), ids=np.zeros(2, np.int64)), "input 'x' has shape [3, 2]"),
    (npz(x=np.ones((2, 2, 3), np.float32), ids=np.zeros((3, 2), np.int64)), "different numbers of samples"),
    (b"PK\x03\x04 not really a zip", "not a readable .npz"),
    (b"\x93NUMPY" + b"\0" * 40, "not a readable .npz"),  # an .npy, not an .npz
])
def test_bad_validation_inputs_are_one_clear_error(data, needle):
    with pytest.raises(ValidationInputError) as err:
        load_validation_inputs(data, INPUTS)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_oversized_and_pickled_npz_are_refused(tmp_path):
    big = npz(x=np.zeros((2, 3), np.float32), ids=np.zeros(2, np.int64))
    with pytest.raises(ValidationInputError, match="more than"):
        load_validation_inputs(big, INPUTS, max_bytes=16)
    path = tmp_path / "big.npz"
    path.write_bytes(big)
    with pytest.raises(ValidationInputError, match="larger than"):
        load_validation_inputs(path, INPUTS, max_bytes=16)
    pickled = io.BytesIO()
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object), ids=np.zeros(2, np.int64))
    with pytest.raises(ValidationInputError, match="holds Python objects"):
        load_validation_inputs(pickled.getvalue(), INPUTS)
    lying = io.BytesIO()  # a 1 KB header declaring 10**11 floats: numpy would try to allocate 400 GB
    with zipfile.ZipFile(lying, "w") as archive:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**11,)})
        archive.writestr("x.npy", header.getvalue() + bytes(16))
    with pytest.raises(ValidationInputError, match="declare more than"):
        load_validation_inputs(lying.getvalue(), INPUTS)
    stray = io.BytesIO()
    with zipfile.ZipFile(stray, "w") as archive:
        archive.writestr("x.txt", "hello")
    with pytest.raises(ValidationInputError, match="not an .npz of arrays"):
        load_validation_inputs(stray.getvalue(), INPUTS)


def test_validation_inputs_are_the_ones_compared():
    model = exp_model()
    random = core.compile(model, benchmark=False, validate="warn", tolerance=0).report["validation"]
    assert not random["passed"] and random["inputs"] == "seeded random (seed 0)"
    zeros = core.compile(model, benchmark=False, validate="warn", tolerance=0,
                         validation_inputs=npz(x=np.zeros((3, 2, 64), np.float32))).report["validation"]
    assert zeros["passed"] and zeros["max_abs_err"] == 0.0 and zeros["samples"] == 3


def test_bad_validation_inputs_fail_the_compile_before_it_builds(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where compile() would start its build folder
    with pytest.raises(ValidationInputError, match="missing input"):
        core.compile(exp_model(), benchmark=False, validation_inputs=npz(y=np.zeros((2, 64), np.float32)))
    assert not list(tmp_path.iterdir())


def test_warn_keeps_the_artifact_and_reports_the_first_diverging_kernel(tmp_path):
    artifact = core.compile(conv_model(), benchmark=False, validate="warn", tolerance=1e-12)
    val = artifact.report["validation"]
    assert val["passed"] is False and val["on_mismatch"] == "warn"
    first = val["first_divergent_kernel"]
    assert first is not None and not first["passed"] and first["max_abs_err"] > 1e-12
    assert {"name": "conv_a", "op": "Conv"} in first["onnx_nodes"]
    assert val["bisect"]["kernels"][0]["kernel"] <= first["kernel"]
    path = artifact.save(tmp_path / "kept.tar.gz")
    assert path.is_file()
    assert "First kernel out of tolerance" in artifact.report_html and 'data-chart="kernel_errors"' in artifact.report_html


def test_error_mode_names_the_kernel_and_its_onnx_nodes():
    with pytest.raises(ValidationError) as err:
        core.compile(conv_model(), benchmark=False, tolerance="1e-12,0")
    message = str(err.value)
    assert "first diverging kernel" in message and "conv_a (Conv)" in message and "\n" not in message


def test_bisect_on_request_compares_every_kernel_of_a_matching_model():
    val = core.compile(conv_model(), benchmark=False, bisect=True).report["validation"]
    assert val["passed"] and val["first_divergent_kernel"] is None
    assert val["bisect"]["compared"] >= 2 and all(k["passed"] for k in val["bisect"]["kernels"])


def test_validate_off_and_bools_keep_working():
    assert "skipped" in core.compile(exp_model(), benchmark=False, validate=False).report["validation"]
    assert "skipped" in core.compile(exp_model(), benchmark=False, validate="off").report["validation"]
    with pytest.raises(ValidationInputError, match="validate must be one of"):
        core.compile(exp_model(), benchmark=False, validate="sometimes")


def test_blocked_layouts_are_unblocked_for_the_comparison():
    plain = np.arange(2 * 20 * 3 * 3, dtype=np.float32).reshape(2, 20, 3, 3)
    padded = np.zeros((2, 24, 3, 3), np.float32)
    padded[:, :20] = plain
    blocked = padded.reshape(2, 3, 8, 3, 3).transpose(0, 1, 3, 4, 2)  # NCHW8c, 4 padding channels
    np.testing.assert_array_equal(to_reference_layout(blocked, plain.shape), plain)
    assert to_reference_layout(np.zeros(7), (2, 3)) is None
