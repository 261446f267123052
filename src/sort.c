/* Parallel stable LSD radix sort of 64- or 128-bit keys with a 64-bit payload.
 * Each pass: per-thread digit histograms over contiguous ranges, an exclusive scan over
 * (digit, thread), then a stable scatter. Passes whose digit is constant are skipped,
 * which makes sorting keys with few varying high bits cheap. */
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"

#define DIGIT_BITS 11
#define NBUCKET (1u << DIGIT_BITS)
#define DMASK (NBUCKET - 1)

static inline unsigned digit_of(uint64_t lo, uint64_t hi, int shift)
{
    if (shift >= 64)
        return (unsigned)(hi >> (shift - 64)) & DMASK;
    uint64_t d = lo >> shift;
    if (shift > 64 - DIGIT_BITS)
        d |= hi << (64 - shift);
    return (unsigned)d & DMASK;
}

void blco_radix_sort(uint64_t *key_lo, uint64_t *key_hi, uint64_t *val, uint64_t n, int bits,
                     uint64_t *tmp_lo, uint64_t *tmp_hi, uint64_t *tmp_val, int threads)
{
    if (n < 2 || bits <= 0)
        return;
    int nt = blco_threads_resolve(threads);
    if (n < (1u << 15) || !HAVE_OPENMP) /* without OpenMP only one thread runs the loop */
        nt = 1;
    uint64_t *hist = malloc(sizeof(uint64_t) * NBUCKET * (size_t)nt);
    uint64_t *srcl = key_lo, *srch = key_hi, *srcv = val;
    uint64_t *dstl = tmp_lo, *dsth = tmp_hi, *dstv = tmp_val;
    if (!hist)
        nt = 1, hist = NULL;
    uint64_t one_hist[NBUCKET];
    if (!hist)
        hist = one_hist;

    for (int shift = 0; shift < bits; shift += DIGIT_BITS) {
        int skip = 0;
#pragma omp parallel num_threads(nt)
        {
            int t = blco_thread_num();
            uint64_t lo = n * (uint64_t)t / (uint64_t)nt, hi = n * (uint64_t)(t + 1) / (uint64_t)nt;
            uint64_t *h = hist + (size_t)t * NBUCKET;
            memset(h, 0, sizeof(uint64_t) * NBUCKET);
            for (uint64_t i = lo; i < hi; i++)
                h[digit_of(srcl[i], srch ? srch[i] : 0, shift)]++;
#pragma omp barrier
#pragma omp single
            {
                uint64_t run = 0;
                for (unsigned d = 0; d < NBUCKET && !skip; d++) {
                    uint64_t tot = 0;
                    for (int u = 0; u < nt; u++)
                        tot += hist[(size_t)u * NBUCKET + d];
                    if (tot == n)
                        skip = 1;
                }
                for (unsigned d = 0; d < NBUCKET && !skip; d++) {
                    for (int u = 0; u < nt; u++) {
                        uint64_t c = hist[(size_t)u * NBUCKET + d];
                        hist[(size_t)u * NBUCKET + d] = run;
                        run += c;
                    }
                }
            }
            if (!skip) {
                for (uint64_t i = lo; i < hi; i++) {
                    uint64_t kh = srch ? srch[i] : 0;
                    uint64_t p = h[digit_of(srcl[i], kh, shift)]++;
                    dstl[p] = srcl[i];
                    if (srch)
                        dsth[p] = kh;
                    dstv[p] = srcv[i];
                }
            }
        }
        if (skip)
            continue;
        uint64_t *x;
        x = srcl, srcl = dstl, dstl = x;
        x = srch, srch = dsth, dsth = x;
        x = srcv, srcv = dstv, dstv = x;
    }
    if (srcl != key_lo) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (uint64_t i = 0; i < n; i++) {
            key_lo[i] = srcl[i];
            if (key_hi)
                key_hi[i] = srch[i];
            val[i] = srcv[i];
        }
    }
    if (hist != one_hist)
        free(hist);
}
