/* The reference backend: the same decoder-only transformer as transformer.h, computed the plainest way, in double
 * precision, one position at a time, with its own double-precision KV. Slow (no threads, no SIMD, every weight row
 * widened on each use) and meant as an internal oracle: the engines offer it as `backend=reference` so tests can
 * compare the optimized core against it through the same plugin, on any checkpoint.
 *
 * It takes the config and weights sy_tf_create takes (the same checks apply: shapes, types, sizes) and reads the
 * weights with sy_dequantize_row, so it runs every weight type the core runs. Short-convolution architectures
 * (lfm2) are refused.
 *
 * Threading: as transformer.h (one caller at a time per model; sy_ref_memory any-thread).
 */
#ifndef SY_REFERENCE_FORWARD_H
#define SY_REFERENCE_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "transformer.h"

typedef struct sy_ref_model sy_ref_model;
typedef struct sy_ref_seq sy_ref_seq;

/* NULL + one line in err (naming the tensor) on failure. Weights are referenced and must outlive the model. */
sy_ref_model *sy_ref_create(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx, char *err,
                            size_t err_size);
void sy_ref_destroy(sy_ref_model *m);

sy_ref_seq *sy_ref_seq_create(sy_ref_model *m);
void sy_ref_seq_free(sy_ref_model *m, sy_ref_seq *s);
uint32_t sy_ref_seq_length(const sy_ref_seq *s);
sy_status sy_ref_seq_truncate(sy_ref_model *m, sy_ref_seq *s, uint32_t n);
sy_status sy_ref_seq_fork(sy_ref_model *m, const sy_ref_seq *src, uint32_t n, sy_ref_seq **out);

typedef struct sy_ref_item {
    sy_ref_seq *seq;
    const int32_t *tokens;
    uint32_t n_tokens;
    uint32_t n_logits; /* logits (rounded to float) for the last n_logits tokens */
    float *logits;
} sy_ref_item;

/* As sy_tf_decode: validated first, then run; on failure no sequence has changed. */
sy_status sy_ref_decode(sy_ref_model *m, const sy_ref_item *items, size_t n_items, sy_tf_cancel_fn cancel,
                        void *cancel_ctx, char *err, size_t err_size);

void sy_ref_memory(const sy_ref_model *m, sy_tf_memory_info *out);
/* The config it was built with; *n_ctx gets the most tokens a sequence may hold. */
const sy_tf_config *sy_ref_model_config(const sy_ref_model *m, uint32_t *n_ctx);

#endif
