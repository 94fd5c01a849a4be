/* lfm2-cuda: LFM2 / LFM2.5 Hugging Face checkpoints (Lfm2ForCausalLM: config.json, *.safetensors in F32, F16 or
 * BF16, tokenizer.json) on one NVIDIA GPU, in BF16 with FP32 accumulation. See README.md beside this file for the
 * options and lfm2_cuda_engine.h for the device side.
 *
 * Without a GPU (or a driver) the plugin still loads, so `switchyard plugins` lists it, and probe answers from the
 * files alone; load refuses with SY_ERR_NO_DEVICE and "no CUDA device (...)". The host keeps serving the models of
 * other plugins.
 *
 * Synthetic weights for benchmarks: load a config.json path (or pass synthetic=CONFIG.json) and the weights are
 * seeded uniform values of the config's shapes, generated on the device (option seed=N); there is no tokenizer then
 * (tokenize refuses; decode takes token ids).
 *
 * Interfaces: sy.engine/1, sy.engine.sampling/1 (greedy sampling runs as an on-device argmax, so only token ids
 * cross the bus; other sampling copies the rows and samples on the host) and sy.engine.state/1 (snapshots: KV and
 * conv state streamed through a bounded pinned buffer; layout in lfm2_cuda_engine.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <switchyard/engine.h>

#include "hf_config.h"
#include "lfm2_cuda_engine.h"
#include "safetensors.h"
#include "tokenizer_bpe.h"

#define PLUGIN_NAME "lfm2-cuda"

static const sy_host_api *host;
static _Thread_local char error_text[512];

static sy_status fail(sy_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static sy_status fail(sy_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return st;
}

static void log_msg(sy_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_msg(sy_log_level level, const char *fmt, ...) {
    if (host == NULL || host->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    host->log(level, PLUGIN_NAME, line);
}

struct sy_seq {
    int32_t slot;
};

struct sy_model {
    lc_engine *engine;
    sy_hf_config cfg;
    sy_bpe *tokenizer; /* NULL for synthetic weights */
    char *name, *chat_template;
    char fingerprint[33];
    uint64_t n_params;
    uint64_t tokenizer_bytes; /* counted as its tokenizer.json's size, as the CPU engines count theirs */
    bool add_bos;
};

/* The size of dir/tokenizer.json, 0 when there is none. */
static uint64_t tokenizer_file_bytes(const char *dir) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
}

/* ---- probe ---- */

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static sy_status read_config(const char *path, sy_hf_config *cfg, sy_hf_generation_config *gen, bool *synthetic) {
    char err[400];
    *synthetic = !is_dir(path);
    if (*synthetic) { /* a config.json alone: synthetic weights of its shapes */
        size_t plen = strlen(path), len;
        if (plen < 5 || strcmp(path + plen - 5, ".json") != 0)
            return fail(SY_ERR_UNSUPPORTED, "%s: neither a checkpoint directory nor a config .json", path);
        char *json = sy_hf_read_file(path, SY_HF_MAX_CONFIG_BYTES, &len, err, sizeof err);
        if (json == NULL) return fail(SY_ERR_IO, "%s", err);
        bool ok = sy_hf_config_parse(json, len, path, cfg, err, sizeof err);
        free(json);
        if (!ok) return fail(SY_ERR_UNSUPPORTED, "%s", err);
        if (gen) memset(gen, 0, sizeof *gen);
    } else if (!sy_hf_config_load(path, cfg, gen, err, sizeof err)) {
        return fail(SY_ERR_UNSUPPORTED, "%s", err);
    }
    if (cfg->arch != SY_HF_ARCH_LFM2)
        return fail(SY_ERR_UNSUPPORTED, "%s: model_type %s is not lfm2 (" PLUGIN_NAME " runs Lfm2ForCausalLM)", path,
                    cfg->model_type);
    return SY_OK;
}

static sy_status lc_probe(const char *path) {
    if (path == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "probe: no path");
    sy_hf_config cfg;
    bool synthetic;
    sy_status st = read_config(path, &cfg, NULL, &synthetic);
    return st == SY_OK ? SY_OK : SY_ERR_UNSUPPORTED; /* the message says why */
}

