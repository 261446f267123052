/* Column codecs of .blco segments (FORMAT.md, "Codecs"): raw, narrow and delta index
 * columns, f64/f32 value columns plain or as byte planes, each optionally one zstd frame.
 * Internal to the library; decoders are the boundary that hostile files cross. */
#ifndef BLCO_CODEC_H
#define BLCO_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "blco/file.h"
#include "blco/layout.h"
#if defined(__BMI2__)
#include <immintrin.h>
#endif

/* Codec bytes as stored in the segment table: a base codec in the low 7 bits, and
 * BLCO_CODEC_ZSTD when the base encoding was then compressed as one zstd frame. */
enum blco_index_codec { BLCO_ICODEC_RAW = 0, BLCO_ICODEC_NARROW = 1, BLCO_ICODEC_DELTA = 2 };
enum blco_value_codec {
    BLCO_VCODEC_F64 = 0,        /* f64 per nonzero */
    BLCO_VCODEC_F32 = 1,        /* f32 per nonzero (value_type f32 only) */
    BLCO_VCODEC_F64_PLANES = 2, /* byte k of every f64, for k = 0..7 (value_type f64) */
    BLCO_VCODEC_F32_PLANES = 3, /* byte k of every f32, for k = 0..3 (value_type f32) */
    BLCO_VCODEC_INT = 4,        /* whole numbers, bit-packed in frames (either value_type) */
    BLCO_VCODEC_DEC = 5,        /* m / 10^s, the m as the integer codec's (value_type f64) */
};
#define BLCO_CODEC_ZSTD 0x80
#define BLCO_CODEC_BASE(c) ((c)&0x7f)
/* A request only, never stored: let the encoder pick (policy in blco_codec_req_t). */
#define BLCO_CODEC_AUTO 0xff

/* Deltas per frame of the delta codec; values per frame of the integer codec. */
#define BLCO_DELTA_FRAME 128
#define BLCO_INT_FRAME 32
/* The largest scale of the decimal codec: 10^s is exact in f64 up to 10^22. */
#define BLCO_DEC_MAX_SCALE 22

/* What an encoder is asked for.
 * codec: BLCO_CODEC_AUTO, or a base codec optionally | BLCO_CODEC_ZSTD (used as asked).
 * zstd_level: with an explicit ZSTD flag, the level (0 = 3). Under AUTO, 0 means no zstd
 *   was asked for; any other level asks for it (negative levels are zstd's fast modes).
 * AUTO picks, per column:
 *   index: DELTA when its size is below NARROW's (when the layout allows it) and RAW's,
 *     else NARROW if allowed, else RAW; with zstd asked for, the base encoding is
 *     compressed at that level and kept when it saves >= min_saving (default 10%).
 *   value: plain F64 (F32 for value_type f32); zstd of the plain column and of its byte
 *     planes at the asked level, the smaller kept when it saves >= min_saving; with no
 *     zstd asked for, the same at level 1 kept only when it saves >= 12%.
 * min_saving: fraction of the base size zstd must save to be kept under AUTO with a
 *   level; 0 = 10%. Negative: keep zstd whenever it is smaller at all. */
typedef struct blco_codec_req {
    int codec;
    int zstd_level;
    double min_saving;
} blco_codec_req_t;

/* ---- ALTO to BLCO in-block index conversion ---- */

/* Precomputed per layout: where each mode's in-block bits sit in the in-block ALTO index
 * (the low line_bits bits of the ALTO index) and in the BLCO index. Both are below
 * 2^index_bits, index_bits = sum(low_bits) = min(total_bits, line_bits). */
typedef struct blco_codec_map {
    int order;
    int index_bits;
    int nfield;                          /* modes with in-block bits */
    int use_table;                       /* byte tables rather than pext/pdep */
    uint64_t field_alto[BLCO_MAX_MODES]; /* field f's positions in the ALTO index */
    int field_pos[BLCO_MAX_MODES];       /* where field f starts in the BLCO index */
    /* per mode, for blco_codec_index_check */
    uint64_t dims[BLCO_MAX_MODES];
    uint64_t low_mask[BLCO_MAX_MODES];
    int pos[BLCO_MAX_MODES];
    /* to_index[j][b]: the BLCO bits of ALTO byte j holding b; to_alto the inverse. */
    uint64_t to_index[8][256];
    uint64_t to_alto[8][256];
} blco_codec_map_t;

