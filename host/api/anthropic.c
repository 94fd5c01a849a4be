/* The Anthropic Messages API: /v1/messages (SSE events or one message) and /v1/messages/count_tokens. */
#include "api/anthropic.h"
#include "api/chat_tokens.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/constraint.h"
#include "api/context.h"
#include "api/generation.h"
#include "api/lease.h"
#include "api/messages.h"
#include "base/log.h"
#include "base/util.h"

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static bool absent(const cJSON *v) { return v == NULL || cJSON_IsNull(v); }

/* ---- the request as a chat --------------------------------------------------------------------------------- */

/* The text of a string or of an array of text blocks. */
static int text_of(const cJSON *v, const char *field, sy_buf *out, sy_api_error *e) {
    if (cJSON_IsString(v)) {
        sy_buf_puts(out, v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v)) return sy_api_fail(e, 400, "invalid_type", field, "%s must be a string or text blocks", field);
    const cJSON *b;
    size_t i = 0;
    cJSON_ArrayForEach(b, v) {
        const cJSON *type = get(b, "type"), *text = get(b, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text))
            return sy_api_fail(e, 400, "invalid_value", field, "%s[%zu] must be a text block ({\"type\": \"text\", "
                               "\"text\": ...})", field, i);
        if (out->len > 0 && i > 0) sy_buf_puts(out, "\n");
        sy_buf_puts(out, text->valuestring);
        i++;
    }
    return 0;
}

