/* The thread pool across fork() (base/threads.c): a child of a process whose pool has helpers
 * finishes a parallel-for with the same pieces (the helpers started again there) instead of waiting
 * for threads that stayed in the parent; the child can destroy the pool; the parent's pool still
 * works; a fork while another thread runs parallel-fors waits for the one in flight. A child that
 * hangs is killed after 60 s and counts as a failure. */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/threads.h"
#include "test.h"

#define N 100000
#define THREADS 4

typedef struct {
    int *out;
    int who[THREADS];
} job;

static void fill(void *ctx, size_t b, size_t e, int w) {
    job *j = ctx;
    for (size_t i = b; i < e; i++) j->out[i] = (int)(i * 3 + 1);
    j->who[w] = 1;
}

/* 0 when a parallel-for over the pool fills every index of `out` and every worker ran its piece. */
static int run_into(clef_pool *p, int *out) {
    job j = {.out = out};
    for (size_t i = 0; i < N; i++) out[i] = 0;
    clef_pool_for(p, N, 16, fill, &j);
    int bad = 0;
    for (size_t i = 0; i < N; i++) bad |= out[i] != (int)(i * 3 + 1);
    for (int w = 0; w < THREADS; w++) bad |= !j.who[w];
    return bad;
}

static int run_once(clef_pool *p) {
    int *out = malloc(N * sizeof(int));
    if (!out) return -1;
    int bad = run_into(p, out);
    free(out);
    return bad;
}

/* Forks; the child runs parallel-fors, destroys the pool (when asked) and exits 0 when all went
 * right. Returns the child's status: 0 good, else failed or hung (killed). */
static int in_child(clef_pool *p, int destroy) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        alarm(60); /* a hang ends as SIGALRM */
        int bad = run_once(p) | run_once(p);
        if (destroy) clef_pool_destroy(p);
        _exit(bad ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static atomic_int stop;

/* The busy thread never allocates while it loops: GCC 12's ASan allocator takes no lock across
 * fork(), so a child forked while another thread is inside its malloc waits forever on that lock
 * (seen: the child's new helpers stuck in the allocator; glibc's malloc is fork-safe). The pool is
 * what this test is about, so the busy thread works in one buffer it made before. */
static int busy_out[N];

static void *busy(void *arg) {
    clef_pool *p = arg;
    while (!atomic_load(&stop))
        if (run_into(p, busy_out)) return (void *)1;
    return NULL;
}

int main(void) {
    clef_err err;
    clef_err_clear(&err);
    clef_pool *p = clef_pool_create(THREADS, &err);
    CHECK(p != NULL && clef_pool_size(p) == THREADS);
    if (!p) return TEST_END();
    CHECK(run_once(p) == 0); /* the helpers exist and have run */

    CHECK_MSG(in_child(p, 0) == 0, "a child's parallel-for (helpers started again)");
    CHECK_MSG(in_child(p, 1) == 0, "a child destroys the pool without waiting on the parent's helpers");
    CHECK_MSG(run_once(p) == 0, "the parent's pool after the forks");

    /* forks while another thread keeps the pool busy */
    pthread_t th;
    atomic_store(&stop, 0);
    int started = pthread_create(&th, NULL, busy, p) == 0;
    CHECK(started);
    for (int i = 0; i < 5 && started; i++) {
        int st = in_child(p, i & 1);
        CHECK_MSG(st == 0, "fork %d while the pool is busy: child status %d", i, st);
    }
    atomic_store(&stop, 1);
    void *r = NULL;
    if (started) pthread_join(th, &r);
    CHECK(r == NULL);

    clef_pool_destroy(p);
    /* a pool made in a child, and one made after the first is gone */
    clef_pool *q = clef_pool_create(THREADS, &err);
    CHECK(q != NULL);
    if (q) {
        CHECK(in_child(q, 1) == 0);
        clef_pool_destroy(q);
    }
    return TEST_END();
}
