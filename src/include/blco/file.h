/* .blco files (blco/FORMAT.md): a sequential writer that cuts blocks into checksummed,
 * 4 KiB-aligned segments, and a reader that validates the header and tables, reads and
 * verifies segments and decodes them. */
#ifndef BLCO_FILE_H
#define BLCO_FILE_H

#include "blco/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BLCO_FORMAT_MAJOR 1
#define BLCO_FORMAT_MINOR 3 /* what this reader knows; written as 1.0, or the least that has
                              * what a file uses (1.1 labels, 1.2 integer values, 1.3
                              * decimal values) */
#define BLCO_FILE_ALIGN 4096

enum blco_value_type { BLCO_VALUES_F64 = 1, BLCO_VALUES_F32 = 2 };

/* What `--codec` asks for. AUTO and COMPACT pick per segment and column (see FORMAT.md). */
enum blco_pack_codec {
    BLCO_PACK_AUTO = 0,    /* the default: only what a GPU decodes (as GPU), unless zstd on the
                              values makes the segment at least 20 % smaller */
    BLCO_PACK_RAW = 1,     /* u64 indices, values as stored */
    BLCO_PACK_NARROW = 2,  /* u32 indices where the block allows, else raw */
    BLCO_PACK_DELTA = 3,   /* delta + bit-packing of the indices */
    BLCO_PACK_ZSTD = 4,    /* delta, then zstd on both columns where it saves bytes */
    BLCO_PACK_GPU = 5,     /* only what a GPU decodes: the smallest of raw, narrow and delta
                              indices, plain values, no zstd (the streaming engine then copies
                              segments encoded) */
    BLCO_PACK_COMPACT = 6, /* AUTO until 2026-11-26: zstd (level 1) on the values wherever it
                              saves 12 % of them; a GPU leaves such segments to CPU threads */
};

/* How the packer relabeled the indices (FORMAT.md, "The labels section"). */
enum blco_reorder {
    BLCO_REORDER_NONE = 0,
    BLCO_REORDER_FREQ = 1, /* per mode, indices by decreasing nonzero count, ties in order */
};
/* "none", "freq", or "?" */
BLCO_API const char *blco_reorder_name(int reorder);

/* Everything the header says. */
typedef struct blco_file_info {
    blco_layout_t layout;
    int version_major, version_minor;
    int value_type;
    uint64_t nnz, nblocks, nsegments, segment_nnz;
    double norm2;
    uint64_t duplicates;
    uint64_t file_bytes, max_segment_bytes;
    uint64_t block_table_offset, segment_table_offset;
    uint64_t block_table_checksum, segment_table_checksum;
    int pack_codec, pack_zstd_level, source_base;
    char creator[65];
    /* Relabeled indices (version 1.1): the order, the modes (bit n: mode n + 1), where the
     * labels section lies, each mode's checksum, and the seconds the packer spent making
     * the order (informative). All zero in a file whose indices are the source's. */
    int reorder;
    uint32_t relabeled_modes;
    uint64_t labels_offset, labels_bytes;
    double reorder_seconds;
    uint64_t labels_checksum[BLCO_MAX_MODES];
} blco_file_info_t;

/* One segment-table entry. */
typedef struct blco_segment {
    uint64_t offset, block, first_nnz, nnz;
    uint64_t index_bytes, value_bytes;
    int index_codec, value_codec;
    uint32_t raw_index_bits;
    uint64_t checksum;
} blco_segment_t;

/* One block-table entry. */
typedef struct blco_file_block {
    blco_block_t b;        /* key, block coordinates, first nonzero (start), nnz */
    uint64_t first_segment, nsegments;
} blco_file_block_t;

/* ---- writing ---- */

