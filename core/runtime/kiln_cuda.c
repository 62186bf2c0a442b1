/* Kiln's CUDA backend, linked into GPU model libraries next to kiln_runtime.c: loads the library's PTX
 * through the CUDA driver API and implements kiln_graph_run/kiln_graph_profile as kernel launches.
 *
 * The driver (libcuda.so.1) is opened at run time with dlopen, so building and linking need nothing
 * of CUDA; the few types and entry points used are declared here. One module per library (loaded by
 * the first model, unloaded with the last), on the device's primary context; each model keeps its
 * weights and arena in device memory (kiln_device_attach, called by kiln_runtime.c's kiln_load).
 * Every driver failure becomes kiln_last_error() text naming the call and the CUresult.
 * A run launches the whole model as one CUDA graph, captured from the model's launches on its first run (its
 * kernels' arguments are fixed: arena and weights offsets); KILN_CUDA_GRAPH=0, or a driver without the graph
 * API, launches kernel by kernel instead. kiln_device_run runs on the caller's device buffers and stream.
 * A library compiled with input-shape ranges has one launch table per compiled shape (bucket) and a CUDA graph
 * per bucket; kiln_shaped.c picks the bucket and pads on the host (its kiln_graph_run overrides the weak one here).
 * Device: KILN_CUDA_DEVICE (an ordinal, default 0).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cuda.h"
#include "kiln_graph.h"
#include "kiln_shaped.h"

void kiln_runtime_set_error(const char* message); /* kiln_runtime.c: the text kiln_last_error() returns */

/* ------------------------------------------------------------------ the driver API, declared by hand */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100 };
enum { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76 };
enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };
enum { CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1 };

/* X(field, exported symbol, return, parameters): the versioned names are what cuda.h's macros pick. */
#define KILN_CUDA_API(X)                                                                                     \
    X(Init, "cuInit", CUresult, (unsigned))                                                                  \
    X(DeviceGetCount, "cuDeviceGetCount", CUresult, (int*))                                                  \
    X(DeviceGet, "cuDeviceGet", CUresult, (CUdevice*, int))                                                  \
    X(DeviceGetName, "cuDeviceGetName", CUresult, (char*, int, CUdevice))                                    \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", CUresult, (int*, int, CUdevice))                           \
    X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext*, CUdevice))                        \
    X(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice))                               \
    X(CtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                                               \
    X(CtxSynchronize, "cuCtxSynchronize", CUresult, (void))                                                  \
    X(ModuleLoadDataEx, "cuModuleLoadDataEx", CUresult, (CUmodule*, const void*, unsigned, int*, void**))    \
    X(ModuleUnload, "cuModuleUnload", CUresult, (CUmodule))                                                  \
    X(ModuleGetFunction, "cuModuleGetFunction", CUresult, (CUfunction*, CUmodule, const char*))              \
    X(FuncSetAttribute, "cuFuncSetAttribute", CUresult, (CUfunction, int, int))                              \
    X(MemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr*, size_t))                                           \
    X(MemFree, "cuMemFree_v2", CUresult, (CUdeviceptr))                                                      \
    X(MemsetD8, "cuMemsetD8_v2", CUresult, (CUdeviceptr, unsigned char, size_t))                             \
    X(MemcpyHtoD, "cuMemcpyHtoD_v2", CUresult, (CUdeviceptr, const void*, size_t))                           \
    X(MemcpyDtoH, "cuMemcpyDtoH_v2", CUresult, (void*, CUdeviceptr, size_t))                                 \
    X(LaunchKernel, "cuLaunchKernel", CUresult,                                                              \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,   \
       void**))                                                                                              \
    X(EventCreate, "cuEventCreate", CUresult, (CUevent*, unsigned))                                          \
    X(EventRecord, "cuEventRecord", CUresult, (CUevent, CUstream))                                           \
    X(EventElapsedTime, "cuEventElapsedTime", CUresult, (float*, CUevent, CUevent))                          \
    X(EventDestroy, "cuEventDestroy_v2", CUresult, (CUevent))                                                \
    X(GetErrorName, "cuGetErrorName", CUresult, (CUresult, const char**))                                    \
    X(GetErrorString, "cuGetErrorString", CUresult, (CUresult, const char**))

