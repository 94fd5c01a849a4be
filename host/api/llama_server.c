/* See llama_server.h. */
#include "api/llama_server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context.h"
#include "api/fim.h"
#include "api/sampling_fields.h"
#include "api/generation.h"
#include "api/lease.h"
#include "api/model_facts.h"
#include "api/model_params.h"
#include "config/request_params.h"
#include "api/request.h"
#include "base/utf8.h"
#include "base/util.h"
#include "plugins/loaded_model.h"

bool sy_api_llama_model_name(sy_http_request *r, const cJSON *body, char *out, size_t size) {
    const cJSON *v = body ? cJSON_GetObjectItemCaseSensitive(body, "model") : NULL;
    const char *q = sy_http_query(r, "model");
    if (cJSON_IsString(v) && v->valuestring[0] != '\0') {
        snprintf(out, size, "%s", v->valuestring);
        return true;
    }
    if (v != NULL && !cJSON_IsNull(v) && !cJSON_IsString(v)) {
        sy_http_respond_error(r, 400, "invalid_type", "model", "model must be a string");
        return false;
    }
    if (q != NULL && q[0] != '\0') {
        snprintf(out, size, "%s", q);
        return true;
    }
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    bool ok = cfg != NULL && cfg->n_models == 1;
    if (ok) snprintf(out, size, "%s", cfg->models[0].name);
    sy_api_config_release(srv, cfg);
    if (!ok)
        sy_http_respond_error(r, 400, "missing_model", "model",
                              "name the model with \"model\" in the body or ?model=NAME (more than one model is "
                              "configured)");
    return ok;
}

/* A float setting as its decimal value (0.8, not 0.800000011920929). */
static double decimal(float f) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", (double)f);
    return strtod(buf, NULL);
}

/* The body (optional for GET) and the leased model; false when answered already. */
static bool begin(sy_http_request *r, cJSON **body, sy_api_model *m) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    *body = NULL;
    memset(m, 0, sizeof *m);
    if (sy_api_parse_body(r, body, &e) != 0) {
        sy_api_respond_error(r, &e);
        return false;
    }
    char name[SY_CONFIG_MAX_NAME_LEN + 2];
    if (!sy_api_llama_model_name(r, *body, name, sizeof name)) return false;
    if (sy_api_acquire(r, name, m, &e) != 0) {
        sy_api_respond_error(r, &e);
        return false;
    }
    return true;
}

static cJSON *piece_json(const sy_buf *raw) {
    if (sy_utf8_valid(raw->data ? raw->data : "", raw->len) && memchr(raw->data ? raw->data : "", 0, raw->len) == NULL)
        return cJSON_CreateString(raw->data ? raw->data : "");
    cJSON *a = cJSON_CreateArray(); /* llama-server: the bytes, when they are not valid UTF-8 alone */
    for (size_t i = 0; i < raw->len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)raw->data[i]));
    return a;
}

void sy_api_llama_tokenize(sy_http_request *r) {
    cJSON *body;
    sy_api_model m;
    if (!begin(r, &body, &m)) {
        cJSON_Delete(body);
        return;
    }
    sy_api_error e;
    memset(&e, 0, sizeof e);
    const char *content = NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    int32_t *tokens = NULL;
    size_t n = 0;
    if (sy_json_get_string(body, NULL, "content", &content, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "add_special", &add_special, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "parse_special", &parse_special, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "with_pieces", &with_pieces, NULL, &e) != 0)
        goto fail;
    if (content == NULL) {
        sy_api_fail(&e, 400, "missing_content", "content", "content is required");
        goto fail;
    }
    char err[512] = "";
    uint32_t flags = (add_special ? (uint32_t)SY_TOKENIZE_ADD_SPECIAL : 0u) |
                     (parse_special ? (uint32_t)SY_TOKENIZE_PARSE_SPECIAL : 0u);
    tokens = sy_loaded_model_tokenize(m.lm, content, strlen(content), flags, &n, err, sizeof err);
    if (tokens == NULL) {
        sy_api_fail(&e, 400, "tokenize_failed", "content", "content could not be tokenized: %s", err);
        goto fail;
    }
    cJSON *json = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(json, "tokens");
    for (size_t i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(tokens[i]));
            continue;
        }
        sy_buf text, raw;
        sy_buf_init(&text);
        sy_buf_init(&raw);
        sy_api_token_text(m.lm, tokens[i], &text, &raw);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", tokens[i]);
        cJSON_AddItemToObject(o, "piece", piece_json(&raw));
        cJSON_AddItemToArray(arr, o);
        sy_buf_free(&text);
        sy_buf_free(&raw);
    }
    free(tokens);
    sy_api_model_release(&m);
    cJSON_Delete(body);
    sy_http_respond_json(r, 200, json);
    return;
