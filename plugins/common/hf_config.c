/* Hugging Face config.json / generation_config.json parsing; see hf_config.h. */
#include "hf_config.h"

#include "json_reader.h"
#include "sy_dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where messages go and which file they blame. */
typedef struct parse_ctx {
    const char *source;
    char *err;
    size_t err_size;
} parse_ctx;

static void fail(const parse_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const parse_ctx *c, const char *fmt, ...) {
    if (c->err == NULL || c->err_size == 0) return;
    int n = snprintf(c->err, c->err_size, "%s: ", c->source);
    if (n < 0 || (size_t)n >= c->err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, c->err_size - (size_t)n, fmt, ap);
    va_end(ap);
}

/* A string from the file fit for a one-line message: control bytes become '?', long strings are cut. */
typedef struct printable {
    char text[80];
} printable;

static printable printable_string(const char *s) {
    printable p;
    size_t n = 0;
    for (; s[n] != '\0' && n < sizeof p.text - 4; n++) {
        unsigned char ch = (unsigned char)s[n];
        p.text[n] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (s[n] != '\0') {
        memcpy(p.text + n, "...", 3);
        n += 3;
    }
    p.text[n] = '\0';
    return p;
}

#define PS(s) (printable_string(s).text)

/* An absent key and a JSON null both mean "not set". */
static const sy_json *field(const sy_json *obj, const char *key) {
    const sy_json *item = sy_json_get(obj, key);
    return sy_json_is_null(item) ? NULL : item;
}

/* 1 read, 0 not set, -1 refused (message written). Integers must be exact and within [min, max]. */
static int get_int(const parse_ctx *c, const sy_json *obj, const char *key, int64_t min, int64_t max, int64_t *out) {
    const sy_json *item = field(obj, key);
    if (item == NULL) return 0;
    double d = sy_json_is_number(item) ? item->num : NAN;
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != floor(d)) {
        fail(c, "%s is not an integer", key);
        return -1;
    }
    int64_t v = (int64_t)d;
    if (v < min || v > max) {
        fail(c, "%s %lld is outside [%lld, %lld]", key, (long long)v, (long long)min, (long long)max);
        return -1;
    }
    *out = v;
    return 1;
}

static int get_u32(const parse_ctx *c, const sy_json *obj, const char *key, uint32_t min, uint32_t max,
                   uint32_t *out) {
    int64_t v;
    int r = get_int(c, obj, key, min, max, &v);
    if (r == 1) *out = (uint32_t)v;
    return r;
}

static bool require_u32(const parse_ctx *c, const sy_json *obj, const char *key, uint32_t min, uint32_t max,
                        uint32_t *out) {
    int r = get_u32(c, obj, key, min, max, out);
    if (r == 0) fail(c, "%s is missing", key);
    return r == 1;
}

/* Finite number in [min, max], or in (min, max] when min_exclusive. */
static int get_double(const parse_ctx *c, const sy_json *obj, const char *key, double min, double max,
                      bool min_exclusive, double *out) {
    const sy_json *item = field(obj, key);
    if (item == NULL) return 0;
    if (!sy_json_is_number(item) || !isfinite(item->num)) {
        fail(c, "%s is not a number", key);
        return -1;
    }
    double v = item->num;
    if ((min_exclusive ? v <= min : v < min) || v > max) {
        fail(c, "%s %g is outside %s%g, %g]", key, v, min_exclusive ? "(" : "[", min, max);
        return -1;
    }
    *out = v;
    return 1;
}

static int get_bool(const parse_ctx *c, const sy_json *obj, const char *key, bool *out) {
    const sy_json *item = field(obj, key);
    if (item == NULL) return 0;
    if (!sy_json_is_bool(item)) {
        fail(c, "%s is not true or false", key);
        return -1;
    }
    *out = sy_json_is_true(item);
    return 1;
}

/* A string field; NULL when not set, *bad when present but not a string. */
static const char *get_string(const parse_ctx *c, const sy_json *obj, const char *key, bool *bad) {
    const sy_json *item = field(obj, key);
    *bad = false;
    if (item == NULL) return NULL;
    if (!sy_json_is_string(item)) {
        fail(c, "%s is not a string", key);
        *bad = true;
        return NULL;
    }
    return item->str;
}

