/* The TTM chain of Tucker over a fiber copy (blco_fibers_t, cpu/mttkrp_fibers.c): Y(n)'s row
 * of root i is the sum over the root's tree of the Kronecker products of its nodes' factor
 * rows times the leaves' values, built bottom up (SPLATT's TTMc over compressed sparse
 * fibers):
 *
 *     T(leaf k) = v_k,    T(node) = sum over its children j of U_{level of j}[id j] (x) T(j)
 *
 * so a fiber's nonzeros are summed against the leaf factor (R_leaf flops each) before one
 * outer product with the row above, and the row of Y, P = prod R_m wide, is made in a buffer
 * that stays in L1/L2 and written once. The BLCO kernel (cpu/ttm_cpu.c) instead adds P
 * products into a row of Y for every nonzero, and on a long mode those rows are random:
 * each nonzero reads and writes a row of Y from memory.
 *
 * T of a level-l node is laid out by levels (level l + 1 slowest); the root's T is moved to
 * Y's column order (the other modes in increasing order, the last fastest) through a
 * permutation of the P columns made once per call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"
#include "blco/tucker.h"

#if HAVE_OPENMP
#include <omp.h>
#endif

typedef struct tf {
    blco_fibers_view_t v;
    int N;
    int R[BLCO_MAX_MODES];         /* by level: the rank of the level's mode */
    uint64_t S[BLCO_MAX_MODES];    /* by level: the size of a node's T (S[N-1] = 1) */
    const double *U[BLCO_MAX_MODES]; /* by level (U[0] unused) */
} tf_t;

static inline double leaf_val(const tf_t *t, uint64_t k)
{
    return t->v.val ? t->v.val[k] : (double)t->v.val32[k];
}

/* The factor rows of the nodes this many ahead (on every level, across fibers and roots)
 * are prefetched into L2, as the BLCO kernels' (cpu/mttkrp_cpu.c): on a long mode they
 * are random reads from memory. */
#define AHEAD 16

static inline void prefetch_row(const double *U, uint32_t i, int R)
{
    const char *p = (const char *)(U + (uint64_t)i * (uint64_t)R);
    for (uint64_t b = 0; b < (uint64_t)R * 8; b += 64)
        __builtin_prefetch(p + b, 0, 2);
    __builtin_prefetch(p + (uint64_t)R * 8 - 1, 0, 2);
}

/* T (t->S[l] doubles) of node i at level l < N - 1; buf[l + 1..] scratch of the levels below. */
static void node_T(const tf_t *t, int l, uint64_t i, double *T, double *const *buf)
{
    const int m = l + 1, R = t->R[m];
    const uint64_t j0 = t->v.ptr[l][i], j1 = t->v.ptr[l][i + 1];
    const uint32_t *id = t->v.id[m];
    const double *U = t->U[m];
    if (m == t->N - 1) { /* the leaves: T = sum_k v_k U[k] */
        for (int c = 0; c < R; c++)
            T[c] = 0;
        for (uint64_t k = j0; k < j1; k++) {
            if (k + AHEAD < t->v.nodes[m])
                prefetch_row(U, id[k + AHEAD], R);
            const double v = leaf_val(t, k);
            const double *restrict u = U + (uint64_t)id[k] * (uint64_t)R;
            for (int c = 0; c < R; c++)
                T[c] += v * u[c];
        }
        return;
    }
    const uint64_t S = t->S[m];
    double *restrict C = buf[m];
    for (uint64_t x = 0; x < (uint64_t)R * S; x++)
        T[x] = 0;
    for (uint64_t j = j0; j < j1; j++) {
        if (j + AHEAD < t->v.nodes[m])
            prefetch_row(U, id[j + AHEAD], R);
        node_T(t, m, j, C, buf);
        const double *restrict u = U + (uint64_t)id[j] * (uint64_t)R;
        for (int q = 0; q < R; q++) {
            const double a = u[q];
            double *restrict tq = T + (uint64_t)q * S;
            for (uint64_t c = 0; c < S; c++)
                tq[c] += a * C[c];
        }
    }
}

/* Whether levels 1..N-1 hold their modes in increasing order: a root's T is then in Y's
 * column order. */
static int levels_in_mode_order(const tf_t *t)
{
    int inorder = 1;
    for (int l = 2; l < t->N; l++)
        inorder &= t->v.perm[l] > t->v.perm[l - 1];
    return inorder;
}

