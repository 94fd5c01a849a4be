/* The OpenAI-compatible API: /v1/chat/completions, /v1/completions (SSE streaming), /v1/models. */
#include "api/chat_prompt.h"
#include "api/openai.h"
#include "api/chat_tokens.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "api/chat_output.h"
#include "api/chat_tools.h"
#include "api/constraint.h"
#include "api/context.h"
#include "api/fim.h"
#include "api/generation.h"
#include "api/messages.h"
#include "api/model_params.h"
#include "api/sampling_fields.h"
#include "base/util.h"

/* One choice of a stream: its output parsed on its own (content, reasoning, tool calls). */
typedef struct stream_choice {
    sy_api_chat_output out; /* chat */
    size_t text_offset;     /* completions logprobs: bytes of text so far */
    bool sent_first;        /* the opening chunk went out */
} stream_choice;

/* What a request asked for beyond the sampling parameters, and the state of its stream. */
typedef struct openai_request {
    bool chat;
    bool stream;
    bool include_usage;
    bool logprobs;
    uint32_t top_logprobs;
    bool echo;            /* completions: the prompt comes back before the completion */
    char *echo_text;      /* the prompt text for echo (malloc'd) */
    char id[64];
    long long created;
    char model[SY_CONFIG_MAX_NAME_LEN + 1]; /* as the client named it */
    char fingerprint[40];
    size_t text_offset;   /* completions logprobs: bytes of text so far */
    uint32_t n_choices;   /* n: independent samples of one prompt */
    sy_api_chat tools;    /* chat: tools, tool_choice, reasoning (api/chat_tools.h) */
    sy_api_chat_output out; /* chat: the output as content, reasoning_content and tool_calls */
    uint64_t out_seed;      /* chat: what tool-call ids are drawn from (per choice: xor its index) */
    stream_choice *sc;      /* stream: n_choices of them */
    sy_gen_usage stream_usage; /* stream: summed over the choices that ended, as respond_choices sums them */
} openai_request;

static void openai_request_free(void *p) {
    openai_request *q = p;
    if (q == NULL) return;
    free(q->echo_text);
    sy_api_chat_free(&q->tools);
    sy_api_chat_output_free(&q->out);
    for (uint32_t i = 0; q->sc && i < q->n_choices; i++) sy_api_chat_output_free(&q->sc[i].out);
    free(q->sc);
    free(q);
}

/* The stream's per-choice state; choice i draws its tool-call ids from out_seed ^ i, as a collected choice does. */
static void stream_choices_init(openai_request *q) {
    q->sc = sy_xcalloc(q->n_choices, sizeof *q->sc);
    for (uint32_t i = 0; i < q->n_choices; i++) sy_api_chat_output_init(&q->sc[i].out, &q->tools.parse, q->out_seed ^ i);
}

/* ------------------------------------------------------------------------------------------------------------
 * Parameters */

#define SY_OPENAI_MAX_CHOICES 16

