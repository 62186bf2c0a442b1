"""Input-shape ranges on a real NVIDIA GPU (skipped without one; runs under `pytest --noconftest` in
bench/gpu_session.sh): an encoder (padded batch, masked sequence), a CNN (masked image sides) and a KV-cache decoder
compiled for cuda, validated by the compile on the GPU, and run at shapes between the compiled ones against ONNX
Runtime; torch device buffers of shapes in range through run_device (kiln_run_device_shaped)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import core
from core.runtime.loader import KilnRuntimeError, cuda_device_count
from tests.core.driver.dynamic_models import (assert_same_outputs, greedy_tokens, small_cnn, tiny_decoder,
                                              tiny_encoder)

pytestmark = pytest.mark.skipif(cuda_device_count() == 0, reason="needs an NVIDIA GPU and driver")


def _ir8(model: bytes) -> bytes:
    """The model at IR version 8 (the GPU machine's ONNX Runtime reads IR versions up to 13 only)."""
    proto = onnx.load_from_string(model)
    proto.ir_version = 8
    return proto.SerializeToString()


def _session(model: bytes):
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds)))


def _validated_on_the_gpu(art) -> None:
    assert art.report["device"]["ran"] is True
    validation = art.report["validation"]
    assert validation["passed"] is True and validation["samples"] > len(art.metadata["dynamic_shapes"]["buckets"])


def test_encoder_runs_batches_and_sequences_between_compiled_shapes():
    model = _ir8(tiny_encoder())
    art = core.compile(model, target="cuda", input_shapes={"input_ids": "1..4,1..64"}, benchmark=False)
    _validated_on_the_gpu(art)
    reference, rng = _session(model), np.random.default_rng(0)
    with art.load() as m:
        for shape in [(1, 1), (2, 7), (3, 33), (4, 64), (1, 50)]:
            ids = rng.integers(0, 50, shape).astype(np.int64)
            got, want = m.run({"input_ids": ids})["hidden"], reference({"input_ids": ids})["hidden"]
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(shape))
        with pytest.raises(KilnRuntimeError, match="outside the declared range 1..64"):
            m.run({"input_ids": np.zeros((1, 65), np.int64)})
        torch = pytest.importorskip("torch")
        for shape in [(4, 64), (2, 7), (3, 64), (1, 1)]:  # padded and cut on the device
            ids = rng.integers(0, 50, shape).astype(np.int64)
            (out_shape,) = m.output_shapes([shape])
            out = torch.full(out_shape, float("nan"), dtype=torch.float32, device="cuda")
            m.run_device({"input_ids": torch.from_numpy(ids).cuda()}, {"hidden": out})
            torch.cuda.synchronize()
            np.testing.assert_allclose(out.cpu().numpy(), reference({"input_ids": ids})["hidden"], rtol=1e-4,
                                       atol=1e-4, err_msg=str(shape))


def test_cnn_runs_image_sides_between_compiled_shapes():
    model = _ir8(small_cnn())
    art = core.compile(model, target="cuda", input_shapes={"x": "1..4,3,8..48,8..48"}, benchmark=False)
    _validated_on_the_gpu(art)
    reference, rng = _session(model), np.random.default_rng(1)
    with art.load() as m:
        for shape in [(1, 3, 8, 8), (3, 3, 19, 40), (4, 3, 48, 48), (2, 3, 33, 9)]:
            x = rng.standard_normal(shape).astype(np.float32)
            got, want = m.run({"x": x}), reference({"x": x})
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=f"{name} {shape}")


def test_decoder_generates_onnxruntimes_tokens_from_an_empty_cache():
    model = _ir8(tiny_decoder())
    art = core.compile(model, target="cuda", input_shapes={"input_ids": "1,1..8", "past_key_values.0.key":
                                                            "1,2,0..40,4"}, benchmark=False)
    _validated_on_the_gpu(art)
    prompt = [3, 1, 4, 1, 5]
    expected, reference = greedy_tokens(_session(model), prompt)
    with art.load() as m:
        tokens, outputs = greedy_tokens(m.run, prompt)
    assert tokens == expected
    for got, ref in zip(outputs, reference):  # present keys come back at past + new length
        assert_same_outputs(got, ref, rtol=1e-4, atol=1e-4)
