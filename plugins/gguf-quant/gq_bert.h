/* gguf-quant's BERT-family encoders (general.architecture "bert", as llama.cpp's converter writes them): the
 * bert.* metadata (bert.pooling_type: 1 mean, 2 cls, 4 rank; bert.attention.layer_norm_epsilon, ...), llama.cpp's
 * tensor names (token_embd, position_embd, token_types, token_embd_norm, blk.N.attn_output_norm,
 * blk.N.layer_output_norm, cls, cls.output), and the WordPiece vocabulary from tokenizer.ggml.tokens in the
 * converter's phantom-space spelling ("▁word" starts a word, a bare piece continues one). Vectors are
 * L2-normalized, as llama-server normalizes them by default (GGUF keeps no Normalize module). */
#ifndef GQ_BERT_H
#define GQ_BERT_H

#include "cpu_engine.h"
#include "gguf.h"

sy_status gq_bert_build(sy_model *m, const sy_gguf *g, const sy_cpu_options *opt);
sy_status gq_bert_estimate(const sy_gguf *g, const sy_cpu_options *opt, sy_resource_estimate *out);

/* from gguf_quant.c */
bool gq_get_matrix(const sy_gguf *g, const char *name, bool required, sy_tf_matrix *out);
bool gq_get_vector(const sy_gguf *g, const char *name, sy_tf_vector *out);
void gq_describe_weights(sy_model *m, const sy_gguf *g);

#endif
