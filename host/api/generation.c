/* One generation: events handed over from the engine thread to the connection, streamed or collected. */
#include "api/generation.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include "api/context.h"
#include "base/log.h"
#include "base/utf8.h"
#include "base/util.h"

/* ------------------------------------------------------------------------------------------------------------
 * One generation */

/* Generations streamed together (n > 1): each one's callback also wakes the group's reader. */
struct sy_api_gen_group {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t seq; /* events delivered to any member, under lock */
    sy_api_gen *gens[SY_API_GEN_GROUP_MAX];
    uint32_t n;
    uint32_t next; /* round robin: where the next look begins, so no choice starves the others */
    double t_client_check;
};

struct sy_api_gen {
    sy_api_gen_group *group; /* NULL, or the group it belongs to (which outlives it) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    sy_api_event *head, *tail;
    bool ended;        /* the callback delivered DONE or ERROR */
    bool consumed_end; /* the consumer took it */
    bool cancelled;
    bool server_stop;  /* cancelled by the server's stop */
    bool unload_after;
    sy_gen *gen;
    uint64_t track;
    sy_http_request *request;
    sy_api_context *server;
    sy_model_lease *lease;  /* under lock once submitted: the end may release it from the engine thread */
    bool release_at_end;    /* nothing reads the model after the end (no logprobs to spell out) */
    const sy_loaded_model *lm;
    char model_name[SY_CONFIG_MAX_NAME_LEN + 1];
    double t_request;
    double t_last_token;   /* 0 before the first */
    double t_client_check; /* when the client's socket was last looked at */
};

static void gen_callback(void *user, const sy_gen_event *ev) {
    sy_api_gen *g = user;
    sy_api_event *e = sy_xcalloc(1, sizeof *e);
    e->type = ev->type;
    e->time = sy_now_seconds();
    e->token = -1;
    switch (ev->type) {
    case SY_GEN_EVENT_TEXT:
        e->text = sy_xmalloc(ev->text_len + 1);
        if (ev->text_len > 0 && ev->text != NULL) memcpy(e->text, ev->text, ev->text_len);
        e->text[ev->text_len] = '\0';
        e->text_len = ev->text != NULL ? ev->text_len : 0;
        e->token = ev->token;
        e->logprob = ev->logprob;
        e->n_top = ev->n_top > SY_GEN_MAX_TOP_LOGPROBS ? SY_GEN_MAX_TOP_LOGPROBS : ev->n_top;
        if (e->n_top > 0 && ev->top != NULL) memcpy(e->top, ev->top, e->n_top * sizeof *e->top);
        else e->n_top = 0;
        break;
    case SY_GEN_EVENT_DONE:
        snprintf(e->finish_reason, sizeof e->finish_reason, "%s", ev->finish_reason ? ev->finish_reason : "stop");
        e->stop_index = ev->stop_index;
        e->usage = ev->usage;
        break;
    case SY_GEN_EVENT_ERROR:
        e->message = sy_strdup(ev->message ? ev->message : "generation failed");
        e->usage = ev->usage;
        break;
    }
    sy_model_lease *ended_lease = NULL;
    pthread_mutex_lock(&g->lock);
    if (g->tail) g->tail->next = e;
    else g->head = e;
    g->tail = e;
    if (ev->type != SY_GEN_EVENT_TEXT) {
        g->ended = true;
        /* The model's lease ends with the generation, not with the connection: a client that does not read
         * its answer holds no swap or unload (the lease release defers the unload off this engine thread). */
        if (g->release_at_end) {
            ended_lease = g->lease;
            g->lease = NULL;
        }
    }
    pthread_cond_broadcast(&g->cond);
    if (g->group != NULL) { /* still under g->lock: the group cannot go before the member's end is seen */
        pthread_mutex_lock(&g->group->lock);
        g->group->seq++;
        pthread_cond_broadcast(&g->group->cond);
        pthread_mutex_unlock(&g->group->lock);
    }
    pthread_mutex_unlock(&g->lock);
    if (ended_lease != NULL) sy_model_lease_release(ended_lease);
}

