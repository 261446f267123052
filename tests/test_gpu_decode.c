/* The device decoder (gpu/decode_cuda.cu) against the host's (blco/codec.c), bit for bit:
 * every device-decodable index codec (raw, narrow, delta) and value codec (f64, f32,
 * their byte planes, and whole numbers in the integer codec) over layouts whose in-block ALTO and BLCO orders coincide or not,
 * segments of 1..3000 nonzeros at unaligned offsets of one batch; then corrupt columns
 * (a delta width over 64, frames short or long of their column, sums past the index width,
 * an index too wide, a coordinate outside the dims; an integer column's width over 64,
 * frames short or long of it, values past 2^53): the device reports the segment, zeroes
 * its nonzeros, decodes the others, and the host decoder refuses the same column. Last,
 * 400 columns with random bytes changed (60 with BLCO_TEST_QUICK; BLCO_FUZZ_CASES and
 * BLCO_FUZZ_SEED for longer runs): the device refuses exactly what the host refuses and
 * decodes the rest as the host does. Without a GPU (or the emulation) it exits 77. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"
#include "codec.h"
#include "gpu/cuda_decode.h"

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

static uint64_t sort_unique(uint64_t *a, uint64_t n)
{
    qsort(a, n, 8, cmp_u64);
    uint64_t k = n ? 1 : 0;
    for (uint64_t j = 1; j < n; j++)
        if (a[j] != a[k - 1])
            a[k++] = a[j];
    return k;
}

static blco_cuda_t *ctx;

typedef struct seg {
    uint64_t n;
    int icodec, vcodec;
    uint64_t *alto; /* in-block ALTO indices */
    double *val;
    uint8_t col[1 << 19]; /* index column then value column */
    size_t ilen, vlen;
    uint64_t *hidx; /* host decode, or NULL when the host refuses */
    double *hval;
} seg_t;

/* Up to n distinct sorted values below 2^bits; returns how many. */
static uint64_t rand_sorted(uint64_t *a, uint64_t n, int bits, uint64_t *rng)
{
    const uint64_t lim = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    for (uint64_t i = 0; i < n; i++)
        a[i] = check_rand(rng) & lim;
    return sort_unique(a, n);
}

static void encode(seg_t *s, const blco_codec_map_t *m, int value_type)
{
    blco_codec_req_t ri = {s->icodec, 0, 0}, rv = {s->vcodec, 0, 0};
    int used;
    int e = blco_codec_index_encode(NULL, m, s->alto, s->n, &ri, s->col, sizeof s->col, &s->ilen,
                                    &used);
    CHECK(e == 0 && used == s->icodec, "index encode %d: %d", s->icodec, e);
    e = blco_codec_value_encode(NULL, s->val, s->n, value_type, &rv, s->col + s->ilen,
                                sizeof s->col - s->ilen, &s->vlen, &used);
    CHECK(e == 0 && used == s->vcodec, "value encode %d: %d", s->vcodec, e);
}

/* The host's verdict on the segment's columns (including the dims). */
static void host_decode(seg_t *s, const blco_codec_map_t *m, int value_type)
{
    s->hidx = malloc(s->n * 8);
    s->hval = malloc(s->n * 8);
    uint64_t zero[BLCO_MAX_MODES] = {0};
    int e = blco_codec_index_decode(NULL, m, s->icodec, s->col, s->ilen, s->n, s->hidx);
    if (e == 0)
        e = blco_codec_index_check(m, zero, s->hidx, s->n);
    if (e == 0)
        e = blco_codec_value_decode(NULL, value_type, s->vcodec, s->col + s->ilen, s->vlen, s->n,
                                    s->hval);
    if (e < 0) {
        free(s->hidx);
        free(s->hval);
        s->hidx = NULL;
        s->hval = NULL;
    }
}