/* col[x]: Y's column of position x of a root's T (levels 1..N-1, the last fastest); NULL
 * when out of memory. */
static uint32_t *column_order(const tf_t *t, uint64_t P, int mode)
{
    uint32_t *col = malloc(P * sizeof *col);
    if (!col)
        return NULL;
    /* Y's stride of each mode: the product of the ranks of the later modes (but `mode`) */
    uint64_t stride[BLCO_MAX_MODES];
    for (int l = 1; l < t->N; l++) {
        uint64_t s = 1;
        for (int l2 = 1; l2 < t->N; l2++)
            if (t->v.perm[l2] > t->v.perm[l] && t->v.perm[l2] != mode)
                s *= (uint64_t)t->R[l2];
        stride[l] = s;
    }
    for (uint64_t x = 0; x < P; x++) {
        uint64_t rest = x, c = 0;
        for (int l = t->N - 1; l >= 1; l--) {
            c += (rest % (uint64_t)t->R[l]) * stride[l];
            rest /= (uint64_t)t->R[l];
        }
        col[x] = (uint32_t)c;
    }
    return col;
}

int blco_fibers_ttm(const blco_fibers_t *f, const int *ranks, const double *const *U,
                    const int64_t *rowmap, uint64_t rows, double *Y, int threads)
{
    if (!f || !ranks || !U || !Y)
        return -EINVAL;
    tf_t t;
    blco_fibers_view(f, &t.v);
    const int N = t.N = t.v.order, mode = t.v.perm[0];
    const uint64_t P = blco_ttm_cols(N, ranks, mode);
    if (!P || P > UINT32_MAX)
        return -EINVAL;
    if (!rowmap && rows != t.v.dims[mode])
        return -EINVAL;
    for (int l = 0; l < N; l++) {
        t.R[l] = ranks[t.v.perm[l]];
        t.U[l] = l ? U[t.v.perm[l]] : NULL;
        if (l && !t.U[l])
            return -EINVAL;
    }
    t.S[N - 1] = 1;
    for (int l = N - 2; l >= 0; l--)
        t.S[l] = t.S[l + 1] * (uint64_t)t.R[l + 1];
    uint32_t *col = NULL;
    if (!levels_in_mode_order(&t) && !(col = column_order(&t, P, mode)))
        return -ENOMEM;
    uint64_t scratch = 0; /* doubles a thread needs: T of every level */
    for (int l = 0; l < N - 1; l++)
        scratch += t.S[l];
    const uint64_t roots = t.v.nodes[0];
    int nt = blco_threads_resolve(threads);
    if ((uint64_t)nt > roots / 64 + 1)
        nt = (int)(roots / 64 + 1);
#if !HAVE_OPENMP
    nt = 1;
#endif
    int err = 0;
    /* Each root's row is made and written by one thread, its tree summed in the copy's
     * order: Y is the same bits whatever the thread count or schedule. */
#pragma omp parallel num_threads(nt) reduction(min : err)
    {
        double *mem = malloc(scratch * sizeof *mem), *buf[BLCO_MAX_MODES] = {0};
        if (!mem)
            err = -ENOMEM;
        for (int l = 0; mem && l < N - 1; l++)
            buf[l] = l ? buf[l - 1] + t.S[l - 1] : mem;
#pragma omp for schedule(dynamic, 256)
        for (uint64_t r = 0; r < roots; r++) {
            if (!mem)
                continue;
            const uint64_t i = t.v.id[0][r];
            const int64_t row = rowmap ? rowmap[i] : (int64_t)i;
            if (row < 0) { /* -1: an index with nonzeros the map calls empty; below: skipped */
                if (row == -1)
                    err = -EINVAL;
                continue;
            }
            if ((uint64_t)row >= rows) {
                err = -EINVAL;
                continue;
            }
            double *y = Y + (uint64_t)row * P;
            if (!col) {
                node_T(&t, 0, r, y, buf); /* straight into Y's row */
                continue;
            }
            double *T0 = buf[0];
            node_T(&t, 0, r, T0, buf);
            for (uint64_t x = 0; x < P; x++)
                y[col[x]] = T0[x];
        }
        free(mem);
    }
    free(col);
    return err;
}
