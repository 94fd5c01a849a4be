/* A chat request through the requested model's own Jinja template (or a built-in format where it has none). */
#include "api/chat_prompt.h"

#include "api/prompt_budget.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "api/context.h"
#include "base/log.h"
#include "base/util.h"
#include "chat/chat_jinja.h"

/* ------------------------------------------------------------------------------------------------------------
 * Compiled templates, shared by every request of every model with the same template text. Compiled templates
 * are immutable, so a request renders one without a lock; an entry is freed only when no request holds it. */

#define CACHE_SLOTS 16

typedef struct cache_entry {
    uint64_t hash;
    size_t len;
    sy_chat_jinja *tpl; /* NULL: the text does not compile (err says why) */
    char err[256];
    unsigned refs;
    uint64_t last_use;
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry cache[CACHE_SLOTS];
static uint64_t cache_clock;

/* The compiled template for text (refs taken), or NULL with err set when it does not compile. */
static cache_entry *cache_get(const char *text, size_t len) {
    uint64_t h = XXH64(text, len, 0x6a696e6a61ull);
    pthread_mutex_lock(&cache_lock);
    cache_entry *e = NULL;
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        if ((cache[i].tpl != NULL || cache[i].err[0]) && cache[i].hash == h && cache[i].len == len) {
            e = &cache[i];
            break;
        }
    if (e == NULL) {
        /* compile outside the lock would allow two compiles of one text; templates compile in well under a
         * millisecond, so simplicity wins */
        cache_entry *victim = NULL;
        for (size_t i = 0; i < CACHE_SLOTS; i++) {
            if (cache[i].refs != 0) continue;
            if (victim == NULL || cache[i].last_use < victim->last_use) victim = &cache[i];
        }
        if (victim == NULL) {
            pthread_mutex_unlock(&cache_lock);
            return NULL; /* every slot in use: the caller compiles a private copy */
        }
        sy_chat_jinja_free(victim->tpl);
        memset(victim, 0, sizeof *victim);
        victim->hash = h;
        victim->len = len;
        victim->tpl = sy_chat_jinja_compile(text, len, victim->err, sizeof victim->err);
        if (victim->tpl == NULL && victim->err[0] == '\0') snprintf(victim->err, sizeof victim->err, "does not compile");
        e = victim;
    }
    e->refs++;
    e->last_use = ++cache_clock;
    pthread_mutex_unlock(&cache_lock);
    return e;
}

static void cache_put(cache_entry *e) {
    pthread_mutex_lock(&cache_lock);
    e->refs--;
    pthread_mutex_unlock(&cache_lock);
}

/* ------------------------------------------------------------------------------------------------------------
 * Which template */

#define MAX_TEMPLATE_FILE ((size_t)1 << 20)

static char *read_template_file(const char *path, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_size, "chat_template_file %s: %s", path, strerror(errno));
        return NULL;
    }
    sy_buf b;
    sy_buf_init(&b);
    bool ok = sy_buf_read(&b, f, MAX_TEMPLATE_FILE);
    fclose(f);
    if (!ok || b.len > MAX_TEMPLATE_FILE) {
        snprintf(err, err_size, "chat_template_file %s: %s", path, ok ? "larger than 1 MiB" : "read error");
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

static const char *named_template(const sy_model_info *info, const char *name) {
    for (uint32_t i = 0; i < info->n_chat_templates; i++)
        if (info->chat_template_names[i] != NULL && strcmp(info->chat_template_names[i], name) == 0)
            return info->chat_template_texts[i];
    return NULL;
}

static bool is_builtin_name(const char *name) {
    sy_chat_format f;
    return name != NULL && sy_chat_format_from_name(name, &f) == 0;
}

/* The Jinja text for a model (malloc'd), NULL when a built-in format renders it; -1 on an unreadable file. */
static int choose_template(sy_http_request *r, const sy_api_model *m, bool with_tools, char **out, char *err,
                           size_t err_size) {
    *out = NULL;
    const char *override = m->lease ? sy_model_lease_chat_template(m->lease) : NULL;
    const char *file = m->lease ? sy_model_lease_chat_template_file(m->lease) : NULL;
    if (file == NULL && r != NULL) {
        sy_api_context *srv = sy_api_ctx(r);
        const sy_config *cfg = sy_api_config_acquire(srv);
        const sy_config_model *cm = cfg ? sy_config_find_model(cfg, m->name) : NULL;
        char *text = NULL;
        if (cm != NULL && cm->chat_template_file != NULL) {
            text = read_template_file(cm->chat_template_file, err, err_size);
            if (text == NULL) {
                sy_api_config_release(srv, cfg);
                return -1;
            }
        }
        sy_api_config_release(srv, cfg);
        if (text != NULL) {
            *out = text;
            return 0;
        }
    } else if (file != NULL) {
        *out = read_template_file(file, err, err_size);
        return *out ? 0 : -1;
    }
    const sy_model_info *info = &m->lm->info;
    if (is_builtin_name(override)) return 0;
    const char *text = NULL;
    if (override != NULL) {
        text = named_template(info, override);
        if (text == NULL && strcmp(override, "default") != 0) {
            snprintf(err, err_size, "chat_template = %s: the model has no template of that name (built-in ones: chatml, "
                                    "llama3, llama2, raw)", override);
            return -1;
        }
    }
    if (text == NULL && with_tools) text = named_template(info, "tool_use");
    if (text == NULL) text = info->chat_template;
    if (text == NULL || text[0] == '\0') return 0;
    *out = sy_strdup(text);
    return 0;
}

char *sy_api_model_template_text(sy_http_request *r, const sy_api_model *m, bool with_tools) {
    char err[512];
    char *text = NULL;
    if (choose_template(r, m, with_tools, &text, err, sizeof err) != 0) return NULL;
    return text;
}

/* ------------------------------------------------------------------------------------------------------------
 * The request the template sees */

static char *token_text(const sy_loaded_model *lm, int32_t token) {
    if (token < 0) return NULL;
    sy_buf b;
    sy_buf_init(&b);
    sy_api_token_text(lm, token, &b, NULL);
    if (b.len == 0) {
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

static cJSON *template_request(const sy_api_model *m, const sy_api_chat_request *q) {
    cJSON *req = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    const cJSON *src = q->messages;
    const cJSON *it = cJSON_IsArray(src) ? src->child : NULL;
    for (size_t i = 0; i < q->n_items; i++, it = it ? it->next : NULL) {
        cJSON *msg = cJSON_IsObject(it) ? cJSON_Duplicate(it, 1) : cJSON_CreateObject();
        /* the checked role ("developer" read as "system") and the text contents joined */
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "role");
        cJSON_AddStringToObject(msg, "role", q->items[i].role);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (content == NULL || !cJSON_IsNull(content)) {
            char *c = sy_xmalloc(q->items[i].content_len + 1);
            memcpy(c, q->items[i].content, q->items[i].content_len);
            c[q->items[i].content_len] = '\0';
            if (content != NULL) cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(c));
            else cJSON_AddStringToObject(msg, "content", c);
            free(c);
        }
        cJSON_AddItemToArray(msgs, msg);
    }
    if (q->tools != NULL && !cJSON_IsNull(q->tools)) cJSON_AddItemToObject(req, "tools", cJSON_Duplicate(q->tools, 1));
    cJSON_AddBoolToObject(req, "add_generation_prompt", q->add_generation_prompt);
    char *bos = token_text(m->lm, m->lm->info.bos_token);
    char *eos = token_text(m->lm, m->lm->info.eos_token);
    if (bos) cJSON_AddStringToObject(req, "bos_token", bos);
    if (eos) cJSON_AddStringToObject(req, "eos_token", eos);
    free(bos);
    free(eos);
    cJSON *kwargs = cJSON_IsObject(q->chat_template_kwargs) ? cJSON_Duplicate(q->chat_template_kwargs, 1)
                                                            : cJSON_CreateObject();
    if (q->reasoning_effort != NULL && cJSON_GetObjectItemCaseSensitive(kwargs, "reasoning_effort") == NULL)
        cJSON_AddStringToObject(kwargs, "reasoning_effort", q->reasoning_effort);
    cJSON_AddItemToObject(req, "chat_template_kwargs", kwargs);
    return req;
}

static int render_builtin(const sy_api_model *m, const char *override, const char *jinja, const sy_api_chat_request *q,
                          char **text, size_t *len, sy_api_error *e) {
    char err[512] = "";
    char *bos = token_text(m->lm, m->lm->info.bos_token);
    char *eos = token_text(m->lm, m->lm->info.eos_token);
    sy_chat_template t;
    int rc = sy_chat_template_init(&t, is_builtin_name(override) ? override : NULL, jinja, bos, eos, err, sizeof err);
    free(bos);
    free(eos);
    if (rc != 0) return sy_api_fail(e, 500, "chat_template_error", NULL, "model %s: %s", m->name, err);
    *text = sy_chat_render(&t, q->items, q->n_items, q->add_generation_prompt, len, err, sizeof err);
    sy_chat_template_free(&t);
    if (*text == NULL) return sy_api_fail(e, 400, "invalid_messages", "messages", "%s", err);
    return 0;
}

int sy_api_render_chat_request(sy_http_request *r, const sy_api_model *m, const sy_api_chat_request *q, char **text,
                               size_t *len, sy_api_error *e) {
    *text = NULL;
    if (sy_api_refuse_embedding_model(m, e) != 0) return -1;
    /* a conversation whose text alone cannot fit the context is refused before a copy of it is rendered */
    if (q->items != NULL && sy_api_check_messages_bytes(m->lm, m->name, q->items, q->n_items, e) != 0) return -1;
    if (q->items == NULL && q->messages != NULL) {
        uint64_t total = 0;
        const cJSON *msg, *part;
        cJSON_ArrayForEach(msg, q->messages) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
            if (cJSON_IsString(c)) total += strlen(c->valuestring);
            else cJSON_ArrayForEach(part, c) {
                    const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                    if (cJSON_IsString(t)) total += strlen(t->valuestring);
                }
        }
        if (sy_api_check_prompt_bytes(m->lm, m->name, total, "messages", e) != 0) return -1;
    }
    char err[1024] = "";
    char *jinja = NULL;
    bool with_tools = cJSON_IsArray(q->tools) && cJSON_GetArraySize(q->tools) > 0;
    if (choose_template(r, m, with_tools, &jinja, err, sizeof err) != 0) {
        sy_log(SY_LOG_ERROR, "model %s: %s", m->name, err);
        return sy_api_fail(e, 500, "chat_template_error", NULL, "model %s: %s", m->name, err);
    }
    const char *override = m->lease ? sy_model_lease_chat_template(m->lease) : NULL;
    if (jinja == NULL) return render_builtin(m, override, m->lm->info.chat_template, q, text, len, e);

    size_t jlen = strlen(jinja);
    cache_entry *ce = cache_get(jinja, jlen);
    sy_chat_jinja *private_tpl = NULL;
    const sy_chat_jinja *tpl = ce ? ce->tpl : NULL;
    if (ce == NULL) {
        private_tpl = sy_chat_jinja_compile(jinja, jlen, err, sizeof err);
        tpl = private_tpl;
    } else if (tpl == NULL) {
        snprintf(err, sizeof err, "%s", ce->err);
    }
    if (tpl == NULL) {
        /* a template this engine cannot compile: the built-in format recognised from it, with a warning */
        static _Atomic int warned;
        if (warned++ < 8) sy_log(SY_LOG_WARN, "model %s: its chat template does not compile (%s); using the built-in "
                                              "format recognised from it", m->name, err);
        if (ce) cache_put(ce);
        int rc = render_builtin(m, NULL, jinja, q, text, len, e);
        free(jinja);
        return rc;
    }
    cJSON *req = template_request(m, q);
    *text = sy_chat_jinja_apply(tpl, req, NULL, len, err, sizeof err);
    cJSON_Delete(req);
    if (ce) cache_put(ce);
    sy_chat_jinja_free(private_tpl);
    free(jinja);
    if (*text == NULL) {
        /* the template refused the conversation (its raise_exception), or it failed on this input */
        return sy_api_fail(e, 400, "invalid_messages", "messages", "model %s: %s", m->name, err);
    }
    return 0;
}

int sy_api_render_chat(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                       bool add_generation_prompt, char **text, size_t *len, sy_api_error *e) {
    sy_api_chat_request q = {.items = messages, .n_items = n, .add_generation_prompt = add_generation_prompt};
    return sy_api_render_chat_request(r, m, &q, text, len, e);
}
