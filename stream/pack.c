/* blco_pack, the reading side: memory plan, the streamed text cut into pieces parsed in
 * parallel, file-wide checks with global line numbers, and the two collection paths:
 * linearize while reading when dims and base are known, else keep (or spill) the raw
 * coordinates until the dims are learnt, then linearize them in a second pass. */
#include <errno.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__BMI2__)
#include <immintrin.h>
#endif
#define ZSTD_STATIC_LINKING_ONLY /* the compressor's memory estimate */
#include <zstd.h>

#include "codec.h"
#include "io/text_source.h"
#include "io/tns_shared.h"
#include "pack_internal.h"

#define MIN_BLOCK ((size_t)256 << 10)
#define MAX_BLOCK ((size_t)64 << 20)
#define PIECE_BYTES ((size_t)1 << 20)
#define SLACK_BYTES ((uint64_t)2 << 20) /* small allocations: chunk tails, run table */
#define MIN_WORK_BYTES ((uint64_t)2 << 20)
#define MAX_RAW_STAGE ((uint64_t)32 << 20)

void blco_pack_opts_default(blco_pack_opts_t *o)
{
    memset(o, 0, sizeof *o);
    blco_tns_opts_default(&o->tns);
    blco_write_opts_default(&o->write);
}

const char *blco_pack_phase_name(int phase)
{
    switch (phase) {
    case BLCO_PACK_PHASE_PARSE: return "parse";
    case BLCO_PACK_PHASE_SORT: return "sort";
    case BLCO_PACK_PHASE_MERGE: return "merge";
    case BLCO_PACK_PHASE_WRITE: return "write";
    default: return "?";
    }
}

/* What the writer allocates on its own (outside the budget, so it is reserved): the
 * pending segment, the encoded segment, the codec's scratch and the zstd context. */
static uint64_t writer_memory(const blco_write_opts_t *w)
{
    uint64_t S = w->segment_nnz ? w->segment_nnz : (1u << 20);
    if (S > (1ull << 30))
        S = 1ull << 30;
    int level = w->zstd_level ? w->zstd_level : w->codec == BLCO_PACK_ZSTD ? 3 : 1;
    level = BLCO_MAX(ZSTD_minCLevel(), BLCO_MIN(level, ZSTD_maxCLevel()));
    uint64_t zc = ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, 8 * S, 0));
    return 16 * S + blco_codec_index_bound(S) + blco_codec_value_bound(S) + 8 * S +
           ZSTD_COMPRESSBOUND(8 * S) + zc + ((uint64_t)256 << 10);
}

uint64_t blco_pack_min_memory(const blco_pack_opts_t *opts)
{
    blco_pack_opts_t def;
    if (!opts) {
        blco_pack_opts_default(&def);
        opts = &def;
    }
    blco_text_source_opts_t so = {.block_bytes =
                                      opts->read_block_bytes ? opts->read_block_bytes : MIN_BLOCK,
                                  .prefetch = !opts->no_prefetch};
    return writer_memory(&opts->write) + blco_text_source_memory(&so) + MIN_WORK_BYTES +
           SLACK_BYTES;
}

int pack_check_cancel(pack_t *p)
{
    if (p->o.cancel && *p->o.cancel)
        return blco_diag_set(p->diag, 0, -BLCO_ECANCELED, "canceled");
    return 0;
}

void pack_progress(pack_t *p, int force)
{
    if (!p->o.progress)
        return;
    double now = blco_now();
    if (!force && now < p->next_progress)
        return;
    p->next_progress = now + p->interval;
    p->prog.seconds = now - p->t0;
    p->prog.spill_bytes = p->st.spill_bytes;
    p->o.progress(p->o.progress_user, &p->prog);
}

int pack_spill_open(pack_t *p, blco_spill_t **f, const char *what)
{
    if (*f)
        return 0;
    int err = blco_spill_create(p->tmpdir, what, f, p->diag);
    if (err >= 0 || p->tmpdir_given || err == -ENOSPC)
        return err;
    /* The output's directory would not take a spill file: try the usual scratch places. */
    const char *env = getenv("TMPDIR");
    const char *alt[2] = {env && *env ? env : NULL, "/tmp"};
    for (int i = 0; i < 2; i++) {
        if (!alt[i] || strcmp(alt[i], p->tmpdir) == 0)
            continue;
        blco_diag_t d;
        if (blco_spill_create(alt[i], what, f, &d) == 0) {
            blco_log(BLCO_LOG_INFO, "cannot spill in %s, spilling in %s instead", p->tmpdir,
                     alt[i]);
            snprintf(p->tmpdir, sizeof p->tmpdir, "%s", alt[i]);
            return 0;
        }
    }
    return err;
}

/* ---- ALTO linearization, with the masks unpacked once ---- */

typedef struct lin {
    const blco_layout_t *l;
    int order, wide;
    uint64_t mlo[BLCO_MAX_MODES], mhi[BLCO_MAX_MODES];
    int nlo[BLCO_MAX_MODES];
} lin_t;

static void lin_init(lin_t *L, const blco_layout_t *l)
{
    memset(L, 0, sizeof *L);
    L->l = l;
    L->order = l->order;
    L->wide = l->total_bits > 64;
    for (int n = 0; n < l->order; n++) {
        L->mlo[n] = l->alto_mask[n][0];
        L->mhi[n] = l->alto_mask[n][1];
        L->nlo[n] = __builtin_popcountll(L->mlo[n]);
    }
}

static inline void lin_apply(const lin_t *L, const uint64_t *c, uint64_t *lo, uint64_t *hi)
{
#if defined(__BMI2__)
    uint64_t a = 0, b = 0;
    for (int n = 0; n < L->order; n++) {
        a |= _pdep_u64(c[n], L->mlo[n]);
        if (L->mhi[n])
            b |= _pdep_u64(L->nlo[n] >= 64 ? 0 : c[n] >> L->nlo[n], L->mhi[n]);
    }
    *lo = a;
    *hi = b;
#else
    uint64_t a[2];
    blco_layout_alto(L->l, c, a);
    *lo = a[0];
    *hi = a[1];
#endif
}