/* Refuse, by name, the features this server does not implement, rather than silently ignoring them. */
static int refuse_unsupported(const cJSON *body, bool chat, sy_api_error *e) {
    (void)chat; /* chat tools and functions are api/chat_tools.c's */
    /* Fields that would change the output and are not implemented. (user, store, metadata, service_tier and
     * prediction change nothing here: they are accepted and ignored.) */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "audio");
    if (v != NULL && !cJSON_IsNull(v))
        return sy_api_fail(e, 400, "unsupported_parameter", "audio", "audio output is not supported");
    v = cJSON_GetObjectItemCaseSensitive(body, "modalities");
    if (cJSON_IsArray(v)) {
        const cJSON *m;
        cJSON_ArrayForEach(m, v) {
            if (!cJSON_IsString(m) || strcmp(m->valuestring, "text") != 0)
                return sy_api_fail(e, 400, "unsupported_value", "modalities", "modalities: only \"text\" is supported");
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(body, "web_search_options");
    if (v != NULL && !cJSON_IsNull(v))
        return sy_api_fail(e, 400, "unsupported_parameter", "web_search_options", "web search is not supported");
    int64_t one = 1;
    bool present;
    if (sy_json_get_integer(body, NULL, "best_of", 1, 1, &one, &present, e) != 0)
        return sy_api_fail(e, 400, "unsupported_value", "best_of", "best_of: only 1 is supported");
    return 0;
}

static int parse_params(const cJSON *body, openai_request *q, sy_gen_params *p, sy_api_error *e) {
    *p = sy_gen_params_defaults();
    bool present;
    if (refuse_unsupported(body, q->chat, e) != 0) return -1;
    if (sy_json_get_bool(body, NULL, "stream", &q->stream, NULL, e) != 0) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
    if (so != NULL && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return sy_api_fail(e, 400, "invalid_type", "stream_options", "stream_options must be an object");
        if (sy_json_get_bool(so, "stream_options.", "include_usage", &q->include_usage, NULL, e) != 0) return -1;
    }
    int64_t n = 1;
    if (sy_json_get_integer(body, NULL, "n", 1, SY_OPENAI_MAX_CHOICES, &n, NULL, e) != 0) return -1;
    if (n > 1 && q->echo)
        return sy_api_fail(e, 400, "unsupported_value", "n", "n > 1 is not supported with echo");
    q->n_choices = (uint32_t)n;

    int64_t max_tokens = 0;
    bool have_max = false;
    if (sy_json_get_integer(body, NULL, "max_tokens", 1, INT32_MAX, &max_tokens, &have_max, e) != 0) return -1;
    int64_t max_completion = 0;
    if (sy_json_get_integer(body, NULL, "max_completion_tokens", 1, INT32_MAX, &max_completion, &present, e) != 0)
        return -1;
    if (present) max_tokens = max_completion, have_max = true;
    p->max_tokens = have_max ? (uint32_t)max_tokens : 0;

    double d;
    if (sy_json_get_number(body, NULL, "temperature", 0, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.temperature = (float)d;
    if (sy_json_get_number(body, NULL, "top_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.top_p = (float)d;
    int64_t k;
    if (sy_json_get_integer(body, NULL, "top_k", 0, 1 << 20, &k, &present, e) != 0) return -1;
    if (present) p->sampling.top_k = (uint32_t)k;
    if (sy_json_get_number(body, NULL, "min_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.min_p = (float)d;
    if (sy_json_get_number(body, NULL, "presence_penalty", -2, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.presence_penalty = (float)d;
    if (sy_json_get_number(body, NULL, "frequency_penalty", -2, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.frequency_penalty = (float)d;
    if (sy_json_get_number(body, NULL, "repeat_penalty", 0.01, 100, &d, &present, e) != 0) return -1;
    if (present) p->sampling.repeat_penalty = (float)d;
    uint64_t seed = 0;
    if (sy_json_get_seed(body, NULL, "seed", &seed, &present, e) != 0) return -1;
    p->sampling.seed = present ? seed : sy_api_random_seed();
    if (sy_json_get_stop(body, NULL, "stop", p, e) != 0) return -1;
    if (sy_json_get_bool(body, NULL, "speculative", &p->speculative, NULL, e) != 0) return -1;
    if (sy_api_sampling_fields(body, NULL, true, p, e) != 0) return -1;

    if (q->chat) {
        bool lp = false;
        if (sy_json_get_bool(body, NULL, "logprobs", &lp, NULL, e) != 0) return -1;
        int64_t top = 0;
        if (sy_json_get_integer(body, NULL, "top_logprobs", 0, SY_GEN_MAX_TOP_LOGPROBS, &top, &present, e) != 0)
            return -1;
        if (present && top > 0 && !lp)
            return sy_api_fail(e, 400, "invalid_value", "top_logprobs", "top_logprobs needs logprobs set to true");
        q->logprobs = lp;
        q->top_logprobs = (uint32_t)top;
    } else {
        int64_t lp = 0;
        if (sy_json_get_integer(body, NULL, "logprobs", 0, SY_GEN_MAX_TOP_LOGPROBS, &lp, &present, e) != 0) return -1;
        q->logprobs = present;
        q->top_logprobs = (uint32_t)lp;
        if (sy_json_get_bool(body, NULL, "echo", &q->echo, NULL, e) != 0) return -1;
    }
    p->logprobs = q->logprobs;
    p->top_logprobs = q->top_logprobs;
    return 0;
}

/* The completions prompt: a string, one string in an array, token ids, or one array of token ids. Sets either
 * *text or *ids (malloc'd). */
static int parse_completion_prompt(const cJSON *body, const char **text, int32_t **ids, size_t *n_ids,
                                   sy_api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    *text = NULL;
    *ids = NULL;
    *n_ids = 0;
    if (v == NULL || cJSON_IsNull(v)) return sy_api_fail(e, 400, "missing_prompt", "prompt", "prompt is required");
    if (cJSON_IsString(v)) {
        *text = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return sy_api_fail(e, 400, "invalid_type", "prompt", "prompt must be a string or an array of token ids");
    int count = cJSON_GetArraySize(v);
    const cJSON *first = cJSON_GetArrayItem(v, 0);
    if (count == 1 && cJSON_IsString(first)) {
        *text = first->valuestring;
        return 0;
    }
    if (count == 1 && cJSON_IsArray(first)) {
        v = first;
        count = cJSON_GetArraySize(v);
    } else if (count > 1 && (cJSON_IsString(first) || cJSON_IsArray(first))) {
        return sy_api_fail(e, 400, "unsupported_value", "prompt", "prompt: only one prompt per request is supported");
    }
    if (count == 0) return sy_api_fail(e, 400, "invalid_value", "prompt", "prompt is empty");
    int32_t *out = sy_xmalloc((size_t)count * sizeof *out);
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        double d = cJSON_IsNumber(item) ? item->valuedouble : -1;
        if (!(d >= 0 && d <= INT32_MAX && d == floor(d))) {
            free(out);
            return sy_api_fail(e, 400, "invalid_value", "prompt", "prompt[%zu] is not a token id", i);
        }
        out[i++] = (int32_t)d;
    }
    *ids = out;
    *n_ids = i;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Response pieces */

static cJSON *usage_json(const sy_gen_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", (double)u->prompt_tokens + (double)u->completion_tokens);
    cJSON *details = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(details, "cached_tokens", u->cached_tokens);
    /* Speculative decoding, in OpenAI's names for predicted tokens that were and were not used. */
    cJSON *completion = cJSON_AddObjectToObject(o, "completion_tokens_details");
    cJSON_AddNumberToObject(completion, "accepted_prediction_tokens", u->accepted_tokens);
    cJSON_AddNumberToObject(completion, "rejected_prediction_tokens", (double)u->drafted_tokens - u->accepted_tokens);
    return o;
}

static cJSON *bytes_json(const sy_buf *raw) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < raw->len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)raw->data[i]));
    return a;
}

/* log(0) is -inf, which JSON cannot hold: report the most negative finite value instead. */
static double finite_logprob(double lp) { return isfinite(lp) ? lp : -9999.0; }

/* Chat: one entry of logprobs.content. */
static cJSON *chat_logprob_entry(const sy_loaded_model *lm, const sy_api_event *ev) {
    cJSON *o = cJSON_CreateObject();
    sy_buf text, raw;
    sy_buf_init(&text);
    sy_buf_init(&raw);
    sy_api_token_text(lm, ev->token, &text, &raw);
    cJSON_AddStringToObject(o, "token", text.data ? text.data : "");
    cJSON_AddNumberToObject(o, "logprob", finite_logprob(ev->logprob));
    cJSON_AddItemToObject(o, "bytes", bytes_json(&raw));
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (uint32_t i = 0; i < ev->n_top; i++) {
        sy_buf_free(&text);
        sy_buf_free(&raw);
        sy_api_token_text(lm, ev->top[i].token, &text, &raw);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "token", text.data ? text.data : "");
        cJSON_AddNumberToObject(t, "logprob", finite_logprob(ev->top[i].logprob));
        cJSON_AddItemToObject(t, "bytes", bytes_json(&raw));
        cJSON_AddItemToArray(top, t);
    }
    sy_buf_free(&text);
    sy_buf_free(&raw);
    return o;
}

/* Completions: append one token to the parallel arrays of a logprobs object. */
static void completion_logprob_add(cJSON *lp, const sy_loaded_model *lm, const sy_api_event *ev, size_t offset) {
    sy_buf text;
    sy_buf_init(&text);
    sy_api_token_text(lm, ev->token, &text, NULL);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "tokens"),
                         cJSON_CreateString(text.data ? text.data : ""));
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"),
                         cJSON_CreateNumber(finite_logprob(ev->logprob)));
    cJSON *top = cJSON_CreateObject();
    for (uint32_t i = 0; i < ev->n_top; i++) {
        sy_buf_free(&text);
        sy_api_token_text(lm, ev->top[i].token, &text, NULL);
        const char *key = text.data ? text.data : "";
        if (cJSON_GetObjectItemCaseSensitive(top, key) == NULL)
            cJSON_AddNumberToObject(top, key, finite_logprob(ev->top[i].logprob));
    }
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), top);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "text_offset"), cJSON_CreateNumber((double)offset));
    sy_buf_free(&text);
}

