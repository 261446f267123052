/* blco-top: follows the JSON Lines counters of a running job (--stats FILE) as the file
 * grows and shows where the run stands: progress and ETA, rates per pipeline stage, where
 * the pipeline waits, slot occupancy, and the CP-ALS fit history. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Lines longer than this are not records of the schema: skipped as malformed. */
#define MAX_LINE (1u << 20)
/* The file's first bytes that blco-top keeps to tell a rewrite from growth: a new run that
 * truncates the file and writes more than blco-top had read before its next look changes
 * them (its start record names another pid and start time), though the size never shrank. */
#define HEAD_MAX 4096
#define MAX_DEPTH 32
#define STR_CAP 512
#define NSTAGES 4

static void usage(void)
{
    printf("Usage: blco-top [OPTIONS] FILE.jsonl\n"
           "Follows the JSON Lines counters a job writes with --stats FILE (blco-mttkrp,\n"
           "blco-cpd) and shows where it stands: progress and ETA, rates of every pipeline\n"
           "stage (read, verify, decode, compute), where the pipeline waits, slot occupancy,\n"
           "and the fit of each CP-ALS iteration. On a terminal the view is redrawn in place;\n"
           "otherwise one line is appended per refresh. It exits when the job's final record\n"
           "arrives, after printing a summary. FILE may be - for standard input.\n"
           "\n"
           "  -1, --once          print the state of the file as it is now (finished or not)\n"
           "                      and exit, without following it (standard input is read to\n"
           "                      its end)\n"
           "  -n, --interval S    seconds between refreshes (default 1)\n"
           "  -w, --wait S        how long to wait for FILE to appear, or for a new run in a\n"
           "                      FILE that holds one that had ended before blco-top started\n"
           "                      (default 10)\n"
           "  -h, --help          this help;  -V, --version  the version\n"
           "\n"
           "Lines that are not records (malformed JSON, no \"type\") are skipped and counted.\n"
           "A file that is truncated, rewritten (its first bytes change) or replaced (a new\n"
           "run) is read again from its start;\n"
           "truncated in place (copytruncate rotation), it keeps the job's pid from before.\n"
           "The view names the run (pid, host, start time). Started beside a new job on the\n"
           "file of an earlier run, blco-top waits --wait seconds for the new run before it\n"
           "shows the old one, which it then says.\n"
           "\n"
           "A job that died without its final record (killed, crashed) is noticed when no\n"
           "record came for 5 of its sampling intervals (and --interval) plus a second and\n"
           "the pid its records name is gone from this host.\n"
           "\n"
           "Exit status: 0 when the job succeeded or has not finished, 1 when its final record\n"
           "reports a failure, the job died, or FILE cannot be read, 2 usage error, 130 after\n"
           "SIGINT.\n"
           "\n"
           "Example:\n"
           "  blco-mttkrp x.blco --stats run.jsonl & blco-top run.jsonl\n");
}

/* ---- a record: the schema's fields, found by name ---- */
enum field {
    /* strings first */
    F_TYPE,
    F_JOB,
    F_PATH,
    F_IO,
    F_RESIDENCY,
    F_ERROR,
    F_HOST,
    NSTR,
    F_T = NSTR,
    F_FILE_BYTES,
    F_DATA_BYTES,
    F_NNZ,
    F_NSEGMENTS,
    F_SLOTS_TOTAL,
    F_SLOT_BYTES,
    F_MEM_LIMIT,
    F_STARTED,
    F_PID,
    F_INTERVAL,
    F_ITERATION,
    F_MODE,
    F_BYTES_READ,
    F_READ_REQUESTS,
    F_BYTES_RESIDENT,
    F_SEG_VERIFIED,
    F_SEG_DECODED,
    F_NNZ_COMPUTED,
    F_PASSES,
    F_FALLBACKS,
    F_SLOTS_BUSY,
    F_RESIDENT_BYTES,
    F_GPUS,
    F_GPU_H2D,
    F_GPU_KERNEL_S,
    F_GPU_OVERLAP,
    F_GPU_BATCHES,
    F_CPU_BATCHES,
    F_GPU_DECODE_BATCHES,
    F_GPU_RESIDENT,
    F_RANKS,
    F_COMM_BYTES,
    F_COMM_S,
    F_BUSY,                    /* F_BUSY + stage */
    F_WAIT = F_BUSY + NSTAGES, /* F_WAIT + stage */
    F_RATE_READ = F_WAIT + NSTAGES,
    F_RATE_NNZ,
    F_RATE_SEG,
    F_WORK_DONE,
    F_WORK_TOTAL,
    F_ETA,
    F_FIT,
    F_DELTA,
    F_STATUS,
    F_ELAPSED,
    F_COUNT
};

