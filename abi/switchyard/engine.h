/*
 * switchyard plugin ABI — engines: interface "sy.engine/1" and its optional extensions
 * "sy.engine.sampling/1", "sy.engine.state/1", "sy.engine.resources/1" and "sy.engine.embed/1".
 *
 * An engine loads a model file or directory and runs it: tokenizer, sequences with their KV state, and one
 * batched decode over several sequences at a time. Everything that is not model math (scheduling, sampling by
 * default, chat templates, HTTP) lives in the host.
 *
 * Threading contract for one loaded model (sy_model):
 *   - "serial" calls: decode, every seq_* call, the sampling, state and embed extensions. The host never runs two serial
 *     calls on the same model at once (it owns one engine loop per model). They may run concurrently with serial
 *     calls on *other* models. Inside a call the engine may use as many threads of its own as it likes.
 *   - "any-thread" calls: model_info, tokenize, token_to_bytes, token_flags, memory_usage, error_message. These
 *     read immutable data (or atomically updated counters) and may run on any thread, concurrently with each other
 *     and with serial calls.
 *   - unload runs only after every other call on that model has returned; no call on the model follows it.
 *   - probe and load may run on any thread, concurrently with calls on other models.
 *
 * Errors: every call that returns sy_status leaves, on failure, a message for error_message() on the calling
 * thread. Messages are one line and name what is wrong ("tensor blk.3.attn_q.weight: data extends past the end
 * of the file").
 */
#ifndef SWITCHYARD_ENGINE_H
#define SWITCHYARD_ENGINE_H

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SY_ENGINE_INTERFACE_ID "sy.engine/1"
#define SY_ENGINE_SAMPLING_INTERFACE_ID "sy.engine.sampling/1"
#define SY_ENGINE_STATE_INTERFACE_ID "sy.engine.state/1"
#define SY_ENGINE_RESOURCES_INTERFACE_ID "sy.engine.resources/1"
#define SY_ENGINE_DESCRIBE_INTERFACE_ID "sy.engine.describe/1"
#define SY_ENGINE_EMBED_INTERFACE_ID "sy.engine.embed/1"

typedef struct sy_model sy_model; /* a loaded model, owned by the plugin */
typedef struct sy_seq sy_seq;     /* one sequence (its tokens and KV), owned by the plugin */

/* Bits of sy_engine_api.token_flags(). */
enum {
    SY_TOKEN_NORMAL = 0,
    SY_TOKEN_CONTROL = 1u << 0,      /* special/control token: not rendered as text by default */
    SY_TOKEN_END_OF_GENERATION = 1u << 1, /* generation stops here (EOS, end-of-turn) */
    SY_TOKEN_BYTE = 1u << 2,         /* a raw byte token (SentencePiece byte fallback) */
    SY_TOKEN_UNUSED = 1u << 3,
    SY_TOKEN_INVALID = 1u << 4 /* (since 1.2) not a token of this model: the id is out of range */
};

/* Bits of sy_model_info.capabilities (since 1.2). */
enum {
    SY_CAP_EMBED = 1u << 0,           /* the model returns embeddings ("sy.engine.embed/1") */
    SY_CAP_DEVICE_SAMPLING = 1u << 1, /* decode_sample samples on the device ("sy.engine.sampling/1") */
    SY_CAP_ITEM_CANCEL = 1u << 2,     /* decode honours sy_decode_item.call and fills item_status */
    SY_CAP_RERANK = 1u << 3,          /* the model scores (query, document) pairs ("sy.engine.embed/1" score) */
    SY_CAP_NO_GENERATE = 1u << 4      /* no text generation: seq_create and decode refuse (an encoder, an
                                       * embedding model without a language-model head) */
};

/* How an embedding model turns its last hidden states into one vector (sy_model_info.pooling, since 1.2). */
typedef enum sy_pooling {
    SY_POOLING_NONE = 0, /* not an embedding model */
    SY_POOLING_MEAN = 1, /* the mean over every token of the input */
    SY_POOLING_CLS = 2,  /* the first token's state (BERT's [CLS]) */
    SY_POOLING_LAST = 3, /* the last token's state (decoder embedding models, e.g. Qwen3-Embedding) */
    SY_POOLING_RANK = 4  /* a classification head over the first token: one relevance score (rerankers) */
} sy_pooling;

