/* Runs a model library once through its C ABI, for a CPU this machine does not have (under qemu-user).
 * Built with the target's cross compiler and run by core/runtime/emulated.py:
 *
 *   kiln_emulation_harness LIBRARY WEIGHTS PREFIX NUM_INPUTS INPUT_FILE... OUTPUT_FILE:BYTES...
 *   kiln_emulation_harness LIBRARY WEIGHTS PREFIX NUM_INPUTS INPUT_FILE:D0,D1,... OUTPUT_FILE:BYTES:ITEMSIZE:RANK...
 *
 * PREFIX is the artifact's symbol prefix (kiln: kiln_load, kiln_run, ...; a named artifact's NAME). Each input file
 * holds one dense tensor (raw bytes, the layout kiln_run takes); each output is written raw to its file, BYTES long.
 * The second form is for a library with input-shape ranges: the inputs at their actual shapes (rank 0: FILE:) run
 * through PREFIX_run_shaped; BYTES is the output's largest size, and each output is written at its actual shape, which
 * is printed on stdout, one line per output (D0,D1,...). The library is opened with dlopen, so one harness serves
 * every model.
 * On failure: one line on stderr (kiln_last_error() where the library gave one) and exit status 1. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void* (*load_fn)(const char*);
typedef int (*run_fn)(void*, const void* const*, void* const*);
typedef void (*free_fn)(void*);
typedef const char* (*error_fn)(void);
typedef int (*count_fn)(void);
typedef int (*run_shaped_fn)(void*, const void* const*, const int64_t* const*, void* const*, int64_t* const*);
typedef int (*output_shapes_fn)(const int64_t* const*, int64_t* const*);

static int fail(const char* what, const char* detail) {
    fprintf(stderr, "%s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

static void* read_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void* data = malloc(size > 0 ? (size_t)size : 1);
    if (data && size > 0 && fread(data, 1, (size_t)size, f) != (size_t)size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    return data;
}

/* "D0,D1,..." (empty: rank 0) -> a fresh array of its dims. */
static int64_t* parse_shape(const char* text) {
    int64_t* dims = calloc(strlen(text) / 2 + 2, sizeof *dims); /* at most one dim per two characters, plus one */
    if (!dims) return NULL;
    for (int n = 0; *text; n++) {
        char* end;
        dims[n] = strtoll(text, &end, 10);
        if (end == text || (*end && *end != ',')) {
            free(dims);
            return NULL;
        }
        text = *end ? end + 1 : end;
    }
    return dims;
}

static void* symbol(void* lib, const char* prefix, const char* name) {
    char full[128];
    snprintf(full, sizeof full, "%s_%s", prefix, name);
    return dlsym(lib, full);
}

