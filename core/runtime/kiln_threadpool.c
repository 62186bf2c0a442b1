/* Kiln's thread pool (the runtime of PARALLEL loops): spin-then-park workers, the caller as worker 0,
 * static chunks that a free thread may take over from a late one. API and semantics: kiln_threadpool.h.
 *
 * Why not libgomp: its idle workers sleep in futex after ~0.1 ms, and on a small VM waking a sleeping
 * vCPU costs a scheduler tick (~8 ms), paid at every parallel kernel that follows a serial one. Here
 *  - workers spin (with pause) while an inference is running (kiln_pool_enter/leave), then only
 *    briefly, then park, so an idle model leaves the CPUs to other processes;
 *  - each chunk is claimed with one atomic exchange: a thread runs its own chunk first, then any
 *    chunk nobody has claimed yet, so a worker that is asleep or descheduled costs at worst a serial
 *    loop, never a scheduler tick. Chunk boundaries do not depend on who runs them, so results are
 *    bitwise those of the serial loop whenever iterations are independent (as PARALLEL loops are).
 *
 * Publication protocol. One 64-bit word `state` holds (generation << 32 | CLOSED | joined workers).
 * The launcher writes the region's fields, then stores a new generation (open, 0 joined). A worker
 * that sees a new generation joins with a CAS on that exact value (so it can never join a stale or
 * closed region), claims and runs chunks, then leaves (decrement). When every chunk is claimed the
 * launcher sets CLOSED and waits for the joined count to drain: then no worker can still read the
 * region's fields, and the next region may overwrite them.
 * Parking uses the Dekker pattern on seq_cst atomics: a worker announces itself in `sleepers`, then
 * re-checks `state`; a launcher publishes `state`, then checks `sleepers` and bumps the futex word. */
#define _GNU_SOURCE
#include "kiln_threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kiln_float_mode.h"

#define MAX_THREADS 256
#define REFS_MASK 0x7fffffffull
#define CLOSED (1ull << 31)
#define GEN(s) ((uint32_t)((s) >> 32))
#define DEFAULT_SPIN_US 1000
#define LAUNCHER_SPINS (1u << 12) /* pauses (~0.1 ms) before a waiting launcher starts yielding its CPU */
#define YIELD_AFTER_NS 100000     /* a worker idle this long also yields between spins (see worker_main) */

typedef struct worker {
    pthread_t thread;
    int id;             /* 1..nworkers; the launcher is 0 */
    uint32_t first_gen; /* the generation when it was started: it joins any later one */
} worker;

static struct {
    /* Written by joining workers on every region: alone on its cache line. */
    _Alignas(64) _Atomic uint64_t state;
    /* Read while spinning, written rarely. */
    _Alignas(64) _Atomic uint32_t wake_seq; /* the futex word parked workers wait on */
    _Atomic int sleepers;
    _Atomic int hot;      /* kiln_pool_enter depth: workers do not park while it is > 0 */
    _Atomic int shutdown; /* workers exit */
    _Atomic int want;     /* kiln_pool_set_threads; 0: the default */
    int default_threads;
    int64_t spin_ns;
    /* The current region: written by the launcher before it publishes the generation. */
    _Alignas(64) kiln_parallel_body body;
    void* data;
    int64_t extent;
    int nchunks;
    unsigned long float_mode;
    _Atomic int claims[MAX_THREADS];
    /* Owned by whoever holds `busy` (one launcher at a time). */
    _Alignas(64) _Atomic int busy;
    worker* workers;
    _Atomic int nworkers; /* atomic only so that launchers may peek at it without holding `busy` */
    _Atomic int64_t worker_chunks;
} pool = {.state = CLOSED};

