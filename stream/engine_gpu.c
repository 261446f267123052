/* The streaming engine's GPU side: pinned staging buffers, per-device copy and compute
 * streams ordered by events, device residency, the hybrid split, and the timeline (see
 * engine_gpu.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "engine_gpu.h"
#include "file_internal.h"
#include "gpu/cuda_cpd.h"
#include "gpu/cuda_decode.h"
#include "gpu/cuda_ttm.h"

/* Pinned staging buffers on the host and streaming batch buffers per device: at least
 * NSTAGE_MIN and NBUF (what a pass needs to keep copies, decodes and kernels of
 * consecutive batches apart), more when batches are small, so that about IN_FLIGHT bytes of
 * batches can be queued ahead of the device (host jitter, read latency), within
 * NSTAGE_MAX/NBUF_MAX buffers and what the budget and device memory spare. */
#define NSTAGE_MIN 2
#define NSTAGE 3
#define NSTAGE_MAX 8
#define NBUF 3
#define NBUF_MAX 16
#define IN_FLIGHT (256ull << 20)
#define STAGE_FLIGHT (64ull << 20)
#define NCOMP 2     /* compute streams per device */

/* Device memory of one batch: segment starts, block coordinates, indices, values. */
typedef struct dbatch {
    void *mem;
    uint64_t bytes; /* allocated */
    uint64_t nseg, nnz;
    uint64_t maxseg;     /* nonzeros of its longest segment */
    void *copied, *done; /* events: its data arrived; its kernel finished */
    int used;            /* done was recorded at least once */
} dbatch_t;

/* One interval of the timeline, in ms from the pass's start event on its device. */
typedef struct span {
    uint64_t batch;
    int kind; /* 0 copy, 1 kernel, 2 decode kernel */
    int stream;
    void *e0, *e1;
} span_t;

typedef struct gdev {
    blco_cuda_t *ctx;
    int id;
    blco_cuda_info_t info;
    void *copy, *comp[NCOMP];
    int next_comp, next_buf;
    dbatch_t buf[NBUF_MAX];
    int nbuf; /* streaming buffers: NBUF .. NBUF_MAX */
    void *zeroed;
    double *dout;
    uint64_t dout_bytes;
    /* Deterministic passes (gpu_pipe_set_fixed): the output as 128-bit integers (16 bytes
     * an entry), and on device 0 the room to add another device's. */
    double *dfix, *dpfix;
    uint64_t dfix_bytes, dpfix_bytes;
    double *dfac[BLCO_MAX_MODES];
    uint64_t dfac_bytes[BLCO_MAX_MODES];
    uint64_t dfac_sum[BLCO_MAX_MODES]; /* checksum of what dfac holds (0: nothing valid) */
    uint64_t fac_skipped;              /* uploads found unchanged and skipped */
    int64_t *drowmap;                  /* a TTM pass's row map (NULL: none yet) */
    uint64_t drowmap_bytes;
    /* Device bytes set aside at open for the output and the factors; a TTM pass whose Y,
     * factors and row map need more takes the excess from res_room. */
    uint64_t reserve, excess;
    /* What gpu_pipe_bind_factors counted against the reserve beside the factors and the
     * output (the caller's dense-step scratch, the outputs' sums): a pass's Y shares the
     * reserve with it. */
    uint64_t bound_other;
    double *scratch[NCOMP];
    uint64_t scratch_bytes;
    uint64_t res_room; /* device bytes residency may still take */
    uint64_t *dtab;    /* the decoder's ALTO-to-BLCO byte tables (NULL: not needed) */
    unsigned long long *derr; /* the decoder's error word */
    /* timeline of the pass */
    void *t0;
    double host_t0;
    span_t *spans;
    size_t nspans, cap_spans;
    void **epool;
    size_t nevents, used_events;
    double *dpeer; /* device 0: another device's output or the CPU's share, to add */
    uint64_t dpeer_bytes;
    /* counters */
    uint64_t batches, h2d_bytes, res_batches, res_bytes, decode_batches;
    double kernel_s, copy_s, overlap_s;
    double busy_pass; /* seconds the last pass kept it busy (kernels or copies) */
    double mt_pass;   /* and its MTTKRP kernels (or TTM's) busy, decode kernels not counted */
    uint64_t nnz_pass; /* nonzeros it computed in the pass */
} gdev_t;

typedef struct stage {
    uint8_t *mem;
    uint64_t bytes;
    gdev_t *dev;  /* the device whose copy reads it, or NULL */
    void *copied; /* that device's event: the copy is done */
} stage_t;

typedef struct resident {
    int dev; /* -1: not resident */
    dbatch_t d;
} resident_t;

struct gpu_pipe {
    blco_stream_opts_t o;
    gpu_pipe_shape_t sh;
    blco_budget_t *budget;
    blco_stats_t *st;
    int hybrid;
    int ndev;
    gdev_t dev[BLCO_MAX_GPUS];
    stage_t stage[NSTAGE_MAX];
    int nstage, next_stage, cur_stage;
    int next_dev; /* where pick_device starts looking */
    /* The hybrid split: each batch's nonzeros, this pass's plan (1: the CPU computes it),
     * the host's seconds on each batch this pass, and the measured costs per nonzero of
     * MTTKRP (0) and TTM (1) passes: host feeding the GPUs, devices busy, host computing. */
    uint64_t *bnnz;
    uint8_t *cpu_take;
    double *host_s;
    double cost[2][3];
    int have_cost[2][3];
    double share; /* the CPU's planned share of the last pass's nonzeros */
    uint64_t hdr_bytes; /* bytes of the segment tables in a staging buffer */
    resident_t *res;
    int filling;  /* the first pass: batches may become resident */
    uint64_t res_refused; /* batches that fit the room but whose allocation CUDA refused */
    int filled;   /* residency decided */
    int mode, rank;
    /* A TTM pass (ttm = 1): Y (rows x P) = X x_{m != mode} U_m^T, U_m dims[m] x ranks[m]. */
    int ttm;
    int ranks[BLCO_MAX_MODES];
    uint64_t P, rows;
    const int64_t *rowmap;
    int pass;
    /* The register kernel's chunk schedule (blco_stream_opts_t.gpu_schedule): this pass's
     * (BLCO_CUDA_SCHEDULE_*), whether its kernel time is a sample of it for auto, and per
     * mode the passes of each (contiguous, interleaved), the samples and their kernel
     * seconds a nonzero (averaged), and the kernels loaded so far (bit ncol == 4). */
    int pass_sched, pass_sample;
    uint64_t sched_passes[BLCO_MAX_MODES][2];
    int sched_n[BLCO_MAX_MODES][2];
    double sched_cost[BLCO_MAX_MODES][2];
    unsigned warmed;
    int dev_factors, keep_out, out_fresh; /* this pass's gpu_pass_t flags */
    int bound_rank;            /* gpu_pipe_bind_factors' rank (0: none) */
    int bound_fixed;           /* and deterministic outputs bound */
    double fixed_scale;        /* gpu_pipe_set_fixed (0: off) */
    double pass_fixed;         /* this pass's: the scale, or 0 (floating-point atomics) */
    uint64_t pass_cpu0;        /* cpu_batches when the pass began */
    uint64_t cpu_batches, host_decoded;
    /* decoding on the devices */
    int enc_any; /* some batch goes encoded */
    int tbytes;  /* byte tables the decoder needs (0: ALTO and BLCO orders agree) */
    int index_bits;
    blco_codec_map_t *map;
    /* the reader's ring, page-locked: slots a device still copies from */
    uint8_t *ring;
    uint64_t ring_bytes, slot_bytes;
    int nslots;
    gdev_t **hold_dev;
    void **hold_ev;
    /* the host's resident stored bytes, page-locked (gpu_pipe_register_resident): encoded
     * batches go from there to the devices, no bounce copy; the memory outlives the passes,
     * so nothing is held per batch, and gpu_pipe_unregister_resident waits for the copies */
    uint8_t *hres;
    uint64_t hres_bytes;
    uint64_t staged_bytes; /* stored bytes the host copied into staging buffers */
    double host_begin_s, host_end_s; /* the host's time before and after the batches */
    double pass_t0, feed_t0;         /* when this pass began, and its batches (--trace) */
    FILE *trace;
    int trace_first;
    char desc[512];
};

static uint64_t align256(uint64_t x)
{
    return (x + 255) & ~255ull;
}

/* Layout of a batch (staging buffer or device memory): starts, coordinates, idx, val. */
static uint64_t off_coord(const gpu_pipe_t *g, uint64_t nseg)
{
    (void)g;
    return align256((nseg + 1) * 8);
}
static uint64_t off_idx(const gpu_pipe_t *g, uint64_t nseg)
{
    return off_coord(g, nseg) + align256(nseg * (uint64_t)g->sh.layout->order * 8);
}
static uint64_t off_val(const gpu_pipe_t *g, uint64_t nseg, uint64_t nnz)
{
    return off_idx(g, nseg) + align256(nnz * 8);
}
static uint64_t batch_bytes(const gpu_pipe_t *g, uint64_t nseg, uint64_t nnz)
{
    return off_val(g, nseg, nnz) + align256(nnz * 8);
}

/* A streaming device buffer: the largest batch decoded, then, when batches go encoded, the
 * decoder's segment descriptors, its frame scratch, and the stored bytes (with the 16
 * bytes of slack its unaligned loads may touch). */
static uint64_t dseg_off(const gpu_pipe_t *g)
{
    return batch_bytes(g, g->sh.max_batch_segs, g->sh.max_batch_nnz);
}
static uint64_t frames_off(const gpu_pipe_t *g)
{
    return dseg_off(g) + align256(g->sh.max_batch_segs * sizeof(blco_cuda_dseg_t));
}
static uint64_t enc_off(const gpu_pipe_t *g)
{
    return frames_off(g) + align256(g->sh.max_batch_frames * 8);
}
static uint64_t sbuf_bytes(const gpu_pipe_t *g)
{
    return g->enc_any ? enc_off(g) + align256(g->sh.max_batch_bytes + 16) : dseg_off(g);
}
/* A staging buffer: a decoded batch, or the tables, descriptors and (when they cannot go
 * from the ring) the stored bytes of an encoded one. */
static uint64_t stage_enc_off(const gpu_pipe_t *g)
{
    return off_idx(g, g->sh.max_batch_segs) +
           align256(g->sh.max_batch_segs * sizeof(blco_cuda_dseg_t));
}
static uint64_t stage_bytes(const gpu_pipe_t *g)
{
    uint64_t dec = dseg_off(g);
    uint64_t enc = g->enc_any ? stage_enc_off(g) + align256(g->sh.max_batch_bytes) : 0;
    return BLCO_MAX(dec, enc);
}

static int cuda_err(blco_diag_t *diag, int err, const gdev_t *d, const char *what)
{
    if (err == -BLCO_EDEVMEM && diag && diag->msg[0])
        return err; /* the diag already says what was short */
    if (err == -BLCO_EDEVMEM) /* CUDA refused memory in a call that takes no diag */
        return blco_diag_set(diag, 0, err,
                             "GPU %d (%s): %s: CUDA ran out of device memory "
                             "(cudaErrorMemoryAllocation; other processes may be using the device)",
                             d->id, d->info.name, what);
    return blco_diag_set(diag, 0, err < 0 ? err : -BLCO_ECUDA, "GPU %d (%s): %s: %s", d->id,
                         d->info.name, what, blco_strerror(err));
}

static void *new_event(gdev_t *d, int *err);

void gpu_pipe_count(gpu_pipe_t *g, int dev, int dir, int kind, uint64_t bytes)
{
    blco_stats_t *st = g->st;
    if (dir == 0) {
        g->dev[dev].h2d_bytes += bytes;
        blco_stat_add(&st->gpu_h2d_bytes, bytes);
        blco_stat_add(&st->gpu_h2d_kind[kind], bytes);
    } else {
        blco_stat_add(&st->gpu_d2h_bytes, bytes);
        blco_stat_add(&st->gpu_d2h_kind[kind], bytes);
    }
}

void gpu_pipe_count_peer(gpu_pipe_t *g, uint64_t bytes)
{
    blco_stat_add(&g->st->gpu_peer_bytes, bytes);
}

void gpu_pipe_count_kernel(gpu_pipe_t *g, double seconds)
{
    if (seconds > 0)
        blco_stat_add(&g->st->gpu_kernel_ns, (uint64_t)(seconds * 1e9));
}

void gpu_pipe_count_mttkrp_kernel(gpu_pipe_t *g, int dev, double seconds)
{
    if (seconds > 0) {
        g->dev[dev].kernel_s += seconds;
        blco_stat_add(&g->st->gpu_kernel_ns, (uint64_t)(seconds * 1e9));
    }
}

