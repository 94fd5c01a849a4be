/* gguf-quant: GGUF models (plain `.gguf` files or Ollama blobs) on the CPU, weights used in place from the
 * mapping in their stored type (F32, F16, BF16, Q4_0 ... Q8_0, K-quants), over the shared CPU transformer core.
 *
 * Architectures: the rows of the transformer core's table (llama, qwen2, qwen3, lfm2). Tokenizers: SentencePiece
 * ("llama") and byte-level BPE ("gpt2" with the qwen2 / llama-bpe / gpt-2 / smollm pre-tokenizers), see gguf_vocab.h.
 * Anything else (architecture, tokenizer, tensor type) is refused with a message naming it.
 *
 * Loading reads the header and metadata, maps the file and points the transformer at the tensors: no weight is
 * copied (norm vectors and biases, which are tiny, are converted to F32).
 *
 * lfm2 (llama.cpp's layout): `lfm2.attention.head_count_kv` is an array with 0 for the short-conv layers, whose
 * tensors are blk.N.shortconv.{in_proj,conv,out_proj}.weight (conv: dims [conv_L_cache, n_embd]); the final norm
 * is `token_embd_norm.weight`; `lfm2.shortconv.l_cache` is the kernel width. seq_truncate rolls the conv state back
 * at most SY_LFM2_ROLLBACK tokens (deeper: SY_ERR_UNSUPPORTED); sliding-window attention is refused.
 *
 * The engine calls other than probe and load, the load options (threads, ctx_size, backend, kv_cache_dir, ...)
 * and the state extension ("sy.engine.state/1") come from the shared CPU engine glue, cpu_engine.h.
 *
 * Fingerprint (model_info): XXH3-128, hex, over
 *   1. the file's header bytes: magic, version, every metadata key and value (general.architecture, the
 *      hyper-parameters and the tokenizer included) and every tensor info (name, type, shape, offset), and
 *   2. the first 256 bytes (or fewer) of every tensor's data, in file order,
 * so equal files give equal fingerprints, and two files that differ in config, tokenizer, layout, quantization or
 * (almost surely) weights do not. Reading part 2 touches one page per tensor, nothing more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>
#include <xxhash.h>

#include <switchyard/engine.h>

#include "cpu_engine.h"
#include "gguf.h"
#include "gguf_vocab.h"
#include "model_describe.h"
#include "gq_bert.h"
#include "tensor_names.h"
#include "transformer.h"
#include "transformer_lfm2.h"

#define PLUGIN_NAME "gguf-quant"
#define FINGERPRINT_SAMPLE_BYTES 256

#define fail sy_cpu_fail
#define log_msg sy_cpu_log
#define error_status sy_cpu_last_status()

/* The plugin's part of the model (sy_model.format): the open file, whose mapping the weights point into, and the
 * layer table the transformer core references. */
typedef struct gq_format {
    sy_gguf *gguf;
    sy_tf_layer_weights *layers;
} gq_format;

static void gq_format_free(void *p) {
    gq_format *f = p;
    if (f == NULL) return;
    sy_gguf_close(f->gguf);
    free(f->layers);
    free(f);
}

/* The vocabulary behind the shared tokenizer calls. */
static sy_status vocab_tokenize(const void *v, const char *text, size_t len, uint32_t flags, int32_t *out,
                                size_t capacity, size_t *n_out, char *err, size_t err_size) {
    return gq_vocab_tokenize(v, text, len, flags, out, capacity, n_out, err, err_size);
}
static sy_status vocab_token_bytes(const void *v, int32_t id, char *out, size_t capacity, size_t *n_out) {
    return gq_vocab_token_bytes(v, id, out, capacity, n_out);
}
static uint32_t vocab_token_flags(const void *v, int32_t id) { return gq_vocab_token_flags(v, id); }
static uint64_t vocab_memory(const void *v) { return gq_vocab_memory(v); }
static void vocab_free(void *v) { gq_vocab_free(v); }

static const sy_cpu_vocab_ops gq_vocab_ops = {
    .tokenize = vocab_tokenize,
    .token_bytes = vocab_token_bytes,
    .token_flags = vocab_token_flags,
    .memory = vocab_memory,
    .free = vocab_free,
};

