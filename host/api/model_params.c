/* See model_params.h. */
#include "api/model_params.h"

#include <stdlib.h>
#include <string.h>

#include "config/request_params.h"

static cJSON *value_json(const char *key, const char *value);

static bool is_ollama(sy_api_params_style s) { return s == SY_API_PARAMS_OLLAMA_CHAT || s == SY_API_PARAMS_OLLAMA_GENERATE; }

cJSON *sy_api_model_param_json(const char *key, const char *value) { return value_json(key, value); }

/* The JSON value of a checked setting. */
static cJSON *value_json(const char *key, const char *value) {
    sy_request_param_type type = SY_PARAM_TEXT;
    sy_request_param_type_of(key, &type);
    switch (type) {
    case SY_PARAM_NUMBER:
    case SY_PARAM_INTEGER: return cJSON_CreateNumber(strtod(value, NULL));
    case SY_PARAM_STOP:
        if (value[0] == '[') {
            cJSON *j = cJSON_Parse(value);
            if (j) return j;
        }
        return cJSON_CreateString(value);
    case SY_PARAM_TEXT: return cJSON_CreateString(value);
    case SY_PARAM_STRINGS: {
        cJSON *j = cJSON_Parse(value); /* checked when the config was read */
        return j ? j : cJSON_CreateNull();
    }
    }
    return cJSON_CreateNull();
}

/* The object holding the sampling fields (Ollama's options, created when asked) and their names there. */
static cJSON *holder(cJSON *body, sy_api_params_style style, bool create) {
    if (!is_ollama(style)) return body;
    cJSON *o = cJSON_GetObjectItemCaseSensitive(body, "options");
    if (o != NULL && !cJSON_IsObject(o)) return NULL; /* the handler refuses it */
    if (o == NULL && create) o = cJSON_AddObjectToObject(body, "options");
    return o;
}

static const char *field_name(const char *key, sy_api_params_style style) {
    if (strcmp(key, "max_tokens") == 0) return is_ollama(style) ? "num_predict" : "max_tokens";
    return key;
}

/* Whether the request sets key (OpenAI's max_completion_tokens counts for max_tokens). */
static bool present(cJSON *body, const char *key, sy_api_params_style style) {
    cJSON *h = holder(body, style, false);
    if (h == NULL) return false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, field_name(key, style));
    if (v != NULL && !cJSON_IsNull(v)) return true;
    if (!is_ollama(style) && strcmp(key, "max_tokens") == 0) {
        v = cJSON_GetObjectItemCaseSensitive(h, "max_completion_tokens");
        return v != NULL && !cJSON_IsNull(v);
    }
    return false;
}

static void strip(cJSON *body, const char *key, sy_api_params_style style) {
    cJSON *h = holder(body, style, false);
    if (h == NULL) return;
    cJSON_DeleteItemFromObjectCaseSensitive(h, field_name(key, style));
    if (!is_ollama(style) && strcmp(key, "max_tokens") == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(h, "max_completion_tokens");
}

/* system_prompt: a chat's first system message when it has none; Ollama's generate `system`. */
static void system_prompt(cJSON *body, const char *text, sy_api_params_style style, bool force) {
    if (style == SY_API_PARAMS_OPENAI_COMPLETION) return; /* a raw prompt has no turns */
    if (style == SY_API_PARAMS_OLLAMA_GENERATE) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "system");
        if (force || v == NULL || cJSON_IsNull(v)) {
            cJSON_DeleteItemFromObjectCaseSensitive(body, "system");
            cJSON_AddStringToObject(body, "system", text);
        }
        return;
    }
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!cJSON_IsArray(msgs)) return;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (cJSON_IsString(role) && (strcmp(role->valuestring, "system") == 0 || strcmp(role->valuestring, "developer") == 0)) {
            if (!force) return;
            cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
            cJSON_AddStringToObject(m, "content", text);
            return;
        }
    }
    cJSON *sys = cJSON_CreateObject();
    cJSON_AddStringToObject(sys, "role", "system");
    cJSON_AddStringToObject(sys, "content", text);
    cJSON_InsertItemInArray(msgs, 0, sys);
}

static void set(cJSON *body, const char *key, const char *value, sy_api_params_style style) {
    if (strcmp(key, "system_prompt") == 0) {
        system_prompt(body, value, style, true);
        return;
    }
    cJSON *h = holder(body, style, true);
    if (h == NULL) return;
    strip(body, key, style);
    cJSON_AddItemToObject(h, field_name(key, style), value_json(key, value));
}

void sy_api_apply_model_params(sy_api_context *c, const char *model_name, cJSON *body, sy_api_params_style style) {
    if (model_name == NULL || body == NULL) return;
    const sy_config *cfg = sy_api_config_acquire(c);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, model_name) : NULL;
    for (size_t pass = 0; cm && pass < 3; pass++) { /* strip, then force, then fill */
        for (size_t i = 0; i < cm->n_request_params; i++) {
            const sy_config_request_param *rp = &cm->request_params[i];
            if (pass == 0 && rp->kind == SY_REQUEST_PARAM_STRIP) {
                if (strcmp(rp->key, "system_prompt") == 0) continue; /* a request's turns are its own */
                strip(body, rp->key, style);
            } else if (pass == 1 && rp->kind == SY_REQUEST_PARAM_SET) {
                set(body, rp->key, rp->value, style);
            } else if (pass == 2 && rp->kind == SY_REQUEST_PARAM_DEFAULT) {
                if (strcmp(rp->key, "system_prompt") == 0) system_prompt(body, rp->value, style, false);
                else if (!present(body, rp->key, style)) set(body, rp->key, rp->value, style);
            }
        }
    }
    sy_api_config_release(c, cfg);
}
