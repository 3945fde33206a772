/* CPython number formatting: repr(float), round(float, n), sum(floats). See pyfmt.h.
 *
 * All decimal <-> binary conversions go through glibc's snprintf("%.*e"/"%.*f") and strtod_l, which
 * are correctly rounded (round-half-even on the exact binary value), the same guarantee CPython's
 * dtoa.c gives. Only the digit selection and the output layout are ours. */
#include "base/pyfmt.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- locale-independent strtod ---- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

double clef_py_strtod(const char *s, char **end) {
    pthread_once(&c_locale_once, c_locale_init);
    if (c_locale) return strtod_l(s, end, c_locale);
    return strtod(s, end); /* newlocale failed (out of memory): fall back to the process locale */
}

/* ---- repr ---- */

/* Mantissa digits and exponent of x (> 0, finite) correctly rounded to p significant digits:
 * digits[0..p-1] (no NUL), returns the decimal exponent of the first digit. snprintf's decimal
 * point may be locale-specific, so only digits and the exponent are read back. */
static int round_digits(double x, int p, char *digits) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.*e", p - 1, x);
    int k = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[k++] = *q;
    return *q == 'e' ? atoi(q + 1) : 0;
}

/* Does digits[0..p-1] x 10^(e-p+1) read back as exactly x? */
static int round_trips(double x, const char *digits, int p, int e) {
    char buf[64];
    memcpy(buf, digits, (size_t)p);
    snprintf(buf + p, sizeof buf - (size_t)p, "e%d", e - p + 1);
    return clef_py_strtod(buf, NULL) == x;
}

/* Adds delta (+1 or -1) to the p-digit mantissa; keeps p digits, adjusting *e on carry/borrow.
 * Returns 0 when the result is not a p-digit mantissa (e.g. 1 - 1 at p = 1). */
static int step_digits(char *d, int p, int *e, int delta) {
    int i = p - 1;
    if (delta > 0) {
        while (i >= 0 && d[i] == '9') d[i--] = '0';
        if (i < 0) { d[0] = '1'; for (int j = 1; j < p; j++) d[j] = '0'; (*e)++; return 1; }
        d[i]++;
    } else {
        while (i >= 0 && d[i] == '0') d[i--] = '9';
        if (i < 0) return 0;
        d[i]--;
        if (d[0] == '0') { /* 1000 - 1 = 0999: one fewer digit; 9999 x 10^(e-1) keeps p digits */
            if (p == 1) return 0;
            for (int j = 0; j < p; j++) d[j] = '9';
            (*e)--;
        }
    }
    return 1;
}

/* The correctly rounded p-digit mantissa of x, derived from its correctly rounded 17-digit one
 * (d17, exponent e17) without another snprintf. Rounding twice gives the same answer as rounding once
 * unless the 17-digit tail beyond p is exactly "50...0" (the exact tail may have been just below or just
 * above half): then ask snprintf for p digits directly. */
static int round_from_17(double x, const char *d17, int e17, int p, char *digits) {
    if (p >= 17) { memcpy(digits, d17, 17); return e17; }
    int exact_half = d17[p] == '5';
    for (int i = p + 1; i < 17 && exact_half; i++) exact_half = d17[i] == '0';
    if (exact_half) return round_digits(x, p, digits);
    memcpy(digits, d17, (size_t)p);
    int e = e17;
    if (d17[p] >= '5') { /* tail above half: round up */
        int i = p - 1;
        while (i >= 0 && digits[i] == '9') digits[i--] = '0';
        if (i < 0) { digits[0] = '1'; e++; }
        else digits[i]++;
    }
    return e;
}

/* A p-digit decimal that reads back as x, if one exists: the correctly rounded one, or else (at a
 * power of two, where the lower half-gap is narrower) its neighbour on the other side. Candidates
 * are tried nearest first, so among shortest strings the one closest to x wins, as dtoa mode 0. */
static int shortest_at(double x, const char *d17, int e17, int p, char *digits, int *e) {
    *e = round_from_17(x, d17, e17, p, digits);
    if (round_trips(x, digits, p, *e)) return 1;
    /* Elsewhere the round-trip interval is symmetric around x, so when the nearest candidate misses,
     * every other p-digit one does too. Only at a power of two (zero mantissa field) look further. */
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    if (bits & 0x000FFFFFFFFFFFFFull) return 0;
    for (int delta = -1; delta <= 1; delta += 2) {
        char d[20];
        int ee = *e;
        memcpy(d, digits, (size_t)p);
        if (step_digits(d, p, &ee, delta) && round_trips(x, d, p, ee)) {
            memcpy(digits, d, (size_t)p);
            *e = ee;
            return 1;
        }
    }
    return 0;
}

