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
extern const kiln_cuda_launch kiln_cuda_launches[]; /* kiln_graph_num_calls of them, in call order */
extern const kiln_cuda_arg kiln_cuda_args[];
/* Where each model input/output is staged in the arena, and its size (0: no kernel reads/writes it). */
extern const int64_t kiln_cuda_input_offsets[];
extern const int64_t kiln_cuda_input_bytes[];
extern const int64_t kiln_cuda_output_offsets[];
extern const int64_t kiln_cuda_output_bytes[];

#endif /* KILN_CUDA_H */
