/* Helpers shared by the command-line tools: error exits, number, size and dims parsing.
 * Tools include only the public API and this file. */
#ifndef BLCO_CLI_H
#define BLCO_CLI_H

#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdnoreturn.h>

#include "blco.h"

/* The running tool's name, used as the prefix of every message. Set it first. */
extern const char *cli_tool;

/* Prints "tool: message" to stderr and exits with status 1 (2 for usage errors). */
noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* As cli_die, with the given exit status (e.g. 130 after SIGINT). */
noreturn void cli_die_exit(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* After SIGINT or SIGTERM stopped a checkpointing tool: says how to go on (--resume from
 * checkpoint_dir when `written`, a checkpoint of this run exists; start again otherwise) and
 * exits with 128 + the signal. */
noreturn void cli_die_stopped(const char *checkpoint_dir, int written);
/* Peak resident memory of this program (VmHWM), in bytes; -1 when unknown. */
/* Joins the MPI job when an MPI launcher started the tool (blco/dist.h); dies with the
 * reason when that cannot work (a launcher and a build without MPI). After parse_args. */
void cli_dist_init(int *argc, char ***argv);
/* Distributed: checks that every rank was given the same values of the n options that
 * shape the computation (blco_dist_check_opts); the first rank that differs ends the job
 * naming the option and both values, the others wait for that. Nothing alone. */
void cli_dist_check_opts(int n, const char *const *names, const char *const *values);
/* A rank that stopped because another failed: waits to be ended by the failing rank's
 * abort, which prints the reason (never returns). */
noreturn void cli_dist_await_abort(void);
long long cli_peak_rss_bytes(void);

/* The budget for --mem-limit LIMIT bytes in the streaming tools: LIMIT less 1/64 of it (at
 * most 64 MiB), left for what no budget counts (code, thread stacks, small tables), so peak
 * RSS stays under large limits. 0 (no --mem-limit: 3/4 of the available memory) stays 0. */
/* --out DIR: creates the temporary folder beside DIR now (so a DIR that cannot be written
 * is refused before any work) and returns the folder to write into; cli_outdir_commit
 * moves it into place. Exiting before that removes it. Dies with a message on failure. */
const char *cli_outdir_begin(const char *dir);
void cli_outdir_commit(void);

uint64_t cli_budget_bytes(uint64_t limit);

/* The worker threads (0: all cores) charged to `budget` at `each` bytes a thread
 * (blco_budget_threads); warns when fewer fit than asked. Returns the count to use. */
int cli_fit_threads(blco_budget_t *budget, int threads, uint64_t each);
/* "8.00 GiB (budget 7.94 GiB)": what a tool prints for its limit. */
const char *cli_describe_limit(uint64_t limit, const blco_budget_t *budget, char *buf, size_t n);
/* libgomp reads OMP_WAIT_POLICY once, before main, and by default its threads spin at every
 * barrier: on a busy machine, or while the main thread waits for the disk, they burn the
 * time slices others need (blco-pack ran 2-3x slower; streamed MTTKRP 10-15%). Unless the
 * user chose a policy, this runs the program again with passive waits. */
void cli_prefer_passive_waits(char **argv);
/* As cli_prefer_passive_waits, but a run whose passes go from memory (may_reside, and
 * blco_input NULL for a tensor read into memory, or a .blco file whose decoded nonzeros take
 * at most half the budget of mem_limit) gets libgomp's spin-then-sleep waits with
 * GOMP_SPINCOUNT=100000 instead: there no thread waits for the disk, and on a virtual machine
 * a sleeping thread took 0.1-0.4 ms to wake for each parallel region (blco-cpd's MTTKRP
 * 1.5-2x slower on the token tensors of ../shared/data with passive waits). A user's
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept. */
void cli_choose_waits(char **argv, const char *blco_input, uint64_t mem_limit, int may_reside);
/* Logs (info level, -v) the wait settings this run has. */
void cli_log_waits(void);
/* Option values shared by the streaming tools; usage errors name the option. */
int cli_io_backend(const char *s);        /* --io auto|uring|pread */
int cli_residency(const char *s);         /* --residency auto|none|stored */
int cli_fibers_arg(const char *s);       /* --fibers auto|on|off (enum blco_fibers_use) */
double cli_stats_interval(const char *s); /* --stats-interval, 0.01..86400 seconds */

/* SIGINT and SIGTERM for the streaming tools: the handler records the signal in
 * cli_stop_signal and cancels the stream set with cli_stop_stream (NULL: none), which is
 * also cancelled at once when a signal came before it was set. */
extern volatile sig_atomic_t cli_stop_signal;
void cli_catch_stop_signals(void);

/* Whether `path` is .tns text rather than a .blco file: its name ends in .tns, .tns.gz or
 * .tns.zst, or its first bytes are gzip or zstd data, a digit or '#'. */
int cli_is_text(const char *path);
/* A tool that streams a .blco given text: packs `input` (plain, gzip or zstd) as blco-pack
 * does (`tns`: base, dims, duplicates; NULL: blco-pack's defaults), within a budget of mem_limit
 * (0: the default), into a temporary file in $TMPDIR (else /tmp) that is unlinked as soon as it is
 * complete and read through /proc/self/fd/N, so nothing is left behind however the tool ends. Says
 * so on stderr unless quiet; exits on errors (130/143 after SIGINT/SIGTERM, which it catches).
 * Returns the path to open. */
const char *cli_pack_text(const char *input, const blco_tns_opts_t *tns, uint64_t mem_limit,
                          int threads, int quiet);
void cli_stop_stream(blco_stream_t *s);

/* --backend, --gpus, --gpu-mem-limit and --trace of the tools that compute. */
#define CLI_BACKEND_AUTO (-1)
typedef struct cli_gpu_args {
    int backend;            /* CLI_BACKEND_AUTO or enum blco_backend */
    const char *gpus;       /* "all" (default) or a list "0,2" */
    uint64_t gpu_mem_limit; /* per device; 0 = what it has free */
    const char *trace;      /* Trace Event JSON file, or NULL */
    int gpu_decode;         /* enum blco_gpu_decode */
    int gpu_schedule;       /* enum blco_gpu_schedule */
} cli_gpu_args_t;
#define CLI_GPU_USAGE                                                                              \
    "      --backend auto|cpu|cuda|hybrid\n"                                                       \
    "                       where MTTKRP runs: cpu; cuda, the GPUs (batches are copied\n"          \
    "                       to them, and a tensor that fits a GPU stays there after the\n"         \
    "                       first pass); hybrid, the GPUs and the CPU threads taking\n"            \
    "                       batches from one queue. auto (default): the GPUs when a real one\n"    \
    "                       answers, else the CPU; standard error says which and why\n"            \
    "      --gpus LIST|all  the devices to use, e.g. 0,1 (default all)\n"                          \
    "      --gpu-mem-limit SIZE\n"                                                                 \
    "                       device memory each GPU may use (default: what it has free)\n"          \
    "      --gpu-decode auto|host\n"                                                               \
    "                       where batches for the GPUs are decoded: auto (default), on the\n"      \
    "                       device, copied encoded, when their codecs allow (raw, narrow,\n"       \
    "                       delta, no zstd: blco-pack --codec gpu), else by the CPU\n"             \
    "                       threads; host, always by the CPU threads\n"                            \
    "      --gpu-schedule auto|contiguous|interleaved\n"                                          \
    "                       the order in which the GPUs' MTTKRP kernel takes the tensor's\n"      \
    "                       chunks: auto (default) times both on each mode's first two\n"         \
    "                       passes after the first and keeps the faster\n"                        \
    "      --trace FILE     write the pipeline's timeline (verify and decode on the host,\n"       \
    "                       copies, decode kernels and kernels per stream and device, each\n"      \
    "                       pass's host phases) as Trace Event JSON for Perfetto or\n"             \
    "                       chrome://tracing (GPU backends)\n"
void cli_gpu_args_default(cli_gpu_args_t *g);
int cli_backend_arg(const char *s); /* --backend auto|cpu|cuda|hybrid */
int cli_gpu_decode_arg(const char *s); /* --gpu-decode auto|host */
int cli_gpu_schedule_arg(const char *s); /* --gpu-schedule auto|contiguous|interleaved */
/* Resolves auto and the device list into the stream options, or dies with the reason when
 * a GPU backend has no GPU. why[len] says which backend runs and why. */
void cli_gpu_apply(const cli_gpu_args_t *g, blco_stream_opts_t *so, char *why, size_t len);
/* The warning, once, that --gpus and --gpu-mem-limit given by the user go unused because
 * --backend auto runs on the CPU (`reason`: why). */
void cli_gpu_unused(const cli_gpu_args_t *g, const char *reason);
/* One line per device of what the GPUs did (to f), after a run on them; and the same as a
 * JSON array member ("gpus":[...], nothing without GPUs). */
void cli_gpu_report(FILE *f, const blco_stream_gpu_stats_t *gs);
void cli_gpu_json(FILE *f, const blco_stream_gpu_stats_t *gs);

/* Dies when the output `path` of option `opt` (NULL or "-": nothing) is the file `input`
 * itself (blco_out_check_not_input): writing it would destroy the input. */
void cli_refuse_input_as_output(const char *input, const char *opt, const char *path);

/* msg without a closing "; raise --mem-limit" (cut in place), for a tool that adds what it
 * takes of the budget and says to raise the limit itself. */
char *cli_budget_cause(char *msg);

/* The command line, "tool ARG...", in one string (at most 1000 bytes, then "..."): what a
 * checkpoint records as its writer. */
const char *cli_command_line(int argc, char **argv);

/* Writes s as a JSON string literal (quotes, escapes) to f. */
void cli_json_string(FILE *f, const char *s);
noreturn void cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "tool: file:line: msg" (or "tool: file: msg" with no line) from a failed read
 * and exits 1. `err` names the failure when the diag is empty. */
noreturn void cli_die_diag(const char *file, int err, const blco_diag_t *diag);

/* Reports what getopt_long refused (its return value `c`, ':' for a missing value, with
 * the option string starting with ':' and opterr = 0) as a usage error. */
noreturn void cli_bad_option(int c, char **argv);

/* The one .blco file argument left after options (a usage error otherwise), opened and
 * validated; exits with the reader's message when it cannot be. *path receives it. */
blco_file_t *cli_open_blco_arg(int argc, char **argv, const char **path);

/* Strict parsers: the whole string must be a number, else a usage error naming `what`. */
uint64_t cli_u64(const char *s, const char *what);
int cli_int(const char *s, const char *what, int lo, int hi);
double cli_double(const char *s, const char *what);
/* A size with K/M/G/T suffixes ("512M") or a count with K/M/G (powers of 1000 when
 * `decimal`, for nonzero counts like "20M"). */
uint64_t cli_size(const char *s, const char *what);
uint64_t cli_count(const char *s, const char *what);
/* Dims written "100x200x300" (or with commas). Returns the order. */
int cli_dims(const char *s, uint64_t *dims);
/* The same for option `what` (e.g. "--ranks"), whose parts are each an `each` ("rank"), in
 * messages with `example` ("8x8x4"). */
int cli_dims_of(const char *s, uint64_t *dims, const char *what, const char *each,
                const char *example);

/* Installs a log callback printing "tool: warning: ..." (info with verbose). */
void cli_log_init(int verbose);
/* The warning on a decomposition that ends with a fit below BLCO_FIT_LOW (blco/cpd.h);
 * `model` names it, e.g. "rank-16 CP". Nothing when the fit is not low. */
void cli_warn_low_fit(double fit, const char *model);

#endif
