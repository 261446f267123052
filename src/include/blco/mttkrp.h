/* MTTKRP on the CPU: the naive COO oracle and the optimized OpenMP kernel over BLCO
 * blocks. M = X_(n) (A_N ⊙ ... ⊙ A_{n+1} ⊙ A_{n-1} ⊙ ... ⊙ A_1), i.e. for every nonzero
 * x(i_1..i_N): M[i_n, :] += x * prod_{m != n} A_m[i_m, :].
 * Factor matrices and the output are dense, row-major (C order), I_m x rank doubles. */
#ifndef BLCO_MTTKRP_H
#define BLCO_MTTKRP_H

#include <signal.h>

#include "blco/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

enum blco_cpu_kernel {
    BLCO_CPU_KERNEL_AUTO = 0, /* chosen per mode from the row interval each thread touches */
    BLCO_CPU_KERNEL_PRIVATE,  /* thread-private accumulation over a row interval, merged */
    BLCO_CPU_KERNEL_ATOMIC,   /* atomic adds into the output */
    BLCO_CPU_KERNEL_OWNER,    /* each thread owns a range of output rows and updates them in
                                 place, taking its rows' nonzeros from the whole tensor */
};

typedef struct blco_mttkrp_opts {
    int threads; /* 0 = blco_threads_default() */
    int kernel;  /* enum blco_cpu_kernel */
    /* When not NULL, polled every CANCEL_EVERY nonzeros of each thread (see
     * cpu/mttkrp_cpu.c): once it reads non-zero the kernel stops early and returns
     * -BLCO_ECANCELED, leaving `out` partial. Set from a signal handler (Ctrl-C). */
    const volatile sig_atomic_t *cancel;
} blco_mttkrp_opts_t;

BLCO_API void blco_mttkrp_opts_default(blco_mttkrp_opts_t *o);

/* The oracle: a plain loop over COO nonzeros, single-threaded. `mode` is 0-based.
 * Overwrites out (dims[mode] x rank). Returns 0 or -EINVAL. */
BLCO_API int blco_mttkrp_naive(const blco_coo_t *x, int mode, int rank,
                               const double *const *factors, double *out);

/* The optimized kernel over a BLCO tensor. Same contract as blco_mttkrp_naive; results
 * agree up to floating-point reassociation. factors[mode] is never read (it may be NULL).
 * Scratch memory comes from `budget` (may be NULL): when private buffers do not fit it,
 * AUTO falls back to owned row ranges, or with one thread to writing out directly (and says
 * so at info level), while a forced PRIVATE returns -BLCO_EBUDGET. Returns 0, -EINVAL
 * (order < 2, mode or rank out of range, NULL factor), -BLCO_EBUDGET, -ENOMEM, or
 * -BLCO_ECANCELED when opts->cancel was raised. */
BLCO_API int blco_mttkrp_cpu(const blco_tensor_t *x, int mode, int rank,
                             const double *const *factors, double *out,
                             const blco_mttkrp_opts_t *opts, blco_budget_t *budget);

/* The kernel that AUTO picks for this tensor, mode, rank and thread count (for reports),
 * before any fallback for a budget too small. */
BLCO_API int blco_mttkrp_cpu_choice(const blco_tensor_t *x, int mode, int rank,
                                    const blco_mttkrp_opts_t *opts);
BLCO_API const char *blco_mttkrp_kernel_name(int kernel);

/* Fiber copies (cpu/mttkrp_fibers.c): mode n's nonzeros sorted by i_n, then by the other
 * modes shortest first, one node per distinct prefix (SPLATT's compressed sparse fibers).
 * 8 bytes per nonzero (12 unless every value is exactly a float) plus 8 per fiber node,
 * from `budget`; while building, 4 bytes per nonzero and the sort's scratch, 32 bytes (48
 * above 64 index bits) per nonzero of the parts in flight (the rows are sorted in parts of
 * about 1/(8 x threads) of the nonzeros, at least 16, a row never split). */
typedef struct blco_fibers blco_fibers_t;

/* Builds mode `mode`'s (0-based) copy of x; the same copy whatever `threads`. Returns 0,
 * -EINVAL, -BLCO_EUNSUPPORTED (a mode longer than 2^32, or more than 2^32 nonzeros),
 * -BLCO_EBUDGET or -ENOMEM. */
BLCO_API int blco_fibers_build(const blco_tensor_t *x, int mode, int threads,
                               blco_budget_t *budget, blco_fibers_t **out);
/* As blco_fibers_build, but gives up with -BLCO_EBUDGET (before allocating the copy) when
 * the copy and its build's scratch together would take more than max_bytes (0: no bound). */
BLCO_API int blco_fibers_build_within(const blco_tensor_t *x, int mode, int threads,
                                      blco_budget_t *budget, uint64_t max_bytes,
                                      blco_fibers_t **out);
/* The bytes AUTO lets all copies of a tensor take for MTTKRPs at `rank`, scratch of a build
 * included: (8 * order + 24) * nnz less the factor matrices (sum of dims x rank x 8), plus
 * the longest mode's rows x rank x 8 up to rank 1024 (CP-ALS makes its MTTKRP output in the
 * factor's place), at least 0. A model of what ALTO's cpd64 holds beyond blco-cpd on the same tensor, so that
 * copies keep blco-cpd's peak memory at most ALTO's (the rule and its measurement:
 * perf/results/README.md, issue 32). */
BLCO_API uint64_t blco_fibers_room(int order, const uint64_t *dims, uint64_t nnz, int rank);
BLCO_API void blco_fibers_destroy(blco_fibers_t *f);
/* Bytes it holds of the budget; its output mode; its node count at a level (0: rows with
 * nonzeros, order - 1: the nonzeros). */
BLCO_API uint64_t blco_fibers_bytes(const blco_fibers_t *f);
BLCO_API int blco_fibers_mode(const blco_fibers_t *f);
BLCO_API uint64_t blco_fibers_nodes(const blco_fibers_t *f, int level);
/* Fibers per nonzero of mode `mode`'s copy (its last level but one), estimated from a
 * deterministic sample of about 65536 nonzeros without building the copy: near 1 when
 * fibers hold one nonzero each. And whether a copy is worth building for MTTKRPs at `rank`:
 * at most 0.9 fibers per nonzero; at most 0.1 when the leaf factor is over 32 MiB (and
 * never then on 3 modes, or with a leaf factor over 64 MiB); at most
 * 0.5 when the output mode has 512 or more nonzeros per row (measured rules, see
 * cpu/mttkrp_fibers.c); *share (may be NULL) gets the estimate. */
BLCO_API double blco_fibers_share(const blco_tensor_t *x, int mode, int threads);
BLCO_API int blco_fibers_worth(const blco_tensor_t *x, int mode, int rank, int threads,
                               double *share);
/* The MTTKRP of the copy's mode, same contract as blco_mttkrp_cpu (out overwritten, every
 * row); opts->kernel is ignored. Each output row is written by one thread. Returns 0,
 * -EINVAL, -ENOMEM or -BLCO_ECANCELED. */
BLCO_API int blco_fibers_mttkrp(const blco_fibers_t *f, int rank, const double *const *factors,
                                double *out, const blco_mttkrp_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif
