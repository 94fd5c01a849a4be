/* The Ollama-compatible API: /api/chat, /api/generate (NDJSON streaming by default), /api/tags, /api/show,
 * /api/ps, /api/version. */
#include "api/chat_prompt.h"
#include "api/ollama.h"
#include "api/chat_tokens.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>
#include "api/chat_output.h"
#include "api/chat_tools.h"
#include "api/constraint.h"
#include "api/context.h"
#include "api/fim.h"
#include "api/generation.h"
#include "api/messages.h"
#include "api/model_params.h"
#include "api/sampling_fields.h"
#include "api/model_facts.h"
#include "base/log.h"
#include "base/util.h"

#ifndef SY_VERSION
#define SY_VERSION "0.0.0"
#endif

/* ------------------------------------------------------------------------------------------------------------
 * Times and names */

/* RFC 3339 in UTC with nanoseconds, as Ollama writes created_at. */
static void rfc3339(char *out, size_t size, time_t sec, long nsec) {
    struct tm tm;
    if (gmtime_r(&sec, &tm) == NULL) {
        snprintf(out, size, "1970-01-01T00:00:00Z");
        return;
    }
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    if (nsec > 0 && nsec < 1000000000L) snprintf(out, size, "%s.%09dZ", base, (int)nsec);
    else snprintf(out, size, "%sZ", base);
}

static void now_rfc3339(char *out, size_t size) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rfc3339(out, size, ts.tv_sec, ts.tv_nsec);
}

static double to_ns(double seconds) { return seconds > 0 && isfinite(seconds) ? floor(seconds * 1e9) : 0; }

/* ------------------------------------------------------------------------------------------------------------
 * keep_alive: a Go duration ("5m", "1h30m", "300ms", "-1m"), a number of seconds as a string or a number;
 * negative means forever. *seconds is -1 for forever. */
static int parse_duration_string(const char *s, double *seconds) {
    const char *p = s;
    bool negative = false;
    if (*p == '-' || *p == '+') negative = *p == '-', p++;
    if (*p == '\0') return -1;
    double total = 0;
    bool any = false;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || v < 0) return -1;
        p = end;
        double unit;
        if (*p == '\0') {
            if (any) return -1; /* "5m3" */
            unit = 1;           /* a bare number: seconds */
        } else if (strncmp(p, "ns", 2) == 0) unit = 1e-9, p += 2;
        else if (strncmp(p, "us", 2) == 0 || strncmp(p, "\xC2\xB5s", 3) == 0) unit = 1e-6, p += (*p == 'u' ? 2 : 3);
        else if (strncmp(p, "ms", 2) == 0) unit = 1e-3, p += 2;
        else if (*p == 's') unit = 1, p++;
        else if (*p == 'm') unit = 60, p++;
        else if (*p == 'h') unit = 3600, p++;
        else return -1;
        total += v * unit;
        any = true;
    }
    *seconds = negative ? -total : total;
    return 0;
}

/* The model's idle ttl a request asks for (sy_model_manager_set_ttl's units): SY_MODEL_TTL_CONFIGURED without
 * keep_alive (Ollama falls back to its default, which the config's ttl stands for), SY_MODEL_TTL_FOREVER for a
 * negative one, 0 to unload after the request, else whole seconds rounded up (so "300ms" keeps it for 1 s). */
static int parse_keep_alive(const cJSON *body, int64_t *ttl, sy_api_error *e) {
    *ttl = SY_MODEL_TTL_CONFIGURED;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "keep_alive");
    if (v == NULL || cJSON_IsNull(v)) return 0;
    double s;
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) s = v->valuedouble;
    else if (!cJSON_IsString(v) || parse_duration_string(v->valuestring, &s) != 0)
        return sy_api_fail(e, 400, "invalid_value", "keep_alive",
                           "keep_alive must be a duration such as \"5m\", \"1h\" or \"300s\", a number of seconds, or "
                           "a negative value for forever");
    if (s < 0 || !(s < (double)INT32_MAX)) *ttl = SY_MODEL_TTL_FOREVER; /* beyond 68 years is forever too */
    else *ttl = (int64_t)ceil(s);
    return 0;
}

/* Applies a request's keep_alive to the model it acquired. */
static void apply_keep_alive(sy_http_request *r, const char *model_name, int64_t ttl) {
    if (sy_model_manager_set_ttl(sy_api_manager(sy_api_ctx(r)), model_name, ttl) != 0)
        sy_log(SY_LOG_WARN, "ollama: keep_alive: model %s went away", model_name);
}

