/* Persistent pthread pool. A job is published by bumping a generation counter; workers spin on it for a short
 * while, then sleep on a condition variable. Every worker checks in once per job (decrementing `unfinished`),
 * so a job's fields are never rewritten while a late worker could still read them. */
#include "threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker spins before it sleeps: enough to bridge the gaps between the parallel sections of
 * one token's forward pass, short enough not to burn a core between requests. */
#define SPIN_BEFORE_SLEEP_NS 50000
/* Iterations of the caller's wait for stragglers before it starts yielding its CPU to them. */
#define SPIN_BEFORE_YIELD 2000

typedef struct worker {
    sy_threadpool *pool;
    size_t index;
    pthread_t thread;
} worker;

struct sy_threadpool {
    size_t n_threads;
    worker *workers; /* n_threads - 1 */

    /* the current job: written by the caller before the generation bump, read by workers after it */
    sy_threadpool_fn fn;
    void *ctx;
    size_t n_tasks;
    atomic_size_t next_task;
    atomic_size_t unfinished; /* workers yet to check out of the current job */

    atomic_uint generation;
    atomic_bool stop;

    pthread_mutex_t sleep_mutex;
    pthread_cond_t wake;
    atomic_uint sleepers;

    pthread_mutex_t call_mutex; /* one parallel_for at a time */
};

/* The pool whose task this thread is running, and this thread's index in it (for nested calls). */
static _Thread_local sy_threadpool *current_pool;
static _Thread_local size_t current_index;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

size_t sy_threadpool_default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return (size_t)n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void run_tasks(sy_threadpool *pool, size_t thread_index) {
    sy_threadpool_fn fn = pool->fn;
    void *ctx = pool->ctx;
    size_t n_tasks = pool->n_tasks;
    for (;;) {
        size_t task = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
        if (task >= n_tasks) break;
        fn(ctx, task, thread_index);
    }
}

static void *worker_main(void *arg) {
    worker *self = arg;
    sy_threadpool *pool = self->pool;
    current_pool = pool;
    current_index = self->index;
    /* The generation was 0 when the pool was created, before any job or stop could be published; reading it
     * here instead could miss a job published before this thread first ran. */
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        unsigned spins = 0;
        uint64_t deadline = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen) {
            cpu_relax();
            if (++spins % 64 != 0) continue; /* read the clock now and then only */
            uint64_t now = now_ns();
            if (deadline == 0) deadline = now + SPIN_BEFORE_SLEEP_NS;
            if (now < deadline) continue;
            pthread_mutex_lock(&pool->sleep_mutex);
            /* Dekker pairing with parallel_for: we announce ourselves, then re-read the generation; the caller
             * bumps the generation, then reads sleepers. One of us sees the other's write. */
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen) pthread_cond_wait(&pool->wake, &pool->sleep_mutex);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->sleep_mutex);
            deadline = 0;
        }
        seen = gen;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        run_tasks(pool, self->index);
        atomic_fetch_sub_explicit(&pool->unfinished, 1, memory_order_release);
    }
    return NULL;
}

static void publish(sy_threadpool *pool) {
    atomic_fetch_add(&pool->generation, 1); /* seq_cst: ordered before the sleepers read below */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->sleep_mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->sleep_mutex);
    }
}

static void stop_workers(sy_threadpool *pool, size_t started) {
    atomic_store_explicit(&pool->stop, true, memory_order_release);
    publish(pool);
    for (size_t i = 0; i < started; i++) pthread_join(pool->workers[i].thread, NULL);
}

sy_threadpool *sy_threadpool_create(size_t n_threads) {
    if (n_threads == 0) n_threads = sy_threadpool_default_threads();
    if (n_threads > SY_THREADPOOL_MAX_THREADS) {
        fprintf(stderr, "threadpool: %zu threads requested, at most %d are supported\n", n_threads,
                SY_THREADPOOL_MAX_THREADS);
        return NULL;
    }
    sy_threadpool *pool = calloc(1, sizeof *pool);
    if (pool == NULL) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->unfinished, 0);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->sleepers, 0);
    pthread_mutex_init(&pool->sleep_mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_mutex_init(&pool->call_mutex, NULL);
    if (n_threads > 1) {
        pool->workers = calloc(n_threads - 1, sizeof *pool->workers);
        if (pool->workers == NULL) {
            sy_threadpool_destroy(pool);
            return NULL;
        }
        for (size_t i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].index = i + 1;
            int rc = pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]);
            if (rc != 0) {
                fprintf(stderr, "threadpool: cannot start thread %zu of %zu: %s\n", i + 1, n_threads, strerror(rc));
                stop_workers(pool, i);
                pool->n_threads = 1; /* nothing left to join */
                sy_threadpool_destroy(pool);
                return NULL;
            }
        }
    }
    return pool;
}

void sy_threadpool_destroy(sy_threadpool *pool) {
    if (pool == NULL) return;
    if (pool->n_threads > 1 && pool->workers != NULL) stop_workers(pool, pool->n_threads - 1);
    free(pool->workers);
    pthread_mutex_destroy(&pool->sleep_mutex);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->call_mutex);
    free(pool);
}

size_t sy_threadpool_size(const sy_threadpool *pool) { return pool == NULL ? 1 : pool->n_threads; }

static void run_inline(size_t n_tasks, sy_threadpool_fn fn, void *ctx, size_t thread_index) {
    for (size_t t = 0; t < n_tasks; t++) fn(ctx, t, thread_index);
}

void sy_threadpool_parallel_for(sy_threadpool *pool, size_t n_tasks, sy_threadpool_fn fn, void *ctx) {
    if (n_tasks == 0 || fn == NULL) return;
    if (pool != NULL && current_pool == pool) {
        run_inline(n_tasks, fn, ctx, current_index); /* nested: the workers are busy with the outer call */
        return;
    }
    if (pool == NULL || pool->n_threads == 1 || n_tasks == 1) {
        sy_threadpool *outer = current_pool;
        size_t outer_index = current_index;
        current_pool = pool;
        current_index = 0;
        run_inline(n_tasks, fn, ctx, 0);
        current_pool = outer;
        current_index = outer_index;
        return;
    }
    pthread_mutex_lock(&pool->call_mutex);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->unfinished, pool->n_threads - 1, memory_order_relaxed);
    publish(pool);

    sy_threadpool *outer = current_pool;
    size_t outer_index = current_index;
    current_pool = pool;
    current_index = 0;
    run_tasks(pool, 0);
    current_pool = outer;
    current_index = outer_index;

    int spins = 0;
    while (atomic_load_explicit(&pool->unfinished, memory_order_acquire) != 0) {
        if (++spins < SPIN_BEFORE_YIELD) {
            cpu_relax();
        } else {
            sched_yield(); /* a worker may be descheduled: give it the CPU */
        }
    }
    pthread_mutex_unlock(&pool->call_mutex);
}