/* ---- load ---- */

static bool parse_u64(const char *key, const char *value, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (*value == '\0' || *value == '-' || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: expected an integer in [%llu, %llu]", key, value,
             (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = v;
    return true;
}

typedef struct load_options {
    lc_options engine;
    const char *synthetic;
} load_options;

static bool parse_options(const sy_option *options, size_t n_options, load_options *o) {
    memset(o, 0, sizeof *o);
    o->engine.synthetic_seed = 1;
    o->engine.cuda_graphs = true;
    for (size_t i = 0; i < n_options; i++) {
        const char *k = options[i].key, *v = options[i].value ? options[i].value : "";
        uint64_t x;
        if (k == NULL) continue;
        if (strcmp(k, "ctx_size") == 0) {
            if (!parse_u64(k, v, 0, 1u << 22, &x)) return false;
            o->engine.n_ctx = (uint32_t)x;
        } else if (strcmp(k, "max_sequences") == 0 || strcmp(k, "parallel") == 0) {
            if (!parse_u64(k, v, 1, 4096, &x)) return false;
            o->engine.max_sequences = (uint32_t)x;
        } else if (strcmp(k, "max_batch_tokens") == 0) {
            if (!parse_u64(k, v, 16, 16384, &x)) return false;
            o->engine.max_batch_tokens = (uint32_t)x;
        } else if (strcmp(k, "kv_cache_mb") == 0) {
            if (!parse_u64(k, v, 1, 1u << 24, &x)) return false;
            o->engine.kv_cache_bytes = x << 20;
        } else if (strcmp(k, "device") == 0) {
            if (!parse_u64(k, v, 0, 1024, &x)) return false;
            o->engine.device = (int)x;
        } else if (strcmp(k, "seed") == 0) {
            if (!parse_u64(k, v, 0, UINT64_MAX, &x)) return false;
            o->engine.synthetic_seed = x;
        } else if (strcmp(k, "cuda_graphs") == 0) {
            if (!parse_u64(k, v, 0, 1, &x)) return false;
            o->engine.cuda_graphs = x != 0;
        } else if (strcmp(k, "synthetic") == 0) {
            if (*v == '\0') {
                fail(SY_ERR_INVALID_ARGUMENT, "option synthetic: expected the path of a config.json");
                return false;
            }
            o->synthetic = v;
        } else {
            log_msg(SY_LOG_DEBUG, "ignoring option %s", k);
        }
    }
    return true;
}

/* Tokenizer files of a checkpoint directory: tokenizer.json, and tokenizer_config.json for the chat template. */
static sy_status load_tokenizer(sy_model *m, const char *dir, const sy_hf_generation_config *gen) {
    char path[4096], err[400];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    m->tokenizer = sy_bpe_load_json(path, err, sizeof err);
    if (m->tokenizer == NULL) return fail(SY_ERR_FORMAT, "%s", err);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (access(path, R_OK) == 0) {
        sy_tokenizer_config tc;
        if (!sy_tokenizer_config_load(path, &tc, err, sizeof err)) return fail(SY_ERR_FORMAT, "%s", err);
        if (tc.chat_template) m->chat_template = strdup(tc.chat_template);
        sy_tokenizer_config_free(&tc);
    }
    /* end of generation: config.json's eos ids and generation_config.json's */
    for (uint32_t i = 0; i < m->cfg.n_eos; i++)
        sy_bpe_set_token_flags(m->tokenizer, (int32_t)m->cfg.eos_token_ids[i], SY_TOKEN_END_OF_GENERATION);
    for (uint32_t i = 0; gen && i < gen->n_eos; i++)
        sy_bpe_set_token_flags(m->tokenizer, (int32_t)gen->eos_token_ids[i], SY_TOKEN_END_OF_GENERATION);
    const int32_t *prefix, *suffix;
    size_t n_prefix, n_suffix;
    sy_bpe_template(m->tokenizer, &prefix, &n_prefix, &suffix, &n_suffix);
    m->add_bos = n_prefix > 0;
    return SY_OK;
}

static void lc_unload(sy_model *m);

static sy_status lc_load(const char *path, const sy_option *options, size_t n_options, sy_model **out) {
    if (path == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "load: missing path or output");
    load_options o;
    if (!parse_options(options, n_options, &o)) return SY_ERR_INVALID_ARGUMENT;
    const char *config_path = o.synthetic ? o.synthetic : path;
    sy_model *m = calloc(1, sizeof *m);
    if (m == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    sy_hf_generation_config gen;
    bool synthetic;
    sy_status st = read_config(config_path, &m->cfg, &gen, &synthetic);
    if (st != SY_OK) {
        free(m);
        return st;
    }
    synthetic = synthetic || o.synthetic != NULL;

    char err[400];
    sy_safetensors *weights = NULL;
    if (!synthetic) {
        weights = sy_safetensors_open(path, err, sizeof err);
        if (weights == NULL) {
            free(m);
            return fail(SY_ERR_FORMAT, "%s", err);
        }
    }
    st = lc_engine_create(&m->cfg, weights, &o.engine, &m->engine, err, sizeof err);
    if (st != SY_OK) {
        sy_safetensors_close(weights);
        free(m);
        return fail(st, "%s: %s", path, err);
    }

    /* identity: the checkpoint's headers and config, or the config and seed of synthetic weights */
    size_t cfg_len = 0;
    char cfg_file[4096];
    snprintf(cfg_file, sizeof cfg_file, synthetic ? "%s" : "%s/config.json", config_path);
    char *cfg_json = sy_hf_read_file(cfg_file, SY_HF_MAX_CONFIG_BYTES, &cfg_len, err, sizeof err);
    XXH128_hash_t h;
    if (weights) {
        uint64_t a = sy_safetensors_fingerprint(weights, cfg_json, cfg_json ? cfg_len : 0);
        h.high64 = a;
        h.low64 = XXH3_64bits_withSeed(cfg_json ? cfg_json : "", cfg_json ? cfg_len : 0, a);
    } else {
        h = XXH3_128bits_withSeed(cfg_json ? cfg_json : "", cfg_json ? cfg_len : 0, o.engine.synthetic_seed);
    }
    free(cfg_json);
    snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    if (weights) {
        for (size_t i = 0; i < sy_safetensors_count(weights); i++)
            m->n_params += sy_safetensors_at(weights, i)->n_elements;
        sy_safetensors_close(weights); /* everything is on the device now */
        st = load_tokenizer(m, path, &gen);
        m->tokenizer_bytes = tokenizer_file_bytes(path);
        if (st != SY_OK) {
            char reason[sizeof error_text];
            snprintf(reason, sizeof reason, "%s", error_text);
            lc_unload(m);
            return fail(st, "%s: %s", path, reason);
        }
    } else {
        lc_memory mem;
        lc_engine_memory(m->engine, &mem);
        m->n_params = mem.weight_bytes / 2;
    }
    const char *base = strrchr(config_path, '/');
    m->name = strdup(synthetic ? "synthetic" : (base && base[1] ? base + 1 : config_path));
    const lc_options *eo = lc_engine_options(m->engine);
    log_msg(SY_LOG_INFO, "%s on %s: %u layers, ctx %u, %u sequences, %u tokens per chunk%s", m->name,
            lc_engine_device_name(m->engine), m->cfg.num_hidden_layers, eo->n_ctx, eo->max_sequences,
            eo->max_batch_tokens, synthetic ? ", synthetic weights" : "");
    *out = m;
    return SY_OK;
}

static void lc_unload(sy_model *m) {
    if (m == NULL) return;
    lc_engine_destroy(m->engine);
    sy_bpe_free(m->tokenizer);
    free(m->name);
    free(m->chat_template);
    free(m);
}

/* ---- facts ---- */

static int32_t token_or_none(int64_t id) { return id >= 0 && id <= INT32_MAX ? (int32_t)id : -1; }

static sy_status lc_model_info(const sy_model *m, sy_model_info *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "model_info: bad arguments");
    const lc_options *o = lc_engine_options(m->engine);
    sy_model_info info = {
        .struct_size = out->struct_size,
        .architecture = "lfm2",
        .name = m->name ? m->name : "",
        .weight_dtype = "bf16",
        .fingerprint = m->fingerprint,
        .chat_template = m->chat_template,
        .n_vocab = m->cfg.vocab_size,
        .n_ctx_train = m->cfg.max_position_embeddings,
        .n_ctx = o->n_ctx,
        .n_layer = m->cfg.num_hidden_layers,
        .n_embd = m->cfg.hidden_size,
        .n_params = m->n_params,
        .bos_token = token_or_none(m->cfg.bos_token_id),
        .eos_token = m->cfg.n_eos > 0 ? token_or_none(m->cfg.eos_token_ids[0]) : -1,
        .pad_token = token_or_none(m->cfg.pad_token_id),
        .add_bos = m->add_bos,
        .max_sequences = o->max_sequences,
        /* the conv layers keep LC_ROLLBACK tokens of history; decode chunks any batch itself; it samples on the GPU */
        .max_rollback = LC_ROLLBACK,
        .max_decode_tokens = 0,
        .capabilities = SY_CAP_DEVICE_SAMPLING,
    };
    size_t n = out->struct_size < sizeof info ? out->struct_size : sizeof info;
    memcpy(out, &info, n);
    return SY_OK;
}

static sy_status lc_memory_usage(const sy_model *m, sy_memory_usage *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: bad arguments");
    lc_memory mem;
    lc_engine_memory(m->engine, &mem);
    sy_memory_usage u = {
        .struct_size = out->struct_size,
        .mapped_bytes = 0,
        .resident_bytes = mem.host_bytes + m->tokenizer_bytes,
        .device_bytes = mem.device_bytes,
        .kv_bytes = mem.kv_bytes,
    };
    size_t n = out->struct_size < sizeof u ? out->struct_size : sizeof u;
    memcpy(out, &u, n);
    return SY_OK;
}

/* ---- tokenizer ---- */

static sy_status lc_tokenize(const sy_model *m, const char *text, size_t text_len, uint32_t flags, int32_t *out,
                             size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (text == NULL && text_len > 0) || (out == NULL && capacity > 0))
        return fail(SY_ERR_INVALID_ARGUMENT, "tokenize: bad arguments");
    if (m->tokenizer == NULL) return fail(SY_ERR_UNSUPPORTED, "tokenize: a synthetic model has no tokenizer");
    sy_bpe_ids ids = {0};
    char err[256];
    if (!sy_bpe_tokenize(m->tokenizer, text ? text : "", text_len, flags, &ids, err, sizeof err)) {
        sy_bpe_ids_free(&ids);
        return fail(SY_ERR_INVALID_ARGUMENT, "tokenize: %s", err);
    }
    *n_out = ids.n;
    sy_status st = SY_OK;
    if (ids.n > capacity) st = fail(SY_ERR_BUFFER_TOO_SMALL, "tokenize: %zu ids do not fit in %zu", ids.n, capacity);
    else if (ids.n > 0) memcpy(out, ids.ids, ids.n * sizeof *out);
    sy_bpe_ids_free(&ids);
    return st;
}

static sy_status lc_token_to_bytes(const sy_model *m, int32_t token, char *out, size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (out == NULL && capacity > 0))
        return fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: bad arguments");
    if (m->tokenizer == NULL) return fail(SY_ERR_UNSUPPORTED, "token_to_bytes: a synthetic model has no tokenizer");
    size_t len;
    const char *bytes = sy_bpe_token_bytes(m->tokenizer, token, &len);
    if (bytes == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "token id %d out of range", token);
    *n_out = len;
    if (len > capacity)
        return fail(SY_ERR_BUFFER_TOO_SMALL, "token %d: %zu bytes do not fit in %zu", token, len, capacity);
    if (len > 0) memcpy(out, bytes, len);
    return SY_OK;
}

