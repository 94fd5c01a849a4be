/* "sy.engine.embed/1" of the CPU engines (cpu_engine.h): encoders (encoder.h) pool inside the core; decoder
 * embedding models run the transformer core for the last hidden state of each input. Plus the WordPiece vocabulary
 * for sy_cpu_vocab_ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_engine.h"
#include "hf_config.h"
#include "tokenizer_wordpiece.h"

#define EMBED_STACK_INPUTS 64
#define WP_MAX_FILE (64u * 1024u * 1024u)

/* ---- the model ---- */

sy_status sy_cpu_model_start_encoder(sy_model *m, const sy_enc_config *cfg, const sy_enc_weights *w,
                                     const sy_cpu_options *opt) {
    char err[400];
    m->enc = sy_enc_create(cfg, w, opt->threads, err, sizeof err);
    if (m->enc == NULL) return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    m->pooling = cfg->pooling;
    m->embd_normalize = cfg->normalize;
    m->no_generate = true;
    return SY_OK;
}

sy_status sy_cpu_encoder_info(const sy_model *m, sy_model_info *out) {
    const sy_enc_config *c = sy_enc_model_config(m->enc);
    uint32_t n_ctx = sy_enc_n_ctx(m->enc);
    if (m->embd_ctx > 0 && m->embd_ctx < n_ctx) n_ctx = m->embd_ctx;
    sy_model_info info = {
        .struct_size = out->struct_size,
        .architecture = m->architecture ? m->architecture : "",
        .name = m->name ? m->name : "",
        .weight_dtype = m->weight_dtype,
        .fingerprint = m->fingerprint,
        .chat_template = NULL,
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
        .max_rollback = 0,
        .max_decode_tokens = 0,
        .capabilities = (c->pooling == SY_POOLING_RANK ? SY_CAP_RERANK : SY_CAP_EMBED) | SY_CAP_NO_GENERATE,
        .pooling = c->pooling,
        .n_embd_out = sy_enc_out_dim(m->enc),
        .embd_normalized = c->normalize,
    };
    memcpy(out, &info, out->struct_size < sizeof info ? out->struct_size : sizeof info);
    return SY_OK;
}

/* ---- embed and score ---- */

static sy_status check_batch(const sy_model *m, const sy_embed_batch *b) {
    if (m == NULL || b == NULL || (b->n_inputs > 0 && (b->inputs == NULL || b->out == NULL)) ||
        (b->n_inputs > 0 && b->input_size < offsetof(sy_embed_input, n_tokens) + sizeof(uint32_t)))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "embed: bad batch");
    return SY_OK;
}

/* The batch's inputs as the encoder takes them (token_types only where the host's struct has them). */
static sy_enc_input *enc_inputs(const sy_embed_batch *b, sy_enc_input *stack) {
    sy_enc_input *in = b->n_inputs <= EMBED_STACK_INPUTS ? stack : calloc(b->n_inputs, sizeof *in);
    if (in == NULL) return NULL;
    for (uint32_t i = 0; i < b->n_inputs; i++) {
        const sy_embed_input *e = sy_embed_batch_input(b, i);
        bool has_types = b->input_size >= offsetof(sy_embed_input, token_types) + sizeof(int32_t *);
        in[i] = (sy_enc_input){e->tokens, has_types ? e->token_types : NULL, e->n_tokens};
    }
    return in;
}

