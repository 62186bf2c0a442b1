/* Shape-bucketed models: kiln_run_shaped picks the smallest bucket that holds the actual input shapes,
 * zero-pads the inputs along padded axes (those the compiler proved harmless to pad) and masked axes (those
 * whose actual size the bucket takes as a run-time length input, appended after the model's inputs), runs
 * that bucket through kiln_run, and copies each output's valid part back at its true shape. An input or output
 * whose bucket's kernels address it at its run-time lengths (kiln_dyn_in_layout / out_layout: a KV cache,
 * core/lowering/run_time_layouts.py) is no copy at all when its other dims are the bucket's: the caller's array
 * goes straight to the kernels. Linked only into
 * libraries compiled with input-shape ranges; the tables come from core/codegen/bucket_entry.py.
 * `kiln_graph_run` and `kiln_graph_profile` live here: they run the bucket selected by the calling thread
 * (the largest by default, its lengths at their largest, so kiln_run serves the declared upper bounds).
 * kiln_run_device_shaped does the same on device buffers: it checks the shapes and picks the bucket here, and the
 * device backend (kiln_cuda.c) pads and cuts on the device while kiln_run_device runs (kiln_shaped.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_graph.h"
#include "kiln_shaped.h"
#include "kiln_threadpool.h"

typedef struct kiln_model kiln_model;
int kiln_run(kiln_model* model, const void* const* inputs, void* const* outputs);
int kiln_run_device(kiln_model* model, const uint64_t* inputs, const uint64_t* outputs, void* stream);
void kiln_runtime_set_error(const char* message);

typedef int32_t (*kiln_runner)(void*, const void*, const void* const*, void* const*);
extern const int32_t kiln_dyn_num_buckets, kiln_dyn_num_vars;
extern const int32_t kiln_dyn_in_ndim[], kiln_dyn_out_ndim[], kiln_dyn_in_var[], kiln_dyn_out_var[];
extern const int32_t kiln_dyn_var_mode[], kiln_dyn_in_itemsize[], kiln_dyn_out_itemsize[];
extern const int32_t kiln_dyn_in_layout[], kiln_dyn_out_layout[];
extern const int32_t kiln_dyn_num_lengths, kiln_dyn_length_var[];
extern const int64_t kiln_dyn_in_fixed[], kiln_dyn_var_lo[], kiln_dyn_var_hi[], kiln_dyn_bucket_sizes[];
extern const int64_t kiln_dyn_out_shapes[], kiln_dyn_in_coef[], kiln_dyn_in_const[], kiln_dyn_out_coef[];
extern const int64_t kiln_dyn_out_const[];
extern const char* const kiln_dyn_in_names[];
extern const char* const kiln_dyn_var_names[];
extern const kiln_runner kiln_dyn_runners[];
int32_t kiln_bucket_profile(void* arena, const void* weights, const void* const* inputs, void* const* outputs,
                            double* call_ms);
int kiln_profile(kiln_model* model, const void* const* inputs, void* const* outputs, double* call_ms);
/* Per bucket: its profiling runner and its calls' names (kiln_dyn_call_names[kiln_dyn_call_start[b] + i]); weak:
 * a library without them (a GPU one) profiles the largest bucket only. */
typedef int32_t (*kiln_profiler)(void*, const void*, const void* const*, void* const*, double*);
extern const kiln_profiler kiln_dyn_profilers[] __attribute__((weak));
extern const int32_t kiln_dyn_call_start[] __attribute__((weak));
extern const char* const kiln_dyn_call_names[] __attribute__((weak));

#define KILN_MAX_RANK 16
#define KILN_MAX_VARS (KILN_MAX_RANK * 8 + 1)
enum { EXACT = 0, PADDED = 1, MASKED = 2 }; /* kiln_dyn_var_mode */

static _Thread_local int selected = -1; /* set by kiln_run_shaped, whose inputs carry the lengths already */

/* The inputs followed by each run-time length at its largest (the variable's upper bound). */
static const void* const* with_largest_lengths(const void* const* inputs, const void** all) {
    for (int i = 0; i < kiln_graph_num_inputs; i++) all[i] = inputs[i];
    for (int k = 0; k < kiln_dyn_num_lengths; k++)
        all[kiln_graph_num_inputs + k] = &kiln_dyn_var_hi[kiln_dyn_length_var[k]];
    return all;
}

