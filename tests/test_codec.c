/* Segment column codecs: ALTO-to-BLCO conversion against blco_layout_index, round trips of
 * every index and value codec with and without zstd over random layouts and segments,
 * the AUTO policy, the segment calls, and a corruption campaign against the decoders. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "blco.h"
#include "check.h"
#include "codec.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static uint64_t seed = 0x5eed;

static uint64_t rnd(void)
{
    return check_rand(&seed);
}

static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

static uint64_t ones(int b)
{
    return b >= 64 ? ~0ull : (1ull << b) - 1;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* A copy in a buffer of exactly n bytes, so ASan sees any read past the end. */
static uint8_t *exact(const uint8_t *p, size_t n)
{
    uint8_t *q = xmalloc(n);
    memcpy(q, p, n);
    return q;
}

/* A random layout of order 2..max_order: some length-1 modes, mode bits up to maxbits. */
static void rand_layout(blco_layout_t *l, int max_order, int maxbits, int line_bits)
{
    for (;;) {
        int order = 2 + (int)below((uint64_t)max_order - 1);
        /* Keep the total within 128 bits and the key within 64 often enough. */
        int room = MIN(BLCO_MAX_INDEX_BITS, (line_bits ? line_bits : 64) + 64);
        int mb = MAX(1, MIN(maxbits, room / order));
        uint64_t dims[BLCO_MAX_MODES];
        for (int n = 0; n < order; n++) {
            int b = below(6) == 0 ? 0 : 1 + (int)below((uint64_t)mb);
            dims[n] = b == 0 ? 1 : (1ull << (b - 1)) + 1 + below(1ull << (b - 1));
            if (b == 64)
                dims[n] = (1ull << 63) + 1 + below(~0ull >> 1);
        }
        if (blco_layout_init(l, order, dims, line_bits) == 0)
            return;
    }
}

static int index_bits(const blco_layout_t *l)
{
    int ib = 0;
    for (int n = 0; n < l->order; n++)
        ib += l->low_bits[n];
    return ib;
}

/* ---- ALTO to BLCO ---- */

static void test_map(void)
{
    static const int lines[] = {5, 17, 32, 33, 64, 1, 63};
    for (int it = 0; it < 3000; it++) {
        blco_layout_t l;
        int maxbits = it % 3 == 0 ? 64 : it % 3 == 1 ? 30 : 8;
        rand_layout(&l, 8 + (int)below(9) * (it & 1), maxbits, lines[it % 7]);
        if (l.order > BLCO_MAX_MODES)
            continue;
        blco_codec_map_t m;
        blco_codec_map_init(&m, &l);
        CHECK(m.index_bits == index_bits(&l) && m.index_bits == MIN(l.total_bits, l.line_bits),
              "index bits %d, total %d line %d", m.index_bits, l.total_bits, l.line_bits);
        for (int k = 0; k < 20; k++) {
            uint64_t c[BLCO_MAX_MODES], a[2];
            for (int n = 0; n < l.order; n++)
                c[n] = below(l.dims[n]);
            blco_layout_alto(&l, c, a);
            uint64_t lo = a[0] & ones(l.line_bits);
            uint64_t want = blco_layout_index(&l, c, NULL);
            for (int table = 0; table < 2; table++) {
                blco_codec_map_t mm = m;
                mm.use_table = table;
                uint64_t got = blco_codec_alto_to_index(&mm, lo), arr;
                blco_codec_map_to_index(&mm, &lo, &arr, 1);
                CHECK(got == want && arr == want,
                      "order %d line %d: alto %#llx -> %#llx / %#llx, want %#llx", l.order,
                      l.line_bits, (unsigned long long)lo, (unsigned long long)got,
                      (unsigned long long)arr, (unsigned long long)want);
            }
            uint64_t back = blco_codec_index_to_alto(&m, want);
            CHECK(back == lo, "index %#llx -> alto %#llx, want %#llx", (unsigned long long)want,
                  (unsigned long long)back, (unsigned long long)lo);
        }
    }
}

/* ---- index data ---- */

/* n strictly increasing in-block ALTO indices below 2^ib, of a given kind. Returns how
 * many were made (fewer when the space is too small). */
static uint64_t gen_indices(int kind, int ib, uint64_t n, int width, uint64_t *a)
{
    uint64_t lim = ones(ib);
    if (ib < 63 && n > lim + 1)
        n = lim + 1;
    if (n == 0)
        return 0;
    if (n == 1) {
        a[0] = kind == 0 ? lim : below(lim) + (kind == 1 ? 1 : 0);
        a[0] = MIN(a[0], lim);
        return 1;
    }
    uint64_t *d = xmalloc(n * 8);
    d[0] = 0;
    /* Largest width whose worst-case sum fits: (n - 1) * 2^w <= lim. */
    int wmax = 0;
    while (wmax < 64 && (lim >> wmax) / (n - 1) >= 1)
        wmax++;
    wmax = MAX(0, wmax - 1);
    switch (kind) {
    case 0: /* consecutive: width 0 */
        for (uint64_t i = 1; i < n; i++)
            d[i] = 0;
        break;
    case 1: { /* every frame exactly `width` bits wide (clamped to what fits) */
        int w = MIN(width, wmax);
        for (uint64_t i = 1; i < n; i++)
            d[i] = rnd() & ones(w);
        for (uint64_t f = 1; w > 0 && f < n; f += BLCO_DELTA_FRAME) {
            uint64_t k = MIN((uint64_t)BLCO_DELTA_FRAME, n - f);
            d[f + below(k)] |= 1ull << (w - 1);
        }
        break;
    }
    case 2: /* runs of ones and jumps of random widths */
        for (uint64_t i = 1; i < n; i++)
            d[i] = below(2) ? 0 : rnd() & ones((int)below((uint64_t)wmax + 1));
        break;
    default: /* per frame a random width */
        for (uint64_t f = 1; f < n; f += BLCO_DELTA_FRAME) {
            int w = (int)below((uint64_t)wmax + 1);
            for (uint64_t i = f; i < n && i < f + BLCO_DELTA_FRAME; i++)
                d[i] = rnd() & ones(w);
        }
        break;
    }
    /* d[i] are delta - 1; the sum fits below lim by the choice of wmax. */
    uint64_t span = 0;
    for (uint64_t i = 1; i < n; i++)
        span += d[i] + 1;
    uint64_t room = lim - span;
    a[0] = below(2) ? room : (room == ~0ull ? rnd() : below(room + 1));
    for (uint64_t i = 1; i < n; i++)
        a[i] = a[i - 1] + d[i] + 1;
    free(d);
    return n;
}

static int is_zstd_frame(const uint8_t *p, size_t len)
{
    return len >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd;
}

/* The mutation positions of a column of len bytes: all of them for short columns, else
 * every byte of the first 256 and the last 64 (frame headers, widths) and 512 in between. */
static size_t next_pos(size_t i, size_t len)
{
    if (len <= 2048 || i < 256 || i + 65 >= len)
        return i + 1;
    size_t step = len / 512, nx = i + step;
    return nx + 64 > len ? len - 64 : nx;
}

/* Invariants of any successful index decode. */
static void check_decoded(const blco_codec_map_t *m, int codec, const uint64_t *out, uint64_t n,
                          int alto)
{
    uint64_t lim = ones(m->index_bits), bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad |= out[i] > lim;
    CHECK(!bad, "codec %#x: decoded an index above 2^%d", codec, m->index_bits);
    if (alto) {
        bad = 0;
        for (uint64_t i = 1; i < n; i++)
            bad |= out[i] <= out[i - 1];
        CHECK(!bad, "codec %#x: decoded deltas do not increase", codec);
    }
}

