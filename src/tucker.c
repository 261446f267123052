/* Tucker decomposition by HOOI over a backend table (the host backend over a TTM-chain
 * callback, or another's, blco_tucker_ops_t): per mode the semi-sparse
 * Y(n) = X x_{m != n} U_m^T, its leading left singular vectors through the eigenvectors of
 * the smaller of its two Gram matrices (LAPACK), the core from the last mode, the fit from
 * ||X||^2 - ||G||^2, and checkpoints a killed run resumes from. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco/labels.h"
#include "blco_internal.h"
#include "vec.h"
#include "ckpt.h"
#include "cpd_dense.h"

/* BLAS and LAPACK, Fortran ABI (both are required dependencies of the build). */
extern void dsyrk_(const char *uplo, const char *trans, const int *n, const int *k,
                   const double *alpha, const double *a, const int *lda, const double *beta,
                   double *c, const int *ldc, size_t, size_t);
extern void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
                   const double *alpha, const double *a, const int *lda, const double *b,
                   const int *ldb, const double *beta, double *c, const int *ldc, size_t, size_t);
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info, size_t, size_t);

/* The Gram matrix handed to dsyev is n x n with 32-bit LAPACK sizes. */
#define GRAM_MAX 46340
/* Extra sketch columns per mode in the HOSVD initialization. */
#define SKETCH_EXTRA 2

void blco_tucker_opts_default(blco_tucker_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->init = BLCO_TUCKER_INIT_HOSVD;
    o->seed = 1;
    o->max_iters = 50;
    o->tol = 1e-5;
}

/* ---- random numbers: splitmix64, Box-Muller ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double gauss(uint64_t *s)
{
    double u1 = ((double)(splitmix(s) >> 11) + 0.5) * 0x1p-53;
    double u2 = (double)(splitmix(s) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- small dense helpers (row major) ---- */

/* Orthonormalizes the columns of A (n x r) by modified Gram-Schmidt, twice; a column that
 * loses its norm is replaced by the first unit vector e_i that is independent of the
 * others. Returns 0, or -EINVAL when r > n.
 *
 * Each step of column j (subtract d times column k, for k < j, twice over) is one sweep
 * over the rows that also sums the next step's dot product (or the norm, after the last
 * step) from the updated values: the same operations in the same order as a sweep for each
 * sum and each update, so the same bits, in half the sweeps over a matrix that is often far
 * larger than the caches (a long mode's factor). */
static int orthonormalize_mgs(double *a, uint64_t n, int r)
{
    if ((uint64_t)r > n)
        return -EINVAL;
    uint64_t next_e = 0;
    for (int j = 0; j < r; j++) {
        /* steps t = 0 .. 2j - 1 subtract column t % j; the first dot product is summed
         * in the sweep of `before` */
        const int steps = 2 * j;
        double before = 0, d = 0;
        for (uint64_t i = 0; i < n; i++) {
            before += a[i * r + j] * a[i * r + j];
            if (steps)
                d += a[i * r] * a[i * r + j];
        }
        for (int tries = 0;; tries++) {
            double nrm = 0;
            if (!steps)
                for (uint64_t i = 0; i < n; i++)
                    nrm += a[i * r + j] * a[i * r + j];
            for (int t = 0; t < steps; t++) {
                /* the next step's column, or column j itself for the norm */
                const int k = t % j, k1 = t + 1 < steps ? (t + 1) % j : j;
                double next = 0;
                for (uint64_t i = 0; i < n; i++) {
                    a[i * r + j] -= d * a[i * r + k];
                    next += a[i * r + k1] * a[i * r + j];
                }
                if (k1 == j)
                    nrm = next;
                else
                    d = next;
            }
            if (nrm > 0 && nrm > 1e-20 * (before > 0 ? before : 1)) {
                double s = 1.0 / sqrt(nrm);
                for (uint64_t i = 0; i < n; i++)
                    a[i * r + j] *= s;
                break;
            }
            if (next_e >= n)
                return -EINVAL; /* cannot happen for r <= n */
            for (uint64_t i = 0; i < n; i++)
                a[i * r + j] = i == next_e ? 1.0 : 0.0;
            next_e++;
            before = 1;
            d = 0; /* the retry's first dot product, with the unit vector */
            for (uint64_t i = 0; steps && i < n; i++)
                d += a[i * r] * a[i * r + j];
        }
    }
    return 0;
}

/* ---- the Gram A^T A of a tall A ---- */

/* Columns up to which gram_tall runs (beyond, LAPACK's dsyrk); rows a chunk at least; rows
 * of A a tile pass reads from cache; bytes the chunks' partial Grams take at most. */
#define GRAM_TALL_MAX_P 256
#define GRAM_CHUNK_ROWS 4096
#define GRAM_BLOCK_ROWS 128
#define GRAM_PARTIAL_BYTES (16ull << 20)

/* g (p x p, row major) += A^T A over A's n rows, at least on and below the diagonal: tiles
 * of 4 rows of g by 4 vectors of columns, summed over blocks of GRAM_BLOCK_ROWS rows of A
 * (which stay in cache for all the tiles) in registers. */
static void gram_chunk(const double *A, uint64_t n, int p, double *g)
{
    const int W = 4 * VL;
    for (uint64_t i0 = 0; i0 < n; i0 += GRAM_BLOCK_ROWS) {
        const uint64_t i1 = BLCO_MIN(n, i0 + GRAM_BLOCK_ROWS);
        for (int p0 = 0; p0 < p; p0 += 4) {
            const int pb = BLCO_MIN(4, p - p0);
            for (int q0 = 0; q0 < p0 + pb; q0 += W) {
                const int qb = BLCO_MIN(W, p - q0);
                if (pb < 4 || qb < W) { /* an edge tile */
                    for (uint64_t i = i0; i < i1; i++) {
                        const double *restrict x = A + i * (uint64_t)p;
                        for (int k = 0; k < pb; k++) {
                            const double a = x[p0 + k];
                            double *restrict gk = g + (size_t)(p0 + k) * p + q0;
                            for (int c = 0; c < qb; c++)
                                gk[c] += a * x[q0 + c];
                        }
                    }
                    continue;
                }
                vd_t acc[4][4];
                for (int k = 0; k < 4; k++)
                    for (int m = 0; m < 4; m++)
                        acc[k][m] = vsplat(0);
                for (uint64_t i = i0; i < i1; i++) {
                    const double *x = A + i * (uint64_t)p;
                    vd_t xq[4];
                    for (int m = 0; m < 4; m++)
                        xq[m] = vload(x + q0 + m * VL);
                    for (int k = 0; k < 4; k++) {
                        const vd_t a = vsplat(x[p0 + k]);
                        for (int m = 0; m < 4; m++)
                            acc[k][m] += a * xq[m];
                    }
                }
                for (int k = 0; k < 4; k++)
                    for (int m = 0; m < 4; m++) {
                        double *gk = g + (size_t)(p0 + k) * p + q0 + m * VL;
                        vstore(gk, vload(gk) + acc[k][m]);
                    }
            }
        }
    }
}

/* Chunks of gram_tall: they depend only on n and p. */
static uint64_t gram_tall_chunks(uint64_t n, int p)
{
    const uint64_t pp = (uint64_t)p * (uint64_t)p * 8;
    uint64_t nch = BLCO_MIN((n + GRAM_CHUNK_ROWS - 1) / GRAM_CHUNK_ROWS, 256);
    nch = BLCO_MIN(nch, BLCO_MAX(GRAM_PARTIAL_BYTES / pp, 1));
    return BLCO_MAX(nch, 1);
}

static uint64_t gram_tall_room(uint64_t n, int p)
{
    return gram_tall_chunks(n, p) * (uint64_t)p * (uint64_t)p;
}

/* G (p x p, row major, symmetric) = A^T A (or += with `add`) of a tall Y(n), A n x p row
 * major, on `threads` (0: default): each chunk's partial Gram made by one thread, the
 * partials added in chunk order, so the bits do not depend on the thread count. For p <=
 * GRAM_TALL_MAX_P; part holds gram_tall_room doubles. LAPACK's dsyrk ran this shape
 * (millions of rows, tens of columns) on one thread; CP-ALS's Gram pass
 * (blco_cpd_scale_gram, GEMMs on blocks of rows, made for factors of ranks 8-64) made
 * blco-tucker's SVD and core 1.2x slower at 64 columns than this kernel (perf/results/
 * README.md, "Tucker on long modes"); Cholesky QR, whose Grams are of factors, uses it. */
static void gram_tall(const double *A, uint64_t n, int p, double *G, int add, double *part,
                      int threads)
{
    const uint64_t nch = gram_tall_chunks(n, p), len = (n + nch - 1) / nch;
    const size_t pp = (size_t)p * (size_t)p;
    const int nt = blco_threads_resolve(threads);
    (void)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (uint64_t c = 0; c < nch; c++) {
        double *g = part + c * pp;
        memset(g, 0, pp * sizeof *g);
        const uint64_t i0 = BLCO_MIN(n, c * len), i1 = BLCO_MIN(n, (c + 1) * len);
        gram_chunk(A + i0 * (uint64_t)p, i1 - i0, p, g);
    }
    if (!add)
        memset(G, 0, pp * sizeof *G);
    for (uint64_t c = 0; c < nch; c++)
        for (int i = 0; i < p; i++)
            for (int j = 0; j <= i; j++)
                G[(size_t)i * p + j] += part[c * pp + (size_t)i * p + j];
    for (int i = 0; i < p; i++) /* the upper triangle from the lower */
        for (int j = 0; j < i; j++)
            G[(size_t)j * p + i] = G[(size_t)i * p + j];
}

#define CHOLQR_MAX_R 64
#define CHOLQR_PIVOT 1e-10

int blco_tucker_chol_inv(const double *G, int r, double *L, double *T)
{
    for (int j = 0; j < r; j++) {
        const double gjj = G[(size_t)j * r + j];
        double d = gjj;
        for (int k = 0; k < j; k++)
            d -= L[(size_t)j * r + k] * L[(size_t)j * r + k];
        if (!(gjj > 0) || !(d > CHOLQR_PIVOT * gjj))
            return -1;
        const double ljj = sqrt(d);
        L[(size_t)j * r + j] = ljj;
        for (int i = j + 1; i < r; i++) {
            double v = G[(size_t)i * r + j];
            for (int k = 0; k < j; k++)
                v -= L[(size_t)i * r + k] * L[(size_t)j * r + k];
            L[(size_t)i * r + j] = v / ljj;
        }
    }
    /* L^-1 column by column (forward substitution), stored transposed: T[k][j] = Linv[j][k] */
    memset(T, 0, (size_t)r * r * sizeof *T);
    for (int col = 0; col < r; col++)
        for (int i = col; i < r; i++) {
            double v = i == col ? 1.0 : 0.0;
            for (int k = col; k < i; k++)
                v -= L[(size_t)i * r + k] * T[(size_t)col * r + k];
            T[(size_t)col * r + i] = v / L[(size_t)i * r + i];
        }
    return 0;
}

/* Cholesky QR, twice (CholeskyQR2), for a tall A whose columns are well independent: the
 * r x r Gram G = A^T A, its Cholesky factor G = R^T R, and A <- A R^-1 (R^-1 formed once, as
 * the GPUs' backend does), twice; the second round removes what the first left of the
 * rounding. The result is the Q of A's QR (positive diagonal), as Gram-Schmidt's, to
 * rounding. The passes are CP-ALS's dense ones (src/cpd_dense.c): the Gram, then the product
 * in place, which also gives the next round's Gram: 3 sweeps over A, in parallel, where
 * Gram-Schmidt takes about r^2, and the same bits on any thread count. Declines (returns 1,
 * A left as the rounds before made it) where a Cholesky pivot falls below CHOLQR_PIVOT times
 * its column's squared norm (a column nearly in the span of the earlier ones, or zero:
 * cond(A) above about 1e5, far inside CholeskyQR2's limit of about 1e8), leaving those to
 * Gram-Schmidt and its unit-vector replacement; -1 when out of memory. */
static int cholqr2(double *a, uint64_t n, int r, int threads)
{
    const size_t rr = (size_t)r * (size_t)r;
    double *G = malloc((3 * rr + (size_t)r + blco_cpd_partial_doubles(r)) * sizeof *G);
    if (!G)
        return -1;
    double *L = G + rr, *T = L + rr, *colstat = T + rr, *partial = colstat + r;
    int declined = 0;
    blco_cpd_scale_gram(a, n, r, NULL, G, partial, threads);
    for (int round = 0; round < 2 && !declined; round++) {
        /* T = R^-1, R = L^T the Cholesky factor */
        if (blco_tucker_chol_inv(G, r, L, T) < 0)
            declined = 1;
        else
            blco_cpd_solve_gram(T, r, a, n, a, BLCO_CPD_STAT_SUMSQ, colstat, G, NULL, partial,
                                threads);
    }
    free(G);
    return declined;
}

/* Orthonormalizes the columns of A (n x r): CholeskyQR2 on `threads` (0: default) where
 * r <= CHOLQR_MAX_R and it does not decline, else (or for what it declined) Gram-Schmidt
 * twice. Returns as orthonormalize_mgs. */
static int orthonormalize(double *a, uint64_t n, int r, int threads)
{
    if ((uint64_t)r > n)
        return -EINVAL;
    if (r >= 2 && r <= CHOLQR_MAX_R && cholqr2(a, n, r, threads) == 0)
        return 0;
    return orthonormalize_mgs(a, n, r);
}

int blco_tucker_gram(const double *A, uint64_t n, int p, double *G, int threads)
{
    if (p < 1 || p > GRAM_TALL_MAX_P)
        return -EINVAL;
    double *part = malloc(gram_tall_room(n, p) * sizeof *part);
    if (!part)
        return -ENOMEM;
    gram_tall(A, n, p, G, 0, part, threads);
    free(part);
    return 0;
}

int blco_tucker_orthonormalize_mgs(double *a, uint64_t n, int r)
{
    return orthonormalize_mgs(a, n, r);
}

int blco_tucker_orthonormalize(double *a, uint64_t n, int r)
{
    return orthonormalize(a, n, r, 0);
}

/* Random orthonormal columns, drawn in the source's row order and moved to the stored one
 * (a relabeled file), so a seed gives the same start with or without relabeling. Returns
 * 0 or -ENOMEM. */
static int random_orthonormal(const blco_tucker_problem_t *p, double *a, uint64_t n, int r,
                              uint64_t seed, int mode, int threads)
{
    uint64_t s = seed * 0x2545f4914f6cdd1dull + (uint64_t)mode * 0x9e3779b97f4a7c15ull + 1;
    for (uint64_t i = 0; i < n * (uint64_t)r; i++)
        a[i] = gauss(&s);
    orthonormalize(a, n, r, threads);
    return blco_labels_rows_from_user(p->labels, mode, a, (uint64_t)r);
}

/* ---- the leading left singular vectors of Y ---- */

typedef struct work {
    blco_budget_t *budget;
    double *gram, *eig, *lwork, *uc;
    double *ucol; /* column blocks: a range of one factor's columns */
    size_t gram_bytes, eig_bytes, lwork_bytes, uc_bytes, ucol_bytes;
    int threads; /* of the dense steps on the host (o->threads) */
} work_t;

static int lwork_doubles(int n)
{
    return 3 * n + 66 * n + 1;
}

/* Eigen-decomposes the n x n Gram matrix in w->gram (lower triangle); *keep = how many of
 * the r leading eigenvalues are above the numerical rank's floor. */
static int gram_eig(work_t *w, int n, int r, int *keep, blco_diag_t *diag)
{
    int lw = lwork_doubles(n), info = 0;
    dsyev_("V", "L", &n, w->gram, &n, w->eig, w->lwork, &lw, &info, 1, 1);
    if (info != 0)
        return blco_diag_set(diag, 0, -BLCO_EVALUE,
                             "the eigensolver did not converge (info %d): NaN in Y?", info);
    const double lmax = w->eig[n - 1] > 0 ? w->eig[n - 1] : 0;
    const double floor = lmax * (double)n * DBL_EPSILON * 16;
    *keep = 0;
    for (int j = 0; j < r && j < n; j++) {
        double lam = w->eig[n - 1 - j];
        if (!(lam > floor) || lam <= 0)
            break;
        (*keep)++;
    }
    return 0;
}

/* The leading eigenvectors of the P x P Gram Y^T Y (largest first) as V (P x keep, column
 * major) in w->lwork. */
static double *gram_vectors(work_t *w, uint64_t P, int keep)
{
    double *vt = w->lwork;
    for (int j = 0; j < keep; j++)
        memcpy(vt + (size_t)j * P, w->gram + (size_t)(P - 1 - (uint64_t)j) * P, P * sizeof(double));
    return vt;
}

/* Columns of U (found singular vectors) up to which project_rows runs its own loop. */
#define PROJECT_MAX_KEEP 64

/* Uc rows [r0, r0 + nb) (ld r) = Y_b (nb x P) V diag(scale) in their first `keep` columns,
 * zero in the others; V P x keep column major. Up to PROJECT_MAX_KEEP columns, each row is
 * one thread's, its sums in a fixed order (the same bits on any thread count): OpenBLAS's
 * dgemm gave this shape (millions of rows, 8-64 columns out) little; else dgemm. */
static void project_rows(double *uc, const double *V, const double *scale, const double *Yb,
                         uint64_t r0, uint64_t nb, uint64_t P, int r, int keep, int threads)
{
    double *vt = keep <= PROJECT_MAX_KEEP ? malloc(P * (uint64_t)keep * sizeof *vt) : NULL;
    if (vt) { /* vt[p][j] = V[p][j] * scale[j], row major */
        for (uint64_t p = 0; p < P; p++)
            for (int j = 0; j < keep; j++)
                vt[p * (uint64_t)keep + (uint64_t)j] = V[(uint64_t)j * P + p] * scale[j];
        const int nt = blco_threads_resolve(threads);
        (void)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (uint64_t i = 0; i < nb; i++) {
            const double *restrict y = Yb + i * P;
            double *restrict u = uc + (r0 + i) * (uint64_t)r, acc[PROJECT_MAX_KEEP];
            for (int j = 0; j < keep; j++)
                acc[j] = 0;
            for (uint64_t p = 0; p < P; p++) {
                const double yp = y[p];
                const double *restrict v = vt + p * (uint64_t)keep;
                for (int j = 0; j < keep; j++)
                    acc[j] += yp * v[j];
            }
            for (int j = 0; j < keep; j++)
                u[j] = acc[j];
            for (int j = keep; j < r; j++)
                u[j] = 0;
        }
        free(vt);
        return;
    }
    const double one = 1, zero = 0;
    const int ip = (int)P, inb = (int)nb;
    memset(uc + r0 * (uint64_t)r, 0, nb * (uint64_t)r * sizeof *uc);
    /* column major: Uc_b^T (keep x nb, ld r) = V^T (keep x P) Y_b^T (P x nb) */
    dgemm_("T", "N", &keep, &inb, &ip, &one, V, &ip, Yb, &ip, &zero, uc + r0 * r, &r, 1, 1);
    for (int j = 0; j < keep; j++) {
        const double sc = scale[j];
        for (uint64_t i = r0; i < r0 + nb; i++)
            uc[i * r + j] *= sc;
    }
}

