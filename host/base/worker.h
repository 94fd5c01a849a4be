/*
 * A background worker: one thread that runs tasks in the order they were submitted, off the threads that must
 * answer requests. The model manager hands it what a swap need not wait for (writing the outgoing model's KV
 * snapshots, closing the outgoing model) so that the incoming model loads at once.
 *
 * A task may carry a tag (a string, copied): sy_worker_wait_tag waits until no task with that tag is queued or
 * running, which is how a model's next load waits for its own snapshots to be on disk before reading them.
 * The thread runs at a lower priority (nice +10) than the process, so on few cores the request in front of it
 * gets the CPU first.
 *
 * Threading: every function may be called from any thread but the worker's own (a task must not wait for
 * the worker).
 */
#ifndef SY_HOST_BASE_WORKER_H
#define SY_HOST_BASE_WORKER_H

#include <stdbool.h>

typedef struct sy_worker sy_worker;

/* NULL when the thread cannot be started (then callers run the tasks themselves). */
sy_worker *sy_worker_create(void);
/* Runs what is queued, then stops the thread and frees. */
void sy_worker_destroy(sy_worker *w);

/* Queue run(arg); tag may be NULL. */
void sy_worker_submit(sy_worker *w, const char *tag, void (*run)(void *arg), void *arg);
/* Block until no task with this tag is queued or running. */
void sy_worker_wait_tag(sy_worker *w, const char *tag);
/* Block until the queue is empty and no task runs. */
void sy_worker_wait_idle(sy_worker *w);
/* True when a task with this tag is queued or running (a moment's answer). */
bool sy_worker_has_tag(sy_worker *w, const char *tag);

/* For tests: while held, the worker starts no new task (one running finishes), so a test can keep a task
 * in flight for as long as it needs. Waiters keep waiting; destroy releases the hold. */
void sy_worker_hold(sy_worker *w, bool hold);

#endif
