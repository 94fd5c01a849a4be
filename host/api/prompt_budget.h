/*
 * Bounds on what a prompt may cost before the model sees it: a prompt whose bytes cannot fit the context
 * (more than n_ctx times the vocabulary's longest token) is refused before it is rendered or tokenized, and
 * the prompt bytes being tokenized at once, across all requests, stay within [host] tokenize_memory (a request
 * waits its turn, or gets 503 when the wait is long; one larger than the whole budget gets 413).
 */
#ifndef SY_HOST_API_PROMPT_BUDGET_H
#define SY_HOST_API_PROMPT_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "api/request.h"
#include "chat/chat_template.h"
#include "plugins/loaded_model.h"

/* How long a request waits for tokenizing room before its 503. */
#define SY_API_TOKENIZE_WAIT_S 30.0

/* 400 "context_length_exceeded" (naming param) when len bytes cannot fit the model's context. */
int sy_api_check_prompt_bytes(const sy_loaded_model *lm, const char *model_name, uint64_t len, const char *param,
                              sy_api_error *e);
/* The same for the messages of a chat, counted before rendering. */
int sy_api_check_messages_bytes(const sy_loaded_model *lm, const char *model_name, const sy_chat_message *messages,
                                size_t n, sy_api_error *e);

/* What tokenizing may take per prompt byte, counted against the budget: the text, the token ids and the
 * tokenizer's own working memory (SentencePiece: about 20 bytes per byte, docs/benchmarks.md). */
#define SY_API_TOKENIZE_COST_PER_BYTE 24u
/* The budget in bytes of memory (the config's tokenize_memory; 0: none); set at start and at every reload. */
void sy_api_tokenize_set_budget(uint64_t bytes);
/* Take room to tokenize len prompt bytes, waiting for it; 0, or -1 with e (413 when one prompt needs more than
 * the whole budget, 503 when there is no room in time). Every success is paired with a release of the same len. */
int sy_api_tokenize_reserve(uint64_t len, sy_api_error *e);
void sy_api_tokenize_release(uint64_t len);
/* Bytes reserved now (tests). */
uint64_t sy_api_tokenize_in_use(void);

#endif
