/* Segment column codecs: the ALTO-to-BLCO index map, raw and narrow index columns, plain
 * and byte-plane value columns (the integer and decimal ones are in codec_int.c), the zstd
 * layer over any of them, the AUTO policy, and the segment-level calls of the file writer
 * and reader. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "blco_internal.h"
#include "bytes_le.h"
#include "codec.h"

#define DEFAULT_ZSTD_LEVEL 3
#define AUTO_MIN_SAVING 0.10
/* zstd tried without being asked for must pay for its decoding time. At 12 % the byte
 * planes of random doubles qualify (9.3 instead of 10.6 bytes per nonzero for a 3-mode
 * f64 tensor) and still decode at 3.2-3.9 GB/s per core, well above NVMe speed; see
 * perf/results/2026-11-21-codec.jsonl. */
#define UNASKED_ZSTD_LEVEL 1
#define UNASKED_MIN_SAVING 0.12
/* The default (BLCO_PACK_AUTO) keeps to what a GPU decodes unless zstd on the values makes
 * the whole segment at least this much smaller: the plain values cost +9-14 % of file on
 * random doubles and 6-digit values (kept plain), +50 % to +275 % on count tensors (kept
 * zstd-coded); see perf/results/2026-11-26-codec-default.jsonl. */
#define DEVICE_MIN_SEGMENT_SAVING 0.20
/* Above this many in-block fields the byte tables beat a chain of pext (measured with
 * perf/bench_codec on Zen 4). */
#define PEXT_MAX_FIELDS 6

struct blco_codec_ctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *buf[2];
    size_t cap[2];
    int have_map;
    blco_layout_t layout;
    blco_codec_map_t map;
};

/* In place: a u64 array read from little-endian bytes. */
static void fix_u64(uint64_t *v, uint64_t n)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (uint64_t i = 0; i < n; i++)
        v[i] = __builtin_bswap64(v[i]);
#else
    (void)v;
    (void)n;
#endif
}

