/* The packer's input: blocks of whole lines read sequentially from a file, a pipe, or
 * gzip / zstd data, with an optional read-ahead thread. A block's unfinished last line is
 * carried to the front of the next block. Waits on pipes poll so a cancel request is
 * seen within 100 ms even when no input comes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
/* for the frame header and the decoder size estimate (stable in practice since 1.3) */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "text_source.h"

#define INPUT_BUF_BYTES ((size_t)1 << 20)
#define ZLIB_STATE_BYTES ((uint64_t)64 << 10)
#define POLL_MS 100
#define WINDOWLOG_MIN 10 /* the smallest zstd window, 1 KiB */

enum { SLOT_FREE = 0, SLOT_READY, SLOT_HELD };

typedef struct slot {
    char *buf;
    size_t len, cut; /* bytes held; the block is [0, cut), [cut, len) is carried on */
    int state, eof, err;
    blco_diag_t diag;
} slot_t;

struct blco_text_source {
    blco_text_source_opts_t o;
    char name[512];
    int fd, regular, comp;
    uint64_t file_size;
    _Atomic uint64_t file_bytes;

    /* bytes read but not yet decoded (all input starts here, for the magic bytes) */
    uint8_t *ibuf;
    size_t icap, ipos, ilen;
    int in_eof;
    z_stream z;
    int z_init, z_member_done;
    ZSTD_DStream *zs;
    size_t zret;
    uint64_t reserved; /* decoder memory charged to the budget */

    int nslot;
    slot_t slot[2];
    int prev;      /* slot holding the carry for the next fill, -1 before the first */
    int next_read; /* slot the consumer takes next */
    int held;      /* slot the consumer holds, -1 if none */
    int finished;  /* the consumer has seen the end or an error */

    pthread_t thread;
    int thread_started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static int canceled(const blco_text_source_t *s)
{
    return (s->o.cancel && *s->o.cancel) || __atomic_load_n(&s->stop, __ATOMIC_RELAXED);
}

/* read(2) that polls a pipe or terminal first, so a cancel request is noticed. */
static ssize_t read_some(blco_text_source_t *s, void *buf, size_t n)
{
    for (;;) {
        if (canceled(s))
            return -BLCO_ECANCELED;
        if (!s->regular) {
            struct pollfd p = {.fd = s->fd, .events = POLLIN};
            int r = poll(&p, 1, POLL_MS);
            if (r < 0 && errno != EINTR)
                return -errno;
            if (r <= 0)
                continue;
        }
        ssize_t r = read(s->fd, buf, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        atomic_fetch_add(&s->file_bytes, (uint64_t)r);
        return r;
    }
}

static int read_error(blco_text_source_t *s, int err, blco_diag_t *diag)
{
    if (err == -BLCO_ECANCELED)
        return blco_diag_set(diag, 0, err, "%s: reading canceled", s->name);
    return blco_diag_set(diag, 0, err, "%s: read error: %s", s->name, blco_strerror(err));
}

/* Refills the input buffer when it is empty. Returns 0 or a negative code. */
static int refill_input(blco_text_source_t *s, blco_diag_t *diag)
{
    if (s->ipos < s->ilen || s->in_eof)
        return 0;
    ssize_t r = read_some(s, s->ibuf, s->icap);
    if (r < 0)
        return read_error(s, (int)r, diag);
    s->ipos = 0;
    s->ilen = (size_t)r;
    s->in_eof = r == 0;
    return 0;
}

static int fill_plain(blco_text_source_t *s, char *dst, size_t cap, size_t *len, int *eof,
                      blco_diag_t *diag)
{
    if (s->ipos < s->ilen) { /* what the magic-byte probe read */
        size_t n = BLCO_MIN(cap - *len, s->ilen - s->ipos);
        memcpy(dst + *len, s->ibuf + s->ipos, n);
        s->ipos += n;
        *len += n;
    }
    while (*len < cap) {
        if (s->in_eof) {
            *eof = 1;
            break;
        }
        ssize_t r = read_some(s, dst + *len, cap - *len);
        if (r < 0)
            return read_error(s, (int)r, diag);
        if (r == 0) {
            s->in_eof = 1;
            *eof = 1;
            break;
        }
        *len += (size_t)r;
    }
    if (s->regular && !*eof) /* start reading the next block from disk while this one parses */
        posix_fadvise(s->fd, (off_t)atomic_load(&s->file_bytes), (off_t)cap, POSIX_FADV_WILLNEED);
    return 0;
}

static int fill_gzip(blco_text_source_t *s, char *dst, size_t cap, size_t *len, int *eof,
                     blco_diag_t *diag)
{
    z_stream *z = &s->z;
    z->next_out = (Bytef *)dst + *len;
    z->avail_out = (uInt)BLCO_MIN(cap - *len, (size_t)UINT32_MAX);
    int err = 0;
    while (z->avail_out) {
        /* zlib reads the input buffer in place: refill it only once zlib has taken all. */
        if (z->avail_in == 0 && (err = refill_input(s, diag)) < 0)
            break;
        if (z->avail_in == 0 && s->ipos < s->ilen) {
            z->next_in = s->ibuf + s->ipos;
            z->avail_in = (uInt)(s->ilen - s->ipos);
            s->ipos = s->ilen;
        }
        if (s->z_member_done) {
            if (z->avail_in == 0 && s->in_eof) {
                *eof = 1;
                break;
            }
            /* Concatenated gzip members (as `cat a.gz b.gz` makes) decode as one stream. */
            inflateReset(z);
            s->z_member_done = 0;
        }
        if (z->avail_in == 0 && s->in_eof) {
            err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                "%s: the gzip data ends early (a truncated file?)", s->name);
            break;
        }
        int ret = inflate(z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            s->z_member_done = 1;
        } else if (ret == Z_MEM_ERROR) {
            err = blco_diag_set(diag, 0, -ENOMEM, "%s: out of memory decoding gzip", s->name);
            break;
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "%s: corrupt gzip data (%s)", s->name,
                                z->msg ? z->msg : "inflate failed");
            break;
        }
    }
    *len = (size_t)((char *)z->next_out - dst);
    return err;
}

