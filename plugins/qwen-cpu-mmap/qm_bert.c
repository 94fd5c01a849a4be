/* BERT-family checkpoints in qwen-cpu-mmap (qm_bert.h): config.json and the sentence-transformers files, the
 * tensors bound in place by their tensor_names.c roles (with BertFor*'s "bert." prefix where the file has it), the
 * WordPiece tokenizer, and the encoder core. */
#include "qm_bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "hf_vocab.h"
#include "tensor_names.h"
#include "tokenizer_wordpiece.h"

#define NAME_BYTES 128

typedef struct qb_format {
    sy_safetensors *st;
    sy_enc_layer_weights *layers;
    char prefix[8]; /* "" or "bert." */
} qb_format;

static void qb_format_free(void *p) {
    qb_format *f = p;
    if (f == NULL) return;
    sy_safetensors_close(f->st);
    free(f->layers);
    free(f);
}

/* The checkpoint's name of a role: the bert scheme's, after the prefix (the classifier has none). */
static const char *name_of(char buf[NAME_BYTES], const qb_format *f, sy_tensor_role role, uint32_t layer) {
    bool bare = role == SY_TENSOR_CLS_OUT || role == SY_TENSOR_CLS_OUT_BIAS;
    size_t pl = bare ? 0 : strlen(f->prefix);
    memcpy(buf, f->prefix, pl);
    sy_tensor_name(SY_TENSORS_HF_BERT, role, layer, buf + pl, NAME_BYTES - pl);
    return buf;
}

static bool bind_matrix(const qb_format *f, sy_tensor_role role, uint32_t l, uint64_t rows, uint64_t cols,
                        sy_tf_matrix *out) {
    char n[NAME_BYTES], err[400];
    uint64_t shape[2] = {rows, cols};
    const sy_safetensors_tensor *t =
        sy_safetensors_require_shape(f->st, name_of(n, f, role, l), 2, shape, err, sizeof err);
    if (t == NULL) {
        sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        return false;
    }
    *out = (sy_tf_matrix){t->name, t->data, (sy_dtype)t->dtype, rows, cols, sy_dtype_row_bytes(t->dtype, cols)};
    return true;
}

static bool bind_vector(const qb_format *f, sy_tensor_role role, uint32_t l, uint64_t n_el, sy_tf_vector *out) {
    char n[NAME_BYTES], err[400];
    const sy_safetensors_tensor *t = sy_safetensors_require_shape(f->st, name_of(n, f, role, l), 1, &n_el, err, sizeof err);
    if (t == NULL) {
        sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        return false;
    }
    *out = (sy_tf_vector){t->name, t->data, (sy_dtype)t->dtype, n_el};
    return true;
}

/* The encoder's config from config.json and the sentence-transformers files. */
static sy_status read_config(const char *dir, sy_bert_config *b, sy_st_pooling *p, sy_enc_config *c) {
    char err[400];
    if (!sy_bert_config_load(dir, b, err, sizeof err))
        return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    if (!sy_st_pooling_load(dir, SY_POOLING_MEAN, p, err, sizeof err))
        return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    *c = (sy_enc_config){
        .n_vocab = b->vocab_size,
        .n_embd = b->hidden_size,
        .n_ff = b->intermediate_size,
        .n_layer = b->num_hidden_layers,
        .n_head = b->num_attention_heads,
        .n_pos = b->max_position_embeddings,
        .n_types = b->type_vocab_size,
        .ln_eps = (float)b->layer_norm_eps,
        .pooling = b->classifier ? SY_POOLING_RANK : p->pooling,
        .normalize = !b->classifier && p->normalize,
    };
    if (c->pooling == SY_POOLING_LAST)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "last-token pooling of a BERT encoder is not supported");
    return SY_OK;
}

