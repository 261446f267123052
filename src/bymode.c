/* A tensor's nonzeros grouped by one mode's row on the host, for the copies sorted by that
 * mode that the GPUs keep (blco_cuda_sorted_upload_part, blco-cpd --gpu-sorted).
 *
 * On one thread: a stable counting sort straight over the rows (each nonzero's place, then
 * every array scattered there from the tensor). On more: the nonzeros are first grouped by
 * bucket (a fixed run of rows, at most BYMODE_BUCKETS buckets), in source order within a
 * bucket, by fixed stripes of the nonzeros (so the result does not depend on the thread
 * count); each part's arrays are then filled bucket by bucket on the threads, a bucket's
 * nonzeros placed by their row within a range of the output that stays in a core's cache.
 * The grouping touches more memory (4 x order + 8 bytes a nonzero against 8) but runs on
 * every thread; on the 2 vCPUs it was written on, the two were within noise of each other
 * (huge pages, which both take, mattered more), so what a many-core host gains is not
 * measured yet. Both stable: ALTO order within a row.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"

#define BYMODE_BUCKETS 1024 /* at most this many buckets */
#define BYMODE_STRIPES 64   /* the grouping's fixed stripes of the nonzeros */
#define BYMODE_DIRECT_ROWS 4096 /* modes of at most this many rows: the direct sort */

/* Nonzero k's coordinate in mode m, k in block b. */
static inline uint64_t coord_of(const blco_tensor_t *x, const blco_block_t *b, uint64_t k, int m)
{
    const blco_layout_t *l = &x->layout;
    const uint64_t lo = l->low_bits[m] ? (x->idx[k] >> l->pos[m]) & l->low_mask[m] : 0;
    return lo | b->coord[m];
}

static int bucket_shift(uint64_t rows)
{
    int s = 0;
    while ((rows >> s) >= BYMODE_BUCKETS)
        s++;
    return s;
}

/* Threads for the grouping, or 1: the direct sort (few nonzeros, no OpenMP, or a mode whose
 * row counts stay in cache: its scatter has few write streams, and its buckets would be
 * single rows). */
static int use_threads(uint64_t rows, uint64_t nnz, int threads)
{
    return nnz < (1u << 15) || rows <= BYMODE_DIRECT_ROWS || !HAVE_OPENMP
               ? 1
               : blco_threads_resolve(threads);
}

uint64_t blco_bymode_bytes(int order, uint64_t rows, uint64_t nnz, int threads)
{
    const int s = bucket_shift(rows), nt = use_threads(rows, nnz, threads);
    const uint64_t nb = rows ? ((rows - 1) >> s) + 1 : 0;
    if (nt == 1) /* the direct sort: each nonzero's place */
        return 8 * (rows + 1) + 8 * nnz;
    return 8 * (rows + 1) + (4 * (uint64_t)order + 8) * nnz + 8 * (nb + 1) +
           8 * BYMODE_STRIPES * nb + 8 * (uint64_t)nt * (1ull << s);
}

