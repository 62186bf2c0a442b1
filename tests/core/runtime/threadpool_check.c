/* Checks of Kiln's thread pool from C (built with kiln_threadpool.c by test_runtime_threadpool.py).
 * Usage: threadpool_check CASE; prints "ok" and exits 0, or prints what failed and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln_float_mode.h"
#include "kiln_threadpool.h"

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            printf("FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
            printf(__VA_ARGS__);                                          \
            printf("\n");                                                 \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

/* ------------------------------------------------------------------ every iteration exactly once */

#define MAX_CHUNKS 64
typedef struct {
    _Atomic int* hits;
    _Atomic int nchunks;
    int64_t begins[MAX_CHUNKS], ends[MAX_CHUNKS];
    unsigned long modes[MAX_CHUNKS];
    pid_t tids[MAX_CHUNKS];
} record;

static void count_body(void* data, int64_t begin, int64_t end) {
    record* r = (record*)data;
    int k = atomic_fetch_add(&r->nchunks, 1);
    if (k < MAX_CHUNKS) {
        r->begins[k] = begin;
        r->ends[k] = end;
        r->modes[k] = kiln_float_mode_get() & KILN_FLOAT_CONTROL_BITS;
        r->tids[k] = (pid_t)syscall(SYS_gettid);
    }
    for (int64_t i = begin; i < end; i++) atomic_fetch_add_explicit(&r->hits[i], 1, memory_order_relaxed);
}

/* Runs one region and checks: each index once; chunks = min(extent, threads), contiguous, balanced. */
static record* run_counted(int64_t extent, int threads) {
    static record r;
    static _Atomic int hits[200003];
    memset(&r, 0, sizeof r);
    for (int64_t i = 0; i < extent; i++) atomic_store(&hits[i], 0);
    r.hits = hits;
    kiln_parallel_for(count_body, &r, extent);
    for (int64_t i = 0; i < extent; i++) CHECK(hits[i] == 1, "extent %lld threads %d: index %lld ran %d times",
                                               (long long)extent, threads, (long long)i, hits[i]);
    int want = extent < threads ? (int)extent : threads;
    if (extent <= 0) want = 0;
    CHECK(r.nchunks == want, "extent %lld threads %d: %d chunks, expected %d", (long long)extent, threads,
          r.nchunks, want);
    for (int k = 0; k < r.nchunks; k++) {
        int64_t size = r.ends[k] - r.begins[k];
        CHECK(size == extent / want || size == extent / want + 1, "unbalanced chunk of %lld", (long long)size);
    }
    return &r;
}

static void case_exactly_once(void) {
    const int64_t sizes[] = {0, 1, 2, 3, 5, 7, 13, 97, 1001, 65537, 200003};
    const int threads[] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        kiln_pool_set_threads(threads[t]);
        CHECK(kiln_pool_get_threads() == threads[t], "get_threads %d", kiln_pool_get_threads());
        for (int rep = 0; rep < 20; rep++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) run_counted(sizes[s], threads[t]);
    }
}

/* ------------------------------------------------------------------ nested regions */

typedef struct {
    _Atomic int inner_calls;
    _Atomic int bad;
    _Atomic int* hits;
} nest_state;

static void inner_body(void* data, int64_t begin, int64_t end) {
    nest_state* s = (nest_state*)data;
    atomic_fetch_add(&s->inner_calls, 1);
    if (begin != 0 || end != 11) atomic_store(&s->bad, 1); /* serially: one call over everything */
}

static void outer_body(void* data, int64_t begin, int64_t end) {
    nest_state* s = (nest_state*)data;
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&s->hits[i], 1);
        kiln_parallel_for(inner_body, s, 11);
    }
}

static void case_nested(void) {
    static _Atomic int hits[9];
    kiln_pool_set_threads(3);
    for (int rep = 0; rep < 200; rep++) {
        nest_state s = {.hits = hits};
        for (int i = 0; i < 9; i++) atomic_store(&hits[i], 0);
        kiln_parallel_for(outer_body, &s, 9);
        CHECK(!s.bad, "an inner region was split");
        CHECK(s.inner_calls == 9, "inner regions ran %d times", s.inner_calls);
        for (int i = 0; i < 9; i++) CHECK(hits[i] == 1, "outer index %d ran %d times", i, hits[i]);
    }
}