int clef_py_repr_double(double x, char *out) {
    if (isnan(x)) { strcpy(out, "nan"); return 3; }
    if (isinf(x)) { strcpy(out, x < 0 ? "-inf" : "inf"); return x < 0 ? 4 : 3; }
    int n = 0;
    if (signbit(x)) { out[n++] = '-'; x = -x; }
    if (x == 0) { memcpy(out + n, "0.0", 4); return n + 3; }

    /* "some p-digit decimal round-trips" is monotone in p (a p-digit decimal is also a (p+1)-digit
     * one) and always true at p = 17: binary search for the smallest p. */
    char d17[20], best[20];
    int e17 = round_digits(x, 17, d17); /* 17 digits always round-trip */
    memcpy(best, d17, 17);
    int best_e = e17, lo = 1, hi = 17;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        char d[20];
        int e;
        if (shortest_at(x, d17, e17, mid, d, &e)) {
            hi = mid;
            memcpy(best, d, (size_t)mid);
            best_e = e;
        } else {
            lo = mid + 1;
        }
    }
    int nd = hi;
    while (nd > 1 && best[nd - 1] == '0') nd--;

    int decpt = best_e + 1; /* digits are 0.D x 10^decpt */
    if (decpt <= -4 || decpt > 16) {
        out[n++] = best[0];
        if (nd > 1) {
            out[n++] = '.';
            memcpy(out + n, best + 1, (size_t)nd - 1);
            n += nd - 1;
        }
        n += sprintf(out + n, "e%c%02d", best_e < 0 ? '-' : '+', best_e < 0 ? -best_e : best_e);
    } else if (decpt <= 0) {
        out[n++] = '0';
        out[n++] = '.';
        for (int i = 0; i < -decpt; i++) out[n++] = '0';
        memcpy(out + n, best, (size_t)nd);
        n += nd;
    } else if (decpt < nd) {
        memcpy(out + n, best, (size_t)decpt);
        n += decpt;
        out[n++] = '.';
        memcpy(out + n, best + decpt, (size_t)(nd - decpt));
        n += nd - decpt;
    } else {
        memcpy(out + n, best, (size_t)nd);
        n += nd;
        for (int i = nd; i < decpt; i++) out[n++] = '0';
        out[n++] = '.';
        out[n++] = '0';
    }
    out[n] = '\0';
    return n;
}

/* ---- round ---- */

/* CPython's limits in float.__round__: beyond them the answer is x itself or a signed zero. */
#define PY_NDIGITS_MAX 323  /* (int)((DBL_MANT_DIG - DBL_MIN_EXP) * 0.30103) */
#define PY_NDIGITS_MIN -308 /* -(int)((DBL_MAX_EXP + 1) * 0.30103) */

/* Reads a printf-produced decimal back, whatever decimal point the locale put in. */
static double read_back(char *buf) {
    for (char *q = buf; *q; q++)
        if (!(*q >= '0' && *q <= '9') && *q != '-' && *q != 'e' && *q != '+') *q = '.';
    return clef_py_strtod(buf, NULL);
}

double clef_py_round(double x, int ndigits) {
    if (!isfinite(x)) return x;
    if (ndigits > PY_NDIGITS_MAX) return x;
    if (ndigits < PY_NDIGITS_MIN) return 0.0 * x;
    if (ndigits >= 0) {
        /* %.Nf is the exact binary value rounded half-even to N decimals (glibc), as dtoa mode 3. */
        char buf[720];
        snprintf(buf, sizeof buf, "%.*f", ndigits, x);
        return read_back(buf);
    }
    /* ndigits < 0: round the exact integer part to a multiple of 10^k; the fraction only breaks ties. */
    int k = -ndigits;
    double ip = trunc(x);
    int frac_nonzero = (x != ip);
    char dig[400];
    snprintf(dig, sizeof dig, "%.0f", fabs(ip)); /* exact: ip is an integer */
    int L = (int)strlen(dig);
    char out[440];
    int n = 0;
    if (signbit(x)) out[n++] = '-';
    if (L < k) {
        out[n++] = '0';
    } else {
        int keep = L - k; /* digits kept: dig[0..keep-1]; the rest is the remainder */
        int up;
        if (dig[keep] > '5') up = 1;
        else if (dig[keep] < '5') up = 0;
        else {
            int rest_zero = !frac_nonzero;
            for (int i = keep + 1; i < L && rest_zero; i++) rest_zero = dig[i] == '0';
            if (!rest_zero) up = 1;
            else up = keep > 0 && ((dig[keep - 1] - '0') & 1); /* tie: to even (0 is even) */
        }
        char kept[400];
        int kn = 0;
        kept[kn++] = '0'; /* room for a carry */
        memcpy(kept + kn, dig, (size_t)keep);
        kn += keep;
        if (up) {
            int i = kn - 1;
            while (kept[i] == '9') kept[i--] = '0';
            kept[i]++;
        }
        memcpy(out + n, kept, (size_t)kn);
        n += kn;
    }
    n += snprintf(out + n, sizeof out - (size_t)n, "e%d", k);
    /* CPython raises OverflowError when this overflows (e.g. round(1.7e308, -308)); we give inf. */
    return clef_py_strtod(out, NULL);
}

/* ---- sum ---- */

double clef_py_sum(const double *xs, size_t n) {
    /* sum() starts from the int 0; the first float item is added as int + float (0 + x, which turns
     * -0.0 into 0.0), then the float loop runs Neumaier compensation over the rest. */
    if (n == 0) return 0.0;
    double s = 0.0 + xs[0];
    double c = 0.0;
    for (size_t i = 1; i < n; i++) {
        double x = xs[i];
        double t = s + x;
        if (fabs(s) >= fabs(x)) c += (s - t) + x;
        else c += (x - t) + s;
        s = t;
    }
    /* CPython adds the compensation only when it is non-zero and finite, so a negative zero and an
     * infinite or overflowed sum survive. */
    if (c != 0.0 && isfinite(c)) s += c;
    return s;
}
