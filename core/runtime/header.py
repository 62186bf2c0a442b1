"""`kiln_model.h` (or NAME.h): the C ABI of a model library, documented, plus that model's own #defines;
and the wrappers that export the ABI under an artifact's own prefix."""
from __future__ import annotations

import json
import re

from .naming import artifact_names

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
 * (see kiln_last_error()): 3 when an index read from a tensor (Gather, GatherElements, GatherND,
 * ScatterElements, ScatterND, RoiAlign) lies outside [-n, n) of its axis; 4 when control flow fails at run
 * time (a taken If branch that does not compile for these shapes, a Loop past the iterations it was compiled
 * for: --max-trip-count); the outputs are then undefined. An output NAME whose shape depends on an If's
 * taken branch has room for the larger and comes with NAME::shape (int64: rank, then the dims): its elements
 * come first, dense. Calls on one model from several threads take turns; use one model per
 * thread to run in parallel. */
int kiln_run(kiln_model* model, const void* const* inputs, void* const* outputs);

/* Like kiln_run, and writes each kernel call's wall time in milliseconds to
 * call_ms[0 .. kiln_num_kernel_calls()-1]. */
int kiln_profile(kiln_model* model, const void* const* inputs, void* const* outputs, double* call_ms);

/* GPU models: run on the caller's device memory. inputs[i] and outputs[i] are device pointers (CUdeviceptr)
 * of buffers shaped as for kiln_run, in the model's CUDA context (the device's primary context); the inputs
 * are copied in, the model launched (one CUDA graph) and the outputs copied out, all queued on `stream` (a
 * CUstream; NULL: the legacy default stream), and the call returns once they are queued: synchronize the
 * stream before reading the outputs. A model's runs share its arena: queue them on one stream (or wait for
 * one before the next). A CPU model returns nonzero (see kiln_last_error()). */
int kiln_run_device(kiln_model* model, const uint64_t* inputs, const uint64_t* outputs, void* stream);

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


# Only in libraries compiled with input-shape ranges (metadata's "dynamic_shapes"): one artifact, many shapes.
_SHAPED_ABI = """\
/* Input-shape ranges: this library serves every input shape within the declared ranges. kiln_run runs the
 * largest shapes (the *_SHAPE #defines); kiln_run_shaped runs any shape in range. input_shapes[i] points at
 * input i's dims (kiln_input_ndim(i) of them); outputs[i] at a buffer for output i of at most its largest
 * size (*_NUMEL); its actual dims are written to output_shapes[i] (NULL skips one, or all), and the output
 * is dense at that shape. Inside, the smallest compiled shape bucket that holds the inputs runs: dims the
 * compiler proved safe to pad (typically the batch) are zero-padded into it and the outputs cut back; dims
 * it could mask (a sequence under attention, a KV cache's length: the bucket takes the actual size as a
 * run-time length) are zero-padded too, and outputs along them (present keys of past + new length) come back
 * at their true size; other dims must equal one of the compiled sizes. A dim may be 0 where its range starts
 * at 0 (an empty KV cache; its input pointer may then be NULL). Returns 0, or nonzero with kiln_last_error()
 * naming the input, the dim and the accepted sizes (a shape outside the range, a rank or fixed dim that does
 * not match, a dim that must be the sum of others, e.g. an attention mask over past + new tokens). */
int kiln_run_shaped(kiln_model* model, const void* const* inputs, const int64_t* const* input_shapes, void* const* outputs, int64_t* const* output_shapes);

/* The output shapes kiln_run_shaped gives for these input shapes, without running (to size the outputs):
 * writes output_shapes[i] (NULL skips one); 0, or nonzero with kiln_last_error() as kiln_run_shaped would. */
int kiln_output_shapes(const int64_t* const* input_shapes, int64_t* const* output_shapes);

/* GPU models: kiln_run_shaped on the caller's device memory, queued on `stream` as kiln_run_device is
 * (kiln_run_device itself runs the largest shapes). inputs[i] are device pointers of dense buffers at the
 * shapes input_shapes[i] gives, outputs[i] of buffers for each output at its actual shape (what
 * kiln_output_shapes says; written to output_shapes[i] too, NULL skips). The padding into the compiled shape
 * and the cutting back happen on the device. A CPU model returns nonzero (see kiln_last_error()). */
int kiln_run_device_shaped(kiln_model* model, const uint64_t* inputs, const int64_t* const* input_shapes, const uint64_t* outputs, int64_t* const* output_shapes, void* stream);

/* The declared range of input i: writes kiln_input_ndim(i) dims to min_shape and max_shape (either may be
 * NULL); returns the rank, or -1 for no such input. */
int kiln_input_range(int i, int64_t* min_shape, int64_t* max_shape);
int kiln_input_ndim(int i);
int kiln_output_ndim(int i);
/* Output i's largest shape (what its buffer must hold); returns the rank, or -1. */
int kiln_output_max_shape(int i, int64_t* shape);
/* How many shape buckets were compiled. */
int kiln_num_buckets(void);
/* kiln_profile at a shape in range: runs as kiln_run_shaped (outputs at their actual shapes) and writes each
 * kernel call's time (ms) of the bucket that runs, kiln_shaped_bucket(input_shapes), to call_ms (room for
 * kiln_bucket_num_calls of it; names: kiln_bucket_call_name). Nonzero with kiln_last_error() as kiln_run_shaped,
 * or for a GPU library (kiln_profile times its largest shapes). */
int kiln_profile_shaped(kiln_model* model, const void* const* inputs, const int64_t* const* input_shapes, void* const* outputs, double* call_ms);
/* The bucket kiln_run_shaped runs for these input shapes (0 .. kiln_num_buckets() - 1), or -1 (kiln_last_error()). */
int kiln_shaped_bucket(const int64_t* const* input_shapes);
/* The bytes the calling thread's last kiln_run_shaped copied into padded inputs and out of padded outputs (0: every
 * input and output went to the kernels as the caller's own array). */
int64_t kiln_shaped_copied_bytes(void);
/* Bucket b's kernel calls: how many (-1: no such bucket), and the name of call i (NULL past them). */
int kiln_bucket_num_calls(int b);
const char* kiln_bucket_call_name(int b, int i);
"""


