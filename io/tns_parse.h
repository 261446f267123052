/* Private to io/tns_parse.c and io/tns_read.c: the token helpers and the value parser that
 * the whole-file reader shares with the chunk parser. Not part of the public API. */
#ifndef BLCO_IO_TNS_PARSE_H
#define BLCO_IO_TNS_PARSE_H

#include "blco_internal.h"

enum { TNS_VAL_OK = 0, TNS_VAL_SYNTAX = 1, TNS_VAL_OVERFLOW = 2, TNS_VAL_UNDERFLOW = 3 };

/* One whitespace-separated field of a line. */
typedef struct tns_tok {
    const char *s;
    size_t n;
} tns_tok_t;

/* Splits the line [s, e) (no '\n'; a final '\r' is dropped) into fields separated by
 * spaces or tabs; a field starting with '#' after the first ends the line. Records up to
 * `max` fields and returns how many there are. */
int tns_split(const char *s, const char *e, tns_tok_t *tok, int max);

/* Parses the decimal digits [s, e) into *out. Returns 0, -1 (not all digits or empty) or
 * -2 (above 2^64-1). */
int tns_u64_checked(const char *s, const char *e, uint64_t *out);

/* blco_tns_parse_chunk, storing every index minus `bias` (1 turns a 1-based file 0-based
 * on the way; 0 - 1 wraps, and first_zero_line reports it). The whole-file reader parses
 * straight into the output tensor this way: it points c->ind/c->val into the tensor's
 * arrays with a `cap` no chunk of that text can exceed, so the chunk never reallocates. */
int tns_parse_chunk_bias(const char *text, size_t len, blco_tns_chunk_t *c, uint64_t bias,
                         blco_diag_t *diag);

/* Parses a number at *pp ([+-] digits [. digits] [e [+-] digits]), stopping at the first
 * character that cannot continue it, and moves *pp there. The scan needs a terminator
 * that is not part of a number ('\n', NUL, a blank). Returns TNS_VAL_OK, TNS_VAL_SYNTAX,
 * TNS_VAL_OVERFLOW (finite text that rounds to infinity), TNS_VAL_UNDERFLOW (a nonzero
 * number that rounds to 0, e.g. 1e-400) or -ENOMEM. Exact: the result
 * is the double strtod gives for the same text. */
int tns_parse_value(const char **pp, double *out);

/* Writes the first characters of s[0, n) into dst, non-printables escaped, "..." added
 * when cut. */
void tns_quote(char *dst, size_t cap, const char *s, size_t n);

/* Explains why the field s[0, n) is not a valid index (`what` names it in the message:
 * "index", "dim"); fills diag and returns the code, or returns 0 if it is valid. */
int tns_index_error(const char *s, size_t n, int mode, uint64_t line, const char *what,
                    blco_diag_t *diag);

#endif
