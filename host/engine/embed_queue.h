/*
 * Embedding and reranking requests of one loaded model, batched across clients: each request hands its inputs
 * (token sequences, already cut to the model's context) to the model's queue; the first waiting request runs the
 * queue on the engine loop (through the scheduler's sy_scheduler_run_task, so embed calls never overlap a decode), where the requests
 * that are queued by then go through the engine together, first come first served, within a token budget per
 * call; the rest wait for the next call. A request larger than the budget is split across calls on its own.
 */
#ifndef SY_HOST_ENGINE_EMBED_QUEUE_H
#define SY_HOST_ENGINE_EMBED_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>

#include "plugins/loaded_model.h"

typedef struct sy_embed_queue sy_embed_queue;
/* How the queue gets onto the engine loop: run task(user) there, between two steps, and wait for it (the
 * scheduler's sy_scheduler_run_task). 0 when it ran, -1 when it cannot (the loop is stopping). */
typedef int (*sy_embed_run_fn)(void *ctx, void (*task)(void *user), void *user);

/* Tokens of all inputs of one engine call, at most (and at least one input). */
#define SY_EMBED_BATCH_TOKENS 8192u

sy_embed_queue *sy_embed_queue_create(sy_embed_run_fn run, void *run_ctx, const sy_loaded_model *lm);
/* After the scheduler stopped (no request waits any more). */
void sy_embed_queue_destroy(sy_embed_queue *q);

/* Runs n inputs (each 1..n_ctx tokens; token_types may be NULL) and waits for their outputs: n rows of
 * n_embd_out floats (score false) or n scores (score true). 0, or -1 with one line in msg (the engine's message,
 * or the scheduler stopping); *engine_seconds gets the time its engine calls took (may be NULL). */
int sy_embed_queue_run(sy_embed_queue *q, bool score, const sy_embed_input *inputs, uint32_t n, float *out,
                       double *engine_seconds, char *msg, size_t msg_size);

#endif