/* ---- probe ---- */

static sy_status gq_probe(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(SY_ERR_IO, "%s: cannot open", path);
    unsigned char head[4];
    ssize_t n = read(fd, head, sizeof head);
    close(fd);
    if (n != (ssize_t)sizeof head || !sy_gguf_has_magic(head, sizeof head))
        return fail(SY_ERR_UNSUPPORTED, "%s: not a GGUF file", path);
    char err[400];
    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) return fail(SY_ERR_FORMAT, "%s", err);
    char *arch = sy_gguf_dup_string(g, "general.architecture");
    sy_status st = SY_OK;
    if (arch == NULL) st = fail(SY_ERR_FORMAT, "%s: no general.architecture", path);
    else if (sy_tf_arch_find(arch) == NULL && strcmp(arch, "bert") != 0)
        st = fail(SY_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported by " PLUGIN_NAME, path, arch);
    free(arch);
    sy_gguf_close(g);
    return st;
}

/* ---- load ---- */

/* "<arch>.<suffix>" as an unsigned 32-bit value; 0 absent, -1 bad (error set), 1 read. */
static int arch_u32(const sy_gguf *g, const char *arch, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint64_t v;
    int r = sy_gguf_get_uint(g, key, &v);
    if (r == 0) return 0;
    if (r < 0 || v > UINT32_MAX) {
        fail(SY_ERR_FORMAT, "metadata key '%s': expected an unsigned 32-bit integer", key);
        return -1;
    }
    *out = (uint32_t)v;
    return 1;
}

static int arch_float(const sy_gguf *g, const char *arch, const char *suffix, double *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int r = sy_gguf_get_float(g, key, out);
    if (r < 0) fail(SY_ERR_FORMAT, "metadata key '%s': expected a float", key);
    return r;
}

static bool required_u32(const sy_gguf *g, const char *arch, const char *suffix, uint32_t *out) {
    int r = arch_u32(g, arch, suffix, out);
    if (r == 0) fail(SY_ERR_FORMAT, "metadata key '%s.%s' is missing", arch, suffix);
    return r == 1;
}

/* "<arch>.attention.head_count_kv": one value, or (hybrid models, as llama.cpp writes them) one per layer, where 0
 * marks a layer without attention; the nonzero ones must agree. Sets c->n_head_kv; the per-layer zeros are read
 * again by layer_kinds(). */
static bool read_head_count_kv(const sy_gguf *g, const char *arch, sy_tf_config *c) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    int64_t kv = sy_gguf_find_key(g, key);
    sy_gguf_type et;
    uint64_t count;
    if (kv < 0 || !sy_gguf_kv_array(g, (uint64_t)kv, &et, &count))
        return arch_u32(g, arch, "attention.head_count_kv", &c->n_head_kv) >= 0;
    if (count != c->n_layer) {
        fail(SY_ERR_FORMAT, "metadata key '%s': %llu entries for %u layers", key, (unsigned long long)count,
             c->n_layer);
        return false;
    }
    uint32_t seen = 0;
    for (uint64_t l = 0; l < count; l++) {
        uint64_t v;
        if (!sy_gguf_array_uint(g, (uint64_t)kv, l, &v) || v > UINT32_MAX) {
            fail(SY_ERR_FORMAT, "metadata key '%s': entry %llu is not an unsigned 32-bit integer", key,
                 (unsigned long long)l);
            return false;
        }
        if (v != 0 && seen != 0 && v != seen) {
            fail(SY_ERR_UNSUPPORTED, "metadata key '%s': layers with different KV head counts (%u, %llu)", key,
                 seen, (unsigned long long)v);
            return false;
        }
        if (v != 0) seen = (uint32_t)v;
    }
    if (seen == 0) {
        fail(SY_ERR_FORMAT, "metadata key '%s': no layer has attention", key);
        return false;
    }
    c->n_head_kv = seen;
    return true;
}

