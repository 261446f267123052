/* The memory budget: a byte counter that every large allocation is charged to, so the
 * peak stays under the user's limit whatever the input size. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blco_internal.h"

struct blco_budget {
    uint64_t limit;
    _Atomic uint64_t used;
    _Atomic uint64_t peak;
};

/* Requests at least this large are mapped pages, returned to the system on free. */
#define MAP_THRESHOLD (1u << 20)

static uint64_t meminfo_field(const char *name)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    size_t nl = strlen(name);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, name, nl) == 0 && line[nl] == ':') {
            kb = strtoull(line + nl + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

uint64_t blco_budget_default(void)
{
    uint64_t avail = meminfo_field("MemAvailable");
    if (!avail) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        avail = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 0;
    }
    uint64_t lim = avail / 4 * 3 / (uint64_t)blco_dist_local_size();
    return lim < (64u << 20) ? (64u << 20) : lim;
}

int blco_budget_create(blco_budget_t **out, uint64_t limit)
{
    blco_budget_t *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->limit = limit ? limit : blco_budget_default();
    *out = b;
    return 0;
}

void blco_budget_destroy(blco_budget_t *b)
{
    if (b && atomic_load(&b->used))
        blco_log(BLCO_LOG_DEBUG, "budget destroyed with %llu bytes still charged",
                 (unsigned long long)atomic_load(&b->used));
    free(b);
}

int blco_budget_reserve(blco_budget_t *b, uint64_t size)
{
    if (!b)
        return 0;
    uint64_t cur = atomic_load(&b->used);
    do {
        if (size > b->limit || cur > b->limit - size)
            return -BLCO_EBUDGET;
    } while (!atomic_compare_exchange_weak(&b->used, &cur, cur + size));
    uint64_t now = cur + size, pk = atomic_load(&b->peak);
    while (now > pk && !atomic_compare_exchange_weak(&b->peak, &pk, now)) {
    }
    return 0;
}

void blco_budget_release(blco_budget_t *b, uint64_t size)
{
    if (b)
        atomic_fetch_sub(&b->used, size);
}

int blco_budget_alloc(blco_budget_t *b, size_t size, void **out)
{
    *out = NULL;
    if (size == 0)
        size = 1;
    int err = blco_budget_reserve(b, size);
    if (err < 0) {
        char need[32], left[32];
        blco_log(BLCO_LOG_DEBUG, "budget: %s requested, %s left",
                 blco_format_size(size, need, sizeof need),
                 blco_format_size(b->limit - atomic_load(&b->used), left, sizeof left));
        return err;
    }
    void *p;
    if (size >= MAP_THRESHOLD) {
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            p = NULL;
#ifdef MADV_HUGEPAGE
        else /* fewer page faults on big arrays where THP is opt-in ("madvise") */
            madvise(p, size, MADV_HUGEPAGE);
#endif
    } else if (posix_memalign(&p, 64, size) != 0) {
        p = NULL;
    }
    if (!p) {
        blco_budget_release(b, size);
        return -ENOMEM;
    }
    *out = p;
    return 0;
}

int blco_budget_calloc(blco_budget_t *b, size_t size, void **out)
{
    int err = blco_budget_alloc(b, size, out);
    if (err == 0 && (size ? size : 1) < MAP_THRESHOLD)
        memset(*out, 0, size ? size : 1); /* mapped pages arrive zeroed */
    return err;
}

void blco_budget_free(blco_budget_t *b, void *p, size_t size)
{
    if (!p)
        return;
    if (size == 0)
        size = 1;
    if (size >= MAP_THRESHOLD)
        munmap(p, size);
    else
        free(p);
    blco_budget_release(b, size);
}

int blco_budget_threads(blco_budget_t *b, int threads, uint64_t each)
{
    int want = threads >= 1 ? threads : blco_threads_default();
    if (!b || !each)
        return want;
    uint64_t room = b->limit / 16 / each;
    int n = room < (uint64_t)want ? (int)BLCO_MAX(room, 1) : want;
    while (n > 1 && blco_budget_reserve(b, (uint64_t)n * each) < 0)
        n /= 2;
    if (n == 1)
        (void)blco_budget_reserve(b, each); /* the thread that always runs, charged when it can */
    return n;
}

uint64_t blco_budget_limit(const blco_budget_t *b) { return b ? b->limit : UINT64_MAX; }
uint64_t blco_budget_used(const blco_budget_t *b) { return b ? atomic_load(&b->used) : 0; }
uint64_t blco_budget_peak(const blco_budget_t *b) { return b ? atomic_load(&b->peak) : 0; }
