/* CP-ALS: a rank-R CP decomposition X ~ sum_r lambda_r a1_r o a2_r o ... o aN_r computed by
 * alternating least squares. The MTTKRP is a callback, so the same algorithm runs over an
 * in-memory tensor, the streaming engine or a GPU. */
#ifndef BLCO_CPD_H
#define BLCO_CPD_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Computes out = MTTKRP of the tensor for `mode` (0-based) with the given factors (row
 * major, dims[m] x rank; factors[mode] is not read, and out may be factors[mode]: CP-ALS
 * makes M in the place of the factor it replaces). Overwrites out (dims[mode] x rank).
 * Called once per mode per iteration, modes in order 0..order-1, from the thread that
 * called blco_cpd_als. Returns 0 or a negative code (the run stops with it). */
typedef int (*blco_cpd_mttkrp_fn)(void *ctx, int mode, int rank, const double *const *factors,
                                  double *out);

/* A CP-ALS backend: where the factor matrices, the MTTKRP output M and the sweeps over
 * them live (host memory, or GPUs). The algorithm keeps what is R x R or shorter on the host
 * and hands the backend only that, so a backend that holds the tall matrices on a device
 * moves O(R^2) bytes per mode, not O(I_n R). Matrices are dims[m] x rank, row major. Each
 * call returns 0 or a negative code (the run stops with it; the diag may say why). Calls
 * come from the thread that called blco_cpd_als. Without ops (blco_cpd_problem_t.ops
 * NULL), the run uses the host backend over the `mttkrp` callback. */
typedef struct blco_cpd_ops {
    /* Once, first: the rank and the result's host factor arrays (dims[m] x rank each),
     * which the backend may use as its storage or as the mirror that put and get copy. */
    int (*begin)(void *ctx, int rank, double *const *host_factors, blco_diag_t *diag);
    /* Factor m := host_factors[m] (the start, a resumed checkpoint). */
    int (*put)(void *ctx, int m, blco_diag_t *diag);
    /* host_factors[m] := factor m (before a checkpoint and at the end). */
    int (*get)(void *ctx, int m, blco_diag_t *diag);
    /* M := the MTTKRP of `mode` with the current factors. */
    int (*mttkrp)(void *ctx, int mode, blco_diag_t *diag);
    /* Factor `mode` := M F, F[p][q] = fsym[p][q] / fdiv[p] (fsym symmetric, R x R; fdiv R
     * values); then colstat[r] := the sum of squares (stat 0) or the largest magnitude
     * (stat 1) of the new factor's column r, gram := its R x R Gram A^T A, and unless dot
     * is NULL dot[r] := sum_i M(i, r) A(i, r). */
    int (*solve)(void *ctx, int mode, const double *fsym, const double *fdiv, int stat,
                 double *colstat, double *gram, double *dot, blco_diag_t *diag);
    /* gram := factor m's R x R Gram A^T A. */
    int (*gram)(void *ctx, int m, double *gram, blco_diag_t *diag);
    /* Last, whatever happened (may be NULL). */
    void (*end)(void *ctx);
    /* Optional, both or neither (NULL: a checkpoint calls get for every factor and copies
     * the host arrays). A checkpoint's copy of every factor m into dst[m] (host, dims[m] x
     * rank), queued without waiting for it: the copies run while the next iteration does,
     * and the backend keeps each factor as it is until its copy has landed (the solve of
     * that mode waits for it). The dst arrays lie in one buffer, the same for the whole
     * run, which the backend may page-lock until it is called with dst NULL (the buffer is
     * about to be freed) or until end. snapshot_wait returns once every queued copy has
     * landed. */
    int (*snapshot)(void *ctx, double *const *dst, blco_diag_t *diag);
    int (*snapshot_wait)(void *ctx, blco_diag_t *diag);
    /* Optional, all four or none: what a distributed run (blco_cpd_problem_t.distributed,
     * more than one rank) needs to run over the backend. Rows [lo, hi) of M to the host
     * (dst, row lo first) and from it (src); solve_rows = solve on rows [lo, hi) of M and of
     * factor `mode` only (colstat, gram and dot over those rows; the factor's other rows
     * are left as they are); get_rows = get of rows [lo, hi) of factor m into host_factors[m].
     * The driver combines the ranks' partial MTTKRPs on the host (each rank's M comes back
     * once per mode), each rank solves its share of a long mode's rows, and the new factor,
     * gathered on the host, goes back by put. Without them a distributed run takes the host
     * backend over the problem's MTTKRP callback. */
    int (*m_get)(void *ctx, int mode, uint64_t lo, uint64_t hi, double *dst, blco_diag_t *diag);
    int (*m_put)(void *ctx, int mode, uint64_t lo, uint64_t hi, const double *src,
                 blco_diag_t *diag);
    int (*solve_rows)(void *ctx, int mode, uint64_t lo, uint64_t hi, const double *fsym,
                      const double *fdiv, int stat, double *colstat, double *gram, double *dot,
                      blco_diag_t *diag);
    int (*get_rows)(void *ctx, int m, uint64_t lo, uint64_t hi, blco_diag_t *diag);
} blco_cpd_ops_t;

