/* The thread pool: every task exactly once, thread indexes in range, results visible on return, many rapid
 * calls, wake-up after the workers went to sleep, nested and concurrent calls. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "threadpool.h"

typedef struct count_ctx {
    atomic_int *hits;          /* per task */
    atomic_int *per_thread;    /* tasks run by each thread index */
    size_t n_threads;
    atomic_int bad_index;
    long *plain;               /* written without atomics: visible to the caller after the call */
} count_ctx;

static void count_task(void *arg, size_t task, size_t thread_index) {
    count_ctx *c = arg;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread_index >= c->n_threads) {
        atomic_fetch_add(&c->bad_index, 1);
    } else {
        atomic_fetch_add(&c->per_thread[thread_index], 1);
    }
    c->plain[task] = (long)task * 3 + 1;
}

static void check_every_task_once(size_t n_threads, size_t n_tasks) {
    sy_threadpool *pool = sy_threadpool_create(n_threads);
    assert_non_null(pool);
    assert_int_equal(sy_threadpool_size(pool), n_threads);
    count_ctx c = {calloc(n_tasks + 1, sizeof(atomic_int)), calloc(n_threads, sizeof(atomic_int)), n_threads, 0,
                   calloc(n_tasks + 1, sizeof(long))};
    assert_non_null(c.hits);
    assert_non_null(c.per_thread);
    assert_non_null(c.plain);
    for (int round = 0; round < 3; round++) {
        memset(c.plain, 0, (n_tasks + 1) * sizeof(long));
        sy_threadpool_parallel_for(pool, n_tasks, count_task, &c);
        for (size_t t = 0; t < n_tasks; t++) {
            assert_int_equal(atomic_load(&c.hits[t]), round + 1);
            assert_int_equal(c.plain[t], (long)t * 3 + 1);
        }
        assert_int_equal(atomic_load(&c.hits[n_tasks]), 0);
    }
    assert_int_equal(atomic_load(&c.bad_index), 0);
    long total = 0;
    for (size_t i = 0; i < n_threads; i++) total += atomic_load(&c.per_thread[i]);
    assert_int_equal(total, (long)(3 * n_tasks));
    free(c.hits);
    free(c.per_thread);
    free(c.plain);
    sy_threadpool_destroy(pool);
}

static void test_every_task_exactly_once(void **state) {
    (void)state;
    const size_t threads[] = {1, 2, 3, 4, 8};
    const size_t tasks[] = {0, 1, 2, 3, 7, 64, 1000, 20011};
    for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++)
        for (size_t j = 0; j < sizeof tasks / sizeof tasks[0]; j++) check_every_task_once(threads[i], tasks[j]);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void slow_task(void *arg, size_t task, size_t thread_index) {
    count_ctx *c = arg;
    sleep_ms(1);
    count_task(c, task, thread_index);
}

static void test_caller_and_workers_share_the_work(void **state) {
    (void)state;
    const size_t n_threads = 4, n_tasks = 64;
    sy_threadpool *pool = sy_threadpool_create(n_threads);
    assert_non_null(pool);
    count_ctx c = {calloc(n_tasks, sizeof(atomic_int)), calloc(n_threads, sizeof(atomic_int)), n_threads, 0,
                   calloc(n_tasks, sizeof(long))};
    sy_threadpool_parallel_for(pool, n_tasks, slow_task, &c);
    for (size_t t = 0; t < n_tasks; t++) assert_int_equal(atomic_load(&c.hits[t]), 1);
    /* the caller starts taking tasks at once, so with 1 ms tasks it must have run some */
    assert_true(atomic_load(&c.per_thread[0]) > 0);
    int threads_used = 0;
    for (size_t i = 0; i < n_threads; i++) threads_used += atomic_load(&c.per_thread[i]) > 0;
    assert_true(threads_used >= 2);
    free(c.hits);
    free(c.per_thread);
    free(c.plain);
    sy_threadpool_destroy(pool);
}

typedef struct sum_ctx {
    atomic_long sum;
} sum_ctx;

static void add_task(void *arg, size_t task, size_t thread_index) {
    (void)thread_index;
    sum_ctx *s = arg;
    atomic_fetch_add_explicit(&s->sum, (long)task + 1, memory_order_relaxed);
}

static void test_many_rapid_calls(void **state) {
    (void)state;
    sy_threadpool *pool = sy_threadpool_create(3);
    assert_non_null(pool);
    sum_ctx s = {0};
    long want = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(i % 9);
        sy_threadpool_parallel_for(pool, n, add_task, &s);
        want += (long)(n * (n + 1) / 2);
        if (i % 1000 == 0) assert_int_equal(atomic_load(&s.sum), want);
    }
    assert_int_equal(atomic_load(&s.sum), want);
    sy_threadpool_destroy(pool);
}

