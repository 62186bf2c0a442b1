"""The validation reference run ahead on a forked child (core/driver/reference_ahead.py): ONNX Runtime's own outputs
replayed on the samples it ran, real sessions for any other feeds, its errors in validation's words, and a quick
`kiln compile` that never imports ONNX Runtime in its own process."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.reference import EXACT_REFERENCE
from core.driver.reference_ahead import ReferenceAhead
from core.driver.validate import session_outputs
from core.errors import ValidationInputError
from tests.conftest import ROOT, tiny_model
from tests.helpers.onnx_models import make_model


def onnxruntime_outputs(model: bytes, feeds: dict) -> list:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_the_replayed_reference_gives_onnxruntimes_outputs_on_its_samples_and_on_other_feeds():
    model = tiny_model(seed=5)
    rng = np.random.default_rng(7)
    sample, other = ({"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(2))
    sessions = ReferenceAhead(model, [sample], threads=1).sessions()
    assert sessions.baseline is not None and not sessions.exact
    replayed = sessions.reference
    assert [o.name for o in replayed.get_outputs()] == ["y"]
    np.testing.assert_array_equal(session_outputs(replayed, sample)["y"], onnxruntime_outputs(model, sample)[0])
    assert replayed._opened is None  # answered from the child: no session was opened here
    np.testing.assert_array_equal(session_outputs(replayed, other)["y"], onnxruntime_outputs(model, other)[0])
    assert replayed._opened is not None  # feeds it did not run: a real session here


def test_a_sample_the_reference_cannot_run_fails_validation_with_its_message():
    wrong = {"x": np.zeros((1, 3, 9, 9), np.float64)}  # float64: ONNX Runtime refuses the feed
    replayed = ReferenceAhead(tiny_model(), [wrong], threads=1).sessions().reference
    with pytest.raises(ValidationInputError, match=r"the reference \(onnxruntime\) cannot run the model .*double"):
        session_outputs(replayed, wrong)


def test_a_quick_kiln_compile_validates_without_importing_onnxruntime_itself(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model(seed=2))
    script = ("import sys, cli.main as cli; code = cli.main(sys.argv[1:]); "
              "print('onnxruntime imported:', 'onnxruntime' in sys.modules); sys.exit(code)")
    out = subprocess.run([sys.executable, "-c", script, "compile", str(model), "-o", str(tmp_path / "out.tar.gz"),
                          "--quick", "--kernel-cache", "off"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "validation: max abs error" in out.stdout and "onnxruntime imported: False" in out.stdout


def qdq_relu() -> bytes:
    """x -> QuantizeLinear -> DequantizeLinear -> Relu: a quantized model, whose reference is the exact rewrite."""
    consts = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z")]
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
         helper.make_node("Relu", ["d"], ["y"])],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], consts)
    return make_model(graph).SerializeToString()


def test_a_quantized_model_has_its_sessions_opened_here_and_a_quick_compile_still_validates_exactly():
    model = qdq_relu()
    sample = {"x": np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)}
    assert ReferenceAhead(model, [sample], threads=1).sessions() is None  # the exact reference: opened here
    report = core.compile(model, quick=True, kernel_cache="off").report
    assert report["validation"]["passed"] and report["validation"]["reference"] == EXACT_REFERENCE