static sy_status bind_weights(qb_format *f, const sy_bert_config *b, const sy_enc_config *c, sy_enc_weights *w) {
    memset(w, 0, sizeof *w);
    snprintf(f->prefix, sizeof f->prefix, "%s",
             sy_safetensors_find(f->st, "bert.embeddings.word_embeddings.weight") ? "bert." : "");
    const uint64_t E = c->n_embd, F = c->n_ff;
    if (!bind_matrix(f, SY_TENSOR_TOKEN_EMBD, 0, c->n_vocab, E, &w->token_embd) ||
        !bind_matrix(f, SY_TENSOR_POS_EMBD, 0, c->n_pos, E, &w->pos_embd) ||
        (c->n_types > 0 && !bind_matrix(f, SY_TENSOR_TOKEN_TYPES, 0, c->n_types, E, &w->type_embd)) ||
        !bind_vector(f, SY_TENSOR_TOKEN_EMBD_NORM, 0, E, &w->embd_ln_w) ||
        !bind_vector(f, SY_TENSOR_TOKEN_EMBD_NORM_BIAS, 0, E, &w->embd_ln_b))
        return SY_ERR_FORMAT;
    if (b->classifier &&
        (!bind_matrix(f, SY_TENSOR_CLS, 0, E, E, &w->pooler) || !bind_vector(f, SY_TENSOR_CLS_BIAS, 0, E, &w->pooler_b) ||
         !bind_matrix(f, SY_TENSOR_CLS_OUT, 0, b->n_labels, E, &w->classifier) ||
         !bind_vector(f, SY_TENSOR_CLS_OUT_BIAS, 0, b->n_labels, &w->classifier_b)))
        return SY_ERR_FORMAT;
    f->layers = calloc(c->n_layer, sizeof *f->layers);
    if (f->layers == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t l = 0; l < c->n_layer; l++) {
        sy_enc_layer_weights *L = &f->layers[l];
        if (!bind_matrix(f, SY_TENSOR_ATTN_Q, l, E, E, &L->wq) || !bind_vector(f, SY_TENSOR_ATTN_Q_BIAS, l, E, &L->bq) ||
            !bind_matrix(f, SY_TENSOR_ATTN_K, l, E, E, &L->wk) || !bind_vector(f, SY_TENSOR_ATTN_K_BIAS, l, E, &L->bk) ||
            !bind_matrix(f, SY_TENSOR_ATTN_V, l, E, E, &L->wv) || !bind_vector(f, SY_TENSOR_ATTN_V_BIAS, l, E, &L->bv) ||
            !bind_matrix(f, SY_TENSOR_ATTN_OUTPUT, l, E, E, &L->wo) ||
            !bind_vector(f, SY_TENSOR_ATTN_OUTPUT_BIAS, l, E, &L->bo) ||
            !bind_vector(f, SY_TENSOR_ATTN_OUT_NORM, l, E, &L->attn_ln_w) ||
            !bind_vector(f, SY_TENSOR_ATTN_OUT_NORM_BIAS, l, E, &L->attn_ln_b) ||
            !bind_matrix(f, SY_TENSOR_FFN_UP, l, F, E, &L->w_up) || !bind_vector(f, SY_TENSOR_FFN_UP_BIAS, l, F, &L->b_up) ||
            !bind_matrix(f, SY_TENSOR_FFN_DOWN, l, E, F, &L->w_down) ||
            !bind_vector(f, SY_TENSOR_FFN_DOWN_BIAS, l, E, &L->b_down) ||
            !bind_vector(f, SY_TENSOR_LAYER_OUT_NORM, l, E, &L->ffn_ln_w) ||
            !bind_vector(f, SY_TENSOR_LAYER_OUT_NORM_BIAS, l, E, &L->ffn_ln_b))
            return SY_ERR_FORMAT;
    }
    w->layers = f->layers;
    return SY_OK;
}

sy_status qm_bert_probe(const char *path) {
    sy_bert_config b;
    sy_st_pooling p;
    sy_enc_config c;
    sy_status st = read_config(path, &b, &p, &c);
    return st == SY_OK ? SY_OK : sy_cpu_fail_prefix(path);
}

