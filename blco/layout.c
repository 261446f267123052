/* ALTO masks and the BLCO re-encoding: how coordinates map to a linear index, a block
 * key and an in-block index, and back. */
#include <errno.h>
#include <string.h>

#include "blco_internal.h"
#if defined(__BMI2__)
#include <immintrin.h>
#endif

static int bits_for(uint64_t d)
{
    return d <= 1 ? 0 : 64 - __builtin_clzll(d - 1);
}

static uint64_t low_ones(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

int blco_layout_init(blco_layout_t *l, int order, const uint64_t *dims, int line_bits)
{
    memset(l, 0, sizeof *l);
    if (order < 1 || order > BLCO_MAX_MODES)
        return -BLCO_EUNSUPPORTED;
    if (line_bits == 0)
        line_bits = 64;
    if (line_bits < 1 || line_bits > 64)
        return -EINVAL;
    l->order = order;
    l->line_bits = line_bits;
    int maxbits = 0;
    for (int n = 0; n < order; n++) {
        if (dims[n] == 0)
            return -EINVAL;
        l->dims[n] = dims[n];
        l->bits[n] = bits_for(dims[n]);
        l->total_bits += l->bits[n];
        maxbits = BLCO_MAX(maxbits, l->bits[n]);
    }
    if (l->total_bits > BLCO_MAX_INDEX_BITS)
        return -BLCO_EUNSUPPORTED;

    /* Modes by ascending bit count, ties by mode id: the same dims give the same layout. */
    int sorted[BLCO_MAX_MODES];
    for (int n = 0; n < order; n++) {
        int j = n;
        while (j > 0 && l->bits[sorted[j - 1]] > l->bits[n]) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = n;
    }
    /* Deal bits round-robin from the least significant: coordinate bit `level` of every
     * mode that still has bits, in sorted order. */
    int p = 0;
    for (int level = 0; level < maxbits; level++) {
        for (int s = 0; s < order; s++) {
            int n = sorted[s];
            if (l->bits[n] <= level)
                continue;
            l->alto_mask[n][p >> 6] |= 1ull << (p & 63);
            if (p < line_bits)
                l->low_bits[n]++;
            p++;
        }
    }
    l->key_bits = BLCO_MAX(0, l->total_bits - line_bits);
    if (l->key_bits > 64)
        return -BLCO_EUNSUPPORTED;
    int pos = 0;
    for (int n = 0; n < order; n++) {
        l->pos[n] = l->low_bits[n] ? pos : 0; /* never a shift by 64 in decoding */
        l->low_mask[n] = low_ones(l->low_bits[n]);
        pos += l->low_bits[n];
    }
    return 0;
}

/* Deposits the low bits of `v` at the set positions of `mask` (a software pdep). */
static uint64_t deposit(uint64_t v, uint64_t mask)
{
#if defined(__BMI2__)
    return _pdep_u64(v, mask);
#else
    uint64_t r = 0;
    for (uint64_t bit = 1; mask; bit <<= 1) {
        uint64_t low = mask & -mask;
        if (v & bit)
            r |= low;
        mask &= mask - 1;
    }
    return r;
#endif
}

/* Gathers the bits of `v` at the set positions of `mask` into the low bits (pext). */
static uint64_t extract(uint64_t v, uint64_t mask)
{
#if defined(__BMI2__)
    return _pext_u64(v, mask);
#else
    uint64_t r = 0;
    for (uint64_t bit = 1; mask; bit <<= 1) {
        uint64_t low = mask & -mask;
        if (v & low)
            r |= bit;
        mask &= mask - 1;
    }
    return r;
#endif
}

void blco_layout_alto(const blco_layout_t *l, const uint64_t *coord, uint64_t out[2])
{
    uint64_t lo = 0, hi = 0;
    for (int n = 0; n < l->order; n++) {
        uint64_t mlo = l->alto_mask[n][0], mhi = l->alto_mask[n][1];
        int nlo = __builtin_popcountll(mlo);
        lo |= deposit(coord[n], mlo);
        if (mhi)
            hi |= deposit(nlo >= 64 ? 0 : coord[n] >> nlo, mhi);
    }
    out[0] = lo;
    out[1] = hi;
}

void blco_layout_alto_decode(const blco_layout_t *l, const uint64_t in[2], uint64_t *coord)
{
    for (int n = 0; n < l->order; n++) {
        uint64_t mlo = l->alto_mask[n][0], mhi = l->alto_mask[n][1];
        int nlo = __builtin_popcountll(mlo);
        uint64_t c = extract(in[0], mlo);
        if (mhi && nlo < 64)
            c |= extract(in[1], mhi) << nlo;
        coord[n] = c;
    }
}

uint64_t blco_layout_index(const blco_layout_t *l, const uint64_t *coord, uint64_t *key)
{
    uint64_t idx = 0;
    for (int n = 0; n < l->order; n++)
        idx |= (coord[n] & l->low_mask[n]) << l->pos[n];
    if (key) {
        uint64_t a[2];
        blco_layout_alto(l, coord, a);
        int s = l->line_bits;
        *key = s >= 64 ? a[1] : (a[0] >> s) | (a[1] << (64 - s));
    }
    return idx;
}

void blco_layout_block_coord(const blco_layout_t *l, uint64_t key, uint64_t *coord)
{
    int s = l->line_bits;
    uint64_t a[2];
    if (s >= 64) {
        a[0] = 0;
        a[1] = key;
    } else {
        a[0] = key << s;
        a[1] = key >> (64 - s);
    }
    blco_layout_alto_decode(l, a, coord);
}
