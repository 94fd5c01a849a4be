/* GGUF tokenizer metadata -> an SPM or byte-level BPE tokenizer: see gguf_vocab.h. */
#include "gguf_vocab.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_bpe.h"
#include "tokenizer_spm.h"

/* GGUF tokenizer.ggml.token_type values. */
enum { TYPE_NORMAL = 1, TYPE_UNKNOWN = 2, TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4, TYPE_UNUSED = 5, TYPE_BYTE = 6 };

struct gq_vocab {
    sy_spm *spm; /* exactly one of spm, bpe */
    sy_bpe *bpe;
    uint32_t n_vocab;
    int32_t bos, eos, pad, eot;
    bool add_bos;
};

static void set_error(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_error(char *err, size_t err_size, const char *fmt, ...) {
    if (err == NULL || err_size == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* An optional token id: -1 when absent, negative or out of range (llama.cpp ignores those too). */
static int32_t token_id(const sy_gguf *g, const char *key, uint32_t n_vocab) {
    uint64_t v;
    return sy_gguf_get_uint(g, key, &v) == 1 && v < n_vocab ? (int32_t)v : -1;
}

static bool flag(const sy_gguf *g, const char *key, bool dflt) {
    bool b;
    return sy_gguf_get_bool(g, key, &b) == 1 ? b : dflt;
}

/* ---- byte-level BPE ---- */

static sy_bpe *bpe_from_gguf(const sy_gguf *g, gq_vocab *v, sy_status *status, char *err, size_t err_size) {
    *status = SY_ERR_FORMAT;
    int64_t k_tokens = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t k_merges = sy_gguf_find_key(g, "tokenizer.ggml.merges");
    int64_t k_types = sy_gguf_find_key(g, "tokenizer.ggml.token_type");
    sy_gguf_type et;
    uint64_t n, n_merges = 0, n_types = 0;
    if (k_tokens < 0 || !sy_gguf_kv_array(g, (uint64_t)k_tokens, &et, &n) || et != SY_GGUF_STRING || n == 0 ||
        n > SY_BPE_MAX_TOKENS) {
        set_error(err, err_size, "metadata key 'tokenizer.ggml.tokens': missing, empty, too long or not strings");
        return NULL;
    }
    if (k_merges < 0 || !sy_gguf_kv_array(g, (uint64_t)k_merges, &et, &n_merges) || et != SY_GGUF_STRING) {
        set_error(err, err_size, "metadata key 'tokenizer.ggml.merges': missing or not an array of strings");
        return NULL;
    }
    if (k_types >= 0 && (!sy_gguf_kv_array(g, (uint64_t)k_types, &et, &n_types) || n_types != n)) {
        set_error(err, err_size, "metadata key 'tokenizer.ggml.token_type': expected %llu entries",
                  (unsigned long long)n);
        return NULL;
    }
    const char *pre;
    size_t pre_len;
    if (sy_gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pre_len) != 1 || pre_len == 0 || pre_len > 64 ||
        memchr(pre, '\0', pre_len) != NULL) {
        *status = SY_ERR_UNSUPPORTED;
        set_error(err, err_size, "metadata key 'tokenizer.ggml.pre' is missing or invalid: the BPE pre-tokenizer "
                                 "is unknown");
        return NULL;
    }
    char pre_name[65];
    memcpy(pre_name, pre, pre_len);
    pre_name[pre_len] = '\0';
    v->n_vocab = (uint32_t)n;
    v->bos = token_id(g, "tokenizer.ggml.bos_token_id", v->n_vocab);
    v->eos = token_id(g, "tokenizer.ggml.eos_token_id", v->n_vocab);
    v->pad = token_id(g, "tokenizer.ggml.padding_token_id", v->n_vocab);
    v->eot = token_id(g, "tokenizer.ggml.eot_token_id", v->n_vocab);
    v->add_bos = flag(g, "tokenizer.ggml.add_bos_token", false) && v->bos >= 0;
    bool add_eos = flag(g, "tokenizer.ggml.add_eos_token", false) && v->eos >= 0;

    char inner[256];
    sy_bpe_builder *b = sy_bpe_builder_new(inner, sizeof inner);
    if (b == NULL || !sy_bpe_builder_reserve(b, (size_t)n, (size_t)n_merges, inner, sizeof inner)) goto failed;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        sy_gguf_array_string(g, (uint64_t)k_tokens, i, &s, &len);
        if (!sy_bpe_builder_add_token(b, s, len, (int32_t)i, inner, sizeof inner)) goto failed;
    }
    for (uint64_t i = 0; i < n_merges; i++) {
        const char *s;
        size_t len;
        sy_gguf_array_string(g, (uint64_t)k_merges, i, &s, &len);
        if (!sy_bpe_builder_add_merge_line(b, s, len, inner, sizeof inner)) goto failed;
    }
    for (uint64_t i = 0; k_types >= 0 && i < n; i++) {
        int64_t type;
        if (!sy_gguf_array_int(g, (uint64_t)k_types, i, &type)) type = TYPE_NORMAL;
        if (type != TYPE_CONTROL && type != TYPE_USER_DEFINED) continue;
        sy_bpe_added_token t = {0};
        sy_gguf_array_string(g, (uint64_t)k_tokens, i, &t.content, &t.content_len);
        t.id = (int32_t)i;
        t.special = type == TYPE_CONTROL;
        if (t.content_len > 0 && !sy_bpe_builder_add_added_token(b, &t, inner, sizeof inner)) goto failed;
    }
    if (!sy_bpe_builder_use_preset(b, pre_name, inner, sizeof inner)) {
        sy_bpe_builder_free(b);
        *status = SY_ERR_UNSUPPORTED;
        set_error(err, err_size, "tokenizer.ggml.pre: %s", inner);
        return NULL;
    }
    if (!sy_bpe_builder_set_template(b, &v->bos, v->add_bos ? 1 : 0, &v->eos, add_eos ? 1 : 0, inner,
                                     sizeof inner))
        goto failed;
    sy_bpe *t = sy_bpe_builder_finish(b, inner, sizeof inner);
    b = NULL;
    if (t == NULL) goto failed;
    int32_t ends[2] = {v->eos, v->eot};
    for (int i = 0; i < 2; i++)
        if (ends[i] >= 0) sy_bpe_set_token_flags(t, ends[i], SY_TOKEN_END_OF_GENERATION);
    if (sy_bpe_n_vocab(t) != v->n_vocab) { /* ids are 0..n-1, so this holds unless the builder dropped some */
        set_error(err, err_size, "BPE vocabulary of %u ids from %u tokens", sy_bpe_n_vocab(t), v->n_vocab);
        sy_bpe_free(t);
        return NULL;
    }
    return t;

failed:
    if (b) sy_bpe_builder_free(b);
    set_error(err, err_size, "BPE tokenizer: %s", inner);
    return NULL;
}

gq_vocab *gq_vocab_from_gguf(const sy_gguf *g, sy_status *status, char *err, size_t err_size) {
    const char *model;
    size_t len;
    *status = SY_ERR_FORMAT;
    if (sy_gguf_get_string(g, "tokenizer.ggml.model", &model, &len) != 1) {
        set_error(err, err_size, "metadata key 'tokenizer.ggml.model' is missing");
        return NULL;
    }
    gq_vocab *v = calloc(1, sizeof *v);
    if (v == NULL) {
        *status = SY_ERR_OUT_OF_MEMORY;
        set_error(err, err_size, "out of memory");
        return NULL;
    }
    if (len == 5 && memcmp(model, "llama", 5) == 0) {
        v->spm = sy_spm_from_gguf(g, err, err_size);
        if (v->spm == NULL) goto failed;
        v->n_vocab = sy_spm_vocab_size(v->spm);
        v->bos = sy_spm_bos(v->spm);
        v->eos = sy_spm_eos(v->spm);
        v->pad = sy_spm_pad(v->spm);
        v->eot = sy_spm_eot(v->spm);
        v->add_bos = sy_spm_add_bos(v->spm);
        return v;
    }
    if (len == 4 && memcmp(model, "gpt2", 4) == 0) {
        v->bpe = bpe_from_gguf(g, v, status, err, err_size);
        if (v->bpe == NULL) goto failed;
        return v;
    }
    *status = SY_ERR_UNSUPPORTED;
    set_error(err, err_size, "tokenizer model '%.*s' is not supported (llama and gpt2 are)", (int)(len > 32 ? 32 : len),
              model);
failed:
    gq_vocab_free(v);
    return NULL;
}

void gq_vocab_free(gq_vocab *v) {
    if (v == NULL) return;
    sy_spm_free(v->spm);
    sy_bpe_free(v->bpe);
    free(v);
}

const char *gq_vocab_kind(const gq_vocab *v) { return v->spm ? "spm" : "bpe"; }
uint32_t gq_vocab_size(const gq_vocab *v) { return v->n_vocab; }
int32_t gq_vocab_bos(const gq_vocab *v) { return v->bos; }
int32_t gq_vocab_eos(const gq_vocab *v) { return v->eos; }
int32_t gq_vocab_pad(const gq_vocab *v) { return v->pad; }
bool gq_vocab_add_bos(const gq_vocab *v) { return v->add_bos; }
uint64_t gq_vocab_memory(const gq_vocab *v) { return (uint64_t)v->n_vocab * (v->spm ? 32 : 64); }

sy_status gq_vocab_tokenize(const gq_vocab *v, const char *text, size_t len, uint32_t flags, int32_t *out,
                            size_t capacity, size_t *n_out, char *err, size_t err_size) {
    if (v->spm) {
        int r = sy_spm_encode(v->spm, text, len, (flags & SY_TOKENIZE_ADD_SPECIAL) != 0,
                              (flags & SY_TOKENIZE_PARSE_SPECIAL) != 0, out, capacity, n_out);
        if (r < 0) {
            set_error(err, err_size, "out of memory");
            return SY_ERR_OUT_OF_MEMORY;
        }
        if (r > 0) {
            set_error(err, err_size, "%zu ids do not fit in %zu", *n_out, capacity);
            return SY_ERR_BUFFER_TOO_SMALL;
        }
        return SY_OK;
    }
    sy_bpe_ids ids = {0};
    if (!sy_bpe_tokenize(v->bpe, text, len, flags, &ids, err, err_size)) {
        sy_bpe_ids_free(&ids);
        return SY_ERR_INVALID_ARGUMENT;
    }
    *n_out = ids.n;
    size_t copy = ids.n < capacity ? ids.n : capacity;
    if (copy > 0) memcpy(out, ids.ids, copy * sizeof *out);
    sy_bpe_ids_free(&ids);
    if (*n_out > capacity) {
        set_error(err, err_size, "%zu ids do not fit in %zu", *n_out, capacity);
        return SY_ERR_BUFFER_TOO_SMALL;
    }
    return SY_OK;
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
    if (v->bpe) return sy_bpe_token_flags(v->bpe, id);
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
