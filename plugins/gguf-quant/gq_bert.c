/* BERT-family GGUF files (gq_bert.h) on the encoder core. */
#include "gq_bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_names.h"
#include "tokenizer_wordpiece.h"

#define fail sy_cpu_fail

typedef struct gb_format {
    sy_gguf *gguf; /* owned by gguf_quant.c's format: not closed here */
    sy_enc_layer_weights *layers;
} gb_format;

static bool u32_key(const sy_gguf *g, const char *key, bool required, uint32_t dflt, uint32_t max, uint32_t *out) {
    uint64_t v;
    int rc = sy_gguf_get_uint(g, key, &v);
    if (rc == 0 && !required) {
        *out = dflt;
        return true;
    }
    if (rc != 1 || v == 0 || v > max) {
        fail(SY_ERR_FORMAT, "metadata key '%s' is %s", key, rc == 0 ? "missing" : "not a count in range");
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static const char *tn(char buf[64], sy_tensor_role role, uint32_t l) {
    sy_tensor_name(SY_TENSORS_GGUF, role, l, buf, 64);
    return buf;
}

static bool matrix(const sy_gguf *g, sy_tensor_role role, uint32_t l, uint64_t rows, uint64_t cols, sy_tf_matrix *out) {
    char n[64];
    if (!gq_get_matrix(g, tn(n, role, l), true, out)) return false;
    if (out->rows != rows || out->cols != cols) {
        fail(SY_ERR_FORMAT, "tensor %s: %llu x %llu, expected %llu x %llu", n, (unsigned long long)out->rows,
             (unsigned long long)out->cols, (unsigned long long)rows, (unsigned long long)cols);
        return false;
    }
    return true;
}

static bool vector(const sy_gguf *g, sy_tensor_role role, uint32_t l, sy_tf_vector *out) {
    char n[64];
    if (!gq_get_vector(g, tn(n, role, l), out)) return false;
    if (out->data == NULL) {
        fail(SY_ERR_FORMAT, "tensor %s is missing", n);
        return false;
    }
    return true;
}

static sy_status read_config(const sy_gguf *g, sy_enc_config *c) {
    memset(c, 0, sizeof *c);
    const uint32_t big = 1u << 20;
    if (!u32_key(g, "bert.embedding_length", true, 0, big, &c->n_embd) ||
        !u32_key(g, "bert.feed_forward_length", true, 0, big, &c->n_ff) ||
        !u32_key(g, "bert.block_count", true, 0, 1024, &c->n_layer) ||
        !u32_key(g, "bert.attention.head_count", true, 0, 4096, &c->n_head) ||
        !u32_key(g, "bert.context_length", false, 512, big, &c->n_pos))
        return sy_cpu_last_status();
    double eps = 1e-12;
    if (sy_gguf_get_float(g, "bert.attention.layer_norm_epsilon", &eps) == -1 || !(eps > 0 && eps < 1))
        return fail(SY_ERR_FORMAT, "metadata key 'bert.attention.layer_norm_epsilon' is not a small positive number");
    c->ln_eps = (float)eps;
    bool causal = false;
    if (sy_gguf_get_bool(g, "bert.attention.causal", &causal) == 1 && causal)
        return fail(SY_ERR_UNSUPPORTED, "bert.attention.causal true is not supported (encoders attend both ways)");
    uint64_t pooling = 1;
    if (sy_gguf_get_uint(g, "bert.pooling_type", &pooling) == -1)
        return fail(SY_ERR_FORMAT, "metadata key 'bert.pooling_type' is not a number");
    switch (pooling) { /* llama.cpp's enum llama_pooling_type */
    case 1: c->pooling = SY_POOLING_MEAN; break;
    case 2: c->pooling = SY_POOLING_CLS; break;
    case 4: c->pooling = SY_POOLING_RANK; break;
    default: return fail(SY_ERR_UNSUPPORTED, "bert.pooling_type %llu is not supported (1 mean, 2 cls, 4 rank are)",
                         (unsigned long long)pooling);
    }
    c->normalize = c->pooling != SY_POOLING_RANK;
    return SY_OK;
}

/* tokenizer.ggml.tokens back in WordPiece spelling: "▁x" -> "x", control tokens as they are, others "##x". */
static sy_wordpiece *vocabulary(const sy_gguf *g, uint32_t *n_vocab) {
    int64_t kt = sy_gguf_find_key(g, "tokenizer.ggml.tokens"), ky = sy_gguf_find_key(g, "tokenizer.ggml.token_type");
    sy_gguf_type et;
    uint64_t n = 0, ny = 0;
    const char *model = NULL;
    size_t model_len = 0;
    if (sy_gguf_get_string(g, "tokenizer.ggml.model", &model, &model_len) != 1 || model_len != 4 ||
        memcmp(model, "bert", 4) != 0) {
        fail(SY_ERR_UNSUPPORTED, "tokenizer.ggml.model must be bert for a bert model");
        return NULL;
    }
    if (kt < 0 || !sy_gguf_kv_array(g, (uint64_t)kt, &et, &n) || n == 0 || n > (1u << 22) ||
        (ky >= 0 && (!sy_gguf_kv_array(g, (uint64_t)ky, &et, &ny) || ny != n))) {
        fail(SY_ERR_FORMAT, "tokenizer.ggml.tokens (and token_type) must be arrays of 1 to 4194304 entries");
        return NULL;
    }
    char **texts = calloc(n, sizeof *texts);
    size_t *lens = calloc(n, sizeof *lens);
    uint8_t *special = calloc(n, 1);
    bool ok = texts && lens && special;
    for (uint64_t i = 0; ok && i < n; i++) {
        const char *s;
        size_t len;
        uint64_t type = 1;
        if (!sy_gguf_array_string(g, (uint64_t)kt, i, &s, &len) ||
            (ky >= 0 && !sy_gguf_array_uint(g, (uint64_t)ky, i, &type)) || len == 0 || len > 1024) {
            fail(SY_ERR_FORMAT, "tokenizer.ggml.tokens[%llu] is not a token of 1 to 1024 bytes", (unsigned long long)i);
            ok = false;
            break;
        }
        special[i] = type == 3; /* CONTROL */
        texts[i] = malloc(len + 3);
        if (texts[i] == NULL) {
            ok = false;
            break;
        }
        if (special[i]) {
            memcpy(texts[i], s, len);
            lens[i] = len;
        } else if (len >= 3 && memcmp(s, "\xE2\x96\x81", 3) == 0) {
            memcpy(texts[i], s + 3, len - 3);
            lens[i] = len - 3;
        } else {
            memcpy(texts[i], "##", 2);
            memcpy(texts[i] + 2, s, len);
            lens[i] = len + 2;
        }
        if (lens[i] == 0) { /* "▁" alone: a word-start of nothing; keep it findable by no text */
            memcpy(texts[i], "\xE2\x96\x81", 3);
            lens[i] = 3;
        }
    }
    sy_wordpiece *wp = NULL;
    if (ok) {
        uint64_t unk = 100, cls = 101, sep = 102, pad = 0;
        sy_gguf_get_uint(g, "tokenizer.ggml.unknown_token_id", &unk);
        sy_gguf_get_uint(g, "tokenizer.ggml.bos_token_id", &cls);
        if (sy_gguf_get_uint(g, "tokenizer.ggml.seperator_token_id", &sep) != 1)
            sy_gguf_get_uint(g, "tokenizer.ggml.eos_token_id", &sep);
        sy_gguf_get_uint(g, "tokenizer.ggml.padding_token_id", &pad);
        bool lower = true;
        sy_gguf_get_bool(g, "tokenizer.ggml.normalizer.lowercase", &lower);
        char err[300];
        wp = sy_wordpiece_from_list((const char *const *)texts, lens, (uint32_t)n, special,
                                    unk < n ? (int32_t)unk : -1, cls < n ? (int32_t)cls : -1,
                                    sep < n ? (int32_t)sep : -1, pad < n ? (int32_t)pad : -1, lower, err, sizeof err);
        if (wp == NULL) fail(SY_ERR_FORMAT, "the bert vocabulary: %s", err);
    } else if (!texts || !lens || !special) {
        fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (uint64_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts), free(lens), free(special);
    if (wp) *n_vocab = (uint32_t)n;
    return wp;
}

static sy_status bind(const sy_gguf *g, sy_enc_config *c, uint32_t n_vocab, gb_format *f, sy_enc_weights *w) {
    memset(w, 0, sizeof *w);
    sy_tf_matrix types;
    char n[64];
    if (!matrix(g, SY_TENSOR_TOKEN_EMBD, 0, n_vocab, c->n_embd, &w->token_embd) ||
        !matrix(g, SY_TENSOR_POS_EMBD, 0, c->n_pos, c->n_embd, &w->pos_embd) ||
        !gq_get_matrix(g, tn(n, SY_TENSOR_TOKEN_TYPES, 0), false, &types) ||
        !vector(g, SY_TENSOR_TOKEN_EMBD_NORM, 0, &w->embd_ln_w) ||
        !vector(g, SY_TENSOR_TOKEN_EMBD_NORM_BIAS, 0, &w->embd_ln_b))
        return sy_cpu_last_status();
    c->n_vocab = n_vocab;
    if (types.data) {
        if (types.cols != c->n_embd || types.rows == 0 || types.rows > 1024)
            return fail(SY_ERR_FORMAT, "tensor %s: %llu x %llu", n, (unsigned long long)types.rows,
                        (unsigned long long)types.cols);
        w->type_embd = types;
        c->n_types = (uint32_t)types.rows;
    }
    if (c->pooling == SY_POOLING_RANK) {
        sy_tf_matrix out;
        if (!matrix(g, SY_TENSOR_CLS, 0, c->n_embd, c->n_embd, &w->pooler) ||
            !vector(g, SY_TENSOR_CLS_BIAS, 0, &w->pooler_b) ||
            !gq_get_matrix(g, tn(n, SY_TENSOR_CLS_OUT, 0), true, &out) ||
            !vector(g, SY_TENSOR_CLS_OUT_BIAS, 0, &w->classifier_b))
            return sy_cpu_last_status();
        w->classifier = out;
    }
    f->layers = calloc(c->n_layer, sizeof *f->layers);
    if (f->layers == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    const uint64_t E = c->n_embd, F = c->n_ff;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        sy_enc_layer_weights *L = &f->layers[l];
        if (!matrix(g, SY_TENSOR_ATTN_Q, l, E, E, &L->wq) || !vector(g, SY_TENSOR_ATTN_Q_BIAS, l, &L->bq) ||
            !matrix(g, SY_TENSOR_ATTN_K, l, E, E, &L->wk) || !vector(g, SY_TENSOR_ATTN_K_BIAS, l, &L->bk) ||
            !matrix(g, SY_TENSOR_ATTN_V, l, E, E, &L->wv) || !vector(g, SY_TENSOR_ATTN_V_BIAS, l, &L->bv) ||
            !matrix(g, SY_TENSOR_ATTN_OUTPUT, l, E, E, &L->wo) || !vector(g, SY_TENSOR_ATTN_OUTPUT_BIAS, l, &L->bo) ||
            !vector(g, SY_TENSOR_ATTN_OUT_NORM, l, &L->attn_ln_w) ||
            !vector(g, SY_TENSOR_ATTN_OUT_NORM_BIAS, l, &L->attn_ln_b) ||
            !matrix(g, SY_TENSOR_FFN_UP, l, F, E, &L->w_up) || !vector(g, SY_TENSOR_FFN_UP_BIAS, l, &L->b_up) ||
            !matrix(g, SY_TENSOR_FFN_DOWN, l, E, F, &L->w_down) || !vector(g, SY_TENSOR_FFN_DOWN_BIAS, l, &L->b_down) ||
            !vector(g, SY_TENSOR_LAYER_OUT_NORM, l, &L->ffn_ln_w) ||
            !vector(g, SY_TENSOR_LAYER_OUT_NORM_BIAS, l, &L->ffn_ln_b))
            return sy_cpu_last_status();
    }
    w->layers = f->layers;
    return SY_OK;
}

static void layers_free(void *p) {
    gb_format *f = p;
    if (f) free(f->layers);
    free(f);
}

/* The gguf_quant.c format keeps the file; this one the layer table, freed together by a small wrapper. */
typedef struct gb_both {
    void *outer;
    void (*outer_free)(void *);
    gb_format *bert;
} gb_both;

static void both_free(void *p) {
    gb_both *b = p;
    if (b == NULL) return;
    layers_free(b->bert);
    if (b->outer_free) b->outer_free(b->outer);
    free(b);
}

sy_status gq_bert_build(sy_model *m, const sy_gguf *g, const sy_cpu_options *opt) {
    sy_enc_config c;
    sy_status st = read_config(g, &c);
    if (st != SY_OK) return st;
    if (opt->backend == SY_CPU_BACKEND_REFERENCE)
        return fail(SY_ERR_UNSUPPORTED, "backend reference does not run bert encoders");
    m->name = sy_gguf_dup_string(g, "general.name");
    uint32_t n_vocab = 0;
    sy_wordpiece *wp = vocabulary(g, &n_vocab);
    if (wp == NULL) return sy_cpu_last_status();
    m->vocab = wp;
    m->vocab_ops = &sy_cpu_wordpiece_vocab_ops;
    m->bos_token = sy_wordpiece_cls(wp);
    m->eos_token = sy_wordpiece_sep(wp);
    m->pad_token = sy_wordpiece_pad(wp);
    m->add_bos = m->bos_token >= 0;
    m->weights_mapped_bytes = sy_gguf_file_size(g);
    m->n_ctx_train = c.n_pos;
    if (opt->ctx_size) m->embd_ctx = opt->ctx_size;
    gb_both *both = calloc(1, sizeof *both);
    gb_format *f = calloc(1, sizeof *f);
    if (both == NULL || f == NULL) {
        free(both), free(f);
        return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    both->outer = m->format;
    both->outer_free = m->format_free;
    both->bert = f;
    m->format = both;
    m->format_free = both_free;
    sy_enc_weights w;
    st = bind(g, &c, n_vocab, f, &w);
    if (st != SY_OK) return st;
    gq_describe_weights(m, g);
    st = sy_cpu_model_start_encoder(m, &c, &w, opt);
    if (st != SY_OK) return st;
    static const char *const pool_names[] = {"none", "mean", "cls", "last", "rank"};
    sy_cpu_log(SY_LOG_INFO, "bert, %u layers, %s, pooling %s%s, inputs up to %u tokens", c.n_layer, m->weight_dtype,
               pool_names[c.pooling], c.normalize ? ", normalized" : "", m->embd_ctx ? m->embd_ctx : c.n_pos);
    return SY_OK;
}

sy_status gq_bert_estimate(const sy_gguf *g, const sy_cpu_options *opt, sy_resource_estimate *out) {
    (void)opt;
    sy_enc_config c;
    sy_status st = read_config(g, &c);
    if (st != SY_OK) return st;
    /* the F32 vectors and the scratch the encoder allocates, and the vocabulary (~32 bytes a token) */
    uint64_t E = c.n_embd, F = c.n_ff, R = SY_ENC_MAX_ROWS;
    uint64_t resident = 4 * (R * (6 * E + F) + c.n_layer * (9 * E + F)) + 32 * 32768ull;
    sy_resource_estimate e = {.struct_size = out->struct_size, .mapped_bytes = sy_gguf_file_size(g),
                              .resident_bytes = resident};
    memcpy(out, &e, out->struct_size < sizeof e ? out->struct_size : sizeof e);
    return SY_OK;
}
