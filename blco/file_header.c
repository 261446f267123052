/* .blco header and tables: little-endian field-by-field encoding, decoding and the
 * reader's validation rules of FORMAT.md. */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "blco_internal.h"
#include "file_internal.h"

static const uint8_t magic[8] = {0x89, 'B', 'L', 'C', 'O', '\r', '\n', 0x1a};

static void put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    blco_put_u64(p, v);
}
static double get_f64(const uint8_t *p)
{
    uint64_t v = blco_get_u64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

uint64_t blco_checksum(const void *p, size_t n) { return XXH3_64bits(p, n); }

uint64_t blco_align4k(uint64_t x) { return (x + BLCO_FILE_ALIGN - 1) & ~(uint64_t)(BLCO_FILE_ALIGN - 1); }

uint64_t blco_block_entry_bytes(int order) { return 40 + 8 * (uint64_t)order; }

void blco_header_encode(const blco_file_info_t *in, uint8_t *h)
{
    const blco_layout_t *l = &in->layout;
    memset(h, 0, BLCO_HEADER_BYTES);
    memcpy(h, magic, 8);
    blco_put_u16(h + 8, BLCO_FORMAT_MAJOR);
    blco_put_u16(h + 10, (uint16_t)in->version_minor); /* the writer's: FORMAT.md, header */
    blco_put_u32(h + 12, BLCO_HEADER_BYTES);
    blco_put_u32(h + 16, (uint32_t)l->order);
    blco_put_u32(h + 20, (uint32_t)in->value_type);
    blco_put_u32(h + 24, (uint32_t)l->line_bits);
    blco_put_u32(h + 28, (uint32_t)l->total_bits);
    blco_put_u64(h + 32, in->nnz);
    blco_put_u64(h + 40, in->nblocks);
    blco_put_u64(h + 48, in->nsegments);
    blco_put_u64(h + 56, in->segment_nnz);
    put_f64(h + 64, in->norm2);
    blco_put_u64(h + 72, in->duplicates);
    blco_put_u64(h + 80, in->block_table_offset);
    blco_put_u64(h + 88, in->nblocks * blco_block_entry_bytes(l->order));
    blco_put_u64(h + 96, in->block_table_checksum);
    blco_put_u64(h + 104, in->segment_table_offset);
    blco_put_u64(h + 112, in->nsegments * BLCO_SEGMENT_ENTRY_BYTES);
    blco_put_u64(h + 120, in->segment_table_checksum);
    blco_put_u64(h + 128, in->file_bytes);
    blco_put_u64(h + 136, in->max_segment_bytes);
    for (int n = 0; n < l->order; n++) {
        blco_put_u64(h + 144 + 8 * n, l->dims[n]);
        blco_put_u64(h + 272 + 16 * n, l->alto_mask[n][0]);
        blco_put_u64(h + 280 + 16 * n, l->alto_mask[n][1]);
        h[528 + n] = (uint8_t)l->low_bits[n];
        h[544 + n] = (uint8_t)l->pos[n];
    }
    blco_put_u32(h + 560, (uint32_t)in->pack_codec);
    blco_put_u32(h + 564, (uint32_t)in->pack_zstd_level);
    blco_put_u32(h + 568, (uint32_t)in->source_base);
    memcpy(h + 576, in->creator, strnlen(in->creator, 64));
    if (in->relabeled_modes) {
        blco_put_u32(h + 640, (uint32_t)in->reorder);
        blco_put_u32(h + 644, in->relabeled_modes);
        blco_put_u64(h + 648, in->labels_offset);
        blco_put_u64(h + 656, in->labels_bytes);
        put_f64(h + 664, in->reorder_seconds);
        for (int n = 0; n < l->order; n++)
            blco_put_u64(h + 672 + 8 * n, in->labels_checksum[n]);
    }
    blco_put_u64(h + 4088, blco_checksum(h, 4088));
}

static int is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

int blco_header_decode(const uint8_t *h, uint64_t file_size, blco_file_info_t *out,
                       blco_diag_t *diag)
{
    memset(out, 0, sizeof *out);
    /* A foreign file is foreign whatever its size; a short one that starts like a .blco
     * file is a truncated one. */
    if (memcmp(h, magic, file_size < 8 ? (size_t)file_size : 8) != 0)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT, "not a .blco file (wrong magic)");
    if (file_size < BLCO_HEADER_BYTES)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                             "truncated: %llu bytes, shorter than the 4096-byte header",
                             (unsigned long long)file_size);
    int major = blco_get_u16(h + 8), minor = blco_get_u16(h + 10);
    if (major > BLCO_FORMAT_MAJOR)
        return blco_diag_set(diag, 0, -BLCO_EVERSION,
                             "written in format version %d.%d by a newer blco; this reader "
                             "knows version %d.x: upgrade blco",
                             major, minor, BLCO_FORMAT_MAJOR);
    if (major != BLCO_FORMAT_MAJOR)
        return blco_diag_set(diag, 0, -BLCO_EVERSION, "unknown format version %d.%d", major,
                             minor);
    if (blco_get_u64(h + 4088) != blco_checksum(h, 4088))
        return blco_diag_set(diag, 0, -BLCO_ECHECKSUM, "corrupt header (checksum mismatch)");

    out->version_major = major;
    out->version_minor = minor;
    int order = (int)blco_get_u32(h + 16);
    out->value_type = (int)blco_get_u32(h + 20);
    int line_bits = (int)blco_get_u32(h + 24);
    int total_bits = (int)blco_get_u32(h + 28);
    out->nnz = blco_get_u64(h + 32);
    out->nblocks = blco_get_u64(h + 40);
    out->nsegments = blco_get_u64(h + 48);
    out->segment_nnz = blco_get_u64(h + 56);
    out->norm2 = get_f64(h + 64);
    out->duplicates = blco_get_u64(h + 72);
    out->block_table_offset = blco_get_u64(h + 80);
    uint64_t bt_bytes = blco_get_u64(h + 88);
    out->block_table_checksum = blco_get_u64(h + 96);
    out->segment_table_offset = blco_get_u64(h + 104);
    uint64_t st_bytes = blco_get_u64(h + 112);
    out->segment_table_checksum = blco_get_u64(h + 120);
    out->file_bytes = blco_get_u64(h + 128);
    out->max_segment_bytes = blco_get_u64(h + 136);
    out->pack_codec = (int)blco_get_u32(h + 560);
    out->pack_zstd_level = (int)blco_get_u32(h + 564);
    out->source_base = (int)blco_get_u32(h + 568);
    memcpy(out->creator, h + 576, 64);
    out->creator[64] = 0;
    out->reorder = (int)blco_get_u32(h + 640);
    out->relabeled_modes = blco_get_u32(h + 644);
    out->labels_offset = blco_get_u64(h + 648);
    out->labels_bytes = blco_get_u64(h + 656);
    out->reorder_seconds = get_f64(h + 664);
    for (int n = 0; n < BLCO_MAX_MODES; n++)
        out->labels_checksum[n] = blco_get_u64(h + 672 + 8 * n);

