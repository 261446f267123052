/* The .blco writer: nonzeros arrive in ALTO order, are cut into blocks (by key) and
 * segments (by count), encoded per column, checksummed and written 4 KiB aligned to an
 * unnamed (or temporary) file that gets the output's name only once complete
 * (blco/outfile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco_internal.h"
#include "codec.h"
#include "file_internal.h"

struct blco_writer {
    char *path;
    blco_outfile_t *out;
    int fd;
    blco_layout_t l;
    blco_write_opts_t o;
    uint64_t S;
    /* the open block and the pending segment (in-block ALTO indices and values) */
    int in_block;
    uint64_t key;
    uint64_t *pend_alto;
    double *pend_val;
    uint64_t npend;
    uint64_t last[2];
    int have_last;
    /* tables, grown geometrically */
    blco_file_block_t *blocks;
    uint64_t nblocks, cap_blocks;
    blco_segment_t *segs;
    uint64_t nsegs, cap_segs;
    uint64_t nnz, offset, max_seg;
    double norm2;
    uint8_t *enc;     /* index then value column of one segment, 4 KiB padded */
    size_t enc_cap;
    blco_codec_ctx_t *codec;
    /* relabeled indices, written after the tables (the caller's arrays) */
    int reorder;
    uint32_t relabeled;
    int minor; /* the format's minor version the segments need: 2 for the integer value
                * codec, 3 for the decimal one (FORMAT.md, "Compatibility rules") */
    const uint32_t *labels[BLCO_MAX_MODES];
    double reorder_seconds;
};

void blco_write_opts_default(blco_write_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->codec = BLCO_PACK_AUTO;
    o->value_type = BLCO_VALUES_F64;
    o->segment_nnz = 1u << 20;
    o->source_base = 1;
}

const char *blco_writer_temp_path(const blco_writer_t *w)
{
    return w ? blco_outfile_temp_path(w->out) : NULL;
}

static void writer_free(blco_writer_t *w)
{
    if (!w)
        return;
    blco_outfile_abort(w->out);
    free(w->path);
    free(w->pend_alto);
    free(w->pend_val);
    free(w->blocks);
    free(w->segs);
    free(w->enc);
    blco_codec_ctx_free(w->codec);
    free(w);
}

void blco_writer_abort(blco_writer_t *w)
{
    writer_free(w);
}

static int io_error(blco_writer_t *w, int err, const char *what, blco_diag_t *diag)
{
    if (err == -ENOSPC)
        return blco_diag_set(diag, 0, err, "%s: no space left on the device while %s",
                             w->path, what);
    return blco_diag_set(diag, 0, err, "%s: %s while %s", w->path, strerror(-err), what);
}

int blco_writer_open(const char *path, const blco_layout_t *l, const blco_write_opts_t *opts,
                     blco_writer_t **out, blco_diag_t *diag)
{
    *out = NULL;
    blco_write_opts_t def;
    if (!opts) {
        blco_write_opts_default(&def);
        opts = &def;
    }
    if (l->order < 2)
        return blco_diag_set(diag, 0, -EINVAL, "a .blco tensor needs at least 2 modes");
    uint64_t S = opts->segment_nnz ? opts->segment_nnz : (1u << 20);
    if (S & (S - 1) || S > (1ull << 30))
        return blco_diag_set(diag, 0, -EINVAL,
                             "segment size %llu: must be a power of two up to 2^30",
                             (unsigned long long)S);
    if (opts->value_type != BLCO_VALUES_F64 && opts->value_type != BLCO_VALUES_F32)
        return blco_diag_set(diag, 0, -EINVAL, "unknown value type %d", opts->value_type);
    if (opts->codec < BLCO_PACK_AUTO || opts->codec > BLCO_PACK_COMPACT)
        return blco_diag_set(diag, 0, -EINVAL, "unknown codec %d", opts->codec);
    struct stat st;
    if (!opts->force && stat(path, &st) == 0)
        return blco_diag_set(diag, 0, -EEXIST, "%s exists (use --force to replace it)", path);

    blco_writer_t *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->fd = -1;
    w->l = *l;
    w->o = *opts;
    w->o.creator = NULL;
    w->S = S;
    w->offset = BLCO_HEADER_BYTES;
    int err = -ENOMEM;
    w->path = strdup(path);
    w->pend_alto = malloc(S * 8);
    w->pend_val = malloc(S * 8);
    w->enc_cap = blco_align4k(blco_codec_index_bound(S) + blco_codec_value_bound(S));
    if (posix_memalign((void **)&w->enc, BLCO_FILE_ALIGN, w->enc_cap) != 0)
        w->enc = NULL;
    if (!w->path || !w->pend_alto || !w->pend_val || !w->enc)
        goto fail;
    if ((err = blco_codec_ctx_new(&w->codec)) < 0)
        goto fail;
    if ((err = blco_outfile_open(path, opts->force, &w->out, diag)) < 0)
        goto fail;
    w->fd = blco_outfile_fd(w->out);
    *out = w;
    return 0;
fail:
    blco_writer_abort(w);
    return err;
}

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

