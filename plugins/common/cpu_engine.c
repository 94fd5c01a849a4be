/* The shared CPU engine glue: see cpu_engine.h. */
#include "cpu_engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "threadpool.h"

#define DECODE_STACK_ITEMS 16 /* batches up to this size need no allocation */

static const sy_host_api *host;
static const char *plugin_name = "cpu-engine";
static _Thread_local char error_text[512];
static _Thread_local sy_status error_status;

void sy_cpu_engine_init(const sy_host_api *h, const char *name) {
    host = h;
    if (name) plugin_name = name;
}

void sy_cpu_engine_deinit(void) { host = NULL; }

sy_status sy_cpu_fail(sy_status st, const char *fmt, ...) {
    error_status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return st;
}

sy_status sy_cpu_fail_prefix(const char *prefix) {
    char reason[sizeof error_text];
    snprintf(reason, sizeof reason, "%s", error_text);
    return sy_cpu_fail(error_status, "%s: %s", prefix, reason);
}

const char *sy_cpu_error_message(void) { return error_text; }

void sy_cpu_log(sy_log_level level, const char *fmt, ...) {
    if (host == NULL || host->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    host->log(level, plugin_name, line);
}

/* ---- options ---- */

static bool parse_u32(const char *key, const char *value, uint32_t lo, uint32_t hi, uint32_t *out) {
    char *end;
    unsigned long long v = strtoull(value, &end, 10);
    if (*value == '\0' || *value == '-' || *value == '+' || *value == ' ' || *end != '\0' || v < lo || v > hi) {
        sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: expected an integer in [%u, %u]", key, value, lo, hi);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static bool parse_bool(const char *key, const char *value, bool *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcmp(value, yes[i]) == 0) return *out = true, true;
        if (strcmp(value, no[i]) == 0) return *out = false, true;
    }
    sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: expected 1/0, true/false, yes/no or on/off", key, value);
    return false;
}

sy_status sy_cpu_options_parse(const sy_option *options, size_t n_options, sy_cpu_options *out) {
    memset(out, 0, sizeof *out);
    out->threads = (uint32_t)sy_threadpool_default_threads();
    out->kv_buffer_mb = SY_CPU_DEFAULT_KV_BUFFER_MB;
    if (n_options > 0 && options == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "load: options missing");
    for (size_t i = 0; i < n_options; i++) {
        const char *k = options[i].key, *v = options[i].value ? options[i].value : "";
        if (k == NULL) continue;
        bool ok = true;
        if (strcmp(k, "threads") == 0) {
            ok = parse_u32(k, v, 1, SY_THREADPOOL_MAX_THREADS, &out->threads);
        } else if (strcmp(k, "ctx_size") == 0) {
            ok = parse_u32(k, v, 0, 1u << 24, &out->ctx_size);
        } else if (strcmp(k, "kv_cache_dir") == 0) {
            if (*v == '\0') return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option kv_cache_dir: empty");
            out->kv_cache_dir = v;
        } else if (strcmp(k, "kv_max_tokens") == 0) {
            ok = parse_u32(k, v, 1, SY_KV_MAX_TOKENS, &out->kv_max_tokens);
        } else if (strcmp(k, "kv_buffer_mb") == 0) {
            ok = parse_u32(k, v, 0, 1u << 20, &out->kv_buffer_mb);
        } else if (strcmp(k, "keep_kv_cache") == 0) {
            ok = parse_bool(k, v, &out->keep_kv_cache);
        } else if (strcmp(k, "backend") == 0) {
            if (strcmp(v, "core") == 0 || strcmp(v, "default") == 0) {
                out->backend = SY_CPU_BACKEND_CORE;
            } else if (strcmp(v, "reference") == 0) {
                out->backend = SY_CPU_BACKEND_REFERENCE;
            } else {
                return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option backend=%s: expected core or reference", v);
            }
        } else {
            sy_cpu_log(SY_LOG_DEBUG, "ignoring option %s", k);
        }
        if (!ok) return SY_ERR_INVALID_ARGUMENT;
    }
    if (out->backend == SY_CPU_BACKEND_REFERENCE && out->kv_cache_dir)
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT,
                           "option kv_cache_dir: the reference backend keeps its KV in RAM (drop one of the two)");
    return SY_OK;
}

