/* The .blco reader: validates the header and tables on open, then reads, verifies and
 * decodes segments on request. Every check of FORMAT.md happens here, so a corrupt or
 * truncated file is an error with a reason, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "blco_internal.h"
#if HAVE_OPENMP
#include <omp.h>
#endif
#include "codec.h"
#include "file_internal.h"

struct blco_file {
    int fd;
    char *path;
    blco_file_info_t info;
    blco_file_block_t *blocks;
    blco_segment_t *segs;
    blco_codec_ctx_t *codec;
    blco_codec_map_t map;
};

void blco_file_close(blco_file_t *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f->blocks);
    free(f->segs);
    blco_codec_ctx_free(f->codec);
    free(f);
}

/* Reads and checks one table: `bytes` at `off`, against `sum`. */
static int read_table(blco_file_t *f, uint64_t off, uint64_t bytes, uint64_t sum,
                      const char *name, uint8_t **out, blco_diag_t *diag)
{
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return blco_diag_set(diag, 0, -ENOMEM, "%s: the %s table (%llu bytes) does not fit in "
                             "memory", f->path, name, (unsigned long long)bytes);
    int err = blco_pread_all(f->fd, *out, bytes, off);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: reading the %s table: %s", f->path, name,
                             err == -BLCO_EFORMAT ? "truncated" : strerror(-err));
    if (blco_checksum(*out, bytes) != sum)
        return blco_diag_set(diag, 0, -BLCO_ECHECKSUM,
                             "%s: corrupt %s table (checksum mismatch)", f->path, name);
    return 0;
}

/* Where mode n's labels start in the file. */
static uint64_t labels_at(const blco_file_info_t *in, int mode)
{
    uint64_t off = in->labels_offset;
    for (int n = 0; n < mode; n++)
        if (in->relabeled_modes >> n & 1)
            off += (4 * in->layout.dims[n] + 7) & ~(uint64_t)7;
    return off;
}

/* Reads mode `mode`'s labels in bounded chunks, checks their checksum and that they are a
 * permutation of 0..dims-1, and copies them to `out` when it is not NULL. */
static int labels_check(blco_file_t *f, int mode, uint32_t *out, blco_diag_t *diag)
{
    const blco_file_info_t *in = &f->info;
    enum { CHUNK = 1 << 16 };
    uint64_t d = in->layout.dims[mode], off = labels_at(in, mode);
    uint8_t *buf = malloc(4 * (size_t)CHUNK);
    uint64_t *seen = calloc((size_t)((d + 63) / 64), 8);
    XXH3_state_t *xs = XXH3_createState();
    int err = 0, bad = 0;
    uint64_t bad_at = 0, bad_v = 0;
    if (!buf || !seen || !xs) {
        err = blco_diag_set(diag, 0, -ENOMEM, "%s: no memory to check the labels of mode %d",
                            f->path, mode + 1);
        goto out;
    }
    XXH3_64bits_reset(xs);
    for (uint64_t k = 0; k < d; k += CHUNK) {
        uint64_t m = BLCO_MIN((uint64_t)CHUNK, d - k);
        if ((err = blco_pread_all(f->fd, buf, 4 * m, off + 4 * k)) < 0) {
            err = blco_diag_set(diag, 0, err, "%s: reading the labels of mode %d: %s", f->path,
                                mode + 1, err == -BLCO_EFORMAT ? "truncated" : strerror(-err));
            goto out;
        }
        XXH3_64bits_update(xs, buf, 4 * m);
        for (uint64_t j = 0; j < m && !bad; j++) {
            uint64_t v = blco_get_u32(buf + 4 * j);
            if (v >= d || (seen[v / 64] >> (v % 64) & 1)) {
                bad = 1 + (v < d), bad_at = k + j, bad_v = v; /* said after the checksum */
                break;
            }
            seen[v / 64] |= 1ull << (v % 64);
            if (out)
                out[k + j] = (uint32_t)v;
        }
    }
    /* Damaged bytes are a corrupt file; a permutation that checks out but is not one was
     * written wrong. */
    if (XXH3_64bits_digest(xs) != in->labels_checksum[mode])
        err = blco_diag_set(diag, 0, -BLCO_ECHECKSUM,
                            "%s: corrupt labels of mode %d (checksum mismatch)", f->path, mode + 1);
    else if (bad)
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                            "%s: inconsistent labels of mode %d: stored index %llu maps to %s "
                            "%llu",
                            f->path, mode + 1, (unsigned long long)bad_at,
                            bad == 1 ? "the out-of-range index" : "the repeated index",
                            (unsigned long long)bad_v);
