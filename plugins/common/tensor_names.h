/* Tensor names: what each weight of a model is called in GGUF (llama.cpp's names) and in Hugging Face
 * checkpoints, in one table, so that the quantizer (which converts one into the other) and the engines (which
 * look tensors up by name) cannot disagree.
 *
 * A tensor has a role (the token embedding, layer l's query projection, ...) and a name per naming scheme.
 * GGUF names one role the same way in every architecture ("blk.3.attn_q.weight"); Hugging Face names differ by
 * model family: qwen2, qwen3 and llama share LlamaForCausalLM's names ("model.layers.3.self_attn.o_proj.weight"),
 * lfm2 has its own ("model.layers.3.self_attn.out_proj.weight", "operator_norm", "feed_forward.w1", ...).
 * A scheme may lack a role (lfm2 has no q_proj bias): then it has no name there.
 *
 * Pure lookups over constant data: thread-safe, no allocation. */
#ifndef SY_TENSOR_NAMES_H
#define SY_TENSOR_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hf_config.h"

typedef enum sy_tensor_scheme {
    SY_TENSORS_GGUF = 0,     /* llama.cpp's names, for every architecture */
    SY_TENSORS_HF_LLAMA,     /* Hugging Face qwen2, qwen3, llama */
    SY_TENSORS_HF_LFM2,      /* Hugging Face lfm2 */
    SY_TENSORS_HF_BERT,      /* Hugging Face bert (BertModel's names; BertFor* checkpoints add "bert." before all but
                              * the classifier's) */
    SY_TENSORS_SCHEME_COUNT_ /* not a scheme */
} sy_tensor_scheme;

typedef enum sy_tensor_role {
    /* of the whole model */
    SY_TENSOR_TOKEN_EMBD = 0,
    SY_TENSOR_OUTPUT_NORM,     /* the final norm (qwen, llama) */
    SY_TENSOR_TOKEN_EMBD_NORM, /* lfm2's final norm (applied after the layers despite the name) */
    SY_TENSOR_OUTPUT,          /* the LM head; absent from files with tied embeddings */
    SY_TENSOR_ROPE_FREQS,      /* Llama 3 RoPE frequency factors (GGUF only: HF computes them from config.json) */
    /* of each layer */
    SY_TENSOR_ATTN_NORM,
    SY_TENSOR_ATTN_Q,
    SY_TENSOR_ATTN_Q_BIAS,
    SY_TENSOR_ATTN_K,
    SY_TENSOR_ATTN_K_BIAS,
    SY_TENSOR_ATTN_V,
    SY_TENSOR_ATTN_V_BIAS,
    SY_TENSOR_ATTN_OUTPUT,
    SY_TENSOR_ATTN_OUTPUT_BIAS,
    SY_TENSOR_ATTN_Q_NORM,
    SY_TENSOR_ATTN_K_NORM,
    SY_TENSOR_FFN_NORM,
    SY_TENSOR_FFN_GATE,
    SY_TENSOR_FFN_GATE_BIAS,
    SY_TENSOR_FFN_UP,
    SY_TENSOR_FFN_UP_BIAS,
    SY_TENSOR_FFN_DOWN,
    SY_TENSOR_FFN_DOWN_BIAS,
    SY_TENSOR_CONV_IN,        /* lfm2 short convolution: in_proj */
    SY_TENSOR_CONV_IN_BIAS,
    SY_TENSOR_CONV_KERNEL,    /* the depthwise kernel */
    SY_TENSOR_CONV_KERNEL_BIAS,
    SY_TENSOR_CONV_OUT,       /* out_proj */
    SY_TENSOR_CONV_OUT_BIAS,
    /* BERT-family encoders: of the whole model */
    SY_TENSOR_POS_EMBD,             /* absolute position embedding */
    SY_TENSOR_TOKEN_TYPES,          /* token type (segment) embedding */
    SY_TENSOR_TOKEN_EMBD_NORM_BIAS, /* the embeddings' LayerNorm bias (its weight is TOKEN_EMBD_NORM) */
    SY_TENSOR_CLS,                  /* the pooler over [CLS] (dense + tanh) */
    SY_TENSOR_CLS_BIAS,
    SY_TENSOR_CLS_OUT,              /* the sequence classifier */
    SY_TENSOR_CLS_OUT_BIAS,
    /* of each layer */
    SY_TENSOR_ATTN_OUT_NORM,        /* post-attention LayerNorm */
    SY_TENSOR_ATTN_OUT_NORM_BIAS,
    SY_TENSOR_LAYER_OUT_NORM,       /* post-feed-forward LayerNorm */
    SY_TENSOR_LAYER_OUT_NORM_BIAS,
    SY_TENSOR_ROLE_COUNT_     /* not a role */
} sy_tensor_role;

/* The Hugging Face scheme of an architecture. */
sy_tensor_scheme sy_tensor_scheme_of_hf(sy_hf_arch arch);

/* Whether a role names one tensor per layer (its names then hold the layer number). */
bool sy_tensor_role_per_layer(sy_tensor_role role);

/* Writes the name of a role in a scheme into buf (layer is ignored for roles of the whole model). Returns buf, or
 * NULL with buf "" (when size > 0) when the scheme has no such tensor, the arguments are out of range, or the name
 * does not fit; an empty name is found in no file, so a caller that only looks it up needs no check. */
const char *sy_tensor_name(sy_tensor_scheme scheme, sy_tensor_role role, uint32_t layer, char *buf, size_t size);

/* The role (and, for a per-layer role, the layer) of a tensor name in a scheme. A layer number is decimal digits
 * up to UINT32_MAX (no sign, no spaces). Returns false for a name the scheme does not have. */
bool sy_tensor_role_of(sy_tensor_scheme scheme, const char *name, sy_tensor_role *role, uint32_t *layer);

/* Whether a Hugging Face tensor is a buffer that no engine reads and GGUF does not store (rotary_emb.inv_freq,
 * which every engine recomputes from config.json). */
bool sy_tensor_hf_ignored(const char *name);

#endif