static const char *const field_names[F_COUNT] = {
    [F_TYPE] = "type",
    [F_JOB] = "job",
    [F_PATH] = "path",
    [F_IO] = "io",
    [F_RESIDENCY] = "residency",
    [F_ERROR] = "error",
    [F_HOST] = "host",
    [F_T] = "t",
    [F_FILE_BYTES] = "file_bytes",
    [F_DATA_BYTES] = "data_bytes",
    [F_NNZ] = "nnz",
    [F_NSEGMENTS] = "nsegments",
    [F_SLOTS_TOTAL] = "slots_total",
    [F_SLOT_BYTES] = "slot_bytes",
    [F_MEM_LIMIT] = "mem_limit",
    [F_STARTED] = "started",
    [F_PID] = "pid",
    [F_INTERVAL] = "interval_s",
    [F_ITERATION] = "iteration",
    [F_MODE] = "mode",
    [F_BYTES_READ] = "bytes_read",
    [F_READ_REQUESTS] = "read_requests",
    [F_BYTES_RESIDENT] = "bytes_resident",
    [F_SEG_VERIFIED] = "segments_verified",
    [F_SEG_DECODED] = "segments_decoded",
    [F_NNZ_COMPUTED] = "nnz_computed",
    [F_PASSES] = "passes",
    [F_FALLBACKS] = "fallbacks",
    [F_SLOTS_BUSY] = "slots_busy",
    [F_RESIDENT_BYTES] = "resident_bytes",
    [F_GPUS] = "gpus",
    [F_GPU_H2D] = "gpu_h2d_bytes",
    [F_GPU_KERNEL_S] = "gpu_kernel_s",
    [F_GPU_OVERLAP] = "gpu_overlap",
    [F_GPU_BATCHES] = "gpu_batches",
    [F_CPU_BATCHES] = "cpu_batches",
    [F_GPU_DECODE_BATCHES] = "gpu_decode_batches",
    [F_GPU_RESIDENT] = "gpu_resident_bytes",
    [F_RANKS] = "ranks",
    [F_COMM_BYTES] = "comm_bytes",
    [F_COMM_S] = "comm_s",
    [F_BUSY + 0] = "busy_s.read",
    [F_BUSY + 1] = "busy_s.verify",
    [F_BUSY + 2] = "busy_s.decode",
    [F_BUSY + 3] = "busy_s.compute",
    [F_WAIT + 0] = "wait_s.read",
    [F_WAIT + 1] = "wait_s.verify",
    [F_WAIT + 2] = "wait_s.decode",
    [F_WAIT + 3] = "wait_s.compute",
    [F_RATE_READ] = "rates.read_Bps",
    [F_RATE_NNZ] = "rates.nnz_per_s",
    [F_RATE_SEG] = "rates.segments_per_s",
    [F_WORK_DONE] = "work_done",
    [F_WORK_TOTAL] = "work_total",
    [F_ETA] = "eta_s",
    [F_FIT] = "fit",
    [F_DELTA] = "delta",
    [F_STATUS] = "status",
    [F_ELAPSED] = "elapsed_s",
};

_Static_assert(F_COUNT <= 64, "one presence bit per field");

static const char *const stage_names[NSTAGES] = {"read", "verify", "decode", "compute"};

typedef struct rec {
    uint64_t has; /* bit f: field f was present (and not null) */
    char str[NSTR][STR_CAP];
    double d[F_COUNT];
    uint64_t u[F_COUNT]; /* exact value of a non-negative integer */
} rec_t;

static int has(const rec_t *r, int f)
{
    return (int)(r->has >> f & 1);
}
static double num(const rec_t *r, int f)
{
    return has(r, f) ? r->d[f] : NAN;
}
static uint64_t u64(const rec_t *r, int f)
{
    return has(r, f) ? r->u[f] : 0;
}
static const char *str(const rec_t *r, int f)
{
    return has(r, f) ? r->str[f] : "";
}

static int field_find(const char *name)
{
    for (int f = 0; f < F_COUNT; f++)
        if (!strcmp(field_names[f], name))
            return f;
    return -1;
}

/* ---- a small JSON reader: strict grammar, keeps only the schema's fields ---- */
typedef struct jp {
    const char *p, *end;
} jp_t;

static void jp_ws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jp_peek(const jp_t *j)
{
    return j->p < j->end ? (unsigned char)*j->p : -1;
}

static int hex4(jp_t *j, unsigned *out)
{
    unsigned v = 0;
    if (j->end - j->p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            v |= (unsigned)((c | 0x20) - 'a' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t utf8_put(char *o, unsigned cp)
{
    if (cp < 0x80)
        return o[0] = (char)cp, 1;
    if (cp < 0x800)
        return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3f)),
               o[2] = (char)(0x80 | (cp & 0x3f)), 3;
    return o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3f)),
           o[2] = (char)(0x80 | (cp >> 6 & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f)), 4;
}

/* Decodes a string into out (NUL-terminated, cut at a whole character; NULL to skip). */
static int jp_string(jp_t *j, char *out, size_t cap)
{
    size_t n = 0;
    if (jp_peek(j) != '"')
        return -1;
    j->p++;
    for (;;) {
        if (j->p >= j->end)
            return -1;
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return -1;
        char tmp[4];
        size_t tn = 1;
        tmp[0] = (char)c;
        if (c == '\\') {
            if (j->p >= j->end)
                return -1;
            switch (*j->p++) {
            case '"': tmp[0] = '"'; break;
            case '\\': tmp[0] = '\\'; break;
            case '/': tmp[0] = '/'; break;
            case 'b': tmp[0] = '\b'; break;
            case 'f': tmp[0] = '\f'; break;
            case 'n': tmp[0] = '\n'; break;
            case 'r': tmp[0] = '\r'; break;
            case 't': tmp[0] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (hex4(j, &cp))
                    return -1;
                if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
                    j->p[1] == 'u') {
                    const char *save = j->p;
                    j->p += 2;
                    if (hex4(j, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000)
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    else
                        j->p = save, cp = 0xfffd;
                } else if (cp >= 0xd800 && cp < 0xe000) {
                    cp = 0xfffd; /* a lone surrogate */
                }
                tn = utf8_put(tmp, cp);
                break;
            }
            default: return -1;
            }
        }
        if (out && n + tn < cap) {
            memcpy(out + n, tmp, tn);
            n += tn;
        }
    }
    if (out && cap)
        out[n] = 0;
    return 0;
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int jp_number(jp_t *j, double *d, uint64_t *u, int *exact)
{
    const char *s = j->p;
    int integer = 1;
    if (jp_peek(j) == '-')
        j->p++, integer = 0;
    if (jp_peek(j) == '0')
        j->p++;
    else if (is_digit(jp_peek(j)))
        while (is_digit(jp_peek(j)))
            j->p++;
    else
        return -1;
    if (jp_peek(j) == '.') {
        j->p++, integer = 0;
        if (!is_digit(jp_peek(j)))
            return -1;
        while (is_digit(jp_peek(j)))
            j->p++;
    }
    if (jp_peek(j) == 'e' || jp_peek(j) == 'E') {
        j->p++, integer = 0;
        if (jp_peek(j) == '+' || jp_peek(j) == '-')
            j->p++;
        if (!is_digit(jp_peek(j)))
            return -1;
        while (is_digit(jp_peek(j)))
            j->p++;
    }
    char buf[400];
    size_t len = (size_t)(j->p - s);
    *exact = 0;
    if (len >= sizeof buf) {
        *d = NAN; /* valid JSON, but no value the schema has */
        return 0;
    }
    memcpy(buf, s, len);
    buf[len] = 0;
    *d = strtod(buf, NULL);
    if (integer) {
        errno = 0;
        *u = strtoull(buf, NULL, 10);
        *exact = errno == 0;
    }
    return 0;
}

