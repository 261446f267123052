/* Small helpers: thread counts, sizes with suffixes, time, version. */
#include <math.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "blco_internal.h"
#if HAVE_OPENMP
#include <omp.h>
#endif

int blco_threads_default(void)
{
#if HAVE_OPENMP
    int t = omp_get_max_threads();
#else
    long t = sysconf(_SC_NPROCESSORS_ONLN);
#endif
    return t >= 1 ? (int)t : 1;
}

int blco_threads_resolve(int threads)
{
    return threads >= 1 ? threads : blco_threads_default();
}

int blco_thread_num(void)
{
#if HAVE_OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

int blco_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -EINVAL;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && toupper((unsigned char)*end) == 'I')
        end++;
    if (toupper((unsigned char)*end) == 'B')
        end++;
    if (*end)
        return -EINVAL;
    v *= mul;
    if (v >= 18446744073709551615.0)
        return -EINVAL;
    *out = (uint64_t)v;
    return 0;
}

char *blco_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
    return buf;
}

double blco_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *blco_version(void) { return BLCO_VERSION_STRING; }

int blco_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t r = pwrite(fd, p, len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        p += r, len -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

int blco_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -BLCO_EFORMAT; /* the file ended early */
        p += r, len -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

char *blco_format_si(double v, char *buf, size_t len)
{
    static const char *const suf[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    if (!isfinite(v)) {
        snprintf(buf, len, "?");
        return buf;
    }
    while (v >= 999.5 && u < 5) {
        v /= 1000;
        u++;
    }
    snprintf(buf, len, "%.*f%s", u == 0 || v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2, v, suf[u]);
    return buf;
}

char *blco_format_duration(double s, char *buf, size_t len)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, len, "?");
    else if (s < 10)
        snprintf(buf, len, "%.1fs", s);
    else if (s < 60)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else if (s < 100 * 3600)
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else
        snprintf(buf, len, "%.0fh", s / 3600);
    return buf;
}
