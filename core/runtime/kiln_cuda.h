/* The tables a CUDA model library carries (generated per model by core/codegen/build_cuda.py) and
 * that kiln_cuda.c launches from. Every kernel argument is a device pointer into one of two spaces:
 * the weights (uploaded once at load) or the arena, which also holds the staging copies of the
 * model's inputs and outputs (so a run is: inputs host->device, launches, outputs device->host). */
#ifndef KILN_CUDA_H
#define KILN_CUDA_H

#include <stdint.h>

#define KILN_CUDA_MAX_ARGS 256 /* per kernel; build_cuda.py refuses more */

enum { KILN_CUDA_WEIGHTS = 0, KILN_CUDA_ARENA = 1 };

typedef struct {
    int32_t space;  /* KILN_CUDA_WEIGHTS or KILN_CUDA_ARENA */
    int64_t offset; /* bytes from the start of that space */
} kiln_cuda_arg;

typedef struct {
    int32_t kernel; /* index into kiln_cuda_kernel_names */
    uint32_t grid[3];
    uint32_t block[3];
    int32_t first_arg; /* this launch's arguments: kiln_cuda_args[first_arg .. first_arg + num_args) */
    int32_t num_args;
    uint32_t dynamic_shared; /* bytes of dynamic shared memory (beyond 48 KiB: the kernel is allowed it at load) */
} kiln_cuda_launch;

extern const char kiln_cuda_ptx[];
extern const char kiln_cuda_arch[]; /* "sm_80": the oldest GPU architecture the PTX was generated for */
extern const int32_t kiln_cuda_num_kernels;
extern const char* const kiln_cuda_kernel_names[];
/* One launch table per compiled shape (bucket; a library without input-shape ranges has one): bucket b's
 * launches are kiln_cuda_launches[kiln_cuda_bucket_calls[b] .. kiln_cuda_bucket_calls[b + 1]), in call order. */
extern const int32_t kiln_cuda_num_buckets;
extern const int32_t kiln_cuda_bucket_calls[];
extern const kiln_cuda_launch kiln_cuda_launches[];
extern const kiln_cuda_arg kiln_cuda_args[];
/* The inputs staged per run: the model's, then (with ranges) each run-time length, an int64 the shaped entry
 * (kiln_shaped.c) passes after them; kiln_cuda_top_lengths are those lengths at the upper bounds (what a run
 * without shapes, kiln_run or kiln_run_device, runs at). */
extern const int32_t kiln_cuda_num_staged_inputs;
extern const int64_t kiln_cuda_top_lengths[];
/* Where each staged input and model output lies in the arena (the same for every bucket), and its size per
 * bucket, [b * count + i] (0: no kernel of that bucket reads/writes it). */
extern const int64_t kiln_cuda_input_offsets[];
extern const int64_t kiln_cuda_input_bytes[];
extern const int64_t kiln_cuda_output_offsets[];
extern const int64_t kiln_cuda_output_bytes[];

/* Runs bucket b (kiln_cuda.c): the runners kiln_shaped.c dispatches to are generated around it. */
int32_t kiln_cuda_bucket_run(int b, void* arena, const void* weights, const void* const* inputs,
                             void* const* outputs, double* call_ms);

#endif /* KILN_CUDA_H */
