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

/* Emitted by Kiln's code generator (core/codegen/model_entry.py). */
extern const int64_t kiln_arena_bytes;
extern const int64_t kiln_weights_bytes;
extern const int32_t kiln_graph_num_inputs;
extern const int32_t kiln_graph_num_outputs;
extern const int32_t kiln_graph_num_calls;
extern const char* const kiln_graph_call_names[];
int32_t kiln_graph_run(void* arena, const void* weights, const void* const* inputs, void* const* outputs);
int32_t kiln_graph_profile(void* arena, const void* weights, const void* const* inputs, void* const* outputs,
                           double* call_ms);

/* From libgomp; declared here so no omp.h is needed (cross compilers may lack it). */
void omp_set_num_threads(int n);
int omp_get_max_threads(void);

typedef struct kiln_model {
    void* weights;
    void* arena;
    pthread_mutex_t lock; /* one arena per model: concurrent kiln_run calls on it take turns */
} kiln_model;

static _Thread_local char last_error[512];
static int requested_threads; /* 0: OpenMP's default (OMP_NUM_THREADS or one per core) */

static void set_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

const char* kiln_last_error(void) { return last_error; }

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
    m->arena = alloc64(kiln_arena_bytes);
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
    free(m->weights);
    free(m->arena);
    free(m);
}

kiln_model* kiln_load(const char* weights_path) {
    if (!weights_path) {
        if (kiln_weights_bytes == 0) return new_model();
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
    return m;
}

kiln_model* kiln_load_from_memory(const void* data, int64_t size) {
    if (size != kiln_weights_bytes || (size > 0 && !data)) {
        set_error("kiln_load_from_memory: got %lld bytes of weights, the model expects %lld",
                  (long long)size, (long long)kiln_weights_bytes);
        return NULL;
    }
    kiln_model* m = new_model();
    if (m && size > 0) memcpy(m->weights, data, (size_t)size);
    return m;
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
    /* The thread count is a per-thread OpenMP setting; apply it on whichever thread runs. */
    if (requested_threads > 0) omp_set_num_threads(requested_threads);
    return 0;
}

/* Denormal floats are 10-100x slower on x86 and arise naturally as activations decay; flush them to
 * zero (FTZ/DAZ) on every thread that runs kernels, as inference runtimes do. Returns the old mode. */
static unsigned flush_denormals(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned old = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(old | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return old;
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24)));
    return (unsigned)fpcr;
#else
    return 0;
#endif
}

static void restore_float_mode(unsigned old) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_ldmxcsr(old);
#elif defined(__aarch64__)
    unsigned long fpcr = old;
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#else
    (void)old;
#endif
}

void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
static void flush_denormals_in_team(void* unused) { (void)unused; flush_denormals(); }

int kiln_run(kiln_model* m, const void* const* inputs, void* const* outputs) {
    if (check_call(m, inputs, outputs, "kiln_run") != 0) return -1;
    pthread_mutex_lock(&m->lock);
    unsigned old_mode = flush_denormals();
    GOMP_parallel(flush_denormals_in_team, NULL, 0, 0); /* the pool threads keep the mode */
    int32_t rc = kiln_graph_run(m->arena, m->weights, inputs, outputs);
    restore_float_mode(old_mode);
    pthread_mutex_unlock(&m->lock);
    if (rc != 0) set_error("kiln_run: the graph returned %d", (int)rc);
    return rc;
}

int kiln_profile(kiln_model* m, const void* const* inputs, void* const* outputs, double* call_ms) {
    if (check_call(m, inputs, outputs, "kiln_profile") != 0) return -1;
    if (!call_ms && kiln_graph_num_calls > 0) {
        set_error("kiln_profile: call_ms is NULL");
        return -1;
    }
    pthread_mutex_lock(&m->lock);
    int32_t rc = kiln_graph_profile(m->arena, m->weights, inputs, outputs, call_ms);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

void kiln_set_num_threads(int n) {
    requested_threads = n > 0 ? n : 0;
    if (n > 0) omp_set_num_threads(n);
}

int kiln_get_num_threads(void) { return requested_threads > 0 ? requested_threads : omp_get_max_threads(); }
int kiln_num_inputs(void) { return kiln_graph_num_inputs; }
int kiln_num_outputs(void) { return kiln_graph_num_outputs; }
int kiln_num_kernel_calls(void) { return kiln_graph_num_calls; }
int64_t kiln_arena_size(void) { return kiln_arena_bytes; }
int64_t kiln_weights_size(void) { return kiln_weights_bytes; }

const char* kiln_kernel_call_name(int i) {
    return (i >= 0 && i < kiln_graph_num_calls) ? kiln_graph_call_names[i] : NULL;
}