static uint32_t lc_token_flags(const sy_model *m, int32_t token) {
    if (m == NULL || m->tokenizer == NULL) return 0;
    if (token < 0 || (uint32_t)token >= m->cfg.vocab_size) return SY_TOKEN_INVALID;
    return sy_bpe_token_flags(m->tokenizer, token);
}

/* ---- sequences ---- */

static sy_status lc_seq_create_api(sy_model *m, sy_seq **out) {
    if (m == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_create: bad arguments");
    sy_seq *s = calloc(1, sizeof *s);
    if (s == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "seq_create: out of memory");
    char err[256];
    sy_status st = lc_seq_create(m->engine, &s->slot, err, sizeof err);
    if (st != SY_OK) {
        free(s);
        return fail(st, "seq_create: %s", err);
    }
    *out = s;
    return SY_OK;
}

static void lc_seq_free_api(sy_model *m, sy_seq *s) {
    if (m == NULL || s == NULL) return;
    lc_seq_free(m->engine, s->slot);
    free(s);
}

static uint32_t lc_seq_length_api(const sy_model *m, const sy_seq *s) {
    return m && s ? lc_seq_length(m->engine, s->slot) : 0;
}

static sy_status lc_seq_truncate_api(sy_model *m, sy_seq *s, uint32_t n) {
    if (m == NULL || s == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: bad arguments");
    char err[256];
    sy_status st = lc_seq_truncate(m->engine, s->slot, n, err, sizeof err);
    return st == SY_OK ? SY_OK : fail(st, "seq_truncate: %s", err);
}

static sy_status lc_seq_fork_api(sy_model *m, const sy_seq *src, uint32_t n, sy_seq **out) {
    if (m == NULL || src == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: bad arguments");
    sy_seq *s = calloc(1, sizeof *s);
    if (s == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "seq_fork: out of memory");
    char err[256];
    sy_status st = lc_seq_fork(m->engine, src->slot, n, &s->slot, err, sizeof err);
    if (st != SY_OK) {
        free(s);
        return fail(st, "seq_fork: %s", err);
    }
    *out = s;
    return SY_OK;
}

/* ---- decode ---- */

static int host_cancelled(void *call) {
    return host && host->is_cancelled ? host->is_cancelled((const sy_host_call *)call) : 0;
}

/* The batch as engine items (a new array, freed by the caller); NULL with the error set. */
static lc_item *batch_items(const sy_decode_batch *batch) {
    if (batch == NULL || (batch->n_items > 0 && batch->items == NULL) ||
        (batch->n_items > 0 && batch->item_size < offsetof(sy_decode_item, logits) + sizeof(float *))) {
        fail(SY_ERR_INVALID_ARGUMENT, "decode: bad batch");
        return NULL;
    }
    lc_item *items = calloc(batch->n_items ? batch->n_items : 1, sizeof *items);
    if (items == NULL) {
        fail(SY_ERR_OUT_OF_MEMORY, "decode: out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *it = sy_decode_batch_item(batch, i);
        if (it->seq == NULL) {
            free(items);
            fail(SY_ERR_INVALID_ARGUMENT, "decode: item %u has no sequence", i);
            return NULL;
        }
        items[i] = (lc_item){it->seq->slot, it->tokens, it->n_tokens, it->n_logits, it->logits};
    }
    return items;
}

static sy_status run_decode(sy_model *m, const sy_decode_batch *batch, lc_item *items, int32_t *tokens_out) {
    bool has_call = SY_HAS_FIELD(batch, sy_decode_batch, call) && batch->call != NULL;
    char err[400];
    sy_status st = lc_decode(m->engine, items, batch->n_items, tokens_out, has_call ? host_cancelled : NULL,
                             has_call ? (void *)batch->call : NULL, err, sizeof err);
    return st == SY_OK ? SY_OK : fail(st, "decode: %s", err);
}

static sy_status lc_decode_api(sy_model *m, const sy_decode_batch *batch) {
    if (m == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "decode: no model");
    lc_item *items = batch_items(batch);
    if (items == NULL) return SY_ERR_INVALID_ARGUMENT;
    sy_status st = run_decode(m, batch, items, NULL);
    free(items);
    return st;
}

/* ---- sampling ---- */

static uint64_t next_random(uint64_t *state) { /* xorshift64*; a zero state is moved off zero */
    uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

typedef struct cand {
    float logit;
    int32_t id;
} cand;

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* temperature > 0: softmax(logits / T) restricted by top-k, then top-p, then min-p, sampled with the rng. */
static int32_t sample_row(const float *logits, uint32_t n_vocab, const sy_sampling_params *p, cand *c) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_vocab; i++)
        if (!isnan(logits[i])) c[n++] = (cand){logits[i] / p->temperature, (int32_t)i};
    if (n == 0) return 0;
    qsort(c, n, sizeof *c, by_logit_desc);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += exp((double)c[i].logit - c[0].logit);
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (uint32_t i = 0; i < n; i++) {
            acc += exp((double)c[i].logit - c[0].logit) / sum;
            if (acc >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        uint32_t keep = 1;
        while (keep < n && exp((double)c[keep].logit - c[0].logit) >= p->min_p) keep++;
        n = keep;
    }
    sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += exp((double)c[i].logit - c[0].logit);
    double r = (double)(next_random(p->rng_state) >> 11) * (1.0 / 9007199254740992.0) * sum;
    for (uint32_t i = 0; i < n; i++) {
        r -= exp((double)c[i].logit - c[0].logit);
        if (r < 0) return c[i].id;
    }
    return c[n - 1].id;
}

static sy_status lc_decode_sample(sy_model *m, const sy_decode_batch *batch, const sy_sampling_params *params,
                                  int32_t *tokens_out) {
    if (m == NULL || tokens_out == NULL || (batch && batch->n_items > 0 && params == NULL))
        return fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: bad arguments");
    lc_item *items = batch_items(batch);
    if (items == NULL) return SY_ERR_INVALID_ARGUMENT;
    size_t stride = batch->n_items > 0 ? params->struct_size : 0;
    if (batch->n_items > 0 && stride < offsetof(sy_sampling_params, rng_state) + sizeof(uint64_t *)) {
        free(items);
        return fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: sampling parameters of %zu bytes", stride);
    }
    bool greedy = true;
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_sampling_params *p = (const void *)((const char *)params + i * stride);
        if (items[i].n_logits != 1 || items[i].logits != NULL) {
            free(items);
            return fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: item %u must ask for 1 row and no logits buffer", i);
        }
        if (p->temperature > 0 && p->rng_state == NULL) {
            free(items);
            return fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: item %u has no rng state", i);
        }
        greedy = greedy && !(p->temperature > 0);
    }
    sy_status st;
    if (greedy) { /* the argmax runs on the device */
        st = run_decode(m, batch, items, tokens_out);
        free(items);
        return st;
    }
    /* otherwise the rows come over and are sampled here */
    const uint32_t V = m->cfg.vocab_size;
    float *rows = malloc((size_t)batch->n_items * V * sizeof(float));
    cand *c = malloc((size_t)V * sizeof *c);
    if (rows == NULL || c == NULL) {
        free(rows), free(c), free(items);
        return fail(SY_ERR_OUT_OF_MEMORY, "decode_sample: out of memory");
    }
    for (uint32_t i = 0; i < batch->n_items; i++) items[i].logits = rows + (size_t)i * V;
    st = run_decode(m, batch, items, NULL);
    for (uint32_t i = 0; st == SY_OK && i < batch->n_items; i++) {
        const sy_sampling_params *p = (const void *)((const char *)params + i * stride);
        const float *row = rows + (size_t)i * V;
        if (p->temperature > 0) {
            tokens_out[i] = sample_row(row, V, p, c);
        } else {
            int32_t best = 0;
            for (uint32_t k = 1; k < V; k++)
                if (row[k] > row[best]) best = (int32_t)k;
            tokens_out[i] = best;
        }
    }
    free(rows), free(c), free(items);
    return st;
}

/* ---- state (snapshots) ---- */

static sy_status lc_state_info(const sy_model *m, sy_state_info *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "state_info: bad arguments");
    lc_state_shape sh;
    lc_state_shape_of(m->engine, &sh);
    sy_state_info info = {
        .struct_size = out->struct_size,
        .layout = LC_STATE_LAYOUT,
        .element_size = LC_STATE_ELEMENT_SIZE,
        .kv_bytes_per_token = sh.kv_bytes_per_token,
        .recurrent_bytes = sh.recurrent_bytes,
    };
    memcpy(out, &info, out->struct_size < sizeof info ? out->struct_size : sizeof info);
    return SY_OK;
}

static uint64_t lc_state_chunk_bytes(const sy_model *m, uint32_t n_positions) {
    if (m == NULL) return 0;
    lc_state_shape sh;
    lc_state_shape_of(m->engine, &sh);
    if (n_positions > 0 && sh.kv_bytes_per_token > (UINT64_MAX - sh.recurrent_bytes) / n_positions)
        return UINT64_MAX; /* matches no real chunk */
    return (uint64_t)n_positions * sh.kv_bytes_per_token + sh.recurrent_bytes;
}

static sy_status lc_state_save_chunk(sy_model *m, const sy_seq *seq, uint32_t begin, uint32_t end,
                                     const sy_state_writer *writer) {
    if (m == NULL || seq == NULL || !SY_HAS_FIELD(writer, sy_state_writer, write) || writer->write == NULL)
        return fail(SY_ERR_INVALID_ARGUMENT, "state_save_chunk: bad arguments");
    char err[400];
    sy_status st = lc_state_save(m->engine, seq->slot, begin, end, writer->write, writer->user, err, sizeof err);
    return st == SY_OK ? SY_OK : fail(st, "state_save_chunk: %s", err);
}

static sy_status lc_state_load_chunk(sy_model *m, sy_seq *seq, uint32_t begin, uint32_t end, const int32_t *tokens,
                                     const sy_state_reader *reader) {
    if (m == NULL || seq == NULL || !SY_HAS_FIELD(reader, sy_state_reader, read) || reader->read == NULL)
        return fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: bad arguments");
    if (tokens == NULL && end > begin) return fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: no token ids");
    /* the ids are not kept (the KV stands for them), but ids this model cannot have mean a foreign snapshot */
    for (uint32_t i = 0; end > begin && i < end - begin; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->cfg.vocab_size)
            return fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: token %ld at %u is outside the vocabulary of %u",
                        (long)tokens[i], begin + i, m->cfg.vocab_size);
    char err[400];
    sy_status st = lc_state_load(m->engine, seq->slot, begin, end, reader->read, reader->user, err, sizeof err);
    return st == SY_OK ? SY_OK : fail(st, "state_load_chunk: %s", err);
}

static const char *lc_error_message(void) { return error_text; }

static const sy_engine_api engine_api = {
    .struct_size = sizeof(sy_engine_api),
    .error_message = lc_error_message,
    .probe = lc_probe,
    .load = lc_load,
    .unload = lc_unload,
    .model_info = lc_model_info,
    .tokenize = lc_tokenize,
    .token_to_bytes = lc_token_to_bytes,
    .token_flags = lc_token_flags,
    .seq_create = lc_seq_create_api,
    .seq_free = lc_seq_free_api,
    .seq_length = lc_seq_length_api,
    .seq_truncate = lc_seq_truncate_api,
    .seq_fork = lc_seq_fork_api,
    .decode = lc_decode_api,
    .memory_usage = lc_memory_usage,
};

static const sy_engine_sampling_api sampling_api = {
    .struct_size = sizeof(sy_engine_sampling_api),
    .decode_sample = lc_decode_sample,
};

static const sy_engine_state_api state_api = {
    .struct_size = sizeof(sy_engine_state_api),
    .state_info = lc_state_info,
    .state_chunk_bytes = lc_state_chunk_bytes,
    .state_save_chunk = lc_state_save_chunk,
    .state_load_chunk = lc_state_load_chunk,
};

/* No CUDA call here: the plugin loads (and is listed) on machines without a GPU; load says why it cannot run. */
static sy_status lc_init(const sy_host_api *h) {
    host = h;
    return SY_OK;
}

static void lc_deinit(void) { host = NULL; }

/* ---- estimate ("sy.engine.resources/1") ---- */

/* config.json alone (the weights' sizes follow from it, as the load converts every tensor to BF16), and the
 * device's free memory, which sizes the KV as the load will. */
static sy_status lc_estimate_api(const char *path, const sy_option *options, size_t n_options, sy_resource_estimate *out) {
    if (path == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "estimate: bad arguments");
    load_options o;
    if (!parse_options(options, n_options, &o)) return SY_ERR_INVALID_ARGUMENT;
    const char *config_path = o.synthetic ? o.synthetic : path;
    sy_hf_config cfg;
    bool synthetic;
    sy_status st = read_config(config_path, &cfg, NULL, &synthetic);
    if (st != SY_OK) return st;
    char err[400];
    lc_estimate e;
    st = lc_engine_estimate(&cfg, &o.engine, &e, err, sizeof err);
    if (st != SY_OK) return fail(st, "%s: %s", path, err);
    sy_resource_estimate r = {
        .struct_size = out->struct_size,
        .mapped_bytes = 0, /* the checkpoint is mapped only while its tensors are copied to the device */
        .resident_bytes = e.host_bytes + (synthetic || o.synthetic ? 0 : tokenizer_file_bytes(path)),
        .device_bytes = e.device_bytes,
    };
    memcpy(out, &r, out->struct_size < sizeof r ? out->struct_size : sizeof r);
    return SY_OK;
}

static const sy_engine_resources_api resources_api = {
    .struct_size = sizeof(sy_engine_resources_api),
    .estimate = lc_estimate_api,
};

/* The keys parse_options reads, with its ranges (0..1 for cuda_graphs: it reads digits, as the host passes bools). */
static const sy_option_spec lc_option_specs[] = {
    {sizeof(sy_option_spec), "ctx_size", SY_OPTION_UINT, "0",
     "most tokens one sequence may hold; 0: the model's training context, at most 32768", 0, 1u << 22, NULL},
    {sizeof(sy_option_spec), "max_sequences", SY_OPTION_UINT, "", "sequence slots on the device (default: 64)", 1,
     4096, NULL},
    {sizeof(sy_option_spec), "parallel", SY_OPTION_UINT, "", "the same as max_sequences", 1, 4096, NULL},
    {sizeof(sy_option_spec), "max_batch_tokens", SY_OPTION_UINT, "", "rows per forward chunk (default: 512)", 16,
     16384, NULL},
    {sizeof(sy_option_spec), "kv_cache_mb", SY_OPTION_UINT, "",
     "paged KV memory in MiB (default: max_sequences x ctx_size positions, capped by free device memory)", 1,
     1u << 24, NULL},
    {sizeof(sy_option_spec), "device", SY_OPTION_UINT, "0", "the CUDA device index", 0, 1024, NULL},
    {sizeof(sy_option_spec), "seed", SY_OPTION_UINT, "1", "seed of the synthetic weights", 0, (double)UINT64_MAX, NULL},
    {sizeof(sy_option_spec), "cuda_graphs", SY_OPTION_UINT, "1", "1: replay pure decode steps as CUDA graphs", 0, 1, NULL},
    {sizeof(sy_option_spec), "synthetic", SY_OPTION_PATH, "",
     "a config.json to build random weights from, instead of a checkpoint (tests, benchmarks)", 0, 0, NULL},
};

static const sy_plugin_options_api lc_options_api = {
    sizeof(sy_plugin_options_api), sizeof lc_option_specs / sizeof lc_option_specs[0], sizeof(sy_option_spec),
    lc_option_specs};

static const void *lc_get_interface(const char *id) {
    if (id && strcmp(id, SY_ENGINE_INTERFACE_ID) == 0) return &engine_api;
    if (id && strcmp(id, SY_PLUGIN_OPTIONS_INTERFACE_ID) == 0) return &lc_options_api;
    if (id && strcmp(id, SY_ENGINE_SAMPLING_INTERFACE_ID) == 0) return &sampling_api;
    if (id && strcmp(id, SY_ENGINE_STATE_INTERFACE_ID) == 0) return &state_api;
    if (id && strcmp(id, SY_ENGINE_RESOURCES_INTERFACE_ID) == 0) return &resources_api;
    return NULL;
}

SY_DEFINE_PLUGIN_ENTRY(PLUGIN_NAME, "0.1.0", "LFM2 / LFM2.5 SafeTensors on one NVIDIA GPU: BF16, cuBLASLt, paged KV",
                       lc_init, lc_deinit, lc_get_interface);