static void test_wakes_sleeping_workers(void **state) {
    (void)state;
    sy_threadpool *pool = sy_threadpool_create(4);
    assert_non_null(pool);
    sum_ctx s = {0};
    long want = 0;
    for (int i = 0; i < 5; i++) {
        sleep_ms(30); /* long enough for every worker to stop spinning and sleep */
        sy_threadpool_parallel_for(pool, 100, add_task, &s);
        want += 100 * 101 / 2;
        assert_int_equal(atomic_load(&s.sum), want);
    }
    sy_threadpool_destroy(pool);
}

typedef struct nested_ctx {
    sy_threadpool *pool;
    atomic_int inner_hits[8 * 5];
    atomic_int index_mismatch;
} nested_ctx;

typedef struct inner_ctx {
    nested_ctx *outer;
    size_t outer_task, outer_index;
} inner_ctx;

static void inner_task(void *arg, size_t task, size_t thread_index) {
    inner_ctx *ic = arg;
    if (thread_index != ic->outer_index) atomic_fetch_add(&ic->outer->index_mismatch, 1);
    atomic_fetch_add(&ic->outer->inner_hits[ic->outer_task * 5 + task], 1);
}

static void outer_task(void *arg, size_t task, size_t thread_index) {
    nested_ctx *nc = arg;
    inner_ctx ic = {nc, task, thread_index};
    sy_threadpool_parallel_for(nc->pool, 5, inner_task, &ic);
}

static void test_nested_call_runs_inline(void **state) {
    (void)state;
    nested_ctx nc;
    memset(&nc, 0, sizeof nc);
    nc.pool = sy_threadpool_create(3);
    assert_non_null(nc.pool);
    sy_threadpool_parallel_for(nc.pool, 8, outer_task, &nc);
    for (int i = 0; i < 8 * 5; i++) assert_int_equal(atomic_load(&nc.inner_hits[i]), 1);
    assert_int_equal(atomic_load(&nc.index_mismatch), 0);
    sy_threadpool_destroy(nc.pool);
}

typedef struct caller_ctx {
    sy_threadpool *pool;
    sum_ctx sum;
} caller_ctx;

static void *concurrent_caller(void *arg) {
    caller_ctx *cc = arg;
    for (int i = 0; i < 2000; i++) sy_threadpool_parallel_for(cc->pool, 10, add_task, &cc->sum);
    return NULL;
}

static void test_concurrent_callers_are_serialized(void **state) {
    (void)state;
    sy_threadpool *pool = sy_threadpool_create(3);
    assert_non_null(pool);
    caller_ctx a = {pool, {0}}, b = {pool, {0}};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, concurrent_caller, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, concurrent_caller, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(atomic_load(&a.sum.sum), 2000L * 55);
    assert_int_equal(atomic_load(&b.sum.sum), 2000L * 55);
    sy_threadpool_destroy(pool);
}

static void test_create_limits_and_null(void **state) {
    (void)state;
    assert_null(sy_threadpool_create(SY_THREADPOOL_MAX_THREADS + 1));
    size_t def = sy_threadpool_default_threads();
    assert_true(def >= 1);
    sy_threadpool *pool = sy_threadpool_create(0);
    assert_non_null(pool);
    assert_int_equal(sy_threadpool_size(pool), def);
    sy_threadpool_destroy(pool);
    sy_threadpool_destroy(NULL);
    assert_int_equal(sy_threadpool_size(NULL), 1);
    /* a NULL pool runs inline on thread index 0 */
    size_t n = 5;
    count_ctx c = {calloc(n, sizeof(atomic_int)), calloc(1, sizeof(atomic_int)), 1, 0, calloc(n, sizeof(long))};
    sy_threadpool_parallel_for(NULL, n, count_task, &c);
    for (size_t t = 0; t < n; t++) assert_int_equal(atomic_load(&c.hits[t]), 1);
    assert_int_equal(atomic_load(&c.per_thread[0]), 5);
    sy_threadpool_parallel_for(NULL, n, NULL, &c); /* no function: nothing to do */
    free(c.hits);
    free(c.per_thread);
    free(c.plain);
    /* create and destroy without ever calling */
    for (int i = 0; i < 20; i++) sy_threadpool_destroy(sy_threadpool_create(4));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_exactly_once),
        cmocka_unit_test(test_caller_and_workers_share_the_work),
        cmocka_unit_test(test_many_rapid_calls),
        cmocka_unit_test(test_wakes_sleeping_workers),
        cmocka_unit_test(test_nested_call_runs_inline),
        cmocka_unit_test(test_concurrent_callers_are_serialized),
        cmocka_unit_test(test_create_limits_and_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
