/* The CPU transformer core: a decoder-only transformer (Llama family) over weights that stay where the caller
 * mapped them, in their storage type. Read transformer.c top to bottom for the forward pass.
 *
 * Architectures are rows of a table (sy_tf_arch), not forks of the code: what differs between llama, qwen2 and
 * qwen3 is the RoPE pairing, biases on the q/k/v projections, and an RMSNorm over each q/k head. lfm2 (qwen3's
 * attention) adds a second layer kind, the gated short convolution, whose per-sequence rolling state lives in
 * transformer_lfm2.{h,c}; seq_truncate can roll it back SY_LFM2_ROLLBACK tokens (SY_ERR_UNSUPPORTED beyond).
 *
 * Shapes (ggml convention, as GGUF stores them): a matrix of `rows` x `cols` has `rows` rows of `cols`
 * elements; a projection y = W x takes x of `cols` and gives y of `rows`.
 *
 * Sequences hold their tokens' K and V in a KV store: by default in RAM, one buffer per layer, grown as they fill up
 * to n_ctx, in the cache types of sy_tf_set_kv_types (F32 unless set; F16, or Q8_0 as ggml lays it out);
 * sy_tf_set_kv_store installs another (kv_cache.h keeps them in F16 files on disk).
 * sy_tf_decode runs any number of sequences at once; all tokens of a call pass through each matrix together, so a
 * weight row is read once per chunk of up to SY_TF_MAX_BATCH tokens.
 *
 * Threading: one model may be used by one caller at a time for create/free/truncate/fork/decode (the engine ABI's
 * "serial" calls); sy_tf_memory() may be called from any thread at any time. Inside decode the model uses its
 * own worker threads.
 */
#ifndef SY_TRANSFORMER_H
#define SY_TRANSFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/abi.h>

#include "sy_dtype.h"
#include "sy_kernels.h"
#include "transformer_weights.h"

/* The architecture of that name, or NULL when this core does not run it. */
const sy_tf_arch *sy_tf_arch_find(const char *name);

typedef struct sy_tf_model sy_tf_model;
typedef struct sy_tf_seq sy_tf_seq;

/* Checks every shape and type against the config and builds the model. Weights are referenced, not copied
 * (vectors excepted); they must outlive the model. n_ctx: the most tokens one sequence may hold. n_threads >= 1.
 * NULL + one line in err on failure (naming the tensor). */
sy_tf_model *sy_tf_create(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx, uint32_t n_threads,
                          char *err, size_t err_size);
void sy_tf_destroy(sy_tf_model *m);
/* Writes the model's scratch once, so that its pages are resident from the load on (sy_tf_create leaves them
 * untouched: a model built only to be measured or checked costs no more than its address space). */
void sy_tf_prefault(sy_tf_model *m);
/* The checks of sy_tf_create alone (for other backends over the same weights: reference_forward.h). */
bool sy_tf_check(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx, char *err, size_t err_size);

const sy_tf_config *sy_tf_model_config(const sy_tf_model *m);
uint32_t sy_tf_n_ctx(const sy_tf_model *m);

/* Sequences. NULL on allocation failure. */
sy_tf_seq *sy_tf_seq_create(sy_tf_model *m);
void sy_tf_seq_free(sy_tf_model *m, sy_tf_seq *s);
uint32_t sy_tf_seq_length(const sy_tf_seq *s);
/* Keep the first n tokens; SY_ERR_INVALID_ARGUMENT when n > length, SY_ERR_UNSUPPORTED when a recurrent state
 * (lfm2) cannot go back that far (nothing changes then). */
sy_status sy_tf_seq_truncate(sy_tf_model *m, sy_tf_seq *s, uint32_t n);
/* A new sequence with a copy of the first n tokens of src (SY_ERR_UNSUPPORTED as for truncate). */
sy_status sy_tf_seq_fork(sy_tf_model *m, const sy_tf_seq *src, uint32_t n, sy_tf_seq **out);

/* One sequence's part of a decode: tokens appended at its end; logits (n_logits rows of n_vocab) for the last
 * n_logits of them. With `hidden` set, those rows' final-norm hidden states (n_logits rows of n_embd: what the
 * output matrix would take) go there, and logits may be NULL (decoder embedding models, cpu_embed.c). */
