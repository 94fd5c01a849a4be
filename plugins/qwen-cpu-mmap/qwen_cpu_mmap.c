/* qwen-cpu-mmap: Hugging Face checkpoints (a directory with config.json, model.safetensors or a sharded index,
 * tokenizer.json, tokenizer_config.json, generation_config.json) on the CPU, zero-copy.
 *
 * The safetensors files are mapped read-only and every projection is used in place in its stored type (BF16,
 * F16 or F32) by the transformer core's kernels: nothing is converted or copied but the norm weights and biases
 * (vectors, copied to F32). The embedding is read one row per token, and with tied embeddings the logits come
 * from the same mapped matrix.
 *
 * BERT-family encoders (model_type bert: embedding models and rerankers) load through qm_bert.c.
 *
 * Architectures (config.json model_type): qwen2 (q/k/v biases, tied or untied), qwen3 (q/k RMSNorm, head_dim of
 * its own, optional attention biases), llama (GQA, optional attention biases, default / linear / llama3 RoPE),
 * lfm2 (layer_types mixes gated short convolutions and attention with q/k RMSNorm; final norm embedding_norm).
 * Every tensor is checked against the config by name and shape before use; anything else (another model_type,
 * mlp_bias, yarn RoPE, a sliding window, ...) is refused with a message naming it (hf_config.h refuses most).
 *
 * Options: those of cpu_engine.h (threads, ctx_size, backend, kv_cache_dir, kv_max_tokens, kv_buffer_mb,
 * keep_kv_cache).
 *
 * Fingerprint (model_info): XXH3-128, hex, over sy_safetensors_fingerprint (every shard's header and config.json)
 * and the first 256 bytes (or fewer) of every tensor's data in name order, so equal checkpoints agree and two
 * that differ in config, layout or (almost surely) weights do not; it touches one page per tensor.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <switchyard/engine.h>

#include "cpu_engine.h"
#include "hf_config.h"
#include "hf_vocab.h"
#include "model_describe.h"
#include "qm_bert.h"
#include "bert_config.h"
#include "safetensors.h"
#include "tensor_names.h"
#include "tokenizer_bpe.h"
#include "transformer_lfm2.h"

#define PLUGIN_NAME "qwen-cpu-mmap"
#define FINGERPRINT_SAMPLE_BYTES 256
#define NAME_BYTES 96

/* Hugging Face llama rotates halves (rotate_half), with q/k weights as trained: NEOX pairing, unlike the GGUF
 * llama row of the core's table, whose converter permuted the weights for (2i, 2i+1) pairs. */
static const sy_tf_arch hf_llama_arch = {
    .name = "llama", .rope_style = SY_ROPE_NEOX, .qkv_bias = false, .qk_norm = false};

/* What load keeps beside the model: the mapped files and the weight tables pointing into them. */
typedef struct qm_format {
    sy_safetensors *st;
    sy_tf_layer_weights *layers;
    float *rope_factors; /* llama3 RoPE: per-frequency divisors, or NULL */
} qm_format;

static void format_free(void *p) {
    qm_format *f = p;
    if (f == NULL) return;
    sy_safetensors_close(f->st);
    free(f->layers);
    free(f->rope_factors);
    free(f);
}

/* ---- config ---- */

/* Llama 3.1 RoPE: frequencies with wavelengths past the original context are divided by `factor`, short ones
 * kept, the band between blended; expressed as the per-frequency divisors the core takes. */