int32_t kiln_graph_run(void* arena, const void* weights, const void* const* inputs, void* const* outputs) {
    if (selected >= 0) return kiln_dyn_runners[selected](arena, weights, inputs, outputs);
    const void* all[kiln_graph_num_inputs + kiln_dyn_num_lengths + 1];
    return kiln_dyn_runners[kiln_dyn_num_buckets - 1](arena, weights, with_largest_lengths(inputs, all), outputs);
}

int32_t kiln_graph_profile(void* arena, const void* weights, const void* const* inputs, void* const* outputs,
                           double* call_ms) {
    if (selected >= 0 && kiln_dyn_profilers)
        return kiln_dyn_profilers[selected](arena, weights, inputs, outputs, call_ms);
    const void* all[kiln_graph_num_inputs + kiln_dyn_num_lengths + 1];
    return kiln_bucket_profile(arena, weights, with_largest_lengths(inputs, all), outputs, call_ms);
}

static void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char* fmt, ...) {
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    kiln_runtime_set_error(message);
}

static int in_offset(int i) {
    int n = 0;
    for (int k = 0; k < i; k++) n += kiln_dyn_in_ndim[k];
    return n;
}

static int out_offset(int i) {
    int n = 0;
    for (int k = 0; k < i; k++) n += kiln_dyn_out_ndim[k];
    return n;
}

int kiln_num_buckets(void) { return kiln_dyn_num_buckets; }
int kiln_input_ndim(int i) { return (i >= 0 && i < kiln_graph_num_inputs) ? kiln_dyn_in_ndim[i] : -1; }
int kiln_output_ndim(int i) { return (i >= 0 && i < kiln_graph_num_outputs) ? kiln_dyn_out_ndim[i] : -1; }

/* An input dim that sums variables (a mask over "past + new"): its size for the variables' `sizes`. */
static int64_t input_sum(int dim, const int64_t* sizes) {
    int64_t n = kiln_dyn_in_const[dim];
    for (int v = 0; v < kiln_dyn_num_vars; v++) n += kiln_dyn_in_coef[(int64_t)dim * kiln_dyn_num_vars + v] * sizes[v];
    return n;
}

/* Input dim `dim`'s size for the variables' `sizes`. */
static int64_t input_dim(int dim, const int64_t* sizes) {
    int v = kiln_dyn_in_var[dim];
    return v == -1 ? kiln_dyn_in_fixed[dim] : v == -2 ? input_sum(dim, sizes) : sizes[v];
}

int kiln_input_range(int i, int64_t* min_shape, int64_t* max_shape) {
    if (i < 0 || i >= kiln_graph_num_inputs) return -1;
    const int base = in_offset(i);
    for (int d = 0; d < kiln_dyn_in_ndim[i]; d++) {
        if (min_shape) min_shape[d] = input_dim(base + d, kiln_dyn_var_lo);
        if (max_shape) max_shape[d] = input_dim(base + d, kiln_dyn_var_hi);
    }
    return kiln_dyn_in_ndim[i];
}

int kiln_output_max_shape(int i, int64_t* shape) {
    if (i < 0 || i >= kiln_graph_num_outputs) return -1;
    const int64_t* top = kiln_dyn_out_shapes + (int64_t)(kiln_dyn_num_buckets - 1) * out_offset(kiln_graph_num_outputs);
    for (int d = 0; d < kiln_dyn_out_ndim[i]; d++) shape[d] = top[out_offset(i) + d];
    return kiln_dyn_out_ndim[i];
}

/* The sizes accepted for variable v, as text ("8, 128, 384" or "1..16"), for error messages. */
static void accepted(int v, char* text, size_t size) {
    if (kiln_dyn_var_mode[v] != EXACT) {
        snprintf(text, size, "%lld..%lld", (long long)kiln_dyn_var_lo[v], (long long)kiln_dyn_var_hi[v]);
        return;
    }
    size_t used = 0;
    text[0] = '\0';
    for (int b = 0; b < kiln_dyn_num_buckets; b++) {
        int64_t s = kiln_dyn_bucket_sizes[b * kiln_dyn_num_vars + v];
        int seen = 0;
        for (int c = 0; c < b; c++) seen |= kiln_dyn_bucket_sizes[c * kiln_dyn_num_vars + v] == s;
        if (!seen && used < size) used += snprintf(text + used, size - used, "%s%lld", used ? ", " : "", (long long)s);
    }
}

/* Input i's (output o's) shape as bucket b's kernels address it: the bucket's, but the actual size along the dims
 * they take at their run-time lengths. */
