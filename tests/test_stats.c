/* The reporter: every JSON Lines record parses (strict validator here, and python3's json
 * when there is one), counters bumped from two threads add up in the final record, the
 * Prometheus textfile is complete and well formed, odd paths are escaped, events are checked,
 * stop is prompt, and files that cannot be created give -errno with the path in the diag. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"

static char dir[256];

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    size_t n;
    while (b && (n = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    fclose(f);
    if (b)
        b[len] = 0;
    return b;
}

static void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- a strict JSON validator (RFC 8259), UTF-8 included ---- */
static const char *v_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *v_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (;;) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                        return NULL;
                p += 5;
            } else if (*p && strchr("\"\\/bfnrt", *p)) {
                p++;
            } else {
                return NULL;
            }
            continue;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        int len = c >= 0xc2 && c <= 0xdf   ? 2
                  : (c & 0xf0) == 0xe0     ? 3
                  : c >= 0xf0 && c <= 0xf4 ? 4
                                           : 0;
        if (!len)
            return NULL;
        unsigned cp = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
        for (int i = 1; i < len; i++) {
            if (((unsigned char)p[i] & 0xc0) != 0x80)
                return NULL;
            cp = cp << 6 | ((unsigned char)p[i] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return NULL;
        p += len;
    }
}

static const char *v_digits(const char *p)
{
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p >= '0' && *p <= '9')
        p++;
    return p;
}

static const char *v_value(const char *p, int depth)
{
    if (depth > 64)
        return NULL;
    p = v_ws(p);
    if (*p == '"')
        return v_string(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = v_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = v_string(v_ws(p))))
                    return NULL;
                p = v_ws(p);
                if (*p++ != ':')
                    return NULL;
            }
            if (!(p = v_value(p, depth + 1)))
                return NULL;
            p = v_ws(p);
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
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (!(p = v_digits(p)))
        return NULL;
    if (*p == '.' && !(p = v_digits(p + 1)))
        return NULL;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(p = v_digits(p)))
            return NULL;
    }
    return p;
}

/* One JSON object and nothing else on the line. */
static int json_object(const char *line)
{
    const char *p = v_ws(line);
    if (*p != '{' || !(p = v_value(p, 0)))
        return 0;
    return *v_ws(p) == 0;
}

/* The number after "key": in a record of ours (keys used here appear once). */
static int get_u64(const char *line, const char *key, uint64_t *out)
{
    char k[80];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    if (!p)
        return 0;
    p += strlen(k);
    if (*p < '0' || *p > '9')
        return 0;
    *out = strtoull(p, NULL, 10);
    return 1;
}