def c_string(text: str) -> str:
    """A C string literal for any text (JSON escapes are valid C escapes for these characters)."""
    body = json.dumps(str(text), ensure_ascii=True)[1:-1]
    return '"' + body.replace("?", "\\?") + '"'  # no accidental trigraphs


def c_type(dtype: str) -> str:
    return _C_TYPES.get(dtype, "uint8_t")


# One declaration of the ABI above: return type, function name, parameters.
_DECLARATION = re.compile(r"^([\w ]+?\**) ?(kiln_\w+)\((.*)\);$", re.M)


def api_functions(shaped: bool = False) -> list[tuple[str, str, str]]:
    """(return type, name, parameters) of every function of the public ABI (with the shaped one's)."""
    return [m.groups() for m in _DECLARATION.finditer(_ABI + (_SHAPED_ABI if shaped else ""))]


def _renamed(text: str, prefix: str) -> str:
    return re.sub(r"\bkiln_", f"{prefix}_", text)


def render_api_shim(prefix: str, shaped: bool = False) -> str:
    """C source exporting the ABI as PREFIX_load, PREFIX_run, ...: each forwards to the runtime's own
    kiln_ function, which the library's export list then keeps internal (with the kernels)."""
    lines = ["/* Generated by Kiln: the model's ABI under its artifact name. */", "#include <stdint.h>",
             "typedef struct kiln_model kiln_model;", ""]
    for ret, name, params in api_functions(shaped):
        lines.append(f"{ret} {name}({params});")
    lines.append("")
    for ret, name, params in api_functions(shaped):
        args = [] if params.strip() == "void" else [re.split(r"[\s*]+", p.strip())[-1] for p in params.split(",")]
        call = f"{name}({', '.join(args)})"
        lines.append(f"{ret} {_renamed(name, prefix)}({params}) {{ {'' if ret == 'void' else 'return '}{call}; }}")
    return "\n".join(lines) + "\n"


