/* The streaming engine on GPUs against the naive oracle: backends cuda and hybrid, one and
 * two devices, device residency whole, prefix and none, device-decodable and zstd columns,
 * host budgets so small that slots and staging buffers recycle many times; on generated
 * tensors (orders 3..6, a 66-bit index, length-1 modes) and on ../shared/data. Also: no
 * pageable asynchronous copy, the counters, the trace (a copy overlapping another batch's
 * kernel), refusals without a GPU or with too little device memory, and cancellation.
 * Runs where a GPU answers: a real one, or the SIMT emulation (BLCO_EMU_DEVICES=2). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "blco.h"
#include "check.h"
#include "stream_oracle.h"
#if HAVE_CUDA_EMULATION
#include "gpu/emu/emu_api.h"
#endif

static char dir[4096];
static int ngpu;

typedef struct fixture {
    const char *name;
    char path[4200];
    blco_coo_t *x, *xabs;
    uint64_t data_bytes;
} fixture_t;

/* value_type f32: the values become multiples of 1/1024 below 2^10 first, so that they and
 * the sums of duplicates the packer makes are exact in f32 (the oracle sees what the file
 * holds). */
static int fixture_make_vt(fixture_t *fx, const char *name, blco_coo_t *x, uint64_t segment_nnz,
                           int codec, int value_type)
{
    if (value_type == BLCO_VALUES_F32)
        for (uint64_t i = 0; i < x->nnz; i++)
            x->val[i] = floor(fmod(fabs(x->val[i]), 1.0) * 1024 + 1) / 1024;
    memset(fx, 0, sizeof *fx);
    fx->name = name;
    fx->x = x;
    fx->xabs = abs_copy(x);
    snprintf(fx->path, sizeof fx->path, "%s/%s.blco", dir, name);
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_tensor_from_coo(x, &bo, NULL, &t, &d);
    CHECK(err == 0, "%s: build: %s %s", name, blco_strerror(err), d.msg);
    if (err)
        return err;
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.segment_nnz = segment_nnz;
    wo.codec = codec;
    wo.value_type = value_type;
    wo.force = 1;
    blco_file_info_t info;
    err = blco_tensor_write(t, fx->path, &wo, &info, &d);
    CHECK(err == 0, "%s: write: %s %s", name, blco_strerror(err), d.msg);
    blco_tensor_destroy(t);
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.stats = &st;
    blco_stream_t *s;
    if (err == 0 && blco_stream_open(fx->path, &o, NULL, &s, NULL) == 0) {
        fx->data_bytes = st.data_bytes;
        blco_stream_close(s);
    }
    return err;
}

static int fixture_make(fixture_t *fx, const char *name, blco_coo_t *x, uint64_t segment_nnz,
                        int codec)
{
    return fixture_make_vt(fx, name, x, segment_nnz, codec, BLCO_VALUES_F64);
}

static void fixture_free(fixture_t *fx)
{
    blco_coo_destroy(fx->x);
    blco_coo_destroy(fx->xabs);
}

typedef struct cfg {
    int backend, ndev, rank;
    uint64_t budget, gpu_limit;
    int passes;
    int residency; /* host residency */
    const char *trace;
    int gpu_decode; /* enum blco_gpu_decode */
    int schedule;   /* enum blco_gpu_schedule */
} cfg_t;

typedef struct outcome {
    int ok;
    blco_stats_t st;
    blco_stream_gpu_stats_t gs;
    char desc[1400];
} outcome_t;

static int open_cfg(const fixture_t *fx, const cfg_t *c, blco_budget_t *budget, blco_stats_t *st,
                    blco_stream_t **s, blco_diag_t *d)
{
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.threads = 2;
    o.rank = c->rank;
    o.residency = c->residency;
    o.stats = st;
    o.backend = c->backend;
    o.ngpus = c->ndev;
    for (int i = 0; i < c->ndev; i++)
        o.gpus[i] = i;
    o.gpu_mem_limit = c->gpu_limit;
    o.trace_path = c->trace;
    o.gpu_decode = c->gpu_decode;
    o.gpu_schedule = c->schedule;
    o.slot_bytes = 4096; /* a batch per segment or so: many batches in flight */
    return blco_stream_open(fx->path, &o, budget, s, d);
}

/* A stream of a fixture opened with a configuration, with a budget and counters of its own
 * (the stream keeps a pointer to st: an opened_t stays where it is until closed). */
typedef struct opened {
    blco_budget_t *budget;
    blco_stats_t st;
    blco_stream_t *s;
} opened_t;

static int opened_open(opened_t *o, const fixture_t *fx, const cfg_t *c, blco_diag_t *d)
{
    memset(o, 0, sizeof *o);
    blco_budget_create(&o->budget, c->budget);
    blco_stats_init(&o->st);
    return open_cfg(fx, c, o->budget, &o->st, &o->s, d);
}

static void opened_close(opened_t *o)
{
    blco_stream_close(o->s);
    blco_budget_destroy(o->budget);
}

static const char *bname(int b)
{
    return b == BLCO_BACKEND_CUDA ? "cuda" : b == BLCO_BACKEND_HYBRID ? "hybrid" : "cpu";
}

/* One MTTKRP of mode m on s against the naive oracle: the largest error relative to the
 * bound (INFINITY when the call failed; its error in *err). */
static double oracle_pass(const fixture_t *fx, blco_stream_t *s, int m, int rank,
                          double *const *f, int *err, blco_diag_t *d)
{
    const uint64_t n = fx->x->dims[m] * (uint64_t)rank;
    double *out = malloc(n * 8 + 8), *ref = malloc(n * 8 + 8), *bound = malloc(n * 8 + 8);
    for (uint64_t i = 0; i < n; i++)
        out[i] = NAN;
    *err = blco_stream_mttkrp(s, m, rank, (const double *const *)f, out, d);
    blco_mttkrp_naive(fx->x, m, rank, (const double *const *)f, ref);
    blco_mttkrp_naive(fx->xabs, m, rank, (const double *const *)f, bound);
    const double w = *err ? INFINITY : worst_ratio(out, ref, bound, n);
    free(out);
    free(ref);
    free(bound);
    return w;
}

/* Every mode `passes` times against the oracle. */
static void run(const fixture_t *fx, const cfg_t *c, outcome_t *res)
{
    memset(res, 0, sizeof *res);
    const blco_coo_t *x = fx->x;
    const int order = x->order, rank = c->rank;
    double *f[BLCO_MAX_MODES];
    for (int m = 0; m < order; m++)
        f[m] = rand_matrix(x->dims[m], rank, 3 + m);
    blco_budget_t *budget;
    blco_budget_create(&budget, c->budget);
    blco_stats_init(&res->st);
    blco_stream_t *s = NULL;
    blco_diag_t d = {0};
    int err = open_cfg(fx, c, budget, &res->st, &s, &d);
    CHECK(err == 0, "%s %s x%d budget %llu gpu-limit %llu: open: %s (%s)", fx->name,
          bname(c->backend), c->ndev, (unsigned long long)c->budget,
          (unsigned long long)c->gpu_limit, blco_strerror(err), d.msg);
    res->ok = err == 0;
    if (err == 0) {
        snprintf(res->desc, sizeof res->desc, "%s", blco_stream_describe(s));
        for (int p = 0; p < c->passes; p++)
            for (int m = 0; m < order; m++) {
                const double w = oracle_pass(fx, s, m, rank, f, &err, &d);
                CHECK(err == 0 && w <= 64,
                      "%s %s x%d budget %llu gpu-limit %llu mode %d pass %d: %s (%s); error "
                      "%.3g x 1e-12 of the bound [%s]",
                      fx->name, bname(c->backend), c->ndev, (unsigned long long)c->budget,
                      (unsigned long long)c->gpu_limit, m + 1, p, blco_strerror(err), d.msg, w,
                      blco_stream_describe(s));
                res->ok &= err == 0 && w <= 64;
            }
        blco_stream_gpu_stats(s, &res->gs);
        blco_stream_close(s);
    }
    CHECK(blco_budget_used(budget) == 0, "%s: %llu bytes of budget not returned", fx->name,
          (unsigned long long)blco_budget_used(budget));
    blco_budget_destroy(budget);
    for (int m = 0; m < order; m++)
        free(f[m]);
}

