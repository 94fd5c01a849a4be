/*
 * Request fields for llama.cpp's samplers beyond the basic chain, shared by the OpenAI, llama-server and Ollama
 * handlers: typical_p, XTC (xtc_probability, xtc_threshold), DRY (dry_multiplier, dry_base, dry_allowed_length,
 * dry_penalty_last_n, dry_sequence_breakers), and OpenAI's logit_bias.
 */
#ifndef SY_HOST_API_SAMPLING_FIELDS_H
#define SY_HOST_API_SAMPLING_FIELDS_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "api/request.h"

/* Reads the fields of obj (prefix names them in messages, e.g. "options.") into p. logit_bias (an object of
 * token id -> bias in [-100, 100], or llama.cpp's [[id, bias], ...]) is allocated: free it with
 * sy_api_sampling_fields_free once the generation started (the scheduler copies it) or failed. The DRY sequence
 * breakers point into obj, which must live until the generation is submitted. */
int sy_api_sampling_fields(const cJSON *obj, const char *prefix, bool logit_bias, sy_gen_params *p,
                           sy_api_error *e);
void sy_api_sampling_fields_free(sy_gen_params *p);

#endif