/* ------------------------------------------------------------------ thread count changes */

static int thread_count(void) {
    int n = 0;
    DIR* d = opendir("/proc/self/task");
    struct dirent* e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void case_set_threads(void) {
    const char* env = getenv("KILN_NUM_THREADS");
    if (env) CHECK(kiln_pool_get_threads() == atoi(env), "default %d, KILN_NUM_THREADS=%s", kiln_pool_get_threads(), env);
    kiln_pool_set_threads(1);
    run_counted(1001, 1);
    const int base = thread_count(); /* this thread, and any a sanitizer runs */
    const int seq[] = {3, 1, 2, 4, 1, 3, 2};
    for (size_t k = 0; k < sizeof seq / sizeof *seq; k++) {
        kiln_pool_set_threads(seq[k]);
        for (int rep = 0; rep < 50; rep++) run_counted(1001, seq[k]);
        /* The pool holds exactly threads - 1 workers (the caller is the other one). */
        CHECK(thread_count() == base + seq[k] - 1, "threads %d but %d OS threads", seq[k], thread_count());
    }
    kiln_pool_set_threads(0);
    if (env) CHECK(kiln_pool_get_threads() == atoi(env), "0 did not restore the default");
}

/* ------------------------------------------------------------------ workers really run chunks */

static void case_workers_help(void) {
    kiln_pool_set_threads(2);
    int64_t before = kiln_pool_worker_chunks();
    pid_t self = (pid_t)syscall(SYS_gettid);
    int other_thread = 0;
    kiln_pool_enter(); /* keep the worker hot, as kiln_run does */
    /* A worker starved of CPU by other processes loses its chunks to this thread: allow 20 s. */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (now = start; !other_thread && now.tv_sec - start.tv_sec < 20; clock_gettime(CLOCK_MONOTONIC, &now)) {
        record* r = run_counted(200003, 2);
        for (int k = 0; k < r->nchunks; k++) other_thread |= r->tids[k] != self;
    }
    kiln_pool_leave();
    CHECK(other_thread, "no chunk ever ran on a worker thread");
    CHECK(kiln_pool_worker_chunks() > before, "worker chunk counter did not move");
}

/* ------------------------------------------------------------------ the caller's float mode */

static void case_float_mode(void) {
    kiln_pool_set_threads(3);
    unsigned long old = kiln_float_mode_get();
    unsigned long want = kiln_float_mode_flushing(old) & KILN_FLOAT_CONTROL_BITS;
    kiln_float_mode_set(kiln_float_mode_flushing(old));
    for (int rep = 0; rep < 200; rep++) {
        record* r = run_counted(3000, 3);
        for (int k = 0; k < r->nchunks; k++) CHECK(r->modes[k] == want, "chunk ran in mode %lx, not %lx", r->modes[k], want);
    }
    kiln_float_mode_set(old);
    want = old & KILN_FLOAT_CONTROL_BITS;
    for (int rep = 0; rep < 200; rep++) {
        record* r = run_counted(3000, 3);
        for (int k = 0; k < r->nchunks; k++) CHECK(r->modes[k] == want, "mode not restored: %lx", r->modes[k]);
    }
}

/* ------------------------------------------------------------------ launchers on several threads */

static void sum_body(void* data, int64_t begin, int64_t end) {
    int64_t* out = (int64_t*)data;
    for (int64_t i = begin; i < end; i++) out[i] = i * 3 + 1;
}

static void* launcher(void* arg) {
    int64_t* buf = (int64_t*)arg;
    for (int rep = 0; rep < 3000; rep++) {
        int64_t n = 1 + (rep * 7919) % 4099;
        memset(buf, 0xff, sizeof(int64_t) * (size_t)n);
        kiln_parallel_for(sum_body, buf, n);
        for (int64_t i = 0; i < n; i++)
            if (buf[i] != i * 3 + 1) return (void*)1;
    }
    return NULL;
}

static void case_concurrent_launchers(void) {
    kiln_pool_set_threads(2);
    enum { N = 3 };
    pthread_t th[N];
    static int64_t bufs[N][4100];
    for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, launcher, bufs[i]);
    for (int i = 0; i < N; i++) {
        void* rc;
        pthread_join(th[i], &rc);
        CHECK(rc == NULL, "launcher %d saw a wrong result", i);
    }
}

