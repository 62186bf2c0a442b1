/* Kiln native runtime: loads a model's weights, owns its arena, and runs the compiled graph.
 * The same file is compiled into every model library; the ABI is documented in kiln_model.h.
 *
 * Alignment: the weights blob and the arena are 64-byte aligned (cache lines, full vectors).
 * Inputs and outputs are the caller's own pointers and need only their element type's natural
 * alignment: the kernels never assume more, so nothing is copied on the way in or out.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln_float_mode.h"
#include "kiln_graph.h"
#include "kiln_threadpool.h"

/* A device backend (kiln_cuda.c, linked into GPU libraries only) keeps the weights and the arena in device
 * memory: attach uploads the weights read here and replaces both pointers with device pointers. Weak and
 * hidden: a CPU library, which has no backend, sees NULL at link time and never looks it up elsewhere. */
__attribute__((weak, visibility("hidden"))) int kiln_device_attach(const void* host_weights, void** weights,
                                                                   void** arena);
__attribute__((weak, visibility("hidden"))) void kiln_device_detach(void* weights, void* arena);
/* A multi-ISA library's dispatch (kiln_isa.c): why the kernel variant asked for cannot run on this CPU, or NULL. */
__attribute__((weak, visibility("hidden"))) const char* kiln_isa_check(void);
/* The device backend's run on the caller's device buffers, queued on its stream (kiln_run_device). */
__attribute__((weak, visibility("hidden"))) int32_t kiln_device_run(void* arena, const void* weights,
                                                                   const uint64_t* inputs, const uint64_t* outputs,
                                                                   void* stream);

typedef struct kiln_model {
    void* weights;
    void* arena;
    int on_device; /* weights and arena are the device backend's pointers */
    pthread_mutex_t lock; /* one arena per model: concurrent kiln_run calls on it take turns */
} kiln_model;

static _Thread_local char last_error[512];

static void set_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

const char* kiln_last_error(void) { return last_error; }

/* For the device backend's messages. */
void kiln_runtime_set_error(const char* message) { set_error("%s", message); }

/* A kernel recorded an index outside its axis (record: flag, index, extent; core/tir/index_guard.py): the
 * runner stops and returns this, `where` naming the nodes. */
int32_t kiln_runtime_index_error(const char* where, const int64_t* record) {
    long long index = (long long)record[1], extent = (long long)record[2];
    set_error("index %lld is out of range in %s: the axis has %lld elements (valid indices: %lld to %lld)", index,
              where, extent, -extent, extent - 1);
    return KILN_INDEX_ERROR;
}

double kiln_runtime_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void* alloc64(int64_t bytes) {
    void* p = NULL;
    /* Round up to whole cache lines; never ask for 0 bytes, so a valid pointer always comes back. */
    size_t size = (size_t)((bytes + 63) / 64 * 64);
    if (size == 0) size = 64;
    if (posix_memalign(&p, 64, size) != 0) return NULL;
    memset(p, 0, size);
    return p;
}

static kiln_model* new_model(void) {
    kiln_model* m = (kiln_model*)calloc(1, sizeof *m);
    if (!m) {
        set_error("out of memory allocating the model");
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->weights = alloc64(kiln_weights_bytes);
    m->arena = alloc64(kiln_device_attach ? 0 : kiln_arena_bytes); /* a device backend's arena is on the device */
    if (!m->weights || !m->arena) {
        set_error("out of memory: the model needs %lld bytes of weights and a %lld-byte arena",
                  (long long)kiln_weights_bytes, (long long)kiln_arena_bytes);
        free(m->weights);
        free(m->arena);
        free(m);
        return NULL;
    }
    return m;
}

void kiln_free(kiln_model* m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    if (m->on_device) {
        kiln_device_detach(m->weights, m->arena);
    } else {
        free(m->weights);
        free(m->arena);
    }
    free(m);
}

/* The loaded model, moved to the device when the library has a device backend; NULL if that fails. */
static kiln_model* ready(kiln_model* m) {
    if (!m || !kiln_device_attach) return m;
    void *weights = NULL, *arena = NULL;
    if (kiln_device_attach(m->weights, &weights, &arena) != 0) {
        kiln_free(m);
        return NULL;
    }
    free(m->weights);
    free(m->arena);
    m->weights = weights;
    m->arena = arena;
    m->on_device = 1;
    return m;
}

static int isa_refused(const char* who) {
    const char* why = kiln_isa_check ? kiln_isa_check() : NULL;
    if (why) set_error("%s: %s", who, why);
    return why != NULL;
}

kiln_model* kiln_load(const char* weights_path) {
    if (isa_refused("kiln_load")) return NULL;
    if (!weights_path) {
        if (kiln_weights_bytes == 0) return ready(new_model());
        set_error("kiln_load: no weights path given, but the model has %lld bytes of weights",
                  (long long)kiln_weights_bytes);
        return NULL;
    }
    FILE* f = fopen(weights_path, "rb");
    if (!f) {
        set_error("kiln_load: cannot open weights file %s: %s", weights_path, strerror(errno));
        return NULL;
    }
    long long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size != (long long)kiln_weights_bytes) {
        set_error("kiln_load: weights file %s has %lld bytes, the model expects %lld (another model's weights?)",
                  weights_path, size, (long long)kiln_weights_bytes);
        fclose(f);
        return NULL;
    }
    kiln_model* m = new_model();
    if (!m) {
        fclose(f);
        return NULL;
    }
    rewind(f);
    if (size > 0 && fread(m->weights, 1, (size_t)size, f) != (size_t)size) {
        set_error("kiln_load: reading weights file %s failed", weights_path);
        fclose(f);
        kiln_free(m);
        return NULL;
    }
    fclose(f);
    return ready(m);
}