/* Called by the server's stop, under its tracking lock. */
static void gen_stop_hook(void *arg) {
    sy_api_gen *g = arg;
    pthread_mutex_lock(&g->lock);
    g->server_stop = true;
    g->cancelled = true;
    pthread_mutex_unlock(&g->lock);
    sy_gen_cancel(g->gen);
}

static void gen_free_events(sy_api_gen *g) {
    sy_api_event *e = g->head;
    while (e) {
        sy_api_event *next = e->next;
        sy_api_event_free(e);
        e = next;
    }
    g->head = g->tail = NULL;
}

static sy_api_gen *gen_start(sy_http_request *r, sy_api_model *m, const int32_t *prompt, size_t n_prompt,
                             const sy_gen_params *params, sy_api_gen_group *group, sy_api_error *e) {
    sy_api_context *srv = sy_api_ctx(r);
    if (sy_api_stopping(srv)) {
        sy_api_fail(e, 503, "server_stopping", NULL, "the server is shutting down");
        return NULL;
    }
    if (group != NULL && group->n >= SY_API_GEN_GROUP_MAX) {
        sy_api_fail(e, 500, "internal_error", NULL, "more than %d generations in one group", SY_API_GEN_GROUP_MAX);
        return NULL;
    }
    sy_api_gen *g = sy_xcalloc(1, sizeof *g);
    g->group = group;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->request = r;
    g->server = srv;
    g->lm = m->lm;
    g->t_request = sy_http_start_time(r);
    snprintf(g->model_name, sizeof g->model_name, "%s", m->name);
    char err[512] = "";
    int status = 0;
    g->lease = m->lease; /* before the submit: the engine may end the generation before it returns */
    g->release_at_end = !params->logprobs && params->top_logprobs == 0;
    sy_scheduler *sched = sy_model_lease_scheduler(m->lease);
    g->gen = sched ? sy_scheduler_submit(sched, prompt, n_prompt, params, gen_callback, g, err, sizeof err, &status)
                   : NULL;
    if (g->gen == NULL) {
        if (status < 400 || status > 599) status = 503;
        sy_api_fail(e, status, status == 429 ? "queue_full" : status == 400 ? "invalid_request" : "model_unavailable",
                    NULL, "%s", err[0] ? err : "the model's scheduler refused the request");
        g->lease = NULL; /* the caller keeps it */
        gen_free_events(g);
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return NULL;
    }
    m->lease = NULL;
    g->track = sy_api_track(srv, gen_stop_hook, g);
    if (g->track == 0) gen_stop_hook(g); /* the stop began meanwhile */
    if (group != NULL) group->gens[group->n++] = g;
    return g;
}

sy_api_gen *sy_api_gen_start(sy_http_request *r, sy_api_model *m, const int32_t *prompt, size_t n_prompt,
                             const sy_gen_params *params, sy_api_error *e) {
    return gen_start(r, m, prompt, n_prompt, params, NULL, e);
}

sy_api_gen_group *sy_api_gen_group_new(void) {
    sy_api_gen_group *grp = sy_xcalloc(1, sizeof *grp);
    pthread_mutex_init(&grp->lock, NULL);
    pthread_cond_init(&grp->cond, NULL);
    return grp;
}

sy_api_gen *sy_api_gen_start_in(sy_api_gen_group *grp, sy_http_request *r, sy_api_model *m, const int32_t *prompt,
                                size_t n_prompt, const sy_gen_params *params, sy_api_error *e) {
    return gen_start(r, m, prompt, n_prompt, params, grp, e);
}

uint32_t sy_api_gen_group_size(const sy_api_gen_group *grp) { return grp->n; }
sy_api_gen *sy_api_gen_group_member(const sy_api_gen_group *grp, uint32_t i) { return i < grp->n ? grp->gens[i] : NULL; }

