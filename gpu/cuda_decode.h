/* Decoding encoded batches on the device (gpu/decode_cuda.cu): the streaming engine copies
 * a batch's segments as stored (raw, narrow or delta index columns; f64, f32 or byte-plane
 * value columns, none zstd-compressed) and five kernels in a row on one stream turn them
 * into the in-block BLCO indices and f64 values the MTTKRP kernels read. The host checks
 * everything a segment's table entry says (codecs, column sizes, index width, block
 * coordinates); the kernels check what only the bytes say (delta frames, index widths,
 * coordinates inside the dims) and report the first corrupt segment found. Internal to the
 * library. */
#ifndef BLCO_CUDA_DECODE_H
#define BLCO_CUDA_DECODE_H

#include <stdint.h>

#include "blco/core.h"
#include "blco/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the decode kernels. */
#define BLCO_DECODE_THREADS 256

/* One segment of an encoded batch, in device memory. Offsets are bytes from the batch's
 * encoded base. */
typedef struct blco_cuda_dseg {
    uint64_t icol, ibytes; /* the index column */
    uint64_t vcol, vbytes; /* the value column */
    uint64_t first, nnz;   /* its nonzeros: [first, first + nnz) of the batch */
    uint64_t frames;       /* delta: its 2 x ceil((nnz - 1) / 128) words of frame scratch */
    uint64_t seg;          /* its number in the file (for the error) */
    uint32_t icodec, vcodec;
    uint32_t bad;          /* the kernels' own word: 0 from the host (1: found corrupt) */
    uint32_t pad;
} blco_cuda_dseg_t;

typedef struct blco_cuda_decode_args {
    const blco_cuda_dseg_t *seg; /* nseg descriptors (their `bad` words written) */
    uint64_t nseg;
    uint64_t max_nnz;            /* the most nonzeros of a segment (sizes the grid; 0: a
                                    block a segment) */
    const uint8_t *enc;        /* 8-byte aligned, readable 16 bytes past the last column */
    const uint64_t *seg_coord; /* nseg x order block coordinates */
    const uint64_t *to_index;  /* tbytes x 256 tables: ALTO byte j -> BLCO bits (NULL: same) */
    int tbytes;                /* 0 when in-block ALTO and BLCO indices coincide */
    int index_bits;
    int order, value_type;     /* value_type as in blco/file.h */
    uint64_t *frames;          /* scratch of the delta columns */
    uint64_t *idx;             /* out: the batch's nnz indices */
    double *val;               /* out: and values */
    unsigned long long *error; /* 0, or 1 + the file number of a corrupt segment */
    uint64_t dims[BLCO_MAX_MODES], low_mask[BLCO_MAX_MODES];
    int pos[BLCO_MAX_MODES];
} blco_cuda_decode_args_t;

/* Queues the decode kernels on `stream` (a cudaStream_t; the caller made the device
 * current). Returns 0 or the cudaError_t of the launch. A corrupt segment decodes to
 * index 0 and value 0 (harmless to the MTTKRP kernels) and sets *error. */
int blco_cuda_decode_launch(const blco_cuda_decode_args_t *a, void *stream);

/* The same on ctx's device and stream (NULL: the context's), errors mapped: 0, -EINVAL,
 * -BLCO_ECUDA (the launch failed), -BLCO_ENODEV (a build without CUDA). */
int blco_cuda_decode_batch(blco_cuda_t *ctx, const blco_cuda_decode_args_t *a, void *stream,
                           blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