/* Flags of sy_engine_api.tokenize(). */
enum {
    SY_TOKENIZE_ADD_SPECIAL = 1u << 0,   /* add the model's BOS (or prefix tokens) where it wants them */
    SY_TOKENIZE_PARSE_SPECIAL = 1u << 1  /* match special-token text ("<|im_start|>") inside the input */
};

/* Facts about a loaded model. Strings are owned by the model and valid until unload. */
typedef struct sy_model_info {
    uint32_t struct_size;
    const char *architecture;  /* "llama", "qwen2", "qwen3", "lfm2", ... */
    const char *name;          /* a display name, e.g. from the model's metadata; may be "" */
    const char *weight_dtype;  /* the dominant weight type: "f32", "bf16", "q4_k_m", ... */
    const char *fingerprint;   /* stable hex id over the weights' identity and config; equal for equal models */
    const char *chat_template; /* the model's own template text (Jinja) or NULL */
    uint32_t n_vocab;          /* rows of the logits */
    uint32_t n_ctx_train;      /* context the model was trained for */
    uint32_t n_ctx;            /* most tokens one sequence may hold as loaded */
    uint32_t n_layer;
    uint32_t n_embd;
    uint64_t n_params;
    int32_t bos_token;         /* -1 when absent */
    int32_t eos_token;         /* -1 when absent */
    int32_t pad_token;         /* -1 when absent */
    uint32_t add_bos;          /* non-zero when SY_TOKENIZE_ADD_SPECIAL prepends BOS */
    uint32_t max_sequences;    /* most sequences alive at once (0 = no limit of the engine's own) */
#if SY_ABI_TARGET_MINOR >= 2
    /* (since 1.2) What the host used to learn by failing. A 1.1 plugin leaves them out (the host then assumes
     * any rollback, any batch size, no capability). */
    uint32_t max_rollback;      /* most tokens seq_truncate can drop from a sequence's end; UINT32_MAX: any */
    uint32_t max_decode_tokens; /* most tokens of one decode call, all items together; 0: no limit */
    uint32_t capabilities;      /* SY_CAP_* */
    /* (since 1.2) The model's named chat templates besides chat_template, such as "tool_use": GGUF
     * tokenizer.chat_template.NAME keys, the entries of a tokenizer_config.json chat_template list (chat_template
     * then holds the "default" one). n_chat_templates names and texts in parallel, owned by the model, valid until
     * unload; 0 and NULL when there are none. A plugin built before these fields leaves them out (struct_size), and
     * the host sees no named templates. */
    uint32_t n_chat_templates;
    const char *const *chat_template_names;
    const char *const *chat_template_texts;
    /* Embedding models (SY_CAP_EMBED or SY_CAP_RERANK); 0 elsewhere. */
    uint32_t pooling;           /* sy_pooling */
    uint32_t n_embd_out;        /* floats of one embedding: the pooled vector's dimension (1 for RANK) */
    uint32_t embd_normalized;   /* non-zero when the model's vectors are L2-normalized (sentence-transformers'
                                 * Normalize module, Qwen3-Embedding) */
#endif
} sy_model_info;

/* Memory a model holds, for the host's budget. Byte counts; 0 where it does not apply. */
typedef struct sy_memory_usage {
    uint32_t struct_size;
    uint64_t mapped_bytes;   /* file-backed mappings (weights, disk-backed KV) */
    uint64_t resident_bytes; /* anonymous host memory: KV in RAM, buffers, scratch */
    uint64_t device_bytes;   /* accelerator memory */
    uint64_t kv_bytes;       /* of the above, the live KV of all sequences */
} sy_memory_usage;

