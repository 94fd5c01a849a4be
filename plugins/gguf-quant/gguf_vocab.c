/* GGUF tokenizer metadata -> an SPM or byte-level BPE tokenizer: see gguf_vocab.h. */
#include "gguf_vocab.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_bpe.h"
#include "tokenizer_cache.h"
#include "tokenizer_spm.h"
#include "errmsg.h"

/* GGUF tokenizer.ggml.token_type values. */
enum { TYPE_NORMAL = 1, TYPE_UNKNOWN = 2, TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4, TYPE_UNUSED = 5, TYPE_BYTE = 6 };

/* The tokenizer itself comes from the plugin's tokenizer cache, shared with every model whose tokenizer metadata
 * hashes the same; what is specific to this model stays here. */
struct gq_vocab {
    sy_tok_ref *ref;   /* the shared tokenizer, or NULL when this vocabulary owns it (see get_tokenizer) */
    void *owned;
    const sy_spm *spm; /* exactly one of spm, bpe */
    const sy_bpe *bpe;
    uint32_t n_vocab;
    int32_t bos, eos, pad, eot;
    bool add_bos, add_eos; /* BPE: ids put around the text for SY_TOKENIZE_ADD_SPECIAL (SPM applies its own) */
};

/* A BPE entry of the cache depends on the vocabulary, merges, token types and pre-tokenizer only: the special ids
 * and add_* flags below are applied by gq_vocab, so fine-tunes that differ only there (a base model and its
 * instruct version, whose EOS differs) share one tokenizer. Every other tokenizer.ggml.* key is hashed. */
static const char *const BPE_MODEL_KEYS[] = {
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",  "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.eot_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
};

/* An optional token id: -1 when absent, negative or out of range (llama.cpp ignores those too). */
static int32_t token_id(const sy_gguf *g, const char *key, uint32_t n_vocab) {
    uint64_t v;
    return sy_gguf_get_uint(g, key, &v) == 1 && v < n_vocab ? (int32_t)v : -1;
}

static bool flag(const sy_gguf *g, const char *key, bool dflt) {
    bool b;
    return sy_gguf_get_bool(g, key, &b) == 1 ? b : dflt;
}

static void free_spm(void *t) { sy_spm_free(t); }

/* Sets v->spm or v->bpe from the cache (v->ref) or, when the metadata cannot be hashed, from a build of its own. */
static bool get_tokenizer(gq_vocab *v, const sy_gguf *g, const char *domain, const char *const *skip,
                          size_t n_skip, sy_tok_build_fn build, sy_tok_free_fn free_fn, void *ctx, char *err,
                          size_t err_size) {
    sy_tok_key key;
    void *t;
    if (sy_tok_key_gguf(g, domain, skip, n_skip, &key)) {
        v->ref = sy_tok_cache_acquire(sy_tok_cache_default(), &key, build, free_fn, ctx, NULL, err, err_size);
        t = v->ref ? sy_tok_ref_get(v->ref) : NULL;
    } else {
        t = build(ctx, err, err_size);
    }
    if (t == NULL) return false;
    if (v->ref == NULL) v->owned = t;
    if (free_fn == free_spm) v->spm = t;
    else v->bpe = t;
    return true;
}

/* ---- SentencePiece ---- */

static void *build_spm(void *ctx, char *err, size_t err_size) { return sy_spm_from_gguf(ctx, err, err_size); }

/* ---- byte-level BPE ---- */

typedef struct bpe_source {
    const sy_gguf *g;
    int64_t k_tokens, k_merges, k_types;
    uint64_t n, n_merges;
    char pre_name[65];
    sy_status status; /* of a failed build */
} bpe_source;

static void free_bpe(void *t) { sy_bpe_free(t); }

