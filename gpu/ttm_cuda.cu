// The CUDA TTM chain of Tucker (src/include/blco/tucker.h): Y(n) = X x_{m != n} U_m^T on a
// BLCO tensor in device memory. The SpTTM paper's mapping (Ma et al., JPDC'18): the columns
// of the dense result go across the threads of a block, so the factor rows are read
// coalesced and no thread holds more than a few columns; BLCO's register-based conflict
// resolution: a block walks a run of nonzeros of one BLCO block in ALTO order, keeps each
// column's sum in a register while the output row stays the same, and flushes it with one
// atomic add when the row changes. One kernel for both callers (gpu/cuda_ttm.h): the tensor
// in memory (blco_ttm_cuda, units = BLCO blocks cut into runs on the host) and the streaming
// engine's batches (stream/engine_gpu.c, units = segments, runs found on the device).
#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "blco_internal.h"
}
#include "gpu/cuda_compat.h"
#include "gpu/cuda_log.h"

#include "gpu/cuda_ttm.h"

__global__ void ttm_kernel(blco_cuda_ttm_args_t a)
{
    const uint64_t unit = blockIdx.x / a.runs_per_unit;
    const uint64_t u0 = a.unit_start[unit], u1 = a.unit_start[unit + 1];
    const uint64_t k0 = u0 + (blockIdx.x % a.runs_per_unit) * (uint64_t)BLCO_TTM_RUN;
    if (k0 >= u1)
        return; // a run past a short unit's end (the whole thread block leaves)
    const uint64_t k1 = k0 + BLCO_TTM_RUN < u1 ? k0 + BLCO_TTM_RUN : u1;
    const uint64_t *bc = a.unit_coord + unit * (uint64_t)a.order;
    for (uint64_t j0 = 0; j0 < a.P; j0 += blockDim.x) {
        const uint64_t j = j0 + threadIdx.x;
        // this column's multi-index (r_m), highest mode fastest
        int r[BLCO_MAX_MODES];
        uint64_t rest = j;
        for (int m = a.order - 1; m >= 0; m--)
            if (m != a.mode) {
                r[m] = (int)(rest % (uint64_t)a.ranks[m]);
                rest /= (uint64_t)a.ranks[m];
            }
        double acc = 0;
        int64_t cur = -1;
        for (uint64_t k = k0; k < k1; k++) {
            const uint64_t idx = a.idx[k];
            uint64_t in = ((idx >> a.pos[a.mode]) & a.mask[a.mode]) | bc[a.mode];
            int64_t row = a.rowmap ? a.rowmap[in] : (int64_t)in;
            if (j >= a.P || row < 0)
                continue;
            if (row != cur) {
                if (cur >= 0)
                    atomicAdd(&a.y[(uint64_t)cur * a.P + j], acc);
                cur = row;
                acc = 0;
            }
            double p = a.val[k];
            for (int m = 0; m < a.order; m++)
                if (m != a.mode) {
                    uint64_t im = ((idx >> a.pos[m]) & a.mask[m]) | bc[m];
                    p *= a.u[m][im * (uint64_t)a.ranks[m] + (uint64_t)r[m]];
                }
            acc += p;
        }
        if (cur >= 0 && j < a.P)
            atomicAdd(&a.y[(uint64_t)cur * a.P + j], acc);
    }
}

extern "C" int blco_cuda_ttm_launch(const blco_cuda_ttm_args_t *a, void *stream)
{
    if (!a->nunits || !a->P)
        return 0;
    if (a->runs_per_unit < 1 || a->nunits > 0x7fffffffull / a->runs_per_unit)
        return -1; // one thread block per run: the grid's x limit
    const uint64_t grid = a->nunits * a->runs_per_unit;
    BLCO_LAUNCH(ttm_kernel, dim3((unsigned)grid), dim3(BLCO_TTM_THREADS), 0,
                (cudaStream_t)stream, *a);
    return (int)cudaGetLastError();
}