fail:
    free(tokens);
    sy_api_model_release(&m);
    cJSON_Delete(body);
    sy_api_respond_error(r, &e);
}

void sy_api_llama_detokenize(sy_http_request *r) {
    cJSON *body;
    sy_api_model m;
    if (!begin(r, &body, &m)) {
        cJSON_Delete(body);
        return;
    }
    sy_api_error e;
    memset(&e, 0, sizeof e);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(body, "tokens");
    if (tokens != NULL && !cJSON_IsNull(tokens) && !cJSON_IsArray(tokens)) {
        sy_api_fail(&e, 400, "invalid_type", "tokens", "tokens must be an array of token ids");
        goto fail;
    }
    sy_buf bytes;
    sy_buf_init(&bytes);
    size_t i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tokens) {
        double d = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(d >= 0 && d < (double)m.lm->info.n_vocab && d == floor(d))) {
            sy_buf_free(&bytes);
            sy_api_fail(&e, 400, "invalid_value", "tokens", "tokens[%zu] is not a token id of this model (0..%u)", i,
                        m.lm->info.n_vocab ? m.lm->info.n_vocab - 1 : 0);
            goto fail;
        }
        sy_buf text;
        sy_buf_init(&text);
        sy_api_token_text(m.lm, (int32_t)d, &text, &bytes);
        sy_buf_free(&text);
        i++;
    }
    /* the pieces joined first, so characters split across tokens come out whole */
    sy_buf content;
    sy_buf_init(&content);
    sy_utf8_repair(&content, bytes.data ? bytes.data : "", bytes.len);
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "content", content.data ? content.data : "");
    sy_buf_free(&content);
    sy_buf_free(&bytes);
    sy_api_model_release(&m);
    cJSON_Delete(body);
    sy_http_respond_json(r, 200, json);
    return;
fail:
    sy_api_model_release(&m);
    cJSON_Delete(body);
    sy_api_respond_error(r, &e);
}

void sy_api_llama_props(sy_http_request *r) {
    char name[SY_CONFIG_MAX_NAME_LEN + 2];
    if (!sy_api_llama_model_name(r, NULL, name, sizeof name)) return;
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, name) : NULL;
    if (cm == NULL) {
        sy_api_config_release(srv, cfg);
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, name, strlen(name));
        sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' not found", shown);
        return;
    }
    /* Reports, never loads: the loaded model's facts when it is loaded, else its file's. */
    char err[256];
    cJSON *meta = sy_api_model_metadata(srv, cm, err, sizeof err);
    sy_api_model m;
    bool loaded = sy_api_acquire_loaded(r, cm->name, &m) == 0;
    int64_t n_ctx = 0;
    const char *arch = sy_api_meta_string(meta, "general.architecture");
    if (loaded) n_ctx = m.lm->info.n_ctx;
    else if (arch) {
        char key[128];
        snprintf(key, sizeof key, "%.64s.context_length", arch);
        sy_api_meta_int(meta, key, &n_ctx);
    }
    cJSON *json = cJSON_CreateObject();
    sy_gen_params p = sy_gen_params_defaults();
    cJSON *dgs = cJSON_AddObjectToObject(json, "default_generation_settings");
    cJSON_AddNumberToObject(dgs, "id", 0);
    cJSON_AddNumberToObject(dgs, "n_ctx", (double)n_ctx);
    cJSON_AddBoolToObject(dgs, "is_processing", false);
    cJSON *params = cJSON_AddObjectToObject(dgs, "params");
    cJSON_AddNumberToObject(params, "temperature", decimal(p.sampling.temperature));
    cJSON_AddNumberToObject(params, "top_k", p.sampling.top_k);
    cJSON_AddNumberToObject(params, "top_p", decimal(p.sampling.top_p));
    cJSON_AddNumberToObject(params, "min_p", decimal(p.sampling.min_p));
    cJSON_AddNumberToObject(params, "repeat_penalty", decimal(p.sampling.repeat_penalty));
    cJSON_AddNumberToObject(params, "repeat_last_n", p.sampling.penalty_last_n);
    cJSON_AddNumberToObject(params, "presence_penalty", decimal(p.sampling.presence_penalty));
    cJSON_AddNumberToObject(params, "frequency_penalty", decimal(p.sampling.frequency_penalty));
    cJSON_AddNumberToObject(params, "n_predict", -1);
    cJSON_AddArrayToObject(params, "stop");
    /* the model's own settings from the config: what a request that leaves them unset gets */
    for (int kind = SY_REQUEST_PARAM_DEFAULT; kind <= SY_REQUEST_PARAM_SET; kind++) {
        for (size_t i = 0; i < cm->n_request_params; i++) {
            const sy_config_request_param *rp = &cm->request_params[i];
            if ((int)rp->kind != kind) continue;
            const char *field = strcmp(rp->key, "max_tokens") == 0 ? "n_predict" : rp->key;
            cJSON_DeleteItemFromObjectCaseSensitive(params, field);
            cJSON_AddItemToObject(params, field, sy_api_model_param_json(rp->key, rp->value));
        }
    }
    cJSON_AddNumberToObject(json, "total_slots", cm->parallel);
    cJSON_AddStringToObject(json, "model_path", cm->path ? cm->path : "");
    cJSON_AddStringToObject(json, "model_alias", cm->name);
    const char *tmpl = loaded && m.lm->info.chat_template ? m.lm->info.chat_template
                                                          : sy_api_meta_string(meta, "tokenizer.chat_template");
    cJSON_AddStringToObject(json, "chat_template", tmpl ? tmpl : "");
    cJSON *mod = cJSON_AddObjectToObject(json, "modalities");
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddBoolToObject(json, "is_loaded", loaded);
#ifdef SY_VERSION
    cJSON_AddStringToObject(json, "build_info", "switchyard " SY_VERSION);