/* A token id below vocab (when vocab > 0). Negative pad ids are a common way of saying "none". */
static int get_token(const parse_ctx *c, const sy_json *obj, const char *key, uint32_t vocab, bool negative_is_none,
                     int64_t *out) {
    *out = SY_HF_NO_TOKEN;
    int64_t v;
    int64_t max = vocab > 0 ? (int64_t)vocab - 1 : INT32_MAX;
    int r = get_int(c, obj, key, negative_is_none ? INT32_MIN : 0, max, &v);
    if (r == 1) *out = v < 0 ? SY_HF_NO_TOKEN : v;
    return r;
}

/* eos_token_id: one id or a list of ids. */
static bool get_eos(const parse_ctx *c, const sy_json *obj, uint32_t vocab, int64_t *ids, uint32_t *n) {
    *n = 0;
    const sy_json *item = field(obj, "eos_token_id");
    if (item == NULL) return true;
    if (sy_json_is_number(item)) {
        int64_t v;
        if (get_token(c, obj, "eos_token_id", vocab, false, &v) != 1) return false;
        ids[(*n)++] = v;
        return true;
    }
    if (!sy_json_is_array(item)) {
        fail(c, "eos_token_id is neither an id nor a list of ids");
        return false;
    }
    size_t count = sy_json_size(item);
    if (count > SY_HF_MAX_EOS) {
        fail(c, "eos_token_id lists %zu ids, more than %d", count, SY_HF_MAX_EOS);
        return false;
    }
    for (const sy_json *e = item->child; e != NULL; e = e->next) {
        double d = sy_json_is_number(e) ? e->num : -1.0;
        if (!(d >= 0.0 && d < (vocab > 0 ? (double)vocab : 2147483648.0)) || d != floor(d)) {
            fail(c, "eos_token_id[%u] is not a token id below %u", *n, vocab);
            return false;
        }
        ids[(*n)++] = (int64_t)d;
    }
    return true;
}

/* ---- rope ---- */

static bool parse_rope(const parse_ctx *c, const sy_json *root, sy_hf_config *cfg, double default_theta) {
    sy_hf_rope *rope = &cfg->rope;
    memset(rope, 0, sizeof *rope);
    rope->type = SY_HF_ROPE_DEFAULT;
    rope->theta = default_theta;
    rope->beta_fast = 32.0;
    rope->beta_slow = 1.0;
    if (get_double(c, root, "rope_theta", 0.0, 1e12, true, &rope->theta) < 0) return false;

    /* transformers 5 folds theta and scaling into rope_parameters; older files use rope_scaling. */
    const sy_json *params = field(root, "rope_parameters");
    const char *params_key = "rope_parameters";
    if (params == NULL) {
        params = field(root, "rope_scaling");
        params_key = "rope_scaling";
    }
    if (params == NULL) return true;
    if (!sy_json_is_object(params)) {
        fail(c, "%s is not an object", params_key);
        return false;
    }
    if (get_double(c, params, "rope_theta", 0.0, 1e12, true, &rope->theta) < 0) return false;
    bool bad;
    const char *type = get_string(c, params, "rope_type", &bad);
    if (bad) return false;
    if (type == NULL) type = get_string(c, params, "type", &bad);
    if (bad) return false;
    if (type == NULL || strcmp(type, "default") == 0) {
        rope->type = SY_HF_ROPE_DEFAULT;
    } else if (strcmp(type, "linear") == 0) {
        rope->type = SY_HF_ROPE_LINEAR;
    } else if (strcmp(type, "llama3") == 0) {
        rope->type = SY_HF_ROPE_LLAMA3;
    } else if (strcmp(type, "yarn") == 0) {
        rope->type = SY_HF_ROPE_YARN;
    } else {
        fail(c, "%s type %s is not supported (default, linear, llama3 and yarn are)", params_key, PS(type));
        return false;
    }
    if (rope->type == SY_HF_ROPE_DEFAULT) return true;

    rope->factor = 1.0;
    int has_factor = get_double(c, params, "factor", 0.0, 1024.0, true, &rope->factor);
    if (has_factor < 0) return false;
    if (has_factor == 0) {
        fail(c, "%s of type %s has no factor", params_key, type);
        return false;
    }
    if (get_u32(c, params, "original_max_position_embeddings", 1, 1u << 26,
                &rope->original_max_position_embeddings) < 0)
        return false;
    if (rope->type == SY_HF_ROPE_LLAMA3) {
        int has_low = get_double(c, params, "low_freq_factor", 0.0, 1e6, true, &rope->low_freq_factor);
        if (has_low < 0) return false;
        int has_high = get_double(c, params, "high_freq_factor", 0.0, 1e6, true, &rope->high_freq_factor);
        if (has_high < 0) return false;
        if (has_low == 0 || has_high == 0 || rope->original_max_position_embeddings == 0) {
            fail(c, "%s llama3 needs low_freq_factor, high_freq_factor and original_max_position_embeddings",
                 params_key);
            return false;
        }
        if (rope->high_freq_factor <= rope->low_freq_factor) {
            fail(c, "%s llama3 high_freq_factor must exceed low_freq_factor", params_key);
            return false;
        }
    }
    if (rope->type == SY_HF_ROPE_YARN) {
        if (get_double(c, params, "beta_fast", 0.0, 1e6, true, &rope->beta_fast) < 0 ||
            get_double(c, params, "beta_slow", 0.0, 1e6, true, &rope->beta_slow) < 0 ||
            get_double(c, params, "attention_factor", 0.0, 1e3, true, &rope->attention_factor) < 0)
            return false;
    }
    return true;
}

