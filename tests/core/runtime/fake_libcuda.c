/* A stand-in for the NVIDIA driver (built as libcuda.so.1 by test_cuda_fake_driver.py) so the CUDA
 * runtime's host side runs in CI without a GPU: device memory is host memory, and the three kernels of
 * tests/core/runtime/cuda_models.py are executed in C when launched with the grid/block they expect.
 * Streams are the host thread (everything runs at once, in order); stream capture records launches into a
 * graph that cuGraphLaunch replays; counters say how many kernels ran directly and how many graphs ran.
 * Built with -DFAKE_NO_GRAPHS it lacks the graph API, as an old driver does.
 * FAKE_CUDA_KERNELS names a CPU library of the same kernels (the model's cuda-scheduled PrimFuncs compiled for this
 * CPU: thread-bound loops run serially): any launched kernel then runs from it by name, its argument count read
 * from the PTX's .entry, so a whole compiled model runs through the real runtime's tables and staging.
 * FAKE_CUDA_MODE picks a failure: nodevice, old_gpu, bad_ptx, launch_fails, capture_fails. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { M = 64, K = 128, N = 96 };

static const char* mode(void) {
    const char* m = getenv("FAKE_CUDA_MODE");
    return m ? m : "";
}

static int live_allocations;
int fake_live_allocations(void) { return live_allocations; }

CUresult cuInit(unsigned flags) { (void)flags; return strcmp(mode(), "nodevice") == 0 ? 100 : 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return 0; }
CUresult cuDeviceGetName(char* name, int len, int d) { (void)d; snprintf(name, (size_t)len, "Fake GPU"); return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
    (void)d;
    int old = strcmp(mode(), "old_gpu") == 0;
    *v = attr == 75 ? (old ? 7 : 9) : 0;
    return 0;
}
static int context;
CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) { (void)d; *ctx = &context; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
CUresult cuCtxSetCurrent(void* ctx) { return ctx == &context ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */ }
CUresult cuCtxSynchronize(void) { return 0; }

#define FAKE_MAX_ARGS 32 /* a CPU kernel is called with this many pointers, the unused ones NULL (SysV x86-64) */

typedef struct {
    char* name;
    int nargs; /* its .param count in the PTX */
    void* cpu; /* its CPU version in FAKE_CUDA_KERNELS, or NULL: one of the hand-run kernels below */
} fake_function;

static int module;
static const char* loaded_ptx;
static void* cpu_kernels; /* dlopen(FAKE_CUDA_KERNELS) */

/* The number of parameters of `.entry NAME(` in the loaded PTX; -1 when it has no such entry. */
static int entry_params(const char* name) {
    size_t len = strlen(name);
    for (const char* at = strstr(loaded_ptx, ".entry "); at; at = strstr(at + 1, ".entry ")) {
        const char* id = at + 7;
        if (strncmp(id, name, len) != 0 || id[len] != '(') continue;
        const char* end = strchr(id, ')');
        int n = 0;
        for (const char* p = strstr(id, ".param"); p && (!end || p < end); p = strstr(p + 1, ".param")) n++;
        return n;
    }
    return -1;
}

CUresult cuModuleLoadDataEx(void** mod, const void* ptx, unsigned n, int* options, void** values) {
    if (strcmp(mode(), "bad_ptx") == 0 || strstr((const char*)ptx, ".entry") == NULL) {
        for (unsigned i = 0; i < n; i++)
            if (options[i] == 5) snprintf((char*)values[i], 64, "ptxas fatal   : fake rejection\nsecond line");
        return 218; /* CUDA_ERROR_INVALID_PTX */
    }
    const char* library = getenv("FAKE_CUDA_KERNELS");
    if (library && *library && !(cpu_kernels = dlopen(library, RTLD_NOW | RTLD_LOCAL))) { /* this module's build */
        fprintf(stderr, "fake libcuda: %s\n", dlerror());
        return 200; /* CUDA_ERROR_INVALID_IMAGE */
    }
    loaded_ptx = (const char*)ptx;
    *mod = &module;
    return 0;
}
CUresult cuModuleUnload(void* mod) {
    if (mod != &module) return 400;
    if (cpu_kernels) dlclose(cpu_kernels);
    cpu_kernels = NULL;
    return 0;
}
CUresult cuFuncSetAttribute(fake_function* fn, int attribute, int value) { (void)fn, (void)attribute, (void)value; return 0; }
CUresult cuModuleGetFunction(fake_function** fn, void* mod, const char* name) {
    (void)mod;
    int nargs = entry_params(name);
    void* cpu = cpu_kernels ? dlsym(cpu_kernels, name) : NULL;
    if (nargs < 0 || nargs > FAKE_MAX_ARGS || (cpu_kernels && !cpu)) return 500; /* CUDA_ERROR_NOT_FOUND */
    *fn = (fake_function*)calloc(1, sizeof **fn); /* never freed, as the handles of a real module live with it */
    (*fn)->name = strdup(name);
    (*fn)->nargs = nargs;
    (*fn)->cpu = cpu;
    return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
    *p = (CUdeviceptr)(uintptr_t)malloc(size);
    live_allocations++;
    return *p ? 0 : 2;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)(uintptr_t)p); live_allocations--; return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)(uintptr_t)p, v, n); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) { memcpy((void*)(uintptr_t)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { memcpy(d, (void*)(uintptr_t)s, n); return 0; }

static float* arg(const CUdeviceptr* params, int i) { return (float*)(uintptr_t)params[i]; }

static int direct_launches, graph_launches;
int fake_direct_launches(void) { return direct_launches; }
int fake_graph_launches(void) { return graph_launches; }

typedef void (*cpu_kernel)(void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*,
                           void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*,
                           void*, void*, void*, void*, void*, void*);

/* The kernel on device pointers `p`: its CPU version, or one of the three hand-run kernels; 0, or
 * CUDA_ERROR_INVALID_VALUE for an unexpected kernel or launch shape. */
static CUresult execute(const fake_function* f, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                        const CUdeviceptr* p) {
    const char* fn = f->name;
    if (f->cpu) {
        void* a[FAKE_MAX_ARGS] = {0};
        for (int i = 0; i < f->nargs; i++) a[i] = (void*)(uintptr_t)p[i];
        ((cpu_kernel)f->cpu)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13],
                             a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26],
                             a[27], a[28], a[29], a[30], a[31]);
    } else if (strcmp(fn, "scale_shift") == 0 && gx == M * K / 256 && bx == 256) {
        float *x = arg(p, 0), *t = arg(p, 1);
        for (int i = 0; i < M * K; i++) t[i] = x[i] * 2 + 1;
    } else if (strcmp(fn, "matmul") == 0 && gx == N / 16 && gy == M / 16 && bx == 16 && by == 16) {
        float *a = arg(p, 0), *w = arg(p, 1), *c = arg(p, 2);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = 0;
                for (int k = 0; k < K; k++) s += a[i * K + k] * w[k * N + j];
                c[i * N + j] = s;
            }
    } else if (strcmp(fn, "bias_relu") == 0 && gx == M * N / 128 && bx == 128) {
        float *y = arg(p, 0), *bias = arg(p, 1), *z = arg(p, 2);
        for (int i = 0; i < M * N; i++) z[i] = y[i] + bias[i % N] > 0 ? y[i] + bias[i % N] : 0;
    } else {
        return 1; /* CUDA_ERROR_INVALID_VALUE: an unexpected kernel or launch shape */
    }
    return 0;
}

