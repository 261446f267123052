/* blco_strerror: names for errno and BLCO_E* codes. */
#include <string.h>

#include "blco_internal.h"

static const char *const domain_msgs[] = {
    [BLCO_EPARSE - BLCO_EPARSE] = "malformed input text",
    [BLCO_ERANGE - BLCO_EPARSE] = "index out of range or integer overflow",
    [BLCO_EVALUE - BLCO_EPARSE] = "value is NaN or infinite",
    [BLCO_EDUP - BLCO_EPARSE] = "duplicate coordinates",
    [BLCO_EEMPTY - BLCO_EPARSE] = "input holds no nonzero",
    [BLCO_EBUDGET - BLCO_EPARSE] = "memory budget too small",
    [BLCO_EUNSUPPORTED - BLCO_EPARSE] = "not supported by this build",
    [BLCO_EFORMAT - BLCO_EPARSE] = "corrupt or foreign file",
    [BLCO_ECHECKSUM - BLCO_EPARSE] = "checksum mismatch",
    [BLCO_EVERSION - BLCO_EPARSE] = "file written by a newer incompatible version",
    [BLCO_ENODEV - BLCO_EPARSE] = "no usable GPU",
    [BLCO_ECUDA - BLCO_EPARSE] = "CUDA runtime error",
    [BLCO_EMISMATCH - BLCO_EPARSE] = "arguments do not fit together",
    [BLCO_ECANCELED - BLCO_EPARSE] = "canceled",
    [BLCO_EDEVMEM - BLCO_EPARSE] = "out of GPU memory",
};

const char *blco_strerror(int err)
{
    if (err < 0)
        err = -err;
    if (err == 0)
        return "success";
    if (err >= BLCO_EPARSE && err < BLCO_E_LAST)
        return domain_msgs[err - BLCO_EPARSE];
    if (err < BLCO_EPARSE)
        return strerror(err);
    return "unknown error";
}
