/* The small dense algebra of CP-ALS: LAPACK Cholesky with a pseudo-inverse fallback for the
 * R x R systems, and the passes over tall factor matrices (solve with its Gram and column
 * statistics as BLAS-3 on cache-sized blocks, scaling, inner product; the per-row reference
 * kept for tests and benchmarks) with reductions that do not depend on the thread count. */
#include <errno.h>
#include <float.h>
#include <assert.h>
#include <math.h>
#include <string.h>

#include "blco_internal.h"
#include "cpd_dense.h"
#include "vec.h"

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* LAPACK (Fortran ABI: arguments by reference, a hidden length after the character
 * arguments). liblapack comes from meson's lapack dependency. */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info,
                    size_t uplo_len);
extern void dpocon_(const char *uplo, const int *n, const double *a, const int *lda,
                    const double *anorm, double *rcond, double *work, int *iwork, int *info,
                    size_t uplo_len);
extern void dpotri_(const char *uplo, const int *n, double *a, const int *lda, int *info,
                    size_t uplo_len);
extern void dgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
                   const double *alpha, const double *a, const int *lda, const double *b,
                   const int *ldb, const double *beta, double *c, const int *ldc, size_t transa_len,
                   size_t transb_len);
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info, size_t jobz_len,
                   size_t uplo_len);

/* OpenBLAS, when that is the LAPACK linked, runs even 16 x 16 factorizations on its own
 * thread pool, whose threads then spin and take the cores from the OpenMP passes that
 * follow (measured: 15 ms more per iteration at rank 16 on 2 cores, MTTKRPs slower too).
 * The calls here are tiny or made per block from inside the OpenMP passes (which thread
 * them, with blocks fixed by the shape so the bits do not depend on the thread count), so
 * they run on one thread; the caller's setting is restored.
 * Weak: absent with another LAPACK. Not thread-safe against other threads changing it. */
extern int openblas_get_num_threads(void) __attribute__((weak));
extern void openblas_set_num_threads(int n) __attribute__((weak));

static int blas_single_begin(void)
{
    if (!openblas_get_num_threads || !openblas_set_num_threads)
        return 0;
    int n = openblas_get_num_threads();
    if (n > 1)
        openblas_set_num_threads(1);
    return n;
}

static void blas_single_end(int saved)
{
    if (saved > 1)
        openblas_set_num_threads(saved);
}

/* Row chunks of the reductions: at least CHUNK_MIN_ROWS rows each, at most MAX_CHUNKS of
 * them, and their R x R partials within PARTIAL_CAP doubles. Fixed by rows and rank only. */
#define MAX_CHUNKS 256
#define CHUNK_MIN_ROWS 64
#define PARTIAL_CAP (1u << 22)

/* Extra LAPACK workspace per row of V for dsyev's blocked tridiagonal reduction. */
#define SYEV_WORK_PER_ROW 66

static int max_chunks(int rank)
{
    uint64_t cap = PARTIAL_CAP / ((uint64_t)rank * (uint64_t)rank);
    return cap < 1 ? 1 : cap > MAX_CHUNKS ? MAX_CHUNKS : (int)cap;
}

static int num_chunks(uint64_t rows, int rank)
{
    uint64_t n = (rows + CHUNK_MIN_ROWS - 1) / CHUNK_MIN_ROWS;
    int cap = max_chunks(rank);
    return n < 1 ? 1 : n > (uint64_t)cap ? cap : (int)n;
}

static void chunk_range(uint64_t rows, int nchunks, int c, uint64_t *lo, uint64_t *hi)
{
    uint64_t size = (rows + (uint64_t)nchunks - 1) / (uint64_t)nchunks;
    *lo = BLCO_MIN(rows, (uint64_t)c * size);
    *hi = BLCO_MIN(rows, *lo + size);
}

/* Threads for a pass over rows x rank doubles: one below SERIAL_DOUBLES, where starting
 * a team costs more than the pass. The chunks, and so the results, are the same. */
#define SERIAL_DOUBLES (1u << 15)

static int team(int threads, int nchunks, uint64_t rows, int rank)
{
#if HAVE_OPENMP
    int nt = blco_threads_resolve(threads);
    if (rows * (uint64_t)rank < SERIAL_DOUBLES)
        return 1;
    return nt < nchunks ? nt : nchunks;
#else
    (void)threads, (void)nchunks, (void)rows, (void)rank;
    return 1;
#endif
}

