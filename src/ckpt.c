/* Checkpoint folders shared by CP-ALS and Tucker: the lock that keeps a second run out, and
 * the kind of checkpoint a folder holds (see ckpt.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"

static const char *kind_name(int kind)
{
    return kind == BLCO_CKPT_CPD ? "CP-ALS" : kind == BLCO_CKPT_TUCKER ? "Tucker" : "unknown";
}

static const char *kind_tool(int kind)
{
    return kind == BLCO_CKPT_CPD ? "blco-cpd" : kind == BLCO_CKPT_TUCKER ? "blco-tucker" : "?";
}

int blco_ckpt_kind(const char *dir, char *writer, size_t n)
{
    char path[4096], line[1200];
    if (n)
        writer[0] = 0;
    if ((size_t)snprintf(path, sizeof path, "%s/state", dir) >= sizeof path)
        return BLCO_CKPT_NONE;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? BLCO_CKPT_NONE : BLCO_CKPT_UNKNOWN;
    int kind = BLCO_CKPT_UNKNOWN;
    if (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "blco-cpd-checkpoint ", 20))
            kind = BLCO_CKPT_CPD;
        else if (!strncmp(line, "blco-tucker-state ", 18))
            kind = BLCO_CKPT_TUCKER;
    }
    const size_t klen = strlen(BLCO_CKPT_WRITER_KEY);
    while (kind != BLCO_CKPT_UNKNOWN && fgets(line, sizeof line, f))
        if (!strncmp(line, BLCO_CKPT_WRITER_KEY, klen) && line[klen] == ' ') {
            snprintf(writer, n, "%s", line + klen + 1);
            writer[strcspn(writer, "\n")] = 0;
            break;
        }
    fclose(f);
    return kind;
}

void blco_ckpt_put_line(FILE *f, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, f);
    fputc('\n', f);
}

int blco_ckpt_claim(const char *dir, int kind, blco_diag_t *diag)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/lock", dir) >= sizeof path)
        return blco_diag_set(diag, 0, -ENAMETOOLONG, "checkpoint folder %s: path too long", dir);
    int fd, err = 0;
    for (;;) {
        if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666)) < 0)
            return blco_diag_set(diag, 0, -errno, "%s: %s", path, strerror(errno));
        while (flock(fd, LOCK_EX | LOCK_NB) < 0 && !err) {
            if (errno == EINTR)
                continue;
            if (errno == EWOULDBLOCK) {
                char who[256] = "";
                ssize_t got = pread(fd, who, sizeof who - 1, 0);
                who[got > 0 ? got : 0] = 0;
                who[strcspn(who, "\n")] = 0;
                err = blco_diag_set(diag, 0, -EBUSY,
                                    "checkpoint folder %s is in use by another run (%s): wait "
                                    "for it to end, or give this one another folder",
                                    dir, who[0] ? who : "its pid unknown");
            } else {
                err = blco_diag_set(diag, 0, -errno, "%s: cannot lock: %s", path,
                                    strerror(errno));
            }
        }
        if (err < 0) {
            close(fd);
            return err;
        }
        /* The holder before us unlinks the file as it lets go (blco_ckpt_release): the
         * lock counts only when it is on the file that the name still gives. */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino)
            break;
        close(fd);
    }
    char host[256] = "", who[400];
    gethostname(host, sizeof host - 1);
    int len = snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host[0] ? host : "?");
    if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)len, 0) < 0)
        blco_log(BLCO_LOG_DEBUG, "%s: %s", path, strerror(errno)); /* the lock holds anyway */

    char writer[1024];
    int there = blco_ckpt_kind(dir, writer, sizeof writer);
    if (there != BLCO_CKPT_NONE && there != kind) {
        if (there == BLCO_CKPT_UNKNOWN)
            err = blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                                "checkpoint folder %s holds a file 'state' that is no blco "
                                "checkpoint: give this run another folder",
                                dir);
        else /* the writer last: a long command line may be cut at the diag's end */
            err = blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                                "%s holds a %s checkpoint, not a %s one: resume it with %s, or "
                                "give this run another folder (written by: %s)",
                                dir, kind_name(there), kind_name(kind), kind_tool(there),
                                writer[0] ? writer : "an older build");
        blco_ckpt_release(dir, fd); /* the folder as it was */
        return err;
    }
    return fd;
}

void blco_ckpt_release(const char *dir, int fd)
{
    if (fd < 0)
        return;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/lock", dir) < sizeof path)
        unlink(path); /* while held: the folder keeps only the checkpoint */
    close(fd);        /* closing drops the flock */
}