/* ---- the model ---- */

sy_model *sy_cpu_model_new(void) {
    sy_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    m->bos_token = m->eos_token = m->pad_token = -1;
    return m;
}

sy_status sy_cpu_model_start(sy_model *m, const sy_tf_config *cfg, const sy_tf_weights *w,
                             const sy_cpu_options *opt) {
    char err[400];
    uint32_t n_ctx = opt->ctx_size ? opt->ctx_size : (m->n_ctx_train ? m->n_ctx_train : 4096);
    if (opt->backend == SY_CPU_BACKEND_REFERENCE) {
        m->ref = sy_ref_create(cfg, w, n_ctx, err, sizeof err);
        return m->ref ? SY_OK : sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
    }
    m->tf = sy_tf_create(cfg, w, n_ctx, opt->threads, err, sizeof err);
    if (m->tf == NULL) return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    if (opt->kv_cache_dir) {
        uint64_t max_tokens = opt->kv_max_tokens ? opt->kv_max_tokens : 4ull * n_ctx;
        if (max_tokens > SY_KV_MAX_TOKENS) max_tokens = SY_KV_MAX_TOKENS;
        sy_kv_cache_options ko = {opt->kv_cache_dir, (uint32_t)max_tokens, opt->kv_buffer_mb, opt->keep_kv_cache};
        m->kv_cache = sy_kv_cache_create(&ko, cfg->n_layer, cfg->n_head_kv * cfg->head_dim,
                                         sy_tf_n_threads(m->tf), err, sizeof err);
        if (m->kv_cache == NULL) return sy_cpu_fail(SY_ERR_IO, "%s", err);
        sy_tf_set_kv_store(m->tf, sy_kv_cache_ops(), m->kv_cache);
        sy_cpu_log(SY_LOG_INFO, "KV cache on disk: %s (layer 0 in %s), up to %llu positions, %u MB tile buffer",
                   opt->kv_cache_dir, sy_kv_cache_file_path(m->kv_cache, 0, 0), (unsigned long long)max_tokens,
                   opt->kv_buffer_mb);
    }
    return SY_OK;
}

void sy_cpu_model_set_fingerprint(sy_model *m, XXH3_state_t *h) {
    if (h == NULL) {
        snprintf(m->fingerprint, sizeof m->fingerprint, "unknown");
        return;
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx%016llx", (unsigned long long)d.high64,
             (unsigned long long)d.low64);
    XXH3_freeState(h);
}

bool sy_cpu_model_kv_cache_stats(const sy_model *m, sy_kv_cache_stats *out) {
    if (m == NULL || m->kv_cache == NULL) return false;
    sy_kv_cache_stats_get(m->kv_cache, out);
    return true;
}

void sy_cpu_unload(sy_model *m) {
    if (m == NULL) return;
    sy_tf_destroy(m->tf);
    sy_kv_cache_destroy(m->kv_cache); /* after the model: its sequences are gone with it */
    sy_ref_destroy(m->ref);
    if (m->vocab_ops && m->vocab) m->vocab_ops->free(m->vocab);
    if (m->format_free) m->format_free(m->format);
    free(m->architecture);
    free(m->name);
    free(m->chat_template);
    free(m);
}

static const sy_tf_config *model_config(const sy_model *m, uint32_t *n_ctx) {
    if (m->tf) {
        *n_ctx = sy_tf_n_ctx(m->tf);
        return sy_tf_model_config(m->tf);
    }
    return sy_ref_model_config(m->ref, n_ctx);
}