/* Mutations of a valid encoding: flipped bytes, every truncation, one byte too many. */
static void attack_index(blco_codec_ctx_t *ctx, const blco_codec_map_t *m, int codec,
                         const uint8_t *enc, size_t len, uint64_t n)
{
    uint64_t *out = xmalloc(n * 8);
    for (size_t i = 0; i < len; i = next_pos(i, len)) {
        uint8_t *c = exact(enc, len);
        c[i] ^= (uint8_t)(1 + below(255));
        int err = blco_codec_index_decode(ctx, m, codec, c, len, n, out);
        CHECK(err == 0 || err == -BLCO_EFORMAT, "flip at %zu: %d", i, err);
        if (err == 0) {
            check_decoded(m, codec, out, n, 0);
            if (BLCO_CODEC_BASE(codec) == BLCO_ICODEC_DELTA &&
                blco_codec_index_decode(ctx, NULL, codec, c, len, n, out) == 0)
                check_decoded(m, codec, out, n, 1);
        }
        free(c);
    }
    for (size_t t = 0; t < len; t = next_pos(t, len)) {
        uint8_t *c = exact(enc, t);
        int err = blco_codec_index_decode(ctx, m, codec, c, t, n, out);
        CHECK(err == -BLCO_EFORMAT, "codec %#x truncated to %zu of %zu: %d", codec, t, len, err);
        free(c);
    }
    uint8_t *c = xmalloc(len + 1);
    memcpy(c, enc, len);
    c[len] = (uint8_t)rnd();
    CHECK(blco_codec_index_decode(ctx, m, codec, c, len + 1, n, out) == -BLCO_EFORMAT,
          "codec %#x: a trailing byte was accepted", codec);
    free(c);
    /* A wrong count must not crash either. */
    c = exact(enc, len);
    uint64_t *big = xmalloc((n + 1) * 8);
    int err = blco_codec_index_decode(ctx, m, codec, c, len, n + 1, big);
    CHECK(err == -BLCO_EFORMAT || err == 0, "count n+1: %d", err);
    if (n > 1) {
        err = blco_codec_index_decode(ctx, m, codec, c, len, n - 1, big);
        CHECK(err == -BLCO_EFORMAT || err == 0, "count n-1: %d", err);
    }
    free(big);
    free(c);
    free(out);
}

static const int index_codecs[] = {
    BLCO_ICODEC_RAW,
    BLCO_ICODEC_NARROW,
    BLCO_ICODEC_DELTA,
    BLCO_ICODEC_RAW | BLCO_CODEC_ZSTD,
    BLCO_ICODEC_NARROW | BLCO_CODEC_ZSTD,
    BLCO_ICODEC_DELTA | BLCO_CODEC_ZSTD,
    BLCO_CODEC_AUTO,
};

/* Encodes with `codec`, decodes, compares; returns the codec used (-1 on failure). */
static int roundtrip_index(blco_codec_ctx_t *ctx, const blco_codec_map_t *m, const uint64_t *a,
                           uint64_t n, int codec, int level, int attack)
{
    blco_codec_req_t r = {codec, level, 0};
    size_t cap = blco_codec_index_bound(n), len = 0;
    uint8_t *buf = xmalloc(cap);
    int used = -1;
    int err = blco_codec_index_encode(ctx, m, a, n, &r, buf, cap, &len, &used);
    if (BLCO_CODEC_BASE(codec) == BLCO_ICODEC_NARROW && m->index_bits > 32) {
        CHECK(err == -EINVAL, "narrow with %d index bits: %d", m->index_bits, err);
        free(buf);
        return -1;
    }
    CHECK(err == 0, "encode codec %#x n %llu: %s", codec, (unsigned long long)n,
          blco_strerror(err));
    if (err < 0) {
        free(buf);
        return -1;
    }
    if (codec != BLCO_CODEC_AUTO)
        CHECK(used == codec, "asked %#x, used %#x", codec, used);
    CHECK(len <= cap, "len %zu > bound %zu", len, cap);
    CHECK(!(used & BLCO_CODEC_ZSTD) == !is_zstd_frame(buf, len), "zstd flag %#x", used);
    size_t want_len = BLCO_CODEC_BASE(used) == BLCO_ICODEC_RAW      ? 8 * n
                      : BLCO_CODEC_BASE(used) == BLCO_ICODEC_NARROW ? 4 * n
                                                                    : blco_delta_size(a, n);
    if (!(used & BLCO_CODEC_ZSTD))
        CHECK(len == want_len, "codec %#x: %zu bytes, want %zu", used, len, want_len);

    uint8_t *enc = exact(buf, len);
    uint64_t *out = xmalloc(n * 8);
    for (int pass = 0; pass < 2; pass++) {
        memset(out, 0xa5, n * 8);
        err = blco_codec_index_decode(pass ? NULL : ctx, m, used, enc, len, n, out);
        CHECK(err == 0, "decode codec %#x n %llu: %s", used, (unsigned long long)n,
              blco_strerror(err));
        uint64_t bad = 0;
        for (uint64_t i = 0; i < n && err == 0; i++)
            bad += out[i] != blco_codec_alto_to_index(m, a[i]);
        CHECK(bad == 0, "codec %#x n %llu: %llu indices differ", used, (unsigned long long)n,
              (unsigned long long)bad);
    }
    if (BLCO_CODEC_BASE(used) == BLCO_ICODEC_DELTA) {
        err = blco_codec_index_decode(ctx, NULL, used, enc, len, n, out);
        CHECK(err == 0 && memcmp(out, a, n * 8) == 0, "delta to alto: %d", err);
    }
    if (attack)
        attack_index(ctx, m, used, enc, len, n);
    free(out);
    free(enc);
    free(buf);
    return used;
}

static void test_index_roundtrips(void)
{
    static const uint64_t sizes[] = {1, 2, 127, 128, 129, 1000, 65536};
    static const int lines[] = {5, 17, 32, 33, 64};
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    uint64_t *a = xmalloc(65536 * 8);
    int it = 0;
    for (int li = 0; li < 5; li++) {
        for (int rep = 0; rep < 24; rep++, it++) {
            blco_layout_t l;
            rand_layout(&l, rep % 4 == 0 ? 8 : 4, rep % 3 == 0 ? 40 : 20, lines[li]);
            blco_codec_map_t m;
            blco_codec_map_init(&m, &l);
            for (int si = 0; si < 7; si++) {
                uint64_t n = sizes[si];
                if (n == 65536 && rep % 6)
                    continue;
                int kind = (int)below(4), width = (int)below(65);
                n = gen_indices(kind, m.index_bits, n, width, a);
                if (!n)
                    continue;
                for (unsigned c = 0; c < sizeof index_codecs / sizeof *index_codecs; c++) {
                    int attack = n <= 1000 && (it + si + (int)c) % 5 == 0;
                    roundtrip_index(ctx, &m, a, n, index_codecs[c], (int)c % 2 ? 0 : 3, attack);
                }
            }
        }
    }
    /* Every width 0..64 in the widest layout, and the table path. */
    blco_layout_t l;
    const uint64_t dims[4] = {1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20};
    CHECK(blco_layout_init(&l, 4, dims, 64) == 0, "layout");
    blco_codec_map_t m;
    blco_codec_map_init(&m, &l);
    for (int w = 0; w <= 64; w++) {
        uint64_t n = gen_indices(w ? 1 : 0, 64, 300, w, a);
        if (w >= 56) { /* the widest gaps fit only a couple of times */
            n = 2;
            a[0] = 0;
            a[1] = 1 + ((1ull << (w - 1)) | ((rnd() & ones(w - 1)) >> 1));
        }
        size_t cap = blco_delta_bound(n), len;
        uint8_t *buf = xmalloc(cap);
        CHECK(blco_delta_encode(a, n, buf, cap, &len) == 0, "delta encode");
        CHECK(buf[8] == w, "width %d: frame says %d", w, buf[8]);
        free(buf);
        for (int table = 0; table < 2; table++) {
            m.use_table = table;
            roundtrip_index(ctx, &m, a, n, BLCO_ICODEC_DELTA, 0, w % 8 == 0);
            roundtrip_index(ctx, &m, a, n, BLCO_ICODEC_DELTA | BLCO_CODEC_ZSTD, 1, 0);
        }
    }
    /* Bad requests. */
    size_t len;
    int used;
    uint8_t buf[64];
    blco_codec_req_t r = {BLCO_ICODEC_DELTA, 0, 0};
    uint64_t two[2] = {5, 5};
    CHECK(blco_codec_index_encode(ctx, &m, two, 2, &r, buf, sizeof buf, &len, &used) == -EINVAL,
          "equal indices accepted");
    two[1] = 4;
    CHECK(blco_codec_index_encode(ctx, &m, two, 2, &r, buf, sizeof buf, &len, &used) == -EINVAL,
          "decreasing indices accepted");
    CHECK(blco_codec_index_encode(ctx, &m, two, 0, &r, buf, sizeof buf, &len, &used) == -EINVAL,
          "n = 0 accepted");
    r.codec = 3;
    CHECK(blco_codec_index_encode(ctx, &m, two, 1, &r, buf, sizeof buf, &len, &used) == -EINVAL,
          "unknown codec accepted");
    r.codec = BLCO_ICODEC_RAW;
    CHECK(blco_codec_index_encode(ctx, &m, two, 1, &r, buf, 7, &len, &used) == -ENOSPC,
          "small buffer accepted");
    free(a);
    blco_codec_ctx_free(ctx);
}

