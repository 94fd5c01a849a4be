/* See request_params.h. */
#include "config/request_params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"

typedef struct param_spec {
    const char *name;
    sy_request_param_type type;
    double min, max;
} param_spec;

static const param_spec specs[] = {
    {"temperature", SY_PARAM_NUMBER, 0, 100},
    {"top_p", SY_PARAM_NUMBER, 0, 1},
    {"top_k", SY_PARAM_INTEGER, 0, 1 << 20},
    {"min_p", SY_PARAM_NUMBER, 0, 1},
    {"typical_p", SY_PARAM_NUMBER, 0, 1},
    {"repeat_penalty", SY_PARAM_NUMBER, 0.01, 100},
    {"repeat_last_n", SY_PARAM_INTEGER, -1, 2147483647.0},
    {"presence_penalty", SY_PARAM_NUMBER, -2, 2},
    {"frequency_penalty", SY_PARAM_NUMBER, -2, 2},
    {"xtc_probability", SY_PARAM_NUMBER, 0, 1},
    {"xtc_threshold", SY_PARAM_NUMBER, 0, 1},
    {"dry_multiplier", SY_PARAM_NUMBER, 0, 1e6},
    {"dry_base", SY_PARAM_NUMBER, 0, 1e6},
    {"dry_allowed_length", SY_PARAM_INTEGER, 0, 2147483647.0},
    {"dry_penalty_last_n", SY_PARAM_INTEGER, -1, 2147483647.0},
    {"dry_sequence_breakers", SY_PARAM_STRINGS, 0, 0},
    {"max_tokens", SY_PARAM_INTEGER, 1, 2147483647.0},
    {"seed", SY_PARAM_INTEGER, -9007199254740991.0, 9007199254740991.0},
    {"stop", SY_PARAM_STOP, 0, 0},
    {"system_prompt", SY_PARAM_TEXT, 0, 0},
};

static const param_spec *find(const char *key) {
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
        if (strcmp(specs[i].name, key) == 0) return &specs[i];
    return NULL;
}

bool sy_request_param_type_of(const char *key, sy_request_param_type *type) {
    const param_spec *s = key ? find(key) : NULL;
    if (s && type) *type = s->type;
    return s != NULL;
}

const char *sy_request_param_names(void) {
    return "temperature, top_p, top_k, min_p, typical_p, repeat_penalty, repeat_last_n, presence_penalty, "
           "frequency_penalty, xtc_probability, xtc_threshold, dry_multiplier, dry_base, dry_allowed_length, "
           "dry_penalty_last_n, dry_sequence_breakers, max_tokens, seed, stop, system_prompt";
}

bool sy_request_param_check(const char *key, const char *value, char *why, size_t why_size) {
    const param_spec *s = find(key);
    if (s == NULL) {
        snprintf(why, why_size, "'%.64s' is not a request setting (%s)", key, sy_request_param_names());
        return false;
    }
    switch (s->type) {
    case SY_PARAM_NUMBER:
    case SY_PARAM_INTEGER: {
        double d;
        if (sy_parse_double(value, s->min, s->max, &d) != 0 || (s->type == SY_PARAM_INTEGER && d != floor(d))) {
            snprintf(why, why_size, "%s must be %s from %g to %g", key,
                     s->type == SY_PARAM_INTEGER ? "a whole number" : "a number", s->min, s->max);
            return false;
        }
        return true;
    }
    case SY_PARAM_STOP: {
        if (value[0] != '[') {
            if (value[0] == '\0') {
                snprintf(why, why_size, "stop must not be empty");
                return false;
            }
            return true;
        }
        cJSON *j = cJSON_Parse(value);
        bool ok = cJSON_IsArray(j) && cJSON_GetArraySize(j) <= 16;
        const cJSON *item;
        cJSON_ArrayForEach(item, j) ok = ok && cJSON_IsString(item) && item->valuestring[0] != '\0';
        cJSON_Delete(j);
        if (!ok) snprintf(why, why_size, "stop must be one string or a JSON array of at most 16 non-empty strings");
        return ok;
    }
    case SY_PARAM_STRINGS: {
        /* the API's limits for DRY's breakers (engine/dry_breakers.h), checked here so a config cannot break
         * every request */
        cJSON *j = cJSON_Parse(value);
        int n = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : 0;
        bool ok = n >= 1 && n <= 64;
        const cJSON *item;
        cJSON_ArrayForEach(item, j) ok = ok && cJSON_IsString(item) && item->valuestring[0] != '\0' &&
                                         strlen(item->valuestring) <= 40;
        cJSON_Delete(j);
        if (!ok) snprintf(why, why_size, "%s must be a JSON array of 1 to 64 strings of 1 to 40 bytes", key);
        return ok;
    }
    case SY_PARAM_TEXT: return true;
    }
    return false;
}
