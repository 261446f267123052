/* Relabeled indices (`blco-pack --reorder`): a .blco file may store each mode's indices in
 * another order than the source's, with the permutation in its labels section
 * (FORMAT.md). Everything the user gives or gets (factors, MTTKRP outputs, coordinates)
 * is in the source's index space; these helpers move rows between the two. */
#ifndef BLCO_LABELS_H
#define BLCO_LABELS_H

#include "blco/file.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct blco_labels {
    int order;
    int reorder; /* enum blco_reorder */
    uint64_t dims[BLCO_MAX_MODES];
    /* per mode, the source index of each stored index; NULL: the mode is not relabeled */
    uint32_t *new_to_old[BLCO_MAX_MODES];
    blco_budget_t *budget; /* the arrays' budget (NULL: malloc) */
} blco_labels_t;

/* Reads the labels of an open file (arrays charged to `budget`, which may be NULL).
 * *out is NULL when the file is not relabeled. Returns 0, -BLCO_EBUDGET (the diag says
 * how much), or as blco_file_read_labels. */
BLCO_API int blco_labels_load(blco_file_t *f, blco_budget_t *budget, blco_labels_t **out,
                              blco_diag_t *diag);
/* The same from a path. */
BLCO_API int blco_labels_load_path(const char *path, blco_budget_t *budget, blco_labels_t **out,
                                   blco_diag_t *diag);
/* The bytes blco_labels_load would take from the budget for this file's header. */
BLCO_API uint64_t blco_labels_bytes(const blco_file_info_t *info);
BLCO_API void blco_labels_free(blco_labels_t *L);

/* Reorders in place the rows (each `cols` doubles) of a mode-`mode` matrix with dims[mode]
 * rows: stored order to the source's (row k moves to new_to_old[k]) or back. No-ops when
 * L is NULL or the mode is not relabeled. Returns 0 or -ENOMEM (a bitmap of dims/8 bytes). */
BLCO_API int blco_labels_rows_to_user(const blco_labels_t *L, int mode, double *rows,
                                      uint64_t cols);
BLCO_API int blco_labels_rows_from_user(const blco_labels_t *L, int mode, double *rows,
                                        uint64_t cols);

/* A stored index's source index (identity when L is NULL or the mode is not relabeled). */
static inline uint64_t blco_labels_user_index(const blco_labels_t *L, int mode, uint64_t i)
{
    return L && L->new_to_old[mode] ? L->new_to_old[mode][i] : i;
}

#ifdef __cplusplus
}
#endif
#endif
