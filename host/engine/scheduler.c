/*
 * The engine loop of one loaded model: slots, a FIFO queue and continuous batching (see scheduler.h).
 *
 * Locking: `lock` guards the queue, each slot's `busy`/`gen` link, the counters and the shutdown flag. Everything
 * else a slot holds (its sequence, the mirror of its tokens, its sampler, its text buffers) belongs to the loop
 * thread alone. Callbacks run on the loop thread with no lock held, so they may call submit, cancel or release.
 *
 * A generation's memory is shared by its caller and the loop through a reference count: the loop drops its
 * reference after the last event, the caller with sy_gen_release(), whichever comes last frees it.
 */
#include "engine/scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/log.h"
#include "engine/constrain.h"
#include "engine/embed_queue.h"
#include "engine/prefix_cache.h"
#include "engine/speculative.h"
#include "engine/text_stream.h"
#include "base/util.h"
#include "grammar/sy_grammar.h"

/* A stop string longer than this is refused: holding back text for it would stall streaming. */
#define SY_GEN_MAX_STOP_BYTES 1024
/* A slot that reads a prompt completely cached still decodes its last token, to get the logits it needs. */
#define SY_SCHED_DEFAULT_PREFILL_CHUNK 512
#define SY_SCHED_DEFAULT_BATCH_TOKENS 2048
/* A slot's sequence is parked in the host cache only when it would lose at least this many tokens. */
#define SY_SCHED_PARK_MIN_TOKENS 32
/* Engines that answer SY_ERR_CANCELLED without a reason this many steps running are treated as failing. */
#define SY_SCHED_MAX_SPURIOUS_CANCELS 3

struct sy_gen {
    sy_scheduler *sched;
    atomic_int refs;     /* the caller's and the loop's */
    atomic_int cancelled;
    atomic_int finished; /* the last event was sent (the scheduler may be gone since) */

    int32_t *prompt;
    uint32_t n_prompt;
    sy_gen_params params;
    char *stop[SY_GEN_MAX_STOP_STRINGS]; /* owned copies; params.stop points at them */
    sy_logit_bias *logit_bias;           /* owned copy; params.sampling.logit_bias points at it */
    sy_dry_breakers dry_breakers;        /* DRY's breakers as token sequences; params.sampling.dry_breakers */
    size_t stop_len[SY_GEN_MAX_STOP_STRINGS];
    int stop_index; /* the stop string that matched, or -1 */
    sy_gen_callback callback;
    void *user;

    double t_submit, t_start, t_first, t_end;
    sy_gen_usage usage;
    bool in_batch; /* under the scheduler lock: its tokens are in the decode running now */
    sy_host_call call; /* this generation's own cancellation, for engines that cancel items alone */
    bool device_sampled; /* every token sampled by the engine (sy.engine.sampling/1): chosen when it starts */
    uint64_t rng;        /* the engine sampler's generator state, seeded from params.sampling.seed */

    /* Constrained decoding: the grammar (referenced), where the output stands in it (NULL: unconstrained), and the
     * allowed tokens of the step (mask_words words). The state is the loop's once submitted. */
    sy_grammar *grammar;
    sy_grammar_state *gstate;
    uint32_t *gmask;
    char *trigger_words[SY_GEN_MAX_TRIGGERS]; /* owned copies; params.constraint points at them */

    /* Loop-thread state while it runs. */
    sy_sampler *sampler;
    sy_text_stream utf8;
    sy_buf held; /* complete text not yet sent: it may still turn out to start a stop string */
    sy_buf out;  /* text released by the current token */
    struct sy_gen *next; /* queue link */
};

typedef enum slot_phase {
    SLOT_FREE = 0,
    SLOT_PREFILL, /* reading the prompt from prompt_pos on */
    SLOT_DECODE   /* `next_token` waits to be decoded */
} slot_phase;

typedef struct slot {
    uint32_t index;
    sy_seq *seq;        /* NULL until first used, or after an engine error */
    int32_t *tokens;    /* the tokens the sequence holds, mirrored */
    uint32_t n_tokens, cap_tokens;
    slot_phase phase;
    sy_gen *gen;        /* under the lock: set while busy */
    uint32_t prompt_pos;
    int32_t next_token;
    float *logits;      /* one row of n_vocab */
    double last_used;
    /* Per step: this slot's part of the batch. */
    uint32_t step_tokens;
    uint32_t step_logits;
    /* Speculative decoding (speculative.h): the slot's speculation state (NULL until a speculative generation
     * runs here; kept across generations, like the KV) and the proposals of this step, which sit in `tokens` right
     * after next_token, past the mirrored n_tokens. */
    sy_spec_seq *spec;
    uint32_t step_drafts;
} slot;

/* A sequence kept by the host prefix cache after its slot moved on to another prompt. Loop thread only. */
typedef struct parked {
    sy_seq *seq;
    sy_prefix_entry *entry; /* its tokens, in the cache's index */
    double last_used;
    struct parked *prev, *next;
} parked;

struct sy_scheduler {
    const sy_loaded_model *lm;
    sy_embed_queue *embed_queue; /* embedding models: their requests' batching queue (embed_queue.h) */
    sy_scheduler_options opts;
    uint32_t n_vocab, n_ctx;

    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stopping;

    slot *slots;
    uint32_t n_slots;
    uint32_t n_busy;
    sy_gen *queue_head, *queue_tail;
    uint32_t n_queued;
    sy_host_call step_call; /* the running decode; cancelled when one of its generations is */

    sy_scheduler_stats stats; /* slots_busy and queue_depth filled on read */

    /* Loop-thread scratch. */
    sy_decode_item *items;
    sy_status *item_status; /* filled by engines with SY_CAP_ITEM_CANCEL */
    const sy_engine_sampling_api *sampling; /* the engine samples itself; NULL: the host samples every token */
    sy_sampling_params *sample_params;      /* per item of a sampled part */
    int32_t *sample_tokens;
    bool item_cancel;       /* the engine drops a cancelled item alone instead of failing the step */
    slot **item_slots;
    char *piece;
    size_t piece_cap;
    uint32_t rotate; /* first slot offered prefill room, so no slot starves */
    sy_prefix_cache *cache; /* index of the parked sequences */
    parked *parked_list;
    uint64_t parked_tokens;
    uint32_t n_parked;
    uint32_t spurious_cancels;
    /* Constrained decoding: the model's token texts as the grammar sees them, built by the first constrained
     * submit (under vocab_lock; immutable after) and its end-of-generation tokens. */
    pthread_mutex_t vocab_lock;
    sy_grammar_vocab *gvocab;
    int32_t *eog_tokens;
    uint32_t n_eog_tokens;
    double constraint_pending; /* loop thread: grammar time not yet added to stats.constraint_ns */
    /* Snapshot hooks (end of file): tasks run on the loop thread between steps; stop without freeing. */
    struct sched_task *tasks;
    pthread_cond_t task_done;
    bool joined;
};

sy_gen_params sy_gen_params_defaults(void) {
    sy_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampling = sy_sampler_defaults();
    p.speculative = true;
    return p;
}

/* Whether the engine may sample this generation's tokens itself (sy.engine.sampling/1): only when the host has
 * nothing to do between the logits and the token (no penalties, no logprobs, no drafts to verify against the
 * rows). Decided once per generation, so that one seed always meets one sampler. */