uint64_t blco_bymode_cut(const uint64_t *at, uint64_t rows, int k, int n)
{
    if (k <= 0)
        return 0;
    if (k >= n)
        return rows;
    const uint64_t want = (uint64_t)((__uint128_t)at[rows] * (uint64_t)k / (uint64_t)n);
    uint64_t lo = 0, hi = rows; /* the first r with at[r] >= want */
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (at[mid] < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The big arrays by mmap, with huge pages where transparent huge pages are opt-in: faults on
 * 4 KiB pages were about a third of the sort's profile on the VM it was written on. */
static void *big(uint64_t bytes)
{
    void *p;
    return blco_budget_alloc(NULL, bytes, &p) < 0 ? NULL : p;
}

void blco_bymode_free(blco_bymode_t *g)
{
    if (!g)
        return;
    const uint64_t n = g->nnz ? g->nnz : 1;
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        blco_budget_free(NULL, g->coo[m], n * sizeof *g->coo[m]);
    blco_budget_free(NULL, g->val, n * sizeof *g->val);
    blco_budget_free(NULL, g->at, (g->rows + 1) * sizeof *g->at);
    blco_budget_free(NULL, g->dest, n * sizeof *g->dest);
    free(g->boff);
    free(g->pcut);
    free(g->cur);
    free(g);
}

void blco_bymode_counts(const blco_tensor_t *x, int mode, uint64_t *at)
{
    const uint64_t rows = x->layout.dims[mode];
    memset(at, 0, (rows + 1) * sizeof *at);
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *bl = &x->blocks[b];
        for (uint64_t k = bl->start; k < bl->start + bl->nnz; k++)
            at[coord_of(x, bl, k, mode) + 1]++;
    }
    for (uint64_t r = 0; r < rows; r++)
        at[r + 1] += at[r];
}

static void set_cuts(blco_bymode_t *g)
{
    for (int k = 0; k <= g->nparts; k++)
        g->pcut[k] = blco_bymode_cut(g->at, g->rows, k, g->nparts);
}

/* A grouping's fields, its row counts and part cuts allocated (NULL: no memory). */
static blco_bymode_t *bymode_new(const blco_tensor_t *x, int mode, int nparts, int threads)
{
    blco_bymode_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->x = x;
    g->layout = &x->layout;
    g->mode = mode;
    g->rows = x->layout.dims[mode];
    g->nnz = x->nnz;
    g->nparts = nparts;
    g->threads = threads;
    g->shift = bucket_shift(g->rows);
    g->at = big((g->rows + 1) * sizeof *g->at);
    g->pcut = malloc(((size_t)nparts + 1) * sizeof *g->pcut);
    if (!g->at || !g->pcut) {
        blco_bymode_free(g);
        return NULL;
    }
    return g;
}

/* One thread: at[] by a counting pass, then each nonzero's place (dest) in a second. */
static int build_direct(const blco_tensor_t *x, int mode, int nparts, blco_bymode_t **out)
{
    const uint64_t rows = x->layout.dims[mode], nnz = x->nnz;
    blco_bymode_t *g = bymode_new(x, mode, nparts, 1);
    if (!g || !(g->dest = big((nnz ? nnz : 1) * sizeof *g->dest))) {
        blco_bymode_free(g);
        return -ENOMEM;
    }
    blco_bymode_counts(x, mode, g->at);
    set_cuts(g);
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *bl = &x->blocks[b];
        for (uint64_t k = bl->start; k < bl->start + bl->nnz; k++)
            g->dest[k] = g->at[coord_of(x, bl, k, mode)]++;
    }
    for (uint64_t r = rows; r > 0; r--) /* back to each row's start */
        g->at[r] = g->at[r - 1];
    g->at[0] = 0;
    *out = g;
    return 0;
}