static int jp_literal(jp_t *j, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n))
        return -1;
    j->p += n;
    return 0;
}

/* Parses one value; `name` is its dotted path when the schema may know it ("rates.nnz_per_s"),
 * NULL inside arrays and deeper objects. */
static int jp_value(jp_t *j, rec_t *r, const char *name, int depth)
{
    if (depth > MAX_DEPTH)
        return -1;
    jp_ws(j);
    int f = name ? field_find(name) : -1;
    int c = jp_peek(j);
    if (c == '{' || c == '[') {
        int close = c == '{' ? '}' : ']';
        j->p++;
        jp_ws(j);
        if (jp_peek(j) == close) {
            j->p++;
            return 0;
        }
        for (;;) {
            char key[64], sub[160];
            const char *child = NULL;
            if (close == '}') {
                jp_ws(j);
                if (jp_string(j, key, sizeof key))
                    return -1;
                if (depth == 0) {
                    child = key;
                } else if (depth == 1 && name) {
                    snprintf(sub, sizeof sub, "%s.%s", name, key);
                    child = sub;
                }
                jp_ws(j);
                if (jp_peek(j) != ':')
                    return -1;
                j->p++;
            }
            if (jp_value(j, r, child, depth + 1))
                return -1;
            jp_ws(j);
            if (jp_peek(j) == close) {
                j->p++;
                return 0;
            }
            if (jp_peek(j) != ',')
                return -1;
            j->p++;
        }
    }
    if (c == '"') {
        if (jp_string(j, f >= 0 && f < NSTR ? r->str[f] : NULL, STR_CAP))
            return -1;
        if (f >= 0 && f < NSTR)
            r->has |= 1ull << f;
        return 0;
    }
    if (c == 't')
        return jp_literal(j, "true");
    if (c == 'f')
        return jp_literal(j, "false");
    if (c == 'n') {
        if (f >= 0)
            r->has &= ~(1ull << f); /* null: unknown */
        return jp_literal(j, "null");
    }
    double d;
    uint64_t u = 0;
    int exact;
    if (jp_number(j, &d, &u, &exact))
        return -1;
    if (f >= NSTR && isfinite(d)) {
        r->d[f] = d;
        r->u[f] = exact ? u : d > 0 && d < 1.8e19 ? (uint64_t)d : 0;
        r->has |= 1ull << f;
    }
    return 0;
}

/* Parses one line into r: 0 for a record, -1 for anything else. */
static int parse_record(const char *line, size_t len, rec_t *r)
{
    jp_t j = {line, line + len};
    r->has = 0;
    jp_ws(&j);
    if (jp_peek(&j) != '{' || jp_value(&j, r, NULL, 0))
        return -1;
    jp_ws(&j);
    return j.p == j.end && has(r, F_TYPE) && r->str[F_TYPE][0] ? 0 : -1;
}

/* ---- what the records say ---- */
typedef struct fitpt {
    int iteration;
    double fit, delta, t; /* delta NAN when absent */
} fitpt_t;

typedef struct model {
    int have_info, have_cur, finished;
    rec_t info;      /* the start record, completed by the final one */
    rec_t cur, prev; /* the latest record with counters and the one before it, apart in time */
    rec_t fin;
    fitpt_t *fits;
    size_t nfits, capfits;
    uint64_t records, malformed;
    int partial;    /* an incomplete last line was left out (--once) */
    int died;       /* the writer is gone without a final record */
    double updated; /* when the latest record arrived (our clock) */
    /* The writing process (pid, host of the start or final record): kept when the file is
     * truncated in place (copytruncate rotation), which takes the start record away while
     * the same job goes on writing, so that its death is still noticed. */
    uint64_t writer_pid;
    char writer_host[STR_CAP];
} model_t;

/* Forgets the records, not the writer (model_t); `now`: when that happened. */
static void model_reset(model_t *m, double now)
{
    uint64_t pid = m->writer_pid;
    char host[STR_CAP];
    memcpy(host, m->writer_host, sizeof host);
    free(m->fits);
    memset(m, 0, sizeof *m);
    m->writer_pid = pid;
    memcpy(m->writer_host, host, sizeof host);
    m->updated = now;
}

