/* A model, not a measurement: the device-memory traffic of the register MTTKRP kernel
 * (gpu/mttkrp_cuda_kernels.cuh) under each order in which its warps may take the tensor's
 * 32-nonzero chunks, through a simulated last-level cache, on machines without a GPU.
 *
 * The kernel's warps each take a sequence of chunks. "contiguous" (the kernel's order
 * before the schedule option): thread block b takes chunks c0(b) .. c1(b) - 1, a contiguous
 * share of the tensor, and its warp w takes c0 + w, c0 + w + warps, ...: the blocks resident
 * together work all over the tensor at once. "interleaved": the grid's warp g takes chunks
 * g, g + G, g + 2G, ... (G warps in the grid): the resident warps sweep the tensor in its
 * stored (ALTO) order together, as upstream BLCO's one-chunk-per-block launch does, so the
 * nonzeros in flight lie in one stretch of that order, whose coordinates share their high
 * bits in every mode.
 *
 * The model runs the grid's warps in lock step, one nonzero per warp and step, through a
 * set-associative LRU cache of --l2-mib MiB with 128-byte lines (Hopper: 50 MiB; the model
 * ignores its two partitions and sector fills). Per nonzero: its index and value (16 bytes,
 * read once per chunk; a sorted copy's coordinates by mode, 2 bytes for a mode of at most
 * 65536 rows, else 4, and value), a row of rank doubles of every other mode's factor (read),
 * and per distinct target row of the chunk one read-modify-write of the output row (the
 * kernel's atomics, one per row run after grouping). A miss reads the line from device
 * memory; a dirty line written back on eviction (or at the end) writes it. "sorted" models
 * the copy sorted by the target mode that blco_cuda_mttkrp_sorted walks (before 2026-11-29's
 * fifth session the model gave it BLCO's 16 bytes a nonzero). It reports, per shape, mode
 * and schedule, the modeled device-memory bytes, the cache's hit rates, and the output row
 * flushes a nonzero (each one a warp's atomic adds of a row's columns: the cache's work where
 * everything fits it, as on the NELL-2 shape); a GPU's times must come from bench_gpu on a
 * GPU.
 * JSON Lines on stdout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

#define LINE 128u
#define CHUNK 32u

typedef struct cache {
    uint64_t *tag; /* line address + 1; 0 = empty */
    uint64_t *age;
    uint8_t *dirty;
    uint64_t nsets, ways, clock;
    uint64_t rd_lines, wr_lines;
} cache_t;

static void cache_init(cache_t *c, uint64_t bytes, uint64_t ways)
{
    memset(c, 0, sizeof *c);
    c->ways = ways;
    c->nsets = bytes / LINE / ways;
    if (c->nsets < 1)
        c->nsets = 1;
    const uint64_t n = c->nsets * ways;
    c->tag = calloc(n, sizeof *c->tag);
    c->age = calloc(n, sizeof *c->age);
    c->dirty = calloc(n, 1);
    if (!c->tag || !c->age || !c->dirty)
        cli_die("out of memory for the cache model");
}

static void cache_free(cache_t *c)
{
    free(c->tag);
    free(c->age);
    free(c->dirty);
}

/* Returns 1 on a hit. A miss fills the line (reading it), evicting the set's least recently
 * used line (writing it back when dirty). */
static int cache_access(cache_t *c, uint64_t line, int write)
{
    /* hashed set index: rows laid out at power-of-two strides would alias otherwise */
    const uint64_t set = ((line * 0x9E3779B97F4A7C15ull) >> 20) % c->nsets;
    uint64_t *tag = c->tag + set * c->ways, *age = c->age + set * c->ways;
    uint8_t *dirty = c->dirty + set * c->ways;
    const uint64_t t = line + 1;
    uint64_t victim = 0;
    c->clock++;
    for (uint64_t w = 0; w < c->ways; w++) {
        if (tag[w] == t) {
            age[w] = c->clock;
            dirty[w] |= (uint8_t)write;
            return 1;
        }
        if (age[w] < age[victim])
            victim = w;
    }
    if (tag[victim] && dirty[victim])
        c->wr_lines++;
    c->rd_lines++;
    tag[victim] = t;
    age[victim] = c->clock;
    dirty[victim] = (uint8_t)write;
    return 0;
}

static void cache_flush(cache_t *c)
{
    for (uint64_t i = 0; i < c->nsets * c->ways; i++)
        if (c->tag[i] && c->dirty[i])
            c->wr_lines++;
}