void stream_host_move(void *dst, const void *src, uint64_t bytes, int add, int nt)
{
    const int64_t nv = (int64_t)(bytes / 8);
    const int64_t nc = (nv + 65535) / 65536;
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * 65536, i1 = i0 + 65536 < nv ? i0 + 65536 : nv;
        if (!src)
            memset((uint8_t *)dst + 8 * i0, 0, (size_t)(i1 - i0) * 8);
        else if (add)
            for (int64_t i = i0; i < i1; i++)
                ((double *)dst)[i] += ((const double *)src)[i];
        else
            memcpy((uint8_t *)dst + 8 * i0, (const uint8_t *)src + 8 * i0,
                   (size_t)(i1 - i0) * 8);
    }
    if (bytes % 8 && src) /* bytes of something other than doubles (no add) */
        memcpy((uint8_t *)dst + 8 * nv, (const uint8_t *)src + 8 * nv, bytes % 8);
    else if (bytes % 8)
        memset((uint8_t *)dst + 8 * nv, 0, bytes % 8);
}

/* A checksum of a factor matrix, to skip sending one that did not change: XXH3 of each
 * 8 MiB piece on nt threads, then of those sums (one thread hashing a gigabyte factor took
 * longer than the pass's kernels). Only compared with itself. */
static uint64_t factor_sum(const void *p, uint64_t bytes, int nt)
{
    const uint64_t piece = 8ull << 20;
    const int64_t n = (int64_t)((bytes + piece - 1) / piece);
    if (n <= 1)
        return blco_checksum(p, bytes);
    uint64_t *h = malloc((size_t)n * 8);
    if (!h)
        return blco_checksum(p, bytes);
    (void)nt;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; i++) {
        const uint64_t o = (uint64_t)i * piece;
        h[i] = blco_checksum((const uint8_t *)p + o, BLCO_MIN(piece, bytes - o));
    }
    const uint64_t sum = blco_checksum(h, (size_t)n * 8);
    free(h);
    return sum;
}

/* Copies bytes between host memory and device d (dir 0: to the device, 1: back; with
 * `add`, back means added into the doubles at dst) through the page-locked staging buffers
 * in pieces, two in flight, so that no pageable memory reaches the copy engine (a
 * pageable copy is synchronous and slower, and the bounce is the driver's anyway). Only
 * between passes, when the staging buffers are free. Small copies go directly. */
static int staged_copy(gpu_pipe_t *g, gdev_t *d, void *dst, const void *src, uint64_t bytes,
                       int dir, int add, blco_diag_t *diag)
{
    int err = 0;
    if (bytes <= BLCO_CUDA_PAGEABLE_LIMIT && !add) {
        err = dir ? blco_cuda_copy_to_host(d->ctx, dst, src, bytes)
                  : blco_cuda_copy_to_device(d->ctx, dst, src, bytes);
        return err < 0 ? cuda_err(diag, err, d, dir ? "copying back" : "copying to the GPU") : 0;
    }
    const int nb = g->nstage >= 2 ? 2 : 1;
    const uint64_t piece = g->stage[0].bytes & ~7ull;
    uint64_t pend_off[2] = {0, 0}, pend_len[2] = {0, 0};
    void *ev[2] = {NULL, NULL};
    for (int k = 0; k < nb; k++)
        if (!(ev[k] = new_event(d, &err)))
            return cuda_err(diag, err, d, "events");
    int k = 0;
    for (uint64_t off = 0;; off += piece, k = (k + 1) % nb) {
        /* buffer k's last piece: done; back: add it out */
        if (pend_len[k]) {
            if ((err = blco_cuda_event_sync(d->ctx, ev[k])) < 0)
                return cuda_err(diag, err, d, "copying through the staging buffers");
            if (dir)
                stream_host_move((uint8_t *)dst + pend_off[k], g->stage[k].mem, pend_len[k],
                                 add, blco_threads_resolve(g->o.threads));
            pend_len[k] = 0;
        }
        if (off >= bytes) {
            if (!pend_len[(k + 1) % nb])
                break;
            continue; /* drain the other buffer */
        }
        const uint64_t len = BLCO_MIN(piece, bytes - off);
        if (dir) {
            err = blco_cuda_copy_to_host_async(d->ctx, g->stage[k].mem,
                                               (const uint8_t *)src + off, len, d->copy);
        } else {
            stream_host_move(g->stage[k].mem, (const uint8_t *)src + off, len, 0,
                             blco_threads_resolve(g->o.threads));
            err = blco_cuda_copy_to_device_async(d->ctx, (uint8_t *)dst + off, g->stage[k].mem,
                                                 len, d->copy);
        }
        if (err < 0 || (err = blco_cuda_event_record(d->ctx, ev[k], d->copy)) < 0)
            return cuda_err(diag, err, d, "copying through the staging buffers");
        pend_off[k] = off;
        pend_len[k] = len;
    }
    return 0;
}

static void *new_event(gdev_t *d, int *err)
{
    if (d->used_events < d->nevents)
        return d->epool[d->used_events++];
    void **p = realloc(d->epool, (d->nevents + 64) * sizeof *p);
    if (!p) {
        *err = -ENOMEM;
        return NULL;
    }
    d->epool = p;
    for (int i = 0; i < 64; i++) {
        int e = blco_cuda_event_create(d->ctx, &d->epool[d->nevents]);
        if (e < 0) {
            *err = e;
            return NULL;
        }
        d->nevents++;
    }
    return d->epool[d->used_events++];
}

static int add_span(gdev_t *d, uint64_t batch, int kind, int stream, void *e0, void *e1)
{
    if (d->nspans == d->cap_spans) {
        size_t n = d->cap_spans ? 2 * d->cap_spans : 64;
        span_t *p = realloc(d->spans, n * sizeof *p);
        if (!p)
            return -ENOMEM;
        d->spans = p;
        d->cap_spans = n;
    }
    d->spans[d->nspans++] = (span_t){batch, kind, stream, e0, e1};
    return 0;
}

static void free_dbatch(gdev_t *d, dbatch_t *b)
{
    blco_cuda_free(d->ctx, b->mem, b->bytes);
    blco_cuda_event_destroy(d->ctx, b->copied);
    blco_cuda_event_destroy(d->ctx, b->done);
    memset(b, 0, sizeof *b);
}

static int alloc_dbatch(gdev_t *d, uint64_t bytes, dbatch_t *b, blco_diag_t *diag)
{
    memset(b, 0, sizeof *b);
    int err = blco_cuda_alloc(d->ctx, bytes, &b->mem, diag);
    if (err < 0)
        return err;
    b->bytes = bytes;
    if ((err = blco_cuda_event_create(d->ctx, &b->copied)) < 0 ||
        (err = blco_cuda_event_create(d->ctx, &b->done)) < 0) {
        free_dbatch(d, b);
        return err;
    }
    return 0;
}

static void close_dev(gdev_t *d)
{
    if (!d->ctx)
        return;
    for (int i = 0; i < NCOMP; i++)
        if (d->comp[i])
            blco_cuda_stream_sync(d->ctx, d->comp[i]);
    if (d->copy)
        blco_cuda_stream_sync(d->ctx, d->copy);
    for (int i = 0; i < d->nbuf; i++)
        free_dbatch(d, &d->buf[i]);
    for (size_t i = 0; i < d->nevents; i++)
        blco_cuda_event_destroy(d->ctx, d->epool[i]);
    free(d->epool);
    free(d->spans);
    blco_cuda_event_destroy(d->ctx, d->zeroed);
    blco_cuda_free(d->ctx, d->dtab, 8 * 256 * 8);
    blco_cuda_free(d->ctx, d->derr, 8);
    blco_cuda_free(d->ctx, d->dout, d->dout_bytes);
    blco_cuda_free(d->ctx, d->drowmap, d->drowmap_bytes);
    blco_cuda_free(d->ctx, d->dpeer, d->dpeer_bytes);
    blco_cuda_free(d->ctx, d->dfix, d->dfix_bytes);
    blco_cuda_free(d->ctx, d->dpfix, d->dpfix_bytes);
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        blco_cuda_free(d->ctx, d->dfac[m], d->dfac_bytes[m]);
    for (int i = 0; i < NCOMP; i++) {
        blco_cuda_free(d->ctx, d->scratch[i], d->scratch_bytes);
        blco_cuda_stream_destroy(d->ctx, d->comp[i]);
    }
    blco_cuda_stream_destroy(d->ctx, d->copy);
    blco_cuda_close(d->ctx);
    memset(d, 0, sizeof *d);
}

static void free_residency(gpu_pipe_t *g)
{
    if (!g->res)
        return;
    for (uint64_t b = 0; b < g->sh.nbatches; b++)
        if (g->res[b].dev >= 0) {
            gdev_t *d = &g->dev[g->res[b].dev];
            d->res_room += g->res[b].d.bytes;
            free_dbatch(d, &g->res[b].d);
            g->res[b].dev = -1;
        }
    for (int i = 0; i < g->ndev; i++) {
        g->dev[i].res_batches = 0;
        g->dev[i].res_bytes = 0;
    }
}

void gpu_pipe_close(gpu_pipe_t *g)
{
    if (!g)
        return;
    free_residency(g);
    free(g->res);
    gpu_pipe_unregister_resident(g);
    if (g->ring && g->ndev)
        blco_cuda_host_unregister(g->dev[0].ctx, g->ring);
    free(g->hold_dev);
    free(g->hold_ev);
    free(g->bnnz);
    free(g->cpu_take);
    free(g->host_s);
    free(g->map);
    for (int i = 0; i < g->nstage; i++) {
        stage_t *s = &g->stage[i];
        if (s->mem && g->ndev)
            blco_cuda_host_unregister(g->dev[0].ctx, s->mem);
        blco_budget_free(g->budget, s->mem, s->bytes);
    }
    for (int i = 0; i < g->ndev; i++)
        close_dev(&g->dev[i]);
    if (g->trace) {
        fputs("\n]}\n", g->trace);
        fclose(g->trace);
    }
    free(g);
}

const char *gpu_pipe_describe(const gpu_pipe_t *g)
{
    return g->desc;
}

