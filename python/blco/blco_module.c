/* blco._blco: the C extension behind the Python package (python/blco/__init__.py). Thin
 * wrappers over the public API: numpy arrays in and out, the GIL released while the library
 * works, its negative codes raised as Python exceptions carrying the diag message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"

/* ---- errors ---- */

/* The library's message in this package's words: the tools' options it names become the
 * keywords that do the same here. */
static const char *py_words(const char *msg, char *out, size_t len)
{
    static const char *const from[] = {"(use --force to replace it)",
                                        "lower blco-tucker --y-mem or raise --gpu-mem-limit",
                                        "--gpu-mem-limit", "--mem-limit"};
    static const char *const to[] = {"(force=True replaces it)",
                                      "raise gpu_mem_limit or lower the ranks", "gpu_mem_limit",
                                      "mem_limit"};
    const int nw = (int)(sizeof from / sizeof from[0]);
    size_t n = 0;
    for (const char *p = msg; *p && n + 1 < len;) {
        int k = 0;
        while (k < nw && strncmp(p, from[k], strlen(from[k])))
            k++;
        if (k < nw) {
            const size_t w = strlen(to[k]);
            if (n + w >= len)
                break;
            memcpy(out + n, to[k], w);
            n += w;
            p += strlen(from[k]);
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = 0;
    return out;
}

/* Raises the exception for library code `err` (< 0) and returns NULL: MemoryError for the
 * budget or a GPU's memory, OSError (with errno, so FileNotFoundError and friends) for the
 * system's codes, KeyboardInterrupt for a cancelled run, ValueError for bad input or a bad
 * file. */
static PyObject *raise_code(int err, const blco_diag_t *d, const char *path)
{
    char buf[sizeof d->msg + 64];
    const char *msg = py_words(d && d->msg[0] ? d->msg : blco_strerror(err), buf, sizeof buf);
    char lbuf[sizeof buf + 40];
    if (d && d->line) {
        snprintf(lbuf, sizeof lbuf, "line %llu: %s", (unsigned long long)d->line, msg);
        msg = lbuf;
    }
    int e = -err;
    if (e == BLCO_ECANCELED) {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
    } else if (e == BLCO_EBUDGET || e == BLCO_EDEVMEM || e == ENOMEM) {
        PyErr_SetString(PyExc_MemoryError, msg);
    } else if (e > 0 && e < BLCO_EPARSE && e != EINVAL && e != E2BIG) {
        PyObject *args = path ? Py_BuildValue("(iss)", e, msg, path) : Py_BuildValue("(is)", e, msg);
        if (args) {
            PyErr_SetObject(PyExc_OSError, args);
            Py_DECREF(args);
        }
    } else if (e == BLCO_ENODEV || e == BLCO_ECUDA) {
        PyErr_SetString(PyExc_RuntimeError, msg);
    } else {
        PyErr_SetString(PyExc_ValueError, msg);
    }
    return NULL;
}

/* Of the paths a call was given (NULL: none), the one the library's message names,
 * for OSError's filename: the first when there is no message, none when it names none. */
static const char *named_path(const blco_diag_t *d, const char *a, const char *b, const char *c)
{
    const char *cand[3] = {a, b, c};
    if (!d || !d->msg[0])
        return a;
    for (int i = 0; i < 3; i++)
        if (cand[i] && cand[i][0] && strstr(d->msg, cand[i]))
            return cand[i];
    return NULL;
}

/* ---- SIGINT while the GIL is released ---- */
/* Python's own handler only runs when the interpreter gets the GIL back, so while the
 * library works a C handler cancels it instead; the caller raises KeyboardInterrupt after.
 * Only on the main thread (the one that receives Python's signals). */
static volatile sig_atomic_t sigint_flag;
static blco_stream_t *volatile sigint_stream;

static void on_sigint(int sig)
{
    (void)sig;
    sigint_flag = 1;
    blco_stream_t *s = sigint_stream;
    if (s)
        blco_stream_cancel(s);
}

typedef struct sigint_guard {
    int active;
    struct sigaction old;
} sigint_guard_t;

static void sigint_catch(sigint_guard_t *g, blco_stream_t *s)
{
    PyOS_sighandler_t h = PyOS_getsig(SIGINT);
    g->active = _PyOS_IsMainThread() && h != SIG_IGN && h != SIG_DFL;
    if (!g->active)
        return;
    sigint_flag = 0;
    sigint_stream = s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g->old);
}

static void sigint_restore(sigint_guard_t *g)
{
    if (!g->active)
        return;
    sigaction(SIGINT, &g->old, NULL);
    sigint_stream = NULL;
}

/* A size keyword (`name`): None (0), a positive int, or a string such as "512M". */
static uint64_t size_arg(PyObject *o, const char *name, int *ok)
{
    *ok = 1;
    if (!o || o == Py_None)
        return 0;
    if (PyUnicode_Check(o)) {
        uint64_t v;
        if (blco_parse_size(PyUnicode_AsUTF8(o), &v) < 0 || v == 0) {
            PyErr_Format(PyExc_ValueError, "%s: a size such as 512M, 8G or 4096", name);
            *ok = 0;
        }
        return v;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred() || v == 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: a positive number of bytes or a size string", name);
        *ok = 0;
    }
    return v;
}

static uint64_t mem_limit_arg(PyObject *o, int *ok)
{
    return size_arg(o, "mem_limit", ok);
}

/* gpus=, gpu_mem_limit= and gpu_schedule=, as the tools' --gpus, --gpu-mem-limit and
 * --gpu-schedule: the devices a GPU backend takes (ngpus 0: every one that answers), the
 * device bytes each may use (0: what it has free) and the MTTKRP kernel's chunk schedule
 * (enum blco_gpu_schedule, auto by default). */
typedef struct gpu_sel {
    int ngpus;
    int gpus[BLCO_MAX_GPUS];
    uint64_t mem;
    uint64_t keep; /* device bytes kept out of residency (HOOI's TTM chains), set by tucker */
    int schedule;
} gpu_sel_t;

/* gpu_schedule=: "auto", "contiguous" or "interleaved" into g; -1 with a ValueError. */
static int gpu_schedule_arg(const char *s, gpu_sel_t *g)
{
    g->schedule = blco_gpu_schedule_parse(s);
    if (g->schedule >= 0)
        return 0;
    PyErr_Format(PyExc_ValueError, "gpu_schedule '%s': one of auto, contiguous, interleaved", s);
    return -1;
}

/* Fills *g from the keywords; -1 with a ValueError for a bad one. */
static int gpu_sel_arg(PyObject *gpus_o, PyObject *mem_o, gpu_sel_t *g)
{
    memset(g, 0, sizeof *g);
    int ok;
    g->mem = size_arg(mem_o, "gpu_mem_limit", &ok);
    if (!ok)
        return -1;
    if (!gpus_o || gpus_o == Py_None)
        return 0;
    const char *bad = "gpus: a device number, a list of them, or None (every device)";
    if (PyUnicode_Check(gpus_o) || PyBytes_Check(gpus_o)) {
        PyErr_SetString(PyExc_ValueError, bad);
        return -1;
    }
    PyObject *seq = PyLong_Check(gpus_o) ? PyTuple_Pack(1, gpus_o) : PySequence_Fast(gpus_o, bad);
    if (!seq) {
        PyErr_SetString(PyExc_ValueError, bad);
        return -1;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int err = 0;
    if (n < 1 || n > BLCO_MAX_GPUS) {
        PyErr_Format(PyExc_ValueError, "gpus: 1 to %d devices, not %zd", BLCO_MAX_GPUS, n);
        err = -1;
    }
    for (Py_ssize_t i = 0; i < n && !err; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        const long v = PyLong_Check(it) ? PyLong_AsLong(it) : -1;
        if (v < 0 || v > 4095) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, bad);
            err = -1;
            break;
        }
        for (int k = 0; k < g->ngpus; k++)
            if (g->gpus[k] == (int)v) {
                PyErr_Format(PyExc_ValueError, "gpus: device %ld twice", v);
                err = -1;
            }
        g->gpus[g->ngpus++] = (int)v;
    }
    Py_DECREF(seq);
    return err;
}

static int codec_arg(const char *s)
{
    /* indexed by enum blco_pack_codec */
    static const char *names[] = {"auto", "raw", "narrow", "delta", "zstd", "gpu", "compact"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, names[i]))
            return i;
    PyErr_Format(PyExc_ValueError,
                 "codec '%s': one of auto, gpu, compact, zstd, raw, narrow, delta", s);
    return -1;
}

/* ---- pack ---- */

struct pack_cb {
    PyObject *fn;
    PyThreadState **ts;
    int failed;
    volatile sig_atomic_t *cancel;
};

static void pack_progress(void *user, const blco_pack_progress_t *p)
{
    struct pack_cb *cb = user;
    if (!cb->fn || cb->failed)
        return;
    PyEval_RestoreThread(*cb->ts);
    PyObject *r = PyObject_CallFunction(cb->fn, "{s:s,s:K,s:K,s:K,s:K,s:K,s:d}", "phase",
                                        blco_pack_phase_name(p->phase), "file_bytes",
                                        (unsigned long long)p->file_bytes, "file_size",
                                        (unsigned long long)p->file_size, "nnz_read",
                                        (unsigned long long)p->nnz_read, "nnz_done",
                                        (unsigned long long)p->nnz_done, "nnz_phase",
                                        (unsigned long long)p->nnz_phase, "seconds", p->seconds);
    if (!r) {
        cb->failed = 1; /* the exception stays set; the pack is cancelled */
        *cb->cancel = 1;
    }
    Py_XDECREF(r);
    *cb->ts = PyEval_SaveThread();
}

static PyObject *py_pack(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"src",      "dst",   "mem_limit", "codec",
                             "progress", "force", "reorder",   NULL};
    PyObject *src_o, *dst_o, *mem_o = Py_None, *progress = Py_None;
    const char *codec = "auto", *reorder = "none";
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|OsOps", kwlist, PyUnicode_FSConverter, &src_o,
                                     PyUnicode_FSConverter, &dst_o, &mem_o, &codec, &progress,
                                     &force, &reorder))
        return NULL;
    int ro = !strcmp(reorder, "none")   ? BLCO_REORDER_NONE
             : !strcmp(reorder, "freq") ? BLCO_REORDER_FREQ
                                        : -1;
    if (ro < 0) {
        PyErr_Format(PyExc_ValueError, "reorder: '%s' is not one of none, freq", reorder);
        Py_DECREF(src_o);
        Py_DECREF(dst_o);
        return NULL;
    }
    PyObject *ret = NULL;
    blco_budget_t *budget = NULL;
    int ok, c = codec_arg(codec);
    uint64_t limit = mem_limit_arg(mem_o, &ok);
    if (c < 0 || !ok)
        goto fail;
    if (progress != Py_None && !PyCallable_Check(progress)) {
        PyErr_SetString(PyExc_ValueError, "progress: a callable or None");
        goto fail;
    }
    int err = blco_budget_create(&budget, limit);
    if (err < 0) {
        raise_code(err, NULL, NULL);
        goto fail;
    }
    volatile sig_atomic_t cancel_local = 0;
    sigint_guard_t g;
    sigint_catch(&g, NULL);
    /* SIGINT (the handler's flag) or an exception in the progress callback stops the pack. */
    volatile sig_atomic_t *cancel = g.active ? &sigint_flag : &cancel_local;
    *cancel = 0;
    PyThreadState *ts;
    struct pack_cb cb = {.fn = progress == Py_None ? NULL : progress, .ts = &ts, .cancel = cancel};
    blco_pack_opts_t o;
    blco_pack_opts_default(&o);
    o.budget = budget;
    o.threads = blco_budget_threads(budget, 0, BLCO_THREAD_BYTES_PACK);
    o.write.codec = c;
    o.write.force = force;
    o.write.creator = "blco-python " BLCO_PY_VERSION;
    o.reorder = ro;
    o.reorder_required = 1;
    o.progress = pack_progress;
    o.progress_user = &cb;
    o.cancel = cancel;
    blco_pack_stats_t st;
    blco_diag_t d = {0};
    const char *src = PyBytes_AS_STRING(src_o), *dst = PyBytes_AS_STRING(dst_o);
    ts = PyEval_SaveThread();
    err = blco_pack(src, dst, &o, &st, &d);
    PyEval_RestoreThread(ts);
    sigint_restore(&g);
    if (cb.failed)
        goto fail;
    if (err < 0) {
        raise_code(err, &d, named_path(&d, src, dst, NULL));
        goto fail;
    }
    PyObject *dims = PyTuple_New(st.order);
    if (!dims)
        goto fail;
    for (int m = 0; m < st.order; m++)
        PyTuple_SET_ITEM(dims, m, PyLong_FromUnsignedLongLong(st.dims[m]));
    ret = Py_BuildValue("{s:K,s:K,s:K,s:i,s:N,s:K,s:d,s:d,s:K,s:K,s:d,s:s}", "nnz",
                        (unsigned long long)st.nnz, "nnz_read", (unsigned long long)st.nnz_read,
                        "duplicates", (unsigned long long)st.duplicates, "order", st.order, "dims",
                        dims, "bytes_out", (unsigned long long)st.bytes_out, "bytes_per_nnz",
                        st.bytes_per_nnz, "norm2", st.norm2, "runs", (unsigned long long)st.runs,
                        "peak_budget", (unsigned long long)st.peak_budget, "seconds", st.seconds,
                        "reorder", blco_reorder_name(st.reorder));
fail:
    blco_budget_destroy(budget);
    Py_DECREF(src_o);
    Py_DECREF(dst_o);
    return ret;
}

/* ---- from_coo ---- */

static PyObject *py_from_coo(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"indices", "values", "dims", "dst", "codec", "force", NULL};
    PyObject *ind_o, *val_o, *dims_o, *dst_o;
    const char *codec = "auto";
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO&|sp", kwlist, &ind_o, &val_o, &dims_o,
                                     PyUnicode_FSConverter, &dst_o, &codec, &force))
        return NULL;
    PyObject *ret = NULL, *dims_seq = NULL;
    PyArrayObject *ind = NULL, *val = NULL;
    blco_coo_t *coo = NULL;
    blco_tensor_t *t = NULL;
    int c = codec_arg(codec);
    if (c < 0)
        goto fail;
    /* Unsigned indices (uint64 from scipy or numpy.unravel_index on some platforms) are
     * read as such: int64 would refuse their values above 2^63 - 1 as an unsafe cast. */
    const int unsigned_ind = PyArray_Check(ind_o) && PyArray_ISUNSIGNED((PyArrayObject *)ind_o);
    ind = (PyArrayObject *)PyArray_FROMANY(ind_o, unsigned_ind ? NPY_UINT64 : NPY_INT64, 2, 2,
                                           NPY_ARRAY_IN_ARRAY);
    val = (PyArrayObject *)PyArray_FROMANY(val_o, NPY_FLOAT64, 1, 1, NPY_ARRAY_IN_ARRAY);
    if (!ind || !val) {
        if (PyErr_ExceptionMatches(PyExc_TypeError))
            PyErr_SetString(PyExc_ValueError,
                            "indices: an integer array nnz x order; values: a float array nnz");
        goto fail;
    }
    npy_intp nnz = PyArray_DIM(ind, 0), order = PyArray_DIM(ind, 1);
    if (PyArray_DIM(val, 0) != nnz || order < 2 || order > BLCO_MAX_MODES) {
        PyErr_Format(PyExc_ValueError,
                     "indices (%zd x %zd) and values (%zd): need nnz x order indices, order "
                     "2..%d, and nnz values",
                     (Py_ssize_t)nnz, (Py_ssize_t)order, (Py_ssize_t)PyArray_DIM(val, 0),
                     BLCO_MAX_MODES);
        goto fail;
    }
    dims_seq = PySequence_Fast(dims_o, "dims: a sequence of positive integers");
    if (!dims_seq)
        goto fail;
    if (PySequence_Fast_GET_SIZE(dims_seq) != order) {
        PyErr_Format(PyExc_ValueError, "dims has %zd entries for indices of order %zd",
                     PySequence_Fast_GET_SIZE(dims_seq), (Py_ssize_t)order);
        goto fail;
    }
    uint64_t dims[BLCO_MAX_MODES];
    for (npy_intp m = 0; m < order; m++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(dims_seq, m));
        if (v <= 0) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError) ||
                PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "dims[%zd]: a positive integer", (Py_ssize_t)m);
            }
            goto fail;
        }
        dims[m] = (uint64_t)v;
    }
    const int64_t *ip = PyArray_DATA(ind);
    const uint64_t *up = PyArray_DATA(ind);
    const double *vp = PyArray_DATA(val);
    const char *dst = PyBytes_AS_STRING(dst_o);
    blco_diag_t d = {0};
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = blco_coo_create(&coo, (int)order, (uint64_t)nnz, NULL);
    for (npy_intp k = 0; err >= 0 && k < nnz; k++) {
        for (npy_intp m = 0; m < order; m++) {
            int64_t v = ip[k * order + m];
            uint64_t u = unsigned_ind ? up[k * order + m] : (uint64_t)v;
            if ((!unsigned_ind && v < 0) || u >= dims[m]) {
                char shown[32];
                if (unsigned_ind)
                    snprintf(shown, sizeof shown, "%llu", (unsigned long long)u);
                else
                    snprintf(shown, sizeof shown, "%lld", (long long)v);
                snprintf(d.msg, sizeof d.msg,
                         "indices[%lld, %lld] = %s is outside 0..%llu (0-based, dims[%lld] = %llu)",
                         (long long)k, (long long)m, shown, (unsigned long long)dims[m] - 1,
                         (long long)m, (unsigned long long)dims[m]);
                err = -BLCO_ERANGE;
                break;
            }
            coo->ind[m][k] = u;
        }
        if (err >= 0 && !isfinite(vp[k])) {
            snprintf(d.msg, sizeof d.msg,
                     "values[%lld] is %s: NaN and infinities cannot be stored", (long long)k,
                     isnan(vp[k]) ? "NaN" : "infinite");
            err = -BLCO_EVALUE;
        }
        coo->val[k] = vp[k];
    }
    if (err >= 0) {
        coo->nnz = (uint64_t)nnz;
        memcpy(coo->dims, dims, sizeof(uint64_t) * (size_t)order);
        blco_build_opts_t bo;
        blco_build_opts_default(&bo);
        err = blco_tensor_from_coo(coo, &bo, NULL, &t, &d);
    }
    if (err >= 0) {
        blco_write_opts_t wo;
        blco_write_opts_default(&wo);
        wo.codec = c;
        wo.force = force;
        wo.creator = "blco-python " BLCO_PY_VERSION;
        err = blco_tensor_write(t, dst, &wo, NULL, &d);
    }
    Py_END_ALLOW_THREADS
    if (err < 0) {
        raise_code(err, &d, named_path(&d, dst, NULL, NULL));
        goto fail;
    }
    ret = PyLong_FromUnsignedLongLong(t->nnz);