size_t blco_cpd_partial_doubles(int rank)
{
    /* per chunk an R x R Gram, R column statistics and R inner products, then R more */
    return (size_t)max_chunks(rank) * ((size_t)rank * (size_t)rank + 2 * (size_t)rank) +
           (size_t)rank;
}

size_t blco_cpd_factor_doubles(int rank)
{
    return (size_t)rank * (size_t)rank;
}

size_t blco_cpd_factor_work_doubles(int rank)
{
    /* copy of V, eigenvalues, dsyev work, dpocon work (3R) and iwork (R ints) */
    return (size_t)rank * (size_t)rank + (size_t)rank * (SYEV_WORK_PER_ROW + 5);
}

/* The pseudo-inverse from V = Q diag(w) Q^T: sum over w_j above the cutoff of
 * q_j q_j^T / w_j, written row major into p. */
static int pseudo_inverse(const double *v, int rank, double *p, double *work)
{
    const int n = rank;
    double *q = work, *w = work + (size_t)n * n, *lw = w + n;
    const int lwork = n * SYEV_WORK_PER_ROW;
    int info = 0;
    memcpy(q, v, sizeof(double) * (size_t)n * n);
    dsyev_("V", "L", &n, q, &n, w, lw, &lwork, &info, 1, 1);
    if (info != 0)
        return -EINVAL;
    double wmax = w[n - 1]; /* ascending */
    double cutoff = (double)n * DBL_EPSILON * wmax;
    memset(p, 0, sizeof(double) * (size_t)n * n);
    if (!(wmax > 0))
        return 0;
    for (int j = 0; j < n; j++) {
        if (!(w[j] > cutoff))
            continue;
        const double *qj = q + (size_t)j * n; /* column j, column major */
        double inv = 1.0 / w[j];
        for (int a = 0; a < n; a++) {
            double s = qj[a] * inv;
            for (int b = 0; b < n; b++)
                p[(size_t)a * n + b] += s * qj[b];
        }
    }
    return 0;
}

static int factor(const double *v, int rank, double *f, double *work, int *pinv);

int blco_cpd_factor(const double *v, int rank, double *f, double *work, int *pinv)
{
    int saved = blas_single_begin();
    int err = factor(v, rank, f, work, pinv);
    blas_single_end(saved);
    return err;
}

static int factor(const double *v, int rank, double *f, double *work, int *pinv)
{
    const int n = rank;
    const size_t nn = (size_t)n * n;
    double *rwork = work + nn + n;
    int *iwork = (int *)(rwork + 3 * (size_t)n);
    int info = 0;
    *pinv = 0;

    /* The 1-norm of V for the condition estimate. */
    double anorm = 0;
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < n; i++)
            s += fabs(v[(size_t)i * n + j]);
        anorm = s > anorm ? s : anorm;
    }
    memcpy(f, v, sizeof(double) * nn);
    dpotrf_("L", &n, f, &n, &info, 1);
    if (info < 0)
        return -EINVAL;
    if (info == 0 && anorm > 0) {
        double rcond = 0;
        dpocon_("L", &n, f, &n, &anorm, &rcond, rwork, iwork, &info, 1);
        if (info < 0)
            return -EINVAL;
        if (rcond >= (double)n * DBL_EPSILON) {
            /* V^-1 from the Cholesky factor: the rows are then solved by a product with
             * a full R x R matrix, which vectorizes, where substitution per row is a
             * chain of dependent operations. Accurate to about cond(V) * eps, as the
             * solve is. */
            dpotri_("L", &n, f, &n, &info, 1);
            if (info == 0) {
                for (int j = 0; j < n; j++) /* mirror the lower triangle, (i, j) at i + j n */
                    for (int i = j + 1; i < n; i++)
                        f[j + (size_t)i * n] = f[i + (size_t)j * n];
                return 0;
            }
        }
    }
    *pinv = 1;
    return pseudo_inverse(v, rank, f, work);
}

/* One row: a = m P, P = V^-1 or its pseudo-inverse (symmetric). */
static inline void solve_row(const double *restrict f, int n, const double *restrict m,
                             double *restrict a)
{
    for (int j = 0; j < n; j++)
        a[j] = 0;
    for (int i = 0; i < n; i++) {
        const double mi = m[i];
        const double *restrict pi = f + (size_t)i * n;
        for (int j = 0; j < n; j++)
            a[j] += mi * pi[j];
    }
}

