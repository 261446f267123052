// The tall dense steps of HOOI on the device (gpu/cuda_tucker.h). Sums over rows are cut
// into chunks fixed by the sizes alone: a thread owns one output entry of one chunk and adds
// its rows in order, and a second kernel adds the chunks' partials in chunk order, so the
// bits do not depend on the device, the grid's schedule or the run.
#include <errno.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "blco_internal.h"
}
#include "gpu/cuda_compat.h"
#include "gpu/cuda_log.h"
#include "gpu/cuda_cpd.h"
#include "gpu/cuda_tucker.h"

#define TK_THREADS 256
#define TK_MAX_GRID 65535u
// Row chunks of a product A^T B: one per TK_CHUNK_ROWS rows, at most TK_MAX_CHUNKS, and no
// more than keep the partials within TK_PARTIALS doubles (one chunk at least).
#define TK_CHUNK_ROWS 256
#define TK_MAX_CHUNKS 128
#define TK_PARTIALS (1ull << 19)
// Shared memory of U := U T: a tile of U's rows.
#define TK_SMEM (48u << 10)
static_assert(BLCO_CUDA_MUL_SMALL_MAX_R * 8 <= TK_SMEM, "a row of U fits the tile");

static uint64_t atb_chunks(uint64_t rows, uint64_t n)
{
    uint64_t c = (rows + TK_CHUNK_ROWS - 1) / TK_CHUNK_ROWS;
    c = c < 1 ? 1 : c > TK_MAX_CHUNKS ? TK_MAX_CHUNKS : c;
    if (n && c * n > TK_PARTIALS)
        c = TK_PARTIALS / n > 1 ? TK_PARTIALS / n : 1;
    return c;
}

static unsigned grid_for(uint64_t n)
{
    const uint64_t g = (n + TK_THREADS - 1) / TK_THREADS;
    return (unsigned)(g < 1 ? 1 : g > TK_MAX_GRID ? TK_MAX_GRID : g);
}

#ifdef BLCO_GPU_CODE

// partials[chunk][e] = sum over the chunk's rows of A[ra(i)][p] B[rb(i)][q], e = p nq + q.
__global__ void tk_atb(const double *a, uint64_t lda, const int64_t *amap, const double *b,
                       uint64_t ldb, const int64_t *bmap, uint64_t rows, uint64_t np, uint64_t nq,
                       uint64_t chunk_rows, double *partials)
{
    const uint64_t n = np * nq, c = blockIdx.y;
    const uint64_t i0 = c * chunk_rows;
    const uint64_t i1 = i0 + chunk_rows < rows ? i0 + chunk_rows : rows;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t p = e / nq, q = e - p * nq;
        double s = 0.0;
        for (uint64_t i = i0; i < i1; i++) {
            const uint64_t ra = amap ? (uint64_t)amap[i] : i, rb = bmap ? (uint64_t)bmap[i] : i;
            s += a[ra * lda + p] * b[rb * ldb + q];
        }
        partials[c * n + e] = s;
    }
}

// out[e] = the chunks' partials of entry e added in chunk order.
__global__ void tk_sum_chunks(const double *partials, uint64_t n, uint64_t nchunks, double *out)
{
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (uint64_t c = 0; c < nchunks; c++)
            s += partials[c * n + e];
        out[e] = s;
    }
}

// out[i][j] = sum_c A[i][c] A[j][c] (the same order for (i, j) and (j, i): symmetric bits).
__global__ void tk_aat(const double *a, uint64_t ld, uint64_t k, uint64_t cols, double *out)
{
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < k * k;
         e += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t i = e / k, j = e - i * k;
        const double *x = a + i * ld, *y = a + j * ld;
        double s = 0.0;
        for (uint64_t c = 0; c < cols; c++)
            s += x[c] * y[c];
        out[e] = s;
    }
}

// U[map(i)][j] = (Y[i] . V[:, j]) scale[j] for j < keep, 0 beyond.
__global__ void tk_project(const double *y, const double *v, const double *scale,
                           const int64_t *map, uint64_t rows, uint64_t P, int r, int keep,
                           double *u)
{
    const uint64_t n = rows * (uint64_t)r;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t i = e / (uint64_t)r;
        const int j = (int)(e - i * (uint64_t)r);
        double x = 0.0;
        if (j < keep) {
            const double *yr = y + i * P, *vc = v + (uint64_t)j * P;
            double s = 0.0;
            for (uint64_t c = 0; c < P; c++)
                s += yr[c] * vc[c];
            x = s * scale[j];
        }
        const uint64_t row = map ? (uint64_t)map[i] : i;
        u[row * (uint64_t)r + (uint64_t)j] = x;
    }
}

// U := U T tile by tile: a block loads a tile of rows into shared memory, then overwrites it.
__global__ void __launch_bounds__(TK_THREADS)
    tk_mul_small(double *u, uint64_t rows, int r, int tile_rows, const double *t)
{
    BLCO_DYNAMIC_SHARED(double, sm);
    const uint64_t ntiles = (rows + (uint64_t)tile_rows - 1) / (uint64_t)tile_rows;
    for (uint64_t tl = blockIdx.x; tl < ntiles; tl += gridDim.x) {
        const uint64_t r0 = tl * (uint64_t)tile_rows;
        const int nr = (int)(rows - r0 < (uint64_t)tile_rows ? rows - r0 : (uint64_t)tile_rows);
        const int n = nr * r;
        double *src = u + r0 * (uint64_t)r;
        for (int e = (int)threadIdx.x; e < n; e += TK_THREADS)
            sm[e] = src[e];
        __syncthreads();
        for (int e = (int)threadIdx.x; e < n; e += TK_THREADS) {
            const int i = e / r, j = e - i * r;
            const double *ur = sm + (size_t)i * r;
            double s = 0.0;
            for (int k = 0; k < r; k++)
                s += ur[k] * t[(size_t)k * r + j];
            src[e] = s;
        }
        __syncthreads(); // the tile is refilled
    }
}

#endif // BLCO_GPU_CODE

// ---- host side ----

static int tk_fail(cudaError_t e, const char *what, blco_diag_t *diag)
{
    blco_cuda_log_failure(e, what, "tucker_cuda.cu");
    return blco_diag_set(diag, 0, -BLCO_ECUDA, "%.*s: %s", blco_cuda_what_len(what), what,
                         cudaGetErrorString(e));
}

static int launched(const char *what, blco_diag_t *diag)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : tk_fail(e, what, diag);
}

extern "C" uint64_t blco_cuda_atb_partials(uint64_t rows, uint64_t np, uint64_t nq)
{
    return atb_chunks(rows, np * nq) * np * nq;
}

extern "C" int blco_cuda_atb(blco_cuda_t *ctx, const blco_cuda_atb_t *a, void *stream,
                             blco_diag_t *diag)
{
    if (!a || !a->out || !a->partials || (a->rows && (!a->a || !a->b)))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_atb: bad arguments");
    int err = blco_cuda_use(ctx, diag);
    if (err < 0)
        return err;
    const uint64_t n = a->np * a->nq;
    if (!n)
        return 0;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    const uint64_t nc = atb_chunks(a->rows, n);
    const uint64_t cr = (a->rows + nc - 1) / nc;
    BLCO_LAUNCH(tk_atb, dim3(grid_for(n), (unsigned)nc), dim3(TK_THREADS), 0, st, a->a, a->lda,
                a->amap, a->b, a->ldb, a->bmap, a->rows, a->np, a->nq, cr ? cr : 1, a->partials);
    if ((err = launched("the product A^T B", diag)) < 0)
        return err;
    BLCO_LAUNCH(tk_sum_chunks, dim3(grid_for(n)), dim3(TK_THREADS), 0, st,
                (const double *)a->partials, n, nc, a->out);
    return launched("adding the product's chunks", diag);
}

extern "C" int blco_cuda_aat(blco_cuda_t *ctx, const double *a, uint64_t ld, uint64_t k,
                             uint64_t cols, double *out, void *stream, blco_diag_t *diag)
{
    if (!out || (k && !a))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_aat: bad arguments");
    int err = blco_cuda_use(ctx, diag);
    if (err < 0 || !k)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    BLCO_LAUNCH(tk_aat, dim3(grid_for(k * k)), dim3(TK_THREADS), 0, st, a, ld, k, cols, out);
    return launched("the Gram Y Y^T", diag);
}

extern "C" int blco_cuda_project(blco_cuda_t *ctx, const blco_cuda_project_t *a, void *stream,
                                 blco_diag_t *diag)
{
    if (!a || !a->u || a->r < 1 || a->keep < 0 || a->keep > a->r ||
        (a->rows && (!a->y || (a->keep && (!a->v || !a->scale)))))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_project: bad arguments");
    int err = blco_cuda_use(ctx, diag);
    if (err < 0)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    cudaError_t e = cudaMemsetAsync(a->u, 0, a->dims * (uint64_t)a->r * 8, st);
    if (e != cudaSuccess)
        return tk_fail(e, "zeroing the factor", diag);
    const uint64_t n = a->rows * (uint64_t)a->r;
    if (!n)
        return 0;
    BLCO_LAUNCH(tk_project, dim3(grid_for(n)), dim3(TK_THREADS), 0, st, a->y, a->v, a->scale,
                a->map, a->rows, a->P, a->r, a->keep, a->u);
    return launched("the projection Y V / sigma", diag);
}

extern "C" int blco_cuda_mul_small(blco_cuda_t *ctx, double *u, uint64_t rows, int r,
                                   const double *t, void *stream, blco_diag_t *diag)
{
    if (r < 1 || r > BLCO_CUDA_MUL_SMALL_MAX_R || (rows && (!u || !t)))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_mul_small: bad arguments (r %d)", r);
    int err = blco_cuda_use(ctx, diag);
    if (err < 0 || !rows)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    int tr = (int)(TK_SMEM / (8u * (unsigned)r));
    tr = tr > 64 ? 64 : tr;
    const uint64_t ntiles = (rows + (uint64_t)tr - 1) / (uint64_t)tr;
    const unsigned g = (unsigned)(ntiles > 4096 ? 4096 : ntiles);
    BLCO_LAUNCH(tk_mul_small, dim3(g), dim3(TK_THREADS), (size_t)tr * r * 8, st, u, rows, r, tr, t);
    return launched("U := U T", diag);
}
