/* The reporter: a thread that samples a job's counters every interval and publishes them as
 * JSON Lines records (schema in docs/counters.md), a Prometheus textfile rewritten atomically, and
 * a progress line on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "blco_internal.h"

/* Time constant (seconds) of the smoothed compute rate behind the ETA. */
#define ETA_TAU 10.0
/* The most top-level members an event's extra JSON may carry. */
#define MAX_EXTRA_KEYS 32
#define JSON_MAX_DEPTH 64

const char *blco_stage_name(int stage)
{
    static const char *const names[] = {"read", "verify", "decode", "compute"};
    return stage >= 0 && stage < BLCO_STAGE_COUNT ? names[stage] : "unknown";
}

const char *blco_stage_wait_meaning(int stage, const char **short_form)
{
    static const char *const words[][2] = {
        {"compute-bound: the reader waited for free slots", "compute-bound: reader idle"},
        {"read-bound: verifying waited for reads", "read-bound: verify waited"},
        {"copy-bound: decoding waited for copies to the GPUs", "copy-bound: decode waited"},
        {"disk-bound: compute waited for reads", "disk-bound: compute waited"},
    };
    const int ok = stage >= 0 && stage < BLCO_STAGE_COUNT;
    if (short_form)
        *short_form = ok ? words[stage][1] : "unknown";
    return ok ? words[stage][0] : "unknown";
}

const char *blco_xfer_name(int kind)
{
    static const char *const names[] = {"tensor", "factors", "outputs", "small"};
    return kind >= 0 && kind < BLCO_XFER_KINDS ? names[kind] : "unknown";
}

void blco_stats_init(blco_stats_t *s)
{
    if (s)
        memset(s, 0, sizeof *s);
}

/* A seqlock over the residency text: the sequence is odd while the text changes, and a
 * reader that sees it change copies again. Bytes move with relaxed atomics so a torn copy
 * is only ever discarded, never a data race. */
void blco_stats_set_residency(blco_stats_t *s, const char *text)
{
    if (!s || !text)
        return;
    uint32_t seq = __atomic_load_n(&s->residency_seq, __ATOMIC_RELAXED);
    __atomic_store_n(&s->residency_seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    size_t n = strnlen(text, sizeof s->residency - 1);
    for (size_t i = 0; i < sizeof s->residency; i++)
        __atomic_store_n(&s->residency[i], i < n ? text[i] : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->residency_seq, seq + 2, __ATOMIC_RELEASE);
}

/* Copies s->residency into out (sizeof s->residency bytes); keeps out as it was when the
 * text is changing all the time. */
static void residency_read(const blco_stats_t *s, char *out)
{
    char tmp[sizeof s->residency];
    for (int tries = 0; tries < 100; tries++) {
        uint32_t a = __atomic_load_n(&s->residency_seq, __ATOMIC_ACQUIRE);
        if (a & 1)
            continue;
        for (size_t i = 0; i < sizeof tmp; i++)
            tmp[i] = __atomic_load_n(&s->residency[i], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->residency_seq, __ATOMIC_RELAXED) == a) {
            tmp[sizeof tmp - 1] = 0;
            memcpy(out, tmp, sizeof tmp);
            return;
        }
    }
}

void blco_reporter_opts_default(blco_reporter_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->interval = 1.0;
    o->progress = -1;
}

/* ---- a growable string ---- */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_puts(sbuf_t *b, const char *s)
{
    sb_put(b, s, strlen(s));
}
static void sb_putc(sbuf_t *b, char c)
{
    sb_put(b, &c, 1);
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

static void sb_reset(sbuf_t *b)
{
    b->len = 0;
    b->oom = 0;
    if (b->p)
        b->p[0] = 0;
}

/* The shortest of %.15g..%.17g that reads back as `v`; null for NaN and infinities (JSON
 * has neither). A locale's decimal comma is turned back into a point. */
static void sb_double(sbuf_t *b, double v)
{
    if (!isfinite(v)) {
        sb_puts(b, "null");
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        for (char *c = tmp; *c; c++)
            if (*c == ',')
                *c = '.';
        if (strtod(tmp, NULL) == v)
            break;
    }
    sb_puts(b, tmp);
}

/* A nanosecond count as exact decimal seconds: 720000000 -> 0.72. */
static void sb_ns(sbuf_t *b, uint64_t ns)
{
    char tmp[40];
    int n = snprintf(tmp, sizeof tmp, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
                     (unsigned long long)(ns % 1000000000u));
    while (tmp[n - 1] == '0')
        n--;
    if (tmp[n - 1] == '.')
        n--;
    sb_put(b, tmp, (size_t)n);
}

/* Seconds since start with microsecond resolution, the precision of the record's times. */
static void sb_time(sbuf_t *b, double t)
{
    sb_ns(b, t > 0 && t < 1e12 ? (uint64_t)llround(t * 1e6) * 1000u : 0);
}

/* Length of the well-formed UTF-8 sequence at p (at most n bytes), 0 when ill-formed. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0], cp, min;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        len = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A JSON string of the n bytes at s: quotes, backslashes and control characters escaped,
 * bytes that are not UTF-8 replaced by U+FFFD so the line stays valid JSON. */
static void sb_json_str(sbuf_t *b, const char *s, size_t n)
{
    sb_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            sb_putc(b, '\\');
            sb_putc(b, (char)c);
            i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': sb_puts(b, "\\n"); break;
            case '\r': sb_puts(b, "\\r"); break;
            case '\t': sb_puts(b, "\\t"); break;
            case '\b': sb_puts(b, "\\b"); break;
            case '\f': sb_puts(b, "\\f"); break;
            default: sb_printf(b, "\\u%04x", c); break;
            }
            i++;
        } else {
            size_t l = utf8_seq((const unsigned char *)s + i, n - i);
            if (l)
                sb_put(b, s + i, l);
            else
                sb_puts(b, "\\ufffd");
            i += l ? l : 1;
        }
    }
    sb_putc(b, '"');
}

/* A Prometheus label value: backslash, quote and newline escaped as the exposition format
 * says; other control characters and ill-formed UTF-8 become U+FFFD. */
