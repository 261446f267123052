/* Shared by the fuzz targets: an invariant check that aborts (so libFuzzer and the replay
 * test both report it, whatever NDEBUG says) and a silenced library log. */
#ifndef BLCO_FUZZ_COMMON_H
#define BLCO_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "blco.h"

#define FUZZ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FUZZ_MAX(a, b) ((a) > (b) ? (a) : (b))

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void fuzz_log_drop(void *user, int level, const char *msg)
{
    (void)user, (void)level, (void)msg;
}

/* Rejected inputs are the normal case here: keep the library's warnings off stderr. */
static inline void fuzz_quiet(void)
{
    static int done;
    if (!done) {
        blco_log_set(fuzz_log_drop, NULL, BLCO_LOG_ERROR);
        done = 1;
    }
}

#endif