out:
    XXH3_freeState(xs);
    free(seen);
    free(buf);
    return err;
}

int blco_file_read_labels(blco_file_t *f, int mode, uint32_t *new_to_old, blco_diag_t *diag)
{
    if (!f || mode < 0 || mode >= f->info.layout.order || !(f->info.relabeled_modes >> mode & 1) ||
        !new_to_old)
        return -EINVAL;
    return labels_check(f, mode, new_to_old, diag);
}

const char *blco_reorder_name(int reorder)
{
    switch (reorder) {
    case BLCO_REORDER_NONE: return "none";
    case BLCO_REORDER_FREQ: return "freq";
    default: return "?";
    }
}

int blco_file_open(const char *path, blco_file_t **out, blco_diag_t *diag)
{
    *out = NULL;
    blco_file_t *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->fd = -1;
    uint8_t *h = NULL, *bt = NULL, *st = NULL;
    int err;
    if (!(f->path = strdup(path))) {
        err = -ENOMEM;
        goto fail;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (f->fd < 0 || fstat(f->fd, &sb) < 0) {
        err = blco_diag_set(diag, 0, -errno, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        err = blco_diag_set(diag, 0, -EINVAL, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (!(h = calloc(1, BLCO_HEADER_BYTES))) {
        err = -ENOMEM;
        goto fail;
    }
    size_t head = size < BLCO_HEADER_BYTES ? (size_t)size : BLCO_HEADER_BYTES;
    if (head && (err = blco_pread_all(f->fd, h, head, 0)) < 0) {
        err = blco_diag_set(diag, 0, err, "%s: %s", path, strerror(-err));
        goto fail;
    }
    if ((err = blco_header_decode(h, size, &f->info, diag)) < 0) {
        char pre[4200];
        snprintf(pre, sizeof pre, "%s: ", path);
        blco_diag_prefix(diag, pre);
        goto fail;
    }
    blco_file_info_t *in = &f->info;
    int order = in->layout.order;
    uint64_t bt_bytes = in->nblocks * blco_block_entry_bytes(order);
    uint64_t st_bytes = in->nsegments * BLCO_SEGMENT_ENTRY_BYTES;
    if ((err = read_table(f, in->block_table_offset, bt_bytes, in->block_table_checksum,
                          "block", &bt, diag)) < 0 ||
        (err = read_table(f, in->segment_table_offset, st_bytes, in->segment_table_checksum,
                          "segment", &st, diag)) < 0)
        goto fail;
    f->blocks = malloc(in->nblocks * sizeof *f->blocks);
    f->segs = malloc(in->nsegments * sizeof *f->segs);
    if (!f->blocks || !f->segs) {
        err = -ENOMEM;
        goto fail;
    }
    for (uint64_t b = 0; b < in->nblocks; b++)
        blco_block_entry_decode(bt + b * blco_block_entry_bytes(order), order, &f->blocks[b]);
    for (uint64_t s = 0; s < in->nsegments; s++)
        blco_segment_entry_decode(st + s * BLCO_SEGMENT_ENTRY_BYTES, &f->segs[s]);
    if ((err = blco_tables_validate(in, f->blocks, f->segs, diag)) < 0) {
        char pre[4200];
        snprintf(pre, sizeof pre, "%s: inconsistent tables: ", path);
        blco_diag_prefix(diag, pre);
        goto fail;
    }
    /* Labels index the factors the user sees: a file with bad ones is refused at once. */
    for (int n = 0; n < order; n++)
        if (in->relabeled_modes >> n & 1 && (err = labels_check(f, n, NULL, diag)) < 0)
            goto fail;
    if ((err = blco_codec_ctx_new(&f->codec)) < 0)
        goto fail;
    blco_codec_map_init(&f->map, &in->layout);
    free(h);
    free(bt);
    free(st);
    *out = f;
    return 0;
fail:
    free(h);
    free(bt);
    free(st);
    blco_file_close(f);
    return err;
}

const blco_file_info_t *blco_file_info(const blco_file_t *f) { return &f->info; }
const blco_segment_t *blco_file_segment(const blco_file_t *f, uint64_t s) { return &f->segs[s]; }
const blco_file_block_t *blco_file_block(const blco_file_t *f, uint64_t b)
{
    return &f->blocks[b];
}
int blco_file_fd(const blco_file_t *f) { return f->fd; }

int blco_file_read_segment(blco_file_t *f, uint64_t s, void *buf, size_t cap,
                           blco_diag_t *diag)
{
    if (s >= f->info.nsegments)
        return -EINVAL;
    const blco_segment_t *sg = &f->segs[s];
    uint64_t len = sg->index_bytes + sg->value_bytes;
    if (cap < len)
        return blco_diag_set(diag, 0, -EINVAL, "segment %llu needs %llu bytes, buffer has %zu",
                             (unsigned long long)s, (unsigned long long)len, cap);
    int err = blco_pread_all(f->fd, buf, len, sg->offset);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: reading segment %llu: %s", f->path,
                             (unsigned long long)s,
                             err == -BLCO_EFORMAT ? "truncated" : strerror(-err));
    return 0;
}

int blco_segment_verify(const blco_file_t *f, uint64_t s, const void *stored, blco_diag_t *diag)
{
    const blco_segment_t *sg = &f->segs[s];
    if (blco_checksum(stored, sg->index_bytes + sg->value_bytes) != sg->checksum)
        return blco_diag_set(diag, 0, -BLCO_ECHECKSUM,
                             "%s: segment %llu (nonzeros %llu..%llu) is corrupt: checksum "
                             "mismatch",
                             f->path, (unsigned long long)s, (unsigned long long)sg->first_nnz,
                             (unsigned long long)(sg->first_nnz + sg->nnz - 1));
    return 0;
}

struct blco_decoder {
    blco_codec_ctx_t *codec;
};

int blco_decoder_new(blco_decoder_t **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return -ENOMEM;
    int err = blco_codec_ctx_new(&(*out)->codec);
    if (err < 0) {
        free(*out);
        *out = NULL;
    }
    return err;
}

void blco_decoder_free(blco_decoder_t *d)
{
    if (!d)
        return;
    blco_codec_ctx_free(d->codec);
    free(d);
}

static int decode_segment(const blco_file_t *f, blco_codec_ctx_t *codec, uint64_t s,
                          const void *stored, int trusted, int parts, uint64_t *idx, double *val,
                          blco_diag_t *diag)
{
    const blco_segment_t *sg = &f->segs[s];
    int err;
    if (!trusted && (err = blco_segment_verify(f, s, stored, diag)) < 0)
        return err;
    err = blco_codec_decode_segment_part(codec, &f->info.layout, f->info.value_type, sg, stored,
                                         parts, idx, val);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: segment %llu: %s%s", f->path,
                             (unsigned long long)s,
                             err == -BLCO_EVERSION ? "unknown codec (written by a newer blco?)"
                                                   : "undecodable: ",
                             err == -BLCO_EVERSION ? "" : blco_strerror(err));
    const blco_file_block_t *bk = &f->blocks[sg->block];
    if ((parts & BLCO_SEGMENT_INDEX) && blco_codec_index_check(&f->map, bk->b.coord, idx, sg->nnz) < 0)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                             "%s: segment %llu: a coordinate lies outside the dims", f->path,
                             (unsigned long long)s);
    if (parts & BLCO_SEGMENT_VALUES) {
        /* The packer stores finite values only: a NaN or an infinity is a damaged (or
         * crafted) file, whose checksum may well be right. 0 * v is NaN for those only. */
        double probe = 0;
        for (uint64_t k = 0; k < sg->nnz; k++)
            probe += val[k] * 0.0;
        if (probe != 0)
            for (uint64_t k = 0; k < sg->nnz; k++)
                if (!isfinite(val[k]))
                    return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                         "%s: segment %llu: value %llu (nonzero %llu) is %s; a "
                                         ".blco file holds finite values only",
                                         f->path, (unsigned long long)s, (unsigned long long)k,
                                         (unsigned long long)(sg->first_nnz + k),
                                         isnan(val[k]) ? "NaN" : "infinite");
    }
    return 0;
}