static uint64_t low_ones(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

/* ---- the map ---- */

static int slow_pext(void)
{
#if defined(__BMI2__) && defined(__x86_64__)
    /* AMD before Zen 3 runs pext in microcode, tens of cycles each. */
    __builtin_cpu_init();
    return __builtin_cpu_is("amdfam15h") || __builtin_cpu_is("amdfam17h");
#else
    return 1;
#endif
}

void blco_codec_map_init(blco_codec_map_t *m, const blco_layout_t *l)
{
    memset(m, 0, sizeof *m);
    m->order = l->order;
    int ib = 0;
    for (int n = 0; n < l->order; n++)
        ib += l->low_bits[n];
    m->index_bits = ib;
    uint64_t below = low_ones(ib);
    int perm[64], inv[64];
    for (int n = 0; n < l->order; n++) {
        m->dims[n] = l->dims[n];
        m->low_mask[n] = l->low_mask[n];
        m->pos[n] = l->pos[n];
        uint64_t fm = l->alto_mask[n][0] & below;
        assert(__builtin_popcountll(fm) == l->low_bits[n]);
        if (!fm)
            continue;
        m->field_alto[m->nfield] = fm;
        m->field_pos[m->nfield++] = l->pos[n];
        int rank = 0;
        for (int p = 0; p < ib; p++)
            if (fm >> p & 1) {
                perm[p] = l->pos[n] + rank++;
                inv[perm[p]] = p;
            }
    }
    m->use_table = m->nfield > PEXT_MAX_FIELDS || slow_pext();
    /* Each table entry is the entry without its lowest set bit plus that bit's image. */
    for (int j = 0; j < 8; j++) {
        for (int b = 1; b < 256; b++) {
            int t = __builtin_ctz((unsigned)b), p = 8 * j + t;
            uint64_t ti = p < ib ? 1ull << perm[p] : 0, ta = p < ib ? 1ull << inv[p] : 0;
            m->to_index[j][b] = m->to_index[j][b & (b - 1)] | ti;
            m->to_alto[j][b] = m->to_alto[j][b & (b - 1)] | ta;
        }
    }
}

void blco_codec_map_to_alto(const blco_codec_map_t *m, const uint64_t *idx, uint64_t *out,
                            uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = blco_codec_index_to_alto(m, idx[i]);
}

int blco_codec_index_check(const blco_codec_map_t *m, const uint64_t *bcoord, const uint64_t *idx,
                           uint64_t n)
{
    /* Coordinate = block coordinate | field, the block coordinate's low bits being zero:
     * within dims when field <= dims - 1 - block coordinate. */
    uint64_t lim[BLCO_MAX_MODES], mask[BLCO_MAX_MODES];
    int pos[BLCO_MAX_MODES], nc = 0;
    for (int d = 0; d < m->order; d++) {
        if (bcoord[d] >= m->dims[d] || (bcoord[d] & m->low_mask[d]))
            return -BLCO_EFORMAT;
        uint64_t room = m->dims[d] - 1 - bcoord[d];
        if (room >= m->low_mask[d])
            continue;
        lim[nc] = room;
        mask[nc] = m->low_mask[d];
        pos[nc++] = m->pos[d];
    }
    uint64_t bad = 0;
    for (int c = 0; c < nc; c++) {
        uint64_t li = lim[c], ma = mask[c];
        int sh = pos[c];
        for (uint64_t i = 0; i < n; i++)
            bad |= ((idx[i] >> sh) & ma) > li;
    }
    return bad ? -BLCO_EFORMAT : 0;
}

/* ---- contexts and scratch ---- */

int blco_codec_ctx_new(blco_codec_ctx_t **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

void blco_codec_ctx_free(blco_codec_ctx_t *c)
{
    if (!c)
        return;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    free(c->buf[0]);
    free(c->buf[1]);
    free(c);
}

static int scratch(blco_codec_ctx_t *c, int i, size_t need, uint8_t **out)
{
    if (need > c->cap[i]) {
        size_t nc = BLCO_MAX(need, c->cap[i] + c->cap[i] / 2);
        uint8_t *p = malloc(nc);
        if (!p) {
            p = malloc(need);
            nc = need;
        }
        if (!p)
            return -ENOMEM;
        free(c->buf[i]);
        c->buf[i] = p;
        c->cap[i] = nc;
    }
    *out = c->buf[i];
    return 0;
}

/* The caller's context, or a temporary one it must free with ctx_done. */
static int ctx_get(blco_codec_ctx_t **ctx, blco_codec_ctx_t **tmp)
{
    *tmp = NULL;
    if (*ctx)
        return 0;
    int err = blco_codec_ctx_new(tmp);
    *ctx = *tmp;
    return err;
}

static const blco_codec_map_t *ctx_map(blco_codec_ctx_t *c, const blco_layout_t *l)
{
    const blco_layout_t *o = &c->layout;
    int same = c->have_map && o->order == l->order && o->line_bits == l->line_bits &&
               o->total_bits == l->total_bits;
    for (int n = 0; same && n < l->order; n++)
        same = o->dims[n] == l->dims[n] && o->low_bits[n] == l->low_bits[n] &&
               o->pos[n] == l->pos[n] && o->alto_mask[n][0] == l->alto_mask[n][0];
    if (!same) {
        c->layout = *l;
        blco_codec_map_init(&c->map, l);
        c->have_map = 1;
    }
    return &c->map;
}

/* ---- zstd ---- */

size_t blco_codec_index_bound(uint64_t n)
{
    size_t b = blco_delta_bound(n);
    return b >= SIZE_MAX / 2 ? SIZE_MAX : ZSTD_COMPRESSBOUND(b);
}

size_t blco_codec_value_bound(uint64_t n)
{
    return n >= SIZE_MAX / 16 ? SIZE_MAX : BLCO_MAX(ZSTD_COMPRESSBOUND(8 * n), blco_dec_bound(n));
}

static int zcompress(blco_codec_ctx_t *c, int level, const void *src, size_t n, uint8_t *dst,
                     size_t cap, size_t *len)
{
    if (!c->cctx && !(c->cctx = ZSTD_createCCtx()))
        return -ENOMEM;
    level = BLCO_MAX(ZSTD_minCLevel(), BLCO_MIN(level, ZSTD_maxCLevel()));
    size_t r = ZSTD_compressCCtx(c->cctx, dst, cap, src, n, level);
    if (ZSTD_isError(r)) {
        ZSTD_ErrorCode e = ZSTD_getErrorCode(r);
        return e == ZSTD_error_dstSize_tooSmall    ? -ENOSPC
               : e == ZSTD_error_memory_allocation ? -ENOMEM
                                                   : -BLCO_EFORMAT;
    }
    *len = r;
    return 0;
}

/* The decompressed size a stored frame states; it must be one whole frame, nothing else,
 * stating a size in [lo, hi]. */
static int zsize(const uint8_t *in, size_t len, size_t lo, size_t hi, size_t *size)
{
    size_t fsz = ZSTD_findFrameCompressedSize(in, len);
    if (ZSTD_isError(fsz) || fsz != len)
        return -BLCO_EFORMAT;
    unsigned long long cs = ZSTD_getFrameContentSize(in, len);
    if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN || cs < lo || cs > hi)
        return -BLCO_EFORMAT;
    *size = (size_t)cs;
    return 0;
}

static int zdecompress(blco_codec_ctx_t *c, const uint8_t *in, size_t len, void *dst, size_t size)
{
    if (!c->dctx && !(c->dctx = ZSTD_createDCtx()))
        return -ENOMEM;
    size_t r = ZSTD_decompressDCtx(c->dctx, dst, size, in, len);
    if (ZSTD_isError(r))
        return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? -ENOMEM : -BLCO_EFORMAT;
    return r == size ? 0 : -BLCO_EFORMAT;
}

/* Decompresses into a scratch buffer; *out and *size give the base encoding. */
static int zunwrap(blco_codec_ctx_t *c, const uint8_t *in, size_t len, size_t lo, size_t hi,
                   const uint8_t **out, size_t *size)
{
    uint8_t *dst;
    int err;
    if ((err = zsize(in, len, lo, hi, size)) < 0 || (err = scratch(c, 0, *size, &dst)) < 0 ||
        (err = zdecompress(c, in, len, dst, *size)) < 0)
        return err;
    *out = dst;
    return 0;
}

/* Whether zstd's `z` bytes instead of `base` are worth keeping. */
static int worth(size_t z, size_t base, double min_saving)
{
    if (min_saving < 0)
        return z < base;
    return (double)z <= (double)base * (1.0 - min_saving);
}

static double req_saving(const blco_codec_req_t *r)
{
    return r->min_saving == 0 ? AUTO_MIN_SAVING : r->min_saving;
}

/* ---- index columns ---- */

static int put_index_base(const blco_codec_map_t *m, int base, const uint64_t *alto, uint64_t n,
                          uint8_t *out, size_t cap, size_t *len)
{
    if (base == BLCO_ICODEC_DELTA)
        return blco_delta_encode(alto, n, out, cap, len);
    size_t w = base == BLCO_ICODEC_RAW ? 8 : 4;
    if (cap / w < n)
        return -ENOSPC;
    uint64_t tmp[256];
    for (uint64_t i = 0; i < n; i += 256) {
        uint64_t k = BLCO_MIN(256u, n - i);
        blco_codec_map_to_index(m, alto + i, tmp, k);
        if (w == 8)
            for (uint64_t j = 0; j < k; j++)
                blco_put_u64(out + 8 * (i + j), tmp[j]);
        else
            for (uint64_t j = 0; j < k; j++)
                blco_put_u32(out + 4 * (i + j), (uint32_t)tmp[j]);
    }
    *len = w * n;
    return 0;
}

int blco_codec_index_encode(blco_codec_ctx_t *ctx, const blco_codec_map_t *m, const uint64_t *alto,
                            uint64_t n, const blco_codec_req_t *req, uint8_t *out, size_t cap,
                            size_t *len, int *used)
{
    if (!n || !m || !req || n > SIZE_MAX / 16)
        return -EINVAL;
    uint64_t lim = low_ones(m->index_bits), bad = alto[0] > lim;
    for (uint64_t i = 1; i < n; i++)
        bad |= alto[i] <= alto[i - 1];
    if (bad || alto[n - 1] > lim)
        return -EINVAL;

    int narrow_ok = m->index_bits <= 32, base, level = 0, codec = req->codec;
    size_t dsize = 0, blen;
    if (codec == BLCO_CODEC_AUTO) {
        dsize = blco_delta_size(alto, n);
        base = narrow_ok ? BLCO_ICODEC_NARROW : BLCO_ICODEC_RAW;
        blen = narrow_ok ? 4 * n : 8 * n;
        if (dsize < blen)
            base = BLCO_ICODEC_DELTA, blen = dsize;
        level = req->zstd_level;
    } else {
        base = BLCO_CODEC_BASE(codec);
        if ((codec & ~(BLCO_CODEC_ZSTD | 0x7f)) || base > BLCO_ICODEC_DELTA ||
            (base == BLCO_ICODEC_NARROW && !narrow_ok))
            return -EINVAL;
        if (codec & BLCO_CODEC_ZSTD)
            level = req->zstd_level ? req->zstd_level : DEFAULT_ZSTD_LEVEL;
        blen = base == BLCO_ICODEC_RAW      ? 8 * n
               : base == BLCO_ICODEC_NARROW ? 4 * n
                                            : blco_delta_size(alto, n);
    }
    if (!level) {
        *used = base;
        return put_index_base(m, base, alto, n, out, cap, len);
    }

    blco_codec_ctx_t *tmp;
    uint8_t *b;
    size_t zlen = 0;
    int err = ctx_get(&ctx, &tmp);
    if (err < 0 || (err = scratch(ctx, 0, blen, &b)) < 0 ||
        (err = put_index_base(m, base, alto, n, b, blen, &blen)) < 0)
        goto out;
    err = zcompress(ctx, level, b, blen, out, cap, &zlen);
    if (codec != BLCO_CODEC_AUTO) {
        *used = base | BLCO_CODEC_ZSTD;
        *len = zlen;
        goto out;
    }
    if (err == -ENOMEM)
        goto out;
    if (err == 0 && worth(zlen, blen, req_saving(req))) {
        *used = base | BLCO_CODEC_ZSTD;
        *len = zlen;
    } else if (blen > cap) {
        err = -ENOSPC;
    } else {
        memcpy(out, b, blen);
        *used = base;
        *len = blen;
        err = 0;
    }
out:
    blco_codec_ctx_free(tmp);
    return err;
}

/* Checks that no index has bits at or above index_bits. */
static int check_width(const uint64_t *v, uint64_t n, int index_bits)
{
    if (index_bits >= 64)
        return 0;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc |= v[i];
    return acc >> index_bits ? -BLCO_EFORMAT : 0;
}

static void widen32(const uint8_t *in, uint64_t n, uint64_t *out)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = blco_get_u32(in + 4 * i);
}

int blco_codec_index_decode(blco_codec_ctx_t *ctx, const blco_codec_map_t *m, int codec,
                            const uint8_t *in, size_t len, uint64_t n, uint64_t *out)
{
    int base = BLCO_CODEC_BASE(codec), ib = m ? m->index_bits : 64;
    if (codec < 0 || codec > 0xff)
        return -EINVAL;
    if (base > BLCO_ICODEC_DELTA)
        return -BLCO_EVERSION;
    if (n == 0 || n > SIZE_MAX / 16 || (base == BLCO_ICODEC_NARROW && ib > 32))
        return -BLCO_EFORMAT;
    if (!(codec & BLCO_CODEC_ZSTD)) {
        switch (base) {
        case BLCO_ICODEC_RAW:
            if (len != 8 * n)
                return -BLCO_EFORMAT;
            memcpy(out, in, len);
            fix_u64(out, n);
            return check_width(out, n, ib);
        case BLCO_ICODEC_NARROW:
            if (len != 4 * n)
                return -BLCO_EFORMAT;
            widen32(in, n, out);
            return check_width(out, n, ib);
        default: return blco_delta_decode(m, ib, in, len, n, out);
        }
    }

    blco_codec_ctx_t *tmp;
    const uint8_t *b;
    size_t size;
    int err = ctx_get(&ctx, &tmp);
    if (err < 0)
        goto out;
    switch (base) {
    case BLCO_ICODEC_RAW:
        /* Straight into the output: the frame must state exactly its size. */
        if ((err = zsize(in, len, 8 * n, 8 * n, &size)) < 0 ||
            (err = zdecompress(ctx, in, len, out, size)) < 0)
            break;
        fix_u64(out, n);
        err = check_width(out, n, ib);
        break;
    case BLCO_ICODEC_NARROW:
        if ((err = zunwrap(ctx, in, len, 4 * n, 4 * n, &b, &size)) < 0)
            break;
        widen32(b, n, out);
        err = check_width(out, n, ib);
        break;
    default: {
        uint64_t frames = (n - 1 + BLCO_DELTA_FRAME - 1) / BLCO_DELTA_FRAME;
        if ((err = zunwrap(ctx, in, len, 8 + frames, blco_delta_bound(n), &b, &size)) < 0)
            break;
        err = blco_delta_decode(m, ib, b, size, n, out);
        break;
    }
    }
out:
    blco_codec_ctx_free(tmp);
    return err;
}

