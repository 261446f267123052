/* Asynchronous reads of one file: submit a range into a buffer, reap completions. Two
 * backends: io_uring (liburing) with O_DIRECT, registered buffers and a registered file;
 * and a pool of pread threads. Opening probes and falls back (ring refused, buffer
 * registration refused by RLIMIT_MEMLOCK, O_DIRECT refused by the filesystem) and logs
 * once, at info level, which path it took and why; blco_aio_describe() says the same.
 *
 * Environment switches, for tests of the fallbacks:
 *   BLCO_IO_REFUSE_URING=1   io_uring setup fails as if the kernel refused it
 *   BLCO_IO_REFUSE_REGISTER=1  buffer registration fails as if RLIMIT_MEMLOCK were too low
 *   BLCO_IO_REFUSE_DIRECT=1  O_DIRECT fails as if the filesystem refused it
 *   BLCO_IO_REFUSE_DIRECT=read  the O_DIRECT open works, the reads fail with EINVAL
 *
 * Threads: a reader is used by one thread at a time (the engine's main thread submits,
 * reaps and closes); the pread backend's own threads never call back into the caller.
 * Separate readers are independent. Each kind of fallback is logged once per process (at
 * info level); blco_aio_describe() says it for every reader.
 */
#ifndef BLCO_AIO_H
#define BLCO_AIO_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

enum blco_io_backend { BLCO_IO_AUTO = 0, BLCO_IO_URING, BLCO_IO_PREAD };

/* "auto", "uring", "pread" -> enum; returns -EINVAL for anything else. */
BLCO_API int blco_io_backend_parse(const char *s);
BLCO_API const char *blco_io_backend_name(int backend);

typedef struct blco_aio_opts {
    int backend;              /* enum blco_io_backend; AUTO = io_uring when it works, else pread */
    int direct;               /* 1 (default): O_DIRECT when the filesystem allows it */
    uint64_t max_inflight;    /* bytes in flight at most (sets the ring depth); 0 = 64 MiB.
                               * Depth = max_inflight / request_bytes, at most 4096 */
    uint32_t request_bytes;   /* submissions are split into requests of this size; 0 = 1 MiB
                               * (clamped to 4 KiB..4 MiB, a multiple of 4 KiB, and to
                               * max_inflight) */
    int threads;              /* pread pool threads; 0 = 4 */
} blco_aio_opts_t;

BLCO_API void blco_aio_opts_default(blco_aio_opts_t *o);

/* A memory region reads will land in (registered with io_uring when possible). */
typedef struct blco_aio_region {
    void *base;               /* 4096-aligned */
    size_t bytes;             /* a multiple of 4096 */
} blco_aio_region_t;

typedef struct blco_aio blco_aio_t;

/* Opens `path` for reading. `regions` lists the buffers every later read targets (may be
 * empty: reads then still work, unregistered). Returns 0, -errno (the diag names the path),
 * or -EINVAL. A forced backend (URING) that cannot be set up is an error, not a fallback. */
BLCO_API int blco_aio_open(const char *path, const blco_aio_opts_t *o,
                           const blco_aio_region_t *regions, int nregions, blco_aio_t **out,
                           blco_diag_t *diag);

/* Queues a read of [offset, offset + len) into buf. offset, len and buf must be multiples
 * of 4096 (the .blco format aligns every segment so). Never blocks on the disk; requests
 * beyond max_inflight wait inside the reader and go out as earlier ones complete (inside
 * blco_aio_submit and blco_aio_reap: call reap to keep the queue moving). len 0 completes
 * at once with result 0. `tag` comes back with the completion. Returns 0, -EINVAL (bad
 * arguments: nothing queued), -ENOMEM, or -ECANCELED once a backend failure made the
 * reader unusable (blco_aio_reap returned that failure). */
BLCO_API int blco_aio_submit(blco_aio_t *a, uint64_t offset, void *buf, size_t len, uint64_t tag);

typedef struct blco_aio_done {
    uint64_t tag;
    int64_t result;           /* bytes read (== len, or fewer at the end of the file, 0 for a
                               * range wholly past it), or the -errno of a failed request.
                               * O_DIRECT refused at read time is not an error: the reader
                               * reopens the file buffered and retries (see describe) */
} blco_aio_done_t;

/* Waits until at least `min` submissions have completed (0: only what is ready), and
 * returns how many were stored into done[0..max). Completions are per submission, not
 * per request, in completion order. `min` is capped to `max` and to the submissions
 * pending. Returns the count, -EINVAL, or the backend's failure (-errno; the reader then
 * refuses new submissions). Waiting with nothing in flight returns 0 at once. */
BLCO_API int blco_aio_reap(blco_aio_t *a, blco_aio_done_t *done, int max, int min);

/* Submissions not yet reaped. */
BLCO_API int blco_aio_pending(const blco_aio_t *a);

/* The path taken: BLCO_IO_URING or BLCO_IO_PREAD; whether O_DIRECT is on; and a sentence
 * such as "io_uring, O_DIRECT, registered buffers and file, 64 MiB in flight" or
 * "pread x4, buffered (io_uring refused: Operation not permitted)". */
BLCO_API int blco_aio_backend(const blco_aio_t *a);
BLCO_API int blco_aio_direct(const blco_aio_t *a);
BLCO_API const char *blco_aio_describe(const blco_aio_t *a);
/* Number of fallbacks taken (0..3): at open, plus O_DIRECT refused at the first read,
 * which also turns blco_aio_direct() to 0 and changes the description. */
BLCO_API int blco_aio_fallbacks(const blco_aio_t *a);

/* Waits for every read in flight (their buffers are then free) and closes. Submissions
 * still queued inside the reader (beyond max_inflight) are dropped unread; nothing
 * pending is reported. NULL is ok. */
BLCO_API void blco_aio_close(blco_aio_t *a);

#ifdef __cplusplus
}
#endif
#endif