/* Decodes segs on the device as one batch; returns the error word. */
static unsigned long long device_decode(seg_t *segs, int nseg, const blco_layout_t *l,
                                        const blco_codec_map_t *m, int value_type, uint64_t *idx,
                                        double *val)
{
    blco_cuda_dseg_t ds[8];
    uint64_t at = 3, first = 0, frames = 0; /* unaligned columns on purpose */
    for (int i = 0; i < nseg; i++) {
        seg_t *s = &segs[i];
        ds[i] = (blco_cuda_dseg_t){at,
                                   s->ilen,
                                   at + s->ilen,
                                   s->vlen,
                                   first,
                                   s->n,
                                   frames,
                                   100 + (uint64_t)i,
                                   (uint32_t)s->icodec,
                                   (uint32_t)s->vcodec,
                                   0,
                                   0};
        at += s->ilen + s->vlen + 5;
        first += s->n;
        if (s->icodec == BLCO_ICODEC_DELTA && s->n > 1)
            frames += 2 * ((s->n - 1 + 127) / 128);
    }
    uint8_t *enc = calloc(1, at + 16);
    for (int i = 0; i < nseg; i++)
        memcpy(enc + ds[i].icol, segs[i].col, segs[i].ilen + segs[i].vlen);
    void *d_enc, *d_seg, *d_coord, *d_tab = NULL, *d_fr, *d_idx, *d_val, *d_err;
    const uint64_t nnz = first;
    int tb = m->nfield <= 1 ? 0 : (m->index_bits + 7) / 8;
    int e = 0;
    e |= blco_cuda_alloc(ctx, at + 16, &d_enc, NULL);
    e |= blco_cuda_alloc(ctx, sizeof ds, &d_seg, NULL);
    e |= blco_cuda_alloc(ctx, 8 * BLCO_MAX_MODES * 8, &d_coord, NULL);
    e |= blco_cuda_alloc(ctx, frames * 8 + 8, &d_fr, NULL);
    e |= blco_cuda_alloc(ctx, nnz * 8, &d_idx, NULL);
    e |= blco_cuda_alloc(ctx, nnz * 8, &d_val, NULL);
    e |= blco_cuda_alloc(ctx, 8, &d_err, NULL);
    if (tb)
        e |= blco_cuda_alloc(ctx, sizeof m->to_index, &d_tab, NULL);
    CHECK(e == 0, "device memory");
    uint64_t zero[8 * BLCO_MAX_MODES] = {0};
    blco_cuda_copy_to_device(ctx, d_enc, enc, at + 16);
    blco_cuda_copy_to_device(ctx, d_seg, ds, sizeof ds);
    blco_cuda_copy_to_device(ctx, d_coord, zero, sizeof zero);
    blco_cuda_copy_to_device(ctx, d_err, zero, 8);
    if (tb)
        blco_cuda_copy_to_device(ctx, d_tab, m->to_index, sizeof m->to_index);
    blco_cuda_decode_args_t a;
    memset(&a, 0, sizeof a);
    a.seg = d_seg;
    a.nseg = (uint64_t)nseg;
    /* The grid: a block a chunk of the longest segment, or (every other call) one block a
     * segment that walks all its chunks. */
    static int calls;
    const int grid = calls++ % 2 == 0;
    for (int i = 0; i < nseg && grid; i++)
        a.max_nnz = segs[i].n > a.max_nnz ? segs[i].n : a.max_nnz;
    a.enc = d_enc;
    a.seg_coord = d_coord;
    a.to_index = d_tab;
    a.tbytes = tb;
    a.index_bits = m->index_bits;
    a.order = l->order;
    a.value_type = value_type;
    a.frames = d_fr;
    a.idx = d_idx;
    a.val = d_val;
    a.error = d_err;
    for (int k = 0; k < l->order; k++) {
        a.dims[k] = l->dims[k];
        a.low_mask[k] = l->low_mask[k];
        a.pos[k] = l->pos[k];
    }
    blco_diag_t dg = {0};
    e = blco_cuda_decode_batch(ctx, &a, NULL, &dg);
    CHECK(e == 0, "decode launch: %s (%s)", blco_strerror(e), dg.msg);
    e = blco_cuda_stream_sync(ctx, NULL);
    CHECK(e == 0, "decode kernel: %s", blco_strerror(e));
    unsigned long long err = 0;
    blco_cuda_copy_to_host(ctx, idx, d_idx, nnz * 8);
    blco_cuda_copy_to_host(ctx, val, d_val, nnz * 8);
    blco_cuda_copy_to_host(ctx, &err, d_err, 8);
    blco_cuda_free(ctx, d_enc, at + 16);
    blco_cuda_free(ctx, d_seg, sizeof ds);
    blco_cuda_free(ctx, d_coord, 8 * BLCO_MAX_MODES * 8);
    blco_cuda_free(ctx, d_fr, frames * 8 + 8);
    blco_cuda_free(ctx, d_idx, nnz * 8);
    blco_cuda_free(ctx, d_val, nnz * 8);
    blco_cuda_free(ctx, d_err, 8);
    if (tb)
        blco_cuda_free(ctx, d_tab, sizeof m->to_index);
    free(enc);
    return err;
}