static int fill_zstd(blco_text_source_t *s, char *dst, size_t cap, size_t *len, int *eof,
                     blco_diag_t *diag)
{
    ZSTD_outBuffer out = {dst, cap, *len};
    int err = 0;
    while (out.pos < out.size) {
        if ((err = refill_input(s, diag)) < 0)
            break;
        if (s->ipos == s->ilen && s->in_eof) {
            if (s->zret != 0)
                err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                    "%s: the zstd data ends early (a truncated file?)", s->name);
            else
                *eof = 1;
            break;
        }
        ZSTD_inBuffer in = {s->ibuf, s->ilen, s->ipos};
        size_t ret = ZSTD_decompressStream(s->zs, &out, &in);
        s->ipos = in.pos;
        if (ZSTD_isError(ret)) {
            if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge)
                err = blco_diag_set(diag, 0, -BLCO_EBUDGET,
                                    "%s: a zstd frame needs a larger window than the first "
                                    "one, which the memory budget was sized for",
                                    s->name);
            else
                err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "%s: corrupt zstd data (%s)", s->name,
                                    ZSTD_getErrorName(ret));
            break;
        }
        s->zret = ret;
    }
    *len = out.pos;
    return err;
}

/* Fills slot w: the carry from the previous block, then fresh text up to the capacity. */
static void fill_slot(blco_text_source_t *s, int w)
{
    slot_t *sl = &s->slot[w];
    size_t carry = 0, cap = s->o.block_bytes;
    if (s->prev >= 0) {
        slot_t *p = &s->slot[s->prev];
        carry = p->len - p->cut;
        /* The consumer holds [0, cut) of the previous slot; the carry lies beyond it. */
        memmove(sl->buf, p->buf + p->cut, carry);
    }
    sl->len = carry;
    sl->cut = 0;
    sl->eof = 0;
    sl->err = 0;
    sl->diag.line = 0;
    sl->diag.msg[0] = '\0';
    int err = s->comp == BLCO_TEXT_GZIP ? fill_gzip(s, sl->buf, cap, &sl->len, &sl->eof, &sl->diag)
              : s->comp == BLCO_TEXT_ZSTD
                  ? fill_zstd(s, sl->buf, cap, &sl->len, &sl->eof, &sl->diag)
                  : fill_plain(s, sl->buf, cap, &sl->len, &sl->eof, &sl->diag);
    if (err < 0) {
        sl->err = err;
    } else if (sl->eof) {
        sl->cut = sl->len;
    } else {
        sl->cut = blco_tns_cut(sl->buf, sl->len);
        if (!sl->cut)
            sl->err = blco_diag_set(&sl->diag, 0, -E2BIG,
                                    "%s: a line is longer than %zu bytes (the read block size)",
                                    s->name, cap);
    }
    s->prev = w;
}

