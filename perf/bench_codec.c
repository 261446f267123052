/* Benchmark of the segment column codecs: bytes per nonzero of each pack codec on
 * generated and real tensors, single-core decode and encode speed, against a memcpy of
 * the same decoded bytes in the same run; and (--compare) whole .blco files written with
 * chosen pack codecs, their bytes and CPU decode speed on one and on all threads as
 * ratios against the first codec. Prints one JSON object per result. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "bench_common.h"
#include "blco_internal.h"
#include "cli.h"
#include "codec.h"

typedef struct seg {
    uint64_t start, n;
    size_t off, ilen, vlen;
    int ic, vc;
} seg_t;

typedef struct tensor_case {
    char name[128];
    blco_tensor_t *t;
} tensor_case_t;

static char model[256];
static long cores;
static int quick;

static void machine(void)
{
    bench_cpu_model(model, sizeof model);
    cores = bench_cores();
}

static void head(const char *bench)
{
    printf("{\"bench\":\"%s\",\"machine\":\"%s\",\"cores\":%ld,", bench, model, cores);
}

static uint64_t align4k(uint64_t x)
{
    return (x + 4095) & ~4095ull;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        cli_die("out of memory (%zu bytes)", n);
    return p;
}

/* Segments of at most S nonzeros, never across a block. */
static seg_t *cut(const blco_tensor_t *t, uint64_t S, uint64_t *nseg)
{
    uint64_t ns = 0;
    for (uint64_t b = 0; b < t->nblocks; b++)
        ns += (t->blocks[b].nnz + S - 1) / S;
    seg_t *s = calloc(ns, sizeof *s);
    if (!s)
        cli_die("out of memory");
    uint64_t k = 0;
    for (uint64_t b = 0; b < t->nblocks; b++)
        for (uint64_t o = 0; o < t->blocks[b].nnz; o += S) {
            s[k].start = t->blocks[b].start + o;
            s[k].n = t->blocks[b].nnz - o < S ? t->blocks[b].nnz - o : S;
            k++;
        }
    *nseg = ns;
    return s;
}

typedef struct config {
    const char *name;
    int pack, level;
} config_t;

static const config_t configs[] = {
    {"auto", BLCO_PACK_AUTO, 0},
    {"gpu", BLCO_PACK_GPU, 0},
    {"compact", BLCO_PACK_COMPACT, 0},
    {"compact-zstd1", BLCO_PACK_COMPACT, 1},
    {"compact-zstd3", BLCO_PACK_COMPACT, 3},
    {"raw", BLCO_PACK_RAW, 0},
    {"narrow", BLCO_PACK_NARROW, 0},
    {"delta", BLCO_PACK_DELTA, 0},
    {"zstd3", BLCO_PACK_ZSTD, 3},
};

/* Best of `reps` timings of decoding every segment (or, with mc, of memcpy), after one
 * untimed pass that checks the decoded segments. */
static double time_pass(const blco_tensor_t *t, const seg_t *s, uint64_t ns, const uint8_t *enc,
                        blco_codec_ctx_t *ctx, int mc, uint64_t *ib, double *vb, int reps)
{
    double best = 1e30;
    for (int r = -1; r < reps; r++) {
        double t0 = blco_now();
        for (uint64_t k = 0; k < ns; k++) {
            if (mc) {
                memcpy(ib, t->idx + s[k].start, s[k].n * 8);
                memcpy(vb, t->val + s[k].start, s[k].n * 8);
                continue;
            }
            blco_segment_t sg = {.nnz = s[k].n,
                                 .index_bytes = s[k].ilen,
                                 .value_bytes = s[k].vlen,
                                 .index_codec = s[k].ic,
                                 .value_codec = s[k].vc};
            int lb = t->layout.line_bits, tb = t->layout.total_bits;
            sg.raw_index_bits = (uint32_t)(tb < lb ? tb : lb);
            int err = blco_codec_decode_segment(ctx, &t->layout, BLCO_VALUES_F64, &sg,
                                                enc + s[k].off, ib, vb);
            if (err < 0)
                cli_die("decode: %s", blco_strerror(err));
            if (r < 0 && (memcmp(ib, t->idx + s[k].start, s[k].n * 8) ||
                          memcmp(vb, t->val + s[k].start, s[k].n * 8)))
                cli_die("segment %llu does not round-trip", (unsigned long long)k);
        }
        double dt = blco_now() - t0;
        best = r >= 0 && dt < best ? dt : best;
    }
    return best;
}

