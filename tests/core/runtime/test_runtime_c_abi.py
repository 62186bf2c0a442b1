"""The artifact from C: a program compiled against kiln_model.h and libkiln_model.so, output vs numpy."""
from __future__ import annotations

import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from core.runtime.header import render_header

MAIN_C = r"""
#include <stdio.h>
#include <string.h>
#include "kiln_model.h"

int main(int argc, char** argv) {
    static KILN_INPUT_0_CTYPE x[KILN_INPUT_0_NUMEL];
    static KILN_OUTPUT_0_CTYPE y[KILN_OUTPUT_0_NUMEL];
    static KILN_OUTPUT_1_CTYPE z[KILN_OUTPUT_1_NUMEL];
    const long shape[] = KILN_INPUT_0_SHAPE;
    for (int i = 0; i < KILN_INPUT_0_NUMEL; i++) x[i] = (float)i * 0.125f - 1.0f;

    if (kiln_run(NULL, NULL, NULL) == 0 || strlen(kiln_last_error()) == 0) return 10;
    if (kiln_load("/nonexistent/weights.bin") != NULL || !strstr(kiln_last_error(), "cannot open")) return 11;

    kiln_model* m = kiln_load(argv[1]);
    if (!m) { printf("load failed: %s\n", kiln_last_error()); return 1; }
    kiln_set_num_threads(2);
    const void* inputs[KILN_NUM_INPUTS] = {x};
    void* outputs[KILN_NUM_OUTPUTS] = {y, z};
    if (kiln_run(m, inputs, outputs) != 0) { printf("run failed: %s\n", kiln_last_error()); return 2; }
    printf("%s %s %d %d %ld %ld %d\n", KILN_INPUT_0_NAME, KILN_OUTPUT_0_DTYPE, kiln_num_inputs(), kiln_num_outputs(),
           shape[0], shape[1], kiln_num_kernel_calls());
    for (int i = 0; i < KILN_OUTPUT_0_NUMEL; i++) printf("%.9g\n", y[i]);
    for (int i = 0; i < KILN_OUTPUT_1_NUMEL; i++) printf("%.9g\n", z[i]);
    kiln_free(m);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_program_against_the_artifact(tiny_model, tmp_path):
    art = tmp_path / "art"
    with tarfile.open(tiny_model.artifact) as tar:
        tar.extractall(art, filter="data")
    (tmp_path / "main.c").write_text(MAIN_C)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", f"-I{art}", str(tmp_path / "main.c"), f"-L{art}",
                    "-lkiln_model", f"-Wl,-rpath,{art}", "-o", str(exe)], check=True, capture_output=True)
    proc = subprocess.run([str(exe), str(art / "weights.bin")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0] == "x float32 1 2 3 8 2"
    values = np.array([float(v) for v in lines[1:] if v.strip()], dtype="float32")
    x = (np.arange(24, dtype="float32") * np.float32(0.125) - 1).reshape(3, 8)
    ref = tiny_model.reference(x)
    np.testing.assert_allclose(values[:48].reshape(3, 16), ref["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values[48:].reshape(3, 16), ref["t_plus_one"], rtol=1e-5, atol=1e-5)


def test_header_defines_and_escaping(tmp_path):
    meta = {"inputs": [{"name": 'we"ird\\name?', "shape": [2, 3], "dtype": "int8"}],
            "outputs": [{"name": "s", "shape": [], "dtype": "float64"}], "target": "native"}
    text = render_header(meta)
    assert "#define KILN_NUM_INPUTS 1" in text and "#define KILN_NUM_OUTPUTS 1" in text
    assert "#define KILN_INPUT_0_NUMEL 6" in text and "#define KILN_INPUT_0_CTYPE int8_t" in text
    assert "#define KILN_OUTPUT_0_NUMEL 1" in text and "#define KILN_OUTPUT_0_NDIM 0" in text
    assert "kiln_model* kiln_load(const char* weights_path);" in text
    if shutil.which("cc"):
        (tmp_path / "kiln_model.h").write_text(text)
        (tmp_path / "t.c").write_text('#include "kiln_model.h"\n#include <string.h>\n'
                                      'int main(void) { return strcmp(KILN_INPUT_0_NAME, "we\\"ird\\\\name?") != 0; }\n')
        subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-Wtrigraphs", f"-I{tmp_path}", str(tmp_path / "t.c"),
                        "-o", str(tmp_path / "t")], check=True, capture_output=True)
        assert subprocess.run([str(tmp_path / "t")]).returncode == 0


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf")
def test_model_library_needs_only_glibc(tiny_model, tmp_path):
    """Threads come from Kiln's own pool: the artifact carries no libgomp (or any non-glibc) dependency."""
    with tarfile.open(tiny_model.artifact) as tar:
        tar.extractall(tmp_path, filter="data")
    dynamic = subprocess.run(["readelf", "-d", str(tmp_path / "libkiln_model.so")], capture_output=True, text=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and all(n.split(".so")[0] in ("libc", "libm", "libmvec", "ld-linux-x86-64", "ld-linux-aarch64")
                          for n in needed), needed
