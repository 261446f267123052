/* The CPU kernels of Tucker: the TTM chain Y(n) = X x_{m != n} U_m^T into a semi-sparse Y
 * (rows of mode n that have nonzeros x prod of the other ranks), its naive COO oracle, and
 * TTV in all modes but one (MTTKRP at rank 1). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"
#include "blco/tucker.h"

#if HAVE_OPENMP
#include <omp.h>
#endif

uint64_t blco_ttm_cols(int order, const int *ranks, int mode)
{
    if (order < 2 || order > BLCO_MAX_MODES || mode < 0 || mode >= order || !ranks)
        return 0;
    uint64_t p = 1;
    for (int m = 0; m < order; m++) {
        if (m == mode)
            continue;
        if (ranks[m] < 1)
            return 0;
        p *= (uint64_t)ranks[m];
        if (p > (1ull << 40))
            return 0;
    }
    return p;
}

int blco_ttm_naive(const blco_coo_t *x, int mode, const int *ranks, const double *const *U,
                   double *Y)
{
    if (!x || !Y || !U)
        return -EINVAL;
    const int N = x->order;
    uint64_t P = blco_ttm_cols(N, ranks, mode);
    if (!P)
        return -EINVAL;
    for (int m = 0; m < N; m++)
        if (m != mode && !U[m])
            return -EINVAL;
    memset(Y, 0, x->dims[mode] * P * sizeof *Y);
    /* Column by column, the multi-index decoded from j: a different order of work from the
     * optimized kernel's Kronecker expansion, so the two check each other. */
    for (uint64_t k = 0; k < x->nnz; k++) {
        double *y = Y + x->ind[mode][k] * P;
        for (uint64_t j = 0; j < P; j++) {
            uint64_t rest = j;
            double prod = x->val[k];
            for (int m = N - 1; m >= 0; m--) {
                if (m == mode)
                    continue;
                uint64_t r = rest % (uint64_t)ranks[m];
                rest /= (uint64_t)ranks[m];
                prod *= U[m][x->ind[m][k] * (uint64_t)ranks[m] + r];
            }
            y[j] += prod;
        }
    }
    return 0;
}

/* The thread of `team` that owns row r: groups of 16 rows (so two threads rarely write one
 * cache line), each group's owner a multiplicative hash reduced to [0, team) without a
 * division, so neighbouring groups (a skewed tensor's heavy rows) go to different threads. */
static inline uint64_t owner(uint64_t r, uint64_t team)
{
    return (((r >> 4) * 0x9e3779b97f4a7c15ull) >> 32) * team >> 32;
}

/* y[q * rl + c] += v * ua[q] * u[c]: the two-factor case; rl a constant where inlined. */
static inline __attribute__((always_inline)) void outer(double *restrict y, double v,
                                                        const double *restrict ua, int ra,
                                                        const double *restrict u, const int rl)
{
    for (int q = 0; q < ra; q++) {
        const double a = v * ua[q];
        double *restrict yy = y + (uint64_t)q * rl;
        for (int c = 0; c < rl; c++)
            yy[c] += a * u[c];
    }
}

/* The same when rl is a multiple of 4, in explicit 4-wide vectors: a broadcast of
 * v * ua[q] and one multiply-add per 4 columns. */
typedef double v4d __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void outer4(double *restrict y, double v,
                                                         const double *restrict ua, int ra,
                                                         const double *restrict u, const int rl)
{
    v4d uv[4];
    const int nv = rl / 4 <= 4 ? rl / 4 : 4;
    for (int i = 0; i < nv; i++)
        memcpy(&uv[i], u + 4 * i, sizeof uv[i]);
    for (int q = 0; q < ra; q++) {
        const double a = v * ua[q];
        double *restrict yy = y + (uint64_t)q * rl;
        for (int i = 0; i < nv; i++) {
            v4d t;
            memcpy(&t, yy + 4 * i, sizeof t);
            t += a * uv[i];
            memcpy(yy + 4 * i, &t, sizeof t);
        }
    }
}

typedef struct ttm_ctx {
    const blco_tensor_t *x;
    int mode, last, first; /* first: with three modes, the one that is neither */
    const int *ranks;
    const double *const *U;
    const int64_t *rowmap;
    double *Y;
    uint64_t P;
} ttm_ctx_t;

