/* What the host lends to plugins (sy_host_api): logging, cancellation tokens for calls in progress, and the
 * table of named models that drafters may acquire. */
#ifndef SY_HOST_PLUGINS_HOST_API_H
#define SY_HOST_PLUGINS_HOST_API_H

#include <stdatomic.h>

#include <switchyard/switchyard.h>

/* The host API lent to every plugin. */
const sy_host_api *sy_host_api_get(void);

/* One host call in progress; plugins ask is_cancelled() about it. */
struct sy_host_call {
    atomic_int cancelled;
};
void sy_host_call_init(sy_host_call *call);
void sy_host_call_cancel(sy_host_call *call);
int sy_host_call_is_cancelled(const sy_host_call *call);

/* Named models that drafters can borrow through sy_host_api.acquire_engine. */
int sy_host_publish_model(const char *name, const sy_engine_api *engine, sy_model *model);
/* Remove a name; returns -1 while a drafter still holds a reference to it. */
int sy_host_unpublish_model(const char *name);
sy_status sy_host_acquire_engine(const char *model_name, const sy_engine_api **engine, sy_model **model,
                                 sy_engine_ref **ref);
void sy_host_release_engine(sy_engine_ref *ref);

#endif
