/* The pread backend of the asynchronous reader: a pool of threads taking requests from a
 * work queue and putting them, read, on a completion queue the main thread waits on. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "aio_internal.h"

/* Both queues are rings of `depth` request indices: never more are in flight. */
typedef struct pread_be {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint32_t *work, *done;
    uint32_t work_head, work_n, done_head, done_n, cap;
    int stop;
    int nthreads; /* threads started */
    pthread_t *threads;
    blco_aio_t *a;
} pread_be_t;

/* One attempt of a request: everything up to its end, the end of the file or an error. */
static int64_t read_part(const aio_part_t *p)
{
    uint32_t done = 0;
    int tries = 0;
    while (p->done + done < p->len) {
        uint64_t off = p->off + p->done + done;
        ssize_t r = pread(p->fd, p->buf + p->done + done, p->len - p->done - done, (off_t)off);
        if (r < 0) {
            if ((errno == EINTR || errno == EAGAIN) && ++tries <= AIO_MAX_RETRIES)
                continue;
            return done ? (int64_t)done : -errno;
        }
        if (r == 0)
            break;
        done += (uint32_t)r;
        if (p->direct && (off + (uint64_t)r) % AIO_ALIGN)
            break; /* O_DIRECT stopped at the unaligned end of the file */
    }
    return done;
}

static void *worker(void *arg)
{
    pread_be_t *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->work_n && !b->stop)
            pthread_cond_wait(&b->work_cv, &b->mu);
        if (!b->work_n)
            break; /* stopping and nothing left */
        uint32_t pi = b->work[b->work_head];
        b->work_head = (b->work_head + 1) % b->cap;
        b->work_n--;
        pthread_mutex_unlock(&b->mu);
        aio_part_t *p = &b->a->parts[pi];
        p->res = read_part(p);
        pthread_mutex_lock(&b->mu);
        b->done[(b->done_head + b->done_n) % b->cap] = pi;
        b->done_n++;
        pthread_cond_signal(&b->done_cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static int pread_issue(blco_aio_t *a, uint32_t pi)
{
    pread_be_t *b = a->be;
    pthread_mutex_lock(&b->mu);
    assert(b->work_n < b->cap);
    b->work[(b->work_head + b->work_n) % b->cap] = pi;
    b->work_n++;
    pthread_cond_signal(&b->work_cv);
    pthread_mutex_unlock(&b->mu);
    return 0;
}

static int pread_flush(blco_aio_t *a)
{
    (void)a;
    return 0;
}

static int pread_wait(blco_aio_t *a, int block)
{
    pread_be_t *b = a->be;
    uint32_t got[64];
    for (;;) {
        uint32_t n = 0;
        pthread_mutex_lock(&b->mu);
        while (block && !b->done_n)
            pthread_cond_wait(&b->done_cv, &b->mu);
        while (b->done_n && n < 64) {
            got[n++] = b->done[b->done_head];
            b->done_head = (b->done_head + 1) % b->cap;
            b->done_n--;
        }
        pthread_mutex_unlock(&b->mu);
        for (uint32_t i = 0; i < n; i++)
            aio_part_result(a, got[i], a->parts[got[i]].res);
        if (n < 64)
            return 0;
        block = 0;
    }
}

static void pread_stop(pread_be_t *b)
{
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->work_cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->nthreads; i++)
        pthread_join(b->threads[i], NULL);
}

static void pread_free(pread_be_t *b)
{
    pthread_cond_destroy(&b->work_cv);
    pthread_cond_destroy(&b->done_cv);
    pthread_mutex_destroy(&b->mu);
    free(b->threads);
    free(b->work);
    free(b->done);
    free(b);
}

static void pread_destroy(blco_aio_t *a)
{
    pread_be_t *b = a->be;
    pread_stop(b);
    pread_free(b);
    a->be = NULL;
}

static const aio_ops_t pread_ops = {pread_issue, pread_flush, pread_wait, NULL, pread_destroy};

int aio_pread_setup(blco_aio_t *a, blco_diag_t *diag)
{
    pread_be_t *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->a = a;
    b->cap = a->depth;
    b->work = malloc(b->cap * sizeof *b->work);
    b->done = malloc(b->cap * sizeof *b->done);
    b->threads = malloc((size_t)a->threads * sizeof *b->threads);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work_cv, NULL);
    pthread_cond_init(&b->done_cv, NULL);
    if (!b->work || !b->done || !b->threads) {
        pread_free(b);
        return -ENOMEM;
    }
    for (; b->nthreads < a->threads; b->nthreads++) {
        int e = pthread_create(&b->threads[b->nthreads], NULL, worker, b);
        if (e) {
            pread_stop(b);
            pread_free(b);
            return blco_diag_set(diag, 0, -e, "cannot start pread threads: %s", blco_strerror(-e));
        }
    }
    a->be = b;
    a->ops = &pread_ops;
    a->backend = BLCO_IO_PREAD;
    return 0;
}
