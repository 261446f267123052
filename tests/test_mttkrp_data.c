/* CPU MTTKRP on the shared real and reference tensors (every .tns file in
 * $BLCO_SHARED_DATA): all modes, ranks 16 and 3, optimized kernels against the naive
 * oracle. Skips (exit 77) without the data directory. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static double unit_rand(uint64_t *s)
{
    return (double)(check_rand(s) >> 11) * 0x1.0p-53;
}

static void run_rank(const char *name, const blco_coo_t *x, const blco_coo_t *xabs,
                     const blco_tensor_t *t, int rank)
{
    double *a[BLCO_MAX_MODES] = {0}, *aabs[BLCO_MAX_MODES] = {0};
    uint64_t seed = 42 + (uint64_t)rank;
    for (int m = 0; m < x->order; m++) {
        size_t n = x->dims[m] * (size_t)rank;
        a[m] = malloc(n * sizeof(double));
        aabs[m] = malloc(n * sizeof(double));
        if (!a[m] || !aabs[m]) {
            CHECK(0, "%s: out of memory", name);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            a[m][i] = 2.0 * unit_rand(&seed) - 1.0;
            aabs[m][i] = fabs(a[m][i]);
        }
    }
    for (int mode = 0; mode < x->order; mode++) {
        size_t n = x->dims[mode] * (size_t)rank;
        double *ref = malloc(n * 8), *scale = malloc(n * 8), *got = malloc(n * 8);
        if (!ref || !scale || !got) {
            CHECK(0, "%s: out of memory", name);
            free(ref), free(scale), free(got);
            goto out;
        }
        int err = blco_mttkrp_naive(x, mode, rank, (const double *const *)a, ref);
        CHECK(err == 0, "%s mode %d: naive: %s", name, mode, blco_strerror(err));
        err = blco_mttkrp_naive(xabs, mode, rank, (const double *const *)aabs, scale);
        CHECK(err == 0, "%s mode %d: naive |x|: %s", name, mode, blco_strerror(err));
        static const int kernels[] = {BLCO_CPU_KERNEL_AUTO, BLCO_CPU_KERNEL_PRIVATE,
                                      BLCO_CPU_KERNEL_ATOMIC, BLCO_CPU_KERNEL_OWNER};
        for (int ki = 0; ki < 4; ki++) {
            for (int threads = 1; threads <= 2; threads++) {
                blco_mttkrp_opts_t o;
                blco_mttkrp_opts_default(&o);
                o.kernel = kernels[ki];
                o.threads = threads;
                for (size_t i = 0; i < n; i++)
                    got[i] = NAN;
                err = blco_mttkrp_cpu(t, mode, rank, (const double *const *)a, got, &o, NULL);
                uint64_t bad = 0;
                size_t first = 0;
                for (size_t i = 0; i < n && !err; i++) {
                    if (!(fabs(got[i] - ref[i]) <= 1e-12 * scale[i])) {
                        if (!bad)
                            first = i;
                        bad++;
                    }
                }
                CHECK(err == 0 && bad == 0,
                      "%s (order %d, nnz %llu) mode %d rank %d kernel %s threads %d: %s, "
                      "%llu entries off, first at %zu: got %.17g want %.17g",
                      name, x->order, (unsigned long long)x->nnz, mode, rank,
                      blco_mttkrp_kernel_name(o.kernel), threads, blco_strerror(err),
                      (unsigned long long)bad, first, got[first], ref[first]);
            }
        }
        free(ref), free(scale), free(got);
    }
out:
    for (int m = 0; m < x->order; m++) {
        free(a[m]);
        free(aabs[m]);
    }
}

static void run_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    blco_coo_t *x = NULL, *xabs = NULL;
    blco_tensor_t *t = NULL;
    blco_diag_t diag = {0};
    int err = blco_tns_read_file(path, NULL, NULL, &x, NULL, &diag);
    CHECK(err == 0, "%s:%llu: %s (%s)", path, (unsigned long long)diag.line, blco_strerror(err),
          diag.msg);
    if (err)
        goto out;
    if ((err = blco_coo_create(&xabs, x->order, x->nnz, NULL)) < 0)
        goto out;
    for (uint64_t k = 0; k < x->nnz; k++) {
        uint64_t c[BLCO_MAX_MODES];
        for (int m = 0; m < x->order; m++)
            c[m] = x->ind[m][k];
        if ((err = blco_coo_push(xabs, c, fabs(x->val[k]))) < 0)
            goto out;
    }
    memcpy(xabs->dims, x->dims, sizeof x->dims);
    err = blco_tensor_from_coo(x, NULL, NULL, &t, &diag);
    CHECK(err == 0, "%s: blco_tensor_from_coo: %s (%s)", name, blco_strerror(err), diag.msg);
    if (err)
        goto out;
    printf("%s: order %d, nnz %llu, %llu blocks\n", name, x->order, (unsigned long long)x->nnz,
           (unsigned long long)t->nblocks);
    run_rank(name, x, xabs, t, 16);
    run_rank(name, x, xabs, t, 3);
out:
    CHECK(err == 0, "%s: %s", name, blco_strerror(err));
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

int main(void)
{
    const char *dir = getenv("BLCO_SHARED_DATA");
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        printf("skip: BLCO_SHARED_DATA %s\n", dir ? "is not a readable directory" : "is unset");
        return 77;
    }
    char *names[256];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < 256) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".tns") == 0)
            names[count++] = strdup(e->d_name);
    }
    closedir(d);
    if (!count) {
        printf("skip: no .tns file in %s\n", dir);
        return 77;
    }
    qsort(names, count, sizeof names[0], cmp_names);
    for (int i = 0; i < count; i++) {
        run_file(dir, names[i]);
        free(names[i]);
    }
    return check_done();
}