#define BAD(...) return blco_diag_set(diag, 0, -BLCO_EFORMAT, "inconsistent header: " __VA_ARGS__)
    if (blco_get_u32(h + 12) != BLCO_HEADER_BYTES)
        BAD("header size %u", blco_get_u32(h + 12));
    if (order < 2 || order > BLCO_MAX_MODES)
        BAD("order %d", order);
    if (out->value_type != BLCO_VALUES_F64 && out->value_type != BLCO_VALUES_F32)
        BAD("value type %d", out->value_type);
    uint64_t dims[BLCO_MAX_MODES];
    for (int n = 0; n < BLCO_MAX_MODES; n++) {
        dims[n] = blco_get_u64(h + 144 + 8 * n);
        if ((n < order) != (dims[n] != 0))
            BAD("dim %d is %llu", n + 1, (unsigned long long)dims[n]);
    }
    /* The layout follows from dims and line_bits: recompute it and compare. */
    blco_layout_t *l = &out->layout;
    if (line_bits < 1 || line_bits > 64 || blco_layout_init(l, order, dims, line_bits) < 0)
        BAD("layout of %d modes with a %d-bit line", order, line_bits);
    if (l->total_bits != total_bits)
        BAD("%d index bits, the dims need %d", total_bits, l->total_bits);
    for (int n = 0; n < order; n++)
        if (blco_get_u64(h + 272 + 16 * n) != l->alto_mask[n][0] ||
            blco_get_u64(h + 280 + 16 * n) != l->alto_mask[n][1] ||
            h[528 + n] != l->low_bits[n] || h[544 + n] != l->pos[n])
            BAD("masks or fields of mode %d", n + 1);
    if (!is_pow2(out->segment_nnz) || out->segment_nnz > (1ull << 30))
        BAD("segment size %llu", (unsigned long long)out->segment_nnz);
    if (out->nnz == 0 || out->nblocks == 0 || out->nblocks > out->nnz ||
        out->nsegments < out->nblocks || out->nsegments > out->nnz)
        BAD("%llu nonzeros in %llu blocks and %llu segments", (unsigned long long)out->nnz,
            (unsigned long long)out->nblocks, (unsigned long long)out->nsegments);
    uint64_t bt_want = out->nblocks * blco_block_entry_bytes(order);
    uint64_t st_want = out->nsegments * BLCO_SEGMENT_ENTRY_BYTES;
    if (bt_bytes != bt_want || st_bytes != st_want)
        BAD("table sizes");
    uint64_t bt = out->block_table_offset, st = out->segment_table_offset;
    if (bt % BLCO_FILE_ALIGN || bt < BLCO_HEADER_BYTES || bt > (1ull << 60) ||
        bt_bytes > (1ull << 60) || st != bt + blco_align4k(bt_bytes) || st_bytes > (1ull << 60))
        BAD("table offsets");
    uint64_t end = blco_align4k(st + st_bytes);
    if (out->relabeled_modes) {
        /* The labels section follows the segment table: u32 per index of each relabeled
         * mode, each mode's array padded to 8 bytes. */
        if (minor < 1 || out->relabeled_modes >> order)
            BAD("relabeled modes 0x%x in version %d.%d", out->relabeled_modes, major, minor);
        uint64_t want = 0;
        for (int n = 0; n < order; n++)
            if (out->relabeled_modes >> n & 1) {
                if (dims[n] > (1ull << 32))
                    BAD("mode %d relabeled with %llu indices (at most 2^32)", n + 1,
                        (unsigned long long)dims[n]);
                want += (4 * dims[n] + 7) & ~(uint64_t)7;
            }
        if (out->labels_offset != end || out->labels_bytes != want)
            BAD("labels section at %llu, %llu bytes", (unsigned long long)out->labels_offset,
                (unsigned long long)out->labels_bytes);
        end = blco_align4k(end + want);
    } else if (out->reorder || out->labels_offset || out->labels_bytes) {
        BAD("a labels section without relabeled modes");
    }
    if (out->file_bytes != end)
        BAD("file size %llu", (unsigned long long)out->file_bytes);