static void input_layout(int i, int b, const int64_t* sizes, const int64_t* actual_shape, int64_t* shape) {
    const int base = in_offset(i);
    const int32_t* laid = kiln_dyn_in_layout + (int64_t)b * in_offset(kiln_graph_num_inputs) + base;
    for (int d = 0; d < kiln_dyn_in_ndim[i]; d++) shape[d] = laid[d] ? actual_shape[d] : input_dim(base + d, sizes);
}

static void output_layout(int o, int b, const int64_t* actual_shape, int64_t* shape) {
    const int base = out_offset(o), dims = out_offset(kiln_graph_num_outputs);
    const int32_t* laid = kiln_dyn_out_layout + (int64_t)b * dims + base;
    for (int d = 0; d < kiln_dyn_out_ndim[o]; d++)
        shape[d] = laid[d] ? actual_shape[d] : kiln_dyn_out_shapes[(int64_t)b * dims + base + d];
}

static int laid_out(const int32_t* table, int b, int all_dims, int base, int ndim) {
    int any = 0;
    for (int d = 0; d < ndim; d++) any |= table[(int64_t)b * all_dims + base + d];
    return any;
}

/* The actual size of every variable from the input shapes, checked; -1 with the error set. */
static int read_sizes(const int64_t* const* input_shapes, int64_t* actual) {
    for (int v = 0; v < kiln_dyn_num_vars; v++) actual[v] = -1;
    for (int i = 0, base = 0; i < kiln_graph_num_inputs; base += kiln_dyn_in_ndim[i], i++) {
        if (!input_shapes[i]) {
            fail("kiln_run_shaped: the shape of input %d (%s) is NULL", i, kiln_dyn_in_names[i]);
            return -1;
        }
        for (int d = 0; d < kiln_dyn_in_ndim[i]; d++) {
            int64_t n = input_shapes[i][d];
            int v = kiln_dyn_in_var[base + d];
            if (v == -2) continue; /* a sum of variables: checked once they are all known */
            if (v < 0) {
                if (n != kiln_dyn_in_fixed[base + d]) {
                    fail("kiln_run_shaped: input %d (%s) dim %d is %lld, but the model fixes it to %lld", i,
                         kiln_dyn_in_names[i], d, (long long)n, (long long)kiln_dyn_in_fixed[base + d]);
                    return -1;
                }
                continue;
            }
            if (n < kiln_dyn_var_lo[v] || n > kiln_dyn_var_hi[v]) {
                fail("kiln_run_shaped: input %d (%s) dim %d (%s) is %lld, outside the declared range %lld..%lld", i,
                     kiln_dyn_in_names[i], d, kiln_dyn_var_names[v], (long long)n, (long long)kiln_dyn_var_lo[v],
                     (long long)kiln_dyn_var_hi[v]);
                return -1;
            }
            if (actual[v] >= 0 && actual[v] != n) {
                fail("kiln_run_shaped: input %d (%s) dim %d is %lld, but another input has %lld for the same "
                     "dimension %s", i, kiln_dyn_in_names[i], d, (long long)n, (long long)actual[v], kiln_dyn_var_names[v]);
                return -1;
            }
            actual[v] = n;
        }
    }
    for (int i = 0, base = 0; i < kiln_graph_num_inputs; base += kiln_dyn_in_ndim[i], i++) {
        for (int d = 0; d < kiln_dyn_in_ndim[i]; d++) {
            if (kiln_dyn_in_var[base + d] != -2 || input_shapes[i][d] == input_sum(base + d, actual)) continue;
            fail("kiln_run_shaped: input %d (%s) dim %d is %lld, but the sizes of the other inputs make it %lld", i,
                 kiln_dyn_in_names[i], d, (long long)input_shapes[i][d], (long long)input_sum(base + d, actual));
            return -1;
        }
    }
    return 0;
}

/* The smallest bucket holding `actual` (padded variables fit when at most the bucket's, others exactly). */
static int pick_bucket(const int64_t* actual) {
    for (int b = 0; b < kiln_dyn_num_buckets; b++) {
        int ok = 1;
        for (int v = 0; v < kiln_dyn_num_vars && ok; v++) {
            int64_t s = kiln_dyn_bucket_sizes[b * kiln_dyn_num_vars + v];
            ok = kiln_dyn_var_mode[v] != EXACT ? actual[v] <= s : actual[v] == s;
        }
        if (ok) return b;
    }
    for (int v = 0; v < kiln_dyn_num_vars; v++) {
        int exact = 0;
        for (int b = 0; b < kiln_dyn_num_buckets; b++) exact |= kiln_dyn_bucket_sizes[b * kiln_dyn_num_vars + v] == actual[v];
        if (kiln_dyn_var_mode[v] == EXACT && !exact) {
            char sizes[256];
            accepted(v, sizes, sizeof sizes);
            fail("kiln_run_shaped: dimension %s is %lld, but this model was compiled for %s only (it cannot be "
                 "padded: give one of those sizes)", kiln_dyn_var_names[v], (long long)actual[v], sizes);
            return -1;
        }
    }
    fail("kiln_run_shaped: no compiled shape bucket holds these input shapes");
    return -1;
}