void blco_cpd_solve_rows_ref(const double *f, int rank, const double *m, uint64_t rows, double *a,
                             int stat, double *colstat, double *partial, int threads)
{
    const int nc = num_chunks(rows, rank);
    const int nt = team(threads, nc, rows, rank);
    (void)nt;
#if HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
#endif
    for (int c = 0; c < nc; c++) {
        uint64_t lo, hi;
        chunk_range(rows, nc, c, &lo, &hi);
        double *restrict st = partial + (size_t)c * rank;
        for (int r = 0; r < rank; r++)
            st[r] = 0;
        for (uint64_t i = lo; i < hi; i++) {
            double *restrict ai = a + i * (uint64_t)rank;
            solve_row(f, rank, m + i * (uint64_t)rank, ai);
            if (stat == BLCO_CPD_STAT_SUMSQ)
                for (int r = 0; r < rank; r++)
                    st[r] += ai[r] * ai[r];
            else
                for (int r = 0; r < rank; r++)
                    st[r] = fmax(st[r], fabs(ai[r]));
        }
    }
    for (int r = 0; r < rank; r++)
        colstat[r] = 0;
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < rank; r++) {
            double x = partial[(size_t)c * rank + r];
            colstat[r] = stat == BLCO_CPD_STAT_SUMSQ ? colstat[r] + x : fmax(colstat[r], x);
        }
}

void blco_cpd_scale_gram_ref(double *a, uint64_t rows, int rank, const double *scale, double *gram,
                             double *partial, int threads)
{
    const int nc = num_chunks(rows, rank);
    const int nt = team(threads, nc, rows, rank);
    const size_t nn = (size_t)rank * rank;
    (void)nt;
    double *inv = partial + (size_t)nc * nn; /* after the chunks' partials */
    for (int r = 0; r < rank; r++)
        inv[r] = scale && scale[r] > 0 ? 1.0 / scale[r] : 1.0;
#if HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
#endif
    for (int c = 0; c < nc; c++) {
        uint64_t lo, hi;
        chunk_range(rows, nc, c, &lo, &hi);
        double *restrict g = partial + (size_t)c * nn;
        memset(g, 0, sizeof(double) * nn);
        for (uint64_t i = lo; i < hi; i++) {
            double *restrict ai = a + i * (uint64_t)rank;
            if (scale)
                for (int r = 0; r < rank; r++)
                    ai[r] *= inv[r];
            /* The whole square: rows of fixed length vectorize, a triangle's do not. */
            for (int p = 0; p < rank; p++) {
                const double x = ai[p];
                double *restrict gp = g + (size_t)p * rank;
                for (int q = 0; q < rank; q++)
                    gp[q] += x * ai[q];
            }
        }
    }
    memset(gram, 0, sizeof(double) * nn);
    for (int c = 0; c < nc; c++)
        for (size_t k = 0; k < nn; k++)
            gram[k] += partial[(size_t)c * nn + k];
    for (int p = 0; p < rank; p++) /* exactly symmetric, whatever the rounding */
        for (int q = 0; q < p; q++)
            gram[(size_t)p * rank + q] = gram[(size_t)q * rank + p];
}

/* ---- BLAS-3 passes ---- */

/* Rows per block: a block of A (and of M) within BLOCK_BYTES, so that what follows the
 * product (the column statistics) and the scaling (the Gram update) reads the block from
 * cache. Fixed by the rank only. */
#define BLOCK_BYTES (64u << 10)

static uint64_t block_rows(int rank)
{
    uint64_t b = BLOCK_BYTES / ((uint64_t)rank * sizeof(double));
    return b < 8 ? 8 : b;
}

/* g (n x n, column major) += A_b^T A_b for a block of k rows (A_b^T is n x k column major).
 * A GEMM of the whole square, not SYRK: with n = 8..64 and k in the hundreds, OpenBLAS's
 * DSYRK ran 3x slower than its DGEMM of twice the flops (one thread, 600000 x 16). */
static void gram_update(const double *ab, int n, int k, double *g)
{
    const double one = 1.0;
    dgemm_("N", "T", &n, &n, &k, &one, ab, &n, ab, &n, &one, g, &n, 1, 1);
}