/* ---- value columns ---- */

/* Whether a base value codec belongs to value_type f64 only (integer: to both). */
static int is_f64(int base)
{
    return base == BLCO_VCODEC_F64 || base == BLCO_VCODEC_F64_PLANES || base == BLCO_VCODEC_DEC;
}

static uint64_t f64_bits(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    return u;
}

static uint32_t f32_bits(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Writes the base encoding of n values (elem * n bytes). */
static void put_values(int base, const double *val, uint64_t n, uint8_t *out)
{
    switch (base) {
    case BLCO_VCODEC_F64:
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        for (uint64_t i = 0; i < n; i++)
            blco_put_u64(out + 8 * i, f64_bits(val[i]));
#else
        memcpy(out, val, 8 * n);
#endif
        break;
    case BLCO_VCODEC_F32:
        for (uint64_t i = 0; i < n; i++)
            blco_put_u32(out + 4 * i, f32_bits(val[i]));
        break;
    case BLCO_VCODEC_F64_PLANES:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t u = f64_bits(val[i]);
            for (int k = 0; k < 8; k++)
                out[k * n + i] = (uint8_t)(u >> (8 * k));
        }
        break;
    default:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u = f32_bits(val[i]);
            for (int k = 0; k < 4; k++)
                out[k * n + i] = (uint8_t)(u >> (8 * k));
        }
        break;
    }
}

/* Decodes a base encoding of exactly the right size. */
static void get_values(int base, const uint8_t *in, uint64_t n, double *out)
{
    switch (base) {
    case BLCO_VCODEC_F64:
        memcpy(out, in, 8 * n);
        fix_u64((uint64_t *)out, n);
        break;
    case BLCO_VCODEC_F32:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u = blco_get_u32(in + 4 * i);
            float f;
            memcpy(&f, &u, 4);
            out[i] = f;
        }
        break;
    case BLCO_VCODEC_F64_PLANES: {
        const uint8_t *p0 = in, *p1 = in + n, *p2 = in + 2 * n, *p3 = in + 3 * n;
        const uint8_t *p4 = in + 4 * n, *p5 = in + 5 * n, *p6 = in + 6 * n, *p7 = in + 7 * n;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t u = (uint64_t)p0[i] | (uint64_t)p1[i] << 8 | (uint64_t)p2[i] << 16 |
                         (uint64_t)p3[i] << 24 | (uint64_t)p4[i] << 32 | (uint64_t)p5[i] << 40 |
                         (uint64_t)p6[i] << 48 | (uint64_t)p7[i] << 56;
            memcpy(out + i, &u, 8);
        }
        break;
    }
    default: {
        const uint8_t *p0 = in, *p1 = in + n, *p2 = in + 2 * n, *p3 = in + 3 * n;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 |
                         (uint32_t)p3[i] << 24;
            float f;
            memcpy(&f, &u, 4);
            out[i] = f;
        }
        break;
    }
    }
}

/* The device-decodable base of a value column: the integer codec when every value is a
 * whole number and it is smaller, else (f64) the decimal codec when every value is m / 10^s
 * and it is smaller, else the plain column. *size receives its size, *scale the decimal
 * codec's scale (0 for the others). */
static int value_base(const double *val, uint64_t n, int f64, size_t *size, int *scale)
{
    const size_t plain = (f64 ? 8 : 4) * n, isz = blco_int_size(val, n, !f64);
    *size = plain;
    *scale = 0;
    if (isz && isz < plain) {
        *size = isz;
        return BLCO_VCODEC_INT;
    }
    if (f64 && !isz) {
        const int sc = blco_dec_scale(val, n);
        const size_t dsz = sc ? blco_dec_size(val, n, sc) : 0;
        if (dsz && dsz < plain) {
            *size = dsz;
            *scale = sc;
            return BLCO_VCODEC_DEC;
        }
    }
    return f64 ? BLCO_VCODEC_F64 : BLCO_VCODEC_F32;
}

/* Writes a column's base encoding (plain, planes, integer or decimal at `scale`) of `size`
 * bytes. */
static int put_base(int base, int scale, const double *val, uint64_t n, int f64, uint8_t *out,
                    size_t size)
{
    size_t len;
    if (base == BLCO_VCODEC_INT)
        return blco_int_encode(val, n, !f64, out, size, &len);
    if (base == BLCO_VCODEC_DEC)
        return blco_dec_encode(val, n, scale, out, size, &len);
    put_values(base, val, n, out);
    return 0;
}

/* AUTO for values: the base (value_base), or zstd of the byte planes, of the plain column
 * or of the integer (decimal) encoding at `level`, the smallest, when it saves min_saving
 * of the base; with seg_other, min_saving of a segment of seg_other more bytes (its index
 * column) and the base. */
static int value_auto(blco_codec_ctx_t *ctx, const double *val, uint64_t n, int f64, int level,
                      double min_saving, const size_t *seg_other, uint8_t *out, size_t cap,
                      size_t *len, int *used)
{
    int plain = f64 ? BLCO_VCODEC_F64 : BLCO_VCODEC_F32;
    int planes = f64 ? BLCO_VCODEC_F64_PLANES : BLCO_VCODEC_F32_PLANES;
    size_t size = (f64 ? 8 : 4) * n, bsize, zbest = SIZE_MAX;
    int scale, base = value_base(val, n, f64, &bsize, &scale), best = -1;
    if (seg_other) /* as a share of the column, the saving is larger the larger the rest */
        min_saving = min_saving * ((double)*seg_other + (double)bsize) / (double)bsize;
    uint8_t *b0, *b1;
    int err;
    if (min_saving >= 1) /* no compression can save that much: do not try */
        goto keep_base;
    if ((err = scratch(ctx, 0, size, &b0)) < 0 ||
        (err = scratch(ctx, 1, ZSTD_COMPRESSBOUND(size), &b1)) < 0)
        return err;
    /* Each candidate is compressed into b1; the best so far is kept in out. */
    /* planes must beat plain; the integer or decimal encoding is a candidate when it is the base */
    const int cand[4] = {plain, planes, BLCO_VCODEC_INT, BLCO_VCODEC_DEC};
    for (int c = 0; c < 4; c++) {
        size_t csize = size, z;
        const void *src = b0;
        if (cand[c] == BLCO_VCODEC_INT || cand[c] == BLCO_VCODEC_DEC) {
            if (base != cand[c])
                continue;
            csize = bsize;
        }
        /* Room for what would be kept only: zstd stops as soon as its output passes it,
         * which makes a candidate that cannot pay cheap to rule out. */
        size_t room = min_saving < 0 ? bsize - 1 : (size_t)((double)bsize * (1.0 - min_saving));
        room = BLCO_MIN(room, BLCO_MIN(zbest == SIZE_MAX ? SIZE_MAX : zbest - 1, cap));
        room = BLCO_MIN(room, (size_t)ZSTD_COMPRESSBOUND(size));
        if (!room)
            continue;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (cand[c] == BLCO_VCODEC_F64)
            src = val;
        else
#endif
            if ((err = put_base(cand[c], scale, val, n, f64, b0, csize)) < 0)
            return err;
        int e = zcompress(ctx, level, src, csize, b1, room, &z);
        if (e == -ENOMEM)
            return e;
        if (e == 0) { /* within room: smaller than the best so far, and worth keeping */
            memcpy(out, b1, z);
            zbest = z;
            best = cand[c];
        }
    }
    if (best >= 0 && worth(zbest, bsize, min_saving)) {
        *used = best | BLCO_CODEC_ZSTD;
        *len = zbest;
        return 0;
    }
keep_base:
    if (bsize > cap)
        return -ENOSPC;
    if ((err = put_base(base, scale, val, n, f64, out, bsize)) < 0)
        return err;
    *used = base;
    *len = bsize;
    return 0;
}