/* The smallest host budget (gpu = 0) or GPU limit (gpu = 1) with which c opens. */
static uint64_t smallest(const fixture_t *fx, cfg_t c, int gpu)
{
    uint64_t lo = 4096, hi = 1ull << 30;
    uint64_t *field = gpu ? &c.gpu_limit : &c.budget;
    while (hi - lo > 4096) {
        uint64_t mid = lo + (hi - lo) / 2;
        *field = mid;
        blco_budget_t *b;
        blco_budget_create(&b, c.budget);
        blco_stats_t st;
        blco_stats_init(&st);
        blco_stream_t *s;
        int err = open_cfg(fx, &c, b, &st, &s, NULL);
        if (err == 0) {
            hi = mid;
            blco_stream_close(s);
        } else {
            /* the host's budget and a GPU's memory are told apart */
            CHECK(err == (gpu ? -BLCO_EDEVMEM : -BLCO_EBUDGET), "%s: open (%s short): %s",
                  fx->name, gpu ? "GPU memory" : "budget", blco_strerror(err));
            lo = mid;
        }
        blco_budget_destroy(b);
    }
    return hi;
}

static uint64_t total_batches(const outcome_t *r)
{
    uint64_t n = r->gs.cpu_batches;
    for (int i = 0; i < r->gs.ndevices; i++)
        n += r->gs.dev[i].batches;
    return n;
}

static uint64_t device_decoded(const outcome_t *r)
{
    uint64_t n = 0;
    for (int i = 0; i < r->gs.ndevices; i++)
        n += r->gs.dev[i].decode_batches;
    return n;
}

/* codec: what the file was packed with; gpu_decode: where the engine is told to decode.
 * full: every backend (cuda, hybrid) x devices (1, 2) x device limit (whole, prefix, none) x
 * host budget (ample, tiny): 24 runs. Otherwise five, with the tiny host budget where a
 * batch streams: each backend, both device counts and every device limit once (the codec's
 * decode is what the other cases add; each run emulates a few hundred batch kernels). */
static int matrix_some(int b, int nd, int l, int small)
{
    static const int some[5][3] = {{BLCO_BACKEND_CUDA, 1, 0},
                                   {BLCO_BACKEND_CUDA, 1, 1},
                                   {BLCO_BACKEND_CUDA, 2, 2},
                                   {BLCO_BACKEND_HYBRID, 1, 2},
                                   {BLCO_BACKEND_HYBRID, 2, 0}};
    for (int i = 0; i < 5; i++)
        if (some[i][0] == b && some[i][1] == nd && some[i][2] == l)
            return small == (l != 0);
    return 0;
}

static void matrix(const fixture_t *fx, int rank, int full, int codec, int gpu_decode)
{
    cfg_t base = {BLCO_BACKEND_CUDA, 1, rank, 1ull << 30, 0, 2, BLCO_RESIDENT_AUTO, NULL,
                  gpu_decode, BLCO_GPU_SCHEDULE_AUTO};
    /* Host budget: the smallest that opens with GPUs, plus a little: slots recycle. */
    cfg_t c = base;
    c.gpu_limit = 0;
    uint64_t tiny = smallest(fx, c, 0) + 8192;
    /* Device limits: the least that streams (no room to keep batches), and that plus half
     * the tensor decoded (a prefix stays). */
    c = base;
    uint64_t gmin = smallest(fx, c, 1);
    /* Half the batches decoded, with their tables (about a batch per 4 KiB of data). */
    const uint64_t half = (fx->x->nnz * 16 + (fx->data_bytes / 4096 + 1) * 1280) / 2;
    const uint64_t limits[3] = {0, gmin + half, gmin};
    const char *lname[3] = {"whole", "prefix", "none"};
    for (int b = BLCO_BACKEND_CUDA; b <= BLCO_BACKEND_HYBRID; b++)
        for (int nd = 1; nd <= 2 && nd <= ngpu; nd++)
            for (int l = 0; l < 3; l++)
                for (int small = 0; small < 2; small++) {
                    if (!full && !matrix_some(b, nd, l, small))
                        continue;
                    c = base;
                    c.backend = b;
                    c.ndev = nd;
                    c.gpu_limit = limits[l];
                    c.budget = small ? tiny : 1ull << 30;
                    outcome_t r;
                    run(fx, &c, &r);
                    if (!r.ok)
                        continue;
                    const uint64_t nb = total_batches(&r);
                    uint64_t held = 0;
                    for (int i = 0; i < r.gs.ndevices; i++)
                        held += r.gs.dev[i].resident_batches;
                    CHECK(r.gs.ndevices == nd, "%s: %d devices", fx->name, r.gs.ndevices);
                    /* the same factors every pass: after the first upload none goes again */
                    CHECK(r.gs.dev[0].factor_uploads_skipped >=
                              (uint64_t)(c.passes * fx->x->order - 1) * (fx->x->order - 1) -
                                  (uint64_t)(fx->x->order - 1),
                          "%s: %llu factor uploads skipped", fx->name,
                          (unsigned long long)r.gs.dev[0].factor_uploads_skipped);
                    CHECK(r.gs.pageable_async_copies == 0,
                          "%s %s x%d %s: %llu pageable asynchronous copies", fx->name, bname(b),
                          nd, lname[l], (unsigned long long)r.gs.pageable_async_copies);
                    CHECK(blco_stat_get(&r.st.nnz_computed) ==
                              (uint64_t)c.passes * fx->x->order * r.st.nnz,
                          "%s: nonzeros computed %llu", fx->name,
                          (unsigned long long)r.st.nnz_computed);
                    if (b == BLCO_BACKEND_CUDA)
                        CHECK(r.gs.cpu_batches == 0, "%s: the CPU took %llu batches with cuda",
                              fx->name, (unsigned long long)r.gs.cpu_batches);
                    /* Where the batches were decoded: device-decodable codecs on the device
                     * (copied encoded), zstd and a forced host decode by the CPU threads. */
                    const int devcodec = codec == BLCO_PACK_RAW || codec == BLCO_PACK_NARROW ||
                                         codec == BLCO_PACK_DELTA || codec == BLCO_PACK_GPU;
                    if (gpu_decode == BLCO_GPU_DECODE_HOST)
                        CHECK(device_decoded(&r) == 0 && r.gs.host_decoded_batches > 0,
                              "%s host decode: %llu batches decoded on the devices", fx->name,
                              (unsigned long long)device_decoded(&r));
                    else if (devcodec && b == BLCO_BACKEND_CUDA)
                        CHECK(device_decoded(&r) > 0 && r.gs.host_decoded_batches == 0,
                              "%s %s x%d %s: %llu batches decoded on the devices, %llu on the "
                              "host",
                              fx->name, bname(b), nd, lname[l],
                              (unsigned long long)device_decoded(&r),
                              (unsigned long long)r.gs.host_decoded_batches);
                    else if (codec == BLCO_PACK_ZSTD)
                        CHECK(r.gs.host_decoded_batches + r.gs.cpu_batches > 0,
                              "%s zstd: no batch decoded on the host", fx->name);
                    if (devcodec && gpu_decode == BLCO_GPU_DECODE_AUTO && small)
                        /* encoded batches leave from the read slots: the ring is pinned */
                        CHECK(r.gs.ring_pinned, "%s: the ring is not page-locked", fx->name);
                    if (l == 0 && b == BLCO_BACKEND_CUDA) {
                        /* Whole: after the first pass neither the disk nor the host. */
                        CHECK(strstr(r.st.residency, "resident on the GPU"),
                              "%s x%d whole: residency '%s'", fx->name, nd, r.st.residency);
                        CHECK(blco_stat_get(&r.st.bytes_read) <= fx->data_bytes,
                              "%s x%d whole: read %llu bytes, the data is %llu", fx->name, nd,
                              (unsigned long long)r.st.bytes_read,
                              (unsigned long long)fx->data_bytes);
                    }
                    if (l == 2)
                        CHECK(held == 0 || held * 4 < nb,
                              "%s none: %llu of the batches held", fx->name,
                              (unsigned long long)held);
                    if (l == 1) /* a prefix: some batches on the device */
                        CHECK(held > 0 && !strstr(r.st.residency, "none fits"),
                              "%s prefix: residency '%s'", fx->name, r.st.residency);
                    if (l == 1 && small && strstr(r.st.residency, "partial"))
                        /* the rest from disk on every pass: the host keeps nothing */
                        CHECK(blco_stat_get(&r.st.bytes_read) > fx->data_bytes,
                              "%s prefix: read %llu of %llu", fx->name,
                              (unsigned long long)r.st.bytes_read,
                              (unsigned long long)fx->data_bytes);
                    if (full && l == 1 && nd == 1) /* two devices may hold it all */
                        CHECK(strstr(r.st.residency, "partial"), "%s prefix: residency '%s'",
                              fx->name, r.st.residency);
                    if (nd == 2 && l == 2 && b == BLCO_BACKEND_CUDA && r.gs.dev[0].batches > 4)
                        CHECK(r.gs.dev[1].batches > 0, "%s: the second device took no batch",
                              fx->name);
                    if (full)
                        printf("  %-6s x%d %-6s host %-9llu: %s; batches gpu0 %llu gpu1 %llu "
                               "cpu %llu; held %llu; decoded on the GPUs %llu, on the host "
                               "%llu\n",
                               bname(b), nd, lname[l], (unsigned long long)c.budget, r.st.residency,
                               (unsigned long long)r.gs.dev[0].batches,
                               (unsigned long long)r.gs.dev[1].batches,
                               (unsigned long long)r.gs.cpu_batches, (unsigned long long)held,
                               (unsigned long long)device_decoded(&r),
                               (unsigned long long)r.gs.host_decoded_batches);
                }
}

static blco_coo_t *gen(int kind, int order, const uint64_t *dims, uint64_t nnz, uint64_t seed)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = kind;
    g.order = order;
    memcpy(g.dims, dims, (size_t)order * 8);
    g.nnz = nnz;
    g.seed = seed;
    for (int m = 0; m < order; m++)
        g.skew[m] = kind == BLCO_GEN_POWERLAW ? 1.5 : 1;
    blco_coo_t *x = NULL;
    int err = blco_gen_coo(&g, NULL, &x);
    CHECK(err == 0, "gen: %s", blco_strerror(err));
    if (x)
        memcpy(x->dims, g.dims, sizeof g.dims);
    return x;
}

static void generated(void)
{
    struct {
        const char *name;
        int kind, order;
        uint64_t dims[6], nnz;
        int codec, rank;
        uint64_t seg;
        int f32, gpu_decode;
    } cases[] = {
        {"o3-delta", BLCO_GEN_POWERLAW, 3, {300, 200, 100}, 12000, BLCO_PACK_DELTA, 16, 256, 0, 0},
        {"o4-zstd", BLCO_GEN_UNIFORM, 4, {50, 40, 30, 20}, 6000, BLCO_PACK_ZSTD, 7, 128, 0, 0},
        {"o3-66bit-raw",
         BLCO_GEN_UNIFORM,
         3,
         {1ull << 22, 1ull << 22, 1ull << 22},
         4000,
         BLCO_PACK_RAW,
         5,
         256,
         0,
         0},
        {"o5-ones-narrow",
         BLCO_GEN_UNIFORM,
         5,
         {9, 1, 70, 5, 1},
         2000,
         BLCO_PACK_NARROW,
         33,
         64,
         0,
         0},
        {"o6-auto",
         BLCO_GEN_POWERLAW,
         6,
         {12, 9, 20, 7, 5, 11},
         5000,
         BLCO_PACK_AUTO,
         3,
         512,
         0,
         0},
        {"o3-f32-gpu", BLCO_GEN_POWERLAW, 3, {90, 1, 300}, 5000, BLCO_PACK_GPU, 8, 256, 1, 0},
        {"o4-delta-hostdecode",
         BLCO_GEN_UNIFORM,
         4,
         {30, 20, 10, 40},
         4000,
         BLCO_PACK_DELTA,
         4,
         128,
         0,
         BLCO_GPU_DECODE_HOST},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        blco_coo_t *x = gen(cases[i].kind, cases[i].order, cases[i].dims, cases[i].nnz, 40 + i);
        if (!x)
            continue;
        fixture_t fx;
        if (fixture_make_vt(&fx, cases[i].name, x, cases[i].seg, cases[i].codec,
                            cases[i].f32 ? BLCO_VALUES_F32 : BLCO_VALUES_F64) == 0) {
            printf("%s: %llu nnz, %llu bytes of data\n", fx.name, (unsigned long long)x->nnz,
                   (unsigned long long)fx.data_bytes);
            matrix(&fx, cases[i].rank, i == 0, cases[i].codec, cases[i].gpu_decode);
        }
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
        char *name = strdup(e->d_name);
        name[len - 4] = 0;
        fixture_t fx;
        if (fixture_make(&fx, name, x, 4096, BLCO_PACK_AUTO) == 0) {
            printf("%s: %llu nnz\n", name, (unsigned long long)x->nnz);
            cfg_t c = {BLCO_BACKEND_CUDA,
                       ngpu >= 2 ? 2 : 1,
                       8,
                       1ull << 30,
                       0,
                       2,
                       BLCO_RESIDENT_AUTO,
                       NULL,
                       0,
                       BLCO_GPU_SCHEDULE_AUTO};
            outcome_t r;
            run(&fx, &c, &r);
            c.backend = BLCO_BACKEND_HYBRID;
            c.ndev = 1;
            c.residency = BLCO_RESIDENT_NONE;
            run(&fx, &c, &r);
        }
        fixture_free(&fx);
        free(name);
    }
    closedir(d);
}

/* The trace parses (one event per line) and shows a copy of one batch overlapping the
 * kernel of another on the same device; each pass's host phases lie within it, in order. */