/* What the cache shares: vocabulary, merges, added tokens and pre-tokenizer; no template, no EOG flags. */
static void *build_bpe(void *ctx, char *err, size_t err_size) {
    bpe_source *src = ctx;
    const sy_gguf *g = src->g;
    uint64_t n = src->n, n_merges = src->n_merges;
    char inner[256];
    src->status = SY_ERR_FORMAT;
    sy_bpe_builder *b = sy_bpe_builder_new(inner, sizeof inner);
    if (b == NULL || !sy_bpe_builder_reserve(b, (size_t)n, (size_t)n_merges, inner, sizeof inner)) goto failed;
    /* in batches: the builder overlaps the hash-table lookups of a batch */
    const char *texts[256];
    size_t lens[256];
    for (uint64_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? (size_t)(n - i) : 256;
        for (size_t j = 0; j < m; j++) sy_gguf_array_string(g, (uint64_t)src->k_tokens, i + j, &texts[j], &lens[j]);
        if (!sy_bpe_builder_add_tokens(b, texts, lens, (int32_t)i, m, inner, sizeof inner)) goto failed;
    }
    for (uint64_t i = 0; i < n_merges; i += 256) {
        size_t m = n_merges - i < 256 ? (size_t)(n_merges - i) : 256;
        for (size_t j = 0; j < m; j++) sy_gguf_array_string(g, (uint64_t)src->k_merges, i + j, &texts[j], &lens[j]);
        if (!sy_bpe_builder_add_merge_lines(b, texts, lens, m, NULL, inner, sizeof inner)) goto failed;
    }
    for (uint64_t i = 0; src->k_types >= 0 && i < n; i++) {
        int64_t type;
        if (!sy_gguf_array_int(g, (uint64_t)src->k_types, i, &type)) type = TYPE_NORMAL;
        if (type != TYPE_CONTROL && type != TYPE_USER_DEFINED) continue;
        sy_bpe_added_token t = {0};
        sy_gguf_array_string(g, (uint64_t)src->k_tokens, i, &t.content, &t.content_len);
        t.id = (int32_t)i;
        t.special = type == TYPE_CONTROL;
        if (t.content_len > 0 && !sy_bpe_builder_add_added_token(b, &t, inner, sizeof inner)) goto failed;
    }
    if (!sy_bpe_builder_use_preset(b, src->pre_name, inner, sizeof inner)) {
        sy_bpe_builder_free(b);
        src->status = SY_ERR_UNSUPPORTED;
        sy_errmsg(err, err_size, "tokenizer.ggml.pre: %s", inner);
        return NULL;
    }
    sy_bpe *t = sy_bpe_builder_finish(b, inner, sizeof inner);
    b = NULL;
    if (t == NULL) goto failed;
    if (sy_bpe_n_vocab(t) != n) { /* ids are 0..n-1, so this holds unless the builder dropped some */
        sy_errmsg(err, err_size, "BPE vocabulary of %u ids from %llu tokens", sy_bpe_n_vocab(t),
                  (unsigned long long)n);
        sy_bpe_free(t);
        return NULL;
    }
    return t;

failed:
    if (b) sy_bpe_builder_free(b);
    sy_errmsg(err, err_size, "BPE tokenizer: %s", inner);
    return NULL;
}

/* A real token of the BPE vocabulary (not an id without text). */
static bool bpe_has_token(const gq_vocab *v, int32_t id) {
    return id >= 0 && (uint32_t)id < v->n_vocab && !(sy_bpe_token_flags(v->bpe, id) & SY_TOKEN_UNUSED);
}

