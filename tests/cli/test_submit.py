"""`kiln submit` against a live `kiln serve`: a refused request exits 2 like `kiln compile` (one line,
the ops listed once, the service's fields named as this command's options); a job followed to the end
shows its stages in a log, honours --name and --tune-time, and writes the artifact 0644."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from .test_cli import ROOT

pytestmark = pytest.mark.slow  # starts `kiln serve` with its embedded worker


def submit(service, *args):
    env = {**os.environ, "KILN_TOKEN": service.token}
    return subprocess.run([sys.executable, "-m", "cli.main", "submit", "--server", service.url, *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)


def _model(path, nodes, dims, opsets=(("", 17),), inits=(), out_dims=None):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims or dims)], list(inits))
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]).SerializeToString())
    return path


def _one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln: error:") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_refused_upload_exits_2_and_names_each_op_once(live_service, tmp_path):
    nodes = [helper.make_node("Warp", ["x"], ["a"], domain="acme"), helper.make_node("Bend", ["a"], ["y"], domain="acme")]
    model = _model(tmp_path / "m.onnx", nodes, [2, 3], (("", 17), ("acme", 1)))
    proc = submit(live_service, model, "--wait")
    assert proc.returncode == 2
    line = _one_line(proc)
    assert line.count("Warp") == 1 and line.count("Bend") == 1


def test_service_fields_are_named_as_options(live_service, tmp_path):
    model = _model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], ["batch", 3])
    proc = submit(live_service, model)
    assert proc.returncode == 2
    line = _one_line(proc)
    assert "--input-shape" in line and "input_shapes" not in line


def test_a_followed_job_shows_progress_and_writes_a_readable_named_artifact(live_service, tmp_path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    model = _model(tmp_path / "m.onnx", nodes, [1, 3, 8, 8], inits=[w], out_dims=[1, 4, 8, 8])
    out = tmp_path / "net.tar.gz"
    old = os.umask(0o022)
    try:
        proc = submit(live_service, model, "--wait", "--name", "net", "--tune-trials", "2", "--tune-time", "30",
                      "-o", out)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    stages = [line for line in proc.stderr.splitlines() if line.startswith("job ") and "%)" in line]
    assert len(stages) >= 2 and stages[-1].endswith("(100%)"), proc.stderr  # a CI log sees the stages
    assert out.stat().st_mode & 0o777 == 0o644
    with tarfile.open(out) as tar:
        assert {"libnet.so", "net.h"} <= set(tar.getnames())
        tar.extractall(tmp_path / "art", filter="data")
    from core.runtime import load

    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = load(tmp_path / "art")
    try:
        got = module.run({"x": x})["y"]
    finally:
        module.close()
    want = ort.InferenceSession(model.read_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_every_option_has_help():
    import argparse

    from cli.main import build_parser

    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = subcommands.choices["submit"]._actions
    assert {"--tune-time", "--name", "--input-shape"} <= {o for a in options for o in a.option_strings}
    assert [a.dest for a in options if not a.help] == []