/*
 * One sequence's part of a batched decode. The tokens are appended at the sequence's current end (positions
 * len .. len+n_tokens-1). Logits are wanted for the last n_logits of those tokens (0 <= n_logits <= n_tokens),
 * written row after row to `logits` (n_logits * n_vocab floats, owned by the host).
 */
typedef struct sy_decode_item {
    uint32_t struct_size;
    sy_seq *seq;
    const int32_t *tokens;
    uint32_t n_tokens;
    uint32_t n_logits;
    float *logits;
#if SY_ABI_TARGET_MINOR >= 2
    /* (since 1.2) This item's own cancellation (its client), NULL for none. An engine with SY_CAP_ITEM_CANCEL
     * leaves a cancelled item's sequence as it was, reports it in the batch's item_status and goes on with the
     * other items, so one client leaving does not cancel every other sequence's step. */
    const sy_host_call *call;
#endif
} sy_decode_item;

typedef struct sy_decode_batch {
    uint32_t struct_size;
    uint32_t n_items;        /* each sequence appears at most once */
    uint32_t item_size;      /* stride of items[] in bytes: sizeof(sy_decode_item) as the host compiled it */
    const sy_decode_item *items;
    const sy_host_call *call; /* for sy_host_api.is_cancelled; may be NULL */
#if SY_ABI_TARGET_MINOR >= 2
    /* (since 1.2) Host-owned, n_items entries, or NULL. Engines with SY_CAP_ITEM_CANCEL write each item's outcome:
     * SY_OK, or why that item alone was left out (SY_ERR_CANCELLED, SY_ERR_CONTEXT_FULL), its sequence unchanged;
     * decode then returns SY_OK for the batch. A batch-level failure still leaves every sequence unchanged. */
    sy_status *item_status;
#endif
} sy_decode_batch;

/* The i-th item of a batch, honouring the host's stride. */
static inline const sy_decode_item *sy_decode_batch_item(const sy_decode_batch *b, uint32_t i) {
    return (const sy_decode_item *)(const void *)((const char *)b->items + (size_t)i * b->item_size);
}

typedef struct sy_engine_api {
    uint32_t struct_size;

    /* The message of the last failed call on this thread; never NULL; valid until the thread's next call. */
    const char *(*error_message)(void);

    /* Can this plugin load `path`? SY_OK if so; SY_ERR_UNSUPPORTED (with a message saying why) if not.
     * Reads as little as it needs (a header). */
    sy_status (*probe)(const char *path);

    /* Load a model. Options are key=value strings; a plugin rejects bad values of keys it knows
     * (SY_ERR_INVALID_ARGUMENT, naming the key) and ignores keys it does not know (logging them at debug level),
     * since the host passes its general options to every engine. */
    sy_status (*load)(const char *path, const sy_option *options, size_t n_options, sy_model **out);
    void (*unload)(sy_model *model);

    /* Fill *out (the host sets out->struct_size first; the plugin writes only what fits). any-thread. */
    sy_status (*model_info)(const sy_model *model, sy_model_info *out);

    /* Text -> token ids. Writes at most `capacity` ids; *n_out is the full count. If capacity is too small,
     * returns SY_ERR_BUFFER_TOO_SMALL with *n_out set, and the host calls again. any-thread. */
    sy_status (*tokenize)(const sy_model *model, const char *text, size_t text_len, uint32_t flags,
                          int32_t *out, size_t capacity, size_t *n_out);

    /* The bytes a token stands for (may be a partial UTF-8 sequence: the host joins them). Control tokens give
     * their text ("<|im_end|>"). Same buffer protocol as tokenize. any-thread. */
    sy_status (*token_to_bytes)(const sy_model *model, int32_t token, char *out, size_t capacity,
                                size_t *n_out);

    /* SY_TOKEN_* bits of a token; for an id out of range 0 (1.1) or SY_TOKEN_INVALID (since 1.2). any-thread. */
    uint32_t (*token_flags)(const sy_model *model, int32_t token);

    /* Sequences. serial. A new sequence is empty. */
    sy_status (*seq_create)(sy_model *model, sy_seq **out);
    void (*seq_free)(sy_model *model, sy_seq *seq);
    /* Number of tokens the sequence holds (its next position). serial. */
    uint32_t (*seq_length)(const sy_model *model, const sy_seq *seq);
    /* Keep the first n_tokens, drop the rest (speculative rollback, prefix reuse). n_tokens > length is an
     * error. Engines with recurrent state must be able to roll back at least 16 tokens (kept history) and
     * return SY_ERR_UNSUPPORTED for deeper rollbacks they cannot do. serial. */
    sy_status (*seq_truncate)(sy_model *model, sy_seq *seq, uint32_t n_tokens);
    /* A new sequence holding a copy (or a shared, copy-on-write view) of the first n_tokens of src. serial. */
    sy_status (*seq_fork)(sy_model *model, const sy_seq *src, uint32_t n_tokens, sy_seq **out);

    /* Append each item's tokens to its sequence and return the logits rows asked for. On any failure no
     * sequence of the batch has changed. Returns SY_ERR_CONTEXT_FULL when a sequence would pass n_ctx,
     * SY_ERR_CANCELLED when the host cancelled the call. serial. */
    sy_status (*decode)(sy_model *model, const sy_decode_batch *batch);

#if SY_ABI_TARGET_MINOR >= 1
    /* (since 1.1) Memory the model holds now. any-thread. */
    sy_status (*memory_usage)(const sy_model *model, sy_memory_usage *out);
#endif
} sy_engine_api;