/* Marks the layers whose head_count_kv entry is 0 as short-conv layers (architectures with short_conv only). */
static bool layer_kinds(const sy_gguf *g, const char *arch, const sy_tf_config *c, sy_tf_layer_weights *layers) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    int64_t kv = sy_gguf_find_key(g, key);
    sy_gguf_type et;
    uint64_t count;
    if (kv < 0 || !sy_gguf_kv_array(g, (uint64_t)kv, &et, &count)) return true; /* all attention */
    for (uint32_t l = 0; l < c->n_layer; l++) {
        uint64_t v = 1;
        sy_gguf_array_uint(g, (uint64_t)kv, l, &v); /* checked by read_head_count_kv */
        if (v != 0) continue;
        if (!c->arch->short_conv) {
            fail(SY_ERR_UNSUPPORTED, "layer %u has no attention (%s = 0), which %s does not support", l, key, arch);
            return false;
        }
        layers[l].kind = SY_TF_LAYER_SHORT_CONV;
    }
    return true;
}

/* Reads the hyper-parameters llama.cpp reads for these architectures. */
static bool read_config(const sy_gguf *g, const char *arch, sy_tf_config *c, uint32_t *n_ctx_train) {
    memset(c, 0, sizeof *c);
    c->arch = sy_tf_arch_find(arch);
    if (!required_u32(g, arch, "embedding_length", &c->n_embd) || !required_u32(g, arch, "block_count", &c->n_layer) ||
        !required_u32(g, arch, "feed_forward_length", &c->n_ff) ||
        !required_u32(g, arch, "attention.head_count", &c->n_head) ||
        !required_u32(g, arch, "context_length", n_ctx_train))
        return false;
    c->n_head_kv = c->n_head;
    if (!read_head_count_kv(g, arch, c)) return false;
    if (c->n_head == 0 || c->n_embd % c->n_head != 0) {
        fail(SY_ERR_FORMAT, "embedding length %u is not a multiple of the head count %u", c->n_embd, c->n_head);
        return false;
    }
    c->head_dim = c->n_embd / c->n_head;
    if (arch_u32(g, arch, "attention.key_length", &c->head_dim) < 0) return false;
    uint32_t value_dim = c->head_dim;
    if (arch_u32(g, arch, "attention.value_length", &value_dim) < 0) return false;
    if (value_dim != c->head_dim) {
        fail(SY_ERR_UNSUPPORTED, "key length %u differs from value length %u: not supported", c->head_dim,
             value_dim);
        return false;
    }
    c->rope_dims = c->head_dim;
    if (arch_u32(g, arch, "rope.dimension_count", &c->rope_dims) < 0) return false;
    double eps = 1e-5, base = 10000.0, scale = 1.0;
    if (arch_float(g, arch, "attention.layer_norm_rms_epsilon", &eps) < 0 ||
        arch_float(g, arch, "rope.freq_base", &base) < 0)
        return false;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *stype;
    size_t slen;
    int r = sy_gguf_get_string(g, key, &stype, &slen);
    if (r < 0) {
        fail(SY_ERR_FORMAT, "metadata key '%s': expected a string", key);
        return false;
    }
    if (r == 1 && !(slen == 4 && memcmp(stype, "none", 4) == 0)) {
        if (!(slen == 6 && memcmp(stype, "linear", 6) == 0)) {
            fail(SY_ERR_UNSUPPORTED, "rope scaling '%.*s' is not supported", (int)(slen > 32 ? 32 : slen), stype);
            return false;
        }
        if (arch_float(g, arch, "rope.scaling.factor", &scale) < 0) return false;
    }
    c->rms_eps = (float)eps;
    c->rope_base = base;
    c->rope_scale = scale;
    if (c->arch->short_conv) {
        if (!required_u32(g, arch, "shortconv.l_cache", &c->conv_kernel)) return false;
        if (c->conv_kernel < 2 || c->conv_kernel > SY_LFM2_MAX_KERNEL) {
            fail(SY_ERR_FORMAT, "metadata key '%s.shortconv.l_cache': short convolution width %u out of range [2, %u]",
                 arch, c->conv_kernel, SY_LFM2_MAX_KERNEL);
            return false;
        }
    }
    uint32_t window = 0;
    if (arch_u32(g, arch, "attention.sliding_window", &window) < 0) return false;
    if (window > 0) {
        fail(SY_ERR_UNSUPPORTED, "sliding-window attention (%s.attention.sliding_window = %u) is not supported", arch,
             window);
        return false;
    }
    return true;
}

