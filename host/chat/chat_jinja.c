/* A chat request through a model's Jinja template, prepared the way transformers' apply_chat_template does. */
#include "chat/chat_jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_jinja_internal.h"

#define COMPILE_ARENA_LIMIT ((size_t)256 << 20)
#define RENDER_ARENA_LIMIT ((size_t)512 << 20)
#define MAX_JSON_DEPTH 128

sy_chat_jinja *sy_chat_jinja_compile(const char *source, size_t len, char *err, size_t err_size) {
    if (source == NULL) {
        snprintf(err, err_size, "chat template: no template text");
        return NULL;
    }
    if (len > SY_CHAT_JINJA_MAX_SOURCE) {
        snprintf(err, err_size, "chat template: %zu bytes, more than the %zu accepted", len, SY_CHAT_JINJA_MAX_SOURCE);
        return NULL;
    }
    if (memchr(source, '\0', len) != NULL) {
        snprintf(err, err_size, "chat template: the text holds a NUL byte");
        return NULL;
    }
    sy_chat_jinja *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, err_size, "chat template: out of memory");
        return NULL;
    }
    jj_arena_init(&t->arena, COMPILE_ARENA_LIMIT);
    t->root = jj_parse(t, source, len, err, err_size);
    if (t->root == NULL) {
        sy_chat_jinja_free(t);
        return NULL;
    }
    return t;
}

void sy_chat_jinja_free(sy_chat_jinja *t) {
    if (t == NULL) return;
    jj_arena_free(&t->arena);
    free(t);
}

/* cJSON -> value, as json.loads gives it to transformers (integral numbers as int; cJSON keeps no other trace) */
static jj_value from_json(jj_render *r, const cJSON *j, int depth) {
    if (depth > MAX_JSON_DEPTH) jj_fail(r, "the request nests deeper than %d levels", MAX_JSON_DEPTH);
    if (cJSON_IsNull(j)) return jj_none();
    if (cJSON_IsBool(j)) return jj_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9007199254740992.0) return jj_int((int64_t)d);
        return jj_float(d);
    }
    if (cJSON_IsString(j)) return jj_str(j->valuestring, strlen(j->valuestring));
    if (cJSON_IsArray(j)) {
        jj_list *l = jj_list_new(r, (size_t)cJSON_GetArraySize(j));
        const cJSON *c;
        cJSON_ArrayForEach(c, j) jj_list_push(r, l, from_json(r, c, depth + 1));
        return jj_list_v(l);
    }
    if (cJSON_IsObject(j)) {
        jj_dict *d = jj_dict_new(r, (size_t)cJSON_GetArraySize(j));
        const cJSON *c;
        cJSON_ArrayForEach(c, j) {
            if (c->string == NULL) continue;
            jj_dict_set(r, d, jj_str(c->string, strlen(c->string)), from_json(r, c, depth + 1));
        }
        return jj_dict_v(d);
    }
    jj_fail(r, "the request holds a value of an unknown JSON type");
}

/* A message as transformers hands it over: keys whose value is null dropped (_normalize_chat_messages), then the
 * reasoning aliased (_alias_reasoning_fields): {"thinking": R, **message, "reasoning_content": R}. */
static jj_value prepare_message(jj_render *r, const cJSON *m, size_t index) {
    if (!cJSON_IsObject(m)) jj_fail(r, "messages[%zu] must be an object", index);
    jj_dict *d = jj_dict_new(r, (size_t)cJSON_GetArraySize(m) + 2);
    const cJSON *c;
    cJSON_ArrayForEach(c, m) {
        if (c->string == NULL || cJSON_IsNull(c)) continue;
        jj_dict_set(r, d, jj_str(c->string, strlen(c->string)), from_json(r, c, 2));
    }
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    jj_value *reasoning = NULL;
    for (size_t k = 0; k < 3 && reasoning == NULL; k++) reasoning = jj_dict_gets(d, fields[k], strlen(fields[k]));
    if (reasoning == NULL) return jj_dict_v(d);
    jj_value rv = *reasoning;
    jj_dict *out = jj_dict_new(r, d->n + 2);
    jj_dict_set(r, out, jj_cstr("thinking"), rv);
    for (size_t i = 0; i < d->n; i++) jj_dict_set(r, out, d->keys[i], d->vals[i]);
    jj_dict_set(r, out, jj_cstr("reasoning_content"), rv);
    return jj_dict_v(out);
}