/* ---- the reading side ---- */

/* One piece of a block of text and what parsing it found. */
typedef struct piece {
    size_t off, len;
    uint64_t nl;       /* newlines in it */
    uint64_t cap;      /* the most nonzeros it can hold: its lines */
    uint64_t win;      /* its window in the staging arrays */
    uint64_t line_off; /* lines of the block before it */
    uint64_t out_off;  /* nonzeros of the batch before it */
    int rc;
    blco_diag_t diag;
    blco_tns_chunk_t ch;
} piece_t;

typedef struct reader {
    pack_t *p;
    piece_t *pcs;
    size_t maxp, pcs_bytes, pb;
    uint64_t stage_cap; /* records one batch can stage */
    uint64_t *stage;
    uint64_t lines;                 /* lines of the input before the current block */
    int linearize;                  /* dims and base known: linearize while reading */
    int base_mode;                  /* 0, 1, or BLCO_BASE_AUTO */
    uint64_t limit[BLCO_MAX_MODES]; /* declared dim, or UINT64_MAX */
    uint64_t maxraw[BLCO_MAX_MODES];
    uint64_t first_zero_line;
    /* base auto: the first index only a 0-based reading would refuse */
    uint64_t zbad_line, zbad_v;
    int zbad_m, zbad_kind;
    lin_t lin;
    /* raw coordinates (dims unknown): records of order + 1 words */
    uint64_t *raw;
    uint64_t raw_fill, raw_cap, raw_n;
    int raw_spilled;
    blco_spill_t *rawf;
} reader_t;

/* The first nonzero of a parsed piece with an index invalid under the base: `bm` is 0, 1
 * or AUTO (which refuses what both readings refuse). */
static int piece_check(const blco_tns_chunk_t *c, int bm, const uint64_t *limit, uint64_t *bad_k,
                       int *bad_m, uint64_t *bad_v)
{
    int zero_bad = bm == 1;
    uint64_t b = bm == 0 ? 0 : 1;
    int need = zero_bad && c->first_zero_line;
    for (int m = 0; m < c->order && !need; m++)
        need = c->max_ind[m] >= b && c->max_ind[m] - b >= limit[m];
    if (!need)
        return TNS_BAD_NONE;
    for (uint64_t k = 0; k < c->nnz; k++) {
        for (int m = 0; m < c->order; m++) {
            uint64_t v = c->ind[m][k];
            int bad = zero_bad && v == 0 ? TNS_BAD_ZERO
                      : v >= b && v - b >= limit[m]
                          ? (limit[m] == UINT64_MAX ? TNS_BAD_WIDE : TNS_BAD_DIM)
                          : TNS_BAD_NONE;
            if (bad) {
                *bad_k = k;
                *bad_m = m;
                *bad_v = v;
                return bad;
            }
        }
    }
    return TNS_BAD_NONE;
}

/* Under BLCO_BASE_AUTO: the first index of a piece that is valid 1-based but not 0-based
 * (equal to its declared dim, or 2^64-1), remembered in case a 0 turns up later. */
static void piece_check_auto(reader_t *r, const piece_t *pc, const char *text)
{
    const blco_tns_chunk_t *c = &pc->ch;
    int need = 0;
    for (int m = 0; m < c->order && !need; m++)
        need = c->max_ind[m] >= r->limit[m];
    if (!need || r->zbad_line)
        return;
    for (uint64_t k = 0; k < c->nnz; k++) {
        for (int m = 0; m < c->order; m++) {
            uint64_t v = c->ind[m][k];
            if (v >= r->limit[m]) {
                r->zbad_line = r->lines + pc->line_off + tns_data_line(text + pc->off, pc->len, k);
                r->zbad_v = v;
                r->zbad_m = m;
                r->zbad_kind = r->limit[m] == UINT64_MAX ? TNS_BAD_WIDE : TNS_BAD_DIM;
                return;
            }
        }
    }
}

/* Writes the raw coordinates collected so far to the raw spill file. */
static int raw_flush(reader_t *r)
{
    pack_t *p = r->p;
    int err = pack_spill_open(p, &r->rawf, "coordinates awaiting dims");
    if (err < 0)
        return err;
    size_t bytes = (size_t)(r->raw_fill * (uint64_t)(p->order + 1) * 8);
    if ((err = blco_spill_append(r->rawf, r->raw, bytes, p->diag)) < 0)
        return err;
    if (!r->raw_spilled)
        blco_log(BLCO_LOG_INFO, "dims unknown and the coordinates outgrow the budget: "
                                "spilling them until the dims are known");
    r->raw_spilled = 1;
    p->st.spill_bytes += bytes;
    p->st.raw_spill_bytes += bytes;
    r->raw_fill = 0;
    return 0;
}

/* Whether `more` records fit in the collection (sort buffer or raw store) beside what it
 * holds. Until it first spills, the raw store also keeps room to linearize in place. */
static int room_for(const reader_t *r, uint64_t more)
{
    const pack_t *p = r->p;
    if (r->linearize)
        return p->fill + more <= p->N;
    uint64_t n = r->raw_fill + more, rec = (uint64_t)(p->order + 1) * 8;
    if (n > r->raw_cap)
        return 0;
    return r->raw_spilled || n * (rec + 24) <= p->work_bytes;
}

/* Frees the collection for more records: sorts and spills a run, or spills raw records. */
static int make_room(reader_t *r)
{
    pack_t *p = r->p;
    if (!r->linearize)
        return raw_flush(r);
    double t = blco_now();
    int err = pack_sort_collected(p);
    if (err >= 0)
        err = pack_spill_collected(p);
    p->st.seconds_sort += blco_now() - t;
    return err;
}

/* Parses pieces [i0, i1) of a block into the staging arrays, checks them, and adds their
 * nonzeros to the collection. */