int blco_segment_decode(const blco_file_t *f, uint64_t s, const void *stored, int trusted,
                        uint64_t *idx, double *val, blco_diag_t *diag)
{
    return decode_segment(f, f->codec, s, stored, trusted, BLCO_SEGMENT_INDEX | BLCO_SEGMENT_VALUES,
                          idx, val, diag);
}

int blco_segment_decode_with(const blco_file_t *f, blco_decoder_t *d, uint64_t s,
                             const void *stored, int trusted, uint64_t *idx, double *val,
                             blco_diag_t *diag)
{
    if (s >= f->info.nsegments || !d)
        return -EINVAL;
    return decode_segment(f, d->codec, s, stored, trusted, BLCO_SEGMENT_INDEX | BLCO_SEGMENT_VALUES,
                          idx, val, diag);
}

int blco_segment_decode_part(const blco_file_t *f, blco_decoder_t *d, uint64_t s,
                             const void *stored, int parts, uint64_t *idx, double *val,
                             blco_diag_t *diag)
{
    if (s >= f->info.nsegments || !d || !(parts & (BLCO_SEGMENT_INDEX | BLCO_SEGMENT_VALUES)))
        return -EINVAL;
    return decode_segment(f, d->codec, s, stored, 1, parts, idx, val, diag);
}