/* Ranks up to 32 with AVX-512: the block's product, column statistics and Gram by
 * register-blocked loops instead of GEMM calls and a statistics loop. The pass over a
 * 600000 x 16 factor on 2 threads is bound by FMAs, not memory (its 154 MB move in under
 * 3 ms here); the loops keep four rows' products and the Gram's upper triangle (24
 * registers at rank 16) in registers. perf/mttkrp_modes: that mode's dense step 1.22x
 * faster in blco-cpd, 1.1-1.2x on 10000-64193-row modes. Ranks other than 8 and 16 take
 * the same loops with the width compiled in and the last vector cut to its lanes (at ranks
 * 10 and 12 GEMM's pass over ipython's 477178-row token mode took 1.7-1.9x as long as the
 * loops' at rank 16: perf/results/README.md, 2026-11-27); ranks 17 to 32 too, their Gram
 * in strips (1.5-1.9x GEMM's speed there). Ranks over 32, or no AVX-512: the GEMMs.
 * blco_cpd_scale_gram takes the same Gram loop under the same conditions, so the two
 * passes give the same bits on the same factor (a resumed run rebuilds its Grams with
 * it). */
#if defined(__AVX512F__)
#define FUSED_RANKS 1
#define FUSED_MAX 32

/* Vector v of the NV vectors of a row W wide at p: the last one cut to its lanes where 8
 * does not divide W (vload_n, vstore_n: the lanes past them read as 0 and are not
 * written); W is a constant, so the choice folds away. */
static inline __attribute__((always_inline)) __m512d ld_w(const double *p, int v, const int W)
{
    const int NV = (W + 7) / 8;
    return v < NV - 1 ? _mm512_loadu_pd(p + 8 * v) : (__m512d)vload_n(p + 8 * v, W - 8 * v);
}

static inline __attribute__((always_inline)) void st_w(double *p, int v, __m512d x, const int W)
{
    const int NV = (W + 7) / 8;
    if (v < NV - 1)
        _mm512_storeu_pd(p + 8 * v, x);
    else
        vstore_n(p + 8 * v, (vd_t)x, W - 8 * v);
}

/* ab[i] = mb[i] F for k rows of width W (1 to 32): a[c] = sum_j m[j] f[j W + c], the
 * product dgemm_ computes in blco_cpd_solve_gram. Four rows at a time: eight independent
 * sums rather than two chains of W dependent FMAs. The column statistics (st) and the
 * inner products with M (dt, may be NULL) are taken from the registers: as a loop over the
 * block after it they cost a third of the pass (a store-to-load chain per row). */
static inline __attribute__((always_inline)) void
solve_block_w(const double *restrict f, const double *restrict mb, int k, double *restrict ab,
              int stat, double *restrict st, double *restrict dt, const int W)
{
    const int NV = (W + 7) / 8;
    const __m512d sign = _mm512_set1_pd(-0.0);
    __m512d sv[4], dv[4];
    for (int v = 0; v < NV; v++) {
        sv[v] = ld_w(st, v, W);
        dv[v] = dt ? ld_w(dt, v, W) : _mm512_setzero_pd();
    }
    int i = 0;
    for (; i < k; i += 4) {
        const int nr = k - i < 4 ? k - i : 4;
        const double *m0 = mb + (size_t)i * W;
        __m512d acc[4][4];
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_setzero_pd();
        if (nr == 4) {
            for (int j = 0; j < W; j++) {
                __m512d fj[4];
                for (int v = 0; v < NV; v++) {
                    fj[v] = ld_w(f + (size_t)j * W, v, W);
                    /* In a register: GCC otherwise folds the load into each of the four
                     * FMAs, and the loop is then bound by loads, not FMAs. */
                    __asm__("" : "+v"(fj[v]));
                }
                for (int r = 0; r < 4; r++) {
                    const __m512d b = _mm512_set1_pd(m0[(size_t)r * W + j]);
                    for (int v = 0; v < NV; v++)
                        acc[r][v] = _mm512_fmadd_pd(b, fj[v], acc[r][v]);
                }
            }
        } else {
            for (int r = 0; r < nr; r++)
                for (int j = 0; j < W; j++) {
                    const __m512d b = _mm512_set1_pd(m0[(size_t)r * W + j]);
                    const double *fr = f + (size_t)j * W;
                    for (int v = 0; v < NV; v++)
                        acc[r][v] = _mm512_fmadd_pd(b, ld_w(fr, v, W), acc[r][v]);
                }
        }
        for (int r = 0; r < nr; r++)
            for (int v = 0; v < NV; v++) {
                const __m512d a = acc[r][v];
                st_w(ab + (size_t)(i + r) * W, v, a, W);
                if (stat == BLCO_CPD_STAT_SUMSQ)
                    sv[v] = _mm512_fmadd_pd(a, a, sv[v]);
                else
                    sv[v] = _mm512_max_pd(sv[v], _mm512_andnot_pd(sign, a));
                if (dt)
                    dv[v] = _mm512_fmadd_pd(ld_w(m0 + (size_t)r * W, v, W), a, dv[v]);
            }
    }
    for (int v = 0; v < NV; v++) {
        st_w(st, v, sv[v], W);
        if (dt)
            st_w(dt, v, dv[v], W);
    }
}

