/* Output files (O_TMPFILE + linkat, else a pid-named temporary + rename) and output folders
 * (a pid-named temporary folder renamed when complete), and the cleanup of the temporaries
 * that killed writers left. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blco_internal.h"
#include "blco/outfile.h"

struct blco_outfile {
    char *path, *tmp; /* tmp: NULL while the file has no name */
    int fd, force;
};

struct blco_outdir {
    char *dir, *tmp;
};

/* Splits `path` into its folder (".") and last component, without trailing slashes. */
static int split_path(const char *path, char **dir, char **base)
{
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = 0;
    char *slash = strrchr(p, '/');
    if (!slash) {
        *dir = strdup(".");
        *base = strdup(p);
    } else {
        *dir = slash == p ? strdup("/") : strndup(p, (size_t)(slash - p));
        *base = strdup(slash + 1);
    }
    free(p);
    if (!*dir || !*base) {
        free(*dir);
        free(*base);
        return -ENOMEM;
    }
    return 0;
}

int blco_out_check_not_input(const char *out, const char *in, blco_diag_t *diag)
{
    struct stat so, si;
    if (!out || !in || stat(out, &so) < 0)
        return 0;
    if (strcmp(in, "-") == 0 ? fstat(0, &si) < 0 : stat(in, &si) < 0)
        return 0;
    if (so.st_dev != si.st_dev || so.st_ino != si.st_ino)
        return 0;
    if (strcmp(in, "-") == 0)
        return blco_diag_set(diag, 0, -EINVAL,
                             "%s is the file standard input reads: writing it would destroy the "
                             "input; write to another name",
                             out);
    return blco_diag_set(diag, 0, -EINVAL,
                         "%s is the input file %s itself: writing it would destroy the input; "
                         "write to another name",
                         out, in);
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Removes a folder of plain files (one level). */
static void remove_flat_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[4352];
            if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Six characters from a per-call generator: the random part of a temporary name. */
static void random_suffix(char s[7])
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec << 20 ^
                 (uint64_t)getpid() << 40 ^ (counter++ * 0xbf58476d1ce4e5b9ull);
    for (int i = 0; i < 6; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        s[i] = alnum[(x >> 33) % (sizeof alnum - 1)];
    }
    s[6] = 0;
}

static int temp_name(const char *path, char *buf, size_t cap)
{
    char s[7];
    random_suffix(s);
    return (size_t)snprintf(buf, cap, "%s.tmp.%ld.%s", path, (long)getpid(), s) >= cap
               ? -ENAMETOOLONG
               : 0;
}

/* The pid in `name` when it is exactly BASE.tmp.<pid>.<6 alphanumerics>, else 0. */
static long stale_pid(const char *name, const char *base)
{
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0)
        return 0;
    const char *p = name + bl + 5;
    long pid = 0;
    int digits = 0;
    for (; isdigit((unsigned char)*p) && digits < 10; p++, digits++)
        pid = pid * 10 + (*p - '0');
    if (!digits || *p != '.' || pid <= 0)
        return 0;
    p++;
    for (int i = 0; i < 6; i++)
        if (!isalnum((unsigned char)p[i]))
            return 0;
    return p[6] == 0 ? pid : 0;
}

int blco_out_clean_stale(const char *path)
{
    char *dir, *base;
    if (split_path(path, &dir, &base) < 0)
        return 0;
    int removed = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        long pid = stale_pid(e->d_name, base);
        if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid != geteuid())
            continue;
        char p[4352];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p)
            continue;
        if (S_ISREG(st.st_mode) && unlink(p) == 0)
            removed++;
        else if (S_ISDIR(st.st_mode)) {
            remove_flat_tree(p);
            removed += access(p, F_OK) != 0;
        }
    }
    if (d)
        closedir(d);
    if (removed)
        blco_log(BLCO_LOG_INFO, "removed %d temporar%s of %s left by killed runs", removed,
                 removed == 1 ? "y" : "ies", path);
    free(dir);
    free(base);
    return removed;
}

void blco_outfile_abort(blco_outfile_t *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    free(f->path);
    free(f->tmp);
    free(f);
}

