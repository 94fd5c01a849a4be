/* The OpenAI-compatible API: /v1/chat/completions, /v1/completions (SSE streaming), /v1/models. */
#include "api/openai.h"
#include "api/chat_tokens.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "api/constraint.h"
#include "api/context.h"
#include "api/generation.h"
#include "api/messages.h"
#include "base/util.h"

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
    bool sent_first;      /* stream: the opening chunk went out */
} openai_request;

static void openai_request_free(void *p) {
    openai_request *q = p;
    if (q == NULL) return;
    free(q->echo_text);
    free(q);
}

/* ------------------------------------------------------------------------------------------------------------
 * Parameters */

/* Refuse, by name, the features this server does not implement, rather than silently ignoring them. */
static int refuse_unsupported(const cJSON *body, bool chat, sy_api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (chat && cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0)
        return sy_api_fail(e, 400, "unsupported_parameter", "tools", "tools (function calling) are not supported");
    v = cJSON_GetObjectItemCaseSensitive(body, "functions");
    if (chat && cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0)
        return sy_api_fail(e, 400, "unsupported_parameter", "functions", "functions are not supported");
    v = cJSON_GetObjectItemCaseSensitive(body, "logit_bias");
    if (cJSON_IsObject(v) && cJSON_GetArraySize(v) > 0)
        return sy_api_fail(e, 400, "unsupported_parameter", "logit_bias", "logit_bias is not supported");
    v = cJSON_GetObjectItemCaseSensitive(body, "suffix");
    if (!chat && cJSON_IsString(v) && v->valuestring[0] != '\0')
        return sy_api_fail(e, 400, "unsupported_parameter", "suffix", "suffix (fill-in-the-middle) is not supported");
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
    if (sy_json_get_integer(body, NULL, "n", INT32_MIN, INT32_MAX, &n, NULL, e) != 0) return -1;
    if (n != 1) return sy_api_fail(e, 400, "unsupported_value", "n", "n: only 1 choice per request is supported");

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

/* A chunk with one choice; delta_or_text is the chat delta object or the completion text. */
static void sse_choice(const openai_request *q, sy_buf *out, cJSON *delta, const char *text, cJSON *logprobs,
                       const char *finish) {
    cJSON *o = envelope(q, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
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

static void sse_first(openai_request *q, sy_buf *out) {
    if (q->sent_first) return;
    q->sent_first = true;
    if (q->chat) {
        cJSON *delta = cJSON_CreateObject();
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        sse_choice(q, out, delta, NULL, NULL, NULL);
    } else if (q->echo && q->echo_text != NULL) {
        sse_choice(q, out, NULL, q->echo_text, NULL, NULL);
        q->text_offset += strlen(q->echo_text);
    }
}

static void sse_format(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out) {
    openai_request *q = state;
    sse_first(q, out);
    if (ev->type == SY_GEN_EVENT_TEXT) {
        bool with_lp = q->logprobs && ev->token >= 0;
        if (ev->text_len == 0 && !with_lp) return;
        cJSON *lp = NULL;
        if (with_lp) {
            if (q->chat) {
                lp = cJSON_CreateObject();
                cJSON *content = cJSON_AddArrayToObject(lp, "content");
                cJSON_AddItemToArray(content, chat_logprob_entry(sy_api_gen_model(g), ev));
            } else {
                lp = completion_logprobs_new();
                completion_logprob_add(lp, sy_api_gen_model(g), ev, q->text_offset);
            }
        }
        if (q->chat) {
            cJSON *delta = cJSON_CreateObject();
            cJSON_AddStringToObject(delta, "content", ev->text);
            sse_choice(q, out, delta, NULL, lp, NULL);
        } else {
            sse_choice(q, out, NULL, ev->text, lp, NULL);
        }
        q->text_offset += ev->text_len;
        return;
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
        return;
    }
    sse_choice(q, out, NULL, NULL, NULL, finish_reason(ev->finish_reason));
    if (q->include_usage) {
        cJSON *o = envelope(q, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(&ev->usage));
        sse_json(out, o);
    }
    sy_buf_puts(out, "data: [DONE]\n\n");
}

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
        if (ev->type == SY_GEN_EVENT_ERROR) {
            sy_http_respond_error(r, 500, "generation_failed", NULL, "%s", ev->message);
        } else if (strcmp(ev->finish_reason, "cancelled") == 0 && sy_api_gen_server_stopping(g)) {
            sy_http_respond_error(r, 503, "server_stopping", NULL, "the server is shutting down");
        } else {
            cJSON *o = envelope(q, false);
            cJSON *choices = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", 0);
            if (q->chat) {
                cJSON *m = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                cJSON_AddStringToObject(m, "content", text.data ? text.data : "");
                cJSON_AddNullToObject(m, "refusal");
            } else {
                cJSON_AddStringToObject(c, "text", text.data ? text.data : "");
            }
            if (lp) cJSON_AddItemToObject(c, "logprobs", lp), lp = NULL;
            else cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddStringToObject(c, "finish_reason", finish_reason(ev->finish_reason));
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
 * The two generation endpoints */

static void openai_generate(sy_http_request *r, bool chat) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    openai_request *q = sy_xcalloc(1, sizeof *q);
    q->chat = chat;
    sy_api_messages messages;
    memset(&messages, 0, sizeof messages);
    sy_api_model m;
    memset(&m, 0, sizeof m);
    char *prompt_text = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    sy_gen_params params = sy_gen_params_defaults();
    const char *model_name = NULL;
    const char *text = NULL;
    sy_api_gen *g = NULL;

    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0) goto fail;
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
    } else {
        if (parse_completion_prompt(body, &text, &tokens, &n_tokens, &e) != 0) goto fail;
    }

    if (sy_api_acquire(r, model_name, &m, &e) != 0) goto fail;
    snprintf(q->model, sizeof q->model, "%s", model_name);
    snprintf(q->fingerprint, sizeof q->fingerprint, "fp_%.16s",
             m.lm->info.fingerprint ? m.lm->info.fingerprint : "");
    sy_api_make_id(q->id, sizeof q->id, chat ? "chatcmpl-" : "cmpl-");
    q->created = (long long)time(NULL);

    if (chat) {
        tokens = sy_api_chat_tokens(r, &m, messages.items, messages.n, true, &n_tokens, &e);
        if (tokens == NULL) goto fail;
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

    g = sy_api_gen_start(r, &m, tokens, n_tokens, &params, &e);
    if (g == NULL) goto fail;
    sy_api_constraint_clear(&params); /* the scheduler holds the grammar now */
    free(tokens);
    tokens = NULL;
    free(prompt_text);
    prompt_text = NULL;
    sy_api_messages_free(&messages);
    /* The stop strings point into body: the scheduler copied them at submit. */
    cJSON_Delete(body);
    body = NULL;

    if (q->stream) {
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
    return o;
}

void sy_api_openai_models(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(json, "data");
    for (size_t i = 0; cfg && i < cfg->n_models; i++) cJSON_AddItemToArray(data, model_object(&cfg->models[i]));
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
