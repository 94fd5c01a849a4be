/*
 * Per-model request settings of the config, in a [model.NAME] section:
 *   defaults.KEY = VALUE     used when a request leaves KEY unset (a model's recommended sampling, Ollama's
 *                            Modelfile PARAMETER)
 *   set_params.KEY = VALUE   forced, whatever the request says (llama-swap's filters.setParams)
 *   strip_params = KEY, ...  removed from every request before it is read (llama-swap's filters.stripParams)
 * KEY is one of the names below, in OpenAI / llama.cpp spelling; each API maps them to its own fields (Ollama's
 * options: max_tokens is num_predict). Values are checked when the config is read.
 */
#ifndef SY_HOST_CONFIG_REQUEST_PARAMS_H
#define SY_HOST_CONFIG_REQUEST_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum sy_request_param_kind {
    SY_REQUEST_PARAM_DEFAULT = 0,
    SY_REQUEST_PARAM_SET,
    SY_REQUEST_PARAM_STRIP
} sy_request_param_kind;

typedef enum sy_request_param_type {
    SY_PARAM_NUMBER = 0,  /* a JSON number */
    SY_PARAM_INTEGER,     /* a whole JSON number */
    SY_PARAM_STOP,        /* one stop string, or a JSON array of them */
    SY_PARAM_TEXT,        /* a string (system_prompt) */
    SY_PARAM_STRINGS      /* a JSON array of strings (dry_sequence_breakers) */
} sy_request_param_type;

typedef struct sy_config_request_param {
    sy_request_param_kind kind;
    char *key;    /* one of the known names */
    char *value;  /* as written (NULL for STRIP) */
    unsigned line;
} sy_config_request_param;

#define SY_CONFIG_DEFAULTS_PREFIX "defaults."
#define SY_CONFIG_SET_PARAMS_PREFIX "set_params."

/* The type of a known key; false for an unknown one. */
bool sy_request_param_type_of(const char *key, sy_request_param_type *type);
/* Whether value suits key: false with why (one line) when it does not. */
bool sy_request_param_check(const char *key, const char *value, char *why, size_t why_size);
/* The known keys, comma-separated, for messages. */
const char *sy_request_param_names(void);

#endif
