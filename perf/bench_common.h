/* What every benchmark says about the machine it ran on. */
#ifndef BLCO_BENCH_COMMON_H
#define BLCO_BENCH_COMMON_H

#include <stddef.h>

/* The CPU model from /proc/cpuinfo ("unknown" if absent), safe inside a JSON string. */
void bench_cpu_model(char *buf, size_t len);
/* Online CPUs. */
int bench_cores(void);

#endif