static float *llama3_rope_factors(const sy_hf_rope *r, uint32_t rope_dims) {
    size_t n = rope_dims / 2;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (f == NULL) return NULL;
    double old_ctx = r->original_max_position_embeddings;
    double low_wavelen = old_ctx / r->low_freq_factor, high_wavelen = old_ctx / r->high_freq_factor;
    for (size_t i = 0; i < n; i++) {
        double freq = 1.0 / pow(r->theta, (double)(2 * i) / rope_dims), wavelen = 2 * M_PI / freq, scaled;
        if (wavelen < high_wavelen) {
            scaled = freq;
        } else if (wavelen > low_wavelen) {
            scaled = freq / r->factor;
        } else {
            double smooth = (old_ctx / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
            scaled = (1 - smooth) * freq / r->factor + smooth * freq;
        }
        f[i] = (float)(freq / scaled);
    }
    return f;
}

/* The core's config from config.json; refuses what the core does not compute. */
static sy_status core_config(const sy_hf_config *h, qm_format *fmt, sy_tf_config *c) {
    memset(c, 0, sizeof *c);
    switch (h->arch) {
    case SY_HF_ARCH_QWEN2: c->arch = sy_tf_arch_find("qwen2"); break;
    case SY_HF_ARCH_QWEN3: c->arch = sy_tf_arch_find("qwen3"); break;
    case SY_HF_ARCH_LLAMA: c->arch = &hf_llama_arch; break;
    case SY_HF_ARCH_LFM2: c->arch = sy_tf_arch_find("lfm2"); break;
    default: return sy_cpu_fail(SY_ERR_UNSUPPORTED, "model_type %s is not supported by " PLUGIN_NAME, h->model_type);
    }
    if (c->arch == NULL) return sy_cpu_fail(SY_ERR_UNSUPPORTED, "the CPU core lacks architecture %s", h->model_type);
    if (h->mlp_bias) return sy_cpu_fail(SY_ERR_UNSUPPORTED, "mlp_bias true is not supported by " PLUGIN_NAME);
    if (h->qk_norm != c->arch->qk_norm)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s with%s q/k norms is not supported", h->model_type,
                           h->qk_norm ? "" : "out");
    c->n_vocab = h->vocab_size;
    c->n_embd = h->hidden_size;
    c->n_ff = h->arch == SY_HF_ARCH_LFM2 ? h->lfm2_ff_dim : h->intermediate_size;
    c->n_layer = h->num_hidden_layers;
    c->n_head = h->num_attention_heads;
    c->n_head_kv = h->num_key_value_heads;
    c->head_dim = h->head_dim;
    c->rope_dims = h->head_dim;
    c->rope_base = h->rope.theta;
    c->rope_scale = 1.0;
    c->rms_eps = (float)h->rms_norm_eps;
    if (c->arch->short_conv) {
        if (h->conv_l_cache < 2 || h->conv_l_cache > SY_LFM2_MAX_KERNEL)
            return sy_cpu_fail(SY_ERR_UNSUPPORTED, "conv_L_cache %u is not supported (2 to %u are)", h->conv_l_cache,
                               SY_LFM2_MAX_KERNEL);
        c->conv_kernel = h->conv_l_cache;
    }
    switch (h->rope.type) {
    case SY_HF_ROPE_DEFAULT: break;
    case SY_HF_ROPE_LINEAR: c->rope_scale = h->rope.factor; break;
    case SY_HF_ROPE_LLAMA3:
        fmt->rope_factors = llama3_rope_factors(&h->rope, c->rope_dims);
        if (fmt->rope_factors == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
        break;
    default: return sy_cpu_fail(SY_ERR_UNSUPPORTED, "rope_type yarn is not supported by " PLUGIN_NAME);
    }
    return SY_OK;
}

/* ---- probe: a directory with a config.json this engine runs ---- */

static sy_status qm_probe(const char *path) {
    if (path == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "probe: no path");
    if (sy_bert_is_bert_dir(path)) return qm_bert_probe(path);
    struct stat st;
    if (stat(path, &st) != 0) return sy_cpu_fail(SY_ERR_IO, "%s: cannot open", path);
    if (!S_ISDIR(st.st_mode))
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s: not a Hugging Face checkpoint directory", path);
    char *config = qm_path_in(path, "config.json");
    bool has_config = config && stat(config, &st) == 0;
    free(config);
    if (!has_config) return sy_cpu_fail(SY_ERR_UNSUPPORTED, "%s: no config.json", path);
    sy_hf_config cfg;
    char err[400];
    if (!sy_hf_config_load(path, &cfg, NULL, err, sizeof err))
        return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    /* what the core cannot compute (another model_type, mlp_bias, yarn) is refused here already */
    qm_format scratch = {0};
    sy_tf_config core;
    sy_status st2 = core_config(&cfg, &scratch, &core);
    free(scratch.rope_factors);
    return st2 == SY_OK ? SY_OK : sy_cpu_fail_prefix(path);
}

/* ---- tensors ---- */

/* A matrix of exactly rows x cols (PyTorch {out, in}). Absent and optional: data stays NULL, true. */
static bool bind_matrix(const sy_safetensors *st, const char *name, uint64_t rows, uint64_t cols, bool required,
                        sy_tf_matrix *out) {
    memset(out, 0, sizeof *out);
    if (!required && sy_safetensors_find(st, name) == NULL) return true;
    char err[400];
    uint64_t shape[2] = {rows, cols};
    const sy_safetensors_tensor *t = sy_safetensors_require_shape(st, name, 2, shape, err, sizeof err);
    if (t == NULL) {
        sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        return false;
    }
    *out = (sy_tf_matrix){t->name, t->data, (sy_dtype)t->dtype, rows, cols, sy_dtype_row_bytes(t->dtype, cols)};
    return true;
}

static bool bind_vector(const sy_safetensors *st, const char *name, uint64_t n, bool required, sy_tf_vector *out) {
    memset(out, 0, sizeof *out);
    if (!required && sy_safetensors_find(st, name) == NULL) return true;
    char err[400];
    const sy_safetensors_tensor *t = sy_safetensors_require_shape(st, name, 1, &n, err, sizeof err);
    if (t == NULL) {
        sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        return false;
    }
    *out = (sy_tf_vector){t->name, t->data, (sy_dtype)t->dtype, n};
    return true;
}

/* A bare model's checkpoint (Qwen3Model: embedding models) names its tensors without "model.": set by
 * bind_weights for the load or estimate on this thread. */
static _Thread_local bool bare_names;

/* The checkpoint's name of a tensor (tensor_names.h); "" (found nowhere) where its family has none. */
static const char *tensor(char buf[NAME_BYTES], const sy_hf_config *h, sy_tensor_role role, uint32_t l) {
    sy_tensor_name(sy_tensor_scheme_of_hf(h->arch), role, l, buf, NAME_BYTES);
    if (bare_names && strncmp(buf, "model.", 6) == 0) memmove(buf, buf + 6, strlen(buf + 6) + 1);
    return buf;
}

/* lfm2's conv.conv.weight, a depthwise Conv1d of shape {n_embd, 1, L}: channel c's L taps at c * L, oldest first,
 * which is the core's layout, taken as one vector. */
static bool bind_conv_kernel(const sy_safetensors *st, const char *name, uint64_t channels, uint64_t taps,
                             sy_tf_vector *out) {
    memset(out, 0, sizeof *out);
    char err[400];
    uint64_t shape[3] = {channels, 1, taps};
    const sy_safetensors_tensor *t = sy_safetensors_require_shape(st, name, 3, shape, err, sizeof err);
    if (t == NULL) {
        sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
        return false;
    }
    *out = (sy_tf_vector){t->name, t->data, (sy_dtype)t->dtype, channels * taps};
    return true;
}

/* An lfm2 layer (Lfm2DecoderLayer): operator_norm, then a short convolution (conv.*) or attention (self_attn.*,
 * with q/k_layernorm and out_proj), then ffn_norm and feed_forward w1 (gate), w3 (up), w2 (down). The conv biases
 * exist exactly when conv_bias is set; transformers' module has none otherwise, so none are read then. */
static bool bind_lfm2_layer(const sy_safetensors *st, const sy_hf_config *h, uint32_t l, sy_tf_layer_weights *w) {
    char n[NAME_BYTES];
    uint64_t embd = h->hidden_size, ff = h->lfm2_ff_dim, hd = h->head_dim;
    uint64_t q_dim = (uint64_t)h->num_attention_heads * hd, kv_dim = (uint64_t)h->num_key_value_heads * hd;
    bool bias = h->conv_bias;
    if (!bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_NORM, l), embd, true, &w->attn_norm) ||
        !bind_vector(st, tensor(n, h, SY_TENSOR_FFN_NORM, l), embd, true, &w->ffn_norm) ||
        !bind_matrix(st, tensor(n, h, SY_TENSOR_FFN_GATE, l), ff, embd, true, &w->w_gate) ||
        !bind_matrix(st, tensor(n, h, SY_TENSOR_FFN_UP, l), ff, embd, true, &w->w_up) ||
        !bind_matrix(st, tensor(n, h, SY_TENSOR_FFN_DOWN, l), embd, ff, true, &w->w_down))
        return false;
    if (h->layer_types[l] == SY_HF_LAYER_CONV) {
        w->kind = SY_TF_LAYER_SHORT_CONV;
        return bind_matrix(st, tensor(n, h, SY_TENSOR_CONV_IN, l), 3 * embd, embd, true, &w->conv_in) &&
               bind_conv_kernel(st, tensor(n, h, SY_TENSOR_CONV_KERNEL, l), embd, h->conv_l_cache, &w->conv_kernel) &&
               bind_matrix(st, tensor(n, h, SY_TENSOR_CONV_OUT, l), embd, embd, true, &w->conv_out) &&
               (!bias || (bind_vector(st, tensor(n, h, SY_TENSOR_CONV_IN_BIAS, l), 3 * embd, true, &w->conv_in_bias) &&
                          bind_vector(st, tensor(n, h, SY_TENSOR_CONV_KERNEL_BIAS, l), embd, true, &w->conv_bias) &&
                          bind_vector(st, tensor(n, h, SY_TENSOR_CONV_OUT_BIAS, l), embd, true, &w->conv_out_bias)));
    }
    w->kind = SY_TF_LAYER_ATTENTION;
    return bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_Q, l), q_dim, embd, true, &w->wq) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_K, l), kv_dim, embd, true, &w->wk) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_V, l), kv_dim, embd, true, &w->wv) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_OUTPUT, l), embd, q_dim, true, &w->wo) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_Q_NORM, l), hd, true, &w->q_norm) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_K_NORM, l), hd, true, &w->k_norm);
}

