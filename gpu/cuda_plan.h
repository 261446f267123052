/* Launch arithmetic of the CUDA MTTKRP kernels, shared by host and device code and unit
 * tested on the CPU (tests/test_gpu_mttkrp.c): 64-bit chunk ranges, segment search, lane
 * groups per rank and the hierarchical stash plan. Internal to gpu/ and tests. */
#ifndef BLCO_CUDA_PLAN_H
#define BLCO_CUDA_PLAN_H

#include <stdint.h>

#ifdef __CUDACC__
#define BLCO_HD __host__ __device__
#else
#define BLCO_HD
#endif

/* Nonzeros one warp takes at a time: one per lane. */
#define BLCO_CUDA_CHUNK 32
/* Shared memory a thread block may use without an opt-in, on every GPU since Volta. */
#define BLCO_CUDA_SMEM_DEFAULT 49152
/* A stash tag that is no row: rows are < dims[mode] <= 2^64 - 1. */
#define BLCO_CUDA_NO_ROW UINT64_MAX

/* Chunks of BLCO_CUDA_CHUNK nonzeros covering n nonzeros. */
static inline BLCO_HD uint64_t blco_cuda_nchunks(uint64_t n)
{
    return n / BLCO_CUDA_CHUNK + (n % BLCO_CUDA_CHUNK != 0);
}

/* The contiguous chunk range [*c0, *c1) of thread block b out of nb (b < nb): the first
 * nchunks % nb blocks get one chunk more. */
static inline BLCO_HD void blco_cuda_block_range(uint64_t nchunks, uint64_t nb, uint64_t b,
                                                 uint64_t *c0, uint64_t *c1)
{
    uint64_t per = nchunks / nb, rem = nchunks % nb;
    *c0 = b * per + (b < rem ? b : rem);
    *c1 = *c0 + per + (b < rem);
}

/* The segment holding nonzero p: the largest s in [lo, hi) with start[s] <= p, given
 * start[lo] <= p (empty segments, equal starts, are skipped past). */
static inline BLCO_HD uint64_t blco_cuda_seg_find(const uint64_t *start, uint64_t lo, uint64_t hi,
                                                  uint64_t p)
{
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (start[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* log2 of the lanes that share one nonzero: the rank rounded up to a power of two, at most
 * a warp. Ranks below 32 put 32 >> log_w nonzeros side by side in a warp. */
static inline BLCO_HD int blco_cuda_group_log(int rank)
{
    int l = 0;
    while (l < 5 && (1 << l) < rank)
        l++;
    return l;
}

/* Rows the hierarchical stash holds for a mode of `rows` rows at `rank`, given `bytes` of
 * shared memory (a tag of 8 bytes plus rank doubles per row): all rows when they fit
 * (*direct = 1, the slot is the row), else the largest power of two that fits (the slot
 * is row & (slots - 1)), possibly 0. */
static inline BLCO_HD uint32_t blco_cuda_stash_slots(uint64_t rows, int rank, uint64_t bytes,
                                                     int *direct)
{
    uint64_t fit = bytes / (8 + 8 * (uint64_t)rank);
    *direct = rows <= fit;
    if (rows <= fit)
        return (uint32_t)rows;
    uint32_t s = 1;
    if (fit == 0)
        return 0;
    while ((uint64_t)s * 2 <= fit)
        s *= 2;
    return s;
}

#endif
