/* What the streaming-engine tests (test_stream.c, test_stream_gpu.c) check results with:
 * positive random factors, the same tensor with |values|, and the error of a result against
 * the naive oracle relative to the same MTTKRP of |x| (a bound that survives cancellation). */
#ifndef BLCO_TEST_STREAM_ORACLE_H
#define BLCO_TEST_STREAM_ORACLE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"

/* rows x rank entries in [0.25, 1.25): > 0, so the bound below is the MTTKRP of |x|. */
static inline double *rand_matrix(uint64_t rows, int rank, uint64_t seed)
{
    double *a = malloc(rows * rank * sizeof *a + 8);
    for (uint64_t i = 0; i < rows * (uint64_t)rank; i++)
        a[i] = (double)(check_rand(&seed) >> 11) * 0x1.0p-53 + 0.25;
    return a;
}

/* The largest |opt - ref| in units of 1e-12 x bound; INFINITY beyond 1e6 of them or NaN. */
static inline double worst_ratio(const double *opt, const double *ref, const double *bound,
                                 uint64_t n)
{
    double w = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(opt[i] - ref[i]), b = bound[i] * 1e-12 + 1e-300;
        if (!(e <= b * 1e6)) /* NaN too */
            return INFINITY;
        w = fmax(w, e / b);
    }
    return w;
}

/* x with |values| (same coordinates and dims). */
static inline blco_coo_t *abs_copy(const blco_coo_t *x)
{
    blco_coo_t *a;
    if (blco_coo_create(&a, x->order, x->nnz, NULL) < 0)
        return NULL;
    uint64_t c[BLCO_MAX_MODES];
    for (uint64_t k = 0; k < x->nnz; k++) {
        for (int m = 0; m < x->order; m++)
            c[m] = x->ind[m][k];
        blco_coo_push(a, c, fabs(x->val[k]));
    }
    memcpy(a->dims, x->dims, sizeof a->dims);
    return a;
}

#endif
