/* Runs one kernel of a Kiln kernel library and times it, for a measuring device that cannot load the library into
 * Python (a foreign CPU under qemu-user). Built with the target's cross compiler by core/tune/measuring_device.py:
 *
 *   kiln_kernel_timer LIBRARY KERNEL THREADS REPEAT MIN_REPEAT_US PARAM...
 *
 * One PARAM per kernel parameter, in order: `i:FILE` an input (its raw bytes), `o:FILE:BYTES` an output (zeroed,
 * written to FILE after the first call), `w:BYTES` a workspace (poisoned). The kernel runs once (the outputs the
 * caller checks), then REPEAT samples of enough calls to last MIN_REPEAT_US each: one line `cost SECONDS` per
 * sample, seconds per call. On failure: one line on stderr and exit status 1. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_PARAMS = 32, FIRST_PARAM = 6 };

/* Kernels take only pointers. Called through a pointer with MAX_PARAMS of them: both AArch64's and x86-64's C
 * calling conventions pass the first ones in registers and the rest on a stack the caller owns, so a kernel with
 * fewer parameters reads its own and never sees the others. */
typedef void (*kernel_fn)(void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*,
                          void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*,
                          void*, void*, void*, void*, void*, void*, void*, void*);
typedef void (*threads_fn)(int);

static int fail(const char* what, const char* detail) {
    fprintf(stderr, "%s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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

static void call(kernel_fn kernel, void** p) {
    kernel(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15],
           p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27], p[28], p[29], p[30],
           p[31]);
}

int main(int argc, char** argv) {
    if (argc < FIRST_PARAM)
        return fail("usage: kiln_kernel_timer LIBRARY KERNEL THREADS REPEAT MIN_REPEAT_US PARAM...", NULL);
    int num_params = argc - FIRST_PARAM;
    if (num_params > MAX_PARAMS) return fail("the kernel has more parameters than the timer passes", argv[2]);
    int threads = atoi(argv[3]), repeat = atoi(argv[4]);
    double min_repeat_s = atof(argv[5]) * 1e-6;
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fail("cannot open the kernel library", dlerror());
    kernel_fn kernel = (kernel_fn)dlsym(lib, argv[2]);
    if (!kernel) return fail("the library has no kernel of this name", argv[2]);
    threads_fn set_threads = (threads_fn)dlsym(lib, "kiln_pool_set_threads");
    if (set_threads && threads > 0) set_threads(threads);

    void* params[MAX_PARAMS] = {0};
    const char* out_files[MAX_PARAMS] = {0};
    size_t out_bytes[MAX_PARAMS] = {0};
    for (int k = 0; k < num_params; k++) {
        char* spec = argv[FIRST_PARAM + k];
        if (strncmp(spec, "i:", 2) == 0) {
            params[k] = read_file(spec + 2);
            if (!params[k]) return fail("cannot read input file", spec + 2);
        } else if (strncmp(spec, "o:", 2) == 0) {
            char* colon = strrchr(spec + 2, ':');
            if (!colon) return fail("an output must be given as o:FILE:BYTES", spec);
            *colon = '\0';
            out_files[k] = spec + 2;
            out_bytes[k] = (size_t)strtoull(colon + 1, NULL, 10);
            params[k] = calloc(out_bytes[k] ? out_bytes[k] : 1, 1);
        } else if (strncmp(spec, "w:", 2) == 0) {
            size_t bytes = (size_t)strtoull(spec + 2, NULL, 10);
            params[k] = malloc(bytes ? bytes : 1);
            if (params[k]) memset(params[k], 7, bytes);
        } else {
            return fail("a parameter must be i:FILE, o:FILE:BYTES or w:BYTES", spec);
        }
        if (!params[k]) return fail("out of memory", NULL);
    }

    double start = now_s();
    call(kernel, params);
    double once = now_s() - start;
    for (int k = 0; k < num_params; k++) {
        if (!out_files[k]) continue;
        FILE* f = fopen(out_files[k], "wb");
        if (!f || fwrite(params[k], 1, out_bytes[k], f) != out_bytes[k]) return fail("cannot write", out_files[k]);
        fclose(f);
    }
    long number = once > 0 ? (long)(min_repeat_s / once) : 1;
    if (number < 1) number = 1;
    for (int r = 0; r < repeat; r++) {
        start = now_s();
        for (long n = 0; n < number; n++) call(kernel, params);
        printf("cost %.9g\n", (now_s() - start) / (double)number);
    }
    return 0;
}
