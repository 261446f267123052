/* The MTTKRP kernel over a fiber copy on the device (gpu/mttkrp_cuda_fibers.cu); the host
 * side (upload, checks) is in gpu/mttkrp_cuda.cu. Internal to the library. */
#ifndef BLCO_CUDA_FIBERS_H
#define BLCO_CUDA_FIBERS_H

#include <stdint.h>

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Levels as in blco_fibers_t: level 0 the output rows, level order - 1 the nonzeros. */
typedef struct blco_cuda_fb_args {
    int order, rank;
    int log_w;        /* log2 of the lanes of a group (blco_cuda_group_log of the rank) */
    uint64_t nnz;     /* leaves */
    uint64_t chunk;   /* leaves a warp walks */
    uint64_t nchunks; /* ceil(nnz / chunk) */
    uint64_t nodes[BLCO_MAX_MODES];      /* by level */
    const uint32_t *id[BLCO_MAX_MODES];  /* by level: the node's index in its mode */
    const uint32_t *ptr[BLCO_MAX_MODES]; /* levels 0..order-2: first child, nodes + 1 */
    const uint32_t *start; /* nchunks x (order - 1): a chunk's first node on levels 0..order-2 */
    const double *val;     /* the leaves' values, or NULL: */
    const float *val32;    /* ... then these */
    const double *f[BLCO_MAX_MODES]; /* by level: the factor of the level's mode (f[0] unused) */
    double *out;                     /* rows x rank, zeroed before the launch */
    double *edge;          /* nchunks x 2 x rank: the partial sums of a chunk's end rows */
    uint32_t *edge_node;   /* nchunks: a chunk's last row node */
} blco_cuda_fb_args_t;

/* Queues the kernel and its edge rows' sums on `stream` (a cudaStream_t) in blocks of
 * `threads` (a multiple of 32), at most as many as `sm_count` SMs hold at once; a group of
 * lanes per chunk. Returns 0 or a cudaError_t. */
int blco_cuda_fibers_launch(const blco_cuda_fb_args_t *a, int threads, int sm_count, void *stream);

#ifdef __cplusplus
}
#endif
#endif
