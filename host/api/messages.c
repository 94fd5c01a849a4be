/* Chat messages from a request. */
#include "api/messages.h"

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
#include "base/util.h"

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
