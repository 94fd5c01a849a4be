/* The LFM2 model on one GPU: weights, KV cache and conv state in device memory taken once at load, and the batched
 * forward pass. lfm2_cuda.c puts the engine ABI around it (tokenizer, options, messages).
 *
 * Memory (all cudaMalloc'd at create, nothing allocated per decode):
 *   weights     BF16 matrices (q|k|v and w1|w3 concatenated so each is one GEMM), F32 norms / conv taps / biases
 *   KV cache    a pool of blocks of LC_KV_BLOCK positions for every attention layer (K and V); sequences hold
 *               blocks through a page table; fork shares blocks (reference counts) and a decode copies a shared
 *               block before writing into it (copy-on-write)
 *   conv state  per sequence slot and conv layer, the last SY_LFM2_ROLLBACK + L - 1 conv inputs, committed and
 *               work copies (see plugins/common/transformer_lfm2.h: the same scheme as the CPU core)
 *   scratch     activations of one chunk of up to max_batch_tokens rows, logits of up to LC_LOGIT_ROWS rows, the
 *               split-K partials of the decode attention, the cuBLASLt workspace
 *
 * A decode lays the items' tokens out as rows, cuts them into chunks of max_batch_tokens and runs each chunk
 * through every layer; logits rows go to the caller's buffers or through the on-device argmax. A pure decode step
 * (each item one token) is replayed as a CUDA graph per row count once it has run eagerly.
 *
 * Threading: like the CPU core, one caller at a time (the engine ABI's serial calls); lc_engine_memory from any
 * thread.
 */
#ifndef LFM2_CUDA_ENGINE_H
#define LFM2_CUDA_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/abi.h>

#include "hf_config.h"
#include "safetensors.h"

#define LC_LOGIT_ROWS 64   /* logits rows per pass through the output matrix */
#define LC_SPLIT_ROWS 64   /* chunks of at most this many rows split long attention over keys (split-K) */
#define LC_ROLLBACK 16     /* tokens seq_truncate can always drop (= SY_LFM2_ROLLBACK) */

typedef struct lc_options {
    int device;                /* CUDA device ordinal */
    uint32_t max_sequences;    /* sequence slots */
    uint32_t n_ctx;            /* most tokens one sequence may hold */
    uint32_t max_batch_tokens; /* rows per forward chunk */
    uint64_t kv_cache_bytes;   /* 0: max_sequences * n_ctx positions, capped by free device memory */
    uint64_t synthetic_seed;   /* used when no checkpoint is given */
    bool cuda_graphs;          /* replay pure decode steps as CUDA graphs (one per row count and output mode) */
} lc_options;

typedef struct lc_engine lc_engine;

/* Checks that a device is there first: SY_ERR_NO_DEVICE ("no CUDA device ...") when there is none or no driver.
 * Weights come from st (F32/F16/BF16 tensors, converted to BF16), or, when st is NULL, from seeded uniform values of
 * the config's shapes (benchmarks). On failure *out stays NULL and err has one line. */
sy_status lc_engine_create(const sy_hf_config *cfg, const sy_safetensors *st, const lc_options *opt,
                           lc_engine **out, char *err, size_t err_size);
void lc_engine_destroy(lc_engine *e);

/* The effective options (defaults resolved), and the device's name. */
const lc_options *lc_engine_options(const lc_engine *e);
const char *lc_engine_device_name(const lc_engine *e);
/* Whether decode steps still use CUDA graphs (false when turned off, or after a capture failed). */
bool lc_engine_graphs_active(const lc_engine *e);

typedef struct lc_memory {
    uint64_t device_bytes; /* everything allocated on the device */
    uint64_t kv_bytes;     /* KV blocks in use plus the conv state of live sequences */
    uint64_t weight_bytes;
    uint64_t host_bytes;   /* pinned buffers and host tables */
} lc_memory;
void lc_engine_memory(const lc_engine *e, lc_memory *out);

/* What lc_engine_create(cfg, ..., opt) will take, without allocating: device_bytes as lc_memory's right after it
 * (weights, state and scratch, the KV blocks that fit the device's free memory now) and host_bytes. Needs the
 * device (SY_ERR_NO_DEVICE as create) to learn its free memory. */
typedef struct lc_estimate {
    uint64_t device_bytes;
    uint64_t host_bytes;
} lc_estimate;
sy_status lc_engine_estimate(const sy_hf_config *cfg, const lc_options *opt, lc_estimate *out, char *err,
                             size_t err_size);

/* Sequences are slots 0 .. max_sequences-1. */
sy_status lc_seq_create(lc_engine *e, int32_t *slot, char *err, size_t err_size);
void lc_seq_free(lc_engine *e, int32_t slot);
uint32_t lc_seq_length(const lc_engine *e, int32_t slot);
/* SY_ERR_INVALID_ARGUMENT when n > length, SY_ERR_UNSUPPORTED when the conv state cannot roll back that far. */
sy_status lc_seq_truncate(lc_engine *e, int32_t slot, uint32_t n, char *err, size_t err_size);
sy_status lc_seq_fork(lc_engine *e, int32_t src, uint32_t n, int32_t *dst, char *err, size_t err_size);

typedef struct lc_item {
    int32_t slot;
    const int32_t *tokens;
    uint32_t n_tokens;
    uint32_t n_logits;
    float *logits;       /* n_logits rows (host memory), or NULL when tokens_out is used */
} lc_item;

typedef int (*lc_cancel_fn)(void *ctx);

/* Appends each item's tokens; logits rows to items[i].logits, or (tokens_out not NULL, every item n_logits == 1)
 * the argmax of each item's last row to tokens_out[i]. On failure no sequence has changed. */
sy_status lc_decode(lc_engine *e, const lc_item *items, size_t n_items, int32_t *tokens_out, lc_cancel_fn cancel,
                    void *cancel_ctx, char *err, size_t err_size);

/* ---- state: the chunks of the engine ABI's "sy.engine.state/1" ----
 * A chunk [begin, end) is, for each position in order, K then V of every attention layer in layer order (n_kv * hd
 * BF16 each, kv heads in order), followed by the conv state after position end - 1: for each conv layer in layer
 * order the conv inputs of positions end - (L-1) .. end - 1 (n_embd F32 each, zeros before position 0) — the CPU
 * core's layout with BF16 KV. Bytes pass through a pinned staging buffer of bounded size (allocated on the first
 * state call), a group of KV blocks at a time, never a whole sequence. */
#define LC_STATE_LAYOUT "lfm2-cuda-kv-bf16-conv-f32-v1"
#define LC_STATE_ELEMENT_SIZE 2 /* BF16 KV */

typedef struct lc_state_shape {
    uint64_t kv_bytes_per_token; /* 2 * n_attention_layers * n_kv * hd * 2 */
    uint64_t recurrent_bytes;    /* n_conv_layers * (L-1) * n_embd * 4 */
} lc_state_shape;
void lc_state_shape_of(const lc_engine *e, lc_state_shape *out); /* any thread: immutable facts */

/* The host's stream callbacks (sy_state_writer.write / sy_state_reader.read); a failure status is passed back. */
typedef sy_status (*lc_state_write_fn)(void *ctx, const void *data, size_t len);
typedef sy_status (*lc_state_read_fn)(void *ctx, void *data, size_t len);

/* Writes the chunk [begin, end) of a sequence (end <= its length). SY_ERR_INVALID_ARGUMENT for a chunk outside the
 * sequence; SY_ERR_UNSUPPORTED when the conv state after end - 1 is no longer held (the sequence keeps conv inputs
 * of only its last LC_ROLLBACK + L - 1 positions, or fewer after a restore or a rollback). */
sy_status lc_state_save(lc_engine *e, int32_t slot, uint32_t begin, uint32_t end, lc_state_write_fn write_fn,
                        void *ctx, char *err, size_t err_size);
/* Appends the chunk [begin, end) to a sequence holding exactly begin tokens, reading exactly its bytes. The
 * sequence's conv state is then known only at end (it cannot roll back, except to 0). On failure the sequence
 * still holds its begin tokens (a CUDA failure while the conv state is written can leave it unusable: free it). */
sy_status lc_state_load(lc_engine *e, int32_t slot, uint32_t begin, uint32_t end, lc_state_read_fn read_fn, void *ctx,
                        char *err, size_t err_size);

#endif
