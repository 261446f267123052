/* The tall dense steps of CP-ALS on the device (gpu/cpd_cuda.cu): a factor's solve
 * A = M F with its column statistics, its Gram and the fit's inner products, and the
 * scaling of a factor's columns with its Gram, on matrices that stay in device memory.
 * Only the R x R solve matrix (its upper triangle and a row divisor) goes to the device and
 * only the R-vectors and the Gram's upper triangle come back, so per mode fewer than
 * R (R + 1) + 4 R doubles cross the bus. Every reduction over rows runs in a fixed order
 * (thread blocks over fixed row tiles, their partials summed in block order), so the same
 * input gives the same bits on every run. Internal to the library. */
#ifndef BLCO_CUDA_CPD_H
#define BLCO_CUDA_CPD_H

#include <stdint.h>

#include "blco/core.h"
#include "blco/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest rank the device steps take (a thread's share of the Gram stays in
 * registers); larger ranks run CP-ALS's dense steps on the host. */
#define BLCO_CUDA_DENSE_MAX_RANK 128

/* Per-context state of the dense steps at one rank: device scratch for the per-block
 * partials and the solve matrix, page-locked host buffers for what crosses the bus. */
typedef struct blco_cuda_dense blco_cuda_dense_t;

/* Device bytes blco_cuda_dense_open takes for `rank` (0 when rank is out of range). */
uint64_t blco_cuda_dense_bytes(int rank);

/* Opens the dense steps on ctx's device for `rank` (1..BLCO_CUDA_DENSE_MAX_RANK). Returns
 * 0, -EINVAL, -BLCO_EDEVMEM (the device memory; the diag says how much), -ENOMEM,
 * -BLCO_ECUDA or -BLCO_ENODEV (no CUDA). */
int blco_cuda_dense_open(blco_cuda_t *ctx, int rank, blco_cuda_dense_t **out, blco_diag_t *diag);
void blco_cuda_dense_close(blco_cuda_dense_t *d);

enum { BLCO_CUDA_DENSE_SUMSQ = 0, BLCO_CUDA_DENSE_MAXABS = 1 };

/* One step over a rows x rank matrix M (device, row major):
 *   A = M F, F[p][q] = ftri(min(p, q), max(p, q)) / fdiv[p], when ftri is set (ftri: the
 *     upper triangle of a symmetric matrix, row by row, rank (rank + 1) / 2 doubles, host;
 *     fdiv: rank doubles, host, NULL = 1);
 *   else A = M with column r multiplied by colmul[r] (host, NULL = 1).
 * A (device) is written unless NULL (then only the statistics); it may be M itself. Then
 * colstat[r] = the sum of squares (SUMSQ) or the largest magnitude (MAXABS) of column r of
 * A, gram = A^T A (rank x rank, both triangles) and, unless dot is NULL, dot[r] = sum_i
 * M[i][r] A[i][r] (all host). Queued on `stream` (a cudaStream_t, NULL = the context's) and
 * waited for. Returns 0, -EINVAL or -BLCO_ECUDA. */
typedef struct blco_cuda_dense_step {
    const double *m;
    double *a;
    uint64_t rows;
    const double *ftri, *fdiv, *colmul;
    int stat;
    double *colstat, *gram, *dot;
} blco_cuda_dense_step_t;

int blco_cuda_dense_run(blco_cuda_dense_t *d, const blco_cuda_dense_step_t *s, void *stream,
                        blco_diag_t *diag);

/* out[i] += in[i] for n doubles (device, on ctx's device), queued on `stream`. Returns 0 or
 * -BLCO_ECUDA. */
int blco_cuda_add(blco_cuda_t *ctx, double *out, const double *in, uint64_t n, void *stream,
                  blco_diag_t *diag);

/* The deterministic MTTKRP's sums (blco_cuda_mttkrp_opts_t.fixed: n two's-complement 128-bit
 * integers, low word first): out += in (wrapping), and out[i] := in[i] x inv_scale as
 * doubles (rounded once), both queued on `stream`. Returns 0 or -BLCO_ECUDA. */
int blco_cuda_fixed_add(blco_cuda_t *ctx, unsigned long long *out, const unsigned long long *in,
                        uint64_t n, void *stream, blco_diag_t *diag);
/* *out := the largest |a[i]| of n doubles (device), exact whatever the order (NaN or inf
 * when a holds one); tmp is 8 bytes of device memory. Runs on `stream` and waits for it.
 * Returns 0 or -BLCO_ECUDA. */
int blco_cuda_maxabs(blco_cuda_t *ctx, const double *a, uint64_t n, unsigned long long *tmp,
                     void *stream, double *out, blco_diag_t *diag);
int blco_cuda_fixed_to_double(blco_cuda_t *ctx, double *out, const unsigned long long *in,
                              uint64_t n, double inv_scale, void *stream, blco_diag_t *diag);

/* Internal helpers of the CUDA backend (gpu/mttkrp_cuda.cu): make the context's device
 * current (0 or the mapped error), and the context's own stream. */
int blco_cuda_use(blco_cuda_t *ctx, blco_diag_t *diag);
void *blco_cuda_own_stream(blco_cuda_t *ctx);

/* Loads the register kernels of both chunk schedules and of the sorted copies for tensors
 * of `order` modes at `rank` on ctx's device (their occupancy is asked, which a lazily
 * loading CUDA runtime answers by loading the kernel), so that the first pass timed with
 * any does not pay for it. Returns 0 or the mapped error. */
int blco_cuda_mttkrp_warm(blco_cuda_t *ctx, int order, int rank, blco_diag_t *diag);

/* Seconds the dense steps' kernels took, summed (device events). */
double blco_cuda_dense_kernel_seconds(const blco_cuda_dense_t *d);

/* Bytes the dense steps of d copied to the device and back so far. */
void blco_cuda_dense_bytes_moved(const blco_cuda_dense_t *d, uint64_t *h2d, uint64_t *d2h);

/* ---- CP-ALS's copies sorted by a mode (blco-cpd --gpu-sorted), from a host grouping ---- */
struct blco_bymode; /* blco_internal.h: built once a mode, then a part uploaded per device */
/* Device bytes of part `part` of g's copy (0 for invalid arguments). */
uint64_t blco_cuda_sorted_grouped_size(const struct blco_bymode *g, int part);
/* As blco_cuda_sorted_upload_part, part `part` of g's parts (g may be freed once it returns:
 * the copy owns its device arrays). */
int blco_cuda_sorted_upload_grouped(blco_cuda_t *ctx, const struct blco_bymode *g, int part,
                                    blco_cuda_copy_fn copy, void *user,
                                    blco_cuda_sorted_t **out, blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
