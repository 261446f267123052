/* The delta codec of index columns: the first in-block ALTO index, then frames of 128
 * (delta - 1) values bit-packed LSB-first at the frame's width. The decoder is the hot
 * path: width-specialized unpacking, a checked prefix sum and the BLCO conversion. */
#include <errno.h>
#include <string.h>

#include "blco_internal.h"
#include "bytes_le.h"
#include "codec.h"

#define FRAME BLCO_DELTA_FRAME
/* The fast unpacker reads up to this many bytes past a frame's end. */
#define OVERREAD 16

static inline int width_of(uint64_t v)
{
    return v ? 64 - __builtin_clzll(v) : 0;
}

static inline uint64_t frame_bytes(int w, uint64_t k)
{
    return ((uint64_t)w * k + 7) / 8;
}

size_t blco_delta_bound(uint64_t n)
{
    uint64_t frames = n > 1 ? (n - 1 + FRAME - 1) / FRAME : 0;
    if (frames > (SIZE_MAX - 8) / (1 + 8 * FRAME))
        return SIZE_MAX;
    return 8 + frames * (1 + 8 * FRAME);
}

size_t blco_delta_size(const uint64_t *alto, uint64_t n)
{
    if (n == 0)
        return 0;
    size_t size = 8;
    for (uint64_t i = 1; i < n; i += FRAME) {
        uint64_t k = BLCO_MIN((uint64_t)FRAME, n - i), acc = 0;
        for (uint64_t j = 0; j < k; j++)
            acc |= alto[i + j] - alto[i + j - 1] - 1;
        size += 1 + frame_bytes(width_of(acc), k);
    }
    return size;
}

void blco_bits_pack(const uint64_t *d, uint64_t k, int w, uint8_t *q)
{
    /* LSB-first into a 64-bit accumulator; `fill` bits of it are pending. */
    uint64_t buf = 0;
    int fill = 0;
    for (uint64_t j = 0; j < k && w; j++) {
        buf |= d[j] << fill;
        if (fill + w >= 64) {
            uint8_t tmp[8];
            blco_put_u64(tmp, buf);
            memcpy(q, tmp, 8);
            q += 8;
            buf = fill ? d[j] >> (64 - fill) : 0;
            fill = fill + w - 64;
        } else {
            fill += w;
        }
    }
    for (; fill > 0; fill -= 8, buf >>= 8)
        *q++ = (uint8_t)buf;
}

int blco_delta_encode(const uint64_t *alto, uint64_t n, uint8_t *out, size_t cap, size_t *len)
{
    if (cap < 8)
        return -ENOSPC;
    blco_put_u64(out, alto[0]);
    uint8_t *p = out + 8, *end = out + cap;
    uint64_t d[FRAME];
    for (uint64_t i = 1; i < n; i += FRAME) {
        uint64_t k = BLCO_MIN((uint64_t)FRAME, n - i), acc = 0;
        for (uint64_t j = 0; j < k; j++) {
            d[j] = alto[i + j] - alto[i + j - 1] - 1;
            acc |= d[j];
        }
        int w = width_of(acc);
        uint64_t fb = frame_bytes(w, k);
        if ((uint64_t)(end - p) < 1 + fb)
            return -ENOSPC;
        *p++ = (uint8_t)w;
        blco_bits_pack(d, k, w, p);
        p += fb;
    }
    *len = (size_t)(p - out);
    return 0;
}

/* Eight values of width w from the w bytes at q. Inlined with a constant w, every shift
 * and offset below is a constant. Reads at most 9 bytes past q + (7 * w) / 8. */
static inline __attribute__((always_inline)) void unpack8(const uint8_t *q, uint64_t *d, int w)
{
    const uint64_t mask = w >= 64 ? ~0ull : (1ull << w) - 1;
    for (int j = 0; j < 8; j++) {
        int bit = j * w, o = bit >> 3, s = bit & 7;
        uint64_t v = blco_get_u64(q + o) >> s;
        if (w + s > 64) /* the value's top bits are in the ninth byte */
            v |= (uint64_t)q[o + 8] << (64 - s);
        d[j] = v & mask;
    }
}

static inline __attribute__((always_inline)) void unpack_groups(const uint8_t *p, uint64_t *d,
                                                                int w, int groups)
{
    for (int g = 0; g < groups; g++)
        unpack8(p + g * w, d + 8 * g, w);
}

/* `groups` x 8 values of width w (0..64); p has OVERREAD readable bytes past them. */
static void unpack_w(const uint8_t *p, uint64_t *d, int w, int groups)
{
    /* clang-format off */
    switch (w) {
#define W(x)                                                                                    \
    case x:                                                                                    \
        unpack_groups(p, d, x, groups);                                                        \
        break;
        W(1) W(2) W(3) W(4) W(5) W(6) W(7) W(8) W(9) W(10) W(11) W(12) W(13) W(14) W(15) W(16)
        W(17) W(18) W(19) W(20) W(21) W(22) W(23) W(24) W(25) W(26) W(27) W(28) W(29) W(30)
        W(31) W(32) W(33) W(34) W(35) W(36) W(37) W(38) W(39) W(40) W(41) W(42) W(43) W(44)
        W(45) W(46) W(47) W(48) W(49) W(50) W(51) W(52) W(53) W(54) W(55) W(56) W(57) W(58)
        W(59) W(60) W(61) W(62) W(63) W(64)
#undef W
    default:
        memset(d, 0, (size_t)groups * 8 * sizeof *d);
        break;
    }
    /* clang-format on */
}

