/*
 * Embeddings and reranking: OpenAI's POST /v1/embeddings, Ollama's POST /api/embed and /api/embeddings,
 * llama-server's POST /rerank and /v1/rerank, for models whose engine offers "sy.engine.embed/1" (docs/api.md).
 * Inputs are tokenized with the model's special tokens and cut to its context when truncation is on (Ollama's
 * default, and llama-server's for rerank; OpenAI's requests are refused with 400 when an input is too long unless
 * they say "truncate": true); all inputs of a request, and of requests arriving together, go through the engine in
 * one batch (engine/embed_queue.h).
 */
#ifndef SY_HOST_API_EMBEDDINGS_H
#define SY_HOST_API_EMBEDDINGS_H

#include <cjson/cJSON.h>

#include "api/lease.h"
#include "http/http_server.h"

void sy_api_openai_embeddings(sy_http_request *r);
void sy_api_ollama_embed(sy_http_request *r);
void sy_api_ollama_embeddings(sy_http_request *r);
void sy_api_rerank(sy_http_request *r);

#endif
