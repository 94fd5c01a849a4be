/*
 * OpenAI's API: /v1/chat/completions, /v1/completions, /v1/models.
 */
#ifndef SY_HOST_API_OPENAI_H
#define SY_HOST_API_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "http/http_server.h"

void sy_api_openai_chat(sy_http_request *r);
void sy_api_openai_completions(sy_http_request *r);
void sy_api_openai_models(sy_http_request *r);
void sy_api_openai_model(sy_http_request *r);

/* The parameters, prompt and messages of a chat or completions body, checked as the handlers check them before a
 * model is chosen (for the fuzz target): 0, or -1 with e. */
#include "api/request.h"
int sy_api_openai_parse_request(const cJSON *body, bool chat, sy_gen_params *p, sy_api_error *e);

#endif
