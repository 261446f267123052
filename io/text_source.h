/* Private to the library: a sequential reader of text input too large for memory. It
 * hands out blocks of whole lines from a file, standard input, or gzip / zstd compressed
 * data (recognised by their magic bytes, whatever the name), optionally reading the next
 * block on its own thread while the caller parses the current one. All its buffers come
 * from the budget. */
#ifndef BLCO_IO_TEXT_SOURCE_H
#define BLCO_IO_TEXT_SOURCE_H

#include <signal.h>

#include "blco_internal.h"

enum blco_text_compression { BLCO_TEXT_PLAIN = 0, BLCO_TEXT_GZIP = 1, BLCO_TEXT_ZSTD = 2 };

typedef struct blco_text_source_opts {
    size_t block_bytes; /* capacity of a block: the longest line accepted */
    int prefetch;       /* read ahead on a thread (two blocks of memory) */
    blco_budget_t *budget;
    volatile sig_atomic_t *cancel; /* waits for input give up when it becomes non-zero */
} blco_text_source_opts_t;

typedef struct blco_text_source blco_text_source_t;

/* Budget a source needs besides the zstd window: its blocks and its input buffer. */
uint64_t blco_text_source_memory(const blco_text_source_opts_t *o);

/* Opens `path` ("-" is standard input). Returns 0; -errno (the diag names the path);
 * -BLCO_EBUDGET; -BLCO_EFORMAT for a compressed stream that cannot be decoded. */
int blco_text_source_open(const char *path, const blco_text_source_opts_t *o,
                          blco_text_source_t **out, blco_diag_t *diag);

/* The next block of whole lines (the last line of the input may lack its newline): returns
 * 1 with *text and *len, 0 at the end of the input, or a negative code: -errno for read
 * errors, -BLCO_EFORMAT for corrupt or truncated compressed data, -E2BIG when a line is
 * longer than block_bytes (the caller knows which line), -BLCO_ECANCELED. The block stays
 * valid until the next call. */
int blco_text_source_next(blco_text_source_t *s, const char **text, size_t *len, blco_diag_t *diag);

/* Bytes read from the file so far (compressed bytes for compressed input) and its size
 * (0 when unknown: a pipe or a terminal). Safe to call while a read-ahead is running. */
uint64_t blco_text_source_file_bytes(const blco_text_source_t *s);
uint64_t blco_text_source_file_size(const blco_text_source_t *s);
int blco_text_source_compression(const blco_text_source_t *s);
/* Whether the block the last blco_text_source_next returned is the input's last (so a
 * first block that is also the last holds the whole text, whatever its source). */
int blco_text_source_at_end(const blco_text_source_t *s);

/* Stops the read-ahead thread, frees the buffers, closes the file. NULL is ok. */
void blco_text_source_close(blco_text_source_t *s);

#endif
