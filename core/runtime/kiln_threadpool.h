/* Kiln's thread pool: the parallel-for that generated kernels call for their PARALLEL loops.
 * Compiled into every library Kiln builds (models and kernel-only libraries); see kiln_threadpool.c. */
#ifndef KILN_THREADPOOL_H
#define KILN_THREADPOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One chunk of a parallel loop: run iterations [begin, end) with the loop's packed free values. */
typedef void (*kiln_parallel_body)(void* data, int64_t begin, int64_t end);

/* Run body over [0, extent) split into n = min(extent, threads) static, contiguous chunks, in order,
 * the first extent % n of them one iteration longer. The calling thread runs chunk 0 and any chunk whose
 * worker has not picked it up yet; it returns when every chunk has run. A call from inside a
 * region, or while another thread's region holds the pool, runs the whole loop serially. */
void kiln_parallel_for(kiln_parallel_body body, void* data, int64_t extent);

/* Threads per region, the caller included; n <= 0 restores the default: $KILN_NUM_THREADS, else
 * $OMP_NUM_THREADS, else the CPUs this process may run on. Takes effect at the next region. */
void kiln_pool_set_threads(int n);
int kiln_pool_get_threads(void);

/* Bracket a burst of regions (one inference): wakes parked workers now, so that waking overlaps the
 * first serial kernels, and keeps them spinning until the matching leave; then they spin only
 * briefly ($KILN_POOL_SPIN_US, default 1000 us) and park. Calls nest and may come from any thread. */
void kiln_pool_enter(void);
void kiln_pool_leave(void);

/* Diagnostics: chunks run by pool workers (not by the launching thread) since the library loaded. */
int64_t kiln_pool_worker_chunks(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_THREADPOOL_H */