typedef struct counts {
    uint64_t acc, hit;
} counts_t;

/* The lines of `bytes` bytes at `addr` (an array's base plus an offset), counted into k. */
static void touch(cache_t *c, uint64_t addr, uint64_t bytes, int write, counts_t *k)
{
    for (uint64_t l = addr / LINE; l <= (addr + bytes - 1) / LINE; l++) {
        k->acc++;
        k->hit += (uint64_t)cache_access(c, l, write);
    }
}

typedef struct model {
    uint64_t l2_bytes, ways;
    int sms, blocks_per_sm, block_warps, rank;
} model_t;

/* Each array at its own 1 TiB of address space. */
#define BASE(k) ((uint64_t)(k) << 40)

static const char *const sched_name[3] = {"contiguous", "interleaved", "sorted"};

/* sched 0 contiguous, 1 interleaved, 2 sorted: the nonzeros in order of their target row
 * (stable: stored order within a row), taken interleaved, as a copy of the tensor sorted
 * for this mode (a fiber copy's order) would be: the rows of a chunk repeat, each row's
 * atomics stay in one or two chunks. */
static void run_mode(const model_t *M, const char *name, const blco_tensor_t *x,
                     const uint32_t *const *coord, int mode, int sched)
{
    const int interleaved = sched >= 1;
    const uint64_t *perm = NULL;
    uint64_t *sorted = NULL;
    if (sched == 2) { /* counting sort by the target row */
        const uint64_t rows = x->layout.dims[mode];
        uint64_t *at = calloc(rows + 1, sizeof *at);
        sorted = malloc(x->nnz * sizeof *sorted);
        if (!at || !sorted)
            cli_die("out of memory for the sorted order");
        for (uint64_t p = 0; p < x->nnz; p++)
            at[coord[mode][p] + 1]++;
        for (uint64_t r = 0; r < rows; r++)
            at[r + 1] += at[r];
        for (uint64_t p = 0; p < x->nnz; p++)
            sorted[at[coord[mode][p]]++] = p;
        free(at);
        perm = sorted;
    }
#define NZ(p) (perm ? perm[p] : (p))
    const int order = x->layout.order;
    const uint64_t nnz = x->nnz, nchunks = (nnz + CHUNK - 1) / CHUNK;
    const uint64_t nw = (uint64_t)M->block_warps;
    const uint64_t want = (nchunks + nw - 1) / nw;
    const uint64_t cap = (uint64_t)M->sms * (uint64_t)M->blocks_per_sm;
    const uint64_t grid = want < cap ? want : cap;
    const uint64_t G = grid * nw, row_bytes = (uint64_t)M->rank * 8;
    cache_t c;
    cache_init(&c, M->l2_bytes, M->ways);
    counts_t k_stream = {0}, k_factor = {0}, k_out = {0};
    /* per warp: its next chunk's position in its sequence, the current chunk, its rows */
    uint64_t *cur = malloc(G * sizeof *cur);
    uint32_t(*rows)[CHUNK] = malloc(G * sizeof *rows);
    uint8_t *nrows = malloc(G);
    if (!cur || !rows || !nrows)
        cli_die("out of memory for the schedule");
    uint64_t active = G, flushes = 0;
    for (uint64_t k = 0; active; k++) {
        active = 0;
        for (uint64_t g = 0; g < G; g++) { /* the k-th chunk of every warp, or none */
            uint64_t ch;
            if (interleaved) {
                ch = g + k * G;
            } else {
                const uint64_t b = g / nw, w = g % nw, per = nchunks / grid, rem = nchunks % grid;
                const uint64_t c0 = b * per + (b < rem ? b : rem), c1 = c0 + per + (b < rem);
                ch = c0 + w + k * nw;
                if (ch >= c1)
                    ch = UINT64_MAX;
            }
            cur[g] = ch < nchunks ? ch : UINT64_MAX;
            if (cur[g] == UINT64_MAX)
                continue;
            active++;
            /* the chunk's distinct target rows, in order of first appearance */
            nrows[g] = 0;
            const uint64_t p0 = ch * CHUNK, p1 = p0 + CHUNK < nnz ? p0 + CHUNK : nnz;
            for (uint64_t p = p0; p < p1; p++) {
                const uint32_t r = coord[mode][NZ(p)];
                int seen = 0;
                for (int i = 0; i < nrows[g] && !seen; i++)
                    seen = rows[g][i] == r;
                if (!seen)
                    rows[g][nrows[g]++] = r;
            }
            flushes += nrows[g];
        }
        for (uint32_t s = 0; s < CHUNK; s++)
            for (uint64_t g = 0; g < G; g++) {
                if (cur[g] == UINT64_MAX)
                    continue;
                const uint64_t p = cur[g] * CHUNK + s;
                if (s == 0) { /* the chunk's indices and values, loaded together */
                    const uint64_t n =
                        (nnz - cur[g] * CHUNK < CHUNK ? nnz - cur[g] * CHUNK : CHUNK);
                    if (sched == 2) /* the sorted copy: a coordinate array a mode */
                        for (int m = 0; m < order; m++) {
                            const uint64_t w = x->layout.dims[m] <= 65536 ? 2 : 4;
                            touch(&c, BASE(16 + m) + cur[g] * CHUNK * w, n * w, 0, &k_stream);
                        }
                    else /* BLCO: the 64-bit ALTO index */
                        touch(&c, BASE(14) + cur[g] * CHUNK * 8, n * 8, 0, &k_stream);
                    touch(&c, BASE(15) + cur[g] * CHUNK * 8, n * 8, 0, &k_stream);
                }
                if (p < nnz)
                    for (int m = 0; m < order; m++)
                        if (m != mode)
                            touch(&c, BASE(m) + (uint64_t)coord[m][NZ(p)] * row_bytes, row_bytes, 0,
                                  &k_factor);
                if (s < nrows[g]) /* one row's atomics per step, as its run is flushed */
                    touch(&c, BASE(13) + (uint64_t)rows[g][s] * row_bytes, row_bytes, 1, &k_out);
            }
    }
    cache_flush(&c);
    const double rd = (double)c.rd_lines * LINE, wr = (double)c.wr_lines * LINE;
    printf("{\"bench\":\"gpu_l2_model\",\"what\":\"mode\",\"shape\":\"%s\",\"mode\":%d,"
           "\"rows\":%llu,\"nnz\":%llu,\"rank\":%d,\"schedule\":\"%s\",\"warps\":%llu,"
           "\"grid\":%llu,\"factor_hit\":%.4f,\"output_hit\":%.4f,\"stream_hit\":%.4f,"
           "\"dram_read_bytes\":%.0f,\"dram_write_bytes\":%.0f,\"dram_bytes_per_nnz\":%.1f,"
           "\"row_flushes_per_nnz\":%.3f}\n",
           name, mode + 1, (unsigned long long)x->layout.dims[mode], (unsigned long long)nnz,
           M->rank, sched_name[sched], (unsigned long long)G, (unsigned long long)grid,
           k_factor.acc ? (double)k_factor.hit / k_factor.acc : 0,
           k_out.acc ? (double)k_out.hit / k_out.acc : 0,
           k_stream.acc ? (double)k_stream.hit / k_stream.acc : 0, rd, wr,
           (rd + wr) / (double)(nnz ? nnz : 1), (double)flushes / (double)(nnz ? nnz : 1));
    fflush(stdout);
    free(cur);
    free(rows);
    free(nrows);
    free(sorted);
    cache_free(&c);
#undef NZ
}

