/* Embeddings and reranking (embeddings.h): OpenAI's /v1/embeddings, Ollama's /api/embed and /api/embeddings,
 * llama-server's /rerank and /v1/rerank, over the model's batching queue (engine/embed_queue.h). */
#include "api/embeddings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context.h"
#include "api/lease.h"
#include "api/ollama.h"
#include "api/request.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/embed_queue.h"
#include "engine/scheduler.h"

#define MAX_INPUTS 2048          /* OpenAI's limit on inputs per request */
#define MAX_TOTAL_TOKENS 1000000 /* all inputs of one request together */

/* One input: its tokens (and token types, pairs only) after truncation. */
typedef struct embed_inputs {
    sy_embed_input *items;
    int32_t **tokens, **types;
    uint32_t n, cap;
    uint64_t total_tokens;
    uint32_t truncated; /* how many were cut */
} embed_inputs;

static void inputs_free(embed_inputs *in) {
    for (uint32_t i = 0; i < in->n; i++) {
        free(in->tokens[i]);
        if (in->types) free(in->types[i]);
    }
    free(in->items), free(in->tokens), free(in->types);
    memset(in, 0, sizeof *in);
}

/* Cuts to n_ctx as the model's own library does: the first n_ctx - 1 tokens, then the last when it is a control
 * token (BERT's [SEP], a decoder's end-of-text), so the sequence still ends the way the model was trained. */
static uint32_t cut(const sy_loaded_model *lm, int32_t *tokens, int32_t *types, size_t n) {
    uint32_t n_ctx = lm->info.n_ctx;
    if (n <= n_ctx) return (uint32_t)n;
    if (n_ctx > 1 && (lm->engine->token_flags(lm->model, tokens[n - 1]) & SY_TOKEN_CONTROL)) {
        tokens[n_ctx - 1] = tokens[n - 1];
        if (types) types[n_ctx - 1] = types[n - 1];
    }
    return n_ctx;
}

/* Appends one input (ownership of tokens/types passes); 400 when too long and truncation is off. */
static int add_input(embed_inputs *in, const sy_loaded_model *lm, int32_t *tokens, int32_t *types, size_t n,
                     bool truncate, const char *param, sy_api_error *e) {
    if (n == 0) {
        free(tokens), free(types);
        return sy_api_fail(e, 400, "invalid_value", param, "%s: an input has no tokens", param);
    }
    if (n > lm->info.n_ctx && !truncate) {
        free(tokens), free(types);
        return sy_api_fail(e, 400, "context_length_exceeded", param,
                           "%s: input %u has %zu tokens, more than the model's context of %u (set truncate to cut it)",
                           param, in->n, n, (unsigned)lm->info.n_ctx);
    }
    if (n > lm->info.n_ctx) in->truncated++;
    uint32_t kept = cut(lm, tokens, types, n);
    if (in->total_tokens + kept > MAX_TOTAL_TOKENS) {
        free(tokens), free(types);
        return sy_api_fail(e, 400, "invalid_value", param, "%s: more than %d tokens in all", param, MAX_TOTAL_TOKENS);
    }
    if (in->n == in->cap) {
        in->cap = in->cap ? in->cap * 2 : 8;
        in->items = sy_xrealloc(in->items, in->cap * sizeof *in->items);
        in->tokens = sy_xrealloc(in->tokens, in->cap * sizeof *in->tokens);
        in->types = sy_xrealloc(in->types, in->cap * sizeof *in->types);
    }
    in->tokens[in->n] = tokens;
    in->types[in->n] = types;
    in->items[in->n] = (sy_embed_input){sizeof(sy_embed_input), tokens, kept, types};
    in->n++;
    in->total_tokens += kept;
    return 0;
}

static int add_text(embed_inputs *in, const sy_loaded_model *lm, const char *text, size_t len, bool truncate,
                    const char *param, sy_api_error *e) {
    char err[512] = "";
    size_t n = 0;
    int32_t *tokens = sy_loaded_model_tokenize(lm, text, len, SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL, &n,
                                               err, sizeof err);
    if (tokens == NULL) return sy_api_fail(e, 400, "invalid_value", param, "%s: cannot tokenize: %s", param, err);
    return add_input(in, lm, tokens, NULL, n, truncate, param, e);
}

