/* Building a BLCO tensor in memory from COO: ALTO keys, a parallel radix sort, duplicate
 * merging, in-block re-encoding and the scan that cuts blocks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"

void blco_build_opts_default(blco_build_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->duplicates = BLCO_DUP_SUM;
}

void blco_tensor_destroy(blco_tensor_t *t)
{
    if (!t)
        return;
    blco_budget_free(t->budget, t->blocks, t->nblocks * sizeof(blco_block_t));
    blco_budget_free(t->budget, t->idx, t->nnz * 8);
    blco_budget_free(t->budget, t->val, t->nnz * 8);
    free(t);
}

static uint64_t key_of(const blco_layout_t *l, uint64_t lo, uint64_t hi)
{
    int s = l->line_bits;
    return s >= 64 ? hi : (lo >> s) | (hi << (64 - s));
}

/* Cuts the sorted nonzeros into blocks: a new block where the key changes or the block
 * reaches max_nnz. With `blocks` NULL it only counts. */
static uint64_t cut_blocks(const blco_layout_t *l, const uint64_t *klo, const uint64_t *khi,
                           const uint64_t *first, uint64_t nrun, uint64_t max_nnz,
                           blco_block_t *blocks)
{
    uint64_t nb = 0, start = 0, cur = 0;
    for (uint64_t r = 0; r < nrun; r++) {
        uint64_t k = first[r];
        uint64_t key = l->key_bits ? key_of(l, klo[k], khi ? khi[k] : 0) : 0;
        if (r == 0 || key != cur || (max_nnz && r - start == max_nnz)) {
            if (blocks) {
                if (nb)
                    blocks[nb - 1].nnz = r - start;
                blocks[nb].key = key;
                blocks[nb].start = r;
                blco_layout_block_coord(l, key, blocks[nb].coord);
            }
            nb++;
            start = r;
            cur = key;
        }
    }
    if (blocks && nb)
        blocks[nb - 1].nnz = nrun - start;
    return nb;
}

