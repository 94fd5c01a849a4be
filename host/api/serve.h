/* Serving every API the server speaks (admin, OpenAI, Ollama, llama-server's slots) over the HTTP transport:
 * the route table and the start and stop of the whole. */
#ifndef SY_HOST_API_SERVE_H
#define SY_HOST_API_SERVE_H

#include <stddef.h>

#include "api/context.h"
#include "http/http_server.h"

/* The route table. */
const sy_http_route *sy_api_routes(size_t *n);

/* Start serving on opts->listen (the options' routes and hooks are filled in here). The context takes ownership
 * of cfg and borrows mm and metrics, which must outlive it. NULL with err set when the address cannot be bound. */
sy_api_context *sy_api_serve(const sy_server_options *opts, sy_config *cfg, sy_model_manager *mm,
                             sy_metrics *metrics, char *err, size_t err_size);
/* The first part of a stop: /health says "draining", new work gets 503 with Retry-After, what runs goes on
 * (sy_api_in_flight counts it down) until sy_api_stop cancels the rest. */
void sy_api_drain(sy_api_context *c, unsigned retry_after_s);
unsigned sy_api_in_flight(sy_api_context *c);
/* Stop the server (cancelling the generations in flight, waiting for every connection) and free the context. */
void sy_api_stop(sy_api_context *c);

#endif
