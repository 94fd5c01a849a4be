/*
 * What every API handler shares: the model manager, the metrics, the current configuration (held by each
 * request until it ends, so a reload never frees a config in use), and the HTTP server they run in. The handlers
 * find it through sy_api_ctx(request); api/serve.h wires the route table of every API to the transport.
 */
#ifndef SY_HOST_API_CONTEXT_H
#define SY_HOST_API_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "api/metrics.h"
#include "config/config.h"
#include "http/http_server.h"
#include "manager/model_manager.h"

typedef struct sy_api_context sy_api_context;

/* A context over cfg (owned from now on), mm and metrics (borrowed: they must outlive it). The server is
 * attached once started (sy_api_serve does both). */
sy_api_context *sy_api_context_create(sy_config *cfg, sy_model_manager *mm, sy_metrics *metrics);
void sy_api_context_attach(sy_api_context *c, sy_server *server);
/* Frees the configs; the server must be stopped already. */
void sy_api_context_free(sy_api_context *c);
/* Swap in a reloaded config (ownership passes); requests in progress keep the one they started with. */
void sy_api_replace_config(sy_api_context *c, sy_config *cfg);
sy_server *sy_api_server(sy_api_context *c);
/* The server's compiled grammars (response formats, JSON schemas, GBNF of requests), most recent first. */
#define SY_API_GRAMMAR_CACHE_SIZE 64
struct sy_grammar_cache;
struct sy_grammar_cache *sy_api_grammar_cache(sy_api_context *c);

/* For handlers. */
sy_api_context *sy_api_ctx(const sy_http_request *r);
sy_model_manager *sy_api_manager(sy_api_context *c);
sy_metrics *sy_api_context_metrics(sy_api_context *c);
bool sy_api_stopping(const sy_api_context *c);
/* The current config, held until released (a reload does not free it meanwhile). */
const sy_config *sy_api_config_acquire(sy_api_context *c);
void sy_api_config_release(sy_api_context *c, const sy_config *cfg);
/* The server's hooks: API keys (Bearer) for routes that are not open, and request metrics. */
int sy_api_check_key(void *app, sy_http_request *r, char *msg, size_t msg_size);
void sy_api_request_done(void *app, const char *label, int status);
/* Origins (cors_origins) and Host names (allowed_hosts) of the current config, for the transport. */
int sy_api_origin_policy(void *app, const char *origin);
bool sy_api_host_allowed(void *app, const char *host);
/* What POST /reload runs (the serve verb's config reload): 0, or -1 with why in msg. NULL: no reload. */
typedef int (*sy_api_reload_fn)(void *arg, char *msg, size_t msg_size);
void sy_api_set_reload(sy_api_context *c, sy_api_reload_fn fn, void *arg);
int sy_api_reload_config(sy_api_context *c, char *msg, size_t msg_size); /* 1 when there is no reload */
/* Work in flight that a stop must cancel (see sy_server_track). */
uint64_t sy_api_track(sy_api_context *c, void (*cancel)(void *arg), void *arg);
void sy_api_untrack(sy_api_context *c, uint64_t handle);

#endif