/* g[c + p W] += sum over the k rows of a[p] a[c], for c >= p only (the triangle
 * reduce_gram reads): rows p < 8 keep both halves, rows p >= 8 the upper half. */
static inline __attribute__((always_inline)) void gram_block_w(const double *restrict ab, int k,
                                                               double *restrict g, const int W)
{
    const int NV = (W + 7) / 8;
    const int P1 = W < 8 ? W : 8; /* rows with a low half */
    __m512d lo[8], hi[8]; /* lo[p]: g[p W + 0..7]; hi[p]: g[p W + 8..W-1] (p < 8), or of p + 8 */
    for (int p = 0; p < P1; p++) {
        lo[p] = ld_w(g + (size_t)p * W, 0, W);
        if (NV == 2)
            hi[p] = ld_w(g + (size_t)p * W, 1, W);
    }
    __m512d up[8];
    for (int p = 0; p < W - 8; p++)
        up[p] = ld_w(g + (size_t)(p + 8) * W, 1, W);
    for (int i = 0; i < k; i++) {
        const double *ai = ab + (size_t)i * W;
        const __m512d a0 = ld_w(ai, 0, W);
        const __m512d a1 = NV == 2 ? ld_w(ai, 1, W) : a0;
        for (int p = 0; p < P1; p++) {
            const __m512d b = _mm512_set1_pd(ai[p]);
            lo[p] = _mm512_fmadd_pd(b, a0, lo[p]);
            if (NV == 2)
                hi[p] = _mm512_fmadd_pd(b, a1, hi[p]);
        }
        for (int p = 0; p < W - 8; p++)
            up[p] = _mm512_fmadd_pd(_mm512_set1_pd(ai[8 + p]), a1, up[p]);
    }
    for (int p = 0; p < P1; p++) {
        st_w(g + (size_t)p * W, 0, lo[p], W);
        if (NV == 2)
            st_w(g + (size_t)p * W, 1, hi[p], W);
    }
    for (int p = 0; p < W - 8; p++)
        st_w(g + (size_t)(p + 8) * W, 1, up[p], W);
}

/* The same for widths 17 to 32, whose upper triangle does not fit the registers: in strips
 * of four rows p, each a pass over the block (in L1 or L2 by then), keeping the strip's
 * column vectors from p's own on (4 x 4 registers at most). */
static inline __attribute__((always_inline)) void gram_block_strips(const double *restrict ab,
                                                                    int k, double *restrict g,
                                                                    const int W)
{
    const int NV = (W + 7) / 8;
#pragma GCC unroll 8
    for (int s0 = 0; s0 < W; s0 += 4) {
        const int v0 = s0 / 8, nr = W - s0 < 4 ? W - s0 : 4;
        __m512d acc[4][4];
        for (int r = 0; r < nr; r++)
            for (int v = v0; v < NV; v++)
                acc[r][v] = ld_w(g + (size_t)(s0 + r) * W, v, W);
        for (int i = 0; i < k; i++) {
            const double *ai = ab + (size_t)i * W;
            __m512d a[4];
            for (int v = v0; v < NV; v++)
                a[v] = ld_w(ai, v, W);
            for (int r = 0; r < nr; r++) {
                const __m512d b = _mm512_set1_pd(ai[s0 + r]);
                for (int v = v0; v < NV; v++)
                    acc[r][v] = _mm512_fmadd_pd(b, a[v], acc[r][v]);
            }
        }
        for (int r = 0; r < nr; r++)
            for (int v = v0; v < NV; v++)
                st_w(g + (size_t)(s0 + r) * W, v, acc[r][v], W);
    }
}