/* A 2-D tensor as a matrix: dims[0] elements per row, dims[1] rows. */
bool gq_get_matrix(const sy_gguf *g, const char *name, bool required, sy_tf_matrix *out) {
    memset(out, 0, sizeof *out);
    const sy_gguf_tensor *t = sy_gguf_find_tensor(g, name);
    if (t == NULL) {
        if (required) fail(SY_ERR_FORMAT, "tensor %s is missing", name);
        return !required;
    }
    const sy_dtype_traits *dt = sy_dtype_get(t->type);
    if (dt == NULL) {
        const char *tn = sy_gguf_tensor_type_name(t->type);
        fail(SY_ERR_UNSUPPORTED, "tensor %s: type %s is not supported by " PLUGIN_NAME, name, tn ? tn : "unknown");
        return false;
    }
    if (t->dims[2] != 1 || t->dims[3] != 1) {
        fail(SY_ERR_FORMAT, "tensor %s: expected 2 dimensions", name);
        return false;
    }
    out->name = t->name;
    out->data = t->data;
    out->type = (sy_dtype)t->type;
    out->cols = t->dims[0];
    out->rows = t->dims[1];
    out->row_bytes = sy_dtype_row_bytes(t->type, t->dims[0]);
    return true;
}

bool gq_get_vector(const sy_gguf *g, const char *name, sy_tf_vector *out) {
    memset(out, 0, sizeof *out);
    const sy_gguf_tensor *t = sy_gguf_find_tensor(g, name);
    if (t == NULL) return true; /* the transformer says whether it was required */
    if (sy_dtype_get(t->type) == NULL) {
        const char *tn = sy_gguf_tensor_type_name(t->type);
        fail(SY_ERR_UNSUPPORTED, "tensor %s: type %s is not supported by " PLUGIN_NAME, name, tn ? tn : "unknown");
        return false;
    }
    if (t->dims[1] != 1 || t->dims[2] != 1 || t->dims[3] != 1) {
        fail(SY_ERR_FORMAT, "tensor %s: expected 1 dimension", name);
        return false;
    }
    out->name = t->name;
    out->data = t->data;
    out->type = (sy_dtype)t->type;
    out->n = t->dims[0];
    return true;
}

/* A required 2-D tensor of dims [cols, rows] read as one vector of rows*cols elements (lfm2's conv kernel: taps
 * fastest). */
static bool get_flat_vector(const sy_gguf *g, const char *name, uint64_t cols, sy_tf_vector *out) {
    memset(out, 0, sizeof *out);
    const sy_gguf_tensor *t = sy_gguf_find_tensor(g, name);
    if (t == NULL) {
        fail(SY_ERR_FORMAT, "tensor %s is missing", name);
        return false;
    }
    if (sy_dtype_get(t->type) == NULL) {
        const char *tn = sy_gguf_tensor_type_name(t->type);
        fail(SY_ERR_UNSUPPORTED, "tensor %s: type %s is not supported by " PLUGIN_NAME, name, tn ? tn : "unknown");
        return false;
    }
    if (t->dims[0] != cols || t->dims[2] != 1 || t->dims[3] != 1) {
        fail(SY_ERR_FORMAT, "tensor %s: expected dimensions [%llu, n]", name, (unsigned long long)cols);
        return false;
    }
    out->name = t->name;
    out->data = t->data;
    out->type = (sy_dtype)t->type;
    out->n = t->n_elements;
    return true;
}

/* The GGUF name of a tensor (of layer l, for per-layer roles; tensor_names.h), into buf. */
static const char *tn(char buf[64], sy_tensor_role role, uint32_t l) {
    sy_tensor_name(SY_TENSORS_GGUF, role, l, buf, 64);
    return buf;
}