static bool device_sampling_fits(const sy_scheduler *s, const sy_gen *g) {
    const sy_sampler_params *p = &g->params.sampling;
    return s->sampling != NULL && !g->params.logprobs && g->params.top_logprobs == 0 && p->repeat_penalty == 1.0f &&
           !sy_sampler_needs_host(p) &&
           p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f &&
           !(s->opts.speculator != NULL && g->params.speculative) && g->gstate == NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * Generations: references, events */

static void gen_free(sy_gen *g) {
    free(g->logit_bias);
    sy_dry_breakers_free(&g->dry_breakers);
    for (size_t i = 0; i < SY_GEN_MAX_STOP_STRINGS; i++) free(g->stop[i]);
    for (size_t i = 0; i < SY_GEN_MAX_TRIGGERS; i++) free(g->trigger_words[i]);
    sy_grammar_state_free(g->gstate);
    sy_grammar_free(g->grammar);
    free(g->gmask);
    free(g->prompt);
    sy_sampler_free(g->sampler);
    sy_buf_free(&g->held);
    sy_buf_free(&g->out);
    free(g);
}

static void gen_unref(sy_gen *g) {
    if (atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

void sy_gen_release(sy_gen *g) {
    if (g != NULL) gen_unref(g);
}

void sy_gen_cancel(sy_gen *g) {
    if (g == NULL) return;
    atomic_store(&g->cancelled, 1);
    if (atomic_load(&g->finished)) return; /* over already: the scheduler may be gone */
    sy_scheduler *s = g->sched;
    pthread_mutex_lock(&s->lock);
    /* An engine that cancels items alone leaves the other generations' step running. */
    if (s->item_cancel) sy_host_call_cancel(&g->call);
    else if (g->in_batch) sy_host_call_cancel(&s->step_call);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

static void emit_text(sy_gen *g, const char *text, size_t len, int32_t token, const double *logprob,
                      const sy_gen_logprob *top, uint32_t n_top) {
    sy_gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = SY_GEN_EVENT_TEXT;
    ev.text = text != NULL ? text : ""; /* never NULL, even when empty */
    ev.text_len = len;
    ev.token = token;
    if (logprob != NULL) ev.logprob = *logprob;
    ev.top = n_top ? top : NULL;
    ev.n_top = n_top;
    g->callback(g->user, &ev);
}

static void fill_usage_times(sy_gen *g) {
    g->t_end = sy_now_seconds();
    if (g->t_start == 0) g->t_start = g->t_end;
    g->usage.queue_seconds = g->t_start - g->t_submit;
    if (g->t_first != 0) {
        g->usage.prompt_seconds = g->t_first - g->t_start;
        g->usage.generation_seconds = g->t_end - g->t_first;
    } else {
        g->usage.prompt_seconds = g->t_end - g->t_start;
    }
}

/* The last event: DONE (reason) or ERROR (message != NULL). Drops the loop's reference. */
static void emit_end(sy_gen *g, const char *finish_reason, const char *message) {
    fill_usage_times(g);
    /* Its grammar state is done with: free it now rather than when the caller releases the handle. */
    sy_grammar_state_free(g->gstate);
    g->gstate = NULL;
    sy_gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.token = -1;
    ev.usage = g->usage;
    ev.stop_index = g->stop_index;
    if (message != NULL) {
        ev.type = SY_GEN_EVENT_ERROR;
        ev.message = message;
    } else {
        ev.type = SY_GEN_EVENT_DONE;
        ev.finish_reason = finish_reason;
    }
    atomic_store(&g->finished, 1);
    g->callback(g->user, &ev);
    gen_unref(g);
}

/* ------------------------------------------------------------------------------------------------------------
 * Text: UTF-8 completion, then holding back what could start a stop string */

static void held_sink(void *user, const char *text, size_t len) { sy_buf_append(&((sy_gen *)user)->held, text, len); }

/* Earliest complete stop string in the held text: its offset, or -1. */
static long find_stop(const sy_gen *g, int *which) {
    long best = -1;
    *which = -1;
    for (size_t i = 0; i < g->params.n_stop; i++) {
        size_t n = g->stop_len[i];
        if (n == 0 || n > g->held.len) continue;
        for (size_t at = 0; at + n <= g->held.len; at++) {
            if (best >= 0 && (long)at >= best) break;
            if (memcmp(g->held.data + at, g->stop[i], n) == 0) {
                best = (long)at;
                *which = (int)i;
                break;
            }
        }
    }
    return best;
}

/* How many bytes at the end of the held text could be the beginning of a stop string. */
static size_t stop_prefix_tail(const sy_gen *g) {
    size_t keep = 0;
    for (size_t i = 0; i < g->params.n_stop; i++) {
        size_t n = g->stop_len[i];
        size_t longest = n - 1 < g->held.len ? n - 1 : g->held.len; /* a full match was handled before */
        for (size_t k = longest; k > keep; k--) {
            if (memcmp(g->held.data + g->held.len - k, g->stop[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    /* Never split a UTF-8 character between sent and held text: hold its lead byte too. */
    while (keep > 0 && keep < g->held.len && ((unsigned char)g->held.data[g->held.len - keep] & 0xC0) == 0x80)
        keep++;
    return keep;
}

/* Moves what can be released from `held` to `out`. Returns true when a stop string matched (the text from the
 * match on is dropped). `final`: nothing more comes, so nothing needs holding. */
static bool release_text(sy_gen *g, bool final) {
    int which;
    long stop_at = find_stop(g, &which);
    if (stop_at >= 0) {
        g->stop_index = which;
        sy_buf_append(&g->out, g->held.data, (size_t)stop_at);
        sy_buf_clear(&g->held);
        return true;
    }
    size_t keep = final ? 0 : stop_prefix_tail(g);
    size_t give = g->held.len - keep;
    sy_buf_append(&g->out, g->held.data, give);
    sy_buf_consume(&g->held, give);
    return false;
}

/* ------------------------------------------------------------------------------------------------------------
 * Submitting */

static int refuse(char *err, size_t err_size, int *http_status, int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int refuse(char *err, size_t err_size, int *http_status, int status, const char *fmt, ...) {
    if (err != NULL && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    if (http_status != NULL) *http_status = status;
    return -1;
}

static bool finite_param(float v) { return isfinite(v); }

static int check_params(const sy_scheduler *s, const sy_gen_params *p, char *err, size_t err_size, int *http) {
    const sy_sampler_params *sp = &p->sampling;
    if (!finite_param(sp->temperature) || !finite_param(sp->top_p) || !finite_param(sp->min_p) ||
        !finite_param(sp->repeat_penalty) || !finite_param(sp->presence_penalty) ||
        !finite_param(sp->frequency_penalty) || !finite_param(sp->dry_multiplier) || !finite_param(sp->dry_base))
        return refuse(err, err_size, http, 400, "sampling parameters must be finite numbers");
    if (sp->dry_allowed_length < 0 || sp->dry_penalty_last_n < -1)
        return refuse(err, err_size, http, 400, "dry_allowed_length must be 0 or more and dry_penalty_last_n -1 or more");
    if (p->n_dry_breakers > SY_DRY_MAX_BREAKERS)
        return refuse(err, err_size, http, 400, "%zu DRY sequence breakers given, at most %d", p->n_dry_breakers,
                      SY_DRY_MAX_BREAKERS);
    if (p->n_stop > SY_GEN_MAX_STOP_STRINGS)
        return refuse(err, err_size, http, 400, "%zu stop strings given, at most %d", p->n_stop,
                      SY_GEN_MAX_STOP_STRINGS);
    for (size_t i = 0; i < p->n_stop; i++) {
        if (p->stop[i] == NULL) return refuse(err, err_size, http, 400, "stop string %zu is missing", i);
        if (strlen(p->stop[i]) > SY_GEN_MAX_STOP_BYTES)
            return refuse(err, err_size, http, 400, "stop string %zu is longer than %d bytes", i,
                          SY_GEN_MAX_STOP_BYTES);
    }
    if (p->top_logprobs > SY_GEN_MAX_TOP_LOGPROBS)
        return refuse(err, err_size, http, 400, "top_logprobs %u is more than %d", (unsigned)p->top_logprobs,
                      SY_GEN_MAX_TOP_LOGPROBS);
    const sy_gen_constraint *c = &p->constraint;
    if (c->grammar == NULL && (c->n_trigger_words > 0 || c->n_trigger_tokens > 0))
        return refuse(err, err_size, http, 400, "grammar triggers given without a grammar");
    if (c->n_trigger_words > SY_GEN_MAX_TRIGGERS || c->n_trigger_tokens > SY_GEN_MAX_TRIGGERS)
        return refuse(err, err_size, http, 400, "more than %d grammar trigger words or tokens", SY_GEN_MAX_TRIGGERS);
    for (size_t i = 0; i < c->n_trigger_words; i++) {
        size_t n = c->trigger_words[i] != NULL ? strlen(c->trigger_words[i]) : 0;
        if (n == 0 || n > SY_GRAMMAR_MAX_TRIGGER_LEN)
            return refuse(err, err_size, http, 400, "grammar trigger word %zu is empty or longer than %u bytes", i,
                          SY_GRAMMAR_MAX_TRIGGER_LEN);
    }
    for (size_t i = 0; i < c->n_trigger_tokens; i++)
        if (c->trigger_tokens[i] < 0 || (uint32_t)c->trigger_tokens[i] >= s->n_vocab)
            return refuse(err, err_size, http, 400, "grammar trigger token %ld is outside the vocabulary of %u",
                          (long)c->trigger_tokens[i], (unsigned)s->n_vocab);
    return 0;
}

/* ---- constrained decoding: the model's vocabulary for the grammar ---- */

/* The grammar vocabulary, built on first use (any thread: token_to_bytes and token_flags are any-thread calls).
 * NULL with err set when it cannot be built. */
static const sy_grammar_vocab *grammar_vocab(sy_scheduler *s, char *err, size_t err_size) {
    pthread_mutex_lock(&s->vocab_lock);
    if (s->gvocab == NULL) {
        double t0 = sy_now_seconds();
        s->gvocab = sy_constrain_vocab_create(s->lm, &s->eog_tokens, &s->n_eog_tokens, err, err_size);
        if (s->gvocab != NULL)
            sy_log(SY_LOG_INFO, "scheduler: grammar vocabulary of %u tokens built in %.0f ms", (unsigned)s->n_vocab,
                   (sy_now_seconds() - t0) * 1e3);
    }
    const sy_grammar_vocab *v = s->gvocab;
    pthread_mutex_unlock(&s->vocab_lock);
    return v;
}

/* The constraint of a generation being submitted: its own copies of the triggers, a state at the grammar's start
 * and the mask scratch. 0, or -1 with err (400). */
static int gen_constrain(sy_scheduler *s, sy_gen *g, const sy_gen_constraint *c, char *err, size_t err_size,
                         int *http) {
    char msg[512] = "";
    const sy_grammar_vocab *v = grammar_vocab(s, msg, sizeof msg);
    if (v == NULL) return refuse(err, err_size, http, 500, "the grammar vocabulary cannot be built: %s", msg);
    sy_gen_constraint *own = &g->params.constraint;
    for (size_t i = 0; i < c->n_trigger_words; i++) {
        g->trigger_words[i] = sy_strdup(c->trigger_words[i]);
        own->trigger_words[i] = g->trigger_words[i];
    }
    for (size_t i = c->n_trigger_words; i < SY_GEN_MAX_TRIGGERS; i++) own->trigger_words[i] = NULL;
    sy_grammar_triggers t = {own->trigger_words, NULL, c->n_trigger_words, own->trigger_tokens, c->n_trigger_tokens};
    bool lazy = c->n_trigger_words > 0 || c->n_trigger_tokens > 0;
    g->grammar = sy_grammar_ref(c->grammar);
    g->gstate = sy_grammar_state_create(g->grammar, v, lazy ? &t : NULL, msg, sizeof msg);
    if (g->gstate == NULL) return refuse(err, err_size, http, 400, "grammar: %s", msg);
    g->gmask = sy_xmalloc(sy_grammar_vocab_mask_words(v) * sizeof *g->gmask);
    return 0;
}

/* The vocabulary as DRY's breaker builder reads it. */
static long dry_token_text(void *user, int32_t token, char **buf, size_t *cap) {
    return sy_loaded_model_token_bytes(user, token, buf, cap);
}

static int32_t *dry_tokenize(void *user, const char *text, size_t len, size_t *n) {
    char err[256];
    return sy_loaded_model_tokenize(user, text, len, 0, n, err, sizeof err);
}

sy_gen *sy_scheduler_submit(sy_scheduler *s, const int32_t *prompt, size_t n_prompt, const sy_gen_params *params,
                            sy_gen_callback callback, void *user, char *err, size_t err_size, int *http_status) {
    if (s == NULL || callback == NULL || (prompt == NULL && n_prompt > 0)) {
        refuse(err, err_size, http_status, 500, "submit: missing scheduler, prompt or callback");
        return NULL;
    }
    sy_gen_params defaults = sy_gen_params_defaults();
    if (params == NULL) params = &defaults;
    if (n_prompt == 0) {
        refuse(err, err_size, http_status, 400, "the prompt is empty");
        return NULL;
    }
    if (n_prompt > s->n_ctx) {
        refuse(err, err_size, http_status, 400, "the prompt has %zu tokens, more than the context of %u", n_prompt,
               (unsigned)s->n_ctx);
        return NULL;
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= s->n_vocab) {
            refuse(err, err_size, http_status, 400, "prompt token %ld at %zu is outside the vocabulary of %u",
                   (long)prompt[i], i, (unsigned)s->n_vocab);
            return NULL;
        }
    }
    if (check_params(s, params, err, err_size, http_status) != 0) return NULL;

    sy_gen *g = sy_xcalloc(1, sizeof *g);
    sy_host_call_init(&g->call);
    g->sched = s;
    atomic_init(&g->refs, 2);
    atomic_init(&g->cancelled, 0);
    atomic_init(&g->finished, 0);
    g->stop_index = -1;
    g->prompt = sy_xmalloc(n_prompt * sizeof *g->prompt);
    memcpy(g->prompt, prompt, n_prompt * sizeof *g->prompt);
    g->n_prompt = (uint32_t)n_prompt;
    g->params = *params;
    uint32_t n_bias = params->sampling.logit_bias ? params->sampling.n_logit_bias : 0;
    if (n_bias > SY_MAX_LOGIT_BIAS) n_bias = SY_MAX_LOGIT_BIAS;
    if (n_bias > 0) {
        g->logit_bias = sy_xmalloc(n_bias * sizeof *g->logit_bias);
        memcpy(g->logit_bias, params->sampling.logit_bias, n_bias * sizeof *g->logit_bias);
    }
    g->params.sampling.logit_bias = g->logit_bias;
    g->params.sampling.n_logit_bias = n_bias;
    g->params.sampling.dry_breakers = NULL;
    for (size_t i = 0; i < SY_DRY_MAX_BREAKERS; i++) g->params.dry_breakers[i] = NULL; /* not kept past submit */
    g->params.n_dry_breakers = 0;
    if (sy_sampler_dry_enabled(&params->sampling)) {
        const char *const *strings = params->n_dry_breakers > 0 ? params->dry_breakers : sy_dry_default_breakers;
        size_t n_strings = params->n_dry_breakers > 0 ? params->n_dry_breakers : 4;
        sy_dry_vocab v = {s->n_vocab, dry_token_text, dry_tokenize, (void *)s->lm};
        char why[256] = "";
        if (sy_dry_breakers_build(&v, strings, n_strings, &g->dry_breakers, why, sizeof why) != 0) {
            gen_free(g);
            refuse(err, err_size, http_status, 400, "dry_sequence_breakers: %s", why);
            return NULL;
        }
        g->params.sampling.dry_breakers = &g->dry_breakers;
    }
    size_t n_stop = 0;
    for (size_t i = 0; i < params->n_stop; i++) {
        size_t len = strlen(params->stop[i]);
        if (len == 0) continue; /* an empty stop string would stop before anything: ignore it */
        g->stop[n_stop] = sy_strdup(params->stop[i]);
        g->stop_len[n_stop] = len;
        n_stop++;
    }
    for (size_t i = 0; i < SY_GEN_MAX_STOP_STRINGS; i++) g->params.stop[i] = i < n_stop ? g->stop[i] : NULL;
    g->params.n_stop = n_stop;
    if (params->constraint.grammar == NULL) memset(&g->params.constraint, 0, sizeof g->params.constraint);
    else if (
        gen_constrain(s, g, &params->constraint, err, err_size, http_status) != 0) {
        gen_free(g);
        return NULL;
    }
    g->callback = callback;
    g->user = user;
    g->usage.prompt_tokens = (uint32_t)n_prompt;
    g->t_submit = sy_now_seconds();
    sy_text_stream_init(&g->utf8);

    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        gen_free(g);
        refuse(err, err_size, http_status, 503, "the model is shutting down");
        return NULL;
    }
    /* Admitted while the slots plus the queue have room; the loop moves queued requests into free slots. */
    if ((uint64_t)s->n_busy + s->n_queued >= (uint64_t)s->n_slots + s->opts.max_queue) {
        uint32_t queued = s->n_queued;
        pthread_mutex_unlock(&s->lock);
        gen_free(g);
        refuse(err, err_size, http_status, 429, "all %u slots are busy and %u requests are waiting (max_queue %u)",
               (unsigned)s->n_slots, (unsigned)queued, (unsigned)s->opts.max_queue);
        return NULL;
    }
    if (s->queue_tail) s->queue_tail->next = g;
    else s->queue_head = g;
    s->queue_tail = g;
    s->n_queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return g;
}

/* ------------------------------------------------------------------------------------------------------------
 * Slots */

static void slot_mirror_reserve(slot *sl, uint32_t n) {
    if (n <= sl->cap_tokens) return;
    uint32_t cap = sl->cap_tokens ? sl->cap_tokens : 256;
    while (cap < n) cap = cap > UINT32_MAX / 2 ? n : cap * 2;
    sl->tokens = sy_xrealloc(sl->tokens, (size_t)cap * sizeof *sl->tokens);
    sl->cap_tokens = cap;
}

static void slot_mirror_append(slot *sl, const int32_t *tokens, uint32_t n) {
    slot_mirror_reserve(sl, sl->n_tokens + n);
    memcpy(sl->tokens + sl->n_tokens, tokens, (size_t)n * sizeof *tokens);
    sl->n_tokens += n;
}

static uint32_t common_prefix(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb) {
    uint32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* The prefix of a prompt a cache may serve: all but the last token, which must be decoded for its logits. */
static uint32_t usable_prefix(const slot *sl, const sy_gen *g) {
    uint32_t n = common_prefix(sl->tokens, sl->n_tokens, g->prompt, g->n_prompt);
    return n >= g->n_prompt ? g->n_prompt - 1 : n;
}

/* Forget a slot's sequence (after an engine error, or when it cannot be truncated). */
static void slot_drop_sequence(sy_scheduler *s, slot *sl) {
    if (sl->seq != NULL) s->lm->engine->seq_free(s->lm->model, sl->seq);
    sl->seq = NULL;
    sl->n_tokens = 0;
}

/* The free slot for a queued generation (lock held, loop thread: the mirrors are the loop's). The one with the
 * longest reusable prefix, the least recently used among equals (so warm caches other prompts may want survive).
 * When a busy slot or a parked sequence holds a longer prefix than any free slot, the least recently used free
 * slot is taken instead: slot_start forks that prefix into it. */
static slot *choose_slot(sy_scheduler *s, const sy_gen *g) {
    slot *best = NULL, *lru = NULL;
    uint32_t best_prefix = 0, donor_prefix = 0;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        uint32_t prefix = sl->seq != NULL ? usable_prefix(sl, g) : 0;
        if (sl->gen != NULL) {
            if (prefix > donor_prefix) donor_prefix = prefix;
            continue;
        }
        if (lru == NULL || sl->last_used < lru->last_used) lru = sl;
        if (best == NULL || prefix > best_prefix || (prefix == best_prefix && sl->last_used < best->last_used)) {
            best = sl;
            best_prefix = prefix;
        }
    }
    uint32_t cap = g->n_prompt - 1;
    uint32_t cached = sy_prefix_cache_longest(s->cache, g->prompt, cap, NULL);
    if (cached > donor_prefix) donor_prefix = cached;
    return donor_prefix > best_prefix ? lru : best;
}

/* ---- the host prefix cache: parked sequences ---- */

static void parked_free(sy_scheduler *s, parked *p) {
    if (p->prev) p->prev->next = p->next;
    else s->parked_list = p->next;
    if (p->next) p->next->prev = p->prev;
    s->parked_tokens -= sy_prefix_entry_length(p->entry);
    s->n_parked--;
    sy_prefix_cache_remove(s->cache, p->entry);
    s->lm->engine->seq_free(s->lm->model, p->seq);
    free(p);
}

static void parked_stats(sy_scheduler *s) {
    pthread_mutex_lock(&s->lock);
    s->stats.parked_sequences = s->n_parked;
    s->stats.parked_tokens = s->parked_tokens;
    pthread_mutex_unlock(&s->lock);
}

/* Before a slot's sequence loses everything past `keep` tokens: move it into the cache when what would be lost
 * is worth keeping and fits the budget; the slot then gets a copy of its first `keep` tokens (keep > 0) or no
 * sequence (keep == 0, the caller makes one). `protect` is not evicted. True when parked. */
static bool park_slot_sequence(sy_scheduler *s, slot *sl, uint32_t keep, const parked *protect) {
    uint32_t n = sl->n_tokens;
    if (s->opts.cache_tokens == 0 || sl->seq == NULL || n < keep + SY_SCHED_PARK_MIN_TOKENS ||
        n > s->opts.cache_tokens)
        return false;
    /* A parked sequence is one more the engine holds besides the slots' own. */
    uint32_t max_sequences = s->lm->info.max_sequences;
    if (max_sequences != 0 && (uint64_t)s->n_slots + s->n_parked + 1 > max_sequences) return false;
    if (sy_prefix_cache_longest(s->cache, sl->tokens, n, NULL) == n) return false; /* held already */
    /* Parked sequences this one extends are no longer needed. */
    for (parked *p = s->parked_list, *next; p != NULL; p = next) {
        next = p->next;
        uint32_t len = sy_prefix_entry_length(p->entry);
        if (p != protect && len <= n && memcmp(sy_prefix_entry_tokens(p->entry), sl->tokens,
                                               (size_t)len * sizeof *sl->tokens) == 0)
            parked_free(s, p);
    }
    /* Least recently used first, until it fits. */
    while (s->parked_tokens + n > s->opts.cache_tokens) {
        parked *lru = NULL;
        for (parked *p = s->parked_list; p != NULL; p = p->next)
            if (p != protect && (lru == NULL || p->last_used < lru->last_used)) lru = p;
        if (lru == NULL) return false;
        parked_free(s, lru);
    }
    const sy_engine_api *e = s->lm->engine;
    sy_seq *rest = NULL;
    if (keep > 0 && (e->seq_fork(s->lm->model, sl->seq, keep, &rest) != SY_OK || rest == NULL)) return false;
    parked *p = sy_xcalloc(1, sizeof *p);
    p->seq = sl->seq;
    p->entry = sy_prefix_cache_insert(s->cache, sl->tokens, n, p);
    p->last_used = sy_now_seconds();
    p->next = s->parked_list;
    if (p->next) p->next->prev = p;
    s->parked_list = p;
    s->parked_tokens += n;
    s->n_parked++;
    sl->seq = rest;
    sl->n_tokens = keep;
    parked_stats(s);
    return true;
}

/* Prepares a slot just given `g`: reuse the longest cached prefix (the slot's own, or forked from another slot's
 * sequence or a parked one when that is longer), create the sampler. Returns 0, or -1 with msg set. */
static int slot_start(sy_scheduler *s, slot *sl, sy_gen *g, char *msg, size_t msg_size) {
    const sy_engine_api *e = s->lm->engine;
    sy_model *model = s->lm->model;
    uint32_t prefix = usable_prefix(sl, g);

    /* Another slot (busy or not) or a parked sequence may hold a longer prefix: copy it rather than prefill. */
    const sy_seq *source = NULL;
    const int32_t *source_tokens = NULL;
    uint32_t source_prefix = prefix;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *other = &s->slots[i];
        if (other == sl || other->seq == NULL) continue;
        uint32_t p = usable_prefix(other, g);
        if (p > source_prefix) {
            source = other->seq;
            source_tokens = other->tokens;
            source_prefix = p;
        }
    }
    sy_prefix_entry *hit = NULL;
    uint32_t cached = sy_prefix_cache_longest(s->cache, g->prompt, g->n_prompt - 1, &hit);
    parked *from_cache = NULL;
    if (cached > source_prefix && hit != NULL) {
        from_cache = sy_prefix_entry_value(hit);
        from_cache->last_used = sy_now_seconds();
        source = from_cache->seq;
        source_tokens = sy_prefix_entry_tokens(hit);
        source_prefix = cached;
    }
    if (source != NULL) {
        /* Ours goes to the cache or away first: an engine with a sequence limit has one per slot. */
        if (!park_slot_sequence(s, sl, 0, from_cache)) slot_drop_sequence(s, sl);
        sl->seq = NULL;
        sl->n_tokens = 0;
        sy_seq *forked = NULL;
        if (e->seq_fork(model, source, source_prefix, &forked) == SY_OK && forked != NULL) {
            sl->seq = forked;
            slot_mirror_append(sl, source_tokens, source_prefix);
            prefix = source_prefix;
        } else {
            sy_log(SY_LOG_DEBUG, "scheduler: seq_fork of %u tokens failed (%s); prefilling instead",
                   (unsigned)source_prefix, e->error_message());
            prefix = 0;
        }
    } else if (prefix < sl->n_tokens) {
        park_slot_sequence(s, sl, prefix, NULL);
    }
    if (sl->seq == NULL) {
        sl->n_tokens = 0;
        prefix = 0;
        if (e->seq_create(model, &sl->seq) != SY_OK || sl->seq == NULL) {
            snprintf(msg, msg_size, "engine could not create a sequence: %s", e->error_message());
            sl->seq = NULL;
            return -1;
        }
    }
    if (prefix < sl->n_tokens) {
        if (e->seq_truncate(model, sl->seq, prefix) != SY_OK) {
            /* A recurrent engine cannot roll back far: start this slot over. */
            sy_log(SY_LOG_DEBUG, "scheduler: seq_truncate to %u failed (%s); starting the slot empty",
                   (unsigned)prefix, e->error_message());
            prefix = 0;
            if (e->seq_truncate(model, sl->seq, 0) != SY_OK) {
                slot_drop_sequence(s, sl);
                if (e->seq_create(model, &sl->seq) != SY_OK || sl->seq == NULL) {
                    snprintf(msg, msg_size, "engine could not create a sequence: %s", e->error_message());
                    sl->seq = NULL;
                    return -1;
                }
            }
        }
        sl->n_tokens = prefix;
    }
    if (sl->logits == NULL) sl->logits = sy_xmalloc((size_t)s->n_vocab * sizeof *sl->logits);
    g->sampler = sy_sampler_create(&g->params.sampling, s->n_vocab);
    g->device_sampled = device_sampling_fits(s, g);
    g->rng = g->params.sampling.seed;
    /* speculative verification knows the basic chain only: typical-p, XTC and logit bias sample without drafts */
    if (!g->device_sampled && s->opts.speculator != NULL && g->params.speculative &&
        !sy_sampler_needs_host(&g->params.sampling)) {
        if (sl->spec == NULL) sl->spec = sy_spec_seq_create(s->opts.speculator, s->n_vocab);
        sy_spec_seq_begin(sl->spec, &g->params.sampling);
    }
    g->usage.cached_tokens = prefix;
    g->t_start = sy_now_seconds();
    sl->prompt_pos = prefix;
    sl->phase = SLOT_PREFILL;
    return 0;
}

/* Ends the slot's generation. reason: a finish reason (DONE) or NULL with message (ERROR). */
static void slot_finish(sy_scheduler *s, slot *sl, const char *reason, const char *message) {
    sy_gen *g = sl->gen;
    if (message == NULL) {
        /* What was held for a possible stop string is plain text after all. */
        sy_text_stream_flush(&g->utf8, held_sink, g);
        sy_buf_clear(&g->out);
        bool stopped = release_text(g, true);
        if (g->out.len > 0) emit_text(g, g->out.data, g->out.len, -1, NULL, NULL, 0);
        sy_buf_clear(&g->out);
        if (stopped) reason = "stop";
    }
    sy_sampler_free(g->sampler);
    g->sampler = NULL;
    sy_spec_seq_end(sl->spec); /* kept with the slot: a draft model's sequence stays warm like the slot's KV */
    sl->phase = SLOT_FREE;
    sl->last_used = sy_now_seconds();

    pthread_mutex_lock(&s->lock);
    sl->gen = NULL;
    s->n_busy--;
    s->stats.requests_done++;
    pthread_mutex_unlock(&s->lock);
    emit_end(g, reason, message);
}

/* ------------------------------------------------------------------------------------------------------------
 * Sampling one token for a slot whose logits row is ready */

static void top_logprobs(const float *logits, uint32_t n_vocab, double log_z, uint32_t k, sy_gen_logprob *top) {
    uint32_t have = 0;
    for (uint32_t v = 0; v < n_vocab; v++) {
        float l = logits[v];
        if (have == k && !(l > logits[top[k - 1].token])) continue;
        uint32_t at = have < k ? have++ : k - 1;
        while (at > 0 && l > logits[top[at - 1].token]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at].token = (int32_t)v;
    }
    for (uint32_t i = 0; i < have; i++) top[i].logprob = (double)logits[top[i].token] - log_z;
}

/* Takes one output token, chosen from `row` (its logits after the sampler's penalties, for logprobs): counts it,
 * checks the end conditions, emits its text. True when the generation goes on, with `token` to decode next. */
static bool slot_take_token(sy_scheduler *s, slot *sl, int32_t token, const float *row) {
    sy_gen *g = sl->gen;
    const sy_loaded_model *lm = s->lm;
    if (g->t_first == 0) g->t_first = sy_now_seconds();

    if (token < 0 || (uint32_t)token >= s->n_vocab) token = 0; /* a sampler bug must not reach the engine */
    if (g->gstate != NULL) {
        /* Chosen from a masked row, so only a resource limit (or a bug) makes the grammar refuse it. */
        double t0 = sy_now_seconds();
        int rc = sy_grammar_state_accept_token(g->gstate, token);
        s->constraint_pending += sy_now_seconds() - t0;
        if (rc < 0) {
            char msg[600];
            snprintf(msg, sizeof msg, "grammar: token %ld refused: %s", (long)token,
                     sy_grammar_state_error(g->gstate)[0] ? sy_grammar_state_error(g->gstate) : "rejected");
            slot_finish(s, sl, NULL, msg);
            return false;
        }
    }
    g->usage.completion_tokens++;
    pthread_mutex_lock(&s->lock);
    s->stats.tokens_generated++;
    if (g->gstate != NULL) {
        s->stats.constrained_tokens++;
        s->stats.constraint_ns += (uint64_t)(s->constraint_pending * 1e9);
        s->constraint_pending = 0;
    }
    pthread_mutex_unlock(&s->lock);

    uint32_t flags = lm->engine->token_flags(lm->model, token);
    if ((flags & SY_TOKEN_END_OF_GENERATION) && !g->params.ignore_eos) {
        slot_finish(s, sl, "stop", NULL);
        return false;
    }

    /* The log-softmax of the row the sampler used (after its penalties). */
    double logprob = 0;
    sy_gen_logprob top[SY_GEN_MAX_TOP_LOGPROBS];
    uint32_t n_top = 0;
    bool want_logprobs = g->params.logprobs || g->params.top_logprobs > 0;
    if (want_logprobs) {
        float max = row[sy_argmax(row, s->n_vocab)];
        double z = 0;
        for (uint32_t v = 0; v < s->n_vocab; v++) z += exp((double)row[v] - max);
        double log_z = max + log(z);
        logprob = (double)row[token] - log_z;
        n_top = g->params.top_logprobs < s->n_vocab ? g->params.top_logprobs : s->n_vocab;
        if (n_top > 0) top_logprobs(row, s->n_vocab, log_z, n_top, top);
    }

    bool stopped = false;
    if (!(flags & SY_TOKEN_CONTROL) || g->params.special_text) {
        long n = sy_loaded_model_token_bytes(lm, token, &s->piece, &s->piece_cap);
        if (n > 0) sy_text_stream_feed(&g->utf8, s->piece, (size_t)n, held_sink, g);
        sy_buf_clear(&g->out);
        stopped = release_text(g, false);
    }
    /* With logprobs every token gets its event (its text may be held back, then empty). */
    if (g->out.len > 0 || want_logprobs)
        emit_text(g, g->out.data, g->out.len, token, want_logprobs ? &logprob : NULL, top, n_top);
    sy_buf_clear(&g->out);
    /* A grammar that can take nothing more is done: only an end-of-generation token could follow. */
    if (stopped || (g->gstate != NULL && sy_grammar_state_is_final(g->gstate))) {
        slot_finish(s, sl, "stop", NULL);
        return false;
    }
    if (g->params.max_tokens != 0 && g->usage.completion_tokens >= g->params.max_tokens) {
        slot_finish(s, sl, "length", NULL);
        return false;
    }
    if (sl->n_tokens >= s->n_ctx) {
        slot_finish(s, sl, "length", NULL);
        return false;
    }
    sl->next_token = token;
    sl->phase = SLOT_DECODE;
    return true;
}

/* Constrained decoding: the tokens the grammar disallows get -INFINITY in `row`, so that the sampler (and the
 * logprobs) see the constrained distribution; with ignore_eos no end-of-generation token either (the output then
 * ends where the grammar is final). */
static int constrain_row(sy_scheduler *s, sy_gen *g, sy_grammar_state *st, float *row, char *msg, size_t msg_size) {
    double t0 = sy_now_seconds();
    int rc = sy_constrain_row(st, g->gmask, row, s->n_vocab, s->eog_tokens, s->n_eog_tokens, g->params.ignore_eos,
                              msg, msg_size);
    s->constraint_pending += sy_now_seconds() - t0;
    return rc;
}

static void slot_sample(sy_scheduler *s, slot *sl) {
    sy_gen *g = sl->gen;
    if (g->gstate != NULL) {
        char msg[600];
        if (constrain_row(s, g, g->gstate, sl->logits, msg, sizeof msg) != 0) {
            slot_finish(s, sl, NULL, msg);
            return;
        }
    }
    int32_t token = sy_sampler_sample(g->sampler, sl->logits, sl->tokens, sl->n_tokens);
    if (token == SY_SAMPLER_NO_TOKEN) {
        sy_log(SY_LOG_WARN, "scheduler: slot %u: %s", (unsigned)sl->index, SY_SAMPLER_NO_TOKEN_MESSAGE);
        slot_finish(s, sl, NULL, SY_SAMPLER_NO_TOKEN_MESSAGE);
        return;
    }
    /* The sampler's last-resort pick (rounding at the end of a draw) could land on a masked token. */
    if (g->gstate != NULL && (token < 0 || (uint32_t)token >= s->n_vocab || !sy_constrain_allows(g->gmask, token)))
        token = sy_argmax(sl->logits, s->n_vocab);
    slot_take_token(s, sl, token, sl->logits);
}

/* ------------------------------------------------------------------------------------------------------------
 * The engine loop */

static void engine_failure(sy_scheduler *s, slot *sl, sy_status st, const char *engine_msg) {
    char msg[600];
    snprintf(msg, sizeof msg, "engine %s failed: %s: %s", s->lm->plugin->entry->name, sy_status_name(st),
             engine_msg);
    sy_log(SY_LOG_WARN, "scheduler: slot %u: %s", (unsigned)sl->index, msg);
    /* The sequence may be in any state now: start it over. */
    slot_drop_sequence(s, sl);
    slot_finish(s, sl, NULL, msg);
}

/* ---- speculative decoding (speculative.h) ---- */

/* Proposals for a decoding slot, within `budget` more tokens of this step. They are written to the mirror's spare
 * room right after next_token, so that the drafter sees the context and the decode its tokens in one piece.
 * Returns how many. */
static uint32_t slot_plan_drafts(sy_scheduler *s, slot *sl, uint32_t budget) {
    const sy_gen *g = sl->gen;
    if (!sy_spec_seq_enabled(sl->spec)) return 0;
    uint32_t limit = budget;
    /* The sequence must hold n_tokens + 1 + k; k proposals yield up to k + 1 tokens of those still allowed. */
    uint32_t room = s->n_ctx > sl->n_tokens + 1 ? s->n_ctx - sl->n_tokens - 1 : 0;
    if (room < limit) limit = room;
    if (g->params.max_tokens != 0) {
        uint32_t left = g->params.max_tokens > g->usage.completion_tokens
                            ? g->params.max_tokens - g->usage.completion_tokens : 0;
        if (left == 0 || left - 1 < limit) limit = left > 0 ? left - 1 : 0;
    }
    uint32_t draft_max = sy_speculator_get_options(s->opts.speculator)->draft_max;
    if (limit > draft_max) limit = draft_max;
    if (limit == 0) return 0;
    slot_mirror_reserve(sl, sl->n_tokens + 1 + limit);
    sl->tokens[sl->n_tokens] = sl->next_token;
    uint32_t k = sy_spec_seq_propose(sl->spec, sl->tokens, sl->n_tokens + 1, limit);
    if (k > 0 && g->gstate != NULL) {
        /* Proposals the grammar rejects could never stand: the draft ends before the first of them. The state
         * already holds next_token (accepted when it was chosen). */
        double t0 = sy_now_seconds();
        sy_grammar_state *probe = sy_grammar_state_clone(g->gstate);
        uint32_t ok = 0;
        while (probe != NULL && ok < k && sy_grammar_state_accept_token(probe, sl->tokens[sl->n_tokens + 1 + ok]) == 0)
            ok++;
        sy_grammar_state_free(probe);
        s->constraint_pending += sy_now_seconds() - t0;
        k = ok;
    }
    return k;
}

/* Verification of a constrained draft: row j is masked with the state after next_token and proposals 0..j-1,
 * just before the acceptance rule reads it, so what is accepted or drawn comes from the constrained
 * distribution exactly as without speculation. */
typedef struct draft_masker {
    sy_scheduler *s;
    slot *sl;
    sy_grammar_state *st; /* a clone walking the proposals */
    uint32_t base;        /* the proposals sit at sl->tokens[base..) */
    bool failed;
    char msg[600];
} draft_masker;

static void mask_draft_row(void *user, uint32_t j, float *row) {
    draft_masker *m = user;
    if (m->failed) return;
    if (m->st == NULL) {
        m->failed = true;
        snprintf(m->msg, sizeof m->msg, "grammar: out of memory");
        return;
    }
    /* Checked when planned, so this only fails on a resource limit. */
    if (j > 0 && sy_grammar_state_accept_token(m->st, m->sl->tokens[m->base + j - 1]) != 0) {
        m->failed = true;
        snprintf(m->msg, sizeof m->msg, "grammar: %s", sy_grammar_state_error(m->st));
        return;
    }
    if (constrain_row(m->s, m->sl->gen, m->st, row, m->msg, sizeof m->msg) != 0) m->failed = true;
}

/* A new sequence holding the mirror's first n tokens, for an engine that could not roll back. 0, or -1 with msg. */
static int slot_rebuild_sequence(sy_scheduler *s, slot *sl, uint32_t n, char *msg, size_t msg_size) {
    const sy_engine_api *e = s->lm->engine;
    if (sl->seq != NULL) e->seq_free(s->lm->model, sl->seq);
    sl->seq = NULL;
    sy_status st = e->seq_create(s->lm->model, &sl->seq);
    if (st != SY_OK || sl->seq == NULL) {
        sl->seq = NULL;
        snprintf(msg, msg_size, "%s", e->error_message());
        return -1;
    }
    for (uint32_t done = 0; done < n;) {
        uint32_t chunk = n - done < s->opts.prefill_chunk ? n - done : s->opts.prefill_chunk;
        sy_decode_item item;
        memset(&item, 0, sizeof item);
        item.struct_size = sizeof item;
        item.seq = sl->seq;
        item.tokens = sl->tokens + done;
        item.n_tokens = chunk;
        sy_decode_batch batch;
        memset(&batch, 0, sizeof batch);
        batch.struct_size = sizeof batch;
        batch.n_items = 1;
        batch.item_size = sizeof item;
        batch.items = &item;
        st = e->decode(s->lm->model, &batch); /* no cancellation: the slot must be whole again */
        if (st != SY_OK) {
            snprintf(msg, msg_size, "%s", e->error_message());
            return -1;
        }
        done += chunk;
    }
    return 0;
}

/* After the decode of next_token and k proposals: the target keeps what it confirms, the rest is rolled back,
 * and the output tokens go out one by one exactly as plain decoding would emit them. */
static void slot_verify_drafts(sy_scheduler *s, slot *sl, uint32_t k) {
    sy_gen *g = sl->gen;
    uint32_t base = sl->n_tokens + 1; /* mirror + next_token: the context the first row follows */
    sy_spec_verdict v;
    draft_masker masker = {s, sl, NULL, base, false, ""};
    if (g->gstate != NULL) {
        masker.st = sy_grammar_state_clone(g->gstate);
        sy_spec_seq_verify_masked(sl->spec, g->sampler, sl->tokens, base, k, mask_draft_row, &masker, &v);
        sy_grammar_state_free(masker.st);
        /* The row the token was drawn from was masked with masker's state; a last-resort pick outside it is
         * replaced as in slot_sample. */
    } else {
        sy_spec_seq_verify(sl->spec, g->sampler, sl->tokens, base, k, &v);
    }
    uint32_t keep = base + v.n_accepted;
    g->usage.drafted_tokens += v.n_drafted;
    g->usage.accepted_tokens += v.n_accepted;
    pthread_mutex_lock(&s->lock);
    s->stats.drafted_tokens += v.n_drafted;
    s->stats.accepted_tokens += v.n_accepted;
    pthread_mutex_unlock(&s->lock);
    if (v.n_accepted < k) {
        sy_status st = s->lm->engine->seq_truncate(s->lm->model, sl->seq, keep);
        if (st != SY_OK) {
            /* The engine cannot roll back so far: no more speculation here (and shorter drafts for later
             * requests); the sequence is rebuilt from the mirror. */
            uint32_t depth = k - v.n_accepted;
            sy_log_level level = sy_spec_seq_rollback_failed(sl->spec, depth) ? SY_LOG_WARN : SY_LOG_DEBUG;
            sy_log(level, "scheduler: slot %u: rolling back %u drafted tokens failed (%s: %s); this request goes on "
                   "without speculation, later ones draft fewer tokens", (unsigned)sl->index, (unsigned)depth,
                   sy_status_name(st), s->lm->engine->error_message());
            char msg[512] = "";
            if (slot_rebuild_sequence(s, sl, keep, msg, sizeof msg) != 0) {
                engine_failure(s, sl, SY_ERR_INTERNAL, msg);
                return;
            }
        }
    }
    if (masker.failed) {
        /* Nothing of this step is emitted; the sequence holds the accepted proposals, which the next request in
         * this slot will not reuse beyond its prompt. */
        sl->n_tokens = keep;
        slot_finish(s, sl, NULL, masker.msg);
        return;
    }
    if (v.next == SY_SAMPLER_NO_TOKEN) {
        sl->n_tokens = keep;
        slot_finish(s, sl, NULL, SY_SAMPLER_NO_TOKEN_MESSAGE);
        return;
    }
    for (uint32_t j = 0; j <= v.n_accepted; j++) {
        int32_t token = j < v.n_accepted ? sl->tokens[base + j] : v.next;
        sl->n_tokens = base + j; /* the sequence as it stands when this token is chosen */
        if (!slot_take_token(s, sl, token, sy_spec_seq_row(sl->spec, j))) {
            sl->n_tokens = keep; /* ended early: the sequence still holds the accepted proposals */
            return;
        }
    }
}

/* The decode timings that let the speculator weigh what a verified token costs. */
static void note_decode_timing(sy_scheduler *s, uint32_t n_items, double seconds) {
    if (s->opts.speculator == NULL) return;
    uint32_t n_tokens = 0;
    bool prefill = false;
    for (uint32_t k = 0; k < n_items; k++) {
        n_tokens += s->items[k].n_tokens;
        if (s->item_slots[k]->phase == SLOT_PREFILL) prefill = true;
    }
    sy_speculator_note_decode(s->opts.speculator, n_tokens, n_items, prefill, seconds);
}

/* Takes queued requests into free slots in FIFO order; hands back those cancelled or timed out while waiting.
 * Lock held. */
static void take_queued(sy_scheduler *s, sy_gen **dropped, slot **started, uint32_t *n_started) {
    double now = sy_now_seconds();
    sy_gen **link = &s->queue_head;
    sy_gen *prev = NULL;
    bool full = false;
    while (*link != NULL) {
        sy_gen *g = *link;
        bool timed_out = s->opts.queue_timeout_s != 0 && now - g->t_submit > (double)s->opts.queue_timeout_s;
        bool drop = atomic_load(&g->cancelled) || timed_out;
        slot *sl = NULL;
        if (!drop && !full) {
            sl = s->n_busy < s->n_slots ? choose_slot(s, g) : NULL;
            if (sl == NULL) full = true; /* FIFO: nobody behind overtakes this one */
        }
        if (!drop && sl == NULL) {
            prev = g;
            link = &g->next;
            continue;
        }
        *link = g->next;
        if (s->queue_tail == g) s->queue_tail = prev;
        s->n_queued--;
        g->next = NULL;
        if (drop) {
            g->next = *dropped;
            *dropped = g;
            continue;
        }
        sl->gen = g;
        s->n_busy++;
        started[(*n_started)++] = sl;
    }
}

/* Builds this step's batch: one token of every decoding slot, then prompt chunks within the token budget. */
static uint32_t build_batch(sy_scheduler *s) {
    uint32_t n_items = 0, budget = s->opts.batch_tokens;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[(s->rotate + i) % s->n_slots];
        sl->step_tokens = sl->step_logits = sl->step_drafts = 0;
        if (sl->phase != SLOT_DECODE || budget == 0) continue;
        sl->step_tokens = 1;
        sl->step_logits = 1;
        budget--;
        if (sl->spec != NULL) {
            sl->step_drafts = slot_plan_drafts(s, sl, budget);
            sl->step_tokens += sl->step_drafts;
            sl->step_logits += sl->step_drafts;
            budget -= sl->step_drafts;
        }
        s->item_slots[n_items++] = sl;
    }
    for (uint32_t i = 0; i < s->n_slots && budget > 0; i++) {
        slot *sl = &s->slots[(s->rotate + i) % s->n_slots];
        if (sl->phase != SLOT_PREFILL) continue;
        uint32_t left = sl->gen->n_prompt - sl->prompt_pos;
        uint32_t chunk = left < s->opts.prefill_chunk ? left : s->opts.prefill_chunk;
        if (chunk > budget) chunk = budget;
        sl->step_tokens = chunk;
        sl->step_logits = chunk == left ? 1 : 0;
        budget -= chunk;
        s->item_slots[n_items++] = sl;
    }
    s->rotate = s->n_slots ? (s->rotate + 1) % s->n_slots : 0;
    for (uint32_t k = 0; k < n_items; k++) {
        slot *sl = s->item_slots[k];
        sy_decode_item *item = &s->items[k];
        memset(item, 0, sizeof *item);
        item->struct_size = sizeof *item;
        item->seq = sl->seq;
        item->tokens = sl->phase == SLOT_DECODE ? &sl->next_token : sl->gen->prompt + sl->prompt_pos;
        item->n_tokens = sl->step_tokens;
        item->n_logits = sl->step_logits;
        item->logits = sl->step_logits ? sl->logits : NULL;
        item->call = s->item_cancel ? &sl->gen->call : NULL;
        if (sl->step_drafts > 0) {
            item->tokens = sl->tokens + sl->n_tokens; /* next_token, then the proposals */
            item->logits = sy_spec_seq_rows(sl->spec);
        }
    }
    return n_items;
}

/* One decode call over items[0..n_items), whose outcomes (engines with SY_CAP_ITEM_CANCEL) land in status. With
 * `sampled`, the engine samples each item's token into s->sample_tokens (sy.engine.sampling/1) instead of
 * returning logits. */
static sy_status run_decode(sy_scheduler *s, sy_decode_item *items, slot *const *slots, uint32_t n_items,
                            sy_status *status, bool sampled, char *msg, size_t msg_size) {
    sy_decode_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.struct_size = sizeof batch;
    batch.n_items = n_items;
    batch.item_size = sizeof(sy_decode_item);
    batch.items = items;
    batch.call = &s->step_call;
    if (s->item_cancel) {
        for (uint32_t k = 0; k < n_items; k++) status[k] = SY_OK;
        batch.item_status = status;
    }
    sy_status st;
    if (sampled) {
        for (uint32_t k = 0; k < n_items; k++) {
            sy_gen *g = slots[k]->gen;
            const sy_sampler_params *p = &g->params.sampling;
            items[k].logits = NULL;
            s->sample_params[k] = (sy_sampling_params){sizeof(sy_sampling_params), p->temperature, p->top_k, p->top_p,
                                                       p->min_p, &g->rng};
        }
        st = s->sampling->decode_sample(s->lm->model, &batch, s->sample_params, s->sample_tokens);
    } else {
        st = s->lm->engine->decode(s->lm->model, &batch);
    }
    if (st != SY_OK) snprintf(msg, msg_size, "%s", s->lm->engine->error_message());
    return st;
}

/* After a successful decode of this slot's part: mirror the tokens, move on. */
static void slot_advance(sy_scheduler *s, slot *sl, const sy_decode_item *item) {
    if (sl->phase == SLOT_DECODE && sl->step_drafts > 0) {
        slot_verify_drafts(s, sl, sl->step_drafts);
        return;
    }
    slot_mirror_append(sl, item->tokens, item->n_tokens);
    if (sl->phase == SLOT_PREFILL) {
        sl->prompt_pos += item->n_tokens;
        pthread_mutex_lock(&s->lock);
        s->stats.tokens_prefilled += item->n_tokens;
        pthread_mutex_unlock(&s->lock);
    }
    if (item->n_logits > 0) slot_sample(s, sl);
}

/* After a successful decode_sample of this slot's part: mirror the tokens, take the engine's token. */
static void slot_advance_sampled(sy_scheduler *s, slot *sl, const sy_decode_item *item, int32_t token) {
    slot_mirror_append(sl, item->tokens, item->n_tokens);
    if (sl->phase == SLOT_PREFILL) {
        sl->prompt_pos += item->n_tokens;
        pthread_mutex_lock(&s->lock);
        s->stats.tokens_prefilled += item->n_tokens;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&s->lock);
    s->stats.device_sampled_tokens++;
    pthread_mutex_unlock(&s->lock);
    slot_take_token(s, sl, token, NULL);
}

static void step_part(sy_scheduler *s, uint32_t first, uint32_t n_items, bool sampled, bool any_cancelled);

/* One step: decode the batch, then sample and emit. Items whose generation the engine samples go in a call of
 * their own (decode_sample takes only items that want one token each), after the rest. */
static void step(sy_scheduler *s) {
    uint32_t n_items = build_batch(s);
    if (n_items == 0) return;
    uint32_t n_plain = n_items;
    if (s->sampling != NULL) {
        /* Stable partition: plain items first, sampled ones (one logits row, no drafts) last. */
        slot *moved_slots[n_items];
        sy_decode_item moved_items[n_items];
        uint32_t n_moved = 0, w = 0;
        for (uint32_t k = 0; k < n_items; k++) {
            slot *sl = s->item_slots[k];
            bool sampled = sl->gen->device_sampled && sl->step_logits == 1 && sl->step_drafts == 0;
            if (sampled) {
                moved_slots[n_moved] = sl;
                moved_items[n_moved++] = s->items[k];
            } else {
                s->item_slots[w] = sl;
                s->items[w++] = s->items[k];
            }
        }
        for (uint32_t k = 0; k < n_moved; k++) {
            s->item_slots[w + k] = moved_slots[k];
            s->items[w + k] = moved_items[k];
        }
        n_plain = w;
    }

    /* Mark the generations as in this decode, so cancelling one interrupts it. */
    bool any_cancelled = false;
    pthread_mutex_lock(&s->lock);
    sy_host_call_init(&s->step_call);
    for (uint32_t k = 0; k < n_items; k++) {
        s->item_slots[k]->gen->in_batch = true;
        if (atomic_load(&s->item_slots[k]->gen->cancelled)) any_cancelled = true;
    }
    if (s->stopping || (any_cancelled && !s->item_cancel)) sy_host_call_cancel(&s->step_call);
    pthread_mutex_unlock(&s->lock);

    if (n_plain > 0) step_part(s, 0, n_plain, false, any_cancelled);
    if (n_plain < n_items) step_part(s, n_plain, n_items - n_plain, true, any_cancelled);
}

/* Decodes items [first, first + n_items) in one call, then samples (or takes the engine's tokens) and emits. */
static void step_part(sy_scheduler *s, uint32_t first, uint32_t n_items, bool sampled, bool any_cancelled) {
    sy_decode_item *items = s->items + first;
    slot **slots = s->item_slots + first;
    sy_status *status = s->item_status + first;
    char msg[512] = "";
    double t_decode = sy_now_seconds();
    sy_status st = run_decode(s, items, slots, n_items, status, sampled, msg, sizeof msg);
    if (st == SY_OK) note_decode_timing(s, n_items, sy_now_seconds() - t_decode);

    pthread_mutex_lock(&s->lock);
    s->stats.decode_calls++;
    if (n_items > s->stats.max_batch_items) s->stats.max_batch_items = n_items;
    /* The KV the running generations hold, for /metrics (KV-cache utilization); the loop thread owns n_tokens. */
    uint64_t kv_tokens = 0;
    for (uint32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].gen != NULL) kv_tokens += s->slots[i].n_tokens;
    s->stats.kv_tokens = kv_tokens;
    for (uint32_t k = 0; k < n_items; k++) slots[k]->gen->in_batch = false; /* before a finish drops the gen */
    bool stopping = s->stopping;
    pthread_mutex_unlock(&s->lock);

    if (st == SY_ERR_CANCELLED) {
        pthread_mutex_lock(&s->lock);
        s->stats.cancelled_steps++;
        pthread_mutex_unlock(&s->lock);
        /* Nothing changed; the cancelled generations end in the loop, the others run again next step. */
        if (!stopping && !any_cancelled && !s->item_cancel) {
            bool reason = false;
            for (uint32_t k = 0; k < n_items; k++)
                if (atomic_load(&slots[k]->gen->cancelled)) reason = true;
            if (!reason && ++s->spurious_cancels >= SY_SCHED_MAX_SPURIOUS_CANCELS) {
                for (uint32_t k = 0; k < n_items; k++) engine_failure(s, slots[k], st, msg);
                s->spurious_cancels = 0;
            }
        }
        return;
    }
    s->spurious_cancels = 0;
    if (st == SY_OK) {
        for (uint32_t k = 0; k < n_items; k++) {
            slot *sl = slots[k];
            sy_status one = s->item_cancel ? status[k] : SY_OK;
            if (one == SY_OK && sampled) slot_advance_sampled(s, sl, &items[k], s->sample_tokens[k]);
            else if (one == SY_OK) slot_advance(s, sl, &items[k]);
            else if (one == SY_ERR_CANCELLED) continue; /* left as it was; the generation ends in the loop */
            else if (one == SY_ERR_CONTEXT_FULL && sl->phase == SLOT_DECODE) slot_finish(s, sl, "length", NULL);
            else engine_failure(s, sl, one, "the engine left this sequence out of the step");
        }
        return;
    }
    /* Out of (KV) memory: the parked sequences of the host prefix cache only save prefill, so they give way to the
     * requests and the step runs again (a failed decode leaves the sequences as they were). */
    if (st == SY_ERR_OUT_OF_MEMORY && s->n_parked > 0) {
        sy_log(SY_LOG_INFO, "scheduler: the engine is out of memory (%s): dropping the %u parked sequences of the "
               "host prefix cache", msg, (unsigned)s->n_parked);
        while (s->parked_list != NULL) parked_free(s, s->parked_list);
        parked_stats(s);
        return;
    }
    /* The batch failed as a whole: find whose part fails by decoding each alone, so one bad request does not
     * take the others down. */
    if (n_items == 1) {
        slot *sl = slots[0];
        if (st == SY_ERR_CONTEXT_FULL && sl->phase == SLOT_DECODE) slot_finish(s, sl, "length", NULL);
        else engine_failure(s, sl, st, msg);
        return;
    }
    for (uint32_t k = 0; k < n_items; k++) {
        slot *sl = slots[k];
        if (atomic_load(&sl->gen->cancelled)) continue; /* ends in the loop */
        char one_msg[512] = "";
        sy_status one = run_decode(s, &items[k], &slots[k], 1, &status[k], sampled, one_msg, sizeof one_msg);
        if (one == SY_OK && s->item_cancel) one = status[k]; /* the item's own outcome */
        if (one == SY_OK && sampled) slot_advance_sampled(s, sl, &items[k], s->sample_tokens[0]);
        else if (one == SY_OK) slot_advance(s, sl, &items[k]);
        else if (one == SY_ERR_CANCELLED) continue;
        else if (one == SY_ERR_CONTEXT_FULL && sl->phase == SLOT_DECODE) slot_finish(s, sl, "length", NULL);
        else engine_failure(s, sl, one, one_msg);
    }
}

/* Snapshot hooks, at the end of the file. */
static void run_tasks(sy_scheduler *s);
static void drop_tasks(sy_scheduler *s);

static void *engine_loop(void *arg) {
    sy_scheduler *s = arg;
    slot **started = sy_xcalloc(s->n_slots, sizeof *started);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->stopping && s->n_busy == 0 && s->queue_head == NULL && s->tasks == NULL)
            pthread_cond_wait(&s->wake, &s->lock);
        if (s->stopping) break;
        sy_gen *dropped = NULL;
        uint32_t n_started = 0;
        take_queued(s, &dropped, started, &n_started);
        pthread_mutex_unlock(&s->lock);

        while (dropped != NULL) {
            sy_gen *g = dropped;
            dropped = g->next;
            if (atomic_load(&g->cancelled)) {
                emit_end(g, "cancelled", NULL);
            } else {
                char msg[128];
                snprintf(msg, sizeof msg, "timed out after %u s waiting for a free slot",
                         (unsigned)s->opts.queue_timeout_s);
                emit_end(g, NULL, msg);
            }
        }
        for (uint32_t i = 0; i < n_started; i++) {
            slot *sl = started[i];
            char msg[600];
            if (slot_start(s, sl, sl->gen, msg, sizeof msg) != 0) {
                slot_finish(s, sl, NULL, msg);
                continue;
            }
            pthread_mutex_lock(&s->lock);
            s->stats.tokens_cached += sl->gen->usage.cached_tokens;
            pthread_mutex_unlock(&s->lock);
        }
        for (uint32_t i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (sl->phase != SLOT_FREE && atomic_load(&sl->gen->cancelled)) slot_finish(s, sl, "cancelled", NULL);
        }
        run_tasks(s);
        step(s);

        pthread_mutex_lock(&s->lock);
    }
    /* Shutting down: everything still here ends as cancelled. */
    drop_tasks(s);
    sy_gen *queued = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    s->n_queued = 0;
    pthread_mutex_unlock(&s->lock);
    while (queued != NULL) {
        sy_gen *g = queued;
        queued = g->next;
        emit_end(g, "cancelled", NULL);
    }
    for (uint32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].phase != SLOT_FREE) slot_finish(s, &s->slots[i], "cancelled", NULL);
    free(started);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * Lifetime and counters */

/* What create made before the loop thread: the locks and the arrays; then the scheduler itself. */
static void scheduler_free_parts(sy_scheduler *s) {
    sy_embed_queue_destroy(s->embed_queue);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->task_done);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->vocab_lock);
    free(s->slots);
    free(s->items);
    free(s->item_status);
    free(s->sample_params);
    free(s->sample_tokens);
    free(s->item_slots);
    free(s);
}

/* The embed queue's way onto the loop (embed_queue.h): a task of the loop that runs its function. */
typedef struct embed_task {
    void (*fn)(void *user);
    void *user;
} embed_task;

static void embed_task_run(sy_scheduler *s, void *user) {
    (void)s;
    embed_task *t = user;
    t->fn(t->user);
}

static int run_embed_task(void *ctx, void (*fn)(void *user), void *user) {
    embed_task t = {fn, user};
    return sy_scheduler_run_task(ctx, embed_task_run, &t);
}

sy_scheduler *sy_scheduler_create(const sy_loaded_model *lm, const sy_scheduler_options *opts) {
    if (lm == NULL || lm->engine == NULL || lm->model == NULL || opts == NULL) return NULL;
    sy_scheduler *s = sy_xcalloc(1, sizeof *s);
    s->lm = lm;
    s->opts = *opts;
    s->n_vocab = lm->info.n_vocab;
    s->n_ctx = lm->info.n_ctx;
    if (s->opts.parallel == 0) s->opts.parallel = 1;
    if (lm->info.max_sequences != 0 && s->opts.parallel > lm->info.max_sequences) {
        sy_log(SY_LOG_WARN, "scheduler: the engine allows %u sequences; using %u slots instead of %u",
               (unsigned)lm->info.max_sequences, (unsigned)lm->info.max_sequences, (unsigned)s->opts.parallel);
        s->opts.parallel = lm->info.max_sequences;
    }
    if (s->opts.prefill_chunk == 0) s->opts.prefill_chunk = SY_SCHED_DEFAULT_PREFILL_CHUNK;
    if (s->opts.batch_tokens == 0) s->opts.batch_tokens = SY_SCHED_DEFAULT_BATCH_TOKENS;
    /* Every decoding slot needs its one token in a step. */
    if (s->opts.batch_tokens < s->opts.parallel) s->opts.batch_tokens = s->opts.parallel;
    /* An engine that takes at most so many tokens a call bounds the step, and with it the slots. */
    uint32_t most = lm->info.max_decode_tokens;
    if (most != 0 && s->opts.batch_tokens > most) s->opts.batch_tokens = most;
    if (most != 0 && s->opts.parallel > most) {
        sy_log(SY_LOG_WARN, "scheduler: the engine takes %u tokens a call; using %u slots instead of %u",
               (unsigned)most, (unsigned)most, (unsigned)s->opts.parallel);
        s->opts.parallel = most;
    }
    if (most != 0 && s->opts.prefill_chunk > most) s->opts.prefill_chunk = most;
    s->n_slots = s->opts.parallel;
    s->slots = sy_xcalloc(s->n_slots, sizeof *s->slots);
    for (uint32_t i = 0; i < s->n_slots; i++) s->slots[i].index = i;
    s->items = sy_xcalloc(s->n_slots, sizeof *s->items);
    s->item_status = sy_xcalloc(s->n_slots, sizeof *s->item_status);
    const sy_engine_sampling_api *sampling = lm->plugin != NULL ? lm->plugin->engine_sampling : NULL;
    if (sampling != NULL && sampling->decode_sample != NULL && !opts->host_sampling) {
        s->sampling = sampling;
        s->sample_params = sy_xcalloc(s->n_slots, sizeof *s->sample_params);
        s->sample_tokens = sy_xcalloc(s->n_slots, sizeof *s->sample_tokens);
    }
    s->item_cancel = (lm->info.capabilities & SY_CAP_ITEM_CANCEL) != 0;
    if (lm->plugin != NULL && lm->plugin->engine_embed != NULL &&
        (lm->info.capabilities & (SY_CAP_EMBED | SY_CAP_RERANK)) != 0)
        s->embed_queue = sy_embed_queue_create(run_embed_task, s, lm);
    s->cache = sy_prefix_cache_create();
    s->item_slots = sy_xcalloc(s->n_slots, sizeof *s->item_slots);
    sy_host_call_init(&s->step_call);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->vocab_lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_cond_init(&s->wake, &attr);
    pthread_cond_init(&s->task_done, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&s->thread, NULL, engine_loop, s) != 0) {
        sy_log(SY_LOG_ERROR, "scheduler: cannot start the engine loop thread");
        sy_prefix_cache_free(s->cache);
        scheduler_free_parts(s);
        return NULL;
    }
    return s;
}

void sy_scheduler_destroy(sy_scheduler *s) {
    if (s == NULL) return;
    if (sy_scheduler_on_loop_thread(s)) {
        /* From a callback: the loop would be freed under itself. A caller's bug, never to be survived silently. */
        sy_log(SY_LOG_ERROR, "scheduler: destroy called from its own engine loop (an event callback)");
        abort();
    }
    sy_scheduler_stop(s);
    while (s->parked_list != NULL) parked_free(s, s->parked_list);
    sy_prefix_cache_free(s->cache);
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot_drop_sequence(s, &s->slots[i]);
        sy_spec_seq_free(s->slots[i].spec);
        free(s->slots[i].tokens);
        free(s->slots[i].logits);
    }
    sy_grammar_vocab_free(s->gvocab);
    free(s->eog_tokens);
    free(s->piece);
    scheduler_free_parts(s);
}

