/* HOOI over the streaming engine (blco/stream.h, blco_stream_tucker_*): the rows of every
 * mode that hold nonzeros, found in one pass, and blco_tucker_hooi's TTM callbacks on
 * blco_stream_ttm, whole or by row blocks. Shared by blco-tucker and the Python package. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "blco_internal.h"
#include "engine_gpu.h"

static int mark_rows(void *user, const blco_tensor_t *x)
{
    blco_stream_tucker_t *t = user;
    const blco_layout_t *l = &x->layout;
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *blk = &x->blocks[b];
        for (uint64_t k = blk->start; k < blk->start + blk->nnz; k++)
            for (int m = 0; m < l->order; m++)
                t->rowmap[m][((x->idx[k] >> l->pos[m]) & l->low_mask[m]) | blk->coord[m]] = 1;
    }
    return 0;
}

int blco_stream_tucker_rows(blco_stream_t *s, blco_budget_t *budget, blco_stream_tucker_t *t,
                            blco_diag_t *diag)
{
    const blco_layout_t *l = &blco_stream_info(s)->layout;
    memset(t, 0, sizeof *t);
    t->budget = budget;
    t->order = l->order;
    for (int m = 0; m < l->order; m++) {
        t->dims[m] = l->dims[m];
        int err = blco_budget_calloc(budget, l->dims[m] * 8, (void **)&t->rowmap[m]);
        if (err < 0) {
            blco_stream_tucker_free(t);
            return blco_diag_set(diag, 0, err,
                                 "the row maps (8 bytes per index of every mode) do not fit the "
                                 "budget; raise the memory limit");
        }
    }
    int err = blco_stream_foreach(s, 1, mark_rows, t, diag);
    if (err < 0) {
        blco_stream_tucker_free(t);
        return err;
    }
    for (int m = 0; m < l->order; m++) {
        int64_t r = 0;
        for (uint64_t i = 0; i < l->dims[m]; i++)
            t->rowmap[m][i] = t->rowmap[m][i] ? r++ : -1;
        t->rows[m] = (uint64_t)r;
    }
    return 0;
}

static int tucker_ttm(void *ctx, int mode, const int *ranks, const double *const *U, double *Y)
{
    blco_stream_tucker_t *t = ctx;
    return blco_stream_ttm(t->s, mode, ranks, U, t->rowmap[mode], t->rows[mode], Y, &t->diag);
}

/* Rows [r0, r1) of Y(mode). The row map is recoded in place for the pass and restored after
 * it, so a block costs no memory beside Y: rows in the block shifted to start at 0, the
 * others stored as -2 - row, which the kernel skips (-1 stays: an index without nonzeros). */
static int tucker_ttm_rows(void *ctx, int mode, const int *ranks, const double *const *U,
                           uint64_t r0, uint64_t r1, double *Y)
{
    blco_stream_tucker_t *t = ctx;
    int64_t *rm = t->rowmap[mode];
    const int64_t b0 = (int64_t)r0, b1 = (int64_t)r1;
    for (uint64_t i = 0; i < t->dims[mode]; i++)
        if (rm[i] >= 0)
            rm[i] = rm[i] >= b0 && rm[i] < b1 ? rm[i] - b0 : -2 - rm[i];
    int err = blco_stream_ttm(t->s, mode, ranks, U, rm, r1 - r0, Y, &t->diag);
    for (uint64_t i = 0; i < t->dims[mode]; i++)
        rm[i] = rm[i] >= 0 ? rm[i] + b0 : rm[i] == -1 ? -1 : -2 - rm[i];
    return err;
}

/* The HOSVD start's sketches: MTTKRPs on the same stream. */
static int tucker_mttkrp(void *ctx, int mode, int rank, const double *const *factors, double *out)
{
    blco_stream_tucker_t *t = ctx;
    return stream_mttkrp_plain(t->s, mode, rank, factors, out, &t->diag);
}

void blco_stream_tucker_problem(blco_stream_tucker_t *t, blco_tucker_problem_t *p)
{
    for (int m = 0; m < t->order; m++) {
        p->rowmap[m] = t->rowmap[m];
        p->rows[m] = t->rows[m];
    }
    p->ttm = tucker_ttm;
    p->ttm_rows = tucker_ttm_rows;
    p->mttkrp = tucker_mttkrp;
    p->ctx = t;
}

void blco_stream_tucker_free(blco_stream_tucker_t *t)
{
    if (!t)
        return;
    stream_tucker_gpu_free(t->gpu);
    t->gpu = NULL;
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        if (t->rowmap[m]) {
            blco_budget_free(t->budget, t->rowmap[m], t->dims[m] * 8);
            t->rowmap[m] = NULL;
        }
}