/* Output o's actual shape for bucket b and the variables' actual sizes. */
static void actual_output_shape(int o, int b, const int64_t* actual, int64_t* shape) {
    const int base = out_offset(o);
    const int64_t* bucket = kiln_dyn_out_shapes + (int64_t)b * out_offset(kiln_graph_num_outputs);
    for (int d = 0; d < kiln_dyn_out_ndim[o]; d++) {
        int v = kiln_dyn_out_var[base + d];
        shape[d] = v >= 0 ? actual[v] : bucket[base + d];
        if (v == -2) { /* a run-time length: a sum of the variables */
            shape[d] = kiln_dyn_out_const[base + d];
            for (int k = 0; k < kiln_dyn_num_vars; k++)
                shape[d] += kiln_dyn_out_coef[(int64_t)(base + d) * kiln_dyn_num_vars + k] * actual[k];
        }
    }
}

int kiln_output_shapes(const int64_t* const* input_shapes, int64_t* const* output_shapes) {
    int64_t actual[KILN_MAX_VARS];
    if (!input_shapes && kiln_graph_num_inputs > 0) {
        fail("kiln_output_shapes: input_shapes is NULL");
        return -1;
    }
    if (kiln_dyn_num_vars > KILN_MAX_VARS || read_sizes(input_shapes, actual) != 0) return -1;
    int b = pick_bucket(actual);
    if (b < 0) return -1;
    for (int o = 0; output_shapes && o < kiln_graph_num_outputs; o++)
        if (output_shapes[o]) actual_output_shape(o, b, actual, output_shapes[o]);
    return 0;
}

static size_t numel(const int64_t* shape, int ndim) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

/* A shaped run's region copies (inputs into their compiled shapes, outputs back) as contiguous runs, split in
 * pieces of at most COPY_PIECE bytes and shared by the thread pool: a KV cache is megabytes at every step. */
#define COPY_PIECE ((size_t)32 << 10)
#define COPY_PARALLEL ((size_t)256 << 10) /* fewer bytes in all: copied on the calling thread */

typedef struct {
    char* dst;
    const char* src;
    int64_t dst_stride[KILN_MAX_RANK], src_stride[KILN_MAX_RANK]; /* bytes, of the dims outside a run */
    int64_t extent[KILN_MAX_RANK];
    int outer;      /* the dims outside a run */
    size_t run;     /* bytes per contiguous run */
    int64_t pieces; /* per run */
    int64_t items;  /* runs x pieces */
} region_copy;

typedef struct {
    region_copy* copy; /* room for every input and output */
    int count;
    size_t bytes;
} copy_plan;

/* Adds the copy of the leading `region` block of a dense src (src_shape) into a dense dst (dst_shape). */
static void plan_copy(copy_plan* plan, char* dst, const int64_t* dst_shape, const char* src,
                      const int64_t* src_shape, const int64_t* region, int nd, size_t item) {
    if (numel(region, nd) == 0) return;
    region_copy* c = &plan->copy[plan->count++];
    int k = nd - 1; /* a run: region[k] steps along dim k, the trailing dims after it whole in both shapes */
    while (k > 0 && region[k] == dst_shape[k] && region[k] == src_shape[k]) k--;
    size_t step = item;
    for (int d = k + 1; d < nd; d++) step *= (size_t)dst_shape[d];
    c->dst = dst;
    c->src = src;
    c->run = k >= 0 ? step * (size_t)region[k] : item;
    c->outer = k > 0 ? k : 0;
    size_t dst_stride = k >= 0 ? step * (size_t)dst_shape[k] : 0, src_stride = k >= 0 ? step * (size_t)src_shape[k] : 0;
    int64_t runs = 1;
    for (int d = c->outer - 1; d >= 0; d--) {
        c->dst_stride[d] = (int64_t)dst_stride;
        c->src_stride[d] = (int64_t)src_stride;
        c->extent[d] = region[d];
        dst_stride *= (size_t)dst_shape[d];
        src_stride *= (size_t)src_shape[d];
        runs *= region[d];
    }
    c->pieces = (int64_t)((c->run + COPY_PIECE - 1) / COPY_PIECE);
    c->items = runs * c->pieces;
    plan->bytes += c->run * (size_t)runs;
}