/* One case per width: the loops above with W compiled in. */
#define FUSED_CASES(CALL)                                                                          \
    case 1: CALL(1); break;                                                                        \
    case 2: CALL(2); break;                                                                        \
    case 3: CALL(3); break;                                                                        \
    case 4: CALL(4); break;                                                                        \
    case 5: CALL(5); break;                                                                        \
    case 6: CALL(6); break;                                                                        \
    case 7: CALL(7); break;                                                                        \
    case 8: CALL(8); break;                                                                        \
    case 9: CALL(9); break;                                                                        \
    case 10: CALL(10); break;                                                                      \
    case 11: CALL(11); break;                                                                      \
    case 12: CALL(12); break;                                                                      \
    case 13: CALL(13); break;                                                                      \
    case 14: CALL(14); break;                                                                      \
    case 15: CALL(15); break;                                                                      \
    case 16: CALL(16); break;                                                                      \
    case 17: CALL(17); break;                                                                      \
    case 18: CALL(18); break;                                                                      \
    case 19: CALL(19); break;                                                                      \
    case 20: CALL(20); break;                                                                      \
    case 21: CALL(21); break;                                                                      \
    case 22: CALL(22); break;                                                                      \
    case 23: CALL(23); break;                                                                      \
    case 24: CALL(24); break;                                                                      \
    case 25: CALL(25); break;                                                                      \
    case 26: CALL(26); break;                                                                      \
    case 27: CALL(27); break;                                                                      \
    case 28: CALL(28); break;                                                                      \
    case 29: CALL(29); break;                                                                      \
    case 30: CALL(30); break;                                                                      \
    case 31: CALL(31); break;                                                                      \
    case 32: CALL(32); break;

#else
#define FUSED_RANKS 0
#endif

/* Whether a pass over a factor of `rows` rows takes the AVX-512 loops: from one block of
 * rows (below, the pass costs microseconds either way, and small factors keep the GEMM's
 * rounding: a 2 x 3 x 50 test at rank 8, fit exactly 1 and V singular, lost 1.5e-7 of fit
 * in an iteration with the Gram summed row by row). The solve and blco_cpd_scale_gram
 * both ask here, so their Grams are the same bits. */
static int use_loops(int rank, uint64_t rows)
{
#if FUSED_RANKS
    return rank >= 1 && rank <= FUSED_MAX && rows >= block_rows(rank);
#else
    (void)rank, (void)rows;
    return 0;
#endif
}

/* ab = mb F for a block of k rows, with the column statistics (st) and the inner products
 * with M (dt, may be NULL) of the block added: the loops, or a GEMM and a pass over the
 * block while it is in cache. Row major A_b = M_b F is, column major, A_b^T = F^T M_b^T:
 * f's row-major array read column major is F^T, so f need not be symmetric. */
static void solve_block(const double *f, int n, const double *mb, int k, double *ab, int stat,
                        double *st, double *dt, int loops)
{
#if FUSED_RANKS
    if (loops) {
#define SOLVE_W(W) solve_block_w(f, mb, k, ab, stat, st, dt, W)
        switch (n) { FUSED_CASES(SOLVE_W) }
#undef SOLVE_W
        return;
    }
#endif
    (void)loops;
    const double one = 1.0, zero = 0.0;
    dgemm_("N", "N", &n, &k, &n, &one, f, &n, mb, &n, &zero, ab, &n, 1, 1);
    for (int i = 0; i < k; i++) {
        const double *restrict ai = ab + (size_t)i * n;
        if (stat == BLCO_CPD_STAT_SUMSQ)
            for (int r = 0; r < n; r++)
                st[r] += ai[r] * ai[r];
        else
            for (int r = 0; r < n; r++) {
                double x = fabs(ai[r]);
                st[r] = x > st[r] ? x : st[r];
            }
        if (dt) {
            const double *restrict mi = mb + (size_t)i * n;
            for (int r = 0; r < n; r++)
                dt[r] += mi[r] * ai[r];
        }
    }
}

/* g += the block's Gram: the loop (the triangle reduce_gram reads), or the GEMM. */
static void gram_block(const double *ab, int n, int k, double *g, int loops)
{
#if FUSED_RANKS
    if (loops) {
#define GRAM_W(W) (W) <= 16 ? gram_block_w(ab, k, g, (W) <= 16 ? (W) : 16) : gram_block_strips(ab, k, g, W)
        switch (n) { FUSED_CASES(GRAM_W) }
#undef GRAM_W
        return;
    }
#endif
    (void)loops;
    gram_update(ab, n, k, g);
}

