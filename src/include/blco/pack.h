/* The out-of-core .tns -> .blco converter: reads text (plain, gzip, zstd, or standard
 * input) in large blocks, parses them in parallel, sorts nonzeros by ALTO index inside a
 * memory budget, spills sorted runs to scratch files when they do not fit and merges them,
 * sums duplicates, and feeds the .blco writer. Peak memory stays within the budget
 * whatever the input size. */
#ifndef BLCO_PACK_H
#define BLCO_PACK_H

#include <signal.h>

#include "blco/file.h"
#include "blco/tns.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a pack is doing, as progress reports say. */
enum blco_pack_phase {
    BLCO_PACK_PHASE_PARSE = 1, /* reading and parsing text, sorting and spilling runs */
    BLCO_PACK_PHASE_SORT,      /* dims were unknown: linearizing and sorting spilled
                                  coordinates now that they are known */
    BLCO_PACK_PHASE_MERGE,     /* merging spilled runs into fewer, longer runs */
    BLCO_PACK_PHASE_WRITE,     /* the final merge: encoding and writing the .blco */
};

/* Short name of a phase ("parse", "sort", "merge", "write"). */
BLCO_API const char *blco_pack_phase_name(int phase);

typedef struct blco_pack_progress {
    int phase;            /* enum blco_pack_phase */
    uint64_t file_bytes;  /* bytes read from the input file (compressed ones if so) */
    uint64_t file_size;   /* its size, 0 when unknown (a pipe) */
    uint64_t text_bytes;  /* text bytes parsed */
    uint64_t nnz_read;    /* nonzeros parsed */
    uint64_t nnz_done;    /* SORT, MERGE, WRITE: nonzeros through the current phase */
    uint64_t nnz_phase;   /* ... out of this many */
    uint64_t spill_bytes; /* bytes written to spill files so far */
    double seconds;       /* since the start */
} blco_pack_progress_t;

/* Called from the thread that called blco_pack, about every progress_interval seconds
 * and once at the start of each phase. */
typedef void (*blco_pack_progress_fn)(void *user, const blco_pack_progress_t *p);

typedef struct blco_pack_opts {
    int threads;             /* 0 = blco_threads_default() */
    blco_budget_t *budget;   /* every large allocation comes from it; NULL = a budget
                                of blco_budget_default() */
    const char *tmpdir;      /* spill directory; NULL = the output's directory (or
                                $TMPDIR, then /tmp, when no spill file can be made
                                there) */
    blco_tns_opts_t tns;     /* base, duplicates (SUM or ERROR), order, declared dims;
                                its threads and chunk_bytes are not used */
    blco_write_opts_t write; /* codec, zstd level, value type, segment size, force;
                                duplicates, source_base, creator are filled in */
    blco_pack_progress_fn progress;
    void *progress_user;
    double progress_interval;      /* seconds, 0 = 0.25 */
    volatile sig_atomic_t *cancel; /* when it becomes non-zero the pack stops, removes
                                      what it wrote and returns -BLCO_ECANCELED */
    /* Relabel indices (enum blco_reorder, default NONE): the order goes into the file's
     * labels section, and readers map everything back to the source's indices. Counting
     * takes the raw path (coordinates kept or spilled until counted) and 8 bytes of work
     * memory per index of the relabeled modes (16 more per index of the longest while the
     * order is made). When that memory is missing the pack fails
     * with -BLCO_EBUDGET if reorder_required, else goes on without relabeling (a warning). */
    int reorder;
    int reorder_required;
    /* Tuning, mostly for tests: 0 picks from the budget. */
    size_t read_block_bytes;  /* text per read block (also the longest line) */
    unsigned max_merge_fanin; /* runs merged at once; more runs merge in levels */
    int no_prefetch;          /* read on the calling thread instead of ahead */
} blco_pack_opts_t;

BLCO_API void blco_pack_opts_default(blco_pack_opts_t *o);

typedef struct blco_pack_stats {
    uint64_t nnz;        /* nonzeros written (after summing duplicates) */
    uint64_t nnz_read;   /* data lines read */
    uint64_t duplicates; /* entries summed into an earlier equal coordinate */
    uint64_t lines;      /* lines read, comments and blanks included */
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    int index_bits;       /* bits of the ALTO index */
    int base;             /* 0 or 1: the base used */
    int base_detected;    /* 1 when BLCO_BASE_AUTO found a 0-based file */
    int header;           /* 1 when a ParTI/PASTA header gave the dims */
    int dims_known;       /* 1 when dims came from the options or a header, so the
                             data was linearized while reading */
    int compression;      /* 0 plain, 1 gzip, 2 zstd */
    uint64_t file_bytes;  /* bytes read from the input file */
    uint64_t text_bytes;  /* text bytes (after decompression) */
    uint64_t bytes_out;   /* size of the .blco file */
    double bytes_per_nnz; /* bytes_out / nnz */
    uint64_t nblocks, nsegments;
    double norm2;             /* sum of squared values, after summing duplicates */
    double seconds_parse;     /* reading, parsing, checking, linearizing */
    double seconds_sort;      /* sorting (and summing duplicates) of what fit in memory or
                                 of each run, spilling the runs */
    double seconds_merge;     /* merging runs (counting duplicates across them first when
                                 there are some) and writing the .blco, encoding included */
    double seconds;           /* total */
    uint64_t spill_bytes;     /* bytes written to spill files, all passes together */
    uint64_t raw_spill_bytes; /* of which coordinates spilled before dims were known */
    uint64_t runs;            /* sorted runs spilled (0: everything fit in memory) */
    int merge_levels;         /* intermediate merge rounds before the final merge */
    int reorder;              /* enum blco_reorder applied (NONE when nothing changed) */
    uint32_t relabeled_modes; /* bit n: mode n + 1 was relabeled */
    uint64_t labels_bytes;    /* the labels section, without padding */
    double seconds_reorder;   /* counting and ordering (part of seconds_parse) */
    uint64_t mem_limit;       /* the budget's limit */
    uint64_t peak_budget;     /* the most of the budget in use at once */
} blco_pack_stats_t;

/* Converts the .tns text `in` ("-" = standard input; gzip or zstd data recognised by
 * their magic bytes) into the .blco file `out`. `opts`, `stats` and `diag` may be NULL.
 * An existing `out` is refused before any work unless opts->write.force. The output
 * appears only when complete (temporary file, fsync, rename); spill files never have a
 * name and vanish whatever happens.
 * Returns 0, or:
 *  input errors, diag->line the 1-based line of the input when there is one:
 *   -BLCO_EPARSE, -BLCO_ERANGE, -BLCO_EVALUE, -BLCO_EEMPTY, -BLCO_EMISMATCH (header and
 *   options disagree), -BLCO_EDUP (duplicates refused; the diag names the coordinate),
 *   -BLCO_EUNSUPPORTED (order above BLCO_MAX_MODES, or more than BLCO_MAX_INDEX_BITS
 *   index bits: the diag says how many are needed), -BLCO_EFORMAT (corrupt compressed
 *   data), -E2BIG (a line longer than the read block);
 *  -BLCO_EBUDGET: the budget is below the minimum (the diag names it);
 *  -EEXIST: out exists; -EINVAL: invalid options;
 *  -errno from the input, the spill directory or the output (the diag names the path;
 *   -ENOSPC says which filesystem is full);
 *  -BLCO_ECANCELED when *opts->cancel became non-zero. */
BLCO_API int blco_pack(const char *in, const char *out, const blco_pack_opts_t *opts,
                       blco_pack_stats_t *stats, blco_diag_t *diag);

/* The smallest budget limit a pack with these options can run in (the writer's segment
 * buffers dominate it; a smaller segment_nnz lowers it). */
BLCO_API uint64_t blco_pack_min_memory(const blco_pack_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif
