/* The shared CPU engine glue: see cpu_engine.h. */
#include "cpu_engine.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sy_kernels.h"
#include "threadpool.h"
#include "transformer_lfm2.h"

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

sy_status sy_cpu_last_status(void) { return error_status; }

void sy_cpu_log(sy_log_level level, const char *fmt, ...) {
    if (host == NULL || host->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (SY_HAS_FIELD(host, sy_host_api, log_ctx) && host->log_ctx != NULL)
        host->log_ctx(host->context, level, line);
    else
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

const char *sy_cpu_cache_type_name(sy_dtype type) {
    switch (type) {
    case SY_DTYPE_F16: return "f16";
    case SY_DTYPE_Q8_0: return "q8_0";
    case SY_DTYPE_F32: return "f32";
    default: return NULL;
    }
}

/* llama.cpp's spelling of a cache type; its other types (bf16, q4_0, q4_1, iq4_nl, q5_0, q5_1) are named as what
 * this engine does not store. */
static bool parse_cache_type(const char *key, const char *value, sy_dtype *out) {
    static const sy_dtype types[] = {SY_DTYPE_F16, SY_DTYPE_Q8_0, SY_DTYPE_F32};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (strcmp(value, sy_cpu_cache_type_name(types[i])) == 0) return *out = types[i], true;
    sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: expected one of f16, q8_0, f32", key, value);
    return false;
}

sy_status sy_cpu_options_parse(const sy_option *options, size_t n_options, sy_cpu_options *out) {
    memset(out, 0, sizeof *out);
    out->cache_type_k = out->cache_type_v = SY_DTYPE_F16;
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
        } else if (strcmp(k, "cache_type_k") == 0) {
            ok = out->cache_type_k_set = parse_cache_type(k, v, &out->cache_type_k);
        } else if (strcmp(k, "cache_type_v") == 0) {
            ok = out->cache_type_v_set = parse_cache_type(k, v, &out->cache_type_v);
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
    /* The disk cache's files are F16 and the reference backend keeps F32: a type asked of them that they would
     * not keep is refused, the default is theirs. */
    const char *keys[2] = {"cache_type_k", "cache_type_v"};
    const sy_dtype types[2] = {out->cache_type_k, out->cache_type_v};
    const bool given[2] = {out->cache_type_k_set, out->cache_type_v_set};
    for (int i = 0; i < 2; i++) {
        if (given[i] && out->kv_cache_dir && types[i] != SY_DTYPE_F16)
            return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: the disk KV cache (kv_cache_dir) stores f16",
                               keys[i], sy_cpu_cache_type_name(types[i]));
        if (given[i] && out->backend == SY_CPU_BACKEND_REFERENCE && types[i] != SY_DTYPE_F32)
            return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: the reference backend keeps its KV in f32",
                               keys[i], sy_cpu_cache_type_name(types[i]));
    }
    return SY_OK;
}

/* Kept in step with sy_cpu_options_parse above: tests/plugins/test_plugin_options.c loads each key at its default
 * and just outside its range. */
static const sy_option_spec cpu_option_specs[] = {
    {sizeof(sy_option_spec), "threads", SY_OPTION_UINT, "", "compute threads (default: the CPUs this process may use)",
     1, SY_THREADPOOL_MAX_THREADS, NULL},
    {sizeof(sy_option_spec), "ctx_size", SY_OPTION_UINT, "0",
     "most tokens one sequence may hold; 0: the model's training context", 0, 1u << 24, NULL},
    {sizeof(sy_option_spec), "backend", SY_OPTION_STRING, "core",
     "core (the transformer core) or reference (the slow reference forward, KV in RAM)", 0, 0, NULL},
    {sizeof(sy_option_spec), "kv_cache_dir", SY_OPTION_PATH_LIST, "",
     "keep the KV in F16 files in these folders instead of RAM (default: RAM)", 0, 0, NULL},
    {sizeof(sy_option_spec), "kv_max_tokens", SY_OPTION_UINT, "",
     "positions the disk KV cache holds, all sequences together (default: 4 x the context)", 1, SY_KV_MAX_TOKENS, NULL},
    {sizeof(sy_option_spec), "kv_buffer_mb", SY_OPTION_UINT, "32", "the disk KV cache's resident F32 tile buffer in MiB",
     0, 1u << 20, NULL},
    {sizeof(sy_option_spec), "keep_kv_cache", SY_OPTION_BOOL, "false", "leave the disk KV cache's files behind on unload",
     0, 0, NULL},
    {sizeof(sy_option_spec), "cache_type_k", SY_OPTION_STRING, "f16",
     "the type the KV cache keeps keys in: f16, q8_0 (blocks of 32, one f16 scale) or f32", 0, 0, SY_CPU_CACHE_TYPES},
    {sizeof(sy_option_spec), "cache_type_v", SY_OPTION_STRING, "f16",
     "the type the KV cache keeps values in: f16, q8_0 (blocks of 32, one f16 scale) or f32", 0, 0, SY_CPU_CACHE_TYPES},
};

const sy_plugin_options_api sy_cpu_options_api = {
    sizeof(sy_plugin_options_api), sizeof cpu_option_specs / sizeof cpu_option_specs[0], sizeof(sy_option_spec),
    cpu_option_specs};

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
    /* A decoder embedding model's KV lives for one call and is never reused or saved: the default there is f32,
     * which keeps its vectors as close to sentence-transformers' as before, at no memory that stays. */
    bool embeds = m->pooling != SY_POOLING_NONE;
    sy_dtype type_k = embeds && !opt->cache_type_k_set ? SY_DTYPE_F32 : opt->cache_type_k;
    sy_dtype type_v = embeds && !opt->cache_type_v_set ? SY_DTYPE_F32 : opt->cache_type_v;
    if (opt->kv_cache_dir) type_k = type_v = SY_DTYPE_F16; /* its files' type (others were refused) */
    sy_status st = sy_tf_set_kv_types(m->tf, type_k, type_v, err, sizeof err);
    if (st != SY_OK) return sy_cpu_fail(st, "%s", err);
    sy_tf_prefault(m->tf);
    /* the snapshot layout names the types, so a snapshot restores only into a cache of the same types */
    const char *tk = sy_cpu_cache_type_name(type_k), *tv = sy_cpu_cache_type_name(type_v);
    char types[24];
    if (type_k == type_v)
        snprintf(types, sizeof types, "%s", tk);
    else
        snprintf(types, sizeof types, "k-%s-v-%s", tk, tv);
    snprintf(m->state_layout, sizeof m->state_layout, "sy-cpu-kv-%s%s-v1", types,
             sy_tf_conv_state_floats(m->tf) ? "-conv-f32" : "");
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

sy_status sy_cpu_estimate(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx_train,
                          const sy_cpu_options *opt, uint64_t mapped_bytes, uint64_t vocab_bytes,
                          sy_resource_estimate *out) {
    if (out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "estimate: bad arguments");
    char err[400];
    uint32_t n_ctx = opt->ctx_size ? opt->ctx_size : (n_ctx_train ? n_ctx_train : 4096);
    /* The backend is built as the load builds it, on one thread and without its scratch written: that reads the
     * norm vectors (a few KB) and reserves address space, and counts exactly what the load will allocate. */
    sy_tf_memory_info tm = {0};
    if (opt->backend == SY_CPU_BACKEND_REFERENCE) {
        sy_ref_model *ref = sy_ref_create(cfg, w, n_ctx, err, sizeof err);
        if (ref == NULL) return sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        sy_ref_memory(ref, &tm);
        sy_ref_destroy(ref);
    } else {
        sy_tf_model *tf = sy_tf_create(cfg, w, n_ctx, 1, err, sizeof err);
        if (tf == NULL)
            return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
        sy_tf_memory(tf, &tm);
        tm.resident_bytes += sy_tf_kv_read_scratch_bytes(sy_tf_kv_dim(tf), opt->cache_type_k, opt->cache_type_v,
                                                         opt->threads);
        if (opt->kv_cache_dir) /* its files stay empty until a sequence holds positions */
            tm.resident_bytes += sy_kv_cache_resident_at_create((uint32_t)sy_tf_kv_dim(tf), opt->threads);
        sy_tf_destroy(tf);
    }
    sy_resource_estimate e = {
        .struct_size = out->struct_size,
        .mapped_bytes = mapped_bytes + tm.mapped_bytes,
        .resident_bytes = tm.resident_bytes + vocab_bytes,
        .device_bytes = 0,
    };
    memcpy(out, &e, out->struct_size < sizeof e ? out->struct_size : sizeof e);
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
    sy_enc_destroy(m->enc);
    sy_tf_destroy(m->tf);
    sy_kv_cache_destroy(m->kv_cache); /* after the model: its sequences are gone with it */
    sy_ref_destroy(m->ref);
    if (m->vocab_ops && m->vocab) m->vocab_ops->free(m->vocab);
    if (m->format_free) m->format_free(m->format);
    free(m->architecture);
    free(m->name);
    free(m->chat_template);
    for (uint32_t i = 0; i < m->n_chat_templates; i++) {
        free(m->chat_template_names[i]);
        free(m->chat_template_texts[i]);
    }
    free(m->chat_template_names);
    free(m->chat_template_texts);
    free(m);
}

static const sy_tf_config *model_config(const sy_model *m, uint32_t *n_ctx) {
    if (m->tf) {
        *n_ctx = sy_tf_n_ctx(m->tf);
        return sy_tf_model_config(m->tf);
    }
    return sy_ref_model_config(m->ref, n_ctx);
}

/* Attention KV truncates anywhere; a short-conv model keeps SY_LFM2_ROLLBACK tokens of conv history. */
static uint32_t sy_cpu_max_rollback(const sy_model *m) {
    uint32_t n_ctx;
    const sy_tf_config *c = model_config(m, &n_ctx);
    return c->arch != NULL && c->arch->short_conv ? SY_LFM2_ROLLBACK : UINT32_MAX;
}

sy_status sy_cpu_model_info(const sy_model *m, sy_model_info *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "model_info: bad arguments");
    if (m->enc) return sy_cpu_encoder_info(m, out);
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
        .max_rollback = sy_cpu_max_rollback(m),
        .max_decode_tokens = 0,
        .capabilities = SY_CAP_ITEM_CANCEL | (m->pooling != SY_POOLING_NONE ? SY_CAP_EMBED : 0) |
                        (m->no_generate ? SY_CAP_NO_GENERATE : 0),
        .pooling = m->pooling,
        .n_embd_out = m->pooling != SY_POOLING_NONE ? c->n_embd : 0,
        .embd_normalized = m->embd_normalize,
        .n_chat_templates = m->n_chat_templates,
        .chat_template_names = (const char *const *)m->chat_template_names,
        .chat_template_texts = (const char *const *)m->chat_template_texts,
    };
    if (m->pooling != SY_POOLING_NONE && m->embd_ctx > 0 && m->embd_ctx < n_ctx) info.n_ctx = m->embd_ctx;
    /* only the fields the host's struct has */
    memcpy(out, &info, out->struct_size < sizeof info ? out->struct_size : sizeof info);
    return SY_OK;
}

sy_status sy_cpu_memory_usage(const sy_model *m, sy_memory_usage *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: bad arguments");
    sy_tf_memory_info tm = {0};
    if (m->enc) tm.resident_bytes = sy_enc_memory(m->enc);
    else if (m->tf) sy_tf_memory(m->tf, &tm);
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
    if (m == NULL) return 0;
    uint32_t n_ctx;
    if (m->enc) return token < 0 || (uint32_t)token >= sy_enc_model_config(m->enc)->n_vocab
                           ? SY_TOKEN_INVALID : m->vocab_ops->token_flags(m->vocab, token);
    /* outside the logits rows: not a token of this model (ABI 1.2) */
    if (token < 0 || (uint32_t)token >= model_config(m, &n_ctx)->n_vocab) return SY_TOKEN_INVALID;
    return m->vocab_ops->token_flags(m->vocab, token);
}