/* ---- values ---- */

static void gen_values(int kind, uint64_t n, double *v)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        switch (kind) {
        case 0: /* uniform in (0, 1] */ v[i] = (double)((r >> 11) + 1) * 0x1p-53; break;
        case 1: /* ratings */ v[i] = (double)(1 + r % 5); break;
        case 2: v[i] = 1.0; break;
        case 3: { /* any bit pattern, NaNs and infinities included */ memcpy(&v[i], &r, 8); break;
        }
        case 5: /* skewed whole numbers, some negative */
            v[i] = (double)((int64_t)(r % 7 ? r % 3 : r % 100000) - (r % 13 == 0 ? 5000 : 0));
            break;
        case 7: /* 6-digit decimals, some negative (the decimal codec, scale 6) */
            v[i] = (double)((int64_t)(r % 1000000) - (r % 9 == 0 ? 400000 : 0)) / 1e6;
            break;
        case 8: /* decimals of 2 to 9 digits, as "%g" gives small values (scale 9) */
            v[i] = (double)(r % 10000) / (r % 17 == 0 ? 1e9 : 1e2);
            break;
        case 6: { /* whole numbers at the ends of the exact range */
            static const double sp[] = {0x1p53, -0x1p53, 0x1p53 - 1, 0, 1, 0x1p24 + 1};
            v[i] = sp[r % 6];
            break;
        }
        default: { /* specials */
            static const double sp[] = {0.0, -0.0, 1e-310, -1e308, 3.5, -2.25};
            v[i] = sp[r % 6];
            if (r % 7 == 0)
                v[i] = INFINITY;
            if (r % 11 == 0)
                v[i] = NAN;
            break;
        }
        }
    }
}

