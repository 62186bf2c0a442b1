/* The symbols every model library carries, emitted per model (core/codegen/model_entry.py for CPU
 * libraries, core/codegen/build_cuda.py for GPU ones) and read by the C runtimes. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stdint.h>

extern const int64_t kiln_arena_bytes;
extern const int64_t kiln_weights_bytes;
extern const int32_t kiln_graph_num_inputs;
extern const int32_t kiln_graph_num_outputs;
extern const int32_t kiln_graph_num_calls;
extern const char* const kiln_graph_call_names[];

/* What kiln_graph_run returns when a kernel read an index outside its axis (kiln_runtime_index_error). */
#define KILN_INDEX_ERROR 3
/* What it returns when control flow fails at run time: a taken If branch that does not compile for the compiled
 * shapes, a Loop past the iterations its scan outputs have room for (core/codegen/control_flow.py). */
#define KILN_CONTROL_ERROR 4

int32_t kiln_graph_run(void* arena, const void* weights, const void* const* inputs, void* const* outputs);
int32_t kiln_graph_profile(void* arena, const void* weights, const void* const* inputs, void* const* outputs,
                           double* call_ms);

#endif
