"""Artifacts for another CPU run under qemu-user through the C harness: same results as ONNX Runtime,
same input checks as the native Module, one clear error when the library fails, no timings."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.backends import get_backend
from core.driver.validate import onnxruntime_session
from core.runtime import KilnRuntimeError
from core.runtime.emulated import EMULATED, EmulatedModule, QemuUser
from core.target import get_target
from tests.conftest import tiny_model


def two_output_model() -> bytes:
    """A float image and int64 indices in; a conv summary and a table lookup out (two dtypes, two outputs)."""
    rng = np.random.default_rng(5)
    weight = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w")
    table = numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["y"]),
         helper.make_node("Gather", ["table", "idx"], ["g"], axis=0)],
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 1, 1]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [5, 4])], [weight, table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def emulator_for(name: str) -> QemuUser:
    target = get_target(name)
    found = get_backend(target).emulator(target)
    assert found is not None, "qemu-user and the AArch64 cross toolchain are missing (scripts/system-deps.sh installs them)"
    return found


@pytest.fixture(scope="module")
def aarch64_artifact():
    data = two_output_model()
    artifact = core.compile(data, target="aarch64", validate=False, benchmark=False)
    yield data, artifact.directory  # the artifact's own folder: metadata.json, the library, weights.bin
    del artifact


def test_emulated_module_matches_onnxruntime(aarch64_artifact):
    data, folder = aarch64_artifact
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32),
             "idx": np.array([9, 0, 3, 3, 7], dtype=np.int64)}
    session = onnxruntime_session(data, 1)
    expected = dict(zip(["y", "g"], session.run(["y", "g"], feeds)))
    with emulator_for("aarch64").load(folder) as module:
        module.set_num_threads(2)
        actual = module.run(feeds)
    assert set(actual) == {"y", "g"}
    np.testing.assert_allclose(actual["y"], expected["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(actual["g"], expected["g"])  # a gather copies: exact


def test_bad_feeds_get_the_native_modules_messages(aarch64_artifact):
    _, folder = aarch64_artifact
    with emulator_for("aarch64").load(folder) as module:
        with pytest.raises(ValueError, match=r"input 'x' has shape \(1, 3, 8, 8\), expected \(1, 3, 12, 12\)"):
            module.run({"x": np.zeros((1, 3, 8, 8), np.float32), "idx": np.zeros(5, np.int64)})
        with pytest.raises(ValueError, match="missing input"):
            module.run({"x": np.zeros((1, 3, 12, 12), np.float32)})


def test_a_library_failing_under_emulation_is_one_clear_error(aarch64_artifact, tmp_path):
    _, folder = aarch64_artifact
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    weights = broken / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:100])  # kiln_load checks the size: the library's own message
    with emulator_for("aarch64").load(broken) as module:
        with pytest.raises(KilnRuntimeError, match=r"failed under qemu-aarch64: kiln_load failed: .*weights"):
            module.run({"x": np.zeros((1, 3, 12, 12), np.float32), "idx": np.zeros(5, np.int64)})


def test_no_timings_come_from_emulation(aarch64_artifact):
    _, folder = aarch64_artifact
    with emulator_for("aarch64").load(folder) as module:
        for measure in (module.benchmark, module.profile):
            with pytest.raises(KilnRuntimeError, match="timings are not meaningful"):
                measure()


def test_only_foreign_architectures_are_emulated():
    for name in ("native", "x86-64-v3", "x86-64-v4"):  # x86-64-v4 on an AVX2 host: qemu's TCG has no AVX-512
        target = get_target(name)
        assert get_backend(target).emulator(target) is None
    native = core.compile(tiny_model(), target="native", validate=False, benchmark=False)
    with pytest.raises(KilnRuntimeError, match="built for x86_64.*emulator runs aarch64"):
        EmulatedModule(native.directory, emulator_for("aarch64"))


def test_compile_for_an_arm_preset_validates_under_emulation():
    data = two_output_model()
    artifact = core.compile(data, target="rpi5", name="armnet")  # a named library: armnet_load, armnet_run, ...
    assert artifact.metadata["library"] == "libarmnet.so"
    validation, latency = artifact.report["validation"], artifact.report["latency_ms"]
    assert validation["passed"] and validation["max_abs_err"] < 1e-4
    assert validation["mode"] == EMULATED and validation["emulator"].startswith("qemu-aarch64")
    assert latency == {"skipped": EMULATED}  # no latency number from emulation
    assert all(k["time_ms"] is None for k in artifact.report["kernels"])
    page = artifact.report_html
    assert f"{EMULATED}, under qemu-aarch64" in page and f"Latency was not measured: {EMULATED}." in page


def test_without_qemu_an_arm_compile_is_built_and_says_why_it_was_not_validated(monkeypatch):
    import core.runtime.emulated as emulated

    real_which = emulated.shutil.which
    monkeypatch.setattr(emulated.shutil, "which", lambda name: None if name.startswith("qemu-") else real_which(name))
    artifact = core.compile(tiny_model(), target="aarch64")
    reason = artifact.report["validation"]["skipped"]
    assert reason.startswith("target aarch64 cannot run on this host") and "qemu-aarch64 would validate it" in reason
    assert artifact.report["latency_ms"] == {"skipped": reason} and artifact.library.exists()
