/* The asynchronous reader's common part: options, opening with its probes and fallbacks,
 * submissions split into requests, the issue queue and the merging of completions. The
 * backends (io/aio_uring.c, io/aio_pread.c) only move requests. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio_internal.h"

int blco_io_backend_parse(const char *s)
{
    if (!s)
        return -EINVAL;
    if (!strcmp(s, "auto"))
        return BLCO_IO_AUTO;
    if (!strcmp(s, "uring") || !strcmp(s, "io_uring"))
        return BLCO_IO_URING;
    if (!strcmp(s, "pread"))
        return BLCO_IO_PREAD;
    return -EINVAL;
}

const char *blco_io_backend_name(int backend)
{
    switch (backend) {
    case BLCO_IO_AUTO: return "auto";
    case BLCO_IO_URING: return "uring";
    case BLCO_IO_PREAD: return "pread";
    default: return "unknown";
    }
}

void blco_aio_opts_default(blco_aio_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->backend = BLCO_IO_AUTO;
    o->direct = 1;
    o->max_inflight = 64ull << 20;
    o->request_bytes = 1u << 20;
    o->threads = 4;
}

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Fallbacks are logged once per process and kind: a program opening many files on the
 * same machine hears about each refusal once; blco_aio_describe() says it every time. */
static atomic_int logged[4];

void aio_fallback(blco_aio_t *a, int kind, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(a->why);
    snprintf(a->why + n, sizeof a->why - n, "%s%s", n ? "; " : "", msg);
    a->fallbacks++;
    if (!atomic_exchange(&logged[kind], 1))
        blco_log(BLCO_LOG_INFO, "%s: %s", a->path, msg);
}

static void describe(blco_aio_t *a)
{
    char inflight[32];
    blco_format_size((uint64_t)a->depth * a->req_bytes, inflight, sizeof inflight);
    int n;
    if (a->backend == BLCO_IO_URING)
        n = snprintf(a->desc, sizeof a->desc, "io_uring, %s, %s",
                     a->direct ? "O_DIRECT" : "buffered", a->bufs);
    else
        n = snprintf(a->desc, sizeof a->desc, "pread x%d, %s", a->threads,
                     a->direct ? "O_DIRECT" : "buffered");
    if (n < 0 || (size_t)n >= sizeof a->desc)
        return;
    n += snprintf(a->desc + n, sizeof a->desc - (size_t)n, ", %s in flight (%u x %u KiB)", inflight,
                  a->depth, a->req_bytes >> 10);
    if (a->why[0] && (size_t)n < sizeof a->desc)
        snprintf(a->desc + n, sizeof a->desc - (size_t)n, " (%s)", a->why);
}

/* ---- submissions and requests ---- */

static void list_push(blco_aio_t *a, int32_t *head, int32_t *tail, int32_t si)
{
    a->subs[si].next = -1;
    if (*tail >= 0)
        a->subs[*tail].next = si;
    else
        *head = si;
    *tail = si;
}

static int32_t list_pop(blco_aio_t *a, int32_t *head, int32_t *tail)
{
    int32_t si = *head;
    if (si >= 0) {
        *head = a->subs[si].next;
        if (*head < 0)
            *tail = -1;
    }
    return si;
}

static int32_t sub_alloc(blco_aio_t *a)
{
    if (a->free_sub < 0) {
        if (a->cap_subs >= INT32_MAX / 2)
            return -ENOMEM;
        int32_t cap = a->cap_subs ? 2 * a->cap_subs : 64;
        aio_sub_t *s = realloc(a->subs, (size_t)cap * sizeof *s);
        if (!s)
            return -ENOMEM;
        a->subs = s;
        for (int32_t i = cap - 1; i >= a->cap_subs; i--) {
            s[i].next = a->free_sub;
            a->free_sub = i;
        }
        a->cap_subs = cap;
    }
    int32_t si = a->free_sub;
    a->free_sub = a->subs[si].next;
    return si;
}

static void sub_free(blco_aio_t *a, int32_t si)
{
    a->subs[si].next = a->free_sub;
    a->free_sub = si;
}

static void part_finish(blco_aio_t *a, uint32_t pi, int err)
{
    aio_part_t *p = &a->parts[pi];
    aio_sub_t *s = &a->subs[p->sub];
    s->bytes += p->done;
    if (err < 0 && !s->err)
        s->err = err;
    assert(s->parts_out > 0);
    s->parts_out--;
    a->free_parts[a->nfree_parts++] = pi;
    if (!s->parts_out && s->issued == s->len) {
        list_push(a, &a->d_head, &a->d_tail, (int32_t)p->sub);
        a->ndone++;
    }
}

