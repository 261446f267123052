/* Output files and folders that appear whole or not at all, and that a killed process does
 * not leave behind under a name. */
#ifndef BLCO_OUTFILE_H
#define BLCO_OUTFILE_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An output file being written. Where the file system allows it the file has no name
 * until blco_outfile_commit (O_TMPFILE, then linkat), so `kill -9` leaves nothing; else
 * (or with BLCO_OUT_REFUSE_TMPFILE=1 in the environment, for tests) it is written as
 * PATH.tmp.<pid>.<6 characters> beside PATH and renamed. Either way the mode is 0666 less
 * the umask. */
typedef struct blco_outfile blco_outfile_t;

/* Stale temporaries: removes PATH.tmp.<pid>.<6 alphanumerics> (files, or folders of plain
 * files made by blco_outdir_open) beside PATH that belong to this user and whose <pid> is
 * no running process on this machine: what a killed writer of PATH left. Names of any
 * other shape, of other users or of live processes are never touched. Returns how many
 * were removed (never fails). */
BLCO_API int blco_out_clean_stale(const char *path);

/* Refuses an output that is one of the inputs: `out` and `in` name the same file (same
 * device and inode, whatever the names: a link, "./x", a hard link). `in` "-" is standard
 * input. Writing there would destroy the input, --force or not. Returns 0 (different, or
 * `out` does not exist yet), or -EINVAL with the diag saying so. */
BLCO_API int blco_out_check_not_input(const char *out, const char *in, blco_diag_t *diag);

/* Creates the unnamed (or temporary) file for PATH, after blco_out_clean_stale(PATH).
 * Without `force`, an existing PATH is refused now (-EEXIST) and again at commit. Returns
 * 0 or -errno with diag naming the file. */
BLCO_API int blco_outfile_open(const char *path, int force, blco_outfile_t **out,
                               blco_diag_t *diag);

/* The descriptor to write to (opened read-write). */
BLCO_API int blco_outfile_fd(const blco_outfile_t *f);

/* The temporary name, or NULL when the file has none (O_TMPFILE): what a signal handler
 * must unlink. */
BLCO_API const char *blco_outfile_temp_path(const blco_outfile_t *f);

/* fsync, then gives the file its name PATH (replacing an existing one only with `force`),
 * then fsync of the folder. Frees f whatever happens; on failure nothing new is left under
 * any name. Returns 0, -EEXIST (PATH appeared meanwhile, without force) or -errno. */
BLCO_API int blco_outfile_commit(blco_outfile_t *f, blco_diag_t *diag);

/* Closes and removes the unfinished file; frees f. Accepts NULL. */
BLCO_API void blco_outfile_abort(blco_outfile_t *f);

/* An output folder written as DIR.tmp.<pid>.<6 characters> beside DIR and renamed DIR
 * when complete, so a reader never sees a partial result. */
typedef struct blco_outdir blco_outdir_t;

/* Creates the temporary folder (after blco_out_clean_stale(DIR)); this is the check that
 * DIR can be written, made before any work. DIR may exist (a folder): its files of the
 * same names are replaced at commit, others are kept. Returns 0 or -errno with diag. */
BLCO_API int blco_outdir_open(const char *dir, blco_outdir_t **out, blco_diag_t *diag);

/* The folder to write the files into. */
BLCO_API const char *blco_outdir_path(const blco_outdir_t *d);

/* Syncs the temporary folder and renames it DIR (when DIR is missing or empty) or moves
 * its files into DIR one by one (when DIR holds files: all were written before the first
 * is moved). Frees d whatever happens. Returns 0 or -errno with diag. */
BLCO_API int blco_outdir_commit(blco_outdir_t *d, blco_diag_t *diag);

/* Removes the temporary folder and its files; frees d. Accepts NULL. */
BLCO_API void blco_outdir_abort(blco_outdir_t *d);

#ifdef __cplusplus
}
#endif

#endif
