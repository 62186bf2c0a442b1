"""Half-precision jobs over HTTP: `"precision": "fp16"` reaches core.compile through Job.options; the job's artifact
has float16 weights and its report says how it was judged; an unknown precision is a 422 with one message."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from workers.compile_job import run_compile_job


def mlp() -> bytes:
    rng = np.random.default_rng(0)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
                              [numpy_helper.from_array(rng.standard_normal((128, 32)).astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_fp16_job_stores_float16_weights_and_is_judged_at_float16(api):
    headers = api.auth()
    model = api.upload(headers, mlp(), "mlp.onnx").json()
    job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "precision": "fp16"})
    assert job.status_code == 201, job.text
    assert run_compile_job(job.json()["id"], api.settings, api.app.state.db, worker="test") == "succeeded"
    report = api.client.get(f"/api/v1/jobs/{job.json()['id']}/report", headers=headers).json()
    assert report["precision"]["precision"] == "fp16" and report["precision"]["requested"]
    assert report["precision"]["weights_bytes_by_dtype"]["float16"] == 128 * 32 * 2
    assert report["validation"]["passed"] and "precision fp16" in report["validation"]["outputs"][0]["tolerance"]["why"]


def test_an_unknown_precision_is_refused(api):
    headers = api.auth()
    model = api.upload(headers, mlp(), "mlp.onnx").json()
    answer = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "precision": "fp8"})
    assert answer.status_code == 422 and "precision" in answer.text