static void sb_prom_label(sbuf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x20 ? 1 : utf8_seq((const unsigned char *)s + i, n - i);
        if (c == '\\' || c == '"') {
            sb_putc(b, '\\');
            sb_putc(b, (char)c);
        } else if (c == '\n') {
            sb_puts(b, "\\n");
        } else if (c < 0x20 || !l) {
            sb_puts(b, "\xef\xbf\xbd");
        } else {
            sb_put(b, s + i, l);
        }
        i += l ? l : 1;
    }
}

/* ---- a strict validator for the caller's extra members (RFC 8259 grammar) ---- */
static const char *jv_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static const char *jv_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (;;) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL; /* includes the terminating NUL */
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!((p[i] >= '0' && p[i] <= '9') ||
                          ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'f')))
                        return NULL;
                p += 5;
            } else if (*p && strchr("\"\\/bfnrt", *p)) {
                p++;
            } else {
                return NULL;
            }
            continue;
        }
        size_t l = utf8_seq((const unsigned char *)p, 4); /* stops at a NUL: not a continuation */
        if (!l)
            return NULL;
        p += l;
    }
}

static const char *jv_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (is_digit(*p))
        while (is_digit(*p))
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!is_digit(*++p))
            return NULL;
        while (is_digit(*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return NULL;
        while (is_digit(*p))
            p++;
    }
    return p;
}

static const char *jv_value(const char *p, int depth)
{
    if (depth > JSON_MAX_DEPTH)
        return NULL;
    p = jv_ws(p);
    if (*p == '"')
        return jv_string(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = jv_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = jv_string(jv_ws(p))))
                    return NULL;
                p = jv_ws(p);
                if (*p++ != ':')
                    return NULL;
            }
            if (!(p = jv_value(p, depth + 1)))
                return NULL;
            p = jv_ws(p);
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    if (!strncmp(p, "true", 4))
        return p + 4;
    if (!strncmp(p, "false", 5))
        return p + 5;
    if (!strncmp(p, "null", 4))
        return p + 4;
    return jv_number(p);
}

typedef struct keys {
    const char *k[MAX_EXTRA_KEYS];
    size_t n[MAX_EXTRA_KEYS];
    int count;
} keys_t;

/* Checks that `x` is zero or more object members, and notes their names: the record leaves
 * out its own member of the same name. "type" and "t" cannot be replaced. */
static int extra_check(const char *x, keys_t *k)
{
    k->count = 0;
    if (!x)
        return 0;
    const char *p = jv_ws(x);
    if (!*p)
        return 0;
    for (;;) {
        const char *ks = p;
        if (!(p = jv_string(p)) || k->count == MAX_EXTRA_KEYS)
            return -EINVAL;
        size_t kn = (size_t)(p - ks) - 2;
        if ((kn == 4 && !memcmp(ks + 1, "type", 4)) || (kn == 1 && ks[1] == 't'))
            return -EINVAL;
        k->k[k->count] = ks + 1;
        k->n[k->count++] = kn;
        p = jv_ws(p);
        if (*p++ != ':' || !(p = jv_value(p, 1)))
            return -EINVAL;
        p = jv_ws(p);
        if (!*p)
            return 0;
        if (*p++ != ',')
            return -EINVAL;
        p = jv_ws(p);
    }
}

/* ---- the reporter ---- */
typedef struct snap {
    double t; /* seconds since start */
    int iteration, mode;
    uint64_t work_total, fit_bits;
    uint64_t bytes_read, read_requests, bytes_resident, segments_verified, segments_decoded;
    uint64_t nnz_computed, passes, fallbacks, slots_busy, resident_bytes;
    uint64_t gpu_h2d_bytes, gpu_kernel_ns, gpu_overlap_ns, gpu_batches, cpu_batches,
        gpu_decode_batches, gpu_resident_bytes;
    uint64_t gpu_d2h_bytes, gpu_peer_bytes;
    uint64_t gpu_h2d_kind[BLCO_XFER_KINDS], gpu_d2h_kind[BLCO_XFER_KINDS];
    uint64_t busy_ns[BLCO_STAGE_COUNT], wait_ns[BLCO_STAGE_COUNT];
    uint64_t comm_bytes[BLCO_MAX_MODES], comm_ns[BLCO_MAX_MODES];
    char residency[sizeof((blco_stats_t *)0)->residency];
} snap_t;

typedef struct rates {
    int valid;
    double read_Bps, nnz_per_s, segments_per_s;
} rates_t;

struct blco_reporter {
    blco_stats_t *s;
    double interval, t0;
    double wall0; /* the wall clock at t0, Unix seconds: names the run in its records */
    FILE *jsonl;
    int jsonl_close; /* 0 for stdout */
    char *jsonl_path, *prom_path, *prom_tmp;
    int progress, progress_tty, progress_len;
    char progress_line[512]; /* the line drawn last, for blco_reporter_resume */
    char residency[sizeof((blco_stats_t *)0)->residency]; /* as last published */
    char host[256];

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, stopping;

    snap_t base; /* the last periodic sample: rates are measured from it */
    double ewma; /* smoothed nonzeros per second, for the ETA */
    int ewma_ok;
    int err; /* the first write error */
    int jsonl_logged, prom_logged;
    sbuf_t jb, pb;
    char job_label[128]; /* job="..." for Prometheus */
};

static void take(const struct blco_reporter *r, snap_t *n)
{
    const blco_stats_t *s = r->s;
    n->t = blco_now() - r->t0;
    n->iteration = __atomic_load_n(&s->iteration, __ATOMIC_RELAXED);
    n->mode = __atomic_load_n(&s->mode, __ATOMIC_RELAXED);
    n->work_total = blco_stat_get(&s->work_total);
    n->fit_bits = blco_stat_get(&s->fit_bits);
    n->bytes_read = blco_stat_get(&s->bytes_read);
    n->read_requests = blco_stat_get(&s->read_requests);
    n->bytes_resident = blco_stat_get(&s->bytes_resident);
    n->segments_verified = blco_stat_get(&s->segments_verified);
    n->segments_decoded = blco_stat_get(&s->segments_decoded);
    memcpy(n->residency, r->residency, sizeof n->residency);
    residency_read(s, n->residency);
    n->nnz_computed = blco_stat_get(&s->nnz_computed);
    n->passes = blco_stat_get(&s->passes);
    n->fallbacks = blco_stat_get(&s->fallbacks);
    n->slots_busy = blco_stat_get(&s->slots_busy);
    n->resident_bytes = blco_stat_get(&s->resident_bytes);
    n->gpu_h2d_bytes = blco_stat_get(&s->gpu_h2d_bytes);
    n->gpu_kernel_ns = blco_stat_get(&s->gpu_kernel_ns);
    n->gpu_overlap_ns = blco_stat_get(&s->gpu_overlap_ns);
    n->gpu_batches = blco_stat_get(&s->gpu_batches);
    n->cpu_batches = blco_stat_get(&s->cpu_batches);
    n->gpu_decode_batches = blco_stat_get(&s->gpu_decode_batches);
    n->gpu_resident_bytes = blco_stat_get(&s->gpu_resident_bytes);
    n->gpu_d2h_bytes = blco_stat_get(&s->gpu_d2h_bytes);
    n->gpu_peer_bytes = blco_stat_get(&s->gpu_peer_bytes);
    for (int i = 0; i < BLCO_XFER_KINDS; i++) {
        n->gpu_h2d_kind[i] = blco_stat_get(&s->gpu_h2d_kind[i]);
        n->gpu_d2h_kind[i] = blco_stat_get(&s->gpu_d2h_kind[i]);
    }
    for (int i = 0; i < BLCO_STAGE_COUNT; i++) {
        n->busy_ns[i] = blco_stat_get(&s->busy_ns[i]);
        n->wait_ns[i] = blco_stat_get(&s->wait_ns[i]);
    }
    for (int m = 0; m < BLCO_MAX_MODES; m++) {
        n->comm_bytes[m] = blco_stat_get(&s->comm_bytes[m]);
        n->comm_ns[m] = blco_stat_get(&s->comm_ns[m]);
    }
}

/* Counters can be read a moment apart; a difference never goes below zero. */
static double delta(uint64_t now, uint64_t then)
{
    return now > then ? (double)(now - then) : 0;
}

static rates_t rates_between(const snap_t *n, const snap_t *from)
{
    rates_t rt = {0};
    double dt = n->t - from->t;
    if (dt < 1e-3)
        return rt;
    rt.valid = 1;
    rt.read_Bps = delta(n->bytes_read, from->bytes_read) / dt;
    rt.nnz_per_s = delta(n->nnz_computed, from->nnz_computed) / dt;
    rt.segments_per_s = delta(n->segments_decoded, from->segments_decoded) / dt;
    return rt;
}

static double fit_of(const snap_t *n)
{
    double f;
    memcpy(&f, &n->fit_bits, sizeof f);
    return n->fit_bits && isfinite(f) ? f : NAN;
}

/* Seconds left, NAN when unknown. */
static double eta_of(const struct blco_reporter *r, const snap_t *n)
{
    if (!n->work_total)
        return NAN;
    if (n->nnz_computed >= n->work_total)
        return 0;
    if (!r->ewma_ok || r->ewma <= 0)
        return NAN;
    return (double)(n->work_total - n->nnz_computed) / r->ewma;
}

/* Appends ,"name": unless the caller's extra members hold `name`; returns whether it did. */
static int key(sbuf_t *b, const keys_t *skip, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; skip && i < skip->count; i++)
        if (skip->n[i] == n && !memcmp(skip->k[i], name, n))
            return 0;
    sb_puts(b, ",\"");
    sb_puts(b, name);
    sb_puts(b, "\":");
    return 1;
}

static void kv_u64(sbuf_t *b, const keys_t *skip, const char *name, uint64_t v)
{
    if (key(b, skip, name))
        sb_printf(b, "%llu", (unsigned long long)v);
}

static void kv_dbl(sbuf_t *b, const keys_t *skip, const char *name, double v)
{
    if (key(b, skip, name))
        sb_double(b, v);
}

static void kv_str(sbuf_t *b, const keys_t *skip, const char *name, const char *s, size_t cap)
{
    if (key(b, skip, name))
        sb_json_str(b, s, strnlen(s, cap));
}

static void kv_stages(sbuf_t *b, const keys_t *skip, const char *name, const uint64_t *ns)
{
    if (!key(b, skip, name))
        return;
    for (int i = 0; i < BLCO_STAGE_COUNT; i++) {
        sb_printf(b, "%c\"%s\":", i ? ',' : '{', blco_stage_name(i));
        sb_ns(b, ns[i]);
    }
    sb_putc(b, '}');
}

/* Bytes by kind of transfer: {"tensor":..,"factors":..,"outputs":..,"small":..}. */
static void kv_xfer(sbuf_t *b, const keys_t *skip, const char *name, const uint64_t *bytes)
{
    if (!key(b, skip, name))
        return;
    for (int i = 0; i < BLCO_XFER_KINDS; i++)
        sb_printf(b, "%c\"%s\":%llu", i ? ',' : '{', blco_xfer_name(i),
                  (unsigned long long)bytes[i]);
    sb_putc(b, '}');
}

/* A distributed run's communication: the ranks, this rank's totals, and per mode. */
static void kv_comm(sbuf_t *b, const keys_t *skip, const blco_stats_t *s, const snap_t *n)
{
    const int modes = (int)BLCO_MIN(s->comm_modes, (uint32_t)BLCO_MAX_MODES);
    uint64_t bytes = 0, ns = 0;
    for (int m = 0; m < modes; m++)
        bytes += n->comm_bytes[m], ns += n->comm_ns[m];
    kv_u64(b, skip, "ranks", s->ranks);
    kv_u64(b, skip, "comm_bytes", bytes);
    kv_dbl(b, skip, "comm_s", ns * 1e-9);
    if (key(b, skip, "comm_mode_bytes")) {
        sb_putc(b, '[');
        for (int m = 0; m < modes; m++)
            sb_printf(b, "%s%llu", m ? "," : "", (unsigned long long)n->comm_bytes[m]);
        sb_putc(b, ']');
    }
    if (key(b, skip, "comm_mode_s")) {
        sb_putc(b, '[');
        for (int m = 0; m < modes; m++) {
            if (m)
                sb_putc(b, ',');
            sb_ns(b, n->comm_ns[m]);
        }
        sb_putc(b, ']');
    }
}

