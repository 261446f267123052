/* The streaming engine (ARCHITECTURE §6-8): MTTKRP over a .blco file through a ring of
 * reused slots. The main thread keeps reads in flight into every free slot, then for each
 * batch of consecutive segments verifies and decodes them with all threads and runs the CPU
 * kernel on them, accumulating into the output. Segments that fit the budget stay resident
 * after the first pass (decoded when the whole tensor fits decoded, else as stored bytes). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "blco_internal.h"
#include "codec.h"
#include "engine_gpu.h"
#if HAVE_CUDA_EMULATION
#include "gpu/emu/emu_api.h"
#endif

#define MiB (1ull << 20)
/* Default slot: large enough for 2-4 requests of the reader in flight per slot. */
#define SLOT_DEFAULT (8 * MiB)
#define NSLOTS_DEFAULT 4
/* slot_batch of a slot a GPU's copy may still read from */
#define SLOT_HELD (-2)
/* Decoded nonzeros per batch by default (16 bytes each). */
#define BATCH_NNZ_DEFAULT (1ull << 20)
/* Memory the engine's small allocations (tables, decoders, reader) may take outside the
 * budget is not counted; this much of the budget is left for the kernel's private buffers
 * when the residency is chosen, at most a quarter of what is free. */
#define HUGE_PAGE (2ull << 20)

typedef struct batch {
    uint64_t s0, s1;     /* segments [s0, s1) */
    uint64_t off, bytes; /* their bytes on disk, contiguous */
    uint64_t first_nnz, nnz;
} batch_t;

enum { RES_NONE = 0, RES_STORED, RES_DECODED };

struct blco_stream {
    char *path;
    blco_file_t *f;
    const blco_file_info_t *info;
    blco_stream_opts_t o;
    blco_budget_t *budget;
    blco_stats_t *st;
    blco_stats_t own_stats;
    int nt;

    /* slots: stored bytes of one batch each */
    int nslots;
    uint64_t slot_bytes;
    uint64_t data_bytes; /* bytes of all segments on disk */
    uint64_t seg0, seg1; /* the segments streamed: all, or opts' seg_begin..seg_end */
    uint64_t nnz;        /* their nonzeros */
    int opened;            /* blco_stream_open has returned */
    uint64_t used_at_open; /* budget in use then: later growth is the caller's */
    uint8_t *ring;
    size_t ring_bytes;
#if HAVE_CUDA_EMULATION
    char emu_why[240]; /* the emulation's guard a slot's refill ran into */
#endif
    int *slot_batch; /* batch held by each slot, -1 when free */

    /* decoded nonzeros of the batch being computed */
    uint64_t cap_nnz;
    uint64_t *dec_idx;
    double *dec_val;
    size_t dec_bytes;
    uint64_t max_batch_segs;
    blco_block_t *vblocks;

    batch_t *batches;
    uint64_t nbatches;
    uint8_t *bstate; /* per batch in a pass: 0 idle, 1 reading, 2 read */
    int64_t *bresult;
    int *bslot;

    blco_aio_t *aio;
    blco_decoder_t **dec;
    int ndec;

    /* residency */
    int res_decided, res_kind, res_filled;
    /* The values' sum of squares over the first complete pass, in file order (the
     * header's norm2 against the data: blco_stream_data_norm2). norm_state: 0 counting,
     * 1 complete, -1 unknown (batches decoded on a GPU). */
    double norm_sum;
    uint64_t norm_batches;
    int norm_state;
    uint64_t res_batches; /* batches [0, res_batches) are resident */
    uint64_t res_dec_batches; /* of which [0, res_dec_batches) decoded (RES_STORED: a decoded
                                 prefix, the rest of the resident batches stored) */
    uint64_t res_stored_off;  /* file offset of the first stored-resident byte */
    uint8_t *res_stored;
    size_t res_stored_bytes;
    uint64_t *res_idx;
    double *res_val;
    size_t res_dec_bytes;
    blco_block_t *all_blocks;
    blco_tensor_t res_view;
    uint8_t *enc; /* per batch: 1 when it goes to the GPUs encoded (device decode) */

    blco_mt_scratch_t scratch;
    /* The disk's view: busy while any read is in flight, idle (waiting for a free slot)
     * when none is and batches remain to be read. */
    double busy_since, idle_since;
    uint64_t next_read, end_read;
    /* Reads already in flight for the next pass: it starts at pf_next. */
    int pf_valid;
    uint64_t pf_next;
    /* Huge-page copies of the factors, kept across passes. */
    void *stage_raw;
    size_t stage_bytes;
    volatile sig_atomic_t cancel;
    int plain; /* stream_mttkrp_plain's call: no fiber copies, factors read where they are */
    gpu_pipe_t *gpu; /* backend cuda or hybrid */
    unsigned kernels[BLCO_MAX_MODES]; /* per mode, a bit per kernel its last pass ran */
    /* Fiber copies of a tensor held in memory (o.fibers): per mode the copy, and whether it
     * is used (FIB_USE), not used (FIB_BLCO) or not decided yet. */
    blco_fibers_t *fib[BLCO_MAX_MODES];
    char fib_state[BLCO_MAX_MODES + 1];
    char kname[48];
    /* CP-ALS's state on the devices (stream/cpd_gpu.c), freed at close */
    void *cpd;
    void (*cpd_destroy)(void *);
    char numa[96]; /* where the ring's pages live (blco_topo_bind_area) */
    char desc[1400];
};

void blco_stream_gpu_stats(const blco_stream_t *s, blco_stream_gpu_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (s && s->gpu)
        gpu_pipe_stats(s->gpu, out);
}

void blco_stream_opts_default(blco_stream_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->io_backend = BLCO_IO_AUTO;
    o->direct = 1;
    o->kernel = BLCO_CPU_KERNEL_AUTO;
    o->residency = BLCO_RESIDENT_AUTO;
}

const blco_file_info_t *blco_stream_info(const blco_stream_t *s)
{
    return s->info;
}
const char *blco_stream_describe(const blco_stream_t *s)
{
    return s->desc;
}
void blco_stream_cancel(blco_stream_t *s)
{
    s->cancel = 1;
}

/* Bits of s->kernels[] for the GPU kernels, beside the CPU's (1 << enum blco_cpu_kernel). */
#define GPU_KERNEL_BIT(k) (1u << (8 + (k)))
#define FIBERS_BIT (1u << 30)
#define GPU_FIBERS_BIT (1u << 29) /* CP-ALS's fiber copies on the GPUs (stream/cpd_gpu.c) */
#define GPU_SORTED_BIT (1u << 28) /* and its copies sorted by the mode */
/* fib_state[] letters (blco_stream_fibers): undecided, the copy used, the BLCO kernel. */
#define FIB_UNDECIDED '?'
#define FIB_USE 'f'
#define FIB_BLCO 'b'

const char *blco_stream_kernel_name(const blco_stream_t *s, int mode)
{
    if (!s || mode < 0 || mode >= s->info->layout.order)
        return "none";
    unsigned k = s->kernels[mode];
    unsigned priv = 1u << BLCO_CPU_KERNEL_PRIVATE, atom = 1u << BLCO_CPU_KERNEL_ATOMIC,
             own = 1u << BLCO_CPU_KERNEL_OWNER;
    unsigned reg = GPU_KERNEL_BIT(BLCO_CUDA_KERNEL_REGISTER),
             hier = GPU_KERNEL_BIT(BLCO_CUDA_KERNEL_HIERARCHICAL);
    const char *cpu = (k & (priv | atom | own)) == priv   ? "private"
                      : (k & (priv | atom | own)) == atom ? "atomic"
                      : (k & (priv | atom | own)) == own  ? "owner"
                      : (k & (priv | atom | own))         ? "mixed"
                                                          : NULL;
    if (k == FIBERS_BIT)
        return "fibers";
    if (k == GPU_FIBERS_BIT)
        return "gpu-fibers";
    if (k == GPU_SORTED_BIT)
        return "gpu-sorted";
    const char *gpu = (k & (reg | hier)) == reg    ? "gpu-register"
                      : (k & (reg | hier)) == hier ? "gpu-hierarchical"
                      : (k & (reg | hier))         ? "gpu-mixed"
                                                   : NULL;
    if (cpu && gpu) {
        /* hybrid: both, in a buffer of the stream's */
        char *b = ((blco_stream_t *)s)->kname;
        snprintf(b, sizeof ((blco_stream_t *)s)->kname, "%s+%s", gpu, cpu);
        return b;
    }
    return gpu ? gpu : cpu ? cpu : "none";
}

