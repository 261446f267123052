/* The distributed side of CP-ALS (src/dist.c): how a mode's partial MTTKRP rows are
 * combined across MPI ranks, and which rows a rank owns. Internal to the library; every
 * function is the single-process case (nothing to do) without MPI or with one rank. */
#ifndef BLCO_DIST_INTERNAL_H
#define BLCO_DIST_INTERNAL_H

#include <stdint.h>

#include "blco/core.h"

/* Whether a mode of `rows` rows takes the all-reduce (1) or the long way (0). */
int blco_dist_is_short(uint64_t rows);

/* The rows [*lo, *hi) that this rank owns of a mode of `rows` rows: equal blocks in rank
 * order (all of them on one rank). */
void blco_dist_rows(uint64_t rows, uint64_t *lo, uint64_t *hi);

/* Combines this rank's partial MTTKRP m (rows x rank, row major) of `mode` with the
 * other ranks'. Short modes: m becomes the sum on every rank. Long modes: a reduce-scatter
 * by row blocks that sends only the rows this rank touched (its first to last nonzero
 * row): m's owned rows (blco_dist_rows) become the sum, the others are left undefined.
 * Scratch comes from `budget`. Returns 0, -BLCO_EBUDGET or -EIO. */
int blco_dist_combine(int mode, double *m, uint64_t rows, int rank, blco_budget_t *budget);

/* All-gather of a factor after the owned rows were updated: a (rows x rank) complete on
 * every rank. Returns 0 or -EIO. */
int blco_dist_gather_rows(int mode, double *a, uint64_t rows, int rank);

/* All-reduce of n doubles counted under `mode` (-1: not a mode's): sum, or maximum when
 * `max` is set. Returns 0 or -EIO. */
int blco_dist_reduce(int mode, double *buf, uint64_t n, int max);

/* Collective: the largest of the ranks' codes' magnitudes, negated (0 when all are 0), so
 * every rank leaves a loop together when one fails. */
int blco_dist_agree(int err);

#endif
