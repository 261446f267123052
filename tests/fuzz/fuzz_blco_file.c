/* Fuzz target of the .blco reader: header and table validation (blco_file_open), segment
 * reads and decodes, whole-file verification (blco_file_verify) and loading
 * (blco_file_load), on a file held in a memfd and opened as /proc/self/fd/N.
 *
 * Every input is first tried as a whole file. Since checksums guard every byte, random
 * files stop at the header checksum; so an input shorter than 4096 bytes (which as a file
 * is merely truncated) is also read as a patch list applied to one of eight small valid
 * files made at start-up with blco_tensor_write (codecs raw, narrow, delta, zstd and
 * auto, f64 and f32, orders 2 to 6, one to many blocks and segments, up to 70 index
 * bits, three of them with a labels section of random permutations), after which the
 * checksums are recomputed (labels included), so mutations reach the deep checks, the
 * codecs and the labels. Patch list format:
 *   byte 0     bits 0-2: the base file; bit 3: keep the segment checksums, bit 4: the table
 *              checksums, bit 5: the header checksum (else each is recomputed after
 *              patching, segments first, header last)
 *   then ops   one op byte: bits 0-1 kind, bits 2-3 region (0 header, 1 segments, 2 block
 *              table, 3 segment table), bits 4-7 a parameter p; offsets are u16 from the
 *              region's start, modulo the region's size
 *     kind 0   write: u16 offset, then p + 1 bytes
 *     kind 1   add: u16 offset, i8 d: the u64 at offset += d << (4 p)
 *     kind 2   resize: u16 length: the file ends that far past the region's start
 *              (not reduced; zero-extended)
 *     kind 3   copy: u16 from, u16 to, 8 (p + 1) bytes within the region */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "fuzz_common.h"

#define NIMAGES 8
#define PATCH_MAX_INPUT 4096
#define PATCH_MAX_FILE (1u << 20)
/* Segments larger than this are not decoded one by one (verify and load still see them). */
#define SEGMENT_MAX_NNZ (1u << 20)
#define SEGMENT_MAX_BYTES (1u << 24)

typedef struct image {
    uint8_t *bytes;
    size_t size;
    size_t region[4][2]; /* start, length */
} image_t;

static image_t images[NIMAGES];
static int memfd = -1;
static char memfd_path[64];

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One base file's recipe. */
typedef struct recipe {
    int order;
    uint64_t dims[6];
    uint64_t nnz;
    int line_bits, codec, zstd_level, value_type, integer_values;
    uint64_t segment_nnz;
    int relabel; /* a labels section of random permutations */
} recipe_t;

static const recipe_t recipes[NIMAGES] = {
    {3, {5, 7, 3}, 40, 0, BLCO_PACK_AUTO, 0, BLCO_VALUES_F64, 0, 16, 1},
    {3, {5, 7, 3}, 40, 0, BLCO_PACK_RAW, 0, BLCO_VALUES_F32, 0, 8, 0},
    {3, {30, 17, 9}, 60, 4, BLCO_PACK_NARROW, 0, BLCO_VALUES_F64, 0, 32, 0},
    {4, {300, 20, 9, 1000}, 400, 0, BLCO_PACK_DELTA, 0, BLCO_VALUES_F64, 0, 256, 1},
    {3, {64, 64, 64}, 200, 0, BLCO_PACK_ZSTD, 3, BLCO_VALUES_F64, 1, 64, 0},
    {2, {1u << 20, 3u << 18}, 60, 0, BLCO_PACK_DELTA, 0, BLCO_VALUES_F32, 0, 16, 0},
    {6, {3, 4, 5, 6, 7, 8}, 80, 9, BLCO_PACK_AUTO, 1, BLCO_VALUES_F32, 1, 32, 1},
    {2, {1ull << 40, 1ull << 30}, 50, 0, BLCO_PACK_AUTO, 0, BLCO_VALUES_F64, 0, 16, 0},
};