int blco_codec_value_encode(blco_codec_ctx_t *ctx, const double *val, uint64_t n, int value_type,
                            const blco_codec_req_t *req, uint8_t *out, size_t cap, size_t *len,
                            int *used)
{
    if (!n || !req || n > SIZE_MAX / 16 ||
        (value_type != BLCO_VALUES_F64 && value_type != BLCO_VALUES_F32))
        return -EINVAL;
    int f64 = value_type == BLCO_VALUES_F64, codec = req->codec;
    size_t elem = f64 ? 8 : 4, size = elem * n;
    blco_codec_ctx_t *tmp = NULL;
    int err;
    if (codec == BLCO_CODEC_AUTO) {
        int level = req->zstd_level ? req->zstd_level : UNASKED_ZSTD_LEVEL;
        double ms = req->zstd_level ? req_saving(req) : UNASKED_MIN_SAVING;
        if ((err = ctx_get(&ctx, &tmp)) == 0)
            err = value_auto(ctx, val, n, f64, level, ms, NULL, out, cap, len, used);
        goto out;
    }
    int base = BLCO_CODEC_BASE(codec);
    if ((codec & ~(BLCO_CODEC_ZSTD | 0x7f)) || base > BLCO_VCODEC_DEC ||
        (base != BLCO_VCODEC_INT && is_f64(base) != f64))
        return -EINVAL;
    if (base == BLCO_VCODEC_INT) { /* its size depends on the values */
        if (!(size = blco_int_size(val, n, !f64)))
            return -EINVAL;
        if (!(codec & BLCO_CODEC_ZSTD)) {
            if ((err = blco_int_encode(val, n, !f64, out, cap, len)) == 0)
                *used = base;
            return err;
        }
    }
    const int scale = base == BLCO_VCODEC_DEC ? blco_dec_scale(val, n) : 0;
    if (base == BLCO_VCODEC_DEC) {
        if (!scale || !(size = blco_dec_size(val, n, scale)))
            return -EINVAL;
        if (!(codec & BLCO_CODEC_ZSTD)) {
            if ((err = blco_dec_encode(val, n, scale, out, cap, len)) == 0)
                *used = base;
            return err;
        }
    }
    if (!(codec & BLCO_CODEC_ZSTD)) {
        if (size > cap)
            return -ENOSPC;
        put_values(base, val, n, out);
        *used = base;
        *len = size;
        return 0;
    }
    uint8_t *b;
    const void *src = val;
    if ((err = ctx_get(&ctx, &tmp)) < 0)
        goto out;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (base != BLCO_VCODEC_F64)
#endif
    {
        if ((err = scratch(ctx, 0, size, &b)) < 0 || (err = put_base(base, scale, val, n, f64, b, size)) < 0)
            goto out;
        src = b;
    }
    int level = req->zstd_level ? req->zstd_level : DEFAULT_ZSTD_LEVEL;
    if ((err = zcompress(ctx, level, src, size, out, cap, len)) == 0)
        *used = codec;
out:
    blco_codec_ctx_free(tmp);
    return err;
}

