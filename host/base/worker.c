/* See worker.h. A singly linked FIFO under one mutex; one condition variable for "a task arrived or the hold
 * changed" (the thread waits on it) and one for "a task finished" (waiters). */
#include "base/worker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

typedef struct worker_task {
    struct worker_task *next;
    char *tag;
    void (*run)(void *);
    void *arg;
} worker_task;

struct sy_worker {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    worker_task *head, *tail;
    worker_task *running; /* the task the thread runs now, or NULL */
    bool stopping, held;
    pthread_t thread;
};

static void *worker_main(void *arg) {
    sy_worker *w = arg;
    /* Linux nices threads one by one: this one alone goes below the request threads. Best effort. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0)
        sy_log(SY_LOG_DEBUG, "background worker: could not lower its priority");
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while ((w->head == NULL || w->held) && !(w->stopping && w->head == NULL)) pthread_cond_wait(&w->work, &w->lock);
        if (w->head == NULL) break; /* stopping, and nothing is left */
        worker_task *t = w->head;
        w->head = t->next;
        if (w->head == NULL) w->tail = NULL;
        w->running = t;
        pthread_mutex_unlock(&w->lock);
        t->run(t->arg);
        pthread_mutex_lock(&w->lock);
        w->running = NULL;
        free(t->tag);
        free(t);
        pthread_cond_broadcast(&w->done);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

sy_worker *sy_worker_create(void) {
    sy_worker *w = sy_xcalloc(1, sizeof *w);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->done, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        sy_log(SY_LOG_WARN, "background worker: cannot start its thread; swaps do their work in line");
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->work);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    return w;
}

void sy_worker_destroy(sy_worker *w) {
    if (w == NULL) return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    w->held = false;
    pthread_cond_broadcast(&w->work);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void sy_worker_submit(sy_worker *w, const char *tag, void (*run)(void *arg), void *arg) {
    worker_task *t = sy_xcalloc(1, sizeof *t);
    t->tag = tag != NULL ? sy_strdup(tag) : NULL;
    t->run = run;
    t->arg = arg;
    pthread_mutex_lock(&w->lock);
    if (w->tail != NULL) w->tail->next = t;
    else w->head = t;
    w->tail = t;
    pthread_cond_broadcast(&w->work);
    pthread_mutex_unlock(&w->lock);
}

static bool tag_pending(const sy_worker *w, const char *tag) {
    if (w->running != NULL && w->running->tag != NULL && strcmp(w->running->tag, tag) == 0) return true;
    for (const worker_task *t = w->head; t != NULL; t = t->next)
        if (t->tag != NULL && strcmp(t->tag, tag) == 0) return true;
    return false;
}

void sy_worker_wait_tag(sy_worker *w, const char *tag) {
    if (w == NULL || tag == NULL) return;
    pthread_mutex_lock(&w->lock);
    while (tag_pending(w, tag)) pthread_cond_wait(&w->done, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

void sy_worker_wait_idle(sy_worker *w) {
    if (w == NULL) return;
    pthread_mutex_lock(&w->lock);
    while (w->head != NULL || w->running != NULL) pthread_cond_wait(&w->done, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

bool sy_worker_has_tag(sy_worker *w, const char *tag) {
    if (w == NULL || tag == NULL) return false;
    pthread_mutex_lock(&w->lock);
    bool pending = tag_pending(w, tag);
    pthread_mutex_unlock(&w->lock);
    return pending;
}

void sy_worker_hold(sy_worker *w, bool hold) {
    if (w == NULL) return;
    pthread_mutex_lock(&w->lock);
    w->held = hold;
    pthread_cond_broadcast(&w->work);
    pthread_mutex_unlock(&w->lock);
}
