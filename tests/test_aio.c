/* Tests of the asynchronous reader (blco/aio.h): every backend and every fallback switch
 * reads a seeded file back in random chunks with queuing and splitting, plus the end of
 * the file, argument checks, missing files, close with reads in flight and the log. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"
#include "config.h"

#define FILE_BYTES ((5u << 20) + 1234u) /* not a multiple of 4096: the last page is short */
#define BUF_BYTES (6u << 20)
#define PAGE 4096u
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static uint8_t *content; /* what the test file holds */
static uint8_t *region;  /* registered with the reader */
static uint8_t *plain;   /* never registered */
static int uring_ok;     /* forced io_uring opens on this machine */
static int direct_ok;    /* O_DIRECT works on the test file */

/* ---- the log: fallbacks must be said once per process ---- */
static int log_uring, log_register, log_direct, log_direct_read;

static void on_log(void *user, int level, const char *msg)
{
    (void)user;
    if (level != BLCO_LOG_INFO)
        return;
    log_uring += strstr(msg, "io_uring refused") != NULL;
    log_register += strstr(msg, "registration refused") != NULL;
    log_direct += strstr(msg, "O_DIRECT refused:") != NULL;
    log_direct_read += strstr(msg, "O_DIRECT refused at read time") != NULL;
}

static int write_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -errno;
    size_t off = 0;
    while (off < FILE_BYTES) {
        ssize_t w = write(fd, content + off, FILE_BYTES - off);
        if (w <= 0) {
            close(fd);
            return -EIO;
        }
        off += (size_t)w;
    }
    close(fd);
    return 0;
}

static int count_refused(const char *d)
{
    int n = 0;
    for (const char *p = d; (p = strstr(p, "refused")); p++)
        n++;
    return n;
}

static void set_env(const char *name, const char *value)
{
    unsetenv("BLCO_IO_REFUSE_URING");
    unsetenv("BLCO_IO_REFUSE_REGISTER");
    unsetenv("BLCO_IO_REFUSE_DIRECT");
    if (name)
        setenv(name, value, 1);
}

typedef struct chunk {
    uint64_t off;
    size_t len;
    uint8_t *buf;
    int seen;
} chunk_t;

static int64_t expected(uint64_t off, size_t len)
{
    if (off >= FILE_BYTES)
        return 0;
    return (int64_t)(off + len <= FILE_BYTES ? len : FILE_BYTES - off);
}

/* Reads the whole file (and a little past its end) in random chunks, submitted in random
 * order, some into registered and some into plain memory, reaping as it goes. */