static bool bpe_from_gguf(const sy_gguf *g, gq_vocab *v, sy_status *status, char *err, size_t err_size) {
    *status = SY_ERR_FORMAT;
    bpe_source src = {.g = g};
    src.k_tokens = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    src.k_merges = sy_gguf_find_key(g, "tokenizer.ggml.merges");
    src.k_types = sy_gguf_find_key(g, "tokenizer.ggml.token_type");
    sy_gguf_type et;
    uint64_t n, n_types = 0;
    if (src.k_tokens < 0 || !sy_gguf_kv_array(g, (uint64_t)src.k_tokens, &et, &n) || et != SY_GGUF_STRING ||
        n == 0 || n > SY_BPE_MAX_TOKENS) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.tokens': missing, empty, too long or not strings");
        return false;
    }
    if (src.k_merges < 0 || !sy_gguf_kv_array(g, (uint64_t)src.k_merges, &et, &src.n_merges) ||
        et != SY_GGUF_STRING) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.merges': missing or not an array of strings");
        return false;
    }
    if (src.k_types >= 0 && (!sy_gguf_kv_array(g, (uint64_t)src.k_types, &et, &n_types) || n_types != n)) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.token_type': expected %llu entries",
                  (unsigned long long)n);
        return false;
    }
    const char *pre;
    size_t pre_len;
    if (sy_gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pre_len) != 1 || pre_len == 0 || pre_len > 64 ||
        memchr(pre, '\0', pre_len) != NULL) {
        *status = SY_ERR_UNSUPPORTED;
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.pre' is missing or invalid: the BPE pre-tokenizer "
                                 "is unknown");
        return false;
    }
    memcpy(src.pre_name, pre, pre_len);
    src.pre_name[pre_len] = '\0';
    src.n = n;
    v->n_vocab = (uint32_t)n;
    v->bos = token_id(g, "tokenizer.ggml.bos_token_id", v->n_vocab);
    v->eos = token_id(g, "tokenizer.ggml.eos_token_id", v->n_vocab);
    v->pad = token_id(g, "tokenizer.ggml.padding_token_id", v->n_vocab);
    v->eot = token_id(g, "tokenizer.ggml.eot_token_id", v->n_vocab);
    v->add_bos = flag(g, "tokenizer.ggml.add_bos_token", false) && v->bos >= 0;
    v->add_eos = flag(g, "tokenizer.ggml.add_eos_token", false) && v->eos >= 0;

    if (!get_tokenizer(v, g, "gguf-quant bpe/1", BPE_MODEL_KEYS, sizeof BPE_MODEL_KEYS / sizeof BPE_MODEL_KEYS[0],
                       build_bpe, free_bpe, &src, err, err_size)) {
        *status = src.status;
        return false;
    }
    int32_t around[2] = {v->add_bos ? v->bos : -1, v->add_eos ? v->eos : -1};
    for (int i = 0; i < 2; i++)
        if (around[i] >= 0 && !bpe_has_token(v, around[i])) {
            sy_errmsg(err, err_size, "BPE tokenizer: post-processor template names id %d, which is not a token",
                      around[i]);
            return false;
        }
    return true;
}

gq_vocab *gq_vocab_from_gguf(const sy_gguf *g, sy_status *status, char *err, size_t err_size) {
    const char *model;
    size_t len;
    *status = SY_ERR_FORMAT;
    if (sy_gguf_get_string(g, "tokenizer.ggml.model", &model, &len) != 1) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.model' is missing");
        return NULL;
    }
    gq_vocab *v = calloc(1, sizeof *v);
    if (v == NULL) {
        *status = SY_ERR_OUT_OF_MEMORY;
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    if (len == 5 && memcmp(model, "llama", 5) == 0) {
        if (!get_tokenizer(v, g, "gguf-quant spm/1", NULL, 0, build_spm, free_spm, (void *)g, err, err_size))
            goto failed;
        v->n_vocab = sy_spm_vocab_size(v->spm);
        v->bos = sy_spm_bos(v->spm);
        v->eos = sy_spm_eos(v->spm);
        v->pad = sy_spm_pad(v->spm);
        v->eot = sy_spm_eot(v->spm);
        v->add_bos = sy_spm_add_bos(v->spm);
        return v;
    }
    if (len == 4 && memcmp(model, "gpt2", 4) == 0) {
        if (!bpe_from_gguf(g, v, status, err, err_size)) goto failed;
        return v;
    }
    *status = SY_ERR_UNSUPPORTED;
    sy_errmsg(err, err_size, "tokenizer model '%.*s' is not supported (llama and gpt2 are)", (int)(len > 32 ? 32 : len),
              model);
failed:
    gq_vocab_free(v);
    return NULL;
}

