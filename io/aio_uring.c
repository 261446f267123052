/* The io_uring backend of the asynchronous reader: one ring sized by the requests in
 * flight, the buffer regions registered (READ_FIXED into them), the file registered. */
#include "config.h"

#if HAVE_LIBURING
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "aio_internal.h"

#define REG_MAX_BYTES (1ull << 30) /* the kernel registers at most 1 GiB per buffer */

typedef struct uring_be {
    struct io_uring ring;
    int fixed_file;
    int nbufs;
    struct iovec *iov;
} uring_be_t;

static int find_buf(const uring_be_t *u, const uint8_t *p, size_t len)
{
    for (int i = 0; i < u->nbufs; i++) {
        const uint8_t *b = u->iov[i].iov_base;
        if (p >= b && len <= u->iov[i].iov_len && (size_t)(p - b) <= u->iov[i].iov_len - len)
            return i;
    }
    return -1;
}

static int uring_issue(blco_aio_t *a, uint32_t pi)
{
    uring_be_t *u = a->be;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) { /* cannot happen: the ring holds `depth` entries; be safe anyway */
        int e = io_uring_submit(&u->ring);
        if (e < 0 && e != -EAGAIN && e != -EBUSY && e != -EINTR)
            return e;
        if (!(sqe = io_uring_get_sqe(&u->ring)))
            return -EBUSY;
    }
    const aio_part_t *p = &a->parts[pi];
    uint8_t *buf = p->buf + p->done;
    unsigned len = p->len - p->done;
    uint64_t off = p->off + p->done;
    int fixed = u->fixed_file && p->fd == a->fd;
    int fd = fixed ? 0 : p->fd;
    int bi = find_buf(u, buf, len);
    if (bi >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, bi);
    else
        io_uring_prep_read(sqe, fd, buf, len, off);
    if (fixed)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, pi);
    return 0;
}

static int uring_flush(blco_aio_t *a)
{
    uring_be_t *u = a->be;
    for (;;) {
        int e = io_uring_submit(&u->ring);
        /* Out of kernel resources for now: the entries stay in the ring and go with the
         * next wait. */
        if (e >= 0 || e == -EAGAIN || e == -EBUSY)
            return 0;
        if (e != -EINTR)
            return e;
    }
}

static int uring_wait(blco_aio_t *a, int block)
{
    uring_be_t *u = a->be;
    while (block && !io_uring_cq_ready(&u->ring)) {
        int e = io_uring_submit_and_wait(&u->ring, 1);
        if (e >= 0 || e == -EINTR)
            continue;
        if (e != -EAGAIN && e != -EBUSY)
            return e;
        /* Could not submit: wait for a completion if the kernel holds requests, else
         * give it a moment. */
        uint32_t in_kernel = a->depth - a->nfree_parts - io_uring_sq_ready(&u->ring);
        if (in_kernel) {
            struct io_uring_cqe *cqe;
            e = io_uring_wait_cqe(&u->ring, &cqe);
            if (e < 0 && e != -EINTR && e != -EAGAIN)
                return e;
        } else {
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
    }
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
        uint32_t pi = (uint32_t)io_uring_cqe_get_data64(cqe);
        int64_t res = cqe->res;
        io_uring_cqe_seen(&u->ring, cqe);
        aio_part_result(a, pi, res);
    }
    /* Retries queued while handling completions go out now, not at the next call. */
    return io_uring_sq_ready(&u->ring) ? uring_flush(a) : 0;
}

static void uring_refd(blco_aio_t *a)
{
    uring_be_t *u = a->be;
    if (u->fixed_file && io_uring_register_files_update(&u->ring, 0, &a->fd, 1) != 1)
        u->fixed_file = 0; /* requests then name the new descriptor directly */
}

static void uring_destroy(blco_aio_t *a)
{
    uring_be_t *u = a->be;
    io_uring_queue_exit(&u->ring);
    free(u->iov);
    free(u);
    a->be = NULL;
}

static const aio_ops_t uring_ops = {uring_issue, uring_flush, uring_wait, uring_refd,
                                    uring_destroy};

/* Registers the regions, cut into pieces the kernel accepts. Returns 0 or -errno. */
static int register_buffers(blco_aio_t *a, uring_be_t *u, int refuse)
{
    int n = 0;
    for (int i = 0; i < a->nregions; i++)
        n += (int)((a->regions[i].bytes + REG_MAX_BYTES - 1) / REG_MAX_BYTES);
    u->iov = calloc((size_t)n, sizeof *u->iov);
    if (!u->iov)
        return -ENOMEM;
    n = 0;
    for (int i = 0; i < a->nregions; i++)
        for (size_t o = 0; o < a->regions[i].bytes; o += REG_MAX_BYTES) {
            u->iov[n].iov_base = (uint8_t *)a->regions[i].base + o;
            u->iov[n].iov_len = BLCO_MIN(a->regions[i].bytes - o, (size_t)REG_MAX_BYTES);
            n++;
        }
    int e = refuse ? -ENOMEM : io_uring_register_buffers(&u->ring, u->iov, (unsigned)n);
    if (e < 0) {
        free(u->iov);
        u->iov = NULL;
        return e;
    }
    u->nbufs = n;
    return 0;
}

int aio_uring_setup(blco_aio_t *a, int simulate_refusal, int refuse_register, blco_diag_t *diag)
{
    uring_be_t *u = calloc(1, sizeof *u);
    if (!u)
        return -ENOMEM;
    int err = simulate_refusal ? -EPERM : io_uring_queue_init(a->depth, &u->ring, 0);
    if (err < 0) {
        free(u);
        return blco_diag_set(diag, 0, err, "io_uring setup refused: %s%s", blco_strerror(err),
                             simulate_refusal ? " (BLCO_IO_REFUSE_URING)" : "");
    }
    const char *bufs = "no buffer regions given";
    if (a->nregions) {
        err = register_buffers(a, u, refuse_register);
        if (err < 0) {
            aio_fallback(a, AIO_FB_REGISTER, "buffer registration refused: %s%s",
                         blco_strerror(err),
                         refuse_register                   ? " (BLCO_IO_REFUSE_REGISTER)"
                         : err == -ENOMEM || err == -EPERM ? " (RLIMIT_MEMLOCK too low?)"
                                                           : "");
            bufs = "unregistered buffers";
        } else {
            bufs = "registered buffers";
        }
    }
    u->fixed_file = io_uring_register_files(&u->ring, &a->fd, 1) == 0;
    snprintf(a->bufs, sizeof a->bufs, "%s%s", bufs,
             u->fixed_file ? (a->nregions && u->nbufs ? " and file" : ", registered file")
                           : ", unregistered file");
    a->be = u;
    a->ops = &uring_ops;
    a->backend = BLCO_IO_URING;
    return 0;
}

#else
/* ISO C wants something in every translation unit. */
typedef int aio_uring_unused;
#endif
