/*
 * Tools and reasoning of a chat request, for every API (OpenAI, Ollama, Anthropic): the request's tools,
 * tool_choice and history checked and normalised to OpenAI's shape; the prompt rendered with them; the grammar
 * that constrains the calls (built from the tools' JSON schemas in the format the model's template teaches);
 * and the options that parse the output back into content, reasoning and calls (chat/tool_call.h).
 *
 *   tool_choice  none: no tools offered to the model, no calls parsed (history with calls is still rendered)
 *                auto: free text until the format's opener appears (a lazy grammar), then a constrained call
 *                required / a named function: a call from the first token on (always well formed, the
 *                arguments valid against the schema)
 * A template without tool support gets the generic format: the tools described in the system prompt and the
 * output constrained to one JSON object, {"tool_calls": [...]} or (auto) {"response": "..."}.
 */
#ifndef SY_HOST_API_CHAT_TOOLS_H
#define SY_HOST_API_CHAT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "api/lease.h"
#include "api/request.h"
#include "chat/tool_call.h"
#include "engine/scheduler.h"

typedef enum sy_tool_choice {
    SY_TOOL_CHOICE_AUTO = 0,
    SY_TOOL_CHOICE_NONE,
    SY_TOOL_CHOICE_REQUIRED,
    SY_TOOL_CHOICE_NAMED,
} sy_tool_choice;

typedef enum sy_reasoning_format {
    SY_REASONING_AUTO = 0,   /* split thinking blocks out where the template has them (llama-server's default) */
    SY_REASONING_NONE,       /* leave them in the content */
} sy_reasoning_format;

#define SY_API_MAX_TOOLS 256
#define SY_API_MAX_TOOL_NAME 64

typedef struct sy_api_chat {
    cJSON *messages;          /* OpenAI shape: tool_calls[].function.arguments as objects; tool messages named */
    cJSON *tools;             /* [{"type":"function","function":{"name","description","parameters"}}] or NULL */
    size_t n_tools;
    sy_tool_choice choice;
    char named[SY_API_MAX_TOOL_NAME + 1];
    bool parallel;            /* parallel_tool_calls (default true) */
    sy_reasoning_format reasoning_format;
    int think;                /* -1 as the template decides, 0 off, 1 on */
    cJSON *kwargs;            /* chat_template_kwargs (reasoning_effort and enable_thinking folded in) */
    /* Set by sy_api_chat_prepare: */
    sy_template_traits traits;
    sy_chat_parse_options parse;
    bool tools_active;        /* tools offered and calls parsed (choice != none and tools given) */
} sy_api_chat;

void sy_api_chat_init(sy_api_chat *c);
void sy_api_chat_free(sy_api_chat *c);

/* OpenAI /v1/chat/completions: messages, tools, tool_choice, parallel_tool_calls, reasoning_format,
 * reasoning_effort, chat_template_kwargs. 400 naming the field for what is wrong. */
int sy_api_chat_from_openai(const cJSON *body, sy_api_chat *c, sy_api_error *e);
/* Ollama /api/chat: messages (tool_calls with arguments as objects, tool messages with tool_name), tools,
 * think (true, false, "low", "medium", "high"). */
int sy_api_chat_from_ollama(const cJSON *body, sy_api_chat *c, sy_api_error *e);
/* Shared by the APIs: takes ownership of messages and tools (OpenAI shape) and checks them: tool names and
 * schemas (each must compile to a grammar), the named choice, every tool message answering a call. */
int sy_api_chat_set(sy_api_chat *c, cJSON *messages, cJSON *tools, sy_api_error *e);

/* With the model: its template's traits, the prompt (*text, malloc'd), the grammar and trigger words in p, the
 * parse options in c->parse. A constraint already in p (response_format) with tools active is a 400. */
int sy_api_chat_prepare(sy_http_request *r, const sy_api_model *m, sy_api_chat *c, sy_gen_params *p, char **text,
                        size_t *len, sy_api_error *e);

/* The capabilities a model's template gives, appended to an array (Ollama /api/show): "tools" always (templates
 * without tools get the generic format), "thinking" where the template (template_file when given, else jinja)
 * has thinking blocks. Extend here as capabilities are added. */
void sy_api_template_capabilities(const char *jinja, const char *template_file, cJSON *array);

/* A call's arguments as a JSON value (an object; {} when they are not JSON). */
cJSON *sy_api_tool_arguments(const sy_tool_call *call);

#endif