/* A JSON array of token ids, each within the vocabulary. */
static int add_ids(embed_inputs *in, const sy_loaded_model *lm, const cJSON *arr, bool truncate, const char *param,
                   sy_api_error *e) {
    int count = cJSON_GetArraySize(arr);
    if (count <= 0) return sy_api_fail(e, 400, "invalid_value", param, "%s: an empty list of token ids", param);
    if (count > MAX_TOTAL_TOKENS) return sy_api_fail(e, 400, "invalid_value", param, "%s: too many token ids", param);
    int32_t *tokens = sy_xmalloc((size_t)count * sizeof *tokens);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d < lm->info.n_vocab) || d != floor(d)) {
            free(tokens);
            return sy_api_fail(e, 400, "invalid_value", param,
                               "%s: token ids must be whole numbers from 0 to %u (the model's vocabulary)", param,
                               (unsigned)lm->info.n_vocab - 1);
        }
        tokens[i++] = (int32_t)d;
    }
    return add_input(in, lm, tokens, NULL, (size_t)count, truncate, param, e);
}

/* OpenAI's input: a string, an array of strings, an array of token ids, or an array of arrays of token ids.
 * Ollama's: a string or an array of strings (ids too, as a convenience). */
static int parse_input(const cJSON *input, const sy_loaded_model *lm, bool truncate, const char *param,
                       embed_inputs *in, sy_api_error *e) {
    if (cJSON_IsString(input)) return add_text(in, lm, input->valuestring, strlen(input->valuestring), truncate, param, e);
    if (!cJSON_IsArray(input))
        return sy_api_fail(e, 400, "invalid_type", param,
                           "%s must be a string, an array of strings, an array of token ids or an array of arrays of "
                           "token ids", param);
    int count = cJSON_GetArraySize(input);
    if (count > MAX_INPUTS) return sy_api_fail(e, 400, "invalid_value", param, "%s: at most %d inputs", param, MAX_INPUTS);
    const cJSON *first = cJSON_GetArrayItem(input, 0);
    if (cJSON_IsNumber(first)) return add_ids(in, lm, input, truncate, param, e);
    const cJSON *v;
    cJSON_ArrayForEach(v, input) {
        int rc;
        if (cJSON_IsString(v)) rc = add_text(in, lm, v->valuestring, strlen(v->valuestring), truncate, param, e);
        else if (cJSON_IsArray(v)) rc = add_ids(in, lm, v, truncate, param, e);
        else rc = sy_api_fail(e, 400, "invalid_type", param, "%s: every element must be a string or an array of token ids",
                              param);
        if (rc != 0) return rc;
    }
    return 0;
}

/* 400 unless the model embeds. */
static int require_embedding_model(const sy_api_model *m, sy_api_error *e) {
    const sy_loaded_model *lm = m->lm;
    if ((lm->info.capabilities & SY_CAP_EMBED) && lm->info.n_embd_out > 0 && lm->plugin->engine_embed) return 0;
    if (lm->info.capabilities & SY_CAP_RERANK)
        return sy_api_fail(e, 400, "model_not_embedding", "model",
                           "model %s is a reranking model: it scores pairs on /v1/rerank, it does not produce embeddings",
                           m->requested);
    return sy_api_fail(e, 400, "model_not_embedding", "model",
                       "model %s does not produce embeddings: it is a text-generation model (configure an embedding "
                       "model, such as a sentence-transformers checkpoint, for /v1/embeddings)", m->requested);
}

/* dimensions: 1 .. the model's, else 400. */
static int parse_dimensions(const cJSON *body, const sy_loaded_model *lm, uint32_t *dims, sy_api_error *e) {
    int64_t d = 0;
    bool present = false;
    if (sy_json_get_integer(body, NULL, "dimensions", 1, INT32_MAX, &d, &present, e) != 0) return -1;
    *dims = lm->info.n_embd_out;
    if (!present) return 0;
    if ((uint64_t)d > lm->info.n_embd_out)
        return sy_api_fail(e, 400, "invalid_value", "dimensions", "dimensions %lld is more than the model's %u",
                           (long long)d, (unsigned)lm->info.n_embd_out);
    *dims = (uint32_t)d;
    return 0;
}

/* Runs the inputs through the model's queue; 500 with the engine's message on failure. */
static float *run(const sy_api_model *m, bool score, const embed_inputs *in, double *engine_seconds, sy_api_error *e) {
    sy_scheduler *sched = sy_model_lease_scheduler(m->lease);
    sy_embed_queue *q = sy_scheduler_embed_queue(sched);
    if (q == NULL) {
        sy_api_fail(e, 500, "internal_error", NULL, "model %s has no embedding queue", m->name);
        return NULL;
    }
    uint32_t width = score ? 1 : m->lm->info.n_embd_out;
    float *out = sy_xmalloc(((size_t)in->n * width + 1) * sizeof *out);
    char msg[300] = "";
    if (sy_embed_queue_run(q, score, in->items, in->n, out, engine_seconds, msg, sizeof msg) != 0) {
        free(out);
        sy_api_fail(e, 500, "engine_error", NULL, "model %s: %s", m->name, msg);
        return NULL;
    }
    return out;
}