enum { REC_PLAIN, REC_START, REC_FINAL };

/* One JSON Lines record into r->jb, without the newline. */
static void build_record(struct blco_reporter *r, const char *type, int kind, const snap_t *n,
                         const rates_t *rt, int status, const char *extra, const keys_t *skip)
{
    sbuf_t *b = &r->jb;
    const blco_stats_t *s = r->s;
    sb_reset(b);
    sb_puts(b, "{\"type\":");
    sb_json_str(b, type, strlen(type));
    sb_puts(b, ",\"t\":");
    sb_time(b, n->t);
    if (kind != REC_PLAIN) {
        kv_str(b, skip, "job", s->job, sizeof s->job);
        kv_str(b, skip, "path", s->path, sizeof s->path);
        kv_str(b, skip, "io", s->io_backend, sizeof s->io_backend);
        kv_str(b, skip, "residency", n->residency, sizeof n->residency);
        kv_u64(b, skip, "file_bytes", s->file_bytes);
        kv_u64(b, skip, "data_bytes", s->data_bytes);
        kv_u64(b, skip, "nnz", s->nnz);
        kv_u64(b, skip, "nsegments", s->nsegments);
        kv_u64(b, skip, "slots_total", s->slots_total);
        kv_u64(b, skip, "slot_bytes", s->slot_bytes);
        kv_u64(b, skip, "mem_limit", s->mem_limit);
        kv_u64(b, skip, "gpus", s->gpus);
        kv_u64(b, skip, "pid", (uint64_t)getpid());
        kv_str(b, skip, "host", r->host, sizeof r->host);
        kv_dbl(b, skip, "started", floor(r->wall0 * 1e6) / 1e6);
    }
    if (kind == REC_START) {
        kv_dbl(b, skip, "interval_s", r->interval);
        if (key(b, skip, "version"))
            sb_json_str(b, blco_version(), strlen(blco_version()));
    }
    kv_u64(b, skip, "iteration", n->iteration > 0 ? (uint64_t)n->iteration : 0);
    kv_u64(b, skip, "mode", n->mode > 0 ? (uint64_t)n->mode : 0);
    kv_u64(b, skip, "bytes_read", n->bytes_read);
    kv_u64(b, skip, "read_requests", n->read_requests);
    kv_u64(b, skip, "bytes_resident", n->bytes_resident);
    kv_u64(b, skip, "segments_verified", n->segments_verified);
    kv_u64(b, skip, "segments_decoded", n->segments_decoded);
    kv_u64(b, skip, "nnz_computed", n->nnz_computed);
    kv_u64(b, skip, "passes", n->passes);
    kv_u64(b, skip, "fallbacks", n->fallbacks);
    kv_u64(b, skip, "slots_busy", n->slots_busy);
    kv_u64(b, skip, "resident_bytes", n->resident_bytes);
    if (s->gpus) {
        kv_u64(b, skip, "gpu_h2d_bytes", n->gpu_h2d_bytes);
        kv_xfer(b, skip, "gpu_h2d", n->gpu_h2d_kind);
        kv_u64(b, skip, "gpu_d2h_bytes", n->gpu_d2h_bytes);
        kv_xfer(b, skip, "gpu_d2h", n->gpu_d2h_kind);
        kv_u64(b, skip, "gpu_peer_bytes", n->gpu_peer_bytes);
        kv_dbl(b, skip, "gpu_kernel_s", n->gpu_kernel_ns * 1e-9);
        kv_dbl(b, skip, "gpu_overlap",
               n->gpu_kernel_ns ? (double)n->gpu_overlap_ns / (double)n->gpu_kernel_ns : 0);
        kv_u64(b, skip, "gpu_batches", n->gpu_batches);
        kv_u64(b, skip, "cpu_batches", n->cpu_batches);
        kv_u64(b, skip, "gpu_decode_batches", n->gpu_decode_batches);
        kv_u64(b, skip, "gpu_resident_bytes", n->gpu_resident_bytes);
    }
    kv_stages(b, skip, "busy_s", n->busy_ns);
    kv_stages(b, skip, "wait_s", n->wait_ns);
    if (s->ranks > 1)
        kv_comm(b, skip, s, n);
    if (key(b, skip, "rates")) {
        sb_puts(b, "{\"read_Bps\":");
        sb_double(b, rt->valid ? rt->read_Bps : NAN);
        sb_puts(b, ",\"nnz_per_s\":");
        sb_double(b, rt->valid ? rt->nnz_per_s : NAN);
        sb_puts(b, ",\"segments_per_s\":");
        sb_double(b, rt->valid ? rt->segments_per_s : NAN);
        sb_putc(b, '}');
    }
    kv_u64(b, skip, "work_done", n->nnz_computed);
    kv_u64(b, skip, "work_total", n->work_total);
    double eta = eta_of(r, n);
    if (kind == REC_FINAL && eta != 0)
        eta = NAN; /* the run is over: nothing left to estimate */
    kv_dbl(b, skip, "eta_s", eta);
    kv_dbl(b, skip, "fit", fit_of(n));
    if (kind == REC_FINAL) {
        if (key(b, skip, "status"))
            sb_printf(b, "%d", status);
        if (status && key(b, skip, "error"))
            sb_json_str(b, blco_strerror(status), strlen(blco_strerror(status)));
        if (key(b, skip, "elapsed_s"))
            sb_time(b, n->t);
    }
    if (skip && skip->count) {
        sb_putc(b, ',');
        sb_puts(b, jv_ws(extra));
        /* the validator accepted trailing blanks: drop them to keep one line */
        while (b->len && (b->p[b->len - 1] == ' ' || b->p[b->len - 1] == '\t' ||
                          b->p[b->len - 1] == '\n' || b->p[b->len - 1] == '\r'))
            b->p[--b->len] = 0;
        /* blanks between members may hold newlines: a record is one line */
        for (size_t i = 0; i < b->len; i++)
            if (b->p[i] == '\n' || b->p[i] == '\r')
                b->p[i] = ' ';
    }
    sb_putc(b, '}');
}