static int all_zero(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int blco_file_verify(const char *path, blco_file_info_t *info, blco_diag_t *diag)
{
    blco_file_t *f;
    int err = blco_file_open(path, &f, diag);
    if (err < 0)
        return err;
    const blco_file_info_t *in = &f->info;
    uint64_t S = 1, cap = blco_align4k(in->max_segment_bytes);
    for (uint64_t s = 0; s < in->nsegments; s++) /* the largest real one, not segment_nnz */
        S = BLCO_MAX(S, f->segs[s].nnz);
    uint64_t bt_bytes = in->nblocks * blco_block_entry_bytes(in->layout.order);
    uint64_t st_bytes = in->nsegments * BLCO_SEGMENT_ENTRY_BYTES;
    uint64_t pad = BLCO_MAX(cap, BLCO_FILE_ALIGN);
    double norm2 = 0;
    /* A crafted table can claim huge segments: take the buffers from a budget so that
     * ends in a clean error, not an allocation the system cannot back. */
    blco_budget_t *budget = NULL;
    uint8_t *buf = NULL;
    uint64_t *idx = NULL;
    double *val = NULL;
    if (blco_budget_create(&budget, 0) < 0 || blco_budget_alloc(budget, pad, (void **)&buf) < 0 ||
        blco_budget_alloc(budget, S * 8, (void **)&idx) < 0 ||
        blco_budget_alloc(budget, S * 8, (void **)&val) < 0) {
        err = blco_diag_set(diag, 0, -BLCO_EBUDGET,
                            "%s: segments of %llu nonzeros do not fit in memory to verify", path,
                            (unsigned long long)S);
        goto out;
    }
    for (uint64_t s = 0; s < in->nsegments; s++) {
        const blco_segment_t *sg = &f->segs[s];
        uint64_t used = sg->index_bytes + sg->value_bytes, disk = blco_segment_disk_bytes(sg);
        if ((err = blco_pread_all(f->fd, buf, disk, sg->offset)) < 0) {
            err = blco_diag_set(diag, 0, err, "%s: reading segment %llu: %s", path,
                                (unsigned long long)s,
                                err == -BLCO_EFORMAT ? "truncated" : strerror(-err));
            goto out;
        }
        if ((err = blco_segment_decode(f, s, buf, 0, idx, val, diag)) < 0)
            goto out;
        if (!all_zero(buf + used, disk - used)) {
            err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "%s: segment %llu: padding is not zero",
                                path, (unsigned long long)s);
            goto out;
        }
        for (uint64_t k = 0; k < sg->nnz; k++)
            norm2 += val[k] * val[k];
    }
    /* The padding after each table. */
    uint64_t tails[2][2] = {{in->block_table_offset + bt_bytes, blco_align4k(bt_bytes) - bt_bytes},
                            {in->segment_table_offset + st_bytes,
                             blco_align4k(st_bytes) - st_bytes}};
    for (int t = 0; t < 2; t++) {
        if ((err = blco_pread_all(f->fd, buf, tails[t][1], tails[t][0])) < 0 ||
            !all_zero(buf, tails[t][1])) {
            err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "%s: the %s table's padding is not zero",
                                path, t ? "segment" : "block");
            goto out;
        }
    }
    /* The labels section's padding: after each mode's array and at the end. */
    if (in->relabeled_modes) {
        for (int n = 0; n <= in->layout.order; n++) {
            uint64_t at, len;
            if (n == in->layout.order) {
                at = in->labels_offset + in->labels_bytes;
                len = in->file_bytes - at;
            } else if (in->relabeled_modes >> n & 1 && in->layout.dims[n] % 2) {
                at = labels_at(in, n) + 4 * in->layout.dims[n];
                len = 4;
            } else {
                continue;
            }
            if ((err = blco_pread_all(f->fd, buf, len, at)) < 0 || !all_zero(buf, len)) {
                err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                    "%s: the labels section's padding is not zero", path);
                goto out;
            }
        }
    }
    /* The header's norm was summed in file order too, so it must match closely. */
    if (!(fabs(norm2 - in->norm2) <= 1e-9 * fabs(in->norm2))) {
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                            "%s: the header's sum of squares %.17g does not match the data's "
                            "%.17g", path, in->norm2, norm2);
        goto out;
    }
    if (info)
        *info = *in;
    err = 0;
