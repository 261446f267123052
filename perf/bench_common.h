/* What every benchmark says about the machine it ran on. */
#ifndef BLCO_BENCH_COMMON_H
#define BLCO_BENCH_COMMON_H

#include <stddef.h>

#include "blco.h"

/* The CPU model from /proc/cpuinfo ("unknown" if absent), safe inside a JSON string. */
void bench_cpu_model(char *buf, size_t len);
/* Online CPUs. */
int bench_cores(void);

/* The reference tensor of the CPU benchmarks: power-law, 20000 x 15000 x 10000, 20M
 * nonzeros (skew and seed left to the caller). */
void bench_reference_tensor(blco_gen_opts_t *g);

/* Writes `path` as a .blco file of the reference tensor's shape scaled to `nnz` nonzeros
 * (skew 1.5, seed 1), built in memory (about 100 B per nonzero). Exits on failure. */
void bench_write_scaled_tensor(const char *path, uint64_t nnz);

#endif