#undef BAD
    if (file_size < out->file_bytes)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT, "truncated: %llu of %llu bytes",
                             (unsigned long long)file_size,
                             (unsigned long long)out->file_bytes);
    if (file_size > out->file_bytes)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                             "trailing data: %llu bytes, the header says %llu",
                             (unsigned long long)file_size,
                             (unsigned long long)out->file_bytes);
    return 0;
}

void blco_block_entry_encode(const blco_file_block_t *b, int order, uint8_t *p)
{
    blco_put_u64(p, b->b.key);
    blco_put_u64(p + 8, b->b.start);
    blco_put_u64(p + 16, b->b.nnz);
    blco_put_u64(p + 24, b->first_segment);
    blco_put_u64(p + 32, b->nsegments);
    for (int n = 0; n < order; n++)
        blco_put_u64(p + 40 + 8 * n, b->b.coord[n]);
}

void blco_block_entry_decode(const uint8_t *p, int order, blco_file_block_t *b)
{
    memset(b, 0, sizeof *b);
    b->b.key = blco_get_u64(p);
    b->b.start = blco_get_u64(p + 8);
    b->b.nnz = blco_get_u64(p + 16);
    b->first_segment = blco_get_u64(p + 24);
    b->nsegments = blco_get_u64(p + 32);
    for (int n = 0; n < order; n++)
        b->b.coord[n] = blco_get_u64(p + 40 + 8 * n);
}

void blco_segment_entry_encode(const blco_segment_t *s, uint8_t *p)
{
    memset(p, 0, BLCO_SEGMENT_ENTRY_BYTES);
    blco_put_u64(p, s->offset);
    blco_put_u64(p + 8, s->block);
    blco_put_u64(p + 16, s->first_nnz);
    blco_put_u64(p + 24, s->nnz);
    blco_put_u64(p + 32, s->index_bytes);
    blco_put_u64(p + 40, s->value_bytes);
    p[48] = (uint8_t)s->index_codec;
    p[49] = (uint8_t)s->value_codec;
    blco_put_u32(p + 52, s->raw_index_bits);
    blco_put_u64(p + 56, s->checksum);
}