/* Builds the map of a layout (about 33 KiB: keep one per file or per context). Never
 * fails for a layout from blco_layout_init. */
void blco_codec_map_init(blco_codec_map_t *m, const blco_layout_t *l);

static inline uint64_t blco_codec_alto_to_index(const blco_codec_map_t *m, uint64_t a)
{
    uint64_t r = 0;
#if defined(__BMI2__)
    if (!m->use_table) {
        for (int f = 0; f < m->nfield; f++)
            r |= _pext_u64(a, m->field_alto[f]) << m->field_pos[f];
        return r;
    }
#endif
    for (int j = 0; a; j++, a >>= 8)
        r |= m->to_index[j][a & 0xff];
    return r;
}

static inline uint64_t blco_codec_index_to_alto(const blco_codec_map_t *m, uint64_t x)
{
    uint64_t r = 0;
    for (int j = 0; x; j++, x >>= 8)
        r |= m->to_alto[j][x & 0xff];
    return r;
}

/* Array forms; `out` may equal `in`. */
void blco_codec_map_to_index(const blco_codec_map_t *m, const uint64_t *alto, uint64_t *out,
                             uint64_t n);
void blco_codec_map_to_alto(const blco_codec_map_t *m, const uint64_t *idx, uint64_t *out,
                            uint64_t n);

/* Checks that every decoded in-block index of a block whose block coordinates are
 * `bcoord` names a coordinate inside the dims: a file may be consistent and checksummed
 * and still point outside the tensor. Returns 0 or -BLCO_EFORMAT. */
int blco_codec_index_check(const blco_codec_map_t *m, const uint64_t *bcoord, const uint64_t *idx,
                           uint64_t n);

/* ---- contexts ---- */

/* Per-thread state: zstd contexts, scratch buffers grown on demand (malloc, up to about
 * 2 x 8 bytes per nonzero of the largest segment seen) and a cached map for the segment
 * calls. Not thread-safe: one per thread. Functions below accept a NULL context when no
 * zstd frame and no scratch is involved, and otherwise make a temporary one. */
typedef struct blco_codec_ctx blco_codec_ctx_t;

/* Returns 0 or -ENOMEM. */
int blco_codec_ctx_new(blco_codec_ctx_t **out);
void blco_codec_ctx_free(blco_codec_ctx_t *c);

/* ---- columns ---- */

/* Upper bounds of an encoded column of n entries, whatever the codec (for buffers). */
size_t blco_codec_index_bound(uint64_t n);
size_t blco_codec_value_bound(uint64_t n);

/* Encodes one segment's index column from its in-block ALTO indices, strictly increasing
 * and below 2^index_bits, into out[0, cap). *len receives the encoded size and *used the
 * codec byte to store. Returns 0, -EINVAL (n = 0, indices not increasing or too wide,
 * NARROW asked for when index_bits > 32, an unknown codec), -ENOSPC (cap too small for
 * an explicit codec; AUTO needs at most blco_codec_index_bound), -ENOMEM, -BLCO_EFORMAT
 * (zstd failed). */
int blco_codec_index_encode(blco_codec_ctx_t *ctx, const blco_codec_map_t *m, const uint64_t *alto,
                            uint64_t n, const blco_codec_req_t *req, uint8_t *out, size_t cap,
                            size_t *len, int *used);

/* Decodes an index column of n entries stored with `codec` from in[0, len) into n
 * in-block BLCO indices. With m NULL (for tests of the delta codec), delta columns give
 * their in-block ALTO indices, raw columns are not width-checked, narrow ones refused. Every
 * decoded index is below 2^index_bits, and delta-coded ones strictly increase in ALTO
 * order; the contents of out are unspecified on failure. Returns 0, -BLCO_EFORMAT
 * (lengths that do not fit the codec and n, a truncated or overlong column, a zstd
 * frame that is invalid or states another size, a delta that overflows, an index too
 * wide, n = 0, NARROW in a layout wider than 32 bits), -BLCO_EVERSION (a base codec this
 * version does not know), -ENOMEM. Never reads in[] beyond len nor writes past out[n). */