sy_status sy_cpu_model_info(const sy_model *m, sy_model_info *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "model_info: bad arguments");
    uint32_t n_ctx;
    const sy_tf_config *c = model_config(m, &n_ctx);
    sy_model_info info = {
        .struct_size = out->struct_size,
        .architecture = m->architecture ? m->architecture : "",
        .name = m->name ? m->name : "",
        .weight_dtype = m->weight_dtype,
        .fingerprint = m->fingerprint,
        .chat_template = m->chat_template,
        .n_vocab = c->n_vocab,
        .n_ctx_train = m->n_ctx_train,
        .n_ctx = n_ctx,
        .n_layer = c->n_layer,
        .n_embd = c->n_embd,
        .n_params = m->n_params,
        .bos_token = m->bos_token,
        .eos_token = m->eos_token,
        .pad_token = m->pad_token,
        .add_bos = m->add_bos,
        .max_sequences = 0,
    };
    /* only the fields the host's struct has */
    memcpy(out, &info, out->struct_size < sizeof info ? out->struct_size : sizeof info);
    return SY_OK;
}

sy_status sy_cpu_memory_usage(const sy_model *m, sy_memory_usage *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: bad arguments");
    sy_tf_memory_info tm = {0};
    if (m->tf) sy_tf_memory(m->tf, &tm);
    else sy_ref_memory(m->ref, &tm);
    sy_memory_usage u = {
        .struct_size = out->struct_size,
        .mapped_bytes = m->weights_mapped_bytes + tm.mapped_bytes,
        .resident_bytes = tm.resident_bytes + (m->vocab_ops ? m->vocab_ops->memory(m->vocab) : 0),
        .device_bytes = 0,
        .kv_bytes = tm.kv_bytes,
    };
    memcpy(out, &u, out->struct_size < sizeof u ? out->struct_size : sizeof u);
    return SY_OK;
}

/* ---- tokenizer ---- */

sy_status sy_cpu_tokenize(const sy_model *m, const char *text, size_t text_len, uint32_t flags, int32_t *out,
                          size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (text == NULL && text_len > 0) || (out == NULL && capacity > 0))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "tokenize: bad arguments");
    char err[256] = "";
    sy_status st =
        m->vocab_ops->tokenize(m->vocab, text ? text : "", text_len, flags, out, capacity, n_out, err, sizeof err);
    if (st == SY_ERR_BUFFER_TOO_SMALL)
        return sy_cpu_fail(st, "tokenize: %zu tokens do not fit in %zu", *n_out, capacity);
    return st == SY_OK ? SY_OK : sy_cpu_fail(st, "tokenize: %s", err);
}

sy_status sy_cpu_token_to_bytes(const sy_model *m, int32_t token, char *out, size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (out == NULL && capacity > 0))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: bad arguments");
    sy_status st = m->vocab_ops->token_bytes(m->vocab, token, out, capacity, n_out);
    if (st == SY_ERR_INVALID_ARGUMENT) return sy_cpu_fail(st, "token id %d out of range", token);
    if (st == SY_ERR_BUFFER_TOO_SMALL)
        return sy_cpu_fail(st, "token %d: %zu bytes do not fit in %zu", token, *n_out, capacity);
    return st;
}

uint32_t sy_cpu_token_flags(const sy_model *m, int32_t token) {
    return m == NULL ? 0 : m->vocab_ops->token_flags(m->vocab, token);
}

/* ---- sequences ---- */

sy_status sy_cpu_seq_create(sy_model *m, sy_seq **out) {
    if (m == NULL || out == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "seq_create: bad arguments");
    sy_seq *s = calloc(1, sizeof *s);
    bool ok = s != NULL && (m->tf ? (s->tf = sy_tf_seq_create(m->tf)) != NULL
                                  : (s->ref = sy_ref_seq_create(m->ref)) != NULL);
    if (!ok) {
        free(s);
        return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "seq_create: out of memory");
    }
    *out = s;
    return SY_OK;
}

void sy_cpu_seq_free(sy_model *m, sy_seq *s) {
    if (m == NULL || s == NULL) return;
    if (s->tf) sy_tf_seq_free(m->tf, s->tf);
    if (s->ref) sy_ref_seq_free(m->ref, s->ref);
    free(s);
}