static void trace(void)
{
    uint64_t dims[3] = {400, 300, 200};
    blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 40000, 9);
    fixture_t fx;
    if (!x || fixture_make(&fx, "trace", x, 256, BLCO_PACK_AUTO) < 0)
        return;
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/trace.json", dir);
    cfg_t c = {BLCO_BACKEND_CUDA, 1, 16, 1ull << 30, 0, 1, BLCO_RESIDENT_NONE, tp, 0,
               BLCO_GPU_SCHEDULE_AUTO};
    /* No device residency: every pass streams, so copies and kernels interleave. */
    c.gpu_limit = smallest(&fx, c, 1);
    outcome_t r;
    run(&fx, &c, &r);
    FILE *f = fopen(tp, "r");
    CHECK(f != NULL, "trace file written");
    if (!f) {
        fixture_free(&fx);
        return;
    }
    char line[1024];
    int head = 0, tail = 0, ncopy = 0, nkernel = 0, ndecode = 0, bad = 0;
    double phase_start = 0, phase_end = 0; /* of the pass's first phase, of its latest */
    int nphase = 0, npass = 0, phase_bad = 0;
    struct ev {
        int kernel; /* 0 copy, 1 kernel, 2 decode */
        unsigned long long batch;
        int pid;
        double ts, dur;
    } *ev = malloc(100000 * sizeof *ev);
    int nev = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "{\"displayTimeUnit\"", 18)) {
            head = 1;
            continue;
        }
        if (!strncmp(line, "]}", 2)) {
            tail = 1;
            continue;
        }
        char name[64], cat[32];
        unsigned long long b;
        int pid, tid;
        double ts, dur;
        const char *p = line[0] == ',' ? line + 1 : line;
        if (sscanf(p, "{\"name\":\"%63[^\"]\",\"cat\":\"%31[^\"]\",\"ph\":\"X\",\"pid\":%d,"
                      "\"tid\":%d,\"ts\":%lf,\"dur\":%lf",
                   name, cat, &pid, &tid, &ts, &dur) != 6 ||
            dur < 0) {
            bad++;
            continue;
        }
        if (!strcmp(cat, "pass")) { /* the host's phases of a pass, then the pass */
            if (!strcmp(name, "pass")) {
                npass++;
                phase_bad +=
                    nphase != 5 || fabs(phase_start - ts) > 1 || fabs(phase_end - (ts + dur)) > 1;
                nphase = 0;
            } else {
                /* in turn: each starts where the last ended (to the printed microsecond) */
                phase_bad += nphase && fabs(ts - phase_end) > 1;
                if (!nphase)
                    phase_start = ts;
                phase_end = ts + dur;
                nphase++;
            }
            continue;
        }
        b = strtoull(strrchr(name, ' ') + 1, NULL, 10);
        ncopy += !strcmp(cat, "copy");
        nkernel += !strcmp(cat, "kernel");
        ndecode += strstr(cat, "decode") != NULL;
        if (nev < 100000 && pid > 0)
            ev[nev++] = (struct ev){!strcmp(cat, "kernel") ? 1
                                    : !strcmp(cat, "copy") ? 0
                                                           : 2,
                                    b, pid, ts, dur};
    }
    fclose(f);
    int overlap = 0;
    for (int i = 0; i < nev && !overlap; i++)
        for (int j = 0; j < nev && !overlap; j++)
            if (ev[i].kernel == 0 && ev[j].kernel == 1 && ev[i].batch != ev[j].batch &&
                ev[i].pid == ev[j].pid && ev[i].ts < ev[j].ts + ev[j].dur &&
                ev[j].ts < ev[i].ts + ev[i].dur)
                overlap = 1;
    free(ev);
    CHECK(head && tail && bad == 0, "trace: header %d, end %d, %d unparsed lines", head, tail,
          bad);
    CHECK(ncopy > 4 && nkernel > 4 && ndecode > 4, "trace: %d copies, %d kernels, %d decodes",
          ncopy, nkernel, ndecode);
    CHECK(overlap, "trace: a copy overlaps the kernel of another batch");
    CHECK(npass > 0 && phase_bad == 0,
          "trace: %d passes with their host phases (5 each, in turn, within the pass); %d wrong",
          npass, phase_bad);

    CHECK(r.gs.dev[0].overlap > 0 && r.gs.dev[0].kernel_seconds > 0 &&
              r.gs.dev[0].h2d_bytes >= fx.x->nnz * 8, /* encoded: no padding is copied */
          "counters: overlap %.3f, kernel %.4f s, %llu bytes copied", r.gs.dev[0].overlap,
          r.gs.dev[0].kernel_seconds, (unsigned long long)r.gs.dev[0].h2d_bytes);
    printf("trace: %d copies, %d kernels, %d decodes; overlap %.0f%% of kernel time\n", ncopy,
           nkernel, ndecode, 100 * r.gs.dev[0].overlap);
    fixture_free(&fx);
}

/* Overlap on the emulation's copy engines (issue 31): a streamed pass with nothing resident on
 * the device, whose copies take bytes / BLCO_EMU_COPY_GBS on the host-to-device engine beside
 * the kernels. The pipeline promises that the copy of batch k+1 is issued before the kernels
 * of batch k complete, so in steady state (after the first kernel of a pass) at least 80% of
 * the copy time runs under a kernel. On a real GPU the same promise is checked by the trace
 * test of blco-mttkrp (tests/test_blco_mttkrp_gpu.sh) and measured by perf/bench_gpu. */
static void overlap_timeline(void)
{
#if HAVE_CUDA_EMULATION
    if (!(blco_emu_copy_gbs() > 0)) {
        printf("overlap: copies take no modeled time (BLCO_EMU_COPY_GBS=0): skipped\n");
        return;
    }
    uint64_t dims[3] = {3000, 2000, 1000};
    blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 40000, 17);
    fixture_t fx;
    if (!x || fixture_make(&fx, "overlap", x, 1024, BLCO_PACK_GPU) < 0)
        return;
    cfg_t c = {BLCO_BACKEND_CUDA, 1, 4, 1ull << 30, 0, 1, BLCO_RESIDENT_NONE, NULL, 0,
               BLCO_GPU_SCHEDULE_AUTO};
    c.gpu_limit = smallest(&fx, c, 1) * 2;
    blco_emu_trace_start();
    outcome_t r;
    run(&fx, &c, &r);
    blco_emu_trace_stop();
    const size_t max = 1u << 20;
    blco_emu_op_t *ops = malloc(max * sizeof *ops);
    size_t n = ops ? blco_emu_trace_read(ops, max) : 0;
    if (n > max)
        n = max;
    /* the kernels' busy intervals on device 0, merged */
    uint64_t (*kb)[2] = malloc((n + 1) * sizeof *kb);
    size_t nk = 0;
    uint64_t first_kernel = UINT64_MAX;
    for (size_t i = 0; ops && kb && i < n; i++)
        if (ops[i].kind == BLCO_EMU_OP_KERNEL && ops[i].device == 0) {
            kb[nk][0] = ops[i].start_ns;
            kb[nk][1] = ops[i].end_ns;
            nk++;
            if (ops[i].start_ns < first_kernel)
                first_kernel = ops[i].start_ns;
        }
    for (size_t i = 1; i < nk; i++) /* insertion sort by start: few hundred */
        for (size_t j = i; j > 0 && kb[j][0] < kb[j - 1][0]; j--) {
            uint64_t t0 = kb[j][0], t1 = kb[j][1];
            kb[j][0] = kb[j - 1][0];
            kb[j][1] = kb[j - 1][1];
            kb[j - 1][0] = t0;
            kb[j - 1][1] = t1;
        }
    size_t nm = 0;
    for (size_t i = 0; i < nk; i++) {
        if (nm && kb[i][0] <= kb[nm - 1][1]) {
            if (kb[i][1] > kb[nm - 1][1])
                kb[nm - 1][1] = kb[i][1];
        } else {
            kb[nm][0] = kb[i][0];
            kb[nm][1] = kb[i][1];
            nm++;
        }
    }
    /* the tensor's copies (the batches, each over 4 KiB) after the first kernel */
    double copy_ns = 0, under_ns = 0;
    int ncopy = 0, ahead = 0;
    for (size_t i = 0; ops && kb && i < n; i++) {
        const blco_emu_op_t *o = &ops[i];
        if (o->kind != BLCO_EMU_OP_H2D || o->device != 0 || o->bytes <= 4096 ||
            o->start_ns < first_kernel)
            continue;
        ncopy++;
        copy_ns += (double)(o->end_ns - o->start_ns);
        for (size_t k = 0; k < nm; k++) {
            const uint64_t a = o->start_ns > kb[k][0] ? o->start_ns : kb[k][0];
            const uint64_t b = o->end_ns < kb[k][1] ? o->end_ns : kb[k][1];
            if (b > a)
                under_ns += (double)(b - a);
        }
        /* ahead: when the host queued this copy, a kernel it had queued earlier (an earlier
         * batch's) had not finished: the copy did not wait for the kernels before it */
        int queued_ahead = 0;
        for (size_t k = 0; k < n && !queued_ahead; k++)
            queued_ahead = ops[k].kind == BLCO_EMU_OP_KERNEL && ops[k].device == 0 &&
                           ops[k].issued_ns <= o->issued_ns && ops[k].end_ns > o->issued_ns;
        ahead += queued_ahead;
    }
    const double share = copy_ns > 0 ? under_ns / copy_ns : 0;
    CHECK(r.ok && ncopy >= 16, "overlap: %d batch copies after the first kernel (want >= 16)",
          ncopy);
    CHECK(ahead * 10 >= ncopy * 8,
          "overlap: %d of %d batch copies queued before an earlier kernel ended (want >= 80%%)",
          ahead,
          ncopy);
    CHECK(share >= 0.8, "overlap: %.0f%% of the copy time under a kernel (want >= 80%%)",
          100 * share);
    CHECK(r.gs.dev[0].decode_batches == r.gs.dev[0].batches && r.gs.cpu_batches == 0 &&
              r.gs.host_decoded_batches == 0 && r.st.gpu_decode_batches == r.gs.dev[0].batches,
          "overlap: %llu of %llu batches decoded on the device, %llu by the CPU",
          (unsigned long long)r.gs.dev[0].decode_batches,
          (unsigned long long)r.gs.dev[0].batches,
          (unsigned long long)r.gs.host_decoded_batches);
    printf("overlap (emulated copy engine at %.2f GB/s): %d batch copies, %d queued before an "
           "earlier kernel ended, %.0f%% of copy time under a kernel\n",
           blco_emu_copy_gbs(), ncopy, ahead, 100 * share);
    free(kb);
    free(ops);
    fixture_free(&fx);
#else
    printf("overlap: the copy-engine timeline is the emulation's (a GPU's is measured by "
           "perf/bench_gpu and checked by blco-mttkrp's trace test)\n");
#endif
}

/* The hybrid split (stream/engine_gpu.h): the rule, then a run whose passes follow it. */
double gpu_hybrid_split(double n, double n_stream, double h_g, double d_g, double h_c);
double gpu_hybrid_share(double h_g, double d_g, double h_c);

static void hybrid_rule(void)
{
    /* The host limits the GPU already: a batch on the CPU costs it more. */
    CHECK(gpu_hybrid_share(2e-9, 1e-9, 10e-9) == 0, "host-bound: the CPU takes nothing");
    /* Nothing to feed (the tensor on the device): the CPU's share of the two rates. */
    CHECK(fabs(gpu_hybrid_share(0, 1e-9, 3e-9) - 0.25) < 1e-12, "rates 3:1: a quarter");
    CHECK(fabs(gpu_hybrid_share(0, 1e-9, 1e-9) - 0.5) < 1e-12, "equal rates: half");
    /* Feeding costs 1, the devices 4, the CPU 5 a nonzero: (4 - 1) / (5 - 1 + 4). */
    CHECK(fabs(gpu_hybrid_share(1, 4, 5) - 3.0 / 8) < 1e-12, "device-bound: 3/8");
    /* A slow GPU (busy 100, the CPU 1): the CPU takes almost all, never more than all. */
    const double f = gpu_hybrid_share(0, 100, 1);
    CHECK(f > 0.98 && f <= 1, "a slow GPU: %g", f);
    /* Held batches cost the host nothing but only streamed ones can go to the CPU. */
    CHECK(gpu_hybrid_split(100, 10, 0, 1, 1) == 10, "capped at the streamed nonzeros");
    CHECK(fabs(gpu_hybrid_split(100, 60, 0, 1, 3) - 25) < 1e-9, "100 nonzeros, 60 streamed");
    CHECK(gpu_hybrid_share(0, 0, 1) == 0, "an idle GPU takes all: %g", gpu_hybrid_share(0, 0, 1));

    /* A hybrid run with nothing resident on the device: the first pass gives the CPU a
     * probe, each later one the share the rule gives for the costs measured before it. */
    uint64_t dims[3] = {300, 200, 100};
    blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 20000, 13);
    fixture_t fx;
    if (!x || fixture_make(&fx, "hybrid", x, 256, BLCO_PACK_AUTO) < 0)
        return;
    cfg_t c = {BLCO_BACKEND_HYBRID, 1, 8, 1ull << 30, 0, 1, BLCO_RESIDENT_NONE, NULL, 0,
               BLCO_GPU_SCHEDULE_AUTO};
    c.gpu_limit = smallest(&fx, c, 1);
    opened_t h;
    blco_diag_t d = {0};
    int err = opened_open(&h, &fx, &c, &d);
    blco_stream_t *s = h.s;
    CHECK(err == 0, "hybrid: open: %s", d.msg);
    double *f3[3], *out = malloc(dims[0] * 8 * 8);
    for (int m = 0; m < 3; m++)
        f3[m] = rand_matrix(dims[m], 8, 20 + m);
    blco_stream_gpu_stats_t prev = {0}, gs;
    uint64_t cpu_before = 0;
    for (int p = 0; err == 0 && p < 5; p++) {
        err = blco_stream_mttkrp(s, 0, 8, (const double *const *)f3, out, &d);
        CHECK(err == 0, "hybrid pass %d: %s", p, d.msg);
        blco_stream_gpu_stats(s, &gs);
        const uint64_t took = gs.cpu_batches - cpu_before;
        cpu_before = gs.cpu_batches;
        if (p == 0) {
            CHECK(took >= 1 && gs.cost_host_cpu > 0 && gs.cost_device > 0,
                  "the first pass gives the CPU a probe: %llu batches, costs %g %g %g",
                  (unsigned long long)took, gs.cost_host_gpu, gs.cost_device, gs.cost_host_cpu);
        } else {
            const double want =
                gpu_hybrid_share(prev.cost_host_gpu, prev.cost_device, prev.cost_host_cpu);
            CHECK(fabs(gs.cpu_share - want) <= 1024.0 / (double)fx.x->nnz + 1e-12,
                  "pass %d: the CPU planned %.4f of the nonzeros, the rule says %.4f (costs "
                  "%g %g %g)",
                  p, gs.cpu_share, want, prev.cost_host_gpu, prev.cost_device,
                  prev.cost_host_cpu);
            CHECK((took > 0) == (gs.cpu_share > 0), "pass %d: %llu CPU batches, share %.4f", p,
                  (unsigned long long)took, gs.cpu_share);
        }
        prev = gs;
    }
    printf("hybrid: CPU share %.3f after 5 passes (costs per nonzero: feed %.3g s, device %.3g "
           "s, CPU %.3g s)\n",
           gs.cpu_share, gs.cost_host_gpu, gs.cost_device, gs.cost_host_cpu);
    opened_close(&h);
    for (int m = 0; m < 3; m++)
        free(f3[m]);
    free(out);
    fixture_free(&fx);
}

/* The register kernel's chunk schedule (blco_stream_opts_t.gpu_schedule): with auto, each
 * pass runs the schedule the documented rule gives for the costs measured before it (the
 * stream's first pass contiguous and no sample; then per mode contiguous, interleaved, and
 * the one with the lower cost), a mode of the hierarchical kernel none; forced, that one
 * alone. Every pass against the oracle. */