static cJSON *completion_logprobs_new(void) {
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddArrayToObject(lp, "tokens");
    cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON_AddArrayToObject(lp, "text_offset");
    return lp;
}

static cJSON *envelope(const openai_request *q, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", q->id);
    cJSON_AddStringToObject(o, "object",
                            q->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)q->created);
    cJSON_AddStringToObject(o, "model", q->model);
    cJSON_AddStringToObject(o, "system_fingerprint", q->fingerprint);
    return o;
}

static const char *finish_reason(const char *r) { return strcmp(r, "length") == 0 ? "length" : "stop"; }

/* ------------------------------------------------------------------------------------------------------------
 * Streaming (SSE) */

static void sse_json(sy_buf *out, cJSON *json) {
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (text == NULL) return;
    sy_buf_puts(out, "data: ");
    sy_buf_puts(out, text);
    sy_buf_puts(out, "\n\n");
    cJSON_free(text);
}

/* A chunk with one choice (index); delta is the chat delta object, text the completion text. */
static void sse_choice(const openai_request *q, uint32_t index, sy_buf *out, cJSON *delta, const char *text,
                       cJSON *logprobs, const char *finish) {
    cJSON *o = envelope(q, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (q->chat) cJSON_AddItemToObject(c, "delta", delta ? delta : cJSON_CreateObject());
    else cJSON_AddStringToObject(c, "text", text ? text : "");
    if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (q->include_usage) cJSON_AddNullToObject(o, "usage");
    sse_json(out, o);
}

static void sse_first(openai_request *q, uint32_t index, sy_buf *out) {
    stream_choice *c = &q->sc[index];
    if (c->sent_first) return;
    c->sent_first = true;
    if (q->chat) {
        cJSON *delta = cJSON_CreateObject();
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        sse_choice(q, index, out, delta, NULL, NULL, NULL);
    } else if (q->echo && q->echo_text != NULL) {
        sse_choice(q, index, out, NULL, q->echo_text, NULL, NULL);
        c->text_offset += strlen(q->echo_text);
    }
}

/* The usage of the choices so far: the prompt once (choice 0's), completions summed, as OpenAI counts n. */
static void stream_usage_add(openai_request *q, uint32_t index, const sy_gen_usage *u) {
    sy_gen_usage *t = &q->stream_usage;
    if (index == 0) t->prompt_tokens = u->prompt_tokens;
    t->completion_tokens += u->completion_tokens;
    if (u->cached_tokens > t->cached_tokens) t->cached_tokens = u->cached_tokens;
    t->drafted_tokens += u->drafted_tokens;
    t->accepted_tokens += u->accepted_tokens;
}

/* One event of choice index. True when the stream is over (an error, or the server stopping). */
static bool sse_choice_event(openai_request *q, sy_api_gen *g, uint32_t index, const sy_api_event *ev, sy_buf *out) {
    stream_choice *sc = &q->sc[index];
    sse_first(q, index, out);
    if (ev->type == SY_GEN_EVENT_TEXT) {
        bool with_lp = q->logprobs && ev->token >= 0;
        if (ev->text_len == 0 && !with_lp) return false;
        cJSON *lp = NULL;
        if (with_lp) {
            if (q->chat) {
                lp = cJSON_CreateObject();
                cJSON *content = cJSON_AddArrayToObject(lp, "content");
                cJSON_AddItemToArray(content, chat_logprob_entry(sy_api_gen_model(g), ev));
            } else {
                lp = completion_logprobs_new();
                completion_logprob_add(lp, sy_api_gen_model(g), ev, sc->text_offset);
            }
        }
        if (q->chat) {
            sy_api_chat_output_feed(&sc->out, ev->text, ev->text_len);
            cJSON *delta = sy_api_chat_output_openai_delta(&sc->out);
            if (delta != NULL || lp != NULL) sse_choice(q, index, out, delta, NULL, lp, NULL);
        } else {
            sse_choice(q, index, out, NULL, ev->text, lp, NULL);
        }
        sc->text_offset += ev->text_len;
        return false;
    }
    if (ev->type == SY_GEN_EVENT_ERROR ||
        (strcmp(ev->finish_reason, "cancelled") == 0 && sy_api_gen_server_stopping(g))) {
        const char *msg = ev->type == SY_GEN_EVENT_ERROR ? ev->message : "the server is shutting down";
        char safe[1024];
        sy_utf8_sanitize(safe, sizeof safe, msg, strlen(msg));
        cJSON *o = cJSON_CreateObject();
        cJSON *err = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(err, "message", safe);
        cJSON_AddStringToObject(err, "type", "server_error");
        cJSON_AddNullToObject(err, "param");
        cJSON_AddNullToObject(err, "code");
        sse_json(out, o);
        sy_buf_puts(out, "data: [DONE]\n\n");
        return true;
    }
    const char *reason = finish_reason(ev->finish_reason);
    if (q->chat) {
        sy_api_chat_output_finish(&sc->out);
        cJSON *delta = sy_api_chat_output_openai_delta(&sc->out);
        if (delta != NULL) sse_choice(q, index, out, delta, NULL, NULL, NULL);
        if (sy_api_chat_output_has_calls(&sc->out) && strcmp(reason, "stop") == 0) reason = "tool_calls";
    }
    sse_choice(q, index, out, NULL, NULL, NULL, reason);
    stream_usage_add(q, index, &ev->usage);
    return false;
}

/* After the last choice's end: the usage (stream_options.include_usage), then [DONE]. */
static void sse_done(void *state, sy_buf *out) {
    openai_request *q = state;
    if (q->include_usage) {
        cJSON *o = envelope(q, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(&q->stream_usage));
        sse_json(out, o);
    }
    sy_buf_puts(out, "data: [DONE]\n\n");
}

static void sse_format(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out) {
    openai_request *q = state;
    if (sse_choice_event(q, g, 0, ev, out)) return;
    if (ev->type != SY_GEN_EVENT_TEXT) sse_done(q, out);
}

static bool sse_group_format(void *state, sy_api_gen *g, uint32_t index, const sy_api_event *ev, sy_buf *out) {
    return sse_choice_event(state, g, index, ev, out);
}

static const sy_api_group_stream_ops sse_group_ops = {sse_group_format, sse_done, openai_request_free};
static const sy_api_stream_ops sse_ops = {sse_format, openai_request_free};

/* ------------------------------------------------------------------------------------------------------------
 * Non-streaming: collect the events, answer once. */

static void respond_collected(sy_http_request *r, openai_request *q, sy_api_gen *g) {
    sy_buf text;
    sy_buf_init(&text);
    if (!q->chat && q->echo && q->echo_text) {
        sy_buf_puts(&text, q->echo_text);
        q->text_offset = text.len;
    }
    cJSON *lp = NULL;
    if (q->logprobs) {
        if (q->chat) {
            lp = cJSON_CreateObject();
            cJSON_AddArrayToObject(lp, "content");
        } else {
            lp = completion_logprobs_new();
        }
    }
    sy_api_event *ev;
    const sy_loaded_model *lm = sy_api_gen_model(g);
    while ((ev = sy_api_gen_next(g)) != NULL) {
        if (ev->type == SY_GEN_EVENT_TEXT) {
            if (lp && ev->token >= 0) {
                if (q->chat)
                    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "content"), chat_logprob_entry(lm, ev));
                else completion_logprob_add(lp, lm, ev, text.len);
            }
            sy_buf_append(&text, ev->text, ev->text_len);
            sy_api_event_free(ev);
            continue;
        }
        int status;
        char msg[1024];
        if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg)) {
            sy_http_respond_error(r, status, status == 500 ? "generation_failed" : "server_stopping", NULL, "%s", msg);
        } else {
            cJSON *o = envelope(q, false);
            cJSON *choices = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", 0);
            const char *reason = finish_reason(ev->finish_reason);
            if (q->chat) {
                cJSON *m = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                sy_api_chat_output_feed(&q->out, text.data ? text.data : "", text.len);
                sy_api_chat_output_finish(&q->out);
                sy_api_chat_output_openai_message(&q->out, m);
                cJSON_AddNullToObject(m, "refusal");
                if (sy_api_chat_output_has_calls(&q->out) && strcmp(reason, "stop") == 0) reason = "tool_calls";
            } else {
                cJSON_AddStringToObject(c, "text", text.data ? text.data : "");
            }
            if (lp) cJSON_AddItemToObject(c, "logprobs", lp), lp = NULL;
            else cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddStringToObject(c, "finish_reason", reason);
            cJSON_AddItemToArray(choices, c);
            cJSON_AddItemToObject(o, "usage", usage_json(&ev->usage));
            sy_http_respond_json(r, 200, o);
        }
        sy_api_event_free(ev);
        break;
    }
    if (ev == NULL) sy_http_respond_error(r, 499, "client_gone", NULL, "the client went away");
    cJSON_Delete(lp);
    sy_buf_free(&text);
}

