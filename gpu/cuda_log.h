/* How the CUDA sources in gpu/ log a failed CUDA call. Internal to gpu/. */
#ifndef BLCO_CUDA_LOG_H
#define BLCO_CUDA_LOG_H

/* C++ (the .cu sources, under nvcc or the emulation) only. */
#include <string.h>

#include "gpu/cuda_compat.h"

/* Clears the failure `e` from CUDA's last-error slot (a non-sticky one would otherwise be
 * seen by the next check) and logs "CUDA: WHAT (WHERE): NAME: TEXT". At the error level,
 * except, at the info level:
 * - a refused allocation (cudaErrorMemoryAllocation): every caller falls back (optional
 *   buffers, a read ring left pageable) or reports it in its own words, so an "error:"
 *   line would be a false alarm when the job goes on;
 * - the same failure as the one logged last (the same code and text): a sticky error,
 *   which every later call returns, cleanup included, is logged once.
 * Thread-safe. Defined in gpu/mttkrp_cuda.cu. */
void blco_cuda_log_failure(cudaError_t e, const char *what, const char *where);

/* How much of `what` a diag message shows: a call's name ("cudaMemcpyAsync" of the text
 * "cudaMemcpyAsync(dst, src, bytes, ...)" the checking macros pass; the log line keeps the
 * whole), or all of a description. For "%.*s". */
static inline int blco_cuda_what_len(const char *what)
{
    const char *p = strchr(what, '(');
    return p && !strncmp(what, "cuda", 4) ? (int)(p - what) : (int)strlen(what);
}

#endif
