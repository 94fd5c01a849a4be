/*
 * A chat request -> the prompt text of the requested model, through the model's own Jinja chat template.
 *
 * Which template: the config's chat_template_file; else the config's `chat_template = NAME` when NAME is one of
 * the model's named templates (e.g. tool_use, from GGUF tokenizer.chat_template.NAME or a tokenizer_config.json
 * list); else the model's tool_use template when the request has tools and the model names one (as transformers
 * and llama.cpp pick it); else the model's own (tokenizer.chat_template, tokenizer_config.json, chat_template.jinja).
 * The built-in renderers (chat/chat_template.h) are used only for `chat_template = chatml|llama3|llama2|raw` and for
 * models that carry no template or whose template this engine cannot compile (logged once as a warning).
 *
 * The template sees the request's messages as sent (assistant tool_calls, tool messages with tool_call_id and
 * name, reasoning_content...), with contents given as text parts joined into one string and "developer" read as
 * "system"; the request's tools; chat_template_kwargs (and a top-level reasoning_effort) as variables; the
 * model's BOS and EOS texts as bos_token and eos_token.
 */
#ifndef SY_HOST_API_CHAT_PROMPT_H
#define SY_HOST_API_CHAT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "api/lease.h"
#include "api/request.h"
#include "chat/chat_template.h"

typedef struct sy_api_chat_request {
    /* The messages as checked by sy_api_parse_messages (roles, joined text contents) ... */
    const sy_chat_message *items;
    size_t n_items;
    /* ... and the same messages as the request's JSON (NULL: the template sees only role and content). */
    const cJSON *messages;
    const cJSON *tools;                /* or NULL */
    const cJSON *chat_template_kwargs; /* an object, or NULL */
    const char *reasoning_effort;      /* or NULL */
    bool add_generation_prompt;
} sy_api_chat_request;

/* The prompt text (malloc'd, *len its length), or -1 with e set: 400 with the template's own message when it
 * refuses the conversation (raise_exception), 500 when the model's template cannot be read. */
int sy_api_render_chat_request(sy_http_request *r, const sy_api_model *m, const sy_api_chat_request *q, char **text,
                               size_t *len, sy_api_error *e);

/* The same for messages alone (role and text): Ollama's generate with its prompt and system. */
int sy_api_render_chat(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                       bool add_generation_prompt, char **text, size_t *len, sy_api_error *e);

/* Which template serves a model (for /api/show and /props): the Jinja text (malloc'd; NULL when the model is
 * rendered by a built-in format). */
char *sy_api_model_template_text(sy_http_request *r, const sy_api_model *m, bool with_tools);

#endif
