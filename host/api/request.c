/* Request errors and checked JSON field access. */
#include "api/request.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>





/* ------------------------------------------------------------------------------------------------------------
 * Errors */

int sy_api_fail(sy_api_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

int sy_api_respond_error(sy_http_request *r, const sy_api_error *e) {
    return sy_http_respond_error(r, e->status ? e->status : 500, e->code[0] ? e->code : NULL,
                                 e->param[0] ? e->param : NULL, "%s", e->message);
}

/* ------------------------------------------------------------------------------------------------------------
 * JSON */

/* True when the JSON text holds a \u0000 escape (cJSON would silently cut the string there). */
static bool has_nul_escape(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\') continue;
        /* Count the run of backslashes: an odd run escapes what follows. */
        size_t j = i;
        while (j < len && s[j] == '\\') j++;
        if ((j - i) % 2 == 1 && j + 5 <= len && s[j] == 'u' && s[j + 1] == '0' && s[j + 2] == '0' &&
            s[j + 3] == '0' && s[j + 4] == '0')
            return true;
        i = j - 1;
    }
    return false;
}

/* At least the number of values a JSON text holds (commas and openings outside strings, plus one), counted
 * before parsing: each becomes a tree node of cJSON's (about 64 bytes), so a body of a million small numbers
 * would take far more memory than its bytes. */
static size_t json_value_bound(const char *s, size_t len) {
    size_t n = 1;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == '[' || c == '{') {
            n++;
        }
    }
    return n;
}

int sy_api_parse_body(sy_http_request *r, cJSON **out, sy_api_error *e) {
    size_t len = 0;
    const char *body = sy_http_body(r, &len);
    *out = NULL;
    size_t start = 0;
    while (start < len && (body[start] == ' ' || body[start] == '\t' || body[start] == '\n' || body[start] == '\r'))
        start++;
    if (start == len) return sy_api_fail(e, 400, "invalid_json", NULL, "the request body is empty; a JSON object was expected");
    size_t values = json_value_bound(body, len);
    if (values > SY_API_MAX_JSON_VALUES)
        return sy_api_fail(e, 413, "request_too_large", NULL,
                           "the request body holds about %zu JSON values; at most %u are accepted", values,
                           (unsigned)SY_API_MAX_JSON_VALUES);
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (json == NULL) {
        size_t at = (end != NULL && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        return sy_api_fail(e, 400, "invalid_json", NULL, "malformed JSON in the request body at byte %zu", at);
    }
    size_t used = (end != NULL && end >= body && end <= body + len) ? (size_t)(end - body) : len;
    for (size_t i = used; i < len; i++) {
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\n' && body[i] != '\r') {
            cJSON_Delete(json);
            return sy_api_fail(e, 400, "invalid_json", NULL,
                               "malformed JSON in the request body: extra data after the value at byte %zu", i);
        }
    }
    if (!cJSON_IsObject(json)) {
        cJSON_Delete(json);
        return sy_api_fail(e, 400, "invalid_json", NULL, "the request body must be a JSON object");
    }
    if (has_nul_escape(body, len)) {
        cJSON_Delete(json);
        return sy_api_fail(e, 400, "invalid_json", NULL, "strings in the request may not contain \\u0000");
    }
    *out = json;
    return 0;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (v == NULL || cJSON_IsNull(v)) ? NULL : v;
}

static void param_name(char *out, size_t size, const char *prefix, const char *key) {
    snprintf(out, size, "%s%s", prefix ? prefix : "", key);
}

int sy_json_get_string(const cJSON *obj, const char *prefix, const char *key, const char **out, bool *present,
                       sy_api_error *e) {
    const cJSON *v = field(obj, key);
    if (present) *present = v != NULL;
    if (v == NULL) return 0;
    char p[64];
    param_name(p, sizeof p, prefix, key);
    if (!cJSON_IsString(v) || v->valuestring == NULL)
        return sy_api_fail(e, 400, "invalid_type", p, "%s must be a string", p);
    *out = v->valuestring;
    return 0;
}