static int parse_batch(reader_t *r, const char *text, size_t i0, size_t i1)
{
    pack_t *p = r->p;
    int order = p->order, err = 0;
    uint64_t C = 0;
    for (size_t i = i0; i < i1; i++) {
        r->pcs[i].win = C;
        C += r->pcs[i].cap;
    }
    for (size_t i = i0; i < i1; i++) {
        piece_t *pc = &r->pcs[i];
        blco_tns_chunk_init(&pc->ch, order, p->budget);
        for (int m = 0; m < order; m++)
            pc->ch.ind[m] = r->stage + (uint64_t)m * C + pc->win;
        pc->ch.val = (double *)(r->stage + (uint64_t)order * C + pc->win);
        pc->ch.cap = pc->cap;
        pc->rc = 1;
    }
    /* One thread per piece at most: a lone piece is parsed without waking the team. */
    const int nt = (int)BLCO_MIN((size_t)p->nt, i1 - i0);
    (void)nt; /* unused without OpenMP */
    _Atomic long first_bad = (long)i1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (long i = (long)i0; i < (long)i1; i++) {
        if (i > atomic_load_explicit(&first_bad, memory_order_relaxed))
            continue; /* an earlier piece failed, and its error comes first */
        piece_t *pc = &r->pcs[i];
        pc->rc = blco_tns_parse_chunk(text + pc->off, pc->len, &pc->ch, &pc->diag);
        if (pc->rc < 0) {
            long cur = atomic_load(&first_bad);
            while (i < cur && !atomic_compare_exchange_weak(&first_bad, &cur, i)) {
            }
        }
    }

    /* The earliest error of the batch: the first piece with a bad index or a parse error;
     * inside the failed piece, whichever line comes first. */
    size_t f = (size_t)atomic_load(&first_bad);
    for (size_t i = i0; i < i1 && i <= f; i++) {
        piece_t *pc = &r->pcs[i];
        uint64_t k = 0, v = 0, base_line = r->lines + pc->line_off;
        int m = 0, kind = piece_check(&pc->ch, r->base_mode, r->limit, &k, &m, &v);
        uint64_t kline = kind ? base_line + tns_data_line(text + pc->off, pc->len, k) : 0;
        if (i == f && (!kind || kline >= base_line + pc->diag.line)) {
            if (p->diag) {
                *p->diag = pc->diag;
                p->diag->line += base_line;
            }
            return pc->rc;
        }
        if (kind) {
            int b = r->base_mode == 0 ? 0 : 1;
            return tns_bad_index(kind, v, m + 1, r->limit[m], b, kline, p->diag);
        }
        if (r->base_mode == BLCO_BASE_AUTO)
            piece_check_auto(r, pc, text);
    }

    uint64_t nb = 0;
    for (size_t i = i0; i < i1; i++) {
        piece_t *pc = &r->pcs[i];
        pc->out_off = nb;
        nb += pc->ch.nnz;
        for (int m = 0; m < order; m++)
            r->maxraw[m] = BLCO_MAX(r->maxraw[m], pc->ch.max_ind[m]);
        if (pc->ch.first_zero_line && !r->first_zero_line)
            r->first_zero_line = r->lines + pc->line_off + pc->ch.first_zero_line;
    }

    if (r->linearize) {
        const uint64_t base = (uint64_t)p->base;
        uint64_t *lo = p->klo + p->fill, *hi = p->wide ? p->khi + p->fill : NULL;
        uint64_t *val = p->kval + p->fill;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (long i = (long)i0; i < (long)i1; i++) {
            const blco_tns_chunk_t *c = &r->pcs[i].ch;
            uint64_t o = r->pcs[i].out_off, coord[BLCO_MAX_MODES], h;
            for (uint64_t k = 0; k < c->nnz; k++) {
                for (int m = 0; m < order; m++)
                    coord[m] = c->ind[m][k] - base;
                lin_apply(&r->lin, coord, &lo[o + k], hi ? &hi[o + k] : &h);
                memcpy(&val[o + k], &c->val[k], 8);
            }
        }
        p->fill += nb;
    } else {
        uint64_t *dst = r->raw + r->raw_fill * (uint64_t)(order + 1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (long i = (long)i0; i < (long)i1; i++) {
            const blco_tns_chunk_t *c = &r->pcs[i].ch;
            uint64_t *d = dst + r->pcs[i].out_off * (uint64_t)(order + 1);
            for (uint64_t k = 0; k < c->nnz; k++) {
                for (int m = 0; m < order; m++)
                    *d++ = c->ind[m][k];
                memcpy(d++, &c->val[k], 8);
            }
        }
        r->raw_fill += nb;
        r->raw_n += nb;
    }
    p->st.nnz_read += nb;
    p->prog.nnz_read = p->st.nnz_read;
    return err;
}

/* Cuts a block into pieces that end at newlines and parses them batch by batch. */
static int parse_block(reader_t *r, const char *text, size_t len)
{
    pack_t *p = r->p;
    size_t np = 0;
    for (size_t pos = 0; pos < len; np++) {
        size_t want = BLCO_MIN(r->pb, len - pos), n = want;
        if (want < len - pos) {
            n = blco_tns_cut(text + pos, want);
            if (!n) { /* a line longer than a piece: the piece ends with it */
                const char *nl = memchr(text + pos + want, '\n', len - pos - want);
                n = nl ? (size_t)(nl - (text + pos)) + 1 : len - pos;
            }
        }
        if (np == r->maxp)
            return blco_diag_set(p->diag, 0, -EINVAL, "internal error: piece table overflow");
        r->pcs[np].off = pos;
        r->pcs[np].len = n;
        pos += n;
    }
    const int nt = (int)BLCO_MIN((size_t)p->nt, np);
    (void)nt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (long i = 0; i < (long)np; i++) {
        piece_t *pc = &r->pcs[i];
        pc->nl = tns_count_newlines(text + pc->off, pc->len);
        pc->cap = pc->nl + (text[pc->off + pc->len - 1] != '\n');
    }
    uint64_t lo = 0;
    for (size_t i = 0; i < np; i++) {
        r->pcs[i].line_off = lo;
        lo += r->pcs[i].nl;
    }

    int err = 0;
    for (size_t i = 0; i < np;) {
        if (!room_for(r, r->pcs[i].cap) && (err = make_room(r)) < 0)
            return err;
        /* A piece has at most pb lines and pb <= stage_cap <= the room of an empty
         * collection, so the batch is never empty. */
        size_t j = i;
        uint64_t C = 0;
        while (j < np && C + r->pcs[j].cap <= r->stage_cap && room_for(r, C + r->pcs[j].cap))
            C += r->pcs[j++].cap;
        if (j == i)
            return blco_diag_set(p->diag, 0, -EINVAL, "internal error: a piece does not fit");
        if ((err = parse_batch(r, text, i, j)) < 0)
            return err;
        p->prog.text_bytes += r->pcs[j - 1].off + r->pcs[j - 1].len - r->pcs[i].off;
        i = j;
        if ((err = pack_check_cancel(p)) < 0)
            return err;
        pack_progress(p, 0);
    }
    r->lines += lo;
    /* an unterminated last line (only the input's last) counts too */
    p->st.lines = r->lines + (len && text[len - 1] != '\n');
    return 0;
}

/* Lays the sort buffer and its scratch out over the whole work region. */
static void layout_keys(pack_t *p)
{
    uint64_t words = p->wide ? 3 : 2;
    p->N = p->work_bytes / (2 * words * 8);
    uint64_t *w = (uint64_t *)p->work;
    p->klo = w;
    p->khi = p->wide ? w + p->N : NULL;
    p->kval = w + (words - 1) * p->N;
    p->tlo = w + words * p->N;
    p->thi = p->wide ? p->tlo + p->N : NULL;
    p->tval = p->tlo + (words - 1) * p->N;
    p->fill = 0;
}

/* Builds the layout once dims and base are known; refuses more than 128 index bits. */
static int make_layout(pack_t *p, const uint64_t *dims)
{
    int bits = 0;
    for (int m = 0; m < p->order; m++)
        bits += dims[m] <= 1 ? 0 : 64 - __builtin_clzll(dims[m] - 1);
    if (bits > BLCO_MAX_INDEX_BITS) {
        char d[400];
        int w = 0;
        for (int m = 0; m < p->order && w < 360; m++)
            w += snprintf(d + w, sizeof d - (size_t)w, "%s%llu", m ? "x" : "",
                          (unsigned long long)dims[m]);
        return blco_diag_set(p->diag, 0, -BLCO_EUNSUPPORTED,
                             "the tensor (dims %s) needs %d index bits (the sum of "
                             "ceil(log2(dim)) over the modes); blco supports at most %d",
                             d, bits, BLCO_MAX_INDEX_BITS);
    }
    int err = blco_layout_init(&p->layout, p->order, dims, 0);
    if (err < 0)
        return blco_diag_set(p->diag, 0, err, "cannot lay out the tensor: %s", blco_strerror(err));
    p->bits = p->layout.total_bits;
    p->wide = p->bits > 64;
    p->rec_bytes = p->wide ? 24 : 16;
    p->st.order = p->order;
    p->st.index_bits = p->bits;
    memcpy(p->st.dims, dims, sizeof p->st.dims);
    return 0;
}

/* Linearizes raw records [0, n) (order + 1 words each) into the sort buffer at fill. */
static void linearize_raw(pack_t *p, const lin_t *L, const uint64_t *raw, uint64_t n)
{
    const uint64_t base = (uint64_t)p->base;
    const int order = p->order;
    uint64_t *lo = p->klo + p->fill, *hi = p->wide ? p->khi + p->fill : NULL;
    uint64_t *val = p->kval + p->fill;
    const int nt = n >= ((uint64_t)1 << 16) ? p->nt : 1;
    (void)nt;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long k = 0; k < (long)n; k++) {
        const uint64_t *rec = raw + (uint64_t)k * (uint64_t)(order + 1);
        uint64_t coord[BLCO_MAX_MODES], h;
        for (int m = 0; m < order; m++)
            coord[m] = rec[m] - base;
        if (p->relabeled)
            for (int m = 0; m < order; m++)
                if (p->o2n[m])
                    coord[m] = p->o2n[m][coord[m]];
        lin_apply(L, coord, &lo[k], hi ? &hi[k] : &h);
        val[k] = rec[order];
    }
    p->fill += n;
}

