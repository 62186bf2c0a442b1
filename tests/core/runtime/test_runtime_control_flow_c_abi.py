"""Run-time control flow from C, without Python: an If whose branches give different shapes (the program reads
`y::shape`) and a Loop past its compiled trip bound (return code 4 and kiln_last_error()), compared with ONNX
Runtime."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

import core
from tests.core.frontend.test_frontend_control_flow_runtime import _if_model, _loop_model

pytestmark = [pytest.mark.timeout(600), pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")]

MAIN_C = r"""
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include "kiln_model.h"

/* argv: the weights, then one raw file per input; prints each output's raw bytes into out<i>.bin */
int main(int argc, char** argv) {
    static const int64_t in_bytes[KILN_NUM_INPUTS] = {IN_BYTES};
    static const int64_t out_bytes[KILN_NUM_OUTPUTS] = {OUT_BYTES};
    const void* inputs[KILN_NUM_INPUTS];
    void* outputs[KILN_NUM_OUTPUTS];
    for (int i = 0; i < KILN_NUM_INPUTS; i++) {
        void* data = malloc(in_bytes[i] ? in_bytes[i] : 1);
        FILE* f = fopen(argv[2 + i], "rb");
        if (!f || fread(data, 1, in_bytes[i], f) != (size_t)in_bytes[i]) return 3;
        fclose(f);
        inputs[i] = data;
    }
    for (int i = 0; i < KILN_NUM_OUTPUTS; i++) outputs[i] = calloc(1, out_bytes[i] ? out_bytes[i] : 1);
    kiln_model* m = kiln_load(argv[1]);
    if (!m) { printf("load failed: %s\n", kiln_last_error()); return 1; }
    int rc = kiln_run(m, inputs, outputs);
    if (rc != 0) { printf("rc %d: %s\n", rc, kiln_last_error()); return 2; }
    for (int i = 0; i < KILN_NUM_OUTPUTS; i++) {
        char name[32];
        snprintf(name, sizeof name, "out%d.bin", i);
        FILE* f = fopen(name, "wb");
        fwrite(outputs[i], 1, out_bytes[i], f);
        fclose(f);
    }
    kiln_free(m);
    return 0;
}
"""


def _build(tmp_path, model: bytes, **options):
    art = tmp_path / "art"
    artifact = core.compile(model, validate=False, benchmark=False, **options)
    artifact.save(tmp_path / "model.tar.gz")
    shutil.unpack_archive(tmp_path / "model.tar.gz", art)
    meta = artifact.metadata

    def nbytes(info):
        return int(np.prod(info["shape"], dtype=np.int64)) * np.dtype(info["dtype"]).itemsize

    source = MAIN_C.replace("IN_BYTES", ", ".join(str(nbytes(i)) for i in meta["inputs"]))
    source = source.replace("OUT_BYTES", ", ".join(str(nbytes(o)) for o in meta["outputs"]))
    (tmp_path / "main.c").write_text(source)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", f"-I{art}", str(tmp_path / "main.c"), f"-L{art}",
                    "-lkiln_model", f"-Wl,-rpath,{art}", "-o", str(exe)], check=True, capture_output=True)

    def run(feeds: dict):
        files = []
        for info in meta["inputs"]:
            path = tmp_path / f"in_{len(files)}.bin"
            np.ascontiguousarray(feeds[info["name"]], dtype=info["dtype"]).tofile(path)
            files.append(str(path))
        done = subprocess.run([str(exe), str(art / "weights.bin"), *files], cwd=tmp_path, capture_output=True, text=True)
        if done.returncode:
            return done.stdout.strip()
        return {o["name"]: np.fromfile(tmp_path / f"out{i}.bin", dtype=o["dtype"]) for i, o in enumerate(meta["outputs"])}
    return run


def test_a_c_program_reads_the_shape_of_the_taken_branch(tmp_path):
    model = _if_model()
    run = _build(tmp_path, model)
    session = ort.InferenceSession(model)
    rng = np.random.default_rng(8)
    for sign in (1, -1):
        x = (np.abs(rng.standard_normal((2, 3))) * sign).astype(np.float32)
        expected = session.run(None, {"x": x})[0]
        got = run({"x": x})
        rank, *dims = got["y::shape"].tolist()
        assert tuple(dims[:rank]) == expected.shape
        np.testing.assert_allclose(got["y"][:expected.size].reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)


def test_a_c_program_gets_the_trip_bound_error(tmp_path):
    run = _build(tmp_path, _loop_model(), max_trip_count=4)
    feeds = {"M": np.array(5, np.int64), "cond": np.array(True), "acc0": np.zeros(3, np.float32),
             "w": np.ones(3, np.float32), "limit": np.array(1e9, np.float32)}
    assert run(feeds).startswith("rc 4: ") and "runs past 4 iterations" in run(feeds)
    feeds["M"] = np.array(3, np.int64)
    assert run(feeds)["history::bound"].tolist() == [0, 3]
