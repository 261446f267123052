/* Moving factor rows between a relabeled file's index space and the source's: in-place
 * permutations by cycle following, one row of scratch and a visited bitmap. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blco/labels.h"
#include "blco_internal.h"

uint64_t blco_labels_bytes(const blco_file_info_t *info)
{
    uint64_t b = 0;
    for (int n = 0; n < info->layout.order; n++)
        if (info->relabeled_modes >> n & 1)
            b += 4 * info->layout.dims[n];
    return b;
}

void blco_labels_free(blco_labels_t *L)
{
    if (!L)
        return;
    for (int n = 0; n < L->order; n++)
        if (L->new_to_old[n]) {
            if (L->budget)
                blco_budget_free(L->budget, L->new_to_old[n], 4 * L->dims[n]);
            else
                free(L->new_to_old[n]);
        }
    free(L);
}

int blco_labels_load(blco_file_t *f, blco_budget_t *budget, blco_labels_t **out, blco_diag_t *diag)
{
    *out = NULL;
    const blco_file_info_t *in = blco_file_info(f);
    if (!in->relabeled_modes)
        return 0;
    blco_labels_t *L = calloc(1, sizeof *L);
    if (!L)
        return -ENOMEM;
    L->order = in->layout.order;
    L->reorder = in->reorder;
    L->budget = budget;
    memcpy(L->dims, in->layout.dims, sizeof L->dims);
    int err = 0;
    for (int n = 0; n < L->order && err == 0; n++) {
        if (!(in->relabeled_modes >> n & 1))
            continue;
        size_t bytes = (size_t)(4 * L->dims[n]);
        void *p = NULL;
        if (budget)
            err = blco_budget_alloc(budget, bytes, &p);
        else if (!(p = malloc(bytes)))
            err = -ENOMEM;
        if (err < 0) {
            char a[32];
            err = blco_diag_set(diag, 0, budget ? -BLCO_EBUDGET : err,
                                "no memory for the labels of mode %d (%s; the file's indices "
                                "were relabeled by blco-pack --reorder)",
                                n + 1, blco_format_size(bytes, a, sizeof a));
            break;
        }
        L->new_to_old[n] = p;
        err = blco_file_read_labels(f, n, L->new_to_old[n], diag);
    }
    if (err < 0) {
        blco_labels_free(L);
        return err;
    }
    *out = L;
    return 0;
}

int blco_labels_load_path(const char *path, blco_budget_t *budget, blco_labels_t **out,
                          blco_diag_t *diag)
{
    blco_file_t *f;
    *out = NULL;
    int err = blco_file_open(path, &f, diag);
    if (err < 0)
        return err;
    err = blco_labels_load(f, budget, out, diag);
    blco_file_close(f);
    return err;
}

/* to_user: row k goes to p[k]. from_user: row k comes from p[k]. */
static int permute_rows(const blco_labels_t *L, int mode, double *rows, uint64_t cols, int to_user)
{
    if (!L || mode < 0 || mode >= L->order || !L->new_to_old[mode] || !cols)
        return 0;
    const uint32_t *p = L->new_to_old[mode];
    uint64_t d = L->dims[mode];
    size_t rb = (size_t)cols * sizeof(double);
    uint64_t *done = calloc((size_t)((d + 63) / 64), 8);
    double *tmp = malloc(rb);
    if (!done || !tmp) {
        free(done);
        free(tmp);
        return -ENOMEM;
    }
#define DONE(i) (done[(i) / 64] >> ((i) % 64) & 1)
#define MARK(i) (done[(i) / 64] |= 1ull << ((i) % 64))
    for (uint64_t s = 0; s < d; s++) {
        if (DONE(s) || p[s] == s) {
            MARK(s);
            continue;
        }
        if (to_user) {
            /* carry row s along its cycle: it lands on p[s], whose row lands on p[p[s]] */
            memcpy(tmp, rows + s * cols, rb);
            MARK(s);
            for (uint64_t j = p[s]; j != s; j = p[j]) {
                for (uint64_t c = 0; c < cols; c++) {
                    double t = rows[j * cols + c];
                    rows[j * cols + c] = tmp[c];
                    tmp[c] = t;
                }
                MARK(j);
            }
            memcpy(rows + s * cols, tmp, rb);
        } else {
            /* row j takes row p[j]: walk the cycle pulling rows forward */
            memcpy(tmp, rows + s * cols, rb);
            uint64_t j = s;
            MARK(s);
            while (p[j] != s) {
                memcpy(rows + j * cols, rows + (uint64_t)p[j] * cols, rb);
                j = p[j];
                MARK(j);
            }
            memcpy(rows + j * cols, tmp, rb);
        }
    }
#undef DONE
#undef MARK
    free(done);
    free(tmp);
    return 0;
}

int blco_labels_rows_to_user(const blco_labels_t *L, int mode, double *rows, uint64_t cols)
{
    return permute_rows(L, mode, rows, cols, 1);
}

int blco_labels_rows_from_user(const blco_labels_t *L, int mode, double *rows, uint64_t cols)
{
    return permute_rows(L, mode, rows, cols, 0);
}