/* Streams, CUDA graphs and asynchronous copies (CUDA 11.4 and later): optional, all or none. */
#define KILN_CUDA_GRAPH_API(X)                                                                               \
    X(StreamCreate, "cuStreamCreate", CUresult, (CUstream*, unsigned))                                       \
    X(StreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream))                                             \
    X(StreamBeginCapture, "cuStreamBeginCapture_v2", CUresult, (CUstream, int))                              \
    X(StreamEndCapture, "cuStreamEndCapture", CUresult, (CUstream, CUgraph*))                                \
    X(GraphInstantiate, "cuGraphInstantiateWithFlags", CUresult, (CUgraphExec*, CUgraph, unsigned long long)) \
    X(GraphLaunch, "cuGraphLaunch", CUresult, (CUgraphExec, CUstream))                                       \
    X(GraphExecDestroy, "cuGraphExecDestroy", CUresult, (CUgraphExec))                                       \
    X(GraphDestroy, "cuGraphDestroy", CUresult, (CUgraph))                                                   \
    X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))       \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult, (CUdeviceptr, const void*, size_t, CUstream))       \
    X(MemsetD8Async, "cuMemsetD8Async", CUresult, (CUdeviceptr, unsigned char, size_t, CUstream))

#define KILN_CUDA_FIELD(field, symbol, ret, params) ret(*field) params;
static struct {
    KILN_CUDA_API(KILN_CUDA_FIELD)
} cu;
static struct {
    KILN_CUDA_GRAPH_API(KILN_CUDA_FIELD)
} cg; /* all NULL when the driver lacks any of them */
#undef KILN_CUDA_FIELD

/* ------------------------------------------------------------------ errors */

static void fail(const char* fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    kiln_runtime_set_error(text);
}

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the number when the driver cannot name it. */
static const char* result_text(CUresult rc, char* buf, size_t size) {
    const char* name = NULL;
    const char* text = NULL;
    if (cu.GetErrorName) cu.GetErrorName(rc, &name);
    if (cu.GetErrorString) cu.GetErrorString(rc, &text);
    if (name)
        snprintf(buf, size, "%s (%s)", name, text ? text : "no description");
    else
        snprintf(buf, size, "CUresult %d", (int)rc);
    return buf;
}

/* A kernel fault (illegal address, assert, trap, ...) leaves the process's CUDA context unusable: every
 * later call returns the same error, and only a new process can use the GPU again (measured on an H100:
 * even releasing every model and retaining the primary context anew fails). */
static int sticky(CUresult rc) { /* ILLEGAL_ADDRESS, LAUNCH_TIMEOUT, ASSERT, HARDWARE_STACK_ERROR .. LAUNCH_FAILED */
    return rc == 700 || rc == 702 || rc == 710 || (rc >= 714 && rc <= 719);
}

/* On failure: kiln_last_error() = "<who>: <call> failed: CUDA_ERROR_... (text)"; evaluates to the CUresult. */
#define CU_TRY(who, what, call) cu_check((call), who, what)
static CUresult cu_check(CUresult rc, const char* who, const char* what) {
    if (rc != CUDA_SUCCESS) {
        char buf[160];
        fail("%s: %s failed: %s%s", who, what, result_text(rc, buf, sizeof buf),
             sticky(rc) ? "; a GPU kernel faulted, which leaves CUDA unusable in this process: restart it" : "");
    }
    return rc;
}

/* ------------------------------------------------------------------ the library's module, shared by its models */

static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static int backend_users; /* models holding the module (and the primary context) */
static CUdevice device;
static CUcontext context;
static CUmodule module;
static CUfunction* functions; /* kiln_cuda_kernel_names' order */

static int open_driver(const char* who) {
    static void* driver;
    if (driver) return 0;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        fail("%s: this model runs on an NVIDIA GPU (%s), but the CUDA driver library libcuda.so.1 cannot be "
             "loaded (%s); install the NVIDIA driver", who, kiln_cuda_arch, why ? why : "not found");
        return -1;
    }
#define KILN_CUDA_BIND(field, symbol, ret, params)                                                  \
    if (!(cu.field = (ret(*) params)dlsym(lib, symbol))) {                                               \
        fail("%s: the CUDA driver lacks %s (too old a driver? CUDA 11.8 or later is needed)", who, symbol); \
        memset(&cu, 0, sizeof cu);                                                                  \
        return -1;                                                                                  \
    }
    KILN_CUDA_API(KILN_CUDA_BIND)
#undef KILN_CUDA_BIND
#define KILN_CUDA_BIND_OPTIONAL(field, symbol, ret, params) cg.field = (ret(*) params)dlsym(lib, symbol);
#define KILN_CUDA_MISSING(field, symbol, ret, params) || !cg.field
    KILN_CUDA_GRAPH_API(KILN_CUDA_BIND_OPTIONAL)
    if (0 KILN_CUDA_GRAPH_API(KILN_CUDA_MISSING)) memset(&cg, 0, sizeof cg);
#undef KILN_CUDA_MISSING
#undef KILN_CUDA_BIND_OPTIONAL
    driver = lib; /* never closed: unloading the driver from a running process is not safe */
    return 0;
}

/* The device to run on, after checking that it can run this library's PTX. */
static int pick_device(const char* who) {
    CUresult rc = cu.Init(0);
    if (rc == CUDA_ERROR_NO_DEVICE) {
        fail("%s: this model runs on an NVIDIA GPU (%s), but the CUDA driver finds none on this machine", who,
             kiln_cuda_arch);
        return -1;
    }
    if (CU_TRY(who, "cuInit", rc)) return -1;
    int count = 0;
    if (CU_TRY(who, "cuDeviceGetCount", cu.DeviceGetCount(&count))) return -1;
    const char* env = getenv("KILN_CUDA_DEVICE");
    int ordinal = env && *env ? atoi(env) : 0;
    if (count == 0 || ordinal < 0 || ordinal >= count) {
        fail("%s: no NVIDIA GPU %d on this machine (the driver sees %d; KILN_CUDA_DEVICE picks one)", who, ordinal,
             count);
        return -1;
    }
    if (CU_TRY(who, "cuDeviceGet", cu.DeviceGet(&device, ordinal))) return -1;
    int major = 0, minor = 0;
    char name[128] = "";
    cu.DeviceGetName(name, (int)sizeof name, device);
    if (CU_TRY(who, "cuDeviceGetAttribute", cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) ||
        CU_TRY(who, "cuDeviceGetAttribute", cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)))
        return -1;
    int need = atoi(kiln_cuda_arch + 3); /* "sm_80" -> 80 */
    if (major * 10 + minor < need) {
        fail("%s: this model was compiled for %s (compute capability %d.%d or newer), but GPU %d (%s) is %d.%d; "
             "compile it for -arch=sm_%d%d", who, kiln_cuda_arch, need / 10, need % 10, ordinal, name, major, minor,
             major, minor);
        return -1;
    }
    return 0;
}

static int load_module(const char* who) {
    char log[2048] = "";
    int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {log, (void*)(uintptr_t)sizeof log};
    CUresult rc = cu.ModuleLoadDataEx(&module, kiln_cuda_ptx, 2, options, values);
    if (rc != CUDA_SUCCESS) {
        char buf[160];
        char* newline = strchr(log, '\n');
        if (newline) *newline = '\0';
        fail("%s: cuModuleLoadDataEx (JIT-compiling the model's PTX for %s) failed: %s%s%s", who, kiln_cuda_arch,
             result_text(rc, buf, sizeof buf), log[0] ? ": " : "", log);
        module = NULL;
        return -1;
    }
    functions = (CUfunction*)calloc((size_t)(kiln_cuda_num_kernels > 0 ? kiln_cuda_num_kernels : 1), sizeof *functions);
    if (!functions) {
        fail("%s: out of memory", who);
        return -1;
    }
    for (int k = 0; k < kiln_cuda_num_kernels; k++) {
        char what[200];
        snprintf(what, sizeof what, "cuModuleGetFunction(%s)", kiln_cuda_kernel_names[k]);
        if (CU_TRY(who, what, cu.ModuleGetFunction(&functions[k], module, kiln_cuda_kernel_names[k]))) return -1;
    }
    for (int c = 0; c < kiln_cuda_bucket_calls[kiln_cuda_num_buckets]; c++) { /* > 48 KiB of shared memory: opt-in */
        const kiln_cuda_launch* l = &kiln_cuda_launches[c];
        if (l->dynamic_shared <= 48 * 1024) continue;
        char what[200];
        snprintf(what, sizeof what, "cuFuncSetAttribute(%s, %u bytes of shared memory)",
                 kiln_cuda_kernel_names[l->kernel], l->dynamic_shared);
        if (CU_TRY(who, what, cu.FuncSetAttribute(functions[l->kernel], 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */,
                                                  (int)l->dynamic_shared)))
            return -1;
    }
    return 0;
}

