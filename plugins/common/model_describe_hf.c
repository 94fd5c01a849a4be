/* See model_describe.h: a Hugging Face folder's config.json under GGUF's key names. */
#include "model_describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "json_reader.h"
#include "sy_dtype.h"

typedef struct emitter {
    const sy_metadata_sink *sink;
    int stopped;
} emitter;

static void put(emitter *e, const char *key, uint32_t type, const char *s, size_t len, int64_t i, double f) {
    if (e->stopped) return;
    sy_metadata_value v = {sizeof v, type, s, len, i, f};
    if (e->sink->put(e->sink->user, key, &v) != 0) e->stopped = 1;
}

static void put_int(emitter *e, const char *key, int64_t i) { put(e, key, SY_META_INT, NULL, 0, i, 0); }
static void put_str(emitter *e, const char *key, const char *s) { put(e, key, SY_META_STRING, s, strlen(s), 0, 0); }

/* FIM token ids from tokenizer_config.json's added_tokens_decoder (id -> {"content": ...}), a small file,
 * by the token texts llama.cpp recognises. A missing or unreadable file reports none. */
static void describe_fim(emitter *e, const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path) return;
    char *data = NULL;
    size_t len = 0;
    char err[256];
    if (!sy_json_read_file(path, SY_HF_MAX_CONFIG_BYTES, &data, &len, err, sizeof err)) return;
    sy_json_doc doc;
    memset(&doc, 0, sizeof doc);
    if (sy_json_parse(&doc, data, len, NULL, NULL) && !doc.saw_nul) {
        int64_t fim[SY_FIM_KINDS];
        for (int k = 0; k < SY_FIM_KINDS; k++) fim[k] = -1;
        const sy_json *dec = sy_json_get(doc.root, "added_tokens_decoder");
        for (const sy_json *t = sy_json_is_object(dec) ? dec->child : NULL; t; t = t->next) {
            const sy_json *content = sy_json_get(t, "content");
            if (!sy_json_is_string(content)) continue;
            int k = sy_fim_kind_of_text(content->str, content->len);
            char *end = NULL;
            long long id = strtoll(t->key, &end, 10);
            if (k < 0 || end == t->key || *end != '\0' || id < 0 || id > INT32_MAX || fim[k] >= 0) continue;
            fim[k] = id;
        }
        for (int k = 0; k < SY_FIM_KINDS; k++) {
            if (fim[k] < 0) continue;
            char key[64];
            snprintf(key, sizeof key, "tokenizer.ggml.fim_%s_token_id", sy_fim_kind_names[k]);
            put_int(e, key, fim[k]);
        }
    }
    sy_json_doc_free(&doc);
    free(data);
}

sy_status sy_hf_describe(const char *dir, const sy_metadata_sink *sink, char *err, size_t err_size) {
    sy_hf_config cfg;
    if (!sy_hf_config_load(dir, &cfg, NULL, err, err_size)) return SY_ERR_FORMAT;
    emitter e = {sink, 0};
    const char *arch = cfg.model_type[0] ? cfg.model_type : sy_hf_arch_name(cfg.arch);
    put_str(&e, "general.architecture", arch);
    const char *base;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    base = dir;
    for (size_t i = 0; i < n; i++)
        if (dir[i] == '/') base = dir + i + 1;
    put(&e, "general.name", SY_META_STRING, base, (size_t)(dir + n - base), 0, 0);
    char key[128];
#define ARCH_INT(suffix, value)                                                                                       \
    do {                                                                                                              \
        snprintf(key, sizeof key, "%.64s." suffix, arch);                                                             \
        put_int(&e, key, (int64_t)(value));                                                                           \
    } while (0)
    ARCH_INT("context_length", cfg.max_position_embeddings);
    ARCH_INT("embedding_length", cfg.hidden_size);
    ARCH_INT("block_count", cfg.num_hidden_layers);
    ARCH_INT("feed_forward_length", cfg.intermediate_size);
    ARCH_INT("attention.head_count", cfg.num_attention_heads);
    ARCH_INT("attention.head_count_kv", cfg.num_key_value_heads);
    ARCH_INT("attention.key_length", cfg.head_dim);
    ARCH_INT("vocab_size", cfg.vocab_size);
#undef ARCH_INT
    snprintf(key, sizeof key, "%.64s.rope.freq_base", arch);
    put(&e, key, SY_META_FLOAT, NULL, 0, 0, cfg.rope.theta);
    snprintf(key, sizeof key, "%.64s.attention.layer_norm_rms_epsilon", arch);
    put(&e, key, SY_META_FLOAT, NULL, 0, 0, cfg.rms_norm_eps);
    const char *dtype = cfg.torch_dtype == SY_DTYPE_F32 ? "F32" : cfg.torch_dtype == SY_DTYPE_F16 ? "F16" : cfg.torch_dtype == SY_DTYPE_BF16 ? "BF16"
                                                                                                            : NULL;
    if (dtype) put_str(&e, "general.file_type_name", dtype);
    /* The parameter count from the shapes the config implies (embeddings, attention, MLP, norms). */
    uint64_t h = cfg.hidden_size, kv = (uint64_t)cfg.num_key_value_heads * cfg.head_dim,
             q = (uint64_t)cfg.num_attention_heads * cfg.head_dim, ff = cfg.intermediate_size;
    uint64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * ff + 2 * h;
    uint64_t total = (uint64_t)cfg.vocab_size * h * (cfg.tie_word_embeddings ? 1 : 2) + per_layer * cfg.num_hidden_layers + h;
    put_int(&e, "general.parameter_count", total > INT64_MAX ? INT64_MAX : (int64_t)total);
    describe_fim(&e, dir);
    return SY_OK;
}