/* ---- relabeling (--reorder) ---- */

/* Sorts keys (the count's complement in the high 32 bits, the index in the low 32, which
 * are in increasing order on entry) by their high half: a stable LSD radix sort of three
 * 11-bit digits, a digit that is the same in every key skipped. */
static void sort_by_count(uint64_t *keys, uint64_t *tmp, uint64_t n)
{
    uint64_t hist[1 << 11];
    uint64_t *src = keys, *dst = tmp;
    for (int shift = 32; shift < 64; shift += 11) {
        memset(hist, 0, sizeof hist);
        for (uint64_t i = 0; i < n; i++)
            hist[src[i] >> shift & 0x7ff]++;
        if (hist[src[0] >> shift & 0x7ff] == n)
            continue;
        uint64_t run = 0;
        for (int d = 0; d < (1 << 11); d++) {
            uint64_t c = hist[d];
            hist[d] = run;
            run += c;
        }
        for (uint64_t i = 0; i < n; i++)
            dst[hist[src[i] >> shift & 0x7ff]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != keys)
        memcpy(keys, src, n * 8);
}

/* Adds the nonzeros of raw records [0, n) to the per-mode counts. */
static void count_raw(pack_t *p, uint32_t *const *cnt, const uint64_t *raw, uint64_t n)
{
    const int order = p->order;
    const uint64_t base = (uint64_t)p->base;
    const int nt = n >= ((uint64_t)1 << 16) ? p->nt : 1;
    (void)nt;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long k = 0; k < (long)n; k++) {
        const uint64_t *rec = raw + (uint64_t)k * (uint64_t)(order + 1);
        for (int m = 0; m < order; m++)
            if (cnt[m]) {
                uint32_t *c = &cnt[m][rec[m] - base];
                /* saturating: an index with 2^32 - 1 nonzeros or more ranks among the most */
                if (__atomic_load_n(c, __ATOMIC_RELAXED) != UINT32_MAX)
                    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
            }
    }
}