static int open_dev(gpu_pipe_t *g, gdev_t *d, int id, blco_diag_t *diag)
{
    blco_cuda_opts_t co;
    blco_cuda_opts_default(&co);
    co.mem_limit = g->o.gpu_mem_limit;
    d->id = id;
    int err = blco_cuda_open(id, &co, &d->ctx, diag);
    if (err < 0)
        return err;
    if ((err = blco_cuda_info(d->ctx, &d->info)) < 0 ||
        (err = blco_cuda_stream_create(d->ctx, &d->copy)) < 0 ||
        (err = blco_cuda_event_create(d->ctx, &d->zeroed)) < 0)
        return cuda_err(diag, err, d, "setting up streams");
    for (int i = 0; i < NCOMP; i++)
        if ((err = blco_cuda_stream_create(d->ctx, &d->comp[i])) < 0)
            return cuda_err(diag, err, d, "setting up streams");
    /* What the device must hold whatever the residency: the largest output, every factor
     * matrix, the streaming batch buffers, and the hierarchical kernel's output copies. */
    const blco_layout_t *l = g->sh.layout;
    const int rank = g->o.rank > 0 ? g->o.rank : 16;
    uint64_t maxrows = 0, fac = 0;
    for (int m = 0; m < l->order; m++) {
        maxrows = BLCO_MAX(maxrows, l->dims[m]);
        fac += l->dims[m] * (uint64_t)rank * 8;
    }
    const uint64_t bufb = sbuf_bytes(g);
    /* Deterministic CP-ALS (gpu_pipe_bind_factors): the output's 128-bit sums, and on
     * device 0 of several the room for another device's. */
    const uint64_t fix = g->o.deterministic && g->o.backend != BLCO_BACKEND_HYBRID
                             ? maxrows * (uint64_t)rank * 16 * (d == g->dev && g->o.ngpus > 1 ? 2 : 1)
                             : 0;
    uint64_t need = maxrows * (uint64_t)rank * 8 + fac + fix + NBUF * bufb + g->o.gpu_keep_free;
    if (g->enc_any) /* the decoder's error word and byte tables */
        need += 256 + (g->tbytes ? 8 * 256 * 8 : 0);
    blco_cuda_info_t in = d->info;
    uint64_t avail = in.free_mem;
    if (in.limit && in.limit < avail)
        avail = in.limit;
    if (need > avail && g->o.gpu_keep_free) {
        char a[32], b[32], c[32];
        return blco_diag_set(diag, 0, -BLCO_EDEVMEM,
                             "GPU %d (%s): streaming needs %llu bytes (%s) of device memory, %s "
                             "for the TTM chains' Y, factors and row map; %s available; lower "
                             "blco-tucker --y-mem or raise --gpu-mem-limit",
                             id, in.name, (unsigned long long)need,
                             blco_format_size(need, a, sizeof a),
                             blco_format_size(g->o.gpu_keep_free, c, sizeof c),
                             blco_format_size(avail, b, sizeof b));
    }
    if (need > avail) {
        char a[32], b[32];
        return blco_diag_set(
            diag, 0, -BLCO_EDEVMEM,
            "GPU %d (%s): streaming at rank %d needs %llu bytes (%s) of device memory (the "
            "output%s, the factor matrices, %d batch buffers and the decoder), %s available%s",
            id, in.name, rank, (unsigned long long)need, blco_format_size(need, a, sizeof a),
            fix ? " and its deterministic sums" : "", NBUF, blco_format_size(avail, b, sizeof b),
            in.limit ? " within --gpu-mem-limit: raise it"
                     : "; other processes may hold the rest");
    }
    for (int i = 0; i < NBUF; i++) {
        if ((err = alloc_dbatch(d, bufb, &d->buf[i], diag)) < 0)
            return cuda_err(diag, err, d, "batch buffers");
        d->nbuf = i + 1;
    }
    /* More buffers when batches are small, from room the decoded tensor would not use
     * anyway (a tensor that fits stays resident first), or, when it cannot fit, from an
     * eighth of the device. */
    {
        const uint64_t tensor = g->sh.nnz * 16 + g->sh.nbatches * 4096;
        uint64_t spare = avail > need + tensor ? avail - need - tensor : 0;
        if (avail <= need + tensor)
            spare = avail > need ? BLCO_MIN(avail - need, avail / 8) : 0;
        while (d->nbuf < NBUF_MAX && (uint64_t)d->nbuf * bufb < IN_FLIGHT && spare >= bufb &&
               alloc_dbatch(d, bufb, &d->buf[d->nbuf], NULL) == 0) {
            need += bufb;
            spare -= bufb;
            d->nbuf++;
        }
    }
    if (g->enc_any) { /* the decoder's error word and byte tables */
        if ((err = blco_cuda_alloc(d->ctx, 8, (void **)&d->derr, diag)) < 0)
            return cuda_err(diag, err, d, "the decoder");
        if (g->tbytes &&
            ((err = blco_cuda_alloc(d->ctx, 8 * 256 * 8, (void **)&d->dtab, diag)) < 0 ||
             (err = blco_cuda_copy_to_device(d->ctx, d->dtab, g->map->to_index,
                                             sizeof g->map->to_index)) < 0))
            return cuda_err(diag, err, d, "the decoder's tables");
    }
    /* Output copies of the hierarchical kernel: an optimization, when room is left. */
    blco_cuda_mttkrp_opts_t mo;
    blco_cuda_mttkrp_opts_default(&mo);
    uint64_t sc = 0;
    for (int m = 0; m < l->order; m++)
        sc = BLCO_MAX(sc, blco_cuda_batch_scratch_bytes(d->ctx, l->dims[m], rank, &mo));
    if (sc && need + NCOMP * sc <= avail / 2) {
        d->scratch_bytes = sc;
        for (int i = 0; i < NCOMP; i++)
            if (blco_cuda_alloc(d->ctx, sc, (void **)&d->scratch[i], NULL) < 0)
                d->scratch[i] = NULL;
        need += NCOMP * sc;
    }
    d->reserve = maxrows * (uint64_t)rank * 8 + fac + fix + g->o.gpu_keep_free;
    d->res_room = avail > need ? avail - need : 0;
    return 0;
}

int gpu_pipe_open(const blco_stream_opts_t *o, const gpu_pipe_shape_t *sh, blco_budget_t *budget,
                  blco_stats_t *st, gpu_pipe_t **out, blco_diag_t *diag)
{
    *out = NULL;
    gpu_pipe_t *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->o = *o;
    g->sh = *sh;
    g->budget = budget;
    g->st = st;
    g->hybrid = o->backend == BLCO_BACKEND_HYBRID;
    int err = 0;
    for (uint64_t b = 0; sh->enc && b < sh->nbatches; b++)
        g->enc_any |= sh->enc[b];
    if (g->enc_any) {
        if (!(g->map = malloc(sizeof *g->map))) {
            err = -ENOMEM;
            goto fail;
        }
        blco_codec_map_init(g->map, sh->layout);
        g->index_bits = g->map->index_bits;
        g->tbytes = g->map->nfield <= 1 ? 0 : (g->index_bits + 7) / 8;
    }
    int ids[BLCO_MAX_GPUS], n = o->ngpus > 0 ? BLCO_MIN(o->ngpus, BLCO_MAX_GPUS) : 1;
    for (int i = 0; i < n; i++)
        ids[i] = o->ngpus > 0 ? o->gpus[i] : 0;
    for (int i = 0; i < n; i++) {
        g->ndev = i + 1;
        if ((err = open_dev(g, &g->dev[i], ids[i], diag)) < 0)
            goto fail;
    }
    const size_t nbat = sh->nbatches ? sh->nbatches : 1;
    if (!(g->res = malloc(nbat * sizeof *g->res)) || !(g->bnnz = calloc(nbat, 8)) ||
        !(g->cpu_take = calloc(nbat, 1)) || !(g->host_s = calloc(nbat, sizeof(double)))) {
        err = -ENOMEM;
        goto fail;
    }
    for (uint64_t b = 0; sh->batch_nnz && b < sh->nbatches; b++)
        g->bnnz[b] = sh->batch_nnz[b];
    g->sh.batch_nnz = g->bnnz;
    for (uint64_t b = 0; b < sh->nbatches; b++)
        g->res[b].dev = -1;
    /* Pinned staging on the host, from the budget: three when they fit, else two; up to
     * NSTAGE_MAX when batches are small (STAGE_FLIGHT bytes in all). */
    const uint64_t sb = stage_bytes(g);
    int nstage = NSTAGE;
    while (nstage < NSTAGE_MAX && (uint64_t)(nstage + 1) * sb <= STAGE_FLIGHT)
        nstage++;
    for (int i = 0; i < nstage; i++) {
        stage_t *s = &g->stage[i];
        if ((err = blco_budget_alloc(budget, sb, (void **)&s->mem)) < 0) {
            s->mem = NULL;
            if (i >= NSTAGE_MIN)
                break;
            char a[32];
            err = blco_diag_set(diag, 0, -BLCO_EBUDGET,
                                "the memory budget has no room for two pinned staging buffers "
                                "of %s each (a batch for the GPU); raise --mem-limit",
                                blco_format_size(sb, a, sizeof a));
            goto fail;
        }
        s->bytes = sb;
        g->nstage = i + 1;
        if (g->dev[0].info.numa_node >= 0) { /* near the GPU, before the pages are pinned */
            char what[96];
            blco_topo_bind_area_node(s->mem, sb, g->dev[0].info.numa_node, what, sizeof what);
        }
        if ((err = blco_cuda_host_register(g->dev[0].ctx, s->mem, sb)) < 0) {
            char a[32];
            if (err == -ENOMEM) /* host memory: not the device's, not the budget's */
                err = blco_diag_set(
                    diag, 0, -BLCO_ECUDA,
                    "GPU %d (%s): page-locking a staging buffer of %s: CUDA refused it (out of "
                    "memory: the system may limit page-locked memory, e.g. ulimit -l or a "
                    "container's memory limit)",
                    g->dev[0].id, g->dev[0].info.name, blco_format_size(sb, a, sizeof a));
            else
                err = cuda_err(diag, err, &g->dev[0], "page-locking the staging buffers");
            s->bytes = 0;
            blco_budget_free(budget, s->mem, sb);
            s->mem = NULL;
            g->nstage = i;
            goto fail;
        }
    }
    err = 0;
    if (o->trace_path) {
        if (!(g->trace = fopen(o->trace_path, "w"))) {
            err = blco_diag_set(diag, 0, -errno, "%s: cannot create the trace file: %s",
                                o->trace_path, strerror(errno));
            goto fail;
        }
        fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", g->trace);
        g->trace_first = 1;
    }
    int len = snprintf(g->desc, sizeof g->desc, "%s on %d GPU%s:", g->hybrid ? "hybrid" : "cuda",
                       g->ndev, g->ndev > 1 ? "s" : "");
    for (int i = 0; i < g->ndev && len < (int)sizeof g->desc - 80; i++) {
        char a[32];
        len += snprintf(g->desc + len, sizeof g->desc - len, "%s %d %s (%s%s)", i ? "," : "",
                        g->dev[i].id, g->dev[i].info.name,
                        blco_format_size(g->dev[i].res_room, a, sizeof a),
                        g->dev[i].info.emulated ? " for residency, emulated" : " for residency");
    }
    snprintf(g->desc + len, sizeof g->desc - len, "; %d pinned staging buffers of %llu bytes",
             g->nstage, (unsigned long long)sb);
    g->filling = 1;
    st->gpus = (uint32_t)g->ndev;
    *out = g;
    return 0;
fail:
    gpu_pipe_close(g);
    return err;
}

/* ---- a pass ---- */

/* Columns of factor m in this pass: the rank, or the TTM's ranks[m]. */
static uint64_t fac_cols(const gpu_pipe_t *g, int m)
{
    return g->ttm ? (uint64_t)g->ranks[m] : (uint64_t)g->rank;
}

/* Bytes of the pass's output on a device: dims[mode] x rank, or the TTM's rows x P. */
static uint64_t out_bytes(const gpu_pipe_t *g)
{
    return g->ttm ? g->rows * g->P * 8 : g->sh.layout->dims[g->mode] * (uint64_t)g->rank * 8;
}

/* A TTM pass may need more than the device set aside at open (Y is rows x P, the factors
 * have their own ranks): the excess comes out of what residency has not taken, or the pass
 * is refused with what it needs. */
static int room_for_pass(gpu_pipe_t *g, gdev_t *d, blco_diag_t *diag)
{
    const blco_layout_t *l = g->sh.layout;
    uint64_t fac = 0;
    for (int m = 0; m < l->order; m++) {
        if (m != g->mode)
            fac += BLCO_MAX(d->dfac_bytes[m], l->dims[m] * fac_cols(g, m) * 8);
        else
            fac += d->dfac_bytes[m];
    }
    const uint64_t ob = out_bytes(g);
    const uint64_t rmb = g->ttm && g->rowmap ? l->dims[g->mode] * 8 : 0;
    const uint64_t total =
        fac + BLCO_MAX(d->dout_bytes, ob) + BLCO_MAX(d->drowmap_bytes, rmb) + d->bound_other;
    const uint64_t excess = total > d->reserve ? total - d->reserve : 0;
    if (excess <= d->excess)
        return 0;
    if (excess - d->excess > d->res_room) {
        char a[32], b[32];
        const uint64_t avail = d->reserve + d->excess + d->res_room;
        if (g->ttm)
            return blco_diag_set(
                diag, 0, -BLCO_EDEVMEM,
                "GPU %d (%s): the TTM chain of mode %d needs %llu bytes (%s) of device memory "
                "(Y: %llu rows x %llu columns, factors, row map), %s free; lower blco-tucker "
                "--y-mem or raise --gpu-mem-limit",
                d->id, d->info.name, g->mode + 1, (unsigned long long)total,
                blco_format_size(total, a, sizeof a), (unsigned long long)g->rows,
                (unsigned long long)g->P, blco_format_size(avail, b, sizeof b));
        return blco_diag_set(diag, 0, -BLCO_EDEVMEM,
                             "GPU %d (%s): the output and factors of mode %d at rank %d need "
                             "%llu bytes (%s) of device memory, %s available",
                             d->id, d->info.name, g->mode + 1, g->rank, (unsigned long long)total,
                             blco_format_size(total, a, sizeof a),
                             blco_format_size(avail, b, sizeof b));
    }
    d->res_room -= excess - d->excess;
    d->excess = excess;
    return 0;
}

/* The checksums upload_factors compares, of each factor a pass reads from the host (0 for
 * the others): taken once a pass, not once per device. Only a factor that changed goes
 * again (CP-ALS updates one per mode): a checksum costs a read of host memory, far less
 * than a copy over the bus. The size is in it: a TTM's factor of another rank is another
 * matrix. */
static void factor_sums(const gpu_pipe_t *g, const double *const *factors, uint64_t *sum)
{
    const blco_layout_t *l = g->sh.layout;
    for (int m = 0; m < l->order; m++) {
        sum[m] = 0;
        if (m == g->mode || g->dev_factors)
            continue;
        const uint64_t bytes = l->dims[m] * fac_cols(g, m) * 8;
        sum[m] = (factor_sum(factors[m], bytes, blco_threads_resolve(g->o.threads)) ^
                  (bytes * 0x9e3779b97f4a7c15ull)) |
                 1;
    }
}

