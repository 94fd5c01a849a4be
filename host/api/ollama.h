/*
 * Ollama's API: /api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version.
 */
#ifndef SY_HOST_API_OLLAMA_H
#define SY_HOST_API_OLLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "http/http_server.h"

void sy_api_ollama_chat(sy_http_request *r);
void sy_api_ollama_generate(sy_http_request *r);
void sy_api_ollama_tags(sy_http_request *r);
void sy_api_ollama_show(sy_http_request *r);
void sy_api_ollama_ps(sy_http_request *r);
void sy_api_ollama_version(sy_http_request *r);
/* Model management (api/ollama_models.c): models come from the configuration. */
void sy_api_ollama_pull(sy_http_request *r);
void sy_api_ollama_push(sy_http_request *r);
void sy_api_ollama_create(sy_http_request *r);
void sy_api_ollama_copy(sy_http_request *r);
void sy_api_ollama_delete(sy_http_request *r);

/* The checks of /api/chat and /api/generate bodies before a model is chosen, and keep_alive's Go-duration
 * parser (for the fuzz targets): 0, or -1 (with e). */
#include "api/request.h"
int sy_api_ollama_parse_request(const cJSON *body, bool chat, sy_gen_params *p, int64_t *keep_alive,
                                sy_api_error *e);
int sy_api_ollama_parse_duration(const char *s, double *seconds);
/* Ollama's keep_alive of a request body, and applying it to the model acquired (api/embeddings.c). */
struct sy_api_error;
int sy_api_ollama_keep_alive(const cJSON *body, int64_t *ttl, struct sy_api_error *e);
void sy_api_ollama_apply_keep_alive(sy_http_request *r, const char *model_name, int64_t ttl);

#endif
