"""Named artifacts (`compile(..., name=...)`): libNAME.so exports NAME_load, NAME_run, ... and nothing
else (kernels and the runtime's kiln_ names internal), so two models link into one C program; the
shipped sample main.c builds with its Makefile; the numpy loader finds the prefix in metadata.json."""
from __future__ import annotations

import shutil
import subprocess
import tarfile

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.errors import ArtifactNameError

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("nm") is None, reason="needs cc and nm")

TWO_MODELS_C = r"""
#include <stdio.h>
#include "conv.h"
#include "mlp.h"

static int run(const char* what, int ok, const char* error) {
    if (!ok) fprintf(stderr, "%s: %s\n", what, error);
    return ok;
}

int main(int argc, char** argv) {
    static CONV_INPUT_0_CTYPE cx[CONV_INPUT_0_NUMEL];
    static CONV_OUTPUT_0_CTYPE cy[CONV_OUTPUT_0_NUMEL];
    static MLP_INPUT_0_CTYPE mx[MLP_INPUT_0_NUMEL];
    static MLP_OUTPUT_0_CTYPE my[MLP_OUTPUT_0_NUMEL];
    FILE* f = fopen(argv[3], "rb");
    if (!f || fread(cx, sizeof cx, 1, f) != 1 || fread(mx, sizeof mx, 1, f) != 1) return 9;
    fclose(f);
    conv_model* a = conv_load(argv[1]);
    mlp_model* b = mlp_load(argv[2]);
    if (!run("conv_load", a != NULL, conv_last_error()) || !run("mlp_load", b != NULL, mlp_last_error())) return 1;
    const void* ci[CONV_NUM_INPUTS] = {cx};
    void* co[CONV_NUM_OUTPUTS] = {cy};
    const void* mi[MLP_NUM_INPUTS] = {mx};
    void* mo[MLP_NUM_OUTPUTS] = {my};
    if (!run("conv_run", conv_run(a, ci, co) == 0, conv_last_error())) return 2;
    if (!run("mlp_run", mlp_run(b, mi, mo) == 0, mlp_last_error())) return 3;
    f = fopen(argv[4], "wb");
    fwrite(cy, sizeof cy, 1, f);
    fwrite(my, sizeof my, 1, f);
    fclose(f);
    printf("%d %d\n", conv_num_kernel_calls(), mlp_num_kernel_calls());
    conv_free(a);
    mlp_free(b);
    return 0;
}
"""


def conv_model() -> bytes:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def mlp_model() -> bytes:
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Tanh", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _ort(model: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _extract(archive, where):
    where.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where


def _exported(library) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("named")
    dirs = {}
    for name, model in (("conv", conv_model()), ("mlp", mlp_model())):
        artifact = core.compile(model, name=name, benchmark=False)
        assert artifact.report["validation"]["passed"]
        dirs[name] = _extract(artifact.save(tmp / f"{name}.tar.gz"), tmp / name)
    return tmp, dirs


def test_two_named_models_link_into_one_c_program(named):
    tmp, dirs = named
    for name, d in dirs.items():
        assert (d / f"lib{name}.so").is_file() and (d / f"{name}.h").is_file() and not (d / "libkiln_model.so").exists()
        exported = _exported(d / f"lib{name}.so")
        assert {f"{name}_load", f"{name}_run", f"{name}_free", f"{name}_last_error"} <= exported
        assert all(s.startswith(f"{name}_") for s in exported), exported  # kernels and kiln_* stay internal
    (tmp / "two.c").write_text(TWO_MODELS_C)
    cmd = ["cc", "-O1", str(tmp / "two.c"), "-o", str(tmp / "two"), "-lm"]
    for d in dirs.values():
        cmd += [f"-I{d}", f"-L{d}", f"-Wl,-rpath,{d}"]
    cmd += ["-lconv", "-lmlp"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)

    rng = np.random.default_rng(5)
    cx = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    mx = rng.standard_normal((2, 16)).astype(np.float32)
    (tmp / "in.bin").write_bytes(cx.tobytes() + mx.tobytes())
    proc = subprocess.run([str(tmp / "two"), str(dirs["conv"] / "weights.bin"), str(dirs["mlp"] / "weights.bin"),
                           str(tmp / "in.bin"), str(tmp / "out.bin")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = np.frombuffer((tmp / "out.bin").read_bytes(), np.float32)
    np.testing.assert_allclose(out[:4 * 64].reshape(1, 4, 8, 8), _ort(conv_model(), cx), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[4 * 64:].reshape(2, 10), _ort(mlp_model(), mx), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_shipped_sample_program_builds_and_runs(named):
    _, dirs = named
    d = dirs["mlp"]
    subprocess.run(["make", "-s"], cwd=d, check=True, capture_output=True, text=True)
    x = np.random.default_rng(6).standard_normal((2, 16)).astype(np.float32)
    (d / "x.bin").write_bytes(x.tobytes())
    proc = subprocess.run(["./main", "x.bin"], cwd=d, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    label, *values = proc.stdout.split()
    assert label == "y:" and len(values) == 8
    np.testing.assert_allclose(np.array(values, np.float64), _ort(mlp_model(), x).ravel()[:8], rtol=1e-4, atol=1e-5)


def test_the_numpy_loader_reads_the_prefix_from_metadata(named):
    _, dirs = named
    x = np.random.default_rng(7).standard_normal((2, 16)).astype(np.float32)
    module = core.runtime.load(dirs["mlp"])
    try:
        assert module.metadata["symbol_prefix"] == "mlp" and module.metadata["library"] == "libmlp.so"
        np.testing.assert_allclose(module.run({"x": x})["y"], _ort(mlp_model(), x), rtol=1e-4, atol=1e-5)
    finally:
        module.close()


@pytest.mark.parametrize("bad", ["ResNet", "1net", "my-net", "kiln_x", "a" * 40, "net_"])
def test_a_name_that_is_not_a_usable_prefix_is_refused_up_front(bad):
    with pytest.raises(ArtifactNameError, match="bad artifact name"):
        core.compile(mlp_model(), name=bad, benchmark=False, validate=False)


def test_a_named_gpu_library_exports_only_its_prefix():
    """The CUDA host library is linked the same way (built here without a GPU; run on one by test_cuda_gpu)."""
    artifact = core.compile(mlp_model(), target="cuda", name="gpu_mlp")
    assert artifact.library.name == "libgpu_mlp.so"
    exported = _exported(artifact.library)
    assert {"gpu_mlp_load", "gpu_mlp_run"} <= exported and all(s.startswith("gpu_mlp_") for s in exported)
