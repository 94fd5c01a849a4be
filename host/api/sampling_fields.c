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
    /* DRY changes the output; until it is implemented a request that turns it on is refused, never ignored */
    if (sy_json_get_number(obj, prefix, "dry_multiplier", 0, 1e6, &d, &present, e) != 0) return -1;
    if (present && d > 0) {
        char name[64];
        snprintf(name, sizeof name, "%sdry_multiplier", prefix ? prefix : "");
        return sy_api_fail(e, 400, "unsupported_parameter", name,
                           "%s: DRY sampling is not implemented (set it to 0 or leave it out)", name);
    }
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