/* Relabels each mode's indices by decreasing nonzero count (ties in index order), from
 * counts over the raw coordinates, in memory or re-read from the raw spill file (the input
 * itself is never read twice: it may be a pipe). The labels live at the end of the work
 * region; when they do not fit beside the raw coordinates, those are spilled first. Needs
 * 8 bytes per index of the relabeled modes plus 16 per index of the longest, while it
 * works. */
static int relabel(pack_t *p, reader_t *r)
{
    const int order = p->order;
    const uint64_t *dims = p->layout.dims;
    double t0 = blco_now();
    uint64_t sum = 0, maxd = 0;
    uint32_t cand = 0;
    for (int m = 0; m < order; m++)
        if (dims[m] > 1 && dims[m] <= (1ull << 32)) {
            cand |= 1u << m;
            sum += (dims[m] + 15) & ~(uint64_t)15; /* 64-byte aligned arrays */
            maxd = BLCO_MAX(maxd, dims[m]);
        }
    if (!cand)
        return 0;
    uint64_t keep = 8 * sum, L = keep + 16 * maxd;
    uint64_t n = r->raw_fill, rec = (uint64_t)(order + 1) * 8, words = p->wide ? 3 : 2;
    int inmem = !r->raw_spilled && n * (rec + words * 8) + L <= p->work_bytes;
    if (!inmem && L + MIN_WORK_BYTES + 4 * rec > p->work_bytes) {
        char a[32], b[32];
        blco_format_size(L + MIN_WORK_BYTES + SLACK_BYTES, a, sizeof a);
        blco_format_size(p->work_bytes, b, sizeof b);
        if (p->o.reorder_required)
            return blco_diag_set(p->diag, 0, -BLCO_EBUDGET,
                                 "--reorder %s needs %s of work memory for the labels of "
                                 "these dims and %s is left (raise --mem-limit, or "
                                 "--reorder none)",
                                 blco_reorder_name(p->o.reorder), a, b);
        blco_log(BLCO_LOG_WARN,
                 "not relabeling the indices: the labels need %s and %s is "
                 "left (raise --mem-limit to relabel)",
                 a, b);
        return 0;
    }
    if (!inmem && r->raw_fill) {
        int err = raw_flush(r);
        if (err < 0)
            return err;
    }
    uint64_t *scratch = (uint64_t *)(p->work + p->work_bytes - L);
    uint32_t *arr = (uint32_t *)(scratch + 2 * maxd);
    uint32_t *cnt[BLCO_MAX_MODES] = {0};
    for (int m = 0; m < order; m++)
        if (cand >> m & 1) {
            uint64_t len = (dims[m] + 15) & ~(uint64_t)15;
            cnt[m] = arr;
            p->n2o[m] = arr + len;
            arr += 2 * len;
            memset(cnt[m], 0, 4 * dims[m]);
        }

    if (inmem) {
        count_raw(p, cnt, r->raw, n);
    } else {
        uint64_t per_read = (p->work_bytes - L) / rec, left = r->raw_n, off = 0;
        uint64_t *buf = (uint64_t *)p->work;
        while (left) {
            uint64_t k = BLCO_MIN(per_read, left);
            int err = blco_spill_read(r->rawf, off, buf, (size_t)(k * rec), p->diag);
            if (err < 0)
                return err;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            for (uint64_t i = 0; i < k * (rec / 8); i++)
                buf[i] = __builtin_bswap64(buf[i]);
#endif
            count_raw(p, cnt, buf, k);
            off += k * rec;
            left -= k;
            if ((err = pack_check_cancel(p)) < 0)
                return err;
        }
    }

    /* Per mode: sort (count descending, index ascending) as one 64-bit key each. */
    for (int m = 0; m < order; m++) {
        if (!cnt[m])
            continue;
        uint64_t d = dims[m];
        for (uint64_t i = 0; i < d; i++)
            scratch[i] = (uint64_t)(UINT32_MAX - cnt[m][i]) << 32 | i;
        sort_by_count(scratch, scratch + maxd, d);
        int identity = 1;
        for (uint64_t k = 0; k < d; k++) {
            uint32_t old = (uint32_t)scratch[k];
            p->n2o[m][k] = old;
            cnt[m][old] = (uint32_t)k; /* the counts become the source-to-stored map */
            identity &= old == k;
        }
        if (identity) {
            p->n2o[m] = NULL;
            continue;
        }
        p->o2n[m] = cnt[m];
        p->relabeled |= 1u << m;
    }
    /* The scratch goes back to the work region; the labels stay until the writer is done. */
    p->labels_bytes = keep;
    p->work_bytes -= keep;
    p->st.reorder = p->relabeled ? p->o.reorder : BLCO_REORDER_NONE;
    p->st.relabeled_modes = p->relabeled;
    p->st.labels_bytes = 0;
    for (int m = 0; m < order; m++)
        if (p->relabeled >> m & 1)
            p->st.labels_bytes += 4 * dims[m];
    p->st.seconds_reorder = blco_now() - t0;
    return 0;
}

/* Dims unknown while reading: settle base and dims, then linearize and sort what was
 * collected, from memory or from the raw spill file. */
