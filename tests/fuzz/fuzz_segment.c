/* Fuzz target of the segment column decoders (blco/codec.h): blco_codec_index_decode,
 * blco_codec_value_decode and blco_codec_decode_segment on columns taken from the input,
 * with a layout and codec bytes taken from its first bytes. Decoded columns are re-encoded
 * with the same codec and decoded again, which must give the same result.
 *
 * Input (little-endian), then the payload:
 *   0      order: 2 + byte % 7
 *   1      line_bits: byte + 1 below 64, else 64
 *   2      index codec byte, 3 value codec byte (any value: unknown ones must be refused)
 *   4      flags: 0x01 f32 values (else f64); 0x02 n from the index column's length (raw
 *          and narrow); 0x04 decode the index column without a map; 0x08 no context (the
 *          decoders make a temporary one); 0x10 a segment whose raw_index_bits is wrong
 *   5-6    n, the nonzeros of the columns (u16)
 *   7-8    length of the index column (u16; the value column is the rest)
 *   9..    one byte per mode: bits(I_n) = byte & 31 (scaled down when they sum above
 *          128), I_n = 2^bits - (byte >> 5) for more than 3 bits, 2^bits otherwise
 * Every column is copied to a heap block of exactly its size, so a read past it is seen
 * by ASan; outputs are exactly n entries long for the same reason. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "codec.h"
#include "fuzz_common.h"

#define HEADER_BYTES 9

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    FUZZ_CHECK(q != NULL, "out of memory");
    if (n)
        memcpy(q, p, n);
    return q;
}

static void *alloc_n(uint64_t n, size_t size)
{
    void *p = malloc(n ? n * size : 1);
    FUZZ_CHECK(p != NULL, "out of memory");
    return p;
}

static int make_layout(const uint8_t *d, int order, int line_bits, blco_layout_t *l)
{
    int bits[BLCO_MAX_MODES], total = 0;
    uint64_t dims[BLCO_MAX_MODES];
    for (int n = 0; n < order; n++)
        total += bits[n] = d[n] & 31;
    for (int n = 0; n < order; n++) {
        if (total > BLCO_MAX_INDEX_BITS)
            bits[n] = bits[n] * BLCO_MAX_INDEX_BITS / total;
        dims[n] = 1ull << bits[n];
        if (bits[n] > 3)
            dims[n] -= d[n] >> 5;
    }
    return blco_layout_init(l, order, dims, line_bits);
}

/* Re-encodes decoded BLCO indices (when they are in increasing ALTO order, as encoders
 * need) with `codec` and checks that decoding gives them back. */
static void index_roundtrip(const blco_codec_map_t *m, int codec, const uint64_t *idx, uint64_t n)
{
    uint64_t *alto = alloc_n(n, 8), *back = alloc_n(n, 8);
    blco_codec_map_to_alto(m, idx, alto, n);
    int increasing = 1;
    for (uint64_t i = 1; i < n && increasing; i++)
        increasing = alto[i] > alto[i - 1];
    if (increasing) {
        size_t cap = blco_codec_index_bound(n), len = 0;
        uint8_t *enc = alloc_n(cap, 1);
        blco_codec_req_t req = {codec, 1, 0};
        int used = -1;
        int err = blco_codec_index_encode(NULL, m, alto, n, &req, enc, cap, &len, &used);
        FUZZ_CHECK(err == 0 && used == codec, "re-encoding with codec 0x%x: %d", codec, err);
        uint8_t *exact = dup_bytes(enc, len);
        err = blco_codec_index_decode(NULL, m, used, exact, len, n, back);
        FUZZ_CHECK(err == 0 && memcmp(back, idx, n * 8) == 0,
                   "codec 0x%x: decode(encode(x)) != x (%d)", codec, err);
        free(exact);
        free(enc);
    }
    free(alto);
    free(back);
}

