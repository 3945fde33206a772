/* A tiny assertion harness for the C unit tests: every CHECK counts, a failed one prints where and
 * why, and TEST_END() prints "N passed, N failed" and returns the exit status. No test framework
 * dependency: one header, so a test is one self-contained program. */
#ifndef CLEF_TEST_H
#define CLEF_TEST_H
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int test_pass_, test_fail_;

#define CHECK(cond) do { if (cond) test_pass_++; else { test_fail_++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (cond) test_pass_++; else { test_fail_++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (a_ && b_ && strcmp(a_, b_) == 0) test_pass_++; else { test_fail_++; \
    fprintf(stderr, "%s:%d: CHECK_STR failed:\n  got:      %s\n  expected: %s\n", __FILE__, __LINE__, \
            a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } } while (0)
/* Runs fn(arg) on n threads at once (n <= 16) and joins them. *started: how many started; returns how
 * many of those returned non-NULL (a thread's way of saying it saw something wrong). */
static inline int run_threads(void *(*fn)(void *), void *arg, int n, int *started) {
    pthread_t th[16];
    int bad = 0;
    *started = 0;
    for (int i = 0; i < n && i < 16; i++) *started += pthread_create(&th[*started], NULL, fn, arg) == 0;
    for (int i = 0; i < *started; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        bad += r != NULL;
    }
    return bad;
}

#define TEST_END() (printf("%d passed, %d failed\n", test_pass_, test_fail_), \
    (test_fail_ == 0 && test_pass_ > 0) ? 0 : 1)

#endif