void blco_segment_entry_decode(const uint8_t *p, blco_segment_t *s)
{
    s->offset = blco_get_u64(p);
    s->block = blco_get_u64(p + 8);
    s->first_nnz = blco_get_u64(p + 16);
    s->nnz = blco_get_u64(p + 24);
    s->index_bytes = blco_get_u64(p + 32);
    s->value_bytes = blco_get_u64(p + 40);
    s->index_codec = p[48];
    s->value_codec = p[49];
    s->raw_index_bits = blco_get_u32(p + 52);
    s->checksum = blco_get_u64(p + 56);
}

uint64_t blco_segment_disk_bytes(const blco_segment_t *s)
{
    return blco_align4k(s->index_bytes + s->value_bytes);
}

int blco_tables_validate(const blco_file_info_t *in, const blco_file_block_t *blocks,
                         const blco_segment_t *segs, blco_diag_t *diag)
{
    const blco_layout_t *l = &in->layout;
    uint64_t nnz = 0, seg = 0, end = BLCO_HEADER_BYTES, max_seg = 0;
    uint64_t key_limit = l->key_bits >= 64 ? ~0ull : (1ull << l->key_bits) - 1;
#define BAD(...) return blco_diag_set(diag, 0, -BLCO_EFORMAT, __VA_ARGS__)
    for (uint64_t b = 0; b < in->nblocks; b++) {
        const blco_file_block_t *bk = &blocks[b];
        if (bk->b.start != nnz || bk->b.nnz == 0 || bk->b.nnz > in->nnz - nnz)
            BAD("block %llu: nonzero range does not follow the previous block",
                (unsigned long long)b);
        if (bk->first_segment != seg || bk->nsegments == 0 ||
            bk->nsegments > in->nsegments - seg)
            BAD("block %llu: segment range is inconsistent", (unsigned long long)b);
        if (bk->b.key > key_limit || (b && bk->b.key < blocks[b - 1].b.key))
            BAD("block %llu: key out of order or range", (unsigned long long)b);
        uint64_t bc[BLCO_MAX_MODES];
        blco_layout_block_coord(l, bk->b.key, bc);
        for (int n = 0; n < l->order; n++)
            if (bc[n] != bk->b.coord[n])
                BAD("block %llu: block coordinates do not match its key", (unsigned long long)b);
        uint64_t bnnz = 0;
        for (uint64_t s = seg; s < seg + bk->nsegments; s++) {
            const blco_segment_t *sg = &segs[s];
            if (sg->block != b || sg->first_nnz != nnz + bnnz || sg->nnz == 0 ||
                sg->nnz > in->segment_nnz || sg->nnz > bk->b.nnz - bnnz)
                BAD("segment %llu: nonzero range is inconsistent", (unsigned long long)s);
            if (sg->offset != end ||
                sg->index_bytes > in->block_table_offset ||
                sg->value_bytes > in->block_table_offset ||
                sg->offset + blco_segment_disk_bytes(sg) > in->block_table_offset)
                BAD("segment %llu: extent is outside the data region or overlaps",
                    (unsigned long long)s);
            end = sg->offset + blco_segment_disk_bytes(sg);
            max_seg = BLCO_MAX(max_seg, sg->index_bytes + sg->value_bytes);
            bnnz += sg->nnz;
        }
        if (bnnz != bk->b.nnz)
            BAD("block %llu: its segments hold %llu nonzeros, not %llu", (unsigned long long)b,
                (unsigned long long)bnnz, (unsigned long long)bk->b.nnz);
        nnz += bk->b.nnz;
        seg += bk->nsegments;
    }
    if (nnz != in->nnz || seg != in->nsegments)
        BAD("the tables hold %llu nonzeros in %llu segments, the header says %llu in %llu",
            (unsigned long long)nnz, (unsigned long long)seg, (unsigned long long)in->nnz,
            (unsigned long long)in->nsegments);
    if (max_seg != in->max_segment_bytes) /* readers size buffers by it */
        BAD("the header's largest segment is not the segment table's");
    if (end != in->block_table_offset)
        BAD("the block table does not follow the last segment");
#undef BAD
    return 0;
}
