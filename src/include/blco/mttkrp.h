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
     * gpu/mttkrp_cpu.c): once it reads non-zero the kernel stops early and returns
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

#ifdef __cplusplus
}
#endif
#endif
