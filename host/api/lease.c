/* The requested model: its lease, its chat rendering and its prompt tokens. */
#include "api/lease.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include "api/context.h"
#include "api/prompt_budget.h"
#include "base/log.h"
#include "base/util.h"

/* ------------------------------------------------------------------------------------------------------------
 * The model */

int sy_api_acquire(sy_http_request *r, const char *requested, sy_api_model *m, sy_api_error *e) {
    memset(m, 0, sizeof *m);
    if (requested == NULL || requested[0] == '\0')
        return sy_api_fail(e, 400, "missing_model", "model", "model is required: name one of the configured models");
    if (strlen(requested) > SY_CONFIG_MAX_NAME_LEN) {
        char shown[48];
        sy_utf8_sanitize(shown, sizeof shown, requested, strlen(requested));
        return sy_api_fail(e, 404, "model_not_found", "model", "model '%s' does not exist (names are at most %d characters)",
                           shown, SY_CONFIG_MAX_NAME_LEN);
    }
    if (sy_api_stopping(sy_api_ctx(r)))
        return sy_api_fail(e, 503, "server_stopping", NULL, "the server is shutting down");
    /* A selector names the model it chooses now. */
    char chosen[SY_CONFIG_MAX_NAME_LEN + 1];
    if (sy_model_manager_resolve(sy_api_manager(sy_api_ctx(r)), requested, chosen, sizeof chosen)) requested = chosen;
    /* Models that are processes or peers speak for themselves: only the proxied OpenAI routes reach them. */
    const sy_config *cfg = sy_api_config_acquire(sy_api_ctx(r));
    const sy_config_model *cm = sy_config_find_model(cfg, requested);
    bool upstream = cm != NULL && (cm->cmd != NULL || cm->peer != NULL), is_peer = cm != NULL && cm->peer != NULL;
    char canonical[SY_CONFIG_MAX_NAME_LEN + 1];
    snprintf(canonical, sizeof canonical, "%s", cm ? cm->name : "");
    sy_api_config_release(sy_api_ctx(r), cfg);
    if (upstream)
        return sy_api_fail(e, 400, "model_not_supported", "model",
                           "model %s is served by another server (%s): %s is answered only by switchyard's own "
                           "engines; use the OpenAI API (/v1/...), which is forwarded to it",
                           canonical, is_peer ? "a peer" : "a process", sy_http_path(r));
    sy_http_keep_open(r);
    double t0 = sy_now_seconds();
    char err[900] = "";
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire(sy_api_manager(sy_api_ctx(r)), requested, err,
                                                     sizeof err, &status);
    m->acquire_seconds = sy_now_seconds() - t0;
    if (lease == NULL) {
        if (status < 400 || status > 599) status = 503;
        const char *code = status == 404 ? "model_not_found" : status == 429 ? "queue_full" : "model_unavailable";
        return sy_api_fail(e, status, code, status == 404 ? "model" : NULL, "%s",
                           err[0] ? err : "the model is not available");
    }
    m->lease = lease;
    m->lm = sy_model_lease_model(lease);
    snprintf(m->name, sizeof m->name, "%s", sy_model_lease_name(lease));
    snprintf(m->requested, sizeof m->requested, "%s", requested);
    return 0;
}

int sy_api_acquire_loaded(sy_http_request *r, const char *requested, sy_api_model *m) {
    memset(m, 0, sizeof *m);
    if (requested == NULL || requested[0] == '\0' || strlen(requested) > SY_CONFIG_MAX_NAME_LEN) return -1;
    char err[256];
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire_loaded(sy_api_manager(sy_api_ctx(r)), requested, err,
                                                            sizeof err, &status);
    if (lease == NULL) return -1;
    m->lease = lease;
    m->lm = sy_model_lease_model(lease);
    snprintf(m->name, sizeof m->name, "%s", sy_model_lease_name(lease));
    snprintf(m->requested, sizeof m->requested, "%s", requested);
    return 0;
}

int sy_api_refuse_embedding_model(const sy_api_model *m, sy_api_error *e) {
    if (m->lm == NULL || (m->lm->info.capabilities & SY_CAP_NO_GENERATE) == 0) return 0;
    bool rerank = (m->lm->info.capabilities & SY_CAP_RERANK) != 0;
    return sy_api_fail(e, 400, "model_not_generative", "model",
                       "model %s is %s model: it does not generate text (use %s)", m->requested,
                       rerank ? "a reranking" : "an embedding", rerank ? "/v1/rerank" : "/v1/embeddings or /api/embed");
}

void sy_api_model_release(sy_api_model *m) {
    if (m->lease != NULL) sy_model_lease_release(m->lease);
    m->lease = NULL;
}

void sy_api_token_text(const sy_loaded_model *lm, int32_t token, sy_buf *text, sy_buf *raw) {
    char *bytes = NULL;
    size_t cap = 0;
    long n = sy_loaded_model_token_bytes(lm, token, &bytes, &cap);
    if (n < 0) n = 0;
    if (raw != NULL) sy_buf_append(raw, bytes, (size_t)n);
    if (text != NULL) sy_utf8_repair(text, bytes ? bytes : "", (size_t)n);
    free(bytes);
}

int sy_api_check_context(const sy_api_model *m, size_t n_prompt, const char *param, sy_api_error *e) {
    uint32_t n_ctx = m->lm->info.n_ctx;
    if (n_ctx > 0 && n_prompt >= n_ctx)
        return sy_api_fail(e, 400, "context_length_exceeded", param,
                           "the prompt has %zu tokens, but model %s holds at most %u tokens in its context, and at "
                           "least one must remain for the reply",
                           n_prompt, m->name, n_ctx);
    return 0;
}

int32_t *sy_api_tokenize_prompt(const sy_api_model *m, const char *text, size_t len, bool chat, size_t *n,
                                sy_api_error *e) {
    if (sy_api_refuse_embedding_model(m, e) != 0) return NULL;
    char err[512] = "";
    if (sy_api_check_prompt_bytes(m->lm, m->name, len, chat ? "messages" : "prompt", e) != 0) return NULL;
    if (sy_api_tokenize_reserve(len, e) != 0) return NULL;
    uint32_t flags = SY_TOKENIZE_PARSE_SPECIAL | (chat ? 0u : (uint32_t)SY_TOKENIZE_ADD_SPECIAL);
    size_t count = 0;
    int32_t *tokens = sy_loaded_model_tokenize(m->lm, text, len, flags, &count, err, sizeof err);
    sy_api_tokenize_release(len);
    if (tokens == NULL) {
        sy_api_fail(e, 400, "tokenize_failed", NULL, "the prompt could not be tokenized: %s", err);
        return NULL;
    }
    int32_t bos = m->lm->info.bos_token;
    if (chat && m->lm->info.add_bos && bos >= 0 && (count == 0 || tokens[0] != bos)) {
        /* The template's text did not start with BOS, but the model wants one. */
        tokens = sy_xrealloc(tokens, (count + 1) * sizeof *tokens);
        memmove(tokens + 1, tokens, count * sizeof *tokens);
        tokens[0] = bos;
        count++;
    }
    if (count == 0) {
        free(tokens);
        sy_api_fail(e, 400, "empty_prompt", "prompt", "the prompt is empty (and this model adds no BOS token)");
        return NULL;
    }
    if (sy_api_check_context(m, count, chat ? "messages" : "prompt", e) != 0) {
        free(tokens);
        return NULL;
    }
    *n = count;
    return tokens;
}