void sy_api_gen_group_free(sy_api_gen_group *grp) {
    if (grp == NULL) return;
    for (uint32_t i = 0; i < grp->n; i++) { /* cancel them all first, so none waits on the others' ends */
        sy_api_gen *g = grp->gens[i];
        pthread_mutex_lock(&g->lock);
        bool cancel = !g->ended && !g->cancelled;
        g->cancelled = true;
        pthread_mutex_unlock(&g->lock);
        if (cancel) sy_gen_cancel(g->gen);
    }
    for (uint32_t i = 0; i < grp->n; i++) sy_api_gen_finish(grp->gens[i]);
    pthread_cond_destroy(&grp->cond);
    pthread_mutex_destroy(&grp->lock);
    free(grp);
}

void sy_api_event_free(sy_api_event *ev) {
    if (ev == NULL) return;
    free(ev->text);
    free(ev->message);
    free(ev);
}

static void gen_record(sy_api_gen *g, const sy_api_event *ev) {
    sy_metrics *metrics = sy_api_context_metrics(g->server);
    if (ev->type == SY_GEN_EVENT_TEXT && ev->token >= 0) {
        if (g->t_last_token == 0) sy_metrics_time_to_first_token(metrics, ev->time - g->t_request);
        else sy_metrics_token_latency(metrics, ev->time - g->t_last_token);
        g->t_last_token = ev->time;
    } else if (ev->type != SY_GEN_EVENT_TEXT) {
        sy_metrics_tokens(metrics, g->model_name, ev->usage.prompt_tokens, ev->usage.cached_tokens,
                          ev->usage.completion_tokens);
        if (ev->usage.drafted_tokens != 0)
            sy_metrics_draft_tokens(metrics, g->model_name, ev->usage.drafted_tokens, ev->usage.accepted_tokens);
    }
}

sy_api_event *sy_api_gen_next(sy_api_gen *g) {
    /* While events flow the wait below never times out: look at the client every quarter second anyway, so that
     * a collected (non-streamed) generation notices a client that left. */
    double now = sy_now_seconds();
    if (now - g->t_client_check >= 0.25) {
        g->t_client_check = now;
        if (sy_http_client_gone(g->request)) {
            pthread_mutex_lock(&g->lock);
            bool cancel = !g->cancelled && !g->ended;
            g->cancelled = true;
            pthread_mutex_unlock(&g->lock);
            if (cancel) sy_gen_cancel(g->gen);
            return NULL;
        }
    }
    pthread_mutex_lock(&g->lock);
    while (g->head == NULL) {
        if (g->consumed_end) {
            pthread_mutex_unlock(&g->lock);
            return NULL;
        }
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 250 * 1000 * 1000;
        if (deadline.tv_nsec >= 1000000000) deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
        if (g->head != NULL || g->cancelled) continue;
        /* Nothing yet: has the client gone away meanwhile? (A cancelled generation still ends with DONE.) */
        pthread_mutex_unlock(&g->lock);
        bool gone = sy_http_client_gone(g->request);
        pthread_mutex_lock(&g->lock);
        if (gone && g->head == NULL) {
            g->cancelled = true;
            pthread_mutex_unlock(&g->lock);
            sy_gen_cancel(g->gen);
            return NULL;
        }
    }
    sy_api_event *ev = g->head;
    g->head = ev->next;
    if (g->head == NULL) g->tail = NULL;
    ev->next = NULL;
    if (ev->type != SY_GEN_EVENT_TEXT) g->consumed_end = true;
    pthread_mutex_unlock(&g->lock);
    gen_record(g, ev);
    return ev;
}

/* The member's next event if one is there, without waiting. */
static sy_api_event *gen_take(sy_api_gen *g) {
    pthread_mutex_lock(&g->lock);
    sy_api_event *ev = g->head;
    if (ev != NULL) {
        g->head = ev->next;
        if (g->head == NULL) g->tail = NULL;
        ev->next = NULL;
        if (ev->type != SY_GEN_EVENT_TEXT) g->consumed_end = true;
    }
    pthread_mutex_unlock(&g->lock);
    if (ev != NULL) gen_record(g, ev);
    return ev;
}

