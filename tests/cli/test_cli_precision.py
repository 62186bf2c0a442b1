"""`kiln compile --precision`: half-size weights end to end through the command line, judged at that format's
tolerance by the compile and by `kiln run --compare`; an unknown precision is one clear line."""
from __future__ import annotations

import json
import tarfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.cli.test_cli import kiln


def mlp(path):
    rng = np.random.default_rng(0)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
                              [numpy_helper.from_array(rng.standard_normal((128, 64)).astype(np.float32), "w")])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def artifact_file(path, name):
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(name))
        return tar.extractfile(member).read()


def test_compile_at_fp16_halves_the_weights_and_validates(tmp_path):
    model = mlp(tmp_path / "mlp.onnx")
    sizes = {}
    for precision in ("fp32", "fp16"):
        out = tmp_path / f"{precision}.tar.gz"
        proc = kiln("compile", model, "--precision", precision, "-o", out)
        assert proc.returncode == 0, proc.stderr
        meta = json.loads(artifact_file(out, "metadata.json"))
        assert meta["precision"] == precision
        sizes[precision] = meta["weights_bytes"]
        if precision != "fp32":
            assert f"precision: {precision}" in proc.stdout and "float32 arithmetic" in proc.stdout
    assert sizes["fp16"] == sizes["fp32"] // 2
    proc = kiln("run", tmp_path / "fp16.tar.gz", "--compare", model)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok" in proc.stdout and "MISMATCH" not in proc.stdout


def test_an_unknown_precision_is_one_clear_line(tmp_path):
    proc = kiln("compile", mlp(tmp_path / "mlp.onnx"), "--precision", "int4", "-o", tmp_path / "o.tar.gz")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--precision" in proc.stderr.strip().splitlines()[-1] and "fp16" in proc.stderr
    assert not (tmp_path / "o.tar.gz").exists()