int blco_bymode_build(const blco_tensor_t *x, int mode, int nparts, int threads,
                      blco_bymode_t **out)
{
    *out = NULL;
    const blco_layout_t *l = &x->layout;
    const int order = l->order;
    if (mode < 0 || mode >= order || nparts < 1)
        return -EINVAL;
    for (int m = 0; m < order; m++)
        if (l->dims[m] > UINT32_MAX) /* the arrays hold 32-bit coordinates */
            return -BLCO_EUNSUPPORTED;
    const uint64_t rows = l->dims[mode], nnz = x->nnz;
    const int nt = use_threads(rows, nnz, threads), shift = bucket_shift(rows);
    const uint64_t nb = rows ? ((rows - 1) >> shift) + 1 : 0;
    if (nt == 1)
        return build_direct(x, mode, nparts, out);
    blco_bymode_t *g = bymode_new(x, mode, nparts, nt);
    uint64_t *cnt = calloc((size_t)BYMODE_STRIPES * (nb ? nb : 1), sizeof *cnt);
    int ok = g && cnt;
    if (g) {
        g->nb = nb;
        g->boff = malloc((nb + 1) * sizeof *g->boff);
        g->cur = malloc((size_t)nt * ((size_t)1 << shift) * sizeof *g->cur);
        g->val = big((nnz ? nnz : 1) * sizeof *g->val);
        ok = ok && g->boff && g->cur && g->val;
        for (int m = 0; m < order && ok; m++)
            ok = (g->coo[m] = big((nnz ? nnz : 1) * sizeof *g->coo[m])) != NULL;
    }
    if (!ok) {
        free(cnt);
        blco_bymode_free(g);
        return -ENOMEM;
    }
    /* Two passes over fixed stripes: the count of each stripe's nonzeros in each bucket, then
     * (after the counts became each stripe's first place in each bucket, bucket by bucket)
     * every array moved to its bucket, in source order. */
    for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int st = 0; st < BYMODE_STRIPES; st++) {
            uint64_t k = nnz * (uint64_t)st / BYMODE_STRIPES;
            const uint64_t e = nnz * (uint64_t)(st + 1) / BYMODE_STRIPES;
            uint64_t *c = cnt + (size_t)st * nb;
            uint64_t b = k < e ? blco_tensor_block_of(x, k) : 0;
            for (; k < e; k++) {
                while (x->blocks[b].start + x->blocks[b].nnz <= k)
                    b++;
                const blco_block_t *bl = &x->blocks[b];
                if (pass == 0) {
                    c[coord_of(x, bl, k, mode) >> shift]++;
                    continue;
                }
                const uint64_t q = c[coord_of(x, bl, k, mode) >> shift]++;
                for (int m = 0; m < order; m++)
                    g->coo[m][q] = (uint32_t)coord_of(x, bl, k, m);
                g->val[q] = x->val[k];
            }
        }
        if (pass == 0) {
            uint64_t at = 0;
            for (uint64_t bk = 0; bk < nb; bk++) {
                g->boff[bk] = at;
                for (int st = 0; st < BYMODE_STRIPES; st++) {
                    const uint64_t n = cnt[(size_t)st * nb + bk];
                    cnt[(size_t)st * nb + bk] = at;
                    at += n;
                }
            }
            g->boff[nb] = at;
        }
    }
    free(cnt);
    /* at[r]: the nonzeros of the rows below r, counted bucket by bucket (a bucket's rows are
     * its own: no two threads touch one entry). */
    const uint32_t *row = g->coo[mode];
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (uint64_t bk = 0; bk < nb; bk++) {
        const uint64_t r0 = bk << shift, r1 = BLCO_MIN(rows, (bk + 1) << shift);
        memset(g->at + r0, 0, (r1 - r0) * sizeof *g->at);
        for (uint64_t i = g->boff[bk]; i < g->boff[bk + 1]; i++)
            g->at[row[i]]++;
        uint64_t s = g->boff[bk];
        for (uint64_t r = r0; r < r1; r++) {
            const uint64_t n = g->at[r];
            g->at[r] = s;
            s += n;
        }
    }
    g->at[rows] = nnz;
    set_cuts(g);
    *out = g;
    return 0;
}

void blco_bymode_fill(const blco_bymode_t *g, int part, int array, void *dst)
{
    const uint64_t rlo = g->pcut[part], rhi = g->pcut[part + 1], base = g->at[rlo];
    if (rlo >= rhi)
        return;
    const int shift = g->shift, order = g->layout->order;
    if (g->dest) { /* the direct sort: scattered from the tensor */
        const blco_tensor_t *x = g->x;
        const uint64_t end = g->at[rhi];
        for (uint64_t b = 0; b < x->nblocks; b++) {
            const blco_block_t *bl = &x->blocks[b];
            for (uint64_t k = bl->start; k < bl->start + bl->nnz; k++) {
                const uint64_t q = g->dest[k];
                if (q < base || q >= end)
                    continue;
                if (array < order)
                    ((uint32_t *)dst)[q - base] = (uint32_t)coord_of(x, bl, k, array);
                else
                    ((double *)dst)[q - base] = x->val[k];
            }
        }
        return;
    }
    const uint64_t b0 = rlo >> shift, b1 = ((rhi - 1) >> shift) + 1;
    const uint32_t *row = g->coo[g->mode];
    const uint32_t *src = array < order ? g->coo[array] : NULL;
    uint32_t *d32 = dst;
    double *d64 = dst;
#pragma omp parallel num_threads(g->threads)
    {
        uint64_t *cur = g->cur + ((size_t)blco_thread_num() << shift);
#pragma omp for schedule(dynamic, 1)
        for (uint64_t bk = b0; bk < b1; bk++) {
            const uint64_t r0 = BLCO_MAX(rlo, bk << shift);
            const uint64_t r1 = BLCO_MIN(rhi, (bk + 1) << shift);
            memcpy(cur, g->at + r0, (r1 - r0) * sizeof *cur);
            for (uint64_t i = g->boff[bk]; i < g->boff[bk + 1]; i++) {
                const uint64_t r = row[i];
                if (r < r0 || r >= r1)
                    continue;
                const uint64_t q = cur[r - r0]++ - base;
                if (src)
                    d32[q] = src[i];
                else
                    d64[q] = g->val[i];
            }
        }
    }
}
