/* The CP-ALS tests under a chosen OpenBLAS core type (OPENBLAS_CORETYPE, set by meson for
 * the *_haswell and *_sandybridge runs): kernels of another CPU family sum in another order,
 * and results near the rounding floor must hold whichever runs. Call first in main. */
#ifndef BLCO_TEST_BLAS_CORETYPE_H
#define BLCO_TEST_BLAS_CORETYPE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* Returns 0 to go on, or 77 (skip) when a core type is asked for that this machine cannot
 * run (its instructions are missing) or that cannot be chosen (the BLAS is not OpenBLAS, or
 * an OpenBLAS built for one CPU only). Prints the core type that runs. */
static inline int blas_coretype_check(void)
{
    const char *want = getenv("OPENBLAS_CORETYPE");
    char *(*corename)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (!want || !*want) {
        if (corename)
            printf("OpenBLAS core type: %s (default)\n", corename());
        return 0;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int can = !strcasecmp(want, "Haswell")
                  ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
              : !strcasecmp(want, "Sandybridge") ? __builtin_cpu_supports("avx")
                                                 : 0;
#else
    int can = 0;
#endif
    if (!can) {
        printf("skipped: OPENBLAS_CORETYPE=%s is not tested on this CPU\n", want);
        return 77;
    }
    if (!corename) {
        printf("skipped: the BLAS is not OpenBLAS (OPENBLAS_CORETYPE=%s means nothing)\n", want);
        return 77;
    }
    const char *got = corename();
    if (!got || strcasecmp(got, want)) {
        printf("skipped: OPENBLAS_CORETYPE=%s asked, OpenBLAS runs %s (a build for one CPU)\n",
               want, got ? got : "?");
        return 77;
    }
    printf("OpenBLAS core type: %s (OPENBLAS_CORETYPE)\n", got);
    return 0;
}

#endif