static uint64_t bits_of(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static void attack_value(blco_codec_ctx_t *ctx, int vt, int codec, const uint8_t *enc, size_t len,
                         uint64_t n)
{
    double *out = xmalloc(n * 8);
    for (size_t i = 0; i < len; i = next_pos(i, len)) {
        uint8_t *c = exact(enc, len);
        c[i] ^= (uint8_t)(1 + below(255));
        int err = blco_codec_value_decode(ctx, vt, codec, c, len, n, out);
        CHECK(err == 0 || err == -BLCO_EFORMAT, "value flip at %zu: %d", i, err);
        free(c);
    }
    for (size_t t = 0; t < len; t = next_pos(t, len)) {
        uint8_t *c = exact(enc, t);
        int err = blco_codec_value_decode(ctx, vt, codec, c, t, n, out);
        CHECK(err == -BLCO_EFORMAT, "value codec %#x truncated to %zu: %d", codec, t, err);
        free(c);
    }
    uint8_t *c = xmalloc(len + 1);
    memcpy(c, enc, len);
    c[len] = 0;
    CHECK(blco_codec_value_decode(ctx, vt, codec, c, len + 1, n, out) == -BLCO_EFORMAT,
          "value codec %#x: a trailing byte was accepted", codec);
    free(c);
    free(out);
}

static int roundtrip_value(blco_codec_ctx_t *ctx, const double *v, uint64_t n, int vt, int codec,
                           int level, int attack)
{
    blco_codec_req_t r = {codec, level, 0};
    size_t cap = blco_codec_value_bound(n), len = 0;
    uint8_t *buf = xmalloc(cap);
    int used = -1, f64 = vt == BLCO_VALUES_F64;
    int err = blco_codec_value_encode(ctx, v, n, vt, &r, buf, cap, &len, &used);
    int base = BLCO_CODEC_BASE(codec);
    if (codec != BLCO_CODEC_AUTO && base != BLCO_VCODEC_INT &&
        (base == BLCO_VCODEC_F64 || base == BLCO_VCODEC_F64_PLANES || base == BLCO_VCODEC_DEC) !=
            f64) {
        CHECK(err == -EINVAL, "codec %#x for value type %d: %d", codec, vt, err);
        free(buf);
        return -1;
    }
    if (codec != BLCO_CODEC_AUTO && base == BLCO_VCODEC_INT && !blco_int_size(v, n, !f64)) {
        CHECK(err == -EINVAL, "the integer codec for values that are not all whole: %d", err);
        free(buf);
        return -1;
    }
    if (codec != BLCO_CODEC_AUTO && base == BLCO_VCODEC_DEC) {
        const int scale = blco_dec_scale(v, n);
        if (!scale || !blco_dec_size(v, n, scale)) {
            CHECK(err == -EINVAL, "the decimal codec for values that are not all decimals: %d",
                  err);
            free(buf);
            return -1;
        }
    }
    CHECK(err == 0, "value encode %#x: %s", codec, blco_strerror(err));
    if (err < 0) {
        free(buf);
        return -1;
    }
    if (codec != BLCO_CODEC_AUTO)
        CHECK(used == codec, "asked %#x used %#x", codec, used);
    CHECK(len <= cap && !(used & BLCO_CODEC_ZSTD) == !is_zstd_frame(buf, len), "len/zstd");
    uint8_t *enc = exact(buf, len);
    double *out = xmalloc(n * 8);
    for (int pass = 0; pass < 2; pass++) {
        err = blco_codec_value_decode(pass ? NULL : ctx, vt, used, enc, len, n, out);
        CHECK(err == 0, "value decode %#x: %s", used, blco_strerror(err));
        uint64_t bad = 0;
        for (uint64_t i = 0; i < n && err == 0; i++) {
            double want = f64 ? v[i] : (double)(float)v[i];
            bad += bits_of(out[i]) != bits_of(want);
        }
        CHECK(bad == 0, "value codec %#x: %llu differ", used, (unsigned long long)bad);
    }
    /* The other value type's reader refuses the column (the integer codec serves both: an
     * f32 reader takes it when every value is an f32). */
    err = blco_codec_value_decode(ctx, f64 ? BLCO_VALUES_F32 : BLCO_VALUES_F64, used, enc, len, n,
                                  out);
    if (BLCO_CODEC_BASE(used) != BLCO_VCODEC_INT) {
        CHECK(err == -BLCO_EFORMAT, "codec %#x read as the other type: %d", used, err);
    } else {
        int all_f32 = 1;
        for (uint64_t i = 0; i < n; i++) {
            double want = f64 ? v[i] : (double)(float)v[i];
            all_f32 &= (double)(float)want == want;
        }
        CHECK(err == (f64 && !all_f32 ? -BLCO_EFORMAT : 0), "codec %#x read as the other type: %d",
              used, err);
    }
    if (attack)
        attack_value(ctx, vt, used, enc, len, n);
    free(out);
    free(enc);
    free(buf);
    return used;
}

static void test_value_roundtrips(void)
{
    static const uint64_t sizes[] = {1, 2, 127, 128, 129, 1000, 65536};
    static const int codecs[] = {
        BLCO_VCODEC_F64,
        BLCO_VCODEC_F32,
        BLCO_VCODEC_F64_PLANES,
        BLCO_VCODEC_F32_PLANES,
        BLCO_VCODEC_F64 | BLCO_CODEC_ZSTD,
        BLCO_VCODEC_F32 | BLCO_CODEC_ZSTD,
        BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD,
        BLCO_VCODEC_F32_PLANES | BLCO_CODEC_ZSTD,
        BLCO_VCODEC_INT,
        BLCO_VCODEC_INT | BLCO_CODEC_ZSTD,
        BLCO_VCODEC_DEC,
        BLCO_VCODEC_DEC | BLCO_CODEC_ZSTD,
        BLCO_CODEC_AUTO,
    };
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    double *v = xmalloc(65536 * 8);
    for (int si = 0; si < 7; si++) {
        for (int kind = 0; kind < 9; kind++) {
            uint64_t n = sizes[si];
            gen_values(kind, n, v);
            for (int vt = BLCO_VALUES_F64; vt <= BLCO_VALUES_F32; vt++)
                for (unsigned c = 0; c < sizeof codecs / sizeof *codecs; c++)
                    for (int level = 0; level <= 3; level += 3)
                        roundtrip_value(ctx, v, n, vt, codecs[c], level,
                                        n <= 1000 && level == 0 && (kind + si) % 3 == 0);
        }
    }
    free(v);
    blco_codec_ctx_free(ctx);
}

/* ---- AUTO ---- */

static void test_auto(void)
{
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    uint64_t n = 65536, *a = xmalloc(n * 8);
    blco_layout_t l64, l32;
    const uint64_t d64[3] = {1ull << 22, 1ull << 21, 1ull << 21};
    const uint64_t d32[3] = {1 << 11, 1 << 11, 1 << 10};
    CHECK(blco_layout_init(&l64, 3, d64, 64) == 0 && blco_layout_init(&l32, 3, d32, 64) == 0,
          "layouts");
    blco_codec_map_t m64, m32;
    blco_codec_map_init(&m64, &l64);
    blco_codec_map_init(&m32, &l32);
    CHECK(m64.index_bits == 64 && m32.index_bits == 32, "bits");

    /* Consecutive indices: delta at width 0, zstd never without a level. */
    gen_indices(0, 64, n, 0, a);
    CHECK(roundtrip_index(ctx, &m64, a, n, BLCO_CODEC_AUTO, 0, 0) == BLCO_ICODEC_DELTA, "dense");
    gen_indices(0, 32, 100, 0, a);
    CHECK(roundtrip_index(ctx, &m32, a, 100, BLCO_CODEC_AUTO, 0, 0) == BLCO_ICODEC_DELTA,
          "dense narrowable");
    /* Two indices far apart: raw (16 bytes) beats delta (17), narrow where allowed. */
    uint64_t far[3] = {0, ~0ull >> 1, ~0ull};
    CHECK(roundtrip_index(ctx, &m64, far, 3, BLCO_CODEC_AUTO, 0, 0) == BLCO_ICODEC_RAW, "raw");
    uint64_t far32[3] = {0, 0x7fffffff, 0xffffffff};
    CHECK(roundtrip_index(ctx, &m32, far32, 3, BLCO_CODEC_AUTO, 0, 0) == BLCO_ICODEC_NARROW,
          "narrow");
    CHECK(roundtrip_index(ctx, &m32, far32, 3, BLCO_CODEC_AUTO, 5, 0) == BLCO_ICODEC_NARROW,
          "narrow, zstd does not save");
    /* Random gaps: delta, and zstd does not save 10% of packed random bits. */
    gen_indices(1, 64, n, 20, a);
    CHECK(roundtrip_index(ctx, &m64, a, n, BLCO_CODEC_AUTO, 0, 0) == BLCO_ICODEC_DELTA, "delta");
    CHECK(roundtrip_index(ctx, &m64, a, n, BLCO_CODEC_AUTO, 3, 0) == BLCO_ICODEC_DELTA,
          "delta without zstd");
    /* A repeating gap pattern: zstd on top when asked for, not otherwise. */
    a[0] = 0;
    for (uint64_t i = 1; i < n; i++)
        a[i] = a[i - 1] + (i % 3 ? 1 : 1000);
    CHECK(roundtrip_index(ctx, &m64, a, n, BLCO_CODEC_AUTO, 0, 0) == BLCO_ICODEC_DELTA,
          "pattern, no zstd asked");
    CHECK(roundtrip_index(ctx, &m64, a, n, BLCO_CODEC_AUTO, 3, 0) ==
              (BLCO_ICODEC_DELTA | BLCO_CODEC_ZSTD),
          "pattern with zstd");
    CHECK(roundtrip_index(ctx, &m64, a, n, BLCO_CODEC_AUTO, -1, 0) ==
              (BLCO_ICODEC_DELTA | BLCO_CODEC_ZSTD),
          "pattern with a fast zstd level");

    double *v = xmalloc(n * 8);
    int plain_or_planes = BLCO_VCODEC_F64 | BLCO_CODEC_ZSTD, u;
    gen_values(1, n, v); /* ratings: whole numbers, the integer codec (3 bits a value) */
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F64, BLCO_CODEC_AUTO, 0, 0);
    CHECK(BLCO_CODEC_BASE(u) == BLCO_VCODEC_INT, "ratings %#x", u);
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F32, BLCO_CODEC_AUTO, 0, 0);
    CHECK(BLCO_CODEC_BASE(u) == BLCO_VCODEC_INT, "f32 ratings %#x", u);
    /* one value that is not whole: no integer codec */
    v[n / 2] = 2.5;
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F64, BLCO_CODEC_AUTO, 0, 0);
    CHECK(BLCO_CODEC_BASE(u) == BLCO_VCODEC_DEC && blco_dec_scale(v, n) == 1,
          "ratings and a 2.5: decimals at scale 1 %#x", u);
    v[n / 2] = 0.1 + 0.2; /* 0.30000000000000004: no decimal; plain or planes */
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F64, BLCO_CODEC_AUTO, 0, 0);
    CHECK(u == plain_or_planes || u == (BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD),
          "ratings and a 0.1 + 0.2 %#x", u);
    v[n / 2] = -0.0; /* -0 would come back as +0 */
    CHECK(blco_int_size(v, n, 0) == 0 && blco_int_size(v, n, 1) == 0, "-0 is no integer");
    v[n / 2] = 0x1p53 + 2;
    CHECK(blco_int_size(v, n, 0) == 0, "2^53 + 2 is out of the exact range");
    v[n / 2] = 0x1p53;
    CHECK(blco_int_size(v, n, 0) > 0, "2^53 is in it");
    gen_values(0, n, v); /* uniform doubles: about 16% in planes, above the 12% bar */
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F64, BLCO_CODEC_AUTO, 0, 0);
    CHECK(u == (BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD), "uniform unasked %#x", u);
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F64, BLCO_CODEC_AUTO, 3, 0);
    CHECK(u == (BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD), "uniform with zstd %#x", u);
    gen_values(3, n, v); /* random bits: nothing to gain */
    u = roundtrip_value(ctx, v, n, BLCO_VALUES_F64, BLCO_CODEC_AUTO, 3, 0);
    CHECK(u == BLCO_VCODEC_F64, "random bits %#x", u);
    /* With only room for the plain column, AUTO still fits. */
    size_t len;
    uint8_t *buf = xmalloc(8 * n);
    blco_codec_req_t r = {BLCO_CODEC_AUTO, 3, 0};
    CHECK(blco_codec_value_encode(ctx, v, n, BLCO_VALUES_F64, &r, buf, 8 * n, &len, &u) == 0 &&
              u == BLCO_VCODEC_F64 && len == 8 * n,
          "tight AUTO");
    free(buf);
    free(v);
    free(a);
    blco_codec_ctx_free(ctx);
}

/* ---- the pack codecs' policies ---- */

/* Encodes one segment with pack codec pc and checks its round trip. Returns the stored
 * size; *ic, *vc and *ilen say what was chosen. */