static void copy_items(void* data, int64_t begin, int64_t end) {
    copy_plan* plan = data;
    int64_t first = 0;
    for (int i = 0; i < plan->count && begin < end; first += plan->copy[i].items, i++) {
        const region_copy* c = &plan->copy[i];
        for (; begin < end && begin < first + c->items; begin++) {
            int64_t item = begin - first, r = item / c->pieces, piece = item % c->pieces;
            size_t dst = 0, src = 0;
            for (int d = c->outer - 1; d >= 0; d--) {
                int64_t at = r % c->extent[d];
                r /= c->extent[d];
                dst += (size_t)(at * c->dst_stride[d]);
                src += (size_t)(at * c->src_stride[d]);
            }
            size_t offset = (size_t)piece * COPY_PIECE, left = c->run - offset;
            memcpy(c->dst + dst + offset, c->src + src + offset, left < COPY_PIECE ? left : COPY_PIECE);
        }
    }
}

static _Thread_local int64_t copied; /* the bytes the calling thread's last shaped run copied in and out */

int64_t kiln_shaped_copied_bytes(void) { return copied; }

/* Runs the planned copies (on the pool when they are large) and empties the plan. */
static void run_copies(copy_plan* plan) {
    copied += (int64_t)plan->bytes;
    int64_t items = 0;
    for (int i = 0; i < plan->count; i++) items += plan->copy[i].items;
    if (plan->bytes >= COPY_PARALLEL)
        kiln_parallel_for(copy_items, plan, items);
    else
        copy_items(plan, 0, items);
    plan->count = 0;
    plan->bytes = 0;
}

/* The bucket a shaped run takes, after checking its arrays and shapes (`actual`: KILN_MAX_VARS sizes); -1 with
 * the error set. */
static int checked_bucket(const char* who, const void* inputs, const void* outputs, const int64_t* const* input_shapes,
                          int64_t* actual) {
    if (!input_shapes && kiln_graph_num_inputs > 0) {
        fail("%s: input_shapes is NULL", who);
        return -1;
    }
    if (!inputs && kiln_graph_num_inputs > 0) {
        fail("%s: the input pointer array is NULL", who);
        return -1;
    }
    if (!outputs && kiln_graph_num_outputs > 0) {
        fail("%s: the output pointer array is NULL", who);
        return -1;
    }
    if (kiln_dyn_num_vars > KILN_MAX_VARS || read_sizes(input_shapes, actual) != 0) return -1;
    return pick_bucket(actual);
}

/* A shaped run's padded inputs and outputs live in buffers kept per thread across runs: a fresh block per run
 * was fresh pages each time (a KV cache's 4 MB at every decoder step, zeroed by the kernel: more than the step's
 * own work at a short past). An input's buffer is zero outside the region the last run copied in, so a run whose
 * region holds that one (a growing cache, the same bucket) clears nothing; any other clears the bucket's size. */
typedef struct {
    void* data;
    size_t capacity;
    int bucket;                     /* the bucket whose compiled shape the zeros are laid out in; -1 none */
    int64_t filled[KILN_MAX_RANK];  /* the region the last run copied in */
} scratch_buf;

typedef struct {
    scratch_buf* in;
    scratch_buf* out;
    region_copy* copies; /* a copy_plan's room */
} scratch_set;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_ok;

static void scratch_set_free(void* p) {
    scratch_set* set = p;
    if (!set) return;
    for (int i = 0; set->in && i < kiln_graph_num_inputs; i++) free(set->in[i].data);
    for (int o = 0; set->out && o < kiln_graph_num_outputs; o++) free(set->out[o].data);
    free(set->in);
    free(set->out);
    free(set->copies);
    free(set);
}

static void scratch_key_create(void) { scratch_ok = pthread_key_create(&scratch_key, scratch_set_free) == 0; }

/* Unloading the library: no thread may call a destructor in it later (other threads' buffers are left). */
__attribute__((destructor)) static void scratch_key_delete(void) {
    if (!scratch_ok) return;
    scratch_set_free(pthread_getspecific(scratch_key));
    pthread_key_delete(scratch_key);
    scratch_ok = 0;
}