/* Encodes, checksums and writes the pending nonzeros as one segment of the open block. */
static int flush_segment(blco_writer_t *w, blco_diag_t *diag)
{
    if (!w->npend)
        return 0;
    int err = grow((void **)&w->segs, &w->cap_segs, w->nsegs + 1, sizeof *w->segs);
    if (err < 0)
        return err;
    blco_segment_t *s = &w->segs[w->nsegs];
    memset(s, 0, sizeof *s);
    s->offset = w->offset;
    s->block = w->nblocks - 1;
    s->first_nnz = w->nnz;
    s->nnz = w->npend;
    int raw_bits = 0;
    for (int n = 0; n < w->l.order; n++)
        raw_bits += w->l.low_bits[n];
    s->raw_index_bits = (uint32_t)raw_bits;

    size_t ilen, vlen;
    err = blco_codec_encode_segment(w->codec, &w->l, w->o.codec, w->o.zstd_level,
                                    w->o.value_type, w->pend_alto, w->pend_val, w->npend, w->enc,
                                    w->enc_cap, &ilen, &vlen, &s->index_codec, &s->value_codec);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: encoding segment %llu: %s", w->path,
                             (unsigned long long)w->nsegs, blco_strerror(err));
    s->index_bytes = ilen;
    s->value_bytes = vlen;
    const int vbase = BLCO_CODEC_BASE(s->value_codec);
    w->minor = BLCO_MAX(w->minor, vbase == BLCO_VCODEC_DEC ? 3 : vbase == BLCO_VCODEC_INT ? 2 : 0);
    s->checksum = blco_checksum(w->enc, ilen + vlen);
    uint64_t disk = blco_align4k(ilen + vlen);
    memset(w->enc + ilen + vlen, 0, disk - ilen - vlen);
    if ((err = blco_pwrite_all(w->fd, w->enc, disk, w->offset)) < 0)
        return io_error(w, err, "writing a segment", diag);
    w->offset += disk;
    w->max_seg = BLCO_MAX(w->max_seg, ilen + vlen);
    w->blocks[w->nblocks - 1].nsegments++;
    w->nnz += w->npend;
    w->npend = 0;
    w->nsegs++;
    return 0;
}

int blco_writer_add(blco_writer_t *w, const uint64_t *alto_lo, const uint64_t *alto_hi,
                    const double *val, uint64_t n, blco_diag_t *diag)
{
    const blco_layout_t *l = &w->l;
    int s = l->line_bits;
    uint64_t lowmask = s >= 64 ? ~0ull : (1ull << s) - 1;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t lo = alto_lo[k], hi = alto_hi ? alto_hi[k] : 0;
        if (w->have_last && (hi < w->last[1] || (hi == w->last[1] && lo <= w->last[0])))
            return blco_diag_set(diag, 0, -EINVAL,
                                 "nonzeros must arrive in strictly increasing ALTO order "
                                 "(a repeated or unsorted coordinate)");
        w->last[0] = lo, w->last[1] = hi, w->have_last = 1;
        uint64_t key = s >= 64 ? hi : (lo >> s) | (hi << (64 - s));
        int err;
        if (!w->in_block || key != w->key || w->npend == w->S) {
            if ((err = flush_segment(w, diag)) < 0)
                return err;
        }
        if (!w->in_block || key != w->key) {
            if ((err = grow((void **)&w->blocks, &w->cap_blocks, w->nblocks + 1,
                            sizeof *w->blocks)) < 0)
                return err;
            blco_file_block_t *b = &w->blocks[w->nblocks++];
            memset(b, 0, sizeof *b);
            b->b.key = key;
            b->b.start = w->nnz;
            b->first_segment = w->nsegs;
            blco_layout_block_coord(l, key, b->b.coord);
            w->in_block = 1;
            w->key = key;
        }
        double v = val[k];
        if (w->o.value_type == BLCO_VALUES_F32)
            v = (double)(float)v;
        w->norm2 += v * v;
        w->pend_alto[w->npend] = lo & lowmask;
        w->pend_val[w->npend++] = val[k];
        w->blocks[w->nblocks - 1].b.nnz++;
    }
    return 0;
}