int sy_json_get_bool(const cJSON *obj, const char *prefix, const char *key, bool *out, bool *present,
                     sy_api_error *e) {
    const cJSON *v = field(obj, key);
    if (present) *present = v != NULL;
    if (v == NULL) return 0;
    char p[64];
    param_name(p, sizeof p, prefix, key);
    if (!cJSON_IsBool(v)) return sy_api_fail(e, 400, "invalid_type", p, "%s must be true or false", p);
    *out = cJSON_IsTrue(v);
    return 0;
}

int sy_json_get_number(const cJSON *obj, const char *prefix, const char *key, double min, double max,
                       double *out, bool *present, sy_api_error *e) {
    const cJSON *v = field(obj, key);
    if (present) *present = v != NULL;
    if (v == NULL) return 0;
    char p[64];
    param_name(p, sizeof p, prefix, key);
    if (!cJSON_IsNumber(v)) return sy_api_fail(e, 400, "invalid_type", p, "%s must be a number", p);
    double d = v->valuedouble;
    if (!isfinite(d) || d < min || d > max)
        return sy_api_fail(e, 400, "invalid_value", p, "%s must be a number from %g to %g", p, min, max);
    *out = d;
    return 0;
}

int sy_json_get_integer(const cJSON *obj, const char *prefix, const char *key, int64_t min, int64_t max,
                        int64_t *out, bool *present, sy_api_error *e) {
    const cJSON *v = field(obj, key);
    if (present) *present = v != NULL;
    if (v == NULL) return 0;
    char p[64];
    param_name(p, sizeof p, prefix, key);
    if (!cJSON_IsNumber(v)) return sy_api_fail(e, 400, "invalid_type", p, "%s must be an integer", p);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)min || d > (double)max)
        return sy_api_fail(e, 400, "invalid_value", p, "%s must be an integer from %lld to %lld", p, (long long)min,
                           (long long)max);
    *out = (int64_t)d;
    return 0;
}

int sy_json_get_seed(const cJSON *obj, const char *prefix, const char *key, uint64_t *out, bool *present,
                     sy_api_error *e) {
    const cJSON *v = field(obj, key);
    if (present) *present = v != NULL;
    if (v == NULL) return 0;
    char p[64];
    param_name(p, sizeof p, prefix, key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    /* [-2^63, 2^64) */
    if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 || d >= 18446744073709551616.0)
        return sy_api_fail(e, 400, "invalid_value", p, "%s must be an integer", p);
    *out = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    return 0;
}

int sy_json_get_stop(const cJSON *obj, const char *prefix, const char *key, sy_gen_params *params,
                     sy_api_error *e) {
    const cJSON *v = field(obj, key);
    if (v == NULL) return 0;
    char p[64];
    param_name(p, sizeof p, prefix, key);
    params->n_stop = 0;
    if (cJSON_IsString(v)) {
        if (v->valuestring[0] == '\0') return 0; /* "" stops nothing */
        params->stop[params->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return sy_api_fail(e, 400, "invalid_type", p, "%s must be a string or an array of strings", p);
    int n = cJSON_GetArraySize(v);
    if (n > SY_GEN_MAX_STOP_STRINGS)
        return sy_api_fail(e, 400, "invalid_value", p, "%s may hold at most %d strings, not %d", p,
                           SY_GEN_MAX_STOP_STRINGS, n);
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        if (!cJSON_IsString(item))
            return sy_api_fail(e, 400, "invalid_type", p, "%s must be a string or an array of strings", p);
        if (item->valuestring[0] == '\0') continue;
        params->stop[params->n_stop++] = item->valuestring;
    }
    return 0;
}

uint64_t sy_api_random_seed(void) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&ts;
    }
    return seed;
}

void sy_api_make_id(char *out, size_t size, const char *prefix) {
    uint64_t a = sy_api_random_seed(), b = sy_api_random_seed();
    snprintf(out, size, "%s%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
}