int blco_codec_value_decode(blco_codec_ctx_t *ctx, int value_type, int codec, const uint8_t *in,
                            size_t len, uint64_t n, double *out)
{
    if (value_type != BLCO_VALUES_F64 && value_type != BLCO_VALUES_F32)
        return -EINVAL;
    if (codec < 0 || codec > 0xff)
        return -EINVAL;
    int base = BLCO_CODEC_BASE(codec), f32 = value_type == BLCO_VALUES_F32;
    if (base > BLCO_VCODEC_DEC)
        return -BLCO_EVERSION;
    if (n == 0 || n > SIZE_MAX / 16 ||
        (base != BLCO_VCODEC_INT && is_f64(base) != (value_type == BLCO_VALUES_F64)))
        return -BLCO_EFORMAT;
    if (base == BLCO_VCODEC_INT && !(codec & BLCO_CODEC_ZSTD))
        return blco_int_decode(in, len, n, f32, out);
    if (base == BLCO_VCODEC_DEC && !(codec & BLCO_CODEC_ZSTD))
        return blco_dec_decode(in, len, n, out);
    size_t size = (is_f64(base) ? 8 : 4) * n;
    if (!(codec & BLCO_CODEC_ZSTD)) {
        if (len != size)
            return -BLCO_EFORMAT;
        get_values(base, in, n, out);
        return 0;
    }
    blco_codec_ctx_t *tmp;
    const uint8_t *b;
    size_t got;
    int err = ctx_get(&ctx, &tmp);
    if (err < 0)
        goto out;
    if (base == BLCO_VCODEC_INT) {
        if ((err = zunwrap(ctx, in, len, 8 + (n + BLCO_INT_FRAME - 1) / BLCO_INT_FRAME,
                           blco_int_bound(n), &b, &got)) == 0)
            err = blco_int_decode(b, got, n, f32, out);
    } else if (base == BLCO_VCODEC_DEC) {
        if ((err = zunwrap(ctx, in, len, 16 + (n + BLCO_INT_FRAME - 1) / BLCO_INT_FRAME,
                           blco_dec_bound(n), &b, &got)) == 0)
            err = blco_dec_decode(b, got, n, out);
    } else if (base == BLCO_VCODEC_F64) {
        if ((err = zsize(in, len, size, size, &got)) == 0 &&
            (err = zdecompress(ctx, in, len, out, size)) == 0)
            fix_u64((uint64_t *)out, n);
    } else if ((err = zunwrap(ctx, in, len, size, size, &b, &got)) == 0) {
        get_values(base, b, n, out);
    }
out:
    blco_codec_ctx_free(tmp);
    return err;
}

/* ---- segments ---- */

int blco_codec_encode_segment(blco_codec_ctx_t *ctx, const blco_layout_t *l, int pack_codec,
                              int zstd_level, int value_type, const uint64_t *alto,
                              const double *val, uint64_t n, uint8_t *out, size_t cap, size_t *ilen,
                              size_t *vlen, int *icodec, int *vcodec)
{
    blco_codec_ctx_t *tmp;
    int err = ctx_get(&ctx, &tmp);
    if (err < 0)
        return err;
    const blco_codec_map_t *m = ctx_map(ctx, l);
    int plain = value_type == BLCO_VALUES_F32 ? BLCO_VCODEC_F32 : BLCO_VCODEC_F64;
    blco_codec_req_t ir = {BLCO_CODEC_AUTO, zstd_level, 0}, vr = ir;
    switch (pack_codec) {
    case BLCO_PACK_AUTO:
        /* Device-decodable indices now; the values once their index column's size is known. */
        ir.zstd_level = 0;
        break;
    case BLCO_PACK_COMPACT: break;
    case BLCO_PACK_RAW:
        ir.codec = BLCO_ICODEC_RAW;
        vr.codec = plain;
        break;
    case BLCO_PACK_NARROW:
        ir.codec = m->index_bits <= 32 ? BLCO_ICODEC_NARROW : BLCO_ICODEC_RAW;
        vr.codec = plain;
        break;
    case BLCO_PACK_DELTA:
        ir.codec = BLCO_ICODEC_DELTA;
        vr.codec = plain;
        break;
    case BLCO_PACK_GPU: {
        size_t bsize;
        int scale;
        ir.zstd_level = 0;
        vr.codec = value_base(val, n, value_type != BLCO_VALUES_F32, &bsize, &scale);
        break;
    }
    case BLCO_PACK_ZSTD:
        ir.zstd_level = vr.zstd_level = zstd_level ? zstd_level : DEFAULT_ZSTD_LEVEL;
        ir.min_saving = vr.min_saving = -1;
        break;
    default: err = -EINVAL; goto out;
    }
    if ((err = blco_codec_index_encode(ctx, m, alto, n, &ir, out, cap, ilen, icodec)) < 0)
        goto out;
    if (pack_codec == BLCO_PACK_AUTO) {
        /* zstd on the values (planes, plain or integer, the smallest) only when the segment
         * shrinks by DEVICE_MIN_SEGMENT_SAVING of its device-decodable size */
        if (value_type != BLCO_VALUES_F64 && value_type != BLCO_VALUES_F32)
            err = -EINVAL;
        else
            err = value_auto(ctx, val, n, value_type == BLCO_VALUES_F64,
                             zstd_level ? zstd_level : UNASKED_ZSTD_LEVEL,
                             DEVICE_MIN_SEGMENT_SAVING, ilen, out + *ilen, cap - *ilen, vlen,
                             vcodec);
        goto out;
    }
    err = blco_codec_value_encode(ctx, val, n, value_type, &vr, out + *ilen, cap - *ilen, vlen,
                                  vcodec);
out:
    blco_codec_ctx_free(tmp);
    return err;
}

