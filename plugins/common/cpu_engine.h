/* The engine glue the bundled CPU plugins share: everything of the engine ABI that does not depend on the file
 * format. A plugin reads its format into a vocabulary (sy_cpu_vocab_ops), an sy_tf_config and sy_tf_weights, and
 * calls sy_cpu_model_start; this layer then answers model_info, memory_usage, the tokenizer calls, sequences and
 * decode, over the transformer core (KV in RAM, or on disk with kv_cache_dir) or the reference backend
 * (backend=reference). The plugin supplies probe and load and lists the shared calls in its sy_engine_api with
 * SY_CPU_ENGINE_CALLS.
 *
 * Load options every CPU engine takes (sy_cpu_options_parse; bad values are refused naming the key, unknown keys
 * logged at debug level and ignored):
 *   threads=N          compute threads (default: the CPUs this process may use)
 *   ctx_size=N         most tokens one sequence may hold (default: the model's training context)
 *   backend=core|reference
 *   kv_cache_dir=A,B   keep the KV in F16 files in these directories (kv_cache.h), not in RAM
 *   kv_max_tokens=N    positions the disk cache holds, all sequences together (default: 4 x ctx_size)
 *   kv_buffer_mb=N     its resident F32 tile buffer (default 32)
 *   keep_kv_cache=1    leave its files behind on unload
 *
 * Errors: sy_cpu_fail sets the calling thread's message (error_message()); each plugin links its own copy of this
 * layer, so messages and the host pointer are per plugin.
 */
#ifndef SY_CPU_ENGINE_H
#define SY_CPU_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>
#include <xxhash.h>

#include "encoder.h"
#include "kv_cache.h"
#include "reference_forward.h"
#include "transformer.h"

/* ---- plugin-wide: host, errors, logging ---- */

void sy_cpu_engine_init(const sy_host_api *host, const char *plugin_name);
void sy_cpu_engine_deinit(void);

