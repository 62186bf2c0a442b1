"""What a first user of `kiln` meets: --version; every unsupported op listed by the upload's own check;
a zero or absurd --input-shape refused up front, naming the input; --name; `run --bench` as a table
(--json for scripts); the artifact readable by others (0644 under the usual umask)."""
from __future__ import annotations

import json
import os
import tarfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from core._version import __version__
from core.errors import UnsupportedOpError
from core.frontend.inspect import inspect_model

from .test_cli import assert_one_line_error, kiln


def _model(path, nodes, dims, opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]).SerializeToString())
    return path


def test_version():
    proc = kiln("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"kiln {__version__}"


def test_every_unsupported_op_is_listed_as_the_upload_check_lists_them(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Warp", ["a"], ["b"], domain="acme"),
             helper.make_node("Bend", ["b"], ["y"], domain="acme")]
    model = _model(tmp_path / "m.onnx", nodes, [2, 3], (("", 17), ("acme", 1)))
    proc = kiln("compile", model, "-o", tmp_path / "o.tar.gz")
    assert proc.returncode == 2
    try:
        inspect_model(model)
    except UnsupportedOpError as err:
        upload_message = str(err)
    assert proc.stderr.strip() == f"kiln: error: {upload_message}"
    assert "Warp" in upload_message and "Bend" in upload_message
    assert not (tmp_path / "o.tar.gz").exists()


def test_bad_input_shapes_are_refused_up_front_naming_the_input(tmp_path):
    model = _model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], ["batch", 4])
    out = tmp_path / "o.tar.gz"
    zero = kiln("compile", model, "--input-shape", "x=0,4", "-o", out)
    assert zero.returncode == 2
    assert_one_line_error(zero, "'x'", "positive")
    absurd = kiln("compile", model, "--input-shape", "x=100000000000,4", "-o", out)
    assert absurd.returncode == 2
    assert_one_line_error(absurd, "too large", "'x'")
    assert not out.exists()


def test_named_compile_then_bench_table_and_json(tmp_path):
    model = _model(tmp_path / "m.onnx", [helper.make_node("Tanh", ["x"], ["y"])], [2, 8])
    out = tmp_path / "m.tar.gz"
    old = os.umask(0o022)
    try:
        proc = kiln("compile", model, "--name", "tanh_net", "-o", out)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    assert "rounds" in proc.stdout  # the latency line gives its spread
    assert out.stat().st_mode & 0o777 == 0o644
    with tarfile.open(out) as tar:
        assert {"libtanh_net.so", "tanh_net.h", "main.c", "Makefile"} <= set(tar.getnames())

    table = kiln("run", out, "--bench", "--repeat", "5")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert lines[0].startswith("latency over 5 runs") and any(line.split()[0] == "median" for line in lines[1:])
    stats = json.loads(kiln("run", out, "--bench", "--repeat", "5", "--json").stdout)
    assert stats["runs"] == 5 and stats["p25_ms"] <= stats["median_ms"] <= stats["p75_ms"]

    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)
    np.save(tmp_path / "x.npy", x)
    run = kiln("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--save", tmp_path / "outs")
    assert run.returncode == 0, run.stderr
    want = ort.InferenceSession(model.read_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "outs" / "y.npy"), want, rtol=1e-5, atol=1e-6)


def test_a_bad_name_is_one_line_and_exit_2(tmp_path):
    model = _model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [2, 3])
    proc = kiln("compile", model, "--name", "Bad-Name", "-o", tmp_path / "o.tar.gz")
    assert proc.returncode == 2
    assert_one_line_error(proc, "bad artifact name")
