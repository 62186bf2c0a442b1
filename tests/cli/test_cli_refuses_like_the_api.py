"""`kiln compile` and POST /jobs refuse the same requests up front, with the same rule (issue 36): tuning a target
nothing here can measure, and declared ranges for a GPU target (a foreign CPU runs them under qemu-user)."""
from __future__ import annotations

from tests.cli.test_cli import kiln
from tests.conftest import tiny_model


def test_tuning_a_target_nothing_here_measures_is_refused_before_any_work(tmp_path):
    """It printed "tuning records: 0 of 18 tasks have a tuned config" and built untuned; the API answers 422."""
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model())
    out = tmp_path / "tiny.tar.gz"
    proc = kiln("compile", model, "-t", "rpi5", "--tune-trials", "6", "-o", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "kiln: error:" in proc.stderr and "Traceback" not in proc.stderr
    assert "can measure rpi5 code, so target 'rpi5' cannot be tuned here" in proc.stderr
    assert not out.exists()


def test_ranges_with_bisection_are_refused_by_both(tmp_path, api):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model(symbolic=True))
    proc = kiln("compile", model, "--bisect", "--input-shape", "x=1..4,3,8,8", "-o", tmp_path / "out.tar.gz")
    assert proc.returncode == 2 and "input-shape ranges cannot be combined with" in proc.stderr, proc.stderr

    headers = api.auth()
    uploaded = api.upload(headers, model.read_bytes()).json()
    answer = api.client.post("/api/v1/jobs", headers=headers, json={
        "model_id": uploaded["id"], "input_shapes": {"x": ["1..4", 3, 8, 8]}, "validation": {"bisect": True}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"]["code"] == "shape_error"
    assert proc.stderr.split("kiln: error: ", 1)[1].strip() in answer.json()["detail"]["message"]
    assert api.queued == []


def test_ranges_for_a_gpu_target_are_taken_by_the_api(tmp_path, api):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model(symbolic=True))
    headers = api.auth()
    uploaded = api.upload(headers, model.read_bytes()).json()
    answer = api.client.post("/api/v1/jobs", headers=headers, json={
        "model_id": uploaded["id"], "target": "cuda", "input_shapes": {"x": ["1..4", 3, 8, 8]}})
    assert answer.status_code == 201, answer.text  # was 422: "... not cuda yet: give fixed shapes"
    assert len(api.queued) == 1