static void bench_tensor(const tensor_case_t *tc, uint64_t S)
{
    const blco_tensor_t *t = tc->t;
    const blco_layout_t *l = &t->layout;
    uint64_t ns;
    seg_t *s = cut(t, S, &ns);
    blco_codec_map_t *m = xmalloc(sizeof *m);
    blco_codec_map_init(m, l);
    /* In-block ALTO indices, checked against the layout on a sample. */
    uint64_t *alto = xmalloc(t->nnz * 8);
    blco_codec_map_to_alto(m, t->idx, alto, t->nnz);
    for (uint64_t k = 0; k < t->nnz; k += 9973) {
        uint64_t c[BLCO_MAX_MODES], a[2];
        double v;
        blco_tensor_get(t, k, c, &v);
        blco_layout_alto(l, c, a);
        if ((a[0] & (l->line_bits >= 64 ? ~0ull : (1ull << l->line_bits) - 1)) != alto[k])
            cli_die("%s: in-block ALTO index %llu disagrees with the layout", tc->name,
                    (unsigned long long)k);
    }
    size_t total = 0;
    for (uint64_t k = 0; k < ns; k++)
        total += blco_codec_index_bound(s[k].n) + blco_codec_value_bound(s[k].n);
    uint8_t *enc = xmalloc(total);
    uint64_t *ib = xmalloc(S * 8);
    double *vb = xmalloc(S * 8);
    blco_codec_ctx_t *ctx;
    if (blco_codec_ctx_new(&ctx) < 0)
        cli_die("out of memory");
    int reps = quick ? 2 : t->nnz > 5000000 ? 3 : 7;

    for (unsigned c = 0; c < sizeof configs / sizeof *configs; c++) {
        const config_t *cf = &configs[c];
        uint64_t ibytes = 0, vbytes = 0, file = 4096;
        uint64_t hist[4][16] = {{0}}; /* segments by index codec and value codec */
        size_t off = 0;
        double t0 = blco_now();
        for (uint64_t k = 0; k < ns; k++) {
            s[k].off = off;
            int err =
                blco_codec_encode_segment(ctx, l, cf->pack, cf->level, BLCO_VALUES_F64,
                                          alto + s[k].start, t->val + s[k].start, s[k].n, enc + off,
                                          total - off, &s[k].ilen, &s[k].vlen, &s[k].ic, &s[k].vc);
            if (err < 0)
                cli_die("%s: encode %s: %s", tc->name, cf->name, blco_strerror(err));
            off += s[k].ilen + s[k].vlen;
            ibytes += s[k].ilen;
            vbytes += s[k].vlen;
            file += align4k(s[k].ilen + s[k].vlen);
            hist[s[k].ic & 3][(s[k].vc & 7) | (s[k].vc & 0x80 ? 8 : 0)]++;
        }
        double enc_s = blco_now() - t0;
        file += align4k(t->nblocks * (40 + 8 * (uint64_t)l->order)) + align4k(ns * 64);
        double dec_s = time_pass(t, s, ns, enc, ctx, 0, ib, vb, reps);
        double mc_s = time_pass(t, s, ns, enc, ctx, 1, ib, vb, reps);
        uint64_t izstd = 0;
        for (uint64_t k = 0; k < ns; k++)
            izstd += (s[k].ic & 0x80) != 0;
        double out = 16.0 * (double)t->nnz;
        head("codec");
        printf("\"tensor\":\"%s\",\"order\":%d,\"nnz\":%llu,\"index_bits\":%d,\"S\":%llu,"
               "\"segments\":%llu,\"codec\":\"%s\",\"index_bpn\":%.3f,\"value_bpn\":%.3f,"
               "\"bpn\":%.3f,\"file_bpn\":%.3f,\"decode_gbps\":%.2f,\"memcpy_gbps\":%.2f,"
               "\"decode_vs_memcpy\":%.3f,\"encode_mnnz_s\":%.1f,\"index_codecs\":{",
               tc->name, l->order, (unsigned long long)t->nnz, m->index_bits, (unsigned long long)S,
               (unsigned long long)ns, cf->name, (double)ibytes / t->nnz, (double)vbytes / t->nnz,
               (double)(ibytes + vbytes) / t->nnz, (double)file / t->nnz, out / dec_s / 1e9,
               out / mc_s / 1e9, mc_s / dec_s, t->nnz / enc_s / 1e6);
        static const char *iname[] = {"raw", "narrow", "delta", "?"};
        static const char *vname[] = {"f64", "f32", "f64planes", "f32planes", "int", "decimal", "?", "?"};
        int first = 1;
        for (int i = 0; i < 3; i++) {
            uint64_t cnt = 0;
            for (int v = 0; v < 16; v++)
                cnt += hist[i][v];
            if (cnt)
                printf("%s\"%s\":%llu", first ? "" : ",", iname[i], (unsigned long long)cnt),
                    first = 0;
        }
        printf("},\"index_zstd_segments\":%llu,\"value_codecs\":{", (unsigned long long)izstd);
        first = 1;
        for (int v = 0; v < 16; v++) {
            uint64_t cnt = 0;
            for (int i = 0; i < 4; i++)
                cnt += hist[i][v];
            if (cnt)
                printf("%s\"%s%s\":%llu", first ? "" : ",", vname[v & 7], v & 8 ? "+zstd" : "",
                       (unsigned long long)cnt),
                    first = 0;
        }
        printf("}}\n");
        fflush(stdout);
    }
    blco_codec_ctx_free(ctx);
    free(vb);
    free(ib);
    free(enc);
    free(alto);
    free(m);
    free(s);
}