void gq_vocab_free(gq_vocab *v) {
    if (v == NULL) return;
    if (v->ref != NULL) sy_tok_cache_release(v->ref);
    else if (v->spm != NULL) sy_spm_free(v->owned);
    else sy_bpe_free(v->owned);
    free(v);
}

void gq_vocab_drop_cached(void) { sy_tok_cache_drop_unused(sy_tok_cache_default()); }

const char *gq_vocab_kind(const gq_vocab *v) { return v->spm ? "spm" : "bpe"; }
uint32_t gq_vocab_size(const gq_vocab *v) { return v->n_vocab; }
int32_t gq_vocab_bos(const gq_vocab *v) { return v->bos; }
int32_t gq_vocab_eos(const gq_vocab *v) { return v->eos; }
int32_t gq_vocab_pad(const gq_vocab *v) { return v->pad; }
bool gq_vocab_add_bos(const gq_vocab *v) { return v->add_bos; }
uint64_t gq_vocab_memory(const gq_vocab *v) { return v->spm ? (uint64_t)v->n_vocab * 32 : sy_bpe_memory(v->bpe); }

bool gq_vocab_estimate(const sy_gguf *g, uint32_t *n_vocab, uint64_t *bytes, sy_status *status, char *err,
                       size_t err_size) {
    const char *model;
    size_t len;
    *status = SY_ERR_FORMAT;
    if (sy_gguf_get_string(g, "tokenizer.ggml.model", &model, &len) != 1) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.model' is missing");
        return false;
    }
    bool spm = len == 5 && memcmp(model, "llama", 5) == 0;
    if (!spm && !(len == 4 && memcmp(model, "gpt2", 4) == 0)) {
        *status = SY_ERR_UNSUPPORTED;
        sy_errmsg(err, err_size, "tokenizer model '%.*s' is not supported (llama and gpt2 are)",
                  (int)(len > 32 ? 32 : len), model);
        return false;
    }
    /* Both tokenizers have one id per entry of the tokens array (the bounds are the builders' own). */
    int64_t k = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    sy_gguf_type et;
    uint64_t n;
    if (k < 0 || !sy_gguf_kv_array(g, (uint64_t)k, &et, &n) || et != SY_GGUF_STRING || n == 0 ||
        n > (spm ? (uint64_t)INT32_MAX / 4 : (uint64_t)SY_BPE_MAX_TOKENS)) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.tokens': missing, empty, too long or not strings");
        return false;
    }
    *n_vocab = (uint32_t)n;
    if (spm) {
        *bytes = n * 32;
        return true;
    }
    uint64_t text = 0, n_merges = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t slen;
        if (sy_gguf_array_string(g, (uint64_t)k, i, &s, &slen)) text += slen;
    }
    int64_t km = sy_gguf_find_key(g, "tokenizer.ggml.merges");
    if (km >= 0 && !sy_gguf_kv_array(g, (uint64_t)km, &et, &n_merges)) n_merges = 0;
    *bytes = sy_bpe_memory_estimate(n, n_merges, text);
    return true;
}

static bool push_id(sy_bpe_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *p = realloc(ids->ids, cap * sizeof *p);
        if (p == NULL) return false;
        ids->ids = p;
        ids->cap = cap;
    }
    ids->ids[ids->n++] = id;
    return true;
}