/* Corruptions of segment 1's columns (after encoding). */
enum { OK = 0, WIDTH65, SHORT, LONG, WRAP, WIDE, OUTSIDE, IWIDTH65, ISHORT, ILONG, IBASE, NCORRUPT,
       IF32, DSCALE, FUZZ };
static const char *cname[] = {"intact",           "width 65",          "frames short",
                              "frames long",      "sum wraps",         "index too wide",
                              "outside the dims", "int: width 65",     "int: frames short",
                              "int: frames long", "int: past 2^53",    "",
                              "int: no f32",      "decimal: scale",    "random bytes"};

static int fuzz_refused; /* fuzz cases the host refused */

/* Changes one to four bytes of segment c's columns: half of them among the first 24 bytes
 * of a column (a delta column's first index and frame widths, an integer column's base and
 * widths), the rest anywhere; a byte flipped in some bits or set to 0, 0xff, 64 or 65. */
static void mutate(seg_t *c, uint64_t *rng)
{
    const int n = 1 + (int)(check_rand(rng) % 4);
    for (int k = 0; k < n; k++) {
        const uint64_t r = check_rand(rng);
        const int vcol = (r & 1) && c->vlen > 0;
        const size_t base = vcol ? c->ilen : 0, len = vcol ? c->vlen : c->ilen;
        if (!len)
            continue;
        const size_t span = (r >> 1) & 1 ? len : (len < 24 ? len : 24);
        uint8_t *b = c->col + base + (r >> 8) % span;
        static const uint8_t set[4] = {0, 0xff, 64, 65};
        if ((r >> 2) & 1)
            *b = set[(r >> 3) & 3];
        else
            *b ^= (uint8_t)(1 + (r >> 40) % 255);
    }
}

