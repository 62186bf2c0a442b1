"""`kiln compile` refuses, in one line and before any work, what the target cannot compile and opsets it does not know."""
from __future__ import annotations

import subprocess
import sys

import onnx
from onnx import TensorProto, helper


def _kiln(*args):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=300)


def _save(tmp_path, nodes, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])], outputs,
                              list(initializers))
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def test_compile_for_cuda_lists_the_ops_it_cannot_compile(tmp_path):
    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    model = _save(tmp_path, [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
                  [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 2]),
                   helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2])], [k])
    result = _kiln("compile", str(model), "-t", "cuda", "-o", str(tmp_path / "out.tar.gz"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("kiln: error: target cuda cannot compile these ops: TopK"), lines
    assert not any("extern" in line or "Traceback" in line for line in lines)
    assert not (tmp_path / "out.tar.gz").exists()


def test_compile_of_a_newer_opset_says_how_to_convert(tmp_path):
    model = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], opset=35)
    result = _kiln("compile", str(model), "-t", "native", "-o", str(tmp_path / "out.tar.gz"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "kiln: error: the model uses ONNX opset 35, newer than the newest Kiln supports (28)")
