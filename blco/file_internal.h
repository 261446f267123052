/* Internal to the .blco file code: byte-order helpers, sizes, and the header and table
 * encoders shared by the writer, the reader and the tests. */
#ifndef BLCO_FILE_INTERNAL_H
#define BLCO_FILE_INTERNAL_H

#include "blco.h"
#include "bytes_le.h"

#define BLCO_HEADER_BYTES 4096
#define BLCO_SEGMENT_ENTRY_BYTES 64


/* XXH3-64 with seed 0. */
uint64_t blco_checksum(const void *p, size_t n);
uint64_t blco_align4k(uint64_t x);
uint64_t blco_block_entry_bytes(int order);

/* Fills the 4096-byte header, checksum included. */
void blco_header_encode(const blco_file_info_t *in, uint8_t *h);
/* Decodes and validates a header (steps 1-6 of FORMAT.md's reader checks); h holds the
 * file's first min(file_size, 4096) bytes. */
int blco_header_decode(const uint8_t *h, uint64_t file_size, blco_file_info_t *out,
                       blco_diag_t *diag);

void blco_block_entry_encode(const blco_file_block_t *b, int order, uint8_t *p);
void blco_block_entry_decode(const uint8_t *p, int order, blco_file_block_t *b);
void blco_segment_entry_encode(const blco_segment_t *s, uint8_t *p);
void blco_segment_entry_decode(const uint8_t *p, blco_segment_t *s);

/* Checks that the decoded tables are consistent with each other and the header. */
int blco_tables_validate(const blco_file_info_t *in, const blco_file_block_t *blocks,
                         const blco_segment_t *segs, blco_diag_t *diag);

#endif
