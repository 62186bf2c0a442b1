"""The README's commands name files a fresh clone has (issue 36: they compiled ../shared/models/resnet18.onnx, which
only this workspace has), and its quick start's model compiles and matches ONNX Runtime."""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime

from examples.make_tiny_cnn import tiny_cnn
from tests.cli.test_cli import kiln
from tests.conftest import ROOT

FILE_IN_A_COMMAND = re.compile(r"(?<![\w$/.-])((?:\.\./|\./)?\w[\w.-]*(?:/[\w.-]+)+\.(?:onnx|npz|npy|py))\b")


def test_files_in_readme_commands_exist_in_a_clone():
    blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    named = {path for block in blocks for path in FILE_IN_A_COMMAND.findall(block)}
    assert "examples/tiny_cnn.onnx" in named
    missing = sorted(path for path in named if not (ROOT / path).exists() and not path.startswith(("/", "~")))
    assert not missing, f"README commands name files a clone does not have: {missing}"


def test_the_quick_start_model_is_the_script_s_and_compiles(tmp_path):
    shipped = onnx.load(ROOT / "examples" / "tiny_cnn.onnx")
    assert shipped.SerializeToString() == tiny_cnn().SerializeToString()  # examples/make_tiny_cnn.py remakes it
    out = tmp_path / "tiny_cnn.tar.gz"
    proc = kiln("compile", ROOT / "examples" / "tiny_cnn.onnx", "-t", "x86-64-v3", "-o", out)
    assert proc.returncode == 0 and "validation: max abs error" in proc.stdout, proc.stderr
    image = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "image.npy", image)
    ran = kiln("run", out, "--input", f"image={tmp_path / 'image.npy'}", "--save", tmp_path / "outs")
    assert ran.returncode == 0, ran.stderr
    want = onnxruntime.InferenceSession(str(ROOT / "examples" / "tiny_cnn.onnx")).run(None, {"image": image})[0]
    np.testing.assert_allclose(np.load(tmp_path / "outs" / "scores.npy"), want, rtol=1e-4, atol=1e-5)