static size_t pack_segment(blco_codec_ctx_t *ctx, const blco_layout_t *l, int pc, int level, int vt,
                           const uint64_t *alto, const double *v, uint64_t n, int *ic, int *vc,
                           size_t *ilen)
{
    size_t cap = blco_codec_index_bound(n) + blco_codec_value_bound(n), vlen = 0;
    uint8_t *enc = xmalloc(cap);
    *ilen = 0;
    int err =
        blco_codec_encode_segment(ctx, l, pc, level, vt, alto, v, n, enc, cap, ilen, &vlen, ic, vc);
    CHECK(err == 0, "pack codec %d: %s", pc, blco_strerror(err));
    blco_segment_t sg;
    memset(&sg, 0, sizeof sg);
    sg.nnz = n;
    sg.index_bytes = *ilen;
    sg.value_bytes = vlen;
    sg.index_codec = *ic;
    sg.value_codec = *vc;
    blco_codec_map_t m;
    blco_codec_map_init(&m, l);
    sg.raw_index_bits = (uint32_t)m.index_bits;
    uint64_t *idx = xmalloc(n * 8), *want = xmalloc(n * 8);
    double *val = xmalloc(n * 8);
    blco_codec_map_to_index(&m, alto, want, n);
    err = err ? err : blco_codec_decode_segment(ctx, l, vt, &sg, enc, idx, val);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n && err == 0; i++)
        bad += idx[i] != want[i] ||
               bits_of(val[i]) != bits_of(vt == BLCO_VALUES_F64 ? v[i] : (double)(float)v[i]);
    CHECK(err == 0 && bad == 0, "pack codec %d: round trip %d, %llu differ", pc, err,
          (unsigned long long)bad);
    free(idx);
    free(want);
    free(val);
    free(enc);
    return *ilen + vlen;
}

/* The default (AUTO): only what a GPU decodes, unless zstd on the values makes the segment
 * at least 20 % smaller than that; COMPACT (the default until 2026-11-26) keeps zstd on the
 * values wherever it saves 12 % of them. */
static void test_pack_default(void)
{
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    const uint64_t dims[3] = {1 << 12, 1 << 11, 1 << 10};
    blco_layout_t l;
    CHECK(blco_layout_init(&l, 3, dims, 64) == 0, "layout");
    const uint64_t n = 16384;
    uint64_t *a = xmalloc(n * 8);
    double *v = xmalloc(n * 8), *r = xmalloc(n * 8);
    int ic, vc, zstd_kept = 0, plain_kept = 0;
    size_t ilen, glen;
    /* Index columns of several widths, values from all random doubles to all ratings: the
     * rule, checked against the best zstd of the values (planes or plain, level 1). */
    static const int widths[] = {0, 3, 9, 20};
    for (int wi = 0; wi < 4; wi++) {
        gen_indices(1, 33, n, widths[wi], a);
        for (int tenths = 0; tenths <= 10; tenths++) {
            gen_values(0, n, v);
            gen_values(1, n, r);
            for (uint64_t i = 0; i < n; i++)
                if (below(10) >= (uint64_t)tenths)
                    v[i] = r[i]; /* a share tenths / 10 of random doubles */
            for (int vt = BLCO_VALUES_F64; vt <= BLCO_VALUES_F32; vt++) {
                const double plain = (vt == BLCO_VALUES_F64 ? 8.0 : 4.0) * (double)n;
                size_t seg = pack_segment(ctx, &l, BLCO_PACK_AUTO, 0, vt, a, v, n, &ic, &vc, &ilen);
                int gic, gvc;
                size_t gilen;
                glen = pack_segment(ctx, &l, BLCO_PACK_GPU, 0, vt, a, v, n, &gic, &gvc, &gilen);
                CHECK(ic == gic && ilen == gilen && !(ic & BLCO_CODEC_ZSTD),
                      "index column %#x (%zu bytes), the GPU codec's %#x (%zu)", ic, ilen, gic,
                      gilen);
                /* the GPU codec's values: the integer codec where all are whole and it is
                 * smaller, else plain */
                const size_t isz = blco_int_size(v, n, vt == BLCO_VALUES_F32);
                const int use_int = isz && isz < (size_t)plain;
                CHECK(blco_codec_device_decodes(vt, gic, gvc) &&
                          glen == gilen + (use_int ? isz : (size_t)plain) &&
                          (gvc == BLCO_VCODEC_INT) == use_int,
                      "--codec gpu: %#x %#x", gic, gvc);
                blco_codec_req_t best = {BLCO_CODEC_AUTO, 1, -1};
                size_t cap = blco_codec_value_bound(n), zlen = 0;
                uint8_t *buf = xmalloc(cap);
                int zused = 0;
                CHECK(blco_codec_value_encode(ctx, v, n, vt, &best, buf, cap, &zlen, &zused) == 0,
                      "best zstd");
                free(buf);
                const double bar = 0.8 * (double)glen, with_z = (double)(ilen + zlen);
                if (vc & BLCO_CODEC_ZSTD) {
                    zstd_kept++;
                    CHECK(vc == zused && seg == ilen + zlen && with_z <= bar + 1e-6,
                          "w %d, %d/10 random: zstd kept (%#x, %zu bytes) over %zu plain",
                          widths[wi], tenths, vc, seg, glen);
                } else {
                    plain_kept++;
                    CHECK(seg == glen && vc == gvc &&
                              (!(zused & BLCO_CODEC_ZSTD) || with_z >= bar - 1e-6),
                          "w %d, %d/10 random: plain values (%zu bytes), zstd would give %zu",
                          widths[wi], tenths, seg, ilen + zlen);
                }
                CHECK(blco_codec_device_decodes(vt, ic, vc) == !(vc & BLCO_CODEC_ZSTD),
                      "device-decodable %#x %#x", ic, vc);
                if (tenths == 0) /* ratings: the integer codec, 3 bits a value */
                    CHECK(BLCO_CODEC_BASE(vc) == BLCO_VCODEC_INT && gvc == BLCO_VCODEC_INT,
                          "ratings: %#x", vc);
                if (tenths == 10 && vt == BLCO_VALUES_F64) {
                    /* random doubles: plain by default, zstd-coded planes with COMPACT */
                    CHECK(vc == BLCO_VCODEC_F64, "random doubles: %#x", vc);
                    pack_segment(ctx, &l, BLCO_PACK_COMPACT, 0, vt, a, v, n, &ic, &vc, &ilen);
                    CHECK(vc == (BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD) &&
                              !(ic & BLCO_CODEC_ZSTD),
                          "compact, random doubles: %#x %#x", ic, vc);
                }
            }
        }
    }
    CHECK(zstd_kept > 0 && plain_kept > 0, "both outcomes: %d zstd, %d plain", zstd_kept,
          plain_kept);
    /* 6-digit decimals: the decimal codec by default and with --codec gpu, device-decodable;
     * an f32 file keeps them plain. */
    gen_values(7, n, v);
    const int dscale = blco_dec_scale(v, n);
    const size_t dsz = dscale ? blco_dec_size(v, n, dscale) : 0;
    CHECK(dscale == 6 && dsz > 0 && dsz < 3 * n, "6-digit decimals: scale %d, %zu bytes", dscale,
          dsz);
    for (int pc = 0; pc < 2; pc++) {
        const int policy = pc ? BLCO_PACK_GPU : BLCO_PACK_AUTO;
        size_t seg = pack_segment(ctx, &l, policy, 0, BLCO_VALUES_F64, a, v, n, &ic, &vc, &ilen);
        CHECK(vc == BLCO_VCODEC_DEC && seg == ilen + dsz &&
                  blco_codec_device_decodes(BLCO_VALUES_F64, ic, vc),
              "6-digit decimals, pack policy %d: %#x, %zu bytes", policy, vc, seg);
        pack_segment(ctx, &l, policy, 0, BLCO_VALUES_F32, a, v, n, &ic, &vc, &ilen);
        CHECK(BLCO_CODEC_BASE(vc) != BLCO_VCODEC_DEC &&
                  !blco_codec_device_decodes(BLCO_VALUES_F32, ic, BLCO_VCODEC_DEC),
              "6-digit decimals in an f32 file: %#x", vc);
    }
    /* A level asked for sets the values' zstd level; the indices stay device-decodable,
     * where COMPACT with a level compresses a repeating gap pattern. */
    a[0] = 0;
    for (uint64_t i = 1; i < n; i++)
        a[i] = a[i - 1] + (i % 3 ? 1 : 1000);
    gen_values(1, n, v);
    for (uint64_t i = 0; i < n; i++)
        v[i] = v[i] / 3 + 0.1; /* five values, none whole, none a short decimal */
    pack_segment(ctx, &l, BLCO_PACK_AUTO, 9, BLCO_VALUES_F64, a, v, n, &ic, &vc, &ilen);
    CHECK(ic == BLCO_ICODEC_DELTA && (vc & BLCO_CODEC_ZSTD), "auto, level 9: %#x %#x", ic, vc);
    pack_segment(ctx, &l, BLCO_PACK_COMPACT, 3, BLCO_VALUES_F64, a, v, n, &ic, &vc, &ilen);
    CHECK(ic == (BLCO_ICODEC_DELTA | BLCO_CODEC_ZSTD), "compact, level 3: %#x", ic);
    free(a);
    free(v);
    free(r);
    blco_codec_ctx_free(ctx);
}