/* An lfm2 short-conv layer: operator norm, in_proj / conv / out_proj (biases optional), and the usual FFN. */
static bool get_conv_layer(const sy_gguf *g, uint32_t l, uint32_t kernel, sy_tf_layer_weights *w) {
    char n[64];
    return gq_get_vector(g, tn(n, SY_TENSOR_ATTN_NORM, l), &w->attn_norm) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_CONV_IN, l), true, &w->conv_in) &&
           gq_get_vector(g, tn(n, SY_TENSOR_CONV_IN_BIAS, l), &w->conv_in_bias) &&
           get_flat_vector(g, tn(n, SY_TENSOR_CONV_KERNEL, l), kernel, &w->conv_kernel) &&
           gq_get_vector(g, tn(n, SY_TENSOR_CONV_KERNEL_BIAS, l), &w->conv_bias) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_CONV_OUT, l), true, &w->conv_out) &&
           gq_get_vector(g, tn(n, SY_TENSOR_CONV_OUT_BIAS, l), &w->conv_out_bias) &&
           gq_get_vector(g, tn(n, SY_TENSOR_FFN_NORM, l), &w->ffn_norm) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_FFN_GATE, l), true, &w->w_gate) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_FFN_UP, l), true, &w->w_up) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_FFN_DOWN, l), true, &w->w_down);
}

static bool get_layer(const sy_gguf *g, uint32_t l, sy_tf_layer_weights *w) {
    char n[64];
    return gq_get_vector(g, tn(n, SY_TENSOR_ATTN_NORM, l), &w->attn_norm) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_ATTN_Q, l), true, &w->wq) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_ATTN_K, l), true, &w->wk) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_ATTN_V, l), true, &w->wv) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_ATTN_OUTPUT, l), true, &w->wo) &&
           gq_get_vector(g, tn(n, SY_TENSOR_ATTN_Q_BIAS, l), &w->bq) &&
           gq_get_vector(g, tn(n, SY_TENSOR_ATTN_K_BIAS, l), &w->bk) &&
           gq_get_vector(g, tn(n, SY_TENSOR_ATTN_V_BIAS, l), &w->bv) &&
           gq_get_vector(g, tn(n, SY_TENSOR_ATTN_OUTPUT_BIAS, l), &w->bo) &&
           gq_get_vector(g, tn(n, SY_TENSOR_ATTN_Q_NORM, l), &w->q_norm) &&
           gq_get_vector(g, tn(n, SY_TENSOR_ATTN_K_NORM, l), &w->k_norm) &&
           gq_get_vector(g, tn(n, SY_TENSOR_FFN_NORM, l), &w->ffn_norm) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_FFN_GATE, l), true, &w->w_gate) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_FFN_UP, l), true, &w->w_up) &&
           gq_get_matrix(g, tn(n, SY_TENSOR_FFN_DOWN, l), true, &w->w_down);
}

/* llama.cpp's general.file_type names, for model_info's weight_dtype. */
static const char *file_type_name(uint64_t ft) {
    switch (ft) {
    case 0: return "f32";
    case 1: return "f16";
    case 2: return "q4_0";
    case 3: return "q4_1";
    case 7: return "q8_0";
    case 8: return "q5_0";
    case 9: return "q5_1";
    case 10: return "q2_k";
    case 11: return "q3_k_s";
    case 12: return "q3_k_m";
    case 13: return "q3_k_l";
    case 14: return "q4_k_s";
    case 15: return "q4_k_m";
    case 16: return "q5_k_s";
    case 17: return "q5_k_m";
    case 18: return "q6_k";
    case 32: return "bf16";
    default: return NULL;
    }
}

void gq_describe_weights(sy_model *m, const sy_gguf *g) {
    uint64_t ft;
    const char *name = sy_gguf_get_uint(g, "general.file_type", &ft) == 1 ? file_type_name(ft) : NULL;
    /* Without a known file type: the type holding the most bytes of 2-D tensors. */
    uint64_t bytes_by_type[SY_DTYPE_COUNT_] = {0};
    XXH3_state_t *h = XXH3_createState();
    if (h) XXH3_128bits_reset(h);
    if (h) XXH3_128bits_update(h, sy_gguf_file_data(g), (size_t)sy_gguf_header_size(g));
    for (uint64_t i = 0; i < sy_gguf_tensor_count(g); i++) {
        const sy_gguf_tensor *t = sy_gguf_tensor_at(g, i);
        m->n_params += t->n_elements;
        if (t->type < SY_DTYPE_COUNT_ && t->dims[1] > 1) bytes_by_type[t->type] += t->n_bytes;
        size_t sample = t->n_bytes < FINGERPRINT_SAMPLE_BYTES ? (size_t)t->n_bytes : FINGERPRINT_SAMPLE_BYTES;
        if (h) XXH3_128bits_update(h, t->data, sample);
    }
    if (name == NULL) {
        uint32_t best = 0;
        for (uint32_t t = 0; t < SY_DTYPE_COUNT_; t++)
            if (bytes_by_type[t] > bytes_by_type[best]) best = t;
        const sy_dtype_traits *dt = sy_dtype_get(best);
        name = dt ? dt->name : "unknown";
    }
    snprintf(m->weight_dtype, sizeof m->weight_dtype, "%s", name);
    sy_cpu_model_set_fingerprint(m, h);
}

