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

/* The NUL-terminated text of a token, or NULL when the model has no such token. */
static char *token_string(const sy_loaded_model *lm, int32_t token) {
    if (token < 0) return NULL;
    sy_buf b;
    sy_buf_init(&b);
    sy_api_token_text(lm, token, &b, NULL);
    if (b.len == 0) {
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

#define SY_API_MAX_TEMPLATE_FILE ((size_t)1 << 20)

static char *read_small_file(const char *path, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_size, "chat_template_file %s: %s", path, strerror(errno));
        return NULL;
    }
    sy_buf b;
    sy_buf_init(&b);
    bool read_ok = sy_buf_read(&b, f, SY_API_MAX_TEMPLATE_FILE);
    fclose(f);
    if (!read_ok || b.len > SY_API_MAX_TEMPLATE_FILE) {
        if (!read_ok) snprintf(err, err_size, "chat_template_file %s: read error", path);
        else snprintf(err, err_size, "chat_template_file %s: larger than %zu bytes", path, SY_API_MAX_TEMPLATE_FILE);
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

int sy_api_render_chat(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                       bool add_generation_prompt, char **text, size_t *len, sy_api_error *e) {
    *text = NULL;
    if (sy_api_refuse_embedding_model(m, e) != 0) return -1;
    const char *override = m->lease ? sy_model_lease_chat_template(m->lease) : NULL;
    char *file_text = NULL;
    char err[512] = "";
    if (override == NULL) {
        sy_api_context *srv = sy_api_ctx(r);
        const sy_config *cfg = sy_api_config_acquire(srv);
        const sy_config_model *cm = cfg ? sy_config_find_model(cfg, m->name) : NULL;
        if (cm != NULL && cm->chat_template_file != NULL) {
            file_text = read_small_file(cm->chat_template_file, err, sizeof err);
            if (file_text == NULL) {
                sy_api_config_release(srv, cfg);
                sy_log(SY_LOG_ERROR, "model %s: %s", m->name, err);
                return sy_api_fail(e, 500, "chat_template_error", NULL, "model %s: %s", m->name, err);
            }
        }
        sy_api_config_release(srv, cfg);
    }
    const char *jinja = file_text != NULL ? file_text : m->lm->info.chat_template;
    char *bos = token_string(m->lm, m->lm->info.bos_token);
    char *eos = token_string(m->lm, m->lm->info.eos_token);
    sy_chat_template t;
    int rc = sy_chat_template_init(&t, override, jinja, bos, eos, err, sizeof err);
    free(bos);
    free(eos);
    free(file_text);
    if (rc != 0) return sy_api_fail(e, 500, "chat_template_error", NULL, "model %s: %s", m->name, err);
    *text = sy_chat_render(&t, messages, n, add_generation_prompt, len, err, sizeof err);
    sy_chat_template_free(&t);
    if (*text == NULL) return sy_api_fail(e, 400, "invalid_messages", "messages", "%s", err);
    return 0;
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
    uint32_t flags = SY_TOKENIZE_PARSE_SPECIAL | (chat ? 0u : (uint32_t)SY_TOKENIZE_ADD_SPECIAL);
    size_t count = 0;
    int32_t *tokens = sy_loaded_model_tokenize(m->lm, text, len, flags, &count, err, sizeof err);
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