static void run_tensor(const model_t *M, const char *name, const blco_tensor_t *x, int sched)
{
    const blco_layout_t *l = &x->layout;
    uint32_t *coord[BLCO_MAX_MODES] = {0};
    for (int m = 0; m < l->order; m++) {
        if (l->dims[m] > UINT32_MAX)
            cli_die("%s: mode %d has more than 2^32 rows", name, m + 1);
        if (!(coord[m] = malloc(x->nnz * sizeof *coord[m])))
            cli_die("out of memory for the coordinates");
    }
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *bl = &x->blocks[b];
        for (uint64_t p = bl->start; p < bl->start + bl->nnz; p++)
            for (int m = 0; m < l->order; m++) {
                const uint64_t lo = l->low_bits[m] ? (x->idx[p] >> l->pos[m]) & l->low_mask[m] : 0;
                coord[m][p] = (uint32_t)(lo | bl->coord[m]);
            }
    }
    for (int mode = 0; mode < l->order; mode++)
        for (int s = 0; s < 3; s++)
            if (sched < 0 || sched == s)
                run_mode(M, name, x, (const uint32_t *const *)coord, mode, s);
    for (int m = 0; m < l->order; m++)
        free(coord[m]);
}

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: gpu_l2_model [--nnz 20M] [--shape nell2|long|all] [--tensor FILE.blco]\n"
            "                    [--rank 32] [--schedule contiguous|interleaved|sorted|all]\n"
            "                    [--l2-mib 50] [--ways 16] [--sms 132] [--blocks-per-sm 8]\n"
            "                    [--block-warps 8] [--seed 1]\n"
            "The modeled device-memory traffic of the register MTTKRP kernel per chunk\n"
            "schedule, through a simulated LRU cache (a model, not a GPU's measurement; the\n"
            "defaults are an H100/H200 with 256-thread blocks, 8 resident per SM). sorted: the\n"
            "nonzeros in order of their target row, as a copy sorted per mode would hold them.\n");
    exit(status);
}