/* The value column alone: each value codec's size and decode speed against memcpy. */
static void bench_values(const char *name, const double *val, uint64_t nnz, uint64_t S)
{
    static const struct {
        const char *name;
        int codec, level;
    } vc[] = {
        {"f64", BLCO_VCODEC_F64, 0},
        {"f64+zstd1", BLCO_VCODEC_F64 | BLCO_CODEC_ZSTD, 1},
        {"f64planes+zstd1", BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD, 1},
        {"f64+zstd3", BLCO_VCODEC_F64 | BLCO_CODEC_ZSTD, 3},
        {"f64planes+zstd3", BLCO_VCODEC_F64_PLANES | BLCO_CODEC_ZSTD, 3},
        {"int", BLCO_VCODEC_INT, 0},
        {"int+zstd1", BLCO_VCODEC_INT | BLCO_CODEC_ZSTD, 1},
    };
    uint64_t ns = (nnz + S - 1) / S;
    size_t cap = blco_codec_value_bound(S);
    uint8_t *enc = xmalloc(ns * cap);
    size_t *len = xmalloc(ns * sizeof *len);
    double *out = xmalloc(S * 8);
    blco_codec_ctx_t *ctx;
    if (blco_codec_ctx_new(&ctx) < 0)
        cli_die("out of memory");
    const int whole = blco_int_size(val, nnz, 0) > 0;
    for (unsigned c = 0; c < sizeof vc / sizeof *vc; c++) {
        if (BLCO_CODEC_BASE(vc[c].codec) == BLCO_VCODEC_INT && !whole)
            continue; /* only for whole numbers */
        blco_codec_req_t r = {vc[c].codec, vc[c].level, 0};
        uint64_t bytes = 0;
        int used;
        double t0 = blco_now();
        for (uint64_t k = 0; k < ns; k++) {
            uint64_t n = nnz - k * S < S ? nnz - k * S : S;
            int err = blco_codec_value_encode(ctx, val + k * S, n, BLCO_VALUES_F64, &r,
                                              enc + k * cap, cap, &len[k], &used);
            if (err < 0)
                cli_die("value encode: %s", blco_strerror(err));
            bytes += len[k];
        }
        double enc_s = blco_now() - t0, best = 1e30, mbest = 1e30;
        for (int rep = -1; rep < (quick ? 2 : 5); rep++) {
            t0 = blco_now();
            for (uint64_t k = 0; k < ns; k++) {
                uint64_t n = nnz - k * S < S ? nnz - k * S : S;
                int err = blco_codec_value_decode(ctx, BLCO_VALUES_F64, vc[c].codec, enc + k * cap,
                                                  len[k], n, out);
                if (err < 0 || (rep < 0 && memcmp(out, val + k * S, n * 8)))
                    cli_die("value decode %s: %s", vc[c].name, blco_strerror(err));
            }
            double dt = blco_now() - t0;
            if (rep < 0) /* the checking pass */
                continue;
            best = dt < best ? dt : best;
            t0 = blco_now();
            for (uint64_t k = 0; k < ns; k++) {
                uint64_t n = nnz - k * S < S ? nnz - k * S : S;
                memcpy(out, val + k * S, n * 8);
            }
            dt = blco_now() - t0;
            mbest = dt < mbest ? dt : mbest;
        }
        head("codec_values");
        printf("\"values\":\"%s\",\"nnz\":%llu,\"S\":%llu,\"codec\":\"%s\",\"bpn\":%.3f,"
               "\"decode_gbps\":%.2f,\"memcpy_gbps\":%.2f,\"encode_gbps\":%.2f}\n",
               name, (unsigned long long)nnz, (unsigned long long)S, vc[c].name,
               (double)bytes / nnz, 8.0 * nnz / best / 1e9, 8.0 * nnz / mbest / 1e9,
               8.0 * nnz / enc_s / 1e9);
        fflush(stdout);
    }
    blco_codec_ctx_free(ctx);
    free(out);
    free(len);
    free(enc);
}

/* ALTO-to-BLCO conversion alone: pext chain against byte tables, by field count. */
static void bench_map(void)
{
    uint64_t n = 1 << 20, *a = xmalloc(n * 8), *o = xmalloc(n * 8), sd = 1;
    for (int order = 2; order <= 8; order++) {
        uint64_t dims[BLCO_MAX_MODES];
        for (int k = 0; k < order; k++)
            dims[k] = 1ull << (60 / order);
        blco_layout_t l;
        if (blco_layout_init(&l, order, dims, 64) < 0)
            continue;
        blco_codec_map_t *m = xmalloc(sizeof *m);
        blco_codec_map_init(m, &l);
        uint64_t lim = m->index_bits >= 64 ? ~0ull : (1ull << m->index_bits) - 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t z = (sd += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            a[i] = (z ^ (z >> 27)) & lim;
        }
        double rate[2];
        for (int table = 0; table < 2; table++) {
            m->use_table = table;
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                double t0 = blco_now();
                for (uint64_t i = 0; i < n; i += 4096)
                    blco_codec_map_to_index(m, a + i, o + i, 4096);
                double dt = blco_now() - t0;
                best = dt < best ? dt : best;
            }
            rate[table] = n / best / 1e6;
        }
        head("codec_map");
        printf("\"fields\":%d,\"index_bits\":%d,\"pext_mnps\":%.0f,\"table_mnps\":%.0f}\n",
               m->nfield, m->index_bits, rate[0], rate[1]);
        free(m);
    }
    free(a);
    free(o);
}

