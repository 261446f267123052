// The tall dense steps of CP-ALS on the device (gpu/cuda_cpd.h). One kernel walks fixed
// tiles of rows: a thread block loads a tile of M into shared memory, makes the tile of
// A = M F (or M with scaled columns), writes it out and adds the tile's column statistics,
// inner products and Gram entries into accumulators that each thread owns; a second kernel
// sums the blocks' partials in block order. Tiles and blocks depend only on the row count
// and the rank, so the bits do not depend on the device or the run.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "blco_internal.h"
}
#include "gpu/cuda_compat.h"
#include "gpu/cuda_log.h"
#include "gpu/cuda_cpd.h"

#define DN_THREADS 256
// Gram entries (of the upper triangle) a thread owns at rank r: the kernel is compiled for
// 1, 3, 9 and 33 of them (ranks up to 22, 32, 64 and 128). One instance sized for rank 128
// held 99 accumulators and indices a thread (214 registers: one block, 8 warps, an SM), and
// the long modes' dense steps took a quarter of a CP-ALS iteration on an H200.
#define DN_GK_OF(r) (((r) * ((r) + 1) / 2 + DN_THREADS - 1) / DN_THREADS)
static_assert(DN_GK_OF(BLCO_CUDA_DENSE_MAX_RANK) <= 33, "dn_kernel's largest instance");
// Thread blocks of a step: at most this many, each over a contiguous run of tiles.
#define DN_MAX_BLOCKS 512
// Shared memory for the two tiles (M and A): rows per tile = this / (16 rank), at most 64.
#define DN_SMEM (48u << 10)

struct dn_args {
    const double *m;
    double *a;          // NULL: statistics only
    const double *f;    // rank x rank, or NULL: scale columns by colmul
    const double *colmul; // rank (f NULL), or NULL: 1
    uint64_t rows, ntiles;
    int rank, tile_rows, stat, want_dot;
    double *pcol, *pdot, *pgram; // per block: rank, rank, rank (rank + 1) / 2
};

struct blco_cuda_dense {
    blco_cuda_t *ctx;
    int rank;
    double *dmem;     // device: F (rank^2), F's triangle + divisor in, partials, results
    uint64_t dbytes;
    double *host;     // page-locked: triangle + divisor out, results in
    uint64_t hbytes;
    uint64_t h2d, d2h;
    cudaEvent_t e0, e1; // around the kernels of a step
    double kernel_ms;   // their time, summed over the steps
};

#ifdef BLCO_GPU_CODE

__device__ __forceinline__ uint64_t tri_size(int r)
{
    return (uint64_t)r * (uint64_t)(r + 1) / 2;
}

