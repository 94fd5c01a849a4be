/* The tokenizer of a Hugging Face checkpoint directory: see hf_vocab.h. */
#include "hf_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_bpe.h"
#include "tokenizer_cache.h"

#define MAX_TEMPLATE_BYTES (1u << 20)
#define MAX_TOKENIZER_JSON_BYTES ((size_t)1 << 30)
/* Up to this many end-of-generation ids: config.json's and generation_config.json's EOS lists plus one. */
#define MAX_EOG (2 * SY_HF_MAX_EOS + 1)

/* The BPE comes from the plugin's tokenizer cache, keyed by a hash of the tokenizer.json bytes: checkpoints with
 * the same tokenizer.json share it. What the other files say (end-of-generation ids) stays here, per model. */
struct qm_vocab {
    sy_tok_ref *ref;
    const sy_bpe *bpe;
    uint32_t n_bpe;   /* ids the tokenizer knows: [0, n_bpe) */
    uint32_t n_model; /* rows of the embedding: [n_bpe, n_model) are unused */
    uint64_t bytes;   /* rough memory held */
    int32_t eog[MAX_EOG];
    size_t n_eog;
};

char *qm_path_in(const char *dir, const char *name) {
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static bool file_exists(const char *path) {
    struct stat st;
    return path != NULL && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A special token's text -> id, -1 when the text is absent or no token has it. */
static int32_t token_id(const sy_bpe *bpe, const char *text) {
    return text ? sy_bpe_find_token(bpe, text, strlen(text)) : -1;
}

static int32_t config_id(int64_t id, uint32_t n_model) { return id >= 0 && id < (int64_t)n_model ? (int32_t)id : -1; }

/* Notes an end-of-generation id; ids past the tokenizer's (embedding padding) and ids without a token have no
 * token to flag. */
static void mark_end(qm_vocab *v, int64_t id) {
    if (id < 0 || id >= (int64_t)v->n_bpe || (sy_bpe_token_flags(v->bpe, (int32_t)id) & SY_TOKEN_UNUSED)) return;
    for (size_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return;
    if (v->n_eog < MAX_EOG) v->eog[v->n_eog++] = (int32_t)id;
}

static void vocab_free(void *p) {
    qm_vocab *v = p;
    if (v == NULL) return;
    sy_tok_cache_release(v->ref);
    free(v);
}

void qm_vocab_drop_cached(void) { sy_tok_cache_drop_unused(sy_tok_cache_default()); }

typedef struct json_source {
    const char *path;
    const char *data;
    size_t len;
} json_source;

static void free_bpe(void *t) { sy_bpe_free(t); }

static void *build_bpe(void *ctx, char *err, size_t err_size) {
    const json_source *src = ctx;
    char inner[512];
    sy_bpe *t = sy_bpe_load_json_buffer(src->data, src->len, inner, sizeof inner);
    if (t == NULL) snprintf(err, err_size, "%s: %s", src->path, inner);
    return t;
}

/* The tokenizer of tok_path from the cache, built on a miss. */
static bool get_tokenizer(qm_vocab *v, const char *tok_path, char *err, size_t err_size) {
    json_source src = {.path = tok_path};
    if (!sy_tok_map_file(tok_path, MAX_TOKENIZER_JSON_BYTES, &src.data, &src.len, err, err_size)) return false;
    sy_tok_key key = sy_tok_key_bytes("qwen-cpu-mmap tokenizer.json/1", src.data, src.len);
    v->ref = sy_tok_cache_acquire(sy_tok_cache_default(), &key, build_bpe, free_bpe, &src, NULL, err, err_size);
    sy_tok_unmap_file(src.data, src.len);
    if (v->ref == NULL) return false;
    v->bpe = sy_tok_ref_get(v->ref);
    return true;
}

/* chat_template.jinja, which newer checkpoints ship instead of a tokenizer_config entry; NULL when absent. */
static char *read_template_file(const char *dir) {
    char *path = qm_path_in(dir, "chat_template.jinja");
    char *text = NULL;
    if (file_exists(path)) {
        FILE *f = fopen(path, "rb");
        if (f) {
            text = malloc(MAX_TEMPLATE_BYTES + 1);
            size_t n = text ? fread(text, 1, MAX_TEMPLATE_BYTES + 1, f) : 0;
            if (text && n <= MAX_TEMPLATE_BYTES) {
                text[n] = '\0';
            } else {
                free(text);
                text = NULL;
            }
            fclose(f);
        }
    }
    free(path);
    return text;
}

qm_vocab *qm_vocab_load(const char *dir, const sy_hf_config *cfg, const sy_hf_generation_config *gen,
                        qm_vocab_facts *facts, sy_status *status, char *err, size_t err_size) {
    memset(facts, 0, sizeof *facts);
    facts->bos = facts->eos = facts->pad = -1;
    *status = SY_ERR_FORMAT;
    char *tok_path = qm_path_in(dir, "tokenizer.json"), *cfg_path = qm_path_in(dir, "tokenizer_config.json");
    qm_vocab *v = calloc(1, sizeof *v);
    sy_tokenizer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.add_bos_token = tc.add_eos_token = -1;
    bool ok = false;
    if (tok_path == NULL || cfg_path == NULL || v == NULL) {
        snprintf(err, err_size, "out of memory");
        *status = SY_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if (!file_exists(tok_path)) {
        snprintf(err, err_size, "%s is missing (only tokenizer.json tokenizers are supported)", tok_path);
        goto done;
    }
    if (!get_tokenizer(v, tok_path, err, err_size)) {
        *status = strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT;
        goto done;
    }
    v->n_bpe = sy_bpe_n_vocab(v->bpe);
    v->n_model = cfg->vocab_size;
    v->bytes = sy_bpe_memory(v->bpe);
    if (v->n_bpe > v->n_model) {
        snprintf(err, err_size, "%s has ids up to %u but the model's vocab_size is %u", tok_path, v->n_bpe - 1,
                 v->n_model);
        goto done;
    }
    if (file_exists(cfg_path) && !sy_tokenizer_config_load(cfg_path, &tc, err, err_size)) goto done;

    /* ids for model_info: the tokenizer's own tokens first, then config.json / generation_config.json */
    facts->bos = token_id(v->bpe, tc.bos_token);
    if (facts->bos < 0) facts->bos = config_id(gen->bos_token_id, v->n_model);
    if (facts->bos < 0) facts->bos = config_id(cfg->bos_token_id, v->n_model);
    facts->eos = token_id(v->bpe, tc.eos_token);
    if (facts->eos < 0 && gen->n_eos > 0) facts->eos = config_id(gen->eos_token_ids[0], v->n_model);
    if (facts->eos < 0 && cfg->n_eos > 0) facts->eos = config_id(cfg->eos_token_ids[0], v->n_model);
    facts->pad = token_id(v->bpe, tc.pad_token);
    if (facts->pad < 0) facts->pad = config_id(gen->pad_token_id, v->n_model);
    if (facts->pad < 0) facts->pad = config_id(cfg->pad_token_id, v->n_model);

    /* generation stops at every EOS any of the three files names */
    for (uint32_t i = 0; i < gen->n_eos; i++) mark_end(v, gen->eos_token_ids[i]);
    for (uint32_t i = 0; i < cfg->n_eos; i++) mark_end(v, cfg->eos_token_ids[i]);
    mark_end(v, token_id(v->bpe, tc.eos_token));

    const int32_t *prefix, *suffix;
    size_t n_prefix, n_suffix;
    sy_bpe_template(v->bpe, &prefix, &n_prefix, &suffix, &n_suffix);
    facts->add_bos = n_prefix > 0;
    facts->chat_template = tc.chat_template ? tc.chat_template : read_template_file(dir);
    tc.chat_template = NULL;
    facts->template_names = tc.template_names;
    facts->template_texts = tc.template_texts;
    facts->n_templates = tc.n_templates;
    tc.template_names = tc.template_texts = NULL;
    tc.n_templates = 0;
    ok = true;
done:
    sy_tokenizer_config_free(&tc);
    free(tok_path);
    free(cfg_path);
    if (!ok) {
        vocab_free(v);
        return NULL;
    }
    *status = SY_OK;
    return v;
}

/* ---- the vocabulary operations ---- */

static sy_status vocab_tokenize(const void *p, const char *text, size_t len, uint32_t flags, int32_t *out,
                                size_t capacity, size_t *n_out, char *err, size_t err_size) {
    const qm_vocab *v = p;
    sy_bpe_ids ids = {0};
    if (!sy_bpe_tokenize(v->bpe, text, len, flags, &ids, err, err_size)) {
        sy_bpe_ids_free(&ids);
        return SY_ERR_INVALID_ARGUMENT;
    }
    *n_out = ids.n;
    sy_status st = SY_OK;
    if (ids.n > capacity) st = SY_ERR_BUFFER_TOO_SMALL;
    else if (ids.n > 0) memcpy(out, ids.ids, ids.n * sizeof *out);
    sy_bpe_ids_free(&ids);
    return st;
}

static sy_status vocab_token_bytes(const void *p, int32_t id, char *out, size_t capacity, size_t *n_out) {
    const qm_vocab *v = p;
    if (id < 0 || (uint32_t)id >= v->n_model) return SY_ERR_INVALID_ARGUMENT;
    size_t len = 0;
    const char *bytes = (uint32_t)id < v->n_bpe ? sy_bpe_token_bytes(v->bpe, id, &len) : NULL;
    *n_out = bytes ? len : 0; /* an unused id stands for no bytes */
    if (*n_out > capacity) return SY_ERR_BUFFER_TOO_SMALL;
    if (*n_out > 0) memcpy(out, bytes, *n_out);
    return SY_OK;
}

static uint32_t vocab_token_flags(const void *p, int32_t id) {
    const qm_vocab *v = p;
    if (id < 0 || (uint32_t)id >= v->n_model) return 0;
    if ((uint32_t)id >= v->n_bpe) return SY_TOKEN_UNUSED;
    uint32_t flags = sy_bpe_token_flags(v->bpe, id);
    for (size_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) flags |= SY_TOKEN_END_OF_GENERATION;
    return flags;
}

static uint64_t vocab_memory(const void *p) { return ((const qm_vocab *)p)->bytes; }

const sy_cpu_vocab_ops qm_vocab_ops = {
    .tokenize = vocab_tokenize,
    .token_bytes = vocab_token_bytes,
    .token_flags = vocab_token_flags,
    .memory = vocab_memory,
    .free = vocab_free,
};
