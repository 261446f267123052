/* blco-cat: writes a .blco tensor back as .tns text (1-based by default), one segment at a
 * time, so a round trip can be checked with standard tools. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(void)
{
    printf("Usage: blco-cat [OPTIONS] FILE.blco\n"
           "Writes the tensor of a .blco file as FROSTT .tns text: one nonzero per line, in the\n"
           "file's (ALTO) order. Every segment is checked and decoded on the way. Indices are\n"
           "the source's: a file packed with --reorder is mapped back through its labels.\n"
           "\n"
           "  -o, --output FILE  write to FILE instead of standard output; FILE gets its\n"
           "                     name only when complete (mode 0666 less the umask)\n"
           "      --base 1|0     index base of the output (default 1, as FROSTT)\n"
           "      --force        replace an existing output file (never the input itself)\n"
           "  -h, --help         this help;  -V, --version  the version\n"
           "\n"
           "Example: compare a round trip with standard tools\n"
           "  blco-pack x.tns -o x.blco && blco-cat x.blco | sort > a; sort x.tns > b; cmp a b\n");
}

static blco_outfile_t *outf;
static const char *tmp_path; /* NULL when the output has no name until complete */

static void on_signal(int sig)
{
    if (tmp_path)
        unlink(tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv)
{
    cli_tool = "blco-cat";
    enum { O_BASE = 256, O_FORCE };
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"base", required_argument, 0, O_BASE},
        {"force", no_argument, 0, O_FORCE},    {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},      {0, 0, 0, 0},
    };
    const char *out = NULL;
    int base = 1, force = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case O_BASE:
            if (strcmp(optarg, "0") && strcmp(optarg, "1"))
                cli_usage_error("--base must be 0 or 1 (got '%s')", optarg);
            base = optarg[0] - '0';
            break;
        case O_FORCE: force = 1; break;
        case 'h': usage(); return 0;
        case 'V': printf("blco-cat %s\n", blco_version()); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    cli_log_init(0);
    const char *path;
    blco_file_t *f = cli_open_blco_arg(argc, argv, &path);
    blco_diag_t diag = {0};
    int err = 0;
    const blco_file_info_t *in = blco_file_info(f);
    const blco_layout_t *l = &in->layout;

    FILE *fp = stdout;
    if (out) {
        if ((err = blco_out_check_not_input(out, path, &diag)) < 0)
            cli_die("%s", diag.msg);
        if (!force && access(out, F_OK) == 0)
            cli_die("%s exists (use --force to replace it)", out);
        if ((err = blco_outfile_open(out, force, &outf, &diag)) < 0)
            cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
        tmp_path = blco_outfile_temp_path(outf);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        /* stdio on a copy of the descriptor: the original stays open for the commit */
        int fd = dup(blco_outfile_fd(outf));
        if (fd < 0 || !(fp = fdopen(fd, "w"))) {
            blco_outfile_abort(outf);
            cli_die("%s: %s", out, strerror(errno));
        }
    }

    blco_labels_t *labels = NULL;
    if ((err = blco_labels_load(f, NULL, &labels, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    uint64_t S = in->segment_nnz;
    size_t cap = in->max_segment_bytes + 64, tcap = 8u << 20;
    void *raw = malloc(cap);
    uint64_t *idx = malloc(S * 8), *coord[BLCO_MAX_MODES];
    double *val = malloc(S * 8);
    char *text = malloc(tcap);
    int ok = raw && idx && val && text;
    for (int n = 0; n < l->order; n++)
        ok &= (coord[n] = malloc(S * 8)) != NULL;
    if (!ok)
        cli_die("out of memory (segments of %llu nonzeros)", (unsigned long long)S);
    for (uint64_t s = 0; s < in->nsegments && err == 0; s++) {
        const blco_segment_t *sg = blco_file_segment(f, s);
        const blco_file_block_t *bk = blco_file_block(f, sg->block);
        if ((err = blco_file_read_segment(f, s, raw, cap, &diag)) < 0 ||
            (err = blco_segment_decode(f, s, raw, 0, idx, val, &diag)) < 0)
            break;
        for (uint64_t k = 0; k < sg->nnz; k++) {
            uint64_t x[BLCO_MAX_MODES];
            blco_layout_decode(l, idx[k], bk->b.coord, x);
            for (int n = 0; n < l->order; n++)
                coord[n][k] = blco_labels_user_index(labels, n, x[n]);
        }
        uint64_t done = 0;
        while (done < sg->nnz) {
            const uint64_t *part[BLCO_MAX_MODES];
            for (int n = 0; n < l->order; n++)
                part[n] = coord[n] + done;
            uint64_t used;
            size_t len = blco_tns_format(text, tcap, l->order, part, val + done, sg->nnz - done,
                                         base, &used);
            if (fwrite(text, 1, len, fp) != len) {
                err = errno ? -errno : -EIO;
                break;
            }
            done += used;
        }
    }
    if (err < 0) {
        blco_outfile_abort(outf);
        if (diag.msg[0])
            cli_die("%s", diag.msg);
        cli_die("%s: %s", out ? out : "standard output", strerror(-err));
    }
    if (fflush(fp) != 0 || ferror(fp) || (out && fclose(fp) != 0)) {
        int e = errno ? errno : EIO;
        blco_outfile_abort(outf);
        cli_die("%s: %s", out ? out : "standard output", strerror(e));
    }
    if (out) {
        blco_outfile_t *of = outf;
        outf = NULL;
        if ((err = blco_outfile_commit(of, &diag)) < 0)
            cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
        tmp_path = NULL;
    }
    for (int n = 0; n < l->order; n++)
        free(coord[n]);
    free(raw);
    free(idx);
    free(val);
    free(text);
    blco_labels_free(labels);
    blco_file_close(f);
    return 0;
}