def _tensor_defines(prefix: str, i: int, info: dict, macro: str = "KILN") -> list[str]:
    shape = [int(d) for d in info.get("shape", [])]
    numel = 1
    for d in shape:
        numel *= d
    dtype = str(info.get("dtype", "float32"))
    p = f"{macro}_{prefix}_{i}"
    return [f"#define {p}_NAME {c_string(info.get('name', f'{prefix.lower()}{i}'))}",
            f"#define {p}_DTYPE {c_string(dtype)}",
            f"#define {p}_CTYPE {c_type(dtype)}",
            f"#define {p}_NDIM {len(shape)}",
            f"#define {p}_SHAPE {{{', '.join(map(str, shape)) or '0'}}}",
            f"#define {p}_NUMEL {numel}"]


def render_header(metadata: dict) -> str:
    """The text of kiln_model.h (NAME.h for a named artifact) for a model described by `metadata` (the
    artifact's metadata.json; its `symbol_prefix` names the functions, the model type and the macros)."""
    names = artifact_names(metadata.get("symbol_prefix"))
    p, macro = names.prefix, names.macro
    inputs, outputs = metadata.get("inputs", []), metadata.get("outputs", [])
    lines = [f"/* {names.header}: C interface of a model compiled by Kiln (generated; do not edit).",
             " *",
             f" * Usage: {p}_model* m = {p}_load(\"weights.bin\");  {p}_run(m, inputs, outputs);  {p}_free(m);",
             f" * Link with -l{names.link_name} ({names.library}); it needs only glibc (libc, libm, libmvec) at run time.",
             " * Outputs of data-dependent size (NonZero, Unique, NonMaxSuppression, ... and what is computed from",
             " * them) are written at their upper bound; output NAME::bound (int64 [axis, length]) says how much of",
             " * NAME is valid: the first `length` entries along `axis` (what follows them is padding).",
             " * float16/bfloat16 tensors travel as their raw 16-bit patterns (uint16_t); float8 (e4m3fn, e4m3fnuz,",
             " * e5m2, e5m2fnuz, e8m0fnu) as raw bytes (uint8_t). int4/uint4/int2/uint2/float4_e2m1fn are NOT packed:",
             " * one element per byte, its bits in the low bits and zeros above (int4 -1 is 0x0F), as ml_dtypes",
             " * lays them out; ONNX's packed two-per-byte form exists only inside the model file. */",
             f"#ifndef {macro}_MODEL_H", f"#define {macro}_MODEL_H", "", "#include <stdint.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
             f"#define {macro}_TARGET {c_string(metadata.get('target', 'unknown'))}",
             f"#define {macro}_COMPILER_VERSION {c_string(metadata.get('compiler_version', 'unknown'))}",
             f"#define {macro}_NUM_INPUTS {len(inputs)}",
             f"#define {macro}_NUM_OUTPUTS {len(outputs)}", ""]
    if metadata.get("needs_cuda_driver"):
        lines += ["/* GPU model: kiln_load needs an NVIDIA GPU of this architecture or newer (KILN_CUDA_DEVICE picks",
                  " * one, default 0) and its driver (libcuda.so.1, opened at load; no CUDA toolkit). Weights and",
                  " * intermediates stay in GPU memory; kiln_run copies inputs in and outputs out (host pointers).",
                  " * The thread functions below only size the host pool; kiln_profile times kernels on the GPU. */",
                  f"#define {macro}_CUDA_ARCH {c_string(metadata.get('cuda_arch', 'unknown'))}", ""]
    for i, info in enumerate(inputs):
        lines += _tensor_defines("INPUT", i, info, macro) + [""]
    for i, info in enumerate(outputs):
        lines += _tensor_defines("OUTPUT", i, info, macro) + [""]
    shaped = metadata.get("dynamic_shapes")
    if shaped:
        for i, info in enumerate(shaped.get("inputs", [])):
            lines += [f"#define {macro}_INPUT_{i}_MIN_SHAPE {{{', '.join(map(str, info['min_shape'])) or '0'}}}",
                      f"#define {macro}_INPUT_{i}_MAX_SHAPE {{{', '.join(map(str, info['max_shape'])) or '0'}}}"]
        lines += [f"#define {macro}_NUM_BUCKETS {len(shaped.get('buckets', []))}", ""]
    lines += [_renamed(_ABI + (_SHAPED_ABI if shaped else ""), p), "#ifdef __cplusplus", "}", "#endif", "",
              f"#endif /* {macro}_MODEL_H */", ""]
    return "\n".join(lines)