int blco_codec_index_decode(blco_codec_ctx_t *ctx, const blco_codec_map_t *m, int codec,
                            const uint8_t *in, size_t len, uint64_t n, uint64_t *out);

/* Encodes n values as value_type (BLCO_VALUES_F64 or BLCO_VALUES_F32: values are rounded
 * to f32). Returns as blco_codec_index_encode; -EINVAL also for a codec that does not fit
 * the value type. */
int blco_codec_value_encode(blco_codec_ctx_t *ctx, const double *val, uint64_t n, int value_type,
                            const blco_codec_req_t *req, uint8_t *out, size_t cap, size_t *len,
                            int *used);

/* Decodes n values of a file whose header says value_type, widened to f64. Returns 0,
 * -BLCO_EFORMAT (wrong length, bad zstd frame, a codec of the other value type, n = 0),
 * -BLCO_EVERSION (unknown base codec), -EINVAL (unknown value_type), -ENOMEM. */
int blco_codec_value_decode(blco_codec_ctx_t *ctx, int value_type, int codec, const uint8_t *in,
                            size_t len, uint64_t n, double *out);

/* ---- segments, for the file writer and reader ---- */

/* Encodes both columns of a segment of n nonzeros into out: index column, then value
 * column right after it. pack_codec is an enum blco_pack_codec (blco/file.h):
 *   AUTO (the default): the index column AUTO without zstd; the value column plain, or
 *     zstd (of its planes or of itself, the smaller; at zstd_level, 0 = 1) when that makes
 *     the segment at least 20 % smaller. Segments are then decoded by a GPU unless zstd
 *     saves that much.
 *   COMPACT (the default before 2026-11-26): both columns AUTO; zstd_level 0 means no zstd
 *     asked for.
 *   RAW: RAW indices, plain values. NARROW: NARROW where index_bits <= 32, else RAW.
 *   DELTA: DELTA indices, plain values.
 *   ZSTD: AUTO's base picks, then zstd (level 0 = 3) on both columns wherever it is
 *     smaller at all.
 * alto: in-block ALTO indices (low line_bits bits), strictly increasing. Returns as the
 * column encoders; -ENOSPC when cap < index bound + value bound is too small. */
int blco_codec_encode_segment(blco_codec_ctx_t *ctx, const blco_layout_t *l, int pack_codec,
                              int zstd_level, int value_type, const uint64_t *alto,
                              const double *val, uint64_t n, uint8_t *out, size_t cap, size_t *ilen,
                              size_t *vlen, int *icodec, int *vcodec);

/* Decodes a segment's stored bytes (index_bytes then value_bytes as the table says) into
 * sg->nnz in-block BLCO indices and f64 values. Returns as the column decoders, and
 * -BLCO_EFORMAT when raw_index_bits disagrees with the layout. It does not check the
 * coordinates against the dims: see blco_codec_index_check. */
int blco_codec_decode_segment(blco_codec_ctx_t *ctx, const blco_layout_t *l, int value_type,
                              const blco_segment_t *sg, const void *stored, uint64_t *idx,
                              double *val);
/* One column or both (parts: BLCO_SEGMENT_INDEX, BLCO_SEGMENT_VALUES), so two threads can
 * decode the columns of one segment with two contexts. */
int blco_codec_decode_segment_part(blco_codec_ctx_t *ctx, const blco_layout_t *l, int value_type,
                                   const blco_segment_t *sg, const void *stored, int parts,
                                   uint64_t *idx, double *val);

/* ---- what a GPU decodes ---- */

/* 1 when the GPU decoder (gpu/decode_cuda.cu) decodes a segment of a file of value_type
 * stored with these codec bytes: no zstd frame, raw, narrow or delta indices, plain,
 * byte-plane or integer values of value_type, or decimal ones of f64; else 0. */