static int get_num(const char *line, const char *key, double *out)
{
    char k[80];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    if (!p)
        return 0;
    char *end;
    *out = strtod(p + strlen(k), &end);
    return end != p + strlen(k);
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Splits a file into lines (in place); returns how many. */
static int split_lines(char *text, char **lines, int max)
{
    int n = 0;
    for (char *p = text; *p && n < max;) {
        char *nl = strchr(p, '\n');
        lines[n++] = p;
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    return n;
}

/* ---- the Prometheus text exposition format ---- */
static int metric_name(const char **pp)
{
    const char *p = *pp;
    if (!(*p == '_' || *p == ':' || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')))
        return 0;
    while (*p == '_' || *p == ':' || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z') ||
           (*p >= '0' && *p <= '9'))
        p++;
    *pp = p;
    return 1;
}

/* Checks every line; returns 0 or the 1-based number of the first bad line. */
static int prom_check(const char *text)
{
    char typed[64][64];
    int ntyped = 0, line = 0;
    if (!*text || text[strlen(text) - 1] != '\n')
        return -1;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        line++;
        char l[2048];
        size_t n = (size_t)(nl - p);
        if (n >= sizeof l || n == 0)
            return line;
        memcpy(l, p, n);
        l[n] = 0;
        p = nl + 1;
        if (!strncmp(l, "# HELP ", 7) || !strncmp(l, "# TYPE ", 7)) {
            const char *q = l + 7, *name = q;
            if (!metric_name(&q) || *q != ' ')
                return line;
            if (l[2] == 'T') {
                if (strcmp(q + 1, "counter") && strcmp(q + 1, "gauge"))
                    return line;
                if (ntyped == 64 || (size_t)(q - name) >= 64)
                    return line;
                memcpy(typed[ntyped], name, (size_t)(q - name));
                typed[ntyped++][q - name] = 0;
            }
            continue;
        }
        if (l[0] == '#')
            continue;
        const char *q = l;
        if (!metric_name(&q))
            return line;
        int known = 0;
        for (int i = 0; i < ntyped; i++)
            known |= strlen(typed[i]) == (size_t)(q - l) && !strncmp(typed[i], l, (size_t)(q - l));
        if (!known)
            return line; /* a sample before its # TYPE */
        if (*q == '{') {
            q++;
            while (*q != '}') {
                if (!(*q == '_' || ((*q | 0x20) >= 'a' && (*q | 0x20) <= 'z')))
                    return line;
                while (*q == '_' || ((*q | 0x20) >= 'a' && (*q | 0x20) <= 'z') ||
                       (*q >= '0' && *q <= '9'))
                    q++;
                if (*q++ != '=' || *q++ != '"')
                    return line;
                while (*q != '"') {
                    if (!*q)
                        return line;
                    if (*q == '\\') {
                        q++;
                        if (*q != '\\' && *q != '"' && *q != 'n')
                            return line;
                    }
                    q++;
                }
                q++;
                if (*q == ',')
                    q++;
                else if (*q != '}')
                    return line;
            }
            q++;
        }
        if (*q++ != ' ')
            return line;
        char *end;
        double v = strtod(q, &end);
        if (end == q || *end || isnan(v))
            return line;
    }
    return 0;
}

static double prom_value(const char *text, const char *sample)
{
    char k[256];
    snprintf(k, sizeof k, "\n%s ", sample);
    const char *p = strstr(text, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

static int count_temps(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static int have_python(void)
{
    return access("/usr/bin/python3", X_OK) == 0;
}

/* python3's json module agrees that every line is one JSON object. */
static int python_parses(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import json,sys\n"
             "for l in open(sys.argv[1], encoding=\"utf-8\"):\n"
             "    assert isinstance(json.loads(l), dict)' '%s'",
             path);
    return system(cmd) == 0;
}

static int warnings;

static void count_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)msg;
    warnings += level == BLCO_LOG_WARN;
}

/* ---- counters from two threads ---- */
#define BUMPS 2000
static blco_stats_t st;

static void *bump(void *arg)
{
    (void)arg;
    for (int i = 0; i < BUMPS; i++) {
        blco_stat_add(&st.bytes_read, 4096);
        blco_stat_add(&st.read_requests, 1);
        blco_stat_add(&st.segments_verified, 1);
        blco_stat_add(&st.segments_decoded, 1);
        blco_stat_add(&st.nnz_computed, 1000);
        for (int s = 0; s < BLCO_STAGE_COUNT; s++) {
            blco_stat_add(&st.busy_ns[s], 1000 + (uint64_t)s);
            blco_stat_add(&st.wait_ns[s], 500);
        }
        blco_stat_set(&st.slots_busy, (uint64_t)(i % 8));
        if (i % 10 == 0)
            msleep(1);
    }
    return NULL;
}

static void test_run(void)
{
    blco_stats_init(&st);
    snprintf(st.job, sizeof st.job, "cpd");
    snprintf(st.path, sizeof st.path, "/data/x.blco");
    snprintf(st.io_backend, sizeof st.io_backend, "pread x4");
    snprintf(st.residency, sizeof st.residency, "streamed");
    st.file_bytes = 123456;
    st.data_bytes = 100000;
    st.nnz = 1000000;
    st.nsegments = 40;
    st.slots_total = 8;
    st.slot_bytes = 1 << 20;
    st.mem_limit = 1ull << 30;
    st.work_total = 2ull * BUMPS * 1000;

    char jl[512], pr[512];
    path_in(jl, sizeof jl, "run.jsonl");
    path_in(pr, sizeof pr, "run.prom");
    blco_reporter_opts_t o;
    blco_reporter_opts_default(&o);
    o.interval = 0.02;
    o.jsonl_path = jl;
    o.prom_path = pr;
    o.progress = 0;
    blco_reporter_t *r = NULL;
    blco_diag_t diag = {0};
    int err = blco_reporter_start(&st, &o, &r, &diag);
    CHECK(err == 0 && r, "start: %s %s", blco_strerror(err), diag.msg);
    if (err)
        return;

    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, bump, NULL);
    blco_stat_set_int(&st.iteration, 1);
    blco_stat_set_int(&st.mode, 2);
    double fit = 0.5;
    uint64_t bits;
    memcpy(&bits, &fit, 8);
    blco_stat_set(&st.fit_bits, bits);
    msleep(30);
    err = blco_reporter_event(r, "iteration", "\"fit\":0.5, \"delta\":0.25 ,\n \"note\":[1,{}]");
    CHECK(err == 0, "event: %s", blco_strerror(err));
    CHECK(blco_reporter_event(r, "mode", NULL) == 0, "event without extra");
    CHECK(blco_reporter_event(r, "mode", "  ") == 0, "event with blank extra");
    static const char *const bad[] = {
        "\"fit\":nan",     "\"fit\":NaN", "\"a\":1,", "\"a\"",          "{\"a\":1}",
        "\"type\":\"x\"",  "\"t\":1",     "\"a\":01", "\"a\":\"\x01\"", "\"a\":\"\xff\"",
        "\"a\":1 \"b\":2", "\"a\":[1,]",  "\"a\":inf"};
    blco_log_set(count_log, NULL, BLCO_LOG_WARN);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(blco_reporter_event(r, "bad", bad[i]) == -EINVAL, "extra '%s' accepted", bad[i]);
    CHECK(warnings == (int)(sizeof bad / sizeof bad[0]), "%d warnings", warnings);
    blco_log_set(NULL, NULL, BLCO_LOG_WARN);
    CHECK(blco_reporter_event(r, NULL, NULL) == -EINVAL, "NULL type");
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    blco_stat_add(&st.passes, 3);
    blco_stat_add(&st.fallbacks, 1);
    err = blco_reporter_stop(r, 0);
    CHECK(err == 0, "stop: %s", blco_strerror(err));

    char *text = slurp(jl);
    CHECK(text && text[strlen(text) - 1] == '\n', "JSONL ends with a newline");
    if (!text)
        return;
    static char *lines[100000];
    int n = split_lines(text, lines, 100000);
    if (n && !*lines[n - 1])
        n--;
    int samples = 0, iterations = 0, bads = 0;
    uint64_t last_nnz = 0;
    double last_t = -1;
    for (int i = 0; i < n; i++) {
        const char *l = lines[i];
        CHECK(json_object(l), "line %d is not one JSON object: %s", i + 1, l);
        CHECK(!strstr(l, "nan") && !strstr(l, "inf"), "line %d: %s", i + 1, l);
        uint64_t v = 0;
        double t = -2;
        CHECK(get_u64(l, "nnz_computed", &v) && v >= last_nnz, "line %d: nnz_computed", i + 1);
        last_nnz = v;
        CHECK(get_num(l, "t", &t) && t >= last_t, "line %d: t %g after %g", i + 1, t, last_t);
        last_t = t;
        CHECK(count_of(l, "\"fit\":") == 1, "line %d: one fit: %s", i + 1, l);
        samples += !strncmp(l, "{\"type\":\"sample\"", 16);
        bads += !strncmp(l, "{\"type\":\"bad\"", 13);
        if (!strncmp(l, "{\"type\":\"iteration\"", 19)) {
            iterations++;
            CHECK(strstr(l, "\"fit\":0.5, \"delta\":0.25 ,  \"note\":[1,{}]}"), "extra: %s", l);
            CHECK(strstr(l, "\"iteration\":1,\"mode\":2,"), "iteration and mode: %s", l);
        }
    }
    CHECK(n >= 5, "only %d records", n);
    CHECK(n && !strncmp(lines[0], "{\"type\":\"start\",\"t\":", 20), "first: %s", lines[0]);
    CHECK(n && strstr(lines[0], "\"job\":\"cpd\",\"path\":\"/data/x.blco\",\"io\":\"pread x4\","
                                "\"residency\":\"streamed\",\"file_bytes\":123456,"
                                "\"data_bytes\":100000,\"nnz\":1000000,\"nsegments\":40,"
                                "\"slots_total\":8,\"slot_bytes\":1048576,"
                                "\"mem_limit\":1073741824"),
          "start describes the job: %s", lines[0]);
    CHECK(samples >= 3, "%d samples at 20 ms over ~200 ms", samples);
    CHECK(iterations == 1 && bads == 0, "%d iteration events, %d bad ones", iterations, bads);

    const char *fin = n ? lines[n - 1] : "";
    CHECK(!strncmp(fin, "{\"type\":\"final\"", 15), "last: %s", fin);
    uint64_t v;
    CHECK(get_u64(fin, "bytes_read", &v) && v == 2ull * BUMPS * 4096, "bytes_read %llu",
          (unsigned long long)v);
    CHECK(get_u64(fin, "read_requests", &v) && v == 2ull * BUMPS, "read_requests");
    CHECK(get_u64(fin, "segments_verified", &v) && v == 2ull * BUMPS, "segments_verified");
    CHECK(get_u64(fin, "segments_decoded", &v) && v == 2ull * BUMPS, "segments_decoded");
    CHECK(get_u64(fin, "nnz_computed", &v) && v == 2ull * BUMPS * 1000, "nnz_computed");
    CHECK(get_u64(fin, "work_done", &v) && v == 2ull * BUMPS * 1000, "work_done");
    CHECK(get_u64(fin, "work_total", &v) && v == 2ull * BUMPS * 1000, "work_total");
    CHECK(get_u64(fin, "passes", &v) && v == 3, "passes");
    CHECK(get_u64(fin, "fallbacks", &v) && v == 1, "fallbacks");
    CHECK(get_u64(fin, "status", &v) && v == 0 && !strstr(fin, "\"error\""), "status");
    CHECK(strstr(fin, "\"eta_s\":0,"), "eta 0 when all work is done: %s", fin);
    CHECK(strstr(fin, "\"fit\":0.5"), "fit");
    CHECK(strstr(fin, "\"job\":\"cpd\""), "final describes the job");
    double busy = -1, wait = -1, el = -1;
    const char *bp = strstr(fin, "\"busy_s\":{\"read\":");
    if (bp)
        busy = strtod(bp + 17, NULL);
    const char *wp = strstr(fin, "\"wait_s\":{\"read\":");
    if (wp)
        wait = strtod(wp + 17, NULL);
    CHECK(fabs(busy - 2.0 * BUMPS * 1000 * 1e-9) < 1e-12, "busy_s.read %g", busy);
    CHECK(fabs(wait - 2.0 * BUMPS * 500 * 1e-9) < 1e-12, "wait_s.read %g", wait);
    const char *cp = bp ? strstr(bp, "\"compute\":") : NULL;
    double comp = cp ? strtod(cp + 10, NULL) : -1;
    CHECK(comp == 2.0 * BUMPS * 1003 * 1e-9 || fabs(comp - 0.004012) < 1e-15,
          "busy_s.compute %.17g", comp);
    CHECK(get_num(fin, "elapsed_s", &el) && el > 0.1 && el < 60, "elapsed_s %g", el);
    CHECK(strstr(fin, "\"rates\":{\"read_Bps\":") && !strstr(fin, "\"read_Bps\":null"),
          "final rates over the run");
    if (have_python())
        CHECK(python_parses(jl), "python3 json.loads refuses %s", jl);
    free(text);

    /* The textfile: complete, no temporary left, the final values. */
    CHECK(count_temps() == 0, "%d temporary files left", count_temps());
    char *prom = slurp(pr);
    CHECK(prom != NULL, "no %s", pr);
    if (!prom)
        return;
    int badl = prom_check(prom);
    CHECK(badl == 0, "Prometheus textfile line %d is malformed:\n%s", badl, prom);
    CHECK(prom_value(prom, "blco_bytes_read_total{job=\"cpd\"}") == 2.0 * BUMPS * 4096,
          "blco_bytes_read_total");
    CHECK(prom_value(prom, "blco_nnz_computed_total{job=\"cpd\"}") == 2.0 * BUMPS * 1000,
          "blco_nnz_computed_total");
    CHECK(prom_value(prom, "blco_segments_decoded_total{job=\"cpd\"}") == 2.0 * BUMPS,
          "blco_segments_decoded_total");
    CHECK(prom_value(prom, "blco_passes_total{job=\"cpd\"}") == 3, "blco_passes_total");
    CHECK(prom_value(prom, "blco_fallbacks_total{job=\"cpd\"}") == 1, "blco_fallbacks_total");
    CHECK(prom_value(prom, "blco_slots_total{job=\"cpd\"}") == 8, "blco_slots_total");
    CHECK(prom_value(prom, "blco_fit{job=\"cpd\"}") == 0.5, "blco_fit");
    CHECK(prom_value(prom, "blco_progress_ratio{job=\"cpd\"}") == 1, "blco_progress_ratio");
    CHECK(prom_value(prom, "blco_running{job=\"cpd\"}") == 0, "blco_running");
    CHECK(prom_value(prom, "blco_work_total{job=\"cpd\"}") == 2.0 * BUMPS * 1000,
          "blco_work_total");
    for (int s = 0; s < BLCO_STAGE_COUNT; s++) {
        char k[128];
        snprintf(k, sizeof k, "blco_stage_wait_seconds_total{job=\"cpd\",stage=\"%s\"}",
                 blco_stage_name(s));
        CHECK(fabs(prom_value(prom, k) - 2.0 * BUMPS * 500 * 1e-9) < 1e-12, "%s", k);
        snprintf(k, sizeof k, "blco_stage_busy_seconds_total{job=\"cpd\",stage=\"%s\"}",
                 blco_stage_name(s));
        CHECK(fabs(prom_value(prom, k) - 2.0 * BUMPS * (1000 + s) * 1e-9) < 1e-12, "%s", k);
    }
    CHECK(strstr(prom, "# HELP blco_bytes_read_total ") &&
              strstr(prom, "# TYPE blco_bytes_read_total counter\n") &&
              strstr(prom, "# TYPE blco_slots_busy gauge\n"),
          "HELP and TYPE lines");
    free(prom);
}

/* Quotes, backslashes, control characters and bytes that are not UTF-8 in the strings; a
 * stop that does not wait for the interval. */
static void test_escaping_and_prompt_stop(void)
{
    blco_stats_t s;
    blco_stats_init(&s);
    snprintf(s.job, sizeof s.job, "c\"p\\d\n");
    snprintf(s.path, sizeof s.path,
             "dir/a\"b\\c\nd\te\x01"
             "f \xc3\xa9 \xff.blco");
    snprintf(s.io_backend, sizeof s.io_backend, "x\ry");
    char jl[512], pr[512];
    path_in(jl, sizeof jl, "odd \"name\".jsonl");
    path_in(pr, sizeof pr, "odd.prom");
    blco_reporter_opts_t o;
    blco_reporter_opts_default(&o);
    o.interval = 5;
    o.jsonl_path = jl;
    o.prom_path = pr;
    o.progress = 0;
    blco_reporter_t *r = NULL;
    blco_diag_t diag = {0};
    int err = blco_reporter_start(&s, &o, &r, &diag);
    CHECK(err == 0, "start: %s %s", blco_strerror(err), diag.msg);
    if (err)
        return;
    msleep(20);
    double t0 = blco_now();
    err = blco_reporter_stop(r, 0);
    double took = blco_now() - t0;
    CHECK(err == 0, "stop: %s", blco_strerror(err));
    CHECK(took < 1.0, "stop took %.3f s with a 5 s interval", took);

    char *text = slurp(jl);
    CHECK(text != NULL, "no %s", jl);
    if (!text)
        return;
    char *lines[8];
    int n = split_lines(text, lines, 8);
    CHECK(n == 2, "start and final only: %d lines", n);
    for (int i = 0; i < 2 && i < n; i++) {
        CHECK(json_object(lines[i]), "line %d: %s", i + 1, lines[i]);
        CHECK(strstr(lines[i], "\"job\":\"c\\\"p\\\\d\\n\",\"path\":\"dir/a\\\"b\\\\c\\nd\\te"
                               "\\u0001f \xc3\xa9 \\ufffd.blco\",\"io\":\"x\\ry\""),
              "escaped strings: %s", lines[i]);
    }
    if (have_python())
        CHECK(python_parses(jl), "python3 json.loads refuses %s", jl);
    free(text);

    char *prom = slurp(pr);
    CHECK(prom && prom_check(prom) == 0, "Prometheus textfile:\n%s", prom ? prom : "(none)");
    CHECK(prom && strstr(prom, "blco_running{job=\"c\\\"p\\\\d\\n\"} 0\n"), "job label escaped");
    CHECK(prom && strstr(prom, ",path=\"dir/a\\\"b\\\\c\\nd\xef\xbf\xbd"
                               "e\xef\xbf\xbd"
                               "f "
                               "\xc3\xa9 \xef\xbf\xbd.blco\","),
          "path label escaped");
    CHECK(prom && !strstr(prom, "blco_fit{") && !strstr(prom, "blco_progress_ratio{") &&
              !strstr(prom, "blco_eta_seconds{"),
          "no samples for unknown values");
    free(prom);
    CHECK(count_temps() == 0, "temporary files left");
}

/* The progress line on stderr (redirected to a file), and a failed run's final record. */
static void test_progress_and_failure(void)
{
    blco_stats_t s;
    blco_stats_init(&s);
    snprintf(s.job, sizeof s.job, "mttkrp");
    s.work_total = 100;
    s.slots_total = 4;
    char jl[512], pe[512];
    path_in(jl, sizeof jl, "fail.jsonl");
    path_in(pe, sizeof pe, "progress.txt");
    fflush(stderr);
    int saved = dup(2);
    int fd = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    CHECK(saved >= 0 && fd >= 0, "redirect stderr");
    if (saved < 0 || fd < 0)
        return;
    dup2(fd, 2);
    close(fd);
    blco_reporter_opts_t o;
    blco_reporter_opts_default(&o);
    o.interval = 0.01;
    o.jsonl_path = jl;
    o.progress = 1;
    blco_reporter_t *r = NULL;
    int err = blco_reporter_start(&s, &o, &r, NULL);
    if (err == 0) {
        blco_stat_add(&s.nnz_computed, 50);
        blco_stat_add(&s.wait_ns[BLCO_STAGE_READ], 5000000);
        msleep(60);
        err = blco_reporter_stop(r, -BLCO_ECANCELED);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK(err == 0, "run: %s", blco_strerror(err));

    char *p = slurp(pe);
    CHECK(p && strchr(p, '\r') && strstr(p, "mttkrp  50.0%") && strstr(p, "failed in") &&
              strstr(p, "compute-bound: reader idle") && strstr(p, "slots 0/4"),
          "progress line: %s", p ? p : "(none)");
    CHECK(p && p[0] && p[strlen(p) - 1] == '\n' && !strchr(p, '\n')[1], "one final newline");
    free(p);

    char *text = slurp(jl);
    const char *fin = text ? strstr(text, "{\"type\":\"final\"") : NULL;
    char want[64];
    snprintf(want, sizeof want, "\"status\":%d,\"error\":\"canceled\"", -BLCO_ECANCELED);
    CHECK(fin && strstr(fin, want) && json_object(strtok((char *)fin, "\n")),
          "final of a failed run: %s", fin ? fin : "(none)");
    free(text);
}

static void test_errors(void)
{
    blco_stats_t s;
    blco_stats_init(&s);
    blco_reporter_opts_t o;
    blco_reporter_opts_default(&o);
    CHECK(o.interval == 1.0 && o.progress == -1 && !o.jsonl_path && !o.prom_path, "defaults");
    o.progress = 0;
    blco_reporter_t *r = (blco_reporter_t *)&s;
    blco_diag_t diag = {0};

    const char *missing = "/nonexistent-blco-dir/x.jsonl";
    o.jsonl_path = missing;
    int err = blco_reporter_start(&s, &o, &r, &diag);
    CHECK(err == -ENOENT && r == NULL, "missing dir: %s", blco_strerror(err));
    CHECK(strstr(diag.msg, missing) != NULL, "diag names the file: %s", diag.msg);

    char jl[512];
    path_in(jl, sizeof jl, "err.jsonl");
    o.jsonl_path = jl;
    o.prom_path = "/nonexistent-blco-dir/x.prom";
    memset(&diag, 0, sizeof diag);
    err = blco_reporter_start(&s, &o, &r, &diag);
    CHECK(err == -ENOENT && r == NULL, "prom in a missing dir: %s", blco_strerror(err));
    CHECK(strstr(diag.msg, "/nonexistent-blco-dir/x.prom") != NULL, "diag: %s", diag.msg);
    CHECK(access(jl, F_OK) != 0, "the JSONL file of a failed start is removed");

    o.prom_path = NULL;
    o.jsonl_path = dir; /* a directory */
    memset(&diag, 0, sizeof diag);
    err = blco_reporter_start(&s, &o, &r, &diag);
    CHECK(err == -EISDIR && strstr(diag.msg, dir), "a directory: %s", diag.msg);

    if (geteuid() != 0) {
        char ro[512], p[600];
        path_in(ro, sizeof ro, "ro");
        mkdir(ro, 0500);
        snprintf(p, sizeof p, "%s/x.prom", ro);
        o.jsonl_path = NULL;
        o.prom_path = p;
        memset(&diag, 0, sizeof diag);
        err = blco_reporter_start(&s, &o, &r, &diag);
        CHECK(err == -EACCES && strstr(diag.msg, p), "read-only dir: %s", diag.msg);
        rmdir(ro);
    }

    /* A reader that goes away: EPIPE from the writes, no SIGPIPE killing the job. */
    int pfd[2];
    if (pipe(pfd) == 0) {
        char pp[64];
        snprintf(pp, sizeof pp, "/dev/fd/%d", pfd[1]);
        o.jsonl_path = pp;
        o.prom_path = NULL;
        blco_log_set(count_log, NULL, BLCO_LOG_WARN);
        warnings = 0;
        err = blco_reporter_start(&s, &o, &r, &diag);
        CHECK(err == 0, "start on a pipe: %s", diag.msg);
        if (err == 0) {
            close(pfd[0]);
            pfd[0] = -1;
            CHECK(blco_reporter_event(r, "x", NULL) == -EPIPE, "event to a closed pipe");
            CHECK(blco_reporter_stop(r, 0) == -EPIPE, "stop reports the write error");
            CHECK(warnings == 1, "one warning for the failed writes, got %d", warnings);
        }
        blco_log_set(NULL, NULL, BLCO_LOG_WARN);
        if (pfd[0] >= 0)
            close(pfd[0]);
        close(pfd[1]);
    }

    o.jsonl_path = o.prom_path = NULL;
    o.interval = -1;
    CHECK(blco_reporter_start(&s, &o, &r, NULL) == -EINVAL, "negative interval");
    o.interval = NAN;
    CHECK(blco_reporter_start(&s, &o, &r, NULL) == -EINVAL, "NaN interval");
    o.interval = 0; /* the default: 1 s */
    CHECK(blco_reporter_start(NULL, &o, &r, NULL) == -EINVAL, "NULL stats");
    CHECK(blco_reporter_start(&s, NULL, &r, NULL) == -EINVAL, "NULL opts");
    CHECK(blco_reporter_start(&s, &o, NULL, NULL) == -EINVAL, "NULL out");
    /* no outputs at all is fine, and stop does not wait for the 1 s interval */
    err = blco_reporter_start(&s, &o, &r, NULL);
    double t0 = blco_now();
    CHECK(err == 0 && blco_reporter_stop(r, 0) == 0 && blco_now() - t0 < 0.5, "no outputs");
    CHECK(blco_reporter_stop(NULL, 0) == 0, "stop(NULL)");

    CHECK(!strcmp(blco_stage_name(BLCO_STAGE_READ), "read") &&
              !strcmp(blco_stage_name(BLCO_STAGE_VERIFY), "verify") &&
              !strcmp(blco_stage_name(BLCO_STAGE_DECODE), "decode") &&
              !strcmp(blco_stage_name(BLCO_STAGE_COMPUTE), "compute") &&
              !strcmp(blco_stage_name(BLCO_STAGE_COUNT), "unknown") &&
              !strcmp(blco_stage_name(-1), "unknown"),
          "stage names");
}

/* The residency decided while the reporter runs is published in a "residency" record and
 * the final one; start and final records name the writer's pid and host; the progress
 * line is erased around the caller's output and drawn again after it. */
static void test_residency_pid_and_suspend(void)
{
    blco_stats_t s;
    blco_stats_init(&s);
    snprintf(s.job, sizeof s.job, "cpd");
    blco_stats_set_residency(&s, "decided on the first pass");
    char jl[512], err_path[512];
    path_in(jl, sizeof jl, "res.jsonl");
    path_in(err_path, sizeof err_path, "res.err");
    blco_reporter_opts_t o;
    blco_reporter_opts_default(&o);
    o.interval = 0.02;
    o.jsonl_path = jl;
    o.progress = 1;
    fflush(stderr);
    int saved = dup(2);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    dup2(fd, 2);
    close(fd);
    blco_reporter_t *r = NULL;
    blco_diag_t diag = {0};
    int err = blco_reporter_start(&s, &o, &r, &diag);
    if (err == 0) {
        msleep(60);
        blco_stats_set_residency(&s, "partial: 10% resident, rest streamed");
        msleep(80);
        blco_reporter_suspend(r);
        fprintf(stderr, "ROW\n");
        blco_reporter_resume(r);
        err = blco_reporter_stop(r, 0);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK(err == 0, "run: %s %s", blco_strerror(err), diag.msg);
    char *text = slurp(jl);
    CHECK(text != NULL, "no %s", jl);
    if (text) {
        char host[256] = "", want[400];
        gethostname(host, sizeof host - 1);
        snprintf(want, sizeof want, "\"pid\":%ld,\"host\":\"%s\"", (long)getpid(), host);
        const char *res = strstr(text, "{\"type\":\"residency\"");
        CHECK(strstr(text, want) && strstr(strstr(text, want) + 1, want),
              "pid and host %s in start and final:\n%s", want, text);
        CHECK(res && strstr(res, "\"residency\":\"partial: 10% resident, rest streamed\"}\n"),
              "a residency record:\n%s", text);
        const char *fin = strstr(text, "{\"type\":\"final\"");
        CHECK(fin && strstr(fin, "\"residency\":\"partial: 10% resident, rest streamed\""),
              "the final record's residency:\n%s", text);
        free(text);
    }
    char *e = slurp(err_path);
    /* "\r<spaces>\rROW\n" then the line again: the row starts a line of its own */
    CHECK(e && strstr(e, "\rROW\ncpd") && !strstr(e, "%ROW") && !strstr(e, "sROW"),
          "progress line around a row: %s", e ? e : "(none)");
    free(e);
}

/* A JSON Lines file truncated in place while the job runs (logrotate's copytruncate): the
 * next records start the file again, with no hole of NUL bytes before them (O_APPEND). */
static void test_truncated_in_place(void)
{
    blco_stats_t s;
    blco_stats_init(&s);
    snprintf(s.job, sizeof s.job, "cpd");
    char jl[512];
    path_in(jl, sizeof jl, "rotated.jsonl");
    blco_reporter_opts_t o;
    blco_reporter_opts_default(&o);
    o.interval = 60;
    o.jsonl_path = jl;
    o.progress = 0;
    blco_reporter_t *r = NULL;
    blco_diag_t diag = {0};
    int err = blco_reporter_start(&s, &o, &r, &diag);
    CHECK(err == 0, "start: %s %s", blco_strerror(err), diag.msg);
    if (err)
        return;
    CHECK(blco_reporter_event(r, "before", NULL) == 0, "event before");
    CHECK(truncate(jl, 0) == 0, "truncate %s", jl);
    CHECK(blco_reporter_event(r, "after", NULL) == 0, "event after");
    CHECK(blco_reporter_stop(r, 0) == 0, "stop");
    FILE *f = fopen(jl, "rb");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    CHECK(n > 0 && !memchr(buf, 0, n), "NUL bytes in the truncated file (%zu bytes)", n);
    const char *want = "{\"type\":\"after\",";
    CHECK(!strncmp(buf, want, strlen(want)), "the file after truncation starts: %.60s", buf);
    CHECK(strstr(buf, "\n{\"type\":\"final\"") != NULL, "no final record after truncation");
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/blco-stats-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_run();
    test_escaping_and_prompt_stop();
    test_progress_and_failure();
    test_errors();
    test_residency_pid_and_suspend();
    test_truncated_in_place();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done();
}