static void read_back(blco_aio_t *a, uint64_t *seed, const char *what)
{
    enum { MAXCH = 1024 };
    static chunk_t ch[MAXCH];
    int n = 0;
    uint64_t end = (FILE_BYTES + PAGE - 1) / PAGE * PAGE + 3 * PAGE;
    for (uint64_t off = 0; off < end && n < MAXCH; n++) {
        size_t len = (size_t)(1 + check_rand(seed) % 320) * PAGE;
        if (off + len > end)
            len = end - off;
        uint8_t *base = check_rand(seed) % 3 ? region : plain;
        ch[n] = (chunk_t){.off = off, .len = len, .buf = base + off};
        off += len;
    }
    memset(region, 0xa5, BUF_BYTES);
    memset(plain, 0x5a, BUF_BYTES);
    int order[MAXCH];
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(check_rand(seed) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    blco_aio_done_t done[16];
    int submitted = 0, reaped = 0;
    while (reaped < n) {
        /* Submit a random batch, then reap a random amount. */
        int batch = (int)(check_rand(seed) % 12);
        for (int k = 0; k < batch && submitted < n; k++, submitted++) {
            chunk_t *c = &ch[order[submitted]];
            int e = blco_aio_submit(a, c->off, c->buf, c->len, (uint64_t)order[submitted]);
            CHECK(e == 0, "%s: submit: %s", what, blco_strerror(e));
        }
        CHECK(blco_aio_pending(a) == submitted - reaped, "%s: pending %d, expected %d", what,
              blco_aio_pending(a), submitted - reaped);
        int max = 1 + (int)(check_rand(seed) % 16);
        int min = submitted == n ? 1 : (int)(check_rand(seed) % (uint64_t)(max + 1));
        int got = blco_aio_reap(a, done, max, min);
        int want_min = MIN(min, submitted - reaped);
        CHECK(got >= want_min && got <= max, "%s: reap gave %d (min %d, max %d)", what, got, min,
              max);
        for (int k = 0; k < got; k++) {
            if (done[k].tag >= (uint64_t)n) {
                CHECK(0, "%s: unknown tag %llu", what, (unsigned long long)done[k].tag);
                continue;
            }
            chunk_t *c = &ch[done[k].tag];
            CHECK(!c->seen, "%s: tag %llu completed twice", what, (unsigned long long)done[k].tag);
            c->seen = 1;
            int64_t want = expected(c->off, c->len);
            if (done[k].result != want) {
                CHECK(0, "%s: read at %llu+%zu gave %lld, expected %lld", what,
                      (unsigned long long)c->off, c->len, (long long)done[k].result,
                      (long long)want);
            } else if (want && memcmp(c->buf, content + c->off, (size_t)want)) {
                CHECK(0, "%s: wrong bytes at %llu+%zu", what, (unsigned long long)c->off, c->len);
            }
        }
        reaped += got > 0 ? got : 0;
        if (got < 0)
            break;
    }
    CHECK(reaped == n && blco_aio_pending(a) == 0, "%s: reaped %d of %d", what, reaped, n);
    CHECK(blco_aio_reap(a, done, 16, 4) == 0, "%s: waiting with nothing in flight", what);
    for (int i = 0; i < n; i++)
        ch[i].seen = 0;
}

/* The edges: the end of the file, beyond it, empty and unaligned submissions. */
static void edges(blco_aio_t *a, const char *what)
{
    blco_aio_done_t d[4];
    uint64_t last = FILE_BYTES / PAGE * PAGE;
    memset(region, 0, 64 * PAGE);
    CHECK(blco_aio_submit(a, last, region, 16 * PAGE, 1) == 0, "%s", what);
    CHECK(blco_aio_submit(a, last + (1u << 20), region + 16 * PAGE, 8 * PAGE, 2) == 0, "%s", what);
    CHECK(blco_aio_submit(a, 0, region + 32 * PAGE, 0, 3) == 0, "%s", what);
    int got = 0;
    int64_t res[4] = {-1, -1, -1, -1};
    while (got < 3) {
        int r = blco_aio_reap(a, d, 4, 1);
        CHECK(r > 0, "%s: reap %d", what, r);
        if (r <= 0)
            break;
        for (int k = 0; k < r; k++)
            if (d[k].tag <= 3)
                res[d[k].tag] = d[k].result;
        got += r;
    }
    CHECK(res[1] == (int64_t)(FILE_BYTES - last), "%s: read across the end gave %lld", what,
          (long long)res[1]);
    CHECK(!memcmp(region, content + last, FILE_BYTES - last), "%s: bytes before the end", what);
    CHECK(res[2] == 0, "%s: read beyond the end gave %lld", what, (long long)res[2]);
    CHECK(res[3] == 0, "%s: empty read gave %lld", what, (long long)res[3]);

    CHECK(blco_aio_submit(a, 100, region, PAGE, 9) == -EINVAL, "%s: unaligned offset", what);
    CHECK(blco_aio_submit(a, 0, region, 100, 9) == -EINVAL, "%s: unaligned length", what);
    CHECK(blco_aio_submit(a, 0, region + 8, PAGE, 9) == -EINVAL, "%s: unaligned buffer", what);
    CHECK(blco_aio_submit(a, 0, NULL, PAGE, 9) == -EINVAL, "%s: NULL buffer", what);
    CHECK(blco_aio_submit(a, UINT64_MAX - PAGE + 1, region, 2 * PAGE, 9) == -EINVAL,
          "%s: offset overflow", what);
    CHECK(blco_aio_reap(a, d, -1, 0) == -EINVAL, "%s: negative max", what);
    CHECK(blco_aio_reap(a, NULL, 4, 0) == -EINVAL, "%s: NULL done", what);
    CHECK(blco_aio_pending(a) == 0, "%s: refused submissions are not pending", what);
}

typedef struct sizes {
    uint64_t max_inflight;
    uint32_t request_bytes;
} sizes_t;

static const sizes_t size_cases[] = {
    {8 << 10, 4 << 10},   /* two requests in flight: everything queues */
    {64 << 10, 16 << 10}, /* splitting and queuing */
    {1 << 20, 4 << 20},   /* request clamped to max_inflight */
    {0, 0},               /* defaults */
    {16 << 20, 4 << 20},  /* large requests */
};

/* Opens with `backend` under the env switch `env`=`val` and checks what was taken. Returns
 * the reader or NULL. */
static blco_aio_t *open_case(const char *path, int backend, const sizes_t *sz, const char *env,
                             const char *val, const char *what)
{
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.backend = backend;
    o.max_inflight = sz->max_inflight;
    o.request_bytes = sz->request_bytes;
    o.threads = 3;
    blco_aio_region_t r = {region, BUF_BYTES};
    set_env(env, val);
    blco_aio_t *a = NULL;
    blco_diag_t diag = {0};
    int e = blco_aio_open(path, &o, &r, 1, &a, &diag);
    set_env(NULL, NULL);
    int refuse_uring = env && !strcmp(env, "BLCO_IO_REFUSE_URING");
    if (backend == BLCO_IO_URING && refuse_uring) {
        CHECK(e < 0 && !a, "%s: forced io_uring refused must fail, got %d", what, e);
        CHECK(strstr(diag.msg, "refused") && strstr(diag.msg, path), "%s: diag '%s'", what,
              diag.msg);
        blco_aio_close(a);
        return NULL;
    }
    CHECK(e == 0 && a, "%s: open: %s (%s)", what, blco_strerror(e), diag.msg);
    if (e < 0)
        return NULL;
    const char *d = blco_aio_describe(a);
    int be = blco_aio_backend(a);
    CHECK(blco_aio_fallbacks(a) == count_refused(d), "%s: %d fallbacks, described '%s'", what,
          blco_aio_fallbacks(a), d);
    if (backend == BLCO_IO_PREAD || refuse_uring || !uring_ok)
        CHECK(be == BLCO_IO_PREAD && strstr(d, "pread x3"), "%s: backend %d '%s'", what, be, d);
    else
        CHECK(be == BLCO_IO_URING && strstr(d, "io_uring"), "%s: backend %d '%s'", what, be, d);
    if (refuse_uring && backend == BLCO_IO_AUTO && HAVE_LIBURING)
        CHECK(strstr(d, "io_uring refused") && strstr(d, "BLCO_IO_REFUSE_URING"), "%s: '%s'", what,
              d);
    if (be == BLCO_IO_URING) {
        int refuse_reg = env && !strcmp(env, "BLCO_IO_REFUSE_REGISTER");
        if (refuse_reg)
            CHECK(strstr(d, "registration refused") && strstr(d, "unregistered buffers"),
                  "%s: '%s'", what, d);
        else if (!strstr(d, "registration refused"))
            CHECK(strstr(d, "registered buffers and file"), "%s: '%s'", what, d);
    }
    if (env && !strcmp(env, "BLCO_IO_REFUSE_DIRECT") && !strcmp(val, "1"))
        CHECK(!blco_aio_direct(a) && strstr(d, "O_DIRECT refused") && strstr(d, "buffered"),
              "%s: '%s'", what, d);
    else
        CHECK(blco_aio_direct(a) == direct_ok, "%s: direct %d '%s'", what, blco_aio_direct(a), d);
    uint32_t rb = sz->request_bytes ? sz->request_bytes : 1u << 20;
    if (sz->max_inflight && rb > sz->max_inflight)
        rb = (uint32_t)sz->max_inflight;
    char want[32];
    snprintf(want, sizeof want, "x %u KiB", rb >> 10);
    CHECK(strstr(d, want), "%s: request size not '%s' in '%s'", what, want, d);
    return a;
}

static void backend_cases(const char *path, uint64_t *seed)
{
    static const struct {
        const char *name, *val;
    } envs[] = {{NULL, NULL},
                {"BLCO_IO_REFUSE_URING", "1"},
                {"BLCO_IO_REFUSE_REGISTER", "1"},
                {"BLCO_IO_REFUSE_DIRECT", "1"},
                {"BLCO_IO_REFUSE_DIRECT", "read"}};
    const int backends[] = {BLCO_IO_AUTO, BLCO_IO_URING, BLCO_IO_PREAD};
    int cases = 0;
    for (int b = 0; b < 3; b++) {
        if (backends[b] == BLCO_IO_URING && !uring_ok) {
            printf("skip: io_uring cases (io_uring cannot be set up here)\n");
            continue;
        }
        for (size_t e = 0; e < sizeof envs / sizeof envs[0]; e++) {
            int read_refusal = envs[e].val && !strcmp(envs[e].val, "read");
            if (read_refusal && !direct_ok)
                continue;
            const sizes_t *sz = &size_cases[cases++ % (sizeof size_cases / sizeof size_cases[0])];
            char what[256];
            snprintf(what, sizeof what, "%s %s=%s, %llu/%u", blco_io_backend_name(backends[b]),
                     envs[e].name ? envs[e].name : "-", envs[e].val ? envs[e].val : "-",
                     (unsigned long long)sz->max_inflight, sz->request_bytes);
            blco_aio_t *a = open_case(path, backends[b], sz, envs[e].name, envs[e].val, what);
            if (!a)
                continue;
            int fb = blco_aio_fallbacks(a);
            read_back(a, seed, what);
            if (read_refusal) {
                const char *d = blco_aio_describe(a);
                CHECK(!blco_aio_direct(a) && strstr(d, "O_DIRECT refused at read time") &&
                          strstr(d, "BLCO_IO_REFUSE_DIRECT=read") && strstr(d, "buffered"),
                      "%s: after the first read: '%s'", what, d);
                CHECK(blco_aio_fallbacks(a) == fb + 1, "%s: fallbacks %d -> %d", what, fb,
                      blco_aio_fallbacks(a));
            } else {
                CHECK(blco_aio_fallbacks(a) == fb, "%s: a fallback while reading: '%s'", what,
                      blco_aio_describe(a));
            }
            edges(a, what);
            read_back(a, seed, what);
            blco_aio_close(a);
        }
    }
}

/* Closing with reads queued and in flight: the ones in flight finish, nothing leaks. */
static void close_busy(const char *path, int backend)
{
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.backend = backend;
    o.max_inflight = 256 << 10;
    o.request_bytes = 64 << 10;
    blco_aio_t *a = NULL;
    blco_aio_region_t r = {region, BUF_BYTES};
    int e = blco_aio_open(path, &o, &r, 1, &a, NULL);
    CHECK(e == 0, "close_busy %s: open: %s", blco_io_backend_name(backend), blco_strerror(e));
    if (e < 0)
        return;
    for (int i = 0; i < 40; i++)
        CHECK(blco_aio_submit(a, (uint64_t)i * 128 * 1024, region + (size_t)i * 128 * 1024,
                              128 * 1024, (uint64_t)i) == 0,
              "close_busy: submit %d", i);
    CHECK(blco_aio_pending(a) == 40, "close_busy: pending %d", blco_aio_pending(a));
    blco_aio_close(a);
}

static void errors(const char *dir)
{
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/blco-aio-no-such-file", dir);
    const int backends[] = {BLCO_IO_AUTO, BLCO_IO_URING, BLCO_IO_PREAD};
    for (int b = 0; b < 3; b++) {
        blco_aio_opts_t o;
        blco_aio_opts_default(&o);
        o.backend = backends[b];
        blco_aio_t *a = (blco_aio_t *)(uintptr_t)1; /* must come back NULL */
        blco_diag_t diag = {0};
        int e = blco_aio_open(missing, &o, NULL, 0, &a, &diag);
        CHECK(e == -ENOENT && !a, "missing file (%s): %s", blco_io_backend_name(backends[b]),
              blco_strerror(e));
        CHECK(strstr(diag.msg, missing) != NULL, "missing file: diag '%s'", diag.msg);
    }
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    CHECK(o.backend == BLCO_IO_AUTO && o.direct == 1 && o.max_inflight == 64u << 20 &&
              o.request_bytes == 1u << 20 && o.threads == 4,
          "defaults");
    blco_aio_t *a = NULL;
    blco_diag_t diag = {0};
    CHECK(blco_aio_open(dir, &o, NULL, 0, &a, &diag) == -EISDIR && !a, "a directory: %s", diag.msg);
    blco_aio_region_t bad = {region + 8, PAGE};
    CHECK(blco_aio_open(missing, &o, &bad, 1, &a, &diag) == -EINVAL, "unaligned region");
    o.backend = 7;
    CHECK(blco_aio_open(missing, &o, NULL, 0, &a, &diag) == -EINVAL, "unknown backend");
    CHECK(blco_io_backend_parse("auto") == BLCO_IO_AUTO &&
              blco_io_backend_parse("uring") == BLCO_IO_URING &&
              blco_io_backend_parse("pread") == BLCO_IO_PREAD,
          "backend names");
    CHECK(blco_io_backend_parse("aio") == -EINVAL && blco_io_backend_parse(NULL) == -EINVAL,
          "bad backend names");
    CHECK(!strcmp(blco_io_backend_name(BLCO_IO_PREAD), "pread"), "backend name");
    blco_aio_close(NULL);
}

/* Forced io_uring in a build without liburing is an error that says why. */
static void no_uring_build(const char *path)
{
#if !HAVE_LIBURING
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.backend = BLCO_IO_URING;
    blco_aio_t *a = NULL;
    blco_diag_t diag = {0};
    int e = blco_aio_open(path, &o, NULL, 0, &a, &diag);
    CHECK(e == -BLCO_EUNSUPPORTED && !a, "forced io_uring without liburing: %d", e);
    CHECK(strstr(diag.msg, "io_uring") && strstr(diag.msg, path), "diag '%s'", diag.msg);
    o.backend = BLCO_IO_AUTO;
    e = blco_aio_open(path, &o, NULL, 0, &a, &diag);
    CHECK(e == 0 && blco_aio_backend(a) == BLCO_IO_PREAD && blco_aio_fallbacks(a) == 0,
          "auto without liburing: %d", e);
    blco_aio_close(a);
#else
    (void)path;
#endif
}

/* What this machine allows: forced io_uring, and O_DIRECT on the test file. */
static void probe(const char *path)
{
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.backend = BLCO_IO_URING;
    blco_aio_t *a = NULL;
    blco_diag_t diag = {0};
    set_env(NULL, NULL);
    int e = blco_aio_open(path, &o, NULL, 0, &a, &diag);
    uring_ok = e == 0;
    if (!uring_ok)
        printf("note: io_uring unavailable: %s\n", diag.msg);
    blco_aio_close(a);
    o.backend = BLCO_IO_PREAD;
    e = blco_aio_open(path, &o, NULL, 0, &a, &diag);
    CHECK(e == 0, "probe: %s", diag.msg);
    direct_ok = e == 0 && blco_aio_direct(a);
    if (e == 0)
        printf("%s: %s\n", path, blco_aio_describe(a));
    blco_aio_close(a);
}

int main(void)
{
    blco_log_set(on_log, NULL, BLCO_LOG_INFO);
    uint64_t seed = 0x5eed;
    content = malloc(FILE_BYTES);
    region = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    plain = aligned_alloc(PAGE, BUF_BYTES);
    if (!content || region == MAP_FAILED || !plain) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < FILE_BYTES; i += 8) {
        uint64_t v = check_rand(&seed);
        memcpy(content + i, &v, MIN((size_t)8, FILE_BYTES - i));
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    char path[4200];
    snprintf(path, sizeof path, "%s/blco-aio-test-%ld.bin", tmp, (long)getpid());
    int e = write_file(path);
    CHECK(e == 0, "cannot write %s: %s", path, blco_strerror(e));
    if (e == 0) {
        probe(path);
        backend_cases(path, &seed);
        close_busy(path, BLCO_IO_AUTO);
        close_busy(path, BLCO_IO_PREAD);
        no_uring_build(path);
        unlink(path);
    }
    errors(tmp);

    /* A file on tmpfs: O_DIRECT is refused there on older kernels, accepted on newer. */
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "/dev/shm/blco-aio-test-%ld.bin", (long)getpid());
        if (write_file(path) == 0) {
            blco_aio_t *a = NULL;
            blco_diag_t diag = {0};
            blco_aio_region_t r = {region, BUF_BYTES};
            e = blco_aio_open(path, NULL, &r, 1, &a, &diag);
            CHECK(e == 0, "tmpfs: %s", diag.msg);
            if (e == 0) {
                const char *d = blco_aio_describe(a);
                printf("%s: %s\n", path, d);
                CHECK(blco_aio_direct(a) || strstr(d, "O_DIRECT refused"), "tmpfs: '%s'", d);
                read_back(a, &seed, "tmpfs");
                edges(a, "tmpfs");
            }
            blco_aio_close(a);
            unlink(path);
        } else {
            printf("skip: cannot write to /dev/shm\n");
        }
    }

    /* Each fallback taken was logged at info level, once. */
    CHECK(log_uring == HAVE_LIBURING, "io_uring refusal logged %d times", log_uring);
    CHECK(log_register == (uring_ok ? 1 : 0), "registration refusal logged %d times", log_register);
    CHECK(log_direct == 1, "O_DIRECT refusal logged %d times", log_direct);
    CHECK(log_direct_read == (direct_ok ? 1 : 0), "O_DIRECT read refusal logged %d times",
          log_direct_read);

    free(content);
    free(plain);
    munmap(region, BUF_BYTES);
    return check_done();
}
