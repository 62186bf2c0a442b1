"""One Backend per target kind: the registry, the capabilities, the passes each runs (and the report
lists), and a new kind registered from outside the package picked up without touching other modules."""
from __future__ import annotations

import dataclasses
import functools

import pytest

import core
from core import backends
from core.backends import get_backend, register_backend, resolve
from core.backends.base import BLOCKED_LAYOUT_PASSES
from core.backends.cpu import CpuBackend
from core.backends.cuda import CudaBackend
from core.errors import UnknownTargetError
from core.frontend import import_onnx
from core.graph.passes.manager import LEVELS
from core.runtime import loader
from core.runtime.package import target_metadata
from core.target import get_target
from tests.conftest import tiny_model

CUDA = get_target("cuda")


def test_each_target_kind_has_its_backend():
    for name in ("native", "x86-64-v3", "x86-64-v4", "aarch64"):
        assert isinstance(get_backend(get_target(name)), CpuBackend)
    assert isinstance(get_backend(get_target("cuda -arch=sm_90")), CudaBackend)
    with pytest.raises(UnknownTargetError, match="tpu"):
        get_backend(dataclasses.replace(get_target("native"), kind="tpu"))
    with pytest.raises(ValueError, match="twice"):
        register_backend(CpuBackend)


def test_capabilities_are_class_attributes():
    assert (CpuBackend.host_code, CpuBackend.has_shared, CpuBackend.blocked_layouts) == (True, False, True)
    assert (CudaBackend.host_code, CudaBackend.has_shared, CudaBackend.blocked_layouts) == (False, True, False)
    assert CpuBackend.device_queue is None and CudaBackend.device_queue == "gpu"
    assert CudaBackend.profiles_in_runtime and not CpuBackend.profiles_in_runtime


def test_cuda_skips_only_the_blocked_layout_passes():
    native = get_target("native")
    assert get_backend(native).pass_names(3) == LEVELS[3]
    cuda = get_backend(CUDA).pass_names(3)
    assert set(LEVELS[3]) - set(cuda) == BLOCKED_LAYOUT_PASSES and "fuse_ops" in cuda


@pytest.mark.parametrize("name,lanes", [("x86-64-v3", 8), ("x86-64-v4", 16), ("aarch64", 4)])
def test_the_layout_pass_gets_the_targets_vector_width_explicitly(name, lanes):
    target = get_target(name)
    (layout,) = [p for n, p in get_backend(target).graph_passes(3, target) if n == "alter_layout"]
    assert isinstance(layout, functools.partial) and layout.keywords == {"lanes": lanes, "max_winograd_tile": 4}
    (quick,) = [p for n, p in get_backend(target).graph_passes(3, target, quick=True) if n == "alter_layout"]
    assert quick.keywords == {"lanes": lanes, "max_winograd_tile": 0}  # a quick compile's convs run direct
    assert "alter_layout" not in dict(get_backend(CUDA).graph_passes(3, CUDA))


def test_the_runtime_metadata_tells_the_loader_what_the_library_needs():
    assert loader._needs_cuda_driver(target_metadata(*resolve(CUDA)))
    assert not loader._needs_cuda_driver(target_metadata(*resolve("native")))
    assert target_metadata(*resolve(CUDA))["target_kind"] == CudaBackend.kind  # still written, for older loaders


def test_the_report_lists_the_passes_that_ran():
    cpu = core.compile(tiny_model(), "native", validate=False, benchmark=False).report["graph"]["passes"]
    cuda = core.compile(tiny_model(), "cuda", validate=False, benchmark=False).report["graph"]["passes"]
    assert cpu == list(LEVELS[3]) and "alter_layout" in cpu
    assert cuda == list(get_backend(CUDA).pass_names(3)) and not BLOCKED_LAYOUT_PASSES & set(cuda)


def test_a_new_target_kind_is_one_backend_class(monkeypatch):
    monkeypatch.setattr(backends, "_BACKENDS", dict(backends._BACKENDS))  # registered for this test only

    @register_backend
    class PlainCpuBackend(CpuBackend):
        kind = "plain-cpu"
        blocked_layouts = False

        def has_device(self, target):
            return False

    target = dataclasses.replace(get_target("x86-64-v3"), name="plain", kind="plain-cpu")
    backend = get_backend(target)
    assert isinstance(backend, PlainCpuBackend) and not backend.describe(target)["runs_on_host"]
    assert backend.cannot_run_reason(target) == "target plain cannot run on this host"
    graph = backend.optimize(import_onnx(tiny_model()), 3, target)
    assert not any(n.op.endswith("NCHWc") or n.op == "LayoutTransform" for n in graph.nodes)
    assert backend.schedule("Relu", target) is CpuBackend().fallback_schedules()[0]  # no schedule of its own: generic