typedef struct blco_cpd_problem {
    int order; /* 2..BLCO_MAX_MODES */
    uint64_t dims[BLCO_MAX_MODES];
    double norm2; /* ||X||^2 (from the .blco header); must be > 0 */
    blco_cpd_mttkrp_fn mttkrp; /* the host backend's MTTKRP (unused with ops) */
    void *ctx;
    /* A backend of its own (a GPU's: blco_stream_cpd_ops), or NULL: the host backend over
     * `mttkrp`. With `distributed`, only a backend with the row operations (m_get, m_put,
     * solve_rows, get_rows). */
    const blco_cpd_ops_t *ops;
    void *ops_ctx;
    /* Set on every rank of a distributed run (blco/dist.h, more than one rank): the
     * callback returns this rank's partial MTTKRP, which the ranks combine; rank 0 sets up
     * the factors (random, init_dir or the checkpoint: only rank 0 needs to see those
     * folders) and sends them to the others, and only rank 0 writes checkpoints. Every
     * rank ends with the same result. Ignored with one rank. */
    int distributed;
    /* The tensor's indices were relabeled (blco-pack --reorder; NULL: not). The callback and
     * the algorithm work in the stored indices; init_dir, the checkpoints and the result
     * are in the source's (a random start is drawn in the source's indices too, so a run
     * gives the same factors with or without relabeling). */
    const struct blco_labels *labels;
} blco_cpd_problem_t;

/* What is reported after every iteration. */
typedef struct blco_cpd_iter {
    int iteration;     /* 1-based, counting iterations before a resume */
    double fit, delta; /* delta = fit - previous fit (fit on the first iteration) */
    double seconds;    /* wall time of the iteration, checkpoint included */
    double mode_seconds[BLCO_MAX_MODES];        /* MTTKRP + solve of each mode */
    double mode_mttkrp_seconds[BLCO_MAX_MODES]; /* the MTTKRP part of mode_seconds */
    double mttkrp_seconds;                      /* sum of the MTTKRPs */
    /* The rest of the modes (Hadamard of Grams, solve, normalization, Gram update) and
     * the fit. */
    double solve_seconds;
    double gram_seconds;       /* part of solve_seconds: column scaling and Gram update */
    double fit_seconds;        /* part of solve_seconds: the fit */
    double checkpoint_seconds; /* the checkpoint's time in the iteration (0 without one):
                                  the factors to the host and into the writer's copy, and
                                  waiting for the previous write (see checkpoint_dir); with
                                  a GPU backend, the wait for the previous checkpoint's
                                  copies from the device, which run beside this
                                  iteration's first MTTKRP */
    int pinv_modes;            /* modes whose V was singular or ill-conditioned and were
                                  solved with the pseudo-inverse instead of Cholesky */
    int checkpoint_iteration;  /* the last iteration whose checkpoint is complete on disk
                                  (0: none yet; this one or the one before) */
} blco_cpd_iter_t;

/* A fit below this explains almost none of the tensor (random data, or too small a rank):
 * the tools and the Python package warn when a decomposition ends below it. */
#define BLCO_FIT_LOW 0.01

typedef struct blco_cpd_opts {
    int rank;             /* >= 1; no default (0 is refused) */
    int max_iters;        /* default 50; counts iterations before a resume too */
    double tol;           /* stop when |delta| < tol * |fit| (a change relative to the
                             fit, from iteration 2); default 1e-5; 0: never */
    uint64_t seed;        /* random initialization, uniform [0, 1); default 1. The same
                             seed gives the same factors whatever the thread count */
    const char *init_dir; /* NULL: random; else a folder with A1.npy..AN.npy */
    /* NULL: none. Else after every iteration the state is written there: a folder
     * iter-NNNNNN.XXXXXXXX (iteration, run nonce) holding A1.npy..AN.npy and lambda.npy
     * (shape (R,); (R, 1) in states of earlier builds, read alike) of that iteration (columns scaled as the algorithm keeps them, not yet unit
     * norm: column r of An divided by the state's scale of mode n, r is the iteration's
     * normalized column), then the file `state` (text, version 2: problem, rank, seed,
     * iteration, fit history, the folder's name, the column scales; version 1 states,
     * without scales, are read as scales 1) written to a temporary name and renamed, last; the folders of
     * earlier iterations are removed after. A kill at any moment leaves a complete,
     * consistent checkpoint. A run without `resume` replaces what the folder held.
     * The writing (files, fsync) runs on a thread of its own beside the next iteration,
     * from a copy of the factors taken from the budget (without room for that copy, or
     * with BLCO_CKPT_SYNC=1 in the environment, between iterations as before): one write
     * in flight at most, the next checkpoint waits for it, and blco_cpd_als returns (also
     * when stopped or failing) only once it is complete. */
    const char *checkpoint_dir;
    /* Continue from checkpoint_dir (needs it; excludes init_dir). The continued run equals
     * an uninterrupted one bit for bit when the MTTKRP callback gives the same bits for the
     * same factors whichever call it is (the streaming engine's CPU kernels, on any fixed
     * thread count: blco/stream.h); the dense algebra does, whatever `threads`. */
    int resume;
    int threads; /* for the dense algebra; 0 = default */
    /* Called after each iteration, once its checkpoint is handed to the writer (may be
     * NULL; it->checkpoint_iteration says which is complete); a nonzero return stops the
     * run with -BLCO_ECANCELED (its checkpoint then completes before the run returns). */
    int (*on_iter)(void *user, const blco_cpd_iter_t *it);
    /* Called as iteration `iteration` (1-based, counting those before a resume) starts,
     * before its first MTTKRP (may be NULL): progress reports say which one runs. */
    void (*on_iter_begin)(void *user, int iteration);
    void *user;
    /* Who runs (a tool and its options, one line; NULL: "the blco library"): recorded in
     * the checkpoint's state, and named when another tool finds the folder. A checkpoint
     * folder is locked while a run uses it: a second run is refused (-EBUSY), and so is a
     * folder holding another tool's checkpoint (-BLCO_EMISMATCH; blco/tucker.h). */
    const char *writer;
} blco_cpd_opts_t;