/* The config and weight tables from the header: the tensors' data stay untouched in the mapping. The layer table
 * goes to f->layers. On failure error_text says why (without the path). */
static sy_status bind_weights(const sy_gguf *g, const char *arch, uint32_t n_vocab, gq_format *f, sy_tf_config *cfg,
                              sy_tf_weights *w, uint32_t *n_ctx_train) {
    if (!read_config(g, arch, cfg, n_ctx_train)) return error_status;
    memset(w, 0, sizeof *w);
    char n[64];
    if (!gq_get_matrix(g, tn(n, SY_TENSOR_TOKEN_EMBD, 0), true, &w->token_embd) ||
        !gq_get_vector(g, tn(n, SY_TENSOR_OUTPUT_NORM, 0), &w->output_norm) ||
        !gq_get_matrix(g, tn(n, SY_TENSOR_OUTPUT, 0), false, &w->output) ||
        !gq_get_vector(g, tn(n, SY_TENSOR_ROPE_FREQS, 0), &w->rope_freq_factors))
        return error_status;
    if (w->output.data == NULL) w->output = w->token_embd; /* tied embeddings */
    /* llama.cpp names lfm2's final norm token_embd_norm (HF: model.embedding_norm, applied after the layers) */
    if (w->output_norm.data == NULL && cfg->arch->short_conv) {
        if (!gq_get_vector(g, tn(n, SY_TENSOR_TOKEN_EMBD_NORM, 0), &w->output_norm)) return error_status;
        if (w->output_norm.data == NULL) return fail(SY_ERR_FORMAT, "tensor %s is missing", n);
    }
    if (w->token_embd.rows != n_vocab)
        return fail(SY_ERR_FORMAT, "%s has %llu rows but the vocabulary has %u tokens", w->token_embd.name,
                    (unsigned long long)w->token_embd.rows, n_vocab);
    cfg->n_vocab = n_vocab;
    if (cfg->n_layer > 4096) return fail(SY_ERR_FORMAT, "%u layers", cfg->n_layer);
    f->layers = calloc(cfg->n_layer ? cfg->n_layer : 1, sizeof *f->layers);
    if (f->layers == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    if (!layer_kinds(g, arch, cfg, f->layers)) return error_status;
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        bool ok = f->layers[l].kind == SY_TF_LAYER_SHORT_CONV ? get_conv_layer(g, l, cfg->conv_kernel, &f->layers[l])
                                                              : get_layer(g, l, &f->layers[l]);
        if (!ok) return error_status;
    }
    w->layers = f->layers;
    return SY_OK;
}

/* Builds the model from the opened file; on failure error_text says why (without the path). */
/* tokenizer.chat_template.NAME keys (llama.cpp writes tool_use and others so); at most 64, the rest ignored. */
static bool collect_named_templates(sy_model *m, const sy_gguf *g) {
    static const char prefix[] = "tokenizer.chat_template.";
    uint64_t n = sy_gguf_kv_count(g);
    for (uint64_t i = 0; i < n && m->n_chat_templates < 64; i++) {
        const char *key = sy_gguf_kv_key(g, i);
        const char *text;
        size_t len;
        if (key == NULL || strncmp(key, prefix, sizeof prefix - 1) != 0 || key[sizeof prefix - 1] == '\0') continue;
        if (!sy_gguf_kv_string(g, i, &text, &len) || memchr(text, '\0', len) != NULL) continue;
        if (m->chat_template_names == NULL) {
            m->chat_template_names = calloc(64, sizeof *m->chat_template_names);
            m->chat_template_texts = calloc(64, sizeof *m->chat_template_texts);
            if (m->chat_template_names == NULL || m->chat_template_texts == NULL) return false;
        }
        char *name = strdup(key + sizeof prefix - 1);
        char *body = malloc(len + 1);
        if (name == NULL || body == NULL) {
            free(name);
            free(body);
            return false;
        }
        memcpy(body, text, len);
        body[len] = '\0';
        m->chat_template_names[m->n_chat_templates] = name;
        m->chat_template_texts[m->n_chat_templates] = body;
        m->n_chat_templates++;
    }
    return true;
}

