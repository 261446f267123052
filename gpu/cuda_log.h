/* How the CUDA sources in gpu/ log a failed CUDA call. Internal to gpu/. */
#ifndef BLCO_CUDA_LOG_H
#define BLCO_CUDA_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

/* Logs "CUDA: WHAT (WHERE): NAME: TEXT" for a failed call whose cudaError_t is `code`. At
 * the error level, except, at the info level:
 * - a refused allocation (cudaErrorMemoryAllocation): every caller falls back (optional
 *   buffers, a read ring left pageable) or reports it in its own words, so an "error:"
 *   line would be a false alarm when the job goes on;
 * - the same failure as the one logged last (the same code and text): a sticky error,
 *   which every later call returns, cleanup included, is logged once.
 * Thread-safe. Defined in gpu/mttkrp_cuda.cu. */
void blco_cuda_log_failure(int code, const char *name, const char *text, const char *what,
                           const char *where);

#ifdef __cplusplus
}
#endif

#endif