static void note_error(struct blco_reporter *r, int err, const char *path, int *logged)
{
    if (!r->err)
        r->err = err;
    if (!*logged) {
        blco_log(BLCO_LOG_WARN, "cannot write %s: %s", path, blco_strerror(err));
        *logged = 1;
    }
}

/* Writes `len` bytes (none for just a flush) and flushes, or closes the file when `close_it`,
 * with SIGPIPE blocked: a reader that went away (blco-top quit) makes the write fail with
 * EPIPE instead of killing the job. Returns 0 or -errno. */
static int write_guarded(FILE *f, const char *p, size_t len, int close_it)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    errno = 0;
    int err = 0;
    if ((len && fwrite(p, 1, len, f) != len) || (close_it ? fclose(f) : fflush(f)) != 0)
        err = errno ? -errno : -EIO;
    if (err == -EPIPE && !sigismember(&old, SIGPIPE)) {
        /* the SIGPIPE raised by the failed write is pending: take it before unblocking */
        sigset_t pending;
        struct timespec zero = {0, 0};
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE))
            sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

/* Writes r->jb as one line and flushes it. Returns 0 or -errno. */
static int emit(struct blco_reporter *r)
{
    if (!r->jsonl)
        return 0;
    const char *name = r->jsonl_path;
    int err = 0;
    if (r->jb.oom) {
        err = -ENOMEM;
    } else {
        sb_putc(&r->jb, '\n');
        err = r->jb.oom ? -ENOMEM : write_guarded(r->jsonl, r->jb.p, r->jb.len, 0);
    }
    if (err) {
        clearerr(r->jsonl);
        note_error(r, err, name, &r->jsonl_logged);
    }
    return err;
}

