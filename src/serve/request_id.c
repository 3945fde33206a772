/* Request ids (see request_id.h). */
#include "serve/request_id.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

void clef_request_id_new(char out[33]) {
    static atomic_ullong fallback;
    uint8_t r[16];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* no entropy yet (early boot): time and a counter still give distinct ids in one process */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long a = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
        unsigned long long b = atomic_fetch_add(&fallback, 1) ^ ((unsigned long long)(uintptr_t)out << 16);
        memcpy(r, &a, 8);
        memcpy(r + 8, &b, 8);
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[32] = 0;
}

int clef_request_id_sane(const char *s) {
    if (!s) return 0;
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == ':' || c == '-';
        if (!ok || n >= CLEF_REQUEST_ID_MAX) return 0;
    }
    return n > 0;
}