/* Set on pool workers for good, and on a launcher while its region runs: nested regions run serially. */
static _Thread_local int in_region;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t* word, uint32_t expected) {
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void wake_parked(void) {
    atomic_fetch_add(&pool.wake_seq, 1);
    syscall(SYS_futex, (uint32_t*)&pool.wake_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* ------------------------------------------------------------------ configuration */

static int env_threads(const char* name) {
    const char* v = getenv(name);
    if (!v || !*v) return 0;
    long n = strtol(v, NULL, 10); /* OMP_NUM_THREADS may be a list ("4,2"): its first entry */
    return n > 0 ? (int)(n < MAX_THREADS ? n : MAX_THREADS) : 0;
}

static int cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void reset_after_fork(void);

static void init_pool(void) {
    int n = env_threads("KILN_NUM_THREADS");
    if (!n) n = env_threads("OMP_NUM_THREADS");
    if (!n) n = cpu_count();
    pool.default_threads = n < MAX_THREADS ? n : MAX_THREADS;
    const char* spin = getenv("KILN_POOL_SPIN_US");
    long us = spin && *spin ? strtol(spin, NULL, 10) : DEFAULT_SPIN_US;
    pool.spin_ns = (us > 0 ? us : 0) * 1000;
    pthread_atfork(NULL, NULL, reset_after_fork);
}

void kiln_pool_set_threads(int n) {
    atomic_store(&pool.want, n <= 0 ? 0 : (n < MAX_THREADS ? n : MAX_THREADS));
}

int kiln_pool_get_threads(void) {
    pthread_once(&init_once, init_pool);
    int n = atomic_load(&pool.want);
    return n > 0 ? n : pool.default_threads;
}

int64_t kiln_pool_worker_chunks(void) { return atomic_load_explicit(&pool.worker_chunks, memory_order_relaxed); }

/* ------------------------------------------------------------------ running chunks */

/* Claim and run chunks, starting at `first` and wrapping around; returns how many this thread ran. */
static int run_chunks(int first) {
    const int n = pool.nchunks;
    const int64_t q = pool.extent / n, r = pool.extent % n;
    int ran = 0;
    for (int k = 0; k < n; k++) {
        int c = (first + k) % n;
        if (atomic_load_explicit(&pool.claims[c], memory_order_relaxed) ||
            atomic_exchange_explicit(&pool.claims[c], 1, memory_order_relaxed))
            continue;
        /* Balanced: the first extent % n chunks get one iteration more. */
        int64_t begin = c * q + (c < r ? c : r);
        pool.body(pool.data, begin, begin + q + (c < r));
        ran++;
    }
    return ran;
}

/* ------------------------------------------------------------------ workers */

/* Park on the futex unless something changed since generation `seen` (see the protocol at the top). */
static void park(uint32_t seen) {
    uint32_t seq = atomic_load(&pool.wake_seq);
    atomic_fetch_add(&pool.sleepers, 1);
    if (GEN(atomic_load(&pool.state)) == seen && !atomic_load(&pool.shutdown) && !atomic_load(&pool.hot))
        futex_wait(&pool.wake_seq, seq);
    atomic_fetch_sub(&pool.sleepers, 1);
}

/* Join the region of generation `gen` if it is still open; false if it closed or was replaced. */
static int join(uint32_t gen, uint64_t s) {
    while (GEN(s) == gen && !(s & CLOSED))
        if (atomic_compare_exchange_weak_explicit(&pool.state, &s, s + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return 1;
    return 0;
}

static void* worker_main(void* arg) {
    const worker* w = (const worker*)arg;
    uint32_t seen = w->first_gen; /* the last generation looked at (a local: no shared line is written) */
    in_region = 1;                /* a region launched from inside a chunk runs serially */
    unsigned long mode = kiln_float_mode_get();
    int64_t last_region = now_ns(); /* when this worker last saw a region (or woke up) */
    int64_t idle_since = last_region; /* ... or, later, last saw the pool hot: it parks spin_ns after */
    for (unsigned spins = 1;; spins++) {
        uint64_t s = atomic_load_explicit(&pool.state, memory_order_acquire);
        if (GEN(s) != seen) {
            seen = GEN(s);
            if (join(seen, s)) {
                /* Compute in the launcher's float mode (FTZ/DAZ under kiln_run): same results as serial. */
                if ((pool.float_mode ^ mode) & KILN_FLOAT_CONTROL_BITS) kiln_float_mode_set(mode = pool.float_mode);
                int ran = run_chunks(w->id % pool.nchunks);
                atomic_fetch_sub_explicit(&pool.state, 1, memory_order_release);
                if (ran) atomic_fetch_add_explicit(&pool.worker_chunks, ran, memory_order_relaxed);
            }
            idle_since = last_region = now_ns();
            continue;
        }
        if (atomic_load_explicit(&pool.shutdown, memory_order_relaxed)) break;
        cpu_pause();
        if (spins % 64) continue;
        int64_t t = now_ns();
        if (atomic_load_explicit(&pool.hot, memory_order_relaxed)) {
            idle_since = t;
        } else if (t - idle_since >= pool.spin_ns) {
            park(seen);
            idle_since = last_region = now_ns();
            continue;
        }
        /* With more runnable threads than CPUs, a spinning worker may sit on the launcher's CPU for a
         * whole time slice while the launcher waits to run. After a short idle spell, yield between
         * spins: that costs about a microsecond when nobody else wants the CPU, and hands it over
         * when someone does. */
        if (t - last_region >= YIELD_AFTER_NS) sched_yield();
    }
    return NULL;
}

static void stop_workers(void) {
    if (!pool.nworkers) return;
    atomic_store(&pool.shutdown, 1);
    wake_parked();
    for (int i = 0; i < pool.nworkers; i++) pthread_join(pool.workers[i].thread, NULL);
    free(pool.workers);
    pool.workers = NULL;
    pool.nworkers = 0;
    atomic_store(&pool.shutdown, 0);
}

/* Start `n` workers (fewer if the system refuses threads: the launcher then does more itself). */
static void start_workers(int n) {
    pool.workers = (worker*)calloc((size_t)n, sizeof(worker));
    if (!pool.workers) return;
    /* Signals go to the application's threads, never to a pool worker. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    uint32_t gen = GEN(atomic_load(&pool.state));
    while (pool.nworkers < n) {
        worker* w = &pool.workers[pool.nworkers];
        w->id = pool.nworkers + 1;
        w->first_gen = gen;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;
        pool.nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ------------------------------------------------------------------ launching */

void kiln_parallel_for(kiln_parallel_body body, void* data, int64_t extent) {
    if (extent <= 0) return;
    int threads = kiln_pool_get_threads();
    int expected = 0;
    int single = threads <= 1 && atomic_load_explicit(&pool.nworkers, memory_order_relaxed) == 0;
    if (in_region || extent == 1 || single || !atomic_compare_exchange_strong(&pool.busy, &expected, 1)) {
        body(data, 0, extent); /* nested, trivial, single-threaded, or another thread's region is running */
        return;
    }
    if (pool.nworkers != threads - 1) { /* resized (to 1 thread too: then no worker is left behind) */
        stop_workers();
        if (threads > 1) start_workers(threads - 1);
    }
    int n = pool.nworkers + 1;
    if (extent < n) n = (int)extent;
    if (n <= 1) {
        atomic_store(&pool.busy, 0);
        body(data, 0, extent);
        return;
    }
    in_region = 1;
    pool.body = body;
    pool.data = data;
    pool.extent = extent;
    pool.nchunks = n;
    pool.float_mode = kiln_float_mode_get();
    for (int c = 0; c < n; c++) atomic_store_explicit(&pool.claims[c], 0, memory_order_relaxed);
    /* Publish: a new generation, open, nobody joined (seq_cst: pairs with park()'s re-check). */
    uint64_t s = atomic_load_explicit(&pool.state, memory_order_relaxed);
    atomic_store(&pool.state, (uint64_t)(GEN(s) + 1) << 32);
    if (atomic_load(&pool.sleepers) > 0) wake_parked();
    run_chunks(0);
    /* Every chunk is claimed: no one may join any more; wait for those who did to finish. */
    atomic_fetch_or_explicit(&pool.state, CLOSED, memory_order_relaxed);
    for (unsigned i = 0; atomic_load_explicit(&pool.state, memory_order_acquire) & REFS_MASK; i++) {
        if (i < LAUNCHER_SPINS) cpu_pause();
        else sched_yield(); /* a worker was descheduled mid-chunk: let it have this CPU */
    }
    in_region = 0;
    atomic_store(&pool.busy, 0);
}

void kiln_pool_enter(void) {
    pthread_once(&init_once, init_pool);
    atomic_fetch_add(&pool.hot, 1);
    if (atomic_load(&pool.sleepers) > 0) wake_parked(); /* start waking now, while serial work runs */
}

void kiln_pool_leave(void) { atomic_fetch_sub(&pool.hot, 1); }

/* ------------------------------------------------------------------ lifetime */

/* In a forked child only the forking thread exists: forget the workers (new ones start on demand). */
static void reset_after_fork(void) {
    pool.workers = NULL;
    pool.nworkers = 0;
    atomic_store(&pool.state, (uint64_t)GEN(atomic_load(&pool.state)) << 32 | CLOSED);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.hot, 0);
    atomic_store(&pool.shutdown, 0);
    atomic_store(&pool.busy, 0);
    in_region = 0;
}

/* On dlclose (and at exit) the workers' code goes away: stop them first, unless a region is running. */
__attribute__((destructor)) static void stop_pool(void) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&pool.busy, &expected, 1)) stop_workers();
}
