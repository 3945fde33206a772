/* Unit tests for src/base/pyfmt.c: repr(float), round(float, n), sum(floats), with the values of
 * contract.md §5.2 and §8.3 and CPython 3.12's answers (checked with python3.12 when written).
 * The broad comparison (100k+ values) is tests/parity/test_json_cpython.py. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "test.h"
#include "base/pyfmt.h"

static char rbuf[64];
static const char *R(double x) {
    int n = clef_py_repr_double(x, rbuf);
    if (n != (int)strlen(rbuf)) return "(bad length)";
    return rbuf;
}
static double from_bits(uint64_t u) { double x; memcpy(&x, &u, sizeof x); return x; }

static void test_repr(void) {
    /* §5.2 */
    CHECK_STR(R(1e5), "100000.0");
    CHECK_STR(R(1e-7), "1e-07");
    CHECK_STR(R(0.00001), "1e-05");
    CHECK_STR(R(0.0001), "0.0001");
    CHECK_STR(R(1e16), "1e+16");
    CHECK_STR(R(1e15), "1000000000000000.0");
    CHECK_STR(R(12345678901234567.0), "1.2345678901234568e+16");
    CHECK_STR(R(5e-324), "5e-324");
    CHECK_STR(R(-0.0), "-0.0");
    CHECK_STR(R(0.0), "0.0");
    CHECK_STR(R(2.5e3), "2500.0");
    CHECK_STR(R(INFINITY), "inf");
    CHECK_STR(R(-INFINITY), "-inf");
    CHECK_STR(R(NAN), "nan");
    CHECK_STR(R(-NAN), "nan");
    /* §8.4 */
    CHECK_STR(R(0.9731), "0.9731");
    CHECK_STR(R(1.0), "1.0");
    /* shortest digits, closest of the shortest */
    CHECK_STR(R(0.1), "0.1");
    CHECK_STR(R(0.1 + 0.2), "0.30000000000000004");
    CHECK_STR(R(1.0 / 3), "0.3333333333333333");
    CHECK_STR(R(1e23), "1e+23");
    CHECK_STR(R(9.5e-5), "9.5e-05");
    CHECK_STR(R(123.456), "123.456");
    CHECK_STR(R(-1.5e-10), "-1.5e-10");
    CHECK_STR(R(9007199254740993.0), "9007199254740992.0");
    CHECK_STR(R(9999999999999998.0), "9999999999999998.0");
    CHECK_STR(R(1.7976931348623157e308), "1.7976931348623157e+308");
    CHECK_STR(R(2.2250738585072014e-308), "2.2250738585072014e-308");
    /* powers of two, where the lower rounding gap is half the upper one */
    CHECK_STR(R(ldexp(1, -44)), "5.684341886080802e-14");
    CHECK_STR(R(ldexp(1, 60)), "1.152921504606847e+18");
    CHECK_STR(R(ldexp(1, -1022)), "2.2250738585072014e-308");
    CHECK_STR(R(from_bits(0x0000000000000001ull)), "5e-324");
    CHECK_STR(R(from_bits(0x000fffffffffffffull)), "2.225073858507201e-308");
}

static double round_repr_check(double x, int n, const char *want, int line) {
    double y = clef_py_round(x, n);
    char got[64];
    clef_py_repr_double(y, got);
    if (strcmp(got, want) == 0) test_pass_++;
    else {
        test_fail_++;
        fprintf(stderr, "test_pyfmt.c:%d: round(%.17g, %d) = %s, expected %s\n", line, x, n, got, want);
    }
    return y;
}
#define RND(x, n, want) round_repr_check((x), (n), (want), __LINE__)