static int write_tables(blco_writer_t *w, blco_file_info_t *info, blco_diag_t *diag)
{
    int order = w->l.order;
    uint64_t bt_bytes = w->nblocks * blco_block_entry_bytes(order);
    uint64_t st_bytes = w->nsegs * BLCO_SEGMENT_ENTRY_BYTES;
    uint64_t bt_disk = blco_align4k(bt_bytes), st_disk = blco_align4k(st_bytes);
    uint8_t *buf = calloc(1, BLCO_MAX(bt_disk, st_disk));
    if (!buf)
        return -ENOMEM;
    int err;
    for (uint64_t b = 0; b < w->nblocks; b++)
        blco_block_entry_encode(&w->blocks[b], order, buf + b * blco_block_entry_bytes(order));
    info->block_table_offset = w->offset;
    info->block_table_checksum = blco_checksum(buf, bt_bytes);
    if ((err = blco_pwrite_all(w->fd, buf, bt_disk, w->offset)) < 0)
        goto out;
    w->offset += bt_disk;
    memset(buf, 0, BLCO_MAX(bt_disk, st_disk));
    for (uint64_t s = 0; s < w->nsegs; s++)
        blco_segment_entry_encode(&w->segs[s], buf + s * BLCO_SEGMENT_ENTRY_BYTES);
    info->segment_table_offset = w->offset;
    info->segment_table_checksum = blco_checksum(buf, st_bytes);
    if ((err = blco_pwrite_all(w->fd, buf, st_disk, w->offset)) < 0)
        goto out;
    w->offset += st_disk;
out:
    free(buf);
    return err < 0 ? io_error(w, err, "writing the tables", diag) : 0;
}

int blco_writer_set_labels(blco_writer_t *w, int reorder, uint32_t modes,
                           const uint32_t *const *new_to_old, double seconds)
{
    if (!w || (modes && (reorder <= BLCO_REORDER_NONE || !new_to_old)) || modes >> w->l.order)
        return -EINVAL;
    for (int n = 0; n < w->l.order; n++)
        if (modes >> n & 1 && (!new_to_old[n] || w->l.dims[n] > (1ull << 32)))
            return -EINVAL;
    w->reorder = modes ? reorder : 0;
    w->relabeled = modes;
    for (int n = 0; n < w->l.order; n++)
        w->labels[n] = modes >> n & 1 ? new_to_old[n] : NULL;
    w->reorder_seconds = seconds;
    return 0;
}

/* The labels section: each relabeled mode's u32 array, padded to 8 bytes, then the
 * file's padding to 4096. Written through a bounded buffer in little-endian. */
static int write_labels(blco_writer_t *w, blco_file_info_t *info, blco_diag_t *diag)
{
    enum { CHUNK = 1 << 16 };
    uint8_t *buf = malloc(4 * (size_t)CHUNK + BLCO_FILE_ALIGN);
    if (!buf)
        return -ENOMEM;
    int err = 0;
    info->labels_offset = w->offset;
    for (int n = 0; n < w->l.order && err == 0; n++) {
        if (!(w->relabeled >> n & 1))
            continue;
        XXH3_state_t *xs = XXH3_createState();
        if (!xs) {
            err = -ENOMEM;
            break;
        }
        XXH3_64bits_reset(xs);
        uint64_t d = w->l.dims[n];
        for (uint64_t k = 0; k < d && err == 0; k += CHUNK) {
            uint64_t m = BLCO_MIN((uint64_t)CHUNK, d - k);
            for (uint64_t j = 0; j < m; j++)
                blco_put_u32(buf + 4 * j, w->labels[n][k + j]);
            XXH3_64bits_update(xs, buf, 4 * m);
            uint64_t len = 4 * m;
            if (k + m == d && len % 8) { /* the mode's padding */
                memset(buf + len, 0, 4);
                len += 4;
            }
            if ((err = blco_pwrite_all(w->fd, buf, len, w->offset)) == 0)
                w->offset += len;
        }
        info->labels_checksum[n] = XXH3_64bits_digest(xs);
        XXH3_freeState(xs);
    }
    if (err == 0) {
        info->labels_bytes = w->offset - info->labels_offset;
        uint64_t pad = blco_align4k(w->offset) - w->offset;
        memset(buf, 0, pad);
        if (pad && (err = blco_pwrite_all(w->fd, buf, pad, w->offset)) == 0)
            w->offset += pad;
    }
    free(buf);
    info->reorder = w->reorder;
    info->relabeled_modes = w->relabeled;
    info->reorder_seconds = w->reorder_seconds;
    return err < 0 ? io_error(w, err, "writing the labels", diag) : 0;
}