fail:
    blco_tensor_destroy(t);
    blco_coo_destroy(coo);
    Py_XDECREF(dims_seq);
    Py_XDECREF(ind);
    Py_XDECREF(val);
    Py_DECREF(dst_o);
    return ret;
}

/* ---- Tensor: an open stream ---- */

typedef struct {
    PyObject_HEAD
    blco_budget_t *budget;
    blco_stream_t *s;
    blco_file_info_t info;
    blco_stats_t stats;
    int busy; /* a call runs with the GIL released: the stream takes one at a time */
    int backend;      /* enum blco_backend the stream runs */
    char backend_why[300]; /* which backend, and why (auto says what it found) */
    char path[4096];
    blco_labels_t *labels; /* a file packed with --reorder: its labels, else NULL */
} TensorObject;

static void tensor_release(TensorObject *t)
{
    blco_stream_close(t->s);
    t->s = NULL;
    blco_labels_free(t->labels);
    t->labels = NULL;
    blco_budget_destroy(t->budget);
    t->budget = NULL;
}

static void tensor_dealloc(TensorObject *t)
{
    tensor_release(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int tensor_usable(TensorObject *t)
{
    if (!t->s) {
        PyErr_SetString(PyExc_ValueError, "the tensor is closed");
        return 0;
    }
    if (t->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the tensor is in use by another thread");
        return 0;
    }
    return 1;
}

static PyObject *tensor_close(TensorObject *t, PyObject *unused)
{
    (void)unused;
    if (t->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the tensor is in use by another thread");
        return NULL;
    }
    tensor_release(t);
    Py_RETURN_NONE;
}

/* Factors: a sequence of order float64 arrays, dims[m] x rank (factors[mode] only needs
 * rank columns). Fills arr[] (new references) and ptr[], returns rank or -1. */
static int factors_arg(const blco_file_info_t *in, int mode, PyObject *fo, PyArrayObject **arr,
                       const double **ptr)
{
    int order = in->layout.order;
    PyObject *seq = PySequence_Fast(fo, "factors: a list of float64 arrays, one per mode");
    if (!seq) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "factors: a list of float64 arrays, one per mode");
        return -1;
    }
    int rank = -1;
    if (PySequence_Fast_GET_SIZE(seq) != order) {
        PyErr_Format(PyExc_ValueError, "factors: %zd arrays for a tensor of %d modes",
                     PySequence_Fast_GET_SIZE(seq), order);
        goto out;
    }
    for (int m = 0; m < order; m++) {
        arr[m] = (PyArrayObject *)PyArray_FROMANY(PySequence_Fast_GET_ITEM(seq, m), NPY_FLOAT64, 2,
                                                  2, NPY_ARRAY_IN_ARRAY);
        if (!arr[m]) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "factors[%d]: a 2-d float64 array", m);
            goto out;
        }
        npy_intp r = PyArray_DIM(arr[m], 1);
        if (m == 0)
            rank = (int)r;
        if (r != rank || r < 1 || r > 1 << 20 ||
            (m != mode && (uint64_t)PyArray_DIM(arr[m], 0) != in->layout.dims[m])) {
            PyErr_Format(PyExc_ValueError, "factors[%d] is %zd x %zd; expected %llu x rank %d", m,
                         (Py_ssize_t)PyArray_DIM(arr[m], 0), (Py_ssize_t)r,
                         (unsigned long long)in->layout.dims[m], rank);
            rank = -1;
            goto out;
        }
        ptr[m] = PyArray_DATA(arr[m]);
    }
out:
    Py_DECREF(seq);
    return rank;
}

/* The streamed MTTKRP, its rows moved to the source's indices for a relabeled file. */
static int mttkrp_to_user(TensorObject *t, int mode, int rank, const double *const *f, double *out,
                          blco_diag_t *d)
{
    int err = blco_stream_mttkrp(t->s, mode, rank, f, out, d);
    if (err == 0 && blco_labels_rows_to_user(t->labels, mode, out, (uint64_t)rank) < 0)
        err = -ENOMEM;
    return err;
}

static PyObject *tensor_mttkrp(TensorObject *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mode", "factors", NULL};
    int mode;
    PyObject *fo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO", kwlist, &mode, &fo))
        return NULL;
    if (!tensor_usable(t))
        return NULL;
    int order = t->info.layout.order;
    if (mode < 0 || mode >= order) {
        PyErr_Format(PyExc_ValueError,
                     "mode %d: the tensor has %d modes, numbered 0 to %d in Python (as numpy "
                     "axes; the tools number them from 1)",
                     mode, order, order - 1);
        return NULL;
    }
    PyArrayObject *arr[BLCO_MAX_MODES] = {0};
    const double *ptr[BLCO_MAX_MODES] = {0};
    PyObject *ret = NULL;
    int rank = factors_arg(&t->info, mode, fo, arr, ptr);
    if (rank < 0)
        goto out;
    npy_intp shape[2] = {(npy_intp)t->info.layout.dims[mode], rank};
    PyArrayObject *o = (PyArrayObject *)PyArray_SimpleNew(2, shape, NPY_FLOAT64);
    if (!o)
        goto out;
    blco_diag_t d = {0};
    int err = 0;
    /* A relabeled file: the caller's factors are copied into the stored order. */
    double *moved[BLCO_MAX_MODES] = {0};
    for (int m = 0; m < order && err == 0; m++) {
        if (m == mode || !t->labels || !t->labels->new_to_old[m])
            continue;
        size_t bytes = (size_t)t->info.layout.dims[m] * (size_t)rank * sizeof(double);
        if (!(moved[m] = malloc(bytes)) ||
            blco_labels_rows_from_user(t->labels, m, memcpy(moved[m], ptr[m], bytes),
                                       (uint64_t)rank) < 0)
            err = -ENOMEM;
        ptr[m] = moved[m];
    }
    sigint_guard_t g;
    t->busy = 1;
    sigint_catch(&g, t->s);
    Py_BEGIN_ALLOW_THREADS err =
        err ? err : mttkrp_to_user(t, mode, rank, ptr, PyArray_DATA(o), &d);
    Py_END_ALLOW_THREADS
    sigint_restore(&g);
    t->busy = 0;
    for (int m = 0; m < order; m++)
        free(moved[m]);
    if (err < 0) {
        Py_DECREF(o);
        raise_code(err, &d, t->path);
        if (err == -BLCO_ECANCELED) /* a cancelled stream stays cancelled */
            tensor_release(t);
        goto out;
    }
    ret = (PyObject *)o;
out:
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        Py_XDECREF(arr[m]);
    return ret;
}

