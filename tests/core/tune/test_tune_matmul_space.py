"""The MatMul template's spaces (packed B: micro-tile rows x columns, kc, mc row blocks, nc column
blocks, k unroll; plain: register tile, k tile, k unroll): random configs, applied through tuning
records, compile into models that compute numpy's product; the default is a point of the space."""
from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.frontend import import_onnx
from tests.backend_calls import optimize, extract_tasks
from core.target import get_target
from core.tune.records import Record, append_records

rng = np.random.default_rng(3)
SHAPES = [(24, 64, 48), (96, 256, 64), (1, 96, 40)]  # packed, packed with k and column blocks, a GEMV (plain)


def matmul_model(m: int, k: int, n: int) -> tuple[bytes, np.ndarray]:
    w = rng.standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString(), w


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_random_matmul_configs_compute_numpys_product(tmp_path, shape):
    data, w = matmul_model(*shape)
    (task,) = extract_tasks(optimize(import_onnx(data), 3), get_target("native"))
    space = task.space
    names = [k.name for k in space.knobs]
    if shape[0] == 1:
        assert not task.anchor_op.attrs.get("packed") and names == ["row", "col", "k_tile", "k_unroll"]
    else:
        assert task.anchor_op.attrs.get("packed") and {"row", "col", "k_tile", "row_block", "k_unroll"} <= set(names)
    if shape == (96, 256, 64):
        assert "col_blocks" in names and len(space.knobs[names.index("col_blocks")]) > 1
        assert len(space) >= 1000
    valid = [c for c in space if task.valid(c)]
    configs = [space.default] + random.Random(sum(shape)).sample(valid, 3)
    x = rng.standard_normal(shape[:2]).astype(np.float32)
    for k, config in enumerate(configs):
        records = tmp_path / f"r{k}.jsonl"
        append_records(records, [Record(task.key, "native", config.to_json(), config.index, (1e-3,), 0, 1.0, "MatMul")])
        artifact = core.compile(data, tuning={"trials": 0, "records": str(records)}, benchmark=False, validate=False)
        assert artifact.report["tuning"]["cache_hits"] == 1 and sum(kr["tuned"] for kr in artifact.report["kernels"]) == 1
        module = artifact.load()
        try:
            got = module.run({"x": x})["y"]
        finally:
            module.close()
        np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4, err_msg=str(dict(config.values)))
