/*
 * Models served by another server: process models (a child of the manager) and peers. Their OpenAI requests
 * (chat, completions, embeddings, audio, rerank, responses) are forwarded unchanged but for the `model` field
 * (use_model_name) and the strip_params / set_params filters, streamed back as they come; a client that goes
 * away closes the upstream request; an upstream that breaks off mid-stream ends an SSE stream with an error event
 * (and a dead process is started again by the next request). Also llama-swap's /upstream/{model}/..., /logs and
 * /logs/stream.
 */
#ifndef SY_HOST_API_PROXY_H
#define SY_HOST_API_PROXY_H

#include <stdbool.h>

#include "http/http_server.h"

/* The server's intercept hook: true when r named a process or peer model and has been answered. */
bool sy_api_proxy_intercept(void *app, sy_http_request *r);
void sy_api_upstream(sy_http_request *r);
/* For OpenAI routes that only upstream models serve: reached when the request's model is not one of them. */
void sy_api_proxy_only(sy_http_request *r);
void sy_api_logs(sy_http_request *r);
void sy_api_logs_stream(sy_http_request *r);

#endif
