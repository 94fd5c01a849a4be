/* CUDA kernels of the lfm2-cuda plugin, callable from C. Every launcher enqueues its work on `stream` and returns
 * the launch status (cudaGetLastError), so a caller checks every one; none synchronizes or allocates.
 *
 * Conventions: activations between kernels are F32 (the residual stream, GEMM outputs) or BF16 (GEMM inputs);
 * matrices are row-major [rows][cols]; `lc_bf16` is the raw 16 bits of a bfloat16. A chunk of N rows is the tokens
 * of one forward pass; row r is position pos[r] of the sequence in slot slot[r].
 *
 * KV cache (paged): one pool per attention layer and K/V, [n_blocks][n_kv_heads][LC_KV_BLOCK][head_dim] BF16, so a
 * kv head's positions within a block are contiguous; page_table[slot * max_blocks + p / LC_KV_BLOCK] is the block
 * holding position p of the sequence in that slot.
 *
 * Short-conv state: for each slot and conv layer, a ring of `ring` F32 rows of n_embd (the conv inputs u = B ⊙ x of
 * the last `ring` positions, position p in row p % ring); `committed` holds the sequence's state, `work` the inputs
 * of the decode in progress (see plugins/common/transformer_lfm2.h for why there are two).
 */
#ifndef SY_LFM2_KERNELS_H
#define SY_LFM2_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LC_KV_BLOCK 16       /* positions per KV block */
#define LC_MAX_HEAD_DIM 256  /* head_dim: even, at most this */
#define LC_MAX_CONV_KERNEL 8 /* short convolution width, at most this */
#define LC_ATTN_QUERIES 32   /* (row, head) queries one attention task handles: n_rows * group <= this */
#define LC_ATTN_KEYS 32      /* keys per tile (and split sizes are multiples of it) */

typedef uint16_t lc_bf16;

/* Device arrays describing a chunk's rows. first/last: positions of the first and last row of the row's sequence
 * in this chunk; len: the sequence's committed length before this decode (rows sit at pos >= len). */
typedef struct lc_rows {
    int32_t n;
    const int32_t *pos, *slot, *first, *last, *len;
} lc_rows;

/* Where the conv layers' rings live: slot s, conv layer c at base + s * slot_stride + c * ring * n_embd. */
typedef struct lc_conv_state {
    float *committed, *work;
    size_t slot_stride; /* floats */
    int32_t ring, n_embd;
} lc_conv_state;

/* The paged KV cache of one attention layer. */
typedef struct lc_kv_layer {
    lc_bf16 *k, *v;
    const int32_t *page_table; /* device [slots][max_blocks] */
    int32_t max_blocks, n_kv_heads, head_dim;
} lc_kv_layer;

/* One unit of attention work: queries of rows row0 .. row0+n_rows-1 (positions pos0 .. pos0+n_rows-1 of the
 * sequence in `slot`) times the `group` query heads of kv head blockIdx.y, over keys [k_begin, k_end) (clipped to
 * each query's position). split < 0: write the result; else write partial softmax state number `split`. */
typedef struct lc_attn_task {
    int32_t row0, n_rows, slot, pos0, k_begin, k_end, split, pad;
} lc_attn_task;

/* Set kernel attributes once per device (the attention kernel's shared memory). */
cudaError_t lc_kernels_init(void);

/* x[r][:] = table[tokens[r]][:] as F32 (ids were checked by the caller). */
cudaError_t lc_embed(cudaStream_t stream, const lc_bf16 *table, int32_t n_embd, const int32_t *tokens,
                     int32_t n_rows, float *x);

/* x += delta (+ bias per column) when delta is not NULL, then out = rmsnorm(x) * weight as BF16. bias may be NULL.
 * One block per row. */
cudaError_t lc_add_rmsnorm(cudaStream_t stream, float *x, const float *delta, const float *bias,
                           const float *weight, int32_t n_rows, int32_t n, float eps, lc_bf16 *out);

/* Short conv, step 1: u[r] = (B + bB) ⊙ (X + bX) from bcx[r] = [B | C | X] (3n F32); in_bias [3n] or NULL. */
cudaError_t lc_conv_input(cudaStream_t stream, const float *bcx, const float *in_bias, int32_t n_rows, int32_t n,
                          float *u);
