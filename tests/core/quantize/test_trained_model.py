"""A real trained model: PaddleOCR's PP-OCRv4 text recognizer from the rapidocr-onnxruntime wheel, quantized by
`kiln quantize` on text lines rendered with PIL; the automatic fallback keeps >= 99% argmax agreement with float32
on the held-back lines (every position of the CTC output: 40 per line)."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_cli import kiln

pytestmark = pytest.mark.slow

WHEEL = "rapidocr-onnxruntime==1.4.4"
RECOGNIZER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"
WORDS = ("the quick brown fox jumps over a lazy dog invoice total amount date name address kiln compiler "
         "2026 order 42 paid due street city").split()


@pytest.fixture(scope="session")
def rapidocr_wheel() -> Path:
    """The wheel, downloaded once into ~/.cache/kiln/test-wheels (skips with pip's reason when it cannot)."""
    cache = Path.home() / ".cache" / "kiln" / "test-wheels"
    found = sorted(cache.glob("rapidocr_onnxruntime-1.4.4-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(cache)],
                              capture_output=True, text=True, timeout=600)
        found = sorted(cache.glob("rapidocr_onnxruntime-1.4.4-*.whl"))
        if proc.returncode != 0 or not found:
            pytest.skip(f"cannot download {WHEEL}: {(proc.stderr.strip().splitlines() or ['no wheel'])[-1]}")
    return found[0]


def text_lines(count: int, seed: int = 0) -> np.ndarray:
    """`count` rendered text lines as the recognizer takes them: [count, 1, 3, 48, 320], (pixel/255 - 0.5)/0.5,
    padded on the right with zeros (rapidocr's resize_norm_img)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    try:
        font = ImageFont.load_default(size=30)
    except TypeError:  # Pillow < 10.1: the small bitmap font, scaled up below
        font = ImageFont.load_default()
    lines = np.zeros((count, 1, 3, 48, 320), np.float32)
    for i in range(count):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 4))))
        width = int(font.getlength(text)) + 16
        image = Image.new("L", (width, 48), int(rng.integers(190, 256)))
        ImageDraw.Draw(image).text((8, 6), text, fill=int(rng.integers(0, 70)), font=font)
        resized = image.resize((min(320, width), 48)).convert("RGB")
        pixels = (np.asarray(resized, np.float32).transpose(2, 0, 1) / 255 - 0.5) / 0.5
        lines[i, 0, :, :, :pixels.shape[2]] = pixels
    return lines


def test_pp_ocr_recognizer_keeps_99_percent_argmax_agreement(rapidocr_wheel, tmp_path):
    with zipfile.ZipFile(rapidocr_wheel) as wheel:
        model = tmp_path / "rec.onnx"
        model.write_bytes(wheel.read(RECOGNIZER))
    calibration = tmp_path / "lines.npz"
    np.savez(calibration, x=text_lines(30))
    report, out = tmp_path / "quantization.json", tmp_path / "rec_int8.onnx"
    proc = kiln("quantize", model, "--calibration", calibration, "--per-channel", "--op-types", "Conv", "MatMul",
                "--max-error", "0.05", "--sensitivity-layers", "64", "--report", report, "-o", out)
    assert proc.returncode == 0, proc.stderr
    section = json.loads(report.read_text())
    (scores,) = section["accuracy"]["outputs"]
    assert scores["top1_positions"] == 6 * 40  # 6 held-back lines x 40 CTC positions
    assert scores["top1_agreement"] >= 0.99, section
    assert f"top-1 agreement {scores['top1_agreement']:.2%} of 240" in proc.stdout
    assert section["budget_met"] and section["layers"]["quantized"] > 0
    # the reported agreement is what the written model gives (its Q/DQ as the spec defines them: the exact reference,
    # not ORT's fused int8 kernels, which saturate on hosts without VNNI) against the float32 one
    from core.driver.reference import reference_session
    from core.quantize.calibration import split_samples

    _, held_back = split_samples([{"x": line} for line in np.load(calibration)["x"]])
    fp32, int8 = reference_session(model, 1), reference_session(out, 1)
    agree = np.mean([fp32.run(None, s)[0].argmax(-1) == int8.run(None, s)[0].argmax(-1) for s in held_back])
    assert agree == pytest.approx(scores["top1_agreement"])
