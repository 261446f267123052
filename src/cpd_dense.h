/* The small dense algebra of CP-ALS (src/cpd_dense.c): the R x R solve (Cholesky, or a
 * pseudo-inverse when V is singular), the tall factor's solve with its column statistics
 * and its scaling with its Gram (BLAS-3 on blocks of rows), and inner products. Every
 * reduction over rows sums per-chunk partials in chunk order, with chunks that depend only
 * on the row count and the rank, so results are the same bits whatever the thread count.
 * Internal to the library. */
#ifndef BLCO_CPD_DENSE_H
#define BLCO_CPD_DENSE_H

#include <stddef.h>
#include <stdint.h>

/* What blco_cpd_solve (and its reference) reduces over each column of the solution. */
enum { BLCO_CPD_STAT_SUMSQ = 0, BLCO_CPD_STAT_MAXABS = 1 };

/* Doubles of scratch the row reductions need for `rank` (the `partial` arguments). */
size_t blco_cpd_partial_doubles(int rank);

/* Doubles of the matrix `f` and of the LAPACK `work` of blco_cpd_factor for `rank`. */
size_t blco_cpd_factor_doubles(int rank);
size_t blco_cpd_factor_work_doubles(int rank);

/* Prepares the solve of A V = M for a symmetric positive semi-definite V (rank x rank):
 * f = V^-1 (through Cholesky) when V is positive definite and its reciprocal condition
 * number (1-norm estimate) is at least rank * DBL_EPSILON, else f = the pseudo-inverse of
 * V from its eigendecomposition, eigenvalues below rank * DBL_EPSILON * the largest
 * treated as 0. f is symmetric (row or column major alike). *pinv says which (1: the
 * pseudo-inverse). Returns 0, or -EINVAL when LAPACK refuses its arguments or the
 * eigensolver does not converge (V holds NaN). */
int blco_cpd_factor(const double *v, int rank, double *f, double *work, int *pinv);

/* A = M f (A and M rows x rank, row major, not aliased; f need not be symmetric) by
 * BLAS-3 on cache-sized blocks of rows (at ranks 8 and 16 with AVX-512, from one block of
 * rows, register-blocked loops instead), each block made in cache and streamed out to A;
 * colstat[r] = the sum of squares (SUMSQ) or the largest magnitude (MAXABS) of column r of
 * A, gram = A^T A (both triangles) and, unless dot is NULL, dot[r] = sum_i m[i, r] a[i, r],
 * all taken from each block while it is in cache. The Gram is the same bits as
 * blco_cpd_scale_gram(a, ..., NULL, gram, ...) gives on the A written. */
void blco_cpd_solve_gram(const double *f, int rank, const double *m, uint64_t rows, double *a,
                         int stat, double *colstat, double *gram, double *dot, double *partial,
                         int threads);
/* Up to BLCO_CPD_INPLACE_MAX_RANK (blco_internal.h), blco_cpd_solve_gram may also be given
 * a == m (the product made in place: each block of rows is made in a scratch block before
 * it replaces the rows of M). */

/* gram[p][q] *= 1 / (scale[p] scale[q]), a factor 1 where scale <= 0: the Gram of A with
 * its columns divided by scale, from the Gram of A. */
void blco_cpd_gram_unscale(double *gram, int rank, const double *scale);

/* Divides column r of A by scale[r] where scale[r] > 0 (scale NULL: no scaling), then
 * gram = A^T A (rank x rank, symmetric, both triangles): one sweep, each block scaled and
 * then its Gram updated (a GEMM) while it is in cache. The Gram is a function of the final
 * A alone (so a resumed run rebuilds the same bits). */
void blco_cpd_scale_gram(double *a, uint64_t rows, int rank, const double *scale, double *gram,
                         double *partial, int threads);

/* The per-row reference of the dense step, as the library computed it before the BLAS-3
 * passes (a GEMV per row, a rank-1 Gram update per row): A = M f with colstat, then
 * blco_cpd_scale_gram_ref. Same contracts; checked against the BLAS-3 passes in tests and
 * selected by BLCO_CPD_DENSE=rows as the benchmarks' same-run baseline. */
void blco_cpd_solve_rows_ref(const double *f, int rank, const double *m, uint64_t rows, double *a,
                             int stat, double *colstat, double *partial, int threads);
void blco_cpd_scale_gram_ref(double *a, uint64_t rows, int rank, const double *scale, double *gram,
                             double *partial, int threads);

/* sum_r lambda[r] * sum_i m[i, r] * a[i, r]. */
double blco_cpd_inner(const double *m, const double *a, const double *lambda, uint64_t rows,
                      int rank, double *partial, int threads);

#endif