static int upload_factors(gpu_pipe_t *g, gdev_t *d, const double *const *factors,
                          const uint64_t *fsum, blco_diag_t *diag)
{
    const blco_layout_t *l = g->sh.layout;
    const int mode = g->mode;
    int err;
    if ((err = room_for_pass(g, d, diag)) < 0)
        return err;
    for (int m = 0; m < l->order && !g->dev_factors; m++) {
        if (m == mode)
            continue;
        uint64_t bytes = l->dims[m] * fac_cols(g, m) * 8;
        if (d->dfac_bytes[m] < bytes) {
            d->dfac_sum[m] = 0;
            blco_cuda_free(d->ctx, d->dfac[m], d->dfac_bytes[m]);
            d->dfac[m] = NULL;
            d->dfac_bytes[m] = 0;
            if ((err = blco_cuda_alloc(d->ctx, bytes, (void **)&d->dfac[m], diag)) < 0)
                return cuda_err(diag, err, d, "factor matrices");
            d->dfac_bytes[m] = bytes;
        }
        const uint64_t sum = fsum[m];
        if (d->dfac_sum[m] == sum) {
            d->fac_skipped++;
            continue;
        }
        /* Synchronous: the factors live in pageable memory, and no kernel of the previous
         * pass still reads them (gpu_pipe_end waited). */
        d->dfac_sum[m] = 0;
        if ((err = staged_copy(g, d, d->dfac[m], factors[m], bytes, 0, 0, diag)) < 0)
            return err;
        d->dfac_sum[m] = sum;
        gpu_pipe_count(g, (int)(d - g->dev), 0, BLCO_XFER_FACTORS, bytes);
    }
    if (g->ttm && g->rowmap) { /* the row map changes with every row block: sent each pass */
        const uint64_t rmb = l->dims[mode] * 8;
        if (d->drowmap_bytes < rmb) {
            blco_cuda_free(d->ctx, d->drowmap, d->drowmap_bytes);
            d->drowmap = NULL;
            d->drowmap_bytes = 0;
            if ((err = blco_cuda_alloc(d->ctx, rmb, (void **)&d->drowmap, diag)) < 0)
                return cuda_err(diag, err, d, "the row map");
            d->drowmap_bytes = rmb;
        }
        if ((err = staged_copy(g, d, d->drowmap, g->rowmap, rmb, 0, 0, diag)) < 0)
            return err;
        gpu_pipe_count(g, (int)(d - g->dev), 0, BLCO_XFER_FACTORS, rmb);
    }
    uint64_t ob = out_bytes(g);
    if (d->dout_bytes < BLCO_MAX(ob, 8)) { /* 8: a Y of no rows is still an address */
        blco_cuda_free(d->ctx, d->dout, d->dout_bytes);
        d->dout = NULL;
        d->dout_bytes = 0;
        if ((err = blco_cuda_alloc(d->ctx, BLCO_MAX(ob, 8), (void **)&d->dout, diag)) < 0)
            return cuda_err(diag, err, d, "the output");
        d->dout_bytes = BLCO_MAX(ob, 8);
    }
    /* Zeroed on the copy stream; the compute streams wait for it. A deterministic pass
     * adds into its integers, converted into dout at the end (gpu_pipe_collect). */
    if ((d->derr && (err = blco_cuda_zero(d->ctx, d->derr, 8, d->copy)) < 0) ||
        (ob && !g->pass_fixed && (err = blco_cuda_zero(d->ctx, d->dout, ob, d->copy)) < 0) ||
        (ob && g->pass_fixed && (err = blco_cuda_zero(d->ctx, d->dfix, 2 * ob, d->copy)) < 0) ||
        (err = blco_cuda_event_record(d->ctx, d->zeroed, d->copy)) < 0)
        return cuda_err(diag, err, d, "zeroing the output");
    for (int i = 0; i < NCOMP; i++)
        if ((err = blco_cuda_stream_wait_event(d->ctx, d->comp[i], d->zeroed)) < 0)
            return cuda_err(diag, err, d, "ordering the streams");
    return 0;
}

/* Queues the kernel of a batch already on device d (waiting for its copy when `after`),
 * after its decode kernel when `dec` (reading the encoded buffer `src`, done with it when
 * the kernel is). */
static int launch(gpu_pipe_t *g, gdev_t *d, uint64_t b, dbatch_t *db, void *after,
                  const blco_cuda_decode_args_t *dec, dbatch_t *src, blco_diag_t *diag)
{
    const int c = d->next_comp;
    d->next_comp = (c + 1) % NCOMP;
    void *st = d->comp[c];
    int err = 0;
    if (after && (err = blco_cuda_stream_wait_event(d->ctx, st, after)) < 0)
        return cuda_err(diag, err, d, "ordering the streams");
    if (dec) {
        void *d0 = new_event(d, &err), *d1 = d0 ? new_event(d, &err) : NULL;
        if (!d1)
            return cuda_err(diag, err, d, "events");
        if ((err = blco_cuda_event_record(d->ctx, d0, st)) < 0)
            return cuda_err(diag, err, d, "events");
        if ((err = blco_cuda_decode_batch(d->ctx, dec, st, diag)) < 0)
            return err;
        if ((err = blco_cuda_event_record(d->ctx, d1, st)) < 0)
            return cuda_err(diag, err, d, "events");
        if ((err = add_span(d, b, 2, 1 + c, d0, d1)) < 0)
            return err;
        d->decode_batches++;
        blco_stat_add(&g->st->gpu_decode_batches, 1);
    }
    void *k0 = new_event(d, &err), *k1 = k0 ? new_event(d, &err) : NULL;
    if (!k1)
        return cuda_err(diag, err, d, "events");
    const blco_layout_t *l = g->sh.layout;
    const double *fd[BLCO_MAX_MODES];
    for (int m = 0; m < l->order; m++)
        fd[m] = m == g->mode ? NULL : d->dfac[m];
    uint8_t *base = db->mem;
    blco_cuda_batch_t bt = {
        .nnz = db->nnz,
        .nseg = db->nseg,
        .seg_start = (const uint64_t *)base,
        .seg_coord = (const uint64_t *)(base + off_coord(g, db->nseg)),
        .idx = (const uint64_t *)(base + off_idx(g, db->nseg)),
        .val = (const double *)(base + off_val(g, db->nseg, db->nnz)),
        .scratch = d->scratch[c],
        .scratch_bytes = d->scratch[c] ? d->scratch_bytes : 0,
    };
    blco_cuda_mttkrp_opts_t mo;
    blco_cuda_mttkrp_opts_default(&mo);
    mo.stream = st;
    mo.schedule = g->pass_sched;
    if (g->pass_fixed) {
        mo.fixed = (unsigned long long *)d->dfix;
        mo.fixed_scale = g->pass_fixed;
    }
    if ((err = blco_cuda_event_record(d->ctx, k0, st)) < 0)
        return cuda_err(diag, err, d, "events");
    if (g->ttm) {
        /* The TTM kernel: a segment is a unit of one block coordinate, cut into runs. */
        blco_cuda_ttm_args_t ta;
        memset(&ta, 0, sizeof ta);
        ta.idx = bt.idx;
        ta.val = bt.val;
        ta.unit_start = bt.seg_start;
        ta.unit_coord = bt.seg_coord;
        ta.nunits = db->nnz ? db->nseg : 0;
        ta.runs_per_unit = BLCO_MAX((db->maxseg + BLCO_TTM_RUN - 1) / BLCO_TTM_RUN, 1);
        for (int m = 0; m < l->order; m++) {
            ta.u[m] = fd[m];
            ta.ranks[m] = g->ranks[m];
            ta.pos[m] = l->pos[m];
            ta.mask[m] = l->low_mask[m];
        }
        ta.rowmap = g->rowmap ? d->drowmap : NULL;
        ta.y = d->dout;
        ta.P = g->P;
        ta.order = l->order;
        ta.mode = g->mode;
        if ((err = blco_cuda_ttm_batch(d->ctx, &ta, st, diag)) < 0)
            return err;
    } else if ((err = blco_cuda_mttkrp_batch(d->ctx, l, g->mode, g->rank, &bt, fd, d->dout, &mo,
                                             diag)) < 0) {
        return err;
    }
    if ((err = blco_cuda_event_record(d->ctx, k1, st)) < 0 ||
        (err = blco_cuda_event_record(d->ctx, db->done, st)) < 0 ||
        (src && src != db && (err = blco_cuda_event_record(d->ctx, src->done, st)) < 0))
        return cuda_err(diag, err, d, "events");
    db->used = 1;
    if (src)
        src->used = 1;
    d->batches++;
    d->nnz_pass += db->nnz;
    blco_stat_add(&g->st->gpu_batches, 1);
    return add_span(d, b, 1, 1 + c, k0, k1);
}

double gpu_hybrid_split(double n, double n_stream, double h_g, double d_g, double h_c)
{
    const double den = h_c - h_g + d_g;
    if (!(den > 0))
        return 0;
    const double x = (n * d_g - n_stream * h_g) / den;
    return x < 0 ? 0 : x > n_stream ? n_stream : x;
}

double gpu_hybrid_share(double h_g, double d_g, double h_c)
{
    return gpu_hybrid_split(1, 1, h_g, d_g, h_c);
}

/* A first pass after which the devices hold the whole tensor. */
static int fills_devices(const gpu_pipe_t *g)
{
    uint64_t room = 0;
    for (int i = 0; i < g->ndev; i++)
        room += g->dev[i].res_room;
    const uint64_t tensor =
        batch_bytes(g, g->sh.max_batch_segs, 0) * g->sh.nbatches + g->sh.nnz * 16;
    return g->filling && g->o.residency != BLCO_RESIDENT_NONE && tensor <= room;
}

uint64_t gpu_pipe_cpu_batches(const gpu_pipe_t *g)
{
    return g->cpu_batches;
}

int gpu_pipe_cpu_idle(const gpu_pipe_t *g)
{
    if (!g->hybrid || g->sh.nbatches == 0)
        return 1;
    if (g->filling) {
        const int k = g->ttm;
        return g->have_cost[k][0] + g->have_cost[k][1] + g->have_cost[k][2] < 3 &&
               fills_devices(g);
    }
    for (uint64_t b = 0; b < g->sh.nbatches; b++)
        if (g->res[b].dev < 0)
            return 0;
    return 1;
}

/* Which batches the CPU computes this pass (hybrid): none of those a device holds; of the
 * others, evenly spread, the nonzeros gpu_hybrid_split gives it from the costs measured so
 * far; before both sides are measured, every 16th (a probe, at least one of two or more),
 * except in a first pass after which the devices hold the whole tensor. */
static void plan_hybrid(gpu_pipe_t *g)
{
    const uint64_t nb = g->sh.nbatches;
    memset(g->cpu_take, 0, nb ? nb : 1);
    g->share = 0;
    if (!g->hybrid || nb == 0)
        return;
    const int k = g->ttm;
    double n = 0, ns = 0;
    uint64_t nstream = 0;
    for (uint64_t b = 0; b < nb; b++) {
        n += (double)g->bnnz[b];
        if (g->filling || g->res[b].dev < 0) {
            ns += (double)g->bnnz[b];
            nstream++;
        }
    }
    if (nstream == 0 || n <= 0)
        return;
    double want;
    if (g->have_cost[k][0] + g->have_cost[k][1] + g->have_cost[k][2] == 3) {
        want = gpu_hybrid_split(n, ns, g->cost[k][0], g->cost[k][1], g->cost[k][2]);
    } else {
        /* A probe, unless the first pass can make the whole tensor resident on the devices:
         * then every batch stays there (a batch the CPU took would be streamed on every
         * later pass) and the devices compute it all. */
        if (fills_devices(g))
            return;
        want = -1;
    }
    uint64_t taken = 0, seen = 0;
    double got = 0;
    for (uint64_t b = 0; b < nb; b++) {
        if (!(g->filling || g->res[b].dev < 0))
            continue;
        seen++;
        int take;
        if (want < 0) {
            take = nstream >= 2 && (seen % 16 == 8 || (seen == nstream && taken == 0));
        } else {
            /* evenly: take b when the CPU's running share lags the plan by half a batch */
            const double target = want * (double)seen / (double)nstream;
            take = got + 0.5 * (double)g->bnnz[b] <= target;
        }
        if (take) {
            g->cpu_take[b] = 1;
            got += (double)g->bnnz[b];
            taken++;
        }
    }
    g->share = got / n;
}

