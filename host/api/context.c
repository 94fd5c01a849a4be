/* See context.h: config snapshots and API keys. */
#include "api/context.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "base/util.h"
#include "grammar/sy_grammar.h"
#include "api/prompt_budget.h"
#include "http/http_access.h"

typedef struct config_holder {
    sy_config *cfg;
    unsigned refs; /* held by requests; the current one is freed when replaced with no holder left */
    struct config_holder *next;
} config_holder;

struct sy_api_context {
    sy_server *server;
    sy_model_manager *mm;
    sy_metrics *metrics;
    pthread_mutex_t lock;
    config_holder *current;
    config_holder *retired;
    sy_grammar_cache *grammars; /* compiled response formats, schemas and GBNF of requests */
    sy_api_reload_fn reload;
    void *reload_arg;
};

void sy_api_set_reload(sy_api_context *c, sy_api_reload_fn fn, void *arg) {
    c->reload = fn;
    c->reload_arg = arg;
}

int sy_api_reload_config(sy_api_context *c, char *msg, size_t msg_size) {
    if (c->reload == NULL) return 1;
    return c->reload(c->reload_arg, msg, msg_size);
}

sy_api_context *sy_api_ctx(const sy_http_request *r) { return sy_http_app(r); }
sy_model_manager *sy_api_manager(sy_api_context *c) { return c->mm; }
sy_metrics *sy_api_context_metrics(sy_api_context *c) { return c->metrics; }
sy_server *sy_api_server(sy_api_context *c) { return c->server; }
sy_grammar_cache *sy_api_grammar_cache(sy_api_context *c) { return c->grammars; }
bool sy_api_stopping(const sy_api_context *c) { return c->server == NULL || sy_server_stopping(c->server); }
uint64_t sy_api_track(sy_api_context *c, void (*cancel)(void *arg), void *arg) {
    return sy_server_track(c->server, cancel, arg);
}
void sy_api_untrack(sy_api_context *c, uint64_t handle) { sy_server_untrack(c->server, handle); }

/* ------------------------------------------------------------------------------------------------------------
 * Config snapshots */

const sy_config *sy_api_config_acquire(sy_api_context *c) {
    pthread_mutex_lock(&c->lock);
    config_holder *h = c->current;
    if (h) h->refs++;
    pthread_mutex_unlock(&c->lock);
    return h ? h->cfg : NULL;
}

static void free_holder(config_holder *h) {
    sy_config_free(h->cfg);
    free(h);
}

