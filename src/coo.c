/* The COO tensor container: growth through the budget, dims, norm, duplicate merging. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"

static int coo_bits(uint64_t d)
{
    return d <= 1 ? 0 : 64 - __builtin_clzll(d - 1);
}

int blco_coo_create(blco_coo_t **out, int order, uint64_t cap, blco_budget_t *budget)
{
    *out = NULL;
    if (order < 1)
        return -EINVAL;
    if (order > BLCO_MAX_MODES)
        return -BLCO_EUNSUPPORTED;
    blco_coo_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->order = order;
    c->budget = budget;
    int err = blco_coo_reserve(c, cap ? cap : 16);
    if (err < 0) {
        blco_coo_destroy(c);
        return err;
    }
    *out = c;
    return 0;
}

static int grow_array(blco_budget_t *b, uint64_t **p, uint64_t n, uint64_t oldcap, uint64_t cap)
{
    void *q;
    int err = blco_budget_alloc(b, cap * 8, &q);
    if (err < 0)
        return err;
    if (*p)
        memcpy(q, *p, n * 8);
    blco_budget_free(b, *p, oldcap * 8);
    *p = q;
    return 0;
}

int blco_coo_reserve(blco_coo_t *c, uint64_t cap)
{
    if (cap <= c->cap)
        return 0;
    if (cap > (UINT64_MAX >> 4))
        return -BLCO_EBUDGET;
    /* Check the whole growth against the budget first so a failure changes nothing. */
    uint64_t extra = (cap + (c->cap ? c->cap : 0)) * 8 * (uint64_t)(c->order + 1);
    int err = blco_budget_reserve(c->budget, extra);
    if (err < 0)
        return err;
    blco_budget_release(c->budget, extra);
    for (int m = 0; m < c->order; m++)
        if ((err = grow_array(c->budget, &c->ind[m], c->nnz, c->cap, cap)) < 0)
            return err;
    if ((err = grow_array(c->budget, (uint64_t **)&c->val, c->nnz, c->cap, cap)) < 0)
        return err;
    c->cap = cap;
    return 0;
}

int blco_coo_push(blco_coo_t *c, const uint64_t *idx, double val)
{
    if (c->nnz == c->cap) {
        int err = blco_coo_reserve(c, c->cap * 2);
        if (err < 0)
            return err;
    }
    for (int m = 0; m < c->order; m++)
        c->ind[m][c->nnz] = idx[m];
    c->val[c->nnz++] = val;
    return 0;
}

void blco_coo_destroy(blco_coo_t *c)
{
    if (!c)
        return;
    for (int m = 0; m < c->order; m++)
        blco_budget_free(c->budget, c->ind[m], c->cap * 8);
    blco_budget_free(c->budget, c->val, c->cap * 8);
    free(c);
}

void blco_coo_fit_dims(blco_coo_t *c)
{
    for (int m = 0; m < c->order; m++) {
        uint64_t mx = 0;
        const uint64_t *ix = c->ind[m];
        for (uint64_t k = 0; k < c->nnz; k++)
            mx = ix[k] > mx ? ix[k] : mx;
        c->dims[m] = c->nnz ? mx + 1 : 0;
    }
}

double blco_coo_norm2(const blco_coo_t *c)
{
    double s = 0;
    for (uint64_t k = 0; k < c->nnz; k++)
        s += c->val[k] * c->val[k];
    return s;
}