int gpu_pipe_cpu_takes(const gpu_pipe_t *g, uint64_t b)
{
    return g->hybrid && b < g->sh.nbatches && g->cpu_take[b];
}

void gpu_pipe_host_time(gpu_pipe_t *g, uint64_t b, double seconds)
{
    if (b < g->sh.nbatches)
        g->host_s[b] += seconds;
}

/* After a pass: the costs per nonzero it measured, averaged with the earlier passes'. */
static void update_costs(gpu_pipe_t *g)
{
    const int k = g->ttm;
    double hg = 0, hc = 0, ng = 0, nc = 0, busy = 0;
    uint64_t nd = 0;
    for (uint64_t b = 0; b < g->sh.nbatches; b++) {
        if (g->host_s[b] <= 0)
            continue; /* held by a device: no host time */
        if (g->cpu_take[b] && g->hybrid) {
            hc += g->host_s[b];
            nc += (double)g->bnnz[b];
        } else {
            hg += g->host_s[b];
            ng += (double)g->bnnz[b];
        }
    }
    for (int i = 0; i < g->ndev; i++) {
        busy = BLCO_MAX(busy, g->dev[i].busy_pass);
        nd += g->dev[i].nnz_pass;
    }
    const double m[3] = {ng > 0 ? hg / ng : 0, nd ? busy / (double)nd : 0, nc > 0 ? hc / nc : 0};
    const int have[3] = {1, nd > 0, nc > 0};
    for (int i = 0; i < 3; i++) {
        if (!have[i])
            continue;
        g->cost[k][i] = g->have_cost[k][i] ? 0.5 * (g->cost[k][i] + m[i]) : m[i];
        g->have_cost[k][i] = 1;
    }
}

static void trace_phase(gpu_pipe_t *g, const char *what, double t0, double t1);

_Static_assert((int)BLCO_GPU_SCHEDULE_CONTIGUOUS == (int)BLCO_CUDA_SCHEDULE_CONTIGUOUS &&
                   (int)BLCO_GPU_SCHEDULE_INTERLEAVED == (int)BLCO_CUDA_SCHEDULE_INTERLEAVED,
               "the stream's schedules are the kernel's");

/* This pass's chunk schedule, for an MTTKRP pass of the register kernel (else 0: the
 * hierarchical and TTM kernels have one): the one forced, or with auto the mode's first
 * not yet measured (contiguous, then interleaved), then the one whose kernels took less
 * time a nonzero. Every pass but the stream's first is a sample of its schedule (averaged
 * with the earlier ones, so a chosen schedule that turns out slower gives way): the first's
 * batches become resident while others are copied to the device. The kernels of both are
 * loaded before either is timed. */
static int pick_schedule(gpu_pipe_t *g, blco_diag_t *diag)
{
    g->pass_sched = 0;
    g->pass_sample = 0;
    if (g->ttm || !(g->pass_fixed || gpu_pipe_kernel(g) == BLCO_CUDA_KERNEL_REGISTER))
        return 0;
    const int m = g->mode, *n = g->sched_n[m];
    if (g->o.gpu_schedule != BLCO_GPU_SCHEDULE_AUTO) {
        g->pass_sched = g->o.gpu_schedule;
        return 0;
    }
    if (!n[0] || !n[1])
        g->pass_sched = n[0] ? BLCO_CUDA_SCHEDULE_INTERLEAVED : BLCO_CUDA_SCHEDULE_CONTIGUOUS;
    else
        g->pass_sched = g->sched_cost[m][1] < g->sched_cost[m][0] ? BLCO_CUDA_SCHEDULE_INTERLEAVED
                                                                  : BLCO_CUDA_SCHEDULE_CONTIGUOUS;
    g->pass_sample = !g->filling;
    const unsigned bit = g->rank > 32 ? 2u : 1u;
    if (g->warmed & bit)
        return 0;
    for (int i = 0; i < g->ndev; i++) {
        int err = blco_cuda_mttkrp_warm(g->dev[i].ctx, g->sh.layout->order, g->rank, diag);
        if (err < 0)
            return err;
    }
    g->warmed |= bit;
    return 0;
}

/* After a pass: its schedule counted, and with auto its kernels' time a nonzero averaged
 * into the schedule's (said once both are measured). */
static void note_schedule(gpu_pipe_t *g)
{
    if (!g->pass_sched)
        return;
    const int m = g->mode, k = g->pass_sched == BLCO_CUDA_SCHEDULE_INTERLEAVED;
    g->sched_passes[m][k]++;
    double busy = 0, nnz = 0;
    for (int i = 0; i < g->ndev; i++) {
        busy += g->dev[i].mt_pass;
        nnz += (double)g->dev[i].nnz_pass;
    }
    if (!g->pass_sample || !(nnz > 0) || !(busy > 0))
        return;
    const double c = busy / nnz;
    int *n = g->sched_n[m];
    const int both = n[0] && n[1];
    g->sched_cost[m][k] = n[k] ? 0.5 * (g->sched_cost[m][k] + c) : c;
    n[k]++;
    if (!both && n[0] && n[1])
        blco_log(BLCO_LOG_INFO,
                 "mode %d on the GPU%s: the %s chunk schedule (kernels %.3g ns a nonzero "
                 "contiguous, %.3g interleaved, measured on this run)",
                 m + 1, g->ndev > 1 ? "s" : "",
                 g->sched_cost[m][1] < g->sched_cost[m][0] ? "interleaved" : "contiguous",
                 g->sched_cost[m][0] * 1e9, g->sched_cost[m][1] * 1e9);
}

int gpu_pipe_begin(gpu_pipe_t *g, const gpu_pass_t *p, blco_diag_t *diag)
{
    const double *const *factors = p->factors;
    g->mode = p->mode;
    g->rank = p->rank;
    g->ttm = p->ranks != NULL;
    g->rowmap = p->rowmap;
    g->rows = p->rows;
    g->dev_factors = p->dev_factors;
    g->keep_out = p->keep_out;
    g->out_fresh = p->out_fresh && !g->hybrid;
    g->pass_fixed = p->dev_factors && p->keep_out && !p->ranks && g->bound_fixed && !g->hybrid
                        ? g->fixed_scale
                        : 0;
    g->pass_cpu0 = g->cpu_batches;
    g->P = 0;
    if (g->ttm) {
        memcpy(g->ranks, p->ranks, (size_t)g->sh.layout->order * sizeof *g->ranks);
        g->P = blco_ttm_cols(g->sh.layout->order, g->ranks, g->mode);
    }
    int err;
    for (uint64_t b = 0; b < g->sh.nbatches; b++)
        g->host_s[b] = 0;
    for (int i = 0; i < g->ndev; i++)
        g->dev[i].nnz_pass = 0;
    plan_hybrid(g);
    if ((err = pick_schedule(g, diag)) < 0)
        return err;
    /* A TTM pass over device factors (stream/tucker_gpu.c) reads ranks[m] <= the bound rank
     * columns of each. */
    int rank_max = g->rank;
    for (int m = 0; g->ttm && m < g->sh.layout->order; m++)
        rank_max = m == g->mode || rank_max >= g->ranks[m] ? rank_max : g->ranks[m];
    if (g->dev_factors && (g->ttm ? g->bound_rank < rank_max : g->bound_rank != g->rank))
        return blco_diag_set(diag, 0, -EINVAL, "device factors of rank %d, a pass of rank %d",
                             g->bound_rank, rank_max);
    const double t_begin = blco_now();
    g->pass_t0 = t_begin;
    uint64_t fsum[BLCO_MAX_MODES];
    factor_sums(g, factors, fsum);
    const double t_sums = blco_now();
    trace_phase(g, "factor checksums", t_begin, t_sums);
    for (int i = 0; i < g->ndev; i++) {
        gdev_t *d = &g->dev[i];
        d->nspans = 0;
        d->used_events = 0;
        if (!(d->t0 = new_event(d, &err)))
            return cuda_err(diag, err, d, "events");
        if ((err = upload_factors(g, d, factors, fsum, diag)) < 0)
            return err;
        if ((err = blco_cuda_event_record(d->ctx, d->t0, d->copy)) < 0 ||
            (err = blco_cuda_event_sync(d->ctx, d->t0)) < 0)
            return cuda_err(diag, err, d, "events");
        d->host_t0 = blco_now();
    }
    g->feed_t0 = blco_now();
    g->host_begin_s += g->feed_t0 - t_begin;
    trace_phase(g, "factors sent, outputs zeroed", t_sums, g->feed_t0);
    /* The batches the devices hold: their kernels first, no copy. */
    if (!g->filling)
        for (uint64_t b = 0; b < g->sh.nbatches; b++)
            if (g->res[b].dev >= 0 && (err = launch(g, &g->dev[g->res[b].dev], b, &g->res[b].d,
                                                    NULL, NULL, NULL, diag)) < 0)
                return err;
    return 0;
}

int gpu_pipe_kernel(const gpu_pipe_t *g)
{
    int k = blco_cuda_kernel_choice(g->dev[0].ctx, g->sh.layout->dims[g->mode], g->rank, NULL);
    return k < 0 ? BLCO_CUDA_KERNEL_REGISTER : k;
}

int gpu_pipe_settled(const gpu_pipe_t *g)
{
    return !g->filling;
}

int gpu_pipe_wants(const gpu_pipe_t *g, uint64_t b)
{
    return g->filling || g->res[b].dev < 0;
}

int gpu_pipe_stage(gpu_pipe_t *g, uint64_t **idx, double **val, blco_diag_t *diag)
{
    stage_t *s = &g->stage[g->next_stage];
    g->cur_stage = g->next_stage;
    g->next_stage = (g->next_stage + 1) % g->nstage;
    /* A staging buffer is refilled only after its copy to the device completed. */
    if (s->dev) {
        blco_cuda_range_push("wait for a staging buffer");
        double t0 = blco_now();
        int err = blco_cuda_event_sync(s->dev->ctx, s->copied);
        blco_stat_add(&g->st->wait_ns[BLCO_STAGE_DECODE], (uint64_t)((blco_now() - t0) * 1e9));
        blco_cuda_range_pop();
        if (err < 0)
            return cuda_err(diag, err, s->dev, "waiting for a copy");
        s->dev = NULL;
    }
    const uint64_t nseg = g->sh.max_batch_segs;
    *idx = (uint64_t *)(s->mem + off_idx(g, nseg));
    *val = (double *)(s->mem + off_val(g, nseg, g->sh.max_batch_nnz));
    return 0;
}

/* The device to take the next batch: the one with the fewest batches in flight (a faster
 * device drains its buffers sooner and so takes more). NULL when every buffer of every
 * device is busy and `nowait`. */
static gdev_t *pick_device(gpu_pipe_t *g, uint64_t b, int *err)
{
    if (g->hybrid && g->cpu_take[b])
        return NULL; /* the pass's plan gives it to the CPU */
    const int nowait = 0;
    gdev_t *best = NULL;
    int best_busy = NBUF_MAX + 1;
    /* Ties go round the devices, so equally fast ones share the batches. */
    for (int k = 0; k < g->ndev; k++) {
        gdev_t *d = &g->dev[(g->next_dev + k) % g->ndev];
        int busy = 0;
        for (int j = 0; j < d->nbuf; j++) {
            if (!d->buf[j].used)
                continue;
            int r = blco_cuda_event_done(d->ctx, d->buf[j].done);
            if (r < 0) {
                *err = r;
                return NULL;
            }
            busy += r == 0;
        }
        if (busy < best_busy) {
            best = d;
            best_busy = busy;
        }
    }
    if (nowait && best && best_busy >= best->nbuf)
        return NULL;
    if (best)
        g->next_dev = (int)(best - g->dev + 1) % g->ndev;
    return best;
}

static int submit(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, blco_diag_t *diag);

/* The segment tables of batch v (starts, then block coordinates) at the head of staging s. */
static void stage_tables(const gpu_pipe_t *g, stage_t *s, const blco_tensor_t *v)
{
    const uint64_t nseg = v->nblocks;
    const int order = g->sh.layout->order;
    uint64_t *hs = (uint64_t *)s->mem, *hc = (uint64_t *)(s->mem + off_coord(g, nseg));
    for (uint64_t i = 0; i < nseg; i++) {
        hs[i] = v->blocks[i].start;
        memcpy(hc + i * order, v->blocks[i].coord, (size_t)order * 8);
    }
    hs[nseg] = v->nnz;
}

/* Where batch b of v goes on device d: memory the device keeps across passes (*db) while
 * the first pass fills it and room remains, else the next streaming buffer, used only after
 * its last kernel. `encoded`: a streaming buffer is taken in any case (*sb), for the
 * stored bytes the decoder reads. */