/* Scatters Uc (rows x r, zero beyond the singular vectors found) into the full factor U,
 * completes it to orthonormal columns, and copies the result back into Uc. */
static int lsv_finish(work_t *w, uint64_t rows, int r, const int64_t *rowmap, uint64_t dims,
                      double *U, blco_diag_t *diag)
{
    (void)rows;
    const int nt = blco_threads_resolve(w->threads);
    (void)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (uint64_t i = 0; i < dims; i++) {
        int64_t row = rowmap ? rowmap[i] : (int64_t)i;
        if (row >= 0)
            memcpy(U + i * r, w->uc + (uint64_t)row * r, (size_t)r * sizeof(double));
        else
            memset(U + i * r, 0, (size_t)r * sizeof(double));
    }
    if (orthonormalize(U, dims, r, w->threads) < 0)
        return blco_diag_set(diag, 0, -EINVAL, "rank %d is above the mode's length %llu", r,
                             (unsigned long long)dims);
    /* Uc again from U (the completed columns may touch Y's rows). */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (uint64_t i = 0; i < dims; i++) {
        int64_t row = rowmap ? rowmap[i] : (int64_t)i;
        if (row >= 0)
            memcpy(w->uc + (uint64_t)row * r, U + i * r, (size_t)r * sizeof(double));
    }
    return 0;
}

/* Uc's first `keep` columns = the leading eigenvectors of the rows x rows Gram Y Y^T. */
static void rows_from_gram(work_t *w, uint64_t rows, int r, int keep)
{
    for (int j = 0; j < keep; j++) {
        const double *v = w->gram + (size_t)(rows - 1 - (uint64_t)j) * rows;
        for (uint64_t i = 0; i < rows; i++)
            w->uc[i * r + j] = v[i];
    }
}

/* ---- the HOSVD start from Khatri-Rao sketches (p->mttkrp) ---- */

static void gram_of_rows(const double *Y, uint64_t n, int p, double *G, int add, int threads);

/* Columns of the Khatri-Rao sketches beyond twice the largest rank. Measured
 * (perf/results/README.md, "The HOSVD start by MTTKRPs"), blco-tucker at rank 8 over seeds
 * 1-4: with R + 8 columns numpy's 4-mode count tensor ended at a fit of 0.318 where every
 * other start reached 0.3278; with 2R + 16 every seed reached it, in 4-5 iterations. */
#define KR_EXTRA 16
/* The k x k Gram's eigen-decomposition in 32-bit LAPACK sizes, its workspace k^2 doubles. */
#define KR_MAX_COLS 4096

int blco_tucker_kr_cols(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o)
{
    if (!p || !o || !p->mttkrp || o->init != BLCO_TUCKER_INIT_HOSVD || o->resume ||
        o->hosvd_by_ttm)
        return 0;
    uint64_t k = 1;
    for (int m = 0; m < p->order; m++)
        k = BLCO_MAX(k, (uint64_t)(o->ranks[m] > 0 ? o->ranks[m] : 1));
    k = 2 * k + KR_EXTRA;
    return k <= KR_MAX_COLS ? (int)k : 0; /* wider: the TTM sketches (which check their sizes) */
}

/* The sign matrices are read at random rows by the MTTKRPs, which read them where they are:
 * each of 1 MiB or more is 2 MiB aligned and marked for transparent huge pages, as the
 * kernels' own copies are. */
#define KR_HUGE (2ull << 20)

static uint64_t huge_pad(uint64_t bytes)
{
    return bytes >= KR_HUGE / 2 ? KR_HUGE : 0;
}

/* The budget bytes of that start: every mode's sign matrix and one M_n. */
static uint64_t kr_bytes(const blco_tucker_problem_t *p, int k)
{
    uint64_t all = 0, most = 0;
    for (int m = 0; m < p->order; m++) {
        all += p->dims[m] * (uint64_t)k * 8 + huge_pad(p->dims[m] * (uint64_t)k * 8);
        most = BLCO_MAX(most, p->dims[m] * (uint64_t)k * 8);
    }
    return k ? all + most : 0;
}

static double *huge_alloc(blco_budget_t *budget, uint64_t bytes, void **raw)
{
    const uint64_t pad = huge_pad(bytes);
    if (blco_budget_alloc(budget, bytes + pad, raw) < 0) {
        *raw = NULL;
        return NULL;
    }
    if (!pad)
        return *raw;
    uintptr_t a = ((uintptr_t)*raw + KR_HUGE - 1) & ~(uintptr_t)(KR_HUGE - 1);
#ifdef MADV_HUGEPAGE
    madvise((void *)a, bytes, MADV_HUGEPAGE); /* a hint: failure only costs speed */
#endif
    return (double *)a;
}

/* a (n x k, row major) = random signs, each row from its own seed (any thread count gives
 * the same matrix), rows in the source's indices then moved to the stored ones. */
static int random_signs(const blco_tucker_problem_t *p, double *a, uint64_t n, int k,
                        uint64_t seed, int mode, int threads)
{
    const uint64_t base =
        (seed ^ 0x6b72736bull) * 0x2545f4914f6cdd1dull + (uint64_t)(mode + 1) * 0x9e3779b97f4a7c15ull;
    const int nt = blco_threads_resolve(threads);
    (void)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (uint64_t i = 0; i < n; i++) {
        uint64_t st = base + i * 0xd1b54a32d192ed03ull, bits = 0;
        double *row = a + i * (uint64_t)k;
        for (int j = 0; j < k; j++) {
            if (j % 64 == 0)
                bits = splitmix(&st);
            row[j] = (bits >> (j % 64)) & 1 ? 1.0 : -1.0;
        }
    }
    return blco_labels_rows_from_user(p->labels, mode, a, (uint64_t)k);
}

/* U_n (dims[n] x R_n) = the leading left singular vectors of M_n = X_(n) (S_N kr .. kr S_1)
 * (n left out), S_m random signs of k columns: one MTTKRP of rank k per mode; then from the
 * k x k Gram M^T M as mode_step does (U = M V / sigma, completed and re-orthonormalized).
 * E[S S^T] = I, so M M^T estimates X_(n) X_(n)^T, and range(M_n) = range(X_(n)) when its rank
 * is at most k (almost surely). The sign matrices and M_n come from the budget and go back. */
static int kr_start(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o, int k,
                    blco_budget_t *budget, double *const *U, blco_diag_t *diag)
{
    const int N = p->order;
    double *S[BLCO_MAX_MODES] = {0}, *M = NULL;
    void *raw[BLCO_MAX_MODES] = {0};
    uint64_t mbytes = 0;
    int err = 0;
    for (int m = 0; m < N; m++)
        mbytes = BLCO_MAX(mbytes, p->dims[m] * (uint64_t)k * 8);
    work_t kw = {.budget = budget, .threads = o->threads};
    kw.gram = malloc((size_t)k * k * sizeof(double));
    kw.eig = malloc((size_t)k * sizeof(double));
    kw.lwork = malloc(BLCO_MAX((size_t)lwork_doubles(k), (size_t)k * k) * sizeof(double));
    double *scale = malloc((size_t)k * sizeof(double));
    if (!kw.gram || !kw.eig || !kw.lwork || !scale) {
        err = -ENOMEM;
        goto out;
    }
    for (int m = 0; m < N && !err; m++) {
        if (!(S[m] = huge_alloc(budget, p->dims[m] * (uint64_t)k * 8, &raw[m]))) {
            err = -BLCO_EBUDGET;
        } else if (random_signs(p, S[m], p->dims[m], k, o->seed, m, o->threads) < 0) {
            err = blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel a sketch matrix");
        }
    }
    if (!err && blco_budget_alloc(budget, mbytes, (void **)&M) < 0) {
        M = NULL;
        err = -BLCO_EBUDGET;
    }
    if (err == -BLCO_EBUDGET) {
        char a[32];
        err = blco_diag_set(diag, 0, err,
                            "the HOSVD start's sketch matrices (%s: random signs of %d columns "
                            "per mode and one MTTKRP output) do not fit the budget: raise "
                            "--mem-limit or start from random factors",
                            blco_format_size(kr_bytes(p, k), a, sizeof a), k);
    }
    for (int n = 0; n < N && !err; n++) {
        const int r = o->ranks[n];
        int keep = 0;
        if ((err = p->mttkrp(p->ctx, n, k, (const double *const *)S, M)) < 0)
            break;
        gram_of_rows(M, p->dims[n], k, kw.gram, 0, o->threads);
        if ((err = gram_eig(&kw, k, r, &keep, diag)) < 0)
            break;
        const double *V = gram_vectors(&kw, (uint64_t)k, keep);
        for (int j = 0; j < keep; j++)
            scale[j] = 1.0 / sqrt(kw.eig[k - 1 - j]);
        if (keep)
            project_rows(U[n], V, scale, M, 0, p->dims[n], (uint64_t)k, r, keep, o->threads);
        else
            memset(U[n], 0, p->dims[n] * (uint64_t)r * sizeof(double));
        if (orthonormalize(U[n], p->dims[n], r, o->threads) < 0) {
            err = blco_diag_set(diag, 0, -EINVAL, "rank %d is above the mode's length %llu", r,
                                (unsigned long long)p->dims[n]);
            break;
        }
    }
out:
    for (int m = 0; m < N; m++)
        if (raw[m])
            blco_budget_free(budget, raw[m],
                             p->dims[m] * (uint64_t)k * 8 + huge_pad(p->dims[m] * (uint64_t)k * 8));
    if (M)
        blco_budget_free(budget, M, mbytes);
    free(kw.gram);
    free(kw.eig);
    free(kw.lwork);
    free(scale);
    return err;
}

/* ---- sizes ---- */

static uint64_t rows_of(const blco_tucker_problem_t *p, int m)
{
    return p->rowmap[m] ? p->rows[m] : p->dims[m];
}

