/* Builds without CUDA: the probe says so, every CUDA entry point returns -BLCO_ENODEV, and
 * the CPU backend does all the work. */
#include <stdio.h>

#include "blco_internal.h"
#include "gpu/cuda_cpd.h"
#include "gpu/cuda_decode.h"
#include "gpu/cuda_ttm.h"

static const char no_cuda[] = "this build has no CUDA backend (configured without nvcc or "
                              "with -Dcuda=disabled)";

int blco_cuda_probe(int *count, char *name, size_t len)
{
    *count = 0;
    if (name && len)
        snprintf(name, len, "%s", no_cuda);
    return -BLCO_EUNSUPPORTED;
}

/* The CUDA MTTKRP backend (src/include/blco/cuda.h): no context can be opened, so every
 * other entry point sees a NULL context or none at all. */

int blco_cuda_open(int device, const blco_cuda_opts_t *o, blco_cuda_t **out, blco_diag_t *diag)
{
    (void)device;
    (void)o;
    if (out)
        *out = NULL;
    blco_log(BLCO_LOG_INFO, "%s", no_cuda);
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

void blco_cuda_close(blco_cuda_t *ctx)
{
    (void)ctx;
}

void blco_cuda_trim(blco_cuda_t *ctx)
{
    (void)ctx;
}

uint64_t blco_cuda_unreleased_bytes(void)
{
    return 0;
}

int blco_cuda_info(blco_cuda_t *ctx, blco_cuda_info_t *info)
{
    (void)ctx;
    (void)info;
    return -BLCO_ENODEV;
}

int blco_cuda_alloc(blco_cuda_t *ctx, uint64_t bytes, void **dptr, blco_diag_t *diag)
{
    (void)ctx;
    (void)bytes;
    if (dptr)
        *dptr = NULL;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

void blco_cuda_free(blco_cuda_t *ctx, void *dptr, uint64_t bytes)
{
    (void)ctx;
    (void)dptr;
    (void)bytes;
}

int blco_cuda_copy_to_device(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes)
{
    (void)ctx;
    (void)dst;
    (void)src;
    (void)bytes;
    return -BLCO_ENODEV;
}

int blco_cuda_copy_to_host(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes)
{
    (void)ctx;
    (void)dst;
    (void)src;
    (void)bytes;
    return -BLCO_ENODEV;
}

int blco_cuda_zero(blco_cuda_t *ctx, void *dst, uint64_t bytes, void *stream)
{
    (void)ctx;
    (void)dst;
    (void)bytes;
    (void)stream;
    return -BLCO_ENODEV;
}

int blco_cuda_stream_create(blco_cuda_t *ctx, void **stream)
{
    (void)ctx;
    if (stream)
        *stream = NULL;
    return -BLCO_ENODEV;
}

void blco_cuda_stream_destroy(blco_cuda_t *ctx, void *stream)
{
    (void)ctx;
    (void)stream;
}

int blco_cuda_stream_sync(blco_cuda_t *ctx, void *stream)
{
    (void)ctx;
    (void)stream;
    return -BLCO_ENODEV;
}

int blco_cuda_host_register(blco_cuda_t *ctx, void *p, uint64_t bytes)
{
    (void)ctx;
    (void)p;
    (void)bytes;
    return -BLCO_ENODEV;
}

int blco_cuda_host_unregister(blco_cuda_t *ctx, void *p)
{
    (void)ctx;
    (void)p;
    return -BLCO_ENODEV;
}

int blco_cuda_copy_to_device_async(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes,
                                   void *stream)
{
    (void)ctx;
    (void)dst;
    (void)src;
    (void)bytes;
    (void)stream;
    return -BLCO_ENODEV;
}

int blco_cuda_copy_to_host_async(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes,
                                 void *stream)
{
    return blco_cuda_copy_to_device_async(ctx, dst, src, bytes, stream);
}

int blco_cuda_copy_peer_async(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes,
                              void *stream)
{
    return blco_cuda_copy_to_device_async(ctx, dst, src, bytes, stream);
}

int blco_cuda_use(blco_cuda_t *ctx, blco_diag_t *diag)
{
    (void)ctx;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_mttkrp_warm(blco_cuda_t *ctx, int order, int rank, blco_diag_t *diag)
{
    (void)ctx;
    (void)order;
    (void)rank;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

void *blco_cuda_own_stream(blco_cuda_t *ctx)
{
    (void)ctx;
    return NULL;
}

/* The dense steps of CP-ALS (gpu/cuda_cpd.h). */
uint64_t blco_cuda_dense_bytes(int rank)
{
    (void)rank;
    return 0;
}

int blco_cuda_dense_open(blco_cuda_t *ctx, int rank, blco_cuda_dense_t **out, blco_diag_t *diag)
{
    (void)ctx;
    (void)rank;
    *out = NULL;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

void blco_cuda_dense_close(blco_cuda_dense_t *d)
{
    (void)d;
}

int blco_cuda_dense_run(blco_cuda_dense_t *d, const blco_cuda_dense_step_t *s, void *stream,
                        blco_diag_t *diag)
{
    (void)d;
    (void)s;
    (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_fixed_add(blco_cuda_t *ctx, unsigned long long *out, const unsigned long long *in,
                        uint64_t n, void *stream, blco_diag_t *diag)
{
    (void)ctx;
    (void)out;
    (void)in;
    (void)n;
    (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_maxabs(blco_cuda_t *ctx, const double *a, uint64_t n, unsigned long long *tmp,
                     void *stream, double *out, blco_diag_t *diag)
{
    (void)ctx;
    (void)a;
    (void)n;
    (void)tmp;
    (void)stream;
    (void)out;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_fixed_to_double(blco_cuda_t *ctx, double *out, const unsigned long long *in,
                              uint64_t n, double inv_scale, void *stream, blco_diag_t *diag)
{
    (void)ctx;
    (void)out;
    (void)in;
    (void)n;
    (void)inv_scale;
    (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_add(blco_cuda_t *ctx, double *out, const double *in, uint64_t n, void *stream,
                  blco_diag_t *diag)
{
    (void)ctx;
    (void)out;
    (void)in;
    (void)n;
    (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

double blco_cuda_dense_kernel_seconds(const blco_cuda_dense_t *d)
{
    (void)d;
    return 0;
}

void blco_cuda_dense_bytes_moved(const blco_cuda_dense_t *d, uint64_t *h2d, uint64_t *d2h)
{
    (void)d;
    *h2d = *d2h = 0;
}

int blco_cuda_event_create(blco_cuda_t *ctx, void **event)
{
    (void)ctx;
    if (event)
        *event = NULL;
    return -BLCO_ENODEV;
}

void blco_cuda_event_destroy(blco_cuda_t *ctx, void *event)
{
    (void)ctx;
    (void)event;
}

int blco_cuda_event_record(blco_cuda_t *ctx, void *event, void *stream)
{
    (void)ctx;
    (void)event;
    (void)stream;
    return -BLCO_ENODEV;
}

int blco_cuda_event_sync(blco_cuda_t *ctx, void *event)
{
    (void)ctx;
    (void)event;
    return -BLCO_ENODEV;
}

int blco_cuda_event_done(blco_cuda_t *ctx, void *event)
{
    (void)ctx;
    (void)event;
    return -BLCO_ENODEV;
}

int blco_cuda_stream_wait_event(blco_cuda_t *ctx, void *stream, void *event)
{
    (void)ctx;
    (void)stream;
    (void)event;
    return -BLCO_ENODEV;
}

int blco_cuda_event_elapsed_ms(blco_cuda_t *ctx, void *start, void *end, double *ms)
{
    (void)ctx;
    (void)start;
    (void)end;
    (void)ms;
    return -BLCO_ENODEV;
}

void blco_cuda_range_push(const char *name)
{
    (void)name;
}

void blco_cuda_range_pop(void)
{
}

int blco_cuda_measure_bandwidth(blco_cuda_t *ctx, uint64_t bytes, int reps,
                                blco_cuda_bandwidth_t *bw, blco_diag_t *diag)
{
    (void)ctx;
    (void)bytes;
    (void)reps;
    (void)bw;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_tensor_upload(blco_cuda_t *ctx, const blco_tensor_t *x, blco_cuda_tensor_t **out,
                            blco_diag_t *diag)
{
    (void)ctx;
    (void)x;
    if (out)
        *out = NULL;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

void blco_cuda_tensor_free(blco_cuda_tensor_t *dt)
{
    (void)dt;
}

uint64_t blco_cuda_tensor_bytes(const blco_cuda_tensor_t *dt)
{
    (void)dt;
    return 0;
}

const blco_layout_t *blco_cuda_tensor_layout(const blco_cuda_tensor_t *dt)
{
    (void)dt;
    return NULL;
}

int blco_cuda_kernel_choice(const blco_cuda_t *ctx, uint64_t mode_length, int rank,
                            const blco_cuda_mttkrp_opts_t *o)
{
    (void)ctx;
    (void)mode_length;
    (void)rank;
    (void)o;
    return -BLCO_ENODEV;
}

int blco_cuda_mttkrp(blco_cuda_t *ctx, const blco_cuda_tensor_t *dt, int mode, int rank,
                     const double *const *factors, double *out, const blco_cuda_mttkrp_opts_t *o,
                     blco_diag_t *diag)
{
    (void)ctx;
    (void)dt;
    (void)mode;
    (void)rank;
    (void)factors;
    (void)out;
    (void)o;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

uint64_t blco_cuda_fibers_size(const struct blco_fibers *f, uint64_t chunk)
{
    (void)f;
    (void)chunk;
    return 0;
}

int blco_cuda_fibers_upload(blco_cuda_t *ctx, const struct blco_fibers *f, uint64_t chunk,
                            blco_cuda_fibers_t **out, blco_diag_t *diag)
{
    (void)ctx;
    (void)f;
    (void)chunk;
    if (out)
        *out = NULL;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_fibers_upload_with(blco_cuda_t *ctx, const struct blco_fibers *f, uint64_t chunk,
                                 blco_cuda_copy_fn copy, void *user, blco_cuda_fibers_t **out,
                                 blco_diag_t *diag)
{
    (void)copy;
    (void)user;
    return blco_cuda_fibers_upload(ctx, f, chunk, out, diag);
}

uint64_t blco_cuda_fibers_scratch(const struct blco_fibers *f, uint64_t chunk, int rank)
{
    (void)f;
    (void)chunk;
    (void)rank;
    return 0;
}

int blco_cuda_fibers_reserve(blco_cuda_fibers_t *df, int rank, blco_diag_t *diag)
{
    (void)df;
    (void)rank;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_fibers_upload_part(blco_cuda_t *ctx, const struct blco_fibers *f, uint64_t chunk,
                                 int part, int nparts, blco_cuda_copy_fn copy, void *user,
                                 blco_cuda_fibers_t **out, blco_diag_t *diag)
{
    (void)part;
    (void)nparts;
    (void)copy;
    (void)user;
    return blco_cuda_fibers_upload(ctx, f, chunk, out, diag);
}

uint64_t blco_cuda_fibers_part_size(const struct blco_fibers *f, uint64_t chunk, int part,
                                    int nparts, int rank)
{
    (void)f;
    (void)chunk;
    (void)part;
    (void)nparts;
    (void)rank;
    return 0;
}

void blco_cuda_fibers_span(const blco_cuda_fibers_t *df, uint64_t *lo, uint64_t *hi)
{
    (void)df;
    *lo = *hi = 0;
}

void blco_cuda_fibers_free(blco_cuda_fibers_t *df)
{
    (void)df;
}

uint64_t blco_cuda_fibers_bytes(const blco_cuda_fibers_t *df)
{
    (void)df;
    return 0;
}

int blco_cuda_fibers_mode(const blco_cuda_fibers_t *df)
{
    (void)df;
    return -1;
}

uint64_t blco_cuda_fibers_chunk(const blco_cuda_fibers_t *df)
{
    (void)df;
    return 0;
}

int blco_cuda_mttkrp_fibers(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                            const double *const *factors_dev, double *out_dev,
                            const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    (void)ctx;
    (void)df;
    (void)rank;
    (void)factors_dev;
    (void)out_dev;
    (void)o;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_mttkrp_device(blco_cuda_t *ctx, const blco_cuda_tensor_t *dt, int mode, int rank,
                            const double *const *factors_dev, double *out_dev,
                            const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    (void)ctx;
    (void)dt;
    (void)mode;
    (void)rank;
    (void)factors_dev;
    (void)out_dev;
    (void)o;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_mttkrp_batch(blco_cuda_t *ctx, const blco_layout_t *layout, int mode, int rank,
                           const blco_cuda_batch_t *b, const double *const *factors_dev,
                           double *out_dev, const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    (void)ctx;
    (void)layout;
    (void)mode;
    (void)rank;
    (void)b;
    (void)factors_dev;
    (void)out_dev;
    (void)o;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

uint64_t blco_cuda_batch_scratch_bytes(const blco_cuda_t *ctx, uint64_t mode_length, int rank,
                                       const blco_cuda_mttkrp_opts_t *o)
{
    (void)ctx;
    (void)mode_length;
    (void)rank;
    (void)o;
    return 0;
}

int blco_cuda_decode_batch(blco_cuda_t *ctx, const blco_cuda_decode_args_t *a, void *stream,
                           blco_diag_t *diag)
{
    (void)ctx;
    (void)a;
    (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_ttm_batch(blco_cuda_t *ctx, const blco_cuda_ttm_args_t *a, void *stream,
                        blco_diag_t *diag)
{
    (void)ctx;
    (void)a;
    (void)stream;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_mttkrp_fibers_async(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                                  const double *const *factors_dev, double *out_dev,
                                  const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    return blco_cuda_mttkrp_fibers(ctx, df, rank, factors_dev, out_dev, o, diag);
}

uint64_t blco_cuda_sorted_size(const blco_tensor_t *x)
{
    return x ? x->nnz * blco_sorted_nnz_bytes(&x->layout) : 0;
}

int blco_cuda_sorted_upload(blco_cuda_t *ctx, const blco_tensor_t *x, int mode,
                            blco_cuda_sorted_t **out, blco_diag_t *diag)
{
    (void)ctx;
    (void)x;
    (void)mode;
    if (out)
        *out = NULL;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

uint64_t blco_cuda_sorted_host_bytes(const blco_tensor_t *x, int mode)
{
    (void)x;
    (void)mode;
    return 0;
}

int blco_cuda_sorted_upload_part(blco_cuda_t *ctx, const blco_tensor_t *x, int mode, int part,
                                 int nparts, blco_cuda_copy_fn copy, void *user,
                                 blco_cuda_sorted_t **out, blco_diag_t *diag)
{
    (void)part;
    (void)nparts;
    (void)copy;
    (void)user;
    return blco_cuda_sorted_upload(ctx, x, mode, out, diag);
}

uint64_t blco_cuda_sorted_grouped_size(const struct blco_bymode *g, int part)
{
    (void)g;
    (void)part;
    return 0;
}

int blco_cuda_sorted_upload_grouped(blco_cuda_t *ctx, const struct blco_bymode *g, int part,
                                    blco_cuda_copy_fn copy, void *user,
                                    blco_cuda_sorted_t **out, blco_diag_t *diag)
{
    (void)ctx;
    (void)g;
    (void)part;
    (void)copy;
    (void)user;
    if (out)
        *out = NULL;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

uint64_t blco_cuda_sorted_part_size(const blco_tensor_t *x, int mode, int part, int nparts)
{
    (void)x;
    (void)mode;
    (void)part;
    (void)nparts;
    return 0;
}

void blco_cuda_sorted_free(blco_cuda_sorted_t *ds)
{
    (void)ds;
}

void blco_cuda_sorted_span(const blco_cuda_sorted_t *ds, uint64_t *lo, uint64_t *hi)
{
    (void)ds;
    *lo = *hi = 0;
}

uint64_t blco_cuda_sorted_bytes(const blco_cuda_sorted_t *ds)
{
    (void)ds;
    return 0;
}

int blco_cuda_sorted_mode(const blco_cuda_sorted_t *ds)
{
    (void)ds;
    return -1;
}

int blco_cuda_mttkrp_sorted(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds, int rank,
                            const double *const *factors_dev, double *out_dev,
                            const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    (void)ctx;
    (void)ds;
    (void)rank;
    (void)factors_dev;
    (void)out_dev;
    (void)o;
    return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", no_cuda);
}

int blco_cuda_mttkrp_sorted_async(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds, int rank,
                                  const double *const *factors_dev, double *out_dev,
                                  const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    return blco_cuda_mttkrp_sorted(ctx, ds, rank, factors_dev, out_dev, o, diag);
}