/* Matryoshka: the first dims values, renormalized when the model's vectors are unit length. */
static void shape_vector(const sy_loaded_model *lm, const float *v, uint32_t dims, float *out) {
    memcpy(out, v, dims * sizeof *out);
    if (dims == lm->info.n_embd_out || !lm->info.embd_normalized) return;
    double ss = 0;
    for (uint32_t i = 0; i < dims; i++) ss += (double)out[i] * out[i];
    float inv = (float)(1.0 / fmax(sqrt(ss), 1e-12));
    for (uint32_t i = 0; i < dims; i++) out[i] *= inv;
}

static cJSON *float_array(const float *v, uint32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (uint32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static char *base64(const void *data, size_t len) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *out = sy_xmalloc((len + 2) / 3 * 4 + 1), *o = out;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
        *o++ = abc[v >> 18 & 63];
        *o++ = abc[v >> 12 & 63];
        *o++ = i + 1 < len ? abc[v >> 6 & 63] : '=';
        *o++ = i + 2 < len ? abc[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* ------------------------------------------------------------------------------------------------------------
 * OpenAI: POST /v1/embeddings */

void sy_api_openai_embeddings(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    sy_api_model m;
    memset(&m, 0, sizeof m);
    embed_inputs in;
    memset(&in, 0, sizeof in);
    float *vectors = NULL;
    const char *model_name = NULL, *format = NULL;
    bool truncate = false;
    uint32_t dims = 0;
    if (sy_api_parse_body(r, &body, &e) != 0 || sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0 ||
        sy_json_get_string(body, NULL, "encoding_format", &format, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "truncate", &truncate, NULL, &e) != 0)
        goto fail;
    if (format != NULL && strcmp(format, "float") != 0 && strcmp(format, "base64") != 0) {
        sy_api_fail(&e, 400, "invalid_value", "encoding_format", "encoding_format must be \"float\" or \"base64\"");
        goto fail;
    }
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(body, "input");
    if (input == NULL || cJSON_IsNull(input) || (cJSON_IsArray(input) && cJSON_GetArraySize(input) == 0)) {
        sy_api_fail(&e, 400, "invalid_value", "input", "input is required: a string or a non-empty array");
        goto fail;
    }
    if (sy_api_acquire(r, model_name, &m, &e) != 0 || require_embedding_model(&m, &e) != 0 ||
        parse_dimensions(body, m.lm, &dims, &e) != 0 || parse_input(input, m.lm, truncate, "input", &in, &e) != 0)
        goto fail;
    vectors = run(&m, false, &in, NULL, &e);
    if (vectors == NULL) goto fail;

    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(json, "data");
    float *shaped = sy_xmalloc((dims + 1) * sizeof *shaped);
    bool b64 = format != NULL && strcmp(format, "base64") == 0;
    for (uint32_t i = 0; i < in.n; i++) {
        shape_vector(m.lm, vectors + (size_t)i * m.lm->info.n_embd_out, dims, shaped);
        cJSON *item = cJSON_CreateObject();
        cJSON_AddStringToObject(item, "object", "embedding");
        cJSON_AddNumberToObject(item, "index", i);
        if (b64) { /* little-endian float32, as OpenAI's clients decode it */
            char *s = base64(shaped, dims * sizeof(float));
            cJSON_AddStringToObject(item, "embedding", s);
            free(s);
        } else {
            cJSON_AddItemToObject(item, "embedding", float_array(shaped, dims));
        }
        cJSON_AddItemToArray(data, item);
    }
    free(shaped);
    cJSON_AddStringToObject(json, "model", m.requested);
    cJSON *usage = cJSON_AddObjectToObject(json, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)in.total_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)in.total_tokens);
    sy_api_model_release(&m);
    sy_http_respond_json(r, 200, json);
    free(vectors);
    inputs_free(&in);
    cJSON_Delete(body);
    return;
fail:
    sy_api_respond_error(r, &e);
    sy_api_model_release(&m);
    free(vectors);
    inputs_free(&in);
    cJSON_Delete(body);
}

/* ------------------------------------------------------------------------------------------------------------
 * Ollama: POST /api/embed (input) and the older POST /api/embeddings (prompt) */

static void ollama_embed(sy_http_request *r, bool legacy) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    sy_api_model m;
    memset(&m, 0, sizeof m);
    embed_inputs in;
    memset(&in, 0, sizeof in);
    float *vectors = NULL;
    const char *model_name = NULL;
    bool truncate = true;
    int64_t keep_alive = SY_MODEL_TTL_CONFIGURED;
    uint32_t dims = 0;
    double t0 = sy_http_start_time(r);
    if (sy_api_parse_body(r, &body, &e) != 0 || sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "truncate", &truncate, NULL, &e) != 0 ||
        sy_api_ollama_keep_alive(body, &keep_alive, &e) != 0)
        goto fail;
    if (model_name == NULL || model_name[0] == '\0') {
        sy_api_fail(&e, 400, "missing_model", "model", "model is required");
        goto fail;
    }
    const char *field = legacy ? "prompt" : "input";
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(body, field);
    if (legacy && input != NULL && !cJSON_IsNull(input) && !cJSON_IsString(input)) {
        sy_api_fail(&e, 400, "invalid_type", "prompt", "prompt must be a string");
        goto fail;
    }
    if (sy_api_acquire(r, model_name, &m, &e) != 0 || require_embedding_model(&m, &e) != 0 ||
        parse_dimensions(body, m.lm, &dims, &e) != 0)
        goto fail;
    sy_api_ollama_apply_keep_alive(r, m.name, keep_alive);
    /* no input (or an empty one) loads the model and answers with no embeddings, as Ollama does */
    bool empty = input == NULL || cJSON_IsNull(input) || (cJSON_IsArray(input) && cJSON_GetArraySize(input) == 0) ||
                 (legacy && input->valuestring[0] == '\0');
    if (!empty && parse_input(input, m.lm, truncate, field, &in, &e) != 0) goto fail;
    if (!empty && (vectors = run(&m, false, &in, NULL, &e)) == NULL) goto fail;

    cJSON *json = cJSON_CreateObject();
    float *shaped = sy_xmalloc((dims + 1) * sizeof *shaped);
    if (legacy) {
        if (in.n > 0) shape_vector(m.lm, vectors, dims, shaped);
        cJSON_AddItemToObject(json, "embedding", float_array(shaped, in.n > 0 ? dims : 0));
    } else {
        cJSON_AddStringToObject(json, "model", m.requested);
        cJSON *list = cJSON_AddArrayToObject(json, "embeddings");
        for (uint32_t i = 0; i < in.n; i++) {
            shape_vector(m.lm, vectors + (size_t)i * m.lm->info.n_embd_out, dims, shaped);
            cJSON_AddItemToArray(list, float_array(shaped, dims));
        }
        double now = sy_now_seconds();
        cJSON_AddNumberToObject(json, "total_duration", floor((now - t0) * 1e9));
        cJSON_AddNumberToObject(json, "load_duration", floor(m.acquire_seconds * 1e9));
        cJSON_AddNumberToObject(json, "prompt_eval_count", (double)in.total_tokens);
    }
    free(shaped);
    bool unload_now = keep_alive == 0;
    char name[sizeof m.name];
    snprintf(name, sizeof name, "%s", m.name);
    sy_api_model_release(&m);
    if (unload_now) sy_model_manager_unload(sy_api_manager(sy_api_ctx(r)), name);
    sy_http_respond_json(r, 200, json);
    free(vectors);
    inputs_free(&in);
    cJSON_Delete(body);
    return;
