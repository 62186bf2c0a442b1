"""Data-dependent outputs from C: a detection postprocessing (NMS -> gathers -> Concat) compiled to an artifact,
run by a C program that reads `NAME::bound` and prints the valid rows, compared with ONNX Runtime."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import core
from tests.core.graph.test_graph_bounded import _const, _model

MAIN_C = r"""
#include <stdio.h>
#include <stdint.h>
#include "kiln_model.h"

int main(int argc, char** argv) {
    static float boxes[KILN_INPUT_0_NUMEL], scores[KILN_INPUT_1_NUMEL];
    static float rows[KILN_OUTPUT_0_NUMEL];
    static int64_t bound[KILN_OUTPUT_1_NUMEL];
    FILE* f = fopen(argv[2], "rb");
    if (!f || fread(boxes, sizeof boxes, 1, f) != 1 || fread(scores, sizeof scores, 1, f) != 1) return 3;
    fclose(f);
    kiln_model* m = kiln_load(argv[1]);
    if (!m) { printf("load failed: %s\n", kiln_last_error()); return 1; }
    const void* inputs[KILN_NUM_INPUTS] = {boxes, scores};
    void* outputs[KILN_NUM_OUTPUTS] = {rows, bound};
    if (kiln_run(m, inputs, outputs) != 0) { printf("run failed: %s\n", kiln_last_error()); return 2; }
    printf("%s %s %lld %lld\n", KILN_OUTPUT_0_NAME, KILN_OUTPUT_1_NAME, (long long)bound[0], (long long)bound[1]);
    for (int64_t i = 0; i < bound[1] * 5; i++) printf("%.9g\n", rows[i]);
    kiln_free(m);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_program_reads_the_valid_rows_of_a_data_dependent_output(tmp_path):
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "threshold"], ["selected"]),
             helper.make_node("Gather", ["selected", "two"], ["box_index"], axis=1),
             helper.make_node("Squeeze", ["boxes", "axis0"], ["all_boxes"]),
             helper.make_node("Gather", ["all_boxes", "box_index"], ["picked"], axis=0),
             helper.make_node("GatherND", ["scores", "selected"], ["score"]),
             helper.make_node("Unsqueeze", ["score", "axis1"], ["score_column"]),
             helper.make_node("Concat", ["picked", "score_column"], ["detections"], axis=1)]
    model = _model(nodes, {"boxes": (TensorProto.FLOAT, [1, 6, 4]), "scores": (TensorProto.FLOAT, [1, 2, 6])},
                   {"detections": (TensorProto.FLOAT, 2)},
                   [_const("max_out", [3]), _const("iou", [0.5], np.float32), _const("threshold", [0.4], np.float32),
                    _const("two", 2), _const("axis0", [0]), _const("axis1", [1])], opset=13)
    art = tmp_path / "art"
    core.compile(model.SerializeToString(), "native").save(tmp_path / "nms.tar.gz")
    shutil.unpack_archive(tmp_path / "nms.tar.gz", art)
    (tmp_path / "main.c").write_text(MAIN_C)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", f"-I{art}", str(tmp_path / "main.c"), f"-L{art}",
                    "-lkiln_model", f"-Wl,-rpath,{art}", "-o", str(exe)], check=True, capture_output=True)
    rng = np.random.default_rng(2)
    corners = rng.uniform(0, 10, (1, 6, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(axis=2), corners.max(axis=2)], axis=-1).reshape(1, 6, 4)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for scores in (rng.uniform(0, 1, (1, 2, 6)).astype(np.float32), np.full((1, 2, 6), 0.1, np.float32)):
        (tmp_path / "in.bin").write_bytes(boxes.tobytes() + scores.tobytes())
        proc = subprocess.run([str(exe), str(art / "weights.bin"), str(tmp_path / "in.bin")], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        head, *values = proc.stdout.strip().split("\n")
        (want,) = reference.run(None, {"boxes": boxes, "scores": scores})
        assert head == f"detections detections::bound 0 {want.shape[0]}"
        got = np.array([float(v) for v in values], np.float32).reshape(-1, 5)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