/* O_TMPFILE in `dir`, when the file system has it and /proc lets linkat name the file. */
static int open_unnamed(const char *dir)
{
#ifdef O_TMPFILE
    const char *refuse = getenv("BLCO_OUT_REFUSE_TMPFILE");
    if (refuse && *refuse && strcmp(refuse, "0"))
        return -EOPNOTSUPP;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
    if (fd < 0)
        return -errno;
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    if (access(p, F_OK) != 0) {
        close(fd);
        return -EOPNOTSUPP;
    }
    return fd;
#else
    (void)dir;
    return -EOPNOTSUPP;
#endif
}

int blco_outfile_open(const char *path, int force, blco_outfile_t **out, blco_diag_t *diag)
{
    *out = NULL;
    struct stat st;
    if (!force && stat(path, &st) == 0)
        return blco_diag_set(diag, 0, -EEXIST, "%s exists (use --force to replace it)", path);
    blco_out_clean_stale(path);
    blco_outfile_t *f = calloc(1, sizeof *f);
    char *dir = NULL, *base = NULL;
    if (!f || !(f->path = strdup(path)) || split_path(path, &dir, &base) < 0) {
        free(f ? f->path : NULL);
        free(f);
        return -ENOMEM;
    }
    f->force = force;
    f->fd = open_unnamed(dir);
    int err = f->fd;
    if (f->fd < 0 && err != -ENOENT && err != -EACCES && err != -ENOTDIR && err != -EROFS &&
        err != -ENOSPC && err != -EDQUOT) {
        /* Refused O_TMPFILE (EOPNOTSUPP, EISDIR, EINVAL...): a pid-named temporary. */
        size_t cap = strlen(path) + 48;
        if (!(f->tmp = malloc(cap))) {
            err = -ENOMEM;
            goto fail;
        }
        for (int attempt = 0; attempt < 100; attempt++) {
            if ((err = temp_name(path, f->tmp, cap)) < 0)
                break;
            f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            err = f->fd < 0 ? -errno : 0;
            if (err != -EEXIST)
                break;
        }
        if (f->fd < 0) {
            free(f->tmp);
            f->tmp = NULL;
        }
    }
    if (f->fd < 0) {
        blco_diag_set(diag, 0, err, "cannot create %s: %s", path, strerror(-err));
        goto fail;
    }
    free(dir);
    free(base);
    *out = f;
    return 0;
fail:
    free(dir);
    free(base);
    blco_outfile_abort(f);
    return err;
}

int blco_outfile_fd(const blco_outfile_t *f) { return f ? f->fd : -1; }

const char *blco_outfile_temp_path(const blco_outfile_t *f) { return f ? f->tmp : NULL; }

/* Renames without replacing an existing file unless forced. */
static int rename_into_place(const char *from, const char *to, int force)
{
    if (force)
        return rename(from, to) < 0 ? -errno : 0;
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    /* Filesystems without RENAME_NOREPLACE: link fails if the target exists. */
    if (link(from, to) < 0)
        return -errno;
    unlink(from);
    return 0;
}

/* Names the unnamed file: PATH directly (linkat refuses an existing name), or, to replace
 * PATH, a temporary name first that is then renamed over it. */
static int link_unnamed(blco_outfile_t *f)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    if (!f->force)
        return linkat(AT_FDCWD, proc, AT_FDCWD, f->path, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
    size_t cap = strlen(f->path) + 48;
    if (!(f->tmp = malloc(cap)))
        return -ENOMEM;
    int err = -EEXIST;
    for (int attempt = 0; attempt < 100 && err == -EEXIST; attempt++) {
        if ((err = temp_name(f->path, f->tmp, cap)) < 0)
            break;
        err = linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
    }
    if (err < 0) {
        free(f->tmp);
        f->tmp = NULL;
        return err;
    }
    return rename(f->tmp, f->path) < 0 ? -errno : 0;
}

