/* A small persistent thread pool for the CPU engines: one parallel_for at a time, the calling thread takes part.
 * Built for many short calls (several per layer per token): idle workers spin briefly before they sleep, and a
 * call costs a few atomic operations when they are awake. */
#ifndef SY_THREADPOOL_H
#define SY_THREADPOOL_H

#include <stddef.h>

typedef struct sy_threadpool sy_threadpool;

/* Runs task number `task` of a parallel_for. thread_index is in [0, size): 0 is the calling thread, so per-thread
 * scratch can be indexed by it. */
typedef void (*sy_threadpool_fn)(void *ctx, size_t task, size_t thread_index);

#define SY_THREADPOOL_MAX_THREADS 1024

/* The number of CPUs this process may run on (at least 1). */
size_t sy_threadpool_default_threads(void);

/* A pool of n_threads threads in all, the caller of parallel_for included (so n_threads - 1 workers are started);
 * 0 means sy_threadpool_default_threads(). NULL when n_threads exceeds SY_THREADPOOL_MAX_THREADS or a thread
 * cannot be started (the message is printed to stderr). */
sy_threadpool *sy_threadpool_create(size_t n_threads);

/* Stops and joins the workers. NULL is a no-op. Must not run concurrently with a parallel_for. */
void sy_threadpool_destroy(sy_threadpool *pool);

/* Threads in the pool, the caller included. */
size_t sy_threadpool_size(const sy_threadpool *pool);

/* Calls fn(ctx, task, thread_index) exactly once for every task in [0, n_tasks), spread over the pool's threads,
 * and returns when all calls have returned (their writes are then visible to the caller). Tasks are handed out
 * dynamically, in increasing order, so uneven tasks balance out. A pool of one thread, or a single task, runs
 * inline. Calls from two threads at once are serialized; a call made from inside a task of the same pool runs
 * its tasks inline on that thread, with that thread's index. */
void sy_threadpool_parallel_for(sy_threadpool *pool, size_t n_tasks, sy_threadpool_fn fn, void *ctx);

#endif
