"""kiln_run_shaped from C: a program against the header of an artifact compiled with a batch range runs a
batch no bucket has (padded inside), reads the output's shape back, and gets clear errors outside the range."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

import core

from tests.core.driver.dynamic_models import small_cnn

MAIN_C = r"""
#include <stdio.h>
#include <string.h>
#include "kiln_model.h"

int main(int argc, char** argv) {
    static float x[KILN_INPUT_0_NUMEL], y[KILN_OUTPUT_0_NUMEL];
    for (int i = 0; i < 3 * 3 * 8 * 8; i++) x[i] = (float)(i % 17) * 0.25f - 2.0f;
    kiln_model* m = kiln_load(argv[1]);
    if (!m) { printf("load failed: %s\n", kiln_last_error()); return 1; }
    int64_t lo[4], hi[4], max_out[2], out_shape[2] = {-1, -1};
    const int64_t min_shape[] = KILN_INPUT_0_MIN_SHAPE;
    if (kiln_input_range(0, lo, hi) != 4 || lo[0] != 1 || hi[0] != 16 || min_shape[0] != 1) return 3;
    if (kiln_output_max_shape(0, max_out) != 2 || max_out[0] != 16 || kiln_num_buckets() != KILN_NUM_BUCKETS) return 4;
    const int64_t shape[] = {3, 3, 8, 8};
    const void* inputs[] = {x};
    const int64_t* input_shapes[] = {shape};
    void* outputs[] = {y};
    int64_t* output_shapes[] = {out_shape};
    if (kiln_run_shaped(m, inputs, input_shapes, outputs, output_shapes) != 0) {
        printf("run failed: %s\n", kiln_last_error());
        return 2;
    }
    printf("%lld %lld\n", (long long)out_shape[0], (long long)out_shape[1]);
    for (int i = 0; i < out_shape[0] * out_shape[1]; i++) printf("%.9g\n", y[i]);
    const int64_t too_big[] = {17, 3, 8, 8}, wrong_side[] = {2, 3, 8, 9};
    const int64_t* bad[] = {too_big};
    printf("rc %d: %s\n", kiln_run_shaped(m, inputs, bad, outputs, NULL), kiln_last_error());
    bad[0] = wrong_side;
    printf("rc %d: %s\n", kiln_run_shaped(m, inputs, bad, outputs, NULL), kiln_last_error());
    printf("rc %d: %s\n", kiln_run_shaped(m, inputs, NULL, outputs, NULL), kiln_last_error());
    const uint64_t device_in[] = {(uint64_t)(uintptr_t)x}, device_out[] = {(uint64_t)(uintptr_t)y};
    printf("rc %d: %s\n", kiln_run_device_shaped(m, device_in, input_shapes, device_out, NULL, NULL), kiln_last_error());
    kiln_free(m);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_program_runs_a_padded_batch_and_reads_errors(tmp_path):
    model = small_cnn()
    art = core.compile(model, input_shapes={"x": "1..16,3,8,8"}, validate=False, benchmark=False)
    folder = art.directory
    (tmp_path / "main.c").write_text(MAIN_C)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", f"-I{folder}", str(tmp_path / "main.c"),
                    f"-L{folder}", "-lkiln_model", f"-Wl,-rpath,{folder}", "-o", str(exe)], check=True, capture_output=True)
    proc = subprocess.run([str(exe), str(folder / "weights.bin")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "3 5"
    got = np.array([float(v) for v in lines[1:16]], dtype=np.float32).reshape(3, 5)
    x = ((np.arange(3 * 3 * 8 * 8) % 17).astype(np.float32) * np.float32(0.25) - 2).reshape(3, 3, 8, 8)
    np.testing.assert_allclose(got, ort.InferenceSession(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert lines[16].startswith("rc -1: ") and "is 17, outside the declared range 1..16" in lines[16]
    assert lines[17].startswith("rc -1: ") and "dim 3 is 9, but the model fixes it to 8" in lines[17]
    assert lines[18] == "rc -1: kiln_run_shaped: input_shapes is NULL"
    assert lines[19] == "rc -1: kiln_run_device: this model runs on the CPU; pass host buffers to kiln_run"


def test_a_named_artifact_exports_the_shaped_entry_point_under_its_name():
    model = small_cnn()
    art = core.compile(model, input_shapes={"x": "1..4,3,8,8"}, name="cnn_dyn", validate=False, benchmark=False)
    header = (art.directory / "cnn_dyn.h").read_text()
    assert "int cnn_dyn_run_shaped(cnn_dyn_model* model" in header and "CNN_DYN_INPUT_0_MAX_SHAPE {4, 3, 8, 8}" in header
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    with art.load() as module:
        np.testing.assert_allclose(module.run({"x": x})["y"], ort.InferenceSession(model).run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)


GENERATE_C = r"""
#include <stdio.h>
#include <string.h>
#include "kiln_model.h"

enum { LAYERS = 2, VOCAB = 32, STEPS = 32 };

int main(int argc, char** argv) {
    static int64_t ids[8], mask[64];
    static float past[2 * LAYERS][KILN_INPUT_2_NUMEL], present[2 * LAYERS][KILN_OUTPUT_1_NUMEL];
    static float logits[KILN_OUTPUT_0_NUMEL];
    const int64_t prompt[] = {3, 1, 4, 1, 5};
    int64_t n = 5, seen = 0;
    memcpy(ids, prompt, sizeof prompt);
    for (int i = 0; i < 64; i++) mask[i] = 1;
    kiln_model* m = kiln_load(argv[1]);
    if (!m) { printf("load failed: %s\n", kiln_last_error()); return 1; }
    for (int step = 0; step < STEPS; step++) {
        int64_t ids_shape[2] = {1, n}, mask_shape[2] = {1, seen + n}, past_shape[4] = {1, 2, seen, 4};
        int64_t logits_shape[3], present_shape[2 * LAYERS][4];
        const void* inputs[2 + 2 * LAYERS] = {ids, mask};
        const int64_t* input_shapes[2 + 2 * LAYERS] = {ids_shape, mask_shape};
        void* outputs[1 + 2 * LAYERS] = {logits};
        int64_t* output_shapes[1 + 2 * LAYERS] = {logits_shape};
        for (int k = 0; k < 2 * LAYERS; k++) {
            inputs[2 + k] = seen ? past[k] : NULL; /* an empty cache needs no buffer */
            input_shapes[2 + k] = past_shape;
            outputs[1 + k] = present[k];
            output_shapes[1 + k] = present_shape[k];
        }
        if (kiln_run_shaped(m, inputs, input_shapes, outputs, output_shapes) != 0) {
            printf("run failed: %s\n", kiln_last_error());
            return 2;
        }
        if (logits_shape[1] != n || logits_shape[2] != VOCAB || present_shape[0][2] != seen + n) return 3;
        const float* last = logits + (n - 1) * VOCAB;
        int token = 0;
        for (int v = 1; v < VOCAB; v++) if (last[v] > last[token]) token = v;
        printf("%d\n", token);
        for (int k = 0; k < 2 * LAYERS; k++) memcpy(past[k], present[k], sizeof(float) * 2 * (seen + n) * 4);
        seen += n;
        n = 1;
        ids[0] = token;
    }
    kiln_free(m);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_program_generates_with_a_growing_kv_cache_like_onnxruntime(tmp_path):
    from tests.core.driver.dynamic_models import greedy_tokens, tiny_decoder

    model = tiny_decoder()
    art = core.compile(model, input_shapes={"input_ids": "1,1..8:1|8", "past_key_values.0.key": "1,2,0..40:40,4"},
                       validate=False, benchmark=False)
    folder = art.directory
    (tmp_path / "generate.c").write_text(GENERATE_C)
    exe = tmp_path / "generate"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", f"-I{folder}", str(tmp_path / "generate.c"),
                    f"-L{folder}", "-lkiln_model", f"-Wl,-rpath,{folder}", "-o", str(exe)],
                   check=True, capture_output=True)
    proc = subprocess.run([str(exe), str(folder / "weights.bin")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    session = ort.InferenceSession(model)
    names = [o.name for o in session.get_outputs()]
    expected, _ = greedy_tokens(lambda feeds: dict(zip(names, session.run(None, feeds))), [3, 1, 4, 1, 5])
    assert [int(t) for t in proc.stdout.split()] == expected