static sy_status run_encoder(sy_model *m, const sy_embed_batch *b) {
    sy_enc_input stack[EMBED_STACK_INPUTS];
    sy_enc_input *in = enc_inputs(b, stack);
    if (in == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "embed: out of memory");
    /* the longest input sentence-transformers would take; the host truncates to model_info's n_ctx */
    uint32_t limit = m->embd_ctx ? m->embd_ctx : sy_enc_n_ctx(m->enc);
    sy_status st = SY_OK;
    char err[300];
    for (uint32_t i = 0; i < b->n_inputs && st == SY_OK; i++)
        if (in[i].n_tokens > limit)
            st = sy_cpu_fail(SY_ERR_CONTEXT_FULL, "embed: input %u has %u tokens, more than the %u the model takes", i,
                             in[i].n_tokens, limit);
    if (st == SY_OK) {
        bool has_call = b->struct_size >= offsetof(sy_embed_batch, call) + sizeof(void *) && b->call != NULL;
        st = sy_enc_run(m->enc, in, b->n_inputs, b->out, has_call ? sy_cpu_host_cancelled : NULL,
                        has_call ? (void *)b->call : NULL, err, sizeof err);
        if (st != SY_OK) sy_cpu_fail(st, "embed: %s", err);
    }
    if (in != stack) free(in);
    return st;
}

/* A decoder embedding model: each input through the transformer core as a fresh sequence, its last position's
 * final-norm hidden state pooled (LAST) and normalized as configured. */
static sy_status run_decoder(sy_model *m, const sy_embed_batch *b) {
    if (m->tf == NULL) return sy_cpu_fail(SY_ERR_UNSUPPORTED, "embed: the reference backend does not embed");
    const sy_tf_config *c = sy_tf_model_config(m->tf);
    uint32_t limit = m->embd_ctx ? m->embd_ctx : sy_tf_n_ctx(m->tf);
    char err[300];
    for (uint32_t i = 0; i < b->n_inputs; i++) {
        const sy_embed_input *e = sy_embed_batch_input(b, i);
        if (e->n_tokens == 0 || e->tokens == NULL)
            return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "embed: input %u is empty", i);
        if (e->n_tokens > limit)
            return sy_cpu_fail(SY_ERR_CONTEXT_FULL, "embed: input %u has %u tokens, more than the %u the model takes",
                               i, e->n_tokens, limit);
    }
    sy_tf_seq **seqs = calloc(b->n_inputs ? b->n_inputs : 1, sizeof *seqs);
    sy_tf_batch_item *items = calloc(b->n_inputs ? b->n_inputs : 1, sizeof *items);
    sy_status st = seqs && items ? SY_OK : sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "embed: out of memory");
    for (uint32_t i = 0; i < b->n_inputs && st == SY_OK; i++) {
        const sy_embed_input *e = sy_embed_batch_input(b, i);
        seqs[i] = sy_tf_seq_create(m->tf);
        if (seqs[i] == NULL) st = sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "embed: out of memory");
        items[i] = (sy_tf_batch_item){seqs[i], e->tokens, e->n_tokens, 1, NULL, b->out + (size_t)i * c->n_embd};
    }
    if (st == SY_OK) {
        bool has_call = b->call != NULL;
        st = sy_tf_decode(m->tf, items, b->n_inputs, has_call ? sy_cpu_host_cancelled : NULL,
                          has_call ? (void *)b->call : NULL, err, sizeof err);
        if (st != SY_OK) sy_cpu_fail(st, "embed: %s", err);
    }
    for (uint32_t i = 0; seqs && i < b->n_inputs; i++) sy_tf_seq_free(m->tf, seqs[i]);
    free(seqs);
    free(items);
    if (st == SY_OK && m->embd_normalize)
        for (uint32_t i = 0; i < b->n_inputs; i++) {
            float *o = b->out + (size_t)i * c->n_embd;
            double ss = 0;
            for (uint32_t d = 0; d < c->n_embd; d++) ss += (double)o[d] * o[d];
            float inv = (float)(1.0 / fmax(sqrt(ss), 1e-12));
            for (uint32_t d = 0; d < c->n_embd; d++) o[d] *= inv;
        }
    return st;
}

static sy_status cpu_embed(sy_model *m, const sy_embed_batch *b) {
    sy_status st = check_batch(m, b);
    if (st != SY_OK) return st;
    if (m->enc && m->pooling != SY_POOLING_RANK) return run_encoder(m, b);
    if (!m->enc && m->pooling == SY_POOLING_LAST) return run_decoder(m, b);
    return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s is not an embedding model", m->name ? m->name : "this model");
}

