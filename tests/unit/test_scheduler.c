/* The serving scheduler: the batch policy (clef_sched_pick) and the worker (order, budget,
 * no starvation, queue limit, deadlines, drain on stop). No model involved. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "serve/scheduler.h"
#include "test.h"

typedef struct {
    clef_sched_item it;
    int id;
    int ran_round; /* round number it ran in, 0 = not yet */
    int expired;
} item;

typedef struct {
    pthread_mutex_t mu;
    int rounds;
    int order[1000];
    int n_order;
    size_t max_tokens_seen;
    size_t max_n_seen;
    int block; /* the first run waits until released */
    int released;
    pthread_cond_t cv;
    int expired;
    long run_ns; /* each run takes this long */
} world;

static void run_cb(void *ctx, clef_sched_item **items, size_t n) {
    world *w = ctx;
    pthread_mutex_lock(&w->mu);
    while (w->block && !w->released) pthread_cond_wait(&w->cv, &w->mu);
    long ns = w->run_ns;
    if (ns) {
        pthread_mutex_unlock(&w->mu);
        nanosleep(&(struct timespec){ns / 1000000000L, ns % 1000000000L}, NULL);
        pthread_mutex_lock(&w->mu);
    }
    w->rounds++;
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        item *x = (item *)items[i];
        x->ran_round = w->rounds;
        w->order[w->n_order++] = x->id;
        t += items[i]->tokens;
    }
    if (n > 1 && t > w->max_tokens_seen) w->max_tokens_seen = t;
    if (n > w->max_n_seen) w->max_n_seen = n;
    pthread_mutex_unlock(&w->mu);
}

static void expire_cb(void *ctx, clef_sched_item *it) {
    world *w = ctx;
    pthread_mutex_lock(&w->mu);
    ((item *)it)->expired = 1;
    w->expired++;
    pthread_mutex_unlock(&w->mu);
}

static void world_init(world *w, int block) {
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->block = block;
}