/* ---- sequences ---- */

sy_status sy_cpu_seq_create(sy_model *m, sy_seq **out) {
    if (m == NULL || out == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "seq_create: bad arguments");
    if (m->enc || m->no_generate)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s is an embedding model: it does not generate text",
                           m->name ? m->name : "this model");
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
    if (host == NULL) return 0;
    if (SY_HAS_FIELD(host, sy_host_api, is_cancelled_ctx) && host->is_cancelled_ctx != NULL)
        return host->is_cancelled_ctx(host->context, (const sy_host_call *)call);
    return host->is_cancelled ? host->is_cancelled((const sy_host_call *)call) : 0;
}

int sy_cpu_host_cancelled(void *call) { return host_cancelled(call); }

sy_status sy_cpu_decode(sy_model *m, const sy_decode_batch *batch) {
    if (m == NULL || batch == NULL || (batch->n_items > 0 && batch->items == NULL) ||
        (batch->n_items > 0 && batch->item_size < offsetof(sy_decode_item, logits) + sizeof(float *)))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "decode: bad batch");
    if (m->enc || m->no_generate)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s is an embedding model: it does not generate text",
                           m->name ? m->name : "this model");
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
    /* With the host's item_status (ABI 1.2), an item whose own call is cancelled, or that would pass the context,
     * is left out alone and reported there; the others decode. */
    sy_status *item_status = SY_HAS_FIELD(batch, sy_decode_batch, item_status) ? batch->item_status : NULL;
    uint32_t n_ctx;
    model_config(m, &n_ctx);
    uint32_t n_run = 0;
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *it = sy_decode_batch_item(batch, i);
        if (it->seq == NULL || (m->tf ? it->seq->tf == NULL : it->seq->ref == NULL)) {
            free(heap);
            return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "decode: item %u has no sequence of this model", i);
        }
        if (item_status != NULL) {
            item_status[i] = SY_OK;
            bool own_call = batch->item_size >= offsetof(sy_decode_item, call) + sizeof it->call &&
                            SY_HAS_FIELD(it, sy_decode_item, call) && it->call != NULL;
            if (own_call && host_cancelled((void *)it->call)) {
                item_status[i] = SY_ERR_CANCELLED;
                continue;
            }
            if ((uint64_t)sy_cpu_seq_length(m, it->seq) + it->n_tokens > n_ctx) {
                item_status[i] = SY_ERR_CONTEXT_FULL;
                continue;
            }
        }
        if (m->tf) tf_items[n_run++] = (sy_tf_batch_item){it->seq->tf, it->tokens, it->n_tokens, it->n_logits, it->logits, NULL};
        else ref_items[n_run++] = (sy_ref_item){it->seq->ref, it->tokens, it->n_tokens, it->n_logits, it->logits};
    }
    if (n_run == 0) {
        free(heap);
        return SY_OK;
    }
    bool has_call = SY_HAS_FIELD(batch, sy_decode_batch, call) && batch->call != NULL;
    sy_tf_cancel_fn cancel = has_call ? host_cancelled : NULL;
    void *call = has_call ? (void *)batch->call : NULL;
    char err[256];
    sy_status st = m->tf ? sy_tf_decode(m->tf, tf_items, n_run, cancel, call, err, sizeof err)
                         : sy_ref_decode(m->ref, ref_items, n_run, cancel, call, err, sizeof err);
    free(heap);
    return st == SY_OK ? SY_OK : sy_cpu_fail(st, "decode: %s", err);
}

/* ---- state ("sy.engine.state/1") ---- */

#define STATE_PIECE_POSITIONS 16u /* positions handed to the host's writer / asked of its reader per call */

