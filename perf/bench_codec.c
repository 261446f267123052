/* Benchmark of the segment column codecs: bytes per nonzero of each pack codec on
 * generated and real tensors, single-core decode and encode speed, against a memcpy of
 * the same decoded bytes in the same run. Prints one JSON object per result. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
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
    {"auto", BLCO_PACK_AUTO, 0},       {"auto-zstd1", BLCO_PACK_AUTO, 1},
    {"auto-zstd3", BLCO_PACK_AUTO, 3}, {"raw", BLCO_PACK_RAW, 0},
    {"narrow", BLCO_PACK_NARROW, 0},   {"delta", BLCO_PACK_DELTA, 0},
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
        uint64_t hist[4][8] = {{0}}; /* segments by index codec and value codec */
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
            hist[s[k].ic & 3][(s[k].vc & 3) | (s[k].vc & 0x80 ? 4 : 0)]++;
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
        static const char *vname[] = {"f64", "f32", "f64planes", "f32planes"};
        int first = 1;
        for (int i = 0; i < 3; i++) {
            uint64_t cnt = 0;
            for (int v = 0; v < 8; v++)
                cnt += hist[i][v];
            if (cnt)
                printf("%s\"%s\":%llu", first ? "" : ",", iname[i], (unsigned long long)cnt),
                    first = 0;
        }
        printf("},\"index_zstd_segments\":%llu,\"value_codecs\":{", (unsigned long long)izstd);
        first = 1;
        for (int v = 0; v < 8; v++) {
            uint64_t cnt = 0;
            for (int i = 0; i < 4; i++)
                cnt += hist[i][v];
            if (cnt)
                printf("%s\"%s%s\":%llu", first ? "" : ",", vname[v & 3], v & 4 ? "+zstd" : "",
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
    };
    uint64_t ns = (nnz + S - 1) / S;
    size_t cap = blco_codec_value_bound(S);
    uint8_t *enc = xmalloc(ns * cap);
    size_t *len = xmalloc(ns * sizeof *len);
    double *out = xmalloc(S * 8);
    blco_codec_ctx_t *ctx;
    if (blco_codec_ctx_new(&ctx) < 0)
        cli_die("out of memory");
    for (unsigned c = 0; c < sizeof vc / sizeof *vc; c++) {
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

int main(int argc, char **argv)
{
    cli_tool = "bench_codec";
    uint64_t nnz = 20000000;
    const char *data = getenv("BLCO_SHARED_DATA");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_codec [--quick] [--nnz N] [--data DIR]\n"
                   "Bytes per nonzero and decode GB/s of every codec against memcpy, on a\n"
                   "generated tensor of N nonzeros (default 20M; --quick: 2M) and on the sample\n"
                   "tensors in DIR (default $BLCO_SHARED_DATA) when there are any.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--quick"))
            quick = 1, nnz = 2000000;
        else if (!strcmp(argv[i], "--nnz") && i + 1 < argc)
            nnz = cli_count(argv[++i], "--nnz");
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else
            cli_usage_error("usage: bench_codec [--quick] [--nnz N] [--data DIR]");
    }
    machine();
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