/* ---- hostile inputs ---- */

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_hostile(void)
{
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    blco_layout_t l64, l17;
    const uint64_t d64[4] = {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16};
    const uint64_t d17[3] = {1 << 6, 1 << 6, 1 << 5};
    CHECK(blco_layout_init(&l64, 4, d64, 64) == 0 && blco_layout_init(&l17, 3, d17, 0) == 0,
          "layouts");
    blco_codec_map_t m64, m17;
    blco_codec_map_init(&m64, &l64);
    blco_codec_map_init(&m17, &l17);
    CHECK(m17.index_bits == 17, "17 bits");
    uint64_t out[300];
    uint8_t b[2048];
    const int D = BLCO_ICODEC_DELTA;

    /* A delta of 2^64 (width 64, all ones) wraps to the same index. */
    put64(b, 0);
    b[8] = 64;
    put64(b + 9, ~0ull);
    CHECK(blco_codec_index_decode(ctx, &m64, D, b, 17, 2, out) == -BLCO_EFORMAT, "wrap to equal");
    /* Two deltas of 2^63 + 1 wrap past 2^64. */
    b[8] = 64;
    put64(b + 9, 1ull << 63);
    put64(b + 17, 1ull << 63);
    CHECK(blco_codec_index_decode(ctx, &m64, D, b, 25, 3, out) == -BLCO_EFORMAT, "wrap");
    /* Past 2^17. */
    put64(b, (1 << 17) - 1);
    b[8] = 0;
    CHECK(blco_codec_index_decode(ctx, &m17, D, b, 9, 2, out) == -BLCO_EFORMAT, "past 17 bits");
    CHECK(blco_codec_index_decode(ctx, &m17, D, b, 8, 1, out) == 0 && out[0] == 0x1ffff,
          "the last index");
    put64(b, 1 << 17);
    CHECK(blco_codec_index_decode(ctx, &m17, D, b, 8, 1, out) == -BLCO_EFORMAT, "first too wide");
    /* Widths above 64. */
    put64(b, 0);
    for (int w = 65; w < 256; w += 19) {
        b[8] = (uint8_t)w;
        memset(b + 9, 0xff, 1024);
        CHECK(blco_codec_index_decode(ctx, &m64, D, b, 9 + 1024, 129, out) == -BLCO_EFORMAT,
              "width %d", w);
    }
    /* A frame missing, short input, n = 0, absurd n. */
    b[8] = 0;
    CHECK(blco_codec_index_decode(ctx, &m64, D, b, 9, 130, out) == -BLCO_EFORMAT, "frame missing");
    CHECK(blco_codec_index_decode(ctx, &m64, D, b, 7, 1, out) == -BLCO_EFORMAT, "short");
    CHECK(blco_codec_index_decode(ctx, &m64, D, b, 9, 0, out) == -BLCO_EFORMAT, "n = 0");
    CHECK(blco_codec_index_decode(ctx, &m64, BLCO_ICODEC_RAW, b, 16, 1ull << 61, out) ==
              -BLCO_EFORMAT,
          "absurd n");
    /* Raw indices with bits above the in-block width. */
    put64(b, 1 << 17);
    CHECK(blco_codec_index_decode(ctx, &m17, BLCO_ICODEC_RAW, b, 8, 1, out) == -BLCO_EFORMAT,
          "raw too wide");
    b[2] = 0;
    b[3] = 1;
    CHECK(blco_codec_index_decode(ctx, &m17, BLCO_ICODEC_NARROW, b, 4, 1, out) == -BLCO_EFORMAT,
          "narrow too wide");
    CHECK(blco_codec_index_decode(ctx, &m64, BLCO_ICODEC_NARROW, b, 4, 1, out) == -BLCO_EFORMAT,
          "narrow in a 64-bit layout");
    /* Unknown codecs are a newer version; so are unknown value codecs. */
    for (int c = 3; c < 256; c++) {
        if (BLCO_CODEC_BASE(c) <= BLCO_ICODEC_DELTA)
            continue;
        CHECK(blco_codec_index_decode(ctx, &m64, c, b, 8, 1, out) == -BLCO_EVERSION, "codec %d", c);
        if (BLCO_CODEC_BASE(c) > BLCO_VCODEC_DEC)
            CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, c, b, 8, 1, (double *)out) ==
                      -BLCO_EVERSION,
                  "value codec %d", c);
    }

    /* Integer columns: a width above 64, values past 2^53, a base past it, a value that is
     * no f32 in an f32 file, a width table cut short, bytes left over. */
    {
        uint8_t ic[64];
        double iv[40];
        memset(ic, 0, sizeof ic);
        put64(ic, 5); /* base 5, 33 values: two frames */
        ic[8] = 65;
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 10, 33, iv) ==
                  -BLCO_EFORMAT,
              "int: width 65");
        ic[8] = 0, ic[9] = 0;
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 10, 33, iv) == 0 &&
                  iv[0] == 5 && iv[32] == 5,
              "int: two frames of width 0");
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 9, 33, iv) ==
                  -BLCO_EFORMAT,
              "int: the width table cut short");
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 11, 33, iv) ==
                  -BLCO_EFORMAT,
              "int: a byte left over");
        put64(ic, (1ull << 53) - 1); /* 2^53 - 1 + 2 in the last value: past 2^53 */
        ic[9] = 2;
        ic[10] = 2;
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 11, 33, iv) ==
                  -BLCO_EFORMAT,
              "int: a value past 2^53");
        ic[10] = 1;
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 11, 33, iv) == 0 &&
                  iv[32] == 0x1p53,
              "int: 2^53 itself");
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F32, BLCO_VCODEC_INT, ic, 11, 33, iv) ==
                  -BLCO_EFORMAT,
              "int: 2^53 - 1 is no f32");
        put64(ic, (uint64_t)-(int64_t)((1ull << 53) + 1));
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_INT, ic, 11, 33, iv) ==
                  -BLCO_EFORMAT,
              "int: a base below -2^53");
    }

    /* zstd frames that state another size, no size, two frames, a skippable frame. */
    uint64_t raw[64];
    for (int i = 0; i < 64; i++)
        raw[i] = (uint64_t)i * 3;
    uint8_t z[1024];
    const int RZ = BLCO_ICODEC_RAW | BLCO_CODEC_ZSTD;
    size_t zl = ZSTD_compress(z, sizeof z, raw, 8 * 64, 1);
    CHECK(blco_codec_index_decode(ctx, &m64, RZ, z, zl, 64, out) == 0 && out[63] == 189, "valid");
    CHECK(blco_codec_index_decode(ctx, &m64, RZ, z, zl, 63, out) == -BLCO_EFORMAT, "larger");
    CHECK(blco_codec_index_decode(ctx, &m64, RZ, z, zl, 65, out) == -BLCO_EFORMAT, "smaller");
    CHECK(blco_codec_index_decode(ctx, &m64, RZ | 1, z, zl, 128, out) == -BLCO_EFORMAT,
          "narrow in a 64-bit layout, zstd");
    CHECK(blco_codec_index_decode(ctx, &m17, RZ | 1, z, zl, 127, out) == -BLCO_EFORMAT &&
              blco_codec_index_decode(ctx, &m17, RZ | 1, z, zl, 128, out) == 0,
          "narrow size");
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
    size_t nl = ZSTD_compress2(cc, b, sizeof b, raw, 8 * 64);
    CHECK(!ZSTD_isError(nl) &&
              blco_codec_index_decode(ctx, &m64, RZ, b, nl, 64, out) == -BLCO_EFORMAT,
          "no content size");
    ZSTD_freeCCtx(cc);
    size_t h1 = ZSTD_compress(b, sizeof b, raw, 8 * 32, 1);
    size_t h2 = ZSTD_compress(b + h1, sizeof b - h1, raw + 32, 8 * 32, 1);
    CHECK(blco_codec_index_decode(ctx, &m64, RZ, b, h1 + h2, 64, out) == -BLCO_EFORMAT,
          "two frames");
    memcpy(b, z, zl);
    b[zl] = 0;
    CHECK(blco_codec_index_decode(ctx, &m64, RZ, b, zl + 1, 64, out) == -BLCO_EFORMAT,
          "frame and a byte");
    static const uint8_t skip[12] = {0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4};
    CHECK(blco_codec_index_decode(ctx, &m64, RZ, skip, 12, 64, out) == -BLCO_EFORMAT &&
              blco_codec_index_decode(ctx, &m64, D | BLCO_CODEC_ZSTD, skip, 12, 1, out) ==
                  -BLCO_EFORMAT,
          "skippable frame");
    /* A delta column zstd frame stating more than any delta column of n can be. */
    uint8_t *big = calloc(1, 4096), *zb = xmalloc(8192);
    size_t bl = ZSTD_compress(zb, 8192, big, blco_delta_bound(2) + 1, 1);
    CHECK(blco_codec_index_decode(ctx, &m64, D | BLCO_CODEC_ZSTD, zb, bl, 2, out) == -BLCO_EFORMAT,
          "oversized delta frame");
    bl = ZSTD_compress(zb, 8192, big, 17, 1); /* the right size of zeros: a valid column */
    CHECK(blco_codec_index_decode(ctx, &m64, D | BLCO_CODEC_ZSTD, zb, bl, 2, out) == -BLCO_EFORMAT,
          "zero width, but 8 bytes more than it says");
    bl = ZSTD_compress(zb, 8192, big, 9, 1);
    CHECK(blco_codec_index_decode(ctx, &m64, D | BLCO_CODEC_ZSTD, zb, bl, 2, out) == 0 &&
              out[0] == 0 && out[1] == 1,
          "a valid compressed delta column");
    free(big);
    free(zb);

    /* Garbage of every kind: any result, never a crash; successes keep the invariants. */
    for (int it = 0; it < 20000; it++) {
        size_t len = below(it % 10 == 0 ? 2048 : 64);
        uint64_t n = 1 + below(it % 7 == 0 ? 300 : 4);
        int codec = (int)below(256);
        uint8_t *g = xmalloc(len);
        for (size_t i = 0; i < len; i++)
            g[i] = (uint8_t)(below(3) ? rnd() : below(4));
        if (len >= 4 && it % 3 == 0)
            memcpy(g, "\x28\xb5\x2f\xfd", 4);
        uint64_t *o = xmalloc(n * 8);
        const blco_codec_map_t *m = it & 1 ? &m64 : &m17;
        int err = blco_codec_index_decode(ctx, m, codec, g, len, n, o);
        CHECK(err == 0 || err == -BLCO_EFORMAT || err == -BLCO_EVERSION, "garbage: %d", err);
        if (err == 0)
            check_decoded(m, codec, o, n, 0);
        err = blco_codec_value_decode(ctx, it & 2 ? BLCO_VALUES_F64 : BLCO_VALUES_F32, codec, g,
                                      len, n, (double *)o);
        CHECK(err == 0 || err == -BLCO_EFORMAT || err == -BLCO_EVERSION, "value garbage: %d", err);
        free(o);
        free(g);
    }
    blco_codec_ctx_free(ctx);
}