static cJSON *tool_result_message(const cJSON *b, const char *field, sy_api_error *e) {
    const cJSON *id = get(b, "tool_use_id");
    if (!cJSON_IsString(id)) {
        sy_api_fail(e, 400, "invalid_value", field, "%s.tool_use_id must be a string", field);
        return NULL;
    }
    sy_buf text;
    sy_buf_init(&text);
    const cJSON *content = get(b, "content");
    char sub[160];
    snprintf(sub, sizeof sub, "%s.content", field);
    if (!absent(content) && text_of(content, sub, &text, e) != 0) {
        sy_buf_free(&text);
        return NULL;
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    if (cJSON_IsTrue(get(b, "is_error"))) {
        sy_buf err;
        sy_buf_init(&err);
        sy_buf_printf(&err, "Error: %s", text.data ? text.data : "");
        cJSON_AddStringToObject(m, "content", err.data);
        sy_buf_free(&err);
    } else {
        cJSON_AddStringToObject(m, "content", text.data ? text.data : "");
    }
    sy_buf_free(&text);
    return m;
}

/* One Messages message -> one or more OpenAI messages (tool results become tool messages, before the text). */
static int convert_message(const cJSON *msg, size_t i, cJSON *out, sy_api_error *e) {
    char field[96];
    snprintf(field, sizeof field, "messages[%zu]", i);
    const cJSON *role = get(msg, "role");
    if (!cJSON_IsObject(msg) || !cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") != 0 && strcmp(role->valuestring, "assistant") != 0))
        return sy_api_fail(e, 400, "invalid_value", field, "%s.role must be \"user\" or \"assistant\"", field);
    bool user = strcmp(role->valuestring, "user") == 0;
    const cJSON *content = get(msg, "content");
    snprintf(field, sizeof field, "messages[%zu].content", i);
    sy_buf text, thinking;
    sy_buf_init(&text);
    sy_buf_init(&thinking);
    cJSON *calls = NULL;
    int rc = 0;
    if (cJSON_IsString(content)) {
        sy_buf_puts(&text, content->valuestring);
    } else if (cJSON_IsArray(content)) {
        const cJSON *b;
        size_t k = 0;
        char bf[120];
        cJSON_ArrayForEach(b, content) {
            snprintf(bf, sizeof bf, "%s[%zu]", field, k++);
            const cJSON *type = get(b, "type");
            const char *t = cJSON_IsString(type) ? type->valuestring : "";
            if (strcmp(t, "text") == 0 && cJSON_IsString(get(b, "text"))) {
                sy_buf_puts(&text, get(b, "text")->valuestring);
            } else if (strcmp(t, "tool_result") == 0 && user) {
                cJSON *m = tool_result_message(b, bf, e);
                if (m == NULL) {
                    rc = -1;
                    break;
                }
                cJSON_AddItemToArray(out, m);
            } else if (strcmp(t, "tool_use") == 0 && !user) {
                const cJSON *id = get(b, "id"), *name = get(b, "name"), *input = get(b, "input");
                if (!cJSON_IsString(id) || !cJSON_IsString(name) || !(absent(input) || cJSON_IsObject(input))) {
                    rc = sy_api_fail(e, 400, "invalid_value", bf, "%s: a tool_use block needs id, name and an input "
                                     "object", bf);
                    break;
                }
                if (calls == NULL) calls = cJSON_CreateArray();
                cJSON *c = cJSON_CreateObject();
                cJSON_AddStringToObject(c, "id", id->valuestring);
                cJSON_AddStringToObject(c, "type", "function");
                cJSON *fn = cJSON_AddObjectToObject(c, "function");
                cJSON_AddStringToObject(fn, "name", name->valuestring);
                cJSON_AddItemToObject(fn, "arguments", absent(input) ? cJSON_CreateObject() : cJSON_Duplicate(input, true));
                cJSON_AddItemToArray(calls, c);
            } else if (strcmp(t, "thinking") == 0 && !user && cJSON_IsString(get(b, "thinking"))) {
                sy_buf_puts(&thinking, get(b, "thinking")->valuestring);
            } else if (strcmp(t, "redacted_thinking") == 0 && !user) {
                /* opaque to any model but the one that wrote it */
            } else {
                char shown[48];
                sy_utf8_sanitize(shown, sizeof shown, t, strlen(t));
                rc = sy_api_fail(e, 400, "invalid_value", bf, "%s: content blocks of type '%s' are not supported in %s "
                                 "messages", bf, shown, user ? "user" : "assistant");
                break;
            }
        }
    } else {
        rc = sy_api_fail(e, 400, "invalid_type", field, "%s must be a string or an array of content blocks", field);
    }
    if (rc == 0 && (text.len > 0 || calls != NULL || thinking.len > 0 ||
                    (cJSON_IsString(content) && !user))) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", user ? "user" : "assistant");
        cJSON_AddStringToObject(m, "content", text.data ? text.data : "");
        if (thinking.len > 0) cJSON_AddStringToObject(m, "reasoning_content", thinking.data);
        if (calls != NULL) cJSON_AddItemToObject(m, "tool_calls", calls), calls = NULL;
        cJSON_AddItemToArray(out, m);
    }
    cJSON_Delete(calls);
    sy_buf_free(&text);
    sy_buf_free(&thinking);
    return rc;
}

int sy_api_anthropic_chat(const cJSON *body, sy_api_chat *c, sy_api_error *e) {
    const cJSON *msgs = get(body, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return sy_api_fail(e, 400, "invalid_value", "messages", "messages must be a non-empty array");
    if (cJSON_GetArraySize(msgs) > SY_API_MAX_MESSAGES)
        return sy_api_fail(e, 400, "invalid_value", "messages", "messages holds more than %d messages",
                           SY_API_MAX_MESSAGES);
    cJSON *out = cJSON_CreateArray();
    const cJSON *system = get(body, "system");
    if (!absent(system)) {
        sy_buf s;
        sy_buf_init(&s);
        if (text_of(system, "system", &s, e) != 0) {
            sy_buf_free(&s);
            cJSON_Delete(out);
            return -1;
        }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", s.data ? s.data : "");
        cJSON_AddItemToArray(out, m);
        sy_buf_free(&s);
    }
    const cJSON *msg;
    size_t i = 0;
    cJSON_ArrayForEach(msg, msgs) {
        if (convert_message(msg, i++, out, e) != 0) {
            cJSON_Delete(out);
            return -1;
        }
    }
    /* Tools: {name, description, input_schema}. */
    cJSON *tools = NULL;
    const cJSON *ts = get(body, "tools");
    if (!absent(ts)) {
        if (!cJSON_IsArray(ts)) {
            cJSON_Delete(out);
            return sy_api_fail(e, 400, "invalid_type", "tools", "tools must be an array");
        }
        tools = cJSON_CreateArray();
        const cJSON *t;
        size_t k = 0;
        cJSON_ArrayForEach(t, ts) {
            char field[64];
            snprintf(field, sizeof field, "tools[%zu]", k++);
            const cJSON *type = get(t, "type"), *name = get(t, "name"), *schema = get(t, "input_schema");
            if (!absent(type) && !(cJSON_IsString(type) && strcmp(type->valuestring, "custom") == 0)) {
                cJSON_Delete(out);
                cJSON_Delete(tools);
                return sy_api_fail(e, 400, "invalid_value", field, "%s: server tools (type '%s') are not supported; "
                                   "give client tools with name and input_schema", field,
                                   cJSON_IsString(type) ? type->valuestring : "?");
            }
            if (!cJSON_IsString(name) || !cJSON_IsObject(schema)) {
                cJSON_Delete(out);
                cJSON_Delete(tools);
                return sy_api_fail(e, 400, "invalid_value", field, "%s needs name and an input_schema object", field);
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            if (cJSON_IsString(get(t, "description")))
                cJSON_AddStringToObject(fn, "description", get(t, "description")->valuestring);
            cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, true));
            cJSON_AddItemToArray(tools, o);
        }
    }
    const cJSON *tc = get(body, "tool_choice");
    if (!absent(tc)) {
        const cJSON *type = get(tc, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (strcmp(t, "auto") == 0) c->choice = SY_TOOL_CHOICE_AUTO;
        else if (strcmp(t, "any") == 0) c->choice = SY_TOOL_CHOICE_REQUIRED;
        else if (strcmp(t, "none") == 0) c->choice = SY_TOOL_CHOICE_NONE;
        else if (strcmp(t, "tool") == 0 && cJSON_IsString(get(tc, "name")) &&
                 strlen(get(tc, "name")->valuestring) <= SY_API_MAX_TOOL_NAME) {
            c->choice = SY_TOOL_CHOICE_NAMED;
            snprintf(c->named, sizeof c->named, "%s", get(tc, "name")->valuestring);
        } else {
            cJSON_Delete(out);
            cJSON_Delete(tools);
            return sy_api_fail(e, 400, "invalid_value", "tool_choice",
                               "tool_choice.type must be \"auto\", \"any\", \"none\" or \"tool\" (with a name)");
        }
        if (cJSON_IsTrue(get(tc, "disable_parallel_tool_use"))) c->parallel = false;
    }
    const cJSON *th = get(body, "thinking");
    if (!absent(th)) {
        const cJSON *type = get(th, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (strcmp(t, "enabled") != 0 && strcmp(t, "disabled") != 0) {
            cJSON_Delete(out);
            cJSON_Delete(tools);
            return sy_api_fail(e, 400, "invalid_value", "thinking", "thinking.type must be \"enabled\" or \"disabled\"");
        }
        c->think = strcmp(t, "enabled") == 0;
        if (c->kwargs == NULL) c->kwargs = cJSON_CreateObject();
        cJSON_AddBoolToObject(c->kwargs, "enable_thinking", c->think == 1);
    }
    return sy_api_chat_set(c, out, tools, e);
}

/* ---- the request ----------------------------------------------------------------------------------------- */

static const char *const KNOWN_FIELDS[] = {"model", "messages", "max_tokens", "system", "tools", "tool_choice",
                                           "stop_sequences", "temperature", "top_p", "top_k", "stream", "thinking",
                                           /* hints that change nothing here: accepted, not acted on */
                                           "metadata", "service_tier", "cache_control", "speed", "inference_geo",
                                           "user_profile_id", "workspace_id", "diagnostics"};

static int check_fields(const cJSON *body, bool count_only, sy_api_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, body) {
        bool known = false;
        for (size_t i = 0; i < sizeof KNOWN_FIELDS / sizeof *KNOWN_FIELDS; i++)
            if (strcmp(f->string, KNOWN_FIELDS[i]) == 0) known = true;
        if (!known) {
            char shown[64];
            sy_utf8_sanitize(shown, sizeof shown, f->string, strlen(f->string));
            return sy_api_fail(e, 400, "invalid_value", shown, "%s: this field is not supported", shown);
        }
    }
    (void)count_only;
    return 0;
}

typedef struct anthropic_request {
    char id[64];
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    sy_api_chat chat;
    sy_tool_stream out;
    bool out_started;
    char *stops[SY_GEN_MAX_STOP_STRINGS]; /* copies, to name the one that matched */
    size_t n_stops;
    uint32_t input_tokens, cached_tokens;
    /* the stream */
    bool sent_start;
    int block;        /* index of the open block, -1 none */
    int block_kind;   /* 0 none, 1 thinking, 2 text, 3 tool_use */
    size_t block_call;
    int n_blocks;
    sy_buf *sse;      /* where the callback writes, during a format call */
} anthropic_request;

static void anthropic_request_free(void *p) {
    anthropic_request *q = p;
    if (q == NULL) return;
    sy_api_chat_free(&q->chat);
    if (q->out_started) sy_tool_stream_free(&q->out);
    for (size_t i = 0; i < q->n_stops; i++) free(q->stops[i]);
    free(q);
}

static int parse_params(const cJSON *body, anthropic_request *q, sy_gen_params *p, bool *stream, sy_api_error *e) {
    *p = sy_gen_params_defaults();
    bool present;
    int64_t max_tokens = 0;
    if (sy_json_get_integer(body, NULL, "max_tokens", 1, INT32_MAX, &max_tokens, &present, e) != 0) return -1;
    if (!present) return sy_api_fail(e, 400, "invalid_value", "max_tokens", "max_tokens: Field required");
    p->max_tokens = (uint32_t)max_tokens;
    double d;
    if (sy_json_get_number(body, NULL, "temperature", 0, 1, &d, &present, e) != 0) return -1;
    p->sampling.temperature = present ? (float)d : 1.0f; /* Anthropic's default */
    if (sy_json_get_number(body, NULL, "top_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.top_p = (float)d;
    int64_t k;
    if (sy_json_get_integer(body, NULL, "top_k", 0, 1 << 20, &k, &present, e) != 0) return -1;
    if (present) p->sampling.top_k = (uint32_t)k;
    if (sy_json_get_bool(body, NULL, "stream", stream, NULL, e) != 0) return -1;
    const cJSON *ss = get(body, "stop_sequences");
    if (!absent(ss)) {
        if (!cJSON_IsArray(ss)) return sy_api_fail(e, 400, "invalid_type", "stop_sequences", "stop_sequences must be an array of strings");
        const cJSON *s;
        cJSON_ArrayForEach(s, ss) {
            if (!cJSON_IsString(s) || s->valuestring[0] == '\0')
                return sy_api_fail(e, 400, "invalid_value", "stop_sequences", "stop_sequences must hold non-empty strings");
            if (q->n_stops >= SY_GEN_MAX_STOP_STRINGS)
                return sy_api_fail(e, 400, "invalid_value", "stop_sequences", "stop_sequences may hold at most %d strings",
                                   SY_GEN_MAX_STOP_STRINGS);
            q->stops[q->n_stops] = sy_strdup(s->valuestring);
            p->stop[q->n_stops] = q->stops[q->n_stops];
            q->n_stops++;
        }
        p->n_stop = q->n_stops;
    }
    p->sampling.seed = sy_api_random_seed();
    return 0;
}

/* Anthropic's tool ids: our call ids with its prefix. */
static void tool_id(const char *call_id, char *out, size_t n) {
    const char *rest = call_id && strncmp(call_id, "call_", 5) == 0 ? call_id + 5 : (call_id ? call_id : "");
    snprintf(out, n, "toolu_%s", rest);
}

static const char *stop_reason(const anthropic_request *q, const sy_api_event *ev, bool calls) {
    if (strcmp(ev->finish_reason, "length") == 0) return "max_tokens";
    if (calls) return "tool_use";
    if (ev->stop_index >= 0 && (size_t)ev->stop_index < q->n_stops) return "stop_sequence";
    return "end_turn";
}

static cJSON *usage_json(const anthropic_request *q, const sy_api_event *ev, bool with_input) {
    cJSON *u = cJSON_CreateObject();
    if (with_input) {
        cJSON_AddNumberToObject(u, "input_tokens", ev ? ev->usage.prompt_tokens - ev->usage.cached_tokens
                                                      : q->input_tokens - q->cached_tokens);
        cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
        cJSON_AddNumberToObject(u, "cache_read_input_tokens", ev ? ev->usage.cached_tokens : q->cached_tokens);
    }
    cJSON_AddNumberToObject(u, "output_tokens", ev ? ev->usage.completion_tokens : 0);
    return u;
}

/* ---- streaming ------------------------------------------------------------------------------------------- */

static void sse_event(sy_buf *out, const char *name, cJSON *json) {
    char before[64]; /* the names are Anthropic's event types: message_start, content_block_delta... */
    snprintf(before, sizeof before, "event: %s\ndata: ", name);
    sy_api_stream_json(out, before, json, "\n\n");
}

static void close_block(anthropic_request *q) {
    if (q->block < 0) return;
    cJSON *o = cJSON_CreateObject();
    if (q->block_kind == 1) {
        /* Thinking blocks carry a signature in Anthropic's API; this server signs nothing. */
        cJSON_AddStringToObject(o, "type", "content_block_delta");
        cJSON_AddNumberToObject(o, "index", q->block);
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(d, "type", "signature_delta");
        cJSON_AddStringToObject(d, "signature", "");
        sse_event(q->sse, "content_block_delta", o);
        o = cJSON_CreateObject();
    }
    cJSON_AddStringToObject(o, "type", "content_block_stop");
    cJSON_AddNumberToObject(o, "index", q->block);
    sse_event(q->sse, "content_block_stop", o);
    q->block = -1;
    q->block_kind = 0;
}

static void open_block(anthropic_request *q, int kind, cJSON *content_block) {
    close_block(q);
    q->block = q->n_blocks++;
    q->block_kind = kind;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "content_block_start");
    cJSON_AddNumberToObject(o, "index", q->block);
    cJSON_AddItemToObject(o, "content_block", content_block);
    sse_event(q->sse, "content_block_start", o);
}

static void block_delta(anthropic_request *q, const char *type, const char *key, const char *text, size_t len) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "content_block_delta");
    cJSON_AddNumberToObject(o, "index", q->block);
    cJSON *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", type);
    char *s = sy_xmalloc(len + 1);
    memcpy(s, text, len);
    s[len] = '\0';
    cJSON_AddStringToObject(d, key, s);
    free(s);
    sse_event(q->sse, "content_block_delta", o);
}

static void on_delta(void *user, const sy_tool_delta *d) {
    anthropic_request *q = user;
    switch (d->type) {
    case SY_TOOL_DELTA_REASONING:
        if (q->block_kind != 1) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "thinking");
            cJSON_AddStringToObject(b, "thinking", "");
            cJSON_AddStringToObject(b, "signature", "");
            open_block(q, 1, b);
        }
        block_delta(q, "thinking_delta", "thinking", d->text, d->len);
        break;
    case SY_TOOL_DELTA_CONTENT:
        if (q->block_kind != 2) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", "");
            open_block(q, 2, b);
        }
        block_delta(q, "text_delta", "text", d->text, d->len);
        break;
    case SY_TOOL_DELTA_CALL_START: {
        char id[64];
        tool_id(d->id, id, sizeof id);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", d->name);
        cJSON_AddObjectToObject(b, "input");
        open_block(q, 3, b);
        q->block_call = d->index;
        break;
    }
    case SY_TOOL_DELTA_CALL_ARGS:
        if (q->block_kind == 3 && q->block_call == d->index)
            block_delta(q, "input_json_delta", "partial_json", d->text, d->len);
        else
            sy_log(SY_LOG_WARN, "anthropic stream: arguments of call %zu came after its block closed", d->index);
        break;
    }
}