/* ------------------------------------------------------------------------------------------------------------
 * Options */

/* Ollama's documented options: those mapped below, those that set up a load (the config sets them here: accepted
 * and ignored, see docs/api.md), and those refused because they would change the output and are not
 * implemented. Any other key is refused by name. */
static const char *const load_time_options[] = {"numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv",
                                                "vocab_only", "use_mmap", "use_mlock", "num_thread", "num_keep"};

static int check_option_names(const cJSON *o, sy_api_error *e) {
    static const char *const mapped[] = {"num_predict", "num_ctx", "temperature", "top_k", "top_p", "min_p",
                                         "typical_p", "seed", "stop", "speculative", "repeat_penalty",
                                         "repeat_last_n", "presence_penalty", "frequency_penalty", "xtc_probability",
                                         "xtc_threshold", "dry_multiplier", "dry_base", "dry_allowed_length",
                                         "dry_penalty_last_n", "dry_sequence_breakers"};
    const cJSON *item;
    cJSON_ArrayForEach(item, o) {
        const char *k = item->string ? item->string : "";
        bool known = false;
        for (size_t i = 0; i < sizeof mapped / sizeof *mapped && !known; i++) known = strcmp(k, mapped[i]) == 0;
        for (size_t i = 0; i < sizeof load_time_options / sizeof *load_time_options && !known; i++)
            known = strcmp(k, load_time_options[i]) == 0;
        if (known) continue;
        char shown[80];
        sy_utf8_sanitize(shown, sizeof shown, k, strlen(k));
        if (strcmp(k, "mirostat") == 0 || strcmp(k, "mirostat_tau") == 0 || strcmp(k, "mirostat_eta") == 0) {
            if (strcmp(k, "mirostat") == 0 && cJSON_IsNumber(item) && item->valuedouble == 0) continue;
            if (strcmp(k, "mirostat") != 0) continue; /* its parameters matter only with it on */
            return sy_api_fail(e, 400, "unsupported_parameter", "options.mirostat",
                               "options.mirostat: Mirostat sampling is not supported (use 0)");
        }
        if (strcmp(k, "tfs_z") == 0) {
            if (cJSON_IsNumber(item) && item->valuedouble == 1) continue;
            return sy_api_fail(e, 400, "unsupported_parameter", "options.tfs_z",
                               "options.tfs_z: tail-free sampling is not supported (use 1)");
        }
        if (strcmp(k, "penalize_newline") == 0) {
            if (cJSON_IsFalse(item)) continue;
            return sy_api_fail(e, 400, "unsupported_parameter", "options.penalize_newline",
                               "options.penalize_newline is not supported (use false)");
        }
        return sy_api_fail(e, 400, "unsupported_parameter", "options", "options.%s is not an option this server knows",
                           shown);
    }
    return 0;
}