static void set_residency(blco_stats_t *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_residency(blco_stats_t *st, const char *fmt, ...)
{
    char text[sizeof st->residency];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    blco_stats_set_residency(st, text);
}

static uint64_t ns_since(double t0)
{
    return (uint64_t)((blco_now() - t0) * 1e9);
}

static uint64_t round_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

static void free_residency(blco_stream_t *s)
{
    if (s->gpu && s->res_stored) /* no device copies from it any more */
        gpu_pipe_unregister_resident(s->gpu);
    blco_budget_free(s->budget, s->res_stored, s->res_stored_bytes);
    blco_budget_free(s->budget, s->res_idx, s->res_dec_bytes);
    s->res_stored = NULL;
    s->res_idx = NULL;
    s->res_val = NULL;
    s->res_stored_bytes = s->res_dec_bytes = 0;
    s->res_dec_batches = 0;
    free(s->all_blocks);
    s->all_blocks = NULL;
}

void blco_stream_close(blco_stream_t *s)
{
    if (!s)
        return;
    blco_aio_close(s->aio); /* waits for reads into the ring before it is unmapped */
    if (s->cpd_destroy) /* its device memory first, while the devices are open */
        s->cpd_destroy(s->cpd);
    gpu_pipe_close(s->gpu); /* waits for copies from the ring, and unlocks it */
    s->gpu = NULL;
    for (int i = 0; s->slot_batch && i < s->nslots; i++)
        if (s->slot_batch[i] >= 0)
            __atomic_fetch_sub(&s->st->slots_busy, 1, __ATOMIC_RELAXED);
    blco_budget_free(s->budget, s->stage_raw, s->stage_bytes);
    for (int i = 0; i < s->ndec; i++)
        blco_decoder_free(s->dec[i]);
    free(s->dec);
    free_residency(s);
    blco_mt_scratch_free(s->budget, &s->scratch);
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        blco_fibers_destroy(s->fib[m]);
    if (s->ring) {
        munmap(s->ring, s->ring_bytes);
        blco_budget_release(s->budget, s->ring_bytes);
    }
    blco_budget_free(s->budget, s->dec_idx, s->dec_bytes);
    free(s->slot_batch);
    free(s->vblocks);
    free(s->batches);
    free(s->bstate);
    free(s->enc);
    free(s->bresult);
    free(s->bslot);
    blco_file_close(s->f);
    free(s->path);
    free(s);
}

/* Cuts the segments into batches of at most slot_bytes on disk and cap_nnz nonzeros. */
static int plan_batches(blco_stream_t *s)
{
    uint64_t ns = s->seg1;
    s->batches = calloc(ns - s->seg0 ? ns - s->seg0 : 1, sizeof *s->batches);
    if (!s->batches)
        return -ENOMEM;
    uint64_t nb = 0, maxsegs = 1;
    for (uint64_t i = s->seg0; i < ns;) {
        const blco_segment_t *sg = blco_file_segment(s->f, i);
        batch_t *b = &s->batches[nb++];
        b->s0 = i;
        b->off = sg->offset;
        b->first_nnz = sg->first_nnz;
        b->bytes = 0;
        b->nnz = 0;
        while (i < ns) {
            sg = blco_file_segment(s->f, i);
            uint64_t end = sg->offset + blco_segment_disk_bytes(sg);
            if (i > b->s0 && (end - b->off > s->slot_bytes || b->nnz + sg->nnz > s->cap_nnz))
                break;
            b->bytes = end - b->off;
            b->nnz += sg->nnz;
            i++;
        }
        b->s1 = i;
        maxsegs = BLCO_MAX(maxsegs, b->s1 - b->s0);
    }
    s->nbatches = nb;
    s->max_batch_segs = maxsegs;
    s->vblocks = calloc(maxsegs, sizeof *s->vblocks);
    s->bstate = calloc(nb ? nb : 1, 1);
    s->bresult = calloc(nb ? nb : 1, sizeof *s->bresult);
    s->bslot = calloc(nb ? nb : 1, sizeof *s->bslot);
    return s->vblocks && s->bstate && s->bresult && s->bslot ? 0 : -ENOMEM;
}

/* Which batches go to the GPUs encoded: every column of every segment has a codec the
 * device decodes (no zstd frame), and decoding on the device was not turned off. */
static int plan_encoded(blco_stream_t *s, gpu_pipe_shape_t *sh)
{
    if (s->o.gpu_decode == BLCO_GPU_DECODE_HOST)
        return 0;
    if (!(s->enc = calloc(s->nbatches ? s->nbatches : 1, 1)))
        return -ENOMEM;
    for (uint64_t b = 0; b < s->nbatches; b++) {
        const batch_t *bt = &s->batches[b];
        int ok = 1;
        uint64_t frames = 0;
        for (uint64_t i = bt->s0; i < bt->s1 && ok; i++) {
            const blco_segment_t *sg = blco_file_segment(s->f, i);
            const int ic = sg->index_codec, vc = sg->value_codec;
            ok = blco_codec_device_decodes(s->info->value_type, ic, vc);
            if (ic == BLCO_ICODEC_DELTA && sg->nnz > 1)
                frames += 2 * ((sg->nnz - 1 + BLCO_DELTA_FRAME - 1) / BLCO_DELTA_FRAME);
        }
        if (!ok)
            continue;
        s->enc[b] = 1;
        sh->max_batch_bytes = BLCO_MAX(sh->max_batch_bytes, bt->bytes);
        sh->max_batch_frames = BLCO_MAX(sh->max_batch_frames, frames);
    }
    sh->enc = s->enc;
    sh->f = s->f;
    sh->path = s->path;
    return 0;
}

/* Free budget bytes, less what the caller keeps for itself: all of keep_free while the
 * stream opens, then what the caller has not yet allocated of it. */
static uint64_t budget_free_bytes(const blco_stream_t *s)
{
    uint64_t lim = blco_budget_limit(s->budget), used = blco_budget_used(s->budget);
    uint64_t fr = lim > used ? lim - used : 0, keep = s->o.keep_free;
    if (s->opened && used > s->used_at_open)
        keep = keep > used - s->used_at_open ? keep - (used - s->used_at_open) : 0;
    return fr > keep ? fr - keep : 0;
}

/* Budget bytes the CPU kernel takes beside the ring at this rank: huge-page copies of the
 * factors it reads and one private row buffer per thread (at worst the largest mode's rows).
 * Without them it still runs, each thread updating its own output rows, slower. */
static uint64_t kernel_bytes(const blco_stream_t *s, int rank)
{
    const blco_layout_t *l = &s->info->layout;
    double rows = 0, maxrows = 0;
    for (int m = 0; m < l->order; m++) {
        rows += (double)l->dims[m];
        maxrows = BLCO_MAX(maxrows, (double)l->dims[m]);
    }
    double b = (rows + maxrows * s->nt) * rank * 8.0 + 4.0 * HUGE_PAGE;
    return b < 1e18 ? (uint64_t)b : UINT64_MAX / 4;
}

/* Blocks of the decoded-resident view: the file's, or one per segment of a range. */
static uint64_t res_nblocks(const blco_stream_t *s)
{
    return s->o.seg_range ? s->seg1 - s->seg0 : s->info->nblocks;
}

/* Memory of the whole tensor decoded: its nonzeros and its block table. */
static uint64_t decoded_bytes(const blco_stream_t *s)
{
    return s->nnz * 16 + res_nblocks(s) * sizeof(blco_block_t);
}

/* Sizes the ring and the decode buffer from the budget, smallest first when it is tight.
 * The kernel's working memory (kernel_bytes) is held back first, and the ring is cut to
 * two slots when that lets the whole tensor stay resident, decoded or stored: after the
 * first pass a resident tensor never uses the ring. */
static int size_ring(blco_stream_t *s, blco_diag_t *diag)
{
    uint64_t seg_bytes = BLCO_FILE_ALIGN, seg_nnz = 1;
    for (uint64_t i = s->seg0; i < s->seg1; i++) {
        const blco_segment_t *sg = blco_file_segment(s->f, i);
        seg_bytes = BLCO_MAX(seg_bytes, blco_segment_disk_bytes(sg));
        seg_nnz = BLCO_MAX(seg_nnz, sg->nnz);
    }
    /* A batch of one segment per thread by default, so decoding is parallel too. */
    uint64_t slot = s->o.slot_bytes ? round_up(BLCO_MAX(s->o.slot_bytes, seg_bytes), 4096)
                                    : BLCO_MAX(seg_bytes * (uint64_t)s->nt, SLOT_DEFAULT);
    int nslots = s->o.nslots ? BLCO_MAX(2, s->o.nslots) : NSLOTS_DEFAULT;
    uint64_t cap =
        s->o.slot_bytes ? seg_nnz : BLCO_MAX(seg_nnz * (uint64_t)s->nt, BATCH_NNZ_DEFAULT);
    /* Never more ring than data: a small file needs neither big slots nor many. */
    if (!s->o.slot_bytes)
        slot = BLCO_MAX(seg_bytes, BLCO_MIN(slot, round_up(s->data_bytes, 4096)));
    while (!s->o.nslots && nslots > 2 && (uint64_t)(nslots - 1) * slot >= s->data_bytes)
        nslots--;
    cap = BLCO_MAX(seg_nnz, BLCO_MIN(cap, s->nnz));

    uint64_t fr = budget_free_bytes(s);
    uint64_t kres = kernel_bytes(s, s->o.rank > 0 ? s->o.rank : 16);
    uint64_t avail = fr > kres ? fr - kres : 0;
    if (s->o.residency != BLCO_RESIDENT_NONE && !s->o.nslots) {
        /* Residency tier beside a ring of n slots: 2 decoded, 1 stored, 0 partial or none.
         * Decoded residency frees the decode buffer (the first pass decodes in place). */
        uint64_t dec = decoded_bytes(s);
        int tier[2];
        for (int i = 0; i < 2; i++) {
            uint64_t ring = (uint64_t)(i ? 2 : nslots) * slot;
            tier[i] = s->o.residency == BLCO_RESIDENT_AUTO && dec + ring <= avail     ? 2
                      : s->data_bytes + ring + cap * 16 <= avail                      ? 1
                                                                                      : 0;
        }
        if (tier[1] > tier[0])
            nslots = 2;
    }
    /* Too tight for the kernel's share as well: the ring comes first (a slower kernel
     * beats a refusal). */
    uint64_t smallest = (uint64_t)(s->o.nslots ? BLCO_MAX(2, s->o.nslots) : 2) *
                            (s->o.slot_bytes ? slot : seg_bytes) +
                        seg_nnz * 16;
    if (smallest > avail)
        avail = fr;
    /* Shrink until it fits: fewer slots, then slots of one segment, then one segment of
     * decoded nonzeros. */
    for (;;) {
        uint64_t need = (uint64_t)nslots * slot + cap * 16;
        if (need <= avail)
            break;
        if (nslots > 2 && !s->o.nslots)
            nslots--;
        else if (slot > seg_bytes && !s->o.slot_bytes)
            slot = BLCO_MAX(seg_bytes, round_up(slot / 2, 4096));
        else if (cap > seg_nnz)
            cap = BLCO_MAX(seg_nnz, cap / 2);
        else {
            char a[32], b[32];
            return blco_diag_set(
                diag, 0, -BLCO_EBUDGET,
                "%s: the memory budget is too small to stream this file: the smallest slot "
                "ring needs %s (%d slots of %s and room to decode one segment), %s is free",
                s->path, blco_format_size(need, a, sizeof a), nslots,
                blco_format_size(slot, b, sizeof b), blco_format_size(avail, (char[32]){0}, 32));
        }
    }
    s->nslots = nslots;
    s->slot_bytes = slot;
    s->cap_nnz = cap;
    s->ring_bytes = (size_t)nslots * slot;
    s->dec_bytes = cap * 16;
    /* The ring is mapped pages, never malloc: O_DIRECT and buffer registration need page
     * alignment, and unmapping gives the memory back. */
    int err = blco_budget_reserve(s->budget, s->ring_bytes);
    if (err < 0)
        return err;
    void *ring =
        mmap(NULL, s->ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED) {
        blco_budget_release(s->budget, s->ring_bytes);
        s->ring_bytes = 0;
        return -ENOMEM;
    }
    s->ring = ring;
    /* Before the first touch, so the pages land on the chosen node. */
    if ((err = blco_topo_bind_area(ring, s->ring_bytes, s->numa, sizeof s->numa)) < 0)
        return err;
    if ((err = blco_budget_alloc(s->budget, s->dec_bytes, (void **)&s->dec_idx)) < 0)
        return err;
    s->dec_val = (double *)(s->dec_idx + cap);
    s->slot_batch = malloc((size_t)nslots * sizeof *s->slot_batch);
    if (!s->slot_batch)
        return -ENOMEM;
    for (int i = 0; i < nslots; i++)
        s->slot_batch[i] = -1;
    return 0;
}

int blco_stream_open(const char *path, const blco_stream_opts_t *o, blco_budget_t *budget,
                     blco_stream_t **out, blco_diag_t *diag)
{
    *out = NULL;
    blco_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    int err;
    if (o)
        s->o = *o;
    else
        blco_stream_opts_default(&s->o);
    s->budget = budget;
    s->st = s->o.stats ? s->o.stats : &s->own_stats;
    if (!(s->path = strdup(path))) {
        err = -ENOMEM;
        goto fail;
    }
    if ((err = blco_file_open(path, &s->f, diag)) < 0)
        goto fail;
    s->info = blco_file_info(s->f);
    memset(s->fib_state, FIB_UNDECIDED, (size_t)s->info->layout.order);
    if (s->o.fibers < BLCO_FIBERS_OFF || s->o.fibers > BLCO_FIBERS_ON) {
        err = -EINVAL;
        goto fail;
    }
    if (s->o.gpu_sorted < 0 || s->o.gpu_sorted > 2) {
        err = blco_diag_set(diag, 0, -EINVAL, "gpu_sorted %d: 0, 1 or 2 (auto)", s->o.gpu_sorted);
        goto fail;
    }
    if (s->o.gpu_schedule < BLCO_GPU_SCHEDULE_AUTO ||
        s->o.gpu_schedule > BLCO_GPU_SCHEDULE_INTERLEAVED) {
        err = blco_diag_set(diag, 0, -EINVAL, "unknown GPU chunk schedule %d", s->o.gpu_schedule);
        goto fail;
    }
    if (s->info->layout.order < 2) {
        err = blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                            "%s: MTTKRP needs a tensor of at least 2 modes", path);
        goto fail;
    }
    s->nt = blco_threads_resolve(s->o.threads);
    s->seg0 = 0;
    s->seg1 = s->info->nsegments;
    if (s->o.seg_range) {
        if (s->o.seg_begin > s->o.seg_end || s->o.seg_end > s->info->nsegments) {
            err = blco_diag_set(
                diag, 0, -EINVAL, "%s: segments %llu..%llu asked, the file has %llu", path,
                (unsigned long long)s->o.seg_begin, (unsigned long long)s->o.seg_end,
                (unsigned long long)s->info->nsegments);
            goto fail;
        }
        s->seg0 = s->o.seg_begin;
        s->seg1 = s->o.seg_end;
    }
    for (uint64_t i = s->seg0; i < s->seg1; i++) {
        s->data_bytes += blco_segment_disk_bytes(blco_file_segment(s->f, i));
        s->nnz += blco_file_segment(s->f, i)->nnz;
    }
    if ((err = size_ring(s, diag)) < 0)
        goto fail;
    if ((err = plan_batches(s)) < 0)
        goto fail;
    if (s->o.backend != BLCO_BACKEND_CPU) {
        gpu_pipe_shape_t sh = {.layout = &s->info->layout,
                               .nbatches = s->nbatches,
                               .max_batch_nnz = 1,
                               .max_batch_segs = s->max_batch_segs,
                               .nnz = s->nnz};
        uint64_t *bnnz = malloc((s->nbatches ? s->nbatches : 1) * sizeof *bnnz);
        if (!bnnz) {
            err = -ENOMEM;
            goto fail;
        }
        for (uint64_t b = 0; b < s->nbatches; b++) {
            sh.max_batch_nnz = BLCO_MAX(sh.max_batch_nnz, s->batches[b].nnz);
            bnnz[b] = s->batches[b].nnz;
        }
        sh.batch_nnz = bnnz;
        if ((err = plan_encoded(s, &sh)) < 0) {
            free(bnnz);
            goto fail;
        }
        err = gpu_pipe_open(&s->o, &sh, budget, s->o.stats ? s->o.stats : &s->own_stats, &s->gpu,
                            diag);
        free(bnnz); /* the pipe keeps its own copy */
        if (err < 0)
            goto fail;
        uint64_t host = 0; /* batches the devices cannot decode: said once (issue 31) */
        for (uint64_t b = 0; s->enc && b < s->nbatches; b++)
            host += !s->enc[b];
        if (host)
            blco_codec_note_host_decode(s->f, path, host, s->nbatches, s->seg0, s->seg1);
        /* The ring's pages near the first GPU (unless the user chose a node), before they
         * are pinned: the copies read them. */
        int node = gpu_pipe_numa_node(s->gpu);
        const char *force = getenv("BLCO_NUMA_NODE");
        if (node >= 0 && !(force && *force)) {
            char what[64];
            if (blco_topo_bind_area_node(s->ring, s->ring_bytes, node, what, sizeof what) > 0)
                snprintf(s->numa, sizeof s->numa, "%.60s, GPU %d's", what,
                         s->o.ngpus > 0 ? s->o.gpus[0] : 0);
        }
        /* Encoded batches are copied from the slots they were read into: page-locked for
         * the devices too (else they go through the staging buffers, one more copy). */
        int e = gpu_pipe_register_ring(s->gpu, s->ring, s->ring_bytes, s->nslots, s->slot_bytes);
        if (e < 0)
            blco_log(BLCO_LOG_INFO,
                     "%s: the read ring could not be page-locked for the GPUs "
                     "(%s): encoded batches go through the staging buffers",
                     path, blco_strerror(e));
    }
    s->ndec = s->nt;
    if (!(s->dec = calloc((size_t)s->ndec, sizeof *s->dec))) {
        err = -ENOMEM;
        goto fail;
    }
    for (int i = 0; i < s->ndec; i++)
        if ((err = blco_decoder_new(&s->dec[i])) < 0)
            goto fail;

    blco_aio_opts_t ao;
    blco_aio_opts_default(&ao);
    ao.backend = s->o.io_backend;
    ao.direct = s->o.direct;
    ao.max_inflight = s->ring_bytes;
    blco_aio_region_t reg = {s->ring, s->ring_bytes};
    if ((err = blco_aio_open(path, &ao, &reg, 1, &s->aio, diag)) < 0)
        goto fail;

    /* What the counters describe. */
    blco_stats_t *st = s->st;
    snprintf(st->path, sizeof st->path, "%s", path);
    snprintf(st->io_backend, sizeof st->io_backend, "%s", blco_aio_describe(s->aio));
    set_residency(st, "%s",
                  s->o.residency == BLCO_RESIDENT_NONE ? "streamed" : "decided on the first pass");
    const blco_file_info_t *in = s->info;
    st->file_bytes = in->file_bytes;
    st->data_bytes = s->data_bytes;
    st->nnz = in->nnz;
    st->nsegments = in->nsegments;
    st->slots_total = (uint32_t)s->nslots;
    st->slot_bytes = s->slot_bytes;
    st->mem_limit = blco_budget_limit(budget);
    blco_stat_add(&st->fallbacks, (uint64_t)blco_aio_fallbacks(s->aio));
    char a[32], b[32];
    snprintf(s->desc, sizeof s->desc,
             "%s; %d slots of %s (%s), batches of up to %llu nonzeros (%s "
             "decoded), %d threads",
             blco_aio_describe(s->aio), s->nslots, blco_format_size(s->slot_bytes, a, sizeof a),
             s->numa, (unsigned long long)s->cap_nnz, blco_format_size(s->dec_bytes, b, sizeof b),
             s->nt);
    if (s->gpu) {
        size_t len = strlen(s->desc);
        snprintf(s->desc + len, sizeof s->desc - len, "; %s", gpu_pipe_describe(s->gpu));
    }
    s->used_at_open = blco_budget_used(budget);
    s->opened = 1;
    *out = s;
    return 0;
fail:
    blco_stream_close(s);
    return err;
}

