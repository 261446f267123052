/* The in-memory coordinate (COO) tensor: what text readers and generators produce and
 * what the naive MTTKRP oracle and the BLCO builder consume. */
#ifndef BLCO_COO_H
#define BLCO_COO_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nonzeros in structure-of-arrays form: ind[n][k] is the 0-based index of nonzero k in
 * mode n, val[k] its value. dims[n] > 0 and every ind[n][k] < dims[n] once built.
 * All arrays come from `budget` (which may be NULL) and are owned by the tensor. */
typedef struct blco_coo {
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    uint64_t nnz;
    uint64_t cap;
    uint64_t *ind[BLCO_MAX_MODES];
    double *val;
    blco_budget_t *budget;
} blco_coo_t;

/* Creates an empty tensor of `order` modes (2..BLCO_MAX_MODES) with room for `cap`
 * nonzeros; dims start at 0. Returns 0, -EINVAL, -BLCO_EUNSUPPORTED or -BLCO_EBUDGET. */
BLCO_API int blco_coo_create(blco_coo_t **out, int order, uint64_t cap, blco_budget_t *budget);
/* Grows the capacity to at least `cap` (keeps contents). Returns 0 or -BLCO_EBUDGET. */
BLCO_API int blco_coo_reserve(blco_coo_t *c, uint64_t cap);
/* Appends one nonzero (growing geometrically), 0-based indices. Does not touch dims. */
BLCO_API int blco_coo_push(blco_coo_t *c, const uint64_t *idx, double val);
BLCO_API void blco_coo_destroy(blco_coo_t *c);

/* What to do with repeated coordinates. KEEP leaves them for a later stage that merges
 * anyway (blco_tensor_from_coo sums and counts them), which saves a sort. */
enum blco_dup_policy { BLCO_DUP_SUM = 0, BLCO_DUP_ERROR = 1, BLCO_DUP_KEEP = 2 };

/* Finds repeated coordinates with a sort by coordinate (mode 1 slowest) and merges them:
 * sums them under BLCO_DUP_SUM and returns -BLCO_EDUP under BLCO_DUP_ERROR (the diag
 * names the coordinate); -BLCO_EVALUE when repeats sum to infinity. Without repeats the
 * order is left as it was; with them the result is in coordinate order. *ndup (may be
 * NULL) receives the number of entries merged away.
 * Uses a radix sort with scratch memory from the tensor's budget. */
BLCO_API int blco_coo_dedup(blco_coo_t *c, int policy, uint64_t *ndup, blco_diag_t *diag);

/* Sets dims to the largest index per mode plus one. */
BLCO_API void blco_coo_fit_dims(blco_coo_t *c);

/* Sum of squared values. */
BLCO_API double blco_coo_norm2(const blco_coo_t *c);

#ifdef __cplusplus
}
#endif
#endif