template <int DN_GK>
__global__ void __launch_bounds__(DN_THREADS) dn_kernel(const __grid_constant__ dn_args a)
{
    BLCO_DYNAMIC_SHARED(double, sm);
    const int R = a.rank, TR = a.tile_rows;
    double *mt = sm, *at = sm + (size_t)TR * R;
    const unsigned tid = threadIdx.x;
    const uint64_t T = tri_size(R);
    // The Gram entries this thread owns: e = tid + k * DN_THREADS of the upper triangle,
    // row by row; (p, q) found by walking the rows once.
    int gp[DN_GK], gq[DN_GK];
    double g[DN_GK];
    {
        uint64_t e = tid, start = 0;
        int p = 0;
#pragma unroll
        for (int k = 0; k < DN_GK; k++) {
            gp[k] = -1;
            gq[k] = 0;
            g[k] = 0.0;
            if (e < T) {
                while (start + (uint64_t)(R - p) <= e) {
                    start += (uint64_t)(R - p);
                    p++;
                }
                gp[k] = p;
                gq[k] = p + (int)(e - start);
            }
            e += DN_THREADS;
        }
    }
    double cs = 0.0, ds = 0.0; // column tid's statistic and inner product
    const uint64_t t0 = (uint64_t)blockIdx.x * a.ntiles / gridDim.x;
    const uint64_t t1 = (uint64_t)(blockIdx.x + 1) * a.ntiles / gridDim.x;
    for (uint64_t t = t0; t < t1; t++) {
        const uint64_t r0 = t * (uint64_t)TR;
        const int nr = (int)(a.rows - r0 < (uint64_t)TR ? a.rows - r0 : (uint64_t)TR);
        const int n = nr * R;
        const double *msrc = a.m + r0 * (uint64_t)R;
        for (int e = (int)tid; e < n; e += DN_THREADS)
            mt[e] = msrc[e];
        __syncthreads();
        for (int e = (int)tid; e < n; e += DN_THREADS) {
            const int i = e / R, c = e - i * R;
            double x;
            if (a.f) {
                x = 0.0;
                const double *mr = mt + (size_t)i * R;
                for (int k = 0; k < R; k++)
                    x += mr[k] * __ldg(a.f + (size_t)k * R + c);
            } else {
                x = a.colmul ? mt[e] * __ldg(a.colmul + c) : mt[e];
            }
            at[e] = x;
        }
        __syncthreads();
        if (a.a) {
            double *adst = a.a + r0 * (uint64_t)R;
            for (int e = (int)tid; e < n; e += DN_THREADS)
                adst[e] = at[e];
        }
        if ((int)tid < R) {
            for (int i = 0; i < nr; i++) {
                const double x = at[(size_t)i * R + tid];
                cs = a.stat == BLCO_CUDA_DENSE_MAXABS ? fmax(cs, fabs(x)) : cs + x * x;
                if (a.want_dot)
                    ds += mt[(size_t)i * R + tid] * x;
            }
        }
#pragma unroll
        for (int k = 0; k < DN_GK; k++) {
            if (gp[k] < 0)
                continue;
            double s = g[k];
            for (int i = 0; i < nr; i++)
                s += at[(size_t)i * R + gp[k]] * at[(size_t)i * R + gq[k]];
            g[k] = s;
        }
        __syncthreads(); // the tiles are refilled
    }
    if ((int)tid < R) {
        a.pcol[(size_t)blockIdx.x * R + tid] = cs;
        a.pdot[(size_t)blockIdx.x * R + tid] = ds;
    }
#pragma unroll
    for (int k = 0; k < DN_GK; k++)
        if (gp[k] >= 0)
            a.pgram[(size_t)blockIdx.x * T + tid + (uint64_t)k * DN_THREADS] = g[k];
}

// out[e] = the blocks' partials of entry e summed (or the largest, for the MAXABS column
// statistics) in block order: out = colstat (rank), dot (rank), the Gram's triangle.
__global__ void dn_reduce(const double *pcol, const double *pdot, const double *pgram, int rank,
                          unsigned nblocks, int stat, double *out)
{
    const uint64_t T = tri_size(rank);
    const uint64_t total = 2 * (uint64_t)rank + T;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (uint64_t)gridDim.x * blockDim.x) {
        const double *src;
        uint64_t stride, at;
        if (e < (uint64_t)rank)
            src = pcol, stride = rank, at = e;
        else if (e < 2 * (uint64_t)rank)
            src = pdot, stride = rank, at = e - rank;
        else
            src = pgram, stride = T, at = e - 2 * (uint64_t)rank;
        const bool mx = e < (uint64_t)rank && stat == BLCO_CUDA_DENSE_MAXABS;
        double s = 0.0;
        for (unsigned b = 0; b < nblocks; b++) {
            const double x = src[(uint64_t)b * stride + at];
            s = mx ? fmax(s, x) : s + x;
        }
        out[e] = s;
    }
}

// F[p][q] = tri(min(p, q), max(p, q)) / div[p] (div NULL: 1).
__global__ void dn_expand(const double *tri, const double *div, int rank, double *f)
{
    const uint64_t n = (uint64_t)rank * rank;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x) {
        const int p = (int)(e / rank), q = (int)(e % rank);
        const int lo = p < q ? p : q, hi = p < q ? q : p;
        // row lo of the upper triangle starts after rows 0..lo-1 (rank - i entries each)
        const uint64_t at = (uint64_t)lo * rank - (uint64_t)lo * (lo - 1) / 2 + (hi - lo);
        const double x = tri[at];
        f[e] = div ? x / div[p] : x;
    }
}

__global__ void dn_add(double *out, const double *in, uint64_t n)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        out[i] += in[i];
}

__global__ void dn_fixed_add(unsigned long long *out, const unsigned long long *in, uint64_t n)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const unsigned long long lo = out[2 * i], add = in[2 * i];
        out[2 * i] = lo + add;
        out[2 * i + 1] += in[2 * i + 1] + (lo + add < lo ? 1ull : 0ull);
    }
}

// The largest |a[i]| as the bits of a non-negative double, whose order as unsigned integers is
// the order of the values (NaN above inf).
__global__ void dn_maxabs(const double *a, uint64_t n, unsigned long long *out)
{
    unsigned long long m = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const unsigned long long b = (unsigned long long)__double_as_longlong(fabs(a[i]));
        m = b > m ? b : m;
    }
    if (m)
        atomicMax(out, m);
}

// The integer's value as one double: its magnitude's halves (a negative one negated first,
// so that a small negative value keeps its precision), hi 2^64 + lo rounded at most twice
// to within a unit in the last place of the magnitude, the sign put back.
__global__ void dn_fixed_to_double(double *out, const unsigned long long *in, uint64_t n,
                                   double inv_scale)
{
    const double two64 = 18446744073709551616.0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        unsigned long long lo = in[2 * i], hi = in[2 * i + 1];
        const bool neg = (long long)hi < 0;
        if (neg) {
            hi = 0ull - hi - (lo ? 1ull : 0ull);
            lo = 0ull - lo;
        }
        const double v = fma((double)hi, two64, (double)lo) * inv_scale;
        out[i] = neg ? -v : v;
    }
}

#endif // BLCO_GPU_CODE

// ---- host side ----

static uint64_t tri_count(int r)
{
    return (uint64_t)r * (uint64_t)(r + 1) / 2;
}

// Device layout (doubles): F (r^2), in: triangle + divisor + colmul (T + 2r), results
// (2r + T), partials (DN_MAX_BLOCKS x (2r + T)).
static uint64_t dev_doubles(int r)
{
    const uint64_t T = tri_count(r), w = 2 * (uint64_t)r + T;
    return (uint64_t)r * r + (T + 2 * (uint64_t)r) + w + (uint64_t)DN_MAX_BLOCKS * w;
}

// Page-locked host doubles: in (T + 2r) and results (2r + T).
static uint64_t host_doubles(int r)
{
    return 2 * (tri_count(r) + 2 * (uint64_t)r);
}

extern "C" uint64_t blco_cuda_dense_bytes(int rank)
{
    if (rank < 1 || rank > BLCO_CUDA_DENSE_MAX_RANK)
        return 0;
    return dev_doubles(rank) * 8;
}

static int dn_fail(cudaError_t e, const char *what, blco_diag_t *diag)
{
    blco_cuda_log_failure(e, what, "cpd_cuda.cu");
    return blco_diag_set(diag, 0, -BLCO_ECUDA, "%.*s: %s", blco_cuda_what_len(what), what,
                         cudaGetErrorString(e));
}

#define DK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            err = dn_fail(e_, #call, diag);                                                        \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

// After a launch: the launch's error, named by its kernel.
#define DK_LAUNCHED(kernel) DK_NAMED(cudaGetLastError(), "launching " kernel)
#define DK_NAMED(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            err = dn_fail(e_, what, diag);                                                         \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