/* The row of Y of nonzero k (in block blk); -1 when the row map says empty. */
static inline int64_t row_of(const ttm_ctx_t *c, const blco_block_t *blk, uint64_t k)
{
    const blco_layout_t *l = &c->x->layout;
    uint64_t in = ((c->x->idx[k] >> l->pos[c->mode]) & l->low_mask[c->mode]) | blk->coord[c->mode];
    return c->rowmap ? c->rowmap[in] : (int64_t)in;
}

/* Adds nonzero k's Kronecker row into Y's row `row`. buf holds P / R_last doubles: the
 * product of the value and the factor rows of every mode but `mode` and the last one, which
 * is fused into the accumulation. */
static inline void ttm_one(const ttm_ctx_t *c, const blco_block_t *blk, uint64_t k, int64_t row,
                           double *restrict buf)
{
    const blco_layout_t *l = &c->x->layout;
    const uint64_t idx = c->x->idx[k];
    const int last = c->last, rl = c->ranks[last];
    uint64_t il = ((idx >> l->pos[last]) & l->low_mask[last]) | blk->coord[last];
    const double *restrict u = c->U[last] + il * (uint64_t)rl;
    double *restrict y = c->Y + (uint64_t)row * c->P;
    const double v = c->x->val[k];
    if (c->first >= 0) {
        const int f = c->first, ra = c->ranks[f];
        uint64_t ia = ((idx >> l->pos[f]) & l->low_mask[f]) | blk->coord[f];
        const double *ua = c->U[f] + ia * (uint64_t)ra;
        switch (rl) { /* constant trip counts, unrolled and vectorized */
        case 2: outer(y, v, ua, ra, u, 2); break;
        case 4: outer(y, v, ua, ra, u, 4); break;
        case 8: outer(y, v, ua, ra, u, 8); break;
        case 16: outer(y, v, ua, ra, u, 16); break;
        default: outer(y, v, ua, ra, u, rl); break;
        }
        return;
    }
    buf[0] = v;
    uint64_t len = 1;
    for (int m = 0; m < l->order; m++) {
        if (m == c->mode || m == last)
            continue;
        uint64_t im = ((idx >> l->pos[m]) & l->low_mask[m]) | blk->coord[m];
        const double *um = c->U[m] + im * (uint64_t)c->ranks[m];
        const int r = c->ranks[m];
        /* in place, from the back: entry q becomes entries q*r .. q*r + r-1 */
        for (uint64_t q = len; q-- > 0;) {
            const double a = buf[q];
            for (int cc = r - 1; cc >= 0; cc--)
                buf[q * r + cc] = a * um[cc];
        }
        len *= (uint64_t)r;
    }
    for (uint64_t q = 0; q < len; q++) {
        const double a = buf[q];
        double *restrict yy = y + q * (uint64_t)rl;
        for (int cc = 0; cc < rl; cc++)
            yy[cc] += a * u[cc];
    }
}

/* Three modes, one thread: the nonzeros of one block in a loop of its own, every invariant
 * in a register (block coordinates folded into base pointers: a coordinate is its low
 * field plus the block's high bits), rl a constant where instantiated. */
#define TTM3_LOOP(NAME, RL_CONST)                                                                  \
    static __attribute__((noinline)) int NAME(                                                     \
        const uint64_t *restrict idx, const double *restrict val, uint64_t n, const ttm_ctx_t *c,  \
        const blco_block_t *blk, int rl_arg)                                                       \
    {                                                                                              \
        const int rl = RL_CONST ? RL_CONST : rl_arg;                                               \
        const blco_layout_t *l = &c->x->layout;                                                    \
        const int f = c->first, la = c->last, md = c->mode, ra = c->ranks[f];                      \
        const int pn = l->pos[md], pa = l->pos[f], pl = l->pos[la];                                \
        const uint64_t mn = l->low_mask[md], ma = l->low_mask[f], ml = l->low_mask[la];            \
        const uint64_t bn = blk->coord[md];                                                        \
        const double *ua0 = c->U[f] + blk->coord[f] * (uint64_t)ra;                                \
        const double *ul0 = c->U[la] + blk->coord[la] * (uint64_t)rl;                              \
        const int64_t *rowmap = c->rowmap;                                                         \
        double *Y = c->Y;                                                                          \
        const uint64_t P = c->P;                                                                   \
        int bad = 0;                                                                               \
        for (uint64_t k = 0; k < n; k++) {                                                         \
            const uint64_t ix = idx[k];                                                            \
            const uint64_t in = ((ix >> pn) & mn) | bn;                                            \
            const int64_t row = rowmap ? rowmap[in] : (int64_t)in;                                 \
            if (row < 0) { /* -1: an error; below: a row outside the block computed */             \
                bad |= row == -1;                                                                  \
                continue;                                                                          \
            }                                                                                      \
            const double *ua = ua0 + ((ix >> pa) & ma) * (uint64_t)ra;                             \
            const double *ul = ul0 + ((ix >> pl) & ml) * (uint64_t)rl;                             \
            if (RL_CONST && RL_CONST % 4 == 0)                                                     \
                outer4(Y + (uint64_t)row * P, val[k], ua, ra, ul, rl);                             \
            else                                                                                   \
                outer(Y + (uint64_t)row * P, val[k], ua, ra, ul, rl);                              \
        }                                                                                          \
        return bad;                                                                                \
    }