static void value_roundtrip(int value_type, int codec, const double *val, uint64_t n)
{
    size_t cap = blco_codec_value_bound(n), len = 0;
    uint8_t *enc = alloc_n(cap, 1);
    double *back = alloc_n(n, 8);
    blco_codec_req_t req = {codec, 1, 0};
    int used = -1;
    int err = blco_codec_value_encode(NULL, val, n, value_type, &req, enc, cap, &len, &used);
    FUZZ_CHECK(err == 0 && used == codec, "re-encoding values with codec 0x%x: %d", codec, err);
    uint8_t *exact = dup_bytes(enc, len);
    err = blco_codec_value_decode(NULL, value_type, used, exact, len, n, back);
    FUZZ_CHECK(err == 0, "decoding re-encoded values: %d", err);
    for (uint64_t i = 0; i < n; i++)
        FUZZ_CHECK(memcmp(&back[i], &val[i], 8) == 0 || (isnan(back[i]) && isnan(val[i])),
                   "value %llu changed in a round trip", (unsigned long long)i);
    free(exact);
    free(back);
    free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    if (size < HEADER_BYTES)
        return 0;
    const int order = 2 + data[0] % 7;
    const int line_bits = data[1] < 64 ? data[1] + 1 : 64;
    const int icodec = data[2], vcodec = data[3], flags = data[4];
    const int value_type = flags & 0x01 ? BLCO_VALUES_F32 : BLCO_VALUES_F64;
    if (size < (size_t)HEADER_BYTES + (size_t)order)
        return 0;
    blco_layout_t l;
    if (make_layout(data + HEADER_BYTES, order, line_bits, &l) < 0)
        return 0;
    const uint8_t *payload = data + HEADER_BYTES + order;
    const size_t plen = size - HEADER_BYTES - (size_t)order;
    size_t ilen = (size_t)(data[7] | data[8] << 8);
    ilen = ilen < plen ? ilen : plen;
    const size_t vlen = plen - ilen;
    uint64_t n = (uint64_t)(data[5] | data[6] << 8);
    if (flags & 0x02) {
        int base = BLCO_CODEC_BASE(icodec);
        if (base == BLCO_ICODEC_RAW)
            n = ilen / 8;
        else if (base == BLCO_ICODEC_NARROW)
            n = ilen / 4;
    }

    blco_codec_map_t *m = malloc(sizeof *m);
    FUZZ_CHECK(m != NULL, "out of memory");
    blco_codec_map_init(m, &l);
    FUZZ_CHECK(m->index_bits == FUZZ_MIN(l.total_bits, l.line_bits), "index_bits %d",
               m->index_bits);
    blco_codec_ctx_t *ctx = NULL;
    if (!(flags & 0x08))
        FUZZ_CHECK(blco_codec_ctx_new(&ctx) == 0, "out of memory");
    const blco_codec_map_t *dm = flags & 0x04 ? NULL : m;

    /* Index column. */
    uint8_t *icol = dup_bytes(payload, ilen), *vcol = dup_bytes(payload + ilen, vlen);
    uint64_t *idx = alloc_n(n, 8);
    int err = blco_codec_index_decode(ctx, dm, icodec, icol, ilen, n, idx);
    FUZZ_CHECK(err <= 0, "positive return %d", err);
    if (err == 0) {
        FUZZ_CHECK(n > 0, "n = 0 accepted");
        int bits = dm ? dm->index_bits : 64;
        for (uint64_t i = 0; bits < 64 && i < n; i++)
            FUZZ_CHECK(idx[i] >> bits == 0, "index %llu = 0x%llx wider than %d bits",
                       (unsigned long long)i, (unsigned long long)idx[i], bits);
        if (BLCO_CODEC_BASE(icodec) == BLCO_ICODEC_DELTA) {
            /* Delta columns decode to strictly increasing ALTO indices. */
            for (uint64_t i = 1; i < n; i++) {
                uint64_t a = dm ? blco_codec_index_to_alto(dm, idx[i - 1]) : idx[i - 1];
                uint64_t b = dm ? blco_codec_index_to_alto(dm, idx[i]) : idx[i];
                FUZZ_CHECK(a < b, "delta column not increasing at %llu", (unsigned long long)i);
            }
        }
        if (dm) {
            uint64_t bcoord[BLCO_MAX_MODES] = {0};
            blco_codec_index_check(dm, bcoord, idx, n);
            index_roundtrip(dm, icodec, idx, n);
        }
    }

    /* Value column. */
    double *val = alloc_n(n, 8);
    err = blco_codec_value_decode(ctx, value_type, vcodec, vcol, vlen, n, val);
    FUZZ_CHECK(err <= 0, "positive return %d", err);
    if (err == 0) {
        for (uint64_t i = 0; value_type == BLCO_VALUES_F32 && i < n; i++)
            FUZZ_CHECK(isnan(val[i]) || (double)(float)val[i] == val[i],
                       "f32 value %llu is not a float", (unsigned long long)i);
        value_roundtrip(value_type, vcodec, val, n);
    }

    /* The same columns as a stored segment. */
    uint8_t *stored = dup_bytes(payload, plen);
    blco_segment_t sg = {0};
    sg.nnz = n;
    sg.index_bytes = ilen;
    sg.value_bytes = vlen;
    sg.index_codec = icodec;
    sg.value_codec = vcodec;
    sg.raw_index_bits = (uint32_t)m->index_bits + (flags & 0x10 ? 1 : 0);
    err = blco_codec_decode_segment(ctx, &l, value_type, &sg, stored, idx, val);
    FUZZ_CHECK(err <= 0, "positive return %d", err);
    if (err == 0) {
        FUZZ_CHECK(!(flags & 0x10), "a wrong raw_index_bits was accepted");
        for (uint64_t i = 0; m->index_bits < 64 && i < n; i++)
            FUZZ_CHECK(idx[i] >> m->index_bits == 0, "segment index %llu too wide",
                       (unsigned long long)i);
    }

    free(stored);
    free(val);
    free(idx);
    free(icol);
    free(vcol);
    blco_codec_ctx_free(ctx);
    free(m);
    return 0;
}