extern "C" void blco_cuda_dense_close(blco_cuda_dense_t *d)
{
    if (!d)
        return;
    if (d->host) {
        blco_cuda_host_unregister(d->ctx, d->host);
        free(d->host);
    }
    if (d->e0)
        blco_cuda_event_destroy(d->ctx, d->e0);
    if (d->e1)
        blco_cuda_event_destroy(d->ctx, d->e1);
    blco_cuda_free(d->ctx, d->dmem, d->dbytes);
    free(d);
}

extern "C" int blco_cuda_dense_open(blco_cuda_t *ctx, int rank, blco_cuda_dense_t **out,
                                    blco_diag_t *diag)
{
    *out = NULL;
    if (!ctx || rank < 1 || rank > BLCO_CUDA_DENSE_MAX_RANK)
        return blco_diag_set(diag, 0, -EINVAL, "the device's dense steps take ranks 1..%d, not %d",
                             BLCO_CUDA_DENSE_MAX_RANK, rank);
    blco_cuda_dense_t *d = (blco_cuda_dense_t *)calloc(1, sizeof *d);
    if (!d)
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    d->ctx = ctx;
    d->rank = rank;
    d->dbytes = dev_doubles(rank) * 8;
    d->hbytes = (host_doubles(rank) * 8 + 4095) & ~4095ull;
    int err = blco_cuda_alloc(ctx, d->dbytes, (void **)&d->dmem, diag);
    if (err < 0) {
        d->dmem = NULL;
        blco_cuda_dense_close(d);
        return err;
    }
    if (posix_memalign((void **)&d->host, 4096, d->hbytes) != 0) {
        d->host = NULL;
        blco_cuda_dense_close(d);
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    }
    if ((err = blco_cuda_host_register(ctx, d->host, d->hbytes)) < 0) {
        const uint64_t hbytes = d->hbytes;
        free(d->host);
        d->host = NULL;
        blco_cuda_dense_close(d);
        return blco_diag_set(diag, 0, err == -ENOMEM ? -BLCO_ECUDA : err,
                             "page-locking the dense step's buffers (%llu bytes): %s",
                             (unsigned long long)hbytes,
                             err == -ENOMEM ? "CUDA refused it (out of memory: the system may "
                                              "limit page-locked memory, e.g. ulimit -l or a "
                                              "container's memory limit)"
                                            : blco_strerror(err));
    }
    if ((err = blco_cuda_event_create(ctx, (void **)&d->e0)) < 0 ||
        (err = blco_cuda_event_create(ctx, (void **)&d->e1)) < 0) {
        blco_cuda_dense_close(d);
        return blco_diag_set(diag, 0, err, "events for the dense steps: %s",
                             err == -BLCO_EDEVMEM ? "CUDA ran out of device memory "
                                                    "(cudaErrorMemoryAllocation)"
                                                  : blco_strerror(err));
    }
    *out = d;
    return 0;
}

extern "C" double blco_cuda_dense_kernel_seconds(const blco_cuda_dense_t *d)
{
    return d ? d->kernel_ms * 1e-3 : 0;
}

extern "C" void blco_cuda_dense_bytes_moved(const blco_cuda_dense_t *d, uint64_t *h2d,
                                            uint64_t *d2h)
{
    *h2d = d ? d->h2d : 0;
    *d2h = d ? d->d2h : 0;
}

