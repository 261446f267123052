/* Machine description shared by the benchmarks. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

void bench_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *v = strchr(line, ':');
        if (v) {
            v += 1 + (v[1] == ' ');
            v[strcspn(v, "\n")] = 0;
            for (char *q = v; *q; q++) /* keep the JSON valid */
                if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
                    *q = ' ';
            snprintf(buf, len, "%s", v);
        }
        break;
    }
    fclose(f);
}

int bench_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void bench_reference_tensor(blco_gen_opts_t *g)
{
    blco_gen_opts_default(g);
    g->kind = BLCO_GEN_POWERLAW;
    g->order = 3;
    g->dims[0] = 20000, g->dims[1] = 15000, g->dims[2] = 10000;
    g->nnz = 20000000;
}