static bool bind_layer(const sy_safetensors *st, const sy_hf_config *h, uint32_t l, sy_tf_layer_weights *w) {
    if (h->arch == SY_HF_ARCH_LFM2) return bind_lfm2_layer(st, h, l, w);
    char n[NAME_BYTES];
    uint64_t embd = h->hidden_size, ff = h->intermediate_size, hd = h->head_dim;
    uint64_t q_dim = (uint64_t)h->num_attention_heads * hd, kv_dim = (uint64_t)h->num_key_value_heads * hd;
    w->kind = SY_TF_LAYER_ATTENTION;
    return bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_NORM, l), embd, true, &w->attn_norm) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_Q, l), q_dim, embd, true, &w->wq) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_K, l), kv_dim, embd, true, &w->wk) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_V, l), kv_dim, embd, true, &w->wv) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_ATTN_OUTPUT, l), embd, q_dim, true, &w->wo) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_Q_BIAS, l), q_dim, h->qkv_bias, &w->bq) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_K_BIAS, l), kv_dim, h->qkv_bias, &w->bk) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_V_BIAS, l), kv_dim, h->qkv_bias, &w->bv) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_OUTPUT_BIAS, l), embd, h->o_bias, &w->bo) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_Q_NORM, l), hd, h->qk_norm, &w->q_norm) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_ATTN_K_NORM, l), hd, h->qk_norm, &w->k_norm) &&
           bind_vector(st, tensor(n, h, SY_TENSOR_FFN_NORM, l), embd, true, &w->ffn_norm) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_FFN_GATE, l), ff, embd, true, &w->w_gate) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_FFN_UP, l), ff, embd, true, &w->w_up) &&
           bind_matrix(st, tensor(n, h, SY_TENSOR_FFN_DOWN, l), embd, ff, true, &w->w_down);
}