static int take_buffers(gpu_pipe_t *g, gdev_t *d, uint64_t b, const blco_tensor_t *v,
                        int encoded, dbatch_t **sb, dbatch_t **db, blco_diag_t *diag)
{
    const uint64_t need = batch_bytes(g, v->nblocks, v->nnz);
    resident_t *r = &g->res[b];
    *sb = *db = NULL;
    if (g->filling && g->o.residency != BLCO_RESIDENT_NONE && need <= d->res_room) {
        if (alloc_dbatch(d, need, &r->d, NULL) == 0) {
            r->dev = (int)(d - g->dev);
            d->res_room -= need;
            d->res_batches++;
            d->res_bytes += need;
            *db = &r->d;
        } else {
            g->res_refused++; /* streamed instead, every pass */
        }
    }
    if (!*db || encoded) {
        dbatch_t *x = &d->buf[d->next_buf];
        d->next_buf = (d->next_buf + 1) % d->nbuf;
        int err;
        if (x->used && (err = blco_cuda_stream_wait_event(d->ctx, d->copy, x->done)) < 0)
            return cuda_err(diag, err, d, "ordering the streams");
        *sb = x;
        if (!*db)
            *db = x;
    }
    (*db)->nseg = v->nblocks;
    (*db)->nnz = v->nnz;
    (*db)->maxseg = 0;
    for (uint64_t i = 0; i < v->nblocks; i++)
        (*db)->maxseg = BLCO_MAX((*db)->maxseg, v->blocks[i].nnz);
    return 0;
}

int gpu_pipe_submit(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, blco_diag_t *diag)
{
    blco_cuda_range_push("queue copy + kernel");
    int r = submit(g, b, v, diag);
    blco_cuda_range_pop();
    return r;
}

static int submit(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, blco_diag_t *diag)
{
    stage_t *s = &g->stage[g->cur_stage];
    int err = 0;
    gdev_t *d = pick_device(g, b, &err);
    if (err < 0)
        return cuda_err(diag, err, &g->dev[0], "querying events");
    if (!d) {
        g->cpu_batches++;
        blco_stat_add(&g->st->cpu_batches, 1);
        return 1;
    }
    /* The segment tables beside the decoded nonzeros, then the copies. */
    const uint64_t nseg = v->nblocks, nnz = v->nnz, maxseg = g->sh.max_batch_segs;
    stage_tables(g, s, v);
    const uint8_t *hidx = s->mem + off_idx(g, maxseg);
    const uint8_t *hval = s->mem + off_val(g, maxseg, g->sh.max_batch_nnz);
    dbatch_t *sb, *db;
    if ((err = take_buffers(g, d, b, v, 0, &sb, &db, diag)) < 0)
        return err;
    void *c0 = new_event(d, &err), *c1 = c0 ? new_event(d, &err) : NULL;
    if (!c1)
        return cuda_err(diag, err, d, "events");
    uint8_t *dm = db->mem;
    if ((err = blco_cuda_event_record(d->ctx, c0, d->copy)) < 0 ||
        (err = blco_cuda_copy_to_device_async(d->ctx, dm, s->mem, off_idx(g, nseg), d->copy)) < 0 ||
        (err = blco_cuda_copy_to_device_async(d->ctx, dm + off_idx(g, nseg), hidx, nnz * 8,
                                              d->copy)) < 0 ||
        (err = blco_cuda_copy_to_device_async(d->ctx, dm + off_val(g, nseg, nnz), hval, nnz * 8,
                                              d->copy)) < 0 ||
        (err = blco_cuda_event_record(d->ctx, c1, d->copy)) < 0 ||
        (err = blco_cuda_event_record(d->ctx, db->copied, d->copy)) < 0)
        return cuda_err(diag, err, d, "copying a batch to the device");
    s->dev = d;
    s->copied = db->copied;
    const uint64_t copied = off_idx(g, nseg) + 16 * nnz;
    gpu_pipe_count(g, (int)(d - g->dev), 0, BLCO_XFER_TENSOR, copied);
    if ((err = add_span(d, b, 0, 0, c0, c1)) < 0)
        return err;
    g->host_decoded++;
    return launch(g, d, b, db, db->copied, NULL, NULL, diag);
}

/* ---- encoded batches ---- */

int gpu_pipe_encoded(const gpu_pipe_t *g, uint64_t b)
{
    return g->sh.enc && g->sh.enc[b];
}

int gpu_pipe_numa_node(const gpu_pipe_t *g)
{
    return g->ndev ? g->dev[0].info.numa_node : -1;
}

int gpu_pipe_register_ring(gpu_pipe_t *g, void *ring, uint64_t bytes, int nslots,
                           uint64_t slot_bytes)
{
    if (!g->enc_any || !ring || nslots < 1)
        return 0;
    g->hold_dev = calloc((size_t)nslots, sizeof *g->hold_dev);
    g->hold_ev = calloc((size_t)nslots, sizeof *g->hold_ev);
    if (!g->hold_dev || !g->hold_ev)
        return -ENOMEM;
    int err = blco_cuda_host_register(g->dev[0].ctx, ring, bytes);
    if (err < 0)
        return err;
    g->ring = ring;
    g->ring_bytes = bytes;
    g->nslots = nslots;
    g->slot_bytes = slot_bytes;
    return 0;
}

int gpu_pipe_slot_free(gpu_pipe_t *g, int slot, int block)
{
    if (!g->hold_dev || slot < 0 || slot >= g->nslots || !g->hold_dev[slot])
        return 1;
    gdev_t *d = g->hold_dev[slot];
    int r = block ? blco_cuda_event_sync(d->ctx, g->hold_ev[slot]) : 1;
    if (r >= 0 && !block)
        r = blco_cuda_event_done(d->ctx, g->hold_ev[slot]);
    else if (r >= 0)
        r = 1;
    if (r == 1)
        g->hold_dev[slot] = NULL;
    return r;
}

int gpu_pipe_register_resident(gpu_pipe_t *g, void *p, uint64_t bytes)
{
    if (!g || !g->enc_any || !g->ndev || !p || !bytes)
        return 0;
    gpu_pipe_unregister_resident(g);
    int err = blco_cuda_host_register(g->dev[0].ctx, p, bytes);
    if (err < 0)
        return err;
    g->hres = p;
    g->hres_bytes = bytes;
    return 1;
}

void gpu_pipe_unregister_resident(gpu_pipe_t *g)
{
    if (!g || !g->hres)
        return;
    /* No copy may still read the pages: every device's copy stream drained first. */
    for (int i = 0; i < g->ndev; i++)
        (void)blco_cuda_stream_sync(g->dev[i].ctx, g->dev[i].copy);
    (void)blco_cuda_host_unregister(g->dev[0].ctx, g->hres);
    g->hres = NULL;
    g->hres_bytes = 0;
}

static void drop_holds(gpu_pipe_t *g)
{
    for (int i = 0; g->hold_dev && i < g->nslots; i++)
        g->hold_dev[i] = NULL;
}

/* What the host checks of a segment bound for the device decoder: the table's word on
 * codecs, column sizes and index width, and the block coordinates (the kernel checks the
 * bytes). */
static int check_segment(const gpu_pipe_t *g, uint64_t si, const blco_segment_t *sg,
                         const uint64_t *coord, blco_diag_t *diag)
{
    const uint64_t n = sg->nnz;
    const int ic = sg->index_codec, vc = sg->value_codec;
    const uint64_t head = vc == BLCO_VCODEC_DEC ? 16 : 8; /* (scale and) base */
    const char *why = NULL;
    if (sg->raw_index_bits != (uint32_t)g->index_bits)
        why = "its index width disagrees with the layout";
    else if ((ic == BLCO_ICODEC_RAW && sg->index_bytes != 8 * n) ||
             (ic == BLCO_ICODEC_NARROW && (sg->index_bytes != 4 * n || g->index_bits > 32)) ||
             (ic == BLCO_ICODEC_DELTA && sg->index_bytes < 8))
        why = "its index column has the wrong size for its codec";
    else if (((vc == BLCO_VCODEC_F64 || vc == BLCO_VCODEC_F64_PLANES) &&
              sg->value_bytes != 8 * n) ||
             ((vc == BLCO_VCODEC_F32 || vc == BLCO_VCODEC_F32_PLANES) && sg->value_bytes != 4 * n) ||
             ((vc == BLCO_VCODEC_INT || vc == BLCO_VCODEC_DEC) &&
              (sg->value_bytes < head || sg->value_bytes - head < (n + BLCO_INT_FRAME - 1) / BLCO_INT_FRAME)))
        why = "its value column has the wrong size for its codec";
    for (int m = 0; !why && m < g->sh.layout->order; m++)
        if (coord[m] >= g->sh.layout->dims[m])
            why = "a coordinate lies outside the dims";
    if (!why)
        return 0;
    return blco_diag_set(diag, 0, -BLCO_EFORMAT, "%s: segment %llu: undecodable: %s",
                         g->sh.path ? g->sh.path : "", (unsigned long long)si, why);
}

static int submit_enc(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, uint64_t s0,
                      const uint8_t *stored, int *held, blco_diag_t *diag);

int gpu_pipe_submit_encoded(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, uint64_t s0,
                            const uint8_t *stored, int *held, blco_diag_t *diag)
{
    blco_cuda_range_push("queue copy + decode + kernel");
    int r = submit_enc(g, b, v, s0, stored, held, diag);
    blco_cuda_range_pop();
    return r;
}

/* 1 when [p, p + n) lies in the page-locked area [base, base + bytes) (base NULL: none). */
static int inside(const uint8_t *p, uint64_t n, const uint8_t *base, uint64_t bytes)
{
    return base && p >= base && p + n <= base + bytes;
}