/* ---------------------------------------------------------------------------------------------------------
 * "sy.engine.sampling/1" (optional): sample on the engine's side, so a GPU engine need not copy logits rows to
 * the host. The host uses it for requests whose sampling fits these parameters and no logit processing of the
 * host (penalties, logprobs) is asked for.
 */
typedef struct sy_sampling_params {
    uint32_t struct_size;
    float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
    uint32_t top_k;    /* 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t *rng_state; /* host-owned per-sequence generator state, advanced by the call */
} sy_sampling_params;

typedef struct sy_engine_sampling_api {
    uint32_t struct_size;
    /* Like decode, but instead of logits each item gets one sampled token for its last position:
     * tokens_out[i] for item i, params[i] for item i (host-owned arrays of n_items; params[] is strided by
     * params[0].struct_size). Items must have n_logits == 1 and logits == NULL. Sampling is reproducible for a
     * given rng_state within one engine; it need not match the host's own sampler. serial. */
    sy_status (*decode_sample)(sy_model *model, const sy_decode_batch *batch, const sy_sampling_params *params,
                               int32_t *tokens_out);
} sy_engine_sampling_api;

/* ---------------------------------------------------------------------------------------------------------
 * "sy.engine.state/1" (optional): stream a sequence's state out and back in, in position-ordered chunks, so
 * that the host can write compressed snapshots without a full copy in memory and restore a prefix of them.
 *
 * A chunk covers positions [begin, end): the KV of those positions for every layer, followed by the recurrent
 * state (if the architecture has one) as it stands after position end-1. Chunk bytes are the engine's own
 * layout, described by sy_state_info so the host can compress them well; the host treats them as opaque.
 */
typedef struct sy_state_writer {
    uint32_t struct_size;
    void *user;
    /* Write len bytes; a non-SY_OK return aborts the save with that status. */
    sy_status (*write)(void *user, const void *data, size_t len);
} sy_state_writer;

typedef struct sy_state_reader {
    uint32_t struct_size;
    void *user;
    /* Read exactly len bytes; a short stream is SY_ERR_FORMAT. */
    sy_status (*read)(void *user, void *data, size_t len);
} sy_state_reader;

typedef struct sy_state_info {
    uint32_t struct_size;
    const char *layout;        /* identifies the chunk layout, e.g. "kv-f16-v1"; owned by the model */
    uint32_t element_size;     /* bytes per KV element (2 for F16/BF16): the host byte-shuffles by it */
    uint64_t kv_bytes_per_token;
    uint64_t recurrent_bytes;  /* bytes of recurrent state after each chunk (0 for pure attention) */
} sy_state_info;

