/* blco core: error codes, logging, the memory budget, threads and size parsing.
 * Every function returns >= 0 on success and a negative code on failure: -errno, or
 * -BLCO_E* for the domain errors below. The library never prints except through the log
 * callback and never exits. */
#ifndef BLCO_CORE_H
#define BLCO_CORE_H

#include <stddef.h>
#include <stdint.h>

/* Marks the functions of the public API. The library is compiled with -fvisibility=hidden,
 * so the shared library exports these and nothing else: the internal helpers shared between
 * its folders stay out of its ABI. */
#ifndef BLCO_API
#if defined(__GNUC__)
#define BLCO_API __attribute__((visibility("default")))
#else
#define BLCO_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The largest tensor order the library supports. */
#define BLCO_MAX_MODES 16

/* Domain error codes, returned negated. They start above every errno value. */
enum blco_error {
    BLCO_EPARSE = 1000,  /* malformed text input (the diagnostic says where and what) */
    BLCO_ERANGE,         /* an index outside the tensor's dims, or an integer overflow */
    BLCO_EVALUE,         /* a value that is NaN or infinite */
    BLCO_EDUP,           /* duplicate coordinates where duplicates were refused */
    BLCO_EEMPTY,         /* input holds no nonzero */
    BLCO_EBUDGET,        /* the memory budget is too small for the request */
    BLCO_EUNSUPPORTED,   /* valid input this build cannot handle (order, index bits) */
    BLCO_EFORMAT,        /* a corrupt or foreign binary file (.blco, .npy) */
    BLCO_ECHECKSUM,      /* a checksum does not match */
    BLCO_EVERSION,       /* a file written by a newer, incompatible version */
    BLCO_ENODEV,         /* no usable GPU */
    BLCO_ECUDA,          /* a CUDA runtime error (the log holds the CUDA reason) */
    BLCO_EMISMATCH,      /* arguments that do not fit together (shapes, ranks, orders) */
    BLCO_ECANCELED,      /* work stopped on request */
    BLCO_EDEVMEM,        /* a GPU's memory is too small for the request (the diag says which
                          * GPU and how much; --gpu-mem-limit), not the host's budget */
    BLCO_E_LAST
};

/* A static, human-readable description of a code returned by any blco function
 * (negative or positive errno and BLCO_E* values are both accepted). */
BLCO_API const char *blco_strerror(int err);

/* Where an error in an input happened, filled by functions that take one. `line` is
 * 1-based, 0 when the error has no line. `msg` says what is wrong (some messages name the
 * file: room for a long path and the reason after it); one longer than msg ends in "...". */
typedef struct blco_diag {
    uint64_t line;
    char msg[1024];
} blco_diag_t;

/* ---- logging ---- */
enum blco_log_level { BLCO_LOG_ERROR = 0, BLCO_LOG_WARN, BLCO_LOG_INFO, BLCO_LOG_DEBUG };

/* Receives every message the library emits at or below the configured level. May be
 * called from any thread; `msg` has no trailing newline. */
typedef void (*blco_log_fn)(void *user, int level, const char *msg);

/* Installs a log callback (NULL restores the default, which writes to stderr) and the
 * most verbose level delivered (default BLCO_LOG_WARN). Not thread-safe against
 * concurrent logging: call it once at start-up. */
BLCO_API void blco_log_set(blco_log_fn fn, void *user, int max_level);

/* ---- memory budget ---- */
/* Every large allocation of the library goes through a budget so peak memory stays
 * below a limit whatever the tensor size. Thread-safe. */
typedef struct blco_budget blco_budget_t;

/* Creates a budget of `limit` bytes (0: the default from blco_budget_default()).
 * Returns 0 or -ENOMEM. */
BLCO_API int blco_budget_create(blco_budget_t **out, uint64_t limit);
BLCO_API void blco_budget_destroy(blco_budget_t *b);

/* The default limit: three quarters of the memory the system reports available, at
 * least 64 MiB; in a distributed run (blco/dist.h), that divided by the number of ranks
 * sharing this machine, so that they do not each count on the whole of it. */
BLCO_API uint64_t blco_budget_default(void);

/* Allocates `size` bytes aligned to 64 from the budget (uninitialized). Large requests
 * are mapped pages, so freeing them returns memory to the system. Returns 0, -BLCO_EBUDGET
 * when the budget would be exceeded, or -ENOMEM. A NULL budget means no limit. */
BLCO_API int blco_budget_alloc(blco_budget_t *b, size_t size, void **out);
/* Same, zero-filled. */
BLCO_API int blco_budget_calloc(blco_budget_t *b, size_t size, void **out);
/* Frees memory from blco_budget_alloc; `size` must be the size asked for. NULL is ok. */
BLCO_API void blco_budget_free(blco_budget_t *b, void *p, size_t size);
/* Reserves or releases budget without allocating (memory owned by someone else, such
 * as a library's buffers). Returns 0 or -BLCO_EBUDGET. */
BLCO_API int blco_budget_reserve(blco_budget_t *b, uint64_t size);
BLCO_API void blco_budget_release(blco_budget_t *b, uint64_t size);

/* What one worker thread costs outside the budget's own allocations (its stack pages, its
 * segment decoder with a zstd context, the C library's per-thread data), rounded up from
 * measurements at 4096 threads: about 110 KiB in the streaming engine (blco-cpd rank 16)
 * and 22 KiB in the packer. */
#define BLCO_THREAD_BYTES_STREAM (256u << 10)
#define BLCO_THREAD_BYTES_PACK (64u << 10)

/* Charges `each` bytes for each of `threads` worker threads (0: blco_threads_default()) to
 * b, allowing threads at most 1/16 of the budget, and returns how many threads were
 * charged: `threads`, or fewer (at least 1, charged even past 1/16) when they do not fit.
 * The charge stays for the budget's life. With a NULL budget returns the count unchanged. */
BLCO_API int blco_budget_threads(blco_budget_t *b, int threads, uint64_t each);

BLCO_API uint64_t blco_budget_limit(const blco_budget_t *b);
BLCO_API uint64_t blco_budget_used(const blco_budget_t *b);
BLCO_API uint64_t blco_budget_peak(const blco_budget_t *b);

/* ---- threads and small helpers ---- */
/* The number of threads used when a caller asks for 0: OpenMP's default, else the
 * number of online CPUs. Always >= 1. */
BLCO_API int blco_threads_default(void);

/* Parses a size with an optional K/M/G/T suffix (powers of 1024, optional trailing "B"
 * or "iB"), e.g. "512M", "8G", "4096". Returns 0 or -EINVAL. */
BLCO_API int blco_parse_size(const char *s, uint64_t *out);
/* Formats a byte count as "12.3 GiB" into buf. Returns buf. */
BLCO_API char *blco_format_size(uint64_t bytes, char *buf, size_t len);
/* Formats a count or rate with 3 significant digits and k/M/G/T/P: "850", "12.5M"; "?"
 * when not finite. Returns buf. */
BLCO_API char *blco_format_si(double v, char *buf, size_t len);
/* Formats seconds as "4.2s", "42s", "7m05s", "3h20m" or "120h"; "?" when negative or not
 * finite. Returns buf. */
BLCO_API char *blco_format_duration(double seconds, char *buf, size_t len);

/* Monotonic time in seconds. */
BLCO_API double blco_now(void);

/* Version of the library, e.g. "0.1.0". */
BLCO_API const char *blco_version(void);

#ifdef __cplusplus
}
#endif
#endif