static PyObject *tensor_enter(TensorObject *t, PyObject *unused)
{
    (void)unused;
    Py_INCREF(t);
    return (PyObject *)t;
}

static PyObject *tensor_exit(TensorObject *t, PyObject *args)
{
    (void)args;
    PyObject *r = tensor_close(t, NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *tensor_repr(TensorObject *t)
{
    if (!t->s)
        return PyUnicode_FromFormat("<blco.Tensor '%s' closed>", t->path);
    char dims[400];
    int len = 0;
    for (int m = 0; m < t->info.layout.order && len < 360; m++)
        len += snprintf(dims + len, sizeof dims - len, "%s%llu", m ? ", " : "",
                        (unsigned long long)t->info.layout.dims[m]);
    return PyUnicode_FromFormat("<blco.Tensor '%s' dims=(%s) nnz=%llu>", t->path, dims,
                                (unsigned long long)t->info.nnz);
}

static PyObject *stages_dict(const uint64_t *ns)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < BLCO_STAGE_COUNT; i++) {
        PyObject *v = PyFloat_FromDouble((double)blco_stat_get(&ns[i]) * 1e-9);
        if (!v || PyDict_SetItemString(d, blco_stage_name(i), v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

static const char *backend_name(int b)
{
    return b == BLCO_BACKEND_HYBRID ? "hybrid" : b == BLCO_BACKEND_CUDA ? "cuda" : "cpu";
}

/* The engine's counters (named as in the JSON Lines records, docs/counters.md), read
 * with relaxed loads: what the stream did since it was opened. */
static PyObject *stats_dict(TensorObject *t)
{
    const blco_stats_t *s = &t->stats;
    blco_stream_gpu_stats_t gs;
    blco_stream_gpu_stats(t->s, &gs);
    uint64_t kns = blco_stat_get(&s->gpu_kernel_ns), ons = blco_stat_get(&s->gpu_overlap_ns);
#define U(f) (unsigned long long)blco_stat_get(&s->f)
    PyObject *d = Py_BuildValue(
        "{s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:K,s:K,s:K,s:K,"
        "s:i,s:s,s:s,s:K,s:K}",
        "backend", backend_name(t->backend), "backend_reason", t->backend_why, "bytes_read",
        U(bytes_read), "read_requests", U(read_requests), "bytes_resident", U(bytes_resident),
        "segments_verified", U(segments_verified), "segments_decoded", U(segments_decoded),
        "nnz_computed", U(nnz_computed), "passes", U(passes), "fallbacks", U(fallbacks),
        "slots_busy", U(slots_busy), "resident_bytes", U(resident_bytes), "gpu_resident_bytes",
        U(gpu_resident_bytes), "gpu_h2d_bytes", U(gpu_h2d_bytes), "gpu_kernel_s", kns * 1e-9,
        "gpu_overlap", kns ? (double)ons / (double)kns : 0.0, "gpu_batches", U(gpu_batches),
        "cpu_batches", U(cpu_batches), "gpu_decode_batches", U(gpu_decode_batches),
        "slots_total", (unsigned long long)s->slots_total, "gpus", gs.ndevices, "io_backend",
        s->io_backend, "residency", s->residency, "slot_bytes",
        (unsigned long long)s->slot_bytes, "peak_budget",
        (unsigned long long)blco_budget_peak(t->budget));
#undef U
    if (!d)
        return NULL;
    /* The kernel each mode's last MTTKRP ran (blco_stream_kernel_name; "none" before one). */
    PyObject *kl = d ? PyList_New(t->info.layout.order) : NULL;
    for (int m = 0; kl && m < t->info.layout.order; m++) {
        PyObject *v = PyUnicode_FromString(blco_stream_kernel_name(t->s, m));
        if (!v)
            Py_CLEAR(kl);
        else
            PyList_SET_ITEM(kl, m, v);
    }
    if (d && (!kl || PyDict_SetItemString(d, "kernels", kl) < 0))
        Py_CLEAR(d);
    Py_XDECREF(kl);
    if (!d)
        return NULL;
    /* The GPUs' chunk schedule by mode (blco_stream_gpu_stats_t): the passes that ran
     * contiguous and interleaved, and the kernels' ns a nonzero each took (0: not measured). */
    PyObject *sl = PyList_New(t->info.layout.order);
    for (int m = 0; sl && m < t->info.layout.order; m++) {
        PyObject *v = Py_BuildValue(
            "{s:K,s:K,s:d,s:d}", "contiguous_passes",
            (unsigned long long)gs.schedule_passes[m][0], "interleaved_passes",
            (unsigned long long)gs.schedule_passes[m][1], "contiguous_ns_per_nnz",
            gs.schedule_cost[m][0] * 1e9, "interleaved_ns_per_nnz", gs.schedule_cost[m][1] * 1e9);
        if (!v)
            Py_CLEAR(sl);
        else
            PyList_SET_ITEM(sl, m, v);
    }
    if (!sl || PyDict_SetItemString(d, "gpu_schedules", sl) < 0)
        Py_CLEAR(d);
    Py_XDECREF(sl);
    if (!d)
        return NULL;
    PyObject *busy = stages_dict(s->busy_ns), *wait = busy ? stages_dict(s->wait_ns) : NULL;
    if (!wait || PyDict_SetItemString(d, "busy_s", busy) < 0 ||
        PyDict_SetItemString(d, "wait_s", wait) < 0)
        Py_CLEAR(d);
    Py_XDECREF(busy);
    Py_XDECREF(wait);
    /* What crossed the bus, by direction and kind (enum blco_xfer), and copies of more than
     * 64 KiB from pageable memory (0 is what the engine promises). */
    for (int dir = 0; d && dir < 2; dir++) {
        PyObject *k = PyDict_New();
        for (int i = 0; k && i < BLCO_XFER_KINDS; i++) {
            PyObject *v = PyLong_FromUnsignedLongLong(
                blco_stat_get(dir ? &s->gpu_d2h_kind[i] : &s->gpu_h2d_kind[i]));
            if (!v || PyDict_SetItemString(k, blco_xfer_name(i), v) < 0)
                Py_CLEAR(k);
            Py_XDECREF(v);
        }
        if (!k || PyDict_SetItemString(d, dir ? "gpu_d2h" : "gpu_h2d", k) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
    }
    PyObject *v = d ? Py_BuildValue("K", (unsigned long long)gs.pageable_copies) : NULL;
    PyObject *w = v ? Py_BuildValue("K", (unsigned long long)blco_stat_get(&s->gpu_d2h_bytes))
                    : NULL;
    /* stored bytes the host copied into staging buffers for the GPUs (0 when the ring and
     * the resident copy are page-locked) */
    PyObject *x = w ? Py_BuildValue("K", (unsigned long long)gs.staged_bytes) : NULL;
    /* the host's seconds before the passes' batches and after the devices finished */
    PyObject *hb = x ? PyFloat_FromDouble(gs.host_begin_seconds) : NULL;
    PyObject *he = hb ? PyFloat_FromDouble(gs.host_end_seconds) : NULL;
    if (!he || PyDict_SetItemString(d, "pageable_copies", v) < 0 ||
        PyDict_SetItemString(d, "gpu_d2h_bytes", w) < 0 ||
        PyDict_SetItemString(d, "gpu_staged_bytes", x) < 0 ||
        PyDict_SetItemString(d, "gpu_host_begin_seconds", hb) < 0 ||
        PyDict_SetItemString(d, "gpu_host_end_seconds", he) < 0)
        Py_CLEAR(d);
    Py_XDECREF(v);
    Py_XDECREF(w);
    Py_XDECREF(x);
    Py_XDECREF(hb);
    Py_XDECREF(he);
    return d;
}

static PyObject *tensor_stats(TensorObject *t, PyObject *unused)
{
    (void)unused;
    if (!tensor_usable(t))
        return NULL;
    return stats_dict(t);
}

static PyObject *tensor_info(TensorObject *t, PyObject *unused)
{
    (void)unused;
    if (!tensor_usable(t))
        return NULL;
    const blco_file_info_t *in = &t->info;
    static const char *codecs[] = {"auto", "raw", "narrow", "delta", "zstd", "gpu", "compact"};
    PyObject *dims = PyTuple_New(in->layout.order);
    if (!dims)
        return NULL;
    for (int m = 0; m < in->layout.order; m++)
        PyTuple_SET_ITEM(dims, m, PyLong_FromUnsignedLongLong(in->layout.dims[m]));
    PyObject *counters = stats_dict(t);
    if (!counters) {
        Py_DECREF(dims);
        return NULL;
    }
    int pc = in->pack_codec >= 0 && in->pack_codec < 7 ? in->pack_codec : 0;
    return Py_BuildValue(
        "{s:s,s:i,s:N,s:K,s:d,s:K,s:K,s:K,s:K,s:K,s:s,s:s,s:s,s:i,s:s,s:s,s:(ii),s:K,s:K,s:N}",
        "path", t->path, "order", in->layout.order, "dims", dims, "nnz",
        (unsigned long long)in->nnz, "norm2", in->norm2, "nblocks", (unsigned long long)in->nblocks,
        "nsegments", (unsigned long long)in->nsegments, "segment_nnz",
        (unsigned long long)in->segment_nnz, "file_bytes", (unsigned long long)in->file_bytes,
        "duplicates", (unsigned long long)in->duplicates, "values",
        in->value_type == BLCO_VALUES_F32 ? "float32" : "float64", "codec", codecs[pc], "creator",
        in->creator, "source_base", in->source_base, "describe", blco_stream_describe(t->s),
        "backend", backend_name(t->backend), "format_version", in->version_major,
        in->version_minor, "mem_limit", (unsigned long long)blco_budget_limit(t->budget),
        "peak_budget", (unsigned long long)blco_budget_peak(t->budget), "counters", counters);
}

static PyObject *tensor_dims(TensorObject *t, void *c)
{
    (void)c;
    PyObject *dims = PyTuple_New(t->info.layout.order);
    for (int m = 0; dims && m < t->info.layout.order; m++)
        PyTuple_SET_ITEM(dims, m, PyLong_FromUnsignedLongLong(t->info.layout.dims[m]));
    return dims;
}

static PyObject *tensor_nnz(TensorObject *t, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(t->info.nnz);
}

static PyObject *tensor_norm(TensorObject *t, void *c)
{
    (void)c;
    return PyFloat_FromDouble(sqrt(t->info.norm2));
}

static PyObject *tensor_closed(TensorObject *t, void *c)
{
    (void)c;
    return PyBool_FromLong(t->s == NULL);
}

static PyObject *tensor_path(TensorObject *t, void *c)
{
    (void)c;
    return PyUnicode_DecodeFSDefault(t->path);
}

static PyMethodDef tensor_methods[] = {
    {"mttkrp", (PyCFunction)(void (*)(void))tensor_mttkrp, METH_VARARGS | METH_KEYWORDS,
     "mttkrp(mode, factors) -> ndarray\n\n"
     "The MTTKRP of the tensor for `mode` (0-based), streamed from the file: a new\n"
     "float64 array dims[mode] x R. factors: one float64 array dims[n] x R per mode (that of\n"
     "`mode` is not read). ValueError for a bad mode or shapes, OSError for the disk,\n"
     "ValueError for a corrupt segment, KeyboardInterrupt on Ctrl-C (the tensor is closed)."},
    {"info", (PyCFunction)tensor_info, METH_NOARGS,
     "info() -> dict\n\n"
     "The header (order, dims, nnz, norm2, nblocks, nsegments, codec, creator...),\n"
     "the path the engine took (describe, backend, mem_limit, peak_budget) and its counters\n"
     "(the same dict as stats())."},
    {"stats", (PyCFunction)tensor_stats, METH_NOARGS,
     "stats() -> dict\n\n"
     "The streaming engine's counters since open: backend and backend_reason (which\n"
     "backend runs and why), bytes_read, read_requests, bytes_resident, segments_verified,\n"
     "segments_decoded, nnz_computed, passes, fallbacks, busy_s and wait_s (seconds per\n"
     "stage: read, verify, decode, compute), the GPU counters (gpu_h2d_bytes, gpu_kernel_s,\n"
     "gpu_overlap, gpu_batches, cpu_batches...; zero on the CPU), io_backend, residency,\n"
     "slots_total, slot_bytes, peak_budget. Names as in the JSON Lines of --stats."},
    {"close", (PyCFunction)tensor_close, METH_NOARGS,
     "close()\n\nReleases the stream and its memory; later calls raise ValueError. Idempotent."},
    {"__enter__", (PyCFunction)tensor_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)tensor_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tensor_getset[] = {
    {"dims", (getter)tensor_dims, NULL, "the dims, a tuple", NULL},
    {"nnz", (getter)tensor_nnz, NULL, "the number of nonzeros", NULL},
    {"norm", (getter)tensor_norm, NULL, "the Frobenius norm", NULL},
    {"closed", (getter)tensor_closed, NULL, "whether close() was called", NULL},
    {"path", (getter)tensor_path, NULL, "the .blco file", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blco._blco.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An open .blco file, streamed within a memory budget (use blco.open).",
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = (reprfunc)tensor_repr,
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
};

#define BACKEND_AUTO (-1)

static int backend_arg(const char *s)
{
    if (!strcmp(s, "auto"))
        return BACKEND_AUTO;
    if (!strcmp(s, "cpu"))
        return BLCO_BACKEND_CPU;
    if (!strcmp(s, "cuda"))
        return BLCO_BACKEND_CUDA;
    if (!strcmp(s, "hybrid"))
        return BLCO_BACKEND_HYBRID;
    PyErr_Format(PyExc_ValueError, "backend '%s': one of auto, cpu, cuda, hybrid", s);
    return -2;
}

/* The backend as blco-mttkrp and blco-cpd choose it (tools/cli.c): "auto" takes the GPUs
 * when a real one answers, else the CPU, and says why; "cuda" and "hybrid" take the devices
 * of sel (every one when it names none). When none answers, the stream's open fails with
 * the library's reason. Returns -1 with an exception (a device that does not answer, or a
 * warning turned into an error), else 0. */
static int backend_choose(int req, const gpu_sel_t *sel, blco_stream_opts_t *so, char *why,
                          size_t len)
{
    so->backend = BLCO_BACKEND_CPU;
    so->gpu_mem_limit = sel->mem;
    why[0] = 0;
    const int given = sel->ngpus || sel->mem || sel->schedule;
    int n = 0, emulated = 0;
    char none[256] = "";
    int err = req == BLCO_BACKEND_CPU ? -1 : blco_cuda_probe(&n, none, sizeof none);
    if (err == 0) {
        blco_cuda_t *ctx;
        if (blco_cuda_open(0, NULL, &ctx, NULL) == 0) {
            blco_cuda_info_t in;
            if (blco_cuda_info(ctx, &in) == 0)
                emulated = in.emulated;
            blco_cuda_close(ctx);
        }
    }
    if (req == BLCO_BACKEND_CPU)
        snprintf(why, len, "cpu (backend='cpu')");
    else if (req == BACKEND_AUTO && err < 0)
        snprintf(why, len, "cpu (auto: %s)", none[0] ? none : "no GPU answers");
    else if (req == BACKEND_AUTO && emulated)
        snprintf(why, len, "cpu (auto: the only GPU is the SIMT emulation, slower than the CPU; "
                           "backend='cuda' uses it)");
    if (why[0]) { /* the CPU runs it */
        char names[64] = "";
        const char *name[3] = {sel->ngpus ? "gpus" : NULL, sel->mem ? "gpu_mem_limit" : NULL,
                               sel->schedule ? "gpu_schedule" : NULL};
        for (int i = 0, k = 0; i < 3; i++)
            if (name[i])
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         k++ ? " and " : "", name[i]);
        if (given && PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                                      "%s not used, the CPU runs this job: %s", names, why) < 0)
            return -1;
        return 0;
    }
    so->backend = req == BACKEND_AUTO ? BLCO_BACKEND_CUDA : req;
    so->gpu_keep_free = sel->keep;
    so->gpu_schedule = sel->schedule;
    so->ngpus = 0;
    if (sel->ngpus) {
        for (int i = 0; i < sel->ngpus; i++) {
            if (err == 0 && sel->gpus[i] >= n) {
                char ids[32] = "0";
                if (n > 1)
                    snprintf(ids, sizeof ids, "0 to %d", n - 1);
                PyErr_Format(PyExc_ValueError, "gpus: device %d does not answer (%d GPU%s: %s)",
                             sel->gpus[i], n, n > 1 ? "s" : "", ids);
                return -1;
            }
            so->gpus[so->ngpus++] = sel->gpus[i];
        }
    } else {
        for (int i = 0; i < n && i < BLCO_MAX_GPUS; i++)
            so->gpus[so->ngpus++] = i;
    }
    snprintf(why, len, "%s on %d GPU%s%s%s", backend_name(so->backend), so->ngpus ? so->ngpus : 1,
             so->ngpus > 1 ? "s" : "", req == BACKEND_AUTO ? " (auto: a GPU answers)" : "",
             emulated ? " (the SIMT emulation)" : "");
    return 0;
}

/* fibers="auto|on|off" as blco-cpd's --fibers (enum blco_fibers_use), or -1 with a
 * ValueError. */
static int fibers_arg(const char *s)
{
    const int f = blco_fibers_use_parse(s);
    if (f < 0)
        PyErr_Format(PyExc_ValueError, "fibers '%s': one of auto, on, off", s);
    return f;
}

/* Opens a stream; keep_free: budget bytes the caller needs besides it; deterministic:
 * blco_stream_opts_t's (CP-ALS with a checkpoint, as blco-cpd); fibers: its fiber copies;
 * gpu_sorted: CP-ALS's copies sorted by each mode on the GPUs (blco-cpd --gpu-sorted). */
static TensorObject *tensor_open(const char *path, uint64_t limit, int backend,
                                 const gpu_sel_t *sel, uint64_t keep_free, int rank,
                                 int deterministic, int fibers, int gpu_sorted)
{
    TensorObject *t = PyObject_New(TensorObject, &TensorType);
    if (!t)
        return NULL;
    t->budget = NULL;
    t->s = NULL;
    t->labels = NULL;
    t->busy = 0;
    t->backend = BLCO_BACKEND_CPU;
    t->backend_why[0] = 0;
    snprintf(t->path, sizeof t->path, "%s", path);
    blco_stats_init(&t->stats);
    int err = blco_budget_create(&t->budget, limit);
    blco_diag_t d = {0};
    if (err >= 0) {
        blco_stream_opts_t so;
        blco_stream_opts_default(&so);
        so.threads = blco_budget_threads(t->budget, 0, BLCO_THREAD_BYTES_STREAM);
        if (backend_choose(backend, sel, &so, t->backend_why, sizeof t->backend_why) < 0) {
            Py_DECREF(t);
            return NULL;
        }
        t->backend = so.backend;
        so.keep_free = keep_free;
        so.rank = rank;
        so.stats = &t->stats;
        so.deterministic = deterministic;
        so.fibers = fibers;
        so.gpu_sorted = gpu_sorted;
        Py_BEGIN_ALLOW_THREADS
        err = blco_stream_open(path, &so, t->budget, &t->s, &d);
        if (err >= 0) /* factors in and results out in the source's indices */
            err = blco_labels_load_path(path, t->budget, &t->labels, &d);
        Py_END_ALLOW_THREADS
    }
    if (err < 0) {
        int n;
        if (err == -BLCO_EUNSUPPORTED && t->backend != BLCO_BACKEND_CPU &&
            blco_cuda_probe(&n, NULL, 0) == -BLCO_EUNSUPPORTED)
            err = -BLCO_ENODEV; /* a GPU backend asked of a build without CUDA */
        if (t->backend != BLCO_BACKEND_CPU &&
            (err == -BLCO_ENODEV || err == -BLCO_ECUDA || err == -BLCO_EUNSUPPORTED)) {
            char w[sizeof d.msg + 64];
            PyErr_Format(PyExc_RuntimeError, "backend '%s': %s (backend='cpu' runs on the CPU)",
                         backend_name(t->backend),
                         py_words(d.msg[0] ? d.msg : blco_strerror(err), w, sizeof w));
            Py_DECREF(t);
            return NULL;
        }
        Py_DECREF(t);
        raise_code(err, &d, path);
        return NULL;
    }
    t->info = *blco_stream_info(t->s);
    return t;
}

static PyObject *py_open(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"path", "mem_limit", "backend", "fibers", "gpus", "gpu_mem_limit",
                             "gpu_schedule", NULL};
    PyObject *path_o, *mem_o = Py_None, *gpus_o = Py_None, *gmem_o = Py_None;
    const char *backend = "auto", *fibers = "off", *schedule = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OssOOs", kwlist, PyUnicode_FSConverter,
                                     &path_o, &mem_o, &backend, &fibers, &gpus_o, &gmem_o,
                                     &schedule))
        return NULL;
    int ok, b = backend_arg(backend), fb = b > -2 ? fibers_arg(fibers) : -1;
    uint64_t limit = fb >= 0 ? mem_limit_arg(mem_o, &ok) : 0;
    gpu_sel_t sel;
    PyObject *ret = NULL;
    if (fb >= 0 && ok && gpu_sel_arg(gpus_o, gmem_o, &sel) == 0 &&
        gpu_schedule_arg(schedule, &sel) == 0)
        ret = (PyObject *)tensor_open(PyBytes_AS_STRING(path_o), limit, b, &sel, 0, 0, 0, fb,
                                      0);
    Py_DECREF(path_o);
    return ret;
}

/* ---- cp_als ---- */

struct cpd_run {
    TensorObject *t;
    PyObject *callback;
    PyThreadState *ts;
    double *seconds; /* per iteration, max_iters of them */
    int max_iters;
    int failed; /* the callback raised */
    blco_diag_t diag; /* the last MTTKRP failure */
};

static int cpd_mttkrp(void *ctx, int mode, int rank, const double *const *factors, double *out)
{
    struct cpd_run *r = ctx;
    return blco_stream_mttkrp(r->t->s, mode, rank, factors, out, &r->diag);
}

static int cpd_on_iter(void *user, const blco_cpd_iter_t *it)
{
    struct cpd_run *r = user;
    if (it->iteration >= 1 && it->iteration <= r->max_iters)
        r->seconds[it->iteration - 1] = it->seconds;
    if (!r->callback)
        return 0;
    PyEval_RestoreThread(r->ts);
    PyObject *res = PyObject_CallFunction(r->callback, "{s:i,s:d,s:d,s:d,s:d}", "iteration",
                                          it->iteration, "fit", it->fit, "delta", it->delta,
                                          "seconds", it->seconds, "mttkrp_seconds",
                                          it->mttkrp_seconds);
    if (!res)
        r->failed = 1;
    Py_XDECREF(res);
    r->ts = PyEval_SaveThread();
    return r->failed ? -BLCO_ECANCELED : 0;
}

static PyObject *py_cp_als(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"path",           "rank",       "n_iter_max", "tol",
                             "random_state",   "init_dir",   "checkpoint", "resume",
                             "callback",       "mem_limit",  "backend",    "fibers",
                             "gpus",           "gpu_mem_limit", "gpu_sorted", "gpu_schedule",
                             NULL};
    PyObject *path_o, *init_o = Py_None, *ck_o = Py_None, *cb = Py_None, *mem_o = Py_None;
    PyObject *gpus_o = Py_None, *gmem_o = Py_None, *sorted_o = Py_False;
    int rank, iters = 50, resume = 0, sorted = 0;
    double tol = 1e-5;
    unsigned long long seed = 1;
    const char *backend = "auto", *fibers = "auto", *schedule = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&i|idKOOpOOssOOOs", kwlist,
                                     PyUnicode_FSConverter, &path_o, &rank, &iters, &tol, &seed,
                                     &init_o, &ck_o, &resume, &cb, &mem_o, &backend, &fibers,
                                     &gpus_o, &gmem_o, &sorted_o, &schedule))
        return NULL;
    /* gpu_sorted: False, True, or "auto" (blco-cpd --gpu-sorted=auto) */
    if (PyUnicode_Check(sorted_o)) {
        const char *v = PyUnicode_AsUTF8(sorted_o);
        if (!v || strcmp(v, "auto")) {
            if (v)
                PyErr_Format(PyExc_ValueError, "gpu_sorted '%s': True, False or 'auto'", v);
            Py_DECREF(path_o);
            return NULL;
        }
        sorted = 2;
    } else if ((sorted = PyObject_IsTrue(sorted_o)) < 0) {
        Py_DECREF(path_o);
        return NULL;
    }
    gpu_sel_t sel;
    PyObject *ret = NULL, *init_b = NULL, *ck_b = NULL;
    TensorObject *t = NULL;
    blco_cpd_result_t *res = NULL;
    struct cpd_run run = {0};
    int ok = 0, b = backend_arg(backend), fb = b > -2 ? fibers_arg(fibers) : -1;
    uint64_t limit = fb >= 0 ? mem_limit_arg(mem_o, &ok) : 0;
    if (b < -1 || fb < 0 || !ok || gpu_sel_arg(gpus_o, gmem_o, &sel) < 0 ||
        gpu_schedule_arg(schedule, &sel) < 0)
        goto fail;
    if (rank < 1 || iters < 1 || !(tol >= 0)) {
        PyErr_SetString(PyExc_ValueError, "rank and n_iter_max must be >= 1, tol >= 0");
        goto fail;
    }
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_ValueError, "callback: a callable or None");
        goto fail;
    }
    if ((init_o != Py_None && !PyUnicode_FSConverter(init_o, &init_b)) ||
        (ck_o != Py_None && !PyUnicode_FSConverter(ck_o, &ck_b)))
        goto fail;
    const char *path = PyBytes_AS_STRING(path_o);
    /* The budget CP-ALS needs besides the tensor, from the header's dims. */
    blco_diag_t d = {0};
    blco_file_t *hf;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = blco_file_open(path, &hf, &d);
    Py_END_ALLOW_THREADS
    if (err < 0) {
        raise_code(err, &d, path);
        goto fail;
    }
    blco_file_info_t hi = *blco_file_info(hf);
    blco_file_close(hf);
    uint64_t cpd_bytes = blco_cpd_budget_bytes(hi.layout.order, hi.layout.dims, rank, iters);
    if (sorted == 2 && iters < BLCO_GPU_SORTED_AUTO_ITERS) {
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "gpu_sorted='auto': %d iteration%s end before it has timed every "
                             "mode (by iteration 4): the copies are not made (gpu_sorted=True "
                             "keeps them without timing)", iters, iters == 1 ? "" : "s") < 0)
            goto fail;
        sorted = 0;
    }
    if (!(t = tensor_open(path, limit, b, &sel, cpd_bytes, rank, ck_b != NULL, fb, sorted)))
        goto fail;
    if (sorted && t->backend == BLCO_BACKEND_CPU &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "gpu_sorted not used, the CPU runs this job: %s", t->backend_why) < 0)
        goto fail;
    run.t = t;
    run.callback = cb == Py_None ? NULL : cb;
    run.max_iters = iters;
    run.seconds = calloc((size_t)iters, sizeof(double));
    if (!run.seconds) {
        PyErr_NoMemory();
        goto fail;
    }
    blco_cpd_problem_t prob = {.order = t->info.layout.order,
                               .norm2 = t->info.norm2,
                               .mttkrp = cpd_mttkrp,
                               .ctx = &run,
                               .labels = t->labels};
    memcpy(prob.dims, t->info.layout.dims, sizeof prob.dims);
    /* On GPUs the factors and the dense steps stay on the devices. */
    if ((err = blco_stream_cpd_ops(t->s, rank, &prob.ops, &prob.ops_ctx)) < 0) {
        PyErr_Format(PyExc_RuntimeError, "CP-ALS on the GPUs: %s", blco_strerror(err));
        goto fail;
    }
    blco_cpd_opts_t o;
    blco_cpd_opts_default(&o);
    o.rank = rank;
    o.max_iters = iters;
    o.tol = tol;
    o.seed = seed;
    o.init_dir = init_b ? PyBytes_AS_STRING(init_b) : NULL;
    o.checkpoint_dir = ck_b ? PyBytes_AS_STRING(ck_b) : NULL;
    o.resume = resume;
    o.on_iter = cpd_on_iter;
    o.user = &run;
    sigint_guard_t g;
    t->busy = 1;
    sigint_catch(&g, t->s);
    double t0 = blco_now();
    run.ts = PyEval_SaveThread();
    err = blco_cpd_als(&prob, &o, t->budget, &res, &d);
    PyEval_RestoreThread(run.ts);
    double wall = blco_now() - t0;
    sigint_restore(&g);
    t->busy = 0;
    if (run.failed)
        goto fail;
    if (err < 0 && !d.msg[0])
        d = run.diag;
    if (err < 0) {
        raise_code(err, &d, named_path(&d, path, o.init_dir, o.checkpoint_dir));
        goto fail;
    }
    npy_intp rshape[1] = {rank}, hshape[1] = {res->iterations};
    PyObject *w = PyArray_SimpleNew(1, rshape, NPY_FLOAT64);
    PyObject *hist = PyArray_SimpleNew(1, hshape, NPY_FLOAT64);
    PyObject *secs = PyArray_SimpleNew(1, hshape, NPY_FLOAT64);
    PyObject *fl = PyList_New(res->order);
    if (!w || !hist || !secs || !fl) {
        Py_XDECREF(w);
        Py_XDECREF(hist);
        Py_XDECREF(secs);
        Py_XDECREF(fl);
        goto fail;
    }
    memcpy(PyArray_DATA((PyArrayObject *)w), res->lambda, sizeof(double) * (size_t)rank);
    memcpy(PyArray_DATA((PyArrayObject *)hist), res->fit_history,
           sizeof(double) * (size_t)res->iterations);
    double *sp = PyArray_DATA((PyArrayObject *)secs);
    /* After a resume the earlier iterations' times are unknown (0). */
    for (int i = 0; i < res->iterations; i++)
        sp[i] = i < iters ? run.seconds[i] : 0;
    for (int m = 0; m < res->order; m++) {
        npy_intp fshape[2] = {(npy_intp)res->dims[m], rank};
        PyObject *a = PyArray_SimpleNew(2, fshape, NPY_FLOAT64);
        if (!a) {
            Py_DECREF(w);
            Py_DECREF(hist);
            Py_DECREF(secs);
            Py_DECREF(fl);
            goto fail;
        }
        memcpy(PyArray_DATA((PyArrayObject *)a), res->factors[m],
               sizeof(double) * (size_t)res->dims[m] * (size_t)rank);
        PyList_SET_ITEM(fl, m, a);
    }
    PyObject *counters = stats_dict(t);
    if (!counters) {
        Py_DECREF(w);
        Py_DECREF(hist);
        Py_DECREF(secs);
        Py_DECREF(fl);
        goto fail;
    }
    ret = Py_BuildValue("{s:N,s:N,s:d,s:N,s:N,s:i,s:O,s:d,s:s,s:s,s:N}", "weights", w, "factors",
                        fl, "fit", res->fit, "fit_history", hist, "iter_seconds", secs,
                        "iterations", res->iterations, "converged",
                        res->converged ? Py_True : Py_False, "seconds", wall, "describe",
                        blco_stream_describe(t->s), "backend", backend_name(t->backend),
                        "counters", counters);
