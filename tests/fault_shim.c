/* An LD_PRELOAD fault injector for tests: the n-th call that writes to or names a file
 * fails as on a full disk or a failing device. Counted calls: write, pwrite, writev,
 * pwritev, fsync, fdatasync, ftruncate, fallocate, rename, renameat, renameat2, link,
 * linkat, mkdir, and fflush/fclose of a stdio stream (glibc's stdio writes through an
 * internal write that preloading cannot see). Descriptors 0..2 are never counted, so
 * messages get out. io_uring completions are not seen (see PITFALLS.md: FUSE for reads).
 *
 * Environment:
 *   BLCO_FAULT_AT=n          the n-th counted call fails (0 or unset: none)
 *   BLCO_FAULT_ERRNO=ENOSPC|EIO   the error (default ENOSPC)
 *   BLCO_FAULT_PERSIST=1     every counted call from the n-th on fails (a disk that stays
 *                            full), not only the n-th
 *   BLCO_FAULT_COUNT_FILE=F  at exit, write the number of counted calls to F
 *   BLCO_FAULT_VERBOSE=1     say on stderr which call failed
 * Not usable under ASan (its runtime must come first); the test skips there. */
/* pwrite and pwrite64 both defined here, whatever the build's offset size */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static _Atomic long calls;
static long fault_at = -1, fault_errno = ENOSPC;
static int persist, verbose, ready;

__attribute__((constructor)) static void init(void)
{
    const char *s = getenv("BLCO_FAULT_AT");
    fault_at = s && *s ? atol(s) : 0;
    s = getenv("BLCO_FAULT_ERRNO");
    if (s && !strcmp(s, "EIO"))
        fault_errno = EIO;
    s = getenv("BLCO_FAULT_PERSIST");
    persist = s && *s && strcmp(s, "0");
    s = getenv("BLCO_FAULT_VERBOSE");
    verbose = s && *s && strcmp(s, "0");
    ready = 1;
}

__attribute__((destructor)) static void report(void)
{
    const char *f = getenv("BLCO_FAULT_COUNT_FILE");
    if (!f || !*f)
        return;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)calls);
    int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");
    ssize_t (*real_write)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
    int fd = real_open(f, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        (void)real_write(fd, buf, (size_t)n);
        close(fd);
    }
}

/* Counts a call; returns 1 when it must fail (errno is then set). */
static int fault(const char *what, int fd)
{
    if (!ready || (fd >= 0 && fd <= 2))
        return 0;
    long n = ++calls;
    if (fault_at <= 0 || (persist ? n < fault_at : n != fault_at))
        return 0;
    if (verbose) {
        char buf[128];
        int len = snprintf(buf, sizeof buf, "blco-fault: call %ld (%s) fails with %s\n", n, what,
                           fault_errno == EIO ? "EIO" : "ENOSPC");
        ssize_t (*real_write)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
        (void)real_write(2, buf, (size_t)len);
    }
    errno = (int)fault_errno;
    return 1;
}

#define REAL(ret, name, ...)                                                                       \
    static ret (*real)(__VA_ARGS__);                                                               \
    if (!real)                                                                                     \
        real = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, name)

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, "write", int, const void *, size_t);
    return fault("write", fd) ? -1 : real(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, "pwrite", int, const void *, size_t, off_t);
    return fault("pwrite", fd) ? -1 : real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, "pwrite64", int, const void *, size_t, off_t);
    return fault("pwrite", fd) ? -1 : real(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, "writev", int, const struct iovec *, int);
    return fault("writev", fd) ? -1 : real(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, "pwritev", int, const struct iovec *, int, off_t);
    return fault("pwritev", fd) ? -1 : real(fd, iov, cnt, off);
}

int fsync(int fd)
{
    REAL(int, "fsync", int);
    return fault("fsync", fd) ? -1 : real(fd);
}

int fdatasync(int fd)
{
    REAL(int, "fdatasync", int);
    return fault("fdatasync", fd) ? -1 : real(fd);
}

int ftruncate(int fd, off_t len)
{
    REAL(int, "ftruncate", int, off_t);
    return fault("ftruncate", fd) ? -1 : real(fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    REAL(int, "fallocate", int, int, off_t, off_t);
    return fault("fallocate", fd) ? -1 : real(fd, mode, off, len);
}

int rename(const char *a, const char *b)
{
    REAL(int, "rename", const char *, const char *);
    return fault("rename", -1) ? -1 : real(a, b);
}

int renameat(int da, const char *a, int db, const char *b)
{
    REAL(int, "renameat", int, const char *, int, const char *);
    return fault("renameat", -1) ? -1 : real(da, a, db, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned flags)
{
    REAL(int, "renameat2", int, const char *, int, const char *, unsigned);
    return fault("renameat2", -1) ? -1 : real(da, a, db, b, flags);
}

int link(const char *a, const char *b)
{
    REAL(int, "link", const char *, const char *);
    return fault("link", -1) ? -1 : real(a, b);
}

int linkat(int da, const char *a, int db, const char *b, int flags)
{
    REAL(int, "linkat", int, const char *, int, const char *, int);
    return fault("linkat", -1) ? -1 : real(da, a, db, b, flags);
}

int mkdir(const char *path, mode_t mode)
{
    REAL(int, "mkdir", const char *, mode_t);
    return fault("mkdir", -1) ? -1 : real(path, mode);
}

int fflush(FILE *f)
{
    REAL(int, "fflush", FILE *);
    if (f && fault("fflush", fileno(f)))
        return EOF;
    return real(f);
}

int fclose(FILE *f)
{
    REAL(int, "fclose", FILE *);
    int fd = fileno(f);
    int r = real(f);
    if (fault("fclose", fd))
        return EOF;
    return r;
}
