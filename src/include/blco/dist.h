/* Distributed runs over MPI ranks (ARCHITECTURE §16): each rank streams a contiguous,
 * nonzero-balanced range of the .blco file's segments and the ranks combine their partial
 * MTTKRP outputs with collectives. src/dist.c is the only file that calls MPI; in a build
 * without it (-Dmpi=disabled) every function here is the single-process case. */
#ifndef BLCO_DIST_H
#define BLCO_DIST_H

#include "blco/file.h"
#include "blco/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Joins the MPI job when an MPI launcher started this process (mpirun, mpiexec, srun with
 * PMI/PMIx: it sets OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), else stays a single
 * process and calls nothing of MPI, so a plain run needs no launcher. Call once, first
 * thing in main. Returns 0, or -BLCO_EUNSUPPORTED when a launcher started several ranks
 * and this build has no MPI (the diag says so: each rank would redo the whole job), or
 * -EIO when MPI_Init fails. */
BLCO_API int blco_dist_init(int *argc, char ***argv, blco_diag_t *diag);

/* This process's rank (0 when not distributed) and the number of ranks (1). */
BLCO_API int blco_dist_rank(void);
BLCO_API int blco_dist_size(void);

/* The number of ranks on this machine, this one included (MPI_COMM_TYPE_SHARED), 1 when
 * not distributed: blco_budget_default() divides the machine's memory between them. */
BLCO_API int blco_dist_local_size(void);

/* Whether this build has MPI (-Dmpi). */
BLCO_API int blco_dist_built(void);

/* Leaves the MPI job (after a barrier); nothing when not distributed. */
BLCO_API void blco_dist_finalize(void);

/* Ends every rank of the job with `status` (MPI_Abort), after the caller printed why;
 * a single process just exits. Never returns. */
BLCO_API void blco_dist_abort(int status) __attribute__((__noreturn__));

/* For a rank told that another failed (-BLCO_ECANCELED from a collective step): waits in
 * a barrier that the failed rank never reaches until its blco_dist_abort ends the job,
 * and aborts itself after 60 s if that never comes. A single process exits(1). Never
 * returns. */
BLCO_API void blco_dist_await_abort(void) __attribute__((__noreturn__));

/* Collective: whether any rank passes a nonzero `failed`. A rank that failed on its own
 * (a file it cannot open) prints why and calls blco_dist_abort; ranks that wait for a
 * collective call this first so a failure elsewhere never leaves them hanging. */
BLCO_API int blco_dist_any(int failed);

/* Collective: checks that every rank opened the same file: its size and header checksum
 * equal rank 0's. Returns 0, or -BLCO_EMISMATCH on every rank, with the diag naming the
 * first rank that differs and both sizes and checksums; -errno reading the checksum. */
BLCO_API int blco_dist_check_file(const blco_file_t *f, blco_diag_t *diag);

/* Collective: checks that every rank was given the same options that shape the
 * computation: n of them, names[k] (e.g. "--rank") with this rank's values[k] as text
 * (compared whole). Ranks given different options would otherwise call different
 * collectives and crash or hang. Returns 0 when all agree (and always alone). Else the
 * lowest rank that differs from rank 0 returns -BLCO_EMISMATCH with the diag naming the
 * option and both values ("--rank is 5 here, 4 on rank 0..."), and every other rank
 * -BLCO_ECANCELED (it waits for that rank to end the job: blco_dist_await_abort). -EIO
 * when the collective fails. */
BLCO_API int blco_dist_check_opts(int n, const char *const *names, const char *const *values,
                                  blco_diag_t *diag);

/* The segments [*seg_begin, *seg_end) that `rank` of `size` streams: contiguous, the
 * ranks in file order, cut where the nonzeros before a segment reach rank * nnz / size,
 * so the shares differ by at most one segment's nonzeros. Some ranges may be empty (more
 * ranks than segments). */
BLCO_API void blco_dist_partition(const blco_file_t *f, int rank, int size, uint64_t *seg_begin,
                                  uint64_t *seg_end);

/* Collective sum of n doubles in place (MPI_Allreduce), its bytes and time counted under
 * `mode` (0-based; -1: not counted); nothing alone. Returns 0 or -EIO. */
BLCO_API int blco_dist_sum(int mode, double *buf, uint64_t n);

/* Collective: rank 0's n bytes to every rank. Returns 0 or -EIO. */
BLCO_API int blco_dist_bcast(void *buf, uint64_t n);

/* Where the collectives of the CP-ALS modes count their bytes and time (stats->comm_*;
 * NULL: nowhere). Set before the run. */
BLCO_API void blco_dist_set_stats(blco_stats_t *stats);

/* Mode lengths below this many rows are combined with an all-reduce; longer ones with a
 * reduce-scatter of row blocks, the update on the owned rows, and an all-gather (default
 * BLCO_DIST_SHORT_ROWS; 0 sends every mode the long way). */
#define BLCO_DIST_SHORT_ROWS 4096
BLCO_API void blco_dist_set_short_rows(uint64_t rows);

#ifdef __cplusplus
}
#endif
#endif