BLCO_API void blco_cpd_opts_default(blco_cpd_opts_t *o);

typedef struct blco_cpd_result {
    int order, rank;
    uint64_t dims[BLCO_MAX_MODES];
    /* dims[m] x rank, row major, columns of unit 2-norm (a column that became all zero
     * stays zero, with lambda 0); components sorted by decreasing lambda */
    double *factors[BLCO_MAX_MODES];
    double *lambda; /* rank weights */
    int iterations; /* total, including those before a resume */
    double fit;
    double *fit_history; /* fit after each iteration, `iterations` of them */
    int converged;       /* stopped by tol rather than max_iters */
    int history_cap;     /* entries allocated in fit_history (internal) */
    blco_budget_t *budget;
} blco_cpd_result_t;

/* Runs CP-ALS: per iteration and mode n, M = MTTKRP, V = Hadamard product of the other
 * modes' Gram matrices, A_n = M V^-1 (Cholesky; the pseudo-inverse when V is singular or
 * ill-conditioned), columns normalized into lambda (2-norm in the first iteration,
 * max(1, max|a|) after), Gram update; then the fit from the last mode's M and ||X||^2.
 * Memory comes from `budget` (may be NULL); the result holds it until destroyed, so the
 * budget must outlive the result. Returns 0, or:
 *   -EINVAL          bad problem or options (the diag says which);
 *   -BLCO_EBUDGET    the factors and workspace do not fit the budget;
 *   -BLCO_EDEVMEM    a GPU backend's factors, output or dense steps do not fit a device
 *                    (the diag says which and how much);
 *   -BLCO_EMISMATCH  init_dir or checkpoint of another shape, rank or tensor (the diag
 *                    names the file and what differs);
 *   -BLCO_EFORMAT    an unreadable init file or checkpoint (the diag names it);
 *   -BLCO_EVALUE     the fit became NaN (a NaN in the MTTKRP output), or an init_dir
 *                    factor A2..AN is all zero (the model could never leave 0);
 *   -BLCO_ECANCELED  on_iter asked to stop;
 *   -ENOENT          a missing init file, or resume from a folder with no checkpoint;
 *   -errno           writing the checkpoint; or the callback's code.
 * Distributed, a failure on one rank stops every rank: the rank that failed returns its
 * code and diag, the others -BLCO_ECANCELED with a diag saying another rank failed. */
BLCO_API int blco_cpd_als(const blco_cpd_problem_t *p, const blco_cpd_opts_t *o,
                          blco_budget_t *budget, blco_cpd_result_t **out, blco_diag_t *diag);

/* The budget bytes blco_cpd_als takes for a problem of these dims, rank and max_iters
 * (factors, lambda, fit history, Grams and scratch; an MTTKRP output as long as the
 * longest mode only above rank 1024: below, the MTTKRP writes into the factor it
 * replaces), so that a caller that shares the budget (an MTTKRP provider) can leave them
 * free. */
BLCO_API uint64_t blco_cpd_budget_bytes(int order, const uint64_t *dims, int rank, int max_iters);

/* Writes A1.npy..AN.npy (I_n x R) and lambda.npy (shape (R,)) into `dir` (created if missing, its parent
 * must exist). Returns 0, -EINVAL or -errno (the diag names the path). */
BLCO_API int blco_cpd_write(const blco_cpd_result_t *r, const char *dir, blco_diag_t *diag);

/* Frees the result and returns its memory to its budget. NULL is ok. */
BLCO_API void blco_cpd_result_destroy(blco_cpd_result_t *r);

#ifdef __cplusplus
}
#endif
#endif