typedef struct {
    const fake_function* fn;
    unsigned gx, gy, bx, by;
    CUdeviceptr params[FAKE_MAX_ARGS];
} recorded_launch;
typedef struct {
    int count;
    recorded_launch launches[1024];
} fake_graph;
static void* capturing; /* the stream under capture */
static fake_graph* captured;

CUresult cuLaunchKernel(const fake_function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
    (void)gz, (void)bz, (void)shared, (void)extra;
    if (strcmp(mode(), "launch_fails") == 0 && strcmp(fn->name, "matmul") == 0) return 719; /* LAUNCH_FAILED */
    recorded_launch l = {fn, gx, gy, bx, by, {0}};
    for (int i = 0; i < fn->nargs; i++) l.params[i] = *(CUdeviceptr*)params[i];
    if (stream && stream == capturing) {
        if (captured->count == (int)(sizeof captured->launches / sizeof captured->launches[0])) return 1;
        captured->launches[captured->count++] = l;
        return 0;
    }
    direct_launches++;
    return execute(fn, gx, gy, bx, by, l.params);
}

#ifndef FAKE_NO_GRAPHS
static int streams;
CUresult cuStreamCreate(void** stream, unsigned flags) { (void)flags; *stream = malloc(1); streams++; return 0; }
CUresult cuStreamDestroy_v2(void* stream) { free(stream); streams--; return 0; }
int fake_live_streams(void) { return streams; }
CUresult cuStreamBeginCapture_v2(void* stream, int mode_) {
    (void)mode_;
    if (strcmp(mode(), "capture_fails") == 0) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
    capturing = stream;
    captured = (fake_graph*)calloc(1, sizeof *captured);
    return 0;
}
CUresult cuStreamEndCapture(void* stream, fake_graph** graph) {
    if (stream != capturing) return 1;
    *graph = captured;
    capturing = NULL;
    return 0;
}
CUresult cuGraphInstantiateWithFlags(fake_graph** exec, fake_graph* graph, unsigned long long flags) {
    (void)flags;
    *exec = (fake_graph*)malloc(sizeof *graph);
    memcpy(*exec, graph, sizeof *graph);
    return 0;
}
CUresult cuGraphLaunch(fake_graph* exec, void* stream) {
    (void)stream;
    graph_launches++;
    for (int i = 0; i < exec->count; i++) {
        recorded_launch* l = &exec->launches[i];
        CUresult rc = execute(l->fn, l->gx, l->gy, l->bx, l->by, l->params);
        if (rc) return rc;
    }
    return 0;
}
CUresult cuGraphExecDestroy(fake_graph* exec) { free(exec); return 0; }
CUresult cuGraphDestroy(fake_graph* graph) { free(graph); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* stream) {
    (void)stream;
    memcpy((void*)(uintptr_t)d, (void*)(uintptr_t)s, n);
    return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* stream) {
    (void)stream;
    memcpy((void*)(uintptr_t)d, s, n);
    return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void* stream) {
    (void)stream;
    memset((void*)(uintptr_t)p, v, n);
    return 0;
}
#endif

static int event;
CUresult cuEventCreate(void** e, unsigned flags) { (void)flags; *e = &event; return 0; }
CUresult cuEventRecord(void* e, void* stream) { (void)e, (void)stream; return 0; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) { (void)a, (void)b; *ms = 0.25f; return 0; }
CUresult cuEventDestroy_v2(void* e) { (void)e; return 0; }

CUresult cuGetErrorName(CUresult rc, const char** name) {
    switch (rc) {
        case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
        case 218: *name = "CUDA_ERROR_INVALID_PTX"; return 0;
        case 719: *name = "CUDA_ERROR_LAUNCH_FAILED"; return 0;
        case 900: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return 0;
        default: *name = NULL; return 1;
    }
}
CUresult cuGetErrorString(CUresult rc, const char** text) {
    *text = rc == 719 ? "unspecified launch failure" : "fake error";
    return 0;
}