static blco_tensor_t *build(blco_coo_t *coo, const char *name)
{
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_tensor_from_coo(coo, NULL, NULL, &t, &d);
    if (err < 0)
        cli_die_diag(name, err, &d);
    return t;
}

static blco_tensor_t *generate(int kind, uint64_t nnz, double skew, int ratings)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = kind;
    g.order = 3;
    g.dims[0] = 20000;
    g.dims[1] = 15000;
    g.dims[2] = 10000;
    g.nnz = nnz;
    g.seed = 42;
    for (int k = 0; k < 3; k++)
        g.skew[k] = skew;
    blco_coo_t *coo;
    int err = blco_gen_coo(&g, NULL, &coo);
    if (err < 0)
        cli_die("generating: %s", blco_strerror(err));
    if (ratings) /* integer ratings 1..5, as in recommender tensors */
        for (uint64_t k = 0; k < coo->nnz; k++)
            coo->val[k] = (double)(1 + (uint64_t)(coo->val[k] * 5.0 - 1e-9));
    blco_tensor_t *t = build(coo, "generated");
    blco_coo_destroy(coo);
    return t;
}

/* ---- --compare: whole files written with chosen pack codecs ---- */

typedef struct cmp_codec {
    const char *name;
    int pack;
} cmp_codec_t;

static const cmp_codec_t cmp_known[] = {
    {"auto", BLCO_PACK_AUTO},       {"raw", BLCO_PACK_RAW},   {"narrow", BLCO_PACK_NARROW},
    {"delta", BLCO_PACK_DELTA},     {"zstd", BLCO_PACK_ZSTD}, {"gpu", BLCO_PACK_GPU},
    {"compact", BLCO_PACK_COMPACT},
};

typedef struct cmp_opts {
    const cmp_codec_t *codecs[16];
    int ncodecs, threads, reps;
    double min_time;
    uint64_t S;
    const char *tmpdir;
} cmp_opts_t;

/* One file's stored segments in memory, decoded by tasks (a segment's index column, or its
 * value column, as the streaming engine splits them) into arrays of the whole tensor. */
typedef struct cmp_file {
    blco_file_t *f;
    const blco_file_info_t *info;
    uint8_t *stored;
    uint64_t *soff;
    uint64_t *idx;
    double *val;
    uint64_t ntask, next;
    int err;
} cmp_file_t;

typedef struct cmp_worker {
    cmp_file_t *cf;
    blco_decoder_t *dec;
} cmp_worker_t;

/* Decodes task i: segment i / 2's index column (i even) or value column (i odd). */
static void cmp_task(cmp_file_t *cf, blco_decoder_t *dec, uint64_t i)
{
    uint64_t s = i / 2;
    const blco_segment_t *sg = blco_file_segment(cf->f, s);
    blco_diag_t d = {0};
    int e = blco_segment_decode_part(cf->f, dec, s, cf->stored + cf->soff[s],
                                     i % 2 ? BLCO_SEGMENT_VALUES : BLCO_SEGMENT_INDEX,
                                     cf->idx + sg->first_nnz, cf->val + sg->first_nnz, &d);
    if (e < 0)
        __atomic_store_n(&cf->err, e, __ATOMIC_RELAXED);
}

static void *cmp_work(void *arg)
{
    cmp_worker_t *w = arg;
    cmp_file_t *cf = w->cf;
    for (;;) {
        uint64_t i = __atomic_fetch_add(&cf->next, 1, __ATOMIC_RELAXED);
        if (i >= cf->ntask)
            break;
        cmp_task(cf, w->dec, i);
    }
    return NULL;
}

/* Seconds of one pass decoding every segment on `nt` threads. */
static double cmp_decode_pass(cmp_file_t *cf, cmp_worker_t *w, int nt)
{
    pthread_t th[256];
    cf->next = 0;
    double t0 = blco_now();
    int started = 0;
    for (int k = 1; k < nt; k++, started++)
        if (pthread_create(&th[k], NULL, cmp_work, &w[k]) != 0)
            break;
    cmp_work(&w[0]);
    for (int k = 1; k <= started; k++)
        pthread_join(th[k], NULL);
    double dt = blco_now() - t0;
    if (cf->err < 0)
        cli_die("decode: %s", blco_strerror(cf->err));
    return dt;
}