static int ck(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    blco_cuda_log_failure(e, what, "ttm_cuda.cu");
    return e == cudaErrorMemoryAllocation ? -BLCO_EDEVMEM : -BLCO_ECUDA;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        if ((err = ck((call), #call)) < 0)                                                         \
            goto fail;                                                                             \
    } while (0)

static void *dev_copy(const void *src, size_t bytes, int *err)
{
    void *d = NULL;
    if (*err < 0)
        return NULL;
    if ((*err = ck(cudaMalloc(&d, bytes ? bytes : 8), "cudaMalloc")) < 0)
        return NULL;
    if (bytes && (*err = ck(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy")) < 0) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

extern "C" int blco_ttm_cuda(const blco_tensor_t *x, int mode, const int *ranks,
                             const double *const *U, const int64_t *rowmap, uint64_t rows,
                             double *Y)
{
    if (!x || !Y || !U)
        return -EINVAL;
    const blco_layout_t *l = &x->layout;
    const int N = l->order;
    const uint64_t P = blco_ttm_cols(N, ranks, mode);
    if (!P || (!rowmap && rows != l->dims[mode]))
        return -EINVAL;
    for (int m = 0; m < N; m++)
        if (m != mode && !U[m])
            return -EINVAL;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        (void)cudaGetLastError();
        return -BLCO_ENODEV;
    }
    // units of at most BLCO_TTM_RUN nonzeros inside one BLCO block
    uint64_t nruns = 0;
    for (uint64_t b = 0; b < x->nblocks; b++)
        nruns += (x->blocks[b].nnz + BLCO_TTM_RUN - 1) / BLCO_TTM_RUN;
    if (nruns > 0x7fffffffull)
        return -EINVAL; // one thread block per run: the grid's x limit
    uint64_t *rs = (uint64_t *)malloc((nruns + 1) * 8);
    uint64_t *rc = (uint64_t *)malloc((nruns ? nruns : 1) * (size_t)N * 8);
    blco_cuda_ttm_args_t a;
    memset(&a, 0, sizeof a);
    void *dptr[4 + BLCO_MAX_MODES] = {0};
    int err = rs && rc ? 0 : -ENOMEM;
    if (err == 0) {
        uint64_t q = 0;
        for (uint64_t b = 0; b < x->nblocks; b++)
            for (uint64_t k = 0; k < x->blocks[b].nnz; k += BLCO_TTM_RUN) {
                rs[q] = x->blocks[b].start + k;
                memcpy(rc + q * N, x->blocks[b].coord, (size_t)N * 8);
                q++;
            }
        rs[nruns] = nruns ? x->blocks[x->nblocks - 1].start + x->blocks[x->nblocks - 1].nnz : 0;
        // runs of one block end where the next run starts; the last run of each block must
        // stop at the block's end, not at the next block's start (they are adjacent in ALTO
        // order, so the two coincide)
    }
    if ((err = ck(cudaSetDevice(0), "cudaSetDevice")) < 0)
        goto fail;
    a.idx = (const uint64_t *)(dptr[0] = dev_copy(x->idx, x->nnz * 8, &err));
    a.val = (const double *)(dptr[1] = dev_copy(x->val, x->nnz * 8, &err));
    a.unit_start = (const uint64_t *)(dptr[2] = dev_copy(rs, (nruns + 1) * 8, &err));
    a.unit_coord = (const uint64_t *)(dptr[3] = dev_copy(rc, nruns * (size_t)N * 8, &err));
    for (int m = 0; m < N; m++)
        if (m != mode)
            a.u[m] = (const double *)(dptr[4 + m] =
                                          dev_copy(U[m], l->dims[m] * (size_t)ranks[m] * 8, &err));
    if (rowmap)
        a.rowmap = (const int64_t *)dev_copy(rowmap, l->dims[mode] * 8, &err);
    if (err == 0 && (err = ck(cudaMalloc((void **)&a.y, rows * P * 8 + 8), "cudaMalloc")) == 0)
        err = ck(cudaMemset(a.y, 0, rows * P * 8), "cudaMemset");
    if (err < 0)
        goto fail;
    a.P = P;
    a.order = N;
    a.mode = mode;
    for (int m = 0; m < N; m++) {
        a.ranks[m] = ranks[m];
        a.pos[m] = l->pos[m];
        a.mask[m] = l->low_mask[m];
    }
    a.nunits = nruns;
    a.runs_per_unit = 1;
    if (nruns) {
        CK((cudaError_t)blco_cuda_ttm_launch(&a, 0));
        CK(cudaDeviceSynchronize());
    }
    CK(cudaMemcpy(Y, a.y, rows * P * 8, cudaMemcpyDeviceToHost));
fail:
    for (int i = 0; i < 4 + BLCO_MAX_MODES; i++)
        if (dptr[i])
            cudaFree(dptr[i]);
    if (a.rowmap)
        cudaFree((void *)a.rowmap);
    if (a.y)
        cudaFree(a.y);
    free(rs);
    free(rc);
    return err;
}