/* Step 2: y[r] = (C + bC) ⊙ (conv_bias + Σ_j kernel[c][j] · u(pos - L + 1 + j)) as BF16, the inputs u taken from
 * this chunk's rows, else the work ring (an earlier chunk of this decode, pos >= len), else the committed ring,
 * zero before position 0. kernel: [n][L] F32; conv_bias [n] or NULL. conv: the conv layer's index. */
cudaError_t lc_conv_apply(cudaStream_t stream, lc_rows rows, const float *u, const float *bcx,
                          const float *in_bias, const float *kernel, const float *conv_bias, int32_t L,
                          lc_conv_state st, int32_t conv, lc_bf16 *y);
/* Step 3: the chunk's inputs into the work ring (the last `ring` rows of each sequence in the chunk). */
cudaError_t lc_conv_store(cudaStream_t stream, lc_rows rows, const float *u, lc_conv_state st, int32_t conv);
/* After a successful decode: positions [len, len + n_new) of each listed slot, the last `ring` of them, from the
 * work ring to the committed one, in every conv layer. Device arrays of n_items. */
cudaError_t lc_conv_commit(cudaStream_t stream, const int32_t *slots, const int32_t *len, const int32_t *n_new,
                           int32_t n_items, int32_t n_conv, lc_conv_state st);

/* From qkv[r] = [q heads | k heads | v heads] (F32): q and k RMS-normalized per head (q_norm, k_norm [hd]) and
 * rotated (NEOX pairing, angle pos * inv_freq[i], i < hd/2), q written F32 to q_out [r][n_head][hd], k and v to the
 * KV cache at the row's position (BF16). */
cudaError_t lc_qk_norm_rope_kv(cudaStream_t stream, lc_rows rows, const float *qkv, int32_t n_head,
                               const float *q_norm, const float *k_norm, float eps, const float *inv_freq,
                               float *q_out, lc_kv_layer kv);

/* Causal attention for a list of tasks (device array), grid n_tasks x n_kv_heads. q: [rows][n_head][hd] F32;
 * out: [rows][n_head * hd] BF16; partial: [rows][n_head][max_splits][hd + 2] F32 (max, sum, acc[hd]) for split
 * tasks. scale: usually 1/sqrt(hd). */
cudaError_t lc_attention(cudaStream_t stream, const lc_attn_task *tasks, int32_t n_tasks, int32_t group,
                         float scale, const float *q, lc_kv_layer kv, lc_bf16 *out, float *partial,
                         int32_t max_splits);
/* Merges split partials: for each row r with splits[r] > 0, out[r] = combination of its splits[r] partials. */
cudaError_t lc_attention_combine(cudaStream_t stream, const int32_t *splits, int32_t n_rows, int32_t n_head,
                                 int32_t hd, int32_t max_splits, const float *partial, lc_bf16 *out);

/* out[r][i] = silu(gu[r][i]) * gu[r][ff + i] as BF16. */
cudaError_t lc_swiglu(cudaStream_t stream, const float *gu, int32_t n_rows, int32_t ff, lc_bf16 *out);

/* dst[i][:] = src[rows[i]][:] (n BF16 per row). */
cudaError_t lc_gather_rows(cudaStream_t stream, const lc_bf16 *src, const int32_t *rows, int32_t n_sel, int32_t n,
                           lc_bf16 *dst);

/* out[r] = argmax of logits[r][0 .. n_vocab) (the lowest id on ties; NaN never wins). */
cudaError_t lc_argmax(cudaStream_t stream, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out);

/* For each i < n: block dst[i] := block src[i] in every pool (K and V of every attention layer). pools[] holds
 * n_pools device pointers (a device array); block_elems = n_kv_heads * LC_KV_BLOCK * head_dim. */
cudaError_t lc_copy_kv_blocks(cudaStream_t stream, lc_bf16 *const *pools, int32_t n_pools, size_t block_elems,
                              const int32_t *src, const int32_t *dst, int32_t n);

/* Seeded uniform values in [lo, hi): element i from a hash of (seed, i), so equal seeds give equal tensors. */
cudaError_t lc_fill_uniform_bf16(cudaStream_t stream, lc_bf16 *dst, size_t n, uint64_t seed, float lo, float hi);
cudaError_t lc_fill_uniform_f32(cudaStream_t stream, float *dst, size_t n, uint64_t seed, float lo, float hi);

#ifdef __cplusplus
}
#endif

#endif