static int submit_enc(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, uint64_t s0,
                      const uint8_t *stored, int *held, blco_diag_t *diag)
{
    *held = 0;
    stage_t *s = &g->stage[g->cur_stage];
    const uint64_t nseg = v->nblocks, nnz = v->nnz;
    const int order = g->sh.layout->order;
    int err = 0;
    /* The table's word first: a segment the device cannot decode stops here. */
    blco_cuda_dseg_t *ds = (blco_cuda_dseg_t *)(s->mem + off_idx(g, nseg));
    const uint64_t base = blco_file_segment(g->sh.f, s0)->offset;
    uint64_t frames = 0, bytes = 0, max_nnz = 0;
    for (uint64_t i = 0; i < nseg; i++) {
        const blco_segment_t *sg = blco_file_segment(g->sh.f, s0 + i);
        if ((err = check_segment(g, s0 + i, sg, v->blocks[i].coord, diag)) < 0)
            return err;
        ds[i] = (blco_cuda_dseg_t){
            .icol = sg->offset - base,
            .ibytes = sg->index_bytes,
            .vcol = sg->offset - base + sg->index_bytes,
            .vbytes = sg->value_bytes,
            .first = v->blocks[i].start,
            .nnz = sg->nnz,
            .frames = frames,
            .seg = s0 + i,
            .icodec = sg->index_codec,
            .vcodec = sg->value_codec,
        };
        if (sg->index_codec == BLCO_ICODEC_DELTA && sg->nnz > 1)
            frames += 2 * ((sg->nnz - 1 + BLCO_DELTA_FRAME - 1) / BLCO_DELTA_FRAME);
        max_nnz = BLCO_MAX(max_nnz, sg->nnz);
        bytes = sg->offset - base + sg->index_bytes + sg->value_bytes;
    }
    gdev_t *d = pick_device(g, b, &err);
    if (err < 0)
        return cuda_err(diag, err, &g->dev[0], "querying events");
    if (!d) /* the CPU decodes it, then gpu_pipe_submit gives it to the CPU too */
        return 1;
    stage_tables(g, s, v);
    /* The encoded bytes go to a streaming buffer; decoded, the batch lands there too, or in
     * memory the device keeps across passes. */
    dbatch_t *sb, *db;
    if ((err = take_buffers(g, d, b, v, 1, &sb, &db, diag)) < 0)
        return err;
    /* From the ring slot itself when it is page-locked, or from the host's page-locked
     * resident copy; else through the staging buffer (a memcpy on this thread: on a fast
     * GPU it, not the device, sets the pace). */
    const int direct = inside(stored, bytes, g->ring, g->ring_bytes);
    const int in_hres = !direct && inside(stored, bytes, g->hres, g->hres_bytes);
    const uint8_t *src = stored;
    if (!direct && !in_hres) {
        memcpy(s->mem + stage_enc_off(g), stored, bytes);
        src = s->mem + stage_enc_off(g);
        g->staged_bytes += bytes;
    }
    void *c0 = new_event(d, &err), *c1 = c0 ? new_event(d, &err) : NULL;
    void *hold = c1 && direct ? new_event(d, &err) : NULL;
    if (!c1 || (direct && !hold))
        return cuda_err(diag, err, d, "events");
    uint8_t *sm = sb->mem;
    if ((err = blco_cuda_event_record(d->ctx, c0, d->copy)) < 0 ||
        (err = blco_cuda_copy_to_device_async(d->ctx, db->mem, s->mem, off_idx(g, nseg), d->copy)) <
            0 ||
        (err = blco_cuda_copy_to_device_async(d->ctx, sm + dseg_off(g), ds, nseg * sizeof *ds,
                                              d->copy)) < 0 ||
        (err = blco_cuda_copy_to_device_async(d->ctx, sm + enc_off(g), src, bytes, d->copy)) < 0 ||
        (err = blco_cuda_event_record(d->ctx, c1, d->copy)) < 0 ||
        (err = blco_cuda_event_record(d->ctx, sb->copied, d->copy)) < 0 ||
        (direct && (err = blco_cuda_event_record(d->ctx, hold, d->copy)) < 0))
        return cuda_err(diag, err, d, "copying a batch to the device");
    if (direct) {
        const int slot = (int)((uint64_t)(stored - g->ring) / g->slot_bytes);
        g->hold_dev[slot] = d;
        g->hold_ev[slot] = hold;
        *held = 1;
    }
    s->dev = d;
    s->copied = sb->copied;
    const uint64_t copied = off_idx(g, nseg) + nseg * sizeof *ds + bytes;
    gpu_pipe_count(g, (int)(d - g->dev), 0, BLCO_XFER_TENSOR, copied);
    if ((err = add_span(d, b, 0, 0, c0, c1)) < 0)
        return err;
    blco_cuda_decode_args_t a;
    memset(&a, 0, sizeof a);
    a.seg = (const blco_cuda_dseg_t *)(sm + dseg_off(g));
    a.nseg = nseg;
    a.max_nnz = max_nnz;
    a.enc = sm + enc_off(g);
    a.seg_coord = (const uint64_t *)((uint8_t *)db->mem + off_coord(g, nseg));
    a.to_index = d->dtab;
    a.tbytes = g->tbytes;
    a.index_bits = g->index_bits;
    a.order = order;
    a.value_type = g->sh.f ? blco_file_info(g->sh.f)->value_type : BLCO_VALUES_F64;
    a.frames = (uint64_t *)(sm + frames_off(g));
    a.idx = (uint64_t *)((uint8_t *)db->mem + off_idx(g, nseg));
    a.val = (double *)((uint8_t *)db->mem + off_val(g, nseg, nnz));
    a.error = d->derr;
    for (int m = 0; m < order; m++) {
        a.dims[m] = g->sh.layout->dims[m];
        a.low_mask[m] = g->sh.layout->low_mask[m];
        a.pos[m] = g->sh.layout->pos[m];
    }
    return launch(g, d, b, db, sb->copied, &a, sb, diag);
}

/* One complete event ("ph":"X") of the timeline: `name` of category `cat` on process pid
 * (0 the host, d + 1 GPU d) and thread tid (a stream; on the host, 1 the pass phases), from
 * t0 to t1 seconds as blco_now counts. */
static void trace_write(gpu_pipe_t *g, const char *name, const char *cat, int pid, int tid,
                        double t0, double t1)
{
    fprintf(g->trace,
            "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"pass\":%d,\"mode\":%d,\"schedule\":\"%s\"}}",
            g->trace_first ? "" : ",\n", name, cat, pid, tid, t0 * 1e6, (t1 - t0) * 1e6, g->pass,
            g->mode + 1, g->pass_sched ? blco_gpu_schedule_name(g->pass_sched) : "none");
    g->trace_first = 0;
}

/* `what` of batch b (named "what batch b", of category what). */
static void trace_event(gpu_pipe_t *g, const char *what, uint64_t b, int pid, int tid, double t0,
                        double t1)
{
    char name[64];
    snprintf(name, sizeof name, "%s batch %llu", what, (unsigned long long)b);
    trace_write(g, name, what, pid, tid, t0, t1);
}

/* A phase of the host's work in a pass (--trace), on the host's second row: the whole
 * pass, and in turn its factor checksums, factors sent and outputs zeroed, the batches fed
 * (read, verified, decoded or copied: the first row has them one by one), the wait for the
 * devices, and the outputs brought back. */
static void trace_phase(gpu_pipe_t *g, const char *what, double t0, double t1)
{
    if (g->trace)
        trace_write(g, what, "pass", 0, 1, t0, t1);
}

/* Length of the union of intervals [a[i], b[i]) (sorted by start in place). */
static int cmp_iv(const void *x, const void *y)
{
    const double *p = x, *q = y;
    return (p[0] > q[0]) - (p[0] < q[0]);
}

static double union_len(double (*iv)[2], size_t n)
{
    qsort(iv, n, sizeof *iv, cmp_iv);
    double len = 0, s = 0, e = -1;
    for (size_t i = 0; i < n; i++) {
        if (iv[i][0] > e) {
            if (e > s)
                len += e - s;
            s = iv[i][0];
            e = iv[i][1];
        } else if (iv[i][1] > e) {
            e = iv[i][1];
        }
    }
    if (e > s)
        len += e - s;
    return len;
}

/* Kernel busy time, copy busy time and the kernel time a copy of another batch overlapped,
 * from the device's events; and the pass's timeline into the trace. */
static int account(gpu_pipe_t *g, gdev_t *d)
{
    size_t n = d->nspans;
    double(*t)[2] = malloc((n ? n : 1) * sizeof *t);
    double(*k)[2] = malloc((n ? n : 1) * sizeof *k);
    double(*c)[2] = malloc((n ? n : 1) * sizeof *c);
    if (!t || !k || !c) {
        free(t);
        free(k);
        free(c);
        return -ENOMEM;
    }
    size_t nk = 0, nc = 0, nm = 0;
    for (size_t i = 0; i < n; i++) {
        double a = 0, b = 0;
        int err = blco_cuda_event_elapsed_ms(d->ctx, d->t0, d->spans[i].e0, &a);
        if (err == 0)
            err = blco_cuda_event_elapsed_ms(d->ctx, d->t0, d->spans[i].e1, &b);
        if (err < 0) {
            free(t);
            free(k);
            free(c);
            return err;
        }
        t[i][0] = a;
        t[i][1] = b;
        if (d->spans[i].kind)
            memcpy(k[nk++], t[i], sizeof t[i]);
        else
            memcpy(c[nc++], t[i], sizeof t[i]);
    }
    /* Overlap: each kernel's time covered by copies of other batches. */
    double ov = 0;
    for (size_t i = 0; i < n; i++) {
        if (!d->spans[i].kind)
            continue;
        double lo = t[i][0], hi = t[i][1], cov = 0;
        for (size_t j = 0; j < n; j++) {
            if (d->spans[j].kind || d->spans[j].batch == d->spans[i].batch)
                continue;
            double a = BLCO_MAX(lo, t[j][0]), b = BLCO_MIN(hi, t[j][1]);
            if (b > a)
                cov += b - a;
        }
        ov += BLCO_MIN(cov, hi - lo);
    }
    for (size_t i = 0; g->trace && i < n; i++)
        trace_event(g,
                    d->spans[i].kind == 2 ? "decode"
                    : d->spans[i].kind    ? "kernel"
                                          : "copy",
                    d->spans[i].batch, d->id + 1, d->spans[i].stream, d->host_t0 + t[i][0] * 1e-3,
                    d->host_t0 + t[i][1] * 1e-3);
    {
        double(*all)[2] = malloc((n ? n : 1) * sizeof *all);
        if (!all) {
            free(t);
            free(k);
            free(c);
            return -ENOMEM;
        }
        memcpy(all, t, n * sizeof *t);
        d->busy_pass = union_len(all, n) * 1e-3;
        free(all);
    }
    const double kb = union_len(k, nk) * 1e-3;
    for (size_t i = 0; i < n; i++) /* the MTTKRP (or TTM) kernels alone, in k's room */
        if (d->spans[i].kind == 1)
            memcpy(k[nm++], t[i], sizeof t[i]);
    d->mt_pass = union_len(k, nm) * 1e-3;
    d->kernel_s += kb;
    d->copy_s += union_len(c, nc) * 1e-3;
    d->overlap_s += ov * 1e-3;
    blco_stat_add(&g->st->gpu_kernel_ns, (uint64_t)(kb * 1e9));
    blco_stat_add(&g->st->gpu_overlap_ns, (uint64_t)(ov * 1e6));
    free(t);
    free(k);
    free(c);
    return 0;
}

int gpu_pipe_end(gpu_pipe_t *g, double *out, blco_diag_t *diag)
{
    const uint64_t n = out_bytes(g) / 8;
    const double t_wait = blco_now();
    int err;
    /* Every device's work first: then no copy reads a staging buffer any more, and the
     * outputs come back through them. */
    for (int i = 0; i < g->ndev; i++) {
        gdev_t *d = &g->dev[i];
        for (int c = 0; c < NCOMP; c++)
            if ((err = blco_cuda_stream_sync(d->ctx, d->comp[c])) < 0)
                return cuda_err(diag, err, d, "the MTTKRP kernels");
        if ((err = blco_cuda_stream_sync(d->ctx, d->copy)) < 0)
            return cuda_err(diag, err, d, "the copies");
    }
    for (int i = 0; i < g->nstage; i++)
        g->stage[i].dev = NULL; /* every copy is done */
    const double t_end = blco_now();
    for (int i = 0; i < g->ndev; i++) {
        gdev_t *d = &g->dev[i];
        unsigned long long bad = 0;
        if (d->derr && (err = blco_cuda_copy_to_host(d->ctx, &bad, d->derr, 8)) < 0)
            return cuda_err(diag, err, d, "reading the decoder's verdict");
        if (d->derr)
            gpu_pipe_count(g, i, 1, BLCO_XFER_SMALL, 8);
        if (bad)
            return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                 "%s: segment %llu: undecodable: its index column breaks the "
                                 "codec or names a coordinate outside the dims (found by the "
                                 "decoder on GPU %d)",
                                 g->sh.path ? g->sh.path : "", bad - 1, d->id);
        /* Back through the staging buffers, in pieces (a TTM's Y may be far larger than a
         * staging buffer): the first device's output copied over out when nothing else
         * writes it (out_fresh: the caller did not zero it), else added into it. */
        if (out && n) {
            const int add = !(g->out_fresh && i == 0);
            if ((err = staged_copy(g, d, out, d->dout, n * 8, 1, add, diag)) < 0)
                return err;
            gpu_pipe_count(g, i, 1, BLCO_XFER_OUTPUTS, n * 8);
        }
        if ((err = account(g, d)) < 0)
            return cuda_err(diag, err, d, "timing the pass");
    }
    const double t_close = blco_now();
    g->host_end_s += t_close - t_end;
    trace_phase(g, "batches fed", g->feed_t0, t_wait);
    trace_phase(g, "waiting for the devices", t_wait, t_end);
    trace_phase(g, out && n ? "outputs back" : "pass closed", t_end, t_close);
    trace_phase(g, "pass", g->pass_t0, t_close);
    update_costs(g);
    note_schedule(g);
    drop_holds(g);
    if (g->filling) {
        g->filling = 0;
        g->filled = 1;
        uint64_t held = 0, bytes = 0;
        for (uint64_t b = 0; b < g->sh.nbatches; b++)
            if (g->res[b].dev >= 0) {
                held++;
                bytes += g->res[b].d.bytes;
            }
        char a[32], text[sizeof g->st->residency];
        if (held == g->sh.nbatches)
            snprintf(text, sizeof text, "resident on the GPU%s (%s)", g->ndev > 1 ? "s" : "",
                     blco_format_size(bytes, a, sizeof a));
        else if (held)
            snprintf(text, sizeof text, "partial: %.0f%% of batches on the GPU%s, rest streamed",
                     100.0 * (double)held / (double)g->sh.nbatches, g->ndev > 1 ? "s" : "");
        else
            snprintf(text, sizeof text, "streamed to the GPU%s (%s)", g->ndev > 1 ? "s" : "",
                     g->o.residency == BLCO_RESIDENT_NONE ? "--residency none"
                     : g->res_refused ? "CUDA refused the device memory for it"
                                      : "none fits its memory");
        blco_stats_set_residency(g->st, text);
        blco_stat_set(&g->st->gpu_resident_bytes, bytes);
    }
    g->pass++;
    return 0;
}

