/* The library's log: one callback, a level filter, stderr by default. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "blco_internal.h"

static void log_stderr(void *user, int level, const char *msg)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    (void)user;
    fprintf(stderr, "blco: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

static blco_log_fn log_fn = log_stderr;
static void *log_user;
static int log_max = BLCO_LOG_WARN;

void blco_log_set(blco_log_fn fn, void *user, int max_level)
{
    log_fn = fn ? fn : log_stderr;
    log_user = user;
    log_max = max_level;
}

void blco_log(int level, const char *fmt, ...)
{
    if (level > log_max)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(log_user, level, msg);
}

/* A message of n characters was written into d->msg: if it was cut, end it in "..." rather
 * than mid-word. */
static void diag_mark_cut(blco_diag_t *d, int n)
{
    if (n >= (int)sizeof d->msg)
        memcpy(d->msg + sizeof d->msg - 4, "...", 4);
}

int blco_diag_set(blco_diag_t *d, uint64_t line, int err, const char *fmt, ...)
{
    if (d) {
        d->line = line;
        va_list ap;
        va_start(ap, fmt);
        diag_mark_cut(d, vsnprintf(d->msg, sizeof d->msg, fmt, ap));
        va_end(ap);
    }
    return err;
}

void blco_diag_prefix(blco_diag_t *d, const char *prefix)
{
    if (!d)
        return;
    char m[sizeof d->msg];
    memcpy(m, d->msg, sizeof m);
    diag_mark_cut(d, snprintf(d->msg, sizeof d->msg, "%s%s", prefix, m));
}