static bool gen_consumed_end(sy_api_gen *g) {
    pthread_mutex_lock(&g->lock);
    bool done = g->consumed_end;
    pthread_mutex_unlock(&g->lock);
    return done;
}

sy_api_event *sy_api_gen_group_next(sy_api_gen_group *grp, uint32_t *index) {
    if (grp->n == 0) return NULL;
    sy_http_request *request = grp->gens[0]->request;
    for (;;) {
        pthread_mutex_lock(&grp->lock);
        uint64_t seen = grp->seq;
        pthread_mutex_unlock(&grp->lock);
        bool open = false;
        for (uint32_t j = 0; j < grp->n; j++) {
            uint32_t i = (grp->next + j) % grp->n;
            sy_api_event *ev = gen_take(grp->gens[i]);
            if (ev != NULL) {
                grp->next = (i + 1) % grp->n;
                *index = i;
                return ev;
            }
            open = open || !gen_consumed_end(grp->gens[i]);
        }
        if (!open) return NULL; /* every end was taken already */
        double now = sy_now_seconds();
        if (now - grp->t_client_check >= 0.25) {
            grp->t_client_check = now;
            if (sy_http_client_gone(request)) return NULL; /* the group's free cancels them */
        }
        pthread_mutex_lock(&grp->lock);
        if (grp->seq == seen) {
            struct timespec deadline;
            clock_gettime(CLOCK_REALTIME, &deadline);
            deadline.tv_nsec += 250 * 1000 * 1000;
            if (deadline.tv_nsec >= 1000000000) deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&grp->cond, &grp->lock, &deadline);
        }
        pthread_mutex_unlock(&grp->lock);
    }
}