/* Sets this thread's error message and returns st. */
sy_status sy_cpu_fail(sy_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message: "<prefix>: <message>" (e.g. the model path); returns the last status. */
sy_status sy_cpu_fail_prefix(const char *prefix);
const char *sy_cpu_error_message(void);
/* The status of this thread's last sy_cpu_fail. */
sy_status sy_cpu_last_status(void);
void sy_cpu_log(sy_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- load options ---- */

typedef enum sy_cpu_backend {
    SY_CPU_BACKEND_CORE = 0,      /* transformer.h */
    SY_CPU_BACKEND_REFERENCE = 1, /* reference_forward.h */
} sy_cpu_backend;

typedef struct sy_cpu_options {
    uint32_t threads;
    uint32_t ctx_size;         /* 0: the model's training context */
    sy_cpu_backend backend;
    const char *kv_cache_dir;  /* NULL: KV in RAM; points into the caller's options */
    uint32_t kv_max_tokens;    /* 0: 4 x the context */
    uint32_t kv_buffer_mb;
    bool keep_kv_cache;
    /* cache_type_k, cache_type_v (llama.cpp's names and values: f16, the default, q8_0, f32); *_set: given (a
     * decoder embedding model's default is f32: its KV lives for one call) */
    sy_dtype cache_type_k, cache_type_v;
    bool cache_type_k_set, cache_type_v_set;
} sy_cpu_options;

/* The values cache_type_k/v take, as the option schema and its messages list them. */
#define SY_CPU_CACHE_TYPES "f16,q8_0,f32"
/* "f16", "q8_0", "f32" for those types, NULL for any other. */
const char *sy_cpu_cache_type_name(sy_dtype type);

#define SY_CPU_DEFAULT_KV_BUFFER_MB 32u

/* SY_OK, or SY_ERR_INVALID_ARGUMENT with the message naming the key. */
sy_status sy_cpu_options_parse(const sy_option *options, size_t n_options, sy_cpu_options *out);

/* "sy.plugin.options/1" of every CPU engine: exactly the keys sy_cpu_options_parse reads, with its ranges, so the
 * host refuses a misspelt key or a bad value before a load. A plugin returns it from get_interface for
 * SY_PLUGIN_OPTIONS_INTERFACE_ID. */
extern const sy_plugin_options_api sy_cpu_options_api;

/* "sy.plugin.runtime/1" of every CPU engine: "cpu kernels: " and sy_kernels_describe of the tier its models run on
 * (sy_kernels_active: the CPU's best, or SY_CPU_TIER's), with why AMX is not used where it is not. */
extern const sy_plugin_runtime_api sy_cpu_runtime_api;

/* ---- the vocabulary a plugin provides (same protocols as the engine ABI's calls) ---- */

typedef struct sy_cpu_vocab_ops {
    /* On failure: a status and one line in err. */
    sy_status (*tokenize)(const void *vocab, const char *text, size_t len, uint32_t flags, int32_t *out,
                          size_t capacity, size_t *n_out, char *err, size_t err_size);
    /* SY_ERR_INVALID_ARGUMENT for an id out of range; SY_ERR_BUFFER_TOO_SMALL with *n_out set. */
    sy_status (*token_bytes)(const void *vocab, int32_t id, char *out, size_t capacity, size_t *n_out);
    uint32_t (*token_flags)(const void *vocab, int32_t id);
    uint64_t (*memory)(const void *vocab);
    void (*free)(void *vocab);
    /* Optional: the model's input for a pair of texts with token types ("sy.engine.embed/1" tokenize_pair). */
    sy_status (*tokenize_pair)(const void *vocab, const char *a, size_t a_len, const char *b, size_t b_len,
                               int32_t *out, int32_t *types, size_t capacity, size_t *n_out, char *err,
                               size_t err_size);
} sy_cpu_vocab_ops;

/* ---- the model ---- */

struct sy_model {
    /* facts for model_info; the strings are owned (malloc'd), NULL where absent */
    char *architecture, *name, *chat_template;
    /* named chat templates ("tool_use", ...), n_chat_templates malloc'd pairs */
    char **chat_template_names, **chat_template_texts;
    uint32_t n_chat_templates;
    char weight_dtype[16];
    char fingerprint[33];
    uint32_t n_ctx_train;
    uint64_t n_params;
    int32_t bos_token, eos_token, pad_token;
    bool add_bos;
    uint64_t weights_mapped_bytes;

    const sy_cpu_vocab_ops *vocab_ops;
    void *vocab;

    /* the plugin's own data (file handles, weight tables), freed by format_free at unload after the backend */
    void *format;
    void (*format_free)(void *format);

    /* embedding models (cpu_embed.c): pooling NONE for generative ones */
    sy_pooling pooling;
    bool embd_normalize;
    bool no_generate;   /* no language-model head: decode and sequences are refused */
    uint32_t embd_ctx;  /* the longest input (sentence-transformers' max_seq_length); 0: n_ctx */
    sy_enc_model *enc;  /* BERT-family encoders: set by sy_cpu_model_start_encoder, instead of tf and ref */

    /* set by sy_cpu_model_start */
    char state_layout[48]; /* "sy-cpu-kv-f16-v1", ...: the KV cache types name the snapshot layout */
    sy_tf_model *tf;
    sy_ref_model *ref;
    sy_kv_cache *kv_cache;
};

struct sy_seq {
    sy_tf_seq *tf;
    sy_ref_seq *ref;
};

/* A zeroed model with the token ids at -1; NULL (message set) when out of memory. */
sy_model *sy_cpu_model_new(void);
/* Builds the backend (and the disk KV cache when asked) over weights that must outlive the model. n_ctx 0: the
 * model's n_ctx_train (or 4096 when that is 0). Message without the path on failure. */
sy_status sy_cpu_model_start(sy_model *m, const sy_tf_config *cfg, const sy_tf_weights *w,
                             const sy_cpu_options *opt);
/* For an encoder (encoder.h; m->pooling and m->embd_normalize set by the caller): builds it over weights that must
 * outlive the model. */
sy_status sy_cpu_model_start_encoder(sy_model *m, const sy_enc_config *cfg, const sy_enc_weights *w,
                                     const sy_cpu_options *opt);
/* "sy.engine.resources/1" for a plugin that has bound cfg and w from its files' headers (the weights' data
 * pointers into its mappings): what sy_cpu_model_start with opt, the plugin's mapped_bytes and its vocabulary of
 * vocab_bytes (as its vocab_ops->memory will count it) will hold right after the load. n_ctx_train as in
 * sy_model.n_ctx_train. */
sy_status sy_cpu_estimate(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx_train,
                          const sy_cpu_options *opt, uint64_t mapped_bytes, uint64_t vocab_bytes,
                          sy_resource_estimate *out);
/* Finishes a fingerprint: the XXH3-128 digest of h as 32 hex digits in m->fingerprint ("unknown" when h is NULL,
 * i.e. its allocation failed); frees h. */
void sy_cpu_model_set_fingerprint(sy_model *m, XXH3_state_t *h);
/* Stats of the disk KV cache; false when the model keeps its KV in RAM. */
bool sy_cpu_model_kv_cache_stats(const sy_model *m, sy_kv_cache_stats *out);

/* ---- the shared calls of sy_engine_api ---- */

void sy_cpu_unload(sy_model *m);
sy_status sy_cpu_model_info(const sy_model *m, sy_model_info *out);
sy_status sy_cpu_memory_usage(const sy_model *m, sy_memory_usage *out);
sy_status sy_cpu_tokenize(const sy_model *m, const char *text, size_t text_len, uint32_t flags, int32_t *out,
                          size_t capacity, size_t *n_out);
sy_status sy_cpu_token_to_bytes(const sy_model *m, int32_t token, char *out, size_t capacity, size_t *n_out);
uint32_t sy_cpu_token_flags(const sy_model *m, int32_t token);
sy_status sy_cpu_seq_create(sy_model *m, sy_seq **out);
void sy_cpu_seq_free(sy_model *m, sy_seq *s);
uint32_t sy_cpu_seq_length(const sy_model *m, const sy_seq *s);
sy_status sy_cpu_seq_truncate(sy_model *m, sy_seq *s, uint32_t n_tokens);
sy_status sy_cpu_seq_fork(sy_model *m, const sy_seq *src, uint32_t n_tokens, sy_seq **out);
sy_status sy_cpu_decode(sy_model *m, const sy_decode_batch *batch);

/* "sy.engine.state/1" over the transformer core (the reference backend answers SY_ERR_UNSUPPORTED). A chunk
 * [begin, end) is, per position, K then V (kv_dim each) of every attention layer in layer order, in the KV store's
 * own precision (layout "sy-cpu-kv-f32-v1" for KV in RAM, "sy-cpu-kv-f16-v1" for the disk cache, so a restore is
 * exact either way), followed for lfm2 by the conv state after end tokens as F32 (layout "...-conv-f32-v1"):
 * per conv layer, the inputs of the L-1 positions before end. A chunk whose end has left the kept conv history
 * (SY_LFM2_ROLLBACK tokens) is SY_ERR_UNSUPPORTED. A plugin returns sy_cpu_state_api from get_interface for
 * SY_ENGINE_STATE_INTERFACE_ID. */
extern const sy_engine_state_api sy_cpu_state_api;

/* Whether the host cancelled the call behind `call` (a sy_host_call *; NULL: no). */
int sy_cpu_host_cancelled(void *call);
/* model_info of an encoder model (cpu_embed.c). */
sy_status sy_cpu_encoder_info(const sy_model *m, sy_model_info *out);

/* "sy.engine.embed/1" over the encoder core and, for decoder embedding models, the transformer core's last hidden
 * states (cpu_embed.c). A plugin returns it from get_interface for SY_ENGINE_EMBED_INTERFACE_ID. */
extern const sy_engine_embed_api sy_cpu_embed_api;

/* The vocabulary of a WordPiece tokenizer (tokenizer_wordpiece.h) for sy_cpu_vocab_ops: special tokens are CONTROL.
 * sy_cpu_wordpiece_load reads DIR/tokenizer.json; NULL with one line in err. */
extern const sy_cpu_vocab_ops sy_cpu_wordpiece_vocab_ops;
void *sy_cpu_wordpiece_load(const char *dir, char *err, size_t err_size);

/* Everything of sy_engine_api but struct_size, probe and load. */
#define SY_CPU_ENGINE_CALLS                                                                                    \
    .error_message = sy_cpu_error_message, .unload = sy_cpu_unload, .model_info = sy_cpu_model_info,             \
    .tokenize = sy_cpu_tokenize, .token_to_bytes = sy_cpu_token_to_bytes, .token_flags = sy_cpu_token_flags,     \
    .seq_create = sy_cpu_seq_create, .seq_free = sy_cpu_seq_free, .seq_length = sy_cpu_seq_length,               \
    .seq_truncate = sy_cpu_seq_truncate, .seq_fork = sy_cpu_seq_fork, .decode = sy_cpu_decode,                   \
    .memory_usage = sy_cpu_memory_usage

#endif