typedef struct blco_write_opts {
    int codec;             /* enum blco_pack_codec, default AUTO */
    int zstd_level;        /* 0 = default for the codec (3 with ZSTD, none otherwise) */
    int value_type;        /* BLCO_VALUES_F64 (default) or BLCO_VALUES_F32 */
    uint64_t segment_nnz;  /* S, a power of two; 0 = 2^20 */
    int source_base;       /* recorded in the header */
    int force;             /* replace an existing output */
    uint64_t duplicates;   /* recorded in the header */
    const char *creator;   /* recorded in the header, e.g. "blco-pack 0.2.0" */
} blco_write_opts_t;

BLCO_API void blco_write_opts_default(blco_write_opts_t *o);

typedef struct blco_writer blco_writer_t;

/* Starts writing `path` for a tensor of layout `l`: creates an unnamed file in its folder
 * (a temporary one beside it where O_TMPFILE is refused; see blco/outfile.h).
 * Returns 0, -EEXIST when `path` exists and opts->force is 0, -EINVAL, or -errno (the
 * diag names the path). */
BLCO_API int blco_writer_open(const char *path, const blco_layout_t *l,
                              const blco_write_opts_t *opts, blco_writer_t **out,
                              blco_diag_t *diag);

/* Appends n nonzeros in increasing ALTO order, given by their full ALTO index (low and
 * high words; `alto_hi` may be NULL when the layout has at most 64 bits) and values.
 * Nonzeros with a new key start a new block. Equal consecutive ALTO indices are refused
 * (-EINVAL): merge duplicates first. Returns 0 or a negative code; ENOSPC names the path. */
BLCO_API int blco_writer_add(blco_writer_t *w, const uint64_t *alto_lo, const uint64_t *alto_hi,
                             const double *val, uint64_t n, blco_diag_t *diag);

/* Records relabeled indices: for each mode n with bit n of `modes` set, new_to_old[n]
 * (dims[n] <= 2^32 entries, a permutation) gives each stored index's index in the source.
 * The arrays must stay valid until blco_writer_finish, which writes them after the tables
 * (the file is then version 1.1). Returns 0 or -EINVAL. */
BLCO_API int blco_writer_set_labels(blco_writer_t *w, int reorder, uint32_t modes,
                                    const uint32_t *const *new_to_old, double seconds);

/* Writes the tables and the header, fsyncs and gives the file its name
 * (blco_outfile_commit). The writer is freed whatever the result; on failure nothing is
 * left under any name. */
BLCO_API int blco_writer_finish(blco_writer_t *w, blco_file_info_t *info, blco_diag_t *diag);

/* Abandons the file: removes the temporary file and frees the writer. NULL is ok. */
BLCO_API void blco_writer_abort(blco_writer_t *w);

/* The temporary path the writer is filling (for signal handlers that must unlink it), or
 * NULL when the file has no name until it is finished (O_TMPFILE). */
BLCO_API const char *blco_writer_temp_path(const blco_writer_t *w);

/* Appends every nonzero of an in-memory BLCO tensor of the writer's layout, in order.
 * Returns 0, -BLCO_EMISMATCH (another layout) or as blco_writer_add. */
BLCO_API int blco_writer_add_tensor(blco_writer_t *w, const blco_tensor_t *t, blco_diag_t *diag);

/* Writes an in-memory BLCO tensor to `path` (open, add_tensor, finish). */
BLCO_API int blco_tensor_write(const blco_tensor_t *t, const char *path,
                               const blco_write_opts_t *opts, blco_file_info_t *info,
                               blco_diag_t *diag);

/* ---- reading ---- */

typedef struct blco_file blco_file_t;

/* Opens a .blco file and validates its header and both tables (FORMAT.md's reader
 * checks). Returns 0; -ENOENT and other -errno; -BLCO_EFORMAT (not a .blco file,
 * truncated, inconsistent; the diag says which), -BLCO_EVERSION (newer major version),
 * -BLCO_ECHECKSUM (header or table checksum). */
BLCO_API int blco_file_open(const char *path, blco_file_t **out, blco_diag_t *diag);
BLCO_API void blco_file_close(blco_file_t *f);