/* *num_ctx: options.num_ctx, 0 when not given. */
static int parse_options(const cJSON *body, sy_gen_params *p, uint32_t *num_ctx, sy_api_error *e) {
    *p = sy_gen_params_defaults();
    p->sampling.seed = sy_api_random_seed();
    *num_ctx = 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(body, "options");
    if (o == NULL || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return sy_api_fail(e, 400, "invalid_type", "options", "options must be an object");
    if (check_option_names(o, e) != 0) return -1;
    const char *pre = "options.";
    bool present;
    int64_t i;
    double d;
    if (sy_json_get_integer(o, pre, "num_predict", -2, INT32_MAX, &i, &present, e) != 0) return -1;
    if (present) p->max_tokens = i <= 0 ? 0 : (uint32_t)i; /* -1 infinite, -2 fill the context */
    if (sy_json_get_integer(o, pre, "num_ctx", 1, INT32_MAX, &i, &present, e) != 0) return -1;
    if (present) *num_ctx = (uint32_t)i;
    if (sy_json_get_number(o, pre, "temperature", 0, 100, &d, &present, e) != 0) return -1;
    if (present) p->sampling.temperature = (float)d;
    if (sy_json_get_integer(o, pre, "top_k", 0, 1 << 20, &i, &present, e) != 0) return -1;
    if (present) p->sampling.top_k = (uint32_t)i;
    if (sy_json_get_number(o, pre, "top_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.top_p = (float)d;
    if (sy_json_get_number(o, pre, "min_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.min_p = (float)d;
    uint64_t seed;
    if (sy_json_get_seed(o, pre, "seed", &seed, &present, e) != 0) return -1;
    /* Ollama's seed -1 means random. */
    if (present && seed != UINT64_MAX) p->sampling.seed = seed;
    if (sy_json_get_stop(o, pre, "stop", p, e) != 0) return -1;
    if (sy_json_get_bool(o, pre, "speculative", &p->speculative, NULL, e) != 0) return -1;
    if (sy_json_get_number(o, pre, "repeat_penalty", 0.01, 100, &d, &present, e) != 0) return -1;
    if (present) p->sampling.repeat_penalty = (float)d;
    if (sy_json_get_integer(o, pre, "repeat_last_n", -1, INT32_MAX, &i, &present, e) != 0) return -1;
    if (present) p->sampling.penalty_last_n = i <= 0 ? 0 : (uint32_t)i;
    if (sy_json_get_number(o, pre, "presence_penalty", -2, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.presence_penalty = (float)d;
    if (sy_json_get_number(o, pre, "frequency_penalty", -2, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.frequency_penalty = (float)d;
    if (sy_api_sampling_fields(o, pre, false, p, e) != 0) return -1;
    return 0;
}

/* options.num_ctx as a per-request limit inside the loaded context (the context is sized when the model loads,
 * from its config; a larger num_ctx cannot grow it and is limited to it, which the log says): the prompt must
 * fit, and the generation stops where prompt and output fill num_ctx. */
static int apply_num_ctx(const sy_api_model *m, uint32_t num_ctx, size_t n_prompt, sy_gen_params *p, sy_api_error *e) {
    if (num_ctx == 0) return 0;
    uint32_t loaded = m->lm->info.n_ctx;
    if (loaded > 0 && num_ctx > loaded) {
        sy_log(SY_LOG_INFO, "ollama: options.num_ctx %u is larger than the context model %s was loaded with (%u): "
                            "limited to %u (set ctx_size in its config for more)", num_ctx, m->name, loaded, loaded);
        num_ctx = loaded;
    }
    if (n_prompt >= num_ctx)
        return sy_api_fail(e, 400, "context_length_exceeded", "options.num_ctx",
                           "the prompt is %zu tokens, which leaves no room to generate within options.num_ctx %u",
                           n_prompt, num_ctx);
    uint32_t room = num_ctx - (uint32_t)n_prompt;
    if (p->max_tokens == 0 || p->max_tokens > room) p->max_tokens = room;
    return 0;
}

/* Features Ollama has that this server does not: refused by name. */
static int refuse_unsupported(const cJSON *body, sy_api_error *e) {
    /* tools and think are api/chat_tools.c's. */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "images");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0)
        return sy_api_fail(e, 400, "unsupported_parameter", "images", "image inputs are not supported");
    v = cJSON_GetObjectItemCaseSensitive(body, "template");
    if (cJSON_IsString(v) && v->valuestring[0] != '\0')
        return sy_api_fail(e, 400, "unsupported_parameter", "template",
                           "template: custom Go templates are not supported (set chat_template in the config)");
    v = cJSON_GetObjectItemCaseSensitive(body, "context");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0)
        return sy_api_fail(e, 400, "unsupported_parameter", "context",
                           "context (token history) is not supported; use /api/chat for conversations");
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Responses */

typedef struct ollama_request {
    bool chat;
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    double t_request;
    double load_seconds;
    sy_api_chat tools;      /* chat: tools and think (api/chat_tools.h) */
    sy_api_chat_output out; /* chat: content, thinking and tool_calls */
} ollama_request;

static void ollama_request_free(void *p) {
    ollama_request *q = p;
    if (q == NULL) return;
    sy_api_chat_free(&q->tools);
    sy_api_chat_output_free(&q->out);
    free(q);
}

/* A chat reply's message from what the output parser has: the pending pieces while streaming, the whole at
 * the end of a collected reply. */
static cJSON *chat_reply(ollama_request *q, bool done, bool whole) {
    cJSON *o = cJSON_CreateObject();
    char created[48];
    now_rfc3339(created, sizeof created);
    cJSON_AddStringToObject(o, "model", q->model);
    cJSON_AddStringToObject(o, "created_at", created);
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    const sy_chat_parse *p = sy_api_chat_output_result(&q->out);
    const sy_buf *content = whole ? &p->content : &q->out.content;
    const sy_buf *thinking = whole ? &p->reasoning : &q->out.reasoning;
    cJSON_AddStringToObject(m, "content", content->data && content->len ? content->data : "");
    if (thinking->len > 0) cJSON_AddStringToObject(m, "thinking", thinking->data);
    cJSON *calls = sy_api_chat_output_ollama_calls(&q->out, done);
    if (calls != NULL) cJSON_AddItemToObject(m, "tool_calls", calls);
    if (!whole) {
        sy_buf_clear(&q->out.content);
        sy_buf_clear(&q->out.reasoning);
    }
    cJSON_AddBoolToObject(o, "done", done);
    return o;
}

static cJSON *reply_object(const ollama_request *q, const char *text, bool done) {
    cJSON *o = cJSON_CreateObject();
    char created[48];
    now_rfc3339(created, sizeof created);
    cJSON_AddStringToObject(o, "model", q->model);
    cJSON_AddStringToObject(o, "created_at", created);
    if (q->chat) {
        cJSON *m = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text);
    } else {
        cJSON_AddStringToObject(o, "response", text);
    }
    cJSON_AddBoolToObject(o, "done", done);
    return o;
}

static void add_final_fields(const ollama_request *q, cJSON *o, const sy_api_event *ev) {
    cJSON_AddStringToObject(o, "done_reason", strcmp(ev->finish_reason, "length") == 0 ? "length" : "stop");
    cJSON_AddNumberToObject(o, "total_duration", to_ns(ev->time - q->t_request));
    cJSON_AddNumberToObject(o, "load_duration", to_ns(q->load_seconds));
    cJSON_AddNumberToObject(o, "prompt_eval_count", ev->usage.prompt_tokens);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", to_ns(ev->usage.prompt_seconds));
    cJSON_AddNumberToObject(o, "eval_count", ev->usage.completion_tokens);
    cJSON_AddNumberToObject(o, "eval_duration", to_ns(ev->usage.generation_seconds));
}

static void ndjson_line(sy_buf *out, cJSON *json) { sy_api_stream_json(out, "", json, "\n"); }

static void ndjson_format(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out) {
    ollama_request *q = state;
    if (ev->type == SY_GEN_EVENT_TEXT) {
        if (q->chat && q->out.started) {
            sy_api_chat_output_feed(&q->out, ev->text, ev->text_len);
            cJSON_Delete(q->out.openai_calls);
            q->out.openai_calls = NULL;
            const sy_chat_parse *p = sy_api_chat_output_result(&q->out);
            bool call_done = q->out.whole_calls < p->n_calls && p->calls[q->out.whole_calls].complete;
            if (q->out.content.len > 0 || q->out.reasoning.len > 0 || call_done)
                ndjson_line(out, chat_reply(q, false, false));
            return;
        }
        if (ev->text_len > 0) ndjson_line(out, reply_object(q, ev->text, false));
        return;
    }
    int status;
    char msg[1024];
    if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", msg);
        ndjson_line(out, o);
        return;
    }
    cJSON *o;
    if (q->chat && q->out.started) {
        sy_api_chat_output_finish(&q->out);
        o = chat_reply(q, true, false);
    } else {
        o = reply_object(q, "", true);
    }
    add_final_fields(q, o, ev);
    ndjson_line(out, o);
}

static const sy_api_stream_ops ndjson_ops = {ndjson_format, ollama_request_free};

static void respond_collected(sy_http_request *r, ollama_request *q, sy_api_gen *g) {
    sy_buf text;
    sy_buf_init(&text);
    sy_api_event *ev;
    while ((ev = sy_api_gen_next(g)) != NULL) {
        if (ev->type == SY_GEN_EVENT_TEXT) {
            sy_buf_append(&text, ev->text, ev->text_len);
            sy_api_event_free(ev);
            continue;
        }
        int status;
        char msg[1024];
        if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg)) {
            sy_http_respond_error(r, status, NULL, NULL, "%s", msg);
        } else {
            cJSON *o;
            if (q->chat && q->out.started) {
                sy_api_chat_output_feed(&q->out, text.data ? text.data : "", text.len);
                sy_api_chat_output_finish(&q->out);
                o = chat_reply(q, true, true);
            } else {
                o = reply_object(q, text.data ? text.data : "", true);
            }
            add_final_fields(q, o, ev);
            sy_http_respond_json(r, 200, o);
        }
        sy_api_event_free(ev);
        break;
    }
    if (ev == NULL) sy_http_respond_error(r, 499, "client_gone", NULL, "the client went away");
    sy_buf_free(&text);
}

/* A request without a prompt loads the model (or, with keep_alive 0, unloads it), as Ollama does. */
static void load_or_unload(sy_http_request *r, ollama_request *q, const char *model_name, int64_t keep_alive) {
    bool unload = keep_alive == 0;
    sy_api_error e;
    memset(&e, 0, sizeof e);
    const char *reason;
    if (unload) {
        int n = sy_model_manager_unload(sy_api_manager(sy_api_ctx(r)), model_name);
        if (n < 0) {
            char shown[160];
            sy_utf8_sanitize(shown, sizeof shown, model_name, strlen(model_name));
            sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' not found", shown);
            return;
        }
        reason = "unload";
    } else {
        sy_api_model m;
        if (sy_api_acquire(r, model_name, &m, &e) != 0) {
            sy_api_respond_error(r, &e);
            return;
        }
        q->load_seconds = m.acquire_seconds;
        apply_keep_alive(r, m.name, keep_alive);
        sy_api_model_release(&m);
        reason = "load";
    }
    cJSON *o = reply_object(q, "", true);
    cJSON_AddStringToObject(o, "done_reason", reason);
    sy_http_respond_json(r, 200, o);
}

static void ollama_generate(sy_http_request *r, bool chat) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    ollama_request *q = sy_xcalloc(1, sizeof *q);
    q->chat = chat;
    q->t_request = sy_http_start_time(r);
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
    const char *prompt = NULL, *system = NULL, *suffix = NULL;
    bool stream = true, raw = false;
    int64_t keep_alive = SY_MODEL_TTL_CONFIGURED;
    sy_api_gen *g = NULL;

    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0) goto fail;
    if (model_name == NULL && sy_json_get_string(body, NULL, "name", &model_name, NULL, &e) != 0) goto fail;
    if (model_name == NULL || model_name[0] == '\0') {
        sy_api_fail(&e, 400, "missing_model", "model", "model is required");
        goto fail;
    }
    snprintf(q->model, sizeof q->model, "%s", model_name);
    sy_api_apply_model_params(sy_api_ctx(r), model_name, body,
                              chat ? SY_API_PARAMS_OLLAMA_CHAT : SY_API_PARAMS_OLLAMA_GENERATE);
    if (refuse_unsupported(body, &e) != 0) goto fail;
    if (sy_json_get_bool(body, NULL, "stream", &stream, NULL, &e) != 0) goto fail;
    if (parse_keep_alive(body, &keep_alive, &e) != 0) goto fail;
    uint32_t num_ctx = 0;
    if (parse_options(body, &params, &num_ctx, &e) != 0) goto fail;
    bool unload_now = keep_alive == 0;

    bool empty;
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
        if (msgs != NULL && !cJSON_IsNull(msgs) && sy_api_parse_messages(msgs, "messages", &messages, &e) != 0)
            goto fail;
        empty = messages.n == 0;
        if (!empty && sy_api_chat_from_ollama(body, &q->tools, &e) != 0) goto fail;
    } else {
        if (sy_json_get_string(body, NULL, "prompt", &prompt, NULL, &e) != 0) goto fail;
        if (sy_json_get_string(body, NULL, "system", &system, NULL, &e) != 0) goto fail;
        if (sy_json_get_string(body, NULL, "suffix", &suffix, NULL, &e) != 0) goto fail;
        if (sy_json_get_bool(body, NULL, "raw", &raw, NULL, &e) != 0) goto fail;
        empty = prompt == NULL || prompt[0] == '\0';
    }
    if (empty) {
        load_or_unload(r, q, model_name, keep_alive);
        cJSON_Delete(body);
        sy_api_messages_free(&messages);
        ollama_request_free(q);
        return;
    }

    /* After the load-only request above, which takes no format. */
    if (sy_api_constraint_ollama(sy_api_ctx(r), body, &params, &e) != 0) goto fail;
    if (sy_api_acquire(r, model_name, &m, &e) != 0) goto fail;
    q->load_seconds = m.acquire_seconds;
    apply_keep_alive(r, m.name, keep_alive);
    if (chat) {
        size_t len = 0;
        if (sy_api_chat_prepare(r, &m, &q->tools, &params, &prompt_text, &len, &e) != 0) goto fail;
        sy_api_chat_output_init(&q->out, &q->tools.parse, params.sampling.seed ^ (uint64_t)(q->t_request * 1e6));
        tokens = sy_api_chat_prompt_tokens(&m, prompt_text, len, messages.items, messages.n, &n_tokens, &e);
    } else if (suffix != NULL && suffix[0] != '\0') {
        /* fill-in-the-middle (Ollama's insert capability): the prompt is the text before the cursor */
        sy_api_fim_input fim = {.prefix = prompt, .suffix = suffix, .n_predict = params.max_tokens ? (int64_t)params.max_tokens : -1};
        tokens = sy_api_fim_prompt(r, &m, &fim, &n_tokens, &e);
    } else if (raw) {
        tokens = sy_api_tokenize_prompt(&m, prompt, strlen(prompt), false, &n_tokens, &e);
    } else {
        sy_chat_message turn[2];
        size_t n = 0;
        if (system != NULL && system[0] != '\0') turn[n++] = (sy_chat_message){"system", system, strlen(system)};
        turn[n++] = (sy_chat_message){"user", prompt, strlen(prompt)};
        size_t len = 0;
        if (sy_api_render_chat(r, &m, turn, n, true, &prompt_text, &len, &e) != 0) goto fail;
        tokens = sy_api_chat_prompt_tokens(&m, prompt_text, len, turn, n, &n_tokens, &e);
    }
    if (tokens == NULL) goto fail;
    if (apply_num_ctx(&m, num_ctx, n_tokens, &params, &e) != 0) goto fail;

    g = sy_api_gen_start(r, &m, tokens, n_tokens, &params, &e);
    if (g == NULL) goto fail;
    sy_api_constraint_clear(&params); /* the scheduler holds the grammar now */
    if (unload_now) sy_api_gen_unload_after(g);
    free(tokens);
    free(prompt_text);
    sy_api_messages_free(&messages);
    cJSON_Delete(body);
    if (stream) {
        sy_api_respond_stream(r, "application/x-ndjson", g, &ndjson_ops, q);
        return;
    }
    respond_collected(r, q, g);
    sy_api_gen_finish(g);
    ollama_request_free(q);
    return;

fail:
    sy_api_respond_error(r, &e);
    sy_api_constraint_clear(&params);
    sy_api_model_release(&m);
    free(tokens);
    free(prompt_text);
    sy_api_messages_free(&messages);
    cJSON_Delete(body);
    ollama_request_free(q);
}