int blco_codec_device_decodes(int value_type, int index_codec, int value_codec);

/* Says once, as a warning through the library's log, that `host` of the `nbatches`
 * batches of `path` streamed to a GPU are decoded by CPU threads (their codecs are not
 * device-decodable), with the bytes per nonzero of such segments among [seg0, seg1) as
 * stored and about what `blco-pack --codec gpu` would store for them. */
void blco_codec_note_host_decode(const blco_file_t *f, const char *path, uint64_t host,
                                 uint64_t nbatches, uint64_t seg0, uint64_t seg1);

/* ---- the delta codec's base encoding (codec_delta.c), exposed for tests ---- */

/* Size of the delta encoding of n strictly increasing indices, and its largest value. */
size_t blco_delta_size(const uint64_t *alto, uint64_t n);
size_t blco_delta_bound(uint64_t n);
/* Encodes (indices already checked by the caller). Returns 0 or -ENOSPC. */
int blco_delta_encode(const uint64_t *alto, uint64_t n, uint8_t *out, size_t cap, size_t *len);
/* Decodes exactly len bytes into n indices below 2^index_bits, converted by m when not
 * NULL. Returns 0 or -BLCO_EFORMAT. */
int blco_delta_decode(const blco_codec_map_t *m, int index_bits, const uint8_t *in, size_t len,
                      uint64_t n, uint64_t *out);


/* ---- bit packing shared by the delta and integer codecs (codec_delta.c) ---- */

/* Packs k values of width w (0..64) LSB-first at q: ceil(w k / 8) bytes. */
void blco_bits_pack(const uint64_t *d, uint64_t k, int w, uint8_t *q);
/* Unpacks k (<= BLCO_DELTA_FRAME) values of width w (0..64) from p, which has `avail` >=
 * ceil(w k / 8) readable bytes; never reads past them. */
void blco_bits_unpack(const uint8_t *p, uint64_t avail, uint64_t k, int w, uint64_t *d);

/* ---- the integer codec's base encoding (codec_int.c), exposed for tests ---- */

/* Size of the integer encoding of n values (each rounded to f32 first when f32), or 0
 * when one is not a whole number in [-2^53, 2^53] or is -0. */
size_t blco_int_size(const double *val, uint64_t n, int f32);
size_t blco_int_bound(uint64_t n);
/* Encodes; -EINVAL when blco_int_size would say 0, -ENOSPC when cap is too small. */
int blco_int_encode(const double *val, uint64_t n, int f32, uint8_t *out, size_t cap, size_t *len);
/* Decodes exactly len bytes into n values. Returns 0 or -BLCO_EFORMAT (a width above 64,
 * a column shorter or longer than its frames, a value outside [-2^53, 2^53], or, when f32,
 * one that is no f32). */
int blco_int_decode(const uint8_t *in, size_t len, uint64_t n, int f32, double *out);

/* ---- the decimal codec (codec_int.c), f64 columns only ---- */

/* The smallest scale s in 1..BLCO_DEC_MAX_SCALE at which every value could be m / 10^s
 * (each value's own smallest, the largest of them), or 0 when some value is none (a
 * column of whole numbers gives 1). blco_dec_size then checks every value at that scale. */
int blco_dec_scale(const double *val, uint64_t n);
/* Size of the decimal encoding at `scale`, or 0 when a value is not exactly the f64 nearest
 * to m / 10^scale for a whole number m in [-2^53, 2^53] (or is -0). */
size_t blco_dec_size(const double *val, uint64_t n, int scale);
size_t blco_dec_bound(uint64_t n);
/* Encodes at `scale`; -EINVAL when blco_dec_size would say 0, -ENOSPC when cap is too small. */
int blco_dec_encode(const double *val, uint64_t n, int scale, uint8_t *out, size_t cap,
                    size_t *len);
/* Decodes exactly len bytes into n values. Returns 0 or -BLCO_EFORMAT (a scale outside
 * 1..BLCO_DEC_MAX_SCALE, or the integer part corrupt as for blco_int_decode). */
int blco_dec_decode(const uint8_t *in, size_t len, uint64_t n, double *out);

#endif