/* ---- residency ---- */

static void free_dec_buffer(blco_stream_t *s)
{
    blco_budget_free(s->budget, s->dec_idx, s->dec_bytes);
    s->dec_idx = NULL;
    s->dec_val = NULL;
}

static int alloc_dec_buffer(blco_stream_t *s)
{
    if (s->dec_idx)
        return 0;
    int err = blco_budget_alloc(s->budget, s->dec_bytes, (void **)&s->dec_idx);
    if (err < 0) {
        s->dec_idx = NULL;
        return err;
    }
    s->dec_val = (double *)(s->dec_idx + s->cap_nnz);
    return 0;
}

/* Chosen on the first pass, when the rank tells how much the kernel itself needs. */
static void decide_residency(blco_stream_t *s, int rank)
{
    s->res_decided = 1;
    s->res_kind = RES_NONE;
    const blco_file_info_t *in = s->info;
    blco_stats_t *st = s->st;
    if (s->o.residency == BLCO_RESIDENT_NONE || s->nbatches == 0) {
        set_residency(st, "streamed");
        return;
    }
    /* Leave room for the kernel: staged factor copies and private row buffers. */
    const uint64_t avail0 = budget_free_bytes(s), kb = kernel_bytes(s, rank);
    uint64_t avail = avail0;
    uint64_t reserve = BLCO_MIN(kb, avail / 4);
    avail = avail > reserve ? avail - reserve : 0;

    /* Decoded: the first pass decodes in place, so the decode buffer goes back first. With
     * GPUs the decoded tensor lives on the devices instead (the host keeps stored bytes). */
    uint64_t dec = decoded_bytes(s);
    if (s->o.residency == BLCO_RESIDENT_AUTO && !s->gpu && dec <= avail + s->dec_bytes) {
        free_dec_buffer(s);
        const uint64_t nbl = res_nblocks(s);
        if (blco_budget_alloc(s->budget, s->nnz * 16, (void **)&s->res_idx) == 0 &&
            (s->all_blocks = malloc((nbl ? nbl : 1) * sizeof *s->all_blocks))) {
            s->res_dec_bytes = s->nnz * 16;
            s->res_val = (double *)(s->res_idx + s->nnz);
            if (!s->o.seg_range)
                for (uint64_t b = 0; b < in->nblocks; b++)
                    s->all_blocks[b] = blco_file_block(s->f, b)->b;
            for (uint64_t i = s->seg0; s->o.seg_range && i < s->seg1; i++) {
                /* A range may start or end inside a block: a block per segment. */
                const blco_segment_t *sg = blco_file_segment(s->f, i);
                blco_block_t *vb = &s->all_blocks[i - s->seg0];
                *vb = blco_file_block(s->f, sg->block)->b;
                vb->start = sg->first_nnz - blco_file_segment(s->f, s->seg0)->first_nnz;
                vb->nnz = sg->nnz;
            }
            s->res_kind = RES_DECODED;
            s->res_batches = s->res_dec_batches = s->nbatches;
            blco_tensor_t *v = &s->res_view;
            memset(v, 0, sizeof *v);
            v->layout = in->layout;
            v->nnz = s->nnz;
            v->nblocks = nbl;
            v->blocks = s->all_blocks;
            v->idx = s->res_idx;
            v->val = s->res_val;
            v->norm2 = in->norm2;
            blco_stat_set(&st->resident_bytes, s->res_dec_bytes);
            set_residency(st, "resident (decoded)");
            return;
        }
        free_residency(s);
        if (alloc_dec_buffer(s) < 0) { /* it was free a moment ago */
            set_residency(st, "streamed");
            return;
        }
    }
    /* Everything resident, no disk after the first pass, when the stored bytes fit: then
     * the front batches as decoded as the rest of the room allows (each decoded batch is
     * one less to decode on every pass), the others stored. */
    uint64_t nbt = s->nbatches, kdec = 0;
    if (s->o.residency == BLCO_RESIDENT_AUTO && !s->gpu && s->data_bytes <= avail) {
        uint64_t dnnz = 0, dbytes = 0;
        while (kdec < nbt) {
            const batch_t *bt = &s->batches[kdec];
            uint64_t need = (dnnz + bt->nnz) * 16 + (s->data_bytes - dbytes - bt->bytes);
            if (need > avail)
                break;
            dnnz += bt->nnz;
            dbytes += bt->bytes;
            kdec++;
        }
        if (kdec == nbt) /* cannot happen: the decoded tensor did not fit */
            kdec = nbt - 1;
    }
    /* A partial prefix saves only its share of the reads, while a kernel short of room for
     * its private row buffers falls back to atomics (4x slower on a 20M-nonzero power-law
     * tensor at --mem-limit 64M, 131072-nonzero segments): the kernel's staged factors and
     * private rows come first then (its huge-page slack need not). */
    const uint64_t rows_share = kb - 4 * HUGE_PAGE;
    if (s->data_bytes > avail && reserve < rows_share)
        avail = avail0 > rows_share ? avail0 - rows_share : 0;
    /* Stored bytes: as many whole batches as fit after the decoded ones, from the front. */
    uint64_t dec_nnz = kdec ? s->batches[kdec - 1].first_nnz + s->batches[kdec - 1].nnz -
                                  s->batches[0].first_nnz
                            : 0;
    uint64_t room = avail > dec_nnz * 16 ? avail - dec_nnz * 16 : 0;
    uint64_t nb = kdec, base = s->batches[kdec].off;
    while (nb < nbt && s->batches[nb].off + s->batches[nb].bytes - base <= room)
        nb++;
    if (nb == 0) {
        set_residency(st, "streamed (nothing fits the budget)");
        return;
    }
    uint64_t bytes = nb > kdec ? s->batches[nb - 1].off + s->batches[nb - 1].bytes - base : 0;
    if ((bytes && blco_budget_alloc(s->budget, bytes, (void **)&s->res_stored) < 0) ||
        (dec_nnz && blco_budget_alloc(s->budget, dec_nnz * 16, (void **)&s->res_idx) < 0)) {
        free_residency(s);
        set_residency(st, "streamed");
        return;
    }
    s->res_stored_bytes = bytes;
    s->res_stored_off = base;
    /* Encoded batches go from here to the GPUs on every later pass: page-locked, the copy
     * engines read it directly (a memcpy into the staging buffers on the one thread that
     * feeds the devices kept a fast GPU waiting for it). */
    if (bytes && s->gpu) {
        int e = gpu_pipe_register_resident(s->gpu, s->res_stored, bytes);
        if (e < 0)
            blco_log(BLCO_LOG_INFO,
                     "%s: the resident copy could not be page-locked for the GPUs (%s): "
                     "its batches go through the staging buffers",
                     s->path, blco_strerror(e));
    }
    s->res_dec_bytes = dec_nnz * 16;
    s->res_val = s->res_idx ? (double *)(s->res_idx + dec_nnz) : NULL;
    s->res_kind = RES_STORED;
    s->res_batches = nb;
    s->res_dec_batches = kdec;
    blco_stat_set(&st->resident_bytes, bytes + s->res_dec_bytes);
    if (kdec)
        set_residency(st, "resident (%.0f%% of nonzeros decoded, the rest stored)",
                      100.0 * (double)dec_nnz / (double)s->nnz);
    else if (nb == nbt)
        set_residency(st, "resident (stored)");
    else
        set_residency(st, "partial: %.0f%% resident, rest streamed",
                      100.0 * (double)bytes / (double)st->data_bytes);
}