/* weight_dtype, n_params and the fingerprint, from every tensor of the checkpoint. */
void qm_describe_weights(sy_model *m, const sy_safetensors *st, const char *config_json, size_t config_len) {
    uint64_t bytes_by_type[SY_DTYPE_COUNT_ + 1] = {0};
    XXH3_state_t *h = XXH3_createState();
    uint64_t base = sy_safetensors_fingerprint(st, config_json, config_len);
    if (h) {
        XXH3_128bits_reset(h);
        XXH3_128bits_update(h, &base, sizeof base);
    }
    for (size_t i = 0; i < sy_safetensors_count(st); i++) {
        const sy_safetensors_tensor *t = sy_safetensors_at(st, i);
        m->n_params += t->n_elements;
        if (t->n_dims == 2) bytes_by_type[t->dtype < SY_DTYPE_COUNT_ ? t->dtype : SY_DTYPE_COUNT_] += t->n_bytes;
        size_t sample = t->n_bytes < FINGERPRINT_SAMPLE_BYTES ? (size_t)t->n_bytes : FINGERPRINT_SAMPLE_BYTES;
        if (h && sample > 0) XXH3_128bits_update(h, t->data, sample);
    }
    uint32_t best = SY_DTYPE_F32;
    for (uint32_t t = 0; t < SY_DTYPE_COUNT_; t++)
        if (bytes_by_type[t] > bytes_by_type[best]) best = t;
    const sy_dtype_traits *dt = sy_dtype_get(best);
    snprintf(m->weight_dtype, sizeof m->weight_dtype, "%s", dt ? dt->name : "unknown");
    sy_cpu_model_set_fingerprint(m, h);
}

/* The display name: the directory's last component. */
char *qm_dir_name(const char *path) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    char *name = malloc(len - start + 1);
    if (name) {
        memcpy(name, path + start, len - start);
        name[len - start] = '\0';
    }
    return name;
}

/* ---- load ---- */

/* A decoder embedding model (Qwen3-Embedding style): sentence-transformers' lasttoken pooling (with Normalize),
 * or a bare model (Qwen3Model) without modules.json, which pools its last token unnormalized. The model embeds
 * through the transformer core's last hidden state (cpu_embed.c); a bare model does not generate. */
static sy_status embedding_setup(sy_model *m, const char *dir, const sy_hf_config *h) {
    char err[400];
    sy_st_pooling p;
    if (!sy_st_pooling_load(dir, h->base_model ? SY_POOLING_LAST : SY_POOLING_NONE, &p, err, sizeof err))
        return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    if (!p.present && !h->base_model) return SY_OK; /* a chat model */
    if (p.pooling != SY_POOLING_LAST)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "decoder embedding models pool their last token (lasttoken), not %s",
                           p.pooling == SY_POOLING_MEAN ? "mean" : "cls");
    m->pooling = SY_POOLING_LAST;
    m->embd_normalize = p.normalize;
    m->embd_ctx = p.max_seq_length;
    m->no_generate = h->base_model;
    return SY_OK;
}

/* The weight tables over the mapped files (fmt->st, open), checked by name and shape; no tensor data is read.
 * The layer table goes to fmt->layers. */
static sy_status bind_weights(const sy_hf_config *h, qm_format *fmt, const sy_tf_config *cfg, sy_tf_weights *w) {
    memset(w, 0, sizeof *w);
    const uint64_t vocab = h->vocab_size, embd = h->hidden_size;
    /* lfm2 names its final norm embedding_norm (applied after the layers all the same) */
    sy_tensor_role final_norm = h->arch == SY_HF_ARCH_LFM2 ? SY_TENSOR_TOKEN_EMBD_NORM : SY_TENSOR_OUTPUT_NORM;
    char n[NAME_BYTES];
    bare_names = false;
    bare_names = sy_safetensors_find(fmt->st, tensor(n, h, SY_TENSOR_TOKEN_EMBD, 0)) == NULL &&
                 sy_safetensors_find(fmt->st, "embed_tokens.weight") != NULL;
    if (!bind_matrix(fmt->st, tensor(n, h, SY_TENSOR_TOKEN_EMBD, 0), vocab, embd, true, &w->token_embd) ||
        !bind_vector(fmt->st, tensor(n, h, final_norm, 0), embd, true, &w->output_norm))
        return SY_ERR_FORMAT;
    if (h->tie_word_embeddings || h->base_model) {
        /* transformers ignores a stored lm_head.weight when tied; a bare model has none (and no logits are asked
         * of it: it only embeds) */
        w->output = w->token_embd;
    } else if (!bind_matrix(fmt->st, tensor(n, h, SY_TENSOR_OUTPUT, 0), vocab, embd, true, &w->output)) {
        return SY_ERR_FORMAT;
    }
    if (fmt->rope_factors)
        w->rope_freq_factors =
            (sy_tf_vector){"rope_scaling (llama3)", fmt->rope_factors, SY_DTYPE_F32, cfg->rope_dims / 2};
    fmt->layers = calloc(h->num_hidden_layers, sizeof *fmt->layers);
    if (fmt->layers == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t l = 0; l < h->num_hidden_layers; l++)
        if (!bind_layer(fmt->st, h, l, &fmt->layers[l])) return SY_ERR_FORMAT;
    w->layers = fmt->layers;
    return SY_OK;
}

static sy_status build_model(sy_model *m, const char *dir, const sy_cpu_options *opt) {
    char err[400];
    sy_hf_config h;
    sy_hf_generation_config gen;
    if (!sy_hf_config_load(dir, &h, &gen, err, sizeof err))
        return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    qm_format *fmt = calloc(1, sizeof *fmt);
    if (fmt == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    m->format = fmt;
    m->format_free = format_free;
    m->architecture = strdup(h.model_type);
    m->name = qm_dir_name(dir);
    if (m->architecture == NULL || m->name == NULL) return sy_cpu_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    m->n_ctx_train = h.max_position_embeddings;

    sy_tf_config cfg;
    sy_status st = core_config(&h, fmt, &cfg);
    if (st != SY_OK) return st;
    if (opt->backend == SY_CPU_BACKEND_REFERENCE && cfg.arch->short_conv)
        return sy_cpu_fail(SY_ERR_UNSUPPORTED, "backend reference does not run %s (no short convolution)",
                           h.model_type);

    qm_vocab_facts facts;
    m->vocab = qm_vocab_load(dir, &h, &gen, &facts, &st, err, sizeof err);
    if (m->vocab == NULL) return sy_cpu_fail(st, "%s", err);
    m->vocab_ops = &qm_vocab_ops;
    m->bos_token = facts.bos;
    m->eos_token = facts.eos;
    m->pad_token = facts.pad;
    m->add_bos = facts.add_bos;
    m->chat_template = facts.chat_template;
    m->chat_template_names = facts.template_names;
    m->chat_template_texts = facts.template_texts;
    m->n_chat_templates = (uint32_t)facts.n_templates;
    st = embedding_setup(m, dir, &h);
    if (st != SY_OK) return st;

    fmt->st = sy_safetensors_open(dir, err, sizeof err);
    if (fmt->st == NULL) return sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
    m->weights_mapped_bytes = sy_safetensors_mapped_bytes(fmt->st);

    sy_tf_weights w;
    st = bind_weights(&h, fmt, &cfg, &w);
    if (st != SY_OK) return st;

    char *config_path = qm_path_in(dir, "config.json");
    size_t config_len = 0;
    char *config_json = config_path ? sy_hf_read_file(config_path, SY_HF_MAX_CONFIG_BYTES, &config_len, err,
                                                      sizeof err)
                                    : NULL;
    free(config_path);
    if (config_json == NULL) return sy_cpu_fail(SY_ERR_IO, "%s", err);
    qm_describe_weights(m, fmt->st, config_json, config_len);
    free(config_json);

    st = sy_cpu_model_start(m, &cfg, &w, opt);
    if (st != SY_OK) return st;
    sy_cpu_log(SY_LOG_INFO, "%s, %u layers, %s, %.1f MB mapped, %s backend, KV %s", m->architecture, cfg.n_layer,
               m->weight_dtype, (double)m->weights_mapped_bytes / 1e6,
               opt->backend == SY_CPU_BACKEND_REFERENCE ? "reference" : "core",
               opt->kv_cache_dir ? "on disk" : "in RAM");
    return SY_OK;
}

static sy_status qm_load(const char *path, const sy_option *options, size_t n_options, sy_model **out) {
    if (path == NULL || out == NULL) return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "load: missing path or output");
    sy_cpu_options opt;
    sy_status st = sy_cpu_options_parse(options, n_options, &opt);
    if (st != SY_OK) return st;
    if (sy_bert_is_bert_dir(path)) return qm_bert_load(path, &opt, out);
    st = qm_probe(path);
    if (st != SY_OK) return st;
    sy_model *m = sy_cpu_model_new();
    if (m == NULL) return SY_ERR_OUT_OF_MEMORY;
    st = build_model(m, path, &opt);
    if (st != SY_OK) {
        if (strncmp(sy_cpu_error_message(), path, strlen(path)) != 0) sy_cpu_fail_prefix(path);
        sy_cpu_unload(m);
        return st;
    }
    *out = m;
    return SY_OK;
}

/* ---- estimate ("sy.engine.resources/1") ---- */

