"""Static shapes and declared ranges go through one pipeline: a ranged artifact carries the same report sections and
manifest as a static one, rebuilds from it byte for byte, and int8 composes with ranges."""
from __future__ import annotations

import numpy as np

import core
from core.driver.rebuild import rebuild

from .dynamic_models import small_cnn

RANGES = {"x": (1, 3, "8..16", "8..16")}
SECTIONS = ("manifest", "build", "precision", "validation", "latency_ms", "timings_s", "tuning")


def test_a_ranged_artifact_has_every_static_section_and_its_manifest(tmp_path):
    model = small_cnn()
    static = core.compile(model, target="x86-64-v3", input_shapes={"x": (1, 3, 8, 8)}, benchmark=False)
    ranged = core.compile(model, target="x86-64-v3", input_shapes=RANGES, benchmark=False)
    for section in SECTIONS:
        assert section in static.report and section in ranged.report, section
    manifest = ranged.metadata["manifest"]
    assert manifest["options"]["input_shapes"] == {"x": [1, 3, "8..16", "8..16"]}
    assert ranged.report["dynamic_shapes"]["kernels_compiled"] > 0 and "dynamic_shapes" not in static.report
    assert ranged.report["validation"]["passed"] and len(ranged.report["validation"]["shapes"]) > 1
    path = ranged.save(tmp_path / "ranged.tar.gz")
    result = rebuild(path, model)
    assert result.identical, result.summary()
    with ranged.load() as module:  # a size between buckets, against the static build of that size
        x = np.random.default_rng(0).standard_normal((1, 3, 11, 13)).astype(np.float32)
        got = module.run({"x": x})["y"]
    with core.compile(model, target="x86-64-v3", input_shapes={"x": (1, 3, 11, 13)}, benchmark=False).load() as m:
        np.testing.assert_allclose(got, m.run({"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_an_int8_artifact_rebuilds_from_the_float_model_and_its_calibration_samples(tmp_path):
    from core.errors import KilnError
    from tests.core.quantize.models import write_calibration, write_model

    model, calibration = write_model(tmp_path), write_calibration(tmp_path, count=6)
    artifact = core.compile(model, target="x86-64-v3", precision="int8", calibration=calibration, benchmark=False,
                            quantization={"sensitivity_layers": 0})
    manifest = artifact.metadata["manifest"]
    assert manifest["options"]["precision"] == "int8" and manifest["options"]["quantization"]["sensitivity_layers"] == 0
    assert artifact.report["quantization"]["accuracy"]["measured_on"] == "kiln artifact"
    path = artifact.save(tmp_path / "int8.tar.gz")
    try:
        rebuild(path, model)
    except KilnError as err:
        assert "needs its calibration samples" in str(err)
    else:
        raise AssertionError("an int8 rebuild without its calibration samples was accepted")
    result = rebuild(path, model, calibration=calibration)
    assert result.identical, result.summary()