/* ------------------------------------------------------------------ many tiny regions */

static void case_stress(void) {
    static int64_t buf[64];
    for (int t = 2; t <= 3; t++) {
        kiln_pool_set_threads(t);
        for (int rep = 0; rep < 100000; rep++) {
            int64_t n = 2 + rep % 61;
            kiln_parallel_for(sum_body, buf, n);
            for (int64_t i = 0; i < n; i++) CHECK(buf[i] == i * 3 + 1, "rep %d index %lld", rep, (long long)i);
            memset(buf, 0, sizeof buf);
        }
    }
}

/* ------------------------------------------------------------------ parking */

static char task_state(pid_t tid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE* f = fopen(path, "r");
    if (!f) return '?';
    char* ok = fgets(line, sizeof line, f);
    fclose(f);
    char* p = ok ? strrchr(line, ')') : NULL;
    return p && p[1] == ' ' ? p[2] : '?';
}

static pid_t a_worker_tid(void) {
    pid_t self = (pid_t)syscall(SYS_gettid), found = 0;
    DIR* d = opendir("/proc/self/task");
    struct dirent* e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) != self) found = atoi(e->d_name);
    if (d) closedir(d);
    return found;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void case_parking(void) {
    kiln_pool_set_threads(2);
    run_counted(1001, 2);
    pid_t w = a_worker_tid();
    CHECK(w > 0, "no worker thread");
    /* Idle: after its short spin the worker parks (S: sleeping in the futex), leaving the CPU. */
    int parked = 0;
    for (int i = 0; i < 100 && !parked; i++, sleep_ms(10)) parked = task_state(w) == 'S';
    CHECK(parked, "an idle worker is still %c", task_state(w));
    /* Inside an inference (enter..leave) it stays awake (R) although no region runs. */
    kiln_pool_enter();
    int awake = 0;
    for (int i = 0; i < 100 && !awake; i++, sleep_ms(10)) awake = task_state(w) == 'R';
    sleep_ms(30);
    awake = awake && task_state(w) == 'R';
    kiln_pool_leave();
    CHECK(awake, "a hot worker is %c", task_state(w));
    parked = 0;
    for (int i = 0; i < 100 && !parked; i++, sleep_ms(10)) parked = task_state(w) == 'S';
    CHECK(parked, "the worker did not park after leave: %c", task_state(w));
    run_counted(1001, 2); /* and a parked pool still runs regions */
}

/* ------------------------------------------------------------------ fork */

static void case_fork(void) {
    kiln_pool_set_threads(3);
    run_counted(1001, 3);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only this thread survives in the child: the pool must start new workers, not wait on ghosts. */
        for (int rep = 0; rep < 100; rep++) run_counted(1001, 3);
        _exit(thread_count() == 3 ? 0 : 2); /* this thread and two new workers */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    run_counted(1001, 3);
}

int main(int argc, char** argv) {
    static const struct {
        const char* name;
        void (*fn)(void);
    } cases[] = {{"exactly_once", case_exactly_once}, {"nested", case_nested},
                 {"set_threads", case_set_threads},   {"workers_help", case_workers_help},
                 {"float_mode", case_float_mode},     {"concurrent", case_concurrent_launchers},
                 {"stress", case_stress},             {"parking", case_parking},
                 {"fork", case_fork}};
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (argc > 1 && !strcmp(argv[1], cases[i].name)) {
            cases[i].fn();
            ran++;
        }
    CHECK(ran > 0, "unknown case %s", argc > 1 ? argv[1] : "(none)");
    printf("ok\n");
    return 0;
}
