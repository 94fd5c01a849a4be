/*
 * A chat generation's text turned into what each API sends: content, reasoning and tool calls, streamed as
 * deltas or collected into one message. Built on the output parser's stream (chat/tool_call.h).
 */
#ifndef SY_HOST_API_CHAT_OUTPUT_H
#define SY_HOST_API_CHAT_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "chat/tool_call.h"

typedef struct sy_api_chat_output {
    sy_tool_stream stream;
    bool started;
    /* What the last feed or finish produced, until taken. */
    sy_buf content, reasoning;
    cJSON *openai_calls;  /* OpenAI delta.tool_calls entries */
    size_t whole_calls;   /* calls already handed out whole (Ollama) */
} sy_api_chat_output;

void sy_api_chat_output_init(sy_api_chat_output *o, const sy_chat_parse_options *opts, uint64_t id_seed);
void sy_api_chat_output_free(sy_api_chat_output *o);
/* Appends output text; the new pieces wait in content, reasoning and openai_calls. */
void sy_api_chat_output_feed(sy_api_chat_output *o, const char *text, size_t len);
/* The end: the rest is parsed; stream.last holds the whole result. */
void sy_api_chat_output_finish(sy_api_chat_output *o);
const sy_chat_parse *sy_api_chat_output_result(const sy_api_chat_output *o);

/* OpenAI: the pending pieces as a chat.completion.chunk delta (content, reasoning_content, tool_calls), or NULL
 * when nothing is pending. Clears them. */
cJSON *sy_api_chat_output_openai_delta(sy_api_chat_output *o);
/* OpenAI: the final message's fields (content or null, reasoning_content, tool_calls) into msg. */
void sy_api_chat_output_openai_message(const sy_api_chat_output *o, cJSON *msg);
/* Ollama: tool calls that are complete and not yet handed out, as message.tool_calls entries (arguments as
 * objects); NULL when none. at_end: every remaining call. */
cJSON *sy_api_chat_output_ollama_calls(sy_api_chat_output *o, bool at_end);
/* Whether the output holds tool calls (after finish). */
bool sy_api_chat_output_has_calls(const sy_api_chat_output *o);

#endif
