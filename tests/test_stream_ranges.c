/* Segment ranges of the streaming engine (blco_stream_opts_t.seg_range), the shares of a
 * distributed run (blco/dist.h): the partition of P ranks covers the segments once, in
 * order, balanced by nonzeros; the ranges' MTTKRPs, each streamed on its own (two passes:
 * the second from memory where the tier keeps it), sum to the naive oracle's, on the CPU
 * in every residency tier and, where a GPU (or the SIMT emulation) answers, on the cuda
 * and hybrid backends; an empty range gives zeros and one past the table is refused. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"
#include "stream_oracle.h"

static char path[4200];
static blco_coo_t *x, *xabs;
static blco_file_t *f;
static double *fac[BLCO_MAX_MODES];
static const int rank = 5;

/* The ranks' shares of `P`, checked: contiguous, covering, balanced. */
static void partition(int P, uint64_t *b, uint64_t *e)
{
    const blco_file_info_t *in = blco_file_info(f);
    uint64_t maxseg = 0;
    for (uint64_t i = 0; i < in->nsegments; i++)
        if (blco_file_segment(f, i)->nnz > maxseg)
            maxseg = blco_file_segment(f, i)->nnz;
    for (int r = 0; r < P; r++) {
        blco_dist_partition(f, r, P, &b[r], &e[r]);
        uint64_t nnz = 0;
        for (uint64_t i = b[r]; i < e[r]; i++)
            nnz += blco_file_segment(f, i)->nnz;
        CHECK(b[r] <= e[r] && (r ? b[r] == e[r - 1] : b[r] == 0) &&
                  (r < P - 1 || e[r] == in->nsegments),
              "P %d rank %d: segments %llu..%llu", P, r, (unsigned long long)b[r],
              (unsigned long long)e[r]);
        CHECK(nnz <= in->nnz / P + maxseg, "P %d rank %d: %llu nonzeros of %llu", P, r,
              (unsigned long long)nnz, (unsigned long long)in->nnz);
    }
}

/* Every mode: the sum of the P ranges' MTTKRPs against the oracle. */
static void sum_of_ranges(int P, int backend, int residency)
{
    uint64_t b[8], e[8];
    partition(P, b, e);
    for (int m = 0; m < x->order; m++) {
        uint64_t n = x->dims[m] * (uint64_t)rank;
        double *sum = calloc(n, 8), *out = malloc(n * 8), *ref = malloc(n * 8),
               *bound = malloc(n * 8);
        for (int r = 0; r < P; r++) {
            blco_stream_opts_t o;
            blco_stream_opts_default(&o);
            o.residency = residency;
            o.threads = 2;
            o.backend = backend;
            o.seg_range = 1;
            o.seg_begin = b[r];
            o.seg_end = e[r];
            blco_stream_t *s;
            blco_diag_t d = {0};
            int err = blco_stream_open(path, &o, NULL, &s, &d);
            CHECK(err == 0, "P %d rank %d backend %d: open: %s", P, r, backend, d.msg);
            if (err)
                continue;
            for (int pass = 0; pass < 2; pass++) {
                for (uint64_t i = 0; i < n; i++)
                    out[i] = NAN;
                err = blco_stream_mttkrp(s, m, rank, (const double *const *)fac, out, &d);
                CHECK(err == 0, "P %d rank %d mode %d: %s", P, r, m + 1, d.msg);
                if (pass == 1)
                    for (uint64_t i = 0; i < n; i++)
                        sum[i] += out[i];
            }
            blco_stream_close(s);
        }
        blco_mttkrp_naive(x, m, rank, (const double *const *)fac, ref);
        blco_mttkrp_naive(xabs, m, rank, (const double *const *)fac, bound);
        double w = worst_ratio(sum, ref, bound, n);
        CHECK(w <= 64, "P %d backend %d residency %d mode %d: off by %.3g x 1e-12 of the bound", P,
              backend, residency, m + 1, w);
        free(sum), free(out), free(ref), free(bound);
    }
}