#endif
    if (loaded) sy_api_model_release(&m);
    cJSON_Delete(meta);
    sy_api_config_release(srv, cfg);
    sy_http_respond_json(r, 200, json);
}

/* ------------------------------------------------------------------------------------------------------------
 * /infill: llama-server's fill-in-the-middle completion, answered in its /completion shape. */

typedef struct infill_request {
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    int32_t *prompt; /* with return_prompt_tokens (switchyard's): the laid-out prompt, for checking the layout */
    size_t n_prompt;
} infill_request;

static void infill_request_free(void *p) {
    infill_request *q = p;
    if (q) free(q->prompt);
    free(q);
}

static cJSON *infill_final(const infill_request *q, const char *content, const sy_api_event *ev) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", content);
    cJSON_AddNumberToObject(o, "id_slot", 0);
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "model", q->model);
    cJSON_AddNumberToObject(o, "tokens_predicted", ev->usage.completion_tokens);
    cJSON_AddNumberToObject(o, "tokens_evaluated", ev->usage.prompt_tokens);
    cJSON_AddNumberToObject(o, "tokens_cached", ev->usage.cached_tokens);
    cJSON_AddBoolToObject(o, "truncated", false);
    bool limit = strcmp(ev->finish_reason, "length") == 0;
    cJSON_AddStringToObject(o, "stop_type", limit ? "limit" : "eos");
    if (q->prompt) {
        cJSON *a = cJSON_AddArrayToObject(o, "prompt_tokens");
        for (size_t i = 0; i < q->n_prompt; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(q->prompt[i]));
    }
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_n", ev->usage.prompt_tokens - ev->usage.cached_tokens);
    cJSON_AddNumberToObject(t, "prompt_ms", ev->usage.prompt_seconds * 1000.0);
    cJSON_AddNumberToObject(t, "predicted_n", ev->usage.completion_tokens);
    cJSON_AddNumberToObject(t, "predicted_ms", ev->usage.generation_seconds * 1000.0);
    return o;
}

static void infill_sse(sy_buf *out, cJSON *o) { sy_api_stream_json(out, "data: ", o, "\n\n"); }

static void infill_format(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out) {
    infill_request *q = state;
    if (ev->type == SY_GEN_EVENT_TEXT) {
        if (ev->text_len == 0) return;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "content", ev->text);
        cJSON_AddBoolToObject(o, "stop", false);
        cJSON_AddNumberToObject(o, "id_slot", 0);
        infill_sse(out, o);
        return;
    }
    int status;
    char msg[1024];
    if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg)) {
        cJSON *o = cJSON_CreateObject();
        cJSON *err = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(err, "message", msg);
        cJSON_AddStringToObject(err, "type", "server_error");
        infill_sse(out, o);
        return;
    }
    infill_sse(out, infill_final(q, "", ev));
}

