"""Kernels lowered on forked workers (core/lowering/executable.py, core/process/fork_map.py): the same library as a
serial build, checked against ONNX Runtime; a kernel failing in a worker gives its typed error; identical groups are
lowered once."""
from __future__ import annotations

import numpy as np
import pytest

import core
import core.lowering.executable as executable
from core.errors import ScheduleError
import onnxruntime as ort
from tests.core.codegen.test_kernel_cache import small_cnn
from tests.core.lowering.test_kernel_dedup import _executable, _layers


def _compile(model: bytes, jobs: int, monkeypatch):
    monkeypatch.setenv("KILN_BUILD_JOBS", str(jobs))
    return core.compile(model, "native", benchmark=False, kernel_cache="off")


def test_a_forked_build_gives_the_serial_build_s_library_and_matches_onnx_runtime(monkeypatch):
    model = small_cnn()
    serial, forked = _compile(model, 1, monkeypatch), _compile(model, 3, monkeypatch)
    assert serial.report["build"]["workers"] == 1 and forked.report["build"]["workers"] == 3
    assert serial.library.read_bytes() == forked.library.read_bytes()
    assert [k["name"] for k in serial.report["kernels"]] == [k["name"] for k in forked.report["kernels"]]
    x = np.random.default_rng(1).standard_normal((1, 4, 10, 10)).astype(np.float32)
    (expected,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with forked.load() as module:
        np.testing.assert_allclose(module.run({"x": x})["y"], expected, atol=1e-4, rtol=1e-4)


def test_a_kernel_failing_in_a_worker_fails_the_build_with_its_error(monkeypatch):
    lower_group = executable.lower_group

    def failing(nodes, graph, target, backend, name, *args, **kwargs):
        if any("Pool" in n.op for n in nodes):
            raise ScheduleError(f"{name}: no schedule on purpose")
        return lower_group(nodes, graph, target, backend, name, *args, **kwargs)

    monkeypatch.setattr(executable, "lower_group", failing)
    with pytest.raises(ScheduleError, match="pool.*: no schedule on purpose"):
        _compile(small_cnn(), 2, monkeypatch)


def test_identical_groups_are_lowered_once(monkeypatch):
    lowered, lower_group = [], executable.lower_group

    def counting(nodes, *args, **kwargs):
        lowered.append(tuple(n.op for n in nodes))
        return lower_group(nodes, *args, **kwargs)

    monkeypatch.setattr(executable, "lower_group", counting)
    one = _executable(_layers(1))
    once = len(lowered)
    three = _executable(_layers(3))
    assert len(lowered) == 2 * once and len(three.kernels) == 3 * len(one.kernels)
    assert len(three.funcs) == len(one.funcs)


def test_a_warm_forked_build_recalls_every_group_and_links_the_same_library(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_BUILD_JOBS", "2")
    cold = core.compile(small_cnn(), "native", benchmark=False, kernel_cache=tmp_path)
    warm = core.compile(small_cnn(), "native", benchmark=False, kernel_cache=tmp_path)
    assert cold.report["build"]["lowered_from_cache"] == 0 and cold.report["build"]["built"] >= 3
    assert warm.report["build"]["built"] == 0
    assert warm.report["build"]["lowered_from_cache"] >= warm.report["build"]["kernels"]
    assert warm.library.read_bytes() == cold.library.read_bytes()
