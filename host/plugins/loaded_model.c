#include "plugins/loaded_model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/util.h"

/* The bytes of the vocabulary's longest token: a prompt longer than n_ctx times this cannot fit the context,
 * which the API tells before tokenizing it. 0 when a token cannot be read (no such check then). */
static uint32_t longest_token(const sy_loaded_model *lm) {
    char *buf = NULL;
    size_t cap = 0;
    long longest = 0;
    for (uint32_t t = 0; t < lm->info.n_vocab; t++) {
        long n = sy_loaded_model_token_bytes(lm, (int32_t)t, &buf, &cap);
        if (n < 0) {
            longest = 0;
            break;
        }
        if (n > longest) longest = n;
    }
    free(buf);
    return (uint32_t)longest;
}

static void collect_control_texts(sy_loaded_model *lm) {
    if (lm->engine->token_flags == NULL) return;
    char *buf = NULL;
    size_t cap = 0, n = 0, room = 0;
    for (uint32_t t = 0; t < lm->info.n_vocab; t++) {
        if ((lm->engine->token_flags(lm->model, (int32_t)t) & SY_TOKEN_CONTROL) == 0) continue;
        long len = sy_loaded_model_token_bytes(lm, (int32_t)t, &buf, &cap);
        if (len <= 0) continue;
        if (n == room) {
            room = room ? room * 2 : 16;
            lm->control_texts = sy_xrealloc(lm->control_texts, room * sizeof *lm->control_texts);
        }
        char *text = sy_xmalloc((size_t)len + 1);
        memcpy(text, buf, (size_t)len);
        text[len] = '\0';
        lm->control_texts[n++] = text;
    }
    lm->n_control_texts = n;
    free(buf);
}

static int open_with(const sy_plugin *p, const char *path, const sy_option *options, size_t n_options,
                     sy_loaded_model *out, char *err, size_t err_size) {
    sy_model *model = NULL;
    sy_status st = p->engine->load(path, options, n_options, &model);
    if (st != SY_OK || model == NULL) {
        snprintf(err, err_size, "%s could not load %s: %s", p->entry->name, path, p->engine->error_message());
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->plugin = p;
    out->engine = p->engine;
    out->model = model;
    out->info.struct_size = sizeof out->info;
    st = p->engine->model_info(model, &out->info);
    if (st != SY_OK || out->info.n_vocab == 0 || out->info.n_ctx == 0) {
        snprintf(err, err_size, "%s loaded %s but reported no usable model info: %s", p->entry->name, path,
                 st != SY_OK ? p->engine->error_message() : "n_vocab or n_ctx is 0");
        p->engine->unload(model);
        return -1;
    }
    if (p->entry->abi_minor < 2) {
        /* A 1.0/1.1 plugin reports no capabilities (its copy of our struct may still hold zeros there): assume any
         * rollback and batch size, as those hosts did, and learn limits from failures. */
        out->info.max_rollback = UINT32_MAX;
        out->info.max_decode_tokens = 0;
        out->info.capabilities = 0;
    }
    if (p->entry->abi_minor < 2 || out->info.chat_template_names == NULL || out->info.chat_template_texts == NULL) {
        /* named chat templates are the last fields of 1.2: a plugin built before them leaves them zero */
        out->info.n_chat_templates = 0;
        out->info.chat_template_names = NULL;
        out->info.chat_template_texts = NULL;
    }
    out->max_token_bytes = longest_token(out);
    collect_control_texts(out);
    return 0;
}

int sy_loaded_model_open(const sy_plugin_registry *reg, const char *plugin_name, const char *path,
                         const sy_option *options, size_t n_options, sy_loaded_model *out, char *err,
                         size_t err_size) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, err_size, "model path %s does not exist", path);
        return -1;
    }
    if (plugin_name != NULL) {
        const sy_plugin *p = sy_plugin_registry_need(reg, plugin_name);
        if (p == NULL) {
            snprintf(err, err_size, "no plugin named '%s' is loaded (see `switchyard plugins`)", plugin_name);
            return -1;
        }
        if (p->engine == NULL) {
            snprintf(err, err_size, "plugin '%s' is not an engine", plugin_name);
            return -1;
        }
        if (p->engine->probe(path) != SY_OK) {
            snprintf(err, err_size, "%s refuses %s: %s", plugin_name, path, p->engine->error_message());
            return -1;
        }
        return open_with(p, path, options, n_options, out, err, err_size);
    }
    /* No plugin named: the first engine whose probe accepts the path, in the folder's name order (a lazy registry
     * loads the files one at a time and stops there, so the engines after it cost nothing). */
    size_t used = 0, i = 0;
    err[0] = '\0';
    do {
        for (; i < reg->n_plugins; i++) {
            const sy_plugin *p = &reg->plugins[i];
            if (p->engine == NULL) continue;
            if (p->engine->probe(path) == SY_OK) return open_with(p, path, options, n_options, out, err, err_size);
            if (used < err_size) {
                int w = snprintf(err + used, err_size - used, "%s%s: %s",
                                 used ? "; " : "no plugin accepts the model: ", p->entry->name,
                                 p->engine->error_message());
                if (w > 0) used += (size_t)w;
            }
        }
    } while (sy_plugin_registry_load_next(reg));
    if (err[0] == '\0') snprintf(err, err_size, "no engine plugin is loaded to open %s", path);
    return -1;
}

