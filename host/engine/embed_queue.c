/* See embed_queue.h. */
#include "engine/embed_queue.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

typedef struct embed_job {
    bool score;
    const sy_embed_input *inputs;
    uint32_t n, done_inputs; /* inputs finished so far (a large job takes several calls) */
    float *out;
    double engine_seconds;
    bool finished;
    int status;
    char msg[256];
    struct embed_job *next;
} embed_job;

struct sy_embed_queue {
    sy_embed_run_fn run;
    void *run_ctx;
    const sy_loaded_model *lm;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    embed_job *head, *tail;
    bool running; /* a request is running the queue on the engine loop */
    /* the engine call's buffers, used on the loop only */
    sy_embed_input *inputs;
    uint32_t inputs_cap;
    float *out;
    size_t out_cap;
};

sy_embed_queue *sy_embed_queue_create(sy_embed_run_fn run, void *run_ctx, const sy_loaded_model *lm) {
    sy_embed_queue *q = sy_xcalloc(1, sizeof *q);
    q->run = run;
    q->run_ctx = run_ctx;
    q->lm = lm;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->changed, NULL);
    return q;
}

void sy_embed_queue_destroy(sy_embed_queue *q) {
    if (q == NULL) return;
    pthread_cond_destroy(&q->changed);
    pthread_mutex_destroy(&q->lock);
    free(q->inputs);
    free(q->out);
    free(q);
}

static uint32_t out_width(const sy_embed_queue *q, bool score) {
    return score ? 1 : (q->lm->info.n_embd_out ? q->lm->info.n_embd_out : 1);
}

/* Lock held: pops finished jobs off the head and wakes their waiters. */
static void finish(sy_embed_queue *q, embed_job *j, int status, const char *msg) {
    j->finished = true;
    j->status = status;
    if (msg) snprintf(j->msg, sizeof j->msg, "%s", msg);
    if (q->head == j) {
        q->head = j->next;
        if (q->head == NULL) q->tail = NULL;
    }
    pthread_cond_broadcast(&q->changed);
}

/* On the engine loop: one call over the queued work of one kind (score or embed), from the head on. */
static bool run_one_call(sy_embed_queue *q) {
    pthread_mutex_lock(&q->lock);
    embed_job *first = q->head;
    if (first == NULL) {
        pthread_mutex_unlock(&q->lock);
        return false;
    }
    /* whole remaining parts of jobs while the budget lasts; a job that does not fit waits, unless it is first */
    typedef struct part { embed_job *job; uint32_t from, count; } part;
    part parts[64];
    size_t n_parts = 0;
    uint32_t n_inputs = 0;
    uint64_t tokens = 0;
    for (embed_job *j = first; j != NULL && n_parts < 64; j = j->next) {
        if (j->score != first->score) break;
        uint32_t from = j->done_inputs, count = 0;
        while (from + count < j->n) {
            uint32_t t = j->inputs[from + count].n_tokens;
            if (n_inputs + count > 0 && tokens + t > SY_EMBED_BATCH_TOKENS) break;
            tokens += t;
            count++;
        }
        if (count > 0) parts[n_parts++] = (part){j, from, count};
        n_inputs += count;
        if (from + count < j->n) break; /* the budget is spent */
    }
    pthread_mutex_unlock(&q->lock);

    bool score = first->score;
    uint32_t width = out_width(q, score);
    if (n_inputs > q->inputs_cap) {
        q->inputs = sy_xrealloc(q->inputs, n_inputs * sizeof *q->inputs);
        q->inputs_cap = n_inputs;
    }
    if ((size_t)n_inputs * width > q->out_cap) {
        q->out_cap = (size_t)n_inputs * width;
        q->out = sy_xrealloc(q->out, q->out_cap * sizeof *q->out);
    }
    uint32_t k = 0;
    for (size_t p = 0; p < n_parts; p++)
        for (uint32_t i = 0; i < parts[p].count; i++) q->inputs[k++] = parts[p].job->inputs[parts[p].from + i];
    const sy_engine_embed_api *api = q->lm->plugin->engine_embed;
    sy_embed_batch batch = {sizeof batch, n_inputs, sizeof(sy_embed_input), q->inputs, q->out, NULL};
    double t0 = sy_now_seconds();
    sy_status st = score ? api->score(q->lm->model, &batch) : api->embed(q->lm->model, &batch);
    double dt = sy_now_seconds() - t0;
    const char *why = st == SY_OK ? NULL : q->lm->engine->error_message();

    pthread_mutex_lock(&q->lock);
    k = 0;
    for (size_t p = 0; p < n_parts; p++) {
        embed_job *j = parts[p].job;
        if (st == SY_OK)
            memcpy(j->out + (size_t)parts[p].from * width, q->out + (size_t)k * width,
                   (size_t)parts[p].count * width * sizeof(float));
        k += parts[p].count;
        j->engine_seconds += dt;
        j->done_inputs += parts[p].count;
        if (st != SY_OK) finish(q, j, -1, why);
        else if (j->done_inputs == j->n) finish(q, j, 0, NULL);
    }
    pthread_mutex_unlock(&q->lock);
    if (st != SY_OK) sy_log(SY_LOG_WARN, "embed: %s", why);
    return true;
}

static void drain(void *user) {
    sy_embed_queue *q = user;
    while (run_one_call(q)) {
    }
}

int sy_embed_queue_run(sy_embed_queue *q, bool score, const sy_embed_input *inputs, uint32_t n, float *out,
                       double *engine_seconds, char *msg, size_t msg_size) {
    if (engine_seconds) *engine_seconds = 0;
    if (n == 0) return 0;
    const sy_engine_embed_api *api = q->lm->plugin ? q->lm->plugin->engine_embed : NULL;
    if (api == NULL || (score ? api->score : api->embed) == NULL) {
        snprintf(msg, msg_size, "the engine has no %s", score ? "scoring" : "embeddings");
        return -1;
    }
    embed_job job = {.score = score, .inputs = inputs, .n = n, .out = out};
    pthread_mutex_lock(&q->lock);
    if (q->tail) q->tail->next = &job;
    else q->head = &job;
    q->tail = &job;
    while (!job.finished) {
        if (q->running) {
            pthread_cond_wait(&q->changed, &q->lock);
            continue;
        }
        q->running = true;
        pthread_mutex_unlock(&q->lock);
        int rc = q->run(q->run_ctx, drain, q);
        pthread_mutex_lock(&q->lock);
        q->running = false;
        if (rc != 0) /* the scheduler is stopping: nothing queued will run */
            while (q->head) finish(q, q->head, -1, "the model is unloading");
        pthread_cond_broadcast(&q->changed);
    }
    pthread_mutex_unlock(&q->lock);
    if (engine_seconds) *engine_seconds = job.engine_seconds;
    if (job.status != 0) snprintf(msg, msg_size, "%s", job.msg);
    return job.status;
}