static scratch_set* thread_scratch(void) {
    pthread_once(&scratch_once, scratch_key_create);
    if (!scratch_ok) return NULL;
    scratch_set* set = pthread_getspecific(scratch_key);
    if (set) return set;
    set = calloc(1, sizeof *set);
    if (set) {
        set->in = calloc((size_t)kiln_graph_num_inputs + 1, sizeof *set->in);
        set->out = calloc((size_t)kiln_graph_num_outputs + 1, sizeof *set->out);
        set->copies = calloc((size_t)kiln_graph_num_inputs + (size_t)kiln_graph_num_outputs + 1, sizeof *set->copies);
    }
    if (!set || !set->in || !set->out || !set->copies || pthread_setspecific(scratch_key, set) != 0) {
        scratch_set_free(set);
        return NULL;
    }
    for (int i = 0; i < kiln_graph_num_inputs; i++) set->in[i].bucket = -1;
    return set;
}

/* The buffer with room for `bytes` (64-byte aligned), or NULL; a new block holds no known zeros. */
static void* reserve(scratch_buf* buf, size_t bytes) {
    if (bytes <= buf->capacity && buf->data) return buf->data;
    free(buf->data);
    size_t size = (bytes + 63) / 64 * 64;
    buf->data = aligned_alloc(64, size ? size : 64);
    buf->capacity = buf->data ? size : 0;
    buf->bucket = -1;
    return buf->data;
}

/* `buf` laid out in bucket b's compiled `shape`, zero but where input data at `actual` goes (a copy added to
 * `copies`); NULL when out of memory. */
static const void* padded_input(scratch_buf* buf, copy_plan* copies, int b, const int64_t* shape, const void* data,
                                const int64_t* actual, int nd, size_t item) {
    size_t bytes = numel(shape, nd) * item;
    if (!reserve(buf, bytes)) return NULL;
    int holds = buf->bucket == b;
    for (int d = 0; d < nd && holds; d++) holds = actual[d] >= buf->filled[d];
    if (!holds) memset(buf->data, 0, bytes);
    if (data) plan_copy(copies, buf->data, shape, data, actual, actual, nd, item);
    buf->bucket = b;
    memcpy(buf->filled, actual, sizeof(int64_t) * (size_t)nd);
    return buf->data;
}