/* ------------------------------------------------------------------------------------------------------------
 * n > 1: independent samples of one prompt. The first choice is submitted alone and the others once its first
 * event came (its prompt is then in its slot), so they fork its KV instead of prefilling the prompt again. Choice
 * i samples with a seed derived from the request's (choice 0 keeps it, so n = 1 and the first of n agree). */

static uint64_t choice_seed(uint64_t seed, uint32_t i) {
    if (i == 0) return seed;
    uint64_t z = seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* One choice collected: its text (and logprobs) into a choice object; NULL with *status/msg on failure. */
static cJSON *collect_choice(openai_request *q, sy_api_gen *g, sy_api_event *first, uint32_t index,
                             sy_gen_usage *usage, int *status, char *msg, size_t msg_size) {
    sy_buf text;
    sy_buf_init(&text);
    cJSON *lp = NULL;
    if (q->logprobs) {
        if (q->chat) {
            lp = cJSON_CreateObject();
            cJSON_AddArrayToObject(lp, "content");
        } else {
            lp = completion_logprobs_new();
        }
    }
    const sy_loaded_model *lm = sy_api_gen_model(g);
    cJSON *c = NULL;
    sy_api_event *ev = first;
    for (; ev != NULL || (ev = sy_api_gen_next(g)) != NULL; ev = NULL) {
        if (ev->type == SY_GEN_EVENT_TEXT) {
            if (lp && ev->token >= 0) {
                if (q->chat)
                    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "content"), chat_logprob_entry(lm, ev));
                else completion_logprob_add(lp, lm, ev, text.len);
            }
            sy_buf_append(&text, ev->text, ev->text_len);
            sy_api_event_free(ev);
            continue;
        }
        if (ev->type == SY_GEN_EVENT_ERROR) {
            *status = 500;
            snprintf(msg, msg_size, "%s", ev->message);
        } else if (strcmp(ev->finish_reason, "cancelled") == 0 && sy_api_gen_server_stopping(g)) {
            *status = 503;
            snprintf(msg, msg_size, "the server is shutting down");
        } else {
            c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", index);
            const char *reason = finish_reason(ev->finish_reason);
            if (q->chat) {
                /* each choice's text is parsed on its own: content, reasoning_content and tool_calls */
                sy_api_chat_output out;
                sy_api_chat_output_init(&out, &q->tools.parse, q->out_seed ^ index);
                cJSON *m = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                sy_api_chat_output_feed(&out, text.data ? text.data : "", text.len);
                sy_api_chat_output_finish(&out);
                sy_api_chat_output_openai_message(&out, m);
                cJSON_AddNullToObject(m, "refusal");
                if (sy_api_chat_output_has_calls(&out) && strcmp(reason, "stop") == 0) reason = "tool_calls";
                sy_api_chat_output_free(&out);
            } else {
                cJSON_AddStringToObject(c, "text", text.data ? text.data : "");
            }
            if (lp) cJSON_AddItemToObject(c, "logprobs", lp), lp = NULL;
            else cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddStringToObject(c, "finish_reason", reason);
            *usage = ev->usage;
        }
        sy_api_event_free(ev);
        break;
    }
    if (c == NULL && *status == 0) {
        *status = 499;
        snprintf(msg, msg_size, "the client went away");
    }
    cJSON_Delete(lp);
    sy_buf_free(&text);
    return c;
}

