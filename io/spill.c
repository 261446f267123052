/* Spill files: anonymous scratch files (O_TMPFILE, else mkstemp + unlink) with appends,
 * positioned reads, hole punching, and the buffered writer and reader over them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spill.h"

struct blco_spill {
    int fd;
    uint64_t size;
    char dir[4096];
    char what[64];
};

static int spill_error(const blco_spill_t *f, int err, const char *doing, blco_diag_t *diag)
{
    if (err == -ENOSPC)
        return blco_diag_set(diag, 0, err,
                             "%s: no space left on the device while %s spill data (%s, %llu "
                             "bytes so far); free some space or choose another --tmpdir",
                             f->dir, doing, f->what, (unsigned long long)f->size);
    if (err == -EFBIG)
        return blco_diag_set(diag, 0, err,
                             "%s: the spill file (%s) grew past the file size limit while %s "
                             "it (%llu bytes); choose another --tmpdir or raise the limit",
                             f->dir, f->what, doing, (unsigned long long)f->size);
    return blco_diag_set(diag, 0, err, "%s: %s while %s spill data (%s)", f->dir,
                         blco_strerror(err), doing, f->what);
}

int blco_spill_create(const char *dir, const char *what, blco_spill_t **out, blco_diag_t *diag)
{
    *out = NULL;
    blco_spill_t *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->fd = -1;
    snprintf(f->what, sizeof f->what, "%s", what);
    if ((size_t)snprintf(f->dir, sizeof f->dir, "%s", dir) >= sizeof f->dir) {
        free(f);
        return blco_diag_set(diag, 0, -ENAMETOOLONG, "spill directory name too long");
    }
    int err = 0;
#ifdef O_TMPFILE
    /* A file that never has a name: nothing to clean up whatever happens. */
    f->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (f->fd < 0)
        err = -errno;
#else
    err = -EOPNOTSUPP;
#endif
    if (f->fd < 0 && (err == -EOPNOTSUPP || err == -EISDIR || err == -EINVAL)) {
        /* Filesystems without O_TMPFILE: a named file, unlinked as soon as it exists. */
        char path[4200];
        snprintf(path, sizeof path, "%s/.blco-spill.XXXXXX", dir);
        f->fd = mkostemp(path, O_CLOEXEC);
        if (f->fd < 0) {
            err = -errno;
        } else {
            unlink(path);
            err = 0;
        }
    }
    if (f->fd < 0) {
        blco_diag_set(diag, 0, err, "%s: cannot create a spill file: %s", dir, blco_strerror(err));
        free(f);
        return err;
    }
    *out = f;
    return 0;
}

void blco_spill_close(blco_spill_t *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f);
}

int blco_spill_append(blco_spill_t *f, const void *buf, size_t len, blco_diag_t *diag)
{
    int err = blco_spill_write_at(f, f->size, buf, len, diag);
    if (err == 0)
        f->size += len;
    return err;
}

int blco_spill_write_at(blco_spill_t *f, uint64_t off, const void *buf, size_t len,
                        blco_diag_t *diag)
{
    int err = blco_pwrite_all(f->fd, buf, len, off);
    return err < 0 ? spill_error(f, err, "writing", diag) : 0;
}

int blco_spill_read(blco_spill_t *f, uint64_t off, void *buf, size_t len, blco_diag_t *diag)
{
    int err = blco_pread_all(f->fd, buf, len, off);
    if (err == -BLCO_EFORMAT)
        return blco_diag_set(diag, 0, err,
                             "%s: spill data (%s) ends early in the %zu bytes at %llu", f->dir,
                             f->what, len, (unsigned long long)off);
    return err < 0 ? spill_error(f, err, "reading", diag) : 0;
}

void blco_spill_discard(blco_spill_t *f, uint64_t off, uint64_t len)
{
#if defined(FALLOC_FL_PUNCH_HOLE) && defined(FALLOC_FL_KEEP_SIZE)
    if (len)
        (void)fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
#else
    (void)f, (void)off, (void)len;
#endif
}

uint64_t blco_spill_size(const blco_spill_t *f)
{
    return f ? f->size : 0;
}

int blco_spill_truncate(blco_spill_t *f, blco_diag_t *diag)
{
    if (ftruncate(f->fd, 0) < 0)
        return spill_error(f, -errno, "truncating", diag);
    f->size = 0;
    return 0;
}

int blco_spill_writer_flush(blco_spill_writer_t *w, blco_diag_t *diag)
{
    if (!w->len)
        return 0;
    int err = blco_spill_append(w->f, w->buf, w->len, diag);
    w->len = 0;
    return err;
}

int64_t blco_spill_reader_fill(blco_spill_reader_t *r, size_t need, blco_diag_t *diag)
{
    size_t have = r->len - r->pos;
    if (have >= need || r->off == r->end)
        return (int64_t)have;
    memmove(r->buf, r->buf + r->pos, have);
    r->pos = 0;
    r->len = have;
    size_t want = (size_t)BLCO_MIN((uint64_t)(r->cap - have), r->end - r->off);
    int err = blco_spill_read(r->f, r->off, r->buf + have, want, diag);
    if (err < 0)
        return err;
    r->off += want;
    r->len += want;
    return (int64_t)r->len;
}
