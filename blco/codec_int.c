/* The integer and decimal codecs of value columns (FORMAT.md, "The integer codec", "The
 * decimal codec"). Integer: a column whose values are all whole numbers is stored as the
 * smallest of them, then one width byte per frame of BLCO_INT_FRAME values, then the
 * frames: each value less the smallest, bit-packed LSB-first at its frame's width. The
 * widths come first so that a GPU finds where every frame starts with one scan; count
 * tensors take 0.5-0.7 bytes a value this way. Decimal: a column of f64 values that are
 * each exactly the f64 nearest to m / 10^s for whole numbers m and one scale s (values
 * read from text with at most s decimals) is stored as s, then the integer encoding of
 * the m: values of 6 decimal places take about 2.5 bytes instead of 8. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "blco_internal.h"
#include "bytes_le.h"
#include "codec.h"

#define FRAME BLCO_INT_FRAME
#define LIMIT 9007199254740992.0 /* 2^53: every whole number up to it is exact in f64 */

/* 10^s, exact in f64 for s <= 22 (5^22 < 2^53). */
static const double P10[BLCO_DEC_MAX_SCALE + 1] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int width_of(uint64_t v)
{
    return v ? 64 - __builtin_clzll(v) : 0;
}

static inline uint64_t frames_of(uint64_t n)
{
    return (n + FRAME - 1) / FRAME;
}

/* 1 when v is a whole number in [-2^53, 2^53] and not -0 (which would come back as +0). */
static inline int whole(double v)
{
    return v >= -LIMIT && v <= LIMIT && v == trunc(v) && !(v == 0 && signbit(v));
}

/* The whole number a value is stored as: itself (rounded to f32 first for an f32 column)
 * at scale 1, else m = v 10^s rounded, which must give v back as m / 10^s (f64 division,
 * rounded to nearest). *ok is cleared when it is not one. */
static inline double whole_of(double v, int f32, double p, int *ok)
{
    if (p == 1) {
        const double m = f32 ? (double)(float)v : v;
        *ok &= whole(m);
        return m;
    }
    const double m = nearbyint(v * p);
    *ok &= whole(m) && m / p == v; /* v = -0 gives m = -0: refused by whole */
    return m;
}

size_t blco_int_bound(uint64_t n)
{
    if (n > (SIZE_MAX - 16) / 16)
        return SIZE_MAX;
    return 8 + frames_of(n) + 8 * n;
}

size_t blco_dec_bound(uint64_t n)
{
    size_t b = blco_int_bound(n);
    return b == SIZE_MAX ? b : 8 + b;
}

/* The smallest whole number, or 0 with *ok = 0 when a value has none. */
static int64_t smallest(const double *val, uint64_t n, int f32, double p, int *ok)
{
    double lo = LIMIT;
    int good = 1;
    for (uint64_t i = 0; i < n; i++) {
        const double m = whole_of(val[i], f32, p, &good);
        lo = m < lo ? m : lo;
    }
    *ok = good;
    return good ? (int64_t)lo : 0;
}

static size_t size_at(const double *val, uint64_t n, int f32, double p)
{
    int ok;
    int64_t base = smallest(val, n, f32, p, &ok);
    if (!ok || !n)
        return 0;
    size_t size = 8 + frames_of(n);
    for (uint64_t i = 0; i < n; i += FRAME) {
        uint64_t k = BLCO_MIN((uint64_t)FRAME, n - i), acc = 0;
        for (uint64_t j = 0; j < k; j++) {
            int dummy = 1;
            acc |= (uint64_t)((int64_t)whole_of(val[i + j], f32, p, &dummy) - base);
        }
        size += ((uint64_t)width_of(acc) * k + 7) / 8;
    }
    return size;
}

static int encode_at(const double *val, uint64_t n, int f32, double p, uint8_t *out, size_t cap,
                     size_t *len)
{
    int ok;
    int64_t base = smallest(val, n, f32, p, &ok);
    if (!ok || !n)
        return -EINVAL;
    const uint64_t nf = frames_of(n);
    if (cap < 8 + nf)
        return -ENOSPC;
    blco_put_u64(out, (uint64_t)base);
    uint8_t *wid = out + 8, *q = out + 8 + nf, *end = out + cap;
    uint64_t d[FRAME];
    for (uint64_t f = 0; f < nf; f++) {
        uint64_t i = f * FRAME, k = BLCO_MIN((uint64_t)FRAME, n - i), acc = 0;
        for (uint64_t j = 0; j < k; j++) {
            int dummy = 1;
            d[j] = (uint64_t)((int64_t)whole_of(val[i + j], f32, p, &dummy) - base);
            acc |= d[j];
        }
        int w = width_of(acc);
        uint64_t fb = ((uint64_t)w * k + 7) / 8;
        if ((uint64_t)(end - q) < fb)
            return -ENOSPC;
        wid[f] = (uint8_t)w;
        blco_bits_pack(d, k, w, q);
        q += fb;
    }
    *len = (size_t)(q - out);
    return 0;
}