static int finish_raw(pack_t *p, reader_t *r)
{
    int err;
    if (r->base_mode == BLCO_BASE_AUTO) {
        p->base = r->first_zero_line ? 0 : 1;
        if (!p->base) {
            p->st.base_detected = 1;
            blco_log(BLCO_LOG_INFO, "index 0 on line %llu: reading the input as 0-based",
                     (unsigned long long)r->first_zero_line);
            if (r->zbad_line)
                return tns_bad_index(r->zbad_kind, r->zbad_v, r->zbad_m + 1, r->limit[r->zbad_m], 0,
                                     r->zbad_line, p->diag);
        }
    }
    uint64_t dims[BLCO_MAX_MODES] = {0};
    for (int m = 0; m < p->order; m++)
        dims[m] = r->limit[m] != UINT64_MAX ? r->limit[m] : r->maxraw[m] - (uint64_t)p->base + 1;
    if ((err = make_layout(p, dims)) < 0)
        return err;
    lin_t L;
    lin_init(&L, &p->layout);
    if (p->o.reorder != BLCO_REORDER_NONE) {
        double t = blco_now();
        err = relabel(p, r);
        p->st.seconds_parse += blco_now() - t;
        if (err < 0)
            return err;
    }

    if (!r->raw_spilled) {
        /* Everything is in memory: keys go right after the raw records, the sort's
         * scratch over the raw records once they are linearized (room_for kept space). */
        uint64_t n = r->raw_fill, rec = (uint64_t)(p->order + 1) * 8;
        uint64_t words = p->wide ? 3 : 2;
        uint64_t *keys = (uint64_t *)(p->work + n * rec);
        p->N = n;
        p->klo = keys;
        p->khi = p->wide ? keys + n : NULL;
        p->kval = keys + (words - 1) * n;
        p->tlo = (uint64_t *)p->work;
        p->thi = p->wide ? p->tlo + n : NULL;
        p->tval = p->tlo + (words - 1) * n;
        p->fill = 0;
        double t = blco_now();
        linearize_raw(p, &L, r->raw, n);
        p->st.seconds_parse += blco_now() - t;
        return 0; /* sorted as it is written */
    }

    /* Second pass over the spilled coordinates: read a batch into the sort's scratch,
     * linearize it into the sort buffer, spill a run whenever the buffer is full. */
    if (r->raw_fill && (err = raw_flush(r)) < 0)
        return err;
    layout_keys(p);
    uint64_t rec = (uint64_t)(p->order + 1) * 8;
    uint64_t scratch = p->N * (uint64_t)(p->wide ? 3 : 2) * 8;
    uint64_t per_read = scratch / rec, left = r->raw_n, off = 0;
    p->prog.phase = BLCO_PACK_PHASE_SORT;
    p->prog.nnz_done = 0;
    p->prog.nnz_phase = r->raw_n;
    pack_progress(p, 1);
    double t = blco_now();
    while (left) {
        if (p->fill == p->N) {
            p->st.seconds_parse += blco_now() - t;
            t = blco_now();
            if ((err = pack_sort_collected(p)) < 0 || (err = pack_spill_collected(p)) < 0)
                return err;
            p->st.seconds_sort += blco_now() - t;
            t = blco_now();
        }
        uint64_t n = BLCO_MIN(BLCO_MIN(per_read, left), p->N - p->fill);
        if ((err = blco_spill_read(r->rawf, off, p->tlo, (size_t)(n * rec), p->diag)) < 0)
            return err;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        for (uint64_t i = 0; i < n * (rec / 8); i++)
            p->tlo[i] = __builtin_bswap64(p->tlo[i]);
#endif
        linearize_raw(p, &L, p->tlo, n);
        off += n * rec;
        left -= n;
        p->prog.nnz_done += n;
        if ((err = pack_check_cancel(p)) < 0)
            return err;
        pack_progress(p, 0);
    }
    p->st.seconds_parse += blco_now() - t;
    blco_spill_close(r->rawf); /* its space goes back now */
    r->rawf = NULL;
    t = blco_now();
    err = 0;
    /* the last run joins the others on disk; without others it is sorted as it is written */
    if (p->nruns && p->fill && (err = pack_sort_collected(p)) >= 0)
        err = pack_spill_collected(p);
    p->st.seconds_sort += blco_now() - t;
    return err;
}

/* Sets up the collection once the first block told the order (and maybe the dims). */
static int start_collection(pack_t *p, reader_t *r, const tns_prefix_t *px, size_t block,
                            uint64_t size_hint)
{
    int err;
    uint64_t dims[BLCO_MAX_MODES] = {0};
    if ((err = tns_declared_dims(&p->o.tns, px, dims, p->diag)) < 0)
        return err;
    p->order = px->order;
    p->st.order = px->order;
    p->st.header = px->header;
    int known = 1;
    for (int m = 0; m < p->order; m++) {
        r->limit[m] = dims[m] ? dims[m] : UINT64_MAX;
        known &= dims[m] != 0;
    }
    r->base_mode = p->o.tns.base;
    /* relabeling needs the counts first: the raw path, then linearized once counted */
    r->linearize = known && r->base_mode != BLCO_BASE_AUTO && p->o.reorder == BLCO_REORDER_NONE;
    p->st.dims_known = known;
    if (r->linearize) {
        p->base = r->base_mode;
        if ((err = make_layout(p, dims)) < 0)
            return err;
        lin_init(&r->lin, &p->layout);
    }

    /* The work region takes what the budget has left, bar some slack. */
    uint64_t limit = blco_budget_limit(p->budget), used = blco_budget_used(p->budget);
    uint64_t avail = limit > used ? limit - used : 0;
    if (avail < SLACK_BYTES + MIN_WORK_BYTES) {
        char a[32], b[32];
        return blco_diag_set(p->diag, 0, -BLCO_EBUDGET,
                             "the memory budget is too small: %s left after the read buffers "
                             "and the writer, at least %s needed (raise --mem-limit)",
                             blco_format_size(avail, a, sizeof a),
                             blco_format_size(SLACK_BYTES + MIN_WORK_BYTES + used, b, sizeof b));
    }
    uint64_t work = avail - SLACK_BYTES, rec = (uint64_t)(p->order + 1) * 8;
    /* The writer's block table: one entry per distinct high word of the index, so none
     * up to 64 bits and at most 2^(bits - 64); a share of the budget when unknown yet. */
    uint64_t tables = work / 16;
    if (r->linearize) {
        int kb = p->bits - 64;
        tables = kb <= 0 ? 0 : kb >= 40 ? tables : BLCO_MIN(tables, (512ull << kb));
    }
    if (work - tables >= MIN_WORK_BYTES && blco_budget_reserve(p->budget, tables) == 0) {
        p->table_reserve = tables;
        work -= tables;
    }
    if (size_hint) {
        /* A plain file of known size holds at most one nonzero per 2 * order + 2 bytes: no
         * need to claim more of the budget than that many nonzeros can use. */
        uint64_t most = size_hint / (uint64_t)(2 * p->order + 2) + 16;
        uint64_t need = r->linearize ? most * (p->wide ? 48 : 32)
                                     : BLCO_MAX(most * rec / 3 * 4, most * (rec + 24));
        work = BLCO_MIN(work, BLCO_MAX(need + ((uint64_t)1 << 20), MIN_WORK_BYTES));
    }
    p->work_bytes = (size_t)(work & ~(uint64_t)4095);
    if ((err = blco_budget_alloc(p->budget, p->work_bytes, (void **)&p->work)) < 0)
        return blco_diag_set(p->diag, 0, err, "cannot allocate the %zu-byte work region: %s",
                             p->work_bytes, blco_strerror(err));
    if (r->linearize) {
        layout_keys(p);
        r->stage = p->tlo;
        r->stage_cap = p->N * (uint64_t)(p->wide ? 3 : 2) * 8 / rec;
    } else {
        uint64_t sb = BLCO_MIN(p->work_bytes / 4, MAX_RAW_STAGE);
        r->stage_cap = sb / rec;
        r->stage = (uint64_t *)(p->work + p->work_bytes - r->stage_cap * rec);
        r->raw = (uint64_t *)p->work;
        r->raw_cap = (p->work_bytes - r->stage_cap * rec) / rec;
    }
    r->pb = (size_t)BLCO_MIN((uint64_t)PIECE_BYTES, r->stage_cap);
    r->maxp = 2 * (block / r->pb) + 3;
    r->pcs_bytes = r->maxp * sizeof *r->pcs;
    if ((err = blco_budget_calloc(p->budget, r->pcs_bytes, (void **)&r->pcs)) < 0)
        return blco_diag_set(p->diag, 0, err, "no memory budget left for the piece table");
    return 0;
}

