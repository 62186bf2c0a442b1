/* Runs a model library once through its C ABI, for a CPU this machine does not have (under qemu-user).
 * Built with the target's cross compiler and run by core/runtime/emulated.py:
 *
 *   kiln_emulation_harness LIBRARY WEIGHTS PREFIX NUM_INPUTS INPUT_FILE... OUTPUT_FILE:BYTES...
 *
 * PREFIX is the artifact's symbol prefix (kiln: kiln_load, kiln_run, ...; a named artifact's NAME). Each input file holds one dense tensor (raw bytes, the layout kiln_run takes); each output is written
 * raw to its file, BYTES long. The library is opened with dlopen, so one harness serves every model.
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

static void* symbol(void* lib, const char* prefix, const char* name) {
    char full[128];
    snprintf(full, sizeof full, "%s_%s", prefix, name);
    return dlsym(lib, full);
}

int main(int argc, char** argv) {
    enum { FIRST_TENSOR = 5 };
    if (argc < FIRST_TENSOR)
        return fail("usage: kiln_emulation_harness LIBRARY WEIGHTS PREFIX NUM_INPUTS INPUT... OUTPUT:BYTES...", NULL);
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

    void** inputs = calloc((size_t)num_inputs + 1, sizeof(void*));
    void** outputs = calloc((size_t)num_outputs + 1, sizeof(void*));
    size_t* output_bytes = calloc((size_t)num_outputs + 1, sizeof(size_t));
    if (!inputs || !outputs || !output_bytes) return fail("out of memory", NULL);
    for (int i = 0; i < num_inputs; i++) {
        inputs[i] = read_file(argv[FIRST_TENSOR + i]);
        if (!inputs[i]) return fail("cannot read input file", argv[FIRST_TENSOR + i]);
    }
    for (int i = 0; i < num_outputs; i++) {
        char* spec = argv[FIRST_TENSOR + num_inputs + i];
        char* colon = strrchr(spec, ':');
        if (!colon) return fail("an output must be given as FILE:BYTES", spec);
        *colon = '\0';
        output_bytes[i] = (size_t)strtoull(colon + 1, NULL, 10);
        outputs[i] = calloc(output_bytes[i] ? output_bytes[i] : 1, 1);
        if (!outputs[i]) return fail("out of memory for output", spec);
    }

    void* model = load(argv[2]);
    if (!model) return fail("kiln_load failed", last_error());
    if (run(model, (const void* const*)inputs, outputs) != 0) return fail("kiln_run failed", last_error());
    release(model);

    for (int i = 0; i < num_outputs; i++) {
        const char* path = argv[FIRST_TENSOR + num_inputs + i];
        FILE* f = fopen(path, "wb");
        if (!f || fwrite(outputs[i], 1, output_bytes[i], f) != output_bytes[i] || fclose(f) != 0)
            return fail("cannot write output file", path);
    }
    return 0;
}