void sy_scheduler_get_stats(sy_scheduler *s, sy_scheduler_stats *out) {
    memset(out, 0, sizeof *out);
    if (s == NULL) return;
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    out->slots_busy = s->n_busy;
    out->queue_depth = s->n_queued;
    if (s->n_busy == 0) out->kv_tokens = 0;
    out->kv_capacity_tokens = (uint64_t)s->n_slots * s->n_ctx;
    pthread_mutex_unlock(&s->lock);
}

bool sy_scheduler_on_loop_thread(const sy_scheduler *s) {
    return s != NULL && pthread_equal(pthread_self(), s->thread);
}

bool sy_scheduler_full(sy_scheduler *s) {
    if (s == NULL) return false;
    pthread_mutex_lock(&s->lock);
    bool full = (uint64_t)s->n_busy + s->n_queued >= (uint64_t)s->n_slots + s->opts.max_queue;
    pthread_mutex_unlock(&s->lock);
    return full;
}

bool sy_scheduler_idle(sy_scheduler *s) {
    if (s == NULL) return true;
    pthread_mutex_lock(&s->lock);
    bool idle = s->n_busy == 0 && s->n_queued == 0;
    pthread_mutex_unlock(&s->lock);
    return idle;
}

/* ------------------------------------------------------------------------------------------------------------
 * Snapshot hooks (host/snapshot_store.c, host/api_slots.c): tasks on the loop thread, stopping without freeing,
 * reading and replacing the sequences of slots and of the host prefix cache. */

