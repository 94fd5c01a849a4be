/* What the CPU transformer core is given: the architecture row, the shapes (sy_tf_config) and the weights in
 * place, in their storage type. Its own module so that the layer kinds (transformer_lfm2.h) and the core
 * (transformer.h) both build on it without including each other. */
#ifndef SY_TRANSFORMER_WEIGHTS_H
#define SY_TRANSFORMER_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sy_dtype.h"
#include "sy_kernels.h"

#define SY_TF_MAX_BATCH 256    /* tokens per pass through the weights (bounds the scratch memory) */
#define SY_TF_MAX_HEAD_DIM 512

/* What distinguishes one architecture's forward pass from another's. */
typedef struct sy_tf_arch {
    const char *name;         /* "llama", "qwen2", "qwen3" (GGUF general.architecture) */
    sy_rope_style rope_style; /* llama: pairs (2i, 2i+1); qwen: pairs (i, i + d/2) */
    bool qkv_bias;            /* qwen2: q, k and v projections have a bias */
    bool qk_norm;             /* qwen3: RMSNorm over each head of q and k, before RoPE */
    bool short_conv;          /* lfm2: layers may be gated short convolutions (transformer_lfm2.h) */
} sy_tf_arch;

typedef struct sy_tf_config {
    const sy_tf_arch *arch;
    uint32_t n_vocab;
    uint32_t n_embd;    /* model width */
    uint32_t n_ff;      /* feed-forward width */
    uint32_t n_layer;
    uint32_t n_head;    /* query heads */
    uint32_t n_head_kv; /* key/value heads (GQA: divides n_head) */
    uint32_t head_dim;  /* per head, of q, k and v */
    uint32_t rope_dims; /* leading dimensions of each head that RoPE rotates (even, <= head_dim) */
    double rope_base;   /* theta, e.g. 10000 */
    double rope_scale;  /* linear position scaling: positions are divided by it (1 = none) */
    float rms_eps;
    uint32_t conv_kernel; /* short_conv architectures: kernel width of the causal convolution (lfm2 conv_L_cache) */
} sy_tf_config;

/* A weight matrix of rows x cols in place: row r starts at data + r * row_bytes. */
typedef struct sy_tf_matrix {
    const char *name; /* for messages, e.g. "blk.3.attn_q.weight" */
    const void *data;
    sy_dtype type;
    uint64_t rows, cols;
    size_t row_bytes;
} sy_tf_matrix;

/* A weight vector (norm weight, bias) in place; copied to F32 by sy_tf_create (they are tiny, and F32 keeps the
 * per-token loops simple). data NULL means absent. */
typedef struct sy_tf_vector {
    const char *name;
    const void *data;
    sy_dtype type;
    uint64_t n;
} sy_tf_vector;

/* What a layer does before its feed-forward block. */
typedef enum sy_tf_layer_kind {
    SY_TF_LAYER_ATTENTION = 0,
    SY_TF_LAYER_SHORT_CONV = 1, /* lfm2: y = out_proj(C * conv(B * x)) with B, C, x = in_proj(xn) */
} sy_tf_layer_kind;

typedef struct sy_tf_layer_weights {
    sy_tf_layer_kind kind;
    sy_tf_vector attn_norm;            /* [n_embd] (lfm2: operator_norm, for both layer kinds) */
    sy_tf_matrix wq, wk, wv;           /* [n_head*head_dim | n_head_kv*head_dim] x n_embd */
    sy_tf_vector bq, bk, bv;           /* biases, required by qkv_bias architectures, optional elsewhere */
    sy_tf_vector q_norm, k_norm;       /* [head_dim], qk_norm architectures */
    sy_tf_matrix wo;                   /* n_embd x n_head*head_dim */
    sy_tf_vector bo;                   /* optional [n_embd] */
    sy_tf_vector ffn_norm;             /* [n_embd] */
    sy_tf_matrix w_gate, w_up;         /* n_ff x n_embd */
    sy_tf_matrix w_down;               /* n_embd x n_ff */
    /* SY_TF_LAYER_SHORT_CONV layers instead of wq..bo: */
    sy_tf_matrix conv_in;              /* 3*n_embd x n_embd: rows [0,n) give B, [n,2n) C, [2n,3n) x */
    sy_tf_vector conv_in_bias;         /* optional [3*n_embd] */
    sy_tf_vector conv_kernel;          /* [n_embd * conv_kernel]: channel c's taps at c*conv_kernel, oldest first */
    sy_tf_vector conv_bias;            /* optional [n_embd] */
    sy_tf_matrix conv_out;             /* n_embd x n_embd */
    sy_tf_vector conv_out_bias;        /* optional [n_embd] */
} sy_tf_layer_weights;

typedef struct sy_tf_weights {
    sy_tf_matrix token_embd;   /* n_vocab x n_embd (rows are looked up) */
    sy_tf_vector output_norm;  /* [n_embd] */
    sy_tf_matrix output;       /* n_vocab x n_embd (the caller passes token_embd again when tied) */
    sy_tf_vector rope_freq_factors; /* optional [rope_dims/2]: inverse frequencies are divided by these */
    const sy_tf_layer_weights *layers; /* [n_layer] */
} sy_tf_weights;

/* One weight matrix: present, rows x cols, a type the matmul kernels take, rows long enough. fallback_name names
 * it in the message when the matrix has no name of its own. */
bool sy_tf_check_matrix(const sy_tf_matrix *w, const char *fallback_name, uint64_t rows, uint64_t cols, char *err,
                        size_t err_size);

#endif