/* ---- architectures ---- */

typedef struct arch_info {
    const char *model_type;
    const char *class_name;
    sy_hf_arch arch;
    /* transformers class defaults for absent fields */
    uint32_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    bool tie_word_embeddings;
} arch_info;

static const arch_info arch_table[] = {
    {"qwen2", "Qwen2ForCausalLM", SY_HF_ARCH_QWEN2, 32768, 1e-6, 10000.0, false},
    {"qwen3", "Qwen3ForCausalLM", SY_HF_ARCH_QWEN3, 32768, 1e-6, 10000.0, false},
    {"llama", "LlamaForCausalLM", SY_HF_ARCH_LLAMA, 2048, 1e-6, 10000.0, false},
    {"lfm2", "Lfm2ForCausalLM", SY_HF_ARCH_LFM2, 128000, 1e-5, 1000000.0, true},
};

const char *sy_hf_arch_name(sy_hf_arch arch) {
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
        if (arch_table[i].arch == arch) return arch_table[i].model_type;
    }
    return "unknown";
}

static const arch_info *identify(const parse_ctx *c, const sy_json *root, bool *base_model) {
    *base_model = false;
    bool bad;
    const char *model_type = get_string(c, root, "model_type", &bad);
    if (bad) return NULL;
    if (model_type == NULL) {
        fail(c, "model_type is missing");
        return NULL;
    }
    const arch_info *info = NULL;
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
        if (strcmp(arch_table[i].model_type, model_type) == 0) info = &arch_table[i];
    }
    if (info == NULL) {
        fail(c, "model_type %s is not supported (qwen2, qwen3, llama and lfm2 are)", PS(model_type));
        return NULL;
    }
    const sy_json *archs = field(root, "architectures");
    if (archs != NULL) {
        if (!sy_json_is_array(archs) || sy_json_size(archs) != 1 || !sy_json_is_string(sy_json_at(archs, 0))) {
            fail(c, "architectures is not a list of one class name");
            return NULL;
        }
        const char *cls = sy_json_at(archs, 0)->str;
        /* the bare model without its LM head ("Qwen3Model": decoder embedding models) is the same network */
        char base[64];
        snprintf(base, sizeof base, "%.*sModel", (int)(strlen(info->class_name) - strlen("ForCausalLM")),
                 info->class_name);
        if (strcmp(cls, base) == 0 && info->arch != SY_HF_ARCH_LFM2) {
            *base_model = true;
        } else if (strcmp(cls, info->class_name) != 0) {
            fail(c, "architecture %s is not supported (%s is, for model_type %s)", PS(cls), info->class_name,
                 info->model_type);
            return NULL;
        }
    }
    return info;
}