typedef struct sched_task {
    void (*fn)(sy_scheduler *s, void *user);
    void *user;
    bool finished, ran;
    struct sched_task *next;
} sched_task;

/* Loop thread, no lock held: runs the tasks waiting now, in order. */
static void run_tasks(sy_scheduler *s) {
    pthread_mutex_lock(&s->lock);
    sched_task *t = s->tasks;
    s->tasks = NULL;
    pthread_mutex_unlock(&s->lock);
    while (t != NULL) {
        sched_task *next = t->next; /* t lives on its caller's stack until `finished` */
        t->fn(s, t->user);
        pthread_mutex_lock(&s->lock);
        t->ran = t->finished = true;
        pthread_cond_broadcast(&s->task_done);
        pthread_mutex_unlock(&s->lock);
        t = next;
    }
}

/* Lock held, the loop ending: tasks still waiting are answered "not run". */
static void drop_tasks(sy_scheduler *s) {
    for (sched_task *t = s->tasks, *next; t != NULL; t = next) {
        next = t->next;
        t->finished = true;
    }
    s->tasks = NULL;
    pthread_cond_broadcast(&s->task_done);
}

int sy_scheduler_run_task(sy_scheduler *s, void (*fn)(sy_scheduler *s, void *user), void *user) {
    if (s == NULL || fn == NULL || sy_scheduler_on_loop_thread(s)) return -1;
    sched_task t = {fn, user, false, false, NULL};
    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    sched_task **link = &s->tasks;
    while (*link != NULL) link = &(*link)->next;
    *link = &t;
    pthread_cond_signal(&s->wake);
    while (!t.finished) pthread_cond_wait(&s->task_done, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return t.ran ? 0 : -1;
}

void sy_scheduler_stop(sy_scheduler *s) {
    if (s == NULL || s->joined) return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    sy_host_call_cancel(&s->step_call);
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    s->joined = true;
}

sy_embed_queue *sy_scheduler_embed_queue(sy_scheduler *s) { return s != NULL ? s->embed_queue : NULL; }

uint32_t sy_scheduler_slot_count(const sy_scheduler *s) { return s != NULL ? s->n_slots : 0; }

bool sy_scheduler_get_slot(sy_scheduler *s, uint32_t index, sy_sched_sequence *out) {
    if (s == NULL || out == NULL || index >= s->n_slots) return false;
    slot *sl = &s->slots[index];
    memset(out, 0, sizeof *out);
    out->slot = (int32_t)index;
    pthread_mutex_lock(&s->lock);
    out->busy = sl->gen != NULL;
    pthread_mutex_unlock(&s->lock);
    out->seq = sl->seq;
    out->tokens = sl->seq != NULL ? sl->tokens : NULL;
    out->n_tokens = sl->seq != NULL ? sl->n_tokens : 0;
    out->last_used = sl->last_used;
    return true;
}

size_t sy_scheduler_get_parked(sy_scheduler *s, sy_sched_sequence *out, size_t cap) {
    if (s == NULL) return 0;
    size_t n = 0;
    for (parked *p = s->parked_list; p != NULL; p = p->next, n++) {
        if (out == NULL || n >= cap) continue;
        memset(&out[n], 0, sizeof out[n]);
        out[n].slot = -1;
        out[n].seq = p->seq;
        out[n].tokens = sy_prefix_entry_tokens(p->entry);
        out[n].n_tokens = sy_prefix_entry_length(p->entry);
        out[n].last_used = p->last_used;
    }
    return n;
}

/* Into the host prefix cache, within its budget (least recently used parked sequences go first). */
static int adopt_parked(sy_scheduler *s, sy_seq *seq, const int32_t *tokens, uint32_t n) {
    if (s->opts.cache_tokens == 0 || n > s->opts.cache_tokens) return -1;
    uint32_t max_sequences = s->lm->info.max_sequences;
    if (max_sequences != 0 && (uint64_t)s->n_slots + s->n_parked + 1 > max_sequences) return -1;
    if (sy_prefix_cache_longest(s->cache, tokens, n, NULL) == n) return -1; /* held already */
    while (s->parked_tokens + n > s->opts.cache_tokens) {
        parked *lru = NULL;
        for (parked *p = s->parked_list; p != NULL; p = p->next)
            if (lru == NULL || p->last_used < lru->last_used) lru = p;
        if (lru == NULL) return -1;
        parked_free(s, lru);
    }
    parked *p = sy_xcalloc(1, sizeof *p);
    p->seq = seq;
    p->entry = sy_prefix_cache_insert(s->cache, tokens, n, p);
    p->last_used = sy_now_seconds();
    p->next = s->parked_list;
    if (p->next) p->next->prev = p;
    s->parked_list = p;
    s->parked_tokens += n;
    s->n_parked++;
    parked_stats(s);
    return 0;
}

int sy_scheduler_adopt_sequence(sy_scheduler *s, int32_t index, sy_seq *seq, const int32_t *tokens,
                                uint32_t n_tokens) {
    if (s == NULL || seq == NULL || tokens == NULL || n_tokens == 0 || n_tokens > s->n_ctx) return -1;
    for (uint32_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->n_vocab) return -1;
    if (index < 0) return adopt_parked(s, seq, tokens, n_tokens);
    if ((uint32_t)index >= s->n_slots) return -1;
    slot *sl = &s->slots[index];
    pthread_mutex_lock(&s->lock);
    bool busy = sl->gen != NULL;
    pthread_mutex_unlock(&s->lock);
    if (busy) return -1;
    slot_drop_sequence(s, sl);
    sl->seq = seq;
    sl->n_tokens = 0;
    slot_mirror_append(sl, tokens, n_tokens);
    sl->last_used = sy_now_seconds();
    return 0;
}

long sy_scheduler_erase_slot(sy_scheduler *s, uint32_t index) {
    if (s == NULL || index >= s->n_slots) return -1;
    slot *sl = &s->slots[index];
    pthread_mutex_lock(&s->lock);
    bool busy = sl->gen != NULL;
    pthread_mutex_unlock(&s->lock);
    if (busy) return -1;
    long n = sl->seq != NULL ? (long)sl->n_tokens : 0;
    slot_drop_sequence(s, sl);
    return n;
}
