"""CUDA artifacts built without a GPU: their members and header, the host library's C ABI and tables,
the embedded PTX (assembled by ptxas for sm_80 and sm_90), and the clear error loading gives on a
machine without an NVIDIA driver."""
from __future__ import annotations

import ctypes
import json
import subprocess
import tarfile

import pytest

from tests.core.runtime import cuda_models
from tests.backend_calls import build_library
from core.target import get_target
from core.codegen.build_cuda import DEVICE_ALIGN, check_ptx, device_layout
from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import find_ptxas
from core.errors import BuildError, CodegenError
from core.runtime import KilnRuntimeError, load
from core.runtime.loader import _cuda_driver, cuda_device_count
from core.runtime.package import read_artifact_member

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
no_driver = pytest.mark.skipif(_cuda_driver() is not None, reason="this machine has an NVIDIA driver")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return cuda_models.build_artifact(tmp_path_factory.mktemp("cuda"), "cuda -arch=sm_90")


def _library(path):
    lib = ctypes.CDLL(str(path))
    lib.kiln_kernel_call_name.restype = ctypes.c_char_p
    lib.kiln_arena_size.restype = ctypes.c_int64
    lib.kiln_weights_size.restype = ctypes.c_int64
    return lib


def test_artifact_members_metadata_and_header(artifact):
    with tarfile.open(artifact) as tar:
        assert {"libkiln_model.so", "kiln_model.h", "weights.bin", "metadata.json", "kiln_loader.py"} <= set(tar.getnames())
    meta = json.loads(read_artifact_member(artifact, "metadata.json"))
    assert (meta["target_kind"], meta["cuda_arch"], meta["triple"]) == ("cuda", "sm_90", "nvptx64-nvidia-cuda")
    assert meta["host_triple"].startswith(("x86_64", "aarch64"))
    header = read_artifact_member(artifact, "kiln_model.h").decode()
    assert '#define KILN_CUDA_ARCH "sm_90"' in header and "kiln_run(kiln_model* model" in header
    assert "libcuda.so.1" in read_artifact_member(artifact, "README.txt").decode()
    W, b = cuda_models.weights()
    assert read_artifact_member(artifact, "weights.bin") == W.tobytes() + b.tobytes()


def test_host_library_has_the_cpu_abi_and_the_launch_tables(artifact):
    lib = _library(artifact.parent / "libkiln_model.so")
    assert (lib.kiln_num_inputs(), lib.kiln_num_outputs(), lib.kiln_num_kernel_calls()) == (1, 2, 3)
    assert [lib.kiln_kernel_call_name(i) for i in range(3)] == [b"scale_shift", b"matmul", b"bias_relu"]
    assert lib.kiln_kernel_call_name(3) is None
    M, K, N = cuda_models.M, cuda_models.K, cuda_models.N
    # The device arena: the plan's arena, then the staged input and the two outputs, each 256-byte aligned.
    assert lib.kiln_arena_size() == M * K * 4 + M * K * 4 + 2 * M * N * 4
    assert lib.kiln_weights_size() == (K * N + N) * 4
    assert not hasattr(lib, "kiln_device_attach")  # hidden: CPU libraries' weak hook can never bind to it


