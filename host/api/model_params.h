/*
 * A model's request settings from the config (config/request_params.h: defaults.KEY, set_params.KEY,
 * strip_params) applied to a request's JSON body before it is read: stripped fields go, forced ones replace the
 * request's, defaults fill what the request left unset. Each API's own field names: OpenAI's max_tokens (and
 * max_completion_tokens), Ollama's options.num_predict; system_prompt becomes a first system message of a chat
 * that has none, or Ollama's `system` of /api/generate.
 */
#ifndef SY_HOST_API_MODEL_PARAMS_H
#define SY_HOST_API_MODEL_PARAMS_H

#include <cjson/cJSON.h>

#include "api/context.h"

typedef enum sy_api_params_style {
    SY_API_PARAMS_OPENAI_CHAT,
    SY_API_PARAMS_OPENAI_COMPLETION,
    SY_API_PARAMS_OLLAMA_CHAT,
    SY_API_PARAMS_OLLAMA_GENERATE
} sy_api_params_style;

/* Apply the settings of the model named (by name or alias; nothing when unknown) to body. */
void sy_api_apply_model_params(sy_api_context *c, const char *model_name, cJSON *body, sy_api_params_style style);

/* A checked setting's value as JSON (a number, a string, or stop's array). */
cJSON *sy_api_model_param_json(const char *key, const char *value);

#endif