/* kiln_run_shaped, or kiln_profile at the shapes when call_ms is given. */
static int run_shaped(const char* who, kiln_model* model, const void* const* inputs, const int64_t* const* input_shapes,
                      void* const* outputs, int64_t* const* output_shapes, double* call_ms) {
    int64_t actual[KILN_MAX_VARS];
    copied = 0;
    int b = checked_bucket(who, inputs, outputs, input_shapes, actual);
    if (b < 0) return -1;
    const int64_t* sizes = kiln_dyn_bucket_sizes + (int64_t)b * kiln_dyn_num_vars;
    const void* ins[kiln_graph_num_inputs + kiln_dyn_num_lengths + 1];
    void* outs[kiln_graph_num_outputs + 1];
    int padded_in[kiln_graph_num_inputs + 1], padded_out[kiln_graph_num_outputs + 1], any = 0, rc = -1;
    int64_t in_dims[in_offset(kiln_graph_num_inputs) + 1], out_dims[out_offset(kiln_graph_num_outputs) + 1];
    for (int i = 0, base = 0; i < kiln_graph_num_inputs; base += kiln_dyn_in_ndim[i], i++) {
        const int nd = kiln_dyn_in_ndim[i];
        input_layout(i, b, sizes, input_shapes[i], in_dims + base);
        padded_in[i] = 0;
        for (int d = 0; d < nd; d++) padded_in[i] |= in_dims[base + d] != input_shapes[i][d];
        /* an empty input (no past yet) may be NULL; laid out at its lengths, the kernels still take an address */
        padded_in[i] &= inputs[i] != NULL || numel(input_shapes[i], nd) == 0;
        padded_in[i] |= numel(input_shapes[i], nd) == 0 && laid_out(kiln_dyn_in_layout, b, in_offset(kiln_graph_num_inputs), base, nd);
        any |= padded_in[i];
    }
    for (int o = 0, base = 0; o < kiln_graph_num_outputs; base += kiln_dyn_out_ndim[o], o++) {
        int64_t shape[KILN_MAX_RANK];
        actual_output_shape(o, b, actual, shape);
        output_layout(o, b, shape, out_dims + base);
        padded_out[o] = 0;
        for (int d = 0; d < kiln_dyn_out_ndim[o]; d++) padded_out[o] |= shape[d] != out_dims[base + d];
        padded_out[o] &= outputs[o] != NULL;
        /* an empty output laid out at its lengths: its kernels' reads (no lane of them taken) still need an address */
        padded_out[o] |= numel(shape, kiln_dyn_out_ndim[o]) == 0 &&
                         laid_out(kiln_dyn_out_layout, b, out_offset(kiln_graph_num_outputs), base, kiln_dyn_out_ndim[o]);
        any |= padded_out[o];
    }
    scratch_set* scratch = any ? thread_scratch() : NULL;
    if (any && !scratch) {
        fail("%s: out of memory", who);
        return -1;
    }
    copy_plan copies = {scratch ? scratch->copies : NULL, 0, 0};
    kiln_pool_enter(); /* the pool's workers stay hot from the copies in to the copies out */
    for (int i = 0, base = 0; i < kiln_graph_num_inputs; base += kiln_dyn_in_ndim[i], i++) {
        ins[i] = inputs[i];
        if (!padded_in[i]) continue;
        const int nd = kiln_dyn_in_ndim[i];
        int64_t shape[KILN_MAX_RANK];
        for (int d = 0; d < nd; d++) shape[d] = input_dim(base + d, sizes);
        if (laid_out(kiln_dyn_in_layout, b, in_offset(kiln_graph_num_inputs), base, nd)) {
            /* the zeros of a layout that follows the lengths are not kept across runs (bucket -2: none known, all
             * cleared); an empty input still takes an address (the idle lanes of its kernels' reads load element 0) */
            ins[i] = numel(input_shapes[i], nd)
                         ? padded_input(&scratch->in[i], &copies, -2, in_dims + base, inputs[i], input_shapes[i], nd,
                                        (size_t)kiln_dyn_in_itemsize[i])
                         : reserve(&scratch->in[i], (size_t)kiln_dyn_in_itemsize[i]);
            scratch->in[i].bucket = -1;
        } else {
            ins[i] = padded_input(&scratch->in[i], &copies, b, shape, inputs[i], input_shapes[i], nd,
                                  (size_t)kiln_dyn_in_itemsize[i]);
        }
        if (!ins[i]) {
            fail("%s: out of memory padding input %d", who, i);
            goto done;
        }
    }
    run_copies(&copies);
    for (int k = 0; k < kiln_dyn_num_lengths; k++) ins[kiln_graph_num_inputs + k] = &actual[kiln_dyn_length_var[k]];
    for (int o = 0, base = 0; o < kiln_graph_num_outputs; base += kiln_dyn_out_ndim[o], o++) {
        outs[o] = outputs[o];
        if (padded_out[o] && !(outs[o] = reserve(&scratch->out[o], numel(out_dims + base, kiln_dyn_out_ndim[o]) *
                                                                       (size_t)kiln_dyn_out_itemsize[o] + 1))) {
            fail("%s: out of memory for output %d", who, o);
            goto done;
        }
    }
    selected = b;
    rc = call_ms ? kiln_profile(model, ins, outs, call_ms) : kiln_run(model, ins, outs);
    selected = -1;
    for (int o = 0, base = 0; o < kiln_graph_num_outputs; base += kiln_dyn_out_ndim[o], o++) {
        int64_t shape[KILN_MAX_RANK];
        actual_output_shape(o, b, actual, shape);
        if (rc == 0 && padded_out[o])
            plan_copy(&copies, outputs[o], shape, outs[o], out_dims + base, shape, kiln_dyn_out_ndim[o],
                      (size_t)kiln_dyn_out_itemsize[o]);
        if (rc == 0 && output_shapes && output_shapes[o])
            memcpy(output_shapes[o], shape, sizeof(int64_t) * (size_t)kiln_dyn_out_ndim[o]);
    }
    run_copies(&copies);
done:
    kiln_pool_leave();
    return rc;
}

int kiln_run_shaped(kiln_model* model, const void* const* inputs, const int64_t* const* input_shapes,
                    void* const* outputs, int64_t* const* output_shapes) {
    return run_shaped("kiln_run_shaped", model, inputs, input_shapes, outputs, output_shapes, NULL);
}

int kiln_profile_shaped(kiln_model* model, const void* const* inputs, const int64_t* const* input_shapes,
                        void* const* outputs, double* call_ms) {
    if (!kiln_dyn_profilers) {
        fail("kiln_profile_shaped: this library profiles its largest shapes only (kiln_profile)");
        return -1;
    }
    if (!call_ms) {
        fail("kiln_profile_shaped: call_ms is NULL");
        return -1;
    }
    return run_shaped("kiln_profile_shaped", model, inputs, input_shapes, outputs, NULL, call_ms);
}