static void bind_request(jj_render *r, jj_frame *vars, const cJSON *request) {
    if (!cJSON_IsObject(request)) jj_fail(r, "the request must be a JSON object");
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(request, "messages");
    if (!cJSON_IsArray(messages)) jj_fail(r, "messages must be an array of messages");
    jj_list *msgs = jj_list_new(r, (size_t)cJSON_GetArraySize(messages));
    const cJSON *m;
    size_t i = 0;
    cJSON_ArrayForEach(m, messages) jj_list_push(r, msgs, prepare_message(r, m, i++));
    /* special tokens first: chat_template_kwargs override them, as in transformers */
    static const char *const special[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                          "sep_token", "cls_token", "mask_token"};
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(request, special[k]);
        if (s == NULL || cJSON_IsNull(s)) continue;
        if (!cJSON_IsString(s)) jj_fail(r, "%s must be a string", special[k]);
        jj_frame_set(r, vars, special[k], strlen(special[k]), jj_str(s->valuestring, strlen(s->valuestring)));
    }
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(request, "chat_template_kwargs");
    if (kwargs != NULL && !cJSON_IsNull(kwargs)) {
        if (!cJSON_IsObject(kwargs)) jj_fail(r, "chat_template_kwargs must be an object");
        const cJSON *c;
        cJSON_ArrayForEach(c, kwargs) {
            if (c->string == NULL) continue;
            if (strcmp(c->string, "messages") == 0 || strcmp(c->string, "tools") == 0 ||
                strcmp(c->string, "documents") == 0 || strcmp(c->string, "add_generation_prompt") == 0)
                jj_fail(r, "chat_template_kwargs cannot set '%s' (it is a field of the request)", c->string);
            size_t n = strlen(c->string);
            char *name = jj_ralloc(r, n + 1);
            memcpy(name, c->string, n + 1);
            jj_frame_set(r, vars, name, n, from_json(r, c, 1));
        }
    }
    jj_frame_set(r, vars, "messages", 8, jj_list_v(msgs));
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(request, "tools");
    jj_frame_set(r, vars, "tools", 5, tools == NULL ? jj_none() : from_json(r, tools, 1));
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(request, "documents");
    jj_frame_set(r, vars, "documents", 9, docs == NULL ? jj_none() : from_json(r, docs, 1));
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(request, "add_generation_prompt");
    if (agp != NULL && !cJSON_IsBool(agp) && !cJSON_IsNull(agp)) jj_fail(r, "add_generation_prompt must be a boolean");
    jj_frame_set(r, vars, "add_generation_prompt", 21, jj_bool(cJSON_IsTrue(agp)));
}

char *sy_chat_jinja_apply(const sy_chat_jinja *t, const cJSON *request, const sy_chat_jinja_options *options,
                          size_t *len, char *err, size_t err_size) {
    sy_chat_jinja_options dflt = {0};
    if (options == NULL) options = &dflt;
    if (len) *len = 0;
    if (err_size > 0) err[0] = '\0';
    jj_render *r = calloc(1, sizeof *r);
    sy_buf *out = calloc(1, sizeof *out);
    if (r == NULL || out == NULL) {
        free(r);
        free(out);
        snprintf(err, err_size, "chat template: out of memory");
        return NULL;
    }
    sy_buf_init(out);
    size_t max_output = options->limits.max_output_bytes ? options->limits.max_output_bytes : SY_CHAT_JINJA_DEFAULT_MAX_OUTPUT;
    jj_arena_init(&r->arena, RENDER_ARENA_LIMIT > 4 * max_output ? RENDER_ARENA_LIMIT : 4 * max_output);
    r->out = out;
    r->max_output = max_output;
    r->max_steps = options->limits.max_steps ? options->limits.max_steps : SY_CHAT_JINJA_DEFAULT_MAX_STEPS;
    r->max_depth = options->limits.max_depth ? options->limits.max_depth : SY_CHAT_JINJA_DEFAULT_MAX_DEPTH;
    r->err = err;
    r->err_size = err_size;
    r->line = 0;
    if (options->now_set) {
        r->now_unix = options->now_unix;
        r->now_utc = true;
    } else {
        const char *env = getenv("SY_CHAT_TEMPLATE_NOW");
        char *end = NULL;
        long long v = env ? strtoll(env, &end, 10) : 0;
        if (env && *env && end && *end == '\0') {
            r->now_unix = v;
            r->now_utc = true;
        } else {
            r->now_unix = (int64_t)time(NULL);
            r->now_utc = false;
        }
    }
    char *text = NULL;
    char stack_mark;
    r->stack_base = &stack_mark;
    if (setjmp(r->fail) == 0) {
        jj_frame *builtins = jj_frame_new(r, NULL);
        jj_install_globals(r, builtins);
        r->globals = jj_frame_new(r, builtins);
        bind_request(r, r->globals, request);
        r->line = 1;
        jj_render_template(r, t);
        if (len) *len = out->len;
        text = sy_buf_take(out);
    } else {
        jj_render_cleanup(r);
        if (err_size > 0 && err[0] == '\0') snprintf(err, err_size, "chat template: rendering failed");
    }
    sy_buf_free(out);
    free(out);
    jj_arena_free(&r->arena);
    free(r);
    return text;
}

char *sy_chat_jinja_render(const char *source, size_t source_len, const cJSON *request,
                           const sy_chat_jinja_options *options, size_t *len, char *err, size_t err_size) {
    sy_chat_jinja *t = sy_chat_jinja_compile(source, source_len, err, err_size);
    if (t == NULL) return NULL;
    char *text = sy_chat_jinja_apply(t, request, options, len, err, err_size);
    sy_chat_jinja_free(t);
    return text;
}
