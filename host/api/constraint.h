/*
 * Constrained output from request fields: OpenAI's response_format (json_object, json_schema), llama.cpp's
 * `grammar` (GBNF) and `json_schema`, Ollama's `format` ("json" or a schema). Grammars compile through the
 * server's cache (sy_api_grammar_cache); what a compiler cannot honour is a 400 naming the field, with the
 * compiler's message.
 */
#ifndef SY_HOST_API_CONSTRAINT_H
#define SY_HOST_API_CONSTRAINT_H

#include <cjson/cJSON.h>

#include "api/context.h"
#include "api/request.h"
#include "engine/scheduler.h"

/* Sets p->constraint.grammar (a reference the caller drops with sy_api_constraint_clear, after submit) from the
 * OpenAI / llama.cpp fields of body; leaves it NULL when none asks for a constraint. */
int sy_api_constraint_openai(sy_api_context *c, const cJSON *body, sy_gen_params *p, sy_api_error *e);
/* The same from Ollama's `format`. */
int sy_api_constraint_ollama(sy_api_context *c, const cJSON *body, sy_gen_params *p, sy_api_error *e);
/* Drops the reference (the scheduler holds its own once submitted). */
void sy_api_constraint_clear(sy_gen_params *p);

#endif