/* Sums the chunks' lower triangles (column major: (i, j) at i + j R, i >= j) in chunk
 * order into gram, both triangles. */
static void reduce_gram(const double *partial, size_t stride, int nc, int rank, double *gram)
{
    const size_t nn = (size_t)rank * rank;
    memset(gram, 0, sizeof(double) * nn);
    for (int c = 0; c < nc; c++) {
        const double *g = partial + (size_t)c * stride;
        for (int j = 0; j < rank; j++)
            for (int i = j; i < rank; i++)
                gram[i + (size_t)j * rank] += g[i + (size_t)j * rank];
    }
    for (int j = 0; j < rank; j++)
        for (int i = j + 1; i < rank; i++)
            gram[j + (size_t)i * rank] = gram[i + (size_t)j * rank];
}

/* Factors from this size on are written by non-temporal stores (larger than what a core's
 * share of the last-level cache keeps for the next MTTKRP). */
#define STREAM_MIN_BYTES (16u << 20)

/* dst[0..n) = src[0..n) by non-temporal stores where the CPU has them (dst is written,
 * never read here: its cache lines need not be fetched first), else memcpy. */
static void stream_out(double *dst, const double *src, size_t n)
{
#if defined(__SSE2__) && defined(__x86_64__)
    size_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15); i++)
        _mm_stream_si64((long long *)(dst + i), *(const long long *)(src + i));
#if defined(__AVX512F__)
    for (; i + 2 <= n && ((uintptr_t)(dst + i) & 63); i += 2)
        _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
    for (; i + 8 <= n; i += 8) /* whole lines in one store each */
        _mm512_stream_pd(dst + i, _mm512_loadu_pd(src + i));
#endif
    for (; i + 2 <= n; i += 2)
        _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
    for (; i < n; i++)
        _mm_stream_si64((long long *)(dst + i), *(const long long *)(src + i));
#else
    memcpy(dst, src, n * sizeof(double));
#endif
}

/* Orders the non-temporal stores before what follows (other threads read A after). */
static void stream_fence(void)
{
#if defined(__SSE2__) && defined(__x86_64__)
    _mm_sfence();
#endif
}

/* The product and the Gram in one sweep: each block of A = M f is made by GEMM, then its
 * column statistics, its inner products with M and its update of the chunk's Gram read it
 * from cache. The chunks and blocks are those of blco_cpd_scale_gram, so the Gram is the
 * same bits as that pass would give on the A written here. */
void blco_cpd_solve_gram(const double *f, int rank, const double *m, uint64_t rows, double *a,
                         int stat, double *colstat, double *gram, double *dot, double *partial,
                         int threads)
{
    const int nc = num_chunks(rows, rank);
    const int nt = team(threads, nc, rows, rank);
    const size_t nn = (size_t)rank * rank, stride = nn + 2 * (size_t)rank;
    const uint64_t brows = block_rows(rank);
    const int stream = rows * (uint64_t)rank * sizeof(double) >= STREAM_MIN_BYTES;
    const int loops = use_loops(rank, rows);
    const int inplace = a == m; /* every block through the scratch block */
    assert(!inplace || rank <= BLCO_CPD_INPLACE_MAX_RANK);
    (void)nt;
    int saved = blas_single_begin();
#if HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
#endif
    for (int c = 0; c < nc; c++) {
        uint64_t lo, hi;
        chunk_range(rows, nc, c, &lo, &hi);
        double *g = partial + (size_t)c * stride;
        double *restrict st = g + nn, *restrict dt = st + rank;
        const int n = rank;
        /* On a factor larger than the caches the block is made here and streamed out to A
         * by stores that do not first read A's lines (a third less memory traffic); a
         * smaller factor is written in place, so that it stays in cache for the MTTKRPs
         * that read it next. */
        double scratch[BLOCK_BYTES / sizeof(double)] __attribute__((aligned(64)));
        memset(g, 0, sizeof(double) * stride);
        for (uint64_t b = lo; b < hi; b += brows) {
            const int k = (int)BLCO_MIN(brows, hi - b);
            const size_t len = (size_t)k * rank;
            double *ab = (stream || inplace) && len <= sizeof scratch / sizeof *scratch
                             ? scratch
                             : a + b * (uint64_t)rank;
            solve_block(f, n, m + b * (uint64_t)rank, k, ab, stat, st, dot ? dt : NULL, loops);
            gram_block(ab, n, k, g, loops);
            if (ab == scratch && stream)
                stream_out(a + b * (uint64_t)rank, scratch, len);
            else if (ab == scratch)
                memcpy(a + b * (uint64_t)rank, scratch, len * sizeof(double));
        }
        if (stream)
            stream_fence();
    }
    blas_single_end(saved);
    for (int r = 0; r < rank; r++)
        colstat[r] = 0;
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < rank; r++) {
            double x = partial[(size_t)c * stride + nn + r];
            colstat[r] = stat == BLCO_CPD_STAT_SUMSQ ? colstat[r] + x : fmax(colstat[r], x);
        }
    for (int r = 0; dot && r < rank; r++) {
        dot[r] = 0;
        for (int c = 0; c < nc; c++)
            dot[r] += partial[(size_t)c * stride + nn + (size_t)rank + r];
    }
    reduce_gram(partial, stride, nc, rank, gram);
}