static sy_status build_model(sy_model *m, gq_format *f, const sy_cpu_options *opt) {
    const sy_gguf *g = f->gguf;
    char err[400];
    m->architecture = sy_gguf_dup_string(g, "general.architecture");
    if (m->architecture == NULL) return fail(SY_ERR_FORMAT, "metadata key 'general.architecture' is missing");
    if (strcmp(m->architecture, "bert") == 0) return gq_bert_build(m, g, opt);
    if (sy_tf_arch_find(m->architecture) == NULL)
        return fail(SY_ERR_UNSUPPORTED, "architecture '%s' is not supported by " PLUGIN_NAME, m->architecture);
    m->name = sy_gguf_dup_string(g, "general.name");
    m->chat_template = sy_gguf_dup_string(g, "tokenizer.chat_template");
    if (!collect_named_templates(m, g)) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");

    sy_status vst;
    gq_vocab *vocab = gq_vocab_from_gguf(g, &vst, err, sizeof err);
    if (vocab == NULL) return fail(vst, "%s", err);
    m->vocab = vocab;
    m->vocab_ops = &gq_vocab_ops;
    m->bos_token = gq_vocab_bos(vocab);
    m->eos_token = gq_vocab_eos(vocab);
    m->pad_token = gq_vocab_pad(vocab);
    m->add_bos = gq_vocab_add_bos(vocab);
    m->weights_mapped_bytes = sy_gguf_file_size(g);

    sy_tf_config cfg;
    sy_tf_weights w;
    sy_status st = bind_weights(g, m->architecture, gq_vocab_size(vocab), f, &cfg, &w, &m->n_ctx_train);
    if (st != SY_OK) return st;
    st = sy_cpu_model_start(m, &cfg, &w, opt);
    if (st != SY_OK) return st;
    gq_describe_weights(m, g);
    log_msg(SY_LOG_INFO, "%s, %u layers, %s, ctx %u, %u threads", m->architecture, cfg.n_layer, m->weight_dtype,
            m->tf ? sy_tf_n_ctx(m->tf) : opt->ctx_size, opt->threads);
    return SY_OK;
}

static sy_status gq_load(const char *path, const sy_option *options, size_t n_options, sy_model **out) {
    if (path == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "load: missing path or output");
    sy_cpu_options opt;
    sy_status st = sy_cpu_options_parse(options, n_options, &opt);
    if (st != SY_OK) return st;
    sy_model *m = sy_cpu_model_new();
    if (m == NULL) return SY_ERR_OUT_OF_MEMORY;
    gq_format *f = calloc(1, sizeof *f);
    if (f == NULL) {
        sy_cpu_unload(m);
        return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    m->format = f;
    m->format_free = gq_format_free;
    char err[400];
    f->gguf = sy_gguf_open(path, err, sizeof err);
    if (f->gguf == NULL) {
        sy_cpu_unload(m);
        return fail(SY_ERR_FORMAT, "%s", err); /* names the path already */
    }
    st = build_model(m, f, &opt);
    if (st != SY_OK) {
        sy_cpu_fail_prefix(path);
        sy_cpu_unload(m);
        return st;
    }
    *out = m;
    return SY_OK;
}

/* ---- estimate ("sy.engine.resources/1") ---- */

/* The header, the tokenizer's token count and the norm vectors are read; no weight is. */
static sy_status gq_estimate(const char *path, const sy_option *options, size_t n_options, sy_resource_estimate *out) {
    if (path == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "estimate: bad arguments");
    sy_cpu_options opt;
    sy_status st = sy_cpu_options_parse(options, n_options, &opt);
    if (st != SY_OK) return st;
    char err[400];
    gq_format f = {0};
    f.gguf = sy_gguf_open(path, err, sizeof err);
    if (f.gguf == NULL) return fail(SY_ERR_FORMAT, "%s", err);
    char *arch = sy_gguf_dup_string(f.gguf, "general.architecture");
    uint32_t n_vocab = 0, n_ctx_train = 0;
    uint64_t vocab_bytes = 0;
    sy_tf_config cfg;
    sy_tf_weights w;
    if (arch == NULL) st = fail(SY_ERR_FORMAT, "metadata key 'general.architecture' is missing");
    else if (sy_tf_arch_find(arch) == NULL && strcmp(arch, "bert") != 0)
        st = fail(SY_ERR_UNSUPPORTED, "architecture '%s' is not supported by " PLUGIN_NAME, arch);
    else if (strcmp(arch, "bert") == 0) st = gq_bert_estimate(f.gguf, &opt, out);
    else if (!gq_vocab_estimate(f.gguf, &n_vocab, &vocab_bytes, &st, err, sizeof err)) st = fail(st, "%s", err);
    else st = bind_weights(f.gguf, arch, n_vocab, &f, &cfg, &w, &n_ctx_train);
    if (st == SY_OK && strcmp(arch, "bert") != 0) st = sy_cpu_estimate(&cfg, &w, n_ctx_train, &opt, sy_gguf_file_size(f.gguf), vocab_bytes, out);
    if (st != SY_OK) sy_cpu_fail_prefix(path);
    free(arch);
    free(f.layers);
    sy_gguf_close(f.gguf);
    return st;
}

static const sy_engine_resources_api resources_api = {
    .struct_size = sizeof(sy_engine_resources_api),
    .estimate = gq_estimate,
};

/* ---- describe ("sy.engine.describe/1") ---- */

static sy_status gq_describe(const char *path, const sy_metadata_sink *sink) {
    if (path == NULL || sink == NULL || sink->put == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "describe: bad arguments");
    char err[400];
    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) return fail(SY_ERR_FORMAT, "%s", err);
    sy_status st = sy_gguf_describe(g, sink);
    sy_gguf_close(g);
    return st;
}

static const sy_engine_describe_api describe_api = {
    .struct_size = sizeof(sy_engine_describe_api),
    .describe = gq_describe,
};

static const sy_engine_api engine_api = {
    .struct_size = sizeof(sy_engine_api),
    .probe = gq_probe,
    .load = gq_load,
    SY_CPU_ENGINE_CALLS,
};

static sy_status gq_init(const sy_host_api *h) {
    sy_cpu_engine_init(h, PLUGIN_NAME);
    return SY_OK;
}

static void gq_deinit(void) {
    gq_vocab_drop_cached();
    sy_cpu_engine_deinit();
}

static const void *gq_get_interface(const char *id) {
    if (id && strcmp(id, SY_ENGINE_INTERFACE_ID) == 0) return &engine_api;
    if (id && strcmp(id, SY_ENGINE_STATE_INTERFACE_ID) == 0) return &sy_cpu_state_api;
    if (id && strcmp(id, SY_ENGINE_RESOURCES_INTERFACE_ID) == 0) return &resources_api;
    if (id && strcmp(id, SY_ENGINE_DESCRIBE_INTERFACE_ID) == 0) return &describe_api;
    if (id && strcmp(id, SY_ENGINE_EMBED_INTERFACE_ID) == 0) return &sy_cpu_embed_api;
    if (id && strcmp(id, SY_PLUGIN_OPTIONS_INTERFACE_ID) == 0) return &sy_cpu_options_api;
    if (id && strcmp(id, SY_PLUGIN_RUNTIME_INTERFACE_ID) == 0) return &sy_cpu_runtime_api;
    return NULL;
}

SY_DEFINE_PLUGIN_ENTRY(
    PLUGIN_NAME, "0.1.0", "GGUF models (and Ollama blobs) on the CPU: F32/F16/BF16 and quantized weights in place",
    gq_init, gq_deinit, gq_get_interface);