size_t blco_int_size(const double *val, uint64_t n, int f32)
{
    return size_at(val, n, f32, 1);
}

int blco_int_encode(const double *val, uint64_t n, int f32, uint8_t *out, size_t cap, size_t *len)
{
    return encode_at(val, n, f32, 1, out, cap, len);
}

/* Decodes the integer encoding of n whole numbers m into m / p (p = 1: m itself). */
static int decode_at(const uint8_t *in, size_t len, uint64_t n, int f32, double p, double *out)
{
    const uint64_t nf = frames_of(n);
    if (n == 0 || len < 8 || len - 8 < nf)
        return -BLCO_EFORMAT;
    const int64_t base = (int64_t)blco_get_u64(in);
    if (base < -(int64_t)(1ll << 53) || base > (int64_t)(1ll << 53))
        return -BLCO_EFORMAT;
    /* Each value, base + d, must stay at or below 2^53. */
    const uint64_t room = (uint64_t)((1ll << 53) - base);
    const uint8_t *wid = in + 8, *q = in + 8 + nf, *end = in + len;
    uint64_t d[FRAME], bad = 0;
    for (uint64_t f = 0; f < nf; f++) {
        uint64_t i = f * FRAME, k = BLCO_MIN((uint64_t)FRAME, n - i);
        int w = wid[f];
        if (w > 64)
            return -BLCO_EFORMAT;
        uint64_t fb = ((uint64_t)w * k + 7) / 8;
        if ((uint64_t)(end - q) < fb)
            return -BLCO_EFORMAT;
        blco_bits_unpack(q, (uint64_t)(end - q), k, w, d);
        q += fb;
        if (p == 1) {
            for (uint64_t j = 0; j < k; j++) {
                bad |= d[j] > room;
                out[i + j] = (double)(int64_t)((uint64_t)base + d[j]);
            }
        } else { /* while the frame is in cache (the same division the encoder checked) */
            for (uint64_t j = 0; j < k; j++) {
                bad |= d[j] > room;
                out[i + j] = (double)(int64_t)((uint64_t)base + d[j]) / p;
            }
        }
    }
    if (bad || q != end)
        return -BLCO_EFORMAT;
    if (f32)
        for (uint64_t i = 0; i < n; i++)
            bad |= (double)(float)out[i] != out[i];
    return bad ? -BLCO_EFORMAT : 0;
}

int blco_int_decode(const uint8_t *in, size_t len, uint64_t n, int f32, double *out)
{
    return decode_at(in, len, n, f32, 1, out);
}

/* ---- the decimal codec ---- */

int blco_dec_scale(const double *val, uint64_t n)
{
    int s = 1;
    for (uint64_t i = 0; i < n; i++) {
        int ok = 1;
        (void)whole_of(val[i], 0, P10[s], &ok);
        while (!ok) { /* a larger scale keeps the values before exact unless m grows past 2^53 */
            if (++s > BLCO_DEC_MAX_SCALE)
                return 0;
            ok = 1;
            (void)whole_of(val[i], 0, P10[s], &ok);
        }
    }
    return n ? s : 0;
}

size_t blco_dec_size(const double *val, uint64_t n, int scale)
{
    if (scale < 1 || scale > BLCO_DEC_MAX_SCALE)
        return 0;
    size_t s = size_at(val, n, 0, P10[scale]);
    return s ? 8 + s : 0;
}

int blco_dec_encode(const double *val, uint64_t n, int scale, uint8_t *out, size_t cap,
                    size_t *len)
{
    if (scale < 1 || scale > BLCO_DEC_MAX_SCALE)
        return -EINVAL;
    if (cap < 8)
        return -ENOSPC;
    blco_put_u64(out, (uint64_t)scale);
    int err = encode_at(val, n, 0, P10[scale], out + 8, cap - 8, len);
    if (err == 0)
        *len += 8;
    return err;
}

int blco_dec_decode(const uint8_t *in, size_t len, uint64_t n, double *out)
{
    if (len < 8)
        return -BLCO_EFORMAT;
    const uint64_t s = blco_get_u64(in);
    if (s < 1 || s > BLCO_DEC_MAX_SCALE)
        return -BLCO_EFORMAT;
    return decode_at(in + 8, len - 8, n, 0, P10[s], out);
}