/* 1 / scale[r] where scale[r] > 0, else 1; returns whether any differs from 1. */
static int inverse_scale(const double *scale, int rank, double *inv)
{
    int any = 0;
    for (int r = 0; r < rank; r++) {
        inv[r] = scale && scale[r] > 0 ? 1.0 / scale[r] : 1.0;
        any |= inv[r] != 1.0;
    }
    return any;
}

void blco_cpd_scale_gram(double *a, uint64_t rows, int rank, const double *scale, double *gram,
                         double *partial, int threads)
{
    const int nc = num_chunks(rows, rank);
    const int nt = team(threads, nc, rows, rank);
    const size_t nn = (size_t)rank * rank, stride = nn + (size_t)rank;
    const uint64_t brows = block_rows(rank);
    double *inv = partial + (size_t)nc * stride; /* after the chunks' partials */
    const int scaled = inverse_scale(scale, rank, inv);
    const int loops = use_loops(rank, rows);
    (void)nt;
    int saved = blas_single_begin();
#if HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
#endif
    for (int c = 0; c < nc; c++) {
        uint64_t lo, hi;
        chunk_range(rows, nc, c, &lo, &hi);
        double *g = partial + (size_t)c * stride;
        const int n = rank;
        memset(g, 0, sizeof(double) * nn);
        for (uint64_t b = lo; b < hi; b += brows) {
            const int k = (int)BLCO_MIN(brows, hi - b);
            double *ab = a + b * (uint64_t)rank;
            if (scaled)
                for (int i = 0; i < k; i++)
                    for (int r = 0; r < rank; r++)
                        ab[(size_t)i * rank + r] *= inv[r];
            gram_block(ab, n, k, g, loops);
        }
    }
    blas_single_end(saved);
    reduce_gram(partial, stride, nc, rank, gram);
}

void blco_cpd_gram_unscale(double *gram, int rank, const double *scale)
{
    for (int p = 0; p < rank; p++) {
        const double ip = scale[p] > 0 ? 1.0 / scale[p] : 1.0;
        for (int q = 0; q < rank; q++) {
            const double iq = scale[q] > 0 ? 1.0 / scale[q] : 1.0;
            gram[(size_t)p * rank + q] = gram[(size_t)p * rank + q] * ip * iq;
        }
    }
}

double blco_cpd_inner(const double *m, const double *a, const double *lambda, uint64_t rows,
                      int rank, double *partial, int threads)
{
    const int nc = num_chunks(rows, rank);
    const int nt = team(threads, nc, rows, rank);
    (void)nt;
#if HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
#endif
    for (int c = 0; c < nc; c++) {
        uint64_t lo, hi;
        chunk_range(rows, nc, c, &lo, &hi);
        double *restrict s = partial + (size_t)c * rank;
        for (int r = 0; r < rank; r++)
            s[r] = 0;
        for (uint64_t i = lo; i < hi; i++)
            for (int r = 0; r < rank; r++)
                s[r] += m[i * (uint64_t)rank + r] * a[i * (uint64_t)rank + r];
    }
    double total = 0;
    for (int r = 0; r < rank; r++) {
        double col = 0;
        for (int c = 0; c < nc; c++)
            col += partial[(size_t)c * rank + r];
        total += lambda[r] * col;
    }
    return total;
}