static void schedule_choice(void)
{
    uint64_t dims[3] = {300, 200, 100}; /* 100 rows < the 132 SMs: hierarchical */
    blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 20000, 17);
    fixture_t fx;
    if (!x || fixture_make(&fx, "schedule", x, 256, BLCO_PACK_AUTO) < 0)
        return;
    const int rank = 8;
    double *f3[3];
    for (int m = 0; m < 3; m++)
        f3[m] = rand_matrix(dims[m], rank, 40 + m);
    const int runs[3][2] = {{1, BLCO_GPU_SCHEDULE_AUTO},
                            {2, BLCO_GPU_SCHEDULE_AUTO},
                            {1, BLCO_GPU_SCHEDULE_INTERLEAVED}};
    for (int r = 0; r < 3; r++) {
        const int ndev = runs[r][0], sched = runs[r][1];
        if (ndev > ngpu)
            continue;
        cfg_t c = {BLCO_BACKEND_CUDA, ndev, rank, 1ull << 30, 0, 4, BLCO_RESIDENT_AUTO, NULL, 0,
                   sched};
        opened_t h;
        blco_diag_t d = {0};
        int err = opened_open(&h, &fx, &c, &d);
        blco_stream_t *s = h.s;
        CHECK(err == 0, "schedule: open: %s", d.msg);
        blco_stream_gpu_stats_t gs0, gs1;
        for (int p = 0; err == 0 && p < c.passes; p++)
            for (int m = 0; err == 0 && m < 3; m++) {
                blco_stream_gpu_stats(s, &gs0);
                const double w = oracle_pass(&fx, s, m, rank, f3, &err, &d);
                CHECK(err == 0 && w <= 64, "schedule %s x%d mode %d pass %d: %s; error %.3g",
                      blco_gpu_schedule_name(sched), ndev, m + 1, p, d.msg, w);
                blco_stream_gpu_stats(s, &gs1);
                const uint64_t *a = gs0.schedule_passes[m], *b = gs1.schedule_passes[m];
                const double *c0 = gs0.schedule_cost[m], *c1 = gs1.schedule_cost[m];
                const int ran = b[0] > a[0] ? BLCO_GPU_SCHEDULE_CONTIGUOUS
                                : b[1] > a[1] ? BLCO_GPU_SCHEDULE_INTERLEAVED
                                              : 0;
                int want = 0;
                if (m == 2)
                    want = 0; /* the hierarchical kernel */
                else if (sched != BLCO_GPU_SCHEDULE_AUTO)
                    want = sched;
                else if (!(c0[0] > 0))
                    want = BLCO_GPU_SCHEDULE_CONTIGUOUS;
                else if (!(c0[1] > 0))
                    want = BLCO_GPU_SCHEDULE_INTERLEAVED;
                else
                    want = c0[1] < c0[0] ? BLCO_GPU_SCHEDULE_INTERLEAVED
                                         : BLCO_GPU_SCHEDULE_CONTIGUOUS;
                CHECK(ran == want && b[0] + b[1] == a[0] + a[1] + (want != 0),
                      "schedule %s x%d mode %d pass %d: ran %s, the rule says %s (costs before "
                      "%g/%g)",
                      blco_gpu_schedule_name(sched), ndev, m + 1, p,
                      ran ? blco_gpu_schedule_name(ran) : "none",
                      want ? blco_gpu_schedule_name(want) : "none", c0[0], c0[1]);
                /* a sample with auto, except on the stream's first pass; none forced */
                const int k = ran == BLCO_GPU_SCHEDULE_INTERLEAVED;
                const int sampled = sched == BLCO_GPU_SCHEDULE_AUTO && ran && (p || m);
                CHECK(sampled ? c1[k] > 0 && c1[!k] == c0[!k] : c1[0] == c0[0] && c1[1] == c0[1],
                      "schedule %s x%d mode %d pass %d: costs %g/%g before, %g/%g after",
                      blco_gpu_schedule_name(sched), ndev, m + 1, p, c0[0], c0[1], c1[0], c1[1]);
            }
        if (err == 0) {
            const uint64_t *p0 = gs1.schedule_passes[0], *p1 = gs1.schedule_passes[1];
            if (sched == BLCO_GPU_SCHEDULE_AUTO)
                CHECK(p0[0] >= 2 && p0[1] >= 1 && p1[0] >= 1 && p1[1] >= 1 &&
                          gs1.schedule_cost[0][0] > 0 && gs1.schedule_cost[0][1] > 0 &&
                          gs1.schedule_cost[1][0] > 0 && gs1.schedule_cost[1][1] > 0,
                      "schedule auto x%d: passes %llu/%llu and %llu/%llu", ndev,
                      (unsigned long long)p0[0], (unsigned long long)p0[1],
                      (unsigned long long)p1[0], (unsigned long long)p1[1]);
            else
                CHECK(p0[1] == 4 && p1[1] == 4 && !p0[0] && !p1[0],
                      "schedule %s: passes %llu/%llu and %llu/%llu",
                      blco_gpu_schedule_name(sched), (unsigned long long)p0[0],
                      (unsigned long long)p0[1], (unsigned long long)p1[0],
                      (unsigned long long)p1[1]);
            printf("schedule %s on %d device%s: passes contiguous/interleaved %llu/%llu and "
                   "%llu/%llu (modes 1, 2), mode 3 hierarchical\n",
                   blco_gpu_schedule_name(sched), ndev, ndev > 1 ? "s" : "",
                   (unsigned long long)p0[0], (unsigned long long)p0[1],
                   (unsigned long long)p1[0], (unsigned long long)p1[1]);
        }
        opened_close(&h);
    }
    /* An unknown schedule is refused at open. */
    {
        blco_stream_opts_t o;
        blco_stream_opts_default(&o);
        o.backend = BLCO_BACKEND_CUDA;
        o.gpu_schedule = 7;
        blco_stream_t *s = NULL;
        blco_diag_t d = {0};
        const int err = blco_stream_open(fx.path, &o, NULL, &s, &d);
        CHECK(err == -EINVAL && !s && strstr(d.msg, "schedule"), "schedule 7: %s (%s)",
              blco_strerror(err), d.msg);
        blco_stream_close(s);
    }
    CHECK(blco_gpu_schedule_parse("interleaved") == BLCO_GPU_SCHEDULE_INTERLEAVED &&
              blco_gpu_schedule_parse("auto") == BLCO_GPU_SCHEDULE_AUTO &&
              blco_gpu_schedule_parse("contiguous") == BLCO_GPU_SCHEDULE_CONTIGUOUS &&
              blco_gpu_schedule_parse("Interleaved") == -1 && blco_gpu_schedule_parse(NULL) == -1,
          "blco_gpu_schedule_parse");
    for (int m = 0; m < 3; m++)
        free(f3[m]);
    fixture_free(&fx);
}

/* Warnings from the library, collected (the default log would print them). */
static char warned[4096];
static int nwarned;

static void collect_warnings(void *user, int level, const char *msg)
{
    (void)user;
    if (level != BLCO_LOG_WARN)
        return;
    nwarned++;
    snprintf(warned, sizeof warned, "%s", msg);
}

/* One pass over every mode with nothing resident on the device, the warnings collected. */
/* The library's warnings elsewhere: each text printed once (a zstd-coded file's note comes
 * with every open, hundreds of times, and would bury a failed check in the log). */