/* Comparison fallback for coordinates wider than 128 bits. */
static int cmp_coord(const void *pa, const void *pb, void *arg)
{
    const blco_coo_t *c = arg;
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    for (int m = 0; m < c->order; m++) {
        uint64_t x = c->ind[m][a], y = c->ind[m][b];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return a < b ? -1 : a > b;
}

static int same_coord(const blco_coo_t *c, uint64_t a, uint64_t b)
{
    for (int m = 0; m < c->order; m++)
        if (c->ind[m][a] != c->ind[m][b])
            return 0;
    return 1;
}

int blco_coo_dedup(blco_coo_t *c, int policy, uint64_t *ndup, blco_diag_t *diag)
{
    if (ndup)
        *ndup = 0;
    uint64_t n = c->nnz;
    if (n < 2)
        return 0;
    int bits[BLCO_MAX_MODES], total = 0;
    for (int m = 0; m < c->order; m++) {
        uint64_t d = c->dims[m];
        if (!d) { /* dims not known yet: use the largest index */
            for (uint64_t k = 0; k < n; k++)
                d = c->ind[m][k] >= d ? c->ind[m][k] + 1 : d;
        }
        bits[m] = coo_bits(d);
        total += bits[m];
    }
    blco_budget_t *b = c->budget;
    int narr = total <= 128 ? 6 : 1;
    uint64_t *arr[6] = {0};
    int err = 0;
    for (int i = 0; i < narr; i++)
        if ((err = blco_budget_alloc(b, n * 8, (void **)&arr[i])) < 0)
            goto out;
    uint64_t *perm = arr[0];
    if (total <= 128) {
        uint64_t *klo = arr[1], *khi = arr[2];
#pragma omp parallel for schedule(static)
        for (uint64_t k = 0; k < n; k++) {
            unsigned __int128 key = 0;
            for (int m = 0; m < c->order; m++)
                key = (key << bits[m]) | c->ind[m][k];
            klo[k] = (uint64_t)key;
            khi[k] = (uint64_t)(key >> 64);
            perm[k] = k;
        }
        blco_radix_sort(klo, total > 64 ? khi : NULL, perm, n, total, arr[3],
                        total > 64 ? arr[4] : NULL, arr[5], 0);
    } else {
        for (uint64_t k = 0; k < n; k++)
            perm[k] = k;
        qsort_r(perm, n, 8, cmp_coord, c);
    }
    /* Count repeats first: with none, leave the tensor in its original order. */
    uint64_t dups = 0;
    for (uint64_t k = 1; k < n; k++) {
        if (same_coord(c, perm[k], perm[k - 1])) {
            if (policy == BLCO_DUP_ERROR) {
                char where[256];
                int len = 0;
                for (int m = 0; m < c->order && len < 200; m++)
                    len += snprintf(where + len, sizeof where - len, "%s%llu", m ? "," : "",
                                    (unsigned long long)c->ind[m][perm[k]]);
                err = blco_diag_set(diag, 0, -BLCO_EDUP,
                                    "duplicate coordinate (%s) (0-based), entries %llu and %llu",
                                    where, (unsigned long long)BLCO_MIN(perm[k], perm[k - 1]) + 1,
                                    (unsigned long long)BLCO_MAX(perm[k], perm[k - 1]) + 1);
                goto out;
            }
            dups++;
        }
    }
    if (dups) {
        /* Sum runs of equal coordinates into the run's first entry, in sorted order, then
         * gather each array through the kept positions. */
        uint64_t *keep = arr[1], *tmp = arr[narr > 1 ? 3 : 0];
        double *vsum = (double *)(narr > 1 ? arr[2] : NULL);
        uint64_t w = 0;
        if (narr == 1) { /* no scratch was allocated for the wide case: get it now */
            if ((err = blco_budget_alloc(b, n * 8, (void **)&arr[1])) < 0 ||
                (err = blco_budget_alloc(b, n * 8, (void **)&arr[2])) < 0 ||
                (err = blco_budget_alloc(b, n * 8, (void **)&arr[3])) < 0)
                goto out;
            narr = 4;
            keep = arr[1];
            vsum = (double *)arr[2];
            tmp = arr[3];
        }
        for (uint64_t k = 0; k < n; k++) {
            if (k && same_coord(c, perm[k], perm[k - 1])) {
                vsum[w - 1] += c->val[perm[k]];
                if (!isfinite(vsum[w - 1])) {
                    err = blco_diag_set(diag, 0, -BLCO_EVALUE,
                                        "the values of a repeated coordinate (entries %llu and "
                                        "%llu) sum to an infinite value",
                                        (unsigned long long)keep[w - 1] + 1,
                                        (unsigned long long)perm[k] + 1);
                    goto out;
                }
            } else {
                keep[w] = perm[k];
                vsum[w++] = c->val[perm[k]];
            }
        }
        for (int m = 0; m < c->order; m++) {
            for (uint64_t k = 0; k < w; k++)
                tmp[k] = c->ind[m][keep[k]];
            memcpy(c->ind[m], tmp, w * 8);
        }
        memcpy(c->val, vsum, w * 8);
        c->nnz = w;
    }
    if (ndup)
        *ndup = dups;
out:
    for (int i = 0; i < 6; i++)
        blco_budget_free(b, arr[i], n * 8);
    return err;
}