void blco_bits_unpack(const uint8_t *p, uint64_t avail, uint64_t k, int w, uint64_t *d)
{
    const int groups = (int)((k + 7) / 8);
    const uint64_t fb = frame_bytes(w, k);
    if (k % 8 == 0 && avail >= fb + OVERREAD) {
        unpack_w(p, d, w, groups);
        return;
    }
    /* Near the end of the input, or a short frame: unpack from a padded copy. */
    uint8_t tail[8 * FRAME + OVERREAD];
    memcpy(tail, p, fb);
    memset(tail + fb, 0, (size_t)groups * w - fb + OVERREAD);
    unpack_w(tail, d, w, groups);
}

/* In-block ALTO indices to BLCO indices, with the field count known for the usual
 * orders so the pext chain is unrolled. */
static void convert(const blco_codec_map_t *m, const uint64_t *a, uint64_t *out, uint64_t k)
{
    if (!m) {
        memmove(out, a, k * sizeof *a);
        return;
    }
#if defined(__BMI2__)
    if (!m->use_table) {
        const uint64_t *fa = m->field_alto;
        const int *fp = m->field_pos;
        switch (m->nfield) {
        case 0:
        case 1: /* one field holds every in-block bit, in order */
            memmove(out, a, k * sizeof *a);
            return;
        case 2:
            for (uint64_t j = 0; j < k; j++)
                out[j] = _pext_u64(a[j], fa[0]) << fp[0] | _pext_u64(a[j], fa[1]) << fp[1];
            return;
        case 3:
            for (uint64_t j = 0; j < k; j++)
                out[j] = _pext_u64(a[j], fa[0]) << fp[0] | _pext_u64(a[j], fa[1]) << fp[1] |
                         _pext_u64(a[j], fa[2]) << fp[2];
            return;
        case 4:
            for (uint64_t j = 0; j < k; j++)
                out[j] = _pext_u64(a[j], fa[0]) << fp[0] | _pext_u64(a[j], fa[1]) << fp[1] |
                         _pext_u64(a[j], fa[2]) << fp[2] | _pext_u64(a[j], fa[3]) << fp[3];
            return;
        default:
            for (uint64_t j = 0; j < k; j++)
                out[j] = blco_codec_alto_to_index(m, a[j]);
            return;
        }
    }
#endif
    if (m->nfield <= 1) {
        memmove(out, a, k * sizeof *a);
        return;
    }
    int bytes = (m->index_bits + 7) / 8;
    for (uint64_t j = 0; j < k; j++) {
        uint64_t x = a[j], r = 0;
        for (int b = 0; b < bytes; b++)
            r |= m->to_index[b][(x >> (8 * b)) & 0xff];
        out[j] = r;
    }
}

void blco_codec_map_to_index(const blco_codec_map_t *m, const uint64_t *alto, uint64_t *out,
                             uint64_t n)
{
    convert(m, alto, out, n);
}

int blco_delta_decode(const blco_codec_map_t *m, int index_bits, const uint8_t *in, size_t len,
                      uint64_t n, uint64_t *out)
{
    if (n == 0 || len < 8)
        return -BLCO_EFORMAT;
    /* Every index must stay below 2^index_bits; the deltas' prefix sum must not wrap. */
    uint64_t lim = index_bits >= 64 ? ~0ull : (1ull << index_bits) - 1;
    const uint8_t *p = in + 8, *end = in + len;
    uint64_t cur = blco_get_u64(in);
    if (cur > lim)
        return -BLCO_EFORMAT;
    uint64_t a[FRAME], d[FRAME];
    a[0] = cur;
    convert(m, a, out, 1);
    for (uint64_t i = 1; i < n; i += FRAME) {
        uint64_t k = BLCO_MIN((uint64_t)FRAME, n - i);
        if (p >= end)
            return -BLCO_EFORMAT;
        int w = *p++;
        if (w > 64)
            return -BLCO_EFORMAT;
        uint64_t fb = frame_bytes(w, k);
        if ((uint64_t)(end - p) < fb)
            return -BLCO_EFORMAT;
        blco_bits_unpack(p, (uint64_t)(end - p), k, w, d);
        p += fb;
        uint64_t bad = 0;
        for (uint64_t j = 0; j < k; j++) {
            uint64_t nx = cur + d[j] + 1; /* d = 2^64 - 1 wraps to nx == cur */
            bad |= nx <= cur;
            cur = nx;
            a[j] = cur;
        }
        if (bad || cur > lim)
            return -BLCO_EFORMAT;
        convert(m, a, out + i, k);
    }
    return p == end ? 0 : -BLCO_EFORMAT;
}