fail:
    sy_api_respond_error(r, &e);
    sy_api_model_release(&m);
    free(vectors);
    inputs_free(&in);
    cJSON_Delete(body);
}

void sy_api_ollama_embed(sy_http_request *r) { ollama_embed(r, false); }
void sy_api_ollama_embeddings(sy_http_request *r) { ollama_embed(r, true); }

/* ------------------------------------------------------------------------------------------------------------
 * llama-server: POST /rerank, /v1/rerank (and /reranking) */

typedef struct ranked {
    uint32_t index;
    float score;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->index < y->index ? -1 : x->index > y->index;
}

void sy_api_rerank(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    sy_api_model m;
    memset(&m, 0, sizeof m);
    embed_inputs in;
    memset(&in, 0, sizeof in);
    float *scores = NULL;
    ranked *order = NULL;
    const char *model_name = NULL, *query = NULL;
    int64_t top_n = 0;
    bool has_top_n = false, truncate = true, return_text = false;
    if (sy_api_parse_body(r, &body, &e) != 0 || sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0 ||
        sy_json_get_string(body, NULL, "query", &query, NULL, &e) != 0 ||
        sy_json_get_integer(body, NULL, "top_n", 0, INT32_MAX, &top_n, &has_top_n, &e) != 0 ||
        sy_json_get_bool(body, NULL, "truncate", &truncate, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "return_text", &return_text, NULL, &e) != 0)
        goto fail;
    if (query == NULL) {
        sy_api_fail(&e, 400, "invalid_value", "query", "query is required: a string");
        goto fail;
    }
    const char *docs_field = "documents";
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(body, docs_field);
    if (docs == NULL) docs = cJSON_GetObjectItemCaseSensitive(body, docs_field = "texts");
    if (!cJSON_IsArray(docs) || cJSON_GetArraySize(docs) == 0 || cJSON_GetArraySize(docs) > MAX_INPUTS) {
        sy_api_fail(&e, 400, "invalid_value", "documents", "documents must be an array of 1 to %d strings", MAX_INPUTS);
        goto fail;
    }
    const cJSON *d;
    cJSON_ArrayForEach(d, docs) {
        if (!cJSON_IsString(d)) {
            sy_api_fail(&e, 400, "invalid_type", "documents", "documents must be strings");
            goto fail;
        }
    }
    if (sy_api_acquire(r, model_name, &m, &e) != 0) goto fail;
    const sy_loaded_model *lm = m.lm;
    if (!(lm->info.capabilities & SY_CAP_RERANK) || lm->plugin->engine_embed == NULL) {
        sy_api_fail(&e, 400, "model_not_reranker", "model", "model %s is not a reranking model (%s)", m.requested,
                    lm->info.capabilities & SY_CAP_EMBED ? "it produces embeddings: use /v1/embeddings"
                                                         : "it is a text-generation model");
        goto fail;
    }
    cJSON_ArrayForEach(d, docs) {
        const sy_engine_embed_api *api = lm->plugin->engine_embed;
        size_t cap = 256, n = 0;
        int32_t *tokens = NULL, *types = NULL;
        sy_status st;
        do {
            tokens = sy_xrealloc(tokens, cap * sizeof *tokens);
            types = sy_xrealloc(types, cap * sizeof *types);
            st = api->tokenize_pair(lm->model, query, strlen(query), d->valuestring, strlen(d->valuestring), tokens,
                                    types, cap, &n);
            if (st == SY_ERR_BUFFER_TOO_SMALL && n > cap) cap = n;
            else break;
        } while (true);
        if (st != SY_OK) {
            free(tokens), free(types);
            sy_api_fail(&e, 400, "invalid_value", docs_field, "cannot tokenize a document: %s",
                        lm->engine->error_message());
            goto fail;
        }
        if (add_input(&in, lm, tokens, types, n, truncate, docs_field, &e) != 0) goto fail;
    }
    scores = run(&m, true, &in, NULL, &e);
    if (scores == NULL) goto fail;
    order = sy_xmalloc(in.n * sizeof *order);
    for (uint32_t i = 0; i < in.n; i++) order[i] = (ranked){i, scores[i]};
    qsort(order, in.n, sizeof *order, by_score);
    uint32_t shown = has_top_n && top_n > 0 && (uint64_t)top_n < in.n ? (uint32_t)top_n : in.n;
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "model", m.requested);
    cJSON_AddStringToObject(json, "object", "list");
    cJSON *usage = cJSON_AddObjectToObject(json, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)in.total_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)in.total_tokens);
    cJSON *results = cJSON_AddArrayToObject(json, "results");
    for (uint32_t i = 0; i < shown; i++) {
        cJSON *item = cJSON_CreateObject();
        cJSON_AddNumberToObject(item, "index", order[i].index);
        cJSON_AddNumberToObject(item, "relevance_score", (double)order[i].score);
        if (return_text)
            cJSON_AddStringToObject(item, "document", cJSON_GetArrayItem(docs, (int)order[i].index)->valuestring);
        cJSON_AddItemToArray(results, item);
    }
    sy_api_model_release(&m);
    sy_http_respond_json(r, 200, json);
    free(scores), free(order);
    inputs_free(&in);
    cJSON_Delete(body);
    return;
fail:
    sy_api_respond_error(r, &e);
    sy_api_model_release(&m);
    free(scores), free(order);
    inputs_free(&in);
    cJSON_Delete(body);
}