/* Layer kinds: lfm2 mixes attention and convolution layers; the others must be all full attention. */
static bool parse_layer_types(const parse_ctx *c, const sy_json *root, sy_hf_config *cfg) {
    uint32_t n = cfg->num_hidden_layers;
    memset(cfg->layer_types, SY_HF_LAYER_ATTENTION, sizeof cfg->layer_types);
    const sy_json *types = field(root, "layer_types");
    if (types != NULL) {
        if (!sy_json_is_array(types) || sy_json_size(types) != n) {
            fail(c, "layer_types is not a list of %u layer kinds", n);
            return false;
        }
        uint32_t i = 0;
        for (const sy_json *t = types->child; t != NULL; t = t->next) {
            const char *kind = sy_json_is_string(t) ? t->str : "(not a string)";
            if (strcmp(kind, "full_attention") == 0) {
                cfg->layer_types[i] = SY_HF_LAYER_ATTENTION;
            } else if (cfg->arch == SY_HF_ARCH_LFM2 && strcmp(kind, "conv") == 0) {
                cfg->layer_types[i] = SY_HF_LAYER_CONV;
            } else {
                fail(c, "layer_types[%u] %s is not supported", i, PS(kind));
                return false;
            }
            i++;
        }
        return true;
    }
    if (cfg->arch != SY_HF_ARCH_LFM2) return true;
    const sy_json *idxs = field(root, "full_attn_idxs");
    if (idxs == NULL) return true; /* transformers: every layer attends */
    if (!sy_json_is_array(idxs)) {
        fail(c, "full_attn_idxs is not a list of layer indices");
        return false;
    }
    memset(cfg->layer_types, SY_HF_LAYER_CONV, n);
    uint32_t k = 0;
    for (const sy_json *e = idxs->child; e != NULL; e = e->next) {
        double d = sy_json_is_number(e) ? e->num : -1.0;
        if (!(d >= 0.0 && d < (double)n) || d != floor(d)) {
            fail(c, "full_attn_idxs[%u] is not a layer index below %u", k, n);
            return false;
        }
        cfg->layer_types[(uint32_t)d] = SY_HF_LAYER_ATTENTION;
        k++;
    }
    return true;
}

/* The MLP width Lfm2MLP builds from intermediate_size, computed the way transformers does (doubles, truncation). */
static bool lfm2_ff_dim(const parse_ctx *c, const sy_json *root, sy_hf_config *cfg) {
    bool auto_adjust = true;
    double multiplier = 1.0;
    uint32_t multiple_of = 256;
    if (get_bool(c, root, "block_auto_adjust_ff_dim", &auto_adjust) < 0) return false;
    int has_multiplier = get_double(c, root, "block_ffn_dim_multiplier", 0.0, 64.0, true, &multiplier);
    if (has_multiplier < 0) return false;
    if (get_u32(c, root, "block_multiple_of", 1, 1u << 16, &multiple_of) < 0) return false;
    /* An explicit null multiplier skips the rounding; an absent one takes the class default 1.0. */
    bool multiplier_null = sy_json_is_null(sy_json_get(root, "block_ffn_dim_multiplier"));
    uint64_t ff = cfg->intermediate_size;
    if (auto_adjust) {
        ff = (uint64_t)(2.0 * (double)ff / 3.0);
        if (!multiplier_null) {
            ff = (uint64_t)(multiplier * (double)ff);
            ff = (uint64_t)multiple_of * ((ff + multiple_of - 1) / multiple_of);
        }
    }
    if (ff == 0 || ff > (1u << 20)) {
        fail(c, "the lfm2 MLP width %llu derived from intermediate_size is outside [1, %u]", (unsigned long long)ff,
             1u << 20);
        return false;
    }
    cfg->lfm2_ff_dim = (uint32_t)ff;
    return true;
}