/* ---- one pass ---- */

static int wait_batch(blco_stream_t *s, uint64_t b, blco_diag_t *diag)
{
    blco_stats_t *st = s->st;
    double t0 = blco_now();
    int waited = 0;
    while (s->bstate[b] != 2) {
        blco_aio_done_t done[16];
        int n = blco_aio_reap(s->aio, done, 16, 1);
        if (n < 0)
            return blco_diag_set(diag, 0, n, "%s: reading: %s", s->path, blco_strerror(n));
        if (n == 0 && blco_aio_pending(s->aio) == 0)
            return blco_diag_set(diag, 0, -EIO, "%s: internal error: batch %llu never read",
                                 s->path, (unsigned long long)b);
        if (n > 0 && blco_aio_pending(s->aio) == 0) {
            double now = blco_now();
            blco_stat_add(&st->busy_ns[BLCO_STAGE_READ], (uint64_t)((now - s->busy_since) * 1e9));
            if (s->next_read < s->end_read)
                s->idle_since = now;
        }
        for (int i = 0; i < n; i++) {
            uint64_t k = done[i].tag;
            s->bstate[k] = 2;
            s->bresult[k] = done[i].result;
            blco_stat_add(&st->read_requests, 1);
        }
        waited = 1;
    }
    if (waited)
        blco_stat_add(&st->wait_ns[BLCO_STAGE_COMPUTE], ns_since(t0));
    int64_t r = s->bresult[b];
    if (r > 0) /* counted when used: a read prefetched for a pass that never comes is not */
        blco_stat_add(&st->bytes_read, (uint64_t)r);
    if (r < 0) {
        char why[512] = "";
#if HAVE_CUDA_EMULATION
        /* A refill the emulation's guard stopped (submit_more) */
        if (r == -EFAULT && s->emu_why[0])
            snprintf(why, sizeof why, ": %s", s->emu_why);
#endif
        return blco_diag_set(diag, 0, (int)r, "%s: reading bytes %llu..%llu: %s%s", s->path,
                             (unsigned long long)s->batches[b].off,
                             (unsigned long long)(s->batches[b].off + s->batches[b].bytes),
                             strerror((int)-r), why);
    }
    if ((uint64_t)r < s->batches[b].bytes)
        return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                             "%s: truncated: the file ends inside segment %llu (at byte %llu)",
                             s->path, (unsigned long long)s->batches[b].s0,
                             (unsigned long long)(s->batches[b].off + (uint64_t)r));
    return 0;
}

/* Puts reads for the next batches into every free slot. */
static int submit_more(blco_stream_t *s, uint64_t *next, uint64_t end)
{
    for (int i = 0; i < s->nslots && *next < end; i++) {
        if (s->slot_batch[i] == SLOT_HELD) { /* a GPU may still copy from it */
            int r = gpu_pipe_slot_free(s->gpu, i, 0);
            if (r < 0)
                return r;
            if (r == 0)
                continue;
            s->slot_batch[i] = -1;
        }
        if (s->slot_batch[i] >= 0)
            continue;
        while (s->gpu && *next < end && !gpu_pipe_wants(s->gpu, *next))
            (*next)++; /* a GPU holds it */
        if (*next >= end)
            break;
        uint64_t b = *next;
        if (blco_aio_pending(s->aio) == 0) {
            double now = blco_now();
            s->busy_since = now;
            if (s->idle_since > 0)
                blco_stat_add(&s->st->wait_ns[BLCO_STAGE_READ],
                              (uint64_t)((now - s->idle_since) * 1e9));
            s->idle_since = 0;
        }
        uint8_t *slot = s->ring + (size_t)i * s->slot_bytes;
#if HAVE_CUDA_EMULATION
        /* The emulation keeps the host off page-locked memory a copy may still use (a
         * pread into it fails with EFAULT; io_uring's registered buffers bypass the page
         * protection): the slot is asked about first, and the read fails as a pread would. */
        if (blco_emu_host_guard(slot, s->batches[b].bytes, s->emu_why, sizeof s->emu_why)) {
            s->slot_batch[i] = (int)b;
            s->bslot[b] = i;
            s->bstate[b] = 2;
            s->bresult[b] = -EFAULT;
            (*next)++;
            blco_stat_add(&s->st->slots_busy, 1);
            continue;
        }
#endif
        int err = blco_aio_submit(s->aio, s->batches[b].off, slot, s->batches[b].bytes, b);
        if (err < 0)
            return err;
        s->slot_batch[i] = (int)b;
        s->bslot[b] = i;
        s->bstate[b] = 1;
        (*next)++;
        blco_stat_add(&s->st->slots_busy, 1);
    }
    s->next_read = *next;
    s->end_read = end;
    return 0;
}

static void release_slot(blco_stream_t *s, uint64_t b)
{
    s->slot_batch[s->bslot[b]] = -1;
    s->bstate[b] = 0;
    __atomic_fetch_sub(&s->st->slots_busy, 1, __ATOMIC_RELAXED);
}

/* Released, but refilled only once the GPU's copy out of it completed. */
static void hold_slot(blco_stream_t *s, uint64_t b)
{
    s->slot_batch[s->bslot[b]] = SLOT_HELD;
    s->bstate[b] = 0;
    __atomic_fetch_sub(&s->st->slots_busy, 1, __ATOMIC_RELAXED);
}

/* Verifies and decodes batch b from `stored` into idx/val, on all threads. With `keep`, each
 * task also copies its segment's stored bytes there (filling stored residency): the copy
 * first-touches new pages, which is slow enough to be worth sharing out. */
