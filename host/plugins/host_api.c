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
#ifndef SY_INSTALL_PLUGINDIR
#define SY_INSTALL_PLUGINDIR "lib/switchyard/plugins"
#endif

void sy_host_call_init(sy_host_call *call) { atomic_init(&call->cancelled, 0); }
void sy_host_call_cancel(sy_host_call *call) { atomic_store(&call->cancelled, 1); }
int sy_host_call_is_cancelled(const sy_host_call *call) {
    return call != NULL && atomic_load(&((sy_host_call *)call)->cancelled) != 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Named models for drafters */

struct sy_engine_ref {
    char *name;
    const sy_engine_api *engine;
    sy_model *model;
    int refs;
    struct sy_engine_ref *next;
};

static pthread_mutex_t published_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sy_engine_ref *published;

int sy_host_publish_model(const char *name, const sy_engine_api *engine, sy_model *model) {
    struct sy_engine_ref *e = sy_xcalloc(1, sizeof *e);
    e->name = sy_strdup(name);
    e->engine = engine;
    e->model = model;
    pthread_mutex_lock(&published_lock);
    for (struct sy_engine_ref *it = published; it; it = it->next) {
        if (strcmp(it->name, name) == 0) {
            pthread_mutex_unlock(&published_lock);
            free(e->name);
            free(e);
            return -1;
        }
    }
    e->next = published;
    published = e;
    pthread_mutex_unlock(&published_lock);
    return 0;
}

int sy_host_unpublish_model(const char *name) {
    int rc = -1;
    pthread_mutex_lock(&published_lock);
    for (struct sy_engine_ref **it = &published; *it; it = &(*it)->next) {
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
    pthread_mutex_unlock(&published_lock);
    return rc;
}

sy_status sy_host_acquire_engine(const char *model_name, const sy_engine_api **engine, sy_model **model,
                                 sy_engine_ref **ref) {
    if (model_name == NULL || engine == NULL || model == NULL || ref == NULL) return SY_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&published_lock);
    for (struct sy_engine_ref *it = published; it; it = it->next) {
        if (strcmp(it->name, model_name) == 0) {
            it->refs++;
            *engine = it->engine;
            *model = it->model;
            *ref = it;
            pthread_mutex_unlock(&published_lock);
            return SY_OK;
        }
    }
    pthread_mutex_unlock(&published_lock);
    return SY_ERR_UNSUPPORTED;
}

void sy_host_release_engine(sy_engine_ref *ref) {
    if (ref == NULL) return;
    pthread_mutex_lock(&published_lock);
    if (ref->refs > 0) ref->refs--;
    pthread_mutex_unlock(&published_lock);
}

/* ------------------------------------------------------------------------------------------------------------
 * The table */

static int host_is_cancelled(const sy_host_call *call) { return sy_host_call_is_cancelled(call); }

static void host_log(sy_log_level level, const char *plugin, const char *message) {
    sy_log_plugin(level, plugin, message);
}

static const sy_host_api host_api = {
    .struct_size = sizeof(sy_host_api),
    .abi_major = SY_ABI_VERSION_MAJOR,
    .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "switchyard " SY_VERSION,
    .log = host_log,
    .is_cancelled = host_is_cancelled,
    .acquire_engine = sy_host_acquire_engine,
    .release_engine = sy_host_release_engine,
};

const sy_host_api *sy_host_api_get(void) { return &host_api; }