BLCO_API const blco_file_info_t *blco_file_info(const blco_file_t *f);
BLCO_API const blco_segment_t *blco_file_segment(const blco_file_t *f, uint64_t s);
BLCO_API const blco_file_block_t *blco_file_block(const blco_file_t *f, uint64_t b);
BLCO_API int blco_file_fd(const blco_file_t *f);

/* Bytes a segment occupies on disk (its stored size rounded up to 4096). */
BLCO_API uint64_t blco_segment_disk_bytes(const blco_segment_t *s);

/* Reads segment s's stored bytes into buf (at least blco_segment_disk_bytes). Returns 0,
 * -errno, or -BLCO_EFORMAT when the file ends early. */
BLCO_API int blco_file_read_segment(blco_file_t *f, uint64_t s, void *buf, size_t cap,
                                    blco_diag_t *diag);

/* Checks the checksum of a segment's stored bytes. Returns 0 or -BLCO_ECHECKSUM. */
BLCO_API int blco_segment_verify(const blco_file_t *f, uint64_t s, const void *stored,
                                 blco_diag_t *diag);

/* Decodes a segment's stored bytes into its nnz in-block indices and f64 values (arrays
 * of at least that segment's nnz entries; segment_nnz is always enough). Verifies the
 * checksum first unless `trusted`. Returns 0, -BLCO_ECHECKSUM, -BLCO_EFORMAT (also for a
 * coordinate outside the dims or a value that is not finite, whatever the checksum),
 * -BLCO_EVERSION (unknown codec). */
BLCO_API int blco_segment_decode(const blco_file_t *f, uint64_t s, const void *stored, int trusted,
                                 uint64_t *idx, double *val, blco_diag_t *diag);

/* A decoding context (codec state such as a zstd context). blco_segment_decode uses the
 * file's own, so it is not thread-safe; threads that decode segments of one file in
 * parallel give each its own decoder. Returns 0 or -ENOMEM. */
typedef struct blco_decoder blco_decoder_t;
BLCO_API int blco_decoder_new(blco_decoder_t **out);
BLCO_API void blco_decoder_free(blco_decoder_t *d);

/* As blco_segment_decode, with the caller's decoder (thread-safe across decoders). */
BLCO_API int blco_segment_decode_with(const blco_file_t *f, blco_decoder_t *d, uint64_t s,
                                      const void *stored, int trusted, uint64_t *idx, double *val,
                                      blco_diag_t *diag);

/* Reads the labels of a relabeled mode (info->relabeled_modes bit `mode`): new_to_old
 * (dims[mode] entries) gives the source index of each stored index. Checks the checksum
 * and that the array is a permutation. Returns 0, -EINVAL (mode not relabeled),
 * -BLCO_ECHECKSUM, -BLCO_EFORMAT, -errno. */
BLCO_API int blco_file_read_labels(blco_file_t *f, int mode, uint32_t *new_to_old,
                                   blco_diag_t *diag);

/* Checks a whole file: header, tables, every segment's checksum and decoding, every
 * coordinate against the dims, every value finite, zero padding everywhere, and the
 * header's sum of squares against the data. Returns 0 or the first problem's code, with the diag saying what and
 * where. */
BLCO_API int blco_file_verify(const char *path, blco_file_info_t *info, blco_diag_t *diag);

/* Reads a whole file into an in-memory BLCO tensor (segments verified and decoded, by
 * every thread: a buffer of the largest segment each, from the budget). */
BLCO_API int blco_file_load(const char *path, blco_budget_t *budget, blco_tensor_t **out,
                            blco_file_info_t *info, blco_diag_t *diag);
/* The same on `threads` threads (0 = the default; fewer where the budget holds fewer
 * buffers). An error is the first failing segment's, whatever the schedule. */
BLCO_API int blco_file_load_threads(const char *path, blco_budget_t *budget, int threads,
                                    blco_tensor_t **out, blco_file_info_t *info,
                                    blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