static void message_start(anthropic_request *q) {
    if (q->sent_start) return;
    q->sent_start = true;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "message_start");
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "id", q->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddStringToObject(m, "model", q->model);
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage_json(q, NULL, true));
    sse_event(q->sse, "message_start", o);
    cJSON *ping = cJSON_CreateObject();
    cJSON_AddStringToObject(ping, "type", "ping");
    sse_event(q->sse, "ping", ping);
}

static void sse_format(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out) {
    anthropic_request *q = state;
    q->sse = out;
    message_start(q);
    if (ev->type == SY_GEN_EVENT_TEXT) {
        sy_tool_stream_feed(&q->out, ev->text, ev->text_len, on_delta, q);
        return;
    }
    int status;
    char msg[1024];
    if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "error");
        cJSON *err = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(err, "type", status == 500 ? "api_error" : "overloaded_error");
        cJSON_AddStringToObject(err, "message", msg);
        sse_event(out, "error", o);
        return;
    }
    sy_tool_stream_finish(&q->out, on_delta, q);
    close_block(q);
    bool calls = q->out.last.n_calls > 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "message_delta");
    cJSON *d = cJSON_AddObjectToObject(o, "delta");
    const char *reason = stop_reason(q, ev, calls);
    cJSON_AddStringToObject(d, "stop_reason", reason);
    if (strcmp(reason, "stop_sequence") == 0) cJSON_AddStringToObject(d, "stop_sequence", q->stops[ev->stop_index]);
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", usage_json(q, ev, false));
    sse_event(out, "message_delta", o);
    cJSON *stop = cJSON_CreateObject();
    cJSON_AddStringToObject(stop, "type", "message_stop");
    sse_event(out, "message_stop", stop);
}