typedef struct sy_engine_state_api {
    uint32_t struct_size;
    /* any-thread */
    sy_status (*state_info)(const sy_model *model, sy_state_info *out);
    /* Exact byte count of one chunk of n positions. any-thread. */
    uint64_t (*state_chunk_bytes)(const sy_model *model, uint32_t n_positions);
    /* Write the chunk [begin, end) of seq; end <= seq_length. An engine that holds its recurrent state only for
     * the sequence's current end returns SY_ERR_UNSUPPORTED for chunks with end < seq_length; the host then saves
     * such a sequence with chunk boundaries the engine accepts (at worst one chunk [0, seq_length)). serial. */
    sy_status (*state_save_chunk)(sy_model *model, const sy_seq *seq, uint32_t begin, uint32_t end,
                                  const sy_state_writer *writer);
    /* Append a chunk to seq, which must hold exactly `begin` tokens; `tokens` are the chunk's token ids
     * (end - begin of them). On failure seq is left with `begin` tokens. serial. */
    sy_status (*state_load_chunk)(sy_model *model, sy_seq *seq, uint32_t begin, uint32_t end,
                                  const int32_t *tokens, const sy_state_reader *reader);
#if SY_ABI_TARGET_MINOR >= 2
    /* (since 1.2) Whether this model can load chunks written with `layout` by version `writer_version` of this
     * plugin (both as sy_state_info.layout and the entry's version were at save time), for snapshots that an
     * older or newer build wrote. Without it the host accepts only the same layout from the same version.
     * any-thread. */
    int (*state_can_read)(const sy_model *model, const char *layout, const char *writer_version);
#endif
} sy_engine_state_api;

/* ---------------------------------------------------------------------------------------------------------
 * "sy.engine.resources/1" (since 1.2, optional): the memory a load will take, before loading, so the host's
 * memory budgets (max_memory, max_device_memory) choose what to unload without loading first.
 */
typedef struct sy_resource_estimate {
    uint32_t struct_size;
    uint64_t mapped_bytes;   /* file-backed mappings the model will touch (weights read in place) */
    uint64_t resident_bytes; /* anonymous host memory: converted weights, KV at its first size, buffers, scratch */
    uint64_t device_bytes;   /* accelerator memory */
} sy_resource_estimate;

typedef struct sy_engine_resources_api {
    uint32_t struct_size;
    /* The footprint of load(path, options) right after it returns (the same options mean the same context
     * size, threads, KV placement), within about 10%. Reads headers only. any-thread. */
    sy_status (*estimate)(const char *path, const sy_option *options, size_t n_options, sy_resource_estimate *out);
} sy_engine_resources_api;


/* ---------------------------------------------------------------------------------------------------------
 * "sy.engine.describe/1" (optional): a model's metadata without loading it, for listings (Ollama's /api/tags and
 * /api/show) that must not load or swap anything. Keys follow GGUF's names ("general.architecture",
 * "<arch>.context_length", "tokenizer.ggml.fim_pre_token_id", ...) whatever the format, so a Hugging Face
 * folder's config.json is reported under the same keys. Besides the file's own keys an engine reports, where it
 * can work them out: "general.parameter_count" (the weights' element count), "general.file_type" (llama.cpp's
 * ftype number) with "general.file_type_name" ("Q4_K_M"), and the FIM token ids
 * ("tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id") found by the token conventions of known code models
 * when the file does not name them. Arrays are reported by their element count only.
 */
enum {
    SY_META_STRING = 0, /* value: the string (not NUL-terminated; len bytes) */
    SY_META_INT = 1,    /* i */
    SY_META_FLOAT = 2,  /* f */
    SY_META_BOOL = 3,   /* i (0 or 1) */
    SY_META_ARRAY = 4   /* i: the element count */
};

typedef struct sy_metadata_value {
    uint32_t struct_size;
    uint32_t type; /* SY_META_* */
    const char *string;
    size_t len;
    int64_t i;
    double f;
} sy_metadata_value;

