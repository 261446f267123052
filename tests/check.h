/* A tiny check harness for the C test programs: CHECK() records a failure with file:line
 * and goes on; check_done() repeats the first failures (so the tail of a long, noisy log,
 * which is all a CI report may show, still names them), prints "N passed, N failed" and
 * gives the exit status. */
#ifndef BLCO_TEST_CHECK_H
#define BLCO_TEST_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int check_pass, check_fail;
static char check_first[8][512]; /* the first failures, repeated by check_done */

static inline void check_failed(const char *file, int line, const char *cond, const char *fmt,
                                ...) __attribute__((format(printf, 4, 5)));
static inline void check_failed(const char *file, int line, const char *cond, const char *fmt,
                                ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, cond, msg);
    if (check_fail < 8)
        snprintf(check_first[check_fail], sizeof check_first[0], "%s:%d: %s", file, line, msg);
    check_fail++;
}

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond) {                                                                        \
            check_pass++;                                                                  \
        } else {                                                                           \
            check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);                          \
        }                                                                                  \
    } while (0)

static inline int check_done(void)
{
    fflush(stdout);
    for (int i = 0; i < check_fail && i < 8; i++)
        fprintf(stderr, "FAILED %s\n", check_first[i]);
    if (check_fail > 8)
        fprintf(stderr, "FAILED ... and %d more (above)\n", check_fail - 8);
    printf("%d passed, %d failed\n", check_pass, check_fail);
    return check_fail ? 1 : 0;
}

/* check_part("name") ends the part before (printing its seconds and checks) and starts one
 * named so; check_part(NULL) ends the last. A long test's log then says where its time went,
 * which is what a CI run that ran out of time leaves to go on. */
static inline void check_part(const char *name)
{
    static struct timespec t0;
    static char cur[64];
    static int pass0;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (cur[0])
        printf("[part %s: %.1f s, %d checks]\n", cur,
               (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec),
               check_pass + check_fail - pass0);
    fflush(stdout);
    snprintf(cur, sizeof cur, "%s", name ? name : "");
    t0 = t;
    pass0 = check_pass + check_fail;
}

/* splitmix64: a seeded generator for test inputs. */
static inline uint64_t check_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform [0, 1) from check_rand. */
static inline double check_urand(uint64_t *s)
{
    return (double)(check_rand(s) >> 11) * 0x1.0p-53;
}

#endif
