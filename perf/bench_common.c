/* Machine description shared by the benchmarks. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

void bench_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *v = strchr(line, ':');
        if (v) {
            v += 1 + (v[1] == ' ');
            v[strcspn(v, "\n")] = 0;
            for (char *q = v; *q; q++) /* keep the JSON valid */
                if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
                    *q = ' ';
            snprintf(buf, len, "%s", v);
        }
        break;
    }
    fclose(f);
}

int bench_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void bench_reference_tensor(blco_gen_opts_t *g)
{
    blco_gen_opts_default(g);
    g->kind = BLCO_GEN_POWERLAW;
    g->order = 3;
    g->dims[0] = 20000, g->dims[1] = 15000, g->dims[2] = 10000;
    g->nnz = 20000000;
}

void bench_write_scaled_tensor(const char *path, uint64_t nnz)
{
    blco_gen_opts_t g;
    bench_reference_tensor(&g);
    double s = cbrt((double)nnz / (double)g.nnz);
    for (int m = 0; m < 3; m++) {
        g.dims[m] = (uint64_t)((double)g.dims[m] * s) + 1;
        g.skew[m] = 1.5;
    }
    g.nnz = nnz;
    g.seed = 1;
    blco_coo_t *x;
    int err = blco_gen_coo(&g, NULL, &x);
    if (err < 0)
        cli_die("generating: %s", blco_strerror(err));
    memcpy(x->dims, g.dims, sizeof g.dims);
    blco_tensor_t *t;
    blco_diag_t d = {0};
    if ((err = blco_tensor_from_coo(x, NULL, NULL, &t, &d)) < 0)
        cli_die("building: %s %s", blco_strerror(err), d.msg);
    blco_coo_destroy(x);
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.force = 1;
    if ((err = blco_tensor_write(t, path, &wo, NULL, &d)) < 0)
        cli_die("writing %s: %s %s", path, blco_strerror(err), d.msg);
    blco_tensor_destroy(t);
}

const bench_gpu_shape_t bench_gpu_shapes[BENCH_GPU_NSHAPES] = {
    /* NELL-2's dims; its nonzeros cluster in a few heavy slices, hence the power law. */
    {"nell2", BLCO_GEN_POWERLAW, 2.0, 3, {12092, 9184, 28818}},
    /* Long modes: factor rows far apart, no reuse in cache. */
    {"long", BLCO_GEN_UNIFORM, 1.0, 3, {4000000, 2000000, 1000000}},
};

blco_tensor_t *bench_gpu_shape_make(const bench_gpu_shape_t *sh, uint64_t nnz, uint64_t seed)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = sh->kind;
    g.order = sh->order;
    g.nnz = nnz;
    g.seed = seed;
    for (int m = 0; m < sh->order; m++) {
        g.dims[m] = sh->dims[m];
        g.skew[m] = sh->skew;
    }
    blco_coo_t *coo;
    int err = blco_gen_coo(&g, NULL, &coo);
    if (err < 0)
        cli_die("generating %s: %s", sh->name, blco_strerror(err));
    blco_tensor_t *x;
    blco_diag_t diag = {0};
    if ((err = blco_tensor_from_coo(coo, NULL, NULL, &x, &diag)) < 0)
        cli_die("building BLCO: %s (%s)", blco_strerror(err), diag.msg);
    blco_coo_destroy(coo);
    return x;
}

void bench_round_places(blco_tensor_t *t, int places)
{
    double p = 1;
    for (int d = 0; d < places; d++)
        p *= 10;
    for (uint64_t i = 0; i < t->nnz; i++)
        t->val[i] = fmax(nearbyint(t->val[i] * p), 1) / p;
}