kiln_model* kiln_load_from_memory(const void* data, int64_t size) {
    if (isa_refused("kiln_load_from_memory")) return NULL;
    if (size != kiln_weights_bytes || (size > 0 && !data)) {
        set_error("kiln_load_from_memory: got %lld bytes of weights, the model expects %lld",
                  (long long)size, (long long)kiln_weights_bytes);
        return NULL;
    }
    kiln_model* m = new_model();
    if (m && size > 0) memcpy(m->weights, data, (size_t)size);
    return ready(m);
}

static int check_call(const kiln_model* m, const void* const* inputs, void* const* outputs, const char* who) {
    if (!m) {
        set_error("%s: the model is NULL (did kiln_load fail?)", who);
        return -1;
    }
    if ((kiln_graph_num_inputs > 0 && !inputs) || (kiln_graph_num_outputs > 0 && !outputs)) {
        set_error("%s: the input or output pointer array is NULL", who);
        return -1;
    }
    for (int i = 0; i < kiln_graph_num_inputs; i++)
        if (!inputs[i]) {
            set_error("%s: input %d is NULL", who, i);
            return -1;
        }
    for (int i = 0; i < kiln_graph_num_outputs; i++)
        if (!outputs[i]) {
            set_error("%s: output %d is NULL", who, i);
            return -1;
        }
    return 0;
}

/* One inference: the pool's workers stay hot across all its kernels (and park soon after), and every
 * thread that runs kernels flushes denormals (the pool gives workers the caller's float mode). */
static int32_t run_graph(kiln_model* m, const void* const* inputs, void* const* outputs, double* call_ms) {
    pthread_mutex_lock(&m->lock);
    kiln_pool_enter();
    unsigned long old_mode = kiln_float_mode_get();
    kiln_float_mode_set(kiln_float_mode_flushing(old_mode));
    last_error[0] = '\0'; /* a device backend's failure says what failed; keep it */
    int32_t rc = call_ms ? kiln_graph_profile(m->arena, m->weights, inputs, outputs, call_ms)
                         : kiln_graph_run(m->arena, m->weights, inputs, outputs);
    kiln_float_mode_set(old_mode);
    kiln_pool_leave();
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int kiln_run(kiln_model* m, const void* const* inputs, void* const* outputs) {
    if (check_call(m, inputs, outputs, "kiln_run") != 0) return -1;
    int32_t rc = run_graph(m, inputs, outputs, NULL);
    if (rc != 0 && !last_error[0]) set_error("kiln_run: the graph returned %d", (int)rc);
    return rc;
}

int kiln_profile(kiln_model* m, const void* const* inputs, void* const* outputs, double* call_ms) {
    if (check_call(m, inputs, outputs, "kiln_profile") != 0) return -1;
    if (!call_ms && kiln_graph_num_calls > 0) {
        set_error("kiln_profile: call_ms is NULL");
        return -1;
    }
    static double no_calls[1];
    int32_t rc = run_graph(m, inputs, outputs, call_ms ? call_ms : no_calls);
    if (rc != 0 && !last_error[0]) set_error("kiln_profile: the graph returned %d", (int)rc);
    return rc;
}

int kiln_run_device(kiln_model* m, const uint64_t* inputs, const uint64_t* outputs, void* stream) {
    if (!m || !inputs || !outputs) {
        set_error("kiln_run_device: model, inputs or outputs is NULL");
        return -1;
    }
    if (!kiln_device_run || !m->on_device) {
        set_error("kiln_run_device: this model runs on the CPU; pass host buffers to kiln_run");
        return -1;
    }
    for (int i = 0; i < kiln_graph_num_inputs; i++)
        if (!inputs[i]) {
            set_error("kiln_run_device: input %d is 0", i);
            return -1;
        }
    for (int i = 0; i < kiln_graph_num_outputs; i++)
        if (!outputs[i]) {
            set_error("kiln_run_device: output %d is 0", i);
            return -1;
        }
    pthread_mutex_lock(&m->lock);
    last_error[0] = '\0';
    int32_t rc = kiln_device_run(m->arena, m->weights, inputs, outputs, stream);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/* Threads come from Kiln's own pool (kiln_threadpool.c), shared by every model of this library. */
void kiln_set_num_threads(int n) { kiln_pool_set_threads(n); }
int kiln_get_num_threads(void) { return kiln_pool_get_threads(); }
int kiln_num_inputs(void) { return kiln_graph_num_inputs; }
int kiln_num_outputs(void) { return kiln_graph_num_outputs; }
int kiln_num_kernel_calls(void) { return kiln_graph_num_calls; }
int64_t kiln_arena_size(void) { return kiln_arena_bytes; }
int64_t kiln_weights_size(void) { return kiln_weights_bytes; }

const char* kiln_kernel_call_name(int i) {
    return (i >= 0 && i < kiln_graph_num_calls) ? kiln_graph_call_names[i] : NULL;
}
