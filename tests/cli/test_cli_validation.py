"""`kiln compile --validate/--tolerance/--validation-inputs/--bisect` and `kiln run --compare`."""
from __future__ import annotations

import json
import tarfile

import numpy as np
from onnx import TensorProto, helper

from tests.cli.test_cli import assert_one_line_error, kiln


def exp_model(path):
    graph = helper.make_graph([helper.make_node("Exp", ["x"], ["y"], name="exp_node")], "exp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_validation_inputs_with_a_wrong_name_or_dtype_are_one_line_and_write_nothing(tmp_path):
    model = exp_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "wrong_name.npz", input=np.zeros((2, 64), np.float32))
    np.savez(tmp_path / "wrong_dtype.npz", x=np.zeros((2, 64), np.float64))
    out = tmp_path / "o.tar.gz"
    proc = kiln("compile", model, "--validation-inputs", tmp_path / "wrong_name.npz", "-o", out)
    assert_one_line_error(proc, "missing input(s) 'x'", "unknown name(s) 'input'")
    assert proc.returncode == 2 and not out.exists()
    proc = kiln("compile", model, "--validation-inputs", tmp_path / "wrong_dtype.npz", "-o", out)
    assert_one_line_error(proc, "input 'x' is float64, the model takes float32")
    assert_one_line_error(kiln("compile", model, "--tolerance", "1e-3,x", "-o", out), "bad tolerance")
    assert not out.exists()


def test_warn_writes_the_artifact_and_run_compare_checks_it_after_the_fact(tmp_path):
    model = exp_model(tmp_path / "m.onnx")
    out = tmp_path / "o.tar.gz"
    proc = kiln("compile", model, "--validate", "warn", "--tolerance", "0", "--bisect", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "DOES NOT MATCH" in proc.stdout and "bisect: first diverging kernel" in proc.stdout
    with tarfile.open(out) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("report.json"))
        report = json.load(tar.extractfile(member))
    assert report["validation"]["passed"] is False
    assert report["validation"]["first_divergent_kernel"]["onnx_nodes"] == [{"name": "exp_node", "op": "Exp"}]

    np.save(tmp_path / "zeros.npy", np.zeros((2, 64), np.float32))
    proc = kiln("run", out, "--compare", model, "--tolerance", "0", "--input", f"x={tmp_path / 'zeros.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert "y: float32 max abs 0" in proc.stdout and "matches ONNX Runtime" in proc.stdout
    proc = kiln("run", out, "--compare", model, "--tolerance", "0")  # seeded random inputs: an ulp off
    assert_one_line_error(proc, "does not match ONNX Runtime", "'y'")
    assert "MISMATCH" in proc.stdout