/* ---- Prometheus textfile ---- */
static void prom_family(sbuf_t *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_u64(struct blco_reporter *r, const char *name, const char *stage, uint64_t v)
{
    sbuf_t *b = &r->pb;
    sb_printf(b, "%s{%s", name, r->job_label);
    if (stage)
        sb_printf(b, ",stage=\"%s\"", stage);
    sb_printf(b, "} %llu\n", (unsigned long long)v);
}

static void prom_dbl(struct blco_reporter *r, const char *name, double v)
{
    if (!isfinite(v))
        return; /* an unknown value: the family has no sample */
    sb_printf(&r->pb, "%s{%s} ", name, r->job_label);
    sb_double(&r->pb, v);
    sb_putc(&r->pb, '\n');
}

static void prom_stages(struct blco_reporter *r, const char *name, const uint64_t *ns)
{
    for (int i = 0; i < BLCO_STAGE_COUNT; i++) {
        sb_printf(&r->pb, "%s{%s,stage=\"%s\"} ", name, r->job_label, blco_stage_name(i));
        sb_ns(&r->pb, ns[i]);
        sb_putc(&r->pb, '\n');
    }
}

static void prom_build(struct blco_reporter *r, const snap_t *n, int running, int status)
{
    const blco_stats_t *s = r->s;
    sbuf_t *b = &r->pb;
    sb_reset(b);
    prom_family(b, "blco_info", "gauge", "The job's input and setup in labels; always 1.");
    sb_printf(b, "blco_info{%s,path=\"", r->job_label);
    sb_prom_label(b, s->path, strnlen(s->path, sizeof s->path));
    sb_puts(b, "\",io=\"");
    sb_prom_label(b, s->io_backend, strnlen(s->io_backend, sizeof s->io_backend));
    sb_puts(b, "\",residency=\"");
    sb_prom_label(b, n->residency, strnlen(n->residency, sizeof n->residency));
    sb_puts(b, "\"} 1\n");
    prom_family(b, "blco_running", "gauge", "1 while the job runs, 0 once it has ended.");
    prom_u64(r, "blco_running", NULL, running ? 1 : 0);
    if (!running) {
        prom_family(b, "blco_exit_status", "gauge",
                    "0 when the job succeeded, else its error code.");
        sb_printf(b, "blco_exit_status{%s} %d\n", r->job_label, status);
    }
    prom_family(b, "blco_elapsed_seconds", "gauge", "Seconds since the job started.");
    prom_dbl(r, "blco_elapsed_seconds", n->t);

    static const struct {
        const char *name, *help;
        size_t off;
    } counters[] = {
        {"blco_bytes_read_total", "Segment bytes read from disk.", offsetof(snap_t, bytes_read)},
        {"blco_read_requests_total", "Read requests completed.", offsetof(snap_t, read_requests)},
        {"blco_bytes_resident_total", "Segment bytes served from memory instead of disk.",
         offsetof(snap_t, bytes_resident)},
        {"blco_segments_verified_total", "Segments whose checksum was verified.",
         offsetof(snap_t, segments_verified)},
        {"blco_segments_decoded_total", "Segments decoded.", offsetof(snap_t, segments_decoded)},
        {"blco_nnz_computed_total", "Nonzeros computed (MTTKRP work done).",
         offsetof(snap_t, nnz_computed)},
        {"blco_passes_total", "Passes over the tensor completed (one per mode per iteration).",
         offsetof(snap_t, passes)},
        {"blco_fallbacks_total", "Degraded paths taken (io_uring or O_DIRECT refused...).",
         offsetof(snap_t, fallbacks)},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)n + counters[i].off, sizeof v);
        prom_family(b, counters[i].name, "counter", counters[i].help);
        prom_u64(r, counters[i].name, NULL, v);
    }
    prom_family(b, "blco_stage_busy_seconds_total", "counter",
                "Seconds each pipeline stage spent working.");
    prom_stages(r, "blco_stage_busy_seconds_total", n->busy_ns);
    prom_family(b, "blco_stage_wait_seconds_total", "counter",
                "Seconds each pipeline stage spent waiting for its input.");
    prom_stages(r, "blco_stage_wait_seconds_total", n->wait_ns);

    prom_family(b, "blco_slots_busy", "gauge", "Slots holding data or a read in flight.");
    prom_u64(r, "blco_slots_busy", NULL, n->slots_busy);
    prom_family(b, "blco_slots_total", "gauge", "Slots in the ring.");
    prom_u64(r, "blco_slots_total", NULL, s->slots_total);
    prom_family(b, "blco_slot_bytes", "gauge", "Bytes of one slot.");
    prom_u64(r, "blco_slot_bytes", NULL, s->slot_bytes);
    prom_family(b, "blco_resident_bytes", "gauge", "Memory holding resident segments.");
    prom_u64(r, "blco_resident_bytes", NULL, n->resident_bytes);
    if (s->gpus) {
        prom_family(b, "blco_gpus", "gauge", "GPUs of the run.");
        prom_u64(r, "blco_gpus", NULL, s->gpus);
        prom_family(b, "blco_gpu_h2d_bytes_total", "counter", "Bytes copied to the GPUs.");
        prom_u64(r, "blco_gpu_h2d_bytes_total", NULL, n->gpu_h2d_bytes);
        prom_family(b, "blco_gpu_transfer_bytes_total", "counter",
                    "Bytes copied between the host and the GPUs, by direction and kind.");
        for (int i = 0; i < 2 * BLCO_XFER_KINDS; i++) {
            const int k = i % BLCO_XFER_KINDS;
            sb_printf(b, "blco_gpu_transfer_bytes_total{%s,direction=\"%s\",kind=\"%s\"} %llu\n",
                      r->job_label, i < BLCO_XFER_KINDS ? "h2d" : "d2h", blco_xfer_name(k),
                      (unsigned long long)(i < BLCO_XFER_KINDS ? n->gpu_h2d_kind[k]
                                                               : n->gpu_d2h_kind[k]));
        }
        prom_family(b, "blco_gpu_peer_bytes_total", "counter", "Bytes copied between GPUs.");
        prom_u64(r, "blco_gpu_peer_bytes_total", NULL, n->gpu_peer_bytes);
        prom_family(b, "blco_gpu_kernel_seconds_total", "counter",
                    "Seconds the GPUs' kernels were busy (device events).");
        prom_dbl(r, "blco_gpu_kernel_seconds_total", n->gpu_kernel_ns * 1e-9);
        prom_family(b, "blco_gpu_copy_overlap_ratio", "gauge",
                    "Share of kernel time during which a copy to the same GPU was in flight.");
        prom_dbl(r, "blco_gpu_copy_overlap_ratio",
                 n->gpu_kernel_ns ? (double)n->gpu_overlap_ns / (double)n->gpu_kernel_ns : 0);
        prom_family(b, "blco_gpu_batches_total", "counter", "Batches the GPUs computed.");
        prom_u64(r, "blco_gpu_batches_total", NULL, n->gpu_batches);
        prom_family(b, "blco_cpu_batches_total", "counter",
                    "Batches the CPU computed beside the GPUs (hybrid).");
        prom_u64(r, "blco_cpu_batches_total", NULL, n->cpu_batches);
        prom_family(b, "blco_gpu_resident_bytes", "gauge",
                    "Device memory holding batches across passes.");
        prom_u64(r, "blco_gpu_resident_bytes", NULL, n->gpu_resident_bytes);
    }
    if (s->ranks > 1) {
        prom_family(b, "blco_mpi_ranks", "gauge", "MPI ranks of the distributed job.");
        prom_u64(r, "blco_mpi_ranks", NULL, s->ranks);
        prom_family(b, "blco_comm_bytes_total", "counter",
                    "Bytes this rank sent combining each mode (MTTKRP rows, factor rows, Gram).");
        const int modes = (int)BLCO_MIN(s->comm_modes, (uint32_t)BLCO_MAX_MODES);
        for (int m = 0; m < modes; m++)
            sb_printf(b, "blco_comm_bytes_total{%s,mode=\"%d\"} %llu\n", r->job_label, m + 1,
                      (unsigned long long)n->comm_bytes[m]);
        prom_family(b, "blco_comm_seconds_total", "counter",
                    "Seconds this rank spent in the collectives of each mode.");
        for (int m = 0; m < modes; m++) {
            sb_printf(b, "blco_comm_seconds_total{%s,mode=\"%d\"} ", r->job_label, m + 1);
            sb_ns(b, n->comm_ns[m]);
            sb_putc(b, '\n');
        }
    }
    prom_family(b, "blco_mem_limit_bytes", "gauge", "The memory budget's limit.");
    prom_u64(r, "blco_mem_limit_bytes", NULL, s->mem_limit);
    prom_family(b, "blco_tensor_nnz", "gauge", "Nonzeros of the tensor.");
    prom_u64(r, "blco_tensor_nnz", NULL, s->nnz);
    prom_family(b, "blco_data_bytes", "gauge", "Bytes of all segments on disk.");
    prom_u64(r, "blco_data_bytes", NULL, s->data_bytes);
    prom_family(b, "blco_iteration", "gauge", "CP-ALS iteration (1-based; 0 before the first).");
    prom_u64(r, "blco_iteration", NULL, n->iteration > 0 ? (uint64_t)n->iteration : 0);
    prom_family(b, "blco_mode", "gauge", "Mode being computed (1-based; 0 when none).");
    prom_u64(r, "blco_mode", NULL, n->mode > 0 ? (uint64_t)n->mode : 0);
    prom_family(b, "blco_fit", "gauge", "CP-ALS fit (no sample before the first).");
    prom_dbl(r, "blco_fit", fit_of(n));
    prom_family(b, "blco_work_total", "gauge", "Nonzeros to compute in all (0: unknown).");
    prom_u64(r, "blco_work_total", NULL, n->work_total);
    prom_family(b, "blco_progress_ratio", "gauge",
                "Share of the work done, 0 to 1 (no sample when the total is unknown).");
    prom_dbl(r, "blco_progress_ratio",
             n->work_total ? BLCO_MIN(1.0, (double)n->nnz_computed / (double)n->work_total) : NAN);
    prom_family(b, "blco_eta_seconds", "gauge", "Estimated seconds left (no sample when unknown).");
    prom_dbl(r, "blco_eta_seconds", running ? eta_of(r, n) : NAN);
}

