/* Private to blco/pack*.c: the state of one blco_pack call, shared by the reading and
 * parsing side (pack.c) and the sorting, spilling and merging side (pack_merge.c). */
#ifndef BLCO_PACK_INTERNAL_H
#define BLCO_PACK_INTERNAL_H

#include "blco/pack.h"
#include "blco_internal.h"
#include "io/spill.h"

/* A sorted run in the run file: where its header starts, how many records follow. */
typedef struct pack_run {
    uint64_t off, n;
} pack_run_t;

/* Each run starts with this magic and its record count (two u64). */
#define PACK_RUN_MAGIC 0x314e55524f434c42ull /* "BLCORUN1" */
#define PACK_RUN_HEADER_BYTES 16

typedef struct pack {
    const char *in, *out;
    blco_pack_opts_t o;
    blco_budget_t *budget;
    blco_diag_t *diag;
    int nt;
    char tmpdir[4096];
    int tmpdir_given;
    double t0, next_progress, interval;
    blco_pack_progress_t prog;
    blco_pack_stats_t st;

    /* the tensor */
    int order;
    int base; /* 0 or 1 once known */
    blco_layout_t layout;
    int bits;      /* ALTO index bits */
    int wide;      /* bits > 64: keys have a high word */
    int rec_bytes; /* bytes of a run record: key words + value */

    /* memory: the writer's share is reserved from the start, its tables as they grow
     * (one entry per block: wide tensors can have many); `work` is the big region */
    uint64_t writer_reserve, table_reserve, blocks;
    uint64_t last_key;
    uint8_t *work;
    size_t work_bytes;
    uint64_t N;                 /* records the sort buffer holds */
    uint64_t *klo, *khi, *kval; /* nonzeros collected for the next run, [0, fill) */
    uint64_t *tlo, *thi, *tval; /* the sort's scratch; staging while collecting */
    uint64_t fill;

    /* relabeled indices (--reorder): per relabeled mode, the stored index of each source
     * index and back, at the end of the work region (labels_bytes taken from it) */
    uint32_t relabeled;
    uint32_t *o2n[BLCO_MAX_MODES], *n2o[BLCO_MAX_MODES];
    uint64_t labels_bytes;

    /* spilled sorted runs, all in one file */
    blco_spill_t *runf;
    pack_run_t *runs;
    uint64_t nruns, cap_runs;
} pack_t;

/* Checks the cancel flag; returns -BLCO_ECANCELED (diag set) when it is raised. */
int pack_check_cancel(pack_t *p);
/* Reports progress if the interval passed (or always with `force`). */
void pack_progress(pack_t *p, int force);
/* Creates the spill file `*f` if it does not exist yet, in tmpdir or a fallback. */
int pack_spill_open(pack_t *p, blco_spill_t **f, const char *what);

/* Sorts klo/khi/kval[0, fill) by ALTO index and merges equal coordinates in place (summed,
 * counted in st.duplicates, or refused under BLCO_DUP_ERROR). */
int pack_sort_collected(pack_t *p);
/* Appends the sorted, merged collection as a run to the run file and empties it. */
int pack_spill_collected(pack_t *p);
/* Writes the .blco from the sorted collection (no run spilled) or from the spilled runs
 * (merging them, in levels when there are more than the memory allows at once). */
int pack_write_output(pack_t *p);

#endif
