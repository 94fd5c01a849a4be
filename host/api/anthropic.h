/*
 * The Anthropic Messages API (what Claude Code and other agents speak): POST /v1/messages, streamed as its SSE
 * events or answered as one message, and POST /v1/messages/count_tokens. Errors in Anthropic's shape.
 */
#ifndef SY_HOST_API_ANTHROPIC_H
#define SY_HOST_API_ANTHROPIC_H

#include <cjson/cJSON.h>

#include "api/chat_tools.h"
#include "http/http_server.h"

void sy_api_anthropic_messages(sy_http_request *r);
void sy_api_anthropic_count_tokens(sy_http_request *r);

/* A Messages request's system, messages, tools and tool_choice as an OpenAI-shaped chat (c), and its
 * thinking; 400 naming the field (for tests too). */
int sy_api_anthropic_chat(const cJSON *body, sy_api_chat *c, sy_api_error *e);

#endif