static void model_add(model_t *m, const rec_t *r)
{
    const char *type = r->str[F_TYPE];
    m->records++;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m->updated = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (!strcmp(type, "start")) {
        m->info = *r;
        m->have_info = 1;
    } else if (has(r, F_RESIDENCY) && m->have_info) {
        /* the engine decides it on the first pass and says so in a "residency" record */
        memcpy(m->info.str[F_RESIDENCY], r->str[F_RESIDENCY], STR_CAP);
        m->info.has |= 1ull << F_RESIDENCY;
    }
    if (has(r, F_T)) {
        if (!m->have_cur) {
            m->prev = m->cur = *r;
            m->have_cur = 1;
        } else {
            /* the record before is the latest at least half a sampling interval older, so
             * an event right after a sample does not shrink the interval rates are taken over */
            double iv = has(&m->info, F_INTERVAL) ? num(&m->info, F_INTERVAL) : 1.0;
            if (num(r, F_T) - num(&m->cur, F_T) >= 0.5 * iv)
                m->prev = m->cur;
            m->cur = *r;
        }
    }
    if (!strcmp(type, "iteration") && has(r, F_FIT)) {
        int it = (int)u64(r, F_ITERATION);
        if (m->nfits && m->fits[m->nfits - 1].iteration == it) {
            m->nfits--; /* the same iteration again: keep the latest */
        } else if (m->nfits == m->capfits) {
            size_t cap = m->capfits ? 2 * m->capfits : 64;
            fitpt_t *p = realloc(m->fits, cap * sizeof *p);
            if (!p)
                cli_die("out of memory");
            m->fits = p;
            m->capfits = cap;
        }
        m->fits[m->nfits++] = (fitpt_t){it, num(r, F_FIT), num(r, F_DELTA), num(r, F_T)};
    }
    if ((!strcmp(type, "start") || !strcmp(type, "final")) && has(r, F_PID) && has(r, F_HOST)) {
        m->writer_pid = u64(r, F_PID);
        memcpy(m->writer_host, r->str[F_HOST], sizeof m->writer_host);
    }
    if (!strcmp(type, "final")) {
        m->fin = *r;
        m->finished = 1;
        if (!m->have_info) {
            m->info = *r;
            m->have_info = 1;
        } else {
            for (int f = F_JOB; f <= F_PID; f++)
                if (has(r, f) && f != F_ERROR && f != F_T) {
                    m->info.has |= 1ull << f;
                    if (f < NSTR)
                        memcpy(m->info.str[f], r->str[f], STR_CAP);
                    m->info.d[f] = r->d[f];
                    m->info.u[f] = r->u[f];
                }
        }
    }
}

/* "pid N on HOST, started 2026-11-26 12:34:56" of the run the records name, in run[len]. */
static void run_name(const model_t *m, char *run, size_t len)
{
    char host[STR_CAP + 8] = "";
    if (has(&m->info, F_HOST) && m->info.str[F_HOST][0])
        snprintf(host, sizeof host, " on %s", m->info.str[F_HOST]);
    int n = snprintf(run, len, "pid %llu%s", (unsigned long long)u64(&m->info, F_PID), host);
    if (has(&m->info, F_STARTED) && n > 0 && (size_t)n < len) {
        time_t t = (time_t)num(&m->info, F_STARTED);
        struct tm tm;
        if (localtime_r(&t, &tm))
            strftime(run + n, len - (size_t)n, ", started %Y-%m-%d %H:%M:%S", &tm);
    }
}

/* ---- following the file ---- */
typedef struct follower {
    const char *path;
    int fd, is_pipe, eof;
    dev_t dev;
    ino_t ino;
    uint64_t off;
    char *buf;
    size_t len, cap;
    int overlong; /* discarding a line longer than MAX_LINE */
    char head[HEAD_MAX]; /* the first head_len bytes of the file, as read */
    size_t head_len;
} follower_t;

static void line_done(model_t *m, const char *line, size_t len)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    /* NUL bytes before a record: what a file truncated in place holds when its writer
     * writes on at its old offset (writers without O_APPEND; blco's own use it). */
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\0'))
        i++;
    if (i == len)
        return; /* blank */
    rec_t *r = malloc(sizeof *r);
    if (!r)
        cli_die("out of memory");
    if (parse_record(line + i, len - i, r) == 0)
        model_add(m, r);
    else
        m->malformed++;
    free(r);
}

/* Back to the file's start: nothing read, no line begun. */
static void follower_rewind(follower_t *f)
{
    f->off = 0;
    f->len = 0;
    f->overlong = 0;
    f->head_len = 0;
}

static int follower_open(follower_t *f)
{
    if (!strcmp(f->path, "-")) {
        f->fd = 0;
        f->is_pipe = 1;
        return 0;
    }
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    f->fd = fd;
    f->is_pipe = !S_ISREG(st.st_mode);
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    follower_rewind(f);
    return 0;
}

static double now(void);

static void follower_restart(follower_t *f, model_t *m)
{
    model_reset(m, now());
    follower_rewind(f);
}

/* Whether the file no longer starts with the bytes read from it: rewritten in place (a new
 * run, or a rotation whose writer has already written past the old end). */
static int follower_rewritten(const follower_t *f)
{
    if (!f->head_len)
        return 0;
    char now_head[HEAD_MAX];
    ssize_t n = pread(f->fd, now_head, f->head_len, 0);
    return n >= 0 && ((size_t)n != f->head_len || memcmp(now_head, f->head, f->head_len) != 0);
}