/* Reads the whole input into the collection. */
static int read_input(pack_t *p, reader_t *r)
{
    uint64_t limit = blco_budget_limit(p->budget), used = blco_budget_used(p->budget);
    uint64_t avail = limit > used ? limit - used : 0;
    size_t block = p->o.read_block_bytes;
    if (!block) {
        /* A sixteenth of what is left, a power of two: large reads, small share. */
        block = MAX_BLOCK;
        while (block > MIN_BLOCK && block * 16 > avail)
            block /= 2;
        /* ... and no larger than a small file (compressed data: more blocks, no harm). */
        struct stat st;
        if (strcmp(p->in, "-") != 0 && stat(p->in, &st) == 0 && S_ISREG(st.st_mode))
            while (block > MIN_BLOCK && (uint64_t)st.st_size < block / 2)
                block /= 2;
    }
    blco_text_source_opts_t so = {.block_bytes = block,
                                  .prefetch = !p->o.no_prefetch,
                                  .budget = p->budget,
                                  .cancel = p->o.cancel};
    blco_text_source_t *src = NULL;
    int err = blco_text_source_open(p->in, &so, &src, p->diag);
    if (err == -EINTR && p->o.cancel && *p->o.cancel) /* a FIFO with no writer yet, stopped */
        return pack_check_cancel(p);
    if (err < 0)
        return err;
    p->st.compression = blco_text_source_compression(src);
    p->prog.file_size = blco_text_source_file_size(src);
    pack_progress(p, 1);
    tns_prefix_t px;
    int started = 0;
    const char *text;
    size_t len;
    double t = blco_now(), sort0 = p->st.seconds_sort;
    for (;;) {
        err = blco_text_source_next(src, &text, &len, p->diag);
        p->prog.file_bytes = blco_text_source_file_bytes(src);
        if (err == -E2BIG) {
            err = blco_diag_set(p->diag, r->lines + 1, -E2BIG,
                                "a line longer than %zu bytes (the read block; a larger "
                                "--mem-limit gives larger blocks)",
                                block);
            break;
        }
        if (err <= 0)
            break;
        if (!started) {
            err = tns_scan_prefix(text, len, &p->o.tns, &px, p->diag);
            if (err == -BLCO_EEMPTY) { /* only comments so far */
                r->lines += tns_count_newlines(text, len);
                continue;
            }
            if (err < 0) {
                if (p->diag && p->diag->line)
                    p->diag->line += r->lines;
                break;
            }
            /* The text's size bounds the nonzeros: a plain file's size, or the whole text
             * when the first block is the last (a small pipe or compressed input). */
            uint64_t hint = blco_text_source_at_end(src)           ? len
                            : p->st.compression == BLCO_TEXT_PLAIN ? p->prog.file_size
                                                                   : 0;
            if ((err = start_collection(p, r, &px, block, hint)) < 0)
                break;
            started = 1;
            text += px.data_off;
            len -= px.data_off;
            r->lines += px.lines;
        }
        p->st.text_bytes += len;
        if ((err = parse_block(r, text, len)) < 0)
            break;
    }
    p->st.file_bytes = blco_text_source_file_bytes(src);
    blco_text_source_close(src);
    /* runs sorted and spilled on the way count as sorting */
    p->st.seconds_parse += blco_now() - t - (p->st.seconds_sort - sort0);
    if (err < 0)
        return err;
    if (!started || p->st.nnz_read == 0)
        return blco_diag_set(p->diag, 0, -BLCO_EEMPTY, "no nonzero in the input%s",
                             started && px.header ? " after the header" : "");
    return 0;
}

/* Refuses what would fail only after the work: an existing output, an output directory
 * that cannot be written, a policy a .blco cannot hold. */
