/*
 * llama-server's own endpoints beside the OpenAI ones: /tokenize, /detokenize, /props and /infill
 * (fill-in-the-middle, api/fim.c). A request names its model with "model" in the body or ?model=, or the server
 * has one model.
 */
#ifndef SY_HOST_API_LLAMA_SERVER_H
#define SY_HOST_API_LLAMA_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "http/http_server.h"

void sy_api_llama_tokenize(sy_http_request *r);
void sy_api_llama_detokenize(sy_http_request *r);
void sy_api_llama_props(sy_http_request *r);
void sy_api_llama_infill(sy_http_request *r);

/* The model a llama-server request means: body "model", else ?model=, else the only configured model. Copied
 * into out; false with 400 answered when none can be chosen. body may be NULL. */
bool sy_api_llama_model_name(sy_http_request *r, const cJSON *body, char *out, size_t size);

#endif