/* A chunk's state bytes: for each position, for each attention layer, the K row then the V row in the KV cache
 * types (sy_tf_kv_row_bytes: F32, F16, or Q8_0 blocks as ggml lays them out); then the conv state (F32). */
typedef struct state_shape {
    uint32_t element_size; /* of the K type, for the snapshot's byte shuffle: 4 F32, 2 F16, 1 Q8_0 */
    uint32_t n_kv_layers;
    size_t kv_dim;
    size_t row_bytes[2]; /* K, V */
    sy_dtype type[2];
    size_t conv_floats;
    uint64_t kv_bytes_per_token;
} state_shape;

static state_shape state_shape_of(const sy_model *m) {
    state_shape sh = {0};
    const sy_tf_config *c = sy_tf_model_config(m->tf);
    sy_tf_kv_types(m->tf, &sh.type[0], &sh.type[1]);
    sh.element_size = sh.type[0] == SY_DTYPE_F32 ? 4 : sh.type[0] == SY_DTYPE_F16 ? 2 : 1;
    sh.kv_dim = sy_tf_kv_dim(m->tf);
    sh.row_bytes[0] = sy_tf_kv_row_bytes(m->tf, 0);
    sh.row_bytes[1] = sy_tf_kv_row_bytes(m->tf, 1);
    for (uint32_t l = 0; l < c->n_layer; l++) sh.n_kv_layers += sy_tf_layer_has_kv(m->tf, l);
    sh.conv_floats = sy_tf_conv_state_floats(m->tf);
    sh.kv_bytes_per_token = (uint64_t)sh.n_kv_layers * (sh.row_bytes[0] + sh.row_bytes[1]);
    return sh;
}

static sy_status state_info(const sy_model *m, sy_state_info *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_info: bad arguments");
    if (m->tf == NULL) return sy_cpu_fail(SY_ERR_UNSUPPORTED, "state_info: the reference backend keeps no state");
    state_shape sh = state_shape_of(m);
    sy_state_info info = {
        .struct_size = out->struct_size,
        .layout = m->state_layout,
        .element_size = sh.element_size,
        .kv_bytes_per_token = sh.kv_bytes_per_token,
        .recurrent_bytes = (uint64_t)sh.conv_floats * sizeof(float),
    };
    memcpy(out, &info, out->struct_size < sizeof info ? out->struct_size : sizeof info);
    return SY_OK;
}

static uint64_t state_chunk_bytes(const sy_model *m, uint32_t n_positions) {
    if (m == NULL || m->tf == NULL) return 0;
    state_shape sh = state_shape_of(m);
    return (uint64_t)n_positions * sh.kv_bytes_per_token + (uint64_t)sh.conv_floats * sizeof(float);
}

/* A row read from a snapshot holds only finite values (a NaN or infinity would poison every later attention):
 * F32 and F16 elements, and Q8_0 block scales (the int8 codes are always finite). */
static bool row_is_finite(sy_dtype type, const uint8_t *row, size_t kv_dim) {
    if (type == SY_DTYPE_F32) {
        for (size_t i = 0; i < kv_dim; i++) {
            float f;
            memcpy(&f, row + 4 * i, sizeof f);
            if (!isfinite(f)) return false;
        }
        return true;
    }
    size_t step = type == SY_DTYPE_F16 ? 2 : SY_Q8_0_BLOCK_BYTES, n = type == SY_DTYPE_F16 ? kv_dim : kv_dim / 32;
    for (size_t i = 0; i < n; i++) /* an f16 is finite unless its exponent bits are all ones */
        if ((row[i * step + 1] & 0x7cu) == 0x7cu) return false;
    return true;
}