void sy_api_gen_finish(sy_api_gen *g) {
    if (g == NULL) return;
    sy_api_untrack(g->server, g->track);
    pthread_mutex_lock(&g->lock);
    if (!g->ended) {
        g->cancelled = true;
        pthread_mutex_unlock(&g->lock);
        sy_gen_cancel(g->gen);
        pthread_mutex_lock(&g->lock);
        while (!g->ended) pthread_cond_wait(&g->cond, &g->lock);
    }
    if (!g->consumed_end) {
        /* Count the tokens of a generation whose end nobody read (the client went away). */
        for (sy_api_event *e = g->head; e; e = e->next)
            if (e->type != SY_GEN_EVENT_TEXT) gen_record(g, e);
    }
    gen_free_events(g);
    sy_model_lease *lease = g->lease;
    g->lease = NULL;
    pthread_mutex_unlock(&g->lock);
    sy_gen_release(g->gen);
    if (lease) sy_model_lease_release(lease);
    if (g->unload_after) {
        int n = sy_model_manager_unload(sy_api_manager(g->server), g->model_name);
        sy_log(SY_LOG_INFO, "model %s: unloaded after the request (keep_alive 0): %d", g->model_name, n);
    }
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

const sy_loaded_model *sy_api_gen_model(const sy_api_gen *g) { return g->lm; }
const char *sy_api_gen_model_name(const sy_api_gen *g) { return g->model_name; }
void sy_api_gen_unload_after(sy_api_gen *g) { g->unload_after = true; }

bool sy_api_gen_server_stopping(const sy_api_gen *g) {
    sy_api_gen *mg = (sy_api_gen *)g;
    pthread_mutex_lock(&mg->lock);
    bool s = mg->server_stop;
    pthread_mutex_unlock(&mg->lock);
    return s || sy_api_stopping(g->server);
}

bool sy_api_gen_failed(const sy_api_gen *g, const sy_api_event *ev, int *status, char *msg, size_t msg_size) {
    const char *why;
    if (ev->type == SY_GEN_EVENT_ERROR) {
        *status = 500;
        why = ev->message ? ev->message : "the generation failed";
    } else if (strcmp(ev->finish_reason, "cancelled") == 0 && sy_api_gen_server_stopping(g)) {
        *status = 503;
        why = "the server is shutting down";
    } else {
        return false;
    }
    sy_utf8_sanitize(msg, msg_size, why, strlen(why));
    return true;
}

/* ------------------------------------------------------------------------------------------------------------
 * Streams */

typedef struct api_stream {
    sy_api_gen *gen;
    const sy_api_stream_ops *ops;
    void *state;
    sy_buf out;
    bool finished;
} api_stream;

static ssize_t stream_read(void *cls, char *buf, size_t max) {
    api_stream *s = cls;
    while (s->out.len == 0) {
        if (s->finished) return SY_HTTP_STREAM_END;
        sy_api_event *ev = sy_api_gen_next(s->gen);
        if (ev == NULL) return SY_HTTP_STREAM_ABORT;
        s->ops->format(s->state, s->gen, ev, &s->out);
        if (ev->type != SY_GEN_EVENT_TEXT) s->finished = true;
        sy_api_event_free(ev);
    }
    size_t n = s->out.len < max ? s->out.len : max;
    memcpy(buf, s->out.data, n);
    sy_buf_consume(&s->out, n);
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    api_stream *s = cls;
    sy_api_gen_finish(s->gen);
    if (s->ops->free_state) s->ops->free_state(s->state);
    sy_buf_free(&s->out);
    free(s);
}

/* A group's stream: events of every member as they come, then ops->done once every member ended. */
typedef struct group_stream {
    sy_api_gen_group *group;
    const sy_api_group_stream_ops *ops;
    void *state;
    sy_api_event *pending; /* an event taken before the stream began (the first choice's first) */
    uint32_t pending_index;
    uint32_t n_ended;
    sy_buf out;
    bool finished;
} group_stream;

static ssize_t group_stream_read(void *cls, char *buf, size_t max) {
    group_stream *s = cls;
    while (s->out.len == 0) {
        if (s->finished) return SY_HTTP_STREAM_END;
        uint32_t index = 0;
        sy_api_event *ev = s->pending;
        if (ev != NULL) index = s->pending_index, s->pending = NULL;
        else ev = sy_api_gen_group_next(s->group, &index);
        if (ev == NULL) return SY_HTTP_STREAM_ABORT;
        bool over = s->ops->format(s->state, s->group->gens[index], index, ev, &s->out);
        if (ev->type != SY_GEN_EVENT_TEXT && ++s->n_ended == s->group->n && !over) {
            s->ops->done(s->state, &s->out);
            over = true;
        }
        if (over) s->finished = true;
        sy_api_event_free(ev);
    }
    size_t n = s->out.len < max ? s->out.len : max;
    memcpy(buf, s->out.data, n);
    sy_buf_consume(&s->out, n);
    return (ssize_t)n;
}

static void group_stream_free(void *cls) {
    group_stream *s = cls;
    sy_api_event_free(s->pending);
    sy_api_gen_group_free(s->group);
    if (s->ops->free_state) s->ops->free_state(s->state);
    sy_buf_free(&s->out);
    free(s);
}

int sy_api_respond_group_stream(sy_http_request *r, const char *content_type, sy_api_gen_group *grp,
                                sy_api_event *first, uint32_t first_index, const sy_api_group_stream_ops *ops,
                                void *state) {
    group_stream *s = sy_xcalloc(1, sizeof *s);
    s->group = grp;
    s->ops = ops;
    s->state = state;
    s->pending = first;
    s->pending_index = first_index;
    sy_buf_init(&s->out);
    return sy_http_respond_stream(r, content_type, group_stream_read, s, group_stream_free);
}

int sy_api_respond_stream(sy_http_request *r, const char *content_type, sy_api_gen *g,
                          const sy_api_stream_ops *ops, void *state) {
    api_stream *s = sy_xcalloc(1, sizeof *s);
    s->gen = g;
    s->ops = ops;
    s->state = state;
    sy_buf_init(&s->out);
    return sy_http_respond_stream(r, content_type, stream_read, s, stream_free);
}

void sy_api_stream_json(sy_buf *out, const char *before, cJSON *json, const char *after) {
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (text == NULL) return;
    sy_buf_puts(out, before);
    sy_buf_puts(out, text);
    sy_buf_puts(out, after);
    cJSON_free(text);
}
