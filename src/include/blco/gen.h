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

typedef struct blco_gen_opts {
    int kind;                         /* enum blco_gen_kind */
    int order;                        /* 2..BLCO_MAX_MODES */
    uint64_t dims[BLCO_MAX_MODES];
    uint64_t nnz;                     /* nonzeros to draw (lowrank: approximate target) */
    uint64_t seed;
    double skew[BLCO_MAX_MODES];      /* power-law exponent per mode (>= 1; 1 = uniform) */
    int rank;                         /* lowrank: number of components */
    int threads;                      /* 0 = default */
} blco_gen_opts_t;

void blco_gen_opts_default(blco_gen_opts_t *o);

/* Receives one batch of n generated nonzeros (0-based ind[m][k], val[k]); batches arrive
 * in order from one thread at a time. Return 0 to continue, negative to stop (that code
 * is then returned by blco_gen_run). */
typedef int (*blco_gen_sink_fn)(void *user, const uint64_t *const *ind, const double *val,
                                uint64_t n);

/* Streams the tensor through `sink`. UNIFORM and POWERLAW draw coordinates independently,
 * so a coordinate may repeat (readers sum repeats); LOWRANK never repeats one.
 * Returns 0, -EINVAL, or the sink's code. */
int blco_gen_run(const blco_gen_opts_t *o, blco_gen_sink_fn sink, void *user);

/* Generates into a new COO tensor (dims = o->dims, duplicates left as drawn). */
int blco_gen_coo(const blco_gen_opts_t *o, blco_budget_t *budget, blco_coo_t **out);

/* Parses a generator name ("uniform", "powerlaw", "lowrank"). Returns the kind or -EINVAL. */
int blco_gen_kind_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif
