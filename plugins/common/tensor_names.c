#include "tensor_names.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define L "model.layers.%u."
#define B "encoder.layer.%u."

/* One row per role: its name in each scheme (NULL: the scheme has no such tensor). Per-layer names hold one %u. */
static const char *const names[SY_TENSOR_ROLE_COUNT_][SY_TENSORS_SCHEME_COUNT_] = {
    /* role: {GGUF, HF qwen2 / qwen3 / llama, HF lfm2, HF bert} */
    [SY_TENSOR_TOKEN_EMBD] = {"token_embd.weight", "model.embed_tokens.weight", "model.embed_tokens.weight",
                              "embeddings.word_embeddings.weight"},
    [SY_TENSOR_OUTPUT_NORM] = {"output_norm.weight", "model.norm.weight", NULL},
    [SY_TENSOR_TOKEN_EMBD_NORM] = {"token_embd_norm.weight", NULL, "model.embedding_norm.weight",
                                   "embeddings.LayerNorm.weight"},
    [SY_TENSOR_OUTPUT] = {"output.weight", "lm_head.weight", "lm_head.weight"},
    [SY_TENSOR_ROPE_FREQS] = {"rope_freqs.weight", NULL, NULL},
    [SY_TENSOR_ATTN_NORM] = {"blk.%u.attn_norm.weight", L "input_layernorm.weight", L "operator_norm.weight"},
    [SY_TENSOR_ATTN_Q] = {"blk.%u.attn_q.weight", L "self_attn.q_proj.weight", L "self_attn.q_proj.weight",
                          B "attention.self.query.weight"},
    [SY_TENSOR_ATTN_Q_BIAS] = {"blk.%u.attn_q.bias", L "self_attn.q_proj.bias", NULL, B "attention.self.query.bias"},
    [SY_TENSOR_ATTN_K] = {"blk.%u.attn_k.weight", L "self_attn.k_proj.weight", L "self_attn.k_proj.weight",
                          B "attention.self.key.weight"},
    [SY_TENSOR_ATTN_K_BIAS] = {"blk.%u.attn_k.bias", L "self_attn.k_proj.bias", NULL, B "attention.self.key.bias"},
    [SY_TENSOR_ATTN_V] = {"blk.%u.attn_v.weight", L "self_attn.v_proj.weight", L "self_attn.v_proj.weight",
                          B "attention.self.value.weight"},
    [SY_TENSOR_ATTN_V_BIAS] = {"blk.%u.attn_v.bias", L "self_attn.v_proj.bias", NULL, B "attention.self.value.bias"},
    [SY_TENSOR_ATTN_OUTPUT] = {"blk.%u.attn_output.weight", L "self_attn.o_proj.weight", L "self_attn.out_proj.weight",
                               B "attention.output.dense.weight"},
    [SY_TENSOR_ATTN_OUTPUT_BIAS] = {"blk.%u.attn_output.bias", L "self_attn.o_proj.bias", NULL,
                                    B "attention.output.dense.bias"},
    [SY_TENSOR_ATTN_Q_NORM] = {"blk.%u.attn_q_norm.weight", L "self_attn.q_norm.weight",
                               L "self_attn.q_layernorm.weight"},
    [SY_TENSOR_ATTN_K_NORM] = {"blk.%u.attn_k_norm.weight", L "self_attn.k_norm.weight",
                               L "self_attn.k_layernorm.weight"},
    [SY_TENSOR_FFN_NORM] = {"blk.%u.ffn_norm.weight", L "post_attention_layernorm.weight", L "ffn_norm.weight"},
    [SY_TENSOR_FFN_GATE] = {"blk.%u.ffn_gate.weight", L "mlp.gate_proj.weight", L "feed_forward.w1.weight"},
    [SY_TENSOR_FFN_GATE_BIAS] = {"blk.%u.ffn_gate.bias", L "mlp.gate_proj.bias", NULL},
    [SY_TENSOR_FFN_UP] = {"blk.%u.ffn_up.weight", L "mlp.up_proj.weight", L "feed_forward.w3.weight",
                          B "intermediate.dense.weight"},
    [SY_TENSOR_FFN_UP_BIAS] = {"blk.%u.ffn_up.bias", L "mlp.up_proj.bias", NULL, B "intermediate.dense.bias"},
    [SY_TENSOR_FFN_DOWN] = {"blk.%u.ffn_down.weight", L "mlp.down_proj.weight", L "feed_forward.w2.weight",
                            B "output.dense.weight"},
    [SY_TENSOR_FFN_DOWN_BIAS] = {"blk.%u.ffn_down.bias", L "mlp.down_proj.bias", NULL, B "output.dense.bias"},
    [SY_TENSOR_CONV_IN] = {"blk.%u.shortconv.in_proj.weight", NULL, L "conv.in_proj.weight"},
    [SY_TENSOR_CONV_IN_BIAS] = {"blk.%u.shortconv.in_proj.bias", NULL, L "conv.in_proj.bias"},
    [SY_TENSOR_CONV_KERNEL] = {"blk.%u.shortconv.conv.weight", NULL, L "conv.conv.weight"},
    [SY_TENSOR_CONV_KERNEL_BIAS] = {"blk.%u.shortconv.conv.bias", NULL, L "conv.conv.bias"},
    [SY_TENSOR_CONV_OUT] = {"blk.%u.shortconv.out_proj.weight", NULL, L "conv.out_proj.weight"},
    [SY_TENSOR_CONV_OUT_BIAS] = {"blk.%u.shortconv.out_proj.bias", NULL, L "conv.out_proj.bias"},
    [SY_TENSOR_POS_EMBD] = {"position_embd.weight", NULL, NULL, "embeddings.position_embeddings.weight"},
    [SY_TENSOR_TOKEN_TYPES] = {"token_types.weight", NULL, NULL, "embeddings.token_type_embeddings.weight"},
    [SY_TENSOR_TOKEN_EMBD_NORM_BIAS] = {"token_embd_norm.bias", NULL, NULL, "embeddings.LayerNorm.bias"},
    [SY_TENSOR_CLS] = {"cls.weight", NULL, NULL, "pooler.dense.weight"},
    [SY_TENSOR_CLS_BIAS] = {"cls.bias", NULL, NULL, "pooler.dense.bias"},
    [SY_TENSOR_CLS_OUT] = {"cls.output.weight", NULL, NULL, "classifier.weight"},
    [SY_TENSOR_CLS_OUT_BIAS] = {"cls.output.bias", NULL, NULL, "classifier.bias"},
    [SY_TENSOR_ATTN_OUT_NORM] = {"blk.%u.attn_output_norm.weight", NULL, NULL, B "attention.output.LayerNorm.weight"},
    [SY_TENSOR_ATTN_OUT_NORM_BIAS] = {"blk.%u.attn_output_norm.bias", NULL, NULL, B "attention.output.LayerNorm.bias"},
    [SY_TENSOR_LAYER_OUT_NORM] = {"blk.%u.layer_output_norm.weight", NULL, NULL, B "output.LayerNorm.weight"},
    [SY_TENSOR_LAYER_OUT_NORM_BIAS] = {"blk.%u.layer_output_norm.bias", NULL, NULL, B "output.LayerNorm.bias"},
};

static const char *pattern(sy_tensor_scheme scheme, sy_tensor_role role) {
    if ((unsigned)scheme >= SY_TENSORS_SCHEME_COUNT_ || (unsigned)role >= SY_TENSOR_ROLE_COUNT_) return NULL;
    return names[role][scheme];
}

sy_tensor_scheme sy_tensor_scheme_of_hf(sy_hf_arch arch) {
    return arch == SY_HF_ARCH_LFM2 ? SY_TENSORS_HF_LFM2 : SY_TENSORS_HF_LLAMA;
}

bool sy_tensor_role_per_layer(sy_tensor_role role) {
    return (role >= SY_TENSOR_ATTN_NORM && role < SY_TENSOR_POS_EMBD) ||
           (role >= SY_TENSOR_ATTN_OUT_NORM && role < SY_TENSOR_ROLE_COUNT_);
}

const char *sy_tensor_name(sy_tensor_scheme scheme, sy_tensor_role role, uint32_t layer, char *buf, size_t size) {
    if (size > 0) buf[0] = '\0';
    const char *p = pattern(scheme, role);
    if (p == NULL || size == 0) return NULL;
    int n;
    if (sy_tensor_role_per_layer(role)) { /* the text around the pattern's one %u, and the number */
        const char *mark = strstr(p, "%u");
        n = snprintf(buf, size, "%.*s%" PRIu32 "%s", (int)(mark - p), p, layer, mark + 2);
    } else {
        n = snprintf(buf, size, "%s", p);
    }
    if (n < 0 || (size_t)n >= size) {
        buf[0] = '\0';
        return NULL;
    }
    return buf;
}

/* Decimal digits into *out, refusing values past UINT32_MAX (sscanf's %u would wrap them, or worse). */
static bool parse_layer(const char *s, uint32_t *out, size_t *used) {
    uint64_t v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > UINT32_MAX) return false;
    }
    *out = (uint32_t)v;
    *used = i;
    return i > 0;
}

bool sy_tensor_role_of(sy_tensor_scheme scheme, const char *name, sy_tensor_role *role, uint32_t *layer) {
    if (name == NULL) return false;
    for (int r = 0; r < SY_TENSOR_ROLE_COUNT_; r++) {
        const char *p = pattern(scheme, (sy_tensor_role)r);
        if (p == NULL) continue;
        uint32_t l = 0;
        if (sy_tensor_role_per_layer((sy_tensor_role)r)) {
            const char *mark = strstr(p, "%u");
            size_t prefix = (size_t)(mark - p);
            size_t used = 0;
            if (strncmp(name, p, prefix) != 0 || !parse_layer(name + prefix, &l, &used) ||
                strcmp(name + prefix + used, mark + 2) != 0)
                continue;
        } else if (strcmp(name, p) != 0) {
            continue;
        }
        *role = (sy_tensor_role)r;
        if (layer) *layer = l;
        return true;
    }
    return false;
}

bool sy_tensor_hf_ignored(const char *name) {
    static const char suffix[] = ".rotary_emb.inv_freq";
    const char *s = name ? strstr(name, suffix) : NULL;
    return s != NULL && s[sizeof suffix - 1] == '\0';
}
