/* Private state of the asynchronous reader (io/aio*.c): the submission and request
 * bookkeeping shared by the io_uring and pread backends, and the backend ops table. */
#ifndef BLCO_AIO_INTERNAL_H
#define BLCO_AIO_INTERNAL_H

#include <stdint.h>

#include "blco_internal.h"

#define AIO_ALIGN 4096u
#define AIO_MAX_DEPTH 4096u  /* requests in flight at most, whatever max_inflight says */
#define AIO_MAX_RETRIES 1000 /* -EAGAIN / -EINTR retries of one request before giving up */

/* One request: a piece of at most request_bytes of a submission, in flight in a backend.
 * The pread workers read and write only the fields marked (w); the main thread touches a
 * request only while no worker holds it (hand-over under the pool's mutex). */
typedef struct aio_part {
    uint32_t sub; /* index of the submission in blco_aio.subs */
    int fd;       /* (w) the descriptor this request reads (fd or fd_old) */
    int direct;   /* (w) whether fd is O_DIRECT */
    int retries;
    uint64_t off;  /* (w) file offset of the request's first byte */
    uint8_t *buf;  /* (w) */
    uint32_t len;  /* (w) */
    uint32_t done; /* (w) bytes already read (the next attempt starts there) */
    int64_t res;   /* (w) pread: result of the last attempt */
} aio_part_t;

/* One submission; in the issue queue while parts of it are not handed out, in the done
 * list once every part finished, free otherwise. */
typedef struct aio_sub {
    uint64_t tag, off;
    uint8_t *buf;
    size_t len;
    size_t issued;      /* bytes handed out as requests */
    uint32_t parts_out; /* requests in flight */
    int64_t bytes;      /* bytes read by finished requests */
    int err;            /* first request error (negative), 0 if none */
    int32_t next;       /* link in the issue queue, the done list or the free list */
} aio_sub_t;

typedef struct aio_ops {
    /* Hands request `pi` (its next attempt: buf + done, len - done at off + done) to the
     * backend; it may wait for flush(). Returns 0 or a negative code. */
    int (*issue)(blco_aio_t *a, uint32_t pi);
    /* Makes everything issued go out. Returns 0 or a negative code. */
    int (*flush)(blco_aio_t *a);
    /* Collects finished attempts and passes each to aio_part_result(); with `block`,
     * waits for at least one when something is in flight. Returns 0 or a negative code. */
    int (*wait)(blco_aio_t *a, int block);
    /* The reader's descriptor changed to a->fd (O_DIRECT refused at read time). */
    void (*refd)(blco_aio_t *a);
    /* Frees the backend; nothing is in flight any more (or the backend is broken). */
    void (*destroy)(blco_aio_t *a);
} aio_ops_t;

struct blco_aio {
    const aio_ops_t *ops;
    void *be;       /* backend state */
    int backend;    /* BLCO_IO_URING or BLCO_IO_PREAD */
    int fd, fd_old; /* fd_old: the O_DIRECT descriptor replaced at read time, or -1 */
    int direct;
    int refuse_direct_read; /* test switch: the first O_DIRECT reads fail with -EINVAL */
    int fallbacks;
    int closing;
    int broken; /* a backend failure nothing can recover from (negative), or 0 */
    int threads;
    uint32_t req_bytes, depth;
    uint64_t max_inflight;

    blco_aio_region_t *regions;
    int nregions;

    aio_part_t *parts;    /* depth requests */
    uint32_t *free_parts; /* stack of free request slots */
    uint32_t nfree_parts;

    aio_sub_t *subs;
    int32_t cap_subs, free_sub;
    int32_t q_head, q_tail; /* issue queue */
    int32_t d_head, d_tail; /* done list */
    int ndone, pending;

    char path[4096];
    char desc[512];
    char why[384]; /* the fallback reasons, "; "-separated */
    char bufs[96]; /* what the buffers are: "registered buffers and file" ... */
};

/* Passes a finished attempt of request `pi` (bytes read or -errno) to the reader: retries,
 * falls back to buffered reads, or finishes the request and its submission. */
void aio_part_result(blco_aio_t *a, uint32_t pi, int64_t res);

/* Backends. Each returns 0, or a negative code with `diag` set; on success a->ops and
 * a->be are set. */
#if HAVE_LIBURING
int aio_uring_setup(blco_aio_t *a, int simulate_refusal, int refuse_register, blco_diag_t *diag);
#endif
int aio_pread_setup(blco_aio_t *a, blco_diag_t *diag);

/* Appends a fallback reason to a->why and logs it once per process (per `kind`). */
enum aio_fallback_kind { AIO_FB_URING, AIO_FB_REGISTER, AIO_FB_DIRECT, AIO_FB_DIRECT_READ };
void aio_fallback(blco_aio_t *a, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
