"""`kiln targets` lists the Arm presets with the emulator that validates them; `kiln compile -t rpi5` validates under
it, and `kiln run` runs that artifact under it too."""
from __future__ import annotations

import json
import tarfile

from tests.cli.test_cli import kiln
from tests.conftest import tiny_model


def test_targets_lists_the_arm_presets_and_their_emulator():
    proc = kiln("targets")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for name in ("aarch64", "rpi4", "rpi5", "graviton2", "graviton3", "ampere-altra", "jetson-orin"):
        assert "128-bit SIMD" in lines[name] and "validated under qemu-aarch64" in lines[name], lines[name]
    listed = {t["name"]: t for t in json.loads(kiln("targets", "--json").stdout)}
    assert listed["graviton3"]["cpu"] == "neoverse-v1" and listed["graviton3"]["emulator"] == "qemu-aarch64"


def test_compile_for_rpi5_says_it_was_validated_under_emulation(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model())
    out = tmp_path / "tiny-rpi5.tar.gz"
    proc = kiln("compile", model, "-t", "rpi5", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "emulated (correctness only; timings are not meaningful) under qemu-aarch64" in proc.stdout
    assert "latency:" not in proc.stdout
    with tarfile.open(out) as tar:
        report = json.load(tar.extractfile("report.json"))
        metadata = json.load(tar.extractfile("metadata.json"))
    assert report["validation"]["passed"] and report["latency_ms"] == {"skipped": report["validation"]["mode"]}
    assert metadata["target"] == "rpi5" and metadata["target_triple"].startswith("aarch64")

    # `kiln run` on this foreign artifact runs it under qemu (outputs only), compared with ONNX Runtime here.
    ran = kiln("run", out, "--compare", model)
    assert ran.returncode == 0, ran.stderr
    assert "built for aarch64" in ran.stderr and "under qemu-aarch64" in ran.stderr and "not meaningful" in ran.stderr
    assert ran.stdout.startswith("y: float32") and ": ok\nmatches ONNX Runtime" in ran.stdout
    bench = kiln("run", out, "--bench")
    assert bench.returncode != 0 and "no benchmark of a model run under qemu-aarch64" in bench.stderr
    assert "Traceback" not in bench.stderr
