/*
 * Server metrics in the Prometheus text format (GET /metrics).
 *
 * The HTTP side records what only it sees: requests by endpoint and status, tokens per model, time to first
 * token and per-token latency, drafted and accepted tokens. Loads, swaps, load time, queue depth, busy slots and
 * memory per model come from the model manager at scrape time and are handed to sy_metrics_render; the KV
 * snapshot counters (process-wide, snapshot_store.h) are read there too. Every function is thread-safe.
 */
#ifndef SY_HOST_METRICS_H
#define SY_HOST_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "manager/model_manager.h"

/* Distinct (endpoint, status) pairs and models tracked; more are folded into "other". */
#define SY_METRICS_MAX_REQUEST_SERIES 256
#define SY_METRICS_MAX_MODELS 64

typedef struct sy_metrics sy_metrics;

sy_metrics *sy_metrics_create(void);
void sy_metrics_free(sy_metrics *m);

/* One finished request: endpoint is the route ("/v1/chat/completions"), status the HTTP status sent. */
void sy_metrics_request(sy_metrics *m, const char *endpoint, int status);
/* Tokens of one finished generation. */
void sy_metrics_tokens(sy_metrics *m, const char *model, uint64_t prompt, uint64_t cached, uint64_t generated);
/* Speculative decoding in one finished generation: tokens drafted (and verified), and accepted of those. */
void sy_metrics_draft_tokens(sy_metrics *m, const char *model, uint64_t drafted, uint64_t accepted);
/* Seconds from a request's arrival to its first output token. */
void sy_metrics_time_to_first_token(sy_metrics *m, double seconds);
/* Seconds between two output tokens of one generation. */
void sy_metrics_token_latency(sy_metrics *m, double seconds);

/* The exposition text (malloc'd, *len bytes). models/n_models: sy_model_manager_status; counters:
 * sy_model_manager_get_counters (NULL: left out). */
char *sy_metrics_render(sy_metrics *m, const sy_model_status *models, size_t n_models,
                        const sy_model_manager_counters *counters, size_t *len);

#endif