void sy_api_ollama_chat(sy_http_request *r) { ollama_generate(r, true); }
void sy_api_ollama_generate(sy_http_request *r) { ollama_generate(r, false); }

/* ------------------------------------------------------------------------------------------------------------
 * Model listings */

typedef struct file_facts {
    uint64_t size;
    time_t mtime;
    char digest[40];
    const char *format;
} file_facts;

static void facts_of(const sy_config_model *cm, file_facts *f) {
    memset(f, 0, sizeof *f);
    struct stat st;
    const char *path = cm->path ? cm->path : "";
    if (stat(path, &st) == 0) {
        f->size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
        f->mtime = st.st_mtime;
    }
    size_t n = strlen(path);
    f->format = (n >= 5 && strcmp(path + n - 5, ".gguf") == 0) ? "gguf" : (cm->plugin ? cm->plugin : "");
    /* Not a content hash (that would read the whole file): an identity of the path, size and time. */
    char key[SY_CONFIG_MAX_PATH_LEN + 64];
    int k = snprintf(key, sizeof key, "%s|%llu|%lld", path, (unsigned long long)f->size, (long long)f->mtime);
    XXH128_hash_t h = XXH3_128bits(key, k > 0 ? (size_t)k < sizeof key ? (size_t)k : sizeof key - 1 : 0);
    snprintf(f->digest, sizeof f->digest, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

static cJSON *tag_object(sy_api_context *srv, const sy_config_model *cm) {
    file_facts f;
    facts_of(cm, &f);
    char err[256];
    cJSON *meta = sy_api_model_metadata(srv, cm, err, sizeof err); /* headers only: nothing loads */
    cJSON *o = cJSON_CreateObject();
    char when[48];
    rfc3339(when, sizeof when, f.mtime, 0);
    cJSON_AddStringToObject(o, "name", cm->name);
    cJSON_AddStringToObject(o, "model", cm->name);
    cJSON_AddStringToObject(o, "modified_at", when);
    cJSON_AddNumberToObject(o, "size", (double)f.size);
    cJSON_AddStringToObject(o, "digest", f.digest);
    cJSON_AddItemToObject(o, "details", sy_api_model_details(cm, meta));
    cJSON_Delete(meta);
    return o;
}

void sy_api_ollama_tags(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    cJSON *json = cJSON_CreateObject();
    cJSON *models = cJSON_AddArrayToObject(json, "models");
    for (size_t i = 0; cfg && i < cfg->n_models; i++) cJSON_AddItemToArray(models, tag_object(srv, &cfg->models[i]));
    sy_api_config_release(srv, cfg);
    sy_http_respond_json(r, 200, json);
}

/* The manager's state of one model by canonical name. */
static sy_model_state state_of(sy_model_manager *mm, const char *name, sy_model_status *out) {
    size_t cap = 16;
    for (;;) {
        sy_model_status *st = sy_xcalloc(cap, sizeof *st);
        size_t total = sy_model_manager_status(mm, st, cap);
        if (total <= cap) {
            sy_model_state s = SY_MODEL_UNLOADED;
            for (size_t i = 0; i < total; i++) {
                if (st[i].name && strcmp(st[i].name, name) == 0) {
                    s = st[i].state;
                    if (out) *out = st[i];
                    break;
                }
            }
            free(st);
            return s;
        }
        free(st);
        cap = total;
    }
}

/* A loaded embedding model shows capabilities ["embedding"] (plus "completion" when it also generates). */
static void embed_capabilities(cJSON *show, const sy_loaded_model *lm) {
    if (lm == NULL || (lm->info.capabilities & (SY_CAP_EMBED | SY_CAP_RERANK)) == 0) return;
    cJSON *caps = cJSON_CreateArray();
    cJSON_AddItemToArray(caps, cJSON_CreateString("embedding"));
    if ((lm->info.capabilities & SY_CAP_NO_GENERATE) == 0) cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    cJSON_ReplaceItemInObjectCaseSensitive(show, "capabilities", caps);
}

void sy_api_ollama_show(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    const char *name = NULL;
    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (sy_json_get_string(body, NULL, "model", &name, NULL, &e) != 0) goto fail;
    if (name == NULL && sy_json_get_string(body, NULL, "name", &name, NULL, &e) != 0) goto fail;
    if (name == NULL || name[0] == '\0') {
        sy_api_fail(&e, 400, "missing_model", "model", "model is required");
        goto fail;
    }
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, name) : NULL;
    if (cm == NULL) {
        sy_api_config_release(srv, cfg);
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, name, strlen(name));
        sy_api_fail(&e, 404, "model_not_found", "model", "model '%s' not found", shown);
        goto fail;
    }
    file_facts f;
    facts_of(cm, &f);
    cJSON *json = cJSON_CreateObject();
    sy_buf modelfile;
    sy_buf_init(&modelfile);
    sy_buf_printf(&modelfile, "# switchyard model %s (plugin %s)\nFROM %s\n", cm->name, cm->plugin ? cm->plugin : "",
                  cm->path ? cm->path : "");
    char *mf = sy_buf_take(&modelfile);
    cJSON_AddStringToObject(json, "modelfile", mf);
    free(mf);
    cJSON_AddStringToObject(json, "parameters", "");
    char when[48];
    rfc3339(when, sizeof when, f.mtime, 0);
    cJSON_AddStringToObject(json, "modified_at", when);
    char meta_err[256] = "";
    cJSON *meta = sy_api_model_metadata(srv, cm, meta_err, sizeof meta_err); /* headers only: nothing loads */
    if (meta == NULL) sy_log(SY_LOG_DEBUG, "ollama: show %s: no metadata: %s", cm->name, meta_err);
    cJSON *caps = cJSON_AddArrayToObject(json, "capabilities");
    sy_api_model_capabilities(cm, meta, caps);

    /* Facts that need the engine are shown only when the model is loaded: showing must not load (and swap). */
    sy_api_model m;
    memset(&m, 0, sizeof m);
    bool loaded = sy_api_acquire_loaded(r, cm->name, &m) == 0;
    sy_api_config_release(srv, cfg);
    const sy_loaded_model *lm = loaded ? m.lm : NULL;
    char *template_text = lm ? sy_api_model_template_text(r, &m, false) : NULL; /* the one requests are rendered with */
    cJSON_AddStringToObject(json, "template", template_text ? template_text : "");
    sy_api_template_capabilities(template_text, NULL, caps);
    free(template_text);
    cJSON_AddItemToObject(json, "details", sy_api_model_details(cm, meta));
    /* the file's metadata; the chat template is under "template" */
    cJSON *info = meta ? meta : cJSON_CreateObject();
    meta = NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(info, "tokenizer.chat_template");
    cJSON_AddItemToObject(json, "model_info", info);
    embed_capabilities(json, lm); /* an embedding model: what it answers instead */
    if (lm) {
        cJSON_AddNumberToObject(info, "switchyard.context_length", lm->info.n_ctx);
        cJSON_AddStringToObject(info, "switchyard.fingerprint", lm->info.fingerprint ? lm->info.fingerprint : "");
        cJSON_AddNumberToObject(info, "tokenizer.vocab_size", lm->info.n_vocab);
    }
    sy_api_model_release(&m);
    cJSON_Delete(body);
    sy_http_respond_json(r, 200, json);
    return;
fail:
    cJSON_Delete(body);
    sy_api_respond_error(r, &e);
}

void sy_api_ollama_ps(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    sy_model_manager *mm = sy_api_manager(srv);
    const sy_config *cfg = sy_api_config_acquire(srv);
    cJSON *json = cJSON_CreateObject();
    cJSON *models = cJSON_AddArrayToObject(json, "models");
    for (size_t i = 0; cfg && i < cfg->n_models; i++) {
        const sy_config_model *cm = &cfg->models[i];
        sy_model_status st;
        memset(&st, 0, sizeof st);
        if (state_of(mm, cm->name, &st) != SY_MODEL_READY) continue;
        file_facts f;
        facts_of(cm, &f);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", cm->name);
        cJSON_AddStringToObject(o, "model", cm->name);
        cJSON_AddNumberToObject(o, "size", (double)(st.memory_bytes + st.device_bytes));
        cJSON_AddStringToObject(o, "digest", f.digest);
        char err[256];
        cJSON *meta = sy_api_model_metadata(srv, cm, err, sizeof err);
        cJSON_AddItemToObject(o, "details", sy_api_model_details(cm, meta));
        cJSON_Delete(meta);
        char expires[48];
        if (st.ttl_in_effect_s < 0) {
            snprintf(expires, sizeof expires, "9999-12-31T23:59:59Z");
        } else {
            double left = (double)st.ttl_in_effect_s - st.idle_seconds;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            rfc3339(expires, sizeof expires, ts.tv_sec + (time_t)(left > 0 ? left : 0), 0);
        }
        cJSON_AddStringToObject(o, "expires_at", expires);
        cJSON_AddNumberToObject(o, "size_vram", (double)st.device_bytes);
        cJSON_AddItemToArray(models, o);
    }
    sy_api_config_release(srv, cfg);
    sy_http_respond_json(r, 200, json);
}