/* The same over one thread's list of a round (offsets from r0, rows in rowbuf), the block
 * pointers moved on as the list reaches later blocks. */
#define TTM3_LIST(NAME, RL_CONST)                                                                  \
    static __attribute__((noinline)) void NAME(const uint32_t *restrict list, uint64_t cnt,        \
                                               uint64_t r0, const int64_t *restrict rowbuf,        \
                                               const ttm_ctx_t *c, uint64_t bb, int rl_arg)        \
    {                                                                                              \
        const int rl = RL_CONST ? RL_CONST : rl_arg;                                               \
        const blco_tensor_t *x = c->x;                                                             \
        const blco_layout_t *l = &x->layout;                                                       \
        const int f = c->first, la = c->last, ra = c->ranks[f];                                    \
        const int pa = l->pos[f], pl = l->pos[la];                                                 \
        const uint64_t ma = l->low_mask[f], ml = l->low_mask[la];                                  \
        const uint64_t *restrict idx = x->idx;                                                     \
        const double *restrict val = x->val;                                                       \
        double *Y = c->Y;                                                                          \
        const uint64_t P = c->P;                                                                   \
        uint64_t end = x->blocks[bb].start + x->blocks[bb].nnz;                                    \
        const double *ua0 = c->U[f] + x->blocks[bb].coord[f] * (uint64_t)ra;                       \
        const double *ul0 = c->U[la] + x->blocks[bb].coord[la] * (uint64_t)rl;                     \
        for (uint64_t i = 0; i < cnt; i++) {                                                       \
            const uint64_t k = r0 + list[i];                                                       \
            if (k >= end) {                                                                        \
                while (x->blocks[bb].start + x->blocks[bb].nnz <= k)                               \
                    bb++;                                                                          \
                end = x->blocks[bb].start + x->blocks[bb].nnz;                                     \
                ua0 = c->U[f] + x->blocks[bb].coord[f] * (uint64_t)ra;                             \
                ul0 = c->U[la] + x->blocks[bb].coord[la] * (uint64_t)rl;                           \
            }                                                                                      \
            const uint64_t ix = idx[k];                                                            \
            const double *ua = ua0 + ((ix >> pa) & ma) * (uint64_t)ra;                             \
            const double *ul = ul0 + ((ix >> pl) & ml) * (uint64_t)rl;                             \
            double *y = Y + (uint64_t)rowbuf[list[i]] * P;                                         \
            if (RL_CONST && RL_CONST % 4 == 0)                                                     \
                outer4(y, val[k], ua, ra, ul, rl);                                                 \
            else                                                                                   \
                outer(y, val[k], ua, ra, ul, rl);                                                  \
        }                                                                                          \
    }
TTM3_LOOP(ttm3_4, 4)
TTM3_LOOP(ttm3_8, 8)
TTM3_LOOP(ttm3_16, 16)
TTM3_LOOP(ttm3_any, 0)
TTM3_LIST(ttm3_list_4, 4)
TTM3_LIST(ttm3_list_8, 8)
TTM3_LIST(ttm3_list_16, 16)
TTM3_LIST(ttm3_list_any, 0)