int blco_outfile_commit(blco_outfile_t *f, blco_diag_t *diag)
{
    int err = 0;
    const char *doing = "syncing";
    if (fsync(f->fd) < 0) {
        err = -errno;
        goto fail;
    }
    if (!f->tmp) {
        doing = "naming";
        if ((err = link_unnamed(f)) < 0)
            goto fail;
        free(f->tmp);
        f->tmp = NULL;
        close(f->fd); /* the data is on disk (fsync above): a late close error changes nothing */
        f->fd = -1;
    } else {
        doing = "closing";
        int fd = f->fd;
        f->fd = -1;
        if (close(fd) < 0) {
            err = -errno;
            goto fail;
        }
        doing = "renaming";
        if ((err = rename_into_place(f->tmp, f->path, f->force)) < 0)
            goto fail;
        free(f->tmp);
        f->tmp = NULL;
    }
    char *dir, *base;
    if (split_path(f->path, &dir, &base) == 0) {
        fsync_dir(dir);
        free(dir);
        free(base);
    }
    blco_outfile_abort(f);
    return 0;
fail:
    if (err == -EEXIST)
        blco_diag_set(diag, 0, err, "%s exists (use --force to replace it)", f->path);
    else if (err == -ENOSPC)
        blco_diag_set(diag, 0, err, "%s: no space left on the device while %s the finished file",
                      f->path, doing);
    else
        blco_diag_set(diag, 0, err, "%s: %s while %s the finished file", f->path,
                      strerror(-err), doing);
    blco_outfile_abort(f);
    return err;
}

/* ---- folders ---- */

void blco_outdir_abort(blco_outdir_t *d)
{
    if (!d)
        return;
    if (d->tmp)
        remove_flat_tree(d->tmp);
    free(d->dir);
    free(d->tmp);
    free(d);
}

int blco_outdir_open(const char *dir, blco_outdir_t **out, blco_diag_t *diag)
{
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return blco_diag_set(diag, 0, -ENOTDIR, "%s exists and is not a folder", dir);
    blco_outdir_t *d = calloc(1, sizeof *d);
    char *parent = NULL, *base = NULL;
    if (!d || split_path(dir, &parent, &base) < 0) {
        free(d);
        return -ENOMEM;
    }
    int err = -ENOMEM;
    size_t cap = strlen(parent) + strlen(base) + 48;
    if (!(d->dir = malloc(cap)) || !(d->tmp = malloc(cap)))
        goto fail;
    snprintf(d->dir, cap, "%s/%s", parent, base);
    blco_out_clean_stale(d->dir);
    err = -EEXIST;
    for (int attempt = 0; attempt < 100 && err == -EEXIST; attempt++) {
        if ((err = temp_name(d->dir, d->tmp, cap)) < 0)
            break;
        err = mkdir(d->tmp, 0777) < 0 ? -errno : 0;
    }
    if (err < 0) {
        free(d->tmp);
        d->tmp = NULL;
        blco_diag_set(diag, 0, err, "%s: cannot create the output folder: %s", dir,
                      strerror(-err));
        goto fail;
    }
    free(parent);
    free(base);
    *out = d;
    return 0;
fail:
    free(parent);
    free(base);
    blco_outdir_abort(d);
    return err;
}

const char *blco_outdir_path(const blco_outdir_t *d) { return d ? d->tmp : NULL; }

int blco_outdir_commit(blco_outdir_t *d, blco_diag_t *diag)
{
    int err = 0;
    fsync_dir(d->tmp);
    if (rename(d->tmp, d->dir) == 0) {
        free(d->tmp);
        d->tmp = NULL;
    } else if (errno == ENOTEMPTY || errno == EEXIST) {
        /* DIR holds files: move ours in, each replacing its namesake. */
        DIR *dd = opendir(d->tmp);
        struct dirent *e;
        if (!dd)
            err = -errno;
        while (dd && err == 0 && (e = readdir(dd)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char from[4352], to[4352];
            snprintf(from, sizeof from, "%s/%s", d->tmp, e->d_name);
            snprintf(to, sizeof to, "%s/%s", d->dir, e->d_name);
            if (rename(from, to) < 0)
                err = -errno;
        }
        if (dd)
            closedir(dd);
        if (err == 0)
            fsync_dir(d->dir);
    } else {
        err = -errno;
    }
    if (err < 0)
        blco_diag_set(diag, 0, err, "%s: %s while moving the results into place", d->dir,
                      strerror(-err));
    char *parent, *base;
    if (err == 0 && split_path(d->dir, &parent, &base) == 0) {
        fsync_dir(parent);
        free(parent);
        free(base);
    }
    blco_outdir_abort(d);
    return err;
}