int kiln_shaped_bucket(const int64_t* const* input_shapes) {
    int64_t actual[KILN_MAX_VARS];
    if (!input_shapes && kiln_graph_num_inputs > 0) {
        fail("kiln_shaped_bucket: input_shapes is NULL");
        return -1;
    }
    if (kiln_dyn_num_vars > KILN_MAX_VARS || read_sizes(input_shapes, actual) != 0) return -1;
    return pick_bucket(actual);
}

int kiln_bucket_num_calls(int b) {
    if (b < 0 || b >= kiln_dyn_num_buckets) return -1;
    return kiln_dyn_call_start ? kiln_dyn_call_start[b + 1] - kiln_dyn_call_start[b]
                               : (b == kiln_dyn_num_buckets - 1 ? kiln_graph_num_calls : 0);
}

const char* kiln_bucket_call_name(int b, int i) {
    if (i < 0 || i >= kiln_bucket_num_calls(b)) return NULL;
    return kiln_dyn_call_names ? kiln_dyn_call_names[kiln_dyn_call_start[b] + i] : kiln_graph_call_names[i];
}

static _Thread_local const kiln_shaped_request* device_request; /* set by kiln_run_device_shaped */

const kiln_shaped_request* kiln_shaped_device_request(void) { return device_request; }

int kiln_run_device_shaped(kiln_model* model, const uint64_t* inputs, const int64_t* const* input_shapes,
                           const uint64_t* outputs, int64_t* const* output_shapes, void* stream) {
    int64_t actual[KILN_MAX_VARS];
    int b = checked_bucket("kiln_run_device_shaped", inputs, outputs, input_shapes, actual);
    if (b < 0) return -1;
    const int64_t* sizes = kiln_dyn_bucket_sizes + (int64_t)b * kiln_dyn_num_vars;
    const int in_dims = in_offset(kiln_graph_num_inputs), out_dims = out_offset(kiln_graph_num_outputs);
    int64_t* in_compiled = calloc((size_t)in_dims + 1, sizeof *in_compiled);
    int64_t* out_actual = calloc((size_t)out_dims + 1, sizeof *out_actual);
    int64_t* lengths = calloc((size_t)kiln_dyn_num_lengths + 1, sizeof *lengths);
    uint64_t* ins = calloc((size_t)kiln_graph_num_inputs + 1, sizeof *ins);
    uint64_t* outs = calloc((size_t)kiln_graph_num_outputs + 1, sizeof *outs);
    int rc = -1;
    if (!in_compiled || !out_actual || !lengths || !ins || !outs) {
        fail("kiln_run_device_shaped: out of memory");
        goto done;
    }
    for (int d = 0; d < in_dims; d++) in_compiled[d] = input_dim(d, sizes);
    for (int i = 0; i < kiln_graph_num_inputs; i++) /* an empty input (no past yet) copies nothing: any pointer */
        ins[i] = inputs[i] || numel(input_shapes[i], kiln_dyn_in_ndim[i]) ? inputs[i] : 1;
    for (int o = 0; o < kiln_graph_num_outputs; o++) {
        actual_output_shape(o, b, actual, out_actual + out_offset(o));
        outs[o] = outputs[o] || numel(out_actual + out_offset(o), kiln_dyn_out_ndim[o]) ? outputs[o] : 1;
    }
    for (int k = 0; k < kiln_dyn_num_lengths; k++) lengths[k] = actual[kiln_dyn_length_var[k]];
    kiln_shaped_request request = {b, kiln_dyn_in_ndim, kiln_dyn_in_itemsize, input_shapes, in_compiled, lengths,
                                   kiln_dyn_out_ndim, kiln_dyn_out_itemsize, out_actual,
                                   kiln_dyn_out_shapes + (int64_t)b * out_dims};
    device_request = &request;
    rc = kiln_run_device(model, ins, outs, stream);
    device_request = NULL;
    for (int o = 0; rc == 0 && output_shapes && o < kiln_graph_num_outputs; o++)
        if (output_shapes[o])
            memcpy(output_shapes[o], out_actual + out_offset(o), sizeof(int64_t) * (size_t)kiln_dyn_out_ndim[o]);
done:
    free(in_compiled);
    free(out_actual);
    free(lengths);
    free(ins);
    free(outs);
    return rc;
}