def test_embedded_ptx_is_the_generated_ptx(artifact):
    lib = ctypes.CDLL(str(artifact.parent / "libkiln_model.so"))
    embedded = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "kiln_cuda_ptx"))).decode()
    ptx, _ = emit_ptx(cuda_models.kernels(), build_target("sm_90"))
    assert embedded == ptx and ".target sm_90" in embedded
    assert ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "kiln_cuda_arch"))) == b"sm_90"


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_assembles_for_the_architecture(arch):
    ptx, launches = emit_ptx(cuda_models.kernels(), build_target(arch))
    assert check_ptx(ptx, build_target(arch)) is True
    assert launches["matmul"].grid == (cuda_models.N // 16, cuda_models.M // 16, 1)


def build_target(arch):
    from core.target import get_target

    return get_target(f"cuda -arch={arch}")


@needs_ptxas
def test_ptx_ptxas_rejects_fails_the_build():
    with pytest.raises(BuildError, match="ptxas"):
        check_ptx(".version 7.8\n.target sm_90\n.address_size 64\nthis is not ptx\n", build_target("sm_90"))


def test_device_layout_stages_inputs_and_outputs_after_the_arena():
    plan = cuda_models.plan()
    layout = device_layout(plan, {f.name: f for f in cuda_models.kernels()})
    M, K, N = cuda_models.M, cuda_models.K, cuda_models.N
    assert layout.input_offsets == (M * K * 4,) and layout.input_bytes == (M * K * 4,)
    assert layout.output_bytes == (M * N * 4, M * N * 4)
    assert layout.output_offsets == (2 * M * K * 4, 2 * M * K * 4 + M * N * 4)
    assert all(o % DEVICE_ALIGN == 0 for o in layout.input_offsets + layout.output_offsets)
    assert layout.resolve(plan.calls[2].args[0]) == (1, layout.output_offsets[0])  # output 0 read back from the arena
    assert layout.resolve(plan.calls[1].args[1]) == (0, 0)  # weights


def test_a_cuda_library_needs_a_plan(tmp_path):
    with pytest.raises(CodegenError, match="whole model"):
        build_library(cuda_models.kernels(), get_target("cuda"), tmp_path / "lib.so")


def test_cpu_libraries_carry_no_device_backend(tmp_path):
    from tests.core.runtime.conftest import tiny_kernels, tiny_plan

    lib = build_library(tiny_kernels(), get_target("native"), tmp_path / "cpu.so", plan=tiny_plan())
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert "kiln_load" in symbols and "kiln_device_attach" not in symbols


@no_driver
def test_loading_without_a_driver_says_it_needs_an_nvidia_gpu(artifact):
    with pytest.raises(KilnRuntimeError, match=r"runs on an NVIDIA GPU \(sm_90\).*no NVIDIA driver"):
        load(artifact)
    # The C ABI alone (no Python loader) refuses with the same reason and never crashes.
    lib = ctypes.CDLL(str(artifact.parent / "libkiln_model.so"))
    lib.kiln_load_from_memory.restype = ctypes.c_void_p
    lib.kiln_last_error.restype = ctypes.c_char_p
    W, b = cuda_models.weights()
    blob = W.tobytes() + b.tobytes()
    assert lib.kiln_load_from_memory(blob, ctypes.c_int64(len(blob))) is None
    assert b"libcuda.so.1 cannot be loaded" in lib.kiln_last_error()


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a GPU: the pipeline validates there")
def test_the_pipeline_builds_without_a_gpu_and_says_it_did_not_run(tmp_path):
    import core

    artifact = core.compile(cuda_models.mlp_onnx(), target="cuda -arch=sm_90")
    report = artifact.report
    assert report["device"] == {"kind": "cuda", "arch": "sm_90", "ptxas_checked": find_ptxas() is not None, "ran": False}
    for key in ("validation", "latency_ms"):
        assert report[key]["skipped"].startswith("no NVIDIA GPU on this machine: the sm_90 artifact was built")
    assert (artifact.metadata["target_kind"], artifact.metadata["cuda_arch"]) == ("cuda", "sm_90")
    saved = artifact.save(tmp_path / "mlp.tar.gz")
    assert json.loads(read_artifact_member(saved, "report.json"))["device"]["ran"] is False


def test_the_loader_checks_the_host_side_of_gpu_artifacts(monkeypatch):
    from core.runtime import loader

    other = "aarch64" if loader._host_arch() != "aarch64" else "x86_64"
    with pytest.raises(KilnRuntimeError, match=f"launches its GPU kernels from a {other} library"):
        loader._check_machine({"target": "cuda", "target_kind": "cuda", "host_triple": f"{other}-unknown-linux-gnu"})
    # Older metadata without target_kind: the nvptx triple alone marks a GPU artifact (never "built for nvptx64").
    monkeypatch.setattr(loader, "_cuda_driver", lambda: None)
    with pytest.raises(KilnRuntimeError, match=r"runs on an NVIDIA GPU \(sm_80\).*no NVIDIA driver"):
        loader._check_machine({"target": "cuda", "target_triple": "nvptx64-nvidia-cuda", "cpu": "sm_80"})
    monkeypatch.setattr(loader, "_cuda_driver", lambda: object())
    loader._check_machine({"target": "cuda", "target_kind": "cuda", "cuda_arch": "sm_80"})  # the GPU: kiln_load's check