static double load_average(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

typedef struct cmp_result {
    uint64_t file_bytes, nseg, dev_segs;
    uint64_t icodec[256], vcodec[256];
    double write_s, dec1_s, decn_s, verify1_s;
} cmp_result_t;

static void cmp_one(const char *name, const blco_tensor_t *t, const cmp_codec_t *c,
                    const cmp_opts_t *o, cmp_result_t *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/bench_codec_compare.%ld.blco", o->tmpdir, (long)getpid());
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.codec = c->pack;
    wo.segment_nnz = o->S;
    wo.force = 1;
    blco_diag_t d = {0};
    double t0 = blco_now();
    int err = blco_tensor_write(t, path, &wo, NULL, &d);
    r->write_s = blco_now() - t0;
    if (err < 0)
        cli_die_diag(path, err, &d);
    cmp_file_t cf = {0};
    if ((err = blco_file_open(path, &cf.f, &d)) < 0)
        cli_die_diag(path, err, &d);
    unlink(path); /* the open file stays readable */
    cf.info = blco_file_info(cf.f);
    const uint64_t ns = cf.info->nsegments, nnz = cf.info->nnz;
    if (nnz != t->nnz)
        cli_die("%s: %s file holds %llu nonzeros, not %llu", name, c->name, (unsigned long long)nnz,
                (unsigned long long)t->nnz);
    r->file_bytes = cf.info->file_bytes;
    r->nseg = ns;
    r->dev_segs = 0;
    memset(r->icodec, 0, sizeof r->icodec);
    memset(r->vcodec, 0, sizeof r->vcodec);
    cf.soff = xmalloc(ns * sizeof *cf.soff);
    uint64_t total = 0;
    for (uint64_t s = 0; s < ns; s++) {
        const blco_segment_t *sg = blco_file_segment(cf.f, s);
        cf.soff[s] = total;
        total += blco_segment_disk_bytes(sg);
        r->icodec[sg->index_codec & 0xff]++;
        r->vcodec[sg->value_codec & 0xff]++;
        /* what the streaming engine sends to a GPU encoded (stream/engine.c) */
        r->dev_segs +=
            blco_codec_device_decodes(cf.info->value_type, sg->index_codec, sg->value_codec);
    }
    cf.stored = xmalloc(total);
    for (uint64_t s = 0; s < ns; s++)
        if ((err = blco_file_read_segment(cf.f, s, cf.stored + cf.soff[s],
                                          blco_segment_disk_bytes(blco_file_segment(cf.f, s)),
                                          &d)) < 0)
            cli_die_diag(path, err, &d);
    cf.idx = xmalloc(nnz * 8);
    cf.val = xmalloc(nnz * 8);
    cf.ntask = 2 * ns;
    int nt = o->threads;
    cmp_worker_t *w = xmalloc((size_t)nt * sizeof *w);
    for (int k = 0; k < nt; k++) {
        w[k].cf = &cf;
        if (blco_decoder_new(&w[k].dec) < 0)
            cli_die("out of memory");
    }
    /* An untimed pass that checks the round trip, then the best of the timed ones. */
    memset(cf.idx, 0xa5, nnz * 8);
    cmp_decode_pass(&cf, w, nt);
    if (memcmp(cf.idx, t->idx, nnz * 8) || memcmp(cf.val, t->val, nnz * 8))
        cli_die("%s: the %s file does not decode to the tensor", name, c->name);
    /* At least `reps` rounds, and at least min_time seconds of them. On one thread each task and
     * each checksum is timed alone and its best time kept (on a loaded machine a thread is
     * preempted often; the sum of the best times is its unhindered speed); on all threads
     * the best round's wall time. */
    double *best = xmalloc((cf.ntask + ns) * sizeof *best);
    for (uint64_t i = 0; i < cf.ntask + ns; i++)
        best[i] = 1e30;
    r->decn_s = 1e30;
    double spent = blco_now();
    for (int rep = 0; rep < o->reps || (blco_now() - spent < o->min_time && rep < 1000); rep++) {
        for (uint64_t i = 0; i < cf.ntask; i++) {
            double a = blco_now();
            cmp_task(&cf, w[0].dec, i);
            a = blco_now() - a;
            best[i] = a < best[i] ? a : best[i];
        }
        if (cf.err < 0)
            cli_die("decode: %s", blco_strerror(cf.err));
        for (uint64_t s = 0; s < ns; s++) {
            double a = blco_now();
            if ((err = blco_segment_verify(cf.f, s, cf.stored + cf.soff[s], &d)) < 0)
                cli_die_diag(path, err, &d);
            a = blco_now() - a;
            best[cf.ntask + s] = a < best[cf.ntask + s] ? a : best[cf.ntask + s];
        }
        double a = cmp_decode_pass(&cf, w, nt);
        r->decn_s = a < r->decn_s ? a : r->decn_s;
    }
    r->dec1_s = r->verify1_s = 0;
    for (uint64_t i = 0; i < cf.ntask; i++)
        r->dec1_s += best[i];
    for (uint64_t s = 0; s < ns; s++)
        r->verify1_s += best[cf.ntask + s];
    free(best);
    for (int k = 0; k < nt; k++)
        blco_decoder_free(w[k].dec);
    free(w);
    free(cf.idx);
    free(cf.val);
    free(cf.stored);
    free(cf.soff);
    blco_file_close(cf.f);
}

static void print_codec_counts(const uint64_t *cnt, int index)
{
    static const char *iname[] = {"raw", "narrow", "delta"};
    static const char *vname[] = {"f64", "f32", "f64planes", "f32planes", "int", "decimal"};
    int first = 1;
    for (int c = 0; c < 256; c++) {
        if (!cnt[c])
            continue;
        int base = BLCO_CODEC_BASE(c);
        const char *n = index ? (base < 3 ? iname[base] : "?") : (base < 6 ? vname[base] : "?");
        printf("%s\"%s%s\":%llu", first ? "" : ",", n, c & BLCO_CODEC_ZSTD ? "+zstd" : "",
               (unsigned long long)cnt[c]);
        first = 0;
    }
}

/* Every codec of `o` on one tensor; ratios against the first. */
static void cmp_tensor(const char *name, const blco_tensor_t *t, const cmp_opts_t *o)
{
    cmp_result_t *r = xmalloc((size_t)o->ncodecs * sizeof *r);
    double load0 = load_average();
    for (int c = 0; c < o->ncodecs; c++)
        cmp_one(name, t, o->codecs[c], o, &r[c]);
    double load1 = load_average();
    const double n = (double)t->nnz;
    for (int c = 0; c < o->ncodecs; c++) {
        head("codec_compare");
        printf("\"tensor\":\"%s\",\"order\":%d,\"nnz\":%llu,\"index_bits\":%d,\"S\":%llu,"
               "\"segments\":%llu,\"codec\":\"%s\",\"baseline\":\"%s\",\"file_bytes\":%llu,"
               "\"file_bpn\":%.4f,\"device_segments\":%llu,\"index_codecs\":{",
               name, t->layout.order, (unsigned long long)t->nnz,
               t->layout.total_bits < t->layout.line_bits ? t->layout.total_bits
                                                          : t->layout.line_bits,
               (unsigned long long)o->S, (unsigned long long)r[c].nseg, o->codecs[c]->name,
               o->codecs[0]->name, (unsigned long long)r[c].file_bytes, (double)r[c].file_bytes / n,
               (unsigned long long)r[c].dev_segs);
        print_codec_counts(r[c].icodec, 1);
        printf("},\"value_codecs\":{");
        print_codec_counts(r[c].vcodec, 0);
        printf("},\"write_s\":%.4f,\"decode1_mnnz_s\":%.1f,\"threads\":%d,"
               "\"decodeN_mnnz_s\":%.1f,\"verify1_mnnz_s\":%.1f,\"verify_decode1_mnnz_s\":%.1f,"
               "\"bpn_vs_baseline\":%.4f,\"decode1_vs_baseline\":%.3f,"
               "\"decodeN_vs_baseline\":%.3f,\"verify_decode1_vs_baseline\":%.3f,"
               "\"load_avg\":[%.2f,%.2f]}\n",
               r[c].write_s, n / r[c].dec1_s / 1e6, o->threads, n / r[c].decn_s / 1e6,
               n / r[c].verify1_s / 1e6, n / (r[c].verify1_s + r[c].dec1_s) / 1e6,
               (double)r[c].file_bytes / (double)r[0].file_bytes, r[0].dec1_s / r[c].dec1_s,
               r[0].decn_s / r[c].decn_s,
               (r[0].verify1_s + r[0].dec1_s) / (r[c].verify1_s + r[c].dec1_s), load0, load1);
        fflush(stdout);
    }
    free(r);
}

/* A whole text file, zstd-compressed or not (by its magic number). */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        cli_die("%s: cannot open", path);
    size_t cap = 1 << 20, n = 0;
    char *raw = xmalloc(cap);
    for (size_t got; (got = fread(raw + n, 1, cap - n, f)) > 0;)
        if ((n += got) == cap && !(raw = realloc(raw, cap *= 2)))
            cli_die("out of memory");
    fclose(f);
    if (n < 4 || memcmp(raw, "\x28\xb5\x2f\xfd", 4)) {
        *len = n;
        return raw;
    }
    ZSTD_DStream *z = ZSTD_createDStream();
    size_t ocap = 4 * n + (1 << 20);
    char *out = xmalloc(ocap);
    ZSTD_inBuffer in = {raw, n, 0};
    ZSTD_outBuffer ob = {out, ocap, 0};
    while (in.pos < in.size) {
        if (ob.pos == ob.size) {
            if (!(out = realloc(out, ocap *= 2)))
                cli_die("out of memory");
            ob.dst = out;
            ob.size = ocap;
        }
        size_t r = ZSTD_decompressStream(z, &ob, &in);
        if (ZSTD_isError(r))
            cli_die("%s: %s", path, ZSTD_getErrorName(r));
    }
    ZSTD_freeDStream(z);
    free(raw);
    *len = ob.pos;
    return out;
}

