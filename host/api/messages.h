/*
 * Chat messages from a request body.
 */
#ifndef SY_HOST_API_MESSAGES_H
#define SY_HOST_API_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api/request.h"
#include "chat/chat_template.h"

/* ------------------------------------------------------------------------------------------------------------
 * Chat messages: [{"role": "...", "content": "..." | null | [{"type":"text","text":"..."}, ...]}, ...].
 * Non-text content (images, audio) is refused with 400. */
typedef struct sy_api_messages {
    sy_chat_message *items;
    size_t n;
    char **owned; /* joined content parts */
    size_t n_owned;
} sy_api_messages;

#define SY_API_MAX_MESSAGES 65536

int sy_api_parse_messages(const cJSON *messages, const char *key, sy_api_messages *out, sy_api_error *e);
void sy_api_messages_free(sy_api_messages *m);

#endif