static bool parse_config_root(const parse_ctx *c, const sy_json *root, sy_hf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    if (!sy_json_is_object(root)) {
        fail(c, "not a JSON object");
        return false;
    }
    const arch_info *info = identify(c, root, &cfg->base_model);
    if (info == NULL) return false;
    cfg->arch = info->arch;
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", info->model_type);
    if (field(root, "architectures") != NULL) {
        snprintf(cfg->architecture, sizeof cfg->architecture, "%s", info->class_name);
    }

    if (field(root, "quantization_config") != NULL) {
        fail(c, "quantization_config is not supported (only unquantized F32, F16 and BF16 weights are)");
        return false;
    }
    bool bad;
    const char *act = get_string(c, root, "hidden_act", &bad);
    if (bad) return false;
    if (act != NULL && strcmp(act, "silu") != 0) {
        fail(c, "hidden_act %s is not supported (silu is)", PS(act));
        return false;
    }

    if (!require_u32(c, root, "hidden_size", 1, 65536, &cfg->hidden_size) ||
        !require_u32(c, root, "intermediate_size", 1, 1u << 20, &cfg->intermediate_size) ||
        !require_u32(c, root, "num_hidden_layers", 1, SY_HF_MAX_LAYERS, &cfg->num_hidden_layers) ||
        !require_u32(c, root, "num_attention_heads", 1, 1024, &cfg->num_attention_heads) ||
        !require_u32(c, root, "vocab_size", 1, 1u << 24, &cfg->vocab_size))
        return false;
    cfg->num_key_value_heads = cfg->num_attention_heads;
    if (get_u32(c, root, "num_key_value_heads", 1, 1024, &cfg->num_key_value_heads) < 0) return false;
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0) {
        fail(c, "num_key_value_heads %u does not divide num_attention_heads %u", cfg->num_key_value_heads,
             cfg->num_attention_heads);
        return false;
    }
    int has_head_dim = get_u32(c, root, "head_dim", 1, 1024, &cfg->head_dim);
    if (has_head_dim < 0) return false;
    if (has_head_dim == 0) {
        if (cfg->arch == SY_HF_ARCH_QWEN3) {
            cfg->head_dim = 128; /* Qwen3Config's default */
        } else if (cfg->hidden_size % cfg->num_attention_heads != 0) {
            fail(c, "num_attention_heads %u does not divide hidden_size %u and there is no head_dim",
                 cfg->num_attention_heads, cfg->hidden_size);
            return false;
        } else {
            cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
        }
    }
    if (cfg->head_dim % 2 != 0) {
        fail(c, "head_dim %u is odd; rotary embeddings need pairs", cfg->head_dim);
        return false;
    }
    cfg->max_position_embeddings = info->max_position_embeddings;
    if (get_u32(c, root, "max_position_embeddings", 1, 1u << 26, &cfg->max_position_embeddings) < 0) return false;
    cfg->rms_norm_eps = info->rms_norm_eps;
    const char *eps_key = cfg->arch == SY_HF_ARCH_LFM2 ? "norm_eps" : "rms_norm_eps";
    if (get_double(c, root, eps_key, 0.0, 0.1, true, &cfg->rms_norm_eps) < 0) return false;
    if (!parse_rope(c, root, cfg, info->rope_theta)) return false;
    double partial_rotary = 1.0;
    if (get_double(c, root, "partial_rotary_factor", 0.0, 1.0, true, &partial_rotary) < 0) return false;
    if (partial_rotary != 1.0) {
        fail(c, "partial_rotary_factor %g is not supported (1 is)", partial_rotary);
        return false;
    }

    cfg->tie_word_embeddings = info->tie_word_embeddings;
    if (get_bool(c, root, "tie_word_embeddings", &cfg->tie_word_embeddings) < 0) return false;

    bool attention_bias = false, mlp_bias = false;
    if (get_bool(c, root, "attention_bias", &attention_bias) < 0 || get_bool(c, root, "mlp_bias", &mlp_bias) < 0)
        return false;
    switch (cfg->arch) {
    case SY_HF_ARCH_QWEN2:
        cfg->qkv_bias = true;
        break;
    case SY_HF_ARCH_QWEN3:
        cfg->qkv_bias = cfg->o_bias = attention_bias;
        cfg->qk_norm = true;
        break;
    case SY_HF_ARCH_LLAMA:
        cfg->qkv_bias = cfg->o_bias = attention_bias;
        cfg->mlp_bias = mlp_bias;
        break;
    case SY_HF_ARCH_LFM2:
        cfg->qk_norm = true;
        break;
    }

    /* Sliding-window attention changes which keys a query sees; switchyard attends to the whole context. */
    if (cfg->arch == SY_HF_ARCH_QWEN2 || cfg->arch == SY_HF_ARCH_QWEN3) {
        bool sliding = false;
        if (get_bool(c, root, "use_sliding_window", &sliding) < 0) return false;
        if (sliding) {
            fail(c, "use_sliding_window true is not supported");
            return false;
        }
    }
    if (!parse_layer_types(c, root, cfg)) return false;

    cfg->torch_dtype = -1;
    const char *dtype = get_string(c, root, "dtype", &bad);
    if (bad) return false;
    const char *dtype_key = "dtype";
    if (dtype == NULL) {
        dtype = get_string(c, root, "torch_dtype", &bad);
        dtype_key = "torch_dtype";
        if (bad) return false;
    }
    if (dtype != NULL) {
        if (strcmp(dtype, "float32") == 0) cfg->torch_dtype = SY_DTYPE_F32;
        else if (strcmp(dtype, "float16") == 0) cfg->torch_dtype = SY_DTYPE_F16;
        else if (strcmp(dtype, "bfloat16") == 0) cfg->torch_dtype = SY_DTYPE_BF16;
        else {
            fail(c, "%s %s is not supported (float32, float16 and bfloat16 are)", dtype_key, PS(dtype));
            return false;
        }
    }

    if (get_token(c, root, "bos_token_id", cfg->vocab_size, false, &cfg->bos_token_id) < 0 ||
        get_token(c, root, "pad_token_id", cfg->vocab_size, true, &cfg->pad_token_id) < 0 ||
        !get_eos(c, root, cfg->vocab_size, cfg->eos_token_ids, &cfg->n_eos))
        return false;

    if (cfg->arch == SY_HF_ARCH_LFM2) {
        cfg->conv_l_cache = 3;
        if (get_u32(c, root, "conv_L_cache", 1, 64, &cfg->conv_l_cache) < 0) return false;
        if (get_bool(c, root, "conv_bias", &cfg->conv_bias) < 0) return false;
        uint32_t block_dim;
        int r = get_u32(c, root, "block_dim", 1, 65536, &block_dim);
        if (r < 0) return false;
        if (r == 1 && block_dim != cfg->hidden_size) {
            fail(c, "block_dim %u differs from hidden_size %u", block_dim, cfg->hidden_size);
            return false;
        }
        if (!lfm2_ff_dim(c, root, cfg)) return false;
    }
    return true;
}