/* The .tns and .tns.zst files of `dir`, in name order. */
static int list_tns(const char *dir, char **names, int max)
{
    DIR *dp = opendir(dir);
    struct dirent *e;
    int nn = 0;
    while (dp && (e = readdir(dp)) && nn < max) {
        size_t l = strlen(e->d_name);
        if ((l > 4 && !strcmp(e->d_name + l - 4, ".tns")) ||
            (l > 8 && !strcmp(e->d_name + l - 8, ".tns.zst")))
            names[nn++] = strdup(e->d_name);
    }
    if (dp)
        closedir(dp);
    for (int i = 0; i < nn; i++)
        for (int j = i + 1; j < nn; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *x = names[i];
                names[i] = names[j];
                names[j] = x;
            }
    return nn;
}

static void compare(const cmp_opts_t *o, const char *const *dirs, int ndirs, uint64_t nnz)
{
    for (int di = 0; di < ndirs; di++) {
        char *names[128];
        int nn = list_tns(dirs[di], names, 128);
        for (int i = 0; i < nn; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dirs[di], names[i]);
            blco_coo_t *coo;
            blco_diag_t d = {0};
            size_t len;
            char *text = read_text(path, &len);
            int err = blco_tns_read_mem(text, len, NULL, NULL, &coo, NULL, &d);
            if (err < 0)
                cli_die_diag(path, err, &d);
            free(text);
            blco_tensor_t *t = build(coo, path);
            blco_coo_destroy(coo);
            cmp_tensor(names[i], t, o);
            blco_tensor_destroy(t);
            free(names[i]);
        }
    }
    /* Generated shapes (blco-gen's values: uniform in (0, 1]; with `places`, rounded to
     * that many decimal places, as a .tns written with "%.6f" gives them). */
    static const struct {
        const char *name;
        int kind;
        double skew;
        uint64_t dims[3];
        int places;
    } shapes[] = {
        {"nell2-shape-powerlaw2", BLCO_GEN_POWERLAW, 2.0, {12092, 9184, 28818}, 0},
        {"long-uniform", BLCO_GEN_UNIFORM, 1.0, {4000000, 2000000, 1000000}, 0},
        {"short-powerlaw1.5", BLCO_GEN_POWERLAW, 1.5, {20000, 15000, 10000}, 0},
        {"nell2-shape-powerlaw2-6places", BLCO_GEN_POWERLAW, 2.0, {12092, 9184, 28818}, 6},
    };
    for (unsigned k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        blco_gen_opts_t g;
        blco_gen_opts_default(&g);
        g.kind = shapes[k].kind;
        g.order = 3;
        memcpy(g.dims, shapes[k].dims, sizeof shapes[k].dims);
        g.nnz = nnz;
        g.seed = 1;
        for (int m = 0; m < 3; m++)
            g.skew[m] = shapes[k].skew;
        blco_coo_t *coo;
        int err = blco_gen_coo(&g, NULL, &coo);
        if (err < 0)
            cli_die("generating: %s", blco_strerror(err));
        blco_tensor_t *t = build(coo, "generated");
        if (shapes[k].places)
            bench_round_places(t, shapes[k].places);
        blco_coo_destroy(coo);
        char name[160];
        snprintf(name, sizeof name, "%s-%llux%llux%llu-%llu", shapes[k].name,
                 (unsigned long long)g.dims[0], (unsigned long long)g.dims[1],
                 (unsigned long long)g.dims[2], (unsigned long long)nnz);
        cmp_tensor(name, t, o);
        blco_tensor_destroy(t);
    }
}