/* Writes PATH.tmp.<pid> and renames it over PATH, so a scraper never sees half a file. */
static int prom_write(struct blco_reporter *r, const snap_t *n, int running, int status)
{
    if (!r->prom_path)
        return 0;
    prom_build(r, n, running, status);
    int err = 0;
    if (r->pb.oom) {
        err = -ENOMEM;
    } else {
        int fd = open(r->prom_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {
            err = -errno;
        } else {
            err = blco_pwrite_all(fd, r->pb.p, r->pb.len, 0);
            if (close(fd) != 0 && !err)
                err = -errno;
            if (!err && rename(r->prom_tmp, r->prom_path) != 0)
                err = -errno;
            if (err)
                unlink(r->prom_tmp);
        }
    }
    if (err)
        note_error(r, err, r->prom_path, &r->prom_logged);
    return err;
}

/* ---- progress line ---- */
/* Redraws the line with \r: rates over the last interval (over the run when `final`). */
static void progress_draw(struct blco_reporter *r, const snap_t *n, const snap_t *from, int final,
                          int status)
{
    if (!r->progress)
        return;
    const blco_stats_t *s = r->s;
    char line[512], a[32], c[32];
    int len = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (len < (int)sizeof line)                                                                \
            len += snprintf(line + len, sizeof line - (size_t)len, __VA_ARGS__);                   \
    } while (0)
    size_t jn = strnlen(s->job, sizeof s->job);
    ADD("%.*s", (int)(jn ? jn : 4), jn ? s->job : "blco");
    if (n->work_total)
        ADD(" %5.1f%%", 100.0 * BLCO_MIN(1.0, (double)n->nnz_computed / (double)n->work_total));
    else
        ADD(" %s nnz", blco_format_si((double)n->nnz_computed, a, sizeof a));
    rates_t rt = rates_between(n, from);
    if (rt.valid)
        ADD("  %s nnz/s  read %.1f MB/s", blco_format_si(rt.nnz_per_s, a, sizeof a),
            rt.read_Bps / 1e6);
    int most = -1;
    double most_wait = 0;
    for (int i = 0; i < BLCO_STAGE_COUNT; i++) {
        double w = delta(n->wait_ns[i], from->wait_ns[i]);
        if (w > most_wait)
            most = i, most_wait = w;
    }
    if (most >= 0 && n->t - from->t >= 1e-3) { /* the bottleneck, in words */
        const char *words;
        blco_stage_wait_meaning(most, &words);
        ADD("  %s %.0f%%", words, 100.0 * most_wait * 1e-9 / (n->t - from->t));
    }
    if (s->gpus && n->t - from->t >= 1e-3)
        ADD("  gpu %.1f MB/s", delta(n->gpu_h2d_bytes, from->gpu_h2d_bytes) / (n->t - from->t) / 1e6);
    if (s->slots_total)
        ADD("  slots %llu/%u", (unsigned long long)BLCO_MIN(n->slots_busy, s->slots_total),
            s->slots_total); /* a gauge kept with add/sub can read as wrapped for a moment */
    if (final) {
        ADD("  %s in %s", status ? "failed" : "done", blco_format_duration(n->t, c, sizeof c));
    } else {
        double eta = eta_of(r, n);
        if (isfinite(eta))
            ADD("  ETA %s", blco_format_duration(eta, c, sizeof c));
    }
    if (n->iteration > 0)
        ADD("  it %d", n->iteration);
    if (n->mode > 0)
        ADD(" mode %d", n->mode);
    double fit = fit_of(n);
    if (isfinite(fit))
        ADD("  fit %.4f", fit);
#undef ADD
    len = BLCO_MIN(len, (int)sizeof line - 1);
    if (r->progress_tty) {
        /* a line that wraps cannot be redrawn with \r: keep it inside the terminal */
        struct winsize ws;
        if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
            len = BLCO_MIN(len, (int)ws.ws_col - 1);
    }
    int pad = BLCO_MAX(0, r->progress_len - len);
    fprintf(stderr, "\r%.*s%*s%s", len, line, pad, "", final ? "\n" : "");
    if (pad && !final)
        fprintf(stderr, "\r%.*s", len, line);
    fflush(stderr);
    r->progress_len = final ? 0 : len;
    memcpy(r->progress_line, line, (size_t)len);
    r->progress_line[len] = 0;
}

void blco_reporter_suspend(blco_reporter_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    if (r->progress && r->progress_len) {
        fflush(stdout);
        fprintf(stderr, "\r%*s\r", r->progress_len, "");
        fflush(stderr);
    }
}

