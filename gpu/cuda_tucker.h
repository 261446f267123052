/* The tall dense steps of HOOI on the device (gpu/tucker_cuda.cu), on matrices that stay in
 * device memory (Y(n), the factors): products A^T B over rows (the Gram Y^T Y, a factor's
 * Gram U^T U, the core U^T Y), the Gram Y Y^T of a short Y, the projection U = Y V / sigma
 * scattered to the factor's rows, and U := U T for a small T. Every sum runs in a fixed
 * order (rows cut into chunks that depend only on the sizes, the chunks' partials added in
 * chunk order; no floating-point atomics), so the same input gives the same bits on every
 * run and device. All launchers queue on `stream` (a cudaStream_t; NULL: the context's) after
 * making ctx's device current, and return 0, -EINVAL, -BLCO_ECUDA (the launch failed; logged)
 * or -BLCO_ENODEV (a build without CUDA). Internal to the library. */
#ifndef BLCO_CUDA_TUCKER_H
#define BLCO_CUDA_TUCKER_H

#include <stdint.h>

#include "blco/core.h"
#include "blco/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (np x nq, row major) = sum over i < rows of A[ra(i)][0..np)^T B[rb(i)][0..nq), A and B
 * row major with leading dimensions lda and ldb, ra(i) = amap[i] (amap NULL: i), likewise
 * rb. partials: blco_cuda_atb_partials(rows, np, nq) doubles of device scratch. */
typedef struct blco_cuda_atb {
    const double *a, *b;
    uint64_t lda, ldb;
    const int64_t *amap, *bmap;
    uint64_t rows, np, nq;
    double *out, *partials;
} blco_cuda_atb_t;

uint64_t blco_cuda_atb_partials(uint64_t rows, uint64_t np, uint64_t nq);
int blco_cuda_atb(blco_cuda_t *ctx, const blco_cuda_atb_t *a, void *stream, blco_diag_t *diag);

/* out (k x k) = A A^T for A k x cols (row major, leading dimension ld). */
int blco_cuda_aat(blco_cuda_t *ctx, const double *a, uint64_t ld, uint64_t k, uint64_t cols,
                  double *out, void *stream, blco_diag_t *diag);

/* U (dims x r, row major; zeroed first) row map(i) := Y[i] V diag(scale) for i < rows, with
 * columns keep..r-1 zero: Y rows x P, V P x keep column major, scale `keep` values (all
 * device), map[i] the row of U of Y's row i (NULL: i). */
typedef struct blco_cuda_project {
    const double *y, *v, *scale;
    const int64_t *map;
    uint64_t rows, P, dims;
    int r, keep;
    double *u;
} blco_cuda_project_t;

int blco_cuda_project(blco_cuda_t *ctx, const blco_cuda_project_t *a, void *stream,
                      blco_diag_t *diag);

/* U (rows x r, row major) := U T, T r x r row major (device), in place; r at most
 * BLCO_CUDA_MUL_SMALL_MAX_R (a row of U in a block's shared memory). */
#define BLCO_CUDA_MUL_SMALL_MAX_R 6144
int blco_cuda_mul_small(blco_cuda_t *ctx, double *u, uint64_t rows, int r, const double *t,
                        void *stream, blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
