/*
 * What the host lends to plugins (sy_host_api): logging, cancellation tokens for calls in progress, and the
 * models published for drafters.
 *
 * Since ABI 1.2 nothing here is process-global: a registry has one host context (sy_host_context) holding its
 * published models, and each plugin gets a table of its own whose `context` names the plugin and that host
 * context, so two registries in one process (tests, several servers) never see each other's models. The 1.0
 * callbacks, which carry no context, search every live host context: they exist for plugins built against
 * 1.0 and 1.1 headers.
 */
#ifndef SY_HOST_PLUGINS_HOST_API_H
#define SY_HOST_PLUGINS_HOST_API_H

#include <stdatomic.h>

#include <switchyard/switchyard.h>

typedef struct sy_host_context sy_host_context;
typedef struct sy_plugin_host sy_plugin_host;

sy_host_context *sy_host_context_create(void);
/* Frees the context; every published model must have been unpublished. */
void sy_host_context_free(sy_host_context *h);

/* The table lent to one plugin (its own copy: context and plugin_path are the plugin's). The name may be set
 * after the plugin's entry was read (sy_plugin_host_set_name); both strings are copied. */
sy_plugin_host *sy_plugin_host_create(sy_host_context *h, const char *plugin_path);
void sy_plugin_host_set_name(sy_plugin_host *p, const char *plugin_name);
const sy_host_api *sy_plugin_host_api(const sy_plugin_host *p);
void sy_plugin_host_free(sy_plugin_host *p);

/* One host call in progress; plugins ask is_cancelled() about it. */
struct sy_host_call {
    atomic_int cancelled;
};
void sy_host_call_init(sy_host_call *call);
void sy_host_call_cancel(sy_host_call *call);
int sy_host_call_is_cancelled(const sy_host_call *call);

/* Named models that drafters can borrow through acquire_engine_ctx (or the 1.0 acquire_engine). Returns -1 when
 * the name is taken in this context. */
int sy_host_publish_model(sy_host_context *h, const char *name, const sy_engine_api *engine, sy_model *model);
/* Remove a name; returns -1 while a drafter still holds a reference to it (or it is not published). */
int sy_host_unpublish_model(sy_host_context *h, const char *name);
sy_status sy_host_acquire_engine(sy_host_context *h, const char *model_name, const sy_engine_api **engine,
                                 sy_model **model, sy_engine_ref **ref);
void sy_host_release_engine(sy_engine_ref *ref);

#endif