/* Reads what is there and feeds whole lines to the model. Returns 0 or -errno. */
static int follower_read(follower_t *f, model_t *m)
{
    if (!f->is_pipe) {
        struct stat st;
        if ((fstat(f->fd, &st) == 0 && (uint64_t)st.st_size < f->off) || follower_rewritten(f)) {
            follower_restart(f, m); /* truncated or rewritten: a new run writes it again */
            if (lseek(f->fd, 0, SEEK_SET) < 0)
                return -errno;
        }
    }
    char chunk[65536];
    for (;;) {
        if (f->is_pipe) {
            struct pollfd p = {f->fd, POLLIN, 0};
            if (poll(&p, 1, 0) <= 0)
                return 0;
        }
        ssize_t n = read(f->fd, chunk, sizeof chunk);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                return 0;
            return -errno;
        }
        if (n == 0) {
            f->eof = f->is_pipe;
            break;
        }
        if (!f->is_pipe && f->off < HEAD_MAX) {
            size_t keep = HEAD_MAX - (size_t)f->off < (size_t)n ? HEAD_MAX - (size_t)f->off : (size_t)n;
            memcpy(f->head + f->off, chunk, keep);
            f->head_len = (size_t)f->off + keep;
        }
        f->off += (uint64_t)n;
        for (ssize_t i = 0; i < n;) {
            const char *nl = memchr(chunk + i, '\n', (size_t)(n - i));
            size_t take = nl ? (size_t)(nl - (chunk + i)) : (size_t)(n - i);
            if (!f->overlong && f->len + take > MAX_LINE) {
                f->overlong = 1;
                f->len = 0;
            }
            if (!f->overlong) {
                if (f->len + take + 1 > f->cap) {
                    size_t cap = f->cap ? f->cap : 4096;
                    while (cap < f->len + take + 1)
                        cap *= 2;
                    char *b = realloc(f->buf, cap);
                    if (!b)
                        cli_die("out of memory");
                    f->buf = b;
                    f->cap = cap;
                }
                memcpy(f->buf + f->len, chunk + i, take);
                f->len += take;
            }
            i += (ssize_t)take;
            if (nl) {
                if (f->overlong)
                    m->malformed++;
                else
                    line_done(m, f->buf, f->len);
                f->len = 0;
                f->overlong = 0;
                i++;
            }
        }
    }
    /* Replaced by a new file of the same name (a new run): read that one from the start. */
    struct stat st;
    if (!f->is_pipe && stat(f->path, &st) == 0 && (st.st_dev != f->dev || st.st_ino != f->ino)) {
        close(f->fd);
        f->fd = -1;
        int err = follower_open(f);
        if (err < 0)
            return err == -ENOENT ? 0 : err;
        follower_restart(f, m);
        return follower_read(f, m);
    }
    return 0;
}

/* Whether the finished run the model holds had ended before `since` (Unix seconds): by its
 * start time and length when the records name them, else by the file's modification time. */
