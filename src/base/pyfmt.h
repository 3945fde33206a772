/* CPython's number formatting and arithmetic where the answer's bytes depend on it.
 * Why hand-written: repr(float), round(x, n) and sum() have exact CPython semantics that no C
 * library function reproduces as-is (shortest round-trip digits, Python's exponent thresholds,
 * correctly rounded decimal rounding, Neumaier-compensated summation since Python 3.12). */
#ifndef CLEF_BASE_PYFMT_H
#define CLEF_BASE_PYFMT_H

#include <stddef.h>

/* repr(x) into out (at least 32 bytes): "1.0", "1e-07", "1e+16", "-0.0", "inf", "nan".
 * (clef_json_render maps inf/nan to Infinity/NaN itself.) Returns the length. Shortest round-trip digits
 * (closest to x among the shortest, as dtoa mode 0), found with glibc's correctly rounded conversions;
 * about 1-2 us per call. Locale-independent. */
int clef_py_repr_double(double x, char *out);

/* round(x, ndigits) for a Python float: the double nearest to the exact decimal rounding
 * (half-even on the exact binary value), as CPython's float.__round__. nan/inf pass through; ndigits
 * above 323 returns x, below -308 a zero with x's sign (CPython's bounds). Where CPython raises
 * OverflowError (e.g. round(1.7e308, -308)) this returns +-inf. */
double clef_py_round(double x, int ndigits);

/* sum(xs) starting from the integer 0, as CPython >= 3.12's builtin sum over floats
 * (Neumaier compensation, with CPython's handling of non-finite values). n == 0 gives 0.0 (Python's
 * answer is the int 0). */
double clef_py_sum(const double *xs, size_t n);

/* strtod in the "C" locale whatever LC_NUMERIC says (glibc's strtod is correctly rounded; overflow
 * gives +-HUGE_VAL = +-inf, as Python's float()). */
double clef_py_strtod(const char *s, char **end);

#endif