/* The mode whose factor column blocks of Y(n) cut: the lowest other than n. */
static int col_mode(int n)
{
    return n == 0 ? 1 : 0;
}

int blco_tucker_col_block(const blco_tucker_problem_t *p, const int *ranks, int n, uint64_t ycap,
                          int *cb)
{
    const uint64_t P = blco_ttm_cols(p->order, ranks, n), rows = rows_of(p, n);
    const int m0 = col_mode(n);
    const uint64_t q = P / (uint64_t)ranks[m0];
    *cb = 0;
    if (!ycap || rows > P || rows * P * 8 <= ycap)
        return m0;
    uint64_t c = ycap / (BLCO_MAX(rows, 1) * q * 8);
    *cb = c ? (int)BLCO_MIN(c, (uint64_t)ranks[m0]) : -1;
    return m0;
}

/* The bytes of the column copy that column blocks need within ycap, at the ranks and at the
 * sketch ranks sk (the ranks again when there is no sketch). */
static uint64_t col_copy_bytes(const blco_tucker_problem_t *p, const int *ranks, const int *sk,
                               uint64_t ycap)
{
    uint64_t b = 0;
    for (int n = 0; n < p->order; n++)
        for (int s = 0; s < 2; s++) {
            int cb, m0 = blco_tucker_col_block(p, s ? sk : ranks, n, ycap, &cb);
            if (cb > 0)
                b = BLCO_MAX(b, p->dims[m0] * (uint64_t)cb * 8);
        }
    return b;
}

void blco_tucker_sketch_ranks(const blco_tucker_problem_t *p, const int *ranks, int *out)
{
    for (int m = 0; m < p->order; m++) {
        uint64_t k = (uint64_t)ranks[m] + SKETCH_EXTRA;
        out[m] = (int)(k < p->dims[m] ? k : p->dims[m]);
    }
}

uint64_t blco_tucker_device_keep(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o)
{
    if (!p || !o)
        return 0;
    /* a HOSVD start by TTM chains asks for Y(n) at the sketch ranks first */
    const int sketch =
        o->init == BLCO_TUCKER_INIT_HOSVD && !o->resume && !blco_tucker_kr_cols(p, o);
    uint64_t keep = 0;
    for (int pass = 0; pass < 1 + sketch; pass++) {
        int r[BLCO_MAX_MODES];
        uint64_t fac = 0;
        if (pass)
            blco_tucker_sketch_ranks(p, o->ranks, r);
        else
            memcpy(r, o->ranks, sizeof r);
        for (int m = 0; m < p->order; m++)
            fac += p->dims[m] * (uint64_t)r[m] * 8;
        for (int n = 0; n < p->order; n++) {
            uint64_t y = p->rows[n] * blco_ttm_cols(p->order, r, n) * 8;
            if (o->y_bytes && y > o->y_bytes)
                y = o->y_bytes; /* row blocks, or column blocks (rows <= P) */
            keep = BLCO_MAX(keep, y + fac + p->dims[n] * 8);
        }
    }
    return keep;
}

/* Largest Y, Gram and eigen work over the modes for these ranks. */
static void sizes(const blco_tucker_problem_t *p, const int *ranks, uint64_t *ybytes,
                  uint64_t *gbytes, int *gn, int *ymode)
{
    for (int n = 0; n < p->order; n++) {
        uint64_t P = blco_ttm_cols(p->order, ranks, n), rows = rows_of(p, n);
        uint64_t y = rows * P * 8, g = rows < P ? rows : P;
        if (y > *ybytes) {
            *ybytes = y;
            *ymode = n;
        }
        if (g * g * 8 > *gbytes)
            *gbytes = g * g * 8;
        if ((int)BLCO_MIN(g, (uint64_t)INT32_MAX) > *gn)
            *gn = (int)BLCO_MIN(g, (uint64_t)INT32_MAX);
    }
}

uint64_t blco_tucker_budget_bytes(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o)
{
    const int *ranks = o->ranks;
    uint64_t y = 0, g = 0, f = 0, core = 1, uc = 0;
    int gn = 0, ym = 0, sk[BLCO_MAX_MODES];
    sizes(p, ranks, &y, &g, &gn, &ym);
    blco_tucker_sketch_ranks(p, ranks, sk);
    uint64_t om = 0; /* the sketch matrices of the HOSVD initialization */
    const int kr = blco_tucker_kr_cols(p, o);
    if (o->init == BLCO_TUCKER_INIT_HOSVD && !o->resume && !kr) {
        sizes(p, sk, &y, &g, &gn, &ym);
        for (int m = 0; m < p->order; m++)
            om += p->dims[m] * (uint64_t)sk[m] * 8;
    } else {
        memcpy(sk, ranks, sizeof sk);
    }
    for (int m = 0; m < p->order; m++) {
        f += p->dims[m] * (uint64_t)ranks[m] * 8;
        core *= (uint64_t)ranks[m];
        uc = BLCO_MAX(uc, rows_of(p, m) * (uint64_t)ranks[m] * 8);
    }
    uint64_t pmax = 0, rmax = 1;
    for (int n = 0; n < p->order; n++) {
        pmax = BLCO_MAX(pmax, blco_ttm_cols(p->order, sk, n));
        rmax = BLCO_MAX(rmax, (uint64_t)ranks[n]);
    }
    uint64_t lw = BLCO_MAX((uint64_t)lwork_doubles(gn), pmax * rmax) * 8;
    if (o->y_bytes && o->y_bytes < y)
        y = o->y_bytes;
    const uint64_t hooi = y + g + (uint64_t)gn * 8 + lw + f + core * 8 + uc + om +
                          col_copy_bytes(p, ranks, sk, y) + 4096 * 8;
    /* The Khatri-Rao start runs before Y and the rest are taken, beside the factors. */
    return BLCO_MAX(hooi, f + kr_bytes(p, kr) + 4096 * 8);
}

static uint64_t plan_y(const blco_tucker_problem_t *p, blco_tucker_opts_t *o, uint64_t left,
                       uint64_t min_rows, uint64_t *least);

uint64_t blco_tucker_plan(const blco_tucker_problem_t *p, blco_tucker_opts_t *o, uint64_t left,
                          uint64_t min_rows, uint64_t *least)
{
    const blco_tucker_opts_t given = *o;
    uint64_t need = plan_y(p, o, left, min_rows, least);
    if (need <= left || !blco_tucker_kr_cols(p, o))
        return need;
    /* The MTTKRP sketches come whole; the TTM sketches can come in row blocks. */
    blco_tucker_opts_t t = given;
    t.hosvd_by_ttm = 1;
    uint64_t tl = 0, tn = plan_y(p, &t, left, min_rows, &tl);
    if (tn > left)
        return need;
    char a[32], b[32];
    blco_log(BLCO_LOG_INFO,
             "the HOSVD start's MTTKRP sketches (%s with the factors) do not fit the %s "
             "left: it sketches by TTM chains (Y(n) in row blocks where needed)",
             blco_format_size(need, a, sizeof a), blco_format_size(left, b, sizeof b));
    *o = t;
    if (least)
        *least = tl;
    return tn;
}

static uint64_t plan_y(const blco_tucker_problem_t *p, blco_tucker_opts_t *o, uint64_t left,
                       uint64_t min_rows, uint64_t *least)
{
    uint64_t need = blco_tucker_budget_bytes(p, o), lo = 0;
    if (!o->y_bytes && need > left) {
        o->y_bytes = blco_tucker_min_y_bytes(p, o, min_rows);
        lo = blco_tucker_budget_bytes(p, o);
        if (lo <= left) {
            o->y_bytes += (left - lo) / 2;
            need = blco_tucker_budget_bytes(p, o);
        } else {
            o->y_bytes = 0;
        }
    }
    if (least)
        *least = lo;
    return need;
}

uint64_t blco_tucker_min_y_bytes(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o,
                                 uint64_t min_rows)
{
    int sk[BLCO_MAX_MODES];
    blco_tucker_sketch_ranks(p, o->ranks, sk);
    uint64_t need = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int *ranks = pass ? sk : o->ranks;
        if (pass && (o->init != BLCO_TUCKER_INIT_HOSVD || o->resume || blco_tucker_kr_cols(p, o)))
            break;
        for (int n = 0; n < p->order; n++) {
            uint64_t P = blco_ttm_cols(p->order, ranks, n), rows = rows_of(p, n);
            if (rows <= P) { /* column blocks of one column of the lowest other mode */
                need = BLCO_MAX(need, rows * (P / (uint64_t)ranks[col_mode(n)]) * 8);
                continue;
            }
            uint64_t b = !p->ttm_rows ? rows : BLCO_MIN(rows, BLCO_MAX(min_rows, 1));
            need = BLCO_MAX(need, b * P * 8);
        }
    }
    return need;
}

/* ---- checkpoints ---- */