static void edges(void)
{
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.seg_range = 1;
    o.seg_begin = o.seg_end = 3;
    blco_stream_t *s;
    blco_diag_t d = {0};
    int err = blco_stream_open(path, &o, NULL, &s, &d);
    CHECK(err == 0, "empty range: %s", d.msg);
    if (err == 0) {
        uint64_t n = x->dims[0] * (uint64_t)rank;
        double *out = malloc(n * 8), worst = 0;
        for (uint64_t i = 0; i < n; i++)
            out[i] = NAN;
        err = blco_stream_mttkrp(s, 0, rank, (const double *const *)fac, out, &d);
        for (uint64_t i = 0; i < n; i++)
            worst = isnan(out[i]) ? INFINITY : fmax(worst, fabs(out[i]));
        CHECK(err == 0 && worst == 0, "empty range: %s, largest %g", d.msg, worst);
        free(out);
        blco_stream_close(s);
    }
    o.seg_begin = 0;
    o.seg_end = blco_file_info(f)->nsegments + 1;
    err = blco_stream_open(path, &o, NULL, &s, &d);
    CHECK(err == -EINVAL && strstr(d.msg, "asked, the file has"), "range past the end: %s (%s)",
          blco_strerror(err), d.msg);
    if (err == 0)
        blco_stream_close(s);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/blco-ranges-%d.blco", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = 3;
    g.dims[0] = 900, g.dims[1] = 700, g.dims[2] = 40;
    g.nnz = 9000;
    g.seed = 21;
    for (int m = 0; m < 3; m++)
        g.skew[m] = 1.5;
    int err = blco_gen_coo(&g, NULL, &x);
    CHECK(err == 0, "gen: %s", blco_strerror(err));
    if (err)
        return check_done();
    memcpy(x->dims, g.dims, sizeof g.dims);
    xabs = abs_copy(x);
    /* line bits 12: several blocks, so ranges start and end inside blocks */
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.line_bits = 12;
    blco_tensor_t *t;
    blco_diag_t d = {0};
    if ((err = blco_tensor_from_coo(x, &bo, NULL, &t, &d)) == 0) {
        blco_write_opts_t wo;
        blco_write_opts_default(&wo);
        wo.segment_nnz = 64;
        wo.force = 1;
        blco_file_info_t info;
        err = blco_tensor_write(t, path, &wo, &info, &d);
        blco_tensor_destroy(t);
    }
    CHECK(err == 0, "build and write: %s (%s)", blco_strerror(err), d.msg);
    if (err == 0 && (err = blco_file_open(path, &f, &d)) < 0)
        CHECK(0, "open: %s", d.msg);
    if (err == 0) {
        const blco_file_info_t *in = blco_file_info(f);
        CHECK(in->nblocks > 1 && in->nsegments > 8, "%llu blocks, %llu segments",
              (unsigned long long)in->nblocks, (unsigned long long)in->nsegments);
        for (int m = 0; m < 3; m++)
            fac[m] = rand_matrix(x->dims[m], rank, 3 + m);
        /* every tier on 3 ranks, the default on the others */
        sum_of_ranges(1, BLCO_BACKEND_CPU, BLCO_RESIDENT_AUTO);
        sum_of_ranges(2, BLCO_BACKEND_CPU, BLCO_RESIDENT_AUTO);
        sum_of_ranges(3, BLCO_BACKEND_CPU, BLCO_RESIDENT_AUTO);
        sum_of_ranges(3, BLCO_BACKEND_CPU, BLCO_RESIDENT_STORED);
        sum_of_ranges(3, BLCO_BACKEND_CPU, BLCO_RESIDENT_NONE);
        sum_of_ranges(5, BLCO_BACKEND_CPU, BLCO_RESIDENT_AUTO);
        edges();
        int ngpu = 0;
        char name[256];
        if (blco_cuda_probe(&ngpu, name, sizeof name) >= 0 && ngpu > 0) {
            printf("GPU: %s\n", name);
            sum_of_ranges(3, BLCO_BACKEND_CUDA, BLCO_RESIDENT_AUTO);
            sum_of_ranges(2, BLCO_BACKEND_HYBRID, BLCO_RESIDENT_NONE);
        } else {
            printf("no GPU: the cuda and hybrid backends skipped\n");
        }
        for (int m = 0; m < 3; m++)
            free(fac[m]);
        blco_file_close(f);
    }
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
    remove(path);
    return check_done();
}
