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
 * cache line: measured 5x slower when single rows alternated), each group's owner a
 * multiplicative hash reduced to [0, team) without a division, so neighbouring groups (a
 * skewed tensor's heavy rows) go to different threads. */
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

/* The rows of Y that thread `tid` of `team` owns: owner(row, team) == tid. Rows, not nonzero
 * ranges, so no two threads add into one row (no atomics, the same bits whatever the team);
 * interleaved, so a skewed tensor's heavy rows spread over the team. Each thread reads the
 * whole batch's mode-`mode` coordinates and works on its own rows' nonzeros, in tensor order.
 * buf holds P / R_last doubles: the Kronecker product of the value and the factor rows of
 * every mode but `mode` and the last one, which is fused into the accumulation. */
static int ttm_rows(const blco_tensor_t *x, int mode, const int *ranks, const double *const *U,
                    const int64_t *rowmap, uint64_t tid, uint64_t team, double *restrict Y,
                    uint64_t P, double *restrict buf)
{
    const blco_layout_t *l = &x->layout;
    const int N = l->order;
    const int last = mode == N - 1 ? N - 2 : N - 1;
    /* with three modes, the one other than `mode` and `last` */
    const int first = N == 3 ? (mode == 0 ? 1 : 0) : -1;
    const int rl = ranks[last];
    const double *ul = U[last];
    const int pn = l->pos[mode];
    const uint64_t mn = l->low_mask[mode];
    int bad = 0;
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *blk = &x->blocks[b];
        const uint64_t bn = blk->coord[mode];
        for (uint64_t k = blk->start; k < blk->start + blk->nnz; k++) {
            const uint64_t idx = x->idx[k];
            uint64_t in = ((idx >> pn) & mn) | bn;
            int64_t row = rowmap ? rowmap[in] : (int64_t)in;
            if (row < 0) {
                bad = 1;
                continue;
            }
            if (team > 1 && owner((uint64_t)row, team) != tid)
                continue;
            uint64_t il = ((idx >> l->pos[last]) & l->low_mask[last]) | blk->coord[last];
            const double *restrict u = ul + il * (uint64_t)rl;
            double *restrict y = Y + (uint64_t)row * P;
            const double v = x->val[k];
            if (first >= 0) {
                const int ra = ranks[first];
                uint64_t ia = ((idx >> l->pos[first]) & l->low_mask[first]) | blk->coord[first];
                const double *ua = U[first] + ia * (uint64_t)ra;
                switch (rl) { /* constant trip counts, unrolled and vectorized */
                case 2: outer(y, v, ua, ra, u, 2); break;
                case 4: outer(y, v, ua, ra, u, 4); break;
                case 8: outer(y, v, ua, ra, u, 8); break;
                case 16: outer(y, v, ua, ra, u, 16); break;
                default: outer(y, v, ua, ra, u, rl); break;
                }
                continue;
            }
            buf[0] = v;
            uint64_t len = 1;
            for (int m = 0; m < N; m++) {
                if (m == mode || m == last)
                    continue;
                uint64_t im = ((idx >> l->pos[m]) & l->low_mask[m]) | blk->coord[m];
                const double *um = U[m] + im * (uint64_t)ranks[m];
                const int r = ranks[m];
                /* in place, from the back: entry q becomes entries q*r .. q*r + r-1 */
                for (uint64_t q = len; q-- > 0;) {
                    const double a = buf[q];
                    for (int c = r - 1; c >= 0; c--)
                        buf[q * r + c] = a * um[c];
                }
                len *= (uint64_t)r;
            }
            for (uint64_t q = 0; q < len; q++) {
                const double a = buf[q];
                double *restrict yy = y + q * (uint64_t)rl;
                for (int c = 0; c < rl; c++)
                    yy[c] += a * u[c];
            }
        }
    }
    return bad ? -EINVAL : 0;
}

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
    const int last = mode == N - 1 ? N - 2 : N - 1;
    const uint64_t bufn = P / (uint64_t)ranks[last];
    int nt = blco_threads_resolve(threads);
    if ((uint64_t)nt > rows)
        nt = rows ? (int)rows : 1;
    int err = 0;
    (void)nt;
#pragma omp parallel num_threads(nt) reduction(min : err)
    {
        int tid = 0, team = 1;
#if HAVE_OPENMP
        tid = omp_get_thread_num();
        team = omp_get_num_threads();
#endif
        double *buf = malloc(bufn * sizeof *buf);
        if (!buf)
            err = -ENOMEM;
        else {
            int e = ttm_rows(x, mode, ranks, U, rowmap, (uint64_t)tid, (uint64_t)team, Y, P, buf);
            if (e < 0)
                err = e;
            free(buf);
        }
    }
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
