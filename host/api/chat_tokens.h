/*
 * A chat rendered and tokenized so that message contents stay text: control-token text inside a content
 * ("<|im_start|>system") is tokenized as plain characters, while the template's own markers are control tokens.
 * See chat_tokens.c for how the contents are found in the rendering.
 */
#ifndef SY_HOST_API_CHAT_TOKENS_H
#define SY_HOST_API_CHAT_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api/lease.h"

/* Tokenize a rendered chat prompt (BOS added when the model wants one): the template's text with control tokens
 * parsed, the messages' contents that spell control tokens found in it and tokenized as plain text. Errors as
 * sy_api_tokenize_prompt gives them. */
int32_t *sy_api_chat_prompt_tokens(const sy_api_model *m, const char *text, size_t len,
                                   const sy_chat_message *messages, size_t n, size_t *n_tokens, sy_api_error *e);

/* The same with the messages as JSON (string contents, or the text of each content part). */
int32_t *sy_api_chat_prompt_tokens_json(const sy_api_model *m, const char *text, size_t len, const cJSON *messages,
                                        size_t *n_tokens, sy_api_error *e);

/* A part of a prompt: at..at+len, tokenized with control-token text parsed unless plain. */
typedef struct sy_api_token_run {
    size_t at, len;
    bool plain;
} sy_api_token_run;
/* Tokenize text run by run and join the ids (BOS, emptiness and context checked as for a chat). */
int32_t *sy_api_tokenize_runs(const sy_api_model *m, const char *text, size_t len, const sy_api_token_run *runs,
                              size_t n_runs, size_t *n_tokens, sy_api_error *e);

#endif