static void run_case(int order, const uint64_t *dims, int line_bits, int icodec, int value_type,
                     int vcodec, int corrupt, uint64_t seed)
{
    blco_layout_t l;
    if (blco_layout_init(&l, order, dims, line_bits) < 0) {
        CHECK(0, "layout");
        return;
    }
    blco_codec_map_t *m = malloc(sizeof *m);
    blco_codec_map_init(m, &l);
    const int ib = m->index_bits;
    if (icodec == BLCO_ICODEC_NARROW && ib > 32) {
        free(m);
        return;
    }
    uint64_t rng = seed;
    /* a first segment of three chunks of the grid kernels (8192 nonzeros each; integer
     * values: more frames than a block's threads) */
    uint64_t sizes[3] = {corrupt == WRAP ? 300 : 20000, 257, 1};
    if (corrupt == FUZZ) { /* segment 1, the one mutated, of one to two grid chunks */
        static const uint64_t fs[] = {2, 129, 300, 9000};
        sizes[0] = 3000;
        sizes[1] = fs[check_rand(&rng) % 4];
    }
    seg_t *segs = calloc(3, sizeof *segs);
    uint64_t nnz = 0;
    for (int i = 0; i < 3; i++) {
        seg_t *s = &segs[i];
        s->n = sizes[i];
        if (i == 1 && s->n < 2)
            s->n = 2;
        s->icodec = icodec;
        s->vcodec = vcodec;
        s->alto = malloc(s->n * 8);
        s->val = malloc(s->n * 8);
        /* Indices inside the dims: ALTO indices whose coordinates are all inside. */
        s->n = rand_sorted(s->alto, s->n, ib, &rng);
        for (uint64_t j = 0; j < s->n; j++) {
            uint64_t x = blco_codec_alto_to_index(m, s->alto[j]), y = 0;
            for (int k = 0; k < order; k++) {
                uint64_t c = (x >> l.pos[k]) & l.low_mask[k];
                y |= (c % dims[k]) << l.pos[k];
            }
            s->alto[j] = blco_codec_index_to_alto(m, y);
        }
        s->n = sort_unique(s->alto, s->n); /* back to sorted and distinct */
        if (i == 1 && s->n < 2) {          /* segment 1 is corrupted: give it two nonzeros */
            s->alto[0] = 0;
            s->alto[1] = 1;
            s->n = 2;
        }
        for (uint64_t j = 0; j < s->n; j++) {
            double v = (double)(int64_t)check_rand(&rng) * 0x1p-60;
            if (vcodec == BLCO_VCODEC_INT || vcodec == BLCO_VCODEC_DEC) {
                /* skewed whole numbers, some negative; divided by 10^3 for decimals (one in
                 * 64 segments by 10^9) */
                uint64_t r = check_rand(&rng);
                v = (double)((int64_t)(r % 17 ? r % 4 : r % (1u << 20)) - (r % 5 ? 0 : 300));
                if (vcodec == BLCO_VCODEC_DEC)
                    v = (v ? v : 1) / (seed % 64 ? 1e3 : 1e9);
            }
            s->val[j] = value_type == BLCO_VALUES_F32 ? (double)(float)v : v;
        }
        encode(s, m, value_type);
        nnz += s->n;
    }
    seg_t *c = &segs[1];
    int applies = 1;
    const int intcol = vcodec == BLCO_VCODEC_INT || vcodec == BLCO_VCODEC_DEC;
    const size_t ihead = c->ilen + (vcodec == BLCO_VCODEC_DEC ? 8 : 0); /* the integer part */
    switch (corrupt) {
    case WIDTH65:
        applies = icodec == BLCO_ICODEC_DELTA;
        if (applies)
            c->col[8] = 65;
        break;
    case SHORT: /* the column ends inside its last frame: move the values one byte down */
        applies = icodec == BLCO_ICODEC_DELTA && c->col[8] > 0;
        if (applies) {
            memmove(c->col + c->ilen - 1, c->col + c->ilen, c->vlen);
            c->ilen--;
        }
        break;
    case LONG: /* a byte after the last frame */
        applies = icodec == BLCO_ICODEC_DELTA;
        if (applies) {
            memmove(c->col + c->ilen + 1, c->col + c->ilen, c->vlen);
            c->col[c->ilen++] = 0;
        }
        break;
    case WRAP: /* the first index at the top of the range: the next one wraps past it */
        applies = icodec == BLCO_ICODEC_DELTA;
        if (applies) {
            uint64_t top = ib >= 64 ? ~0ull : (1ull << ib) - 1;
            for (int b = 0; b < 8; b++)
                c->col[b] = (uint8_t)(top >> (8 * b));
        }
        break;
    case WIDE: /* a raw index with a bit above the index width */
        applies = icodec == BLCO_ICODEC_RAW && ib < 64;
        if (applies)
            c->col[7] |= 0x80;
        break;
    case IWIDTH65: /* the first frame's width */
        applies = intcol;
        if (applies)
            c->col[ihead + 8] = 65;
        break;
    case ISHORT: /* the column one byte short of its frames */
        applies = intcol;
        if (applies)
            c->vlen--;
        break;
    case ILONG: /* a byte after the last frame */
        applies = intcol;
        if (applies)
            c->col[c->ilen + c->vlen++] = 0;
        break;
    case IBASE: { /* base 2^53: every value above the column's smallest goes past 2^53 */
        applies = intcol;
        uint64_t top = 1ull << 53;
        for (int b = 0; applies && b < 8; b++)
            c->col[ihead + b] = (uint8_t)(top >> (8 * b));
        break;
    }
    case IF32: { /* base 2^24 + 1: whole, inside 2^53, but no f32 */
        applies = vcodec == BLCO_VCODEC_INT && value_type == BLCO_VALUES_F32;
        uint64_t odd = (1ull << 24) + 1;
        for (int b = 0; applies && b < 8; b++)
            c->col[c->ilen + b] = (uint8_t)(odd >> (8 * b));
        break;
    }
    case DSCALE: { /* a decimal column's scale past 22 (seed odd) or 0 */
        applies = vcodec == BLCO_VCODEC_DEC;
        const uint64_t bad = seed & 1 ? 23 + (seed >> 1) % 1000 : 0;
        for (int b = 0; applies && b < 8; b++)
            c->col[c->ilen + b] = (uint8_t)(bad >> (8 * b));
        break;
    }
    case FUZZ: /* bytes of either column changed at random: the verdicts must agree */
        mutate(c, &rng);
        break;
    case OUTSIDE: { /* a coordinate of mode 1 past dims[0] (not a power of two) */
        uint64_t over = dims[0];
        applies = icodec == BLCO_ICODEC_RAW && l.low_mask[0] >= over;
        if (applies) {
            uint64_t x = (over << l.pos[0]);
            memcpy(c->col, &x, 8);
        }
        break;
    }
    }
    if (!applies) {
        for (int i = 0; i < 3; i++) {
            free(segs[i].alto);
            free(segs[i].val);
        }
        free(segs);
        free(m);
        return;
    }
    for (int i = 0; i < 3; i++)
        host_decode(&segs[i], m, value_type);
    uint64_t *idx = malloc(nnz * 8);
    double *val = malloc(nnz * 8);
    unsigned long long err = device_decode(segs, 3, &l, m, value_type, idx, val);
    char what[200];
    snprintf(what, sizeof what,
             "order %d line %d (index bits %d, %d fields) icodec %d vcodec %d: %s", order,
             line_bits, ib, m->nfield, icodec, vcodec, cname[corrupt]);
    const int refused = corrupt != OK && (corrupt != FUZZ || segs[1].hidx == NULL);
    if (corrupt == FUZZ)
        fuzz_refused += refused;
    if (!refused)
        CHECK(err == 0, "%s: device error word %llu%s", what, err,
              corrupt == FUZZ ? " (the host decoder accepts the mutated column)" : "");
    else {
        CHECK(err == 102, "%s: device error word %llu (want 102: segment 101)", what, err);
        CHECK(segs[1].hidx == NULL, "%s: the host decoder accepts it", what);
    }
    uint64_t at = 0;
    for (int i = 0; i < 3; i++) {
        seg_t *s = &segs[i];
        int same = 1;
        for (uint64_t j = 0; j < s->n; j++) {
            if (refused && i == 1)
                same &= idx[at + j] == 0 && val[at + j] == 0;
            else
                same &= s->hidx && idx[at + j] == s->hidx[j] &&
                        memcmp(&val[at + j], &s->hval[j], 8) == 0;
        }
        CHECK(same, "%s: segment %d (%llu nonzeros) decodes differently on the device", what, i,
              (unsigned long long)s->n);
        at += s->n;
        free(s->alto);
        free(s->val);
        free(s->hidx);
        free(s->hval);
    }
    free(idx);
    free(val);
    free(segs);
    free(m);
}

