"""The shared models compiled for AArch64 and the Raspberry Pi 5 preset, run under qemu-aarch64, match ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

import core
from core.backends import get_backend
from core.driver.validate import index_bounds, onnxruntime_session, random_inputs
from core.frontend import import_onnx
from core.runtime.emulated import EMULATED
from core.target import get_target

pytestmark = pytest.mark.slow  # whole models under emulation: 3 to 20 s each here, resnet18 about a minute

# Every shared model for both; resnet18 (a minute each on 2 cores) for the preset only: the same ISA.
CASES = [(name, target) for name in ("squeezenet1_1", "bert_tiny", "mobilenet_v2") for target in ("aarch64", "rpi5")]
CASES.append(("resnet18", "rpi5"))


@pytest.mark.parametrize("name,target", CASES)
def test_shared_model_under_qemu_matches_onnxruntime(name, target, models_dir):
    data = (models_dir / f"{name}.onnx").read_bytes()
    artifact = core.compile(data, target=target)
    validation = artifact.report["validation"]
    assert validation.get("passed"), validation  # the compile's own check: seeded inputs, ORT, the policy
    assert validation["mode"] == EMULATED and artifact.report["latency_ms"] == {"skipped": EMULATED}

    # And on inputs of our own, through a fresh harness run of the saved artifact's folder.
    graph = import_onnx(data)
    feeds = random_inputs(graph, 7, index_bounds(graph))
    expected = dict(zip(graph.outputs, onnxruntime_session(data, 2).run(list(graph.outputs), feeds)))
    tgt = get_target(target)
    with get_backend(tgt).emulator(tgt).load(artifact.directory) as module:
        actual = module.run(feeds)
    for out in graph.outputs:  # atol scaled to the output: mobilenet_v2's logits here are ~1e-9
        scale = float(np.abs(expected[out]).max())
        np.testing.assert_allclose(actual[out], expected[out], rtol=1e-4, atol=1e-4 * scale, err_msg=f"{name} {out}")