static void test_round(void) {
    /* §8.3: half-even on the exact binary value */
    RND(0.03125, 4, "0.0312");
    RND(0.5, 0, "0.0");
    RND(1.5, 0, "2.0");
    RND(2.5, 0, "2.0");
    RND(-2.5, 0, "-2.0");
    RND(1e16, 4, "1e+16");
    RND(-0.00001, 4, "-0.0");
    RND(-0.4, 0, "-0.0");
    RND(0.00005, 4, "0.0001");  /* the double is a bit above 5e-05 */
    RND(0.00015, 4, "0.0001");  /* ... and this one a bit below 1.5e-4 */
    RND(0.99995, 4, "1.0");
    RND(0.12345, 4, "0.1235");
    RND(0.00004999, 4, "0.0");
    RND(0.1 + 0.2, 4, "0.3");
    RND(2.675, 2, "2.67");
    RND(1.0 / 3, 4, "0.3333");
    RND(2.0 / 3, 4, "0.6667");
    RND(0.9731499999999, 4, "0.9731");
    RND(NAN, 4, "nan");
    RND(INFINITY, 4, "inf");
    RND(-INFINITY, 4, "-inf");
    /* negative ndigits */
    RND(125.0, -1, "120.0");
    RND(135.0, -1, "140.0");
    RND(150.0, -2, "200.0");
    RND(250.0, -2, "200.0");
    RND(-25.0, -1, "-20.0");
    RND(4.0, -1, "0.0");
    RND(-4.0, -1, "-0.0");
    RND(123456.789, -2, "123500.0");
    /* CPython's ndigits bounds */
    RND(5e-324, 323, "0.0");
    RND(5e-324, 324, "5e-324");
    RND(1.5, -400, "0.0");
    RND(-1.5, -400, "-0.0");
    /* float32 probabilities widened to double (§8.3) */
    RND((double)0.97314999f, 4, "0.9732"); /* the float32 is 0.97315001... */
    RND((double)0.5f, 4, "0.5");
}

static void test_sum(void) {
    double tenth[10];
    for (int i = 0; i < 10; i++) tenth[i] = 0.1;
    CHECK_STR(R(clef_py_sum(tenth, 10)), "1.0"); /* Neumaier: plain summation gives 0.9999999999999999 */
    double a[] = {1e16, 1.0, -1e16};
    CHECK_STR(R(clef_py_sum(a, 3)), "1.0");
    double b[] = {-0.0};
    CHECK_STR(R(clef_py_sum(b, 1)), "0.0"); /* 0 + -0.0 */
    double b2[] = {-0.0, -0.0};
    CHECK_STR(R(clef_py_sum(b2, 2)), "0.0");
    double c[] = {1e308, 1e308, -1e308};
    CHECK_STR(R(clef_py_sum(c, 3)), "inf");
    double d[] = {INFINITY, 1.0};
    CHECK_STR(R(clef_py_sum(d, 2)), "inf");
    double e[] = {INFINITY, -INFINITY};
    CHECK_STR(R(clef_py_sum(e, 2)), "nan");
    double f[] = {0.1, 0.2, 0.3};
    CHECK_STR(R(clef_py_sum(f, 3)), "0.6");
    double g[] = {1e100, 1.0, -1e100, 1e-100};
    CHECK_STR(R(clef_py_sum(g, 4)), "1.0");
    /* §8.2 score: sum(k * p[k]) */
    double s[] = {0 * 0.25, 1 * 0.25, 2 * 0.25, 3 * 0.25};
    CHECK_STR(R(clef_py_sum(s, 4)), "1.5");
    CHECK_STR(R(clef_py_sum(NULL, 0)), "0.0"); /* Python gives the int 0 */
}

static void test_strtod(void) {
    char *end;
    CHECK(clef_py_strtod("1.5e3x", &end) == 1500.0 && *end == 'x');
    CHECK(clef_py_strtod("1e400", NULL) == INFINITY);
    CHECK(clef_py_strtod("-1e400", NULL) == -INFINITY);
    CHECK(clef_py_strtod("2.4703282292062328e-324", NULL) == 5e-324); /* just above half the min subnormal */
    CHECK(clef_py_strtod("9007199254740993", NULL) == 9007199254740992.0); /* tie to even */
}

int main(void) {
    test_repr();
    test_round();
    test_sum();
    test_strtod();
    return TEST_END();
}
