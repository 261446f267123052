/* A tiny check harness for the C test programs: CHECK() records a failure with file:line
 * and goes on; check_done() prints "N passed, N failed" and gives the exit status. */
#ifndef BLCO_TEST_CHECK_H
#define BLCO_TEST_CHECK_H

#include <stdio.h>

static int check_pass, check_fail;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond) {                                                                        \
            check_pass++;                                                                  \
        } else {                                                                           \
            check_fail++;                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
        }                                                                                  \
    } while (0)

static inline int check_done(void)
{
    printf("%d passed, %d failed\n", check_pass, check_fail);
    return check_fail ? 1 : 0;
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
