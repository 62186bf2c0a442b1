"""The `kiln` command line: user errors are one line and a non-zero exit; compile/run round trip."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def kiln(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=600)


def tiny_model(path, op="Relu"):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain="com.example" if op == "FancyOp" else "")], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    path.write_bytes(helper.make_model(graph, opset_imports=opsets).SerializeToString())
    return path


def assert_one_line_error(proc, *needles):
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kiln: error:")
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_not_onnx_is_one_clear_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    assert_one_line_error(kiln("compile", bad, "-o", tmp_path / "o.tar.gz"), "ONNX")
    assert not (tmp_path / "o.tar.gz").exists()


def test_unsupported_op_is_one_clear_line(tmp_path):
    model = tiny_model(tmp_path / "m.onnx", op="FancyOp")
    assert_one_line_error(kiln("compile", model, "-o", tmp_path / "o.tar.gz"), "FancyOp", "com.example")


def test_unknown_target(tmp_path):
    model = tiny_model(tmp_path / "m.onnx")
    assert_one_line_error(kiln("compile", model, "-t", "z80", "-o", tmp_path / "o.tar.gz"), "z80", "native")


def test_compile_then_run(tmp_path):
    model = tiny_model(tmp_path / "m.onnx")
    out = tmp_path / "m.tar.gz"
    proc = kiln("compile", model, "-t", "native", "-o", out)
    assert proc.returncode == 0, proc.stderr
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    proc = kiln("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--save", tmp_path / "outs")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "outs" / "y.npy"), np.maximum(x, 0))
    proc = kiln("run", out, "--bench", "--repeat", "5", "--json")
    assert proc.returncode == 0 and "median_ms" in proc.stdout


def test_targets_lists_the_x86_levels():
    proc = kiln("targets")
    assert proc.returncode == 0
    for name in ("native", "x86-64-v3", "x86-64-v4"):
        assert name in proc.stdout


def test_targets_stay_aligned_and_a_gpu_has_no_simd_width():
    """sapphirerapids (14 characters) pushed its row out of the 12-wide name column."""
    import json as json_module

    lines = kiln("targets").stdout.splitlines()
    listed = json_module.loads(kiln("targets", "--json").stdout)
    assert len(lines) == len(listed)
    starts = {(line.index(t["triple"]), line.index(t["description"])) for line, t in zip(lines, listed)}
    assert len(starts) == 1, lines  # every row's triple and description start in the same column
    cuda = next(line for line in lines if line.startswith("cuda "))
    assert "-bit" not in cuda and "sm_80 PTX" in cuda