static int decode_batch(blco_stream_t *s, uint64_t b, const uint8_t *stored, int trusted,
                        uint8_t *keep, uint64_t *idx, double *val, blco_diag_t *diag)
{
    const batch_t *bt = &s->batches[b];
    int err = 0;
    uint64_t verify_ns = 0, decode_ns = 0;
    double t0 = blco_now();
    int64_t nseg = (int64_t)(bt->s1 - bt->s0);
    /* Fewer segments than threads: the segments are verified first, then their index and
     * value columns decode as separate tasks, so one segment keeps two threads busy. With
     * idx NULL nothing is decoded (a GPU decodes the batch): verify and keep only. */
    const int split = idx && nseg < s->nt;
    if (split && !trusted)
        for (int64_t i = 0; i < nseg && !err; i++) {
            uint64_t sgi = bt->s0 + (uint64_t)i;
            const blco_segment_t *sg = blco_file_segment(s->f, sgi);
            double a = blco_now();
            err = blco_segment_verify(s->f, sgi, stored + (sg->offset - bt->off), diag);
            verify_ns += (uint64_t)((blco_now() - a) * 1e9);
        }
    int64_t ntask = split ? 2 * nseg : nseg;
    int nt = (int)BLCO_MIN((int64_t)s->nt, ntask);
    (void)nt; /* unused without OpenMP */
    if (err)
        ntask = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) reduction(+ : verify_ns, decode_ns)
    for (int64_t i = 0; i < ntask; i++) {
        uint64_t sgi = bt->s0 + (uint64_t)(split ? i / 2 : i);
        const blco_segment_t *sg = blco_file_segment(s->f, sgi);
        const uint8_t *p = stored + (sg->offset - bt->off);
        uint64_t at = sg->first_nnz - bt->first_nnz;
        blco_diag_t d = {0};
        double a = blco_now();
        int e = trusted || split ? 0 : blco_segment_verify(s->f, sgi, p, &d);
        if (e == 0 && keep && (!split || i % 2 == 0))
            memcpy(keep + (sg->offset - bt->off), p, blco_segment_disk_bytes(sg));
        double c = blco_now();
        if (e == 0 && idx)
            e = blco_segment_decode_part(
                s->f, s->dec[blco_thread_num()], sgi, p,
                !split ? BLCO_SEGMENT_INDEX | BLCO_SEGMENT_VALUES
                       : i % 2 ? BLCO_SEGMENT_VALUES : BLCO_SEGMENT_INDEX,
                idx + at, val + at, &d);
        verify_ns += (uint64_t)((c - a) * 1e9);
        decode_ns += (uint64_t)((blco_now() - c) * 1e9);
        if (e < 0) {
#pragma omp critical(blco_stream_err)
            if (!err) {
                err = e;
                if (diag)
                    *diag = d;
            }
        }
    }
    /* Thread time over threads: the stages' share of the wall time. */
    double wall = (blco_now() - t0) * 1e9, sum = (double)(verify_ns + decode_ns);
    blco_stats_t *st = s->st;
    if (sum > 0) {
        blco_stat_add(&st->busy_ns[BLCO_STAGE_VERIFY], (uint64_t)(wall * verify_ns / sum));
        blco_stat_add(&st->busy_ns[BLCO_STAGE_DECODE], (uint64_t)(wall * decode_ns / sum));
    }
    if (!err) {
        if (!trusted)
            blco_stat_add(&st->segments_verified, (uint64_t)nseg);
        if (idx)
            blco_stat_add(&st->segments_decoded, (uint64_t)nseg);
    }
    return err;
}

/* The batch's nonzeros as an in-memory tensor of one block per segment. */
static void batch_view(blco_stream_t *s, uint64_t b, const uint64_t *idx, const double *val,
                       blco_tensor_t *v)
{
    const batch_t *bt = &s->batches[b];
    memset(v, 0, sizeof *v);
    v->layout = s->info->layout;
    v->nnz = bt->nnz;
    v->nblocks = bt->s1 - bt->s0;
    v->blocks = s->vblocks;
    v->idx = (uint64_t *)idx;
    v->val = (double *)val;
    for (uint64_t i = bt->s0; i < bt->s1; i++) {
        const blco_segment_t *sg = blco_file_segment(s->f, i);
        blco_block_t *vb = &s->vblocks[i - bt->s0];
        *vb = blco_file_block(s->f, sg->block)->b;
        vb->start = sg->first_nnz - bt->first_nnz;
        vb->nnz = sg->nnz;
    }
}

/* Huge-page copies of the factors the kernel reads, as blco_mttkrp_cpu makes: worth it
 * when the tensor has several nonzeros per factor row. Without room, the originals serve. */
typedef struct staged {
    const double *f[BLCO_MAX_MODES];
} staged_t;

static void stage_factors(blco_stream_t *s, int mode, int rank, const double *const *factors,
                          staged_t *sf)
{
    const blco_layout_t *l = &s->info->layout;
    for (int m = 0; m < l->order; m++)
        sf->f[m] = factors[m];
    size_t total = blco_mt_stage_bytes(l, s->nnz, mode, rank);
    if (!total)
        return;
    if (s->stage_bytes < total + HUGE_PAGE) {
        blco_budget_free(s->budget, s->stage_raw, s->stage_bytes);
        s->stage_raw = NULL;
        s->stage_bytes = 0;
        if (blco_budget_alloc(s->budget, total + HUGE_PAGE, &s->stage_raw) < 0)
            return;
        s->stage_bytes = total + HUGE_PAGE;
    }
    double *copy[BLCO_MAX_MODES];
    blco_mt_stage_layout(l, mode, rank, factors,
                         (char *)round_up((uintptr_t)s->stage_raw, HUGE_PAGE), total, sf->f, copy);
    for (int m = 0; m < l->order; m++)
        if (copy[m])
            memcpy(copy[m], factors[m], l->dims[m] * (size_t)rank * 8);
}

/* Waits for every read in flight (after an error), so the slots can be reused. */
static void drain(blco_stream_t *s)
{
    blco_aio_done_t done[16];
    while (blco_aio_pending(s->aio) > 0 && blco_aio_reap(s->aio, done, 16, 1) > 0)
        ;
    for (int i = 0; i < s->nslots; i++) {
        if (s->slot_batch[i] >= 0)
            release_slot(s, (uint64_t)s->slot_batch[i]);
        if (s->slot_batch[i] == SLOT_HELD) {
            (void)gpu_pipe_slot_free(s->gpu, i, 1);
            s->slot_batch[i] = -1;
        }
    }
    memset(s->bstate, 0, s->nbatches);
    s->pf_valid = 0;
}

/* A TTM pass's shape (blco_stream_ttm); NULL in stream_pass: an MTTKRP pass. */
typedef struct ttm_spec {
    const int *ranks;
    const int64_t *rowmap;
    uint64_t rows;
} ttm_spec_t;

/* A batch the CPU computes: MTTKRP, or the TTM chain when t is set (both add into out). */
static int cpu_batch(blco_stream_t *s, const blco_tensor_t *v, int mode, int rank,
                     const double *const *f, double *out, const blco_mttkrp_opts_t *mo,
                     const ttm_spec_t *t)
{
    if (t)
        return blco_ttm_cpu(v, mode, t->ranks, f, t->rowmap, t->rows, out, s->nt);
    return blco_mttkrp_cpu_ex(v, mode, rank, f, out, mo, s->budget,
                              BLCO_MT_ACCUMULATE | BLCO_MT_NO_STAGE | BLCO_MT_QUIET, &s->scratch);
}

/* A pass with the factors on the devices whose output stays there (stream_mttkrp_devices);
 * one whose output stays on the devices (blco_stream_mttkrp without an output). */
#define PASS_ON_DEVICES 1
#define PASS_KEEP_OUT 2
#define PASS_OUT_FRESH 4 /* out holds nothing yet: the devices' outputs go over it */

