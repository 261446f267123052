/* ALTO linearization and the BLCO encoding of a tensor in memory.
 *
 * ALTO deals each mode's coordinate bits round-robin from the least significant bit of a
 * linear index of L = sum(bits(I_n)) bits, with modes ordered by bit count (ties by mode
 * id); bits(I) = I <= 1 ? 0 : ceil(log2 I). Sorting by that index gives ALTO order.
 * BLCO keeps ALTO order but splits the index at `line_bits` (64 by default): the bits
 * above form a block key (each mode's high coordinate bits, the *block coordinates*),
 * and the bits below are re-encoded so each mode's low bits form one contiguous field.
 * Decoding a coordinate is then ((idx >> pos[n]) & mask[n]) | block_coord[n]. */
#ifndef BLCO_LAYOUT_H
#define BLCO_LAYOUT_H

#include "blco/coo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest linear index the library supports: two 64-bit words. */
#define BLCO_MAX_INDEX_BITS 128

typedef struct blco_layout {
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    int bits[BLCO_MAX_MODES];          /* bits(I_n) */
    int total_bits;                    /* L */
    int line_bits;                     /* width of the in-block index (1..64) */
    int key_bits;                      /* max(0, L - line_bits) */
    /* ALTO mask of each mode over the L-bit linear index, low and high 64-bit words. */
    uint64_t alto_mask[BLCO_MAX_MODES][2];
    /* BLCO in-block fields: mode n's low `low_bits[n]` coordinate bits sit at `pos[n]`. */
    int low_bits[BLCO_MAX_MODES];
    int pos[BLCO_MAX_MODES];
    uint64_t low_mask[BLCO_MAX_MODES]; /* (1 << low_bits[n]) - 1 */
} blco_layout_t;

/* Builds the layout of a tensor of `order` modes with the given dims (each >= 1).
 * line_bits 0 means 64 (values below 64 exist for tests and the paper's examples).
 * Returns 0, -EINVAL, or -BLCO_EUNSUPPORTED when L > BLCO_MAX_INDEX_BITS or the order is
 * outside 1..BLCO_MAX_MODES. */
BLCO_API int blco_layout_init(blco_layout_t *l, int order, const uint64_t *dims, int line_bits);

/* The ALTO linear index of a coordinate (0-based), as low and high words. */
BLCO_API void blco_layout_alto(const blco_layout_t *l, const uint64_t *coord, uint64_t out[2]);
/* The inverse of blco_layout_alto. */
BLCO_API void blco_layout_alto_decode(const blco_layout_t *l, const uint64_t in[2],
                                      uint64_t *coord);
/* BLCO encoding of a coordinate: the in-block index and the block key. */
BLCO_API uint64_t blco_layout_index(const blco_layout_t *l, const uint64_t *coord, uint64_t *key);
/* The block coordinates (each mode's high bits, low bits zero) of a key. */
BLCO_API void blco_layout_block_coord(const blco_layout_t *l, uint64_t key, uint64_t *coord);
/* Decodes an in-block index within a block whose block coordinates are `bcoord`. */
static inline void blco_layout_decode(const blco_layout_t *l, uint64_t idx,
                                      const uint64_t *bcoord, uint64_t *coord)
{
    for (int n = 0; n < l->order; n++)
        coord[n] = ((idx >> l->pos[n]) & l->low_mask[n]) | bcoord[n];
}

/* A run of nonzeros sharing one key, at most max_block_nnz long. */
typedef struct blco_block {
    uint64_t key;
    uint64_t coord[BLCO_MAX_MODES];    /* block coordinates */
    uint64_t start;                    /* first nonzero */
    uint64_t nnz;
} blco_block_t;

/* A BLCO tensor in memory: nonzeros in ALTO order, grouped into blocks. */
typedef struct blco_tensor {
    blco_layout_t layout;
    uint64_t nnz;
    uint64_t nblocks;
    blco_block_t *blocks;
    uint64_t *idx;                     /* in-block indices, nnz of them */
    double *val;
    double norm2;                      /* sum of squared values */
    uint64_t duplicates;               /* equal coordinates merged while building */
    blco_budget_t *budget;
} blco_tensor_t;

typedef struct blco_build_opts {
    int line_bits;                     /* 0 = 64 */
    uint64_t max_block_nnz;            /* split blocks longer than this; 0 = no limit */
    int duplicates;                    /* BLCO_DUP_SUM (default) or BLCO_DUP_ERROR */
    int threads;                       /* 0 = default */
} blco_build_opts_t;

BLCO_API void blco_build_opts_default(blco_build_opts_t *o);

/* Builds a BLCO tensor from a COO tensor (dims taken from it; indices must be within
 * them). Sorts by ALTO index with a parallel radix sort; repeated coordinates are
 * summed or refused per opts. Memory comes from `budget` (peak about 40 bytes per
 * nonzero beyond the result). Returns 0, -EINVAL, -BLCO_EEMPTY, -BLCO_EUNSUPPORTED,
 * -BLCO_EDUP (diag names the coordinate) or -BLCO_EBUDGET. */
BLCO_API int blco_tensor_from_coo(const blco_coo_t *coo, const blco_build_opts_t *opts,
                                  blco_budget_t *budget, blco_tensor_t **out, blco_diag_t *diag);
BLCO_API void blco_tensor_destroy(blco_tensor_t *t);

/* Writes nonzero k back as coordinates and value (for tests and export). */
BLCO_API void blco_tensor_get(const blco_tensor_t *t, uint64_t k, uint64_t *coord, double *val);

#ifdef __cplusplus
}
#endif
#endif
