/*
 * What a listing says of a configured model without loading it: its metadata through the plugin's
 * "sy.engine.describe/1" (GGUF key names, whatever the format), Ollama's `details` and `model_info` built from
 * it, and the capabilities the model supports.
 */
#ifndef SY_HOST_API_MODEL_FACTS_H
#define SY_HOST_API_MODEL_FACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api/context.h"
#include "config/config.h"

/* The model's metadata as one JSON object (key -> string, number or bool; arrays as null, as Ollama's
 * non-verbose /api/show shows them). Bounded: at most SY_API_META_MAX_KEYS keys, strings cut at
 * SY_API_META_MAX_STRING bytes (made valid UTF-8). NULL with err set when the plugin cannot describe the file.
 * The caller frees it. */
#define SY_API_META_MAX_KEYS 4096
#define SY_API_META_MAX_STRING (256u * 1024u)
cJSON *sy_api_model_metadata(sy_api_context *c, const sy_config_model *cm, char *err, size_t err_size);

/* Typed lookups in such an object: false (and *out untouched) when absent or of another type. */
bool sy_api_meta_int(const cJSON *meta, const char *key, int64_t *out);
const char *sy_api_meta_string(const cJSON *meta, const char *key); /* NULL when absent */

/* Ollama's `details` object: format, family, families, parameter_size, quantization_level (meta may be NULL). */
cJSON *sy_api_model_details(const sy_config_model *cm, const cJSON *meta);
/* "135M", "1.54B" as Ollama's format.HumanNumber writes a parameter count. */
void sy_api_human_number(uint64_t n, char *out, size_t size);

/* The model's FIM token ids (tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id), -1 where absent. */
typedef struct sy_api_fim_tokens {
    int32_t pre, suf, mid, pad, rep, sep;
} sy_api_fim_tokens;
void sy_api_fim_tokens_of(const cJSON *meta, sy_api_fim_tokens *out);
/* pre, suf and mid are all known. */
bool sy_api_fim_supported(const sy_api_fim_tokens *t);

/* The capabilities of Ollama's /api/show, appended to caps from what the model supports: "completion" always,
 * "insert" when it has FIM tokens. The one place capabilities are decided: add new ones here. */
void sy_api_model_capabilities(const sy_config_model *cm, const cJSON *meta, cJSON *caps);

#endif