static void *reader_main(void *arg)
{
    blco_text_source_t *s = arg;
    int w = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && s->slot[w].state != SLOT_FREE)
            pthread_cond_wait(&s->cv, &s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        fill_slot(s, w);
        pthread_mutex_lock(&s->mu);
        s->slot[w].state = SLOT_READY;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (s->slot[w].eof || s->slot[w].err)
            break;
        w ^= 1;
    }
    return NULL;
}

uint64_t blco_text_source_memory(const blco_text_source_opts_t *o)
{
    return (uint64_t)(o->prefetch ? 2 : 1) * o->block_bytes + INPUT_BUF_BYTES + ZLIB_STATE_BYTES;
}

/* Reads the first bytes to recognise compressed data, and sets up its decoder. */
static int probe(blco_text_source_t *s, blco_diag_t *diag)
{
    while (s->ilen < 32 && !s->in_eof) {
        ssize_t r = read_some(s, s->ibuf + s->ilen, s->icap - s->ilen);
        if (r < 0)
            return read_error(s, (int)r, diag);
        s->ilen += (size_t)r;
        s->in_eof = r == 0;
    }
    const uint8_t *b = s->ibuf;
    if (s->ilen >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
        s->comp = BLCO_TEXT_GZIP;
        int err = blco_budget_reserve(s->o.budget, ZLIB_STATE_BYTES);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: no memory budget left for the gzip decoder",
                                 s->name);
        s->reserved = ZLIB_STATE_BYTES;
        memset(&s->z, 0, sizeof s->z);
        if (inflateInit2(&s->z, 15 + 16) != Z_OK)
            return blco_diag_set(diag, 0, -ENOMEM, "%s: cannot start the gzip decoder", s->name);
        s->z_init = 1;
        return 0;
    }
    if (s->ilen >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
        s->comp = BLCO_TEXT_ZSTD;
        /* The decoder's window is set by the compressor (up to 2 GiB with --long): charge
         * it to the budget, and refuse later frames that would need more. */
        ZSTD_frameHeader fh;
        unsigned long long win = (unsigned long long)1 << 23;
        if (ZSTD_getFrameHeader(&fh, s->ibuf, s->ilen) == 0 && fh.frameType == ZSTD_frame)
            win = BLCO_MAX(fh.windowSize, 1ull << WINDOWLOG_MIN);
        int wlog = WINDOWLOG_MIN;
        while (wlog < 31 && (1ull << wlog) < win)
            wlog++;
        uint64_t need = ZSTD_estimateDStreamSize((size_t)1 << wlog);
        int err = blco_budget_reserve(s->o.budget, need);
        if (err < 0) {
            char sz[32];
            return blco_diag_set(diag, 0, err,
                                 "%s: the zstd window needs %s, more than the memory budget has "
                                 "left",
                                 s->name, blco_format_size(need, sz, sizeof sz));
        }
        s->reserved = need;
        if (!(s->zs = ZSTD_createDStream()))
            return blco_diag_set(diag, 0, -ENOMEM, "%s: cannot start the zstd decoder", s->name);
        ZSTD_DCtx_setParameter(s->zs, ZSTD_d_windowLogMax, BLCO_MAX(wlog, WINDOWLOG_MIN));
        return 0;
    }
    s->comp = BLCO_TEXT_PLAIN;
    return 0;
}