static int estimate_with(const sy_plugin *p, const char *path, const sy_option *options, size_t n_options,
                         sy_resource_estimate *out) {
    const sy_engine_resources_api *r = p->entry->get_interface ? p->entry->get_interface(SY_ENGINE_RESOURCES_INTERFACE_ID)
                                                               : NULL;
    if (r == NULL || !SY_HAS_FIELD(r, sy_engine_resources_api, estimate) || r->estimate == NULL) return -1;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    sy_status st = r->estimate(path, options, n_options, out);
    if (st != SY_OK) {
        sy_log(SY_LOG_DEBUG, "%s: no estimate for %s: %s", p->entry->name, path, p->engine->error_message());
        return -1;
    }
    return 0;
}

int sy_loaded_model_describe(const sy_plugin_registry *reg, const char *plugin_name, const char *path,
                             const sy_metadata_sink *sink, char *err, size_t err_size) {
    const sy_plugin *p = plugin_name ? sy_plugin_registry_need(reg, plugin_name) : NULL;
    if (p == NULL || p->engine == NULL) {
        snprintf(err, err_size, "plugin %s is not available", plugin_name ? plugin_name : "(none)");
        return -1;
    }
    const sy_engine_describe_api *d =
        p->entry->get_interface ? p->entry->get_interface(SY_ENGINE_DESCRIBE_INTERFACE_ID) : NULL;
    if (d == NULL || !SY_HAS_FIELD(d, sy_engine_describe_api, describe) || d->describe == NULL) {
        snprintf(err, err_size, "plugin %s cannot describe a model without loading it", p->entry->name);
        return -1;
    }
    if (d->describe(path, sink) != SY_OK) {
        snprintf(err, err_size, "%s", p->engine->error_message());
        return -1;
    }
    return 0;
}

int sy_loaded_model_estimate(const sy_plugin_registry *reg, const char *plugin_name, const char *path,
                             const sy_option *options, size_t n_options, sy_resource_estimate *out) {
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) return -1;
    if (plugin_name != NULL) {
        const sy_plugin *p = sy_plugin_registry_need(reg, plugin_name);
        if (p == NULL || p->engine == NULL) return -1;
        return estimate_with(p, path, options, n_options, out);
    }
    /* the engine the load will pick: the first whose probe accepts the path (as sy_loaded_model_open) */
    size_t i = 0;
    do {
        for (; i < reg->n_plugins; i++) {
            const sy_plugin *p = &reg->plugins[i];
            if (p->engine != NULL && p->engine->probe(path) == SY_OK)
                return estimate_with(p, path, options, n_options, out);
        }
    } while (sy_plugin_registry_load_next(reg));
    return -1;
}

void sy_loaded_model_close(sy_loaded_model *lm) {
    if (lm->model != NULL) lm->engine->unload(lm->model);
    for (size_t i = 0; i < lm->n_control_texts; i++) free(lm->control_texts[i]);
    free(lm->control_texts);
    memset(lm, 0, sizeof *lm);
}

int32_t *sy_loaded_model_tokenize(const sy_loaded_model *lm, const char *text, size_t len, uint32_t flags,
                                  size_t *n, char *err, size_t err_size) {
    size_t cap = len + 16, got = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        int32_t *ids = sy_xmalloc(cap * sizeof *ids);
        sy_status st = lm->engine->tokenize(lm->model, text, len, flags, ids, cap, &got);
        if (st == SY_OK && got <= cap) {
            *n = got;
            return ids;
        }
        free(ids);
        if (st != SY_ERR_BUFFER_TOO_SMALL || got <= cap) {
            snprintf(err, err_size, "tokenize failed: %s", lm->engine->error_message());
            return NULL;
        }
        cap = got;
    }
    snprintf(err, err_size, "tokenize failed: the plugin kept asking for a larger buffer");
    return NULL;
}

long sy_loaded_model_token_bytes(const sy_loaded_model *lm, int32_t token, char **buf, size_t *cap) {
    if (*buf == NULL || *cap == 0) {
        *cap = 64;
        *buf = sy_xmalloc(*cap);
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t got = 0;
        sy_status st = lm->engine->token_to_bytes(lm->model, token, *buf, *cap, &got);
        if (st == SY_OK && got <= *cap) return (long)got;
        if (st != SY_ERR_BUFFER_TOO_SMALL || got <= *cap || got > (1u << 20)) return -1;
        *cap = got;
        *buf = sy_xrealloc(*buf, *cap);
    }
    return -1;
}

int sy_loaded_model_publish(const char *name, const sy_loaded_model *lm) {
    return sy_host_publish_model(lm->plugin->host, name, lm->engine, lm->model);
}

int sy_loaded_model_unpublish(const char *name, const sy_loaded_model *lm) {
    return sy_host_unpublish_model(lm->plugin->host, name);
}
