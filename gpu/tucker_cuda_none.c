/* HOOI's dense steps on the device (gpu/cuda_tucker.h) in a build without CUDA: no device. */
#include "blco_internal.h"
#include "gpu/cuda_tucker.h"

uint64_t blco_cuda_atb_partials(uint64_t rows, uint64_t np, uint64_t nq)
{
    (void)rows;
    return np * nq;
}

int blco_cuda_atb(blco_cuda_t *ctx, const blco_cuda_atb_t *a, void *stream, blco_diag_t *diag)
{
    (void)ctx, (void)a, (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "built without CUDA");
}

int blco_cuda_aat(blco_cuda_t *ctx, const double *a, uint64_t ld, uint64_t k, uint64_t cols,
                  double *out, void *stream, blco_diag_t *diag)
{
    (void)ctx, (void)a, (void)ld, (void)k, (void)cols, (void)out, (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "built without CUDA");
}

int blco_cuda_project(blco_cuda_t *ctx, const blco_cuda_project_t *a, void *stream,
                      blco_diag_t *diag)
{
    (void)ctx, (void)a, (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "built without CUDA");
}

int blco_cuda_mul_small(blco_cuda_t *ctx, double *u, uint64_t rows, int r, const double *t,
                        void *stream, blco_diag_t *diag)
{
    (void)ctx, (void)u, (void)rows, (void)r, (void)t, (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "built without CUDA");
}