/* ---- the decimal codec ---- */

/* Decodes an encoded decimal column and compares it bit for bit with want. */
static int dec_same(const uint8_t *enc, size_t len, uint64_t n, const double *want)
{
    double *out = xmalloc(n * 8);
    int err = blco_codec_value_decode(NULL, BLCO_VALUES_F64, BLCO_VCODEC_DEC, enc, len, n, out);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n && err == 0; i++)
        bad += bits_of(out[i]) != bits_of(want[i]);
    free(out);
    return err == 0 && bad == 0;
}

static void test_decimal(void)
{
    /* The scale: each value's smallest, the largest of them; none where a value is no
     * decimal of at most 22 places, is -0, or needs a whole number past 2^53. */
    const double a[] = {0.5, 0.25, 0.125};
    CHECK(blco_dec_scale(a, 3) == 3, "0.5, 0.25, 0.125: scale %d", blco_dec_scale(a, 3));
    /* (1/3 is the f64 nearest to 0.3333333333333333: 16 places) */
    const double tiny[] = {1e-22}, tinier[] = {1e-23}, third[] = {1.0 / 3};
    CHECK(blco_dec_scale(tiny, 1) == 22 && blco_dec_scale(tinier, 1) == 0 &&
              blco_dec_scale(third, 1) == 16,
          "1e-22, 1e-23, 1/3: %d %d %d", blco_dec_scale(tiny, 1), blco_dec_scale(tinier, 1),
          blco_dec_scale(third, 1));
    const double mz[] = {0.5, -0.0}, sum[] = {0.1 + 0.2}, huge[] = {INFINITY, 0.5};
    CHECK(blco_dec_scale(mz, 2) == 0 && blco_dec_scale(sum, 1) == 0 &&
              blco_dec_scale(huge, 2) == 0,
          "-0, 0.30000000000000004, infinity: no scale");
    /* 5e14 is m / 10^3 only with m = 5e17, past 2^53: the scale the search gives fails the
     * size's check, and AUTO keeps the plain column (the explicit codec refuses). */
    const double wide[] = {5e14, 0.001};
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    CHECK(blco_dec_scale(wide, 2) == 3 && blco_dec_size(wide, 2, 3) == 0, "5e14 and 0.001");
    uint8_t buf[256];
    size_t len = 0;
    int used = -1;
    blco_codec_req_t dec = {BLCO_VCODEC_DEC, 0, 0}, aut = {BLCO_CODEC_AUTO, 0, 0};
    CHECK(blco_codec_value_encode(ctx, wide, 2, BLCO_VALUES_F64, &dec, buf, sizeof buf, &len,
                                  &used) == -EINVAL,
          "explicit decimal of 5e14 and 0.001");
    CHECK(blco_codec_value_encode(ctx, wide, 2, BLCO_VALUES_F64, &aut, buf, sizeof buf, &len,
                                  &used) == 0 &&
              used == BLCO_VCODEC_F64,
          "auto of 5e14 and 0.001: %#x", used);
    CHECK(blco_codec_value_encode(ctx, a, 3, BLCO_VALUES_F32, &dec, buf, sizeof buf, &len,
                                  &used) == -EINVAL,
          "the decimal codec in an f32 column");

    /* Values as a text parser gives them: strtod of "%d.%0Nd" strings, N = 1..9 per
     * column, come back bit for bit, at a scale no larger than N. */
    const uint64_t n = 4096;
    double *v = xmalloc(n * 8);
    size_t cap = blco_codec_value_bound(n);
    uint8_t *enc = xmalloc(cap);
    for (int places = 1; places <= 9; places++) {
        uint64_t lim = 1;
        for (int k = 0; k < places; k++)
            lim *= 10;
        for (uint64_t i = 0; i < n; i++) {
            char txt[64];
            snprintf(txt, sizeof txt, "%s%llu.%0*llu", rnd() % 5 ? "" : "-",
                     (unsigned long long)(rnd() % (i % 7 ? 10 : 100000)), places,
                     (unsigned long long)(rnd() % lim));
            v[i] = strtod(txt, NULL);
            if (v[i] == 0)
                v[i] = 0; /* "-0.000" is -0, which no decimal column holds */
        }
        v[0] = 0.0; /* a zero among them: +0 is 0 / 10^s */
        const int scale = blco_dec_scale(v, n);
        const size_t dsz = scale ? blco_dec_size(v, n, scale) : 0;
        CHECK(scale >= 1 && scale <= places && dsz > 0 && dsz < 8 * n,
              "%d places: scale %d, %zu bytes", places, scale, dsz);
        int err = blco_codec_value_encode(ctx, v, n, BLCO_VALUES_F64, &dec, enc, cap, &len, &used);
        CHECK(err == 0 && len == dsz && dec_same(enc, len, n, v), "%d places: round trip %d",
              places, err);
        /* The default picks it (device-decodable, smaller than plain). */
        err = blco_codec_value_encode(ctx, v, n, BLCO_VALUES_F64, &aut, enc, cap, &len, &used);
        CHECK(err == 0 && BLCO_CODEC_BASE(used) == BLCO_VCODEC_DEC, "%d places: auto %#x",
              places, used);
    }

    /* Hostile columns: a scale of 0, 23 or 2^63, a column cut short, an f32 reader. */
    uint8_t c[64];
    double o[40];
    memset(c, 0, sizeof c);
    put64(c, 2);      /* scale 2 */
    put64(c + 8, 5);  /* base 5 */
    /* 33 values, two frames of width 0: the scale, the base and two widths, 18 bytes */
    CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_DEC, c, 18, 33, o) == 0 &&
              o[0] == 0.05 && o[32] == 0.05,
          "decimal: 5 / 10^2 twice");
    CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F32, BLCO_VCODEC_DEC, c, 18, 33, o) ==
              -BLCO_EFORMAT,
          "decimal: an f32 reader");
    CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_DEC, c, 17, 33, o) ==
                  -BLCO_EFORMAT &&
              blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_DEC, c, 7, 1, o) ==
                  -BLCO_EFORMAT,
          "decimal: cut short");
    static const uint64_t bad_scales[] = {0, 23, 1ull << 63};
    for (int k = 0; k < 3; k++) {
        put64(c, bad_scales[k]);
        CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_DEC, c, 18, 33, o) ==
                  -BLCO_EFORMAT,
              "decimal: scale %llu", (unsigned long long)bad_scales[k]);
    }
    put64(c, 22);
    CHECK(blco_codec_value_decode(ctx, BLCO_VALUES_F64, BLCO_VCODEC_DEC, c, 18, 33, o) == 0 &&
              o[7] == 5e-22,
          "decimal: scale 22");
    free(v);
    free(enc);
    blco_codec_ctx_free(ctx);
}