static int stream_pass(blco_stream_t *s, int mode, int rank, const double *const *f, double *out,
                       const blco_mttkrp_opts_t *mo, const ttm_spec_t *ttm, int flags,
                       blco_diag_t *diag)
{
    blco_stats_t *st = s->st;
    const uint64_t nb = s->nbatches;
    const int fill = s->res_kind != RES_NONE && !s->res_filled;
    const uint64_t first_disk = s->res_filled ? s->res_batches : 0;
    /* Once this pass's reads are all out, free slots start on the next pass's (the same
     * batches again, from next_first): the disk does not idle between passes. */
    const uint64_t next_first = s->res_kind != RES_NONE ? s->res_batches : 0;
    /* Not while the GPUs decide what they keep: a batch read ahead must be one they want. */
    const int can_prefetch =
        s->res_kind != RES_DECODED && next_first < nb && (!s->gpu || gpu_pipe_settled(s->gpu));
    uint64_t next = s->pf_valid ? s->pf_next : first_disk, pf = next_first;
    int err = 0;
    s->pf_valid = 0;
    s->idle_since = 0;
    if (s->gpu) {
        gpu_pass_t gp = {.mode = mode, .rank = rank, .factors = f};
        gp.dev_factors = (flags & PASS_ON_DEVICES) != 0;
        gp.keep_out = (flags & (PASS_ON_DEVICES | PASS_KEEP_OUT)) != 0;
        gp.out_fresh = (flags & PASS_OUT_FRESH) != 0;
        if (ttm) {
            gp.ranks = ttm->ranks;
            gp.rowmap = ttm->rowmap;
            gp.rows = ttm->rows;
        }
        if ((err = gpu_pipe_begin(s->gpu, &gp, diag)) < 0)
            goto fail;
    }
    if ((err = submit_more(s, &next, nb)) < 0)
        goto fail;
    for (uint64_t b = 0; b < nb; b++) {
        if (s->cancel) {
            err = blco_diag_set(diag, 0, -BLCO_ECANCELED, "%s: stopped on request", s->path);
            goto fail;
        }
        const batch_t *bt = &s->batches[b];
        if (s->gpu && !gpu_pipe_wants(s->gpu, b)) { /* a GPU holds it: its kernel is queued */
            s->kernels[mode] |= GPU_KERNEL_BIT(gpu_pipe_kernel(s->gpu));
            blco_stat_add(&st->nnz_computed, bt->nnz);
            continue;
        }
        const double tb = blco_now(); /* the host's time on this batch (the hybrid split) */
        const uint8_t *stored = NULL;
        int trusted, from_disk = b >= first_disk;
        /* Decoded-resident batches (a decoded prefix) are decoded once, in the first pass. */
        const int dec_res = b < s->res_dec_batches;
        if (!from_disk) {
            if (!dec_res)
                stored = s->res_stored + (bt->off - s->res_stored_off);
            trusted = 1;
            blco_stat_add(&st->bytes_resident, bt->bytes);
        } else {
            if (s->bstate[b] == 0) {
                /* Not read yet: every free slot was still being copied to a GPU. */
                for (int i = 0; i < s->nslots; i++)
                    if (s->slot_batch[i] == SLOT_HELD) {
                        if ((err = gpu_pipe_slot_free(s->gpu, i, 1)) < 0)
                            goto fail;
                        s->slot_batch[i] = -1;
                    }
                if ((err = submit_more(s, &next, nb)) < 0)
                    goto fail;
            }
            if ((err = wait_batch(s, b, diag)) < 0)
                goto fail;
            stored = s->ring + (size_t)s->bslot[b] * s->slot_bytes;
            trusted = 0;
        }
        uint64_t *idx = s->dec_idx;
        double *val = s->dec_val;
        if (dec_res) {
            idx = s->res_idx + (bt->first_nnz - s->batches[0].first_nnz);
            val = s->res_val + (bt->first_nnz - s->batches[0].first_nnz);
        } else if (s->gpu && (err = gpu_pipe_stage(s->gpu, &idx, &val, diag)) < 0) {
            goto fail; /* decoded straight into pinned memory for the copy */
        }
        uint8_t *keep = from_disk && fill && !dec_res && b < s->res_batches
                            ? s->res_stored + (bt->off - s->res_stored_off)
                            : NULL;
        double td = blco_now();
        if (stored && s->gpu && gpu_pipe_encoded(s->gpu, b)) {
            /* Encoded to a GPU: verified here, decoded there. */
            if (!trusted || keep) {
                gpu_pipe_range("verify");
                err = decode_batch(s, b, stored, trusted, keep, NULL, NULL, diag);
                gpu_pipe_range(NULL);
                if (err < 0)
                    goto fail;
                gpu_pipe_trace_host(s->gpu, "verify", b, td, blco_now());
            }
            blco_tensor_t v;
            batch_view(s, b, NULL, NULL, &v);
            int held = 0;
            int r = gpu_pipe_submit_encoded(s->gpu, b, &v, bt->s0, stored, &held, diag);
            if (r < 0) {
                err = r;
                goto fail;
            }
            if (r == 0) {
                s->norm_state = s->norm_state == 0 ? -1 : s->norm_state; /* not seen here */
                if (from_disk) {
                    if (held)
                        hold_slot(s, b);
                    else
                        release_slot(s, b);
                    if ((err = submit_more(s, &next, nb)) < 0)
                        goto fail;
                }
                if (next == nb && can_prefetch && (err = submit_more(s, &pf, b + 1)) < 0)
                    goto fail;
                s->kernels[mode] |= GPU_KERNEL_BIT(gpu_pipe_kernel(s->gpu));
                blco_stat_add(&st->nnz_computed, bt->nnz);
                gpu_pipe_host_time(s->gpu, b, blco_now() - tb);
                continue;
            }
            trusted = 1; /* the CPU takes it (hybrid): verified above, decoded below */
            keep = NULL;
            td = blco_now();
        }
        if (s->gpu)
            gpu_pipe_range(trusted ? "decode" : "verify + decode");
        err = stored ? decode_batch(s, b, stored, trusted, keep, idx, val, diag) : 0;
        if (s->gpu)
            gpu_pipe_range(NULL);
        if (err < 0)
            goto fail;
        if (s->gpu)
            gpu_pipe_trace_host(s->gpu, trusted ? "decode" : "verify+decode", b, td, blco_now());
        if (s->norm_state == 0) {
            double sq = 0;
            for (uint64_t k = 0; k < bt->nnz; k++)
                sq += val[k] * val[k];
            s->norm_sum += sq;
            s->norm_batches++;
        }
        if (from_disk) {
            release_slot(s, b);
            if ((err = submit_more(s, &next, nb)) < 0)
                goto fail;
        }
        /* Batches up to b are done with in this pass: they may be read again for the next. */
        if (next == nb && can_prefetch && (err = submit_more(s, &pf, b + 1)) < 0)
            goto fail;
        blco_tensor_t v;
        batch_view(s, b, idx, val, &v);
        if (s->gpu) {
            int r = gpu_pipe_submit(s->gpu, b, &v, diag);
            if (r < 0) {
                err = r;
                goto fail;
            }
            if (r == 0) { /* a GPU took it */
                s->kernels[mode] |= GPU_KERNEL_BIT(gpu_pipe_kernel(s->gpu));
                blco_stat_add(&st->nnz_computed, bt->nnz);
                gpu_pipe_host_time(s->gpu, b, blco_now() - tb);
                continue;
            }
        }
        double t0 = blco_now();
        err = cpu_batch(s, &v, mode, rank, f, out, mo, ttm);
        blco_stat_add(&st->busy_ns[BLCO_STAGE_COMPUTE], ns_since(t0));
        if (err == -BLCO_ECANCELED) {
            err = blco_diag_set(diag, 0, err, "%s: stopped on request", s->path);
            goto fail;
        }
        if (bt->nnz && !ttm)
            s->kernels[mode] |= 1u << s->scratch.kernel;
        if (err < 0) {
            err = blco_diag_set(diag, 0, err, "%s: %s of mode %d: %s", s->path,
                                ttm ? "TTM chain" : "MTTKRP", mode + 1, blco_strerror(err));
            goto fail;
        }
        if (s->gpu) {
            gpu_pipe_trace_host(s->gpu, "cpu", b, t0, blco_now());
            gpu_pipe_host_time(s->gpu, b, blco_now() - tb);
        }
        blco_stat_add(&st->nnz_computed, bt->nnz);
    }
    if (s->gpu &&
        (err = gpu_pipe_end(s->gpu, flags & (PASS_ON_DEVICES | PASS_KEEP_OUT) ? NULL : out, diag)) <
            0)
        goto fail;
    if (fill)
        s->res_filled = 1;
    if (s->norm_state == 0)
        s->norm_state = s->norm_batches == nb ? 1 : -1;
    s->pf_valid = can_prefetch;
    s->pf_next = pf;
    return 0;
fail:
    if (s->gpu)
        gpu_pipe_abort(s->gpu);
    if (s->norm_state == 0) /* counted again by the next pass */
        s->norm_sum = 0, s->norm_batches = 0;
    drain(s);
    if (fill) { /* a failed first pass leaves nothing trustworthy resident */
        free_residency(s);
        s->res_kind = RES_NONE;
        s->res_decided = 0;
        blco_stat_set(&st->resident_bytes, 0);
        alloc_dec_buffer(s); /* decided again (and checked) on the next call */
    }
    return err;
}

/* Before a pass: the residency decided (for a kernel of rank_hint columns) and, unless the
 * tensor is kept decoded, the buffer batches are decoded into. */
static int pass_prepare(blco_stream_t *s, int rank_hint, blco_diag_t *diag)
{
    if (!s->res_decided)
        decide_residency(s, rank_hint);
    if (s->res_kind != RES_DECODED && alloc_dec_buffer(s) < 0)
        return blco_diag_set(diag, 0, -BLCO_EBUDGET,
                             "%s: the memory budget has no room left to decode a batch", s->path);
    return 0;
}

/* The whole tensor is in memory decoded: a pass is one call on s->res_view. */
static int resident_whole(const blco_stream_t *s)
{
    return s->res_kind == RES_DECODED && s->res_filled;
}

/* The counters of a pass made by one call on the resident tensor, started at t0 (busy
 * always; what was computed only when ok). */
static void count_resident(blco_stream_t *s, double t0, int ok)
{
    blco_stats_t *st = s->st;
    blco_stat_add(&st->busy_ns[BLCO_STAGE_COMPUTE], ns_since(t0));
    if (!ok)
        return;
    blco_stat_add(&st->nnz_computed, s->nnz);
    blco_stat_add(&st->bytes_resident, st->data_bytes);
}

/* ---- fiber copies ---- */

/* Builds mode `mode`'s copy within max_bytes (0: no bound); sets fib_state[mode]. A copy
 * that cannot be built (for want of budget or room, a mode over 2^32) leaves the BLCO
 * kernel, said at info level. Returns the copy's bytes, 0 when none was built. */
static uint64_t fibers_build(blco_stream_t *s, int mode, double share, uint64_t max_bytes)
{
    const int order = s->info->layout.order;
    double t0 = blco_now();
    int err = blco_fibers_build_within(&s->res_view, mode, s->nt, s->budget, max_bytes,
                                       &s->fib[mode]);
    char sz[32];
    if (err < 0) {
        if (max_bytes && err == -BLCO_EBUDGET)
            blco_log(BLCO_LOG_INFO,
                     "%s: mode %d keeps the BLCO kernel: its fiber copy (about %.2f fibers per "
                     "nonzero) does not fit the %s left of the copies' room",
                     s->path, mode + 1, share, blco_format_size(max_bytes, sz, sizeof sz));
        else
            blco_log(BLCO_LOG_INFO, "%s: mode %d keeps the BLCO kernel: no fiber copy (%s)",
                     s->path, mode + 1, blco_strerror(err));
        s->fib_state[mode] = FIB_BLCO;
        return 0;
    }
    blco_log(BLCO_LOG_INFO, "%s: mode %d: fiber copy, %.2f fibers per nonzero, %s, built in %.3f s",
             s->path, mode + 1,
             (double)blco_fibers_nodes(s->fib[mode], order - 2) / (double)s->nnz,
             blco_format_size(blco_fibers_bytes(s->fib[mode]), sz, sizeof sz), blco_now() - t0);
    s->fib_state[mode] = FIB_USE;
    return blco_fibers_bytes(s->fib[mode]);
}

/* ALTO's modeled footprint under which every copy worth building is kept (the environment's
 * BLCO_FIBERS_SMALL_BYTES overrides it, for tests of the room rule on small tensors). */
#define FIBERS_SMALL_BYTES (32ull << 20)

/* At the first MTTKRP on a tensor held in memory with o.fibers set. ON: the mode's copy.
 * AUTO decides every mode at once, by deterministic rules (so a run and its resumed
 * continuation, or two runs of one command, take the same kernels and bits): the modes
 * blco_fibers_worth accepts, fewest fibers per nonzero first (ties: lower mode), each built
 * while it and its build's scratch fit what is left of blco_fibers_room (the rule that keeps
 * blco-cpd's peak memory under ALTO's). */
static void fibers_decide(blco_stream_t *s, int mode, int rank)
{
    const blco_layout_t *l = &s->info->layout;
    const int order = l->order;
    if (s->o.fibers != BLCO_FIBERS_AUTO) {
        fibers_build(s, mode, 1, 0);
        return;
    }
    double share[BLCO_MAX_MODES];
    int cand[BLCO_MAX_MODES], n = 0;
    for (int m = 0; m < order; m++) {
        s->fib_state[m] = FIB_BLCO;
        if (blco_fibers_worth(&s->res_view, m, rank, s->nt, &share[m]))
            cand[n++] = m;
        else
            blco_log(BLCO_LOG_DEBUG, "%s: mode %d: BLCO kernel (about %.2f fibers per nonzero)",
                     s->path, m + 1, share[m]);
    }
    for (int a = 1; a < n; a++) /* by share, then mode: insertion sort keeps ties in order */
        for (int b = a; b > 0 && share[cand[b]] < share[cand[b - 1]]; b--) {
            int t = cand[b];
            cand[b] = cand[b - 1];
            cand[b - 1] = t;
        }
    /* Where ALTO's whole tensor footprint is small ((8 order + 24) bytes a nonzero under
     * FIBERS_SMALL_BYTES), the process's fixed memory (libraries, threads: 8-11 MiB) already
     * decides which tool peaks higher and the copies are a few MiB: they are kept for their
     * speed (without them redis- and tmux-sized tensors measured 0.56-0.71x). */
    uint64_t room = blco_fibers_room(order, l->dims, s->nnz, rank);
    const char *small_env = getenv("BLCO_FIBERS_SMALL_BYTES"); /* tests of the room rule */
    const double small = small_env ? strtod(small_env, NULL) : (double)FIBERS_SMALL_BYTES;
    if ((8.0 * order + 24.0) * (double)s->nnz < small)
        room = UINT64_MAX / 2;
    uint64_t used = 0;
    for (int i = 0; i < n; i++) {
        const int m = cand[i];
        if (used >= room) {
            blco_log(BLCO_LOG_INFO, "%s: mode %d keeps the BLCO kernel: the copies' room is used",
                     s->path, m + 1);
            continue;
        }
        used += fibers_build(s, m, share[m], room - used);
    }
}

