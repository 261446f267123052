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

/* The generated shapes of the GPU benchmarks (bench_gpu, gpu_l2_model). */
typedef struct bench_gpu_shape {
    const char *name;
    int kind; /* enum blco_gen_kind */
    double skew;
    int order;
    uint64_t dims[BLCO_MAX_MODES];
} bench_gpu_shape_t;

#define BENCH_GPU_NSHAPES 2
extern const bench_gpu_shape_t bench_gpu_shapes[BENCH_GPU_NSHAPES];

/* A shape's generated tensor of `nnz` nonzeros, as BLCO in memory. Exits on failure. */
blco_tensor_t *bench_gpu_shape_make(const bench_gpu_shape_t *sh, uint64_t nnz, uint64_t seed);

/* A tensor's values (in (0, 1]) rounded to `places` decimal places, as text written with
 * "%.6f" gives them, never to 0: the decimal codec's case. Call it after duplicates were
 * summed (a sum of such values is often no short decimal). */
void bench_round_places(blco_tensor_t *t, int places);

#endif