/* O_DIRECT refused at read time (some filesystems accept the open and refuse the read):
 * reopen buffered; requests already in flight on the old descriptor finish there. */
static int direct_read_fallback(blco_aio_t *a, int err)
{
    int fd = open(a->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    a->fd_old = a->fd;
    a->fd = fd;
    a->direct = 0;
    aio_fallback(a, AIO_FB_DIRECT_READ, "O_DIRECT refused at read time: %s%s", blco_strerror(err),
                 a->refuse_direct_read ? " (BLCO_IO_REFUSE_DIRECT=read)" : "");
    if (a->ops->refd)
        a->ops->refd(a);
    describe(a);
    return 0;
}

static void part_retry(blco_aio_t *a, uint32_t pi, int err)
{
    aio_part_t *p = &a->parts[pi];
    if (a->closing || ++p->retries > AIO_MAX_RETRIES) {
        part_finish(a, pi, err);
        return;
    }
    int e = a->ops->issue(a, pi);
    if (e < 0)
        part_finish(a, pi, e);
}

void aio_part_result(blco_aio_t *a, uint32_t pi, int64_t res)
{
    aio_part_t *p = &a->parts[pi];
    if (a->refuse_direct_read && p->direct && res >= 0)
        res = -EINVAL;
    if (res == -EINVAL && p->direct) {
        /* The arguments were checked at submission: EINVAL here is the filesystem
         * refusing O_DIRECT. */
        if (a->direct) {
            int e = direct_read_fallback(a, -EINVAL);
            if (e < 0) {
                part_finish(a, pi, e);
                return;
            }
        }
        p->fd = a->fd;
        p->direct = 0;
        part_retry(a, pi, (int)res);
        return;
    }
    if (res == -EAGAIN || res == -EINTR) {
        part_retry(a, pi, (int)res);
        return;
    }
    if (res <= 0) { /* an error, or the end of the file */
        part_finish(a, pi, (int)res);
        return;
    }
    assert((uint64_t)res <= p->len - p->done);
    p->done += (uint32_t)res;
    /* A short read: go on from where it stopped. O_DIRECT stops short only at the end of
     * the file, and an unaligned stop cannot be continued with O_DIRECT anyway. */
    if (p->done < p->len && !(p->direct && (p->off + p->done) % AIO_ALIGN)) {
        p->retries = 0;
        part_retry(a, pi, 0);
        return;
    }
    part_finish(a, pi, 0);
}

/* Hands queued submissions out as requests while request slots are free. */
static int issue_queued(blco_aio_t *a)
{
    int issued = 0;
    while (a->q_head >= 0 && a->nfree_parts && !a->broken) {
        aio_sub_t *s = &a->subs[a->q_head];
        uint32_t pi = a->free_parts[--a->nfree_parts];
        aio_part_t *p = &a->parts[pi];
        size_t len = BLCO_MIN(s->len - s->issued, (size_t)a->req_bytes);
        *p = (aio_part_t){.sub = (uint32_t)a->q_head,
                          .fd = a->fd,
                          .direct = a->direct,
                          .off = s->off + s->issued,
                          .buf = s->buf + s->issued,
                          .len = (uint32_t)len};
        s->issued += len;
        s->parts_out++;
        if (s->issued == s->len)
            list_pop(a, &a->q_head, &a->q_tail);
        int e = a->ops->issue(a, pi);
        if (e < 0)
            part_finish(a, pi, e);
        else
            issued++;
    }
    return issued ? a->ops->flush(a) : 0;
}

/* Backend failure nothing can recover from: later submissions are refused. */
static int set_broken(blco_aio_t *a, int err)
{
    if (!a->broken) {
        a->broken = err;
        blco_log(BLCO_LOG_ERROR, "%s: asynchronous reads failed: %s", a->path, blco_strerror(err));
    }
    return err;
}

int blco_aio_submit(blco_aio_t *a, uint64_t offset, void *buf, size_t len, uint64_t tag)
{
    if (!a || (len && !buf) || offset % AIO_ALIGN || len % AIO_ALIGN ||
        (uintptr_t)buf % AIO_ALIGN || offset > UINT64_MAX - len || len > INT64_MAX)
        return -EINVAL;
    if (a->broken || a->closing)
        return -ECANCELED;
    int32_t si = sub_alloc(a);
    if (si < 0)
        return si;
    a->subs[si] = (aio_sub_t){.tag = tag, .off = offset, .buf = buf, .len = len};
    a->pending++;
    if (!len) { /* nothing to read: done at once */
        list_push(a, &a->d_head, &a->d_tail, si);
        a->ndone++;
        return 0;
    }
    list_push(a, &a->q_head, &a->q_tail, si);
    int e = issue_queued(a);
    return e < 0 ? set_broken(a, e) : 0;
}

int blco_aio_reap(blco_aio_t *a, blco_aio_done_t *done, int max, int min)
{
    if (!a || max < 0 || min < 0 || (max && !done))
        return -EINVAL;
    if (min > max)
        min = max;
    if (min > a->pending)
        min = a->pending;
    /* Collect what is ready without waiting, then wait as long as needed. */
    int block = 0;
    for (;;) {
        if (a->broken)
            return a->broken;
        uint32_t inflight = a->depth - a->nfree_parts;
        if (inflight || a->q_head >= 0) {
            int e = a->ops->wait(a, block && inflight);
            if (e >= 0)
                e = issue_queued(a);
            if (e < 0)
                return set_broken(a, e);
        }
        if (a->ndone >= min || (a->nfree_parts == a->depth && a->q_head < 0))
            break;
        block = 1;
    }
    int n = 0;
    while (n < max && a->d_head >= 0) {
        int32_t si = list_pop(a, &a->d_head, &a->d_tail);
        aio_sub_t *s = &a->subs[si];
        done[n].tag = s->tag;
        done[n].result = s->err ? s->err : s->bytes;
        sub_free(a, si);
        a->ndone--;
        a->pending--;
        n++;
    }
    return n;
}

int blco_aio_pending(const blco_aio_t *a)
{
    return a ? a->pending : 0;
}

int blco_aio_backend(const blco_aio_t *a)
{
    return a ? a->backend : -EINVAL;
}

int blco_aio_direct(const blco_aio_t *a)
{
    return a ? a->direct : 0;
}

const char *blco_aio_describe(const blco_aio_t *a)
{
    return a ? a->desc : "(no reader)";
}

int blco_aio_fallbacks(const blco_aio_t *a)
{
    return a ? a->fallbacks : 0;
}

void blco_aio_close(blco_aio_t *a)
{
    if (!a)
        return;
    a->closing = 1;
    /* Submissions still queued were never started: their buffers are untouched. */
    a->q_head = a->q_tail = -1;
    if (a->ops) {
        while (!a->broken && a->nfree_parts < a->depth) {
            int e = a->ops->wait(a, 1);
            if (e < 0)
                set_broken(a, e);
        }
        a->ops->destroy(a);
    }
    if (a->fd >= 0)
        close(a->fd);
    if (a->fd_old >= 0)
        close(a->fd_old);
    free(a->regions);
    free(a->parts);
    free(a->free_parts);
    free(a->subs);
    free(a);
}

/* ---- opening ---- */

static int open_file(blco_aio_t *a, int want_direct, blco_diag_t *diag)
{
    int err = 0;
    if (want_direct) {
        if (env_on("BLCO_IO_REFUSE_DIRECT") && strcmp(getenv("BLCO_IO_REFUSE_DIRECT"), "read")) {
            err = -EINVAL;
        } else {
            a->fd = open(a->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
            err = a->fd < 0 ? -errno : 0;
        }
        if (!err) {
            a->direct = 1;
        } else if (err == -EINVAL) {
            aio_fallback(a, AIO_FB_DIRECT, "O_DIRECT refused: %s%s", blco_strerror(err),
                         env_on("BLCO_IO_REFUSE_DIRECT") ? " (BLCO_IO_REFUSE_DIRECT)" : "");
            err = 0;
        }
    }
    if (!err && a->fd < 0) {
        a->fd = open(a->path, O_RDONLY | O_CLOEXEC);
        err = a->fd < 0 ? -errno : 0;
    }
    struct stat st;
    if (!err && fstat(a->fd, &st) < 0)
        err = -errno;
    if (!err && S_ISDIR(st.st_mode))
        err = -EISDIR;
    if (err)
        return blco_diag_set(diag, 0, err, "%s: cannot open for reading: %s", a->path,
                             blco_strerror(err));
    return 0;
}

static int check_opts(const blco_aio_opts_t *o, const blco_aio_region_t *regions, int nregions,
                      blco_diag_t *diag)
{
    if (o->backend != BLCO_IO_AUTO && o->backend != BLCO_IO_URING && o->backend != BLCO_IO_PREAD)
        return blco_diag_set(diag, 0, -EINVAL, "unknown I/O backend %d", o->backend);
    if (o->threads < 0 || o->threads > 1024)
        return blco_diag_set(diag, 0, -EINVAL, "pread threads %d outside 0..1024", o->threads);
    if (nregions < 0 || (nregions && !regions))
        return blco_diag_set(diag, 0, -EINVAL, "bad buffer region list");
    for (int i = 0; i < nregions; i++)
        if (!regions[i].base || !regions[i].bytes || (uintptr_t)regions[i].base % AIO_ALIGN ||
            regions[i].bytes % AIO_ALIGN)
            return blco_diag_set(diag, 0, -EINVAL,
                                 "buffer region %d is not 4096-aligned or is empty", i);
    return 0;
}

int blco_aio_open(const char *path, const blco_aio_opts_t *o, const blco_aio_region_t *regions,
                  int nregions, blco_aio_t **out, blco_diag_t *diag)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!path)
        return blco_diag_set(diag, 0, -EINVAL, "no file name");
    blco_aio_opts_t def;
    if (!o) {
        blco_aio_opts_default(&def);
        o = &def;
    }
    int err = check_opts(o, regions, nregions, diag);
    if (err < 0)
        return err;
    blco_aio_t *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->fd = a->fd_old = -1;
    a->free_sub = a->q_head = a->q_tail = a->d_head = a->d_tail = -1;
    if ((size_t)snprintf(a->path, sizeof a->path, "%s", path) >= sizeof a->path) {
        err = blco_diag_set(diag, 0, -ENAMETOOLONG, "file name too long");
        goto fail;
    }

    /* Sizes: requests of 4 KiB..4 MiB, never more than max_inflight, depth from both. */
    a->max_inflight = o->max_inflight ? o->max_inflight : 64ull << 20;
    if (a->max_inflight < AIO_ALIGN)
        a->max_inflight = AIO_ALIGN;
    uint64_t rb = o->request_bytes ? o->request_bytes : 1u << 20;
    rb = BLCO_MAX(BLCO_MIN(rb, 4ull << 20), AIO_ALIGN);
    rb = BLCO_MIN(rb, a->max_inflight) / AIO_ALIGN * AIO_ALIGN;
    a->req_bytes = (uint32_t)rb;
    a->depth = (uint32_t)BLCO_MIN(a->max_inflight / rb, (uint64_t)AIO_MAX_DEPTH);
    a->threads = o->threads ? o->threads : 4;

    if (nregions) {
        a->regions = malloc((size_t)nregions * sizeof *regions);
        if (!a->regions) {
            err = -ENOMEM;
            goto fail;
        }
        memcpy(a->regions, regions, (size_t)nregions * sizeof *regions);
        a->nregions = nregions;
    }
    a->parts = calloc(a->depth, sizeof *a->parts);
    a->free_parts = malloc(a->depth * sizeof *a->free_parts);
    if (!a->parts || !a->free_parts) {
        err = -ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < a->depth; i++)
        a->free_parts[i] = a->depth - 1 - i;
    a->nfree_parts = a->depth;

    err = open_file(a, o->direct, diag);
    if (err < 0)
        goto fail;
    a->refuse_direct_read = a->direct && getenv("BLCO_IO_REFUSE_DIRECT") &&
                            !strcmp(getenv("BLCO_IO_REFUSE_DIRECT"), "read");

    if (o->backend != BLCO_IO_PREAD) {
#if HAVE_LIBURING
        int refuse = env_on("BLCO_IO_REFUSE_URING");
        err = aio_uring_setup(a, refuse, env_on("BLCO_IO_REFUSE_REGISTER"), diag);
        if (err < 0 && o->backend == BLCO_IO_URING) {
            blco_diag_prefix(diag, ": ");
            blco_diag_prefix(diag, a->path);
            goto fail;
        }
        if (err < 0) {
            aio_fallback(a, AIO_FB_URING, "io_uring refused: %s%s", blco_strerror(err),
                         refuse ? " (BLCO_IO_REFUSE_URING)" : "");
            err = 0;
        }
#else
        size_t n = strlen(a->why); /* a note, not a fallback: nothing was refused */
        snprintf(a->why + n, sizeof a->why - n, "%sthis build has no io_uring", n ? "; " : "");
        if (o->backend == BLCO_IO_URING) {
            err = blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                                "%s: io_uring reads were asked for, but this build has no "
                                "io_uring support (liburing was not found at build time)",
                                path);
            goto fail;
        }
#endif
    }
    if (!a->ops) {
        err = aio_pread_setup(a, diag);
        if (err < 0)
            goto fail;
    }
    describe(a);
    blco_log(BLCO_LOG_DEBUG, "%s: reading with %s", a->path, a->desc);
    *out = a;
    return 0;
fail:
    blco_aio_close(a);
    return err;
}