extern "C" int blco_cuda_dense_run(blco_cuda_dense_t *d, const blco_cuda_dense_step_t *s,
                                   void *stream, blco_diag_t *diag)
{
    if (!d || !s || !s->m || !s->colstat || !s->gram)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_dense_run: bad arguments");
    const int R = d->rank;
    const uint64_t T = tri_count(R), w = 2 * (uint64_t)R + T;
    int err = blco_cuda_use(d->ctx, diag);
    if (err < 0)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(d->ctx));
    double *df = d->dmem, *din = df + (uint64_t)R * R, *dres = din + T + 2 * (uint64_t)R;
    double *dpart = dres + w;
    double *hin = d->host, *hres = hin + T + 2 * (uint64_t)R;
    dn_args a;
    memset(&a, 0, sizeof a);
    a.m = s->m;
    a.a = s->a;
    a.rows = s->rows;
    a.rank = R;
    a.stat = s->stat;
    a.want_dot = s->dot != NULL;
    // What goes to the device: F's triangle and divisor, or the column multipliers.
    uint64_t nin = 0;
    if (s->ftri) {
        memcpy(hin, s->ftri, T * 8);
        nin = T;
        if (s->fdiv) {
            memcpy(hin + T, s->fdiv, (size_t)R * 8);
            nin += R;
        }
    } else if (s->colmul) {
        memcpy(hin, s->colmul, (size_t)R * 8);
        nin = R;
    }
    if (nin) {
        DK(cudaMemcpyAsync(din, hin, nin * 8, cudaMemcpyHostToDevice, st));
        d->h2d += nin * 8;
    }
    DK(cudaEventRecord(d->e0, st));
    if (s->ftri) {
        BLCO_LAUNCH(dn_expand, dim3((unsigned)(((uint64_t)R * R + 255) / 256)), dim3(256), 0, st,
                    (const double *)din, s->fdiv ? (const double *)(din + T) : (const double *)NULL,
                    R, df);
        DK_LAUNCHED("dn_expand");
        a.f = df;
    } else {
        a.colmul = s->colmul ? din : NULL;
    }
    {
        int tr = (int)(DN_SMEM / (16u * (unsigned)R));
        tr = tr < 1 ? 1 : tr > 64 ? 64 : tr;
        a.tile_rows = tr;
        a.ntiles = (s->rows + (uint64_t)tr - 1) / (uint64_t)tr;
        const unsigned nb = (unsigned)(a.ntiles < DN_MAX_BLOCKS ? (a.ntiles ? a.ntiles : 1)
                                                                : DN_MAX_BLOCKS);
        a.pcol = dpart;
        a.pdot = dpart + (uint64_t)nb * R;
        a.pgram = dpart + 2 * (uint64_t)nb * R;
        const size_t smem = (size_t)2 * tr * R * 8;
        const int gk = (int)DN_GK_OF(R);
        if (gk <= 1)
            BLCO_LAUNCH((dn_kernel<1>), dim3(nb), dim3(DN_THREADS), smem, st, a);
        else if (gk <= 3)
            BLCO_LAUNCH((dn_kernel<3>), dim3(nb), dim3(DN_THREADS), smem, st, a);
        else if (gk <= 9)
            BLCO_LAUNCH((dn_kernel<9>), dim3(nb), dim3(DN_THREADS), smem, st, a);
        else
            BLCO_LAUNCH((dn_kernel<33>), dim3(nb), dim3(DN_THREADS), smem, st, a);
        DK_LAUNCHED("dn_kernel");
        const unsigned rb = (unsigned)((w + 255) / 256);
        BLCO_LAUNCH(dn_reduce, dim3(rb), dim3(256), 0, st, (const double *)a.pcol,
                    (const double *)a.pdot, (const double *)a.pgram, R, nb, s->stat, dres);
        DK_LAUNCHED("dn_reduce");
    }
    DK(cudaEventRecord(d->e1, st));
    // Back: the column statistics, the inner products when asked, the Gram's triangle.
    DK(cudaMemcpyAsync(hres, dres, (size_t)R * 8, cudaMemcpyDeviceToHost, st));
    DK(cudaMemcpyAsync(hres + 2 * (uint64_t)R, dres + 2 * (uint64_t)R, T * 8,
                       cudaMemcpyDeviceToHost, st));
    d->d2h += (R + T) * 8;
    if (s->dot) {
        DK(cudaMemcpyAsync(hres + R, dres + R, (size_t)R * 8, cudaMemcpyDeviceToHost, st));
        d->d2h += (uint64_t)R * 8;
    }
    DK(cudaStreamSynchronize(st));
    {
        float ms = 0;
        DK(cudaEventElapsedTime(&ms, d->e0, d->e1));
        d->kernel_ms += ms;
    }
    memcpy(s->colstat, hres, (size_t)R * 8);
    if (s->dot)
        memcpy(s->dot, hres + R, (size_t)R * 8);
    {
        const double *t = hres + 2 * (uint64_t)R;
        for (int p = 0; p < R; p++)
            for (int q = p; q < R; q++) {
                const double x = *t++;
                s->gram[(size_t)p * R + q] = x;
                s->gram[(size_t)q * R + p] = x;
            }
    }
    return 0;
fail:
    (void)cudaStreamSynchronize(st);
    return err;
}

extern "C" int blco_cuda_fixed_add(blco_cuda_t *ctx, unsigned long long *out,
                                   const unsigned long long *in, uint64_t n, void *stream,
                                   blco_diag_t *diag)
{
    int err = blco_cuda_use(ctx, diag);
    if (err < 0 || !n)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    const uint64_t want = (n + 255) / 256;
    BLCO_LAUNCH(dn_fixed_add, dim3((unsigned)(want < 1024 ? want : 1024)), dim3(256), 0, st, out,
                in, n);
    DK_LAUNCHED("dn_fixed_add");
    return 0;
fail:
    return err;
}

extern "C" int blco_cuda_maxabs(blco_cuda_t *ctx, const double *a, uint64_t n,
                                unsigned long long *tmp, void *stream, double *out,
                                blco_diag_t *diag)
{
    int err = blco_cuda_use(ctx, diag);
    if (err < 0)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    unsigned long long bits = 0;
    const uint64_t want = (n + 255) / 256;
    DK(cudaMemsetAsync(tmp, 0, 8, st));
    if (n) {
        BLCO_LAUNCH(dn_maxabs, dim3((unsigned)(want < 1024 ? want : 1024)), dim3(256), 0, st, a, n,
                    tmp);
        DK_LAUNCHED("dn_maxabs");
    }
    DK(cudaStreamSynchronize(st));
    DK(cudaMemcpy(&bits, tmp, 8, cudaMemcpyDeviceToHost)); /* 8 bytes, after the kernel */
    memcpy(out, &bits, 8);
    return 0;
fail:
    (void)cudaStreamSynchronize(st);
    return err;
}

extern "C" int blco_cuda_fixed_to_double(blco_cuda_t *ctx, double *out,
                                         const unsigned long long *in, uint64_t n,
                                         double inv_scale, void *stream, blco_diag_t *diag)
{
    int err = blco_cuda_use(ctx, diag);
    if (err < 0 || !n)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    const uint64_t want = (n + 255) / 256;
    BLCO_LAUNCH(dn_fixed_to_double, dim3((unsigned)(want < 1024 ? want : 1024)), dim3(256), 0, st,
                out, in, n, inv_scale);
    DK_LAUNCHED("dn_fixed_to_double");
    return 0;
fail:
    return err;
}

extern "C" int blco_cuda_add(blco_cuda_t *ctx, double *out, const double *in, uint64_t n,
                             void *stream, blco_diag_t *diag)
{
    int err = blco_cuda_use(ctx, diag);
    if (err < 0 || !n)
        return err;
    cudaStream_t st = (cudaStream_t)(stream ? stream : blco_cuda_own_stream(ctx));
    const uint64_t want = (n + 255) / 256;
    BLCO_LAUNCH(dn_add, dim3((unsigned)(want < 1024 ? want : 1024)), dim3(256), 0, st, out, in, n);
    DK_LAUNCHED("dn_add");
    return 0;
fail:
    return err;
}