fail:
    blco_cpd_result_destroy(res); /* before the budget it holds */
    free(run.seconds);
    Py_XDECREF(t);
    Py_XDECREF(init_b);
    Py_XDECREF(ck_b);
    Py_DECREF(path_o);
    return ret;
}

/* ---- tucker ---- */

/* HOOI over the streaming engine, as blco-tucker runs it: the rows with nonzeros found in
 * one pass (their maps in a budget of their own), then the tensor opened with room left for
 * HOOI (Y(n) in row or column blocks when it does not fit whole). ranks: a sequence of
 * order ints; init_dir None: init "hosvd" or "random". */
static PyObject *py_tucker(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"path",         "ranks",    "n_iter_max", "tol",     "init",
                             "random_state", "init_dir", "mem_limit",  "backend", "fibers",
                             "gpus",         "gpu_mem_limit",          NULL};
    PyObject *path_o, *ranks_o, *init_o = Py_None, *mem_o = Py_None;
    PyObject *gpus_o = Py_None, *gmem_o = Py_None;
    int iters = 100;
    double tol = 1e-5;
    unsigned long long seed = 1;
    const char *init = "hosvd", *backend = "auto", *fibers = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|idsKOOssOO", kwlist, PyUnicode_FSConverter,
                                     &path_o, &ranks_o, &iters, &tol, &init, &seed, &init_o, &mem_o,
                                     &backend, &fibers, &gpus_o, &gmem_o))
        return NULL;
    gpu_sel_t sel;
    PyObject *ret = NULL, *init_b = NULL;
    TensorObject *t = NULL;
    blco_budget_t *rows_budget = NULL;
    blco_stream_tucker_t tk = {0};
    blco_tucker_result_t *res = NULL;
    blco_diag_t d = {0};
    int ok, b = backend_arg(backend), err, fb = b > -2 ? fibers_arg(fibers) : -1;
    uint64_t limit = mem_limit_arg(mem_o, &ok);
    const char *path = PyBytes_AS_STRING(path_o);
    if (b < -1 || fb < 0 || !ok || gpu_sel_arg(gpus_o, gmem_o, &sel) < 0)
        goto fail;
    if (iters < 1 || iters > 1024 || !(tol >= 0)) {
        PyErr_SetString(PyExc_ValueError, "n_iter_max must be 1..1024, tol >= 0");
        goto fail;
    }
    if (init_o != Py_None && !PyUnicode_FSConverter(init_o, &init_b))
        goto fail;
    blco_tucker_opts_t o;
    blco_tucker_opts_default(&o);
    o.init = init_b                    ? BLCO_TUCKER_INIT_DIR
             : !strcmp(init, "random") ? BLCO_TUCKER_INIT_RANDOM
                                       : BLCO_TUCKER_INIT_HOSVD;
    o.init_dir = init_b ? PyBytes_AS_STRING(init_b) : NULL;
    o.seed = seed;
    o.max_iters = iters;
    o.tol = tol;
    blco_file_t *hf;
    Py_BEGIN_ALLOW_THREADS
    err = blco_file_open(path, &hf, &d);
    Py_END_ALLOW_THREADS
    if (err < 0) {
        raise_code(err, &d, path);
        goto fail;
    }
    blco_file_info_t hi = *blco_file_info(hf);
    blco_file_close(hf);
    const int order = hi.layout.order;
    PyObject *seq = PySequence_Fast(ranks_o, "rank: an int or one int per mode");
    if (!seq)
        goto fail;
    Py_ssize_t nr = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t m = 0; m < nr && m < order; m++) {
        long r = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, m));
        o.ranks[m] = r > 0 && r <= INT32_MAX ? (int)r : 0;
        if ((uint64_t)o.ranks[m] > hi.layout.dims[m] || o.ranks[m] < 1) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError,
                             "rank[%zd] = %ld: each rank is from 1 to its mode's length (%llu)", m,
                             r, (unsigned long long)hi.layout.dims[m]);
            Py_DECREF(seq);
            goto fail;
        }
    }
    Py_DECREF(seq);
    if (nr != order) {
        PyErr_Format(PyExc_ValueError, "rank: %zd ranks for a tensor of %d modes", nr, order);
        goto fail;
    }
    /* the rows with nonzeros: one pass that keeps nothing, its maps in a budget of their own */
    uint64_t maps = 0;
    for (int m = 0; m < order; m++)
        maps += hi.layout.dims[m] * 8;
    if ((err = blco_budget_create(&rows_budget, limit)) < 0) {
        raise_code(err, &d, path);
        goto fail;
    }
    blco_stream_opts_t so;
    blco_stream_opts_default(&so);
    so.threads = blco_budget_threads(rows_budget, 0, BLCO_THREAD_BYTES_STREAM);
    so.residency = BLCO_RESIDENT_NONE;
    so.keep_free = maps;
    blco_stream_t *s0;
    Py_BEGIN_ALLOW_THREADS
    err = blco_stream_open(path, &so, rows_budget, &s0, &d);
    if (err >= 0) {
        err = blco_stream_tucker_rows(s0, rows_budget, &tk, &d);
        blco_stream_close(s0);
    }
    Py_END_ALLOW_THREADS
    if (err < 0) {
        raise_code(err, &d, path);
        goto fail;
    }
    blco_tucker_problem_t prob = {.order = order, .norm2 = hi.norm2};
    memcpy(prob.dims, hi.layout.dims, sizeof prob.dims);
    blco_stream_tucker_problem(&tk, &prob);
    /* what HOOI takes of what the limit leaves beside the row maps (Y(n) in blocks when it
     * does not fit whole); the engine is opened around it */
    uint64_t lim = blco_budget_limit(rows_budget), left = lim > maps ? lim - maps : 0;
    uint64_t need = blco_tucker_plan(&prob, &o, left, 64, NULL);
    if (need > left) {
        char a[32], c[32];
        PyErr_Format(PyExc_MemoryError,
                     "HOOI needs %s of the memory budget and %s is left for it: raise mem_limit "
                     "or lower the ranks",
                     blco_format_size(need, a, sizeof a), blco_format_size(left, c, sizeof c));
        goto fail;
    }
    /* room on the GPUs for Y(n), as blco-tucker leaves it */
    sel.keep = blco_tucker_device_keep(&prob, &o);
    if (!(t = tensor_open(path, limit, b, &sel, need + maps, 0, 0, fb, 0)))
        goto fail;
    tk.s = t->s;
    prob.labels = t->labels;
    /* the factors, Y(n) and dense steps on the GPUs when the stream has them */
    if ((err = blco_stream_tucker_ops(&tk, &prob.ops, &prob.ops_ctx)) < 0) {
        raise_code(err, &d, path);
        goto fail;
    }
    sigint_guard_t g;
    t->busy = 1;
    sigint_catch(&g, t->s);
    Py_BEGIN_ALLOW_THREADS
    err = blco_tucker_hooi(&prob, &o, t->budget, &res, &d);
    Py_END_ALLOW_THREADS
    sigint_restore(&g);
    t->busy = 0;
    if (err < 0 && !d.msg[0])
        d = tk.diag;
    if (err < 0) {
        raise_code(err, &d, named_path(&d, path, o.init_dir, NULL));
        goto fail;
    }
    npy_intp cshape[BLCO_MAX_MODES], hshape[1] = {res->iterations};
    for (int m = 0; m < order; m++)
        cshape[m] = res->ranks[m];
    PyObject *core = PyArray_SimpleNew(order, cshape, NPY_FLOAT64);
    PyObject *hist = PyArray_SimpleNew(1, hshape, NPY_FLOAT64);
    PyObject *fl = PyList_New(order);
    for (int m = 0; core && hist && fl && m < order; m++) {
        npy_intp fshape[2] = {(npy_intp)res->dims[m], res->ranks[m]};
        PyObject *u = PyArray_SimpleNew(2, fshape, NPY_FLOAT64);
        if (!u) {
            Py_CLEAR(fl);
            break;
        }
        memcpy(PyArray_DATA((PyArrayObject *)u), res->U[m],
               sizeof(double) * (size_t)res->dims[m] * (size_t)res->ranks[m]);
        PyList_SET_ITEM(fl, m, u);
    }
    if (!core || !hist || !fl) {
        Py_XDECREF(core);
        Py_XDECREF(hist);
        Py_XDECREF(fl);
        goto fail;
    }
    memcpy(PyArray_DATA((PyArrayObject *)core), res->core, sizeof(double) * res->core_size);
    memcpy(PyArray_DATA((PyArrayObject *)hist), res->fit_history,
           sizeof(double) * (size_t)(res->iterations < 1024 ? res->iterations : 1024));
    PyObject *counters = stats_dict(t);
    if (!counters) {
        Py_DECREF(core);
        Py_DECREF(hist);
        Py_DECREF(fl);
        goto fail;
    }
    ret = Py_BuildValue("{s:N,s:N,s:d,s:N,s:i,s:O,s:s,s:N}", "core", core, "factors", fl, "fit",
                        res->fit, "fit_history", hist, "iterations", res->iterations, "converged",
                        res->converged ? Py_True : Py_False, "backend", backend_name(t->backend),
                        "counters", counters);
