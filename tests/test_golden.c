/* Golden .blco v1 files (tests/golden, made by make_golden.c): the good ones read back to
 * their .tns twins, each corrupt one fails with its own specific error. Readers of every
 * later version must keep passing this. */
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"

static char dir[4096];

static void check_good(const char *name)
{
    char bpath[4200], tpath[4200];
    snprintf(bpath, sizeof bpath, "%s/%s.blco", dir, name);
    snprintf(tpath, sizeof tpath, "%s/%s.tns", dir, name);
    blco_diag_t d = {0};
    blco_file_info_t info;
    CHECK(blco_file_verify(bpath, &info, &d) == 0, "%s: verify: %s", name, d.msg);
    blco_tensor_t *t;
    int err = blco_file_load(bpath, NULL, &t, NULL, &d);
    CHECK(err == 0, "%s: load: %s", name, d.msg);
    if (err)
        return;
    blco_tns_opts_t o;
    blco_tns_opts_default(&o);
    blco_coo_t *c;
    err = blco_tns_read_file(tpath, &o, NULL, &c, NULL, &d);
    CHECK(err == 0 && c->nnz == t->nnz, "%s: twin: %s", name, d.msg);
    uint64_t bad = 0;
    for (uint64_t k = 0; err == 0 && k < t->nnz; k++) {
        uint64_t x[3];
        double v;
        blco_tensor_get(t, k, x, &v);
        bad += x[0] != c->ind[0][k] || x[1] != c->ind[1][k] || x[2] != c->ind[2][k] ||
               v != c->val[k];
    }
    CHECK(bad == 0, "%s: %llu nonzeros differ from the .tns twin", name,
          (unsigned long long)bad);
    CHECK(info.version_major == 1 && info.layout.order == 3 && info.layout.dims[0] == 1000 &&
              info.layout.dims[1] == 500 && info.layout.dims[2] == 64 && info.nsegments >= 2,
          "%s: header facts", name);
    blco_tensor_destroy(t);
    if (!err)
        blco_coo_destroy(c);
}

static void check_bad(const char *name, int open_err, int verify_err, const char *phrase)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.blco", dir, name);
    blco_diag_t d = {0};
    blco_file_t *f = NULL;
    int err = blco_file_open(path, &f, &d);
    CHECK(err == open_err, "%s: open gave %d (%s), want %d", name, err, d.msg, open_err);
    if (err == 0)
        blco_file_close(f);
    err = blco_file_verify(path, NULL, &d);
    CHECK(err == verify_err && strstr(d.msg, phrase), "%s: verify gave %d '%s', want %d '%s'",
          name, err, d.msg, verify_err, phrase);
    CHECK(strstr(d.msg, name) != NULL, "%s: the message names the file: %s", name, d.msg);
    blco_tensor_t *t;
    CHECK(blco_file_load(path, NULL, &t, NULL, &d) == verify_err, "%s: load", name);
}

int main(void)
{
    const char *src = getenv("BLCO_TESTS_DIR");
    snprintf(dir, sizeof dir, "%s/golden", src ? src : "tests");
    check_good("v1-good-auto");
    check_good("v1-good-raw-f32");
    check_bad("v1-bad-magic", -BLCO_EFORMAT, -BLCO_EFORMAT, "not a .blco file");
    check_bad("v1-bad-newer-major", -BLCO_EVERSION, -BLCO_EVERSION, "newer");
    check_bad("v1-bad-header-checksum", -BLCO_ECHECKSUM, -BLCO_ECHECKSUM, "corrupt header");
    check_bad("v1-bad-truncated", -BLCO_EFORMAT, -BLCO_EFORMAT, "truncated");
    check_bad("v1-bad-short", -BLCO_EFORMAT, -BLCO_EFORMAT, "truncated");
    check_bad("v1-bad-trailing", -BLCO_EFORMAT, -BLCO_EFORMAT, "trailing data");
    check_bad("v1-bad-segment-byte", 0, -BLCO_ECHECKSUM, "segment 0");
    check_bad("v1-bad-block-table", -BLCO_ECHECKSUM, -BLCO_ECHECKSUM, "block table");
    return check_done();
}
