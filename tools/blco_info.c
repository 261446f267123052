/* blco-info: what a .blco file holds (header, dims, blocks, segments, codec mix, bytes per
 * nonzero), as text or JSON, and --verify to check every checksum and decode everything. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(void)
{
    printf("Usage: blco-info [OPTIONS] FILE.blco\n"
           "Shows what a .blco file holds: format version, dims, nonzeros, index bits,\n"
           "blocks and segments, the codecs used and the bytes per nonzero.\n"
           "\n"
           "  -v, --verify    also read every segment: check its checksum, decode it, check\n"
           "                  every coordinate against the dims, every value finite, the\n"
           "                  padding, and the header's sum of squares against the data's;\n"
           "                  exit 1 with the first problem found\n"
           "  -j, --json      print one JSON object\n"
           "  -s, --segments  list every segment (offset, nonzeros, bytes, codecs)\n"
           "  -h, --help      this help;  -V, --version  the version\n"
           "\n"
           "Exit status: 0 when the file is valid (and verified, with --verify), 1 otherwise.\n");
}

static const char *index_codec_name(int c)
{
    static const char *const n[] = {"raw", "narrow", "delta"};
    static char buf[4][32];
    static int slot;
    int base = c & 0x7f;
    char *b = buf[slot++ & 3];
    snprintf(b, 32, "%s%s", base < 3 ? n[base] : "unknown", c & 0x80 ? "+zstd" : "");
    return b;
}

static const char *value_codec_name(int c)
{
    static const char *const n[] = {"f64", "f32", "f64-planes", "f32-planes", "int", "decimal"};
    static char buf[4][32];
    static int slot;
    int base = c & 0x7f;
    char *b = buf[slot++ & 3];
    snprintf(b, 32, "%s%s", base < 6 ? n[base] : "unknown", c & 0x80 ? "+zstd" : "");
    return b;
}

int main(int argc, char **argv)
{
    cli_tool = "blco-info";
    static const struct option opts[] = {
        {"verify", no_argument, 0, 'v'},   {"json", no_argument, 0, 'j'},
        {"segments", no_argument, 0, 's'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},  {0, 0, 0, 0},
    };
    int verify = 0, json = 0, list = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":vjshV", opts, NULL)) != -1) {
        switch (c) {
        case 'v': verify = 1; break;
        case 'j': json = 1; break;
        case 's': list = 1; break;
        case 'h': usage(); return 0;
        case 'V': printf("blco-info %s\n", blco_version()); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    cli_log_init(0);
    const char *path;
    blco_file_t *f = cli_open_blco_arg(argc, argv, &path);
    int err = 0;
    const blco_file_info_t *in = blco_file_info(f);
    const blco_layout_t *l = &in->layout;

    /* Codec mix: segments and stored bytes per codec, per column. */
    uint64_t iseg[256] = {0}, ibytes[256] = {0}, vseg[256] = {0}, vbytes[256] = {0};
    uint64_t idx_total = 0, val_total = 0, gpu_dec = 0;
    for (uint64_t s = 0; s < in->nsegments; s++) {
        const blco_segment_t *sg = blco_file_segment(f, s);
        /* What the GPU backends copy encoded and decode on the device (FORMAT.md). */
        gpu_dec += sg->index_codec <= 2 && /* 4: integer values, 5: decimal (f64 files) */
                   (sg->value_codec <= 4 ||
                    (sg->value_codec == 5 && in->value_type == BLCO_VALUES_F64));
        iseg[sg->index_codec]++;
        ibytes[sg->index_codec] += sg->index_bytes;
        vseg[sg->value_codec]++;
        vbytes[sg->value_codec] += sg->value_bytes;
        idx_total += sg->index_bytes;
        val_total += sg->value_bytes;
    }
    const char *verdict = NULL;
    char vmsg[sizeof ((blco_diag_t *)0)->msg] = "";
    if (verify) {
        blco_diag_t vd = {0};
        int verr = blco_file_verify(path, NULL, &vd);
        verdict = verr == 0 ? "ok" : "failed";
        snprintf(vmsg, sizeof vmsg, "%s", verr == 0 ? "" : vd.msg[0] ? vd.msg : blco_strerror(verr));
        if (verr < 0)
            err = verr;
    }
    double bpn = (double)in->file_bytes / (double)in->nnz;

    if (json) {
        printf("{\"file\":\"%s\",\"format_version\":\"%d.%d\",\"creator\":\"%s\",\"order\":%d,"
               "\"dims\":[",
               path, in->version_major, in->version_minor, in->creator, l->order);
        for (int n = 0; n < l->order; n++)
            printf("%s%llu", n ? "," : "", (unsigned long long)l->dims[n]);
        printf("],\"nnz\":%llu,\"duplicates_summed\":%llu,\"values\":\"%s\",\"index_bits\":%d,"
               "\"line_bits\":%d,\"key_bits\":%d,\"blocks\":%llu,\"segments\":%llu,"
               "\"segment_nnz\":%llu,\"norm\":%.17g,\"file_bytes\":%llu,"
               "\"bytes_per_nonzero\":%.4f,\"index_bytes\":%llu,\"value_bytes\":%llu,"
               "\"gpu_decodable_segments\":%llu,\"reorder\":\"%s\",\"relabeled_modes\":[",
               (unsigned long long)in->nnz, (unsigned long long)in->duplicates,
               in->value_type == BLCO_VALUES_F32 ? "f32" : "f64", l->total_bits, l->line_bits,
               l->key_bits, (unsigned long long)in->nblocks, (unsigned long long)in->nsegments,
               (unsigned long long)in->segment_nnz, sqrt(in->norm2),
               (unsigned long long)in->file_bytes, bpn, (unsigned long long)idx_total,
               (unsigned long long)val_total, (unsigned long long)gpu_dec,
               blco_reorder_name(in->reorder));
        int first = 1;
        for (int n = 0; n < l->order; n++)
            if (in->relabeled_modes >> n & 1) {
                printf("%s%d", first ? "" : ",", n + 1);
                first = 0;
            }
        printf("],\"labels_bytes\":%llu,\"reorder_seconds\":%.4f,\"index_codecs\":{",
               (unsigned long long)in->labels_bytes, in->reorder_seconds);
        first = 1;
        for (int k = 0; k < 256; k++)
            if (iseg[k]) {
                printf("%s\"%s\":{\"segments\":%llu,\"bytes\":%llu}", first ? "" : ",",
                       index_codec_name(k), (unsigned long long)iseg[k],
                       (unsigned long long)ibytes[k]);
                first = 0;
            }
        printf("},\"value_codecs\":{");
        first = 1;
        for (int k = 0; k < 256; k++)
            if (vseg[k]) {
                printf("%s\"%s\":{\"segments\":%llu,\"bytes\":%llu}", first ? "" : ",",
                       value_codec_name(k), (unsigned long long)vseg[k],
                       (unsigned long long)vbytes[k]);
                first = 0;
            }
        printf("}");
        if (verify) {
            printf(",\"verify\":\"%s\"", verdict);
            if (vmsg[0]) {
                printf(",\"verify_error\":\"");
                for (const char *p = vmsg; *p; p++)
                    printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
                printf("\"");
            }
        }
        printf("}\n");
    } else {
        char sz[32];
        printf("file          %s (%s)\n", path, blco_format_size(in->file_bytes, sz, sizeof sz));
        printf("format        .blco %d.%d, written by %s\n", in->version_major,
               in->version_minor, in->creator[0] ? in->creator : "(unknown)");
        printf("tensor        %d modes, ", l->order);
        for (int n = 0; n < l->order; n++)
            printf("%s%llu", n ? " x " : "", (unsigned long long)l->dims[n]);
        printf("\nnonzeros      %llu (%llu duplicates summed when packed), values %s, "
               "norm %.6g\n",
               (unsigned long long)in->nnz, (unsigned long long)in->duplicates,
               in->value_type == BLCO_VALUES_F32 ? "f32" : "f64", sqrt(in->norm2));
        printf("index         %d bits: %d in-block (line %d), %d in the block key\n",
               l->total_bits, l->total_bits - l->key_bits, l->line_bits, l->key_bits);
        printf("  mode   dim  bits  in-block field\n");
        for (int n = 0; n < l->order; n++)
            printf("  %4d %5llu  %4d  %d bits at %d\n", n + 1, (unsigned long long)l->dims[n],
                   l->bits[n], l->low_bits[n], l->pos[n]);
        printf("blocks        %llu\n", (unsigned long long)in->nblocks);
        printf("segments      %llu of at most %llu nonzeros, largest %s\n",
               (unsigned long long)in->nsegments, (unsigned long long)in->segment_nnz,
               blco_format_size(in->max_segment_bytes, sz, sizeof sz));
        printf("size          %.2f bytes per nonzero (index %.2f, values %.2f, the rest "
               "headers and padding)\n",
               bpn, (double)idx_total / in->nnz, (double)val_total / in->nnz);
        printf("codecs        index:");
        for (int k = 0; k < 256; k++)
            if (iseg[k])
                printf(" %s %llu", index_codec_name(k), (unsigned long long)iseg[k]);
        printf("; values:");
        for (int k = 0; k < 256; k++)
            if (vseg[k])
                printf(" %s %llu", value_codec_name(k), (unsigned long long)vseg[k]);
        printf(" (segments)\n");
        printf("gpu decode    %llu of %llu segments decode on a GPU (the rest, zstd-coded, by "
               "CPU threads)\n",
               (unsigned long long)gpu_dec, (unsigned long long)in->nsegments);
        if (in->relabeled_modes) {
            printf("relabeled     by %s (blco-pack --reorder), modes",
                   blco_reorder_name(in->reorder));
            for (int n = 0; n < l->order; n++)
                if (in->relabeled_modes >> n & 1)
                    printf(" %d", n + 1);
            printf("; labels %s, made in %.2f s; results are in the source's indices\n",
                   blco_format_size(in->labels_bytes, sz, sizeof sz), in->reorder_seconds);
        } else {
            printf("relabeled     no (indices as in the source)\n");
        }
        if (list) {
            printf("  segment      offset  block   first nnz      nnz    index    value  codecs\n");
            for (uint64_t s = 0; s < in->nsegments; s++) {
                const blco_segment_t *sg = blco_file_segment(f, s);
                printf("  %7llu %11llu %6llu %11llu %8llu %8llu %8llu  %s/%s\n",
                       (unsigned long long)s, (unsigned long long)sg->offset,
                       (unsigned long long)sg->block, (unsigned long long)sg->first_nnz,
                       (unsigned long long)sg->nnz, (unsigned long long)sg->index_bytes,
                       (unsigned long long)sg->value_bytes, index_codec_name(sg->index_codec),
                       value_codec_name(sg->value_codec));
            }
        }
        if (verify)
            printf("verify        %s%s%s\n", verdict, vmsg[0] ? ": " : "",
                   vmsg[0] ? vmsg : " (every checksum, segment, coordinate and padding)");
    }
    blco_file_close(f);
    if (err < 0 && !json)
        fprintf(stderr, "%s: %s\n", cli_tool, vmsg);
    return err < 0 ? 1 : 0;
}