int blco_text_source_open(const char *path, const blco_text_source_opts_t *o,
                          blco_text_source_t **out, blco_diag_t *diag)
{
    *out = NULL;
    if (!path || o->block_bytes < 2)
        return blco_diag_set(diag, 0, -EINVAL, "invalid input or block size");
    blco_text_source_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->o = *o;
    s->fd = -1;
    s->prev = -1;
    s->held = -1;
    s->nslot = o->prefetch ? 2 : 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int err;
    int is_stdin = strcmp(path, "-") == 0;
    snprintf(s->name, sizeof s->name, "%s", is_stdin ? "standard input" : path);
    if (is_stdin) {
        s->fd = STDIN_FILENO;
    } else if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        err = -errno;
        blco_diag_set(diag, 0, err, "%s: cannot open: %s", s->name, blco_strerror(err));
        goto fail;
    }
    struct stat st;
    if (fstat(s->fd, &st) < 0) {
        err = -errno;
        blco_diag_set(diag, 0, err, "%s: cannot stat: %s", s->name, blco_strerror(err));
        goto fail;
    }
    if (S_ISDIR(st.st_mode)) {
        err = blco_diag_set(diag, 0, -EISDIR, "%s: is a directory", s->name);
        goto fail;
    }
    s->regular = S_ISREG(st.st_mode);
    s->file_size = s->regular ? (uint64_t)st.st_size : 0;
    if (s->regular)
        posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);

    s->icap = INPUT_BUF_BYTES;
    if ((err = blco_budget_alloc(o->budget, s->icap, (void **)&s->ibuf)) < 0)
        goto nomem;
    if ((err = probe(s, diag)) < 0)
        goto fail;
    /* A plain regular file reads from the page cache or with the kernel's read-ahead:
     * a thread would only compete with the parser for cores. Decoding and pipes (whose
     * writer stalls while the pipe is full) are worth a thread. */
    if (s->regular && s->comp == BLCO_TEXT_PLAIN)
        s->nslot = 1;
    for (int i = 0; i < s->nslot; i++)
        if ((err = blco_budget_alloc(o->budget, o->block_bytes, (void **)&s->slot[i].buf)) < 0)
            goto nomem;
    if (s->nslot == 2) {
        if ((err = -pthread_create(&s->thread, NULL, reader_main, s)) < 0) {
            blco_diag_set(diag, 0, err, "cannot start the read-ahead thread: %s",
                          blco_strerror(err));
            goto fail;
        }
        s->thread_started = 1;
    }
    *out = s;
    return 0;
nomem:
    blco_diag_set(diag, 0, err, "%s: no memory budget left for the read buffers", s->name);
fail:
    if (is_stdin)
        s->fd = -1; /* standard input is the caller's */
    blco_text_source_close(s);
    return err;
}

int blco_text_source_at_end(const blco_text_source_t *s)
{
    return s->finished;
}

int blco_text_source_next(blco_text_source_t *s, const char **text, size_t *len, blco_diag_t *diag)
{
    *text = NULL;
    *len = 0;
    if (s->held >= 0) {
        pthread_mutex_lock(&s->mu);
        s->slot[s->held].state = SLOT_FREE;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        s->held = -1;
    }
    if (s->finished)
        return 0;
    int r = s->next_read;
    slot_t *sl = &s->slot[r];
    if (!s->thread_started) {
        fill_slot(s, r);
    } else {
        pthread_mutex_lock(&s->mu);
        while (sl->state != SLOT_READY) {
            if (s->o.cancel && *s->o.cancel) {
                pthread_mutex_unlock(&s->mu);
                return blco_diag_set(diag, 0, -BLCO_ECANCELED, "%s: reading canceled", s->name);
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        sl->state = SLOT_HELD;
        pthread_mutex_unlock(&s->mu);
    }
    s->held = r;
    s->next_read = (r + 1) % s->nslot;
    if (sl->err) {
        s->finished = 1;
        if (diag)
            *diag = sl->diag;
        return sl->err;
    }
    if (sl->eof)
        s->finished = 1;
    if (!sl->cut)
        return 0;
    *text = sl->buf;
    *len = sl->cut;
    return 1;
}

uint64_t blco_text_source_file_bytes(const blco_text_source_t *s)
{
    return atomic_load(&((blco_text_source_t *)s)->file_bytes);
}

uint64_t blco_text_source_file_size(const blco_text_source_t *s)
{
    return s->file_size;
}

int blco_text_source_compression(const blco_text_source_t *s)
{
    return s->comp;
}

void blco_text_source_close(blco_text_source_t *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->z_init)
        inflateEnd(&s->z);
    ZSTD_freeDStream(s->zs);
    blco_budget_release(s->o.budget, s->reserved);
    for (int i = 0; i < s->nslot; i++)
        blco_budget_free(s->o.budget, s->slot[i].buf, s->o.block_bytes);
    blco_budget_free(s->o.budget, s->ibuf, s->icap);
    if (s->fd > STDIN_FILENO)
        close(s->fd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