/* config.json, the safetensors headers and the norm vectors are read; no weight is, nor the tokenizer. */
static sy_status qm_estimate(const char *path, const sy_option *options, size_t n_options, sy_resource_estimate *out) {
    if (path == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "estimate: bad arguments");
    sy_cpu_options opt;
    sy_status st = sy_cpu_options_parse(options, n_options, &opt);
    if (st == SY_OK) st = qm_probe(path);
    if (st != SY_OK) return st;
    if (sy_bert_is_bert_dir(path)) return qm_bert_estimate(path, &opt, out);
    char err[400];
    sy_hf_config h;
    if (!sy_hf_config_load(path, &h, NULL, err, sizeof err))
        return sy_cpu_fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s: %s", path, err);
    qm_format fmt = {0};
    sy_tf_config cfg;
    st = core_config(&h, &fmt, &cfg);
    if (st == SY_OK && opt.backend == SY_CPU_BACKEND_REFERENCE && cfg.arch->short_conv)
        st = sy_cpu_fail(SY_ERR_UNSUPPORTED, "backend reference does not run %s (no short convolution)", h.model_type);
    /* The tokenizer as sy_bpe_memory will count it, without parsing tokenizer.json: about one merge per token and
     * token text of a quarter of the file (it holds each token in the vocabulary and again in merges, quoted).
     * Small tokenizers are their tables' first size, exactly; large ones within a few percent of the total. A
     * missing file fails the load, not this. */
    uint64_t vocab_bytes = 0;
    char *tok_path = st == SY_OK ? qm_path_in(path, "tokenizer.json") : NULL;
    struct stat sb;
    if (tok_path && stat(tok_path, &sb) == 0 && S_ISREG(sb.st_mode))
        vocab_bytes = sy_bpe_memory_estimate(h.vocab_size, h.vocab_size, (uint64_t)sb.st_size / 4);
    free(tok_path);
    if (st == SY_OK) {
        fmt.st = sy_safetensors_open(path, err, sizeof err);
        if (fmt.st == NULL) st = sy_cpu_fail(SY_ERR_FORMAT, "%s", err);
    }
    sy_tf_weights w;
    if (st == SY_OK) st = bind_weights(&h, &fmt, &cfg, &w);
    if (st == SY_OK)
        st = sy_cpu_estimate(&cfg, &w, h.max_position_embeddings, &opt, sy_safetensors_mapped_bytes(fmt.st),
                             vocab_bytes, out);
    if (st != SY_OK && strncmp(sy_cpu_error_message(), path, strlen(path)) != 0) sy_cpu_fail_prefix(path);
    sy_safetensors_close(fmt.st);
    free(fmt.layers);
    free(fmt.rope_factors);
    return st;
}

static const sy_engine_resources_api resources_api = {
    .struct_size = sizeof(sy_engine_resources_api),
    .estimate = qm_estimate,
};

/* ---- describe ("sy.engine.describe/1"): config.json under GGUF's key names ---- */

static sy_status qm_describe(const char *path, const sy_metadata_sink *sink) {
    if (path == NULL || sink == NULL || sink->put == NULL)
        return sy_cpu_fail(SY_ERR_INVALID_ARGUMENT, "describe: bad arguments");
    char err[400];
    sy_status st = sy_hf_describe(path, sink, err, sizeof err);
    if (st != SY_OK) return sy_cpu_fail(st, "%s", err);
    return SY_OK;
}

static const sy_engine_describe_api describe_api = {
    .struct_size = sizeof(sy_engine_describe_api),
    .describe = qm_describe,
};

/* ---- the plugin ---- */

static const sy_engine_api engine_api = {
    .struct_size = sizeof(sy_engine_api),
    .probe = qm_probe,
    .load = qm_load,
    SY_CPU_ENGINE_CALLS,
};

static sy_status qm_init(const sy_host_api *h) {
    sy_cpu_engine_init(h, PLUGIN_NAME);
    return SY_OK;
}

static void qm_deinit(void) {
    qm_vocab_drop_cached();
    sy_cpu_engine_deinit();
}

static const void *qm_get_interface(const char *id) {
    if (id && strcmp(id, SY_ENGINE_INTERFACE_ID) == 0) return &engine_api;
    if (id && strcmp(id, SY_ENGINE_STATE_INTERFACE_ID) == 0) return &sy_cpu_state_api;
    if (id && strcmp(id, SY_ENGINE_RESOURCES_INTERFACE_ID) == 0) return &resources_api;
    if (id && strcmp(id, SY_ENGINE_DESCRIBE_INTERFACE_ID) == 0) return &describe_api;
    if (id && strcmp(id, SY_ENGINE_EMBED_INTERFACE_ID) == 0) return &sy_cpu_embed_api;
    if (id && strcmp(id, SY_PLUGIN_OPTIONS_INTERFACE_ID) == 0) return &sy_cpu_options_api;
    if (id && strcmp(id, SY_PLUGIN_RUNTIME_INTERFACE_ID) == 0) return &sy_cpu_runtime_api;
    return NULL;
}

SY_DEFINE_PLUGIN_ENTRY(PLUGIN_NAME, "0.1.0",
                       "Hugging Face SafeTensors checkpoints (qwen2, qwen3, llama, lfm2; bert encoders) on the CPU, "
                       "mapped in place",
                       qm_init, qm_deinit, qm_get_interface);