static sy_status state_save_chunk(sy_model *m, const sy_seq *seq, uint32_t begin, uint32_t end,
                                  const sy_state_writer *writer) {
    if (m == NULL || seq == NULL || writer == NULL || !SY_HAS_FIELD(writer, sy_state_writer, write) ||
        writer->write == NULL)
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_save_chunk: bad arguments");
    if (m->tf == NULL || seq->tf == NULL)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "state_save_chunk: the reference backend keeps no state");
    uint32_t len = sy_tf_seq_length(seq->tf);
    if (begin >= end || end > len)
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_save_chunk: chunk [%u, %u) is not inside the %u tokens held",
                           begin, end, len);
    state_shape sh = state_shape_of(m);
    float *conv = NULL;
    if (sh.conv_floats) {
        conv = malloc(sh.conv_floats * sizeof(float));
        if (conv == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "state_save_chunk: out of memory");
        if (!sy_tf_seq_get_conv_state(m->tf, seq->tf, end, conv)) {
            free(conv);
            return sy_cpu_fail(SY_ERR_UNSUPPORTED,
                               "state_save_chunk: the conv state after %u of %u tokens is no longer kept", end, len);
        }
    }
    sy_status st = SY_OK;
    uint8_t *piece = malloc((size_t)sh.kv_bytes_per_token * STATE_PIECE_POSITIONS + 1);
    if (piece == NULL) {
        st = sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "state_save_chunk: out of memory");
        goto done;
    }
    const uint32_t n_layer = sy_tf_model_config(m->tf)->n_layer;
    for (uint32_t pos = begin; pos < end;) {
        uint32_t n = end - pos < STATE_PIECE_POSITIONS ? end - pos : STATE_PIECE_POSITIONS;
        uint8_t *at = piece;
        for (uint32_t p = pos; p < pos + n; p++) {
            for (uint32_t l = 0; l < n_layer; l++) {
                if (!sy_tf_layer_has_kv(m->tf, l)) continue;
                sy_tf_seq_get_kv_rows(m->tf, seq->tf, l, p, at, at + sh.row_bytes[0]);
                at += sh.row_bytes[0] + sh.row_bytes[1];
            }
        }
        st = writer->write(writer->user, piece, (size_t)(at - piece));
        if (st != SY_OK) {
            st = sy_cpu_fail(st, "state_save_chunk: the host's writer failed (status %d)", (int)st);
            goto done;
        }
        pos += n;
    }
    if (conv) {
        st = writer->write(writer->user, conv, sh.conv_floats * sizeof(float));
        if (st != SY_OK) st = sy_cpu_fail(st, "state_save_chunk: the host's writer failed (status %d)", (int)st);
    }
done:
    free(piece);
    free(conv);
    return st;
}