static void release_backend(void) {
    if (--backend_users > 0) return;
    cu.CtxSetCurrent(context);
    if (module) cu.ModuleUnload(module);
    free(functions);
    functions = NULL;
    module = NULL;
    cu.PrimaryCtxRelease(device);
    context = NULL;
}

static int acquire_backend(const char* who) {
    pthread_mutex_lock(&backend_lock);
    int rc = 0;
    if (backend_users == 0) {
        rc = open_driver(who) || pick_device(who);
        if (rc == 0) {
            if (CU_TRY(who, "cuDevicePrimaryCtxRetain", cu.PrimaryCtxRetain(&context, device))) {
                rc = -1;
            } else {
                backend_users = 1;
                if (CU_TRY(who, "cuCtxSetCurrent", cu.CtxSetCurrent(context)) || load_module(who)) {
                    release_backend();
                    rc = -1;
                }
            }
        }
    } else {
        backend_users++;
    }
    pthread_mutex_unlock(&backend_lock);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ per model: its stream and CUDA graph */

typedef struct model_graph {
    CUdeviceptr arena; /* the model's: its key */
    CUstream stream;   /* the graphs are captured on it; host-buffer runs launch on it */
    struct model_graph* next;
    struct {
        CUgraphExec exec; /* NULL until the bucket's first run captures it, or when capturing failed */
        int captured;     /* capturing was tried */
    } bucket[];           /* kiln_cuda_num_buckets */
} model_graph;
static model_graph* graphs; /* every attached model's, under backend_lock */

static int graphs_wanted(void) {
    const char* env = getenv("KILN_CUDA_GRAPH");
    return cg.GraphLaunch != NULL && !(env && strcmp(env, "0") == 0);
}

static model_graph* graph_of(CUdeviceptr arena) {
    pthread_mutex_lock(&backend_lock);
    model_graph* g = graphs;
    while (g && g->arena != arena) g = g->next;
    pthread_mutex_unlock(&backend_lock);
    return g;
}

/* Called with backend_lock held and the context current. */
static void drop_graph(CUdeviceptr arena) {
    for (model_graph** at = &graphs; *at; at = &(*at)->next) {
        if ((*at)->arena != arena) continue;
        model_graph* g = *at;
        *at = g->next;
        for (int b = 0; b < kiln_cuda_num_buckets; b++)
            if (g->bucket[b].exec) cg.GraphExecDestroy(g->bucket[b].exec);
        if (g->stream) cg.StreamDestroy(g->stream);
        free(g);
        return;
    }
}

/* ------------------------------------------------------------------ per model: kiln_runtime.c's hooks */

static size_t at_least_one(int64_t bytes) { return bytes > 0 ? (size_t)bytes : 1; }

/* Upload the weights and allocate the (zeroed) arena on the GPU, and the model's stream where the driver has
 * graphs; 0, or -1 with kiln_last_error() set. */
__attribute__((visibility("hidden"))) int kiln_device_attach(const void* host_weights, void** weights, void** arena) {
    const char* who = "kiln_load";
    if (acquire_backend(who) != 0) return -1;
    CUdeviceptr w = 0, a = 0;
    model_graph* g = cg.StreamCreate ? (model_graph*)calloc(1, sizeof *g + (size_t)kiln_cuda_num_buckets *
                                                                    sizeof g->bucket[0]) : NULL;
    if ((cg.StreamCreate && !g && (fail("%s: out of memory", who), 1)) ||
        CU_TRY(who, "cuCtxSetCurrent", cu.CtxSetCurrent(context)) ||
        CU_TRY(who, "cuMemAlloc (weights)", cu.MemAlloc(&w, at_least_one(kiln_weights_bytes))) ||
        CU_TRY(who, "cuMemAlloc (arena)", cu.MemAlloc(&a, at_least_one(kiln_arena_bytes))) ||
        (kiln_weights_bytes > 0 &&
         CU_TRY(who, "cuMemcpyHtoD (weights)", cu.MemcpyHtoD(w, host_weights, (size_t)kiln_weights_bytes))) ||
        CU_TRY(who, "cuMemsetD8 (arena)", cu.MemsetD8(a, 0, at_least_one(kiln_arena_bytes))) ||
        (g && CU_TRY(who, "cuStreamCreate", cg.StreamCreate(&g->stream, 0)))) {
        if (w) cu.MemFree(w);
        if (a) cu.MemFree(a);
        free(g);
        pthread_mutex_lock(&backend_lock);
        release_backend();
        pthread_mutex_unlock(&backend_lock);
        return -1;
    }
    if (g) {
        g->arena = a;
        pthread_mutex_lock(&backend_lock);
        g->next = graphs;
        graphs = g;
        pthread_mutex_unlock(&backend_lock);
    }
    *weights = (void*)(uintptr_t)w;
    *arena = (void*)(uintptr_t)a;
    return 0;
}

__attribute__((visibility("hidden"))) void kiln_device_detach(void* weights, void* arena) {
    pthread_mutex_lock(&backend_lock);
    cu.CtxSetCurrent(context);
    drop_graph((CUdeviceptr)(uintptr_t)arena);
    cu.MemFree((CUdeviceptr)(uintptr_t)weights);
    cu.MemFree((CUdeviceptr)(uintptr_t)arena);
    release_backend();
    pthread_mutex_unlock(&backend_lock);
}

/* ------------------------------------------------------------------ one run */

/* Every kernel call of bucket b on `stream`, an event recorded after each when `events` is given. */
static int launch_kernels(int b, CUdeviceptr arena, CUdeviceptr weights, CUstream stream, CUevent* events,
                          const char* who) {
    const int first = kiln_cuda_bucket_calls[b];
    for (int c = first; c < kiln_cuda_bucket_calls[b + 1]; c++) {
        const kiln_cuda_launch* l = &kiln_cuda_launches[c];
        CUdeviceptr pointers[KILN_CUDA_MAX_ARGS];
        void* params[KILN_CUDA_MAX_ARGS];
        for (int a = 0; a < l->num_args; a++) {
            const kiln_cuda_arg* arg = &kiln_cuda_args[l->first_arg + a];
            pointers[a] = (arg->space == KILN_CUDA_WEIGHTS ? weights : arena) + (CUdeviceptr)arg->offset;
            params[a] = &pointers[a];
        }
        char what[200];
        snprintf(what, sizeof what, "cuLaunchKernel(%s, call %d)", kiln_cuda_kernel_names[l->kernel], c - first);
        if (CU_TRY(who, what, cu.LaunchKernel(functions[l->kernel], l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                              l->block[1], l->block[2], l->dynamic_shared, stream, params, NULL)))
            return -1;
        if (events && CU_TRY(who, "cuEventRecord", cu.EventRecord(events[c - first + 1], stream))) return -1;
    }
    return 0;
}

/* Bucket b's launches captured once into a CUDA graph on the model's stream (left NULL, and the runs then
 * launch kernel by kernel, when the driver refuses the capture: the reason stays in kiln_last_error). */
static void capture(model_graph* g, int b, CUdeviceptr arena, CUdeviceptr weights, const char* who) {
    g->bucket[b].captured = 1;
    CUgraph graph = NULL;
    if (CU_TRY(who, "cuStreamBeginCapture", cg.StreamBeginCapture(g->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)))
        return;
    int launched = launch_kernels(b, arena, weights, g->stream, NULL, who);
    CUresult ended = CU_TRY(who, "cuStreamEndCapture", cg.StreamEndCapture(g->stream, &graph));
    if (launched == 0 && ended == CUDA_SUCCESS &&
        CU_TRY(who, "cuGraphInstantiate", cg.GraphInstantiate(&g->bucket[b].exec, graph, 0)) != CUDA_SUCCESS)
        g->bucket[b].exec = NULL;
    if (graph) cg.GraphDestroy(graph);
}

/* Bucket b of the model on `stream`: its CUDA graph (captured on its first run) where graphs are on, else
 * each kernel; `g` NULL: kernel by kernel on the legacy stream. */
static int launch_model(model_graph* g, int b, CUdeviceptr arena, CUdeviceptr weights, CUstream stream,
                        const char* who) {
    if (g && graphs_wanted()) {
        if (!g->bucket[b].captured) capture(g, b, arena, weights, who);
        if (g->bucket[b].exec) {
            CUresult rc = cg.GraphLaunch(g->bucket[b].exec, stream);
            if (rc == CUDA_SUCCESS || sticky(rc)) return CU_TRY(who, "cuGraphLaunch", rc) ? -1 : 0;
            /* refused: kernel by kernel, which names the launch at fault (or runs, if the graph was the trouble) */
        }
    }
    return launch_kernels(b, arena, weights, stream, NULL, who);
}

/* Runs bucket b on host buffers: `inputs` are kiln_cuda_num_staged_inputs (the model's, then the run-time lengths). */
int32_t kiln_cuda_bucket_run(int b, void* arena_ptr, const void* weights_ptr, const void* const* inputs,
                             void* const* outputs, double* call_ms) {
    const char* who = call_ms ? "kiln_profile" : "kiln_run";
    const CUdeviceptr arena = (CUdeviceptr)(uintptr_t)arena_ptr, weights = (CUdeviceptr)(uintptr_t)weights_ptr;
    const int calls = kiln_cuda_bucket_calls[b + 1] - kiln_cuda_bucket_calls[b];
    const int64_t* input_bytes = kiln_cuda_input_bytes + (int64_t)b * kiln_cuda_num_staged_inputs;
    const int64_t* output_bytes = kiln_cuda_output_bytes + (int64_t)b * kiln_graph_num_outputs;
    CUevent* events = NULL;
    int32_t status = -1;
    if (CU_TRY(who, "cuCtxSetCurrent", cu.CtxSetCurrent(context))) return -1;
    for (int i = 0; i < kiln_cuda_num_staged_inputs; i++) {
        if (input_bytes[i] == 0) continue;
        char what[64];
        snprintf(what, sizeof what, "cuMemcpyHtoD (input %d)", i);
        if (CU_TRY(who, what, cu.MemcpyHtoD(arena + (CUdeviceptr)kiln_cuda_input_offsets[i], inputs[i],
                                            (size_t)input_bytes[i])))
            return -1;
    }
    if (call_ms) { /* an event before the first launch and after each: launch i took events i..i+1 */
        events = (CUevent*)calloc((size_t)calls + 1, sizeof *events);
        if (!events) {
            fail("%s: out of memory", who);
            return -1;
        }
        for (int i = 0; i <= calls; i++)
            if (CU_TRY(who, "cuEventCreate", cu.EventCreate(&events[i], 0))) goto done;
        if (CU_TRY(who, "cuEventRecord", cu.EventRecord(events[0], NULL))) goto done;
        if (launch_kernels(b, arena, weights, NULL, events, who)) goto done;
    } else {
        /* The model's stream is a blocking one: it waits for the copies above, and the copies below for it. */
        model_graph* g = graph_of(arena);
        if (launch_model(g, b, arena, weights, g ? g->stream : NULL, who)) goto done;
    }
    /* Default-stream copies wait for the launches; a kernel that faulted reports here or at the sync. */
    for (int i = 0; i < kiln_graph_num_outputs; i++) {
        if (output_bytes[i] == 0) continue;
        char what[64];
        snprintf(what, sizeof what, "cuMemcpyDtoH (output %d)", i);
        if (CU_TRY(who, what, cu.MemcpyDtoH(outputs[i], arena + (CUdeviceptr)kiln_cuda_output_offsets[i],
                                            (size_t)output_bytes[i])))
            goto done;
    }
    if (CU_TRY(who, "cuCtxSynchronize (a kernel failed on the GPU)", cu.CtxSynchronize())) goto done;
    for (int c = 0; call_ms && c < calls; c++) {
        float ms = 0;
        if (CU_TRY(who, "cuEventElapsedTime", cu.EventElapsedTime(&ms, events[c], events[c + 1]))) goto done;
        call_ms[c] = ms;
    }
    status = 0;
done:
    if (events) {
        for (int i = 0; i <= calls; i++)
            if (events[i]) cu.EventDestroy(events[i]);
        free(events);
    }
    return status;
}

/* The CPU runtime's contract (model_entry.py), with `arena` and `weights` the device pointers of
 * kiln_device_attach and `inputs`/`outputs` the caller's host buffers. Weak: a library with input-shape ranges
 * links kiln_shaped.c, whose kiln_graph_run picks the bucket and adds the run-time lengths. */
__attribute__((weak)) int32_t kiln_graph_run(void* arena, const void* weights, const void* const* inputs,
                                             void* const* outputs) {
    return kiln_cuda_bucket_run(0, arena, weights, inputs, outputs, NULL);
}

__attribute__((weak)) int32_t kiln_graph_profile(void* arena, const void* weights, const void* const* inputs,
                                                 void* const* outputs, double* call_ms) {
    return kiln_cuda_bucket_run(0, arena, weights, inputs, outputs, call_ms);
}

__attribute__((weak)) const kiln_shaped_request* kiln_shaped_device_request(void); /* kiln_shaped.c, with ranges */

/* The leading `region` block of a dense `src` (src_shape) into a dense `dst` (dst_shape) on `stream`: one copy per
 * run that is contiguous in both (the whole region when only the outermost dim differs, as a padded batch). */
static int copy_region_async(CUdeviceptr dst, const int64_t* dst_shape, CUdeviceptr src, const int64_t* src_shape,
                             const int64_t* region, int ndim, size_t item, CUstream stream, const char* who,
                             const char* what) {
    int contiguous = 1;
    size_t inner = item, dst_stride = item, src_stride = item;
    for (int d = 1; d < ndim; d++) {
        contiguous &= dst_shape[d] == region[d] && src_shape[d] == region[d];
        inner *= (size_t)region[d];
        dst_stride *= (size_t)dst_shape[d];
        src_stride *= (size_t)src_shape[d];
    }
    if (ndim == 0 || contiguous) {
        size_t bytes = ndim == 0 ? item : (size_t)region[0] * inner;
        return bytes && CU_TRY(who, what, cg.MemcpyDtoDAsync(dst, src, bytes, stream)) ? -1 : 0;
    }
    for (int64_t k = 0; k < region[0]; k++)
        if (copy_region_async(dst + (CUdeviceptr)k * dst_stride, dst_shape + 1, src + (CUdeviceptr)k * src_stride,
                              src_shape + 1, region + 1, ndim - 1, item, stream, who, what))
            return -1;
    return 0;
}

/* kiln_run_device (kiln_runtime.c): the inputs copied from the caller's device buffers into the arena, the
 * model, the outputs copied to the caller's device buffers, all queued on `stream` (returns once queued).
 * With input-shape ranges, kiln_run_device_shaped's request (kiln_shaped.h) says which bucket runs: each input
 * is zero-filled at its compiled shape and its actual region copied in, the run-time lengths are copied from the
 * host (the driver takes pageable memory before returning), and each output's actual region is copied out;
 * without one, the largest bucket runs at the upper bounds, as kiln_run does. */
__attribute__((visibility("hidden"))) int32_t kiln_device_run(void* arena_ptr, const void* weights_ptr,
                                                              const uint64_t* inputs, const uint64_t* outputs,
                                                              void* stream_ptr) {
    const char* who = "kiln_run_device";
    CUdeviceptr arena = (CUdeviceptr)(uintptr_t)arena_ptr, weights = (CUdeviceptr)(uintptr_t)weights_ptr;
    CUstream stream = (CUstream)stream_ptr;
    if (!cg.MemcpyDtoDAsync) {
        fail("%s: the CUDA driver lacks streams and graphs (cuGraphLaunch: CUDA 11.4 or later); use kiln_run", who);
        return -1;
    }
    const kiln_shaped_request* shaped = kiln_shaped_device_request ? kiln_shaped_device_request() : NULL;
    const int b = shaped ? shaped->bucket : kiln_cuda_num_buckets - 1;
    const int64_t* input_bytes = kiln_cuda_input_bytes + (int64_t)b * kiln_cuda_num_staged_inputs;
    const int64_t* output_bytes = kiln_cuda_output_bytes + (int64_t)b * kiln_graph_num_outputs;
    const int64_t* lengths = shaped ? shaped->lengths : kiln_cuda_top_lengths;
    char what[64];
    if (CU_TRY(who, "cuCtxSetCurrent", cu.CtxSetCurrent(context))) return -1;
    for (int i = kiln_graph_num_inputs; i < kiln_cuda_num_staged_inputs; i++) {
        snprintf(what, sizeof what, "cuMemcpyHtoDAsync (run-time length %d)", i - kiln_graph_num_inputs);
        if (input_bytes[i] && CU_TRY(who, what, cg.MemcpyHtoDAsync(arena + (CUdeviceptr)kiln_cuda_input_offsets[i],
                                                                   &lengths[i - kiln_graph_num_inputs],
                                                                   sizeof(int64_t), stream)))
            return -1;
    }
    for (int i = 0, dims = 0; i < kiln_graph_num_inputs; dims += shaped ? shaped->in_ndim[i] : 0, i++) {
        if (input_bytes[i] == 0) continue;
        const CUdeviceptr slot = arena + (CUdeviceptr)kiln_cuda_input_offsets[i];
        snprintf(what, sizeof what, "cuMemcpyDtoDAsync (input %d)", i);
        if (!shaped) {
            if (CU_TRY(who, what, cg.MemcpyDtoDAsync(slot, inputs[i], (size_t)input_bytes[i], stream))) return -1;
            continue;
        }
        const int64_t* compiled = shaped->in_compiled + dims;
        int padded = 0;
        for (int d = 0; d < shaped->in_ndim[i]; d++) padded |= compiled[d] != shaped->in_actual[i][d];
        if ((padded && CU_TRY(who, "cuMemsetD8Async (padding an input)",
                              cg.MemsetD8Async(slot, 0, (size_t)input_bytes[i], stream))) ||
            copy_region_async(slot, compiled, inputs[i], shaped->in_actual[i], shaped->in_actual[i],
                              shaped->in_ndim[i], (size_t)shaped->in_itemsize[i], stream, who, what))
            return -1;
    }
    if (launch_model(graph_of(arena), b, arena, weights, stream, who)) return -1;
    for (int i = 0, dims = 0; i < kiln_graph_num_outputs; dims += shaped ? shaped->out_ndim[i] : 0, i++) {
        if (output_bytes[i] == 0) continue;
        const CUdeviceptr slot = arena + (CUdeviceptr)kiln_cuda_output_offsets[i];
        snprintf(what, sizeof what, "cuMemcpyDtoDAsync (output %d)", i);
        if (shaped ? copy_region_async(outputs[i], shaped->out_actual + dims, slot, shaped->out_compiled + dims,
                                       shaped->out_actual + dims, shaped->out_ndim[i], (size_t)shaped->out_itemsize[i],
                                       stream, who, what)
                   : CU_TRY(who, what, cg.MemcpyDtoDAsync(outputs[i], slot, (size_t)output_bytes[i], stream)))
            return -1;
    }
    return 0;
}
