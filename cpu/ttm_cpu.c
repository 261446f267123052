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
#if defined(__AVX512F__)
#include <immintrin.h>
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

/* The same when rl is a multiple of 4 (at most 16), in explicit 4-wide vectors: the last
 * factor's row times v once (as the oracle multiplies: v * u_last first), then per q a
 * broadcast of ua[q] and one multiply-add per 4 columns. ra and rl are constants where
 * instantiated, so the loops unroll completely. */
typedef double v4d __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void outer4(double *restrict y, double v,
                                                         const double *restrict ua, int ra,
                                                         const double *restrict u, const int rl)
{
    v4d uv[4];
    const int nv = rl / 4 <= 4 ? rl / 4 : 4;
    for (int i = 0; i < nv; i++) {
        memcpy(&uv[i], u + 4 * i, sizeof uv[i]);
        uv[i] *= v;
    }
    for (int q = 0; q < ra; q++) {
        const double a = ua[q];
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
    int prefetch; /* the three-mode loops prefetch (TTM_PREFETCH_BYTES) */
} ttm_ctx_t;

/* The row of Y of the nonzero with in-block index ix (in block blk); -1 when the row map
 * says empty. */
static inline int64_t row_of(const ttm_ctx_t *c, const blco_block_t *blk, uint64_t ix)
{
    const blco_layout_t *l = &c->x->layout;
    uint64_t in = ((ix >> l->pos[c->mode]) & l->low_mask[c->mode]) | blk->coord[c->mode];
    return c->rowmap ? c->rowmap[in] : (int64_t)in;
}

/* Adds the Kronecker row of the nonzero (idx, v) of block blk into Y's row `row`. buf holds P /
 * R_last doubles: the product of the value and the factor rows of every mode but `mode` and the
 * last one, which is fused into the accumulation. */
static inline void ttm_one(const ttm_ctx_t *c, const blco_block_t *blk, uint64_t idx, double v,
                           int64_t row, double *restrict buf)
{
    const blco_layout_t *l = &c->x->layout;
    const int last = c->last, rl = c->ranks[last];
    uint64_t il = ((idx >> l->pos[last]) & l->low_mask[last]) | blk->coord[last];
    const double *restrict u = c->U[last] + il * (uint64_t)rl;
    double *restrict y = c->Y + (uint64_t)row * c->P;
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

/* The three-mode loops prefetch the Y row and the two factor rows of the nonzero this many
 * ahead, into L2, where Y's rows (rows x P x 8 bytes) and the other two factors hold more
 * than TTM_PREFETCH_BYTES: then the rows a nonzero touches are random and miss the caches.
 * Measured (perf/results/README.md, 2026-11-27, 2-vCPU Zen 4, noisy): the TTM chains of a
 * 10M-nonzero 800000 x 600000 x 400000 power-law tensor 1.22x (ranks 8x8x8) and 1.45x
 * (4x4x4) faster by the median of 6 alternating runs, 1.05x and 1.19x by the best; on
 * 20000 x 15000 x 10000 (10 MB of Y at 8x8x8) and the ipython token tensor, no change
 * beyond the noise. The row map's entry of the nonzero twice as far ahead is prefetched too,
 * so the row map (8 bytes an index of a long mode) is in cache when the Y row's address is
 * made from it: the chains of 20M nonzeros of Amazon's dimensions 1.05-1.19x faster at ranks
 * 8x8 and 1.10-1.24x at 10x10 (the HOSVD start's sketch of rank 8), 2 rounds, same run. */
#define TTM_PREFETCH_AHEAD 16
#define TTM_PREFETCH_BYTES BLCO_PREFETCH_BYTES

/* Three modes, one thread: the nonzeros of one block in a loop of its own, every invariant
 * in a register (block coordinates folded into base pointers: a coordinate is its low
 * field plus the block's high bits), rl a constant where instantiated. */
#define TTM3_LOOP(NAME, RA_CONST, RL_CONST, PF)                                                    \
    static __attribute__((noinline)) int NAME(                                                     \
        const uint64_t *restrict idx, const double *restrict val, uint64_t n, const ttm_ctx_t *c,  \
        const blco_block_t *blk, int rl_arg)                                                       \
    {                                                                                              \
        const int rl = RL_CONST ? RL_CONST : rl_arg;                                               \
        const blco_layout_t *l = &c->x->layout;                                                    \
        const int f = c->first, la = c->last, md = c->mode;                                        \
        const int ra = RA_CONST ? RA_CONST : c->ranks[f];                                          \
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
            if (PF && rowmap && k + 2 * TTM_PREFETCH_AHEAD < n) {                                  \
                const uint64_t jx = idx[k + 2 * TTM_PREFETCH_AHEAD];                               \
                __builtin_prefetch(rowmap + (((jx >> pn) & mn) | bn), 0, 2);                       \
            }                                                                                      \
            if (PF && k + TTM_PREFETCH_AHEAD < n) {                                                \
                const uint64_t jx = idx[k + TTM_PREFETCH_AHEAD];                                   \
                const uint64_t jn = ((jx >> pn) & mn) | bn;                                        \
                const int64_t jr = rowmap ? rowmap[jn] : (int64_t)jn;                              \
                if (jr >= 0) {                                                                     \
                    const char *py = (const char *)(Y + (uint64_t)jr * P);                         \
                    for (uint64_t b = 0; b < P * 8; b += 64)                                       \
                        __builtin_prefetch(py + b, 1, 2); /* into L2, as MTTKRP's */               \
                }                                                                                  \
                __builtin_prefetch(ua0 + ((jx >> pa) & ma) * (uint64_t)ra, 0, 2);                  \
                __builtin_prefetch(ul0 + ((jx >> pl) & ml) * (uint64_t)rl, 0, 2);                  \
            }                                                                                      \
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
TTM3_LOOP(ttm3_4_4, 4, 4, 0)
TTM3_LOOP(ttm3_8_8, 8, 8, 0)
TTM3_LOOP(ttm3_16_16, 16, 16, 0)
TTM3_LOOP(ttm3_any, 0, 0, 0)
TTM3_LOOP(ttm3_4_4_pf, 4, 4, 1)
TTM3_LOOP(ttm3_8_8_pf, 8, 8, 1)
TTM3_LOOP(ttm3_16_16_pf, 16, 16, 1)
TTM3_LOOP(ttm3_any_pf, 0, 0, 1)
/* The last mode's rank compiled in, 1 to 16: with it only at run time (ranks 5, 6, 10,
 * 12, ...) the column loop ran 2.8x slower per nonzero at ranks 5x5x5 than at 4x4x4
 * (perf/results/README.md, 2026-11-27). */
#define TTM3_LAST(RL) TTM3_LOOP(ttm3_##RL, 0, RL, 0) TTM3_LOOP(ttm3_##RL##_pf, 0, RL, 1)
TTM3_LAST(1) TTM3_LAST(2) TTM3_LAST(3) TTM3_LAST(4) TTM3_LAST(5) TTM3_LAST(6) TTM3_LAST(7)
TTM3_LAST(8) TTM3_LAST(9) TTM3_LAST(10) TTM3_LAST(11) TTM3_LAST(12) TTM3_LAST(13)
TTM3_LAST(14) TTM3_LAST(15) TTM3_LAST(16)
#define TTM3_MAX_LAST 16

typedef int (*ttm3_fn)(const uint64_t *, const double *, uint64_t, const ttm_ctx_t *,
                       const blco_block_t *, int);
/* [prefetch][rank 4, 8, 16]: both ranks that rank; [prefetch][rank 1..16 - 1]: the last
 * mode's rank only (other ranks: ttm3_any). */
static const ttm3_fn ttm3_square[2][3] = {{ttm3_4_4, ttm3_8_8, ttm3_16_16},
                                          {ttm3_4_4_pf, ttm3_8_8_pf, ttm3_16_16_pf}};
#define TTM3_ROW(S)                                                                                \
    {ttm3_1##S,  ttm3_2##S,  ttm3_3##S,  ttm3_4##S,  ttm3_5##S,  ttm3_6##S,                        \
     ttm3_7##S,  ttm3_8##S,  ttm3_9##S,  ttm3_10##S, ttm3_11##S, ttm3_12##S,                       \
     ttm3_13##S, ttm3_14##S, ttm3_15##S, ttm3_16##S}
static const ttm3_fn ttm3_last[2][TTM3_MAX_LAST] = {TTM3_ROW(), TTM3_ROW(_pf)};

/* Adds nonzeros (idx[i], val[i]), i < n, all of block blk, into Y; returns nonzero when one
 * of them has a row the row map calls empty. */
static int ttm_run(const ttm_ctx_t *c, const blco_block_t *blk, const uint64_t *idx,
                   const double *val, uint64_t n, double *buf)
{
    if (c->first >= 0) {
        const int rl = c->ranks[c->last], ra = c->ranks[c->first];
        const int i = rl == 4 ? 0 : rl == 8 ? 1 : rl == 16 ? 2 : 3;
        const ttm3_fn fn = ra == rl && i < 3       ? ttm3_square[c->prefetch][i]
                           : rl <= TTM3_MAX_LAST ? ttm3_last[c->prefetch][rl - 1]
                           : c->prefetch         ? ttm3_any_pf
                                                 : ttm3_any;
        return fn(idx, val, n, c, blk, rl);
    }
    int bad = 0;
    for (uint64_t k = 0; k < n; k++) {
        int64_t row = row_of(c, blk, idx[k]);
        if (row < 0)
            bad |= row == -1;
        else
            ttm_one(c, blk, idx[k], val[k], row, buf);
    }
    return bad;
}

/* Samples per thread from which the threads' shares of mode indices are cut. */
#define OWN_SAMPLES 256
/* Nonzeros a thread picks out at a time into a stack buffer: the chunks of the chunk
 * ranges. */
#define OWN_CHUNK BLCO_OWN_CHUNK

/* Adds into Y the nonzeros whose mode index lies in [lo, hi), from the whole tensor, in
 * tensor order. Blocks and chunks (ch, when not NULL) whose indices miss the range are
 * skipped, those inside it run where they lie; in the others a branch-free pass copies the
 * range's nonzeros into a small buffer first. Returns as ttm_run. */
static int ttm_owned(const ttm_ctx_t *c, uint64_t lo, uint64_t hi, const blco_own_chunks_t *ch,
                     double *buf)
{
    const blco_tensor_t *x = c->x;
    const blco_layout_t *l = &x->layout;
    const int md = c->mode, pn = l->pos[md];
    const uint64_t mn = l->low_mask[md], span = hi - lo;
    uint64_t bidx[OWN_CHUNK + 8]; /* + 8: the vector pass stores whole vectors */
    double bval[OWN_CHUNK + 8];
    int bad = 0;
    if (span == 0)
        return 0;
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *blk = &x->blocks[b];
        const uint64_t first = blk->coord[md];
        if (!blk->nnz || first >= hi || first + mn < lo)
            continue;
        const uint64_t *idx = x->idx + blk->start;
        const double *val = x->val + blk->start;
        if (first >= lo && first + mn < hi) { /* all of the block is ours */
            bad |= ttm_run(c, blk, idx, val, blk->nnz, buf);
            continue;
        }
        /* mn != 0 here: a block of one index is wholly in or out. field + first - lo < span
         * in wrapping arithmetic: the index is in range. */
        const uint64_t shift = first - lo;
        for (uint64_t k = 0; k < blk->nnz; k += OWN_CHUNK) {
            uint64_t e = BLCO_MIN(OWN_CHUNK, blk->nnz - k), n = 0, j = 0;
            const int place = ch ? blco_own_chunk_place(ch, b, k, first, lo, hi) : 1;
            if (place != 1) { /* none of the chunk is ours, or all of it */
                if (place == 2)
                    bad |= ttm_run(c, blk, idx + k, val + k, e, buf);
                continue;
            }
#if defined(__AVX512F__)
            /* 8 at a time: compare, compress in registers, store all 8 lanes (those past the
             * kept ones are overwritten next; a compressing store to memory is slow on some
             * cores) */
            const __m512i vsh = _mm512_set1_epi64((long long)shift);
            const __m512i vsp = _mm512_set1_epi64((long long)span);
            const __m512i vmn = _mm512_set1_epi64((long long)mn);
            const __m128i vpn = _mm_cvtsi32_si128(pn);
            for (; j + 8 <= e; j += 8) {
                const __m512i ix = _mm512_loadu_si512((const void *)(idx + k + j));
                const __m512i f =
                    _mm512_add_epi64(_mm512_and_si512(_mm512_srl_epi64(ix, vpn), vmn), vsh);
                const __mmask8 keep = _mm512_cmplt_epu64_mask(f, vsp);
                _mm512_storeu_si512((void *)(bidx + n), _mm512_maskz_compress_epi64(keep, ix));
                _mm512_storeu_pd(bval + n,
                                 _mm512_maskz_compress_pd(keep, _mm512_loadu_pd(val + k + j)));
                n += (uint64_t)__builtin_popcount(keep);
            }
#endif
            for (; j < e; j++) {
                const uint64_t ix = idx[k + j];
                bidx[n] = ix;
                bval[n] = val[k + j];
                n += ((ix >> pn) & mn) + shift < span;
            }
            if (n)
                bad |= ttm_run(c, blk, bidx, bval, n, buf);
        }
    }
    return bad;
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
    ttm_ctx_t c = {x, mode, mode == N - 1 ? N - 2 : N - 1, -1, ranks, U, rowmap, Y, P, 0};
    if (N == 3) {
        c.first = mode == 0 ? 1 : 0;
        const double bytes = (double)rows * (double)P * 8 +
                             (double)x->layout.dims[c.first] * ranks[c.first] * 8 +
                             (double)x->layout.dims[c.last] * ranks[c.last] * 8;
        c.prefetch = bytes > TTM_PREFETCH_BYTES;
    }
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
            bad |= ttm_run(&c, blk, x->idx + blk->start, x->val + blk->start, blk->nnz, buf);
        }
        free(buf);
        return bad ? -EINVAL : 0;
    }
    /* Each thread owns a range of the mode's indices (cut at sampled nonzero quantiles, so
     * the shares of nonzeros are about equal), scans the whole tensor and adds the nonzeros
     * of its indices. No two threads write one row (the row map is one to one), no atomics,
     * and every row sums its nonzeros in tensor order: the same bits as one thread. */
    /* A thread reads only the chunks that reach its indices (blco_own_chunks_t): without the
     * chunk ranges (no memory for them) it reads every block that may hold one. */
    uint64_t *cut = malloc(((size_t)nt + 1) * sizeof *cut);
    int err = cut ? blco_tensor_index_cuts(x, mode, nt, OWN_SAMPLES, cut) : -ENOMEM;
    void *area = err == 0 ? malloc(blco_own_chunks_bytes(x)) : NULL;
    blco_own_chunks_t chunks, *ch = NULL;
    if (area) {
        blco_own_chunks_layout(x, area, &chunks);
        ch = &chunks;
    }
    if (err == 0) {
#pragma omp parallel num_threads(nt) reduction(min : err)
        {
            int tid = blco_thread_num(), team = 1;
#if HAVE_OPENMP
            team = omp_get_num_threads();
#endif
            if (ch) {
#pragma omp for schedule(static)
                for (uint64_t k = 0; k < ch->n; k++)
                    blco_own_chunk_range(x, mode, ch, k);
            }
            double *buf = malloc(bufn * sizeof *buf);
            if (!buf)
                err = -ENOMEM;
            for (int t = tid; buf && t < nt; t += team)
                if (ttm_owned(&c, cut[t], cut[t + 1], ch, buf))
                    err = -EINVAL;
            free(buf);
        }
    }
    free(area);
    free(cut);
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
