/* Private to the library: spill files, the scratch space of out-of-core passes. A spill
 * file has no name from the moment it exists (O_TMPFILE, or created and unlinked at
 * once), so the kernel reclaims it however the process ends. Writes append through a
 * caller-owned buffer; reads are positioned, so several cursors can share one file.
 * Bytes on disk are little-endian (the u64 helpers below). */
#ifndef BLCO_IO_SPILL_H
#define BLCO_IO_SPILL_H

#include <string.h>

#include "blco_internal.h"
#include "bytes_le.h"

typedef struct blco_spill blco_spill_t;

/* Creates an anonymous spill file in directory `dir`; `what` names its contents in
 * messages ("sorted runs"). Returns 0 or -errno (the diag names the directory). */
int blco_spill_create(const char *dir, const char *what, blco_spill_t **out, blco_diag_t *diag);
/* Closes (and so frees) the file. NULL is ok. */
void blco_spill_close(blco_spill_t *f);

/* Appends len bytes at the end of the file. Returns 0 or -errno (ENOSPC, EFBIG, EIO...)
 * with a diag naming the directory and what was being written. */
int blco_spill_append(blco_spill_t *f, const void *buf, size_t len, blco_diag_t *diag);
/* Overwrites len bytes at off, inside what was appended (to patch a header). Returns 0
 * or -errno as blco_spill_append. */
int blco_spill_write_at(blco_spill_t *f, uint64_t off, const void *buf, size_t len,
                        blco_diag_t *diag);
/* Reads exactly len bytes at off. Returns 0, -errno, or -BLCO_EFORMAT if the file ends
 * first (the diag says where). */
int blco_spill_read(blco_spill_t *f, uint64_t off, void *buf, size_t len, blco_diag_t *diag);
/* Gives the space of [off, off + len) back to the filesystem where it can (punching a
 * hole); data there must not be read again. Best effort, never fails. */
void blco_spill_discard(blco_spill_t *f, uint64_t off, uint64_t len);
/* The file's size: bytes appended since it was created or last truncated. */
uint64_t blco_spill_size(const blco_spill_t *f);
/* Empties the file (truncates it to 0), so its space can be reused. */
int blco_spill_truncate(blco_spill_t *f, blco_diag_t *diag);

/* A buffered appender over a caller-owned buffer. */
typedef struct blco_spill_writer {
    blco_spill_t *f;
    uint8_t *buf;
    size_t cap, len;
} blco_spill_writer_t;

static inline void blco_spill_writer_init(blco_spill_writer_t *w, blco_spill_t *f, void *buf,
                                          size_t cap)
{
    w->f = f;
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
}
int blco_spill_writer_flush(blco_spill_writer_t *w, blco_diag_t *diag);
/* Room for at least `need` bytes (need <= cap), flushing first when there is not. */
static inline int blco_spill_writer_room(blco_spill_writer_t *w, size_t need, blco_diag_t *diag)
{
    return w->cap - w->len >= need ? 0 : blco_spill_writer_flush(w, diag);
}

/* A buffered sequential reader of the byte range [off, end) over a caller-owned buffer. */
typedef struct blco_spill_reader {
    blco_spill_t *f;
    uint64_t off, end; /* next file offset to read, end of the range */
    uint8_t *buf;
    size_t cap, pos, len;
} blco_spill_reader_t;

static inline void blco_spill_reader_init(blco_spill_reader_t *r, blco_spill_t *f, uint64_t off,
                                          uint64_t end, void *buf, size_t cap)
{
    r->f = f;
    r->off = off;
    r->end = end;
    r->buf = buf;
    r->cap = cap;
    r->pos = r->len = 0;
}
/* Makes at least `need` bytes (need <= cap) available at buf + pos unless the range ends
 * first. Returns the bytes available (< need only at the end of the range) or -errno. */
int64_t blco_spill_reader_fill(blco_spill_reader_t *r, size_t need, blco_diag_t *diag);

#endif