typedef struct sy_tf_batch_item {
    sy_tf_seq *seq;
    const int32_t *tokens;
    uint32_t n_tokens;
    uint32_t n_logits;
    float *logits;
    float *hidden;
} sy_tf_batch_item;

/* Returns nonzero when the caller wants the decode to stop (checked between layers). */
typedef int (*sy_tf_cancel_fn)(void *ctx);

/* Runs the items (each sequence at most once). On failure no sequence has changed: SY_ERR_INVALID_ARGUMENT
 * (bad token id, duplicate sequence, n_logits > n_tokens), SY_ERR_CONTEXT_FULL, SY_ERR_OUT_OF_MEMORY,
 * SY_ERR_CANCELLED; err says which. */
sy_status sy_tf_decode(sy_tf_model *m, const sy_tf_batch_item *items, size_t n_items, sy_tf_cancel_fn cancel,
                       void *cancel_ctx, char *err, size_t err_size);
/* The checks sy_tf_decode makes on item `index` before anything runs, for other backends of the same contract:
 * a sequence (seq_mark NULL: none) that is not twice in the batch (its mark is set to `mark`), buffers present,
 * n_logits <= n_tokens, seq_len + n_tokens <= n_ctx, token ids below n_vocab. */
sy_status sy_tf_check_item(size_t index, uint64_t *seq_mark, uint64_t mark, uint32_t seq_len, const int32_t *tokens,
                           uint32_t n_tokens, uint32_t n_logits, const float *logits, uint32_t n_ctx,
                           uint32_t n_vocab, char *err, size_t err_size);

/* Bytes held now: the live KV of all sequences; anonymous memory allocated (KV in RAM included); file-backed
 * mappings of the KV store (disk KV). any-thread. */
typedef struct sy_tf_memory_info {
    uint64_t kv_bytes;
    uint64_t resident_bytes;
    uint64_t mapped_bytes;
} sy_tf_memory_info;
void sy_tf_memory(const sy_tf_model *m, sy_tf_memory_info *out);

/* ---- KV stores ----
 * Where sequences keep the keys and values of their positions. `store` is the store's own context; `kv` is one
 * sequence's part of it. Each position of each layer is written once by decode (in the serial part, in position
 * order) and then read by the attention from the pool's threads: `read` must be safe against concurrent reads;
 * every other call is serial. Positions at or past a sequence's committed length hold nothing a reader may rely
 * on (decode rewrites them), so truncation is just a shorter length. */
typedef struct sy_tf_kv_view {
    const float *k, *v; /* K and V of position p0 + i at k + i * stride, v + i * stride */
    size_t stride;      /* in floats */
    uint32_t n;         /* positions in the view: 1 .. the count asked for */
} sy_tf_kv_view;

typedef struct sy_tf_kv_store_ops {
    void *(*seq_create)(void *store); /* NULL when out of memory */
    void (*seq_free)(void *store, void *kv);
    /* Make positions [keep, need) writable; positions [0, keep) keep their content. need <= n_ctx. false with
     * one line in err on failure, with [0, keep) intact. */
    bool (*reserve)(void *store, void *kv, uint32_t keep, uint32_t need, char *err, size_t err_size);
    /* Store one position's K and V (kv_dim floats each, after RoPE) in a reserved position. */
    void (*write)(void *store, void *kv, uint32_t layer, uint32_t pos, const float *k, const float *v);
    /* Optional: called once per layer of a chunk, before its attention reads, with the sequences of the chunk and
     * how many positions of each the reads will cover (a chance to stage them). */
    void (*prepare)(void *store, uint32_t layer, void *const *kvs, const uint32_t *n_pos, size_t n_kvs);
    /* View of positions [p0, p0 + n) of a layer, columns [col, col + n_cols) of K and V. thread_index is the
     * pool's (0 .. n_threads-1) so a store can use per-thread scratch; the view stays valid until that thread's
     * next read. */
    void (*read)(void *store, const void *kv, uint32_t layer, uint32_t p0, uint32_t n, uint32_t col,
                 uint32_t n_cols, size_t thread_index, sy_tf_kv_view *out);
    /* Make dst (empty) hold src's first n positions. false with err on failure. */
    bool (*copy_prefix)(void *store, void *dst, const void *src, uint32_t n, char *err, size_t err_size);
    /* Optional: the sequence now holds n positions (n <= its length before); the store may release the rest. */
    void (*truncate)(void *store, void *kv, uint32_t n);
    /* Adds the store's bytes to *out. any-thread. */
    void (*memory)(const void *store, sy_tf_memory_info *out);
} sy_tf_kv_store_ops;