int main(int argc, char **argv)
{
    cli_tool = "gpu_l2_model";
    model_t M = {50ull << 20, 16, 132, 8, 8, 32};
    uint64_t nnz = 20000000, seed = 1;
    const char *which = "all", *tensor = NULL;
    int sched = -1;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h"))
            usage(0);
        if (i + 1 >= argc)
            usage(2);
        const char *v = argv[++i];
        if (!strcmp(k, "--nnz"))
            nnz = cli_count(v, "--nnz");
        else if (!strcmp(k, "--shape")) {
            if (strcmp(v, "nell2") && strcmp(v, "long") && strcmp(v, "all"))
                cli_usage_error("--shape: '%s' is not nell2, long or all", v);
            which = v;
        } else if (!strcmp(k, "--tensor"))
            tensor = v;
        else if (!strcmp(k, "--rank"))
            M.rank = cli_int(v, "--rank", 1, 4096);
        else if (!strcmp(k, "--schedule")) {
            if (!strcmp(v, "contiguous"))
                sched = 0;
            else if (!strcmp(v, "interleaved"))
                sched = 1;
            else if (!strcmp(v, "sorted"))
                sched = 2;
            else if (!strcmp(v, "all"))
                sched = -1;
            else
                cli_usage_error("--schedule: '%s' is not contiguous, interleaved, sorted or all",
                                v);
        } else if (!strcmp(k, "--l2-mib"))
            M.l2_bytes = (uint64_t)cli_int(v, "--l2-mib", 1, 1 << 16) << 20;
        else if (!strcmp(k, "--ways"))
            M.ways = (uint64_t)cli_int(v, "--ways", 1, 64);
        else if (!strcmp(k, "--sms"))
            M.sms = cli_int(v, "--sms", 1, 1024);
        else if (!strcmp(k, "--blocks-per-sm"))
            M.blocks_per_sm = cli_int(v, "--blocks-per-sm", 1, 64);
        else if (!strcmp(k, "--block-warps"))
            M.block_warps = cli_int(v, "--block-warps", 1, 32);
        else if (!strcmp(k, "--seed"))
            seed = cli_u64(v, "--seed");
        else
            usage(2);
    }
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    printf("{\"bench\":\"gpu_l2_model\",\"what\":\"model\",\"machine\":\"%s\",\"l2_mib\":%llu,"
           "\"ways\":%llu,\"line\":%u,\"sms\":%d,\"blocks_per_sm\":%d,\"block_warps\":%d,"
           "\"note\":\"a model of device-memory traffic, not a GPU measurement\"}\n",
           cpu, (unsigned long long)(M.l2_bytes >> 20), (unsigned long long)M.ways, LINE, M.sms,
           M.blocks_per_sm, M.block_warps);
    if (tensor) {
        blco_tensor_t *x;
        blco_diag_t diag = {0};
        int err = blco_file_load(tensor, NULL, &x, NULL, &diag);
        if (err < 0)
            cli_die("%s: %s (%s)", tensor, blco_strerror(err), diag.msg);
        const char *base = strrchr(tensor, '/');
        char name[128];
        snprintf(name, sizeof name, "%s", base ? base + 1 : tensor);
        for (char *q = name; *q; q++) /* keep the JSON valid */
            if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
                *q = '_';
        run_tensor(&M, name, x, sched);
        blco_tensor_destroy(x);
        return 0;
    }
    for (int i = 0; i < BENCH_GPU_NSHAPES; i++)
        if (!strcmp(which, "all") || !strcmp(which, bench_gpu_shapes[i].name)) {
            blco_tensor_t *x = bench_gpu_shape_make(&bench_gpu_shapes[i], nnz, seed);
            run_tensor(&M, bench_gpu_shapes[i].name, x, sched);
            blco_tensor_destroy(x);
        }
    return 0;
}