/* The document as a tree; false (message written) when it is not JSON, or holds U+0000 in a string (which the
 * C strings taken from it would silently cut short). */
static bool parse_document(const parse_ctx *c, const char *json, size_t len, sy_json_doc *doc) {
    sy_json_error je;
    if (!sy_json_parse(doc, json, len, NULL, &je)) {
        fail(c, "not valid JSON (at byte %zu: %s)", je.at, je.what);
        return false;
    }
    if (doc->saw_nul) {
        fail(c, "strings containing U+0000 are not supported");
        sy_json_doc_free(doc);
        return false;
    }
    return true;
}

bool sy_hf_config_parse(const char *json, size_t len, const char *source, sy_hf_config *out, char *err,
                        size_t err_size) {
    parse_ctx c = {source != NULL ? source : "config.json", err, err_size};
    if (err != NULL && err_size > 0) err[0] = '\0';
    if (json == NULL || len > SY_HF_MAX_CONFIG_BYTES) {
        fail(&c, "missing or larger than %u bytes", SY_HF_MAX_CONFIG_BYTES);
        return false;
    }
    sy_json_doc doc;
    if (!parse_document(&c, json, len, &doc)) return false;
    const sy_json *root = doc.root;
    sy_hf_config cfg;
    bool ok = parse_config_root(&c, root, &cfg);
    sy_json_doc_free(&doc);
    if (ok) *out = cfg;
    return ok;
}

