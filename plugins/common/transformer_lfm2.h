/* lfm2's gated short convolution: the second layer kind of the CPU transformer core (transformer.h), used by the
 * architecture rows with short_conv set. transformer.c calls these; nothing else does.
 *
 * A short-conv layer, per token (n = n_embd, L = conv_kernel):
 *
 *   B, C, x = split3(in_proj · xn)              xn = rmsnorm(residual), in_proj: 3n x n
 *   u_t     = B ⊙ x                             the convolution's input at this position
 *   y_t     = C ⊙ (Σ_j k[:, j] ⊙ u_{t-L+1+j})   depthwise causal conv over the last L inputs (zeros before 0)
 *   residual += out_proj · y_t
 *
 * so a sequence's state is its last L-1 inputs u per conv layer. To let seq_truncate roll back, each sequence keeps
 * the last SY_LFM2_ROLLBACK + L - 1 inputs of every conv layer in a ring indexed by position: after dropping up to
 * SY_LFM2_ROLLBACK tokens, the L-1 inputs before the new end are still there. Deeper rollbacks are refused
 * (SY_ERR_UNSUPPORTED from the core), except to length 0, which needs no history.
 *
 * Decode writes new inputs to a second ring (`work`), reading older positions from the committed one, and copies
 * them over only when the whole decode has succeeded (sy_lfm2_seq_commit), so a failed or cancelled decode leaves
 * the sequence's state as it was.
 */
#ifndef SY_TRANSFORMER_LFM2_H
#define SY_TRANSFORMER_LFM2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transformer_weights.h"

#define SY_LFM2_ROLLBACK 16   /* tokens seq_truncate can always drop (the engine ABI asks for at least 16) */
#define SY_LFM2_MAX_KERNEL 64 /* widest convolution accepted (real models: 3) */

typedef struct sy_lfm2 sy_lfm2;         /* a model's conv layers: weights (vectors as F32 copies) and scratch */
typedef struct sy_lfm2_seq sy_lfm2_seq; /* one sequence's rolling inputs of every conv layer */

/* The core's threaded matrix product: y[n][w.rows] = x[n][w.cols] · wᵀ; false on a kernel failure. */
typedef bool (*sy_lfm2_matmul_fn)(void *ctx, const sy_tf_matrix *w, const float *x, size_t n, float *y);

/* Checks the conv layers' weights against the config (conv_kernel in [2, SY_LFM2_MAX_KERNEL]) and copies their
 * vectors. layers[] has cfg->n_layer entries; those of kind SY_TF_LAYER_SHORT_CONV are taken. NULL + one line in
 * err on failure (naming the tensor). max_rows: the most rows one sy_lfm2_conv_block call gets. */
sy_lfm2 *sy_lfm2_create(const sy_tf_config *cfg, const sy_tf_layer_weights *layers, size_t max_rows, char *err,
                        size_t err_size);
void sy_lfm2_destroy(sy_lfm2 *lf);
/* Bytes the model part holds (vectors, scratch), and bytes one sequence's state holds. */
uint64_t sy_lfm2_bytes(const sy_lfm2 *lf);
uint64_t sy_lfm2_seq_bytes(const sy_lfm2 *lf);

/* An empty state (length 0). NULL when out of memory. */
sy_lfm2_seq *sy_lfm2_seq_create(const sy_lfm2 *lf);
void sy_lfm2_seq_free(sy_lfm2_seq *s);
/* Whether a sequence of length len can be cut to n <= len. */
bool sy_lfm2_seq_can_truncate(const sy_lfm2 *lf, const sy_lfm2_seq *s, uint32_t len, uint32_t n);
/* Cuts it (the caller checked can_truncate). */
void sy_lfm2_seq_truncate(const sy_lfm2 *lf, sy_lfm2_seq *s, uint32_t len, uint32_t n);
/* dst (fresh) := src cut from src_len to n (the caller checked can_truncate). */
void sy_lfm2_seq_copy(const sy_lfm2 *lf, sy_lfm2_seq *dst, const sy_lfm2_seq *src, uint32_t src_len, uint32_t n);
/* The decode that appended n_new tokens to a sequence of length len succeeded: make its inputs the state. */
void sy_lfm2_seq_commit(const sy_lfm2 *lf, sy_lfm2_seq *s, uint32_t len, uint32_t n_new);

/* Snapshots: a sequence's conv state at length `end` is, per conv layer (in layer order), the inputs of positions
 * [end - (L-1), end) (zeros before position 0): state_floats() floats. state_get gives it for a sequence of length
 * len when those positions are still in its history (false otherwise); state_set makes it the state of a sequence
 * now of length end. */
size_t sy_lfm2_state_floats(const sy_lfm2 *lf);
bool sy_lfm2_seq_state_get(const sy_lfm2 *lf, const sy_lfm2_seq *s, uint32_t len, uint32_t end, float *out);
void sy_lfm2_seq_state_set(const sy_lfm2 *lf, sy_lfm2_seq *s, uint32_t end, const float *in);

/* Row r of the next chunk is position pos of the sequence s, whose committed length is len (pos >= len). Rows of
 * one sequence come in position order, consecutively, as the core lays them out. */
void sy_lfm2_bind_row(sy_lfm2 *lf, size_t r, sy_lfm2_seq *s, uint32_t pos, uint32_t len);

/* x[N][n_embd] += conv_layer(rmsnorm(x) * norm) for the core's layer `layer` (a short-conv layer), rows bound with
 * sy_lfm2_bind_row. false when a matrix product failed. */
bool sy_lfm2_conv_block(sy_lfm2 *lf, uint32_t layer, float *x, size_t N, const float *norm, float eps,
                        sy_lfm2_matmul_fn matmul, void *matmul_ctx);

#endif
