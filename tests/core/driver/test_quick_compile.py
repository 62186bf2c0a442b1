"""A quick compile (`quick=True`, `kiln compile --quick`): no latency benchmark, validation against ONNX Runtime on
one sample at most, and a report that says both; a default compile keeps the benchmark."""
from __future__ import annotations

import io
import subprocess
import sys
import tarfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.rebuild import rebuild
from core.frontend import import_onnx
from core.report.html import CHARTS_LEFT_OUT
from tests.backend_calls import optimize
from tests.conftest import ROOT, tiny_model
from tests.helpers.onnx_models import make_model


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_a_quick_compile_skips_the_benchmark_and_validates_on_one_sample():
    samples = npz(x=np.random.default_rng(1).standard_normal((3, 1, 3, 8, 8)).astype(np.float32))
    art = core.compile(tiny_model(), quick=True, validation_inputs=samples, kernel_cache="off")
    report = art.report
    assert report["quick"] == {"benchmark": "skipped", "validation": "one sample at most"}
    assert "quick" in report["latency_ms"]["skipped"] and "benchmark" not in report["timings_s"]
    assert report["validation"]["passed"] and report["validation"]["samples"] == 1


def test_a_quick_artifact_is_stored_uncompressed_and_still_runs(tmp_path):
    """Deflating float weights gains ~7% and costs ~2 s on resnet18: a quick compile skips it (level 0 is still a
    valid .tar.gz), a default compile keeps it. Its report page has no charts either (matplotlib: seconds)."""
    from core.runtime import load

    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    sizes = {}
    for quick in (True, False):
        art = core.compile(tiny_model(), quick=quick, benchmark=False, kernel_cache="off")
        path = art.save(tmp_path / f"quick_{quick}.tar.gz")
        raw = sum(m.size for m in tarfile.open(path, "r:gz"))
        sizes[quick] = (path.stat().st_size, raw)
        with tarfile.open(path, "r:gz") as tar:
            tar.extractall(tmp_path / f"unpacked_{quick}", filter="data")
        np.testing.assert_array_equal(load(tmp_path / f"unpacked_{quick}").run({"x": x})["y"], art.load().run({"x": x})["y"])
    assert sizes[True][0] > sizes[True][1] > sizes[False][0]  # stored: the members plus tar/gzip framing
    pages = {quick: (tmp_path / f"unpacked_{quick}" / "report.html").read_text() for quick in (True, False)}
    assert CHARTS_LEFT_OUT in pages[True] and "<svg" not in pages[True]  # matplotlib's seconds are not spent
    assert CHARTS_LEFT_OUT not in pages[False] and "<svg" in pages[False]
    assert "Operator fusion" in pages[True] and "<summary>All " in pages[True]  # the tables stay


def test_a_default_compile_keeps_the_benchmark_and_every_sample():
    samples = npz(x=np.random.default_rng(1).standard_normal((3, 1, 3, 8, 8)).astype(np.float32))
    report = core.compile(tiny_model(), validation_inputs=samples, kernel_cache="off").report
    assert "quick" not in report and report["latency_ms"]["kiln"] > 0 and "onnxruntime" in report["latency_ms"]
    assert report["validation"]["passed"] and report["validation"]["samples"] == 3


def test_kiln_compile_quick_prints_what_it_skipped_and_the_cache_hit_rate(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model())
    cmd = [sys.executable, "-m", "cli.main", "compile", str(model), "-o", str(tmp_path / "out.tar.gz"), "--quick",
           "--kernel-cache", str(tmp_path / "cache")]
    for expected in ("0 of", "100%"):
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stderr
        assert "quick: latency benchmark skipped, validation on one sample" in out.stdout
        build = next(line for line in out.stdout.splitlines() if line.startswith("build:"))
        assert expected in build and "kernels from the kernel cache" in build
        assert "latency:" not in out.stdout and "validation: max abs error" in out.stdout


def basic_block(channels: int = 32, size: int = 28) -> bytes:
    """resnet18's basic block (3x3 conv, Relu, 3x3 conv, residual Add, Relu) at the size where a default -O3 compile
    runs both convs as F(4x4) Winograd, the most expensive kernels to build."""
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) / 12).astype(np.float32), n)
               for n in ("w1", "w2")]
    bias = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b1")
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "x"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], weights + [bias])
    return make_model(graph).SerializeToString()


def test_a_quick_compile_runs_resnet_convs_direct_and_matches_onnxruntime(tmp_path):
    """Winograd kernels cost most of a cold quick build (resnet18: ~60% of its CPU seconds), so a quick compile runs
    every conv direct; the default keeps Winograd. The quick artifact against ONNX Runtime, and its rebuild (the
    manifest says quick) byte-identical: direct convs' packed weights again, not Winograd-transformed ones."""
    model = basic_block()
    # x86-64-v3: the Winograd choice depends on the vector width, and this target runs on every x86 host we test on
    default_anchors = [n.attr("ops")[0] for n in optimize(import_onnx(model), 3, "x86-64-v3").nodes if n.op == "Fused"]
    assert default_anchors == ["Conv2dWinogradNCHWc"] * 2  # the block is one the default compiles by Winograd
    art = core.compile(model, "x86-64-v3", quick=True, kernel_cache="off")
    anchors = [k["ops"][0] for k in art.report["kernels"]]
    assert "Conv2dWinogradNCHWc" not in anchors and anchors.count("Conv2dNCHWc") == 2
    assert art.report["validation"]["passed"] and art.metadata["manifest"]["options"]["quick"] is True
    x = np.random.default_rng(4).standard_normal((1, 32, 28, 28)).astype(np.float32)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(art.load().run({"x": x})["y"], expected, rtol=1e-4, atol=1e-4)
    again = rebuild(art.save(tmp_path / "quick.tar.gz"), model)
    try:
        assert again.identical, again.summary()
    finally:
        again.artifact.cleanup()
