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

#include "api/lease.h"

/* Render messages with the model's chat format and tokenize the prompt (BOS added when the model wants one);
 * errors as sy_api_render_chat and sy_api_tokenize_prompt give them. */
int32_t *sy_api_chat_tokens(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                            bool add_generation_prompt, size_t *n_tokens, sy_api_error *e);

/* A part of a prompt: at..at+len, tokenized with control-token text parsed unless plain. */
typedef struct sy_api_token_run {
    size_t at, len;
    bool plain;
} sy_api_token_run;
/* Tokenize text run by run and join the ids (BOS, emptiness and context checked as for a chat). */
int32_t *sy_api_tokenize_runs(const sy_api_model *m, const char *text, size_t len, const sy_api_token_run *runs,
                              size_t n_runs, size_t *n_tokens, sy_api_error *e);

#endif
