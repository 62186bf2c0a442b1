"""`kiln_model.h`: the C ABI of a model library, documented, plus that model's own #defines."""
from __future__ import annotations

import json

_C_TYPES = {"float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t",
            "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
            "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "bool": "uint8_t",
            # Narrow dtypes travel as their bit patterns: float8 one byte; 4- and 2-bit types one
            # element per byte, the value in the low bits and zeros above (int4 -1 is 0x0F).
            "float8_e4m3fn": "uint8_t", "float8_e4m3fnuz": "uint8_t", "float8_e5m2": "uint8_t",
            "float8_e5m2fnuz": "uint8_t", "float8_e8m0fnu": "uint8_t", "float4_e2m1fn": "uint8_t",
            "int4": "uint8_t", "uint4": "uint8_t", "int2": "uint8_t", "uint2": "uint8_t"}

_ABI = """\
/* Opaque handle: the weights, the 64-byte aligned arena for intermediates, a lock. */
typedef struct kiln_model kiln_model;

/* Load the model: reads the weights file (weights.bin of the artifact) into 64-byte aligned memory,
 * checks its size and allocates the arena once. NULL on failure; see kiln_last_error(). A model with
 * no weights accepts NULL. */
kiln_model* kiln_load(const char* weights_path);

/* Same, from weights already in memory (copied; `size` must equal the model's weights size). */
kiln_model* kiln_load_from_memory(const void* data, int64_t size);

/* Run the model once. inputs[i] points at input i, outputs[i] at the caller's buffer for output i,
 * each dense, row-major, of the dtype and element count #defined below. Pointers need only their
 * element type's natural alignment (nothing is copied). Returns 0 on success, nonzero on failure
 * (see kiln_last_error()). Calls on one model from several threads take turns; use one model per
 * thread to run in parallel. */
int kiln_run(kiln_model* model, const void* const* inputs, void* const* outputs);

/* Like kiln_run, and writes each kernel call's wall time in milliseconds to
 * call_ms[0 .. kiln_num_kernel_calls()-1]. */
int kiln_profile(kiln_model* model, const void* const* inputs, void* const* outputs, double* call_ms);

/* Release everything kiln_load allocated. NULL is fine. */
void kiln_free(kiln_model* model);

/* The last error of the calling thread, as one line ("" when none). */
const char* kiln_last_error(void);

/* Threads for parallel kernels (Kiln's own pool, shared by the models of this library); n <= 0 restores
 * the default: KILN_NUM_THREADS, else OMP_NUM_THREADS, else one per CPU the process may use. */
void kiln_set_num_threads(int n);
int kiln_get_num_threads(void);

int kiln_num_inputs(void);
int kiln_num_outputs(void);
int kiln_num_kernel_calls(void);
const char* kiln_kernel_call_name(int i);
int64_t kiln_arena_size(void);
int64_t kiln_weights_size(void);
"""


def c_string(text: str) -> str:
    """A C string literal for any text (JSON escapes are valid C escapes for these characters)."""
    body = json.dumps(str(text), ensure_ascii=True)[1:-1]
    return '"' + body.replace("?", "\\?") + '"'  # no accidental trigraphs


def c_type(dtype: str) -> str:
    return _C_TYPES.get(dtype, "uint8_t")


def _tensor_defines(prefix: str, i: int, info: dict) -> list[str]:
    shape = [int(d) for d in info.get("shape", [])]
    numel = 1
    for d in shape:
        numel *= d
    dtype = str(info.get("dtype", "float32"))
    p = f"KILN_{prefix}_{i}"
    return [f"#define {p}_NAME {c_string(info.get('name', f'{prefix.lower()}{i}'))}",
            f"#define {p}_DTYPE {c_string(dtype)}",
            f"#define {p}_CTYPE {c_type(dtype)}",
            f"#define {p}_NDIM {len(shape)}",
            f"#define {p}_SHAPE {{{', '.join(map(str, shape)) or '0'}}}",
            f"#define {p}_NUMEL {numel}"]


def render_header(metadata: dict) -> str:
    """The text of kiln_model.h for a model described by `metadata` (the artifact's metadata.json)."""
    inputs, outputs = metadata.get("inputs", []), metadata.get("outputs", [])
    lines = ["/* kiln_model.h: C interface of a model compiled by Kiln (generated; do not edit).",
             " *",
             " * Usage: kiln_model* m = kiln_load(\"weights.bin\");  kiln_run(m, inputs, outputs);  kiln_free(m);",
             " * Link with -lkiln_model (libkiln_model.so); it needs only glibc (libc, libm, libmvec) at run time.",
             " * Outputs of data-dependent size (NonZero, Unique, NonMaxSuppression, ...) are written at their upper",
             " * bound, zero-padded; output NAME::bound (int64 [axis, length]) says how much of NAME is valid.",
             " * float16/bfloat16 tensors travel as their raw 16-bit patterns (uint16_t); float8 (e4m3fn, e4m3fnuz,",
             " * e5m2, e5m2fnuz, e8m0fnu) as raw bytes (uint8_t). int4/uint4/int2/uint2/float4_e2m1fn are NOT packed:",
             " * one element per byte, its bits in the low bits and zeros above (int4 -1 is 0x0F), as ml_dtypes",
             " * lays them out; ONNX's packed two-per-byte form exists only inside the model file. */",
             "#ifndef KILN_MODEL_H", "#define KILN_MODEL_H", "", "#include <stdint.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
             f"#define KILN_TARGET {c_string(metadata.get('target', 'unknown'))}",
             f"#define KILN_COMPILER_VERSION {c_string(metadata.get('compiler_version', 'unknown'))}",
             f"#define KILN_NUM_INPUTS {len(inputs)}",
             f"#define KILN_NUM_OUTPUTS {len(outputs)}", ""]
    if metadata.get("needs_cuda_driver"):
        lines += ["/* GPU model: kiln_load needs an NVIDIA GPU of this architecture or newer (KILN_CUDA_DEVICE picks",
                  " * one, default 0) and its driver (libcuda.so.1, opened at load; no CUDA toolkit). Weights and",
                  " * intermediates stay in GPU memory; kiln_run copies inputs in and outputs out (host pointers).",
                  " * The thread functions below only size the host pool; kiln_profile times kernels on the GPU. */",
                  f"#define KILN_CUDA_ARCH {c_string(metadata.get('cuda_arch', 'unknown'))}", ""]
    for i, info in enumerate(inputs):
        lines += _tensor_defines("INPUT", i, info) + [""]
    for i, info in enumerate(outputs):
        lines += _tensor_defines("OUTPUT", i, info) + [""]
    lines += [_ABI, "#ifdef __cplusplus", "}", "#endif", "", "#endif /* KILN_MODEL_H */", ""]
    return "\n".join(lines)
