/* Hugging Face config.json / generation_config.json for the decoder architectures switchyard runs on the CPU:
 * qwen2 (Qwen2ForCausalLM), qwen3 (Qwen3ForCausalLM), llama (LlamaForCausalLM) and lfm2 (Lfm2ForCausalLM).
 *
 * Every number is bounds-checked; a field whose value would change the math in a way switchyard does not
 * implement (a sliding window, an unknown rope scaling type, an activation other than silu, a quantization
 * config, an unknown architecture) is refused with one message naming the field. Fields that do not affect the
 * forward pass are ignored. Absent optional fields take the defaults of the transformers class of the
 * architecture, so switchyard and transformers read the same file the same way (e.g. qwen3's head_dim defaults to
 * 128 as in Qwen3Config; the others to hidden_size / num_attention_heads).
 *
 * Both the newer spelling (transformers 5: "rope_parameters", "dtype") and the older one ("rope_theta" +
 * "rope_scaling", "torch_dtype") are read.
 */
#ifndef SY_HF_CONFIG_H
#define SY_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SY_HF_MAX_LAYERS 512
#define SY_HF_MAX_EOS 16
#define SY_HF_NO_TOKEN (-1)
/* config.json and generation_config.json larger than this are refused (real ones are a few KB). */
#define SY_HF_MAX_CONFIG_BYTES (4u * 1024u * 1024u)

typedef enum sy_hf_arch {
    SY_HF_ARCH_QWEN2 = 1,
    SY_HF_ARCH_QWEN3,
    SY_HF_ARCH_LLAMA,
    SY_HF_ARCH_LFM2,
} sy_hf_arch;

typedef enum sy_hf_rope_type {
    SY_HF_ROPE_DEFAULT = 0, /* plain RoPE with rope_theta */
    SY_HF_ROPE_LINEAR,      /* positions divided by factor */
    SY_HF_ROPE_LLAMA3,      /* Llama 3.1 frequency-band rescaling */
    SY_HF_ROPE_YARN,
} sy_hf_rope_type;

typedef struct sy_hf_rope {
    sy_hf_rope_type type;
    double theta;
    double factor;                          /* linear, llama3, yarn */
    double low_freq_factor;                 /* llama3 */
    double high_freq_factor;                /* llama3 */
    uint32_t original_max_position_embeddings; /* llama3, yarn; 0 when absent */
    double beta_fast, beta_slow;            /* yarn (defaults 32, 1) */
    double attention_factor;                /* yarn; 0 when absent (the engine derives it from factor) */
} sy_hf_rope;

typedef enum sy_hf_layer_type {
    SY_HF_LAYER_ATTENTION = 0, /* full (global) attention */
    SY_HF_LAYER_CONV = 1,      /* lfm2 gated short convolution */
} sy_hf_layer_type;

typedef struct sy_hf_config {
    sy_hf_arch arch;
    char model_type[32];    /* "qwen2", ... */
    char architecture[64];  /* "Qwen2ForCausalLM", ... (empty when the file has no "architectures") */
    bool base_model;        /* "Qwen3Model" and the like: the network without its LM head (embedding models) */
    uint32_t hidden_size;
    uint32_t intermediate_size; /* as written; lfm2's effective width is lfm2_ff_dim */
    uint32_t num_hidden_layers;
    uint32_t num_attention_heads;
    uint32_t num_key_value_heads; /* divides num_attention_heads */
    uint32_t head_dim;
    uint32_t vocab_size;
    uint32_t max_position_embeddings;
    double rms_norm_eps; /* lfm2: norm_eps */
    sy_hf_rope rope;
    bool tie_word_embeddings;
    /* Biases as the architecture's transformers code creates them: qwen2 always has q/k/v biases and no o bias;
     * llama and qwen3 put attention_bias on q, k, v and o; llama's mlp_bias on gate/up/down. */
    bool qkv_bias;
    bool o_bias;
    bool mlp_bias;
    bool qk_norm; /* RMSNorm over each head of q and k (qwen3, lfm2) */
    /* Weight dtype from "dtype"/"torch_dtype" as a sy_dtype id (SY_DTYPE_F32/F16/BF16), or -1 when absent. */
    int32_t torch_dtype;
    int64_t bos_token_id; /* SY_HF_NO_TOKEN when absent or null */
    int64_t pad_token_id;
    uint32_t n_eos;
    int64_t eos_token_ids[SY_HF_MAX_EOS];
    /* lfm2 only */
    uint32_t conv_l_cache; /* conv_L_cache: kernel size of the short convolution */
    bool conv_bias;
    uint32_t lfm2_ff_dim;  /* intermediate width after block_auto_adjust_ff_dim / multiplier / multiple_of */
    uint8_t layer_types[SY_HF_MAX_LAYERS]; /* sy_hf_layer_type per layer (all ATTENTION except in lfm2) */
} sy_hf_config;

/* generation_config.json: what the model's authors suggest for sampling and stopping. has_* tell what was set. */
typedef struct sy_hf_generation_config {
    int64_t bos_token_id; /* SY_HF_NO_TOKEN when absent */
    int64_t pad_token_id;
    uint32_t n_eos;
    int64_t eos_token_ids[SY_HF_MAX_EOS];
    bool has_do_sample, do_sample;
    bool has_temperature;
    double temperature;
    bool has_top_p;
    double top_p;
    bool has_top_k;
    uint32_t top_k;
    bool has_repetition_penalty;
    double repetition_penalty;
    bool has_max_new_tokens;
    uint32_t max_new_tokens;
} sy_hf_generation_config;

/* Parse config.json bytes (need not be NUL-terminated). `source` names the file in messages. On failure returns
 * false and writes one line to err. */
bool sy_hf_config_parse(const char *json, size_t len, const char *source, sy_hf_config *out, char *err,
                        size_t err_size);
/* Parse generation_config.json bytes. Token ids are checked against vocab_size when it is non-zero. */
bool sy_hf_generation_config_parse(const char *json, size_t len, const char *source, uint32_t vocab_size,
                                   sy_hf_generation_config *out, char *err, size_t err_size);

/* Read and parse DIR/config.json and, when it exists, DIR/generation_config.json (gen may be NULL; when the file
 * is absent *gen is filled with "nothing set"). */
bool sy_hf_config_load(const char *dir, sy_hf_config *out, sy_hf_generation_config *gen, char *err,
                       size_t err_size);

/* Read a whole regular file of at most max_bytes into a new NUL-terminated buffer (caller frees); *len gets the
 * byte count. NULL with a message on failure. Used for config files and for the model fingerprint. */
char *sy_hf_read_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t err_size);

/* "qwen2", "qwen3", "llama", "lfm2"; "unknown" otherwise. */
const char *sy_hf_arch_name(sy_hf_arch arch);

#endif