out:
    blco_budget_free(budget, buf, pad);
    blco_budget_free(budget, idx, S * 8);
    blco_budget_free(budget, val, S * 8);
    blco_budget_destroy(budget);
    blco_file_close(f);
    return err;
}

int blco_file_load(const char *path, blco_budget_t *budget, blco_tensor_t **out,
                   blco_file_info_t *info, blco_diag_t *diag)
{
    return blco_file_load_threads(path, budget, 0, out, info, diag);
}

int blco_file_load_threads(const char *path, blco_budget_t *budget, int threads,
                           blco_tensor_t **out, blco_file_info_t *info, blco_diag_t *diag)
{
    *out = NULL;
    blco_file_t *f;
    int err = blco_file_open(path, &f, diag);
    if (err < 0)
        return err;
    const blco_file_info_t *in = &f->info;
    const uint64_t bufb = blco_align4k(in->max_segment_bytes) + 64;
    blco_tensor_t *t = calloc(1, sizeof *t);
    void **bufs = NULL;
    blco_decoder_t **decs = NULL;
    int nbuf = 0;
    if (!t) {
        err = -ENOMEM;
        goto out;
    }
    t->budget = budget;
    t->layout = in->layout;
    t->norm2 = in->norm2;
    t->duplicates = in->duplicates;
    if ((err = blco_budget_alloc(budget, in->nnz * 8, (void **)&t->idx)) < 0)
        goto out;
    if ((err = blco_budget_alloc(budget, in->nnz * 8, (void **)&t->val)) < 0) {
        blco_budget_free(budget, t->idx, in->nnz * 8);
        t->idx = NULL;
        goto out;
    }
    t->nnz = in->nnz;
    if ((err = blco_budget_alloc(budget, in->nblocks * sizeof(blco_block_t),
                                 (void **)&t->blocks)) < 0)
        goto out;
    t->nblocks = in->nblocks;
    for (uint64_t b = 0; b < in->nblocks; b++)
        t->blocks[b] = f->blocks[b].b;
    /* Segments read, verified and decoded by the threads, each with a buffer of the budget
     * and a decoder of its own (as many threads as buffers fit, at least one); an error is
     * the first failing segment's, whatever the schedule. */
    int nt = blco_threads_resolve(threads);
    if ((uint64_t)nt > in->nsegments)
        nt = in->nsegments ? (int)in->nsegments : 1;
    if (!(bufs = calloc((size_t)nt, sizeof *bufs)) || !(decs = calloc((size_t)nt, sizeof *decs))) {
        err = -ENOMEM;
        goto out;
    }
    for (nbuf = 0; nbuf < nt; nbuf++) {
        if ((err = blco_budget_alloc(budget, bufb, &bufs[nbuf])) < 0)
            break;
        if ((err = blco_decoder_new(&decs[nbuf])) < 0) {
            blco_budget_free(budget, bufs[nbuf], bufb);
            bufs[nbuf] = NULL;
            break;
        }
    }
    if (nbuf == 0)
        goto out;
    err = 0;
    uint64_t first_bad = UINT64_MAX;
    blco_diag_t bad_diag = {0};
    const int64_t nseg = (int64_t)in->nsegments;
#pragma omp parallel for num_threads(nbuf) schedule(dynamic, 1)
    for (int64_t s = 0; s < nseg; s++) {
        int tid = 0;
#if HAVE_OPENMP
        tid = omp_get_thread_num();
#endif
        uint64_t seen;
#pragma omp atomic read
        seen = first_bad;
        if ((uint64_t)s > seen)
            continue; /* an earlier segment failed */
        const blco_segment_t *sg = &f->segs[s];
        blco_diag_t d = {0};
        int e = blco_file_read_segment(f, (uint64_t)s, bufs[tid], in->max_segment_bytes, &d);
        if (e == 0)
            e = blco_segment_decode_with(f, decs[tid], (uint64_t)s, bufs[tid], 0,
                                         t->idx + sg->first_nnz, t->val + sg->first_nnz, &d);
        if (e < 0) {
#pragma omp critical(blco_file_load_error)
            if ((uint64_t)s < first_bad) {
                bad_diag = d;
                err = e;
#pragma omp atomic write
                first_bad = (uint64_t)s;
            }
        }
    }
    if (err < 0) {
        if (diag)
            *diag = bad_diag;
        goto out;
    }
    if (info)
        *info = *in;
    *out = t;
    t = NULL;
out:
    for (int i = 0; bufs && i < nbuf; i++) {
        blco_budget_free(budget, bufs[i], bufb);
        blco_decoder_free(decs[i]);
    }
    free(bufs);
    free(decs);
    blco_tensor_destroy(t);
    blco_file_close(f);
    return err;
}