int main(int argc, char** argv) {
    enum { FIRST_TENSOR = 5 };
    if (argc < FIRST_TENSOR)
        return fail("usage: kiln_emulation_harness LIBRARY WEIGHTS PREFIX NUM_INPUTS INPUT[:SHAPE]... "
                    "OUTPUT:BYTES[:ITEMSIZE:RANK]...", NULL);
    const char* prefix = argv[3];
    int num_inputs = atoi(argv[4]);
    int num_outputs = argc - FIRST_TENSOR - num_inputs;
    if (num_inputs < 0 || num_outputs < 0) return fail("more inputs declared than given", NULL);
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fail("cannot open the model library", dlerror());
    load_fn load = (load_fn)symbol(lib, prefix, "load");
    run_fn run = (run_fn)symbol(lib, prefix, "run");
    free_fn release = (free_fn)symbol(lib, prefix, "free");
    error_fn last_error = (error_fn)symbol(lib, prefix, "last_error");
    count_fn count_inputs = (count_fn)symbol(lib, prefix, "num_inputs");
    count_fn count_outputs = (count_fn)symbol(lib, prefix, "num_outputs");
    if (!load || !run || !release || !last_error || !count_inputs || !count_outputs)
        return fail("the library lacks the model ABI under this prefix (PREFIX_load, PREFIX_run, ...)", prefix);
    if (count_inputs() != num_inputs || count_outputs() != num_outputs)
        return fail("the library and the request disagree on the number of inputs or outputs", NULL);

    int shaped = num_inputs > 0 && strchr(argv[FIRST_TENSOR], ':') != NULL; /* inputs at their actual shapes */
    run_shaped_fn run_shaped = (run_shaped_fn)symbol(lib, prefix, "run_shaped");
    output_shapes_fn output_shapes = (output_shapes_fn)symbol(lib, prefix, "output_shapes");
    if (shaped && (!run_shaped || !output_shapes))
        return fail("inputs given with shapes, but the library has no input-shape ranges (PREFIX_run_shaped)", prefix);

    void** inputs = calloc((size_t)num_inputs + 1, sizeof(void*));
    int64_t** input_shapes = calloc((size_t)num_inputs + 1, sizeof(int64_t*));
    void** outputs = calloc((size_t)num_outputs + 1, sizeof(void*));
    size_t* output_bytes = calloc((size_t)num_outputs + 1, sizeof(size_t));
    size_t* output_itemsize = calloc((size_t)num_outputs + 1, sizeof(size_t));
    int* output_rank = calloc((size_t)num_outputs + 1, sizeof(int));
    int64_t** out_shapes = calloc((size_t)num_outputs + 1, sizeof(int64_t*));
    if (!inputs || !input_shapes || !outputs || !output_bytes || !output_itemsize || !output_rank || !out_shapes)
        return fail("out of memory", NULL);
    for (int i = 0; i < num_inputs; i++) {
        char* spec = argv[FIRST_TENSOR + i];
        char* colon = strrchr(spec, ':');
        if ((colon != NULL) != shaped) return fail("either every input has a shape (FILE:D0,D1,...) or none", spec);
        if (colon) {
            *colon = '\0';
            input_shapes[i] = parse_shape(colon + 1);
            if (!input_shapes[i]) return fail("an input's shape must be given as FILE:D0,D1,...", colon + 1);
        }
        inputs[i] = read_file(spec);
        if (!inputs[i]) return fail("cannot read input file", spec);
    }
    for (int i = 0; i < num_outputs; i++) {
        char* spec = argv[FIRST_TENSOR + num_inputs + i];
        if (shaped) { /* FILE:BYTES:ITEMSIZE:RANK */
            for (int field = 0; field < 2; field++) {
                char* colon = strrchr(spec, ':');
                if (!colon) return fail("a shaped run's output must be given as FILE:BYTES:ITEMSIZE:RANK", spec);
                *colon = '\0';
                if (field == 0) output_rank[i] = atoi(colon + 1);
                else output_itemsize[i] = (size_t)strtoull(colon + 1, NULL, 10);
            }
            out_shapes[i] = calloc((size_t)output_rank[i] + 1, sizeof(int64_t));
            if (!out_shapes[i]) return fail("out of memory for an output shape", spec);
        }
        char* colon = strrchr(spec, ':');
        if (!colon) return fail("an output must be given as FILE:BYTES", spec);
        *colon = '\0';
        output_bytes[i] = (size_t)strtoull(colon + 1, NULL, 10);
        outputs[i] = calloc(output_bytes[i] ? output_bytes[i] : 1, 1);
        if (!outputs[i]) return fail("out of memory for output", spec);
    }

    void* model = load(argv[2]);
    if (!model) return fail("kiln_load failed", last_error());
    if (shaped) {
        const int64_t* const* shapes = (const int64_t* const*)input_shapes;
        if (output_shapes(shapes, out_shapes) != 0) return fail("kiln_run_shaped failed", last_error());
        for (int i = 0; i < num_outputs; i++) {
            size_t bytes = output_itemsize[i];
            for (int d = 0; d < output_rank[i]; d++) bytes *= (size_t)out_shapes[i][d];
            if (bytes > output_bytes[i]) return fail("an output's actual shape exceeds its largest size", NULL);
            output_bytes[i] = bytes;
        }
        if (run_shaped(model, (const void* const*)inputs, shapes, outputs, NULL) != 0)
            return fail("kiln_run_shaped failed", last_error());
        for (int i = 0; i < num_outputs; i++) { /* one line per output; a rank-0 output's is empty */
            for (int d = 0; d < output_rank[i]; d++) printf(d ? ",%lld" : "%lld", (long long)out_shapes[i][d]);
            printf("\n");
        }
    } else if (run(model, (const void* const*)inputs, outputs) != 0) {
        return fail("kiln_run failed", last_error());
    }
    release(model);

    for (int i = 0; i < num_outputs; i++) {
        const char* path = argv[FIRST_TENSOR + num_inputs + i];
        FILE* f = fopen(path, "wb");
        if (!f || fwrite(outputs[i], 1, output_bytes[i], f) != output_bytes[i] || fclose(f) != 0)
            return fail("cannot write output file", path);
    }
    return 0;
}