/* The Ollama API level implemented here, which clients gate on (VS Code's Copilot wants 0.6.4 or later); our
 * own version is in the X-Switchyard-Version header and in /v1/models. */
#define SY_OLLAMA_API_LEVEL "0.12.6"

void sy_api_ollama_version(sy_http_request *r) {
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "version", SY_OLLAMA_API_LEVEL);
    cJSON_AddStringToObject(json, "switchyard_version", SY_VERSION);
    sy_http_respond_json(r, 200, json);
}

/* ------------------------------------------------------------------------------------------------------------
 * The request's parameters without a server (the fuzz targets of tests/fuzz) */

int sy_api_ollama_parse_duration(const char *s, double *seconds) { return parse_duration_string(s, seconds); }

int sy_api_ollama_parse_request(const cJSON *body, bool chat, sy_gen_params *p, int64_t *keep_alive,
                                sy_api_error *e) {
    uint32_t num_ctx = 0;
    if (refuse_unsupported(body, e) != 0 || parse_keep_alive(body, keep_alive, e) != 0 ||
        parse_options(body, p, &num_ctx, e) != 0)
        return -1;
    if (!chat) {
        const char *prompt = NULL, *system = NULL;
        bool raw = false;
        if (sy_json_get_string(body, NULL, "prompt", &prompt, NULL, e) != 0 ||
            sy_json_get_string(body, NULL, "system", &system, NULL, e) != 0 ||
            sy_json_get_bool(body, NULL, "raw", &raw, NULL, e) != 0)
            return -1;
        return 0;
    }
    sy_api_messages messages;
    memset(&messages, 0, sizeof messages);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    int rc = msgs != NULL && !cJSON_IsNull(msgs) ? sy_api_parse_messages(msgs, "messages", &messages, e) : 0;
    sy_api_messages_free(&messages);
    if (rc == 0) { /* tools, tool history and think */
        sy_api_chat tools;
        sy_api_chat_init(&tools);
        rc = sy_api_chat_from_ollama(body, &tools, e);
        sy_api_chat_free(&tools);
    }
    return rc;
}

/* keep_alive for the other Ollama routes (api/embeddings.c). */
int sy_api_ollama_keep_alive(const cJSON *body, int64_t *ttl, sy_api_error *e) { return parse_keep_alive(body, ttl, e); }
void sy_api_ollama_apply_keep_alive(sy_http_request *r, const char *model_name, int64_t ttl) {
    apply_keep_alive(r, model_name, ttl);
}