uint32_t sy_cpu_seq_length(const sy_model *m, const sy_seq *s) {
    (void)m;
    if (s == NULL) return 0;
    return s->tf ? sy_tf_seq_length(s->tf) : sy_ref_seq_length(s->ref);
}

sy_status sy_cpu_seq_truncate(sy_model *m, sy_seq *s, uint32_t n) {
    if (m == NULL || s == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: bad arguments");
    uint32_t len = sy_cpu_seq_length(m, s);
    sy_status st = s->tf ? sy_tf_seq_truncate(m->tf, s->tf, n) : sy_ref_seq_truncate(m->ref, s->ref, n);
    if (st == SY_ERR_INVALID_ARGUMENT)
        return sy_cpu_fail(st, "seq_truncate: %u is more than the %u tokens held", n, len);
    if (st != SY_OK) return sy_cpu_fail(st, "seq_truncate: cannot go back from %u to %u tokens", len, n);
    return SY_OK;
}

sy_status sy_cpu_seq_fork(sy_model *m, const sy_seq *src, uint32_t n, sy_seq **out) {
    if (m == NULL || src == NULL || out == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: bad arguments");
    uint32_t len = sy_cpu_seq_length(m, src);
    if (n > len) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: %u is more than the %u tokens held", n, len);
    sy_seq *s = calloc(1, sizeof *s);
    if (s == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "seq_fork: out of memory");
    sy_status st = src->tf ? sy_tf_seq_fork(m->tf, src->tf, n, &s->tf) : sy_ref_seq_fork(m->ref, src->ref, n, &s->ref);
    if (st != SY_OK) {
        free(s);
        return sy_cpu_fail(st, "seq_fork at %u tokens: %s", n,
                           st == SY_ERR_UNSUPPORTED ? "the state cannot go back that far" : "out of memory");
    }
    *out = s;
    return SY_OK;
}

/* ---- decode ---- */

static int host_cancelled(void *call) {
    return host && host->is_cancelled ? host->is_cancelled((const sy_host_call *)call) : 0;
}

sy_status sy_cpu_decode(sy_model *m, const sy_decode_batch *batch) {
    if (m == NULL || batch == NULL || (batch->n_items > 0 && batch->items == NULL) ||
        (batch->n_items > 0 && batch->item_size < offsetof(sy_decode_item, logits) + sizeof(float *)))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "decode: bad batch");
    /* the backend's item arrays: on the stack for the usual small batches */
    sy_tf_batch_item tf_stack[DECODE_STACK_ITEMS], *tf_items = tf_stack;
    sy_ref_item ref_stack[DECODE_STACK_ITEMS], *ref_items = ref_stack;
    void *heap = NULL;
    if (batch->n_items > DECODE_STACK_ITEMS) {
        heap = calloc(batch->n_items, m->tf ? sizeof *tf_items : sizeof *ref_items);
        if (heap == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "decode: out of memory");
        tf_items = heap;
        ref_items = heap;
    }
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *it = sy_decode_batch_item(batch, i);
        if (it->seq == NULL || (m->tf ? it->seq->tf == NULL : it->seq->ref == NULL)) {
            free(heap);
            return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "decode: item %u has no sequence of this model", i);
        }
        if (m->tf) tf_items[i] = (sy_tf_batch_item){it->seq->tf, it->tokens, it->n_tokens, it->n_logits, it->logits};
        else ref_items[i] = (sy_ref_item){it->seq->ref, it->tokens, it->n_tokens, it->n_logits, it->logits};
    }
    bool has_call = SY_HAS_FIELD(batch, sy_decode_batch, call) && batch->call != NULL;
    sy_tf_cancel_fn cancel = has_call ? host_cancelled : NULL;
    void *call = has_call ? (void *)batch->call : NULL;
    char err[256];
    sy_status st = m->tf ? sy_tf_decode(m->tf, tf_items, batch->n_items, cancel, call, err, sizeof err)
                         : sy_ref_decode(m->ref, ref_items, batch->n_items, cancel, call, err, sizeof err);
    free(heap);
    return st == SY_OK ? SY_OK : sy_cpu_fail(st, "decode: %s", err);
}