/* ---- segments and real tensors ---- */

static void test_segments(void)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = 3;
    g.dims[0] = 3000;
    g.dims[1] = 700;
    g.dims[2] = 90;
    g.skew[0] = g.skew[1] = g.skew[2] = 1.7;
    g.nnz = 200000;
    g.seed = 7;
    blco_coo_t *coo = NULL;
    CHECK(blco_gen_coo(&g, NULL, &coo) == 0, "gen");
    if (!coo)
        return;
    static const int lines[] = {64, 12, 5};
    blco_codec_ctx_t *ctx;
    CHECK(blco_codec_ctx_new(&ctx) == 0, "ctx");
    for (int li = 0; li < 3; li++) {
        blco_build_opts_t bo;
        blco_build_opts_default(&bo);
        bo.line_bits = lines[li];
        bo.max_block_nnz = 5000;
        blco_tensor_t *t = NULL;
        CHECK(blco_tensor_from_coo(coo, &bo, NULL, &t, NULL) == 0, "build");
        if (!t)
            continue;
        const blco_layout_t *l = &t->layout;
        blco_codec_map_t m;
        blco_codec_map_init(&m, l);
        uint64_t maxn = 0;
        for (uint64_t b = 0; b < t->nblocks; b++)
            maxn = MAX(maxn, t->blocks[b].nnz);
        uint64_t *alto = xmalloc(maxn * 8), *idx = xmalloc(maxn * 8);
        double *val = xmalloc(maxn * 8);
        size_t cap = blco_codec_index_bound(maxn) + blco_codec_value_bound(maxn);
        uint8_t *enc = xmalloc(cap);
        for (uint64_t b = 0; b < t->nblocks; b++) {
            const blco_block_t *bl = &t->blocks[b];
            uint64_t n = bl->nnz, bad = 0;
            /* In-block ALTO indices re-derived from the coordinates. */
            for (uint64_t k = 0; k < n; k++) {
                uint64_t c[BLCO_MAX_MODES], a[2];
                double v;
                blco_tensor_get(t, bl->start + k, c, &v);
                blco_layout_alto(l, c, a);
                alto[k] = a[0] & ones(l->line_bits);
                bad += blco_codec_index_to_alto(&m, t->idx[bl->start + k]) != alto[k];
            }
            CHECK(bad == 0, "block %llu: %llu BLCO indices do not map back", (unsigned long long)b,
                  (unsigned long long)bad);
            CHECK(blco_codec_index_check(&m, bl->coord, t->idx + bl->start, n) == 0, "in dims");
            for (int pc = BLCO_PACK_AUTO; pc <= BLCO_PACK_COMPACT; pc++) {
                if (b % 7 && pc != BLCO_PACK_AUTO)
                    continue;
                blco_segment_t sg;
                memset(&sg, 0, sizeof sg);
                size_t il, vl;
                int err = blco_codec_encode_segment(
                    b & 1 ? NULL : ctx, l, pc, pc == 0 ? 0 : 2, BLCO_VALUES_F64, alto,
                    t->val + bl->start, n, enc, cap, &il, &vl, &sg.index_codec, &sg.value_codec);
                CHECK(err == 0, "encode segment, pack codec %d: %s", pc, blco_strerror(err));
                sg.nnz = n;
                sg.index_bytes = il;
                sg.value_bytes = vl;
                sg.raw_index_bits = (uint32_t)m.index_bits;
                uint8_t *st = exact(enc, il + vl);
                err = blco_codec_decode_segment(b & 2 ? NULL : ctx, l, BLCO_VALUES_F64, &sg, st,
                                                idx, val);
                CHECK(err == 0 && !memcmp(idx, t->idx + bl->start, n * 8) &&
                          !memcmp(val, t->val + bl->start, n * 8),
                      "segment round trip, pack codec %d: %d", pc, err);
                if (pc == BLCO_PACK_RAW)
                    CHECK(sg.index_codec == 0 && sg.value_codec == 0, "raw codecs");
                if (pc == BLCO_PACK_DELTA)
                    CHECK(sg.index_codec == BLCO_ICODEC_DELTA, "delta codec");
                if (pc == BLCO_PACK_NARROW)
                    CHECK(sg.index_codec == (m.index_bits <= 32 ? 1 : 0), "narrow codec");
                sg.raw_index_bits++;
                CHECK(blco_codec_decode_segment(ctx, l, BLCO_VALUES_F64, &sg, st, idx, val) ==
                          -BLCO_EFORMAT,
                      "raw_index_bits mismatch");
                free(st);
            }
        }
        /* An index naming a row past the dims (3000 is not a power of two) is caught. */
        const blco_block_t *last = &t->blocks[t->nblocks - 1];
        if (li == 0) {
            uint64_t save = t->idx[last->start];
            t->idx[last->start] = ones(m.index_bits);
            int err = blco_codec_index_check(&m, last->coord, t->idx + last->start, last->nnz);
            CHECK(err == -BLCO_EFORMAT, "out of dims: %d", err);
            t->idx[last->start] = save;
        }
        uint64_t bc[BLCO_MAX_MODES];
        memcpy(bc, last->coord, sizeof bc);
        bc[0] = l->dims[0];
        CHECK(blco_codec_index_check(&m, bc, t->idx + last->start, 1) == -BLCO_EFORMAT,
              "block coordinate out of dims");
        free(alto);
        free(idx);
        free(val);
        free(enc);
        blco_tensor_destroy(t);
    }
    blco_codec_ctx_free(ctx);
    blco_coo_destroy(coo);
}

int main(void)
{
    test_map();
    test_index_roundtrips();
    test_value_roundtrips();
    test_auto();
    test_pack_default();
    test_hostile();
    test_decimal();
    test_segments();
    return check_done();
}
