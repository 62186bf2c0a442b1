"""Input-shape ranges on a cross-compiled CPU target: an encoder with a padded batch and a masked sequence, compiled
for the Raspberry Pi 5 preset, validated under qemu-aarch64 by the compile and run there at several shapes in range,
each compared with ONNX Runtime; a shape outside the range is one clear error."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import core
from core.driver.shape_ranges import check_ranges_supported
from core.errors import ShapeError
from core.runtime import KilnRuntimeError
from core.runtime.emulated import EMULATED
from tests.core.driver.dynamic_models import tiny_encoder
from tests.core.runtime.test_runtime_emulated import emulator_for


@pytest.fixture(scope="module")
def rpi5_encoder():
    model = tiny_encoder()
    artifact = core.compile(model, target="rpi5", name="armenc", input_shapes={"input_ids": "1..2,1..16:8|16"})
    assert artifact.metadata["library"] == "libarmenc.so"  # a named library: armenc_run_shaped, ...
    yield model, artifact
    del artifact


def test_the_compile_validates_shapes_in_range_under_emulation(rpi5_encoder):
    _, artifact = rpi5_encoder
    variables = artifact.metadata["dynamic_shapes"]["variables"]
    assert [(v["name"], v["padded"], v["masked"]) for v in variables] == [("batch", True, False), ("seq", False, True)]
    validation = artifact.report["validation"]
    assert validation["passed"] and validation["mode"] == EMULATED and validation["emulator"].startswith("qemu-aarch64")
    assert [2, 15] in [s["input_ids"] for s in validation["shapes"]]  # a masked size between buckets, under qemu
    assert artifact.report["latency_ms"] == {"skipped": EMULATED}


def test_shapes_in_range_match_onnxruntime_under_emulation(rpi5_encoder):
    model, artifact = rpi5_encoder
    session = ort.InferenceSession(model)
    rng = np.random.default_rng(4)
    with emulator_for("rpi5").load(artifact.directory) as module:
        for batch, seq in ((1, 1), (2, 7), (1, 9), (2, 16)):  # (2, 16): the upper bounds, through kiln_run
            feeds = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64)}
            got, ref = module.run(feeds)["hidden"], session.run(["hidden"], feeds)[0]
            assert got.shape == ref.shape == (batch, seq, 16)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
        with pytest.raises(KilnRuntimeError, match=r"under qemu-aarch64: .*is 17, outside the declared range 1..16"):
            module.run({"input_ids": np.zeros((1, 17), np.int64)})
        with pytest.raises(ValueError, match="rank 3"):
            module.run({"input_ids": np.zeros((1, 2, 3), np.int64)})


def test_every_target_takes_ranges_and_only_bisection_is_refused():
    """Ranges were refused up front for cuda (and CPU targets that run nowhere here); now every target takes them:
    the artifact is validated where it runs, built elsewhere, as with fixed shapes. Validation inputs were refused
    with ranges too; now they are the samples validated (changed on purpose: tests/core/driver/
    test_pipeline_control_flow.py)."""
    check_ranges_supported()  # passes, whatever the target
    with pytest.raises(ShapeError, match="cannot be combined with --bisect"):
        check_ranges_supported(bisect=True)