int blco_codec_decode_segment_part(blco_codec_ctx_t *ctx, const blco_layout_t *l, int value_type,
                                   const blco_segment_t *sg, const void *stored, int parts,
                                   uint64_t *idx, double *val)
{
    blco_codec_ctx_t *tmp;
    int err = ctx_get(&ctx, &tmp);
    if (err < 0)
        return err;
    const blco_codec_map_t *m = ctx_map(ctx, l);
    const uint8_t *p = stored;
    if (sg->raw_index_bits != (uint32_t)m->index_bits || sg->index_bytes > SIZE_MAX / 2 ||
        sg->value_bytes > SIZE_MAX / 2) {
        err = -BLCO_EFORMAT;
        goto out;
    }
    if ((parts & BLCO_SEGMENT_INDEX) &&
        (err = blco_codec_index_decode(ctx, m, sg->index_codec, p, sg->index_bytes, sg->nnz,
                                       idx)) < 0)
        goto out;
    if (parts & BLCO_SEGMENT_VALUES)
        err = blco_codec_value_decode(ctx, value_type, sg->value_codec, p + sg->index_bytes,
                                      sg->value_bytes, sg->nnz, val);
out:
    blco_codec_ctx_free(tmp);
    return err;
}

int blco_codec_decode_segment(blco_codec_ctx_t *ctx, const blco_layout_t *l, int value_type,
                              const blco_segment_t *sg, const void *stored, uint64_t *idx,
                              double *val)
{
    return blco_codec_decode_segment_part(ctx, l, value_type, sg, stored,
                                          BLCO_SEGMENT_INDEX | BLCO_SEGMENT_VALUES, idx, val);
}

/* ---- what a GPU decodes ---- */

int blco_codec_device_decodes(int value_type, int index_codec, int value_codec)
{
    if (index_codec < 0 || index_codec > BLCO_ICODEC_DELTA)
        return 0;
    if (value_codec == BLCO_VCODEC_INT)
        return value_type == BLCO_VALUES_F64 || value_type == BLCO_VALUES_F32;
    if (value_codec == BLCO_VCODEC_DEC)
        return value_type == BLCO_VALUES_F64;
    return value_type == BLCO_VALUES_F64
               ? value_codec == BLCO_VCODEC_F64 || value_codec == BLCO_VCODEC_F64_PLANES
               : value_codec == BLCO_VCODEC_F32 || value_codec == BLCO_VCODEC_F32_PLANES;
}

void blco_codec_note_host_decode(const blco_file_t *f, const char *path, uint64_t host,
                                 uint64_t nbatches, uint64_t seg0, uint64_t seg1)
{
    const blco_file_info_t *in = blco_file_info(f);
    const double elem = in->value_type == BLCO_VALUES_F32 ? 4 : 8;
    /* The GPU codec keeps the index column's base encoding (zstd on delta indices saves
     * little) and stores the values plain, or as integers (decimals) where they are whole
     * numbers (short decimals) and that is smaller: at most index bytes + elem per nonzero. */
    double nnz = 0, stored = 0, plain = 0;
    for (uint64_t i = seg0; i < seg1; i++) {
        const blco_segment_t *sg = blco_file_segment(f, i);
        if (blco_codec_device_decodes(in->value_type, sg->index_codec, sg->value_codec))
            continue;
        nnz += (double)sg->nnz;
        stored += (double)(sg->index_bytes + sg->value_bytes);
        plain += (double)sg->index_bytes + elem * (double)sg->nnz;
    }
    if (nnz < 1)
        nnz = 1;
    blco_log(BLCO_LOG_WARN,
             "%s: %llu of %llu batches (%.0f%%) hold zstd-coded columns, which a GPU does not "
             "decode: the CPU threads decode them and copy 16 bytes per nonzero to the GPU. "
             "Packed with `blco-pack --codec gpu` they would go to the GPU as stored and be "
             "decoded there (at most %.1f bytes per nonzero instead of %.1f; whole-number "
             "and short decimal values take far less)",
             path, (unsigned long long)host, (unsigned long long)nbatches,
             100.0 * (double)host / (double)(nbatches ? nbatches : 1), plain / nnz, stored / nnz);
}
