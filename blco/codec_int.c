/* The integer codec of value columns (FORMAT.md, "The integer codec"): a column whose values
 * are all whole numbers is stored as the smallest of them, then one width byte per frame of
 * BLCO_INT_FRAME values, then the frames: each value less the smallest, bit-packed
 * LSB-first at its frame's width. The widths come first so that a GPU finds where every
 * frame starts with one scan; count tensors take 0.5-0.7 bytes a value this way. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "blco_internal.h"
#include "bytes_le.h"
#include "codec.h"

#define FRAME BLCO_INT_FRAME
#define LIMIT 9007199254740992.0 /* 2^53: every whole number up to it is exact in f64 */

static inline int width_of(uint64_t v)
{
    return v ? 64 - __builtin_clzll(v) : 0;
}

static inline uint64_t frames_of(uint64_t n)
{
    return (n + FRAME - 1) / FRAME;
}

/* The value as stored: rounded to f32 for an f32 column. */
static inline double stored(double v, int f32)
{
    return f32 ? (double)(float)v : v;
}

/* 1 when v is a whole number in [-2^53, 2^53] and not -0 (which would come back as +0). */
static inline int whole(double v)
{
    return v >= -LIMIT && v <= LIMIT && v == trunc(v) && !(v == 0 && signbit(v));
}

size_t blco_int_bound(uint64_t n)
{
    if (n > (SIZE_MAX - 8) / 16)
        return SIZE_MAX;
    return 8 + frames_of(n) + 8 * n;
}

/* The smallest value, or 0 with *ok = 0 when a value is not whole. */
static int64_t smallest(const double *val, uint64_t n, int f32, int *ok)
{
    double lo = LIMIT;
    int good = 1;
    for (uint64_t i = 0; i < n; i++) {
        double v = stored(val[i], f32);
        good &= whole(v);
        lo = v < lo ? v : lo;
    }
    *ok = good;
    return good ? (int64_t)lo : 0;
}

size_t blco_int_size(const double *val, uint64_t n, int f32)
{
    int ok;
    int64_t base = smallest(val, n, f32, &ok);
    if (!ok || !n)
        return 0;
    size_t size = 8 + frames_of(n);
    for (uint64_t i = 0; i < n; i += FRAME) {
        uint64_t k = BLCO_MIN((uint64_t)FRAME, n - i), acc = 0;
        for (uint64_t j = 0; j < k; j++)
            acc |= (uint64_t)((int64_t)stored(val[i + j], f32) - base);
        size += ((uint64_t)width_of(acc) * k + 7) / 8;
    }
    return size;
}

int blco_int_encode(const double *val, uint64_t n, int f32, uint8_t *out, size_t cap, size_t *len)
{
    int ok;
    int64_t base = smallest(val, n, f32, &ok);
    if (!ok || !n)
        return -EINVAL;
    const uint64_t nf = frames_of(n);
    if (cap < 8 + nf)
        return -ENOSPC;
    blco_put_u64(out, (uint64_t)base);
    uint8_t *wid = out + 8, *p = out + 8 + nf, *end = out + cap;
    uint64_t d[FRAME];
    for (uint64_t f = 0; f < nf; f++) {
        uint64_t i = f * FRAME, k = BLCO_MIN((uint64_t)FRAME, n - i), acc = 0;
        for (uint64_t j = 0; j < k; j++) {
            d[j] = (uint64_t)((int64_t)stored(val[i + j], f32) - base);
            acc |= d[j];
        }
        int w = width_of(acc);
        uint64_t fb = ((uint64_t)w * k + 7) / 8;
        if ((uint64_t)(end - p) < fb)
            return -ENOSPC;
        wid[f] = (uint8_t)w;
        blco_bits_pack(d, k, w, p);
        p += fb;
    }
    *len = (size_t)(p - out);
    return 0;
}

int blco_int_decode(const uint8_t *in, size_t len, uint64_t n, int f32, double *out)
{
    const uint64_t nf = frames_of(n);
    if (n == 0 || len < 8 || len - 8 < nf)
        return -BLCO_EFORMAT;
    const int64_t base = (int64_t)blco_get_u64(in);
    if (base < -(int64_t)(1ll << 53) || base > (int64_t)(1ll << 53))
        return -BLCO_EFORMAT;
    /* Each value, base + d, must stay at or below 2^53. */
    const uint64_t room = (uint64_t)((1ll << 53) - base);
    const uint8_t *wid = in + 8, *p = in + 8 + nf, *end = in + len;
    uint64_t d[FRAME], bad = 0;
    for (uint64_t f = 0; f < nf; f++) {
        uint64_t i = f * FRAME, k = BLCO_MIN((uint64_t)FRAME, n - i);
        int w = wid[f];
        if (w > 64)
            return -BLCO_EFORMAT;
        uint64_t fb = ((uint64_t)w * k + 7) / 8;
        if ((uint64_t)(end - p) < fb)
            return -BLCO_EFORMAT;
        blco_bits_unpack(p, (uint64_t)(end - p), k, w, d);
        p += fb;
        for (uint64_t j = 0; j < k; j++) {
            bad |= d[j] > room;
            out[i + j] = (double)(int64_t)((uint64_t)base + d[j]);
        }
    }
    if (bad || p != end)
        return -BLCO_EFORMAT;
    if (f32)
        for (uint64_t i = 0; i < n; i++)
            bad |= (double)(float)out[i] != out[i];
    return bad ? -BLCO_EFORMAT : 0;
}
