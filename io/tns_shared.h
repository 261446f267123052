/* Private to io/ and the packer: the pieces of .tns handling that the whole-file reader
 * (io/tns_read.c) and the streaming packer (blco/pack*.c) share, so both accept the same
 * inputs and word their errors the same way. Not part of the public API. */
#ifndef BLCO_IO_TNS_SHARED_H
#define BLCO_IO_TNS_SHARED_H

#include "blco_internal.h"

/* What precedes the data: comment lines and an optional ParTI/PASTA header. */
typedef struct tns_prefix {
    size_t data_off;
    uint64_t lines; /* lines before data_off */
    int order;
    int header;
    uint64_t dims[BLCO_MAX_MODES];
} tns_prefix_t;

/* Finds where the data of `text` starts: skips a UTF-8 byte-order mark at its start,
 * comments and blank lines, recognises a
 * ParTI/PASTA order + dims header, and learns the order from the first data line (or
 * takes o->order). Returns 0, -BLCO_EEMPTY when no data line is in the text, or
 * -BLCO_EPARSE / -BLCO_EUNSUPPORTED / -BLCO_EMISMATCH / -BLCO_ERANGE with diag->line set
 * (1-based within `text`). */
int tns_scan_prefix(const char *text, size_t len, const blco_tns_opts_t *o, tns_prefix_t *px,
                    blco_diag_t *diag);

/* Validates the caller's options. Returns 0, -EINVAL or -BLCO_EUNSUPPORTED. */
int tns_check_opts(const blco_tns_opts_t *o, blco_diag_t *diag);

/* Merges the header's dims with the caller's into dims[0..px->order) (0 = learn from the
 * data). Returns 0 or -BLCO_EMISMATCH. */
int tns_declared_dims(const blco_tns_opts_t *o, const tns_prefix_t *px, uint64_t *dims,
                      blco_diag_t *diag);

/* Newlines in s[0, n). */
uint64_t tns_count_newlines(const char *s, size_t n);

/* The 1-based line of text[0, len) holding data line k (0-based, comments and blank lines
 * skipped), 0 when there are fewer data lines. */
uint64_t tns_data_line(const char *text, size_t len, uint64_t k);

/* Why an index was refused, and the message for it (a -BLCO_ERANGE in diag, returned). */
enum { TNS_BAD_NONE, TNS_BAD_ZERO, TNS_BAD_DIM, TNS_BAD_WIDE };
int tns_bad_index(int kind, uint64_t v, int mode, uint64_t dim, int base, uint64_t line,
                  blco_diag_t *diag);

#endif
