// Decimal to double through fast_float (Debian's libfast-float-dev, header-only): the
// Eisel-Lemire algorithm with an exact fallback, correctly rounded like strtod, without
// strtod's locale, copy or NUL terminator. Used by io/tns_parse.c for the values its exact
// fast path cannot take (more than 19 digits, or mantissas above 2^53: 17-digit doubles).
#include <fast_float/fast_float.h>

extern "C" int blco_fast_float(const char *first, const char *last, double *out)
{
    double v = 0;
    fast_float::from_chars_result r = fast_float::from_chars(first, last, v);
    if (r.ec != std::errc() || r.ptr != last)
        return -1;
    *out = v;
    return 0;
}