sy_status gq_vocab_tokenize(const gq_vocab *v, const char *text, size_t len, uint32_t flags, int32_t *out,
                            size_t capacity, size_t *n_out, char *err, size_t err_size) {
    if (v->spm) {
        int r = sy_spm_encode(v->spm, text, len, (flags & SY_TOKENIZE_ADD_SPECIAL) != 0,
                              (flags & SY_TOKENIZE_PARSE_SPECIAL) != 0, out, capacity, n_out);
        if (r < 0) {
            sy_errmsg(err, err_size, "out of memory");
            return SY_ERR_OUT_OF_MEMORY;
        }
        if (r > 0) {
            sy_errmsg(err, err_size, "%zu ids do not fit in %zu", *n_out, capacity);
            return SY_ERR_BUFFER_TOO_SMALL;
        }
        return SY_OK;
    }
    /* this model's BOS / EOS around the text (the shared tokenizer has no template of its own) */
    bool special = (flags & SY_TOKENIZE_ADD_SPECIAL) != 0;
    sy_bpe_ids ids = {0};
    if (special && v->add_bos && !push_id(&ids, v->bos)) goto oom;
    if (!sy_bpe_tokenize(v->bpe, text, len, flags & ~(uint32_t)SY_TOKENIZE_ADD_SPECIAL, &ids, err, err_size)) {
        sy_bpe_ids_free(&ids);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (special && v->add_eos && !push_id(&ids, v->eos)) goto oom;
    *n_out = ids.n;
    size_t copy = ids.n < capacity ? ids.n : capacity;
    if (copy > 0) memcpy(out, ids.ids, copy * sizeof *out);
    sy_bpe_ids_free(&ids);
    if (*n_out > capacity) {
        sy_errmsg(err, err_size, "%zu ids do not fit in %zu", *n_out, capacity);
        return SY_ERR_BUFFER_TOO_SMALL;
    }
    return SY_OK;
oom:
    sy_bpe_ids_free(&ids);
    sy_errmsg(err, err_size, "out of memory");
    return SY_ERR_OUT_OF_MEMORY;
}

sy_status gq_vocab_token_bytes(const gq_vocab *v, int32_t id, char *out, size_t capacity, size_t *n_out) {
    if (v->spm) {
        int r = sy_spm_decode_token(v->spm, id, out, capacity, n_out);
        return r < 0 ? SY_ERR_INVALID_ARGUMENT : r > 0 ? SY_ERR_BUFFER_TOO_SMALL : SY_OK;
    }
    size_t len;
    const char *bytes = sy_bpe_token_bytes(v->bpe, id, &len);
    if (bytes == NULL && !(id >= 0 && (uint32_t)id < v->n_vocab)) return SY_ERR_INVALID_ARGUMENT;
    *n_out = len;
    if (len > capacity) return SY_ERR_BUFFER_TOO_SMALL;
    if (len > 0) memcpy(out, bytes, len);
    return SY_OK;
}

uint32_t gq_vocab_token_flags(const gq_vocab *v, int32_t id) {
    if (v->bpe) {
        uint32_t flags = sy_bpe_token_flags(v->bpe, id);
        /* EOS and EOT end generation for this model; an id without a token has nothing to flag */
        if ((id == v->eos || id == v->eot) && id >= 0 && !(flags & SY_TOKEN_UNUSED))
            flags |= SY_TOKEN_END_OF_GENERATION;
        return flags;
    }
    uint32_t flags = 0;
    switch (sy_spm_token_type(v->spm, id)) {
    case 0: return 0;
    case SY_SPM_TOKEN_CONTROL:
    case SY_SPM_TOKEN_UNKNOWN: flags |= SY_TOKEN_CONTROL; break;
    case SY_SPM_TOKEN_BYTE: flags |= SY_TOKEN_BYTE; break;
    case SY_SPM_TOKEN_UNUSED: flags |= SY_TOKEN_UNUSED; break;
    default: break;
    }
    if (id == v->eos || id == v->eot) flags |= SY_TOKEN_END_OF_GENERATION;
    return flags;
}