void sy_api_config_release(sy_api_context *c, const sy_config *cfg) {
    if (cfg == NULL) return;
    config_holder *to_free = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->current && c->current->cfg == cfg) {
        c->current->refs--;
    } else {
        for (config_holder **pp = &c->retired; *pp; pp = &(*pp)->next) {
            if ((*pp)->cfg == cfg) {
                if (--(*pp)->refs == 0) {
                    to_free = *pp;
                    *pp = to_free->next;
                }
                break;
            }
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (to_free) free_holder(to_free);
}

void sy_api_replace_config(sy_api_context *c, sy_config *cfg) {
    if (cfg != NULL) sy_api_tokenize_set_budget(cfg->host.tokenize_memory);
    config_holder *h = sy_xcalloc(1, sizeof *h);
    h->cfg = cfg;
    config_holder *old_free = NULL;
    pthread_mutex_lock(&c->lock);
    config_holder *old = c->current;
    c->current = h;
    if (old) {
        if (old->refs == 0) {
            old_free = old;
        } else {
            old->next = c->retired;
            c->retired = old;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (old_free) free_holder(old_free);
}

/* ------------------------------------------------------------------------------------------------------------
 * API keys */

/* Constant-time comparison: the time depends on the lengths only, never on where the strings differ. */
static bool equal_constant_time(const char *a, size_t a_len, const char *b, size_t b_len) {
    size_t n = a_len > b_len ? a_len : b_len;
    unsigned char diff = (unsigned char)(a_len != b_len);
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < a_len ? (unsigned char)a[i] : 0;
        unsigned char cb = i < b_len ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0;
}

/* Whether key is one of list's (every item compared, so the time does not tell which one matched). */
static bool key_in_list(const char *key, size_t key_len, const sy_config_list *list) {
    bool ok = false;
    for (size_t i = 0; i < list->count; i++) {
        const char *k = list->items[i];
        if (equal_constant_time(key, key_len, k, strlen(k))) ok = true;
    }
    return ok;
}

/* 0 when authorised; else the reason in msg. Management routes take the admin_api_keys (the api_keys when there
 * are none); the others the api_keys, or an admin key. */
int sy_api_check_key(void *app, sy_http_request *r, char *msg, size_t msg_size) {
    sy_api_context *c = app;
    const sy_config *cfg = sy_api_config_acquire(c);
    int rc = 0;
    bool admin_route = (sy_http_route_flags(r) & SY_ROUTE_ADMIN) != 0;
    const sy_config_list *keys = NULL, *also = NULL;
    if (cfg != NULL) {
        const sy_config_host *h = &cfg->host;
        if (admin_route) keys = h->admin_api_keys.count > 0 ? &h->admin_api_keys : &h->api_keys;
        else keys = &h->api_keys, also = &h->admin_api_keys;
    }
    if (keys != NULL && keys->count > 0) {
        const char *auth = sy_http_header(r, "Authorization");
        const char *x_key = sy_http_header(r, "x-api-key");
        const char *key = NULL;
        if (auth == NULL && x_key == NULL) {
            snprintf(msg, msg_size, "an API key is required: send the header 'Authorization: Bearer KEY' or "
                                    "'x-api-key: KEY'");
            rc = -1;
        } else if (auth != NULL && strncasecmp(auth, "Bearer ", 7) != 0) {
            snprintf(msg, msg_size, "the Authorization header must be 'Bearer KEY'");
            rc = -1;
        } else {
            key = auth != NULL ? auth + 7 : x_key;
            while (*key == ' ') key++;
            size_t key_len = strlen(key);
            bool ok = key_in_list(key, key_len, keys);
            if (also != NULL && key_in_list(key, key_len, also)) ok = true;
            if (!ok) {
                snprintf(msg, msg_size, admin_route && cfg->host.admin_api_keys.count > 0
                                            ? "this endpoint needs an admin API key (admin_api_keys)"
                                            : "the API key is not valid");
                rc = -1;
            }
        }
    }
    sy_api_config_release(c, cfg);
    return rc;
}

int sy_api_origin_policy(void *app, const char *origin) {
    sy_api_context *c = app;
    const sy_config *cfg = sy_api_config_acquire(c);
    int verdict = SY_ORIGIN_REFUSED;
    if (cfg != NULL)
        verdict = sy_http_origin_check(origin, (const char *const *)cfg->host.cors_origins.items,
                                       cfg->host.cors_origins.count);
    sy_api_config_release(c, cfg);
    return verdict;
}

bool sy_api_host_allowed(void *app, const char *host) {
    sy_api_context *c = app;
    const sy_config *cfg = sy_api_config_acquire(c);
    bool ok = cfg != NULL && sy_http_host_check(host, (const char *const *)cfg->host.allowed_hosts.items,
                                                cfg->host.allowed_hosts.count);
    sy_api_config_release(c, cfg);
    return ok;
}

void sy_api_request_done(void *app, const char *label, int status) {
    sy_metrics_request(((sy_api_context *)app)->metrics, label, status);
}

/* ------------------------------------------------------------------------------------------------------------
 * Life cycle */

sy_api_context *sy_api_context_create(sy_config *cfg, sy_model_manager *mm, sy_metrics *metrics) {
    sy_api_context *c = sy_xcalloc(1, sizeof *c);
    c->mm = mm;
    c->metrics = metrics;
    pthread_mutex_init(&c->lock, NULL);
    c->grammars = sy_grammar_cache_create(SY_API_GRAMMAR_CACHE_SIZE);
    sy_api_replace_config(c, cfg);
    return c;
}

void sy_api_context_attach(sy_api_context *c, sy_server *server) { c->server = server; }

void sy_api_context_free(sy_api_context *c) {
    if (c == NULL) return;
    if (c->current) free_holder(c->current);
    while (c->retired) {
        config_holder *next = c->retired->next;
        free_holder(c->retired);
        c->retired = next;
    }
    pthread_mutex_destroy(&c->lock);
    sy_grammar_cache_free(c->grammars);
    free(c);
}