static sy_status state_load_chunk(sy_model *m, sy_seq *seq, uint32_t begin, uint32_t end, const int32_t *tokens,
                                  const sy_state_reader *reader) {
    if (m == NULL || seq == NULL || reader == NULL || !SY_HAS_FIELD(reader, sy_state_reader, read) ||
        reader->read == NULL)
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: bad arguments");
    if (m->tf == NULL || seq->tf == NULL)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "state_load_chunk: the reference backend keeps no state");
    uint32_t len = sy_tf_seq_length(seq->tf);
    if (len != begin)
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: chunk begins at %u but the sequence holds %u tokens",
                           begin, len);
    if (begin >= end) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: empty chunk [%u, %u)", begin, end);
    const sy_tf_config *c = sy_tf_model_config(m->tf);
    if (tokens == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: tokens is NULL");
    for (uint32_t i = 0; i < end - begin; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->n_vocab)
            return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: token %ld at %u is outside the vocabulary of %u",
                               (long)tokens[i], begin + i, c->n_vocab);
    char err[256];
    sy_status st = sy_tf_seq_begin_append(m->tf, seq->tf, end - begin, err, sizeof err);
    if (st != SY_OK) return sy_cpu_fail(st, "state_load_chunk: %s", err);
    state_shape sh = state_shape_of(m);
    uint8_t *piece = malloc((size_t)sh.kv_bytes_per_token * STATE_PIECE_POSITIONS + 1);
    float *conv = sh.conv_floats ? malloc(sh.conv_floats * sizeof(float)) : NULL;
    if (piece == NULL || (sh.conv_floats && conv == NULL)) {
        st = sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "state_load_chunk: out of memory");
        goto done;
    }
    /* Rows go to the reserved positions past the length; they count only once everything has arrived. */
    for (uint32_t pos = begin; pos < end;) {
        uint32_t n = end - pos < STATE_PIECE_POSITIONS ? end - pos : STATE_PIECE_POSITIONS;
        st = reader->read(reader->user, piece, (size_t)n * sh.kv_bytes_per_token);
        if (st != SY_OK) {
            st = sy_cpu_fail(st, "state_load_chunk: the host's reader failed (status %d)", (int)st);
            goto done;
        }
        const uint8_t *at = piece;
        for (uint32_t p = pos; p < pos + n; p++) {
            for (uint32_t l = 0; l < c->n_layer; l++) {
                if (!sy_tf_layer_has_kv(m->tf, l)) continue;
                for (int kind = 0; kind < 2; kind++)
                    if (!row_is_finite(sh.type[kind], at + (kind ? sh.row_bytes[0] : 0), sh.kv_dim)) {
                        st = sy_cpu_fail(SY_ERR_INVALID_ARGUMENT,
                                         "state_load_chunk: a %s value of layer %u at position %u is not finite",
                                         kind ? "V" : "K", l, p);
                        goto done;
                    }
                sy_tf_seq_set_kv_rows(m->tf, seq->tf, l, p, at, at + sh.row_bytes[0]);
                at += sh.row_bytes[0] + sh.row_bytes[1];
            }
        }
        pos += n;
    }
    if (conv) {
        st = reader->read(reader->user, conv, sh.conv_floats * sizeof(float));
        if (st != SY_OK) {
            st = sy_cpu_fail(st, "state_load_chunk: the host's reader failed (status %d)", (int)st);
            goto done;
        }
        for (size_t i = 0; i < sh.conv_floats; i++)
            if (!isfinite(conv[i])) {
                st = sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: conv state value %zu is not finite", i);
                goto done;
            }
    }
    sy_tf_seq_end_append(m->tf, seq->tf, end - begin, conv);
done:
    free(piece);
    free(conv);
    return st;
}

/* The layout names carry the chunk format ("sy-cpu-kv-f16-v1", "sy-cpu-kv-q8_0-v1", "sy-cpu-kv-k-f16-v-q8_0-v1",
 * "-conv-f32" with a conv state): any build that writes this model's layout wrote the same bytes, so a plugin
 * upgrade does not void the snapshots of its users. A snapshot of other KV cache types is not read: the
 * engine is not told a chunk's layout when it loads it, so it could not convert, and the host skips it with the
 * reason (its key's layout differs). */
static int state_can_read(const sy_model *m, const char *layout, const char *writer_version) {
    (void)writer_version;
    sy_state_info info = {.struct_size = sizeof info};
    return layout != NULL && state_info(m, &info) == SY_OK && strcmp(layout, info.layout) == 0;
}

const sy_engine_state_api sy_cpu_state_api = {
    .struct_size = sizeof(sy_engine_state_api),
    .state_info = state_info,
    .state_chunk_bytes = state_chunk_bytes,
    .state_save_chunk = state_save_chunk,
    .state_load_chunk = state_load_chunk,
    .state_can_read = state_can_read,
};

/* ---- sy.plugin.runtime/1 ---- */

static char cpu_runtime_line[256];
static pthread_once_t cpu_runtime_once = PTHREAD_ONCE_INIT;

static void cpu_runtime_fill(void) {
    char tier[200];
    snprintf(cpu_runtime_line, sizeof cpu_runtime_line, "cpu kernels: %s",
             sy_kernels_describe(sy_kernels_active(), tier, sizeof tier));
}

static const char *cpu_runtime_describe(void) {
    pthread_once(&cpu_runtime_once, cpu_runtime_fill);
    return cpu_runtime_line;
}

const sy_plugin_runtime_api sy_cpu_runtime_api = {sizeof(sy_plugin_runtime_api), cpu_runtime_describe};