static int ended_before(const model_t *m, const follower_t *f, double since)
{
    if (!m->finished || f->is_pipe)
        return 0;
    if (has(&m->info, F_STARTED) && has(&m->fin, F_ELAPSED))
        return num(&m->info, F_STARTED) + num(&m->fin, F_ELAPSED) < since;
    struct stat st;
    return fstat(f->fd, &st) == 0 &&
           (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec < since;
}

/* At the end of input, a last line without its newline: a record when it parses, else a
 * line still being written. */
static void follower_finish(follower_t *f, model_t *m)
{
    if (f->overlong || !f->len)
        return;
    rec_t *r = malloc(sizeof *r);
    if (!r)
        cli_die("out of memory");
    if (parse_record(f->buf, f->len, r) == 0)
        model_add(m, r);
    else
        m->partial = 1;
    free(r);
    f->len = 0;
}

/* ---- output ---- */
typedef struct out {
    char *p;
    size_t len, cap;
} out_t;

static void out_printf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (o->len + (size_t)n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(o->p, cap);
        if (!p)
            cli_die("out of memory");
        o->p = p;
        o->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(o->p + o->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    o->len += (size_t)n;
}

/* A string from the file made safe for a terminal: control characters become '?'. */
static const char *safe(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 1 < cap; s++)
        buf[n++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    buf[n] = 0;
    return buf;
}

static void bar(out_t *o, double frac, int width)
{
    if (!isfinite(frac))
        frac = 0;
    frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
    int fill = (int)(frac * width + 0.5);
    out_printf(o, "[");
    for (int i = 0; i < width; i++)
        out_printf(o, "%c", i < fill ? '#' : '.');
    out_printf(o, "]");
}

/* Differences between the two latest records; totals over the run once it has finished. */
typedef struct view_rates {
    int valid;
    double dt, read_Bps, verify_sps, decode_sps, nnz_ps;
} view_rates_t;

static view_rates_t rates_of(const model_t *m)
{
    view_rates_t v = {0};
    if (!m->have_cur)
        return v;
    const rec_t *c = &m->cur, *p = &m->prev;
    double dt = num(c, F_T) - num(p, F_T);
    if (m->finished) {
        dt = has(&m->fin, F_ELAPSED) ? num(&m->fin, F_ELAPSED) : num(c, F_T);
        p = NULL;
    }
    if (!(dt >= 1e-3))
        return v;
#define D(f) ((double)u64(c, f) - (p ? (double)u64(p, f) : 0))
    v.valid = 1;
    v.dt = dt;
    v.read_Bps = D(F_BYTES_READ) / dt;
    v.verify_sps = D(F_SEG_VERIFIED) / dt;
    v.decode_sps = D(F_SEG_DECODED) / dt;
    v.nnz_ps = D(F_NNZ_COMPUTED) / dt;
#undef D
    return v;
}

/* The full view, plain text; `rows` limits the fit history (0: the last 20). */
static void render(out_t *o, const model_t *m, const char *file, int cols, int rows, int live)
{
    char a[64], b[64], c[64], d[64], s1[STR_CAP], state[160];
    const rec_t *in = &m->info, *cu = &m->cur;
    int barw = cols - 40 < 10 ? 10 : cols - 40 > 50 ? 50 : cols - 40;
    int lines = 0;
#define LINE(...) (out_printf(o, __VA_ARGS__), out_printf(o, "\n"), lines++)

    const char *job = has(in, F_JOB) && in->str[F_JOB][0] ? in->str[F_JOB] : "job";
    double elapsed = m->finished && has(&m->fin, F_ELAPSED) ? num(&m->fin, F_ELAPSED)
                     : m->have_cur                          ? num(cu, F_T)
                                                            : 0;
    if (m->finished) {
        int st = (int)num(&m->fin, F_STATUS);
        if (!has(&m->fin, F_STATUS) || st == 0)
            snprintf(state, sizeof state, "finished ok");
        else
            snprintf(state, sizeof state, "FAILED (%s)", safe(str(&m->fin, F_ERROR), a, sizeof a));
    } else if (m->died) {
        snprintf(state, sizeof state, "DIED (pid %llu is gone, no final record)",
                 (unsigned long long)m->writer_pid);
    } else {
        snprintf(state, sizeof state, "%s",
                 m->records ? (live ? "running" : "not finished") : "no records yet");
    }
    if (m->records)
        LINE("blco-top  %s  %s  %s after %s", safe(file, s1, 200), safe(job, a, sizeof a), state,
             blco_format_duration(elapsed, b, sizeof b));
    else
        LINE("blco-top  %s  %s", safe(file, s1, 200), state);
    if (!m->records) {
        if (m->malformed)
            LINE("records    none (%llu malformed lines skipped)",
                 (unsigned long long)m->malformed);
        return;
    }
    if (has(in, F_PATH))
        LINE("file       %s  (%s, %s nnz, %llu segments)", safe(in->str[F_PATH], s1, sizeof s1),
             blco_format_size(u64(in, F_FILE_BYTES), a, sizeof a),
             blco_format_si((double)u64(in, F_NNZ), b, sizeof b),
             (unsigned long long)u64(in, F_NSEGMENTS));
    if (has(in, F_PID)) { /* which run this is (a file may hold the one before a new job's) */
        char run[STR_CAP + 96];
        run_name(m, run, sizeof run);
        LINE("run        %s", safe(run, s1, sizeof s1));
    }
    if (has(in, F_IO))
        LINE("io         %s", safe(in->str[F_IO], s1, sizeof s1));
    if (has(in, F_RESIDENCY) || has(in, F_MEM_LIMIT))
        LINE("residency  %s   memory limit %s", safe(str(in, F_RESIDENCY), s1, sizeof s1),
             blco_format_size(u64(in, F_MEM_LIMIT), a, sizeof a));
    if (!m->have_cur)
        return;

    uint64_t done = u64(cu, F_NNZ_COMPUTED), total = u64(cu, F_WORK_TOTAL);
    out_printf(o, "progress   ");
    if (total) {
        double frac = (double)done / (double)total;
        bar(o, frac, barw);
        out_printf(o, " %5.1f%%", 100 * (frac > 1 ? 1 : frac));
    } else {
        out_printf(o, "%s nnz computed (total unknown)", blco_format_si((double)done, a, sizeof a));
    }
    if (m->finished)
        out_printf(o, "  done in %s", blco_format_duration(elapsed, a, sizeof a));
    else if (has(cu, F_ETA))
        out_printf(o, "  ETA %s", blco_format_duration(num(cu, F_ETA), a, sizeof a));
    else if (total)
        out_printf(o, "  ETA ?");
    LINE("%s", "");
    LINE("iteration  %llu   mode %llu   passes %llu   fallbacks %llu",
         (unsigned long long)u64(cu, F_ITERATION), (unsigned long long)u64(cu, F_MODE),
         (unsigned long long)u64(cu, F_PASSES), (unsigned long long)u64(cu, F_FALLBACKS));

    view_rates_t v = rates_of(m);
    if (v.valid)
        LINE("rates%s read %s B/s   verify %s seg/s   decode %s seg/s   compute %s nnz/s",
             m->finished ? " (average)" : "     ", blco_format_si(v.read_Bps, a, sizeof a),
             blco_format_si(v.verify_sps, b, sizeof b), blco_format_si(v.decode_sps, c, sizeof c),
             blco_format_si(v.nnz_ps, d, sizeof d));
    LINE("read       %s in %s requests; %s served from memory",
         blco_format_size(u64(cu, F_BYTES_READ), a, sizeof a),
         blco_format_si((double)u64(cu, F_READ_REQUESTS), b, sizeof b),
         blco_format_size(u64(cu, F_BYTES_RESIDENT), c, sizeof c));

    /* Where the pipeline waits: share of elapsed time, and the growth since the record
     * before (over the whole run once finished). */
    LINE("stage        busy s    wait s   wait/elapsed%s",
         m->finished ? "" : "   wait +last interval");
    int most = -1;
    double most_w = 0;
    for (int i = 0; i < NSTAGES; i++) {
        double busy = num(cu, F_BUSY + i), wait = num(cu, F_WAIT + i);
        double grow = wait - (m->finished ? 0 : num(&m->prev, F_WAIT + i));
        if (isfinite(grow) && grow > most_w)
            most = i, most_w = grow;
        char share[32] = "?", g[32] = "";
        if (elapsed > 0 && isfinite(wait))
            snprintf(share, sizeof share, "%.1f%%", 100 * wait / elapsed);
        if (!m->finished)
            snprintf(g, sizeof g, "      +%.2fs", isfinite(grow) && grow > 0 ? grow : 0);
        LINE("%-10s %9.2f %9.2f %12s%s", stage_names[i], isfinite(busy) ? busy : 0,
             isfinite(wait) ? wait : 0, share, g);
    }
    if (most >= 0) /* the bottleneck, in words: the reader waiting is a compute-bound job */
        LINE("bottleneck %s%s", blco_stage_wait_meaning(most, NULL),
             m->finished ? " (over the run)" : " (over the last interval)");

    uint64_t st = u64(in, F_SLOTS_TOTAL), sb = u64(cu, F_SLOTS_BUSY);
    sb = sb > st ? st : sb; /* a gauge kept with add/sub can read as wrapped for a moment */
    if (st) {
        out_printf(o, "slots      ");
        bar(o, (double)sb / (double)st, st < (uint64_t)barw ? (int)st : barw);
        LINE("  %llu/%llu busy   slot %s   resident %s", (unsigned long long)sb,
             (unsigned long long)st, blco_format_size(u64(in, F_SLOT_BYTES), a, sizeof a),
             blco_format_size(u64(cu, F_RESIDENT_BYTES), b, sizeof b));
    } else {
        LINE("resident   %s", blco_format_size(u64(cu, F_RESIDENT_BYTES), a, sizeof a));
    }
    if (u64(in, F_GPUS)) {
        LINE("gpus       %llu   copied %s   kernels busy %.2f s (%.0f%% overlapped by copies)   "
             "batches: gpu %llu, cpu %llu, decoded on a gpu %llu   held on the gpus %s",
             (unsigned long long)u64(in, F_GPUS),
             blco_format_size(u64(cu, F_GPU_H2D), a, sizeof a), num(cu, F_GPU_KERNEL_S),
             100 * num(cu, F_GPU_OVERLAP), (unsigned long long)u64(cu, F_GPU_BATCHES),
             (unsigned long long)u64(cu, F_CPU_BATCHES),
             (unsigned long long)u64(cu, F_GPU_DECODE_BATCHES),
             blco_format_size(u64(cu, F_GPU_RESIDENT), c, sizeof c));
    }
    if (u64(cu, F_RANKS) > 1)
        LINE("mpi        %llu ranks   rank 0 sent %s combining the modes, %.2f s in collectives",
             (unsigned long long)u64(cu, F_RANKS),
             blco_format_size(u64(cu, F_COMM_BYTES), a, sizeof a), num(cu, F_COMM_S));
    if (has(cu, F_FIT) || m->nfits) {
        double fit = has(cu, F_FIT) ? num(cu, F_FIT) : m->fits[m->nfits - 1].fit;
        LINE("fit        %.6f", fit);
    }
    if (m->nfits) {
        int room = rows ? rows - lines - 3 : 20;
        size_t show = room < 1 ? 1 : (size_t)room;
        size_t first = m->nfits > show ? m->nfits - show : 0;
        LINE("  iter       fit          delta      at");
        if (first)
            LINE("  ... %zu earlier iterations", first);
        for (size_t k = first; k < m->nfits; k++) {
            const fitpt_t *fp = &m->fits[k];
            char dl[32] = "";
            if (isfinite(fp->delta))
                snprintf(dl, sizeof dl, "%.3e", fp->delta);
            LINE("  %4d  %.8f  %12s  %s", fp->iteration, fp->fit, dl, blco_format_duration(fp->t, a, sizeof a));
        }
    }
    out_printf(o, "records    %llu", (unsigned long long)m->records);
    if (m->malformed)
        out_printf(o, " (%llu malformed line%s skipped)", (unsigned long long)m->malformed,
                   m->malformed == 1 ? "" : "s");
    if (m->partial)
        out_printf(o, " (an incomplete last line left out)");
    LINE("%s", "");
#undef LINE
}

/* One line per refresh when the output is not a terminal. */
static void render_line(out_t *o, const model_t *m)
{
    char a[32], b[32], c[32];
    if (!m->have_cur)
        return;
    const rec_t *cu = &m->cur;
    view_rates_t v = rates_of(m);
    uint64_t done = u64(cu, F_NNZ_COMPUTED), total = u64(cu, F_WORK_TOTAL);
    out_printf(o, "t=%s", blco_format_duration(num(cu, F_T), a, sizeof a));
    if (total)
        out_printf(o, " %.1f%%", 100.0 * (double)done / (double)total);
    else
        out_printf(o, " %s nnz", blco_format_si((double)done, a, sizeof a));
    if (v.valid)
        out_printf(o, " %s nnz/s read %s B/s", blco_format_si(v.nnz_ps, b, sizeof b),
                   blco_format_si(v.read_Bps, c, sizeof c));
    if (has(cu, F_ETA))
        out_printf(o, " ETA %s", blco_format_duration(num(cu, F_ETA), a, sizeof a));
    out_printf(o, " slots %llu/%llu it %llu mode %llu", (unsigned long long)u64(cu, F_SLOTS_BUSY),
               (unsigned long long)u64(&m->info, F_SLOTS_TOTAL),
               (unsigned long long)u64(cu, F_ITERATION), (unsigned long long)u64(cu, F_MODE));
    if (has(cu, F_FIT))
        out_printf(o, " fit %.6f", num(cu, F_FIT));
    out_printf(o, "\n");
}

/* ---- the terminal ---- */
static volatile sig_atomic_t got_signal;
static int screen_on;

static void on_signal(int sig)
{
    got_signal = sig;
}

static void screen_leave(void)
{
    if (screen_on) {
        /* show the cursor, leave the alternate screen */
        fputs("\033[?25h\033[?1049l", stdout);
        fflush(stdout);
        screen_on = 0;
    }
}

static void screen_enter(void)
{
    fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
    fflush(stdout);
    screen_on = 1;
}

static void term_size(int *cols, int *rows)
{
    struct winsize ws;
    *cols = 80;
    *rows = 24;
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
        *cols = ws.ws_col;
        *rows = ws.ws_row > 0 ? ws.ws_row : 24;
    }
}

/* Draws the view from the top left, each line cut to the width and cleared to its end. */
static void screen_draw(const model_t *m, const char *file, const char *note)
{
    int cols, rows;
    term_size(&cols, &rows);
    out_t v = {0}, o = {0};
    render(&v, m, file, cols, rows - 1, 1);
    if (note)
        out_printf(&v, "%s\n", note);
    out_printf(&o, "\033[H");
    int row = 0;
    for (char *p = v.p; p && *p && row < rows; row++) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        out_printf(&o, "%.*s\033[K%s", (int)(n < (size_t)cols ? n : (size_t)cols), p,
                   row + 1 < rows ? "\n" : "");
        p = nl ? nl + 1 : p + n;
    }
    out_printf(&o, "\033[J");
    fwrite(o.p, 1, o.len, stdout);
    fflush(stdout);
    free(v.p);
    free(o.p);
}

