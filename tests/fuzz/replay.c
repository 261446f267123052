/* Replays fuzz inputs without libFuzzer: runs LLVMFuzzerTestOneInput on every file named
 * on the command line and on every file directly inside the directories named there, so
 * the checked-in corpus is a regression test of the normal test suite. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs one input from an exactly sized heap copy, so that ASan sees any read past its end.
 * Returns 0 or -errno. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    int err = 0;
    while (buf) {
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    if (!buf || ferror(f))
        err = buf ? -EIO : -ENOMEM;
    fclose(f);
    uint8_t *exact = err ? NULL : malloc(len ? len : 1);
    if (!err && !exact)
        err = -ENOMEM;
    if (!err) {
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
    }
    free(exact);
    free(buf);
    return err;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs the regular files directly inside `dir` (no recursion), in name order, skipping
 * names that start with '.'. Returns the number run, or -errno. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    char **names = NULL;
    size_t n = 0, cap = 0;
    long ran = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap ? cap * 2 : 64) * sizeof *names);
            if (!nn) {
                ran = -ENOMEM;
                break;
            }
            names = nn;
            cap = cap ? cap * 2 : 64;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            ran = -ENOMEM;
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (ran == 0)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n && ran >= 0; i++) {
        struct stat st;
        if (stat(names[i], &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        int err = run_file(names[i]);
        if (err < 0) {
            fprintf(stderr, "replay: %s: %s\n", names[i], strerror(-err));
            ran = err;
        } else {
            ran++;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    long total = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long ran;
        if (stat(argv[i], &st) < 0)
            ran = -errno;
        else if (S_ISDIR(st.st_mode))
            ran = run_dir(argv[i]);
        else if ((ran = run_file(argv[i])) == 0)
            ran = 1;
        if (ran < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror((int)-ran));
            return 1;
        }
        total += ran;
    }
    printf("replay: %ld inputs ran\n", total);
    return 0;
}