uint64_t gpu_pipe_drop_residency(gpu_pipe_t *g)
{
    uint64_t bytes = 0;
    for (uint64_t b = 0; g->res && b < g->sh.nbatches; b++)
        if (g->res[b].dev >= 0)
            bytes += g->res[b].d.bytes;
    free_residency(g);
    return bytes;
}

void gpu_pipe_set_residency(gpu_pipe_t *g, const char *text, uint64_t bytes)
{
    blco_stats_set_residency(g->st, text);
    blco_stat_set(&g->st->gpu_resident_bytes, bytes);
}

void gpu_pipe_range(const char *what)
{
    if (what)
        blco_cuda_range_push(what);
    else
        blco_cuda_range_pop();
}

void gpu_pipe_trace_host(gpu_pipe_t *g, const char *what, uint64_t b, double t0, double t1)
{
    if (g->trace)
        trace_event(g, what, b, 0, 0, t0, t1);
}

void gpu_pipe_abort(gpu_pipe_t *g)
{
    for (int i = 0; i < g->ndev; i++) {
        gdev_t *d = &g->dev[i];
        for (int c = 0; c < NCOMP; c++)
            blco_cuda_stream_sync(d->ctx, d->comp[c]);
        blco_cuda_stream_sync(d->ctx, d->copy);
    }
    for (int i = 0; i < g->nstage; i++)
        g->stage[i].dev = NULL;
    drop_holds(g);
    if (g->filling)
        free_residency(g); /* filled again on the next first pass */
}

void gpu_pipe_stats(const gpu_pipe_t *g, blco_stream_gpu_stats_t *out)
{
    out->ndevices = g->ndev;
    out->cpu_batches = g->cpu_batches;
    out->cpu_share = g->share;
    out->cost_host_gpu = g->cost[g->ttm][0];
    out->cost_device = g->cost[g->ttm][1];
    out->cost_host_cpu = g->cost[g->ttm][2];
    out->host_decoded_batches = g->host_decoded;
    out->ring_pinned = g->ring != NULL;
    out->resident_pinned = g->hres != NULL;
    out->staged_bytes = g->staged_bytes;
    out->host_begin_seconds = g->host_begin_s;
    out->host_end_seconds = g->host_end_s;
    memcpy(out->schedule_passes, g->sched_passes, sizeof out->schedule_passes);
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        for (int k = 0; k < 2; k++)
            out->schedule_cost[m][k] = g->sched_n[m][k] ? g->sched_cost[m][k] : 0;
    for (int i = 0; i < g->ndev; i++) {
        const gdev_t *d = &g->dev[i];
        out->dev[i].device = d->id;
        snprintf(out->dev[i].name, sizeof out->dev[i].name, "%s", d->info.name);
        out->dev[i].emulated = d->info.emulated;
        out->dev[i].batches = d->batches;
        out->dev[i].h2d_bytes = d->h2d_bytes;
        out->dev[i].resident_batches = d->res_batches;
        out->dev[i].resident_bytes = d->res_bytes;
        out->dev[i].factor_uploads_skipped = d->fac_skipped;
        out->dev[i].kernel_seconds = d->kernel_s;
        out->dev[i].copy_seconds = d->copy_s;
        out->dev[i].overlap = d->kernel_s > 0 ? d->overlap_s / d->kernel_s : 0;
        out->dev[i].decode_batches = d->decode_batches;
    }
    for (int i = 0; i < g->ndev; i++) {
        blco_cuda_info_t in;
        if (blco_cuda_info(g->dev[i].ctx, &in) == 0) {
            out->pageable_async_copies = in.pageable_async_copies; /* process-wide */
            out->pageable_copies += in.pageable_copies;
        }
    }
    for (int k = 0; k < BLCO_XFER_KINDS; k++) {
        out->h2d_kind[k] = blco_stat_get(&g->st->gpu_h2d_kind[k]);
        out->d2h_kind[k] = blco_stat_get(&g->st->gpu_d2h_kind[k]);
    }
    out->peer_bytes = blco_stat_get(&g->st->gpu_peer_bytes);
}

/* ---- CP-ALS with the factors on the devices ---- */

int gpu_pipe_ndev(const gpu_pipe_t *g)
{
    return g->ndev;
}

int gpu_pipe_hybrid(const gpu_pipe_t *g)
{
    return g->hybrid;
}

blco_cuda_t *gpu_pipe_ctx(const gpu_pipe_t *g, int dev)
{
    return g->dev[dev].ctx;
}

void *gpu_pipe_dense_stream(const gpu_pipe_t *g, int dev)
{
    return g->dev[dev].comp[0];
}

double *gpu_pipe_factor(const gpu_pipe_t *g, int dev, int m)
{
    return g->dev[dev].dfac[m];
}

double *gpu_pipe_output(const gpu_pipe_t *g, int dev)
{
    return g->dev[dev].dout;
}

/* Makes *p at least `bytes` of device memory (its contents are lost when it grows). */
static int ensure(gdev_t *d, double **p, uint64_t *have, uint64_t bytes, const char *what,
                  blco_diag_t *diag)
{
    if (*have >= bytes)
        return 0;
    blco_cuda_free(d->ctx, *p, *have);
    *p = NULL;
    *have = 0;
    int err = blco_cuda_alloc(d->ctx, bytes, (void **)p, diag);
    if (err < 0)
        return cuda_err(diag, err, d, what);
    *have = bytes;
    return 0;
}

void gpu_pipe_set_fixed(gpu_pipe_t *g, double scale)
{
    g->fixed_scale = scale > 0 && isfinite(scale) ? scale : 0;
}

int gpu_pipe_bind_factors(gpu_pipe_t *g, int rank, uint64_t extra, int fixed, blco_diag_t *diag)
{
    fixed = fixed && !g->hybrid;
    const blco_layout_t *l = g->sh.layout;
    uint64_t fac = 0, maxrows = 0;
    for (int m = 0; m < l->order; m++) {
        fac += l->dims[m] * (uint64_t)rank * 8;
        maxrows = BLCO_MAX(maxrows, l->dims[m]);
    }
    const uint64_t out = maxrows * (uint64_t)rank * 8;
    for (int i = 0; i < g->ndev; i++) {
        gdev_t *d = &g->dev[i];
        /* Device 0 also adds the others' outputs (and a hybrid pass's CPU share); the
         * deterministic outputs take twice as much again. */
        const uint64_t peer = i == 0 && (g->ndev > 1 || g->hybrid) ? (fixed ? 2 : 1) * out : 0;
        const uint64_t fix = fixed ? 2 * out : 0;
        const uint64_t total = fac + out + extra + peer + fix;
        const uint64_t excess = total > d->reserve ? total - d->reserve : 0;
        if (excess > d->excess) {
            if (excess - d->excess > d->res_room) {
                char a[32], b[32];
                return blco_diag_set(
                    diag, 0, -BLCO_EDEVMEM,
                    "GPU %d (%s): CP-ALS at rank %d keeps the factors, the MTTKRP output and the "
                    "dense steps' scratch on the device: %llu bytes (%s), %s available; raise "
                    "--gpu-mem-limit",
                    d->id, d->info.name, rank, (unsigned long long)total,
                    blco_format_size(total, a, sizeof a),
                    blco_format_size(d->reserve + d->excess + d->res_room, b, sizeof b));
            }
            d->res_room -= excess - d->excess;
            d->excess = excess;
        }
        d->bound_other = extra + peer + fix;
        int err;
        for (int m = 0; m < l->order; m++) {
            d->dfac_sum[m] = 0; /* whatever a host-factor pass uploaded is gone */
            if ((err = ensure(d, &d->dfac[m], &d->dfac_bytes[m], l->dims[m] * (uint64_t)rank * 8,
                              "factor matrices", diag)) < 0)
                return err;
        }
        if ((err = ensure(d, &d->dout, &d->dout_bytes, BLCO_MAX(out, 8), "the output", diag)) <
                0 ||
            (peer && !fixed &&
             (err = ensure(d, &d->dpeer, &d->dpeer_bytes, peer, "the outputs' sum", diag)) < 0) ||
            (peer && fixed &&
             (err = ensure(d, &d->dpfix, &d->dpfix_bytes, peer, "the outputs' sum", diag)) < 0) ||
            (fix && (err = ensure(d, &d->dfix, &d->dfix_bytes, fix, "the deterministic output",
                                  diag)) < 0))
            return err;
    }
    g->bound_rank = rank;
    g->bound_fixed = fixed;
    return 0;
}

int gpu_pipe_take_room(gpu_pipe_t *g, int dev, uint64_t bytes)
{
    gdev_t *d = &g->dev[dev];
    if (bytes > d->res_room)
        return -BLCO_EDEVMEM;
    d->res_room -= bytes;
    return 0;
}

void gpu_pipe_give_room(gpu_pipe_t *g, int dev, uint64_t bytes)
{
    g->dev[dev].res_room += bytes;
}

uint64_t gpu_pipe_room(const gpu_pipe_t *g, int dev)
{
    return g->dev[dev].res_room;
}

int gpu_pipe_collect(gpu_pipe_t *g, const double *host_part, blco_diag_t *diag)
{
    gdev_t *d0 = &g->dev[0];
    void *st = d0->comp[0];
    const uint64_t n = out_bytes(g) / 8;
    int err;
    if (g->pass_fixed) {
        /* The devices' integers added in any order give the same sum; one conversion. */
        for (int i = 1; i < g->ndev; i++) {
            if ((err = blco_cuda_copy_peer_async(d0->ctx, d0->dpfix, g->dev[i].dfix, n * 16,
                                                 st)) < 0)
                return cuda_err(diag, err, d0, "adding up the devices' outputs");
            gpu_pipe_count_peer(g, n * 16);
            if ((err = blco_cuda_fixed_add(d0->ctx, (unsigned long long *)d0->dfix,
                                           (const unsigned long long *)d0->dpfix, n, st, diag)) < 0)
                return err;
        }
        if ((err = blco_cuda_fixed_to_double(d0->ctx, d0->dout,
                                             (const unsigned long long *)d0->dfix, n,
                                             1.0 / g->pass_fixed, st, diag)) < 0 ||
            (err = blco_cuda_stream_sync(d0->ctx, st)) < 0)
            return cuda_err(diag, err, d0, "the deterministic output");
        return 0;
    }
    /* A TTM's Y may be larger than the MTTKRP output gpu_pipe_bind_factors sized it for. */
    if ((g->ndev > 1 || host_part) &&
        (err = ensure(d0, &d0->dpeer, &d0->dpeer_bytes, BLCO_MAX(n * 8, 8), "the outputs' sum",
                      diag)) < 0)
        return err;
    for (int i = 1; i < g->ndev; i++) {
        if ((err = blco_cuda_copy_peer_async(d0->ctx, d0->dpeer, g->dev[i].dout, n * 8, st)) < 0)
            return cuda_err(diag, err, d0, "adding up the devices' outputs");
        gpu_pipe_count_peer(g, n * 8);
        if ((err = blco_cuda_add(d0->ctx, d0->dout, d0->dpeer, n, st, diag)) < 0)
            return err;
    }
    if (host_part && g->cpu_batches > g->pass_cpu0) { /* the CPU computed some batches */
        if ((err = blco_cuda_stream_sync(d0->ctx, st)) < 0)
            return cuda_err(diag, err, d0, "adding the CPU's share");
        if ((err = staged_copy(g, d0, d0->dpeer, host_part, n * 8, 0, 0, diag)) < 0)
            return err;
        gpu_pipe_count(g, 0, 0, BLCO_XFER_OUTPUTS, n * 8);
        if ((err = blco_cuda_add(d0->ctx, d0->dout, d0->dpeer, n, st, diag)) < 0)
            return err;
    }
    if ((err = blco_cuda_stream_sync(d0->ctx, st)) < 0)
        return cuda_err(diag, err, d0, "adding up the outputs");
    return 0;
}

int gpu_pipe_copy(gpu_pipe_t *g, int dev, void *dst, const void *src, uint64_t bytes, int dir,
                  int kind, blco_diag_t *diag)
{
    int err = staged_copy(g, &g->dev[dev], dst, src, bytes, dir, 0, diag);
    if (err == 0)
        gpu_pipe_count(g, dev, dir, kind, bytes);
    return err;
}

int gpu_pipe_put_factor(gpu_pipe_t *g, int m, const void *src, uint64_t bytes,
                        blco_diag_t *diag)
{
    for (int i = 0; i < g->ndev; i++) {
        int err = gpu_pipe_copy(g, i, gpu_pipe_factor(g, i, m), src, bytes, 0, BLCO_XFER_FACTORS,
                                diag);
        if (err < 0)
            return err;
    }
    return 0;
}
