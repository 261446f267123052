/* Seeded tensor generators. Output is a pure function of the options (seed included),
 * whatever the thread count, and is produced in batches so any size can be streamed. */
#ifndef BLCO_GEN_H
#define BLCO_GEN_H

#include "blco/coo.h"

#ifdef __cplusplus
extern "C" {
#endif

enum blco_gen_kind {
    BLCO_GEN_UNIFORM = 0,   /* each index uniform in [0, I_n), values uniform in (0, 1] */
    BLCO_GEN_POWERLAW,      /* index = perm_n(floor(I_n * u^skew[n])): a few heavy slices */
    BLCO_GEN_LOWRANK,       /* exact sparse rank-`rank` tensor: best rank-`rank` fit is 1 */
};

/* LOWRANK in detail. Component r (0..rank-1) owns, in every mode n, its own s_n rows,
 * disjoint from every other component's (rows r*s_n .. r*s_n + s_n - 1 of a numbering
 * that a seeded bijection of [0, dims[n]) scatters), with s_n <= dims[n] / rank and
 * prod s_n close to nnz / rank; its nonzeros are the whole dense s_1 x ... x s_N block,
 * so no coordinate repeats and the tensor has rank * prod s_n nonzeros. Each value is
 * a_0[i_0] * a_1[i_1] * ... * a_{N-1}[i_{N-1}] evaluated left to right in double, with
 * factor entries uniform in [0.5, 1.5) drawn from the seed.
 * Fit guarantee: X equals the Kruskal tensor of the factors from
 * blco_gen_lowrank_factor() bit for bit when each entry is evaluated in that order (the
 * other components add exact zeros), so a rank-`rank` CP model reaches fit 1 up to
 * floating-point rounding of the solver itself. The components' supports are disjoint,
 * so every factor matrix has orthogonal columns of full rank; from order 3 on (Kruskal's
 * condition) the decomposition is unique up to scaling and order of the components. */

typedef struct blco_gen_opts {
    int kind;                         /* enum blco_gen_kind */
    int order;                        /* 2..BLCO_MAX_MODES */
    uint64_t dims[BLCO_MAX_MODES];
    uint64_t nnz;                     /* nonzeros to draw (lowrank: approximate target) */
    uint64_t seed;
    double skew[BLCO_MAX_MODES];      /* power-law exponent per mode, 1 (uniform) to 1e6 */
    int rank;                         /* lowrank: number of components */
    int threads;                      /* 0 = default */
} blco_gen_opts_t;

BLCO_API void blco_gen_opts_default(blco_gen_opts_t *o);

/* Receives one batch of n generated nonzeros (0-based ind[m][k], val[k]); batches arrive
 * in order on the thread that called blco_gen_run, outside any parallel region (the sink
 * may use OpenMP itself); the arrays are valid until the sink returns. Return 0 to
 * continue, negative to stop (that code is then returned by blco_gen_run). */
typedef int (*blco_gen_sink_fn)(void *user, const uint64_t *const *ind, const double *val,
                                uint64_t n);

/* Streams the tensor through `sink` in batches of up to 65536 nonzeros. UNIFORM and
 * POWERLAW draw coordinates independently, so a coordinate may repeat (readers sum
 * repeats); LOWRANK never repeats one. Returns 0, -EINVAL (invalid options: order
 * outside 2..BLCO_MAX_MODES, a dim or nnz of 0, a POWERLAW skew outside [1, 1e6], LOWRANK
 * dims too small for the rank and nnz; the log says which), -ENOMEM, or the sink's code. */
BLCO_API int blco_gen_run(const blco_gen_opts_t *o, blco_gen_sink_fn sink, void *user);

/* Generates into a new COO tensor (dims = o->dims, duplicates left as drawn), its arrays
 * from `budget`. Returns 0, -EINVAL as blco_gen_run, -BLCO_EBUDGET or -ENOMEM. */
BLCO_API int blco_gen_coo(const blco_gen_opts_t *o, blco_budget_t *budget, blco_coo_t **out);

/* LOWRANK only: fills out[i * rank + r] (dims[mode] x rank, row-major) with the factor
 * matrix of `mode`, zero outside each component's rows. Needs dims[mode] * rank doubles.
 * Returns 0 or -EINVAL (bad options, or a kind other than LOWRANK). */
BLCO_API int blco_gen_lowrank_factor(const blco_gen_opts_t *o, int mode, double *out);

/* Parses a generator name ("uniform", "powerlaw", "lowrank"). Returns the kind or -EINVAL. */
BLCO_API int blco_gen_kind_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif
