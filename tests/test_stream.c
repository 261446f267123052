/* The streaming engine against the naive oracle: every io backend, residency tier, thread
 * count and a budget so small that slots recycle many times, on generated tensors and on
 * ../shared/data; plus corrupt, truncated and missing files, a budget too small, and the
 * counters' totals. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "blco.h"
#include "check.h"
#include "stream_oracle.h"

static char dir[4096];
static int have_uring = -1;

typedef struct fixture {
    const char *name;
    char path[4200];
    blco_coo_t *x, *xabs;
    uint64_t data_bytes, nsegments;
} fixture_t;

static int write_blco(fixture_t *fx, const blco_coo_t *x, int line_bits, uint64_t segment_nnz,
                      int codec)
{
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.line_bits = line_bits;
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_tensor_from_coo(x, &bo, NULL, &t, &d);
    CHECK(err == 0, "%s: build: %s %s", fx->name, blco_strerror(err), d.msg);
    if (err)
        return err;
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.segment_nnz = segment_nnz;
    wo.codec = codec;
    wo.force = 1;
    blco_file_info_t info;
    err = blco_tensor_write(t, fx->path, &wo, &info, &d);
    CHECK(err == 0, "%s: write: %s %s", fx->name, blco_strerror(err), d.msg);
    blco_tensor_destroy(t);
    fx->nsegments = info.nsegments;
    return err;
}

/* Slot size run_config asks for (0: the engine's choice). */
static uint64_t run_slot_bytes;

/* Opens the fixture with the given settings, runs every mode `passes` times and checks each
 * result against the oracle. Returns the stats through *st. */
static void run_config(fixture_t *fx, int rank, int io, int residency, int threads,
                       uint64_t budget_bytes, int passes, blco_stats_t *st, char *residency_out)
{
    const blco_coo_t *x = fx->x;
    int order = x->order;
    double *f[BLCO_MAX_MODES];
    for (int m = 0; m < order; m++)
        f[m] = rand_matrix(x->dims[m], rank, 7 + m);
    blco_budget_t *budget;
    blco_budget_create(&budget, budget_bytes);
    blco_stats_init(st);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.io_backend = io;
    o.residency = residency;
    o.threads = threads;
    o.rank = rank;
    o.slot_bytes = run_slot_bytes;
    o.stats = st;
    blco_stream_t *s;
    blco_diag_t d = {0};
    int err = blco_stream_open(fx->path, &o, budget, &s, &d);
    CHECK(err == 0, "%s io %d res %d thr %d budget %llu: open: %s (%s)", fx->name, io, residency,
          threads, (unsigned long long)budget_bytes, blco_strerror(err), d.msg);
    if (err == 0) {
        for (int p = 0; p < passes; p++)
            for (int m = 0; m < order; m++) {
                uint64_t n = x->dims[m] * (uint64_t)rank;
                double *out = malloc(n * 8 + 8), *ref = malloc(n * 8 + 8),
                       *bound = malloc(n * 8 + 8);
                for (uint64_t i = 0; i < n; i++)
                    out[i] = NAN; /* every entry must be written */
                err = blco_stream_mttkrp(s, m, rank, (const double *const *)f, out, &d);
                CHECK(err == 0, "%s mode %d pass %d: %s (%s)", fx->name, m + 1, p,
                      blco_strerror(err), d.msg);
                blco_mttkrp_naive(x, m, rank, (const double *const *)f, ref);
                blco_mttkrp_naive(fx->xabs, m, rank, (const double *const *)f, bound);
                double w = worst_ratio(out, ref, bound, n);
                CHECK(err == 0 && w <= 64,
                      "%s io %d res %d thr %d budget %llu mode %d pass %d: "
                      "error %.3g x 1e-12 of the bound (%s)",
                      fx->name, io, residency, threads, (unsigned long long)budget_bytes, m + 1, p,
                      w, blco_stream_describe(s));
                free(out);
                free(ref);
                free(bound);
            }
        if (residency_out)
            snprintf(residency_out, 64, "%s", st->residency);
        blco_stream_close(s);
    }
    CHECK(blco_budget_used(budget) == 0, "%s: %llu bytes of budget not returned", fx->name,
          (unsigned long long)blco_budget_used(budget));
    blco_budget_destroy(budget);
    for (int m = 0; m < order; m++)
        free(f[m]);
}

/* The smallest budget the engine accepts for this file, found by asking it. */
static uint64_t min_budget(fixture_t *fx)
{
    uint64_t lo = 4096, hi = 1ull << 32;
    while (hi - lo > 4096) {
        uint64_t mid = lo + (hi - lo) / 2;
        blco_budget_t *b;
        blco_budget_create(&b, mid);
        blco_stream_opts_t o;
        blco_stream_opts_default(&o);
        o.threads = 1;
        blco_stream_t *s;
        int err = blco_stream_open(fx->path, &o, b, &s, NULL);
        if (err == 0) {
            hi = mid;
            blco_stream_close(s);
        } else {
            CHECK(err == -BLCO_EBUDGET, "%s: open with %llu bytes: %s", fx->name,
                  (unsigned long long)mid, blco_strerror(err));
            lo = mid;
        }
        blco_budget_destroy(b);
    }
    return hi;
}

static void matrix(fixture_t *fx, int rank, int full)
{
    uint64_t tiny = min_budget(fx) + 8192;
    blco_stats_t st;
    char res[64];
    int ios[3] = {BLCO_IO_AUTO, BLCO_IO_PREAD, BLCO_IO_URING};
    int nio = have_uring ? 3 : 2;
    int saw_partial = 0;
    for (int i = 0; i < nio; i++)
        for (int r = 0; r < 3; r++)
            for (int t = 1; t <= 2; t++) {
                /* Other fixtures: three configurations that between them cover each io
                 * backend, each residency and both thread counts. */
                if (!full && !((i == 0 && r == BLCO_RESIDENT_AUTO && t == 2) ||
                               (i == 1 && r == BLCO_RESIDENT_NONE && t == 1) ||
                               (i == nio - 1 && r == BLCO_RESIDENT_STORED && t == 2)))
                    continue;
                /* A tiny budget: the ring recycles every few segments. */
                run_config(fx, rank, ios[i], r, t, tiny, 2, &st, res);
                saw_partial |= strstr(res, "partial") != NULL;
                /* The stream never reads more than it needs: passes from disk times data. */
                uint64_t br = blco_stat_get(&st.bytes_read);
                CHECK(strstr(res, "partial") || br % fx->data_bytes == 0 || !fx->data_bytes,
                      "%s: read %llu bytes, data is %llu", fx->name, (unsigned long long)br,
                      (unsigned long long)fx->data_bytes);
                /* A generous budget: everything resident after the first pass. */
                run_config(fx, rank, ios[i], r, t, 1ull << 30, 2, &st, res);
                uint64_t passes = 2ull * (uint64_t)fx->x->order;
                CHECK(blco_stat_get(&st.passes) == passes, "%s: %llu passes", fx->name,
                      (unsigned long long)st.passes);
                CHECK(blco_stat_get(&st.nnz_computed) == passes * st.nnz,
                      "%s: nnz_computed %llu, expected %llu", fx->name,
                      (unsigned long long)st.nnz_computed, (unsigned long long)(passes * st.nnz));
                uint64_t want = r == BLCO_RESIDENT_NONE ? passes * fx->data_bytes : fx->data_bytes;
                CHECK(blco_stat_get(&st.bytes_read) == want,
                      "%s res %d: bytes_read %llu, expected %llu (%s)", fx->name, r,
                      (unsigned long long)st.bytes_read, (unsigned long long)want, res);
                CHECK(blco_stat_get(&st.segments_verified) ==
                          (r == BLCO_RESIDENT_NONE ? passes : 1) * fx->nsegments,
                      "%s res %d: %llu segments verified", fx->name, r,
                      (unsigned long long)st.segments_verified);
                CHECK(blco_stat_get(&st.slots_busy) == 0, "%s: slots still busy", fx->name);
            }
    /* A budget between the ring and the whole tensor: a resident prefix, the rest streamed.
     * Where that window lies depends on the planner (a partial prefix comes after the
     * kernel's staged factors and private rows, stream/engine.c decide_residency), so the
     * budget climbs from the smallest in 16 steps to the ring, the kernel's share and the
     * data until a configuration keeps a prefix; at rank 1, where the kernel's share is
     * smallest, so that the window exists for small tensors too. */
    uint64_t rows = 0, maxrows = 0;
    for (int m = 0; m < fx->x->order; m++) {
        rows += fx->x->dims[m];
        maxrows = fx->x->dims[m] > maxrows ? fx->x->dims[m] : maxrows;
    }
    const uint64_t span = (rows + maxrows * 2) * 8 + fx->data_bytes + 65536;
    for (int k = 1; k <= 16; k++) {
        run_config(fx, 1, BLCO_IO_AUTO, BLCO_RESIDENT_AUTO, 2, tiny + span * (uint64_t)k / 16, 3,
                   &st, res);
        if (strstr(res, "partial"))
            break;
    }
    saw_partial |= strstr(res, "partial") != NULL;
    uint64_t passes = 3ull * (uint64_t)fx->x->order;
    uint64_t br = blco_stat_get(&st.bytes_read);
    if (strstr(res, "partial"))
        CHECK(br > fx->data_bytes && br < passes * fx->data_bytes,
              "%s partial: read %llu bytes of %llu", fx->name, (unsigned long long)br,
              (unsigned long long)fx->data_bytes);
    if (full)
        CHECK(saw_partial, "%s: no configuration kept a resident prefix", fx->name);
}

static void fixture_from_coo(fixture_t *fx, const char *name, blco_coo_t *x, int line_bits,
                             uint64_t segment_nnz, int codec)
{
    fx->name = name;
    fx->x = x;
    fx->xabs = abs_copy(x);
    snprintf(fx->path, sizeof fx->path, "%s/%s.blco", dir, name);
    if (write_blco(fx, x, line_bits, segment_nnz, codec) < 0)
        return;
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.stats = &st;
    blco_stream_t *s;
    if (blco_stream_open(fx->path, &o, NULL, &s, NULL) == 0) {
        fx->data_bytes = st.data_bytes;
        blco_stream_close(s);
    }
}

static void fixture_free(fixture_t *fx)
{
    blco_coo_destroy(fx->x);
    blco_coo_destroy(fx->xabs);
}

static void generated(void)
{
    struct {
        const char *name;
        int kind, order;
        uint64_t dims[6], nnz;
        int line_bits, codec, rank;
        uint64_t seg;
    } cases[] = {
        {"pow3", BLCO_GEN_POWERLAW, 3, {300, 200, 100}, 20000, 0, BLCO_PACK_AUTO, 16, 256},
        {"uni4", BLCO_GEN_UNIFORM, 4, {50, 40, 30, 20}, 8000, 0, BLCO_PACK_ZSTD, 7, 128},
        {"blocks3", BLCO_GEN_UNIFORM, 3, {1000, 900, 800}, 6000, 20, BLCO_PACK_RAW, 33, 64},
        {"mat2", BLCO_GEN_POWERLAW, 2, {1000, 700}, 5000, 0, BLCO_PACK_NARROW, 3, 512},
        {"ones5", BLCO_GEN_UNIFORM, 5, {9, 1, 7, 5, 1}, 300, 0, BLCO_PACK_DELTA, 1, 16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        blco_gen_opts_t g;
        blco_gen_opts_default(&g);
        g.kind = cases[c].kind;
        g.order = cases[c].order;
        memcpy(g.dims, cases[c].dims, sizeof cases[c].dims);
        g.nnz = cases[c].nnz;
        g.seed = 11 + c;
        for (int m = 0; m < g.order; m++)
            g.skew[m] = g.kind == BLCO_GEN_POWERLAW ? 1.5 + 0.5 * m : 1;
        blco_coo_t *x;
        int err = blco_gen_coo(&g, NULL, &x);
        CHECK(err == 0, "gen %s: %s", cases[c].name, blco_strerror(err));
        if (err)
            continue;
        memcpy(x->dims, g.dims, sizeof g.dims);
        fixture_t fx = {0};
        fixture_from_coo(&fx, cases[c].name, x, cases[c].line_bits, cases[c].seg, cases[c].codec);
        printf("%s: %llu nnz, %llu segments, %llu bytes of data\n", fx.name,
               (unsigned long long)x->nnz, (unsigned long long)fx.nsegments,
               (unsigned long long)fx.data_bytes);
        matrix(&fx, cases[c].rank, c == 0);
        fixture_free(&fx);
    }
}

static void shared_data(void)
{
    const char *sd = getenv("BLCO_SHARED_DATA");
    DIR *d = sd ? opendir(sd) : NULL;
    if (!d) {
        printf("note: BLCO_SHARED_DATA unreadable; real tensors skipped\n");
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".tns") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", sd, e->d_name);
        blco_coo_t *x;
        blco_diag_t dg = {0};
        int err = blco_tns_read_file(path, NULL, NULL, &x, NULL, &dg);
        CHECK(err == 0, "%s: %s (%s)", path, blco_strerror(err), dg.msg);
        if (err)
            continue;
        fixture_t fx = {0};
        char *name = strdup(e->d_name);
        name[len - 4] = 0;
        fixture_from_coo(&fx, name, x, 0, 4096, BLCO_PACK_AUTO);
        printf("%s: %llu nnz, %llu segments\n", name, (unsigned long long)x->nnz,
               (unsigned long long)fx.nsegments);
        blco_stats_t st;
        uint64_t tiny = min_budget(&fx) + 8192;
        run_config(&fx, 16, BLCO_IO_AUTO, BLCO_RESIDENT_AUTO, 2, tiny, 2, &st, NULL);
        run_config(&fx, 3, BLCO_IO_PREAD, BLCO_RESIDENT_NONE, 1, tiny, 1, &st, NULL);
        run_config(&fx, 16, BLCO_IO_AUTO, BLCO_RESIDENT_AUTO, 2, 1ull << 30, 2, &st, NULL);
        fixture_free(&fx);
        free(name);
    }
    closedir(d);
}

/* Corrupt, truncated and missing files, and a budget too small: clear errors, no hang. */
/* The ring gives way to residency and to the kernel: a budget that holds the decoded
 * tensor, a two-slot ring and the kernel's share (staged factors and a private row buffer
 * per thread, the engine's kernel_bytes) keeps the tensor decoded, although the default
 * four-slot ring would not have left room for it. */
static void ring_gives_way(void)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = 3;
    uint64_t dims[3] = {2000, 1500, 1000};
    memcpy(g.dims, dims, sizeof dims);
    g.nnz = 1500000;
    g.seed = 5;
    for (int m = 0; m < 3; m++)
        g.skew[m] = 1.5;
    blco_coo_t *x;
    int err = blco_gen_coo(&g, NULL, &x);
    CHECK(err == 0, "gen: %s", blco_strerror(err));
    if (err)
        return;
    memcpy(x->dims, g.dims, sizeof g.dims);
    fixture_t fx = {0};
    fixture_from_coo(&fx, "ringway", x, 0, 65536, BLCO_PACK_AUTO);
    const int rank = 8, threads = 2;
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.threads = threads;
    o.rank = rank;
    o.slot_bytes = 1 << 20;
    blco_stats_t st;
    blco_stats_init(&st);
    o.stats = &st;
    blco_stream_t *s;
    blco_diag_t d = {0};
    if ((err = blco_stream_open(fx.path, &o, NULL, &s, &d)) != 0) {
        CHECK(0, "ringway: open: %s %s", blco_strerror(err), d.msg);
        fixture_free(&fx);
        return;
    }
    const blco_file_info_t *in = blco_stream_info(s);
    /* Slots of at least one segment; with slot_bytes given, batches of one segment. */
    const uint64_t slot = st.slot_bytes, seg_nnz = in->segment_nnz;
    CHECK(st.slots_total == 4, "ringway: %u slots without a limit", (unsigned)st.slots_total);
    uint64_t dec = in->nnz * 16 + in->nblocks * sizeof(blco_block_t);
    double rows = 0, maxrows = 0;
    for (int m = 0; m < 3; m++) {
        rows += (double)in->layout.dims[m];
        maxrows = maxrows > (double)in->layout.dims[m] ? maxrows : (double)in->layout.dims[m];
    }
    uint64_t kernel = (uint64_t)((rows + maxrows * threads) * rank * 8.0) + 4 * (2u << 20);
    blco_stream_close(s);
    uint64_t budget = dec + 2 * slot + seg_nnz * 16 + kernel + (256 << 10);
    CHECK(budget < dec + 4 * slot + seg_nnz * 16 + kernel, "ringway: the test proves nothing");
    char res[64] = "";
    blco_stats_t rs;
    run_slot_bytes = o.slot_bytes;
    run_config(&fx, rank, BLCO_IO_AUTO, BLCO_RESIDENT_AUTO, threads, budget, 2, &rs, res);
    run_slot_bytes = 0;
    CHECK(strcmp(res, "resident (decoded)") == 0 && rs.slot_bytes == slot && rs.slots_total == 2,
          "ringway: budget %llu (decoded %llu, kernel %llu): residency '%s', %u slots of %llu",
          (unsigned long long)budget, (unsigned long long)dec, (unsigned long long)kernel, res,
          (unsigned)rs.slots_total, (unsigned long long)rs.slot_bytes);
    CHECK(blco_stat_get(&rs.bytes_read) == fx.data_bytes, "ringway: read %llu bytes of %llu",
          (unsigned long long)rs.bytes_read, (unsigned long long)fx.data_bytes);
    /* Budgets between the stored and the decoded tensor: a decoded prefix, the rest stored,
     * and no disk after the first pass. */
    uint64_t lo = fx.data_bytes + 4 * slot + seg_nnz * 16 + kernel, hi = budget;
    int saw_mixed = 0;
    run_slot_bytes = o.slot_bytes;
    for (int k = 0; k <= 6; k++) {
        uint64_t b = lo + (hi - lo) * (uint64_t)k / 6;
        run_config(&fx, rank, BLCO_IO_AUTO, BLCO_RESIDENT_AUTO, threads, b, 2, &rs, res);
        if (strstr(res, "decoded, the rest stored")) {
            saw_mixed = 1;
            CHECK(blco_stat_get(&rs.bytes_read) == fx.data_bytes,
                  "ringway budget %llu (%s): read %llu bytes, data is %llu",
                  (unsigned long long)b, res, (unsigned long long)rs.bytes_read,
                  (unsigned long long)fx.data_bytes);
        }
        printf("ringway: budget %llu: %s\n", (unsigned long long)b, res);
    }
    run_slot_bytes = 0;
    CHECK(saw_mixed, "ringway: no budget from %llu to %llu kept a decoded prefix",
          (unsigned long long)lo, (unsigned long long)hi);
    fixture_free(&fx);
}

static void errors(void)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.order = 3;
    g.dims[0] = 200, g.dims[1] = 100, g.dims[2] = 50;
    g.nnz = 20000;
    g.seed = 5;
    blco_coo_t *x;
    if (blco_gen_coo(&g, NULL, &x) < 0)
        return;
    memcpy(x->dims, g.dims, sizeof g.dims);
    fixture_t fx = {0};
    fixture_from_coo(&fx, "err3", x, 0, 512, BLCO_PACK_RAW);
    const int rank = 4;
    double *f[3], *out = malloc(200 * rank * 8);
    for (int m = 0; m < 3; m++)
        f[m] = rand_matrix(g.dims[m], rank, m);
    blco_diag_t d = {0};
    blco_stream_t *s;
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.residency = BLCO_RESIDENT_NONE;

    /* Missing file. */
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/nope.blco", dir);
    int err = blco_stream_open(missing, &o, NULL, &s, &d);
    CHECK(err == -ENOENT && strstr(d.msg, "nope.blco"), "missing: %s (%s)", blco_strerror(err),
          d.msg);

    /* Budget too small. */
    blco_budget_t *b;
    blco_budget_create(&b, 8192);
    memset(&d, 0, sizeof d);
    err = blco_stream_open(fx.path, &o, b, &s, &d);
    CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "needs"), "tiny budget: %s (%s)",
          blco_strerror(err), d.msg);
    blco_budget_destroy(b);

    /* A corrupt byte in a middle segment, for each backend, with and without residency. */
    int fd = open(fx.path, O_RDWR);
    blco_file_t *bf;
    blco_file_open(fx.path, &bf, NULL);
    const blco_segment_t *mid = blco_file_segment(bf, blco_file_info(bf)->nsegments / 2);
    off_t at = (off_t)(mid->offset + mid->index_bytes / 2);
    blco_file_close(bf);
    unsigned char byte;
    CHECK(pread(fd, &byte, 1, at) == 1, "pread");
    byte ^= 0x10;
    CHECK(pwrite(fd, &byte, 1, at) == 1, "pwrite");
    int ios[3] = {BLCO_IO_AUTO, BLCO_IO_PREAD, BLCO_IO_URING};
    for (int i = 0; i < (have_uring ? 3 : 2); i++)
        for (int r = 0; r < 2; r++) {
            o.io_backend = ios[i];
            o.residency = r ? BLCO_RESIDENT_AUTO : BLCO_RESIDENT_NONE;
            err = blco_stream_open(fx.path, &o, NULL, &s, &d);
            CHECK(err == 0, "corrupt: open: %s", blco_strerror(err));
            if (err)
                continue;
            for (int rep = 0; rep < 2; rep++) { /* the error repeats; nothing hangs */
                memset(&d, 0, sizeof d);
                err = blco_stream_mttkrp(s, 0, rank, (const double *const *)f, out, &d);
                CHECK(err == -BLCO_ECHECKSUM && strstr(d.msg, "segment"),
                      "corrupt (io %d): %s (%s)", ios[i], blco_strerror(err), d.msg);
            }
            blco_stream_close(s);
        }
    byte ^= 0x10;
    CHECK(pwrite(fd, &byte, 1, at) == 1, "pwrite");

    /* Truncated after open: the read comes back short. Small slots, so the reads already in
     * flight for the next pass (read before the truncation) cover only its first batches. */
    o.io_backend = BLCO_IO_AUTO;
    o.residency = BLCO_RESIDENT_NONE;
    o.slot_bytes = 8192;
    o.nslots = 2;
    err = blco_stream_open(fx.path, &o, NULL, &s, &d);
    CHECK(err == 0, "truncate: open: %s", blco_strerror(err));
    if (err == 0) {
        err = blco_stream_mttkrp(s, 1, rank, (const double *const *)f, out, &d);
        CHECK(err == 0, "before truncation: %s (%s)", blco_strerror(err), d.msg);
        CHECK(ftruncate(fd, at) == 0, "ftruncate");
        memset(&d, 0, sizeof d);
        err = blco_stream_mttkrp(s, 1, rank, (const double *const *)f, out, &d);
        CHECK(err == -BLCO_EFORMAT && strstr(d.msg, "truncated"), "truncated: %s (%s)",
              blco_strerror(err), d.msg);
        blco_stream_close(s);
    }
    /* And truncated before open: the reader's checks refuse it. */
    memset(&d, 0, sizeof d);
    err = blco_stream_open(fx.path, &o, NULL, &s, &d);
    CHECK(err == -BLCO_EFORMAT, "truncated at open: %s (%s)", blco_strerror(err), d.msg);
    close(fd);

    /* Bad arguments. */
    fixture_t ok = {0};
    blco_coo_t *y;
    blco_gen_coo(&g, NULL, &y);
    memcpy(y->dims, g.dims, sizeof g.dims);
    fixture_from_coo(&ok, "args3", y, 0, 512, BLCO_PACK_AUTO);
    if (blco_stream_open(ok.path, &o, NULL, &s, &d) == 0) {
        CHECK(blco_stream_mttkrp(s, 3, rank, (const double *const *)f, out, &d) == -EINVAL,
              "mode 4");
        CHECK(blco_stream_mttkrp(s, 0, 0, (const double *const *)f, out, &d) == -EINVAL, "rank 0");
        blco_stream_close(s);
    }
    fixture_free(&ok);
    for (int m = 0; m < 3; m++)
        free(f[m]);
    free(out);
    fixture_free(&fx);
}

/* With io_uring refused through the environment, AUTO falls back to pread and says so. */
static void fallback(void)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.order = 3;
    g.dims[0] = 100, g.dims[1] = 90, g.dims[2] = 80;
    g.nnz = 5000;
    blco_coo_t *x;
    if (blco_gen_coo(&g, NULL, &x) < 0)
        return;
    memcpy(x->dims, g.dims, sizeof g.dims);
    fixture_t fx = {0};
    fixture_from_coo(&fx, "fallback3", x, 0, 256, BLCO_PACK_AUTO);
    setenv("BLCO_IO_REFUSE_URING", "1", 1);
    blco_stats_t st;
    run_config(&fx, 5, BLCO_IO_AUTO, BLCO_RESIDENT_NONE, 2, 0, 1, &st, NULL);
    CHECK(strstr(st.io_backend, "pread") != NULL, "refused ring: backend '%s'", st.io_backend);
    if (have_uring)
        CHECK(blco_stat_get(&st.fallbacks) >= 1, "refused ring: %llu fallbacks",
              (unsigned long long)st.fallbacks);
    /* A forced io_uring is an error then, not a silent fallback. */
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.io_backend = BLCO_IO_URING;
    blco_stream_t *s;
    blco_diag_t d = {0};
    int err = blco_stream_open(fx.path, &o, NULL, &s, &d);
    CHECK(err < 0, "forced io_uring while refused: opened");
    if (err == 0)
        blco_stream_close(s);
    unsetenv("BLCO_IO_REFUSE_URING");
    setenv("BLCO_IO_REFUSE_DIRECT", "1", 1);
    run_config(&fx, 5, BLCO_IO_AUTO, BLCO_RESIDENT_NONE, 1, 0, 1, &st, NULL);
    CHECK(blco_stat_get(&st.fallbacks) >= 1, "refused O_DIRECT: no fallback counted");
    unsetenv("BLCO_IO_REFUSE_DIRECT");
    /* NUMA placement of the slots: node 0 always exists; a node that does not is said, and
     * the stream still runs. */
    const char *want[2] = {HAVE_HWLOC ? "bound to NUMA node 0" : "built without hwloc",
                           HAVE_HWLOC ? "names no NUMA node" : "built without hwloc"};
    const char *node[2] = {"0", "4095"};
    for (int i = 0; i < 2; i++) {
        setenv("BLCO_NUMA_NODE", node[i], 1);
        blco_stream_opts_default(&o);
        err = blco_stream_open(fx.path, &o, NULL, &s, &d);
        CHECK(err == 0, "BLCO_NUMA_NODE=%s: open: %s", node[i], blco_strerror(err));
        if (err == 0) {
            CHECK(strstr(blco_stream_describe(s), want[i]) != NULL, "BLCO_NUMA_NODE=%s: '%s'",
                  node[i], blco_stream_describe(s));
            blco_stream_close(s);
        }
        run_config(&fx, 5, BLCO_IO_AUTO, BLCO_RESIDENT_NONE, 2, 0, 1, &st, NULL);
    }
    unsetenv("BLCO_NUMA_NODE");
    fixture_free(&fx);
}

/* One stream over fx with o.fibers = `use` in `budget_bytes` (0: no limit): every mode's
 * MTTKRP `passes` times against the oracle; returns the fiber letters and kernel names. */
static void fibers_run(fixture_t *fx, int use, uint64_t budget_bytes, int passes, char *state,
                       char names[][24])
{
    const blco_coo_t *x = fx->x;
    const int order = x->order, rank = 16;
    double *f[BLCO_MAX_MODES];
    for (int m = 0; m < order; m++)
        f[m] = rand_matrix(x->dims[m], rank, 3 + m);
    blco_budget_t *budget = NULL;
    if (budget_bytes)
        blco_budget_create(&budget, budget_bytes);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.fibers = use;
    o.threads = 3;
    o.rank = rank;
    blco_stream_t *s;
    blco_diag_t d = {0};
    state[0] = 0;
    int err = blco_stream_open(fx->path, &o, budget, &s, &d);
    CHECK(err == 0, "%s fibers %d: open: %s (%s)", fx->name, use, blco_strerror(err), d.msg);
    if (err == 0) {
        for (int p = 0; p < passes; p++)
            for (int m = 0; m < order; m++) {
                uint64_t n = x->dims[m] * (uint64_t)rank;
                double *out = malloc(n * 8 + 8), *ref = malloc(n * 8 + 8),
                       *bound = malloc(n * 8 + 8);
                for (uint64_t i = 0; i < n; i++)
                    out[i] = NAN;
                err = blco_stream_mttkrp(s, m, rank, (const double *const *)f, out, &d);
                blco_mttkrp_naive(x, m, rank, (const double *const *)f, ref);
                blco_mttkrp_naive(fx->xabs, m, rank, (const double *const *)f, bound);
                double w = worst_ratio(out, ref, bound, n);
                CHECK(err == 0 && w <= 64, "%s fibers %d mode %d pass %d: %s, error %.3g", fx->name,
                      use, m + 1, p, blco_strerror(err), w);
                free(out), free(ref), free(bound);
            }
        snprintf(state, BLCO_MAX_MODES + 1, "%s", blco_stream_fibers(s));
        for (int m = 0; m < order; m++)
            snprintf(names[m], 24, "%s", blco_stream_kernel_name(s, m));
        blco_stream_close(s);
    }
    CHECK(blco_budget_used(budget) == 0, "%s: %llu budget bytes left", fx->name,
          (unsigned long long)blco_budget_used(budget));
    blco_budget_destroy(budget);
    for (int m = 0; m < order; m++)
        free(f[m]);
}