static int ckpt_write(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o,
                      blco_tucker_result_t *r, double *const *U, blco_diag_t *diag)
{
    char dir[4096], path[4200], tmp[4200];
    const char *cd = o->checkpoint_dir;
    snprintf(dir, sizeof dir, "%s/iter-%06d", cd, r->iterations);
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return blco_diag_set(diag, 0, -errno, "%s: %s", dir, strerror(errno));
    for (int m = 0; m < p->order; m++) {
        snprintf(path, sizeof path, "%s/U%d.npy", dir, m + 1);
        /* in the source's indices (a relabeled file), then back */
        int err = blco_labels_rows_to_user(p->labels, m, U[m], (uint64_t)r->ranks[m]);
        if (err == 0) {
            err = blco_npy_write(path, p->dims[m], (uint64_t)r->ranks[m], U[m]);
            int back = blco_labels_rows_from_user(p->labels, m, U[m], (uint64_t)r->ranks[m]);
            err = err < 0 ? err : back;
        }
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: %s", path, blco_strerror(err));
    }
    snprintf(tmp, sizeof tmp, "%s/state.tmp", cd);
    snprintf(path, sizeof path, "%s/state", cd);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return blco_diag_set(diag, 0, -errno, "%s: %s", tmp, strerror(errno));
    fprintf(f, "blco-tucker-state 1\norder %d\n", p->order);
    for (int m = 0; m < p->order; m++)
        fprintf(f, "mode %llu %d\n", (unsigned long long)p->dims[m], r->ranks[m]);
    fprintf(f, "norm2 %.17g\niteration %d\n", p->norm2, r->iterations);
    for (int k = 0; k < r->iterations && k < 1024; k++)
        fprintf(f, "fit %.17g\n", r->fit_history[k]);
    fprintf(f, BLCO_CKPT_WRITER_KEY " "); /* after the fits: older readers stop before it */
    blco_ckpt_put_line(f, o->writer ? o->writer : BLCO_CKPT_WRITER_DEFAULT);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) < 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        return blco_diag_set(diag, 0, -e, "%s: %s", path, strerror(e));
    }
    /* The previous iteration's folder is no longer pointed at. */
    if (r->iterations > 1) {
        snprintf(dir, sizeof dir, "%s/iter-%06d", cd, r->iterations - 1);
        for (int m = 0; m < p->order; m++) {
            snprintf(path, sizeof path, "%s/U%d.npy", dir, m + 1);
            unlink(path);
        }
        rmdir(dir);
    }
    return 0;
}

/* Reads U1..UN from DIR into U (dims x ranks each). */
static int read_factors(const blco_tucker_problem_t *p, const int *ranks, const char *dir,
                        blco_budget_t *budget, double *const *U, blco_diag_t *diag)
{
    char path[4200];
    for (int m = 0; m < p->order; m++) {
        snprintf(path, sizeof path, "%s/U%d.npy", dir, m + 1);
        uint64_t rr, cc;
        /* straight into U: a resumed run needs no memory beyond what the run takes */
        int err =
            blco_npy_read_into(path, budget, p->dims[m], (uint64_t)ranks[m], U[m], &rr, &cc, diag);
        if (err == -ENOENT)
            return blco_diag_set(diag, 0, err, "%s: no such file", path);
        if (err == -BLCO_EMISMATCH)
            return blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                                 "%s: %llu x %llu where mode %d needs %llu x %d", path,
                                 (unsigned long long)rr, (unsigned long long)cc, m + 1,
                                 (unsigned long long)p->dims[m], ranks[m]);
        if (err < 0)
            return err;
        if (blco_labels_rows_from_user(p->labels, m, U[m], cc) < 0)
            return blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel U%d", m + 1);
    }
    return 0;
}

static int ckpt_read(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o,
                     blco_budget_t *budget, blco_tucker_result_t *r, double *const *U,
                     blco_diag_t *diag)
{
    char path[4200], dir[4200];
    snprintf(path, sizeof path, "%s/state", o->checkpoint_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return blco_diag_set(diag, 0, -errno, "%s: %s (nothing to resume)", path, strerror(errno));
    int ver = 0, order = 0, it = -1,
        ok = fscanf(f, "blco-tucker-state %d order %d", &ver, &order) == 2;
    ok = ok && ver == 1 && order == p->order;
    for (int m = 0; ok && m < order; m++) {
        unsigned long long d;
        int rk;
        ok = fscanf(f, " mode %llu %d", &d, &rk) == 2;
        if (ok && (d != p->dims[m] || rk != r->ranks[m])) {
            fclose(f);
            return blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                                 "%s: a checkpoint of another tensor or ranks (mode %d: %llu x "
                                 "%d, here %llu x %d)",
                                 path, m + 1, d, rk, (unsigned long long)p->dims[m], r->ranks[m]);
        }
    }
    double n2 = 0;
    ok = ok && fscanf(f, " norm2 %lf iteration %d", &n2, &it) == 2 && it >= 1;
    for (int k = 0; ok && k < it && k < 1024; k++)
        ok = fscanf(f, " fit %lf", &r->fit_history[k]) == 1;
    fclose(f);
    if (!ok)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT, "%s: not a blco-tucker checkpoint", path);
    if (fabs(n2 - p->norm2) > 1e-12 * p->norm2)
        return blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                             "%s: a checkpoint of another tensor (its ||X||^2 differs)", path);
    snprintf(dir, sizeof dir, "%s/iter-%06d", o->checkpoint_dir, it);
    int err = read_factors(p, r->ranks, dir, budget, U, diag);
    if (err < 0)
        return err;
    r->iterations = it;
    r->fit = r->fit_history[BLCO_MIN(it, 1024) - 1];
    return 0;
}

/* ---- HOOI ---- */

void blco_tucker_result_destroy(blco_tucker_result_t *r)
{
    if (!r)
        return;
    for (int m = 0; m < r->order; m++)
        blco_budget_free(r->budget, r->U[m], r->dims[m] * (uint64_t)r->ranks[m] * 8);
    blco_budget_free(r->budget, r->core, r->core_size * 8);
    free(r);
}

static void work_free(work_t *w)
{
    blco_budget_free(w->budget, w->gram, w->gram_bytes);
    blco_budget_free(w->budget, w->eig, w->eig_bytes);
    blco_budget_free(w->budget, w->lwork, w->lwork_bytes);
    blco_budget_free(w->budget, w->uc, w->uc_bytes);
    blco_budget_free(w->budget, w->ucol, w->ucol_bytes);
}

static int check_problem(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o,
                         blco_diag_t *diag)
{
    if (!p || !o || (!p->ttm && !p->ops) || p->order < 2 || p->order > BLCO_MAX_MODES)
        return blco_diag_set(diag, 0, -EINVAL,
                             "bad Tucker problem (order 2..%d, a TTM callback or a backend)",
                             BLCO_MAX_MODES);
    if (!(p->norm2 > 0))
        return blco_diag_set(diag, 0, -EINVAL, "the tensor has no nonzero value (||X||^2 = 0)");
    for (int m = 0; m < p->order; m++) {
        if (o->ranks[m] < 1 || (uint64_t)o->ranks[m] > p->dims[m])
            return blco_diag_set(diag, 0, -EINVAL,
                                 "rank %d of mode %d must be between 1 and the mode's length %llu",
                                 o->ranks[m], m + 1, (unsigned long long)p->dims[m]);
    }
    for (int n = 0; n < p->order; n++)
        if (!blco_ttm_cols(p->order, o->ranks, n))
            return blco_diag_set(diag, 0, -EINVAL, "the product of the ranks is too large");
    if (o->max_iters < 1 || o->max_iters > 1024)
        return blco_diag_set(diag, 0, -EINVAL, "iterations must be 1..1024");
    if (o->resume && !o->checkpoint_dir)
        return blco_diag_set(diag, 0, -EINVAL, "resume needs a checkpoint folder");
    if (o->init == BLCO_TUCKER_INIT_DIR && !o->init_dir)
        return blco_diag_set(diag, 0, -EINVAL, "init from a folder needs the folder");
    return 0;
}

/* Adds (beta 1) or writes (beta 0) Uc rows [r0, r0 + nb)^T Y_b into the core (R_last x P,
 * stored C order [c, r_last]). */
static void core_add(const double *uc, const double *Yb, uint64_t r0, uint64_t nb, uint64_t P,
                     int r, double *core, double beta)
{
    const double one = 1;
    const int ip = (int)P, inb = (int)nb;
    /* column major: core (r x P, ld r) += Uc_b (r x nb, ld r) Y_b^T (nb x P; Y_b is P x nb) */
    dgemm_("N", "T", &r, &ip, &inb, &one, uc + r0 * (uint64_t)r, &r, Yb, &ip, &beta, core, &r, 1,
           1);
}

static double sum_squares(const double *a, uint64_t n)
{
    double s = 0;
    for (uint64_t k = 0; k < n; k++)
        s += a[k] * a[k];
    return s;
}

/* Y(n) as the host backend gets it: whole in Y when it fits ycap bytes, else in row blocks
 * of ycap / 8P rows through p->ttm_rows, or in column blocks; each call is counted. */
typedef struct ysrc {
    const blco_tucker_problem_t *p;
    double *Y;
    uint64_t ycap;
    blco_tucker_ttm_count_t *count;
} ysrc_t;

static uint64_t block_rows(const ysrc_t *y, uint64_t P)
{
    return y->ycap / (P * 8);
}

/* Row block [r0, r0 + nb) of Y(n) into y->Y. */
static int y_rows(ysrc_t *y, int n, const int *ranks, const double *const *F, uint64_t r0,
                  uint64_t nb)
{
    double t0 = blco_now();
    y->count->calls++;
    int err = y->p->ttm_rows(y->p->ctx, n, ranks, F, r0, r0 + nb, y->Y);
    y->count->seconds += blco_now() - t0;
    return err;
}

/* The whole Y(n) into y->Y. */
static int y_whole(ysrc_t *y, int n, const int *ranks, const double *const *F)
{
    double t0 = blco_now();
    y->count->calls++;
    int err = y->p->ttm(y->p->ctx, n, ranks, F, y->Y);
    y->count->seconds += blco_now() - t0;
    return err;
}

/* Column block c0 .. c0 + nc - 1 of mode m0's columns (see col_block) of Y(n) into y->Y
 * (rows x nc * P / R_m0): the TTM chain with those columns of F[m0], copied to w->ucol. */