/* Installs a KV store; only while the model has no sequences (SY_ERR_INVALID_ARGUMENT otherwise). The store
 * must serve n_layer layers of kv_dim = n_head_kv * head_dim floats per position and up to sy_tf_n_ctx positions
 * per sequence, with reads from up to sy_tf_n_threads threads; it must outlive the model (the caller frees it
 * after sy_tf_destroy). NULL ops restore the RAM store. */
sy_status sy_tf_set_kv_store(sy_tf_model *m, const sy_tf_kv_store_ops *ops, void *store);
uint32_t sy_tf_n_threads(const sy_tf_model *m);

/* The KV cache types (llama.cpp's cache_type_k/v): whether this core stores that type (F32, F16, Q8_0). */
bool sy_tf_kv_type_supported(sy_dtype type);
/* The types the RAM store keeps K and V in (sy_tf_create starts at F32/F32); only while the model has no
 * sequences. Q8_0 needs kv_dim to be a multiple of 32 (blocks of 32 along a position's row, one f16 scale each).
 * Reads widen to F32 per tile, writes convert (F16: round to nearest even; Q8_0: ggml's reference quantizer).
 * Another store (sy_tf_set_kv_store) keeps its own precision; the types still say how sy_tf_seq_get_kv_rows and
 * set_kv_rows lay out its rows. SY_ERR_UNSUPPORTED / INVALID_ARGUMENT / OUT_OF_MEMORY with err. */
sy_status sy_tf_set_kv_types(sy_tf_model *m, sy_dtype type_k, sy_dtype type_v, char *err, size_t err_size);
void sy_tf_kv_types(const sy_tf_model *m, sy_dtype *type_k, sy_dtype *type_v);
/* What sy_tf_set_kv_types allocates for those types: the widened reads' scratch of n_threads (for estimates). */
uint64_t sy_tf_kv_read_scratch_bytes(size_t kv_dim, sy_dtype type_k, sy_dtype type_v, uint32_t n_threads);
/* Bytes of one position's K (kind 0) or V (kind 1) row of one layer in its cache type. */
size_t sy_tf_kv_row_bytes(const sy_tf_model *m, int kind);

/* ---- snapshots (the engine's state extension); all serial ----
 * A sequence's state is, per position, K and V (kv_dim floats each) of every attention layer, plus for lfm2 the
 * conv state at its end (transformer_lfm2.h). Loading appends: begin_append reserves n more positions, set_kv
 * fills each of them for every attention layer, end_append makes them count (with the conv state at the new end,
 * NULL for architectures without one). */
size_t sy_tf_kv_dim(const sy_tf_model *m);
bool sy_tf_layer_has_kv(const sy_tf_model *m, uint32_t layer);
/* Floats of the conv state (0 without short_conv layers). */
size_t sy_tf_conv_state_floats(const sy_tf_model *m);
/* K and V of position pos (< length) of an attention layer. */
void sy_tf_seq_get_kv(sy_tf_model *m, const sy_tf_seq *s, uint32_t layer, uint32_t pos, float *k, float *v);
/* The conv state after the first `end` tokens; false when the kept history no longer has it. */
bool sy_tf_seq_get_conv_state(const sy_tf_model *m, const sy_tf_seq *s, uint32_t end, float *out);
sy_status sy_tf_seq_begin_append(sy_tf_model *m, sy_tf_seq *s, uint32_t n, char *err, size_t err_size);
void sy_tf_seq_set_kv(sy_tf_model *m, sy_tf_seq *s, uint32_t layer, uint32_t pos, const float *k, const float *v);
/* The same in the cache types (sy_tf_kv_row_bytes each): the RAM store's bytes as they are, so a snapshot of a
 * Q8_0 or F16 cache restores exactly what was saved. */
void sy_tf_seq_get_kv_rows(sy_tf_model *m, const sy_tf_seq *s, uint32_t layer, uint32_t pos, void *k, void *v);
void sy_tf_seq_set_kv_rows(sy_tf_model *m, sy_tf_seq *s, uint32_t layer, uint32_t pos, const void *k, const void *v);
void sy_tf_seq_end_append(sy_tf_model *m, sy_tf_seq *s, uint32_t n, const float *conv_state);

#endif
