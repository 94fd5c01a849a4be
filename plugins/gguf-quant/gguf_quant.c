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
 * Options (load): threads=N (default: the CPUs this process may use), ctx_size=N (default: the model's training
 * context; tokens one sequence may hold). Others are ignored (logged at debug level).
 *
 * Fingerprint (model_info): XXH3-128, hex, over
 *   1. the file's header bytes: magic, version, every metadata key and value (general.architecture, the
 *      hyper-parameters and the tokenizer included) and every tensor info (name, type, shape, offset), and
 *   2. the first 256 bytes (or fewer) of every tensor's data, in file order,
 * so equal files give equal fingerprints, and two files that differ in config, tokenizer, layout, quantization or
 * (almost surely) weights do not. Reading part 2 touches one page per tensor, nothing more.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>
#include <xxhash.h>

#include <switchyard/engine.h>

#include "gguf.h"
#include "threadpool.h"
#include "gguf_vocab.h"
#include "transformer.h"
#include "transformer_lfm2.h"

#define PLUGIN_NAME "gguf-quant"
#define FINGERPRINT_SAMPLE_BYTES 256

static const sy_host_api *host;
static _Thread_local char error_text[512];
static _Thread_local sy_status error_status; /* the status of the last fail() on this thread */

/* Sets this thread's error message and returns st. */
static sy_status fail(sy_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static sy_status fail(sy_status st, const char *fmt, ...) {
    error_status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return st;
}

static void log_msg(sy_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_msg(sy_log_level level, const char *fmt, ...) {
    if (host == NULL || host->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    host->log(level, PLUGIN_NAME, line);
}

struct sy_seq {
    sy_tf_seq *tf;
};

struct sy_model {
    sy_gguf *gguf;
    gq_vocab *vocab;
    sy_tf_model *tf;
    sy_tf_layer_weights *layers;
    char *architecture, *name, *chat_template;
    char weight_dtype[16];
    char fingerprint[33];
    uint32_t n_ctx_train;
    uint64_t n_params;
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
    else if (sy_tf_arch_find(arch) == NULL)
        st = fail(SY_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported by " PLUGIN_NAME, path, arch);
    free(arch);
    sy_gguf_close(g);
    return st;
}

/* ---- load ---- */

static bool parse_u32_option(const char *key, const char *value, uint32_t lo, uint32_t hi, uint32_t *out) {
    char *end;
    unsigned long long v = strtoull(value, &end, 10);
    if (*value == '\0' || *value == '-' || *end != '\0' || v < lo || v > hi) {
        fail(SY_ERR_INVALID_ARGUMENT, "option %s=%s: expected an integer in [%u, %u]", key, value, lo, hi);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

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
static bool get_matrix(const sy_gguf *g, const char *name, bool required, sy_tf_matrix *out) {
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

static bool get_vector(const sy_gguf *g, const char *name, sy_tf_vector *out) {
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

/* An lfm2 short-conv layer: operator norm, in_proj / conv / out_proj (biases optional), and the usual FFN. */
static bool get_conv_layer(const sy_gguf *g, uint32_t l, uint32_t kernel, sy_tf_layer_weights *w) {
    char n[11][64];
    static const char *const suffix[11] = {
        "attn_norm.weight", "shortconv.in_proj.weight", "shortconv.in_proj.bias", "shortconv.conv.weight",
        "shortconv.conv.bias", "shortconv.out_proj.weight", "shortconv.out_proj.bias", "ffn_norm.weight",
        "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
    for (int i = 0; i < 11; i++) snprintf(n[i], sizeof n[i], "blk.%u.%s", l, suffix[i]);
    return get_vector(g, n[0], &w->attn_norm) && get_matrix(g, n[1], true, &w->conv_in) &&
           get_vector(g, n[2], &w->conv_in_bias) && get_flat_vector(g, n[3], kernel, &w->conv_kernel) &&
           get_vector(g, n[4], &w->conv_bias) && get_matrix(g, n[5], true, &w->conv_out) &&
           get_vector(g, n[6], &w->conv_out_bias) && get_vector(g, n[7], &w->ffn_norm) &&
           get_matrix(g, n[8], true, &w->w_gate) && get_matrix(g, n[9], true, &w->w_up) &&
           get_matrix(g, n[10], true, &w->w_down);
}

static bool get_layer(const sy_gguf *g, uint32_t l, sy_tf_layer_weights *w) {
    char n[15][64];
    static const char *const suffix[15] = {
        "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
        "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "attn_q_norm.weight",
        "attn_k_norm.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
    for (int i = 0; i < 15; i++) snprintf(n[i], sizeof n[i], "blk.%u.%s", l, suffix[i]);
    return get_vector(g, n[0], &w->attn_norm) && get_matrix(g, n[1], true, &w->wq) &&
           get_matrix(g, n[2], true, &w->wk) && get_matrix(g, n[3], true, &w->wv) &&
           get_matrix(g, n[4], true, &w->wo) && get_vector(g, n[5], &w->bq) && get_vector(g, n[6], &w->bk) &&
           get_vector(g, n[7], &w->bv) && get_vector(g, n[8], &w->bo) && get_vector(g, n[9], &w->q_norm) &&
           get_vector(g, n[10], &w->k_norm) && get_vector(g, n[11], &w->ffn_norm) &&
           get_matrix(g, n[12], true, &w->w_gate) && get_matrix(g, n[13], true, &w->w_up) &&
           get_matrix(g, n[14], true, &w->w_down);
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

static void describe_weights(sy_model *m) {
    const sy_gguf *g = m->gguf;
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
    if (h) {
        XXH128_hash_t d = XXH3_128bits_digest(h);
        snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx%016llx", (unsigned long long)d.high64,
                 (unsigned long long)d.low64);
        XXH3_freeState(h);
    } else {
        snprintf(m->fingerprint, sizeof m->fingerprint, "unknown");
    }
}

/* Builds the model from the opened file; on failure error_text says why (without the path). */
static sy_status build_model(sy_model *m, uint32_t threads, uint32_t n_ctx) {
    const sy_gguf *g = m->gguf;
    char err[400];
    m->architecture = sy_gguf_dup_string(g, "general.architecture");
    if (m->architecture == NULL) return fail(SY_ERR_FORMAT, "metadata key 'general.architecture' is missing");
    if (sy_tf_arch_find(m->architecture) == NULL)
        return fail(SY_ERR_UNSUPPORTED, "architecture '%s' is not supported by " PLUGIN_NAME, m->architecture);
    m->name = sy_gguf_dup_string(g, "general.name");
    m->chat_template = sy_gguf_dup_string(g, "tokenizer.chat_template");

    sy_status vst;
    m->vocab = gq_vocab_from_gguf(g, &vst, err, sizeof err);
    if (m->vocab == NULL) return fail(vst, "%s", err);

    sy_tf_config cfg;
    if (!read_config(g, m->architecture, &cfg, &m->n_ctx_train)) return error_status;
    sy_tf_weights w;
    memset(&w, 0, sizeof w);
    if (!get_matrix(g, "token_embd.weight", true, &w.token_embd) ||
        !get_vector(g, "output_norm.weight", &w.output_norm) || !get_matrix(g, "output.weight", false, &w.output) ||
        !get_vector(g, "rope_freqs.weight", &w.rope_freq_factors))
        return error_status;
    if (w.output.data == NULL) w.output = w.token_embd; /* tied embeddings */
    /* llama.cpp names lfm2's final norm token_embd_norm (HF: model.embedding_norm, applied after the layers) */
    if (w.output_norm.data == NULL && cfg.arch->short_conv) {
        if (!get_vector(g, "token_embd_norm.weight", &w.output_norm)) return error_status;
        if (w.output_norm.data == NULL) return fail(SY_ERR_FORMAT, "tensor token_embd_norm.weight is missing");
    }
    if (w.token_embd.rows != gq_vocab_size(m->vocab))
        return fail(SY_ERR_FORMAT, "token_embd.weight has %llu rows but the vocabulary has %u tokens",
                    (unsigned long long)w.token_embd.rows, gq_vocab_size(m->vocab));
    cfg.n_vocab = gq_vocab_size(m->vocab);
    if (cfg.n_layer > 4096) return fail(SY_ERR_FORMAT, "%u layers", cfg.n_layer);
    m->layers = calloc(cfg.n_layer ? cfg.n_layer : 1, sizeof *m->layers);
    if (m->layers == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    if (!layer_kinds(g, m->architecture, &cfg, m->layers)) return error_status;
    for (uint32_t l = 0; l < cfg.n_layer; l++) {
        bool ok = m->layers[l].kind == SY_TF_LAYER_SHORT_CONV ? get_conv_layer(g, l, cfg.conv_kernel, &m->layers[l])
                                                              : get_layer(g, l, &m->layers[l]);
        if (!ok) return error_status;
    }
    w.layers = m->layers;

    if (n_ctx == 0) n_ctx = m->n_ctx_train ? m->n_ctx_train : 4096;
    m->tf = sy_tf_create(&cfg, &w, n_ctx, threads, err, sizeof err);
    if (m->tf == NULL) return fail(strstr(err, "not supported") ? SY_ERR_UNSUPPORTED : SY_ERR_FORMAT, "%s", err);
    describe_weights(m);
    log_msg(SY_LOG_INFO, "%s, %u layers, %s, ctx %u, %u threads", m->architecture, cfg.n_layer, m->weight_dtype,
            n_ctx, threads);
    return SY_OK;
}

static void gq_unload(sy_model *m);

static sy_status gq_load(const char *path, const sy_option *options, size_t n_options, sy_model **out) {
    if (path == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "load: missing path or output");
    uint32_t threads = (uint32_t)sy_threadpool_default_threads(), n_ctx = 0;
    for (size_t i = 0; i < n_options; i++) {
        const char *k = options[i].key, *v = options[i].value ? options[i].value : "";
        if (k == NULL) continue;
        if (strcmp(k, "threads") == 0) {
            if (!parse_u32_option(k, v, 1, SY_THREADPOOL_MAX_THREADS, &threads)) return SY_ERR_INVALID_ARGUMENT;
        } else if (strcmp(k, "ctx_size") == 0) {
            if (!parse_u32_option(k, v, 0, 1u << 24, &n_ctx)) return SY_ERR_INVALID_ARGUMENT;
        } else {
            log_msg(SY_LOG_DEBUG, "ignoring option %s", k);
        }
    }
    sy_model *m = calloc(1, sizeof *m);
    if (m == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    char err[400];
    m->gguf = sy_gguf_open(path, err, sizeof err);
    if (m->gguf == NULL) {
        free(m);
        return fail(SY_ERR_FORMAT, "%s", err); /* names the path already */
    }
    sy_status st = build_model(m, threads, n_ctx);
    if (st != SY_OK) {
        char reason[sizeof error_text];
        snprintf(reason, sizeof reason, "%s", error_text);
        fail(st, "%s: %s", path, reason);
        gq_unload(m);
        return st;
    }
    *out = m;
    return SY_OK;
}

static void gq_unload(sy_model *m) {
    if (m == NULL) return;
    sy_tf_destroy(m->tf);
    gq_vocab_free(m->vocab);
    sy_gguf_close(m->gguf);
    free(m->layers);
    free(m->architecture);
    free(m->name);
    free(m->chat_template);
    free(m);
}

/* ---- facts ---- */

static sy_status gq_model_info(const sy_model *m, sy_model_info *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "model_info: bad arguments");
    const sy_tf_config *c = sy_tf_model_config(m->tf);
    sy_model_info info = {
        .struct_size = out->struct_size,
        .architecture = m->architecture,
        .name = m->name ? m->name : "",
        .weight_dtype = m->weight_dtype,
        .fingerprint = m->fingerprint,
        .chat_template = m->chat_template,
        .n_vocab = c->n_vocab,
        .n_ctx_train = m->n_ctx_train,
        .n_ctx = sy_tf_n_ctx(m->tf),
        .n_layer = c->n_layer,
        .n_embd = c->n_embd,
        .n_params = m->n_params,
        .bos_token = gq_vocab_bos(m->vocab),
        .eos_token = gq_vocab_eos(m->vocab),
        .pad_token = gq_vocab_pad(m->vocab),
        .add_bos = gq_vocab_add_bos(m->vocab),
        .max_sequences = 0,
    };
    /* Write only the fields the host's struct has. */
    size_t n = out->struct_size < sizeof info ? out->struct_size : sizeof info;
    memcpy(out, &info, n);
    return SY_OK;
}

static sy_status gq_memory_usage(const sy_model *m, sy_memory_usage *out) {
    if (m == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: bad arguments");
    sy_tf_memory_info tm;
    sy_tf_memory(m->tf, &tm);
    sy_memory_usage u = {
        .struct_size = out->struct_size,
        .mapped_bytes = sy_gguf_file_size(m->gguf),
        .resident_bytes = tm.resident_bytes + gq_vocab_memory(m->vocab),
        .device_bytes = 0,
        .kv_bytes = tm.kv_bytes,
    };
    size_t n = out->struct_size < sizeof u ? out->struct_size : sizeof u;
    memcpy(out, &u, n);
    return SY_OK;
}

/* ---- tokenizer ---- */

static sy_status gq_tokenize(const sy_model *m, const char *text, size_t text_len, uint32_t flags, int32_t *out,
                             size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (text == NULL && text_len > 0) || (out == NULL && capacity > 0))
        return fail(SY_ERR_INVALID_ARGUMENT, "tokenize: bad arguments");
    char err[256];
    sy_status st = gq_vocab_tokenize(m->vocab, text ? text : "", text_len, flags, out, capacity, n_out, err,
                                     sizeof err);
    return st == SY_OK ? SY_OK : fail(st, "tokenize: %s", err);
}

static sy_status gq_token_to_bytes(const sy_model *m, int32_t token, char *out, size_t capacity, size_t *n_out) {
    if (m == NULL || n_out == NULL || (out == NULL && capacity > 0))
        return fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: bad arguments");
    sy_status st = gq_vocab_token_bytes(m->vocab, token, out, capacity, n_out);
    if (st == SY_ERR_INVALID_ARGUMENT) return fail(st, "token id %d out of range", token);
    if (st == SY_ERR_BUFFER_TOO_SMALL)
        return fail(st, "token %d: %zu bytes do not fit in %zu", token, *n_out, capacity);
    return st;
}

static uint32_t gq_token_flags(const sy_model *m, int32_t token) {
    return m == NULL ? 0 : gq_vocab_token_flags(m->vocab, token);
}

/* ---- sequences ---- */

static sy_status gq_seq_create(sy_model *m, sy_seq **out) {
    if (m == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_create: bad arguments");
    sy_seq *s = calloc(1, sizeof *s);
    if (s == NULL || (s->tf = sy_tf_seq_create(m->tf)) == NULL) {
        free(s);
        return fail(SY_ERR_OUT_OF_MEMORY, "seq_create: out of memory");
    }
    *out = s;
    return SY_OK;
}

static void gq_seq_free(sy_model *m, sy_seq *s) {
    if (m == NULL || s == NULL) return;
    sy_tf_seq_free(m->tf, s->tf);
    free(s);
}

static uint32_t gq_seq_length(const sy_model *m, const sy_seq *s) {
    (void)m;
    return s ? sy_tf_seq_length(s->tf) : 0;
}

static sy_status gq_seq_truncate(sy_model *m, sy_seq *s, uint32_t n) {
    if (m == NULL || s == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: bad arguments");
    sy_status st = sy_tf_seq_truncate(m->tf, s->tf, n);
    if (st == SY_ERR_UNSUPPORTED)
        return fail(st, "seq_truncate: the recurrent state cannot roll back from %u to %u tokens",
                    sy_tf_seq_length(s->tf), n);
    if (st != SY_OK)
        return fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: %u is more than the %u tokens held", n,
                    sy_tf_seq_length(s->tf));
    return SY_OK;
}

static sy_status gq_seq_fork(sy_model *m, const sy_seq *src, uint32_t n, sy_seq **out) {
    if (m == NULL || src == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: bad arguments");
    if (n > sy_tf_seq_length(src->tf))
        return fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: %u is more than the %u tokens held", n,
                    sy_tf_seq_length(src->tf));
    sy_seq *s = calloc(1, sizeof *s);
    sy_status st = s ? sy_tf_seq_fork(m->tf, src->tf, n, &s->tf) : SY_ERR_OUT_OF_MEMORY;
    if (st != SY_OK) {
        free(s);
        if (st == SY_ERR_UNSUPPORTED)
            return fail(st, "seq_fork: the recurrent state cannot roll back from %u to %u tokens",
                        sy_tf_seq_length(src->tf), n);
        return fail(SY_ERR_OUT_OF_MEMORY, "seq_fork: out of memory");
    }
    *out = s;
    return SY_OK;
}

/* ---- decode ---- */

static int host_cancelled(void *call) {
    return host && host->is_cancelled ? host->is_cancelled((const sy_host_call *)call) : 0;
}

static sy_status gq_decode(sy_model *m, const sy_decode_batch *batch) {
    if (m == NULL || batch == NULL || (batch->n_items > 0 && batch->items == NULL) ||
        (batch->n_items > 0 && batch->item_size < offsetof(sy_decode_item, logits) + sizeof(float *)))
        return fail(SY_ERR_INVALID_ARGUMENT, "decode: bad batch");
    sy_tf_batch_item *items = calloc(batch->n_items ? batch->n_items : 1, sizeof *items);
    if (items == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "decode: out of memory");
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *it = sy_decode_batch_item(batch, i);
        if (it->seq == NULL) {
            free(items);
            return fail(SY_ERR_INVALID_ARGUMENT, "decode: item %u has no sequence", i);
        }
        items[i] = (sy_tf_batch_item){it->seq->tf, it->tokens, it->n_tokens, it->n_logits, it->logits};
    }
    bool has_call = SY_HAS_FIELD(batch, sy_decode_batch, call) && batch->call != NULL;
    char err[256];
    sy_status st = sy_tf_decode(m->tf, items, batch->n_items, has_call ? host_cancelled : NULL,
                                has_call ? (void *)batch->call : NULL, err, sizeof err);
    free(items);
    if (st != SY_OK) return fail(st, "decode: %s", err);
    return SY_OK;
}

static const char *gq_error_message(void) { return error_text; }

static const sy_engine_api engine_api = {
    .struct_size = sizeof(sy_engine_api),
    .error_message = gq_error_message,
    .probe = gq_probe,
    .load = gq_load,
    .unload = gq_unload,
    .model_info = gq_model_info,
    .tokenize = gq_tokenize,
    .token_to_bytes = gq_token_to_bytes,
    .token_flags = gq_token_flags,
    .seq_create = gq_seq_create,
    .seq_free = gq_seq_free,
    .seq_length = gq_seq_length,
    .seq_truncate = gq_seq_truncate,
    .seq_fork = gq_seq_fork,
    .decode = gq_decode,
    .memory_usage = gq_memory_usage,
};

static sy_status gq_init(const sy_host_api *h) {
    host = h;
    return SY_OK;
}

static void gq_deinit(void) { host = NULL; }

static const void *gq_get_interface(const char *id) {
    if (id && strcmp(id, SY_ENGINE_INTERFACE_ID) == 0) return &engine_api;
    return NULL;
}

SY_DEFINE_PLUGIN_ENTRY(
    PLUGIN_NAME, "0.1.0", "GGUF models (and Ollama blobs) on the CPU: F32/F16/BF16 and quantized weights in place",
    gq_init, gq_deinit, gq_get_interface);