/* The rows and owners of nonzeros [k0, k1) of a round starting at r0 (block b holds k0),
 * counted per owner into cnt; every invariant in a register. Returns -EINVAL when a
 * row map calls a row with nonzeros empty (-1; its nonzeros then belong to no thread);
 * rows below -1 are skipped. */
static __attribute__((noinline)) int owners(const ttm_ctx_t *c, uint64_t b, uint64_t k0,
                                            uint64_t k1, uint64_t r0, uint64_t team,
                                            int64_t *restrict rowbuf, uint8_t *restrict own,
                                            uint64_t *restrict cnt)
{
    const blco_tensor_t *x = c->x;
    const int pn = x->layout.pos[c->mode];
    const uint64_t mn = x->layout.low_mask[c->mode];
    const uint64_t *restrict idx = x->idx;
    const int64_t *restrict rowmap = c->rowmap;
    int bad = 0;
    for (uint64_t k = k0; k < k1;) {
        while (x->blocks[b].start + x->blocks[b].nnz <= k)
            b++;
        const uint64_t end = BLCO_MIN(k1, x->blocks[b].start + x->blocks[b].nnz);
        const uint64_t bn = x->blocks[b].coord[c->mode];
        for (; k < end; k++) {
            const uint64_t in = ((idx[k] >> pn) & mn) | bn;
            const int64_t row = rowmap ? rowmap[in] : (int64_t)in;
            rowbuf[k - r0] = row;
            if (row < 0) { /* -1: an error; below: a row outside the block computed */
                own[k - r0] = 0xff;
                if (row == -1)
                    bad = -EINVAL;
                continue;
            }
            const uint8_t o = (uint8_t)owner((uint64_t)row, team);
            own[k - r0] = o;
            cnt[o]++;
        }
    }
    return bad;
}

/* Nonzeros handed out per round of the parallel kernel. */
#define ROUND (1u << 16)