/* Whether this MTTKRP of `mode` runs on its fiber copy: o.fibers set, the tensor held in
 * memory whole, and not a plain call (stream_mttkrp_plain); decided at the first such call. */
static int fibers_on(blco_stream_t *s, int mode, int rank)
{
    if (!s->o.fibers || s->plain || !resident_whole(s))
        return 0;
    if (s->fib_state[mode] == FIB_UNDECIDED)
        fibers_decide(s, mode, rank);
    return s->fib_state[mode] == FIB_USE;
}

/* Whether this TTM chain of `mode` runs on the mode's fiber copy (blco_fibers_ttm): o.fibers
 * set and the tensor held in memory whole, on the CPU; decided at the mode's first TTM and
 * kept (a copy an MTTKRP built is used). ON builds the copy; AUTO builds it where the other
 * modes' factor rows (dims x ranks x 8, summed) hold over BLCO_PREFETCH_BYTES, or where
 * fibers hold 1.7 nonzeros or more on average (at most TTM_FIBERS_SHARE fibers per nonzero,
 * blco_fibers_share's sample): then a fiber's sum against the leaf factor saves most of the
 * P-wide products, and the copy ran 2.4-26x faster on the 4-mode numpy count tensor (0.02
 * and 0.5 fibers per nonzero) where the 3-mode token modes at 0.71 and 0.85 ran 0.64-0.87x
 * of the BLCO kernel. With the other factors over the line, the BLCO
 * kernel's reads of those rows and of Y's rows miss the caches, and the copy's order (each
 * row of Y made once, its factor rows prefetched) ran 1.33-3.36x faster on every such mode
 * measured; below it the rows stay in cache and the copy ran 0.53-0.68x at rank 8 (and
 * 1.0-1.09x at rank 10) of the BLCO kernel (perf/results/README.md, "Tucker on long
 * modes"). A copy takes what the budget has left, less
 * TTM_FIBERS_SPARE: one that does not fit leaves the BLCO kernel, said at info level. */
#define TTM_FIBERS_SPARE (64ull << 20)
#define TTM_FIBERS_SHARE 0.6

static int ttm_fibers_on(blco_stream_t *s, int mode, const int *ranks)
{
    if (!s->o.fibers || !resident_whole(s) || s->gpu)
        return 0;
    if (s->fib_state[mode] == FIB_UNDECIDED) {
        const blco_layout_t *l = &s->info->layout;
        double other = 0;
        for (int m = 0; m < l->order; m++)
            if (m != mode)
                other += (double)l->dims[m] * ranks[m] * 8;
        const double share = blco_fibers_share(&s->res_view, mode, s->nt);
        if (s->o.fibers == BLCO_FIBERS_AUTO && other <= (double)BLCO_PREFETCH_BYTES &&
            share > TTM_FIBERS_SHARE) {
            blco_log(BLCO_LOG_DEBUG, "%s: mode %d: TTM on the BLCO kernel (the other factors "
                     "fit the caches, %.2f fibers per nonzero)", s->path, mode + 1, share);
            s->fib_state[mode] = FIB_BLCO;
        } else {
            const uint64_t lim = blco_budget_limit(s->budget), used = blco_budget_used(s->budget);
            const uint64_t left = lim > used + TTM_FIBERS_SPARE ? lim - used - TTM_FIBERS_SPARE : 1;
            fibers_build(s, mode, share, left);
        }
    }
    return s->fib_state[mode] == FIB_USE;
}

int blco_stream_data_norm2(const blco_stream_t *s, double *norm2)
{
    if (!s || s->norm_state != 1)
        return 0;
    *norm2 = s->norm_sum;
    return 1;
}

int blco_fibers_use_parse(const char *s)
{
    return !s                    ? -1
           : !strcmp(s, "auto") ? BLCO_FIBERS_AUTO
           : !strcmp(s, "on")   ? BLCO_FIBERS_ON
           : !strcmp(s, "off")  ? BLCO_FIBERS_OFF
                                : -1;
}

int blco_gpu_schedule_parse(const char *s)
{
    return !s                          ? -1
           : !strcmp(s, "auto")        ? BLCO_GPU_SCHEDULE_AUTO
           : !strcmp(s, "contiguous")  ? BLCO_GPU_SCHEDULE_CONTIGUOUS
           : !strcmp(s, "interleaved") ? BLCO_GPU_SCHEDULE_INTERLEAVED
                                       : -1;
}

const char *blco_gpu_schedule_name(int schedule)
{
    return schedule == BLCO_GPU_SCHEDULE_AUTO          ? "auto"
           : schedule == BLCO_GPU_SCHEDULE_CONTIGUOUS  ? "contiguous"
           : schedule == BLCO_GPU_SCHEDULE_INTERLEAVED ? "interleaved"
                                                       : "?";
}

const char *blco_stream_fibers(const blco_stream_t *s)
{
    return s->fib_state;
}

int blco_stream_mttkrp(blco_stream_t *s, int mode, int rank, const double *const *factors,
                       double *out, blco_diag_t *diag)
{
    const blco_layout_t *l = &s->info->layout;
    /* No output: only where no CPU thread computes a batch (the cuda backend). */
    const int gpu_only = s->gpu && !gpu_pipe_hybrid(s->gpu);
    if (mode < 0 || mode >= l->order || rank < 1 || (!out && !gpu_only) || !factors)
        return -EINVAL;
    for (int m = 0; m < l->order; m++)
        if (m != mode && !factors[m])
            return -EINVAL;
    blco_stats_t *st = s->st;
    blco_stat_set_int(&st->mode, mode + 1);
    int err = pass_prepare(s, rank, diag);
    if (err < 0)
        return err;
    blco_mttkrp_opts_t mo;
    blco_mttkrp_opts_default(&mo);
    mo.threads = s->nt;
    mo.kernel = s->o.kernel;
    mo.cancel = &s->cancel; /* polled inside the kernel: a resident pass is one call */
    s->kernels[mode] = 0;
    if (resident_whole(s)) {
        /* The in-memory kernel, with its own staging, or the mode's fiber copy. */
        double t0 = blco_now();
        const int fib = fibers_on(s, mode, rank);
        if (fib)
            err = blco_fibers_mttkrp(s->fib[mode], rank, factors, out, &mo);
        else
            err = blco_mttkrp_cpu_ex(&s->res_view, mode, rank, factors, out, &mo, s->budget,
                                     s->plain ? BLCO_MT_NO_STAGE : 0, &s->scratch);
        count_resident(s, t0, err >= 0);
        if (err == -BLCO_ECANCELED)
            return blco_diag_set(diag, 0, err, "%s: stopped on request", s->path);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: MTTKRP of mode %d: %s", s->path, mode + 1,
                                 blco_strerror(err));
        if (s->nnz)
            s->kernels[mode] = fib ? FIBERS_BIT : 1u << s->scratch.kernel;
    } else {
        /* The GPUs alone write every row: the first device's output is copied over it. */
        if (out && !gpu_only)
            stream_host_move(out, NULL, l->dims[mode] * (uint64_t)rank * sizeof(double), 0,
                             s->nt);
        staged_t sf;
        for (int m = 0; m < l->order; m++)
            sf.f[m] = factors[m];
        if (!gpu_only && !s->plain) /* copies for the CPU kernel */
            stage_factors(s, mode, rank, factors, &sf);
        err = stream_pass(s, mode, rank, sf.f, out, &mo, NULL,
                          !out ? PASS_KEEP_OUT : gpu_only ? PASS_OUT_FRESH : 0, diag);
        if (err < 0)
            return err;
        /* The pass that made the tensor resident: a mode that takes its fiber copy from now
         * on takes it for this pass too, so that its result does not depend on which pass
         * comes first (a resumed run's first pass is another iteration's). */
        if (fibers_on(s, mode, rank)) {
            err = blco_fibers_mttkrp(s->fib[mode], rank, factors, out, &mo);
            if (err < 0)
                return blco_diag_set(diag, 0, err, "%s: MTTKRP of mode %d: %s", s->path,
                                     mode + 1, blco_strerror(err));
            s->kernels[mode] = FIBERS_BIT;
        } else if (resident_whole(s) && !s->gpu && s->nt > 1) {
            /* Likewise for the BLCO kernel on several threads: the batches split the
             * nonzeros between the threads otherwise than one call on the whole tensor does,
             * and sums in another order differ in the last bits. Computed again from memory
             * (once per process), every pass of this mode has the resident kernel's bits,
             * and a resumed run the uninterrupted one's. One thread adds in the same order
             * either way. */
            err = blco_mttkrp_cpu_ex(&s->res_view, mode, rank, factors, out, &mo, s->budget,
                                     s->plain ? BLCO_MT_NO_STAGE : 0, &s->scratch);
            if (err == -BLCO_ECANCELED)
                return blco_diag_set(diag, 0, err, "%s: stopped on request", s->path);
            if (err < 0)
                return blco_diag_set(diag, 0, err, "%s: MTTKRP of mode %d: %s", s->path,
                                     mode + 1, blco_strerror(err));
        }
    }
    blco_stat_add(&st->passes, 1);
    blco_stat_set_int(&st->mode, 0);
    return 0;
}

int stream_mttkrp_plain(blco_stream_t *s, int mode, int rank, const double *const *factors,
                        double *out, blco_diag_t *diag)
{
    s->plain = 1;
    int err = blco_stream_mttkrp(s, mode, rank, factors, out, diag);
    s->plain = 0;
    blco_mt_scratch_free(s->budget, &s->scratch); /* sized for this rank: not kept */
    return err;
}

gpu_pipe_t *stream_gpu(blco_stream_t *s)
{
    return s->gpu;
}

blco_budget_t *stream_budget(blco_stream_t *s)
{
    return s->budget;
}

int stream_deterministic(const blco_stream_t *s)
{
    return s->o.deterministic;
}

int stream_fibers_opt(const blco_stream_t *s)
{
    return s->o.seg_range ? BLCO_FIBERS_OFF : s->o.fibers;
}

int stream_gpu_sorted_opt(const blco_stream_t *s)
{
    return s->o.seg_range ? 0 : s->o.gpu_sorted;
}

const char *stream_path(const blco_stream_t *s)
{
    return s->path;
}

int stream_threads(const blco_stream_t *s)
{
    return s->nt;
}

void stream_count_loaded(blco_stream_t *s)
{
    blco_stat_add(&s->st->bytes_read, s->data_bytes);
    blco_stat_add(&s->st->segments_verified, s->seg1 - s->seg0);
    blco_stat_add(&s->st->segments_decoded, s->seg1 - s->seg0);
}

void stream_count_copy_pass(blco_stream_t *s, int mode, int sorted, double t0)
{
    blco_stats_t *st = s->st;
    s->kernels[mode] = sorted ? GPU_SORTED_BIT : GPU_FIBERS_BIT;
    blco_stat_add(&st->busy_ns[BLCO_STAGE_COMPUTE], ns_since(t0));
    blco_stat_add(&st->nnz_computed, s->nnz);
    blco_stat_add(&st->passes, 1);
    blco_stat_set_int(&st->mode, 0);
}