/* Submits the n choices (into grp when streaming): gens[i], and *first, the first event of choice 0, taken before
 * the others started so that they fork its prompt. On failure everything started is finished, the lease of m0
 * released and -1 returned with e. */
static int start_choices(sy_http_request *r, openai_request *q, sy_api_model *m0, const char *model_name,
                         const int32_t *tokens, size_t n_tokens, sy_gen_params *params, sy_api_gen_group *grp,
                         sy_api_gen **gens, sy_api_event **first, sy_api_error *e) {
    uint32_t n = q->n_choices;
    uint64_t seed = params->sampling.seed;
    *first = NULL;
    int failed = 0;
    for (uint32_t i = 0; i < n && !failed; i++) {
        sy_api_model mi;
        sy_api_model *m = m0;
        if (i > 0) { /* each choice holds its own lease on the model, as its own generation does */
            if (sy_api_acquire(r, model_name, &mi, e) != 0) {
                failed = 1;
                break;
            }
            m = &mi;
        }
        params->sampling.seed = choice_seed(seed, i);
        gens[i] = grp ? sy_api_gen_start_in(grp, r, m, tokens, n_tokens, params, e)
                      : sy_api_gen_start(r, m, tokens, n_tokens, params, e);
        if (gens[i] == NULL) {
            if (i > 0) sy_api_model_release(&mi);
            failed = 1;
            break;
        }
        /* the first choice's prompt is in its slot once its first event comes: the others fork it */
        if (i == 0 && n > 1) *first = grp ? sy_api_gen_group_next(grp, &(uint32_t){0}) : sy_api_gen_next(gens[0]);
    }
    params->sampling.seed = seed;
    if (!failed) return 0;
    sy_api_event_free(*first);
    *first = NULL;
    if (grp == NULL)
        for (uint32_t i = 0; i < n; i++)
            if (gens[i]) sy_api_gen_finish(gens[i]);
    sy_api_model_release(m0);
    return -1;
}