int main(void)
{
    char name[256];
    int ngpu = 0;
    int perr = blco_cuda_probe(&ngpu, name, sizeof name);
    if (perr < 0 || ngpu < 1) {
        printf("no GPU answers (%s): device decoding skipped\n", blco_strerror(perr));
        return 77;
    }
    blco_diag_t d = {0};
    int err = blco_cuda_open(0, NULL, &ctx, &d);
    CHECK(err == 0, "open: %s", d.msg);
    if (err)
        return check_done();
    struct {
        int order, line_bits;
        uint64_t dims[5];
    } lay[] = {
        {3, 0, {64, 32, 16}},                                     /* one block, 15 bits */
        {3, 0, {100, 60, 30}},                                    /* dims not powers of two */
        {3, 10, {1ull << 20, 1ull << 18, 1ull << 16}},            /* 10 in-block bits, 3 fields */
        {4, 0, {1ull << 22, 1ull << 22, 1ull << 22, 1ull << 22}}, /* 64 in-block bits */
        {5, 40, {1000, 3, 70000, 9, 1ull << 20}},                 /* 40 of 62 bits */
        {3, 20, {1ull << 30, 1, 1ull << 30}},                     /* a length-1 mode */
        {5, 0, {60114, 83826, 23034, 1132, 100}},                 /* splatt-med5: 64 of 66 bits */
    };
    /* value codecs by value type (the decimal codec is f64's only) */
    const int vc[2][4] = {{BLCO_VCODEC_F64, BLCO_VCODEC_F64_PLANES, BLCO_VCODEC_INT, BLCO_VCODEC_DEC},
                          {BLCO_VCODEC_F32, BLCO_VCODEC_F32_PLANES, BLCO_VCODEC_INT}};
    const int nvc[2] = {4, 3};
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++)
        for (int ic = BLCO_ICODEC_RAW; ic <= BLCO_ICODEC_DELTA; ic++)
            for (int vt = 0; vt < 2; vt++)
                for (int v = 0; v < nvc[vt]; v++)
                    run_case(lay[i].order, lay[i].dims, lay[i].line_bits, ic,
                             vt ? BLCO_VALUES_F32 : BLCO_VALUES_F64, vc[vt][v], OK, seed++);
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++)
        for (int ic = BLCO_ICODEC_RAW; ic <= BLCO_ICODEC_DELTA; ic++)
            for (int c = WIDTH65; c < NCORRUPT; c++)
                run_case(lay[i].order, lay[i].dims, lay[i].line_bits, ic, BLCO_VALUES_F64,
                         c >= IWIDTH65 ? BLCO_VCODEC_INT : BLCO_VCODEC_F64, c, seed++);
    /* the integer column's corruptions inside a decimal column, and bad scales */
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++)
        for (int c = IWIDTH65; c <= NCORRUPT; c++)
            run_case(lay[i].order, lay[i].dims, lay[i].line_bits, BLCO_ICODEC_DELTA,
                     BLCO_VALUES_F64, BLCO_VCODEC_DEC, c == NCORRUPT ? DSCALE : c, seed++);
    /* an f32 file whose integer column holds a value that is no f32 */
    for (int ic = BLCO_ICODEC_RAW; ic <= BLCO_ICODEC_DELTA; ic++)
        run_case(lay[0].order, lay[0].dims, lay[0].line_bits, ic, BLCO_VALUES_F32,
                 BLCO_VCODEC_INT, IF32, seed++);
    /* Random mutations: whatever the host decoder says of the column, the device says too,
     * and where both accept it they decode it alike */
    const char *quick = getenv("BLCO_TEST_QUICK");
    int nfuzz = quick && *quick && strcmp(quick, "0") != 0 ? 60 : 400;
    uint64_t frng = 0x5eed;
    if (getenv("BLCO_FUZZ_CASES")) /* longer runs by hand: cases and a seed */
        nfuzz = atoi(getenv("BLCO_FUZZ_CASES"));
    if (getenv("BLCO_FUZZ_SEED"))
        frng = strtoull(getenv("BLCO_FUZZ_SEED"), NULL, 0);
    for (int k = 0; k < nfuzz; k++) {
        const uint64_t r = check_rand(&frng);
        const size_t i = (size_t)(r % (sizeof lay / sizeof lay[0]));
        const int ic = BLCO_ICODEC_RAW + (int)((r >> 8) % 3), vt = (int)((r >> 12) & 1);
        const int v = (int)((r >> 16) % (unsigned)nvc[vt]);
        run_case(lay[i].order, lay[i].dims, lay[i].line_bits, ic,
                 vt ? BLCO_VALUES_F32 : BLCO_VALUES_F64, vc[vt][v], FUZZ, seed++);
    }
    printf("random mutations: %d cases, the host refused %d\n", nfuzz, fuzz_refused);
    CHECK(fuzz_refused > nfuzz / 10 && fuzz_refused < nfuzz - nfuzz / 10,
          "the mutations are too kind or too harsh: %d of %d refused", fuzz_refused, nfuzz);
    blco_cuda_close(ctx);
    return check_done();
}