void blco_reporter_resume(blco_reporter_t *r)
{
    if (!r)
        return;
    if (r->progress && r->progress_len) {
        fflush(stdout);
        fprintf(stderr, "%s", r->progress_line);
        fflush(stderr);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- the thread ---- */
/* A "residency" record when the engine changed it since the last one published. */
static void residency_event(struct blco_reporter *r, const snap_t *n, const rates_t *rt)
{
    if (!strcmp(n->residency, r->residency))
        return;
    memcpy(r->residency, n->residency, sizeof r->residency);
    sbuf_t x = {0};
    sb_puts(&x, "\"residency\":");
    sb_json_str(&x, n->residency, strnlen(n->residency, sizeof n->residency));
    keys_t k;
    if (!x.oom && extra_check(x.p, &k) == 0) {
        build_record(r, "residency", REC_PLAIN, n, rt, 0, x.p, &k);
        emit(r);
    }
    free(x.p);
}

static void sample(struct blco_reporter *r)
{
    snap_t n;
    take(r, &n);
    rates_t rt = rates_between(&n, &r->base);
    if (rt.valid) {
        double alpha = 1 - exp(-(n.t - r->base.t) / ETA_TAU);
        if (r->ewma_ok)
            r->ewma += alpha * (rt.nnz_per_s - r->ewma);
        else if (rt.nnz_per_s > 0)
            r->ewma = rt.nnz_per_s, r->ewma_ok = 1;
    }
    residency_event(r, &n, &rt);
    build_record(r, "sample", REC_PLAIN, &n, &rt, 0, NULL, NULL);
    emit(r);
    prom_write(r, &n, 1, 0);
    progress_draw(r, &n, &r->base, 0, 0);
    r->base = n;
}

static struct timespec abs_time(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (ts.tv_nsec < 0)
        ts.tv_nsec = 0;
    return ts;
}

static void *reporter_main(void *arg)
{
    struct blco_reporter *r = arg;
    pthread_mutex_lock(&r->mu);
    double next = r->t0 + r->interval;
    while (!r->stopping) {
        /* the condvar runs on CLOCK_MONOTONIC, the clock of blco_now() */
        struct timespec ts = abs_time(next);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->stopping)
            break;
        double now = blco_now();
        if (now < next)
            continue; /* woken early */
        sample(r);
        next += r->interval;
        if (next <= now) /* a slow write or a suspended process: do not catch up in a burst */
            next = now + r->interval;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void reporter_free(struct blco_reporter *r)
{
    if (!r)
        return;
    if (r->jsonl && r->jsonl_close)
        fclose(r->jsonl);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->jsonl_path);
    free(r->prom_path);
    free(r->prom_tmp);
    free(r->jb.p);
    free(r->pb.p);
    free(r);
}

int blco_reporter_start(blco_stats_t *s, const blco_reporter_opts_t *o, blco_reporter_t **out,
                        blco_diag_t *diag)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!s || !o)
        return -EINVAL;
    double interval = o->interval == 0 ? 1.0 : o->interval;
    if (!isfinite(interval) || interval < 0)
        return blco_diag_set(diag, 0, -EINVAL,
                             "stats interval must be a positive number of "
                             "seconds");
    interval = BLCO_MAX(interval, 1e-3);

    struct blco_reporter *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->mu, NULL);
    r->s = s;
    r->interval = interval;
    r->t0 = blco_now();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    r->wall0 = (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec;
    r->progress = o->progress < 0 ? isatty(2) : o->progress != 0;
    r->progress_tty = isatty(2);
    if (gethostname(r->host, sizeof r->host - 1) != 0)
        r->host[0] = 0;
    residency_read(s, r->residency);

    sbuf_t lb = {0};
    sb_puts(&lb, "job=\"");
    sb_prom_label(&lb, s->job, strnlen(s->job, sizeof s->job));
    sb_putc(&lb, '"');
    snprintf(r->job_label, sizeof r->job_label, "%s", lb.p ? lb.p : "job=\"\"");
    free(lb.p);

    int err = 0;
    if (o->jsonl_path) {
        if (!(r->jsonl_path = strdup(o->jsonl_path))) {
            err = -ENOMEM;
            goto fail;
        }
        if (!strcmp(o->jsonl_path, "-")) {
            r->jsonl = stdout;
        } else {
            /* O_APPEND: a file truncated in place while the job runs (copytruncate
             * rotation) gets the next records at its new end, not after a hole of NULs. */
            int fd = open(o->jsonl_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666);
            if (fd < 0) {
                err = blco_diag_set(diag, 0, -errno, "cannot create %s: %s", o->jsonl_path,
                                    strerror(errno));
                goto fail;
            }
            if (!(r->jsonl = fdopen(fd, "w"))) {
                err = -errno;
                close(fd);
                goto fail;
            }
            r->jsonl_close = 1;
        }
    }
    if (o->prom_path) {
        size_t n = strlen(o->prom_path) + 32;
        r->prom_path = strdup(o->prom_path);
        r->prom_tmp = malloc(n);
        if (!r->prom_path || !r->prom_tmp) {
            err = -ENOMEM;
            goto fail;
        }
        snprintf(r->prom_tmp, n, "%s.tmp.%ld", o->prom_path, (long)getpid());
    }

    snap_t n;
    take(r, &n);
    r->base = n;
    rates_t none = {0};
    r->jsonl_logged = r->prom_logged = 1; /* a failure here goes to the diag, not the log */
    build_record(r, "start", REC_START, &n, &none, 0, NULL, NULL);
    if ((err = emit(r)) < 0) {
        blco_diag_set(diag, 0, err, "cannot write %s: %s", r->jsonl_path, blco_strerror(err));
        goto fail;
    }
    if ((err = prom_write(r, &n, 1, 0)) < 0) {
        blco_diag_set(diag, 0, err, "cannot create %s: %s", r->prom_path, blco_strerror(err));
        goto fail;
    }
    r->err = 0;
    r->jsonl_logged = r->prom_logged = 0;

    /* The thread takes no signals: they go to the job's own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int perr = pthread_create(&r->thread, NULL, reporter_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (perr) {
        err = -perr;
        goto fail;
    }
    r->started = 1;
    progress_draw(r, &n, &n, 0, 0);
    *out = r;
    return 0;
fail:
    if (r->jsonl_close && r->jsonl_path)
        unlink(r->jsonl_path);
    reporter_free(r);
    return err;
}

int blco_reporter_event(blco_reporter_t *r, const char *type, const char *extra_json)
{
    if (!r || !type || !*type)
        return -EINVAL;
    keys_t k;
    int err = extra_check(extra_json, &k);
    if (err < 0) {
        blco_log(BLCO_LOG_WARN, "stats event '%s': extra members are not valid JSON members", type);
        return err;
    }
    pthread_mutex_lock(&r->mu);
    snap_t n;
    take(r, &n);
    rates_t rt = rates_between(&n, &r->base);
    build_record(r, type, REC_PLAIN, &n, &rt, 0, extra_json, &k);
    err = emit(r);
    pthread_mutex_unlock(&r->mu);
    return err;
}

int blco_reporter_stop(blco_reporter_t *r, int status)
{
    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->started)
        pthread_join(r->thread, NULL);

    snap_t n, start = {0};
    take(r, &n);
    rates_t rt = rates_between(&n, &start); /* the final record's rates: over the whole run */
    residency_event(r, &n, &rt);
    build_record(r, "final", REC_FINAL, &n, &rt, status, NULL, NULL);
    emit(r);
    prom_write(r, &n, 0, status);
    progress_draw(r, &n, &start, 1, status);
    if (r->jsonl) {
        int bad = write_guarded(r->jsonl, NULL, 0, r->jsonl_close);
        r->jsonl = NULL;
        if (bad)
            note_error(r, bad, r->jsonl_path, &r->jsonl_logged);
    }
    int err = r->err;
    reporter_free(r);
    return err;
}