/* n > 1 streamed: the choices' chunks interleaved as they come, each naming its index. */
static void stream_choices(sy_http_request *r, openai_request *q, sy_api_model *m0, const char *model_name,
                           const int32_t *tokens, size_t n_tokens, sy_gen_params *params) {
    sy_api_gen_group *grp = sy_api_gen_group_new();
    sy_api_gen *gens[SY_OPENAI_MAX_CHOICES] = {0};
    sy_api_event *first = NULL;
    sy_api_error e;
    memset(&e, 0, sizeof e);
    if (start_choices(r, q, m0, model_name, tokens, n_tokens, params, grp, gens, &first, &e) != 0) {
        sy_api_gen_group_free(grp);
        sy_api_respond_error(r, &e);
        openai_request_free(q);
        return;
    }
    stream_choices_init(q);
    sy_api_respond_group_stream(r, "text/event-stream", grp, first, 0, &sse_group_ops, q);
}

static void respond_choices(sy_http_request *r, openai_request *q, sy_api_model *m0, const char *model_name,
                            const int32_t *tokens, size_t n_tokens, sy_gen_params *params) {
    uint32_t n = q->n_choices;
    sy_api_gen **gens = sy_xcalloc(n, sizeof *gens);
    sy_api_error e;
    memset(&e, 0, sizeof e);
    sy_api_event *first = NULL;
    if (start_choices(r, q, m0, model_name, tokens, n_tokens, params, NULL, gens, &first, &e) != 0) {
        free(gens);
        sy_api_respond_error(r, &e);
        return;
    }
    cJSON *o = envelope(q, false);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    sy_gen_usage total;
    memset(&total, 0, sizeof total);
    int status = 0;
    char msg[1024] = "";
    for (uint32_t i = 0; i < n; i++) {
        sy_gen_usage u;
        memset(&u, 0, sizeof u);
        cJSON *c = status == 0 ? collect_choice(q, gens[i], i == 0 ? first : NULL, i, &u, &status, msg, sizeof msg)
                               : NULL;
        if (i == 0) first = NULL;
        if (c) cJSON_AddItemToArray(choices, c);
        sy_api_gen_finish(gens[i]);
        if (i == 0) total = u; /* the prompt once, as OpenAI counts it */
        else {
            total.completion_tokens += u.completion_tokens;
            total.cached_tokens = total.cached_tokens > u.cached_tokens ? total.cached_tokens : u.cached_tokens;
            total.drafted_tokens += u.drafted_tokens;
            total.accepted_tokens += u.accepted_tokens;
        }
    }
    free(gens);
    if (status != 0) {
        cJSON_Delete(o);
        const char *code = status == 503 ? "server_stopping" : status == 499 ? "client_gone" : "generation_failed";
        sy_http_respond_error(r, status, code, NULL, "%s", msg);
        return;
    }
    cJSON_AddItemToObject(o, "usage", usage_json(&total));
    sy_http_respond_json(r, 200, o);
}

/* ------------------------------------------------------------------------------------------------------------
 * The two generation endpoints */