static int check_upfront(pack_t *p)
{
    const blco_pack_opts_t *o = &p->o;
    if (o->tns.duplicates == BLCO_DUP_KEEP)
        return blco_diag_set(p->diag, 0, -EINVAL,
                             "a .blco file cannot keep duplicate coordinates: sum them or "
                             "refuse them");
    int err = tns_check_opts(&o->tns, p->diag);
    if (err < 0)
        return err;
    uint64_t S = o->write.segment_nnz;
    if (S && (S & (S - 1) || S > (1ull << 30)))
        return blco_diag_set(p->diag, 0, -EINVAL,
                             "segment size %llu: must be a power of two up to 2^30",
                             (unsigned long long)S);
    if (o->threads < 0)
        return blco_diag_set(p->diag, 0, -EINVAL, "invalid thread count %d", o->threads);
    if ((err = blco_out_check_not_input(p->out, p->in, p->diag)) < 0)
        return err;
    struct stat st;
    if (stat(p->out, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return blco_diag_set(p->diag, 0, -EISDIR, "%s: is a directory", p->out);
        if (!o->write.force)
            return blco_diag_set(p->diag, 0, -EEXIST, "%s exists (use --force to replace it)",
                                 p->out);
    }
    char *copy = strdup(p->out);
    if (!copy)
        return -ENOMEM;
    char outdir[4096];
    snprintf(outdir, sizeof outdir, "%s", dirname(copy));
    free(copy);
    if (access(outdir, W_OK | X_OK) < 0) {
        err = -errno;
        return blco_diag_set(p->diag, 0, err, "%s: cannot write the output there: %s", outdir,
                             blco_strerror(err));
    }
    p->tmpdir_given = o->tmpdir && *o->tmpdir;
    snprintf(p->tmpdir, sizeof p->tmpdir, "%s", p->tmpdir_given ? o->tmpdir : outdir);
    if (p->tmpdir_given) {
        if (stat(p->tmpdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            err = stat(p->tmpdir, &st) < 0 ? -errno : -ENOTDIR;
            return blco_diag_set(p->diag, 0, err, "%s: not a usable spill directory: %s", p->tmpdir,
                                 blco_strerror(err));
        }
    }
    return 0;
}

int blco_pack(const char *in, const char *out, const blco_pack_opts_t *opts,
              blco_pack_stats_t *stats, blco_diag_t *diag)
{
    pack_t *p = calloc(1, sizeof *p);
    reader_t r;
    blco_budget_t *own = NULL;
    int err;
    memset(&r, 0, sizeof r);
    if (diag) {
        diag->line = 0;
        diag->msg[0] = '\0';
    }
    if (!p)
        return -ENOMEM;
    r.p = p;
    p->t0 = blco_now();
    p->diag = diag;
    p->in = in;
    p->out = out;
    if (opts)
        p->o = *opts;
    else
        blco_pack_opts_default(&p->o);
    p->interval = p->o.progress_interval > 0 ? p->o.progress_interval : 0.25;
    p->nt = blco_threads_resolve(p->o.threads);
    if (!in || !out) {
        err = blco_diag_set(diag, 0, -EINVAL, "input and output paths are required");
        goto out;
    }
    if ((err = check_upfront(p)) < 0)
        goto out;
    p->budget = p->o.budget;
    if (!p->budget) {
        if ((err = blco_budget_create(&own, 0)) < 0)
            goto out;
        p->budget = own;
    }
    p->st.mem_limit = blco_budget_limit(p->budget);

    /* The writer allocates its own buffers later; they are charged from the start so the
     * collection never takes their share. */
    uint64_t need = blco_pack_min_memory(&p->o), used = blco_budget_used(p->budget);
    if (need + used > p->st.mem_limit) {
        char a[32], b[32], c[32];
        err = blco_diag_set(
            diag, 0, -BLCO_EBUDGET,
            "a memory limit of %s is too small: packing needs at least %s "
            "(%s of it for the writer with --segment-nnz %llu)",
            blco_format_size(p->st.mem_limit, a, sizeof a),
            blco_format_size(need + used, b, sizeof b),
            blco_format_size(writer_memory(&p->o.write), c, sizeof c),
            (unsigned long long)(p->o.write.segment_nnz ? p->o.write.segment_nnz : (1u << 20)));
        goto out;
    }
    p->writer_reserve = writer_memory(&p->o.write);
    if ((err = blco_budget_reserve(p->budget, p->writer_reserve)) < 0) {
        p->writer_reserve = 0;
        err = blco_diag_set(diag, 0, err, "no memory budget left for the writer");
        goto out;
    }

    p->prog.phase = BLCO_PACK_PHASE_PARSE;
    if ((err = read_input(p, &r)) < 0)
        goto out;
    if (r.linearize) {
        p->st.base = p->base;
        /* the last run joins the others on disk; without others it is sorted as written */
        if (p->nruns && p->fill) {
            double t = blco_now();
            if ((err = pack_sort_collected(p)) < 0 || (err = pack_spill_collected(p)) < 0)
                goto out;
            p->st.seconds_sort += blco_now() - t;
        }
    } else {
        if (r.base_mode != BLCO_BASE_AUTO)
            p->base = r.base_mode;
        if ((err = finish_raw(p, &r)) < 0)
            goto out;
        p->st.base = p->base;
    }
    err = pack_write_output(p);

out:
    blco_spill_close(r.rawf);
    blco_spill_close(p->runf);
    if (p->budget) {
        blco_budget_free(p->budget, r.pcs, r.pcs_bytes);
        blco_budget_free(p->budget, p->runs, p->cap_runs * sizeof *p->runs);
        blco_budget_free(p->budget, p->work, p->work_bytes + p->labels_bytes);
        p->st.peak_budget = blco_budget_peak(p->budget);
        blco_budget_release(p->budget, p->writer_reserve + p->table_reserve);
    }
    p->st.seconds = blco_now() - p->t0;
    if (p->st.nnz)
        p->st.bytes_per_nnz = (double)p->st.bytes_out / (double)p->st.nnz;
    if (stats)
        *stats = p->st;
    blco_budget_destroy(own);
    free(p);
    return err;
}