static int y_cols(ysrc_t *y, const work_t *w, int n, const int *ranks, const double *const *F,
                  int m0, int c0, int nc)
{
    const blco_tucker_problem_t *p = y->p;
    int rk[BLCO_MAX_MODES];
    const double *G[BLCO_MAX_MODES];
    for (int m = 0; m < p->order; m++) {
        rk[m] = ranks[m];
        G[m] = F[m];
    }
    const uint64_t R = (uint64_t)ranks[m0];
    for (uint64_t i = 0; i < p->dims[m0]; i++)
        memcpy(w->ucol + i * (uint64_t)nc, F[m0] + i * R + (uint64_t)c0,
               (size_t)nc * sizeof(double));
    rk[m0] = nc;
    G[m0] = w->ucol;
    return y_whole(y, n, rk, G);
}

/* The core from Uc (Y(n)'s rows of U_n) and Y(n), whole or block by block. */
static int core_of(ysrc_t *y, const work_t *w, int n, const int *ranks, const double *const *F,
                   int whole_in_Y, double *core)
{
    const blco_tucker_problem_t *p = y->p;
    uint64_t P = blco_ttm_cols(p->order, ranks, n), rows = rows_of(p, n), cap = block_rows(y, P);
    const int r = ranks[n];
    int cb, m0 = blco_tucker_col_block(p, ranks, n, y->ycap, &cb);
    if (!whole_in_Y && cb > 0) {
        /* core columns [c0 q, (c0 + nc) q) = Uc^T Y(n)'s column block, q = P / R_m0 */
        const uint64_t q = P / (uint64_t)ranks[m0];
        for (int c0 = 0; c0 < ranks[m0]; c0 += cb) {
            int nc = BLCO_MIN(cb, ranks[m0] - c0), err;
            if ((err = y_cols(y, w, n, ranks, F, m0, c0, nc)) < 0)
                return err;
            core_add(w->uc, y->Y, 0, rows, (uint64_t)nc * q, r, core + (uint64_t)c0 * q * r, 0);
        }
    } else if (whole_in_Y || rows <= cap) {
        int err;
        if (!whole_in_Y && (err = y_whole(y, n, ranks, F)) < 0)
            return err;
        core_add(w->uc, y->Y, 0, rows, P, r, core, 0);
    } else {
        for (uint64_t r0 = 0; r0 < rows; r0 += cap) {
            uint64_t nb = BLCO_MIN(cap, rows - r0);
            int err = y_rows(y, n, ranks, F, r0, nb);
            if (err < 0)
                return err;
            core_add(w->uc, y->Y, r0, nb, P, r, core, r0 ? 1.0 : 0.0);
        }
    }
    return 0;
}

/* ---- the host backend (blco_tucker_ops_t over the problem's TTM callbacks) ---- */

/* Its state: Y and the callbacks, the driver's workspace (w->uc holds Uc; w->ucol the column
 * copy of column blocks), the factors of the chains (pointers: put keeps them) and the
 * result's. A Y(n) above y.ycap is not held: ttm leaves it to gram, project and core, which
 * compute it block by block (row blocks: one series of calls for the Gram Y^T Y, one to
 * project, one for the core; column blocks: one for the Gram Y Y^T, one for the core). */
typedef struct host_be {
    ysrc_t y;
    work_t *w;
    const double *F[BLCO_MAX_MODES];
    int rk[BLCO_MAX_MODES];
    int ranks[BLCO_MAX_MODES];
    double *const *hu;
    int whole; /* the last ttm's Y(n) is in y.Y */
} host_be_t;

static int host_begin(void *ctx, const int *ranks, const int *cols, double *const *host_U,
                      blco_tucker_ttm_count_t *count, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    (void)cols, (void)diag;
    memcpy(h->ranks, ranks, sizeof h->ranks);
    h->hu = host_U;
    h->y.count = count;
    return 0;
}

static int host_put(void *ctx, int m, const double *src, int cols, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    (void)diag;
    h->F[m] = src;
    h->rk[m] = cols;
    return 0;
}

static int host_get(void *ctx, int m, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    if (h->rk[m] != h->ranks[m])
        return blco_diag_set(diag, 0, -EINVAL, "U%d is a sketch matrix", m + 1);
    if (h->F[m] != h->hu[m])
        memcpy(h->hu[m], h->F[m], h->y.p->dims[m] * (uint64_t)h->ranks[m] * sizeof(double));
    return 0;
}

static int host_ttm(void *ctx, int n, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    (void)diag;
    const uint64_t P = blco_ttm_cols(h->y.p->order, h->rk, n);
    h->whole = rows_of(h->y.p, n) <= block_rows(&h->y, P);
    return h->whole ? y_whole(&h->y, n, h->rk, h->F) : 0;
}

/* G (p x p, symmetric) = Y^T Y (or += with `add`) of the n x p Y: gram_tall where p allows
 * and its scratch is had, else LAPACK's dsyrk. */
static void gram_of_rows(const double *Y, uint64_t n, int p, double *G, int add, int threads)
{
    double *part = p <= GRAM_TALL_MAX_P ? malloc(gram_tall_room(n, p) * sizeof *part) : NULL;
    if (part) {
        gram_tall(Y, n, p, G, add, part, threads);
        free(part);
        return;
    }
    const double one = 1, beta = add ? 1.0 : 0.0;
    const int in = (int)n;
    dsyrk_("L", "N", &p, &in, &one, Y, &p, &beta, G, &p, 1, 1);
}

static int host_gram(void *ctx, int n, double *gram, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    ysrc_t *y = &h->y;
    const blco_tucker_problem_t *p = y->p;
    const uint64_t P = blco_ttm_cols(p->order, h->rk, n), rows = rows_of(p, n);
    const double one = 1;
    const int ip = (int)P, irows = (int)rows;
    int err;
    (void)diag;
    if (h->whole) {
        if (rows <= P)
            dsyrk_("L", "T", &irows, &ip, &one, y->Y, &ip, &(double){0}, gram, &irows, 1, 1);
        else
            gram_of_rows(y->Y, rows, ip, gram, 0, h->w->threads);
        return 0;
    }
    int cb, m0 = blco_tucker_col_block(p, h->rk, n, y->ycap, &cb);
    if (cb > 0) { /* the rows x rows Gram Y Y^T = sum of Y_c Y_c^T */
        const uint64_t q = P / (uint64_t)h->rk[m0];
        for (int c0 = 0; c0 < h->rk[m0]; c0 += cb) {
            int nc = BLCO_MIN(cb, h->rk[m0] - c0);
            if ((err = y_cols(y, h->w, n, h->rk, h->F, m0, c0, nc)) < 0)
                return err;
            const int pc = (int)((uint64_t)nc * q);
            const double beta = c0 ? 1.0 : 0.0;
            dsyrk_("L", "T", &irows, &pc, &one, y->Y, &pc, &beta, gram, &irows, 1, 1);
        }
        return 0;
    }
    const uint64_t cap = block_rows(y, P);
    for (uint64_t r0 = 0; r0 < rows; r0 += cap) {
        uint64_t nb = BLCO_MIN(cap, rows - r0);
        if ((err = y_rows(y, n, h->rk, h->F, r0, nb)) < 0)
            return err;
        gram_of_rows(y->Y, nb, ip, gram, r0 > 0, h->w->threads);
    }
    return 0;
}

static int host_project(void *ctx, int n, int r, int keep, const double *V, const double *scale,
                        double *uc, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    ysrc_t *y = &h->y;
    const blco_tucker_problem_t *p = y->p;
    const uint64_t P = blco_ttm_cols(p->order, h->rk, n), rows = rows_of(p, n);
    double *out = uc ? uc : h->w->uc;
    int err;
    if (h->whole) {
        project_rows(out, V, scale, y->Y, 0, rows, P, r, keep, h->w->threads);
    } else {
        const uint64_t cap = block_rows(y, P);
        for (uint64_t r0 = 0; r0 < rows; r0 += cap) {
            uint64_t nb = BLCO_MIN(cap, rows - r0);
            if ((err = y_rows(y, n, h->rk, h->F, r0, nb)) < 0)
                return err;
            project_rows(out, V, scale, y->Y, r0, nb, P, r, keep, h->w->threads);
        }
    }
    if (uc)
        return 0;
    if ((err = lsv_finish(h->w, rows, r, p->rowmap[n], p->dims[n], h->hu[n], diag)) < 0)
        return err;
    h->F[n] = h->hu[n];
    h->rk[n] = r;
    return 0;
}

static int host_core(void *ctx, int n, double *core, blco_diag_t *diag)
{
    host_be_t *h = ctx;
    const blco_tucker_problem_t *p = h->y.p;
    const int r = h->rk[n];
    (void)diag;
    for (uint64_t i = 0; i < p->dims[n]; i++) { /* Uc: the rows of U_n that Y has */
        int64_t row = p->rowmap[n] ? p->rowmap[n][i] : (int64_t)i;
        if (row >= 0)
            memcpy(h->w->uc + (uint64_t)row * r, h->F[n] + i * r, (size_t)r * sizeof(double));
    }
    return core_of(&h->y, h->w, n, h->rk, h->F, h->whole, core);
}

static const blco_tucker_ops_t host_ops = {
    .begin = host_begin,
    .put = host_put,
    .get = host_get,
    .ttm = host_ttm,
    .gram = host_gram,
    .project = host_project,
    .core = host_core,
};

/* ---- the driver ---- */

typedef struct drv {
    const blco_tucker_problem_t *p;
    const blco_tucker_opts_t *o;
    const blco_tucker_ops_t *ops;
    void *ctx;
    work_t *w;
    double *const *U; /* the result's */
    double *scale;    /* 1 / sigma of the kept singular values */
} drv_t;

/* One mode of HOOI: Y(n) with the backend's factors (of `ranks` columns), U_n from the
 * eigenvectors of the smaller Gram of Y(n): Y Y^T's are U_n's rows (made here and handed to
 * the backend), Y^T Y's V give U_n = Y V / sigma (made by the backend; with `init`, the HOSVD
 * start, into w->uc and finished here, the backend's factors unchanged). With `core` the core
 * and ||G||^2 too. */