static void openai_generate(sy_http_request *r, bool chat) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    openai_request *q = sy_xcalloc(1, sizeof *q);
    q->chat = chat;
    sy_api_chat_init(&q->tools);
    sy_api_messages messages;
    memset(&messages, 0, sizeof messages);
    sy_api_model m;
    memset(&m, 0, sizeof m);
    char *prompt_text = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    sy_gen_params params = sy_gen_params_defaults();
    const char *model_name = NULL;
    const char *text = NULL, *suffix = NULL;
    sy_api_gen *g = NULL;

    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0) goto fail;
    sy_api_apply_model_params(sy_api_ctx(r), model_name, body,
                              chat ? SY_API_PARAMS_OPENAI_CHAT : SY_API_PARAMS_OPENAI_COMPLETION);
    if (parse_params(body, q, &params, &e) != 0) goto fail;
    if (sy_api_constraint_openai(sy_api_ctx(r), body, &params, &e) != 0) goto fail;
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
        if (msgs == NULL) {
            sy_api_fail(&e, 400, "missing_messages", "messages", "messages is required");
            goto fail;
        }
        if (sy_api_parse_messages(msgs, "messages", &messages, &e) != 0) goto fail;
        if (messages.n == 0) {
            sy_api_fail(&e, 400, "invalid_value", "messages", "messages must hold at least one message");
            goto fail;
        }
        if (sy_api_chat_from_openai(body, &q->tools, &e) != 0) goto fail;
    } else {
        if (parse_completion_prompt(body, &text, &tokens, &n_tokens, &e) != 0) goto fail;
        if (sy_json_get_string(body, NULL, "suffix", &suffix, NULL, &e) != 0) goto fail;
    }

    if (sy_api_acquire(r, model_name, &m, &e) != 0) goto fail;
    snprintf(q->model, sizeof q->model, "%s", model_name);
    snprintf(q->fingerprint, sizeof q->fingerprint, "fp_%.16s",
             m.lm->info.fingerprint ? m.lm->info.fingerprint : "");
    sy_api_make_id(q->id, sizeof q->id, chat ? "chatcmpl-" : "cmpl-");
    q->created = (long long)time(NULL);

    if (chat) {
        size_t len = 0;
        if (sy_api_chat_prepare(r, &m, &q->tools, &params, &prompt_text, &len, &e) != 0) goto fail;
        q->out_seed = params.sampling.seed ^ (uint64_t)q->created;
        sy_api_chat_output_init(&q->out, &q->tools.parse, q->out_seed);
        tokens = sy_api_chat_prompt_tokens(&m, prompt_text, len, messages.items, messages.n, &n_tokens, &e);
        if (tokens == NULL) goto fail;
    } else if (suffix != NULL && suffix[0] != '\0') {
        /* fill-in-the-middle: the prompt is the text before the cursor */
        if (text == NULL) {
            sy_api_fail(&e, 400, "invalid_value", "suffix", "suffix needs a text prompt, not token ids");
            goto fail;
        }
        sy_api_fim_input fim = {.prefix = text, .suffix = suffix, .n_predict = params.max_tokens ? (int64_t)params.max_tokens : -1};
        tokens = sy_api_fim_prompt(r, &m, &fim, &n_tokens, &e);
        if (tokens == NULL) goto fail;
        if (q->echo) q->echo_text = sy_strdup(text);
    } else if (text != NULL) {
        tokens = sy_api_tokenize_prompt(&m, text, strlen(text), false, &n_tokens, &e);
        if (tokens == NULL) goto fail;
        if (q->echo) q->echo_text = sy_strdup(text);
    } else {
        uint32_t n_vocab = m.lm->info.n_vocab;
        for (size_t i = 0; i < n_tokens; i++) {
            if ((uint32_t)tokens[i] >= n_vocab) {
                sy_api_fail(&e, 400, "invalid_value", "prompt", "prompt[%zu]: token %d is outside the vocabulary (%u)",
                            i, tokens[i], n_vocab);
                goto fail;
            }
        }
        if (sy_api_check_context(&m, n_tokens, "prompt", &e) != 0) goto fail;
        if (q->echo) {
            sy_buf echo;
            sy_buf_init(&echo);
            for (size_t i = 0; i < n_tokens; i++) sy_api_token_text(m.lm, tokens[i], &echo, NULL);
            q->echo_text = sy_buf_take(&echo);
        }
    }

    for (uint32_t i = 0; i < params.sampling.n_logit_bias; i++) {
        if ((uint32_t)params.sampling.logit_bias[i].token >= m.lm->info.n_vocab) {
            sy_api_fail(&e, 400, "invalid_value", "logit_bias", "logit_bias: token %d is outside the vocabulary (%u)",
                        params.sampling.logit_bias[i].token, m.lm->info.n_vocab);
            goto fail;
        }
    }

    if (q->n_choices > 1) {
        bool streamed = q->stream;
        if (streamed) stream_choices(r, q, &m, model_name, tokens, n_tokens, &params); /* q goes with the stream */
        else respond_choices(r, q, &m, model_name, tokens, n_tokens, &params);
        sy_api_constraint_clear(&params);
        sy_api_sampling_fields_free(&params);
        free(tokens);
        free(prompt_text);
        sy_api_messages_free(&messages);
        cJSON_Delete(body);
        if (!streamed) openai_request_free(q);
        return;
    }
    g = sy_api_gen_start(r, &m, tokens, n_tokens, &params, &e);
    if (g == NULL) goto fail;
    sy_api_constraint_clear(&params); /* the scheduler holds the grammar now */
    sy_api_sampling_fields_free(&params); /* and its copy of logit_bias */
    free(tokens);
    tokens = NULL;
    free(prompt_text);
    prompt_text = NULL;
    sy_api_messages_free(&messages);
    /* The stop strings point into body: the scheduler copied them at submit. */
    cJSON_Delete(body);
    body = NULL;

    if (q->stream) {
        stream_choices_init(q);
        sy_api_respond_stream(r, "text/event-stream", g, &sse_ops, q);
        return;
    }
    respond_collected(r, q, g);
    sy_api_gen_finish(g);
    openai_request_free(q);
    return;