typedef struct sy_metadata_sink {
    uint32_t struct_size;
    void *user;
    /* One key and its value; both valid only during the call. A non-zero return stops the walk. */
    int (*put)(void *user, const char *key, const sy_metadata_value *value);
} sy_metadata_sink;

typedef struct sy_engine_describe_api {
    uint32_t struct_size;
    /* Report the metadata of the model at path, reading headers only (no weight is touched). The same checks as
     * load's on what it reads: a malformed file fails with SY_ERR_FORMAT and a message. any-thread. */
    sy_status (*describe)(const char *path, const sy_metadata_sink *sink);
} sy_engine_describe_api;
#if SY_ABI_TARGET_MINOR >= 2
/* ---------------------------------------------------------------------------------------------------------
 * "sy.engine.embed/1" (since 1.2, optional): embeddings and reranking. A model with SY_CAP_EMBED turns each input
 * (a whole token sequence, special tokens included as tokenize with SY_TOKENIZE_ADD_SPECIAL gives them) into one
 * pooled vector of sy_model_info.n_embd_out floats, pooled as sy_model_info.pooling says and L2-normalized when
 * embd_normalized is set: the vector the model's own library (sentence-transformers) returns. A model with
 * SY_CAP_RERANK gives one relevance score per input instead (the raw output of its classification head), each input
 * being a (query, document) pair as tokenize_pair builds it.
 *
 * The inputs of one call are independent (bidirectional attention never crosses them) and run together, so a
 * weight row is read once for the whole batch. No sequence or KV outlives the call. An input longer than
 * sy_model_info.n_ctx is refused (SY_ERR_CONTEXT_FULL): the host truncates first. serial (like decode: the host's
 * engine loop calls it).
 */
typedef struct sy_embed_input {
    uint32_t struct_size;
    const int32_t *tokens;      /* n_tokens ids, 1 <= n_tokens <= n_ctx */
    uint32_t n_tokens;
    const int32_t *token_types; /* segment ids (BERT's token_type_ids: 0 for the query, 1 for the document of a
                                 * pair), n_tokens of them; NULL: all 0 */
} sy_embed_input;

typedef struct sy_embed_batch {
    uint32_t struct_size;
    uint32_t n_inputs;
    uint32_t input_size;         /* stride of inputs[] in bytes: sizeof(sy_embed_input) as the host compiled it */
    const sy_embed_input *inputs;
    float *out;                  /* host-owned: n_inputs rows of n_embd_out floats (embed) or n_inputs floats (score) */
    const sy_host_call *call;    /* for sy_host_api.is_cancelled; may be NULL */
} sy_embed_batch;

/* The i-th input of a batch, honouring the host's stride. */
static inline const sy_embed_input *sy_embed_batch_input(const sy_embed_batch *b, uint32_t i) {
    return (const sy_embed_input *)(const void *)((const char *)b->inputs + (size_t)i * b->input_size);
}

typedef struct sy_engine_embed_api {
    uint32_t struct_size;
    /* One vector per input into batch->out (SY_CAP_EMBED models; SY_ERR_UNSUPPORTED otherwise). serial. */
    sy_status (*embed)(sy_model *model, const sy_embed_batch *batch);
    /* One relevance score per input (SY_CAP_RERANK models; SY_ERR_UNSUPPORTED otherwise). serial. */
    sy_status (*score)(sy_model *model, const sy_embed_batch *batch);
    /* The model's input for a pair of texts (BERT: [CLS] a [SEP] b [SEP], token types 0 then 1), written as
     * tokenize writes (capacity, *n_out, SY_ERR_BUFFER_TOO_SMALL); types gets the token types (capacity of them,
     * may be NULL). Special-token text inside a or b is matched as with SY_TOKENIZE_PARSE_SPECIAL. any-thread. */
    sy_status (*tokenize_pair)(const sy_model *model, const char *a, size_t a_len, const char *b, size_t b_len,
                               int32_t *tokens, int32_t *types, size_t capacity, size_t *n_out);
} sy_engine_embed_api;
#endif

#ifdef __cplusplus
}
#endif

#endif /* SWITCHYARD_ENGINE_H */