static int mode_step(drv_t *d, int n, const int *ranks, int init, double *core, double *gnorm2,
                     blco_diag_t *diag)
{
    const blco_tucker_problem_t *p = d->p;
    work_t *w = d->w;
    const int r = d->o->ranks[n];
    const uint64_t P = blco_ttm_cols(p->order, ranks, n), rows = rows_of(p, n);
    const int by_rows = rows <= P;
    const int k = (int)(by_rows ? rows : P);
    double *U = d->U[n];
    int err, keep = 0; /* singular vectors found */
    if ((err = d->ops->ttm(d->ctx, n, diag)) < 0)
        return err;
    if (k > 0 && ((err = d->ops->gram(d->ctx, n, w->gram, diag)) < 0 ||
                  (err = gram_eig(w, k, r, &keep, diag)) < 0))
        return err;
    if (by_rows || keep == 0) {
        memset(w->uc, 0, rows * (uint64_t)r * sizeof(double));
        if (by_rows)
            rows_from_gram(w, rows, r, keep);
        if ((err = lsv_finish(w, rows, r, p->rowmap[n], p->dims[n], U, diag)) < 0 ||
            (!init && (err = d->ops->put(d->ctx, n, U, r, diag)) < 0))
            return err;
    } else {
        const double *V = gram_vectors(w, P, keep);
        for (int j = 0; j < keep; j++)
            d->scale[j] = 1.0 / sqrt(w->eig[P - 1 - (uint64_t)j]);
        if ((err = d->ops->project(d->ctx, n, r, keep, V, d->scale, init ? w->uc : NULL, diag)) <
                0 ||
            (init && (err = lsv_finish(w, rows, r, p->rowmap[n], p->dims[n], U, diag)) < 0))
            return err;
    }
    if (!core)
        return 0;
    if ((err = d->ops->core(d->ctx, n, core, diag)) < 0)
        return err;
    *gnorm2 = sum_squares(core, P * (uint64_t)r);
    return 0;
}

/* Every factor into the result's host matrices. */
static int get_all(drv_t *d, blco_diag_t *diag)
{
    for (int m = 0; m < d->p->order; m++) {
        int err = d->ops->get(d->ctx, m, diag);
        if (err < 0)
            return err;
    }
    return 0;
}

/* Whether every Y(n) of these ranks can be had within ycap bytes: whole, or in row blocks
 * of one row at least when it has more rows than columns and p->ttm_rows is there. */
static int y_feasible(const blco_tucker_problem_t *p, const int *ranks, uint64_t ycap,
                      blco_diag_t *diag)
{
    for (int n = 0; n < p->order; n++) {
        uint64_t P = blco_ttm_cols(p->order, ranks, n), rows = rows_of(p, n);
        int cb, m0 = blco_tucker_col_block(p, ranks, n, ycap, &cb);
        if (rows * P * 8 <= ycap || (p->ttm_rows && rows > P && ycap >= P * 8) || cb > 0)
            continue;
        char a[32], b[32], c[32];
        if (rows <= P)
            return blco_diag_set(
                diag, 0, -BLCO_EBUDGET,
                "Y(%d), the TTM chain of mode %d, needs %s (%llu rows with nonzeros x %llu "
                "columns x 8 bytes); in column blocks (one column of mode %d's factor at a time) "
                "%s at least; Y may take %s: raise --mem-limit or lower the ranks",
                n + 1, n + 1, blco_format_size(rows * P * 8, a, sizeof a), (unsigned long long)rows,
                (unsigned long long)P, m0 + 1,
                blco_format_size(rows * (P / (uint64_t)ranks[m0]) * 8, c, sizeof c),
                blco_format_size(ycap, b, sizeof b));
        return blco_diag_set(
            diag, 0, -BLCO_EBUDGET,
            "Y(%d), the TTM chain of mode %d, needs %s (%llu rows with nonzeros x %llu columns x "
            "8 bytes)%s; Y may take %s: raise --mem-limit or lower the ranks",
            n + 1, n + 1, blco_format_size(rows * P * 8, a, sizeof a), (unsigned long long)rows,
            (unsigned long long)P, !p->ttm_rows ? "" : ": even one row of it does not fit",
            blco_format_size(ycap, b, sizeof b));
    }
    return 0;
}