/* Fiber copies in the engine: ON uses them on every mode of a tensor held in memory; AUTO
 * on the modes whose fibers hold many nonzeros, fewest fibers first, while the copies fit
 * blco_fibers_room: modes 1 and 2 (360 prefixes of 12 x 30 rows for 30000 nonzeros, about
 * 0.37 MB each) fit the room of 48 bytes a nonzero less the factors (1.18 MB at rank 16),
 * mode 3 (about 17000 prefixes of 2000 x 12 rows: worth a copy, 0.6 MB) no longer does; OFF
 * never; a budget with room for the tensor but not a copy keeps BLCO. */
#define AUTO_WANT "ffb"
static void fibers(void)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_UNIFORM;
    g.order = 3;
    g.dims[0] = 12, g.dims[1] = 30, g.dims[2] = 2000;
    g.nnz = 30000;
    blco_coo_t *x;
    if (blco_gen_coo(&g, NULL, &x) < 0)
        return;
    memcpy(x->dims, g.dims, sizeof g.dims);
    fixture_t fx = {0};
    fixture_from_coo(&fx, "fibers3", x, 0, 4096, BLCO_PACK_AUTO);
    char state[BLCO_MAX_MODES + 1], names[BLCO_MAX_MODES][24];
    fibers_run(&fx, BLCO_FIBERS_ON, 0, 2, state, names);
    CHECK(!strcmp(state, "fff") && !strcmp(names[0], "fibers") && !strcmp(names[2], "fibers"),
          "fibers on: '%s', mode 1 kernel %s", state, names[0]);
    /* A tensor this small keeps every copy worth building (the process's fixed memory
     * dominates); the room rule is checked with that floor off. */
    fibers_run(&fx, BLCO_FIBERS_AUTO, 0, 2, state, names);
    CHECK(!strcmp(state, "fff"), "fibers auto on a small tensor: '%s', want 'fff'", state);
    setenv("BLCO_FIBERS_SMALL_BYTES", "0", 1);
    fibers_run(&fx, BLCO_FIBERS_AUTO, 0, 2, state, names);
    unsetenv("BLCO_FIBERS_SMALL_BYTES");
    CHECK(!strcmp(state, AUTO_WANT), "fibers auto: '%s', want '%s'", state, AUTO_WANT);
    for (int m = 0; m < 3; m++)
        CHECK(!strcmp(names[m], "fibers") == (state[m] == 'f'), "fibers auto: mode %d '%c' ran %s",
              m + 1, state[m], names[m]);
    fibers_run(&fx, BLCO_FIBERS_OFF, 0, 1, state, names);
    CHECK(!strcmp(state, "???") && strcmp(names[0], "fibers"), "fibers off: '%s' %s", state,
          names[0]);
    /* Room to keep the tensor decoded (about 16 bytes a nonzero) and the kernel's buffers,
     * not a copy (12 bytes a nonzero) with its scratch (4 and more): every mode falls back to
     * BLCO. */
    uint64_t lo = min_budget(&fx);
    fibers_run(&fx, BLCO_FIBERS_ON, lo + 16 * g.nnz + 10 * g.nnz, 1, state, names);
    CHECK(strlen(state) == 3 && state[1] == 'b' && state[2] == 'b',
          "fibers in a small budget: '%s'", state);
    printf("fibers: on fff, auto %s, small budget %s\n", AUTO_WANT, state);
    fixture_free(&fx);
}

static void probe_uring(void)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/probe", dir);
    int fd = open(p, O_CREAT | O_WRONLY, 0600);
    char buf[4096] = {0};
    CHECK(fd >= 0 && write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "probe file");
    close(fd);
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.backend = BLCO_IO_URING;
    blco_aio_t *a;
    have_uring = blco_aio_open(p, &o, NULL, 0, &a, NULL) == 0;
    if (have_uring)
        blco_aio_close(a);
    printf("io_uring: %s\n", have_uring ? "available" : "not available, pread paths only");
    unlink(p);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/blco-stream-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    probe_uring();
    generated();
    ring_gives_way();
    shared_data();
    errors();
    fallback();
    fibers();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done();
}