static bool parse_generation_root(const parse_ctx *c, const sy_json *root, uint32_t vocab,
                                  sy_hf_generation_config *g) {
    if (!sy_json_is_object(root)) {
        fail(c, "not a JSON object");
        return false;
    }
    if (get_token(c, root, "bos_token_id", vocab, false, &g->bos_token_id) < 0 ||
        get_token(c, root, "pad_token_id", vocab, true, &g->pad_token_id) < 0 ||
        !get_eos(c, root, vocab, g->eos_token_ids, &g->n_eos))
        return false;
    int r;
    if ((r = get_bool(c, root, "do_sample", &g->do_sample)) < 0) return false;
    g->has_do_sample = r == 1;
    if ((r = get_double(c, root, "temperature", 0.0, 100.0, false, &g->temperature)) < 0) return false;
    g->has_temperature = r == 1;
    if ((r = get_double(c, root, "top_p", 0.0, 1.0, false, &g->top_p)) < 0) return false;
    g->has_top_p = r == 1;
    if ((r = get_u32(c, root, "top_k", 0, 1u << 24, &g->top_k)) < 0) return false;
    g->has_top_k = r == 1;
    if ((r = get_double(c, root, "repetition_penalty", 0.0, 100.0, true, &g->repetition_penalty)) < 0) return false;
    g->has_repetition_penalty = r == 1;
    if ((r = get_u32(c, root, "max_new_tokens", 0, 1u << 26, &g->max_new_tokens)) < 0) return false;
    g->has_max_new_tokens = r == 1;
    return true;
}

static void generation_config_empty(sy_hf_generation_config *g) {
    memset(g, 0, sizeof *g);
    g->bos_token_id = SY_HF_NO_TOKEN;
    g->pad_token_id = SY_HF_NO_TOKEN;
}

bool sy_hf_generation_config_parse(const char *json, size_t len, const char *source, uint32_t vocab_size,
                                   sy_hf_generation_config *out, char *err, size_t err_size) {
    parse_ctx c = {source != NULL ? source : "generation_config.json", err, err_size};
    if (err != NULL && err_size > 0) err[0] = '\0';
    if (json == NULL || len > SY_HF_MAX_CONFIG_BYTES) {
        fail(&c, "missing or larger than %u bytes", SY_HF_MAX_CONFIG_BYTES);
        return false;
    }
    sy_json_doc doc;
    if (!parse_document(&c, json, len, &doc)) return false;
    const sy_json *root = doc.root;
    sy_hf_generation_config g;
    generation_config_empty(&g);
    bool ok = parse_generation_root(&c, root, vocab_size, &g);
    sy_json_doc_free(&doc);
    if (ok) *out = g;
    return ok;
}

char *sy_hf_read_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t err_size) {
    parse_ctx c = {path, err, err_size};
    /* O_NONBLOCK: a FIFO in place of the file must not hang the open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        fail(&c, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fail(&c, "not a regular file");
        close(fd);
        return NULL;
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > max_bytes) {
        fail(&c, "%lld bytes is over the %zu-byte limit", (long long)sb.st_size, max_bytes);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (buf == NULL) {
        fail(&c, "out of memory");
        close(fd);
        return NULL;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            fail(&c, "read failed after %zu of %zu bytes", got, size);
            free(buf);
            close(fd);
            return NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *len = size;
    return buf;
}

static char *path_in(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p == NULL) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

bool sy_hf_config_load(const char *dir, sy_hf_config *out, sy_hf_generation_config *gen, char *err,
                       size_t err_size) {
    char *config_path = path_in(dir, "config.json");
    char *gen_path = path_in(dir, "generation_config.json");
    bool ok = false;
    char *text = NULL;
    size_t len = 0;
    if (config_path == NULL || gen_path == NULL) {
        snprintf(err, err_size, "%s: out of memory", dir);
        goto done;
    }
    text = sy_hf_read_file(config_path, SY_HF_MAX_CONFIG_BYTES, &len, err, err_size);
    if (text == NULL || !sy_hf_config_parse(text, len, config_path, out, err, err_size)) goto done;
    free(text);
    text = NULL;
    if (gen != NULL) {
        generation_config_empty(gen);
        struct stat sb;
        if (stat(gen_path, &sb) == 0) {
            text = sy_hf_read_file(gen_path, SY_HF_MAX_CONFIG_BYTES, &len, err, err_size);
            if (text == NULL ||
                !sy_hf_generation_config_parse(text, len, gen_path, out->vocab_size, gen, err, err_size))
                goto done;
        }
    }
    ok = true;
done:
    free(text);
    free(config_path);
    free(gen_path);
    return ok;
}