/* Whether the job writing the records is known to be gone: no record for `stale`
 * seconds, and the pid its records name is no process of this host (records from another
 * host cannot be checked). */
static int writer_gone(const model_t *m, double stale, double t)
{
    char host[256] = "";
    if (m->finished || !m->writer_pid || t - m->updated < stale ||
        gethostname(host, sizeof host - 1) != 0 || strcmp(host, m->writer_host))
        return 0;
    uint64_t pid = m->writer_pid;
    return pid < (1u << 30) && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps up to `s` seconds; returns early on a signal or when fd (>= 0) has input. */
static void nap(double s, int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    poll(fd >= 0 ? &p : NULL, fd >= 0 ? 1 : 0, (int)(s * 1000));
}

int main(int argc, char **argv)
{
    cli_tool = "blco-top";
    static const struct option opts[] = {
        {"once", no_argument, 0, '1'},       {"interval", required_argument, 0, 'n'},
        {"wait", required_argument, 0, 'w'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},    {0, 0, 0, 0},
    };
    int once = 0, c;
    double interval = 1.0, wait_s = 10.0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":1n:w:hV", opts, NULL)) != -1) {
        switch (c) {
        case '1': once = 1; break;
        case 'n':
            interval = cli_double(optarg, "--interval");
            if (!(interval >= 0.05 && interval <= 3600))
                cli_usage_error("--interval must be between 0.05 and 3600 seconds (got %s)",
                                optarg);
            break;
        case 'w':
            wait_s = cli_double(optarg, "--wait");
            if (!(wait_s >= 0 && wait_s <= 86400))
                cli_usage_error("--wait must be between 0 and 86400 seconds (got %s)", optarg);
            break;
        case 'h': usage(); return 0;
        case 'V': printf("blco-top %s\n", blco_version()); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    if (optind != argc - 1)
        cli_usage_error(optind >= argc ? "no file given" : "one file at a time, please");
    const char *file = argv[optind];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: poll() returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    atexit(screen_leave);

    int tty = isatty(1) && !once;
    model_t m = {0};
    follower_t f = {.path = file, .fd = -1};
    double t0 = now(), last_draw = 0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    const double born = (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec;
    int stale = 0; /* the file holds a run that ended before blco-top started */
    uint64_t drawn_records = 0;
    if (tty)
        screen_enter();
    for (;;) {
        if (got_signal)
            break;
        if (f.fd < 0) {
            int err = follower_open(&f);
            if (err == -ENOENT && !once && now() - t0 < wait_s) {
                if (tty) {
                    char note[256];
                    snprintf(note, sizeof note, "waiting for %s to appear (%.0fs left)", file,
                             wait_s - (now() - t0));
                    screen_draw(&m, file, note);
                }
                nap(interval < 0.2 ? interval : 0.2, -1);
                continue;
            }
            if (err < 0) {
                screen_leave();
                cli_die("%s: %s", file, blco_strerror(err));
            }
        }
        int err = follower_read(&f, &m);
        if (err < 0) {
            screen_leave();
            cli_die("%s: %s", file, blco_strerror(err));
        }
        /* --once reads a file as it is now, and standard input (a pipe) to its end: a
         * poll that finds nothing yet is not the end of what the writer sends. */
        if (once && f.is_pipe && !f.eof && !m.finished) {
            nap(0.02, f.fd);
            continue;
        }
        /* Started beside a job (blco-mttkrp ... --stats F & blco-top F), blco-top may find
         * the previous run's finished file before the new job truncates it: wait --wait
         * seconds for the new run before showing the old one (saying which it is). */
        stale = !once && ended_before(&m, &f, born);
        if (stale && now() - t0 < wait_s) {
            if (tty) {
                char note[STR_CAP + 512], run[STR_CAP + 96];
                run_name(&m, run, sizeof run);
                snprintf(note, sizeof note,
                         "%s holds a run that ended before blco-top started (%s); waiting for "
                         "a new one (%.0fs left)",
                         file, run, wait_s - (now() - t0));
                screen_draw(&m, file, note);
            }
            nap(interval < 0.2 ? interval : 0.2, -1);
            continue;
        }
        if (m.finished || once || f.eof)
            break;
        double t = now();
        /* several sampling intervals without a record: is the writer still there? */
        double iv = has(&m.info, F_INTERVAL) ? num(&m.info, F_INTERVAL) : 1.0;
        if (writer_gone(&m, 5 * (iv > interval ? iv : interval) + 1, t)) {
            m.died = 1;
            break;
        }
        if (tty && t - last_draw >= interval * 0.999) {
            screen_draw(&m, file, NULL);
            last_draw = t;
        } else if (!tty && m.records != drawn_records) {
            out_t o = {0};
            render_line(&o, &m);
            if (o.len) {
                fwrite(o.p, 1, o.len, stdout);
                fflush(stdout);
            }
            free(o.p);
            drawn_records = m.records;
        }
        double left = tty ? interval - (now() - last_draw) : interval;
        nap(left < 0.01 ? 0.01 : left, f.is_pipe ? f.fd : -1);
    }
    screen_leave();
    if (got_signal) {
        if (f.fd > 0)
            close(f.fd);
        model_reset(&m, 0);
        free(f.buf);
        return 128 + (int)got_signal;
    }
    if (!m.finished)
        follower_finish(&f, &m);

    int cols, rows;
    term_size(&cols, &rows);
    out_t o = {0};
    render(&o, &m, file, isatty(1) ? cols : 80, 0, !once && !f.eof);
    fwrite(o.p, 1, o.len, stdout);
    fflush(stdout);
    free(o.p);
    int status = m.died || (m.finished && has(&m.fin, F_STATUS) && num(&m.fin, F_STATUS) != 0);
    if (m.died)
        fprintf(stderr, "%s: %s: the job (pid %llu) died without a final record\n", cli_tool, file,
                (unsigned long long)m.writer_pid);
    if (stale) {
        char run[STR_CAP + 96];
        run_name(&m, run, sizeof run);
        fprintf(stderr,
                "%s: %s: this run (%s) had ended before blco-top started, and no new one "
                "came within --wait %gs\n",
                cli_tool, file, run, wait_s);
    }
    if (f.fd > 0)
        close(f.fd);
    free(f.buf);
    model_reset(&m, 0);
    return status ? 1 : 0;
}