static const sy_api_stream_ops infill_ops = {infill_format, infill_request_free};

/* The sampling fields of llama-server's /completion that /infill takes. */
static int infill_params(const cJSON *body, sy_gen_params *p, int64_t *n_predict, sy_api_error *e) {
    *p = sy_gen_params_defaults();
    bool present;
    double d;
    int64_t i;
    *n_predict = -1;
    if (sy_json_get_integer(body, NULL, "n_predict", -1, INT32_MAX, &i, &present, e) != 0) return -1;
    if (present) *n_predict = i, p->max_tokens = i < 0 ? 0 : (uint32_t)i;
    if (sy_json_get_number(body, NULL, "temperature", 0, 100, &d, &present, e) != 0) return -1;
    if (present) p->sampling.temperature = (float)d;
    if (sy_json_get_integer(body, NULL, "top_k", 0, 1 << 20, &i, &present, e) != 0) return -1;
    if (present) p->sampling.top_k = (uint32_t)i;
    if (sy_json_get_number(body, NULL, "top_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.top_p = (float)d;
    if (sy_json_get_number(body, NULL, "min_p", 0, 1, &d, &present, e) != 0) return -1;
    if (present) p->sampling.min_p = (float)d;
    if (sy_json_get_number(body, NULL, "repeat_penalty", 0.01, 100, &d, &present, e) != 0) return -1;
    if (present) p->sampling.repeat_penalty = (float)d;
    if (sy_json_get_integer(body, NULL, "repeat_last_n", -1, INT32_MAX, &i, &present, e) != 0) return -1;
    if (present) p->sampling.penalty_last_n = i <= 0 ? 0 : (uint32_t)i;
    if (sy_json_get_number(body, NULL, "presence_penalty", -2, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.presence_penalty = (float)d;
    if (sy_json_get_number(body, NULL, "frequency_penalty", -2, 2, &d, &present, e) != 0) return -1;
    if (present) p->sampling.frequency_penalty = (float)d;
    uint64_t seed;
    if (sy_json_get_seed(body, NULL, "seed", &seed, &present, e) != 0) return -1;
    p->sampling.seed = present && seed != UINT64_MAX ? seed : sy_api_random_seed(); /* -1: random */
    if (sy_json_get_stop(body, NULL, "stop", p, e) != 0) return -1;
    /* typical_p, XTC and DRY as on /completion (llama-server's logit_bias is not taken here) */
    if (sy_api_sampling_fields(body, NULL, false, p, e) != 0) return -1;
    return 0;
}

/* As sy_api_llama_model_name, except that without a name among several models the first configured one with
 * FIM tokens is meant (llama.vscode and llama.vim send no model). */
static bool infill_model_name(sy_http_request *r, const cJSON *body, char *out, size_t size) {
    const cJSON *v = body ? cJSON_GetObjectItemCaseSensitive(body, "model") : NULL;
    const char *q = sy_http_query(r, "model");
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    bool named = (v != NULL && !cJSON_IsNull(v)) || (q != NULL && q[0] != '\0');
    bool found = false;
    for (size_t i = 0; !named && cfg && cfg->n_models > 1 && i < cfg->n_models && !found; i++) {
        char err[256];
        cJSON *meta = sy_api_model_metadata(srv, &cfg->models[i], err, sizeof err);
        sy_api_fim_tokens fim;
        sy_api_fim_tokens_of(meta, &fim);
        cJSON_Delete(meta);
        if (sy_api_fim_supported(&fim)) {
            snprintf(out, size, "%s", cfg->models[i].name);
            found = true;
        }
    }
    sy_api_config_release(srv, cfg);
    return found || sy_api_llama_model_name(r, body, out, size);
}

void sy_api_llama_infill(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    sy_api_model m;
    memset(&m, 0, sizeof m);
    sy_api_fim_chunk *chunks = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    sy_gen_params params = sy_gen_params_defaults();
    infill_request *q = sy_xcalloc(1, sizeof *q);
    sy_api_fim_input in;
    memset(&in, 0, sizeof in);
    in.repo_header = true;
    bool stream = false, return_prompt = false;
    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (sy_json_get_bool(body, NULL, "return_prompt_tokens", &return_prompt, NULL, &e) != 0) goto fail;
    if (sy_json_get_string(body, NULL, "input_prefix", &in.prefix, NULL, &e) != 0 ||
        sy_json_get_string(body, NULL, "input_suffix", &in.suffix, NULL, &e) != 0 ||
        sy_json_get_string(body, NULL, "prompt", &in.prompt, NULL, &e) != 0 ||
        sy_json_get_bool(body, NULL, "stream", &stream, NULL, &e) != 0)
        goto fail;
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(body, "input_extra");
    if (extra != NULL && !cJSON_IsNull(extra)) {
        if (!cJSON_IsArray(extra)) {
            sy_api_fail(&e, 400, "invalid_type", "input_extra",
                        "input_extra must be an array of {\"filename\": string, \"text\": string}");
            goto fail;
        }
        int count = cJSON_GetArraySize(extra);
        chunks = sy_xcalloc(count > 0 ? (size_t)count : 1, sizeof *chunks);
        const cJSON *c;
        cJSON_ArrayForEach(c, extra) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
            const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "filename");
            if (!cJSON_IsObject(c) || !cJSON_IsString(text)) {
                sy_api_fail(&e, 400, "invalid_value", "input_extra",
                            "input_extra[%zu] must contain a \"text\" field with a string value", in.n_extra);
                goto fail;
            }
            if (file != NULL && !cJSON_IsString(file)) {
                sy_api_fail(&e, 400, "invalid_value", "input_extra", "input_extra[%zu].filename must be a string",
                            in.n_extra);
                goto fail;
            }
            chunks[in.n_extra].text = text->valuestring;
            chunks[in.n_extra].filename = file ? file->valuestring : NULL;
            in.n_extra++;
        }
        in.extra = chunks;
    }
    if (infill_params(body, &params, &in.n_predict, &e) != 0) goto fail;
    char name[SY_CONFIG_MAX_NAME_LEN + 2];
    if (!infill_model_name(r, body, name, sizeof name)) {
        free(chunks);
        infill_request_free(q);
        cJSON_Delete(body);
        return;
    }
    if (sy_api_acquire(r, name, &m, &e) != 0) goto fail;
    snprintf(q->model, sizeof q->model, "%.*s", SY_CONFIG_MAX_NAME_LEN, name);
    tokens = sy_api_fim_prompt(r, &m, &in, &n_tokens, &e);
    if (tokens == NULL) goto fail;
    if (return_prompt) {
        q->prompt = sy_xmalloc((n_tokens ? n_tokens : 1) * sizeof *q->prompt);
        memcpy(q->prompt, tokens, n_tokens * sizeof *tokens);
        q->n_prompt = n_tokens;
    }
    sy_api_gen *g = sy_api_gen_start(r, &m, tokens, n_tokens, &params, &e);
    if (g == NULL) goto fail;
    free(tokens);
    free(chunks);
    cJSON_Delete(body); /* the scheduler copied the stop strings */
    if (stream) {
        sy_api_respond_stream(r, "text/event-stream", g, &infill_ops, q);
        return;
    }
    sy_buf text;
    sy_buf_init(&text);
    sy_api_event *ev;
    while ((ev = sy_api_gen_next(g)) != NULL) {
        if (ev->type == SY_GEN_EVENT_TEXT) {
            sy_buf_append(&text, ev->text, ev->text_len);
        } else {
            int status;
            char msg[1024];
            if (sy_api_gen_failed(g, ev, &status, msg, sizeof msg))
                sy_http_respond_error(r, status, status == 500 ? "generation_failed" : "server_stopping", NULL, "%s",
                                      msg);
            else sy_http_respond_json(r, 200, infill_final(q, text.data ? text.data : "", ev));
            sy_api_event_free(ev);
            break;
        }
        sy_api_event_free(ev);
    }
    if (ev == NULL) sy_http_respond_error(r, 499, "client_gone", NULL, "the client went away");
    sy_buf_free(&text);
    sy_api_gen_finish(g);
    infill_request_free(q);
    return;
fail:
    sy_api_respond_error(r, &e);
    sy_api_model_release(&m);
    free(tokens);
    free(chunks);
    infill_request_free(q);
    cJSON_Delete(body);
}
