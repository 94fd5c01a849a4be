/* See sampling_fields.h. */
#include "api/sampling_fields.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int parse_bias_entry(const char *id_text, const cJSON *value, size_t i, sy_logit_bias *out, sy_api_error *e,
                            const char *name) {
    int64_t id;
    if (id_text == NULL || sy_parse_i64(id_text, 0, INT32_MAX, &id) != 0)
        return sy_api_fail(e, 400, "invalid_value", name, "%s: key %zu is not a token id", name, i);
    double b;
    if (cJSON_IsBool(value)) b = cJSON_IsTrue(value) ? 0 : -INFINITY; /* llama.cpp: false bans the token */
    else if (cJSON_IsNumber(value) && isfinite(value->valuedouble)) b = value->valuedouble;
    else return sy_api_fail(e, 400, "invalid_type", name, "%s[%s] must be a number from -100 to 100", name, id_text);
    if (isfinite(b) && (b < -100 || b > 100))
        return sy_api_fail(e, 400, "invalid_value", name, "%s[%s] is %g, outside -100..100", name, id_text, b);
    out->token = (int32_t)id;
    out->bias = (float)b;
    return 0;
}

static int parse_logit_bias(const cJSON *v, const char *name, sy_gen_params *p, sy_api_error *e) {
    if (v == NULL || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return sy_api_fail(e, 400, "invalid_type", name, "%s must be an object of token id -> bias", name);
    int count = cJSON_GetArraySize(v);
    if (count == 0) return 0;
    if (count > SY_MAX_LOGIT_BIAS)
        return sy_api_fail(e, 400, "invalid_value", name, "%s has %d entries, more than %d", name, count,
                           SY_MAX_LOGIT_BIAS);
    sy_logit_bias *bias = sy_xcalloc((size_t)count, sizeof *bias);
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        char id_text[32];
        const char *key = item->string;
        const cJSON *value = item;
        if (cJSON_IsArray(v)) { /* llama.cpp's [[id, bias], ...] */
            const cJSON *id = cJSON_GetArrayItem(item, 0);
            value = cJSON_GetArrayItem(item, 1);
            if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2 || !cJSON_IsNumber(id) ||
                !(id->valuedouble >= 0 && id->valuedouble <= INT32_MAX && id->valuedouble == floor(id->valuedouble))) {
                free(bias);
                return sy_api_fail(e, 400, "invalid_value", name, "%s[%zu] must be [token id, bias]", name, i);
            }
            snprintf(id_text, sizeof id_text, "%.0f", id->valuedouble);
            key = id_text;
        }
        if (parse_bias_entry(key, value, i, &bias[i], e, name) != 0) {
            free(bias);
            return -1;
        }
        i++;
    }
    p->sampling.logit_bias = bias;
    p->sampling.n_logit_bias = (uint32_t)i;
    return 0;
}

/* llama-server's DRY fields, with its ranges. dry_base below 1 takes the default, as llama-server does. The breakers
 * stay owned by obj; the scheduler tokenizes them at submit. */
static int parse_dry(const cJSON *obj, const char *prefix, sy_gen_params *p, sy_api_error *e) {
    double d;
    int64_t n;
    bool present;
    if (sy_json_get_number(obj, prefix, "dry_multiplier", 0, 1e6, &d, &present, e) != 0) return -1;
    if (present) p->sampling.dry_multiplier = (float)d;
    if (sy_json_get_number(obj, prefix, "dry_base", 0, 1e6, &d, &present, e) != 0) return -1;
    if (present) p->sampling.dry_base = d < 1 ? sy_sampler_defaults().dry_base : (float)d;
    if (sy_json_get_integer(obj, prefix, "dry_allowed_length", 0, INT32_MAX, &n, &present, e) != 0) return -1;
    if (present) p->sampling.dry_allowed_length = (int32_t)n;
    if (sy_json_get_integer(obj, prefix, "dry_penalty_last_n", -1, INT32_MAX, &n, &present, e) != 0) return -1;
    if (present) p->sampling.dry_penalty_last_n = (int32_t)n;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "dry_sequence_breakers");
    if (v == NULL || cJSON_IsNull(v)) return 0;
    char name[64];
    snprintf(name, sizeof name, "%sdry_sequence_breakers", prefix ? prefix : "");
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (count == 0)
        return sy_api_fail(e, 400, "invalid_value", name, "%s must be a non-empty array of strings", name);
    if (count > SY_DRY_MAX_BREAKERS)
        return sy_api_fail(e, 400, "invalid_value", name, "%s has %d strings, more than %d", name, count,
                           SY_DRY_MAX_BREAKERS);
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        if (!cJSON_IsString(item))
            return sy_api_fail(e, 400, "invalid_type", name, "%s[%zu] must be a string", name, i);
        size_t len = strlen(item->valuestring);
        if (len == 0 || len > SY_DRY_MAX_BREAKER_BYTES)
            return sy_api_fail(e, 400, "invalid_value", name, "%s[%zu] must be 1 to %d bytes long, not %zu", name, i,
                               SY_DRY_MAX_BREAKER_BYTES, len);
        p->dry_breakers[i++] = item->valuestring;
    }
    p->n_dry_breakers = i;
    return 0;
}

int sy_api_sampling_fields(const cJSON *obj, const char *prefix, bool logit_bias, sy_gen_params *p,
                           sy_api_error *e) {
    double d;
    bool present;
    if (sy_json_get_number(obj, prefix, "typical_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.typical_p = (float)d;
    if (sy_json_get_number(obj, prefix, "xtc_probability", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.xtc_probability = (float)d;
    if (sy_json_get_number(obj, prefix, "xtc_threshold", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.xtc_threshold = (float)d;
    if (parse_dry(obj, prefix, p, e) != 0) return -1;
    if (logit_bias) {
        char name[64];
        snprintf(name, sizeof name, "%slogit_bias", prefix ? prefix : "");
        if (parse_logit_bias(cJSON_GetObjectItemCaseSensitive(obj, "logit_bias"), name, p, e) != 0) return -1;
    }
    return 0;
}

void sy_api_sampling_fields_free(sy_gen_params *p) {
    free((void *)p->sampling.logit_bias);
    p->sampling.logit_bias = NULL;
    p->sampling.n_logit_bias = 0;
}