int blco_ttm_cpu(const blco_tensor_t *x, int mode, const int *ranks, const double *const *U,
                 const int64_t *rowmap, uint64_t rows, double *Y, int threads)
{
    if (!x || !Y || !U)
        return -EINVAL;
    const int N = x->layout.order;
    uint64_t P = blco_ttm_cols(N, ranks, mode);
    if (!P)
        return -EINVAL;
    for (int m = 0; m < N; m++)
        if (m != mode && !U[m])
            return -EINVAL;
    if (!rowmap && rows != x->layout.dims[mode])
        return -EINVAL;
    ttm_ctx_t c = {x, mode, mode == N - 1 ? N - 2 : N - 1, -1, ranks, U, rowmap, Y, P};
    if (N == 3)
        c.first = mode == 0 ? 1 : 0;
    const uint64_t bufn = P / (uint64_t)ranks[c.last];
    int nt = blco_threads_resolve(threads);
    if ((uint64_t)nt > x->nnz / 4096 + 1)
        nt = (int)(x->nnz / 4096 + 1); /* small batches: one thread */
#if !HAVE_OPENMP
    nt = 1;
#endif
    if (nt == 1) {
        double *buf = malloc(bufn * sizeof *buf);
        if (!buf)
            return -ENOMEM;
        int bad = 0;
        for (uint64_t b = 0; b < x->nblocks; b++) {
            const blco_block_t *blk = &x->blocks[b];
            if (c.first >= 0) {
                const int rl = ranks[c.last];
                const uint64_t *ib = x->idx + blk->start;
                const double *vb = x->val + blk->start;
                bad |= rl == 4    ? ttm3_4(ib, vb, blk->nnz, &c, blk, rl)
                       : rl == 8  ? ttm3_8(ib, vb, blk->nnz, &c, blk, rl)
                       : rl == 16 ? ttm3_16(ib, vb, blk->nnz, &c, blk, rl)
                                  : ttm3_any(ib, vb, blk->nnz, &c, blk, rl);
                continue;
            }
            for (uint64_t k = blk->start; k < blk->start + blk->nnz; k++) {
                int64_t row = row_of(&c, blk, k);
                if (row < 0)
                    bad |= row == -1;
                else
                    ttm_one(&c, blk, k, row, buf);
            }
        }
        free(buf);
        return bad ? -EINVAL : 0;
    }
    /* Rounds of ROUND nonzeros: the team finds each nonzero's row and owner (a hashed share
     * of Y's rows), sorts the round's nonzeros by owner keeping tensor order (a counting
     * sort), then each thread adds its own rows' nonzeros. No two threads write one row, no
     * atomics, and every row sums its nonzeros in tensor order: the same bits as one thread. */
    int64_t *rowbuf = malloc(ROUND * sizeof *rowbuf);
    uint32_t *list = malloc(ROUND * sizeof *list);
    uint8_t *own = malloc(ROUND);
    uint64_t *cnt = calloc((size_t)nt * (size_t)nt + (size_t)nt + 1, sizeof *cnt);
    int err = rowbuf && list && own && cnt ? 0 : -ENOMEM;
    if (nt > 255)
        nt = 255; /* owners fit a byte */
    if (err == 0) {
#pragma omp parallel num_threads(nt) reduction(min : err)
        {
            uint64_t tid = (uint64_t)blco_thread_num(), team = 1;
#if HAVE_OPENMP
            team = (uint64_t)omp_get_num_threads();
#endif
            double *buf = malloc(bufn * sizeof *buf);
            int bad = buf ? 0 : -ENOMEM;
            uint64_t *mine = cnt + tid * team, *start = cnt + team * team;
            for (uint64_t r0 = 0; r0 < x->nnz; r0 += ROUND) {
                uint64_t len = BLCO_MIN((uint64_t)ROUND, x->nnz - r0);
                uint64_t k0 = r0 + len * tid / team, k1 = r0 + len * (tid + 1) / team;
                memset(mine, 0, team * sizeof *mine);
                if (k0 < k1 &&
                    owners(&c, blco_tensor_block_of(x, k0), k0, k1, r0, team, rowbuf, own, mine) < 0)
                    bad = -EINVAL;
#pragma omp barrier
#pragma omp single
                {
                    uint64_t at = 0;
                    for (uint64_t o = 0; o < team; o++) {
                        start[o] = at;
                        for (uint64_t t = 0; t < team; t++) {
                            uint64_t n = cnt[t * team + o];
                            cnt[t * team + o] = at;
                            at += n;
                        }
                    }
                    start[team] = at;
                }
                for (uint64_t k = k0; k < k1; k++)
                    if (own[k - r0] != 0xff)
                        list[mine[own[k - r0]]++] = (uint32_t)(k - r0);
#pragma omp barrier
                if (buf && start[tid] < start[tid + 1] && c.first >= 0) {
                    const int rl = ranks[c.last];
                    const uint32_t *li = list + start[tid];
                    uint64_t cn = start[tid + 1] - start[tid], bb = blco_tensor_block_of(x, r0 + li[0]);
                    if (rl == 4)
                        ttm3_list_4(li, cn, r0, rowbuf, &c, bb, rl);
                    else if (rl == 8)
                        ttm3_list_8(li, cn, r0, rowbuf, &c, bb, rl);
                    else if (rl == 16)
                        ttm3_list_16(li, cn, r0, rowbuf, &c, bb, rl);
                    else
                        ttm3_list_any(li, cn, r0, rowbuf, &c, bb, rl);
                } else if (buf && start[tid] < start[tid + 1]) {
                    uint64_t bb = blco_tensor_block_of(x, r0 + list[start[tid]]);
                    for (uint64_t i = start[tid]; i < start[tid + 1]; i++) {
                        uint64_t k = r0 + list[i];
                        while (x->blocks[bb].start + x->blocks[bb].nnz <= k)
                            bb++;
                        ttm_one(&c, &x->blocks[bb], k, rowbuf[list[i]], buf);
                    }
                }
#pragma omp barrier
            }
            free(buf);
            if (bad < 0)
                err = bad;
        }
    }
    free(rowbuf);
    free(list);
    free(own);
    free(cnt);
    return err;
}

int blco_ttv_naive(const blco_coo_t *x, int mode, const double *const *v, double *y)
{
    if (!x || mode < 0 || mode >= x->order)
        return -EINVAL;
    return blco_mttkrp_naive(x, mode, 1, v, y);
}

int blco_ttv_cpu(const blco_tensor_t *x, int mode, const double *const *v, double *y, int threads)
{
    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    o.threads = threads;
    return blco_mttkrp_cpu(x, mode, 1, v, y, &o, NULL);
}