static int slurp(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(n > 0 ? (size_t)n : 1);
    int ok = n > 0 && *out && fread(*out, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    *len = (size_t)n;
    return ok ? 0 : -EIO;
}

/* Writes recipe r as a .blco file into dir and keeps its bytes. */
static void make_image(const recipe_t *r, uint64_t seed, const char *dir, image_t *im)
{
    blco_coo_t *coo;
    FUZZ_CHECK(blco_coo_create(&coo, r->order, r->nnz, NULL) == 0, "coo");
    for (uint64_t k = 0; k < r->nnz; k++) {
        uint64_t c[BLCO_MAX_MODES];
        for (int m = 0; m < r->order; m++)
            c[m] = mix(&seed) % r->dims[m];
        double v = r->integer_values ? (double)(1 + mix(&seed) % 5)
                                     : (double)(mix(&seed) >> 11) * 0x1p-53 - 0.25;
        FUZZ_CHECK(blco_coo_push(coo, c, v) == 0, "push");
    }
    memcpy(coo->dims, r->dims, 8 * (size_t)r->order);
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.line_bits = r->line_bits;
    bo.threads = 1;
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_tensor_from_coo(coo, &bo, NULL, &t, &d);
    FUZZ_CHECK(err == 0, "building a base tensor: %s", d.msg);
    blco_coo_destroy(coo);

    char path[4200];
    snprintf(path, sizeof path, "%s/base.blco", dir);
    blco_write_opts_t o;
    blco_write_opts_default(&o);
    o.codec = r->codec;
    o.zstd_level = r->zstd_level;
    o.value_type = r->value_type;
    o.segment_nnz = r->segment_nnz;
    o.force = 1;
    o.creator = "fuzz_blco_file";
    blco_file_info_t info;
    blco_writer_t *w;
    uint32_t *perm[BLCO_MAX_MODES] = {0};
    uint32_t modes = 0;
    err = blco_writer_open(path, &t->layout, &o, &w, &d);
    FUZZ_CHECK(err == 0, "writing a base file: %s", d.msg);
    for (int m = 0; r->relabel && m < r->order; m++) {
        perm[m] = malloc(4 * r->dims[m]);
        FUZZ_CHECK(perm[m] != NULL, "out of memory");
        for (uint64_t i = 0; i < r->dims[m]; i++)
            perm[m][i] = (uint32_t)i;
        for (uint64_t i = r->dims[m] - 1; i > 0; i--) {
            uint64_t j = mix(&seed) % (i + 1);
            uint32_t x = perm[m][i];
            perm[m][i] = perm[m][j];
            perm[m][j] = x;
        }
        modes |= 1u << m;
    }
    if (modes)
        FUZZ_CHECK(blco_writer_set_labels(w, BLCO_REORDER_FREQ, modes,
                                          (const uint32_t *const *)perm, 0.5) == 0,
                   "labels");
    err = blco_writer_add_tensor(w, t, &d);
    FUZZ_CHECK(err == 0, "writing a base file: %s", d.msg);
    err = blco_writer_finish(w, &info, &d);
    FUZZ_CHECK(err == 0, "writing a base file: %s", d.msg);
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        free(perm[m]);
    blco_tensor_destroy(t);
    FUZZ_CHECK(slurp(path, &im->bytes, &im->size) == 0, "reading back %s", path);
    unlink(path);

    uint64_t bt = info.block_table_offset, st = info.segment_table_offset;
    size_t bounds[5] = {0, BLCO_FILE_ALIGN, bt, st, im->size};
    for (int i = 0; i < 4; i++) {
        im->region[i][0] = bounds[i];
        im->region[i][1] = bounds[i + 1] - bounds[i];
    }
}

static void init(void)
{
    fuzz_quiet();
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/blco-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp %s: %s", dir, strerror(errno));
    for (int i = 0; i < NIMAGES; i++)
        make_image(&recipes[i], 0x5eed0000u + (uint64_t)i, dir, &images[i]);
    rmdir(dir);
    memfd = memfd_create("fuzz.blco", MFD_CLOEXEC);
    FUZZ_CHECK(memfd >= 0, "memfd_create: %s", strerror(errno));
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
}

/* ---- patch lists ---- */

/* Whether [off, off + len) lies inside a file of `size` bytes. */
static int range_ok(size_t size, uint64_t off, uint64_t len)
{
    return off <= size && len <= size - off;
}

/* Recomputes checksums as a writer would, from whatever the (patched) header and tables
 * say, wherever they point inside the file. */
static void fix_checksums(uint8_t *f, size_t size, unsigned keep)
{
    if (size < 4096)
        return;
    uint64_t nseg = get64(f + 48), bt = get64(f + 80), bt_bytes = get64(f + 88);
    uint64_t st = get64(f + 104), st_bytes = get64(f + 112);
    if (!(keep & 1) && st <= size) {
        for (uint64_t s = 0; s < nseg && s < 4096 && 64 * (s + 1) <= size - st; s++) {
            uint8_t *e = f + st + 64 * s;
            uint64_t off = get64(e), ib = get64(e + 32), vb = get64(e + 40);
            if (ib <= size && vb <= size && range_ok(size, off, ib + vb))
                put64(e + 56, XXH3_64bits(f + off, ib + vb));
        }
    }
    if (!(keep & 2)) {
        if (range_ok(size, bt, bt_bytes))
            put64(f + 96, XXH3_64bits(f + bt, bt_bytes));
        if (range_ok(size, st, st_bytes))
            put64(f + 120, XXH3_64bits(f + st, st_bytes));
    }
    if (!(keep & 2)) { /* the labels, where the header says they are */
        uint32_t modes = (uint32_t)(get64(f + 644) & 0xffffffffu);
        uint64_t off = get64(f + 648), order = get64(f + 16) & 0xffffffffu;
        for (uint64_t m = 0; m < 16 && m < order && (modes >> m); m++) {
            if (!(modes >> m & 1))
                continue;
            uint64_t bytes = 4 * (get64(f + 144 + 8 * m) & 0xffffffffffull);
            if (range_ok(size, off, bytes))
                put64(f + 672 + 8 * m, XXH3_64bits(f + off, bytes));
            off += (bytes + 7) & ~(uint64_t)7;
        }
    }
    if (!(keep & 4))
        put64(f + 4088, XXH3_64bits(f, 4088));
}

static uint16_t get16(const uint8_t **p, const uint8_t *end)
{
    uint16_t v = 0;
    for (int i = 0; i < 2 && *p < end; i++)
        v |= (uint16_t)(*(*p)++ << (8 * i));
    return v;
}

/* Builds the patched file into a new buffer; *size receives its length. */
static uint8_t *apply_patches(const uint8_t *data, size_t len, size_t *size)
{
    const image_t *im = &images[data[0] & 7];
    size_t n = im->size, cap = FUZZ_MAX(im->size, (size_t)PATCH_MAX_FILE);
    uint8_t *f = calloc(1, cap);
    FUZZ_CHECK(f != NULL, "out of memory");
    memcpy(f, im->bytes, n);
    const uint8_t *p = data + 1, *end = data + len;
    while (p < end) {
        unsigned op = *p++, kind = op & 3, p4 = op >> 4;
        size_t rs = im->region[(op >> 2) & 3][0], rl = im->region[(op >> 2) & 3][1];
        size_t v = get16(&p, end), off = rs + (rl ? v % rl : 0);
        switch (kind) {
        case 0:
            for (unsigned i = 0; i <= p4 && p < end; i++, off++) {
                uint8_t b = *p++;
                if (off < n)
                    f[off] = b;
            }
            break;
        case 1: {
            int8_t dv = p < end ? (int8_t)*p++ : 1;
            if (off + 8 <= n)
                put64(f + off, get64(f + off) + (uint64_t)(int64_t)dv * (1ull << (4 * p4)));
            break;
        }
        case 2: {
            size_t want = FUZZ_MIN(rs + v, cap);
            if (want < n)
                memset(f + want, 0, n - want); /* so that growing again gives zeros */
            n = want;
            break;
        }
        default: {
            size_t v2 = get16(&p, end), to = rs + (rl ? v2 % rl : 0), k = 8 * ((size_t)p4 + 1);
            if (off + k <= n && to + k <= n)
                memmove(f + to, f + off, k);
            break;
        }
        }
    }
    fix_checksums(f, n, (data[0] >> 3) & 7);
    *size = n;
    return f;
}

/* ---- the reader under test ---- */

static void check_segments(blco_file_t *f)
{
    const blco_file_info_t *in = blco_file_info(f);
    const blco_layout_t *l = &in->layout;
    FUZZ_CHECK(l->order >= 2 && l->order <= BLCO_MAX_MODES, "order %d", l->order);
    FUZZ_CHECK(in->nnz >= 1 && in->nblocks >= 1 && in->nsegments >= in->nblocks,
               "counts in an accepted header");
    for (uint64_t s = 0; s < in->nsegments && s < 256; s++) {
        const blco_segment_t *sg = blco_file_segment(f, s);
        FUZZ_CHECK(sg->block < in->nblocks, "segment %llu in block %llu", (unsigned long long)s,
                   (unsigned long long)sg->block);
        uint64_t len = sg->index_bytes + sg->value_bytes;
        if (sg->nnz > SEGMENT_MAX_NNZ || len > SEGMENT_MAX_BYTES)
            continue;
        uint8_t *buf = malloc(len ? len : 1);
        uint64_t *idx = malloc(sg->nnz * 8);
        double *val = malloc(sg->nnz * 8);
        FUZZ_CHECK(buf && idx && val, "out of memory");
        blco_diag_t d;
        int err = blco_file_read_segment(f, s, buf, len, &d);
        if (err == 0) {
            blco_segment_verify(f, s, buf, &d);
            /* Trusted: skip the checksum so corrupt columns reach the codecs. */
            err = blco_segment_decode(f, s, buf, 1, idx, val, &d);
        }
        if (err == 0) {
            const blco_file_block_t *bk = blco_file_block(f, sg->block);
            for (uint64_t k = 0; k < sg->nnz; k++) {
                uint64_t c[BLCO_MAX_MODES];
                blco_layout_decode(l, idx[k], bk->b.coord, c);
                for (int m = 0; m < l->order; m++)
                    FUZZ_CHECK(c[m] < l->dims[m], "segment %llu nonzero %llu mode %d: %llu >= %llu",
                               (unsigned long long)s, (unsigned long long)k, m,
                               (unsigned long long)c[m], (unsigned long long)l->dims[m]);
            }
        }
        free(buf);
        free(idx);
        free(val);
    }
}

static void check_tensor(const blco_tensor_t *t, const blco_file_info_t *in)
{
    const blco_layout_t *l = &t->layout;
    FUZZ_CHECK(t->nnz == in->nnz && t->nblocks == in->nblocks, "loaded counts");
    uint64_t next = 0;
    for (uint64_t b = 0; b < t->nblocks; b++) {
        FUZZ_CHECK(t->blocks[b].start == next && t->blocks[b].nnz >= 1, "block %llu",
                   (unsigned long long)b);
        next += t->blocks[b].nnz;
    }
    FUZZ_CHECK(next == t->nnz, "blocks cover %llu of %llu", (unsigned long long)next,
               (unsigned long long)t->nnz);
    for (uint64_t b = 0; b < t->nblocks; b++) {
        for (uint64_t k = t->blocks[b].start; k < t->blocks[b].start + t->blocks[b].nnz; k++) {
            uint64_t c[BLCO_MAX_MODES];
            blco_layout_decode(l, t->idx[k], t->blocks[b].coord, c);
            for (int m = 0; m < l->order; m++)
                FUZZ_CHECK(c[m] < l->dims[m], "loaded nonzero %llu outside the dims",
                           (unsigned long long)k);
        }
    }
}

static void run_file(const uint8_t *bytes, size_t size)
{
    FUZZ_CHECK(ftruncate(memfd, 0) == 0, "ftruncate");
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(memfd, bytes + done, size - done, (off_t)done);
        FUZZ_CHECK(w > 0, "pwrite: %s", strerror(errno));
        done += (size_t)w;
    }

    blco_diag_t d;
    blco_file_t *f = NULL;
    int err = blco_file_open(memfd_path, &f, &d);
    FUZZ_CHECK(err <= 0 && (err == 0) == (f != NULL), "open returned %d", err);
    if (!f)
        return; /* verify and load start with the same open */
    check_segments(f);
    /* Labels that open accepted read back as permutations. */
    blco_labels_t *L = NULL;
    if (blco_labels_load(f, NULL, &L, &d) == 0 && L) {
        const blco_file_info_t *in = blco_file_info(f);
        for (int m = 0; m < L->order; m++) {
            FUZZ_CHECK(!L->new_to_old[m] == !(in->relabeled_modes >> m & 1), "labels of mode %d",
                       m);
            if (!L->new_to_old[m] || L->dims[m] > (1u << 24))
                continue;
            uint8_t *seen = calloc(L->dims[m], 1);
            FUZZ_CHECK(seen != NULL, "out of memory");
            for (uint64_t i = 0; i < L->dims[m]; i++) {
                uint32_t v = L->new_to_old[m][i];
                FUZZ_CHECK(v < L->dims[m] && !seen[v], "mode %d: label %llu is not a permutation",
                           m, (unsigned long long)i);
                seen[v] = 1;
            }
            free(seen);
        }
    }
    blco_labels_free(L);
    blco_file_close(f);

    blco_file_info_t info;
    int verified = blco_file_verify(memfd_path, &info, &d);
    FUZZ_CHECK(verified <= 0, "verify returned %d", verified);

    blco_tensor_t *t = NULL;
    err = blco_file_load(memfd_path, NULL, &t, &info, &d);
    FUZZ_CHECK(err <= 0 && (err == 0) == (t != NULL), "load returned %d", err);
    /* What verification accepts, loading must accept (it checks a subset). */
    FUZZ_CHECK(verified < 0 || err == 0 || err == -ENOMEM || err == -BLCO_EBUDGET,
               "verified, but load failed: %s", d.msg);
    if (t) {
        check_tensor(t, &info);
        blco_tensor_destroy(t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0)
        init();
    run_file(data, size);
    if (size >= 1 && size < PATCH_MAX_INPUT) {
        size_t n;
        uint8_t *f = apply_patches(data, size, &n);
        run_file(f, n);
        free(f);
    }
    return 0;
}