static const sy_api_stream_ops sse_ops = {sse_format, anthropic_request_free};

/* ---- one message ------------------------------------------------------------------------------------------ */

static void respond_collected(sy_http_request *r, anthropic_request *q, sy_api_gen *g) {
    sy_api_event *ev;
    while ((ev = sy_api_gen_next(g)) != NULL) {
        if (ev->type == SY_GEN_EVENT_TEXT) {
            sy_tool_stream_feed(&q->out, ev->text, ev->text_len, NULL, NULL);
            sy_api_event_free(ev);
            continue;
        }
        int status;
        char msg[1024];
        if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg)) {
            sy_http_respond_error(r, status, NULL, NULL, "%s", msg);
        } else {
            sy_tool_stream_finish(&q->out, NULL, NULL);
            const sy_chat_parse *p = &q->out.last;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "id", q->id);
            cJSON_AddStringToObject(o, "type", "message");
            cJSON_AddStringToObject(o, "role", "assistant");
            cJSON_AddStringToObject(o, "model", q->model);
            cJSON *content = cJSON_AddArrayToObject(o, "content");
            if (p->reasoning.len > 0) {
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "type", "thinking");
                cJSON_AddStringToObject(b, "thinking", p->reasoning.data);
                cJSON_AddStringToObject(b, "signature", "");
                cJSON_AddItemToArray(content, b);
            }
            if (p->content.len > 0 || p->n_calls == 0) {
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "type", "text");
                cJSON_AddStringToObject(b, "text", p->content.data ? p->content.data : "");
                cJSON_AddItemToArray(content, b);
            }
            for (size_t i = 0; i < p->n_calls; i++) {
                char id[64];
                tool_id(p->calls[i].id, id, sizeof id);
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "type", "tool_use");
                cJSON_AddStringToObject(b, "id", id);
                cJSON_AddStringToObject(b, "name", p->calls[i].name);
                cJSON_AddItemToObject(b, "input", sy_api_tool_arguments(&p->calls[i]));
                cJSON_AddItemToArray(content, b);
            }
            const char *reason = stop_reason(q, ev, p->n_calls > 0);
            cJSON_AddStringToObject(o, "stop_reason", reason);
            if (strcmp(reason, "stop_sequence") == 0) cJSON_AddStringToObject(o, "stop_sequence", q->stops[ev->stop_index]);
            else cJSON_AddNullToObject(o, "stop_sequence");
            cJSON_AddItemToObject(o, "usage", usage_json(q, ev, true));
            sy_http_respond_json(r, 200, o);
        }
        sy_api_event_free(ev);
        break;
    }
    if (ev == NULL) sy_http_respond_error(r, 499, NULL, NULL, "the client went away");
}