int blco_writer_finish(blco_writer_t *w, blco_file_info_t *info_out, blco_diag_t *diag)
{
    blco_file_info_t info;
    memset(&info, 0, sizeof info);
    int err = flush_segment(w, diag);
    if (err < 0)
        goto fail;
    if (w->nnz == 0) {
        err = blco_diag_set(diag, 0, -BLCO_EEMPTY, "%s: the tensor has no nonzero", w->path);
        goto fail;
    }
    if ((err = write_tables(w, &info, diag)) < 0)
        goto fail;
    if (w->relabeled && (err = write_labels(w, &info, diag)) < 0)
        goto fail;
    info.layout = w->l;
    info.version_major = BLCO_FORMAT_MAJOR;
    info.version_minor = BLCO_MAX(w->minor, w->relabeled ? 1 : 0);
    info.value_type = w->o.value_type;
    info.nnz = w->nnz;
    info.nblocks = w->nblocks;
    info.nsegments = w->nsegs;
    info.segment_nnz = w->S;
    info.norm2 = w->norm2;
    info.duplicates = w->o.duplicates;
    info.file_bytes = w->offset;
    info.max_segment_bytes = w->max_seg;
    info.pack_codec = w->o.codec;
    info.pack_zstd_level = w->o.zstd_level;
    info.source_base = w->o.source_base;
    snprintf(info.creator, sizeof info.creator, "blco %s", blco_version());
    uint8_t *h = calloc(1, BLCO_HEADER_BYTES);
    if (!h) {
        err = -ENOMEM;
        goto fail;
    }
    blco_header_encode(&info, h);
    err = blco_pwrite_all(w->fd, h, BLCO_HEADER_BYTES, 0);
    free(h);
    if (err < 0) {
        err = io_error(w, err, "writing the header", diag);
        goto fail;
    }
    blco_outfile_t *out = w->out;
    w->out = NULL;
    w->fd = -1;
    if ((err = blco_outfile_commit(out, diag)) < 0)
        goto fail;
    if (info_out)
        *info_out = info;
    writer_free(w);
    return 0;
fail:
    blco_writer_abort(w);
    return err;
}

int blco_writer_add_tensor(blco_writer_t *w, const blco_tensor_t *t, blco_diag_t *diag)
{
    const blco_layout_t *l = &t->layout;
    if (l->order != w->l.order || memcmp(l->dims, w->l.dims, sizeof l->dims) != 0 ||
        l->line_bits != w->l.line_bits)
        return blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                             "%s: the tensor's layout differs from the file's", w->path);
    enum { CHUNK = 4096 };
    uint64_t lo[CHUNK], hi[CHUNK];
    int err = 0;
    for (uint64_t b = 0; b < t->nblocks && err == 0; b++) {
        const blco_block_t *blk = &t->blocks[b];
        for (uint64_t k = 0; k < blk->nnz && err == 0; k += CHUNK) {
            uint64_t n = BLCO_MIN((uint64_t)CHUNK, blk->nnz - k);
            for (uint64_t j = 0; j < n; j++) {
                uint64_t c[BLCO_MAX_MODES], a[2];
                blco_layout_decode(l, t->idx[blk->start + k + j], blk->coord, c);
                blco_layout_alto(l, c, a);
                lo[j] = a[0];
                hi[j] = a[1];
            }
            err = blco_writer_add(w, lo, hi, t->val + blk->start + k, n, diag);
        }
    }
    return err;
}

int blco_tensor_write(const blco_tensor_t *t, const char *path, const blco_write_opts_t *opts,
                      blco_file_info_t *info, blco_diag_t *diag)
{
    blco_write_opts_t o;
    if (opts)
        o = *opts;
    else
        blco_write_opts_default(&o);
    if (!o.duplicates)
        o.duplicates = t->duplicates;
    blco_writer_t *w;
    int err = blco_writer_open(path, &t->layout, &o, &w, diag);
    if (err < 0)
        return err;
    if ((err = blco_writer_add_tensor(w, t, diag)) < 0) {
        blco_writer_abort(w);
        return err;
    }
    return blco_writer_finish(w, info, diag);
}
