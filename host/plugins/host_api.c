/* See host_api.h. */
#include "plugins/host_api.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

#ifndef SY_VERSION
#define SY_VERSION "0.0.0"
#endif

void sy_host_call_init(sy_host_call *call) { atomic_init(&call->cancelled, 0); }
void sy_host_call_cancel(sy_host_call *call) { atomic_store(&call->cancelled, 1); }
int sy_host_call_is_cancelled(const sy_host_call *call) {
    return call != NULL && atomic_load(&((sy_host_call *)call)->cancelled) != 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Host contexts and their published models */

struct sy_engine_ref {
    sy_host_context *owner;
    char *name;
    const sy_engine_api *engine;
    sy_model *model;
    int refs;
    struct sy_engine_ref *next;
};

struct sy_host_context {
    pthread_mutex_t lock;
    struct sy_engine_ref *published;
    sy_host_context *next_live; /* for the context-less 1.0 callbacks */
};

/* Only the 1.0 callbacks, which cannot say which host they mean, walk this list. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static sy_host_context *live;

sy_host_context *sy_host_context_create(void) {
    sy_host_context *h = sy_xcalloc(1, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_lock(&live_lock);
    h->next_live = live;
    live = h;
    pthread_mutex_unlock(&live_lock);
    return h;
}

void sy_host_context_free(sy_host_context *h) {
    if (h == NULL) return;
    pthread_mutex_lock(&live_lock);
    for (sy_host_context **pp = &live; *pp; pp = &(*pp)->next_live) {
        if (*pp == h) {
            *pp = h->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    while (h->published) { /* names a caller forgot to unpublish: nothing can hold them any more */
        struct sy_engine_ref *e = h->published;
        h->published = e->next;
        free(e->name);
        free(e);
    }
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int sy_host_publish_model(sy_host_context *h, const char *name, const sy_engine_api *engine, sy_model *model) {
    struct sy_engine_ref *e = sy_xcalloc(1, sizeof *e);
    e->owner = h;
    e->name = sy_strdup(name);
    e->engine = engine;
    e->model = model;
    pthread_mutex_lock(&h->lock);
    for (struct sy_engine_ref *it = h->published; it; it = it->next) {
        if (strcmp(it->name, name) == 0) {
            pthread_mutex_unlock(&h->lock);
            free(e->name);
            free(e);
            return -1;
        }
    }
    e->next = h->published;
    h->published = e;
    pthread_mutex_unlock(&h->lock);
    return 0;
}

int sy_host_unpublish_model(sy_host_context *h, const char *name) {
    int rc = -1;
    pthread_mutex_lock(&h->lock);
    for (struct sy_engine_ref **it = &h->published; *it; it = &(*it)->next) {
        if (strcmp((*it)->name, name) == 0) {
            if ((*it)->refs == 0) {
                struct sy_engine_ref *gone = *it;
                *it = gone->next;
                free(gone->name);
                free(gone);
                rc = 0;
            }
            break;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return rc;
}

sy_status sy_host_acquire_engine(sy_host_context *h, const char *model_name, const sy_engine_api **engine,
                                 sy_model **model, sy_engine_ref **ref) {
    if (h == NULL || model_name == NULL || engine == NULL || model == NULL || ref == NULL)
        return SY_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&h->lock);
    for (struct sy_engine_ref *it = h->published; it; it = it->next) {
        if (strcmp(it->name, model_name) == 0) {
            it->refs++;
            *engine = it->engine;
            *model = it->model;
            *ref = it;
            pthread_mutex_unlock(&h->lock);
            return SY_OK;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return SY_ERR_UNSUPPORTED;
}

void sy_host_release_engine(sy_engine_ref *ref) {
    if (ref == NULL) return;
    pthread_mutex_lock(&ref->owner->lock);
    if (ref->refs > 0) ref->refs--;
    pthread_mutex_unlock(&ref->owner->lock);
}

/* ------------------------------------------------------------------------------------------------------------
 * The tables lent to plugins */

struct sy_plugin_host {
    sy_host_api api; /* first: a plugin's context is this struct */
    sy_host_context *host;
    char *path;
    char *name;
};

static void log_ctx(void *context, sy_log_level level, const char *message) {
    const sy_plugin_host *p = context;
    sy_log_plugin(level, p && p->name ? p->name : "plugin", message ? message : "");
}

static int is_cancelled_ctx(void *context, const sy_host_call *call) {
    (void)context;
    return sy_host_call_is_cancelled(call);
}

static sy_status acquire_engine_ctx(void *context, const char *model_name, const struct sy_engine_api **engine,
                                    struct sy_model **model, sy_engine_ref **ref) {
    const sy_plugin_host *p = context;
    if (p == NULL) return SY_ERR_INVALID_ARGUMENT;
    return sy_host_acquire_engine(p->host, model_name, engine, model, ref);
}

static void release_engine_ctx(void *context, sy_engine_ref *ref) {
    (void)context;
    sy_host_release_engine(ref);
}

/* The 1.0 callbacks. */
static void legacy_log(sy_log_level level, const char *plugin, const char *message) {
    sy_log_plugin(level, plugin ? plugin : "plugin", message ? message : "");
}

static int legacy_is_cancelled(const sy_host_call *call) { return sy_host_call_is_cancelled(call); }

/* A model name is looked up in every live host context, newest first. */
static sy_status legacy_acquire_engine(const char *model_name, const struct sy_engine_api **engine,
                                       struct sy_model **model, sy_engine_ref **ref) {
    sy_status st = SY_ERR_UNSUPPORTED;
    pthread_mutex_lock(&live_lock);
    for (sy_host_context *h = live; h && st != SY_OK; h = h->next_live)
        st = sy_host_acquire_engine(h, model_name, engine, model, ref);
    pthread_mutex_unlock(&live_lock);
    return st;
}

sy_plugin_host *sy_plugin_host_create(sy_host_context *h, const char *plugin_path) {
    sy_plugin_host *p = sy_xcalloc(1, sizeof *p);
    p->host = h;
    p->path = sy_strdup(plugin_path ? plugin_path : "");
    p->api = (sy_host_api){
        .struct_size = sizeof(sy_host_api),
        .abi_major = SY_ABI_VERSION_MAJOR,
        .abi_minor = SY_ABI_VERSION_MINOR,
        .host_version = "switchyard " SY_VERSION,
        .log = legacy_log,
        .is_cancelled = legacy_is_cancelled,
        .acquire_engine = legacy_acquire_engine,
        .release_engine = sy_host_release_engine,
        .context = p,
        .plugin_path = p->path,
        .log_ctx = log_ctx,
        .is_cancelled_ctx = is_cancelled_ctx,
        .acquire_engine_ctx = acquire_engine_ctx,
        .release_engine_ctx = release_engine_ctx,
    };
    return p;
}

void sy_plugin_host_set_name(sy_plugin_host *p, const char *plugin_name) {
    free(p->name);
    p->name = plugin_name ? sy_strdup(plugin_name) : NULL;
}

const sy_host_api *sy_plugin_host_api(const sy_plugin_host *p) { return &p->api; }

void sy_plugin_host_free(sy_plugin_host *p) {
    if (p == NULL) return;
    free(p->path);
    free(p->name);
    free(p);
}
