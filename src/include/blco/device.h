/* GPU discovery. The CUDA backend itself comes with the CUDA issue; this says whether the
 * build has CUDA and whether a device is present, so tools can say which backend ran. */
#ifndef BLCO_DEVICE_H
#define BLCO_DEVICE_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counts the usable CUDA devices and writes the name of device 0 into name[len] (may be
 * NULL). Returns 0 with *count >= 1; -BLCO_ENODEV when the build has CUDA but no device
 * or driver answers, name[len] then saying so in the words every tool uses ("no GPU
 * answers: why"); -BLCO_EUNSUPPORTED when built without CUDA (name says so). */
BLCO_API int blco_cuda_probe(int *count, char *name, size_t len);

#ifdef __cplusplus
}
#endif
#endif