void *stream_cpd_state(blco_stream_t *s, size_t bytes, void (*destroy)(void *))
{
    if (!s->cpd) {
        s->cpd = calloc(1, bytes);
        s->cpd_destroy = destroy;
    }
    return s->cpd;
}

/* After a pass with the factors on the devices: a pass planned without the CPU (cpu 0) must
 * have given it no batch (it had no zeroed output or staged factors); counts the pass. */
static int pass_done(blco_stream_t *s, int cpu, uint64_t cpu0, blco_diag_t *diag)
{
    if (!cpu && gpu_pipe_cpu_batches(s->gpu) != cpu0)
        return blco_diag_set(diag, 0, -EIO, "%s: the CPU took a batch of a pass planned "
                             "without it (a bug: please report it)", s->path);
    blco_stat_add(&s->st->passes, 1);
    blco_stat_set_int(&s->st->mode, 0);
    return 0;
}

int stream_mttkrp_devices(blco_stream_t *s, int mode, int rank, const double *const *host_factors,
                          double *host_part, blco_diag_t *diag)
{
    const blco_layout_t *l = &s->info->layout;
    if (!s->gpu || mode < 0 || mode >= l->order || rank < 1 ||
        (gpu_pipe_hybrid(s->gpu) && (!host_part || !host_factors)))
        return -EINVAL;
    blco_stats_t *st = s->st;
    blco_stat_set_int(&st->mode, mode + 1);
    int err = pass_prepare(s, rank, diag);
    if (err < 0)
        return err;
    blco_mttkrp_opts_t mo;
    blco_mttkrp_opts_default(&mo);
    mo.threads = s->nt;
    mo.kernel = s->o.kernel;
    mo.cancel = &s->cancel;
    s->kernels[mode] = 0;
    staged_t sf;
    memset(&sf, 0, sizeof sf);
    /* The CPU's batches of a hybrid pass need a zeroed output and staged factors, both
     * O(I_n R) of host work; none when the pass gives the CPU no batch (the devices hold
     * the whole tensor: on the H100 these made hybrid CP-ALS 6x slower than cuda on a
     * 7M-row tensor). */
    const int cpu = host_part && !gpu_pipe_cpu_idle(s->gpu);
    if (cpu) {
        memset(host_part, 0, l->dims[mode] * (size_t)rank * sizeof(double));
        stage_factors(s, mode, rank, host_factors, &sf);
    }
    const uint64_t cpu0 = gpu_pipe_cpu_batches(s->gpu);
    if ((err = stream_pass(s, mode, rank, cpu ? sf.f : host_factors, host_part, &mo, NULL,
                           PASS_ON_DEVICES, diag)) < 0)
        return err;
    return pass_done(s, cpu, cpu0, diag);
}

/* ---- the TTM chain of Tucker ---- */

int stream_ttm_devices(blco_stream_t *s, int mode, const int *ranks, const int64_t *rowmap,
                       uint64_t rows, const double *const *host_factors, double *host_part,
                       blco_diag_t *diag)
{
    const blco_layout_t *l = &s->info->layout;
    if (!s->gpu || mode < 0 || mode >= l->order || !ranks ||
        (gpu_pipe_hybrid(s->gpu) && (!host_part || !host_factors)))
        return -EINVAL;
    const uint64_t P = blco_ttm_cols(l->order, ranks, mode);
    if (!P)
        return -EINVAL;
    blco_stats_t *st = s->st;
    blco_stat_set_int(&st->mode, mode + 1);
    int err = pass_prepare(s, (int)BLCO_MIN(P, 1024), diag);
    if (err < 0)
        return err;
    /* The CPU's batches of a hybrid pass add into host_part with the host factors; none
     * when the devices hold the whole tensor. */
    const int cpu = host_part && !gpu_pipe_cpu_idle(s->gpu);
    if (cpu)
        memset(host_part, 0, rows * P * sizeof(double));
    const ttm_spec_t t = {.ranks = ranks, .rowmap = rowmap, .rows = rows};
    const unsigned kernels = s->kernels[mode]; /* blco_stream_kernel_name is MTTKRP's */
    const uint64_t cpu0 = gpu_pipe_cpu_batches(s->gpu);
    err = stream_pass(s, mode, 0, host_factors, cpu ? host_part : NULL, NULL, &t,
                      PASS_ON_DEVICES, diag);
    s->kernels[mode] = kernels;
    if (err < 0)
        return err;
    return pass_done(s, cpu, cpu0, diag);
}


int blco_stream_ttm(blco_stream_t *s, int mode, const int *ranks, const double *const *U,
                    const int64_t *rowmap, uint64_t rows, double *Y, blco_diag_t *diag)
{
    if (!s || !ranks || !U || !Y)
        return -EINVAL;
    const blco_layout_t *l = &s->info->layout;
    if (mode < 0 || mode >= l->order)
        return blco_diag_set(diag, 0, -EINVAL, "%s: TTM of mode %d: the tensor has %d modes",
                             s->path, mode + 1, l->order);
    const uint64_t P = blco_ttm_cols(l->order, ranks, mode);
    if (!P)
        return blco_diag_set(diag, 0, -EINVAL, "%s: TTM of mode %d: a rank below 1, or too many "
                             "columns", s->path, mode + 1);
    if (!rowmap && rows != l->dims[mode])
        return blco_diag_set(diag, 0, -EINVAL, "%s: TTM of mode %d: %llu rows without a row map "
                             "(the mode has %llu)", s->path, mode + 1, (unsigned long long)rows,
                             (unsigned long long)l->dims[mode]);
    for (int m = 0; m < l->order; m++)
        if (m != mode && !U[m])
            return -EINVAL;
    blco_stats_t *st = s->st;
    blco_stat_set_int(&st->mode, mode + 1);
    int err = pass_prepare(s, (int)BLCO_MIN(P, 1024), diag);
    if (err < 0)
        return err;
    memset(Y, 0, rows * P * sizeof *Y);
    const ttm_spec_t t = {.ranks = ranks, .rowmap = rowmap, .rows = rows};
    if (ttm_fibers_on(s, mode, ranks)) {
        double t0 = blco_now();
        err = blco_fibers_ttm(s->fib[mode], ranks, U, rowmap, rows, Y, s->nt);
        count_resident(s, t0, err >= 0);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: TTM chain of mode %d on its fiber copy: %s",
                                 s->path, mode + 1, blco_strerror(err));
    } else if (resident_whole(s)) {
        double t0 = blco_now();
        err = cpu_batch(s, &s->res_view, mode, 0, U, Y, NULL, &t);
        count_resident(s, t0, err >= 0);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: TTM chain of mode %d: %s", s->path, mode + 1,
                                 blco_strerror(err));
    } else {
        const unsigned kernels = s->kernels[mode]; /* blco_stream_kernel_name is MTTKRP's */
        err = stream_pass(s, mode, 0, U, Y, NULL, &t, 0, diag);
        s->kernels[mode] = kernels;
        if (err < 0)
            return err;
    }
    blco_stat_add(&st->passes, 1);
    blco_stat_set_int(&st->mode, 0);
    return 0;
}

/* ---- a generic pass for other kernels ---- */

/* Streams every batch through the same reader, slots, residency and counters as an MTTKRP
 * pass, calling cb with each decoded batch as an in-memory tensor (the whole tensor at once
 * when it is resident decoded). CPU only; no read-ahead for the next pass. */
int blco_stream_foreach(blco_stream_t *s, int rank_hint, blco_stream_batch_fn cb, void *user,
                        blco_diag_t *diag)
{
    if (!s || !cb)
        return -EINVAL;
    if (s->gpu)
        return blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                             "%s: this kernel streams on the CPU backend only", s->path);
    blco_stats_t *st = s->st;
    int err = pass_prepare(s, rank_hint > 0 ? rank_hint : 16, diag);
    if (err < 0)
        return err;
    if (resident_whole(s)) {
        double t0 = blco_now();
        err = cb(user, &s->res_view);
        count_resident(s, t0, err >= 0);
        if (err < 0)
            return err;
        blco_stat_add(&st->passes, 1);
        return 0;
    }
    const uint64_t nb = s->nbatches;
    const int fill = s->res_kind != RES_NONE && !s->res_filled;
    const uint64_t first_disk = s->res_filled ? s->res_batches : 0;
    uint64_t next = s->pf_valid ? s->pf_next : first_disk;
    s->pf_valid = 0;
    s->idle_since = 0;
    if ((err = submit_more(s, &next, nb)) < 0)
        goto fail;
    for (uint64_t b = 0; b < nb; b++) {
        if (s->cancel) {
            err = blco_diag_set(diag, 0, -BLCO_ECANCELED, "%s: stopped on request", s->path);
            goto fail;
        }
        const batch_t *bt = &s->batches[b];
        const int from_disk = b >= first_disk, dec_res = b < s->res_dec_batches;
        const uint8_t *stored = NULL;
        if (!from_disk) {
            if (!dec_res)
                stored = s->res_stored + (bt->off - s->res_stored_off);
            blco_stat_add(&st->bytes_resident, bt->bytes);
        } else {
            if ((err = wait_batch(s, b, diag)) < 0)
                goto fail;
            stored = s->ring + (size_t)s->bslot[b] * s->slot_bytes;
        }
        uint64_t *idx = s->dec_idx;
        double *val = s->dec_val;
        if (dec_res) {
            idx = s->res_idx + (bt->first_nnz - s->batches[0].first_nnz);
            val = s->res_val + (bt->first_nnz - s->batches[0].first_nnz);
        }
        uint8_t *keep = from_disk && fill && !dec_res && b < s->res_batches
                            ? s->res_stored + (bt->off - s->res_stored_off)
                            : NULL;
        if (stored && (err = decode_batch(s, b, stored, !from_disk, keep, idx, val, diag)) < 0)
            goto fail;
        if (from_disk) {
            release_slot(s, b);
            if ((err = submit_more(s, &next, nb)) < 0)
                goto fail;
        }
        blco_tensor_t v;
        batch_view(s, b, idx, val, &v);
        double t0 = blco_now();
        err = cb(user, &v);
        blco_stat_add(&st->busy_ns[BLCO_STAGE_COMPUTE], ns_since(t0));
        if (err < 0)
            goto fail;
        blco_stat_add(&st->nnz_computed, bt->nnz);
    }
    if (fill)
        s->res_filled = 1;
    blco_stat_add(&st->passes, 1);
    return 0;
fail:
    drain(s);
    if (fill) {
        free_residency(s);
        s->res_kind = RES_NONE;
        s->res_decided = 0;
        blco_stat_set(&st->resident_bytes, 0);
        alloc_dec_buffer(s);
    }
    return err;
}
