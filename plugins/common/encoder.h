/* The CPU encoder core: BERT-family transformers (BertModel as all-MiniLM-L6-v2, bge-small and the like use it) over
 * weights in place, in their storage type, through the kernels/cpu tiers. Read encoder.c top to bottom.
 *
 *   x = LayerNorm(word[token] + position[p] + token_type[type])          absolute positions from 0 per input
 *   per layer: x = LayerNorm(x + Wo·attention(Wq·x+bq, Wk·x+bk, Wv·x+bv) + bo)   bidirectional, within one input
 *              x = LayerNorm(x + W2·gelu(W1·x + b1) + b2)                post-LayerNorm, exact (erf) GELU
 *   pooled = mean over the input's tokens | x[first] (CLS) | x[last]; L2-normalized when asked
 *   score (rerankers, BertForSequenceClassification) = Wc·tanh(Wp·x[first] + bp) + bc, its first output
 *
 * Shapes as in transformer_weights.h (a matrix of rows x cols maps cols inputs to rows outputs). No state outlives
 * a call: inputs are independent, and one call runs any number of them, their tokens together through every matrix.
 * Threading: one call at a time per model (the engine ABI's serial calls); the model uses its own worker threads.
 */
#ifndef SY_ENCODER_H
#define SY_ENCODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>

#include "transformer_weights.h"

#define SY_ENC_MAX_ROWS 1024 /* the longest input (its rows go through the weights together) */

typedef struct sy_enc_config {
    uint32_t n_vocab, n_embd, n_ff, n_layer, n_head;
    uint32_t n_pos;   /* rows of the position embedding (max_position_embeddings) */
    uint32_t n_types; /* rows of the token-type embedding (type_vocab_size; 0: none) */
    float ln_eps;
    sy_pooling pooling; /* MEAN, CLS, LAST or RANK */
    bool normalize;     /* L2-normalize the pooled vector */
} sy_enc_config;

typedef struct sy_enc_layer_weights {
    sy_tf_matrix wq, wk, wv, wo; /* n_embd x n_embd */
    sy_tf_vector bq, bk, bv, bo;
    sy_tf_vector attn_ln_w, attn_ln_b; /* after attention (BertSelfOutput.LayerNorm) */
    sy_tf_matrix w_up;                 /* n_ff x n_embd (BertIntermediate) */
    sy_tf_vector b_up;
    sy_tf_matrix w_down;               /* n_embd x n_ff (BertOutput) */
    sy_tf_vector b_down;
    sy_tf_vector ffn_ln_w, ffn_ln_b;
} sy_enc_layer_weights;

typedef struct sy_enc_weights {
    sy_tf_matrix token_embd; /* n_vocab x n_embd, rows looked up */
    sy_tf_matrix pos_embd;   /* n_pos x n_embd */
    sy_tf_matrix type_embd;  /* n_types x n_embd; absent (data NULL) when n_types is 0 */
    sy_tf_vector embd_ln_w, embd_ln_b;
    const sy_enc_layer_weights *layers; /* [n_layer] */
    /* RANK only: the pooler (n_embd x n_embd, tanh) and the classifier (n_labels x n_embd; output 0 is the score) */
    sy_tf_matrix pooler, classifier;
    sy_tf_vector pooler_b, classifier_b;
} sy_enc_weights;

typedef struct sy_enc_model sy_enc_model;

/* Checks every shape and type against the config and builds the model (vectors copied to F32, matrices referenced;
 * they must outlive it). NULL with one line in err (naming the tensor). */
sy_enc_model *sy_enc_create(const sy_enc_config *cfg, const sy_enc_weights *w, uint32_t n_threads, char *err,
                            size_t err_size);
void sy_enc_destroy(sy_enc_model *m);
const sy_enc_config *sy_enc_model_config(const sy_enc_model *m);
/* The longest input (the position table, at most SY_ENC_MAX_ROWS). */
uint32_t sy_enc_n_ctx(const sy_enc_model *m);
/* Anonymous bytes held (F32 vectors, scratch). any-thread. */
uint64_t sy_enc_memory(const sy_enc_model *m);
/* Floats of one output: n_embd, or 1 for RANK. */
uint32_t sy_enc_out_dim(const sy_enc_model *m);

typedef struct sy_enc_input {
    const int32_t *tokens;
    const int32_t *types; /* NULL: all 0 */
    uint32_t n_tokens;    /* 1 .. sy_enc_n_ctx */
} sy_enc_input;

/* Returns nonzero when the caller wants the call to stop (checked between layers). */
typedef int (*sy_enc_cancel_fn)(void *ctx);

/* out: n_inputs rows of sy_enc_out_dim floats. SY_ERR_INVALID_ARGUMENT (token or type out of range, empty input),
 * SY_ERR_CONTEXT_FULL (an input too long), SY_ERR_CANCELLED, SY_ERR_INTERNAL; err says which input. */
sy_status sy_enc_run(sy_enc_model *m, const sy_enc_input *inputs, size_t n_inputs, float *out, sy_enc_cancel_fn cancel,
                     void *cancel_ctx, char *err, size_t err_size);

#endif