static sy_status cpu_score(sy_model *m, const sy_embed_batch *b) {
    sy_status st = check_batch(m, b);
    if (st != SY_OK) return st;
    if (m->enc && m->pooling == SY_POOLING_RANK) return run_encoder(m, b);
    return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s is not a reranking model", m->name ? m->name : "this model");
}

static sy_status cpu_tokenize_pair(const sy_model *m, const char *a, size_t a_len, const char *b, size_t b_len,
                                   int32_t *tokens, int32_t *types, size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (a == NULL && a_len) || (b == NULL && b_len) || (tokens == NULL && capacity))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "tokenize_pair: bad arguments");
    if (m->vocab_ops->tokenize_pair == NULL)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "tokenize_pair: this model's tokenizer has no pair template");
    char err[256] = "";
    sy_status st = m->vocab_ops->tokenize_pair(m->vocab, a ? a : "", a_len, b ? b : "", b_len, tokens, types, capacity,
                                               n_out, err, sizeof err);
    return st == SY_OK ? SY_OK : sy_cpu_fail(st, "tokenize_pair: %s", err);
}

const sy_engine_embed_api sy_cpu_embed_api = {
    .struct_size = sizeof(sy_engine_embed_api),
    .embed = cpu_embed,
    .score = cpu_score,
    .tokenize_pair = cpu_tokenize_pair,
};

/* ---- the WordPiece vocabulary ---- */

static sy_status wp_tokenize(const void *v, const char *text, size_t len, uint32_t flags, int32_t *out, size_t cap,
                             size_t *n_out, char *err, size_t err_size) {
    return sy_wordpiece_encode(v, text, len, flags, out, cap, n_out, err, err_size);
}

static sy_status wp_token_bytes(const void *v, int32_t id, char *out, size_t cap, size_t *n_out) {
    size_t len;
    const char *t = sy_wordpiece_token_text(v, id, &len);
    if (t == NULL) return SY_ERR_INVALID_ARGUMENT;
    *n_out = len;
    if (len > cap) return SY_ERR_BUFFER_TOO_SMALL;
    memcpy(out, t, len);
    return SY_OK;
}

static uint32_t wp_token_flags(const void *v, int32_t id) {
    if (sy_wordpiece_token_text(v, id, NULL) == NULL) return SY_TOKEN_UNUSED;
    return sy_wordpiece_is_special(v, id) ? SY_TOKEN_CONTROL : SY_TOKEN_NORMAL;
}

static uint64_t wp_memory(const void *v) { return sy_wordpiece_memory(v); }
static void wp_free(void *v) { sy_wordpiece_free(v); }

static sy_status wp_pair(const void *v, const char *a, size_t a_len, const char *b, size_t b_len, int32_t *out,
                         int32_t *types, size_t cap, size_t *n_out, char *err, size_t err_size) {
    return sy_wordpiece_encode_pair(v, a, a_len, b, b_len, out, types, cap, n_out, err, err_size);
}

const sy_cpu_vocab_ops sy_cpu_wordpiece_vocab_ops = {
    .tokenize = wp_tokenize,
    .token_bytes = wp_token_bytes,
    .token_flags = wp_token_flags,
    .memory = wp_memory,
    .free = wp_free,
    .tokenize_pair = wp_pair,
};

void *sy_cpu_wordpiece_load(const char *dir, char *err, size_t err_size) {
    size_t n = strlen(dir) + 32, len = 0;
    char *path = malloc(n);
    if (path == NULL) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    snprintf(path, n, "%s/tokenizer.json", dir);
    char *json = sy_hf_read_file(path, WP_MAX_FILE, &len, err, err_size);
    free(path);
    if (json == NULL) return NULL;
    sy_wordpiece *wp = sy_wordpiece_from_json(json, len, err, err_size);
    free(json);
    return wp;
}