static sy_status build(sy_model *m, const char *dir, const sy_cpu_options *opt) {
    sy_bert_config b;
    sy_st_pooling p;
    sy_enc_config c;
    sy_status st = read_config(dir, &b, &p, &c);
    if (st != SY_OK) return st;
    if (opt->backend == SY_CPU_BACKEND_REFERENCE)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "backend reference does not run bert encoders");
    qb_format *f = calloc(1, sizeof *f);
    if (f == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    m->format = f;
    m->format_free = qb_format_free;
    m->architecture = strdup("bert");
    m->name = qm_dir_name(dir);
    if (m->architecture == NULL || m->name == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    m->n_ctx_train = b.max_position_embeddings;
    /* sentence-transformers cuts inputs at max_seq_length; a context asked for explicitly may lower it */
    m->embd_ctx = p.max_seq_length;
    if (opt->ctx_size && (m->embd_ctx == 0 || opt->ctx_size < m->embd_ctx)) m->embd_ctx = opt->ctx_size;

    char err[400];
    m->vocab = sy_cpu_wordpiece_load(dir, err, sizeof err);
    if (m->vocab == NULL) return sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
    m->vocab_ops = &sy_cpu_wordpiece_vocab_ops;
    if (sy_wordpiece_vocab_size(m->vocab) > c.n_vocab)
        return sy_cpu_fail(SY_ERR_FORMAT, "tokenizer.json has %u tokens, the model's embedding %u rows",
                           sy_wordpiece_vocab_size(m->vocab), c.n_vocab);
    m->bos_token = sy_wordpiece_cls(m->vocab);
    m->eos_token = sy_wordpiece_sep(m->vocab);
    m->pad_token = sy_wordpiece_pad(m->vocab);
    m->add_bos = m->bos_token >= 0;

    f->st = sy_safetensors_open(dir, err, sizeof err);
    if (f->st == NULL) return sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
    m->weights_mapped_bytes = sy_safetensors_mapped_bytes(f->st);
    sy_enc_weights w;
    st = bind_weights(f, &b, &c, &w);
    if (st != SY_OK) return st;

    char *config_path = qm_path_in(dir, "config.json");
    size_t config_len = 0;
    char *config_json =
        config_path ? sy_hf_read_file(config_path, SY_HF_MAX_CONFIG_BYTES, &config_len, err, sizeof err) : NULL;
    free(config_path);
    if (config_json == NULL) return sy_cpu_fail(SY_ERR_IO, "%s", err);
    qm_describe_weights(m, f->st, config_json, config_len);
    free(config_json);

    st = sy_cpu_model_start_encoder(m, &c, &w, opt);
    if (st != SY_OK) return st;
    static const char *const pool_names[] = {"none", "mean", "cls", "last", "rank"};
    sy_cpu_log(SY_LOG_INFO, "bert (%s), %u layers, %s, %.1f MB mapped, pooling %s%s, inputs up to %u tokens",
               b.architecture, c.n_layer, m->weight_dtype, (double)m->weights_mapped_bytes / 1e6, pool_names[c.pooling],
               c.normalize ? ", normalized" : "", m->embd_ctx ? m->embd_ctx : c.n_pos);
    return SY_OK;
}

sy_status qm_bert_load(const char *path, const sy_cpu_options *opt, sy_model **out) {
    if (qm_bert_probe(path) != SY_OK) return sy_cpu_last_status();
    sy_model *m = sy_cpu_model_new();
    if (m == NULL) return SY_ERR_OUT_OF_MEMORY;
    sy_status st = build(m, path, opt);
    if (st != SY_OK) {
        if (strncmp(sy_cpu_error_message(), path, strlen(path)) != 0) sy_cpu_fail_prefix(path);
        sy_cpu_unload(m);
        return st;
    }
    *out = m;
    return SY_OK;
}

sy_status qm_bert_estimate(const char *path, const sy_cpu_options *opt, sy_resource_estimate *out) {
    sy_bert_config b;
    sy_st_pooling p;
    sy_enc_config c;
    sy_status st = read_config(path, &b, &p, &c);
    char err[400];
    qb_format f = {0};
    if (st == SY_OK) {
        f.st = sy_safetensors_open(path, err, sizeof err);
        if (f.st == NULL) st = sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
    }
    sy_enc_weights w;
    if (st == SY_OK) st = bind_weights(&f, &b, &c, &w);
    if (st == SY_OK) {
        /* built on one thread, as the load builds it: vectors and scratch are what it allocates */
        sy_enc_model *enc = sy_enc_create(&c, &w, 1, err, sizeof err);
        if (enc == NULL) st = sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        sy_resource_estimate e = {
            .struct_size = out->struct_size,
            .mapped_bytes = sy_safetensors_mapped_bytes(f.st),
            /* the vocabulary: about its token text, ids and hash slots */
            .resident_bytes = (enc ? sy_enc_memory(enc) : 0) + (uint64_t)c.n_vocab * 32,
        };
        sy_enc_destroy(enc);
        if (st == SY_OK) memcpy(out, &e, out->struct_size < sizeof e ? out->struct_size : sizeof e);
    }
    (void)opt;
    if (st != SY_OK && strncmp(sy_cpu_error_message(), path, strlen(path)) != 0) sy_cpu_fail_prefix(path);
    sy_safetensors_close(f.st);
    free(f.layers);
    return st;
}
