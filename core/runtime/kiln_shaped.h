/* A shaped run on device buffers (kiln_run_device_shaped in kiln_shaped.c), as the device backend (kiln_cuda.c)
 * sees it while kiln_run_device runs on the calling thread: the bucket to launch, each staged input's actual and
 * compiled shape (the backend zero-fills the compiled one and copies the actual region in), the run-time lengths,
 * and each output's shapes (the region copied out). Absent (NULL) for a plain kiln_run_device: the largest bucket
 * at the upper bounds. */
#ifndef KILN_SHAPED_H
#define KILN_SHAPED_H

#include <stdint.h>

typedef struct {
    int bucket;
    const int32_t* in_ndim;                 /* per model input */
    const int32_t* in_itemsize;
    const int64_t* const* in_actual;        /* per model input: its dims */
    const int64_t* in_compiled;             /* every input's compiled dims, one after another */
    const int64_t* lengths;                 /* the run-time lengths, after the model's inputs */
    const int32_t* out_ndim;                /* per output */
    const int32_t* out_itemsize;
    const int64_t* out_actual;              /* every output's actual dims, one after another */
    const int64_t* out_compiled;            /* and its compiled dims */
} kiln_shaped_request;

/* kiln_shaped.c: the calling thread's request, NULL when none (weak where a library may lack it). */
const kiln_shaped_request* kiln_shaped_device_request(void);

#endif /* KILN_SHAPED_H */
