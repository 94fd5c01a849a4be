/*
 * The model a request names: acquiring its lease (loading it if need be), rendering its chat template and
 * tokenizing its prompt.
 */
#ifndef SY_HOST_API_LEASE_H
#define SY_HOST_API_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api/request.h"
#include "chat/chat_template.h"
#include "config/config.h"
#include "manager/model_manager.h"

/* ------------------------------------------------------------------------------------------------------------
 * The requested model. */
typedef struct sy_api_model {
    sy_model_lease *lease;    /* NULL once handed to a generation */
    const sy_loaded_model *lm;
    char name[SY_CONFIG_MAX_NAME_LEN + 1];      /* canonical */
    char requested[SY_CONFIG_MAX_NAME_LEN + 1]; /* as the client named it */
    double acquire_seconds;   /* waiting for the model (its load included) */
} sy_api_model;

/* Acquire a lease (loading the model if needed): 400 without a name, 404 unknown (naming the models offered),
 * 503 load failed or timed out, 429 queue full. Lifts the connection's idle timeout. */
int sy_api_acquire(sy_http_request *r, const char *requested, sy_api_model *m, sy_api_error *e);
/* A lease only if the model is loaded now (never loads, swaps or waits): 0, or -1 with m zeroed. */
int sy_api_acquire_loaded(sy_http_request *r, const char *requested, sy_api_model *m);
/* 400 (model_not_generative) when the acquired model only embeds or scores (SY_CAP_NO_GENERATE): the text-
 * generation paths (rendering a chat, tokenizing a prompt) refuse it, naming the routes it answers. */
int sy_api_refuse_embedding_model(const sy_api_model *m, sy_api_error *e);
/* Release the lease if still held. */
void sy_api_model_release(sy_api_model *m);

/* Tokenize a prompt with control-token text recognised. chat: the text came from a template, so BOS is added
 * only when the model wants one and the text does not already begin with it; otherwise the model's BOS rules
 * apply (SY_TOKENIZE_ADD_SPECIAL). Fails with 400 when the prompt leaves no room in the context. */
int32_t *sy_api_tokenize_prompt(const sy_api_model *m, const char *text, size_t len, bool chat, size_t *n,
                                sy_api_error *e);
/* 400 "context_length_exceeded" (naming param) when n_prompt tokens leave no room to generate in the model's
 * context. */
int sy_api_check_context(const sy_api_model *m, size_t n_prompt, const char *param, sy_api_error *e);
/* The text of a token as valid UTF-8 (NUL-terminated in buf); and its raw bytes in raw (may be NULL). */
void sy_api_token_text(const sy_loaded_model *lm, int32_t token, sy_buf *text, sy_buf *raw);

#endif
