/* Shared pieces of the HTTP APIs: buffers, errors, JSON access, messages, the model lease, prompts, and the
 * hand-over of generation events from the engine thread to the connection's thread. */
#include "api_common.h"

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

#include "log.h"
#include "util.h"

/* ------------------------------------------------------------------------------------------------------------
 * sy_buf */

void sy_buf_init(sy_buf *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void sy_buf_free(sy_buf *b) {
    free(b->data);
    sy_buf_init(b);
}

static void buf_reserve(sy_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1) {
        fputs("switchyard: buffer size overflow\n", stderr);
        abort();
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = sy_xrealloc(b->data, cap);
    b->cap = cap;
}

void sy_buf_append(sy_buf *b, const void *data, size_t len) {
    buf_reserve(b, len);
    if (len > 0) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void sy_buf_puts(sy_buf *b, const char *s) { sy_buf_append(b, s, strlen(s)); }

void sy_buf_printf(sy_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        sy_buf_append(b, small, (size_t)n);
        return;
    }
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sy_buf_consume(sy_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        if (b->data) b->data[0] = '\0';
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *sy_buf_take(sy_buf *b) {
    if (b->data == NULL) buf_reserve(b, 0), b->data[0] = '\0';
    char *s = b->data;
    sy_buf_init(b);
    return s;
}

/* ------------------------------------------------------------------------------------------------------------
 * UTF-8 */

/* Length of the valid UTF-8 character at s[0..avail), or 0 when the bytes there are not one. */
static size_t utf8_char_len(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

size_t sy_utf8_sanitize(char *dst, size_t dst_size, const char *src, size_t src_len) {
    if (dst_size == 0) return 0;
    static const char replacement[] = "\xEF\xBF\xBD";
    const unsigned char *s = (const unsigned char *)src;
    size_t out = 0, i = 0;
    size_t limit = dst_size - 1;
    while (i < src_len) {
        size_t n = utf8_char_len(s + i, src_len - i);
        const char *piece;
        size_t piece_len;
        char one;
        if (n == 0) {
            piece = replacement, piece_len = 3, n = 1;
        } else if (n == 1 && (s[i] < 0x20 || s[i] == 0x7F) && s[i] != '\t' && s[i] != '\n') {
            one = '?', piece = &one, piece_len = 1;
        } else {
            piece = (const char *)s + i, piece_len = n;
        }
        if (out + piece_len > limit) {
            /* Cut: make room for "..." on a character boundary. */
            while (out > 0 && out + 3 > limit) {
                out--;
                while (out > 0 && ((unsigned char)dst[out] & 0xC0) == 0x80) out--;
            }
            if (out + 3 <= limit) memcpy(dst + out, "...", 3), out += 3;
            break;
        }
        memcpy(dst + out, piece, piece_len);
        out += piece_len;
        i += n;
    }
    dst[out] = '\0';
    return out;
}

void sy_utf8_repair(sy_buf *b, const char *src, size_t src_len) {
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, run = 0; /* run: start of the current stretch of valid bytes */
    while (i < src_len) {
        size_t n = utf8_char_len(s + i, src_len - i);
        if (n == 0) {
            sy_buf_append(b, src + run, i - run);
            sy_buf_append(b, "\xEF\xBF\xBD", 3);
            i++;
            run = i;
        } else {
            i += n;
        }
    }
    sy_buf_append(b, src + run, i - run);
}

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

int sy_api_parse_body(sy_http_request *r, cJSON **out, sy_api_error *e) {
    size_t len = 0;
    const char *body = sy_http_body(r, &len);
    *out = NULL;
    size_t start = 0;
    while (start < len && (body[start] == ' ' || body[start] == '\t' || body[start] == '\n' || body[start] == '\r'))
        start++;
    if (start == len) return sy_api_fail(e, 400, "invalid_json", NULL, "the request body is empty; a JSON object was expected");
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

/* ------------------------------------------------------------------------------------------------------------
 * Messages */

static int role_ok(const char *role) {
    size_t n = strlen(role);
    if (n == 0 || n > SY_CHAT_MAX_ROLE_LEN) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((role[i] >= 'a' && role[i] <= 'z') || role[i] == '_')) return 0;
    return 1;
}

int sy_api_parse_messages(const cJSON *messages, const char *key, sy_api_messages *out, sy_api_error *e) {
    memset(out, 0, sizeof *out);
    if (!cJSON_IsArray(messages))
        return sy_api_fail(e, 400, "invalid_type", key, "%s must be an array of messages", key);
    int count = cJSON_GetArraySize(messages);
    if (count > SY_API_MAX_MESSAGES)
        return sy_api_fail(e, 400, "invalid_value", key, "%s holds %d messages; at most %d are accepted", key, count,
                           SY_API_MAX_MESSAGES);
    out->items = sy_xcalloc((size_t)count + 1, sizeof *out->items);
    out->owned = sy_xcalloc((size_t)count + 1, sizeof *out->owned);
    const cJSON *msg;
    size_t i = 0;
    char p[64];
    cJSON_ArrayForEach(msg, messages) {
        snprintf(p, sizeof p, "%s[%zu]", key, i);
        if (!cJSON_IsObject(msg)) {
            sy_api_messages_free(out);
            return sy_api_fail(e, 400, "invalid_type", p, "%s must be an object with role and content", p);
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsString(role) || !role_ok(role->valuestring)) {
            sy_api_messages_free(out);
            snprintf(p, sizeof p, "%s[%zu].role", key, i);
            return sy_api_fail(e, 400, "invalid_value", p, "%s must be a role name such as \"user\" (a-z and _)", p);
        }
        /* OpenAI's "developer" is the system prompt of newer models. */
        out->items[i].role = strcmp(role->valuestring, "developer") == 0 ? "system" : role->valuestring;
        const cJSON *images = cJSON_GetObjectItemCaseSensitive(msg, "images");
        if (cJSON_IsArray(images) && cJSON_GetArraySize(images) > 0) {
            sy_api_messages_free(out);
            snprintf(p, sizeof p, "%s[%zu].images", key, i);
            return sy_api_fail(e, 400, "unsupported_content", p, "%s: image inputs are not supported", p);
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        snprintf(p, sizeof p, "%s[%zu].content", key, i);
        if (content == NULL || cJSON_IsNull(content)) {
            out->items[i].content = "";
            out->items[i].content_len = 0;
        } else if (cJSON_IsString(content)) {
            out->items[i].content = content->valuestring;
            out->items[i].content_len = strlen(content->valuestring);
        } else if (cJSON_IsArray(content)) {
            sy_buf joined;
            sy_buf_init(&joined);
            const cJSON *part;
            size_t k = 0;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
                    sy_buf_free(&joined);
                    sy_api_messages_free(out);
                    return sy_api_fail(e, 400, "invalid_type", p, "%s[%zu] must be an object with a type", p, k);
                }
                if (strcmp(type->valuestring, "text") != 0) {
                    char type_safe[64];
                    sy_utf8_sanitize(type_safe, sizeof type_safe, type->valuestring, strlen(type->valuestring));
                    sy_buf_free(&joined);
                    sy_api_messages_free(out);
                    return sy_api_fail(e, 400, "unsupported_content", p,
                                       "%s[%zu]: content of type '%s' is not supported; only text is", p, k,
                                       type_safe);
                }
                if (!cJSON_IsString(text)) {
                    sy_buf_free(&joined);
                    sy_api_messages_free(out);
                    return sy_api_fail(e, 400, "invalid_type", p, "%s[%zu].text must be a string", p, k);
                }
                sy_buf_puts(&joined, text->valuestring);
                k++;
            }
            out->items[i].content_len = joined.len;
            out->owned[out->n_owned] = sy_buf_take(&joined);
            out->items[i].content = out->owned[out->n_owned++];
        } else {
            sy_api_messages_free(out);
            return sy_api_fail(e, 400, "invalid_type", p, "%s must be a string or an array of content parts", p);
        }
        i++;
    }
    out->n = i;
    return 0;
}

void sy_api_messages_free(sy_api_messages *m) {
    if (m->owned != NULL)
        for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->items);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------------------------------------------
 * The model */

int sy_api_acquire(sy_http_request *r, const char *requested, sy_api_model *m, sy_api_error *e) {
    memset(m, 0, sizeof *m);
    if (requested == NULL || requested[0] == '\0')
        return sy_api_fail(e, 400, "missing_model", "model", "model is required: name one of the configured models");
    if (strlen(requested) > SY_CONFIG_MAX_NAME_LEN) {
        char shown[48];
        sy_utf8_sanitize(shown, sizeof shown, requested, strlen(requested));
        return sy_api_fail(e, 404, "model_not_found", "model", "model '%s' does not exist (names are at most %d characters)",
                           shown, SY_CONFIG_MAX_NAME_LEN);
    }
    if (sy_server_stopping(sy_http_server(r)))
        return sy_api_fail(e, 503, "server_stopping", NULL, "the server is shutting down");
    sy_http_keep_open(r);
    double t0 = sy_now_seconds();
    char err[900] = "";
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire(sy_server_manager(sy_http_server(r)), requested, err,
                                                     sizeof err, &status);
    m->acquire_seconds = sy_now_seconds() - t0;
    if (lease == NULL) {
        if (status < 400 || status > 599) status = 503;
        const char *code = status == 404 ? "model_not_found" : status == 429 ? "queue_full" : "model_unavailable";
        return sy_api_fail(e, status, code, status == 404 ? "model" : NULL, "%s",
                           err[0] ? err : "the model is not available");
    }
    m->lease = lease;
    m->lm = sy_model_lease_model(lease);
    snprintf(m->name, sizeof m->name, "%s", sy_model_lease_name(lease));
    snprintf(m->requested, sizeof m->requested, "%s", requested);
    return 0;
}

void sy_api_model_release(sy_api_model *m) {
    if (m->lease != NULL) sy_model_lease_release(m->lease);
    m->lease = NULL;
}

void sy_api_token_text(const sy_loaded_model *lm, int32_t token, sy_buf *text, sy_buf *raw) {
    char *bytes = NULL;
    size_t cap = 0;
    long n = sy_loaded_model_token_bytes(lm, token, &bytes, &cap);
    if (n < 0) n = 0;
    if (raw != NULL) sy_buf_append(raw, bytes, (size_t)n);
    if (text != NULL) sy_utf8_repair(text, bytes ? bytes : "", (size_t)n);
    free(bytes);
}

/* The NUL-terminated text of a token, or NULL when the model has no such token. */
static char *token_string(const sy_loaded_model *lm, int32_t token) {
    if (token < 0) return NULL;
    sy_buf b;
    sy_buf_init(&b);
    sy_api_token_text(lm, token, &b, NULL);
    if (b.len == 0) {
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

#define SY_API_MAX_TEMPLATE_FILE ((size_t)1 << 20)

static char *read_small_file(const char *path, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_size, "chat_template_file %s: %s", path, strerror(errno));
        return NULL;
    }
    sy_buf b;
    sy_buf_init(&b);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > SY_API_MAX_TEMPLATE_FILE) {
            snprintf(err, err_size, "chat_template_file %s: larger than %zu bytes", path, SY_API_MAX_TEMPLATE_FILE);
            fclose(f);
            sy_buf_free(&b);
            return NULL;
        }
        sy_buf_append(&b, chunk, n);
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(err, err_size, "chat_template_file %s: read error", path);
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

int sy_api_render_chat(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                       bool add_generation_prompt, char **text, size_t *len, sy_api_error *e) {
    *text = NULL;
    const char *override = m->lease ? sy_model_lease_chat_template(m->lease) : NULL;
    char *file_text = NULL;
    char err[512] = "";
    if (override == NULL) {
        sy_server *srv = sy_http_server(r);
        const sy_config *cfg = sy_server_config_acquire(srv);
        const sy_config_model *cm = cfg ? sy_config_find_model(cfg, m->name) : NULL;
        if (cm != NULL && cm->chat_template_file != NULL) {
            file_text = read_small_file(cm->chat_template_file, err, sizeof err);
            if (file_text == NULL) {
                sy_server_config_release(srv, cfg);
                sy_log(SY_LOG_ERROR, "model %s: %s", m->name, err);
                return sy_api_fail(e, 500, "chat_template_error", NULL, "model %s: %s", m->name, err);
            }
        }
        sy_server_config_release(srv, cfg);
    }
    const char *jinja = file_text != NULL ? file_text : m->lm->info.chat_template;
    char *bos = token_string(m->lm, m->lm->info.bos_token);
    char *eos = token_string(m->lm, m->lm->info.eos_token);
    sy_chat_template t;
    int rc = sy_chat_template_init(&t, override, jinja, bos, eos, err, sizeof err);
    free(bos);
    free(eos);
    free(file_text);
    if (rc != 0) return sy_api_fail(e, 500, "chat_template_error", NULL, "model %s: %s", m->name, err);
    *text = sy_chat_render(&t, messages, n, add_generation_prompt, len, err, sizeof err);
    sy_chat_template_free(&t);
    if (*text == NULL) return sy_api_fail(e, 400, "invalid_messages", "messages", "%s", err);
    return 0;
}

int sy_api_check_context(const sy_api_model *m, size_t n_prompt, const char *param, sy_api_error *e) {
    uint32_t n_ctx = m->lm->info.n_ctx;
    if (n_ctx > 0 && n_prompt >= n_ctx)
        return sy_api_fail(e, 400, "context_length_exceeded", param,
                           "the prompt has %zu tokens, but model %s holds at most %u tokens in its context, and at "
                           "least one must remain for the reply",
                           n_prompt, m->name, n_ctx);
    return 0;
}

int32_t *sy_api_tokenize_prompt(const sy_api_model *m, const char *text, size_t len, bool chat, size_t *n,
                                sy_api_error *e) {
    char err[512] = "";
    uint32_t flags = SY_TOKENIZE_PARSE_SPECIAL | (chat ? 0u : (uint32_t)SY_TOKENIZE_ADD_SPECIAL);
    size_t count = 0;
    int32_t *tokens = sy_loaded_model_tokenize(m->lm, text, len, flags, &count, err, sizeof err);
    if (tokens == NULL) {
        sy_api_fail(e, 400, "tokenize_failed", NULL, "the prompt could not be tokenized: %s", err);
        return NULL;
    }
    int32_t bos = m->lm->info.bos_token;
    if (chat && m->lm->info.add_bos && bos >= 0 && (count == 0 || tokens[0] != bos)) {
        /* The template's text did not start with BOS, but the model wants one. */
        tokens = sy_xrealloc(tokens, (count + 1) * sizeof *tokens);
        memmove(tokens + 1, tokens, count * sizeof *tokens);
        tokens[0] = bos;
        count++;
    }
    if (count == 0) {
        free(tokens);
        sy_api_fail(e, 400, "empty_prompt", "prompt", "the prompt is empty (and this model adds no BOS token)");
        return NULL;
    }
    if (sy_api_check_context(m, count, chat ? "messages" : "prompt", e) != 0) {
        free(tokens);
        return NULL;
    }
    *n = count;
    return tokens;
}

/* ------------------------------------------------------------------------------------------------------------
 * One generation */

struct sy_api_gen {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    sy_api_event *head, *tail;
    bool ended;        /* the callback delivered DONE or ERROR */
    bool consumed_end; /* the consumer took it */
    bool cancelled;
    bool server_stop;  /* cancelled by the server's stop */
    bool unload_after;
    sy_gen *gen;
    uint64_t track;
    sy_http_request *request;
    sy_server *server;
    sy_model_lease *lease;
    const sy_loaded_model *lm;
    char model_name[SY_CONFIG_MAX_NAME_LEN + 1];
    double t_request;
    double t_last_token;   /* 0 before the first */
    double t_client_check; /* when the client's socket was last looked at */
};

static void gen_callback(void *user, const sy_gen_event *ev) {
    sy_api_gen *g = user;
    sy_api_event *e = sy_xcalloc(1, sizeof *e);
    e->type = ev->type;
    e->time = sy_now_seconds();
    e->token = -1;
    switch (ev->type) {
    case SY_GEN_EVENT_TEXT:
        e->text = sy_xmalloc(ev->text_len + 1);
        if (ev->text_len > 0 && ev->text != NULL) memcpy(e->text, ev->text, ev->text_len);
        e->text[ev->text_len] = '\0';
        e->text_len = ev->text != NULL ? ev->text_len : 0;
        e->token = ev->token;
        e->logprob = ev->logprob;
        e->n_top = ev->n_top > SY_GEN_MAX_TOP_LOGPROBS ? SY_GEN_MAX_TOP_LOGPROBS : ev->n_top;
        if (e->n_top > 0 && ev->top != NULL) memcpy(e->top, ev->top, e->n_top * sizeof *e->top);
        else e->n_top = 0;
        break;
    case SY_GEN_EVENT_DONE:
        snprintf(e->finish_reason, sizeof e->finish_reason, "%s", ev->finish_reason ? ev->finish_reason : "stop");
        e->usage = ev->usage;
        break;
    case SY_GEN_EVENT_ERROR:
        e->message = sy_strdup(ev->message ? ev->message : "generation failed");
        e->usage = ev->usage;
        break;
    }
    pthread_mutex_lock(&g->lock);
    if (g->tail) g->tail->next = e;
    else g->head = e;
    g->tail = e;
    if (ev->type != SY_GEN_EVENT_TEXT) g->ended = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* Called by the server's stop, under its tracking lock. */
static void gen_stop_hook(void *arg) {
    sy_api_gen *g = arg;
    pthread_mutex_lock(&g->lock);
    g->server_stop = true;
    g->cancelled = true;
    pthread_mutex_unlock(&g->lock);
    sy_gen_cancel(g->gen);
}

static void gen_free_events(sy_api_gen *g) {
    sy_api_event *e = g->head;
    while (e) {
        sy_api_event *next = e->next;
        sy_api_event_free(e);
        e = next;
    }
    g->head = g->tail = NULL;
}

sy_api_gen *sy_api_gen_start(sy_http_request *r, sy_api_model *m, const int32_t *prompt, size_t n_prompt,
                             const sy_gen_params *params, sy_api_error *e) {
    sy_server *srv = sy_http_server(r);
    if (sy_server_stopping(srv)) {
        sy_api_fail(e, 503, "server_stopping", NULL, "the server is shutting down");
        return NULL;
    }
    sy_api_gen *g = sy_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->request = r;
    g->server = srv;
    g->lm = m->lm;
    g->t_request = sy_http_start_time(r);
    snprintf(g->model_name, sizeof g->model_name, "%s", m->name);
    char err[512] = "";
    int status = 0;
    sy_scheduler *sched = sy_model_lease_scheduler(m->lease);
    g->gen = sched ? sy_scheduler_submit(sched, prompt, n_prompt, params, gen_callback, g, err, sizeof err, &status)
                   : NULL;
    if (g->gen == NULL) {
        if (status < 400 || status > 599) status = 503;
        sy_api_fail(e, status, status == 429 ? "queue_full" : status == 400 ? "invalid_request" : "model_unavailable",
                    NULL, "%s", err[0] ? err : "the model's scheduler refused the request");
        gen_free_events(g);
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return NULL;
    }
    g->lease = m->lease;
    m->lease = NULL;
    g->track = sy_server_track(srv, gen_stop_hook, g);
    if (g->track == 0) gen_stop_hook(g); /* the stop began meanwhile */
    return g;
}

void sy_api_event_free(sy_api_event *ev) {
    if (ev == NULL) return;
    free(ev->text);
    free(ev->message);
    free(ev);
}

static void gen_record(sy_api_gen *g, const sy_api_event *ev) {
    sy_metrics *metrics = sy_server_metrics(g->server);
    if (ev->type == SY_GEN_EVENT_TEXT && ev->token >= 0) {
        if (g->t_last_token == 0) sy_metrics_time_to_first_token(metrics, ev->time - g->t_request);
        else sy_metrics_token_latency(metrics, ev->time - g->t_last_token);
        g->t_last_token = ev->time;
    } else if (ev->type != SY_GEN_EVENT_TEXT) {
        sy_metrics_tokens(metrics, g->model_name, ev->usage.prompt_tokens, ev->usage.cached_tokens,
                          ev->usage.completion_tokens);
        if (ev->usage.drafted_tokens != 0)
            sy_metrics_draft_tokens(metrics, g->model_name, ev->usage.drafted_tokens, ev->usage.accepted_tokens);
    }
}

sy_api_event *sy_api_gen_next(sy_api_gen *g) {
    /* While events flow the wait below never times out: look at the client every quarter second anyway, so that
     * a collected (non-streamed) generation notices a client that left. */
    double now = sy_now_seconds();
    if (now - g->t_client_check >= 0.25) {
        g->t_client_check = now;
        if (sy_http_client_gone(g->request)) {
            pthread_mutex_lock(&g->lock);
            bool cancel = !g->cancelled && !g->ended;
            g->cancelled = true;
            pthread_mutex_unlock(&g->lock);
            if (cancel) sy_gen_cancel(g->gen);
            return NULL;
        }
    }
    pthread_mutex_lock(&g->lock);
    while (g->head == NULL) {
        if (g->consumed_end) {
            pthread_mutex_unlock(&g->lock);
            return NULL;
        }
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 250 * 1000 * 1000;
        if (deadline.tv_nsec >= 1000000000) deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
        if (g->head != NULL || g->cancelled) continue;
        /* Nothing yet: has the client gone away meanwhile? (A cancelled generation still ends with DONE.) */
        pthread_mutex_unlock(&g->lock);
        bool gone = sy_http_client_gone(g->request);
        pthread_mutex_lock(&g->lock);
        if (gone && g->head == NULL) {
            g->cancelled = true;
            pthread_mutex_unlock(&g->lock);
            sy_gen_cancel(g->gen);
            return NULL;
        }
    }
    sy_api_event *ev = g->head;
    g->head = ev->next;
    if (g->head == NULL) g->tail = NULL;
    ev->next = NULL;
    if (ev->type != SY_GEN_EVENT_TEXT) g->consumed_end = true;
    pthread_mutex_unlock(&g->lock);
    gen_record(g, ev);
    return ev;
}

void sy_api_gen_finish(sy_api_gen *g) {
    if (g == NULL) return;
    sy_server_untrack(g->server, g->track);
    pthread_mutex_lock(&g->lock);
    if (!g->ended) {
        g->cancelled = true;
        pthread_mutex_unlock(&g->lock);
        sy_gen_cancel(g->gen);
        pthread_mutex_lock(&g->lock);
        while (!g->ended) pthread_cond_wait(&g->cond, &g->lock);
    }
    if (!g->consumed_end) {
        /* Count the tokens of a generation whose end nobody read (the client went away). */
        for (sy_api_event *e = g->head; e; e = e->next)
            if (e->type != SY_GEN_EVENT_TEXT) gen_record(g, e);
    }
    gen_free_events(g);
    pthread_mutex_unlock(&g->lock);
    sy_gen_release(g->gen);
    if (g->lease) sy_model_lease_release(g->lease);
    if (g->unload_after) {
        int n = sy_model_manager_unload(sy_server_manager(g->server), g->model_name);
        sy_log(SY_LOG_INFO, "model %s: unloaded after the request (keep_alive 0): %d", g->model_name, n);
    }
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

const sy_loaded_model *sy_api_gen_model(const sy_api_gen *g) { return g->lm; }
const char *sy_api_gen_model_name(const sy_api_gen *g) { return g->model_name; }
void sy_api_gen_unload_after(sy_api_gen *g) { g->unload_after = true; }

bool sy_api_gen_server_stopping(const sy_api_gen *g) {
    sy_api_gen *mg = (sy_api_gen *)g;
    pthread_mutex_lock(&mg->lock);
    bool s = mg->server_stop;
    pthread_mutex_unlock(&mg->lock);
    return s || sy_server_stopping(g->server);
}

/* ------------------------------------------------------------------------------------------------------------
 * Streams */

typedef struct api_stream {
    sy_api_gen *gen;
    const sy_api_stream_ops *ops;
    void *state;
    sy_buf out;
    bool finished;
} api_stream;

static ssize_t stream_read(void *cls, char *buf, size_t max) {
    api_stream *s = cls;
    while (s->out.len == 0) {
        if (s->finished) return SY_HTTP_STREAM_END;
        sy_api_event *ev = sy_api_gen_next(s->gen);
        if (ev == NULL) return SY_HTTP_STREAM_ABORT;
        s->ops->format(s->state, s->gen, ev, &s->out);
        if (ev->type != SY_GEN_EVENT_TEXT) s->finished = true;
        sy_api_event_free(ev);
    }
    size_t n = s->out.len < max ? s->out.len : max;
    memcpy(buf, s->out.data, n);
    sy_buf_consume(&s->out, n);
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    api_stream *s = cls;
    sy_api_gen_finish(s->gen);
    if (s->ops->free_state) s->ops->free_state(s->state);
    sy_buf_free(&s->out);
    free(s);
}

int sy_api_respond_stream(sy_http_request *r, const char *content_type, sy_api_gen *g,
                          const sy_api_stream_ops *ops, void *state) {
    api_stream *s = sy_xcalloc(1, sizeof *s);
    s->gen = g;
    s->ops = ops;
    s->state = state;
    sy_buf_init(&s->out);
    return sy_http_respond_stream(r, content_type, stream_read, s, stream_free);
}

/* ------------------------------------------------------------------------------------------------------------
 * Management endpoints: /, /health, /running, /unload, /metrics */

void sy_api_root(sy_http_request *r) {
    static const char text[] = "switchyard is running\n";
    sy_http_respond(r, 200, "text/plain; charset=utf-8", text, sizeof text - 1);
}

void sy_api_health(sy_http_request *r) {
    sy_server *srv = sy_http_server(r);
    cJSON *json = cJSON_CreateObject();
    int status = 200;
    if (sy_server_stopping(srv)) {
        status = 503;
        cJSON_AddStringToObject(json, "status", "stopping");
    } else if (sy_model_manager_loading(sy_server_manager(srv))) {
        status = 503;
        cJSON_AddStringToObject(json, "status", "loading");
    } else {
        cJSON_AddStringToObject(json, "status", "ok");
    }
    sy_http_respond_json(r, status, json);
}

/* The manager's status of every configured model (malloc'd, *n entries). */
static sy_model_status *model_statuses(sy_model_manager *mm, size_t *n) {
    size_t cap = 16;
    for (;;) {
        sy_model_status *st = sy_xcalloc(cap, sizeof *st);
        size_t total = sy_model_manager_status(mm, st, cap);
        if (total <= cap) {
            *n = total;
            return st;
        }
        free(st);
        cap = total; /* a reload may have grown the list meanwhile: try again */
    }
}

static const char *model_state_name(sy_model_state s) {
    switch (s) {
    case SY_MODEL_UNLOADED: return "stopped";
    case SY_MODEL_LOADING: return "starting";
    case SY_MODEL_READY: return "ready";
    case SY_MODEL_UNLOADING: return "stopping";
    }
    return "unknown";
}

void sy_api_running(sy_http_request *r) {
    size_t n = 0;
    sy_model_status *st = model_statuses(sy_server_manager(sy_http_server(r)), &n);
    cJSON *json = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(json, "running");
    for (size_t i = 0; i < n; i++) {
        if (st[i].state == SY_MODEL_UNLOADED) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", st[i].name ? st[i].name : "");
        cJSON_AddStringToObject(o, "state", model_state_name(st[i].state));
        cJSON_AddStringToObject(o, "plugin", st[i].plugin ? st[i].plugin : "");
        cJSON_AddStringToObject(o, "path", st[i].path ? st[i].path : "");
        cJSON_AddNumberToObject(o, "ttl", (double)st[i].ttl_in_effect_s); /* a keep_alive's, else the config's */
        cJSON_AddNumberToObject(o, "idle_seconds", st[i].idle_seconds);
        cJSON_AddNumberToObject(o, "memory_bytes", (double)st[i].memory_bytes);
        cJSON_AddNumberToObject(o, "slots_busy", st[i].sched.slots_busy);
        cJSON_AddNumberToObject(o, "queue_depth", st[i].sched.queue_depth);
        cJSON_AddItemToArray(running, o);
    }
    free(st);
    sy_http_respond_json(r, 200, json);
}

void sy_api_unload(sy_http_request *r) {
    const char *name = sy_http_path_param(r);
    if (name == NULL || name[0] == '\0') name = sy_http_query(r, "model");
    if (name != NULL && name[0] == '\0') name = NULL;
    int n = sy_model_manager_unload(sy_server_manager(sy_http_server(r)), name);
    if (n < 0) {
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, name, strlen(name));
        sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' is not configured", shown);
        return;
    }
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "status", "ok");
    cJSON_AddNumberToObject(json, "unloaded", n);
    sy_http_respond_json(r, 200, json);
}

void sy_api_metrics(sy_http_request *r) {
    sy_server *srv = sy_http_server(r);
    sy_model_manager *mm = sy_server_manager(srv);
    size_t n = 0;
    sy_model_status *st = model_statuses(mm, &n);
    sy_model_manager_counters counters;
    memset(&counters, 0, sizeof counters);
    sy_model_manager_get_counters(mm, &counters);
    size_t len = 0;
    char *text = sy_metrics_render(sy_server_metrics(srv), st, n, &counters, &len);
    free(st);
    sy_http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}