int blco_tensor_from_coo(const blco_coo_t *coo, const blco_build_opts_t *opts,
                         blco_budget_t *budget, blco_tensor_t **out, blco_diag_t *diag)
{
    blco_build_opts_t def;
    if (!opts) {
        blco_build_opts_default(&def);
        opts = &def;
    }
    *out = NULL;
    uint64_t n = coo->nnz;
    if (n == 0)
        return blco_diag_set(diag, 0, -BLCO_EEMPTY, "the tensor has no nonzero");
    for (int m = 0; m < coo->order; m++)
        if (coo->dims[m] == 0)
            return blco_diag_set(diag, 0, -EINVAL, "mode %d has no length", m + 1);

    blco_tensor_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->budget = budget;
    blco_layout_t *l = &t->layout;
    int err = blco_layout_init(l, coo->order, coo->dims, opts->line_bits);
    if (err < 0) {
        int bits = 0;
        for (int m = 0; m < coo->order; m++)
            bits += coo->dims[m] <= 1 ? 0 : 64 - __builtin_clzll(coo->dims[m] - 1);
        blco_diag_set(diag, 0, err,
                      err == -BLCO_EUNSUPPORTED
                          ? "the tensor needs %d index bits; at most %d are supported"
                          : "invalid layout (%d index bits, limit %d)",
                      bits, BLCO_MAX_INDEX_BITS);
        free(t);
        return err;
    }
    int wide = l->total_bits > 64;
    int threads = blco_threads_resolve(opts->threads);

    /* Scratch: keys (1 or 2 words), a permutation, and as much again for the sort. */
    uint64_t *klo = NULL, *khi = NULL, *perm = NULL, *tlo = NULL, *thi = NULL, *tperm = NULL;
    if ((err = blco_budget_alloc(budget, n * 8, (void **)&klo)) < 0 ||
        (err = blco_budget_alloc(budget, n * 8, (void **)&perm)) < 0 ||
        (err = blco_budget_alloc(budget, n * 8, (void **)&tlo)) < 0 ||
        (err = blco_budget_alloc(budget, n * 8, (void **)&tperm)) < 0 ||
        (wide && (err = blco_budget_alloc(budget, n * 8, (void **)&khi)) < 0) ||
        (wide && (err = blco_budget_alloc(budget, n * 8, (void **)&thi)) < 0))
        goto fail;

    for (int m = 0; m < coo->order; m++) {
        const uint64_t *ix = coo->ind[m];
        uint64_t dim = coo->dims[m];
        int bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
        for (uint64_t k = 0; k < n; k++)
            bad |= ix[k] >= dim;
        if (bad) {
            err = blco_diag_set(diag, 0, -BLCO_ERANGE, "an index of mode %d is beyond its dim %llu",
                                m + 1, (unsigned long long)dim);
            goto fail;
        }
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (uint64_t k = 0; k < n; k++) {
        uint64_t c[BLCO_MAX_MODES], a[2];
        for (int m = 0; m < coo->order; m++)
            c[m] = coo->ind[m][k];
        blco_layout_alto(l, c, a);
        klo[k] = a[0];
        if (wide)
            khi[k] = a[1];
        perm[k] = k;
    }
    blco_radix_sort(klo, khi, perm, n, l->total_bits, tlo, thi, tperm, threads);

    /* Runs of equal keys are repeated coordinates. `first` (reusing tlo) lists where
     * each distinct coordinate starts in sorted order. */
    uint64_t *first = tlo, nrun = 0;
    for (uint64_t k = 0; k < n; k++) {
        if (k && klo[k] == klo[k - 1] && (!wide || khi[k] == khi[k - 1])) {
            if (opts->duplicates == BLCO_DUP_ERROR) {
                uint64_t c[BLCO_MAX_MODES], a[2] = {klo[k], wide ? khi[k] : 0};
                blco_layout_alto_decode(l, a, c);
                char where[200];
                int len = 0;
                for (int m = 0; m < l->order && len < 160; m++)
                    len += snprintf(where + len, sizeof where - len, "%s%llu", m ? "," : "",
                                    (unsigned long long)c[m]);
                err = blco_diag_set(diag, 0, -BLCO_EDUP, "duplicate coordinate (%s) (0-based)",
                                    where);
                goto fail;
            }
            continue;
        }
        first[nrun++] = k;
    }
    t->duplicates = n - nrun;

    t->nblocks = cut_blocks(l, klo, khi, first, nrun, opts->max_block_nnz, NULL);
    if ((err = blco_budget_alloc(budget, nrun * 8, (void **)&t->idx)) < 0 ||
        (err = blco_budget_alloc(budget, nrun * 8, (void **)&t->val)) < 0) {
        blco_budget_free(budget, t->idx, nrun * 8);
        t->idx = NULL;
        goto fail;
    }
    t->nnz = nrun;
    if ((err = blco_budget_alloc(budget, t->nblocks * sizeof(blco_block_t),
                                 (void **)&t->blocks)) < 0)
        goto fail;
    cut_blocks(l, klo, khi, first, nrun, opts->max_block_nnz, t->blocks);

    double norm2 = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : norm2)
    for (uint64_t r = 0; r < nrun; r++) {
        uint64_t k = first[r], end = r + 1 < nrun ? first[r + 1] : n;
        uint64_t c[BLCO_MAX_MODES], src = perm[k];
        for (int m = 0; m < l->order; m++)
            c[m] = coo->ind[m][src];
        double v = 0;
        for (uint64_t j = k; j < end; j++)
            v += coo->val[perm[j]];
        t->idx[r] = blco_layout_index(l, c, NULL);
        t->val[r] = v;
        norm2 += v * v;
    }
    if (!isfinite(norm2)) {
        /* A NaN or an infinity given, or finite values whose summed repeats or squares go
         * beyond the double range: refuse rather than poison every later result. */
        for (uint64_t k = 0; k < n; k++)
            if (!isfinite(coo->val[k])) {
                err = blco_diag_set(diag, 0, -BLCO_EVALUE,
                                    "value %llu is %s: NaN and infinities cannot be stored",
                                    (unsigned long long)k, isnan(coo->val[k]) ? "NaN" : "infinite");
                goto fail;
            }
        err = blco_diag_set(diag, 0, -BLCO_EVALUE,
                            "the values are too large: summed repeats or their sum of squares "
                            "overflow to infinity");
        goto fail;
    }
    t->norm2 = norm2;
    if (t->duplicates)
        blco_log(BLCO_LOG_INFO, "summed %llu duplicate coordinates",
                 (unsigned long long)t->duplicates);

    blco_budget_free(budget, klo, n * 8);
    blco_budget_free(budget, khi, wide ? n * 8 : 0);
    blco_budget_free(budget, perm, n * 8);
    blco_budget_free(budget, tlo, n * 8);
    blco_budget_free(budget, thi, wide ? n * 8 : 0);
    blco_budget_free(budget, tperm, n * 8);
    *out = t;
    return 0;

fail:
    blco_budget_free(budget, klo, n * 8);
    blco_budget_free(budget, khi, n * 8);
    blco_budget_free(budget, perm, n * 8);
    blco_budget_free(budget, tlo, n * 8);
    blco_budget_free(budget, thi, n * 8);
    blco_budget_free(budget, tperm, n * 8);
    blco_tensor_destroy(t);
    return err;
}

uint64_t blco_tensor_block_of(const blco_tensor_t *t, uint64_t k)
{
    uint64_t lo = 0, hi = t->nblocks;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (t->blocks[mid].start <= k)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int blco_tensor_index_cuts(const blco_tensor_t *t, int mode, int parts, uint64_t samples_per_part,
                           uint64_t *cut)
{
    const blco_layout_t *l = &t->layout;
    const uint64_t ns = BLCO_MIN(t->nnz, samples_per_part * (uint64_t)parts);
    uint64_t *smp = malloc(BLCO_MAX(ns, 1) * sizeof *smp);
    if (!smp)
        return -ENOMEM;
    uint64_t b = 0;
    for (uint64_t i = 0; i < ns; i++) {
        uint64_t k = (uint64_t)((unsigned __int128)t->nnz * i / ns);
        while (b + 1 < t->nblocks && k >= t->blocks[b].start + t->blocks[b].nnz)
            b++;
        uint64_t f = l->low_mask[mode] ? (t->idx[k] >> l->pos[mode]) & l->low_mask[mode] : 0;
        smp[i] = f | t->blocks[b].coord[mode];
    }
    qsort(smp, ns, sizeof *smp, cmp_u64);
    cut[0] = 0;
    for (int p = 1; p < parts; p++)
        cut[p] = ns ? BLCO_MAX(cut[p - 1], smp[ns * (uint64_t)p / (uint64_t)parts]) : cut[p - 1];
    cut[parts] = l->dims[mode];
    free(smp);
    return 0;
}

void blco_tensor_get(const blco_tensor_t *t, uint64_t k, uint64_t *coord, double *val)
{
    blco_layout_decode(&t->layout, t->idx[k], t->blocks[blco_tensor_block_of(t, k)].coord, coord);
    if (val)
        *val = t->val[k];
}
