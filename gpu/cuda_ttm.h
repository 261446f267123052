/* The CUDA TTM kernel of Tucker (gpu/ttm_cuda.cu), as both of its callers launch it: the
 * in-memory blco_ttm_cuda and the streaming engine's pass over batches on the device.
 * Nonzeros come in units (a BLCO block or a segment: one block coordinate each); every
 * unit is cut into runs of at most BLCO_TTM_RUN nonzeros, one thread block per run.
 * Internal to the library. */
#ifndef BLCO_CUDA_TTM_H
#define BLCO_CUDA_TTM_H

#include <stdint.h>

#include "blco/core.h"
#include "blco/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BLCO_TTM_THREADS 128 /* threads per block: columns of Y across them */
#define BLCO_TTM_RUN 64      /* nonzeros a thread block walks */

/* Everything on the device but the scalars. Y (rows x P, row major) is ADDED to with
 * atomics; rowmap (dims[mode] entries; NULL: identity) gives each mode-`mode` index its row,
 * negative to skip the nonzero. */
typedef struct blco_cuda_ttm_args {
    const uint64_t *idx;
    const double *val;
    const uint64_t *unit_start; /* nunits + 1 nonzero offsets */
    const uint64_t *unit_coord; /* nunits x order block coordinates */
    uint64_t nunits;
    uint64_t runs_per_unit; /* ceil(longest unit / BLCO_TTM_RUN), >= 1 */
    const double *u[BLCO_MAX_MODES]; /* dims[m] x ranks[m]; u[mode] not read */
    const int64_t *rowmap;
    double *y;
    uint64_t P; /* columns of Y: blco_ttm_cols */
    int order, mode;
    int ranks[BLCO_MAX_MODES];
    int pos[BLCO_MAX_MODES];
    uint64_t mask[BLCO_MAX_MODES];
} blco_cuda_ttm_args_t;

/* Queues the kernel on `stream` (a cudaStream_t; the caller made the device current).
 * Returns 0 (nothing queued when there are no runs), the cudaError_t of the launch, or -1
 * when the grid would exceed 2^31 - 1 thread blocks. */
int blco_cuda_ttm_launch(const blco_cuda_ttm_args_t *a, void *stream);

/* The same on ctx's device and stream (NULL: the context's), errors mapped: 0, -EINVAL,
 * -BLCO_ECUDA (the launch failed), -BLCO_ENODEV (a build without CUDA). Asynchronous. */
int blco_cuda_ttm_batch(blco_cuda_t *ctx, const blco_cuda_ttm_args_t *a, void *stream,
                        blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
