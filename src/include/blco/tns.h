/* FROSTT .tns text: a chunked, parallel parser and a fast writer.
 * A line holds the integer indices of one nonzero then its value, separated by spaces
 * or tabs; '#' comments and blank lines are skipped; CRLF is accepted. The ParTI/PASTA
 * variant that opens with an order line and a dims line is recognised. */
#ifndef BLCO_TNS_H
#define BLCO_TNS_H

#include "blco/coo.h"

#ifdef __cplusplus
extern "C" {
#endif

enum blco_base { BLCO_BASE_AUTO = -1, BLCO_BASE_0 = 0, BLCO_BASE_1 = 1 };

typedef struct blco_tns_opts {
    int base;                         /* BLCO_BASE_1 (FROSTT, default), _0 or _AUTO */
    int duplicates;                   /* BLCO_DUP_SUM (default), BLCO_DUP_ERROR, or
                                         BLCO_DUP_KEEP (leave repeats to the BLCO build) */
    int order;                        /* expected order, 0 = learn from the data */
    uint64_t dims[BLCO_MAX_MODES];    /* declared dims (all 0 = learn); indices beyond
                                         them are errors */
    int threads;                      /* 0 = blco_threads_default() */
    size_t chunk_bytes;               /* text per parallel work item, 0 = default (4 MiB) */
} blco_tns_opts_t;

BLCO_API void blco_tns_opts_default(blco_tns_opts_t *o);

/* What a read found. */
typedef struct blco_tns_stats {
    uint64_t bytes;          /* text bytes read */
    uint64_t lines;          /* lines read, comments and blanks included */
    uint64_t nnz_read;       /* data lines */
    uint64_t duplicates;     /* entries merged into an earlier equal coordinate */
    int base;                /* the base that was used (0 or 1) */
    int base_detected;       /* 1 when BLCO_BASE_AUTO switched to 0-based */
    int header;              /* 1 when a ParTI/PASTA order + dims header was found */
    double seconds;
} blco_tns_stats_t;

/* Reads a whole .tns file (or, with `path` "-", standard input) into a new COO tensor
 * with 0-based indices, duplicates handled per `opts`, dims from the header, opts or the
 * data. `stats` and `diag` may be NULL. On a malformed input returns -BLCO_EPARSE
 * (wrong field count, non-numeric or negative text), -BLCO_ERANGE (index 0 in a 1-based
 * file, index beyond a declared dim, integer overflow), -BLCO_EVALUE (NaN/Inf),
 * -BLCO_EEMPTY (no nonzero), -BLCO_EDUP; diag->line is the 1-based line of the first
 * error in the file. Also -errno for I/O errors and -BLCO_EBUDGET. */
BLCO_API int blco_tns_read_file(const char *path, const blco_tns_opts_t *opts,
                                blco_budget_t *budget, blco_coo_t **out, blco_tns_stats_t *stats,
                                blco_diag_t *diag);
/* Same for text already in memory. */
BLCO_API int blco_tns_read_mem(const char *text, size_t len, const blco_tns_opts_t *opts,
                               blco_budget_t *budget, blco_coo_t **out, blco_tns_stats_t *stats,
                               blco_diag_t *diag);

/* ---- chunk-level parsing, for readers that stream text larger than memory ---- */

/* Nonzeros parsed from one chunk of text, indices exactly as written (no base applied). */
typedef struct blco_tns_chunk {
    int order;
    uint64_t nnz, cap;
    uint64_t *ind[BLCO_MAX_MODES];
    double *val;
    uint64_t lines;                   /* newline-terminated lines in the chunk */
    uint64_t max_ind[BLCO_MAX_MODES]; /* largest raw index per mode */
    uint64_t first_zero_line;         /* chunk-relative 1-based line of the first index 0,
                                         0 if none */
    blco_budget_t *budget;
} blco_tns_chunk_t;

BLCO_API int blco_tns_chunk_init(blco_tns_chunk_t *c, int order, blco_budget_t *budget);
BLCO_API void blco_tns_chunk_reset(blco_tns_chunk_t *c); /* empties it, keeps the memory */
BLCO_API void blco_tns_chunk_free(blco_tns_chunk_t *c);

/* Parses the complete lines in text[0, len) (the last line may lack its newline) and
 * appends them to `c`. Header lines are not recognised here. On error returns a negative
 * code and diag->line is relative to the chunk (1 = its first line). */
BLCO_API int blco_tns_parse_chunk(const char *text, size_t len, blco_tns_chunk_t *c,
                                  blco_diag_t *diag);

/* Length of the longest prefix of text[0, len) that ends just after a newline (0 if
 * there is none): where to cut a chunk so no line is split. */
BLCO_API size_t blco_tns_cut(const char *text, size_t len);

/* ---- writing ---- */
/* Formats nonzeros as .tns lines (1-based indices when base == 1, values printed so
 * they parse back to the same double) into buf. Returns the number of bytes written,
 * never more than `cap`; writes only whole lines, and *consumed receives how many of
 * the n nonzeros were written. ind[m][k], val[k] as in blco_coo_t. */
BLCO_API size_t blco_tns_format(char *buf, size_t cap, int order, const uint64_t *const *ind,
                                const double *val, uint64_t n, int base, uint64_t *consumed);
/* Writes a COO tensor as .tns text to a stream (1-based). Returns 0 or -errno. */
BLCO_API int blco_tns_write_coo(const blco_coo_t *c, void *file /* FILE* */);

#ifdef __cplusplus
}
#endif
#endif