static void warn_once(void *user, int level, const char *msg)
{
    (void)user;
    static uint64_t seen[256];
    static int nseen;
    uint64_t h = 1469598103934665603ull;
    for (const char *p = msg; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (int i = 0; i < nseen; i++)
        if (seen[i] == h)
            return;
    if (nseen < 256)
        seen[nseen++] = h;
    fprintf(stderr, "blco: %s: %s (said once)\n", level == BLCO_LOG_WARN ? "warning" : "error",
            msg);
}

static void run_collect(const fixture_t *fx, cfg_t c, outcome_t *r)
{
    blco_log_set(collect_warnings, NULL, BLCO_LOG_WARN);
    c.gpu_limit = smallest(fx, c, 1);
    nwarned = 0;
    warned[0] = 0;
    run(fx, &c, r);
    blco_log_set(warn_once, NULL, BLCO_LOG_WARN);
}

/* Issue 31: the default codecs on the GPUs. Random values, counts (the integer codec) and
 * values of 3 decimal places (the decimal codec):
 * every batch goes encoded and is decoded on the device, none by the CPU threads, and
 * nothing is said. A zstd-coded file (--codec zstd, or the default's values of few distinct
 * fractions that are no short decimals) says once that the CPU threads decode its batches and what --codec gpu would
 * store; a file that mixes both gives the share, which is what the counters then show. */
static void default_codecs(void)
{
    uint64_t dims[3] = {512, 256, 128}; /* mode 1's top bit is the ALTO index's */
    cfg_t c = {BLCO_BACKEND_CUDA, 1, 8, 1ull << 30, 0, 1, BLCO_RESIDENT_NONE, NULL, 0,
               BLCO_GPU_SCHEDULE_AUTO};
    for (int kind = 0; kind < 6; kind++) {
        static const char *const names[] = {"default-random", "zstd-random", "default-counts",
                                            "default-mixed", "zstd-hostdecode", "default-decimal"};
        blco_coo_t *x = gen(BLCO_GEN_POWERLAW, 3, dims, 30000, 60 + (uint64_t)kind);
        if (!x)
            return;
        for (uint64_t k = 0; k < x->nnz; k++)
            if (kind == 2)
                x->val[k] = (double)(1 + k % 5); /* counts: the integer codec */
            else if (kind == 5) { /* random values of 3 places at distinct coordinates (a
                                     * sum of duplicates is no short decimal): decimal */
                x->val[k] = fmax(nearbyint(x->val[k] * 1000), 1) / 1000;
                x->ind[0][k] = (k * 7) % 512; /* k -> (7k mod 512, k / 512) is one-to-one */
                x->ind[1][k] = (k / 512) % 256;
                x->ind[2][k] = k / (512 * 256);
            }
            else if (kind == 3 && x->ind[0][k] < 256) /* first half in ALTO order: zstd pays */
                x->val[k] = 1.0 / 7 + (double)(k % 5); /* (no decimals of 16 places or less) */
        const int codec = kind == 1 || kind == 4 ? BLCO_PACK_ZSTD : BLCO_PACK_AUTO;
        fixture_t fx;
        if (fixture_make(&fx, names[kind], x, 512, codec) < 0)
            continue;
        c.gpu_decode = kind == 4 ? BLCO_GPU_DECODE_HOST : BLCO_GPU_DECODE_AUTO;
        outcome_t r;
        run_collect(&fx, c, &r);
        const uint64_t nb = total_batches(&r), dev = device_decoded(&r),
                       host = r.gs.host_decoded_batches;
        printf("%s: %llu batches over 3 modes, %llu decoded on the GPU, %llu by the CPU; said: "
               "%s\n",
               fx.name, (unsigned long long)nb, (unsigned long long)dev, (unsigned long long)host,
               nwarned ? warned : "(nothing)");
        CHECK(r.ok && nb > 9 && r.gs.cpu_batches == 0, "%s: %llu batches", fx.name,
              (unsigned long long)nb);
        unsigned long long k = 0, n = 0;
        const char *at = strstr(warned, fx.path);
        const int parsed = nwarned == 1 && at &&
                           sscanf(at + strlen(fx.path), ": %llu of %llu batches", &k, &n) == 2;
        switch (kind) {
        case 0:
        case 2:
        case 5:
            CHECK(dev == nb && host == 0 && nwarned == 0,
                  "%s: %llu of %llu batches decoded on the GPU, %llu by the CPU; %d warnings (%s)",
                  fx.name, (unsigned long long)dev, (unsigned long long)nb,
                  (unsigned long long)host, nwarned, warned);
            if (kind == 5) { /* every segment's values decimal */
                blco_file_t *f;
                blco_diag_t d = {0};
                uint64_t dec = 0, ns = 0;
                if (blco_file_open(fx.path, &f, &d) == 0) {
                    ns = blco_file_info(f)->nsegments;
                    for (uint64_t i = 0; i < ns; i++)
                        dec += (blco_file_segment(f, i)->value_codec & 0x7f) == 5;
                    blco_file_close(f);
                }
                CHECK(ns > 0 && dec == ns, "%s: %llu of %llu segments hold decimal values",
                      fx.name, (unsigned long long)dec, (unsigned long long)ns);
            }
            break;
        case 1:
            CHECK(dev == 0 && host == nb, "%s: %llu batches decoded on the GPU, %llu by the CPU",
                  fx.name, (unsigned long long)dev, (unsigned long long)host);
            CHECK(parsed && k == n && 3 * n == nb && strstr(warned, "(100%)") &&
                      strstr(warned, "CPU threads decode them") &&
                      strstr(warned, "blco-pack --codec gpu"),
                  "%s: said once that the CPU decodes: %d warnings (%s)", fx.name, nwarned, warned);
            break;
        case 3:
            CHECK(parsed && k > 0 && k < n && host == 3 * k && dev == 3 * (n - k) && nb == 3 * n,
                  "%s: '%s' (%d warnings); %llu batches, %llu decoded on the GPU, %llu by the "
                  "CPU",
                  fx.name, warned, nwarned, (unsigned long long)nb, (unsigned long long)dev,
                  (unsigned long long)host);
            break;
        default: /* decoding on the host was asked for: nothing to say */
            CHECK(dev == 0 && host == nb && nwarned == 0, "%s: %d warnings (%s)", fx.name,
                  nwarned, warned);
            break;
        }
        unlink(fx.path);
        fixture_free(&fx);
    }
}

static void errors(void)
{
    uint64_t dims[3] = {40, 30, 20};
    blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 3000, 5);
    fixture_t fx;
    if (!x || fixture_make(&fx, "errors", x, 128, BLCO_PACK_AUTO) < 0)
        return;
    blco_budget_t *budget;
    blco_budget_create(&budget, 1ull << 30);
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_t *s = NULL;
    blco_diag_t d = {0};
    cfg_t c = {BLCO_BACKEND_CUDA, 1, 16, 1ull << 30, 1000, 1, BLCO_RESIDENT_AUTO, NULL, 0,
               BLCO_GPU_SCHEDULE_AUTO};
    int err = open_cfg(&fx, &c, budget, &st, &s, &d);
    CHECK(err == -BLCO_EDEVMEM && !s && strstr(d.msg, "device memory"),
          "a 1000-byte device limit: %s (%s)", blco_strerror(err), d.msg);
    printf("too little device memory: %s\n", d.msg);
    memset(&d, 0, sizeof d);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.backend = BLCO_BACKEND_CUDA;
    o.ngpus = 1;
    o.gpus[0] = 57;
    err = blco_stream_open(fx.path, &o, budget, &s, &d);
    CHECK(err == -BLCO_ENODEV && !s && d.msg[0], "GPU 57: %s (%s)", blco_strerror(err), d.msg);
    /* Cancellation between batches. */
    o.gpus[0] = 0;
    o.slot_bytes = 4096;
    memset(&d, 0, sizeof d);
    err = blco_stream_open(fx.path, &o, budget, &s, &d);
    CHECK(err == 0, "open: %s", d.msg);
    if (err == 0) {
        double *f[3], *out = malloc(40 * 16 * 8);
        for (int m = 0; m < 3; m++)
            f[m] = rand_matrix(dims[m], 16, m);
        blco_stream_cancel(s);
        err = blco_stream_mttkrp(s, 0, 16, (const double *const *)f, out, &d);
        CHECK(err == -BLCO_ECANCELED, "cancelled: %s", blco_strerror(err));
        for (int m = 0; m < 3; m++)
            free(f[m]);
        free(out);
        blco_stream_close(s);
    }
    blco_budget_destroy(budget);
    fixture_free(&fx);
}

/* A factor of more than one checksum piece (8 MiB: 40000 rows at rank 32) changed in one
 * row of its first or of its last piece between passes: the next pass sends it again and
 * agrees with the oracle; unchanged, it is not sent again. */
static void factor_changes(void)
{
    const uint64_t dims[3] = {40000, 30, 20};
    const int rank = 32;
    blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 3000, 77);
    fixture_t fx;
    if (!x || fixture_make(&fx, "factors", x, 512, BLCO_PACK_AUTO) != 0) {
        CHECK(0, "the factor-change fixture");
        if (x)
            fixture_free(&fx);
        return;
    }
    /* rows of mode 1 with nonzeros in the first and in the last 8 MiB piece */
    uint64_t lo = UINT64_MAX, hi = UINT64_MAX;
    for (uint64_t k = 0; k < x->nnz; k++) {
        const uint64_t r = x->ind[0][k];
        if (r * rank * 8 < (8ull << 20) && lo == UINT64_MAX)
            lo = r;
        if (r * rank * 8 >= (8ull << 20) && hi == UINT64_MAX)
            hi = r;
    }
    CHECK(lo != UINT64_MAX && hi != UINT64_MAX, "rows in both pieces");
    for (int b = BLCO_BACKEND_CUDA; b <= BLCO_BACKEND_HYBRID && hi != UINT64_MAX; b++) {
        cfg_t c = {b, 1, rank, 1ull << 30, 0, 1, BLCO_RESIDENT_AUTO, NULL, 0,
                   BLCO_GPU_SCHEDULE_AUTO};
        blco_stats_t st;
        blco_stats_init(&st);
        blco_stream_t *s = NULL;
        blco_diag_t d = {0};
        int err = open_cfg(&fx, &c, NULL, &st, &s, &d);
        CHECK(err == 0, "factors %s: open: %s (%s)", bname(b), blco_strerror(err), d.msg);
        if (err)
            continue;
        double *f[3];
        for (int m = 0; m < 3; m++)
            f[m] = rand_matrix(dims[m], rank, 5 + m);
        const uint64_t n = dims[1] * (uint64_t)rank;
        double *out = malloc(n * 8), *ref = malloc(n * 8), *bound = malloc(n * 8);
        /* step 0: first upload; 1: a row of the last piece; 2: of the first; 3: none */
        uint64_t skipped = 0;
        for (int step = 0; step < 4; step++) {
            if (step == 1 || step == 2)
                for (int k = 0; k < rank; k++)
                    f[0][(step == 1 ? hi : lo) * rank + (uint64_t)k] += 0.5;
            err = blco_stream_mttkrp(s, 1, rank, (const double *const *)f, out, &d);
            blco_mttkrp_naive(x, 1, rank, (const double *const *)f, ref);
            blco_mttkrp_naive(fx.xabs, 1, rank, (const double *const *)f, bound);
            const double w = err ? INFINITY : worst_ratio(out, ref, bound, n);
            CHECK(err == 0 && w <= 64, "factors %s step %d: %s (%s); error %.3g x 1e-12",
                  bname(b), step, blco_strerror(err), d.msg, w);
            blco_stream_gpu_stats_t gs;
            blco_stream_gpu_stats(s, &gs);
            /* factor 3 never changes; factor 1 is sent again at steps 1 and 2 */
            const uint64_t want = step == 0 ? 0 : step < 3 ? 1 : 2;
            CHECK(gs.dev[0].factor_uploads_skipped - skipped == want,
                  "factors %s step %d: %llu uploads skipped, want %llu", bname(b), step,
                  (unsigned long long)(gs.dev[0].factor_uploads_skipped - skipped),
                  (unsigned long long)want);
            skipped = gs.dev[0].factor_uploads_skipped;
            /* the host's time around the batches: factors checked, the output back */
            CHECK(gs.host_begin_seconds > 0 && gs.host_end_seconds > 0,
                  "factors %s step %d: host %g s before, %g s after the batches", bname(b),
                  step, gs.host_begin_seconds, gs.host_end_seconds);
        }
        free(out);
        free(ref);
        free(bound);
        for (int m = 0; m < 3; m++)
            free(f[m]);
        blco_stream_close(s);
    }
    unlink(fx.path);
    fixture_free(&fx);
}

int main(void)
{
    /* Two emulated devices (ignored by a real GPU build). */
    setenv("BLCO_EMU_DEVICES", "2", 0);
    char name[256];
    int perr = blco_cuda_probe(&ngpu, name, sizeof name);
    if (perr < 0) {
        /* No GPU: the backends refuse clearly, then the rest is skipped. */
        uint64_t dims[3] = {10, 10, 10};
        snprintf(dir, sizeof dir, "%s/blco-test-sgpu-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            return 1;
        blco_coo_t *x = gen(BLCO_GEN_UNIFORM, 3, dims, 100, 1);
        fixture_t fx;
        if (x && fixture_make(&fx, "nogpu", x, 64, BLCO_PACK_AUTO) == 0) {
            blco_stream_opts_t o;
            blco_stream_opts_default(&o);
            o.backend = BLCO_BACKEND_HYBRID;
            blco_stream_t *s = NULL;
            blco_diag_t d = {0};
            int err = blco_stream_open(fx.path, &o, NULL, &s, &d);
            CHECK(err == -BLCO_ENODEV && !s && d.msg[0], "no GPU: %s (%s)", blco_strerror(err),
                  d.msg);
            printf("without a GPU the hybrid backend says: %s\n", d.msg);
            unlink(fx.path);
        }
        fixture_free(&fx);
        rmdir(dir);
        if (check_fail)
            return check_done();
        printf("no GPU answers (%s): GPU streaming skipped\n", blco_strerror(perr));
        return 77;
    }
    printf("%d GPU(s): %s\n", ngpu, name);
    blco_log_set(warn_once, NULL, BLCO_LOG_WARN);
    snprintf(dir, sizeof dir, "%s/blco-test-sgpu-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    const char *q = getenv("BLCO_TEST_QUICK"), *only = getenv("BLCO_TEST_ONLY");
    /* The parts, in the order a full run takes them; each prints its seconds. */
    static const struct {
        const char *name;
        void (*fn)(void);
    } part[] = {{"errors", errors},       {"hybrid", hybrid_rule},
                {"trace", trace},         {"overlap", overlap_timeline},
                {"codecs", default_codecs}, {"generated", generated},
                {"shared", shared_data}, {"factors", factor_changes},
                {"schedule", schedule_choice}};
    int quick = q && *q && strcmp(q, "0") != 0, known = 0;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        /* BLCO_TEST_ONLY=name[,name...]: those parts alone (to chase one failure) */
        if (only && *only ? !strstr(only, part[i].name)
                          : quick && strcmp(part[i].name, "trace") != 0 &&
                                strcmp(part[i].name, "codecs") != 0)
            continue;
        check_part(part[i].name);
        part[i].fn();
        known++;
    }
    check_part(NULL);
    if (only && *only)
        CHECK(known > 0,
              "BLCO_TEST_ONLY=%s names no part (errors, hybrid, trace, overlap, codecs, "
              "generated, shared, factors, schedule)",
              only);
    /* BLCO_TEST_QUICK=1: two small streamed configurations (the trace's and the default
     * codecs'), for compute-sanitizer's tools, which slow every kernel a hundredfold */
    if (quick && !(only && *only))
        printf("BLCO_TEST_QUICK: the trace and default-codec configurations only\n");
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    /* Every stream closed: nothing stays charged to any device context. */
    CHECK(blco_cuda_unreleased_bytes() == 0, "%llu bytes of device memory unreleased",
          (unsigned long long)blco_cuda_unreleased_bytes());
    return check_done();
}