/* The prompt of a Messages request for its model: shared by messages and count_tokens. */
static int32_t *prepare(sy_http_request *r, const cJSON *body, anthropic_request *q, sy_api_model *m,
                        sy_gen_params *p, size_t *n_tokens, sy_api_error *e) {
    const char *model_name = NULL;
    if (sy_json_get_string(body, NULL, "model", &model_name, NULL, e) != 0) return NULL;
    if (sy_api_anthropic_chat(body, &q->chat, e) != 0) return NULL;
    if (sy_api_acquire(r, model_name, m, e) != 0) return NULL;
    snprintf(q->model, sizeof q->model, "%s", model_name);
    char *text = NULL;
    size_t len = 0;
    if (sy_api_chat_prepare(r, m, &q->chat, p, &text, &len, e) != 0) return NULL;
    /* Anthropic returns thinking blocks whatever the template calls them. */
    int32_t *tokens = sy_api_chat_prompt_tokens_json(m, text, len, q->chat.messages, n_tokens, e);
    free(text);
    return tokens;
}

void sy_api_anthropic_messages(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    anthropic_request *q = sy_xcalloc(1, sizeof *q);
    sy_api_chat_init(&q->chat);
    q->block = -1;
    sy_api_model m;
    memset(&m, 0, sizeof m);
    sy_gen_params params = sy_gen_params_defaults();
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    bool stream = false;
    sy_api_gen *g = NULL;

    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (check_fields(body, false, &e) != 0) goto fail;
    if (parse_params(body, q, &params, &stream, &e) != 0) goto fail;
    tokens = prepare(r, body, q, &m, &params, &n_tokens, &e);
    if (tokens == NULL) goto fail;
    sy_api_make_id(q->id, sizeof q->id, "msg_");
    q->input_tokens = (uint32_t)n_tokens;
    sy_tool_stream_init(&q->out, &q->chat.parse, params.sampling.seed);
    q->out_started = true;
    g = sy_api_gen_start(r, &m, tokens, n_tokens, &params, &e);
    if (g == NULL) goto fail;
    sy_api_constraint_clear(&params);
    free(tokens);
    cJSON_Delete(body);
    if (stream) {
        sy_api_respond_stream(r, "text/event-stream", g, &sse_ops, q);
        return;
    }
    respond_collected(r, q, g);
    sy_api_gen_finish(g);
    anthropic_request_free(q);
    return;

fail:
    sy_api_respond_error(r, &e);
    sy_api_constraint_clear(&params);
    sy_api_model_release(&m);
    free(tokens);
    cJSON_Delete(body);
    anthropic_request_free(q);
}

void sy_api_anthropic_count_tokens(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    anthropic_request *q = sy_xcalloc(1, sizeof *q);
    sy_api_chat_init(&q->chat);
    sy_api_model m;
    memset(&m, 0, sizeof m);
    sy_gen_params params = sy_gen_params_defaults();
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (check_fields(body, true, &e) != 0) goto fail;
    tokens = prepare(r, body, q, &m, &params, &n_tokens, &e);
    if (tokens == NULL) goto fail;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", (double)n_tokens);
    sy_http_respond_json(r, 200, o);
    sy_api_constraint_clear(&params);
    sy_api_model_release(&m);
    free(tokens);
    cJSON_Delete(body);
    anthropic_request_free(q);
    return;
fail:
    sy_api_respond_error(r, &e);
    sy_api_constraint_clear(&params);
    sy_api_model_release(&m);
    free(tokens);
    cJSON_Delete(body);
    anthropic_request_free(q);
}