static void release(world *w) {
    pthread_mutex_lock(&w->mu);
    w->released = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void test_pick(void) {
    size_t out[16];
    size_t t1[] = {10, 20, 30, 40};
    CHECK(clef_sched_pick(t1, 4, 100, 8, out) == 4);
    CHECK(clef_sched_pick(t1, 4, 60, 8, out) == 3 && out[0] == 0 && out[1] == 1 && out[2] == 2);
    CHECK(clef_sched_pick(t1, 4, 100, 2, out) == 2 && out[1] == 1);
    /* the oldest always runs, even over the budget, and alone when nothing else fits */
    size_t t2[] = {500, 10, 10};
    CHECK(clef_sched_pick(t2, 3, 100, 8, out) == 1 && out[0] == 0);
    /* a long item behind the head is skipped, shorter ones behind it join */
    size_t t3[] = {30, 90, 20, 50};
    size_t k = clef_sched_pick(t3, 4, 100, 8, out);
    CHECK(k == 3 && out[0] == 0 && out[1] == 2 && out[2] == 3);
    CHECK(clef_sched_pick(t3, 0, 100, 8, out) == 0);
    size_t t4[] = {100, 0, 1};
    CHECK(clef_sched_pick(t4, 3, 100, 8, out) == 1);
}

static void test_worker(void) {
    /* Queue up while the worker is blocked in its first round, then check batches. */
    world w;
    world_init(&w, 1);
    clef_sched_config cfg = {.batch_tokens = 100, .max_batch = 4, .queue_len = 64};
    clef_sched *s = clef_sched_create(&cfg, run_cb, expire_cb, &w);
    CHECK(s != NULL);
    static item it[40];
    it[0].id = 0;
    it[0].it.tokens = 1;
    CHECK(clef_sched_submit(s, &it[0].it) == 0);
    /* wait until item 0 is taken (the worker is then blocked inside run_cb) */
    for (int i = 0; i < 1000 && clef_sched_depth(s) != 0; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
    /* a long one, then many short ones */
    it[1].id = 1;
    it[1].it.tokens = 250;
    CHECK(clef_sched_submit(s, &it[1].it) == 0);
    for (int i = 2; i < 40; i++) {
        it[i].id = i;
        it[i].it.tokens = 30;
        CHECK(clef_sched_submit(s, &it[i].it) == 0);
    }
    CHECK(clef_sched_depth(s) == 39);
    release(&w);
    clef_sched_stop(s); /* drains */
    int all = 1;
    for (int i = 0; i < 40; i++) all &= it[i].ran_round > 0;
    CHECK(all);
    CHECK(w.n_order == 40);
    /* the long one is the oldest after item 0: it runs alone in round 2 */
    CHECK(it[1].ran_round == 2);
    CHECK(it[2].ran_round == 3);
    CHECK(w.max_tokens_seen <= 100);
    CHECK(w.max_n_seen <= 4);
    /* FIFO among equals: ids appear in increasing order */
    int mono = 1;
    for (int i = 1; i < w.n_order; i++) mono &= w.order[i] > w.order[i - 1];
    CHECK(mono);
}

static void test_queue_full_and_deadline(void) {
    world w;
    world_init(&w, 1);
    clef_sched_config cfg = {.batch_tokens = 100, .max_batch = 2, .queue_len = 3};
    clef_sched *s = clef_sched_create(&cfg, run_cb, expire_cb, &w);
    static item it[8];
    for (int i = 0; i < 8; i++) it[i].id = i, it[i].it.tokens = 10;
    CHECK(clef_sched_submit(s, &it[0].it) == 0);
    for (int i = 0; i < 1000 && clef_sched_depth(s) != 0; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
    it[1].it.deadline = clef_now() - 1; /* already past: must be expired, not run */
    CHECK(clef_sched_submit(s, &it[1].it) == 0);
    CHECK(clef_sched_submit(s, &it[2].it) == 0);
    CHECK(clef_sched_submit(s, &it[3].it) == 0);
    CHECK(clef_sched_submit(s, &it[4].it) == -1); /* full */
    CHECK(clef_sched_depth(s) == 3);
    release(&w);
    clef_sched_stop(s);
    CHECK(it[1].expired == 1 && it[1].ran_round == 0);
    CHECK(it[2].ran_round > 0 && it[3].ran_round > 0);
    CHECK(it[4].ran_round == 0 && !it[4].expired);
    CHECK(w.expired == 1);
}

/* Many producers: every item runs exactly once. */
typedef struct {
    clef_sched *s;
    item *items;
    int n;
} prod;

static void *producer(void *arg) {
    prod *p = arg;
    for (int i = 0; i < p->n; i++) {
        while (clef_sched_submit(p->s, &p->items[i].it) == -1) nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    return NULL;
}

static void test_concurrent(void) {
    world w;
    world_init(&w, 0);
    clef_sched_config cfg = {.batch_tokens = 64, .max_batch = 8, .queue_len = 16};
    clef_sched *s = clef_sched_create(&cfg, run_cb, expire_cb, &w);
    static item it[4][200];
    pthread_t th[4];
    prod p[4];
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < 200; i++) it[t][i].id = t * 200 + i, it[t][i].it.tokens = (size_t)(1 + (i * 7 + t) % 40);
        p[t] = (prod){s, it[t], 200};
        pthread_create(&th[t], NULL, producer, &p[t]);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    clef_sched_stop(s);
    int all = 1;
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 200; i++) all &= it[t][i].ran_round > 0;
    CHECK(all);
    CHECK(w.n_order == 800);
    CHECK(w.max_tokens_seen <= 64);
    CHECK(w.max_n_seen <= 8);
    clef_sched_item extra = {.tokens = 1};
    (void)extra;
}

static void test_submit_after_stop_refused(void) {
    /* A stopping scheduler refuses: check through a fresh one stopped from another thread is
     * racy, so check the documented value on the stop path directly by stopping with items. */
    world w;
    world_init(&w, 0);
    clef_sched_config cfg = {0};
    clef_sched *s = clef_sched_create(&cfg, run_cb, expire_cb, &w);
    static item a;
    a.it.tokens = 5;
    CHECK(clef_sched_submit(s, &a.it) == 0);
    clef_sched_stop(s);
    CHECK(a.ran_round > 0);
}

static int rounds_of(world *w) {
    pthread_mutex_lock(&w->mu);
    int r = w->rounds;
    pthread_mutex_unlock(&w->mu);
    return r;
}

/* Gathering: after a forward of 7 items that took 1 s, 7 items that arrive a few milliseconds
 * apart (the clients that forward answered) share the next one, instead of the first running
 * alone. The window is 3% of the previous run (30 ms here); the items come within ~5 ms. */
static void test_gather(void) {
    world w;
    world_init(&w, 1);
    w.run_ns = 1000000000L;
    clef_sched_config cfg = {.batch_tokens = 1000, .max_batch = 16, .queue_len = 64, .gather_s = 10};
    clef_sched *s = clef_sched_create(&cfg, run_cb, expire_cb, &w);
    CHECK(s != NULL);
    static item it[15];
    for (int i = 0; i < 15; i++) it[i].id = i, it[i].it.tokens = 10;
    CHECK(clef_sched_submit(s, &it[0].it) == 0); /* round 1: alone (nothing ran before), held */
    while (clef_sched_depth(s) != 0) nanosleep(&(struct timespec){0, 1000000}, NULL);
    for (int i = 1; i < 8; i++) CHECK(clef_sched_submit(s, &it[i].it) == 0);
    release(&w); /* round 2: the 7 queued meanwhile, 1 s */
    while (rounds_of(&w) < 2) nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(it[0].ran_round == 1 && it[1].ran_round == 2 && it[7].ran_round == 2);
    CHECK(clef_sched_submit(s, &it[8].it) == 0);
    nanosleep(&(struct timespec){0, 5000000}, NULL);
    for (int i = 9; i < 15; i++) CHECK(clef_sched_submit(s, &it[i].it) == 0);
    pthread_mutex_lock(&w.mu);
    w.run_ns = 0;
    pthread_mutex_unlock(&w.mu);
    clef_sched_stop(s);
    int together = 1;
    for (int i = 8; i < 15; i++) together &= it[i].ran_round == 3;
    CHECK_MSG(together, "items 8..14 ran in rounds %d %d %d %d %d %d %d", it[8].ran_round, it[9].ran_round,
              it[10].ran_round, it[11].ran_round, it[12].ran_round, it[13].ran_round, it[14].ran_round);
}

int main(void) {
    test_pick();
    test_worker();
    test_queue_full_and_deadline();
    test_concurrent();
    test_submit_after_stop_refused();
    test_gather();
    return TEST_END();
}