fail:
    sy_api_respond_error(r, &e);
    sy_api_constraint_clear(&params);
    sy_api_sampling_fields_free(&params);
    sy_api_model_release(&m);
    free(tokens);
    free(prompt_text);
    sy_api_messages_free(&messages);
    cJSON_Delete(body);
    openai_request_free(q);
}

void sy_api_openai_chat(sy_http_request *r) { openai_generate(r, true); }
void sy_api_openai_completions(sy_http_request *r) { openai_generate(r, false); }

/* ------------------------------------------------------------------------------------------------------------
 * /v1/models */

static cJSON *model_object(const sy_config_model *cm) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", cm->name);
    cJSON_AddStringToObject(o, "object", "model");
    struct stat st;
    double created = (cm->path && stat(cm->path, &st) == 0) ? (double)st.st_mtime : 0;
    cJSON_AddNumberToObject(o, "created", created);
    cJSON_AddStringToObject(o, "owned_by", "switchyard");
    cJSON *aliases = cJSON_AddArrayToObject(o, "aliases");
    for (size_t i = 0; i < cm->aliases.count; i++) cJSON_AddItemToArray(aliases, cJSON_CreateString(cm->aliases.items[i]));
    /* llama-server puts the model's facts under meta; llama-swap's name, description and metadata go beside them
     * (metadata under meta.llamaswap, where its clients look). */
    cJSON *meta = cJSON_AddObjectToObject(o, "meta");
#ifdef SY_VERSION
    cJSON_AddStringToObject(meta, "switchyard_version", SY_VERSION);
#endif
    cJSON_AddStringToObject(meta, "plugin", cm->plugin ? cm->plugin : "");
    if (cm->display_name) cJSON_AddStringToObject(o, "name", cm->display_name);
    if (cm->description) cJSON_AddStringToObject(o, "description", cm->description);
    cJSON *metadata = cm->metadata ? cJSON_Parse(cm->metadata) : NULL;
    if (metadata != NULL) cJSON_AddItemToObject(meta, "llamaswap", metadata);
    return o;
}

void sy_api_openai_models(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(json, "data");
    for (size_t i = 0; cfg && i < cfg->n_models; i++)
        if (!cfg->models[i].unlisted) cJSON_AddItemToArray(data, model_object(&cfg->models[i]));
    for (size_t i = 0; cfg && i < cfg->n_selectors; i++) { /* llama-swap's selectors: names that choose a model */
        const sy_config_selector *sel = &cfg->selectors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", sel->name);
        cJSON_AddStringToObject(o, "object", "model");
        cJSON_AddNumberToObject(o, "created", 0);
        cJSON_AddStringToObject(o, "owned_by", "switchyard");
        if (sel->display_name) cJSON_AddStringToObject(o, "name", sel->display_name);
        if (sel->description) cJSON_AddStringToObject(o, "description", sel->description);
        cJSON *targets = cJSON_AddArrayToObject(o, "targets");
        for (size_t k = 0; k < sel->targets.count; k++)
            cJSON_AddItemToArray(targets, cJSON_CreateString(sel->targets.items[k]));
        cJSON_AddItemToArray(data, o);
    }
    sy_api_config_release(srv, cfg);
    sy_http_respond_json(r, 200, json);
}

void sy_api_openai_model(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const char *id = sy_http_path_param(r);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, id) : NULL;
    if (cm == NULL) {
        sy_buf names;
        sy_buf_init(&names);
        for (size_t i = 0; cfg && i < cfg->n_models && names.len < 700; i++) {
            if (i > 0) sy_buf_puts(&names, ", ");
            sy_buf_puts(&names, cfg->models[i].name);
        }
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, id, strlen(id));
        sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' does not exist; the models offered are: %s",
                              shown, names.len ? names.data : "(none)");
        sy_buf_free(&names);
    } else {
        sy_http_respond_json(r, 200, model_object(cm));
    }
    sy_api_config_release(srv, cfg);
}

/* ------------------------------------------------------------------------------------------------------------
 * The request's parameters without a server (the fuzz target of tests/fuzz) */

int sy_api_openai_parse_request(const cJSON *body, bool chat, sy_gen_params *p, sy_api_error *e) {
    openai_request q;
    memset(&q, 0, sizeof q);
    q.chat = chat;
    int rc = parse_params(body, &q, p, e);
    if (rc == 0 && chat) {
        sy_api_messages messages;
        memset(&messages, 0, sizeof messages);
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
        rc = msgs == NULL ? sy_api_fail(e, 400, "missing_messages", "messages", "messages is required")
                          : sy_api_parse_messages(msgs, "messages", &messages, e);
        sy_api_messages_free(&messages);
        if (rc == 0) { /* tools, tool_choice, tool history, reasoning options */
            sy_api_chat tools;
            sy_api_chat_init(&tools);
            rc = sy_api_chat_from_openai(body, &tools, e);
            sy_api_chat_free(&tools);
        }
    } else if (rc == 0) {
        const char *text = NULL;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        rc = parse_completion_prompt(body, &text, &ids, &n_ids, e);
        free(ids);
    }
    free(q.echo_text);
    return rc;
}