int blco_tucker_hooi(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o,
                     blco_budget_t *budget, blco_tucker_result_t **out, blco_diag_t *diag)
{
    *out = NULL;
    int err = check_problem(p, o, diag);
    if (err < 0)
        return err;
    const int N = p->order;
    int lock_fd = -1; /* one run at a time in the checkpoint folder (ckpt.h) */
    if (o->checkpoint_dir) {
        if (mkdir(o->checkpoint_dir, 0777) < 0 && errno != EEXIST)
            return blco_diag_set(diag, 0, -errno, "checkpoint folder %s: %s", o->checkpoint_dir,
                                 strerror(errno));
        if ((lock_fd = blco_ckpt_claim(o->checkpoint_dir, BLCO_CKPT_TUCKER, diag)) < 0)
            return lock_fd;
    }
    blco_tucker_result_t *r = calloc(1, sizeof *r);
    if (!r) {
        blco_ckpt_release(o->checkpoint_dir, lock_fd);
        return -ENOMEM;
    }
    r->order = N;
    r->budget = budget;
    memcpy(r->dims, p->dims, sizeof r->dims);
    memcpy(r->ranks, o->ranks, sizeof r->ranks);
    work_t w = {.budget = budget, .threads = o->threads};
    double *Y = NULL;
    blco_tucker_ttm_count_t count = {0, 0};
    host_be_t hb = {.y = {.p = p}, .w = &w};
    drv_t dr = {.p = p, .o = o, .ops = &host_ops, .ctx = &hb, .w = &w, .U = r->U};
    int begun = 0;
    uint64_t ybytes = 0, gbytes = 0;
    int gn = 0, ymode = 0, sk[BLCO_MAX_MODES], cols[BLCO_MAX_MODES];
    const int kr = blco_tucker_kr_cols(p, o); /* the HOSVD start by MTTKRPs */
    const int tsketch = o->init == BLCO_TUCKER_INIT_HOSVD && !o->resume && !kr;
    blco_tucker_sketch_ranks(p, o->ranks, sk);
    if (!tsketch)
        memcpy(sk, o->ranks, sizeof sk);
    sizes(p, o->ranks, &ybytes, &gbytes, &gn, &ymode);
    if (tsketch)
        sizes(p, sk, &ybytes, &gbytes, &gn, &ymode);
    if (gn > GRAM_MAX) {
        err = blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                            "Y(%d) needs a %d x %d Gram matrix, above the %d x %d that LAPACK's "
                            "32-bit sizes allow: lower the ranks",
                            ymode + 1, gn, gn, GRAM_MAX, GRAM_MAX);
        goto fail;
    }
    r->core_size = 1;
    uint64_t ucb = 0, pmax = 0, rmax = 1;
    for (int m = 0; m < N; m++) {
        r->core_size *= (uint64_t)o->ranks[m];
        ucb = BLCO_MAX(ucb, rows_of(p, m) * (uint64_t)o->ranks[m] * 8);
        pmax = BLCO_MAX(pmax, blco_ttm_cols(N, sk, m));
        rmax = BLCO_MAX(rmax, (uint64_t)o->ranks[m]);
        if (rows_of(p, m) > INT32_MAX || blco_ttm_cols(N, sk, m) > INT32_MAX) {
            err = blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                                "mode %d: Y has more rows or columns than LAPACK's 32-bit "
                                "sizes allow",
                                m + 1);
            goto fail;
        }
    }
    const uint64_t yfull = ybytes;
    if (o->y_bytes && o->y_bytes < ybytes)
        ybytes = o->y_bytes;
    if ((err = y_feasible(p, o->ranks, ybytes, diag)) < 0 ||
        (tsketch && (err = y_feasible(p, sk, ybytes, diag)) < 0))
        goto fail;
    char a[32], b[32];
    if (p->ops && ybytes < yfull)
        blco_log(BLCO_LOG_INFO,
                 "Y(%d) (%s) is computed in blocks within %s: HOOI runs on the host backend "
                 "over the TTM chains (each Y(n) comes back)",
                 ymode + 1, blco_format_size(yfull, a, sizeof a),
                 blco_format_size(ybytes, b, sizeof b));
    else if (p->ops) {
        dr.ops = p->ops;
        dr.ctx = p->ops_ctx;
    }
    for (int m = 0; m < N; m++)
        cols[m] = BLCO_MAX(sk[m], o->ranks[m]);
    if (!(dr.scale = malloc((size_t)rmax * sizeof(double)))) {
        err = -ENOMEM;
        goto fail;
    }
    for (int m = 0; m < N; m++)
        if (blco_budget_alloc(budget, p->dims[m] * (uint64_t)o->ranks[m] * 8, (void **)&r->U[m]) <
            0) {
            err = blco_diag_set(diag, 0, -BLCO_EBUDGET,
                                "the factor U%d (%llu x %d) does not fit the budget", m + 1,
                                (unsigned long long)p->dims[m], o->ranks[m]);
            goto fail;
        }
    /* The Khatri-Rao start before the backend takes its memory (and Y is taken here): its
     * MTTKRPs stream the tensor through the engine whichever backend HOOI then runs on. */
    if (kr && (err = kr_start(p, o, kr, budget, r->U, diag)) < 0)
        goto fail;
    begun = 1; /* end is called whatever begin did */
    if ((err = dr.ops->begin(dr.ctx, o->ranks, cols, r->U, &count, diag)) == 1) {
        if (!p->ttm) {
            err = blco_diag_set(diag, 0, -EINVAL,
                                "the backend declined and there is no TTM callback to run HOOI "
                                "on the host");
            goto fail;
        }
        if (dr.ops->end)
            dr.ops->end(dr.ctx);
        dr.ops = &host_ops;
        dr.ctx = &hb;
        err = dr.ops->begin(dr.ctx, o->ranks, cols, r->U, &count, diag);
    }
    if (err < 0)
        goto fail;
    if (dr.ops != &host_ops) {
        ybytes = 0; /* the backend holds Y */
    } else if (blco_budget_alloc(budget, ybytes, (void **)&Y) < 0) {
        Y = NULL;
        err = blco_diag_set(
            diag, 0, -BLCO_EBUDGET,
            "Y(%d), the TTM chain of mode %d, needs %s (%llu rows with nonzeros x "
            "%llu columns x 8 bytes%s%s); %s of the budget is free: raise "
            "--mem-limit or lower the ranks",
            ymode + 1, ymode + 1, blco_format_size(yfull, a, sizeof a),
            (unsigned long long)rows_of(p, ymode),
            (unsigned long long)(yfull / 8 / BLCO_MAX(rows_of(p, ymode), 1)),
            ybytes < yfull ? "; in row blocks: " : "",
            ybytes < yfull ? blco_format_size(ybytes, (char[32]){0}, 32) : "",
            blco_format_size(blco_budget_limit(budget) - blco_budget_used(budget), b, sizeof b));
        goto fail;
    }
    hb.y.Y = Y;
    hb.y.ycap = ybytes;
    w.gram_bytes = gbytes ? gbytes : 8;
    w.eig_bytes = (size_t)(gn ? gn : 1) * 8;
    w.lwork_bytes = (size_t)BLCO_MAX((uint64_t)lwork_doubles(gn), pmax * rmax) * 8;
    w.uc_bytes = ucb ? ucb : 8;
    w.ucol_bytes = BLCO_MAX(col_copy_bytes(p, o->ranks, sk, ybytes), 8);
    if (blco_budget_alloc(budget, w.gram_bytes, (void **)&w.gram) < 0 ||
        blco_budget_alloc(budget, w.eig_bytes, (void **)&w.eig) < 0 ||
        blco_budget_alloc(budget, w.lwork_bytes, (void **)&w.lwork) < 0 ||
        blco_budget_alloc(budget, w.uc_bytes, (void **)&w.uc) < 0 ||
        blco_budget_alloc(budget, w.ucol_bytes, (void **)&w.ucol) < 0 ||
        blco_budget_alloc(budget, r->core_size * 8, (void **)&r->core) < 0) {
        err = blco_diag_set(diag, 0, -BLCO_EBUDGET,
                            "the Gram matrix, eigen workspace and core need more than the "
                            "budget has left: raise --mem-limit or lower the ranks");
        goto fail;
    }

    /* ---- initialization ---- */
    if (kr) {
        for (int m = 0; m < N; m++)
            if ((err = dr.ops->put(dr.ctx, m, r->U[m], o->ranks[m], diag)) < 0)
                goto fail;
    } else if (tsketch) {
        /* HOSVD, randomized: mode n's left singular vectors from the sketch
         * X_(n) (Omega_N kron .. kron Omega_1) with random orthonormal Omega_m of R_m + 2
         * columns, i.e. a TTM chain with Omega for factors. Exact when X_(n) has rank
         * <= R_n; a rank-R_n approximation of the unfolding's leading subspace otherwise. */
        double *om[BLCO_MAX_MODES] = {0};
        for (int m = 0; m < N && !err; m++)
            if (blco_budget_alloc(budget, p->dims[m] * (uint64_t)sk[m] * 8, (void **)&om[m]) < 0)
                err = blco_diag_set(diag, 0, -BLCO_EBUDGET,
                                    "the HOSVD sketch matrices do not fit the budget");
            else if (random_orthonormal(p, om[m], p->dims[m], sk[m], o->seed ^ 0x5eedull, m,
                                        o->threads) < 0)
                err = blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel a sketch matrix");
            else
                err = dr.ops->put(dr.ctx, m, om[m], sk[m], diag);
        for (int n = 0; n < N && !err; n++)
            err = mode_step(&dr, n, sk, 1, NULL, NULL, diag);
        for (int m = 0; m < N && !err; m++) /* the backend lets go of the sketches */
            err = dr.ops->put(dr.ctx, m, r->U[m], o->ranks[m], diag);
        for (int m = 0; m < N; m++)
            blco_budget_free(budget, om[m], om[m] ? p->dims[m] * (uint64_t)sk[m] * 8 : 0);
        if (err < 0)
            goto fail;
    } else {
        if (o->resume) {
            if ((err = ckpt_read(p, o, budget, r, r->U, diag)) < 0)
                goto fail;
        } else if (o->init == BLCO_TUCKER_INIT_DIR) {
            if ((err = read_factors(p, o->ranks, o->init_dir, budget, r->U, diag)) < 0)
                goto fail;
            for (int m = 0; m < N; m++)
                orthonormalize(r->U[m], p->dims[m], o->ranks[m], o->threads);
        } else {
            for (int m = 0; m < N && !err; m++)
                if (random_orthonormal(p, r->U[m], p->dims[m], o->ranks[m], o->seed, m,
                                       o->threads) < 0)
                    err = blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel U%d", m + 1);
            if (err < 0)
                goto fail;
        }
        for (int m = 0; m < N; m++)
            if ((err = dr.ops->put(dr.ctx, m, r->U[m], o->ranks[m], diag)) < 0)
                goto fail;
    }

    /* ---- iterations ---- */
    double prev = r->iterations ? r->fit : 0;
    int have_core = 0;
    while (r->iterations < o->max_iters) {
        double t0 = blco_now(), tt = 0, ts = 0, gnorm2 = 0;
        uint64_t calls0 = count.calls;
        double s0 = count.seconds;
        for (int n = 0; n < N; n++) {
            if ((err = mode_step(&dr, n, o->ranks, 0, n == N - 1 ? r->core : NULL, &gnorm2,
                                 diag)) < 0)
                goto fail;
            have_core |= n == N - 1;
        }
        tt = count.seconds - s0;
        ts = blco_now() - t0 - tt;
        double fit = 1.0 - sqrt(BLCO_MAX(0.0, p->norm2 - gnorm2)) / sqrt(p->norm2);
        if (isnan(fit)) {
            err = blco_diag_set(diag, 0, -BLCO_EVALUE, "the fit became NaN");
            goto fail;
        }
        r->fit = fit;
        if (r->iterations < 1024)
            r->fit_history[r->iterations] = fit;
        r->iterations++;
        double delta = fit - prev;
        prev = fit;
        if (o->checkpoint_dir &&
            ((err = get_all(&dr, diag)) < 0 || (err = ckpt_write(p, o, r, r->U, diag)) < 0))
            goto fail;
        blco_tucker_iter_t it = {.iteration = r->iterations,
                                 .fit = fit,
                                 .delta = delta,
                                 .seconds = blco_now() - t0,
                                 .ttm_seconds = tt,
                                 .svd_seconds = ts,
                                 .ttm_calls = count.calls - calls0};
        if (o->on_iter && o->on_iter(o->user, &it)) {
            err = -BLCO_ECANCELED;
            goto fail;
        }
        if (r->iterations > 1 && fabs(delta) < o->tol * fabs(fit)) { /* relative */
            r->converged = 1;
            break;
        }
    }
    if (!have_core && /* resumed at max_iters: the core from the checkpoint's factors */
        ((err = dr.ops->ttm(dr.ctx, N - 1, diag)) < 0 ||
         (err = dr.ops->core(dr.ctx, N - 1, r->core, diag)) < 0))
        goto fail;
    if ((err = get_all(&dr, diag)) < 0)
        goto fail;
    if (dr.ops->end)
        dr.ops->end(dr.ctx);
    free(dr.scale);
    blco_budget_free(budget, Y, ybytes);
    work_free(&w);
    for (int m = 0; m < N; m++)
        if (blco_labels_rows_to_user(p->labels, m, r->U[m], (uint64_t)o->ranks[m]) < 0) {
            err = blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel U%d", m + 1);
            blco_tucker_result_destroy(r);
            blco_ckpt_release(o->checkpoint_dir, lock_fd);
            return err;
        }
    blco_ckpt_release(o->checkpoint_dir, lock_fd);
    *out = r;
    return 0;
fail:
    if (begun && dr.ops->end)
        dr.ops->end(dr.ctx);
    free(dr.scale);
    blco_budget_free(budget, Y, Y ? ybytes : 0);
    work_free(&w);
    blco_tucker_result_destroy(r);
    blco_ckpt_release(o->checkpoint_dir, lock_fd);
    return err;
}

int blco_tucker_write(const blco_tucker_result_t *r, const char *dir, blco_diag_t *diag)
{
    char path[4200];
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return blco_diag_set(diag, 0, -errno, "%s: %s", dir, strerror(errno));
    for (int m = 0; m < r->order; m++) {
        snprintf(path, sizeof path, "%s/U%d.npy", dir, m + 1);
        int err = blco_npy_write(path, r->dims[m], (uint64_t)r->ranks[m], r->U[m]);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: %s", path, blco_strerror(err));
    }
    snprintf(path, sizeof path, "%s/core.npy", dir);
    uint64_t shape[BLCO_MAX_MODES]; /* the N-d core, as TensorLy's tucker returns it */
    for (int m = 0; m < r->order; m++)
        shape[m] = (uint64_t)r->ranks[m];
    int err = blco_npy_write_shape(path, r->order, shape, r->core);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: %s", path, blco_strerror(err));
    return 0;
}