fail:
    blco_tucker_result_destroy(res); /* before the budget it holds */
    Py_XDECREF(t);
    blco_stream_tucker_free(&tk);
    blco_budget_destroy(rows_budget);
    Py_XDECREF(init_b);
    Py_DECREF(path_o);
    return ret;
}

static PyObject *py_version(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(blco_version());
}

static PyMethodDef module_methods[] = {
    {"pack", (PyCFunction)(void (*)(void))py_pack, METH_VARARGS | METH_KEYWORDS, NULL},
    {"from_coo", (PyCFunction)(void (*)(void))py_from_coo, METH_VARARGS | METH_KEYWORDS, NULL},
    {"open", (PyCFunction)(void (*)(void))py_open, METH_VARARGS | METH_KEYWORDS, NULL},
    {"cp_als", (PyCFunction)(void (*)(void))py_cp_als, METH_VARARGS | METH_KEYWORDS, NULL},
    {"tucker", (PyCFunction)(void (*)(void))py_tucker, METH_VARARGS | METH_KEYWORDS, NULL},
    {"version", py_version, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_blco", "The C extension of the blco package.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__blco(void);
PyMODINIT_FUNC PyInit__blco(void)
{
    import_array();
    if (PyType_Ready(&TensorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    /* a fit below it gets a warning (blco/cpd.h) */
    if (PyModule_AddObject(m, "FIT_LOW", PyFloat_FromDouble(BLCO_FIT_LOW)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&TensorType);
    if (PyModule_AddObject(m, "Tensor", (PyObject *)&TensorType) < 0) {
        Py_DECREF(&TensorType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