static void parse_codecs(cmp_opts_t *o, const char *list)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    o->ncodecs = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const cmp_codec_t *c = NULL;
        for (unsigned k = 0; k < sizeof cmp_known / sizeof *cmp_known; k++)
            if (!strcmp(tok, cmp_known[k].name))
                c = &cmp_known[k];
        if (!c)
            cli_usage_error("--codecs: unknown codec '%s'", tok);
        if (o->ncodecs == 16)
            cli_usage_error("--codecs: at most 16");
        o->codecs[o->ncodecs++] = c;
    }
    if (!o->ncodecs)
        cli_usage_error("--codecs: none given");
}

static const char usage_text[] =
    "usage: bench_codec [--quick] [--nnz N] [--data DIR]\n"
    "       bench_codec --compare [--codecs LIST] [--nnz N] [--data DIR]... [--threads T]\n"
    "                   [--reps R] [--min-time SECONDS] [--segment-nnz S] [--tmpdir DIR]\n"
    "Bytes per nonzero and decode GB/s of every codec against memcpy, on a\n"
    "generated tensor of N nonzeros (default 20M; --quick: 2M) and on the sample\n"
    "tensors in DIR (default $BLCO_SHARED_DATA) when there are any.\n"
    "--compare: .blco files written with each pack codec of LIST (default auto,gpu,zstd;\n"
    "names as blco-pack --codec takes them), for every .tns and .tns.zst in each DIR\n"
    "(default $BLCO_SHARED_DATA and its large/) and three generated shapes of N nonzeros\n"
    "(default 4M): NELL-2's 12092x9184x28818 power law (skew 2), a long uniform\n"
    "4000000x2000000x1000000, a short 20000x15000x10000 power law (skew 1.5), and the\n"
    "NELL-2 shape with values of 6 decimal places (as \"%.6f\" text gives). Per codec:\n"
    "file bytes per nonzero, segments a GPU decodes, CPU decode speed (nonzeros/s) on one\n"
    "thread (each segment's columns timed alone, best of the rounds) and on T (default: all\n"
    "cores; best round), checksum speed, at least R rounds (default 5) and SECONDS of them\n"
    "(default 1), and ratios against the first codec of LIST. S: nonzeros per segment\n"
    "(default 2^20, blco-pack's); files are written to DIR (default $TMPDIR or /tmp) and\n"
    "removed.\n";

