/* Checkpoint folders, shared by CP-ALS (cpd_als.c) and Tucker (tucker.c): one run at a time
 * in a folder (an advisory lock), and which tool's checkpoint a folder holds, so that
 * another tool refuses it instead of taking it over. */
#ifndef BLCO_CKPT_H
#define BLCO_CKPT_H

#include <stddef.h>
#include <stdio.h>

#include "blco_internal.h"

/* What DIR/state is. */
enum blco_ckpt_kind {
    BLCO_CKPT_NONE,    /* no state file */
    BLCO_CKPT_CPD,     /* blco-cpd-checkpoint */
    BLCO_CKPT_TUCKER,  /* blco-tucker-state */
    BLCO_CKPT_UNKNOWN, /* a state file of neither */
};

/* The line of a state file that names who wrote it ("writer <text>"), and the text when a
 * run has none (the library called directly). */
#define BLCO_CKPT_WRITER_KEY "writer"
#define BLCO_CKPT_WRITER_DEFAULT "the blco library"

/* The kind of DIR/state, and its writer line's text in writer[n] ("" when it has none). */
int blco_ckpt_kind(const char *dir, char *writer, size_t n);

/* Takes DIR (which must exist) for a run of `kind` (CPD or TUCKER): an exclusive lock on
 * DIR/lock (flock; the file names the holder's pid and host, and goes when the lock is
 * released; a killed holder leaves it, to be taken by the next run), held until
 * blco_ckpt_release, then a check that DIR holds no checkpoint of another tool. Returns
 * the lock's descriptor (>= 0), or -EBUSY when another run holds DIR, -BLCO_EMISMATCH
 * when DIR holds another tool's checkpoint (the diag says which and who wrote it), -errno
 * for the lock file. */
int blco_ckpt_claim(const char *dir, int kind, blco_diag_t *diag);

/* Writes `text` as one line (newlines and control bytes become spaces) to f. */
void blco_ckpt_put_line(FILE *f, const char *text);

/* Removes DIR/lock and drops the lock (fd < 0: nothing). */
void blco_ckpt_release(const char *dir, int fd);

#endif