int main(int argc, char **argv)
{
    cli_tool = "bench_codec";
    uint64_t nnz = 20000000;
    int cmp = 0, nnz_given = 0, ndirs = 0;
    const char *dirs[16];
    cmp_opts_t co = {.threads = 0, .reps = 5, .min_time = 1.0, .S = 1u << 20};
    co.tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    parse_codecs(&co, "auto,gpu,zstd");
    const char *data = getenv("BLCO_SHARED_DATA");
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--quick"))
            quick = 1, nnz = 2000000;
        else if (!strcmp(argv[i], "--nnz") && more)
            nnz = cli_count(argv[++i], "--nnz"), nnz_given = 1;
        else if (!strcmp(argv[i], "--data") && more) {
            data = argv[++i];
            if (ndirs == 16)
                cli_usage_error("--data: at most 16");
            dirs[ndirs++] = data;
        } else if (!strcmp(argv[i], "--compare"))
            cmp = 1;
        else if (!strcmp(argv[i], "--codecs") && more)
            parse_codecs(&co, argv[++i]);
        else if (!strcmp(argv[i], "--threads") && more)
            co.threads = (int)cli_count(argv[++i], "--threads");
        else if (!strcmp(argv[i], "--reps") && more)
            co.reps = (int)cli_count(argv[++i], "--reps");
        else if (!strcmp(argv[i], "--min-time") && more)
            co.min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--segment-nnz") && more)
            co.S = cli_count(argv[++i], "--segment-nnz");
        else if (!strcmp(argv[i], "--tmpdir") && more)
            co.tmpdir = argv[++i];
        else
            cli_usage_error("%s", usage_text);
    }
    machine();
    if (cmp) {
        char large[4200];
        if (!ndirs && data && *data) {
            dirs[ndirs++] = data;
            snprintf(large, sizeof large, "%s/large", data);
            DIR *dp = opendir(large);
            if (dp) {
                closedir(dp);
                dirs[ndirs++] = large;
            }
        }
        if (co.threads <= 0)
            co.threads = (int)(cores > 0 ? cores : 1);
        if (co.threads > 256)
            co.threads = 256;
        if (co.reps < 1)
            co.reps = 1;
        compare(&co, dirs, ndirs, nnz_given ? nnz : 4000000);
        return 0;
    }
    bench_map();

    static const uint64_t sizes[] = {1 << 16, 1 << 20};
    struct {
        const char *name;
        int kind, ratings;
        double skew;
    } gens[] = {
        {"uniform", BLCO_GEN_UNIFORM, 0, 1.0},
        {"uniform-ratings", BLCO_GEN_UNIFORM, 1, 1.0},
        {"powerlaw-1.5", BLCO_GEN_POWERLAW, 0, 1.5},
        {"powerlaw-2", BLCO_GEN_POWERLAW, 0, 2.0},
    };
    for (unsigned g = 0; g < sizeof gens / sizeof *gens; g++) {
        tensor_case_t tc;
        tc.t = generate(gens[g].kind, nnz, gens[g].skew, gens[g].ratings);
        snprintf(tc.name, sizeof tc.name, "%s-20000x15000x10000", gens[g].name);
        for (int si = 0; si < 2; si++)
            bench_tensor(&tc, sizes[si]);
        if (g < 2)
            bench_values(gens[g].name, tc.t->val, tc.t->nnz, 1 << 20);
        blco_tensor_destroy(tc.t);
    }

    if (data) {
        DIR *dir = opendir(data);
        struct dirent *e;
        char *names[64];
        int nn = 0;
        while (dir && (e = readdir(dir)) && nn < 64)
            if (strlen(e->d_name) > 4 && !strcmp(e->d_name + strlen(e->d_name) - 4, ".tns"))
                names[nn++] = strdup(e->d_name);
        if (dir)
            closedir(dir);
        for (int i = 0; i < nn; i++) /* a stable order */
            for (int j = i + 1; j < nn; j++)
                if (strcmp(names[j], names[i]) < 0) {
                    char *x = names[i];
                    names[i] = names[j];
                    names[j] = x;
                }
        for (int i = 0; i < nn; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", data, names[i]);
            blco_coo_t *coo;
            blco_diag_t d = {0};
            int err = blco_tns_read_file(path, NULL, NULL, &coo, NULL, &d);
            if (err < 0)
                cli_die_diag(path, err, &d);
            tensor_case_t tc;
            tc.t = build(coo, path);
            snprintf(tc.name, sizeof tc.name, "%s", names[i]);
            for (int si = 0; si < 2; si++)
                bench_tensor(&tc, sizes[si]);
            blco_tensor_destroy(tc.t);
            blco_coo_destroy(coo);
            free(names[i]);
        }
    }
    return 0;
}
